#!/usr/bin/env bash
# Training throughput of the two built-in models on Fashion-MNIST, batch
# 128, float32, side by side in one run:
#   mlp  784-256-128-10, SGD lr 0.1: kubetrain (oneDNN and BLAS kernels),
#        PyTorch, numpy
#   cnn  conv32-pool-conv64-pool-dense128-dropout-dense10, Adam lr 0.001:
#        kubetrain (oneDNN and BLAS kernels), PyTorch
# at 1 and 2 threads, with GFLOP/s and the fraction of this machine's
# measured FP32 FMA peak.
#
#   bench/train_throughput/run.sh [BUILD_DIR]
#
# Environment: REPEATS (3), MLP_STEPS (1000), CNN_STEPS (60), MODELS
# ("mlp cnn"), DATA (the training images).
#
# Every configuration runs REPEATS times, interleaved (one of each, then
# again), and the best run counts: the machine may be shared, and the best
# run is the one least disturbed; the median is printed beside it. The
# ratios are also printed per round (each side's best thread count within
# that round, whose runs were minutes apart), with their median and range:
# the spread a loaded machine leaves on the comparison. PyTorch
# gets its best configuration at 2 threads (2 threads, 2 with
# OMP_WAIT_POLICY=PASSIVE, or 1 thread), as DESIGN.md asks, and so does
# kubetrain's oneDNN path (whose pool is OpenMP too); the targets are met
# "at the better thread count", so the last line compares each side's best. Samples per CPU-second at 1 thread are printed too: other load on a
# shared machine distorts them far less than wall-clock figures (at 2
# threads, spinning pool threads make CPU time meaningless).
set -euo pipefail
BUILD_DIR=${1:-build}
REPEATS=${REPEATS:-3}
MLP_STEPS=${MLP_STEPS:-1000}
CNN_STEPS=${CNN_STEPS:-60}
MODELS=${MODELS:-mlp cnn}
HERE=$(cd "$(dirname "$0")" && pwd)
BENCH="$BUILD_DIR/bench/train_throughput/train_throughput_bench"
PY=/usr/bin/python3
DATA=${DATA:-/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz}
[[ -x "$BENCH" ]] || { echo "build train_throughput_bench first (ninja -C $BUILD_DIR train_throughput_bench)"; exit 2; }

RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
# record MODEL PEER THREADS < a line with samples_per_sec=... samples_per_cpu_sec=...
# (the round is the sixth field)
record() {
  sed -n "s/.*samples_per_sec=\([0-9.]*\) samples_per_cpu_sec=\([0-9.]*\).*/$1 $2 $3 \1 \2 $repeat/p" >>"$RESULTS"
}

# The FMA peak at 1 and 2 threads, best of the runs (measured between the
# training runs, so it sees the same machine).
peak() {
  "$BENCH" --peak --threads="$1" |
    sed -n "s/.*avx2_gflops=\([0-9.]*\) avx512_gflops=\([0-9.]*\).*/peak - $1 \1 \2/p" >>"$RESULTS"
}

for repeat in $(seq "$REPEATS"); do
  echo "round $repeat of $REPEATS" >&2
  for t in 1 2; do peak $t; done
  for model in $MODELS; do
    steps=$MLP_STEPS
    [[ $model == cnn ]] && steps=$CNN_STEPS
    for t in 1 2; do
      for kernels in onednn blas; do
        "$BENCH" --model="$model" --cpu_kernels="$kernels" --threads=$t --steps="$steps" \
          --data="$DATA" | record "$model" "kubetrain-$kernels" $t
      done
      if [[ $t == 2 ]]; then
        OMP_WAIT_POLICY=PASSIVE "$BENCH" --model="$model" --cpu_kernels=onednn --threads=2 \
          --steps="$steps" --data="$DATA" | record "$model" kubetrain-onednn-passive 2
      fi
      if [[ $model == mlp ]]; then
        OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t $PY "$HERE/peers.py" numpy $t "$steps" "$DATA" |
          record mlp numpy $t
        torch_which=torch
      else
        torch_which=torch-cnn
      fi
      OMP_NUM_THREADS=$t $PY "$HERE/peers.py" $torch_which $t "$steps" "$DATA" | record "$model" torch $t
      if [[ $t == 2 ]]; then
        OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE $PY "$HERE/peers.py" $torch_which 2 "$steps" "$DATA" |
          record "$model" torch-passive 2
      fi
    done
  done
done

# FLOPs per training example (multiply-adds count 2): the forward pass and
# the weight gradients of every layer, and the input gradients of every
# layer but the first (the data needs none).
#   mlp: 2*(784*256 + 256*128 + 128*10) * 2 + 2*(256*128 + 128*10)
#   cnn: conv1 (28*28*32 outputs * 9 taps) forward + filter gradient,
#        conv2 (14*14*64 * 9*32) forward + input + filter gradients,
#        dense 3136*128 and 128*10 forward + both gradients
MLP_FLOPS=$((2 * (784 * 256 + 256 * 128 + 128 * 10) * 2 + 2 * (256 * 128 + 128 * 10)))
CNN_FLOPS=$((2 * 28 * 28 * 32 * 9 * 2 + 2 * 14 * 14 * 64 * 9 * 32 * 3 + 2 * (3136 * 128 + 128 * 10) * 3))

