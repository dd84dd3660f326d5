#!/usr/bin/env bash
# The quick start: installs dependencies, builds kubetrain, and runs the
# local quick-start job: 10 trials, 2 at a time, tuning the built-in MLP on
# Fashion-MNIST, each trial a small cluster (1 master, 2 workers, 1 ps) of
# local processes. Then prints the job as `jobs describe` shows it.
#
#   scripts/quickstart.sh              everything
#   QUICKSTART_SKIP_BUILD=1 ...        reuse an existing build tree
#   BUILD_DIR=build-x ...              build tree to use (default build)
# State and logs go to $KUBETRAIN_HOME (default ~/.kubetrain); the job name
# is fmnist_hptuning, suffixed with the time when that name is taken. Outputs
# go to the example's jobDir, /tmp/kubetrain/fmnist_hptuning: a later run's
# trials find the earlier run's checkpoints there and leave them alone,
# writing to a subfolder of their own.
set -euo pipefail
cd "$(dirname "$0")/.."

build="${BUILD_DIR:-build}"
if [[ -z "${QUICKSTART_SKIP_BUILD:-}" ]]; then
  scripts/install-deps.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKUBETRAIN_CUDA=AUTO
  cmake --build "$build" -j "$(nproc)" --target kubetrain kubetrain-runtime
fi
kubetrain="$build/cli/kubetrain"

echo "== Checking the examples"
"$kubetrain" validate examples/*.yaml

job=fmnist_hptuning
if KUBETRAIN_BACKEND=local "$kubetrain" jobs describe "$job" >/dev/null 2>&1; then
  job="fmnist_hptuning_$(date +%Y%m%d_%H%M%S)"
fi

echo "== Submitting $job"
status=0
"$kubetrain" jobs submit training "$job" --local \
  --config examples/fashion-mnist-hptuning.yaml --stream-logs || status=$?

echo "== kubetrain jobs describe $job"
KUBETRAIN_BACKEND=local "$kubetrain" jobs describe "$job"
exit "$status"
