#!/usr/bin/env bash
# Training throughput inside a cgroup whose CPU limit is LIMIT CPUs (a
# Kubernetes CPU limit), for three thread counts side by side in one run:
#   auto  what kubetrain-runtime picks by default: the container's budget
#         (common/cpu_budget/cpu_budget.h), here the limit
#   1     --threads=1, the peer: the best one CPU can do
#   all   every core of the machine (std::thread::hardware_concurrency), the
#         runtime's default before it read its budget
# Reported: samples/s (best and median of REPEATS interleaved rounds) and
# each as a ratio to the peer's.
#
#   sudo bench/train_throughput/cpu_quota.sh [BUILD_DIR]
#
# Environment: LIMIT (1), REPEATS (3), MODELS ("mlp cnn"), MLP_STEPS (600),
# CNN_STEPS (40). Needs root and a cgroup cpu controller it can write
# (cgroup v1's cpu.cfs_quota_us, or v2's cpu.max); says so and stops when
# there is none.
set -euo pipefail
BUILD_DIR=${1:-build}
LIMIT=${LIMIT:-1}
REPEATS=${REPEATS:-3}
MODELS=${MODELS:-mlp cnn}
MLP_STEPS=${MLP_STEPS:-600}
CNN_STEPS=${CNN_STEPS:-40}
BENCH="$BUILD_DIR/bench/train_throughput/train_throughput_bench"
[[ -x "$BENCH" ]] || { echo "build train_throughput_bench first (ninja -C $BUILD_DIR train_throughput_bench)"; exit 2; }

quota=$(python3 -c "print(round($LIMIT * 100000))")
name="kubetrain-cpu-quota-$$"
group=""
for mount in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
  if [[ -w $mount/cpu.cfs_quota_us ]]; then
    group="$mount/$name"
    mkdir "$group"
    echo 100000 >"$group/cpu.cfs_period_us"
    echo "$quota" >"$group/cpu.cfs_quota_us"
    break
  fi
done
if [[ -z $group && -f /sys/fs/cgroup/cgroup.subtree_control ]]; then
  group="/sys/fs/cgroup/$name"
  mkdir "$group"
  if ! echo "$quota 100000" >"$group/cpu.max" 2>/dev/null; then
    rmdir "$group"
    echo "cpu_quota.sh: the cgroup v2 cpu controller is not enabled below /sys/fs/cgroup" >&2
    exit 2
  fi
fi
[[ -n $group ]] || { echo "cpu_quota.sh: no writable cgroup cpu controller (run as root)" >&2; exit 2; }

RESULTS=$(mktemp)
trap 'rmdir "$group" 2>/dev/null || true; rm -f "$RESULTS"' EXIT
for repeat in $(seq "$REPEATS"); do
  echo "round $repeat of $REPEATS" >&2
  for model in $MODELS; do
    steps=$MLP_STEPS
    [[ $model == cnn ]] && steps=$CNN_STEPS
    for threads in auto 1 all; do
      line=$(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$group" \
        "$BENCH" --model="$model" --threads="$threads" --steps="$steps")
      echo "$line" | sed -n "s/.*threads=\([0-9]*\) samples_per_sec=\([0-9.]*\).*/$model $threads \1 \2/p" >>"$RESULTS"
    done
  done
done

python3 - "$RESULTS" "$LIMIT" "$(nproc)" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print(f"CPU limit {sys.argv[2]} CPU(s) on a {sys.argv[3]}-CPU machine; samples/s (best, median)")
for model in dict.fromkeys(r[0] for r in rows):
    rates = {}
    threads = {}
    for m, config, n, rate in rows:
        if m == model:
            rates.setdefault(config, []).append(float(rate))
            threads[config] = n
    peer = max(rates["1"])
    for config in ("auto", "1", "all"):
        best = max(rates[config])
        print(f"  {model:4s} {config:5s} ({threads[config]} thread(s)): best {best:9.1f}  "
              f"median {statistics.median(rates[config]):9.1f}  ratio to --threads=1 {best / peer:.2f}")
EOF
