#!/usr/bin/env bash
# The quick start: installs dependencies, builds kubetrain, and runs the
# local quick-start job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKUBETRAIN_CUDA=AUTO
cmake --build build -j "$(nproc)"

echo "== Checking the examples"
build/cli/kubetrain validate examples/*.yaml