awk -v mlp_flops=$MLP_FLOPS -v cnn_flops=$CNN_FLOPS -v repeats="$REPEATS" -v mlp_steps="$MLP_STEPS" \
    -v cnn_steps="$CNN_STEPS" -v models="$MODELS" '
  function median(key,   n, i, j, v, tmp) {
    n = count[key]
    for (i = 1; i <= n; i++) v[i] = runs[key, i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { tmp = v[i]; v[i] = v[j]; v[j] = tmp }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  $1 == "peak" { p = ($5 > $4 ? $5 : $4); if (p > peak[$3]) peak[$3] = p; next }
  {
    k = $1 " " $2 " " $3
    if ($4 > wall[k]) wall[k] = $4
    if ($5 > cpu[k]) cpu[k] = $5
    runs[k, ++count[k]] = $4
    in_round[k, $6] = $4
  }
  # The best samples/s of PEER (and PEER-passive at 2 threads) over the
  # thread counts, in round R.
  function round_best(model, peer, r,   t, v, best) {
    best = 0
    for (t = 1; t <= 2; t++) { v = in_round[model " " peer " " t, r]; if (v > best) best = v }
    v = in_round[model " " peer "-passive 2", r]; if (v > best) best = v
    return best
  }
  # "per round a b c: median m, range lo-hi" of the ratios in v[1..n].
  function spread(v, n,   i, j, tmp, out) {
    out = ""
    for (i = 1; i <= n; i++) out = out sprintf(" %.2f", v[i])
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { tmp = v[i]; v[i] = v[j]; v[j] = tmp }
    return sprintf("per round%s: median %.2fx, range %.2f-%.2fx", out, n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, v[1], v[n])
  }
  END {
    printf "FP32 FMA peak measured here (best of %d): %.0f GFLOP/s at 1 thread, %.0f at 2\n", repeats, peak[1], peak[2]
    n = split(models, list, " ")
    for (m = 1; m <= n; m++) {
      model = list[m]
      flops = model == "mlp" ? mlp_flops : cnn_flops
      steps = model == "mlp" ? mlp_steps : cnn_steps
      printf "\n%s (%.2f MFLOP per example): samples/s, best (median) of %d runs of %d steps\n", model, flops / 1e6, repeats, steps
      printf "%-8s %18s %18s %18s %18s\n", "threads", "kubetrain onednn", "kubetrain blas", "pytorch", (model == "mlp" ? "numpy" : "")
      for (t = 1; t <= 2; t++) {
        printf "%-8d", t
        split("kubetrain-onednn kubetrain-blas torch numpy", peers, " ")
        for (i = 1; i <= 4; i++) {
          k = model " " peers[i] " " t
          if (count[k]) printf " %8.0f (%7.0f)", wall[k], median(k); else printf " %18s", ""
        }
        printf "\n"
      }
      if (count[model " torch-passive 2"])
        printf "%-8s %8.0f (%7.0f) %18s %8.0f (%7.0f)\n", "2 passive", wall[model " kubetrain-onednn-passive 2"], median(model " kubetrain-onednn-passive 2"), "", wall[model " torch-passive 2"], median(model " torch-passive 2")
      printf "samples per CPU-second at 1 thread:"
      split("kubetrain-onednn kubetrain-blas torch numpy", peers, " ")
      for (i = 1; i <= 4; i++) if (count[model " " peers[i] " 1"]) printf " %s %.0f", peers[i], cpu[model " " peers[i] " 1"]
      printf "\n"
      for (t = 1; t <= 2; t++) {
        k = wall[model " kubetrain-onednn " t]
        if (t == 2 && wall[model " kubetrain-onednn-passive 2"] > k) k = wall[model " kubetrain-onednn-passive 2"]
        g = k * flops / 1e9
        printf "kubetrain onednn at %d thread%s: %.1f GFLOP/s = %.1f%% of the measured FMA peak (%.0f GFLOP/s); %.2fx its blas kernels\n", t, (t > 1 ? "s" : ""), g, 100 * g / peak[t], peak[t], k / wall[model " kubetrain-blas " t]
      }
      # Each side at its better thread count (PyTorch: 1, 2, or 2 passive).
      best_k = 0; best_p = 0; best_n = 0
      for (t = 1; t <= 2; t++) {
        if (wall[model " kubetrain-onednn " t] > best_k) { best_k = wall[model " kubetrain-onednn " t]; kt = t "" }
        if (wall[model " torch " t] > best_p) { best_p = wall[model " torch " t]; pt = t "" }
        if (wall[model " numpy " t] > best_n) { best_n = wall[model " numpy " t]; nt = t }
      }
      if (wall[model " torch-passive 2"] > best_p) { best_p = wall[model " torch-passive 2"]; pt = "2 passive" }
      if (wall[model " kubetrain-onednn-passive 2"] > best_k) { best_k = wall[model " kubetrain-onednn-passive 2"]; kt = "2 passive" }
      printf "at the better thread count: kubetrain %.0f (%s), pytorch %.0f (%s) -> %.2fx", best_k, kt, best_p, pt, best_k / best_p
      if (best_n > 0) printf "; numpy %.0f (%d) -> %.2fx", best_n, nt, best_k / best_n
      printf "\n"
      nt_ = 0; nn_ = 0
      for (r = 1; r <= repeats; r++) {
        k = round_best(model, "kubetrain-onednn", r)
        p = round_best(model, "torch", r)
        q = round_best(model, "numpy", r)
        if (k > 0 && p > 0) vt[++nt_] = k / p
        if (k > 0 && q > 0) vn[++nn_] = k / q
      }
      if (nt_) printf "kubetrain onednn / pytorch, %s\n", spread(vt, nt_)
      if (nn_) printf "kubetrain onednn / numpy, %s\n", spread(vn, nn_)
      delete vt; delete vn
    }
  }' "$RESULTS"
