#!/usr/bin/env bash
# The GPU device checks of the trainer runtime, in one run (under 10 minutes
# on one H200, build included):
#   1. op by op, every CUDA kernel against the CPU kernel, with the stated
#      tolerances, plus the optimizers, copies, allocator, label errors and a
#      single-rank NCCL all-reduce (ctest -L gpu: kubetrain_runtime_cuda_gpu_test);
#   2. MLP and CNN training throughput at batch 128 and 1024 beside the time
#      of the same GEMM shapes in plain cuBLAS (FP32, then TF32 allowed);
#   3. Fashion-MNIST MLP test accuracy after 1 epoch, GPU beside CPU.
# Usage: bench/gpu/run.sh   (BUILD=dir to reuse a build, SKIP_BUILD=1 to use it
# as it is; OUT=dir to keep the log). Exit status: 0 all checks ran and the
# tests passed, 1 a failure, 2 no GPU visible (device checks not run).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu-device}
JOBS=${JOBS:-$(nproc)}
LOG=${OUT:-/tmp}/gpu_checks.log
exec > >(tee "$LOG") 2>&1
start=$(date +%s)
stage() { echo; echo "=== $* ($(( $(date +%s) - start )) s)"; }

stage "device"
nvidia-smi -L || echo "nvidia-smi found no GPU"

if [[ -z "${SKIP_BUILD:-}" ]]; then
stage "configure and build ($JOBS jobs)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUBETRAIN_CUDA=ON -DKUBETRAIN_BENCH=ON \
  -DKUBETRAIN_ONLY_DIRS="trainer-runtime/data;trainer-runtime/engine;trainer-runtime/summary;trainer-runtime/cuda;bench/gpu" \
  > "$BUILD.configure.log" 2>&1 || { tail -n 30 "$BUILD.configure.log"; exit 1; }
timeout 300 ninja -C "$BUILD" -j"$JOBS" kubetrain_runtime_cuda_test kubetrain_runtime_cuda_gpu_test gpu_bench
fi

stage "1. op-by-op GPU vs CPU, optimizers, NCCL all-reduce (ctest -L gpu)"
ctest --test-dir "$BUILD" -L 'gpu|unit' -R 'Cuda|Nccl|InProcessIdChannel' --output-on-failure --timeout 300 \
  | tee "$BUILD.ctest.log" || true
if nvidia-smi -L >/dev/null 2>&1 && grep -q "Skipped" "$BUILD.ctest.log" \
   && grep -q "CudaDeviceTest" <(grep "Skipped" "$BUILD.ctest.log"); then
  echo "ERROR: a GPU is present but GPU tests skipped"; exit 1
fi
grep -q "100% tests passed" "$BUILD.ctest.log" || { echo "ERROR: GPU tests failed"; ctest_failed=1; }

if ! "$BUILD/bench/gpu/gpu_bench" --mode=none; then
  echo "no CUDA device visible: the device checks (2, 3) were not run; the gpu tests above were skipped"
  exit 2
fi

stage "2. throughput (FP32)"
timeout 120 "$BUILD/bench/gpu/gpu_bench" --mode=throughput --steps=200
stage "2b. throughput (TF32 allowed)"
timeout 120 "$BUILD/bench/gpu/gpu_bench" --mode=throughput --steps=200 --tf32

stage "3. Fashion-MNIST MLP accuracy, GPU vs CPU"
timeout 180 "$BUILD/bench/gpu/gpu_bench" --mode=fmnist

stage "done"
exit ${ctest_failed:-0}
