#!/usr/bin/env bash
# The test command: installs dependencies, builds everything and runs every
# test that does not need a GPU (GPU tests report themselves as skipped).
#   scripts/test.sh               gcc build in build/, all unit + integration tests
#   scripts/test.sh --sanitize    clang-14 ASan+UBSan build in build-asan/, unit tests,
#                                 plus every libFuzzer target: training_job_fuzzer for
#                                 $FUZZ_SECONDS (60) s, the others $FUZZ_SECONDS_OTHERS (20) s
#   scripts/test.sh --tsan        clang-14 ThreadSanitizer build in build-tsan/, unit and
#                                 integration tests; any race fails it (reports are
#                                 printed at the end, suppressions in
#                                 scripts/tsan-suppressions.txt say why each is there)
#   scripts/test.sh --images      the container images (scripts/build-images.sh, archives
#                                 in out/images/), then their smoke tests (label image).
#                                 The Dockerfile's build stage compiles the binaries: run
#                                 it when deploy/docker, scripts/packages or the image
#                                 scripts change.
#   scripts/test.sh --images-from-build
#                                 the same with the binaries of build/ (the default
#                                 mode's Release build, brought up to date), so no
#                                 compile and no build-stage packages; .ci/run runs it
#                                 after the default mode.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=default
images_from_build=false
case "${1:-}" in
  --sanitize) mode=sanitize ;;
  --images) mode=images ;;
  --images-from-build) mode=images; images_from_build=true ;;
  --tsan) mode=tsan ;;
esac
jobs=$(nproc)

if [[ $mode == images ]]; then
  scripts/install-deps.sh --images
  # The smoke tests run the images with podman, beside the build tree's fake
  # API server; the same containers.conf as the build (scripts/containers-env.sh).
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUBETRAIN_CUDA=AUTO \
    -DKUBETRAIN_IMAGE_TESTS=ON
  if $images_from_build; then
    # With CUDA the images take kubetrain-runtime-cpu (see build-images.sh).
    runtime_targets=kubetrain-runtime
    if grep -q '^kubetrain-runtime-cpu:' <(ninja -C build -t targets all); then
      runtime_targets="kubetrain-runtime kubetrain-runtime-cpu"
    fi
    cmake --build build -j "$jobs" --target kubetrain-operator $runtime_targets image_smoke_test
    scripts/build-images.sh --out out/images --binaries build
  else
    scripts/build-images.sh --out out/images --jobs "$jobs"
    cmake --build build -j "$jobs" --target image_smoke_test
  fi
  containers_dir=$(mktemp -d)
  trap 'rm -rf "$containers_dir"' EXIT
  source scripts/containers-env.sh
  kubetrain_containers_env "$containers_dir"
  KUBETRAIN_IMAGE_ARCHIVES=$PWD/out/images \
    ctest --test-dir build --output-on-failure -L image --timeout 900
  exit 0
fi

scripts/install-deps.sh

# The chart tests run helm (scripts/install-helm.sh says where it comes from).
# Without it (no network to fetch it) they report themselves skipped, and
# this says so first.
if [[ $mode == default ]]; then
  [[ $(id -u) -eq 0 ]] || export PATH="$HOME/.local/bin:$PATH"
  scripts/install-helm.sh ||
    echo "test.sh: WARNING: helm could not be installed; the Helm chart tests will be SKIPPED" >&2
fi

if [[ $mode == default ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUBETRAIN_CUDA=AUTO
  cmake --build build -j "$jobs"
  ctest --test-dir build --output-on-failure -j "$jobs" -LE 'bench|image' --timeout 600
  exit 0
fi

# The sanitizer builds link with lld: GNU ld spends minutes on their test
# binaries, each linking most of the tree with instrumentation. They are unity
# builds: each target's files compile in batches of eight, so the headers they
# share (gRPC, protobuf, abseil, GoogleTest) are parsed once a batch instead of
# once a file, and .ci/run has time for both. The default mode compiles every
# library file on its own, so each still has to include what it uses (its test
# targets are unity builds, as everywhere); the files that cannot share a batch
# are listed in cmake/UnityBuild.cmake.
clang_build=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld
             -DCMAKE_UNITY_BUILD=ON)

if [[ $mode == tsan ]]; then
  # -O1 and line tables only: the integration tests train models, which at
  # -O0 under ThreadSanitizer take too long; full debug info only slows the build.
  # The tests' own files at -O0 (cmake/KubetrainHelpers.cmake says why).
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DKUBETRAIN_CUDA=OFF -DKUBETRAIN_TSAN=ON -DKUBETRAIN_BENCH=OFF \
    "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" "-DCMAKE_C_FLAGS_DEBUG=-O1 -gline-tables-only" \
    -DKUBETRAIN_TEST_CXX_FLAGS=-O0 "${clang_build[@]}"
  cmake --build build-tsan -j "$jobs" --target unit_tests integration_tests kubetrain kubetrain-runtime
  # Every instrumented process (the tests and the binaries they start) writes
  # its report to a file: a child's stderr may not reach the test's output.
  reports=$PWD/build-tsan/tsan-reports
  rm -rf "$reports" && mkdir -p "$reports"
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$reports/race:suppressions=$PWD/scripts/tsan-suppressions.txt"
  status=0
  # Left out, because under ThreadSanitizer they take longer than the rest
  # together (the default mode runs them all):
  # - the Fashion-MNIST accuracy runs: an epoch of a CNN on each kernel path,
  #   ten minutes here; the engine's unit tests run the same kernels and
  #   executor in seconds;
  # - the parameter-server runs to 0.85 accuracy (3600 and 900 steps of four
  #   processes, over eight minutes each); the killed-PS test runs the same
  #   asynchronous parameter server until it is killed (the synchronous
  #   one's barrier is checked only in stage one);
  # - the blas.* copies of the distributed training tests, which repeat them
  #   with the other CPU kernels over the same transports and threads;
  # - the lost-chief runs (five Fashion-MNIST jobs of four processes on each
  #   backend); the reconciler's unit tests and the ps's hold the rejoin and
  #   the ps's wait;
  # - of the all-reduce runs (two to three minutes each here), the one that
  #   compares the curve with a single process (a numeric check: the
  #   overlapped run takes the same threads and more) and the killed worker's
  #   restart (the killed-ps run takes the same error path);
  # - the UI's escaping check, which trains a local job only to print its values;
  # - the elastic PyTorch run: torchrun's processes, not instrumented, are most
  #   of its minute and more, and the controller's threads do there what
  #   they do in the other PyTorch runs.
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L 'unit|integration' \
    -E '^(FashionMnistTest\.|SyncAndAsync/ParameterServerTrainingTest\.|blas\.|LostChief(OnKubernetes)?Test\.|DistributedTrainingTest\.(ThreeAllReduceWorkersFollowTheSingleProcessCurve|KilledWorkerGivesRetryableExitAndTheRestartResumes)$|UiBrowserTest\.LocalJobValuesAreTextNeverMarkup$|PyTorchLocalTest\.AnElasticJobTrainsOnWhenAWorkerIsKilledAndEndsSucceeded$)' \
    --timeout 900 || status=$?
  if compgen -G "$reports/race*" >/dev/null; then
    cat "$reports"/race*
    echo "test.sh --tsan: ThreadSanitizer reported the above"
    exit 1
  fi
  exit "$status"
fi

# -O0: it compiles in half the time of -O1, and the unit tests stay fast. Line
# tables are all a sanitizer's report needs (file and line of every frame).
CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DKUBETRAIN_CUDA=OFF -DKUBETRAIN_SANITIZE=ON -DKUBETRAIN_FUZZ=ON -DKUBETRAIN_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -O0" "${clang_build[@]}"
# Only what this mode runs: the unit tests, the fuzzers and the binaries the
# unit tests start. UBSan's vptr check is off in this build (see CMakeLists.txt).
cmake --build build-asan -j "$jobs" --target unit_tests fuzzers kubetrain kubetrain-runtime
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Leaks inside cpprestsdk's own code are left out (the file says why).
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan-suppressions.txt
ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit --timeout 600

# The TrainingJob parser (every user file goes through it) gets a full minute;
# the other parsers a shorter run each. Each run is bounded three ways: a
# per-input time limit (a hang is a finding), an RSS limit (so is runaway
# memory), and a wall-clock kill, because after an out-of-memory finding the
# sanitizer's heap report can take longer than the whole CI run. A fuzzer keeps
# one core busy, so they run $jobs at a time, each for its whole time; each
# prints its result when it ends.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:malloc_context_size=10
run_fuzzer() {
  local fuzzer=$1 name seconds work src_corpus status=0
  name=$(basename "$fuzzer")
  seconds=${FUZZ_SECONDS_OTHERS:-20}
  [[ $name == training_job_fuzzer ]] && seconds=${FUZZ_SECONDS:-60}
  work=$(mktemp -d)
  # Seed each fuzzer with the corpus folder next to its source, when there is one.
  src_corpus=$(grep -rl --include=CMakeLists.txt "NAME $name" . 2>/dev/null | head -n1 | xargs -r dirname)
  if [[ -n "$src_corpus" && -d "$src_corpus/fuzz/corpus/$name" ]]; then
    cp -r "$src_corpus/fuzz/corpus/$name/." "$work/"
  elif [[ -n "$src_corpus" && -d "$src_corpus/fuzz/corpus" ]]; then
    cp -r "$src_corpus/fuzz/corpus/." "$work/"
  fi
  timeout -s KILL $((seconds + 120)) "$fuzzer" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 -artifact_prefix="$work/finding-" \
    "$work" >"$work/log" 2>&1 || status=$?
  {
    echo "fuzz: $name for ${seconds}s"
    if [[ $status -ne 0 ]]; then
      tail -n 80 "$work/log"
      for finding in "$work"/finding-*; do
        [[ -f $finding ]] && { echo "input that failed ($finding), base64:"; base64 -w0 "$finding"; echo; }
      done
      echo "fuzz: $name failed (exit $status)"
    else
      tail -n 12 "$work/log"
    fi
  } >"$work/result" 2>&1
  # Printed whole when it ends, not line by line beside the other running fuzzer.
  cat "$work/result"
  [[ $status -eq 0 ]] && rm -rf "$work"
  return "$status"
}
export -f run_fuzzer
export FUZZ_SECONDS FUZZ_SECONDS_OTHERS
fuzzers=$(find build-asan -type f -name '*_fuzzer' -perm -u+x | sort)
if ! xargs -r -P "$jobs" -n 1 bash -c 'run_fuzzer "$1"' run_fuzzer <<<"$fuzzers"; then
  echo "fuzz: a fuzzer failed (above)"
  exit 1
fi
