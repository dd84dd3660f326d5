#!/usr/bin/env bash
# Installs every Debian 12 package kubetrain needs to build and test.
#   scripts/install-deps.sh           build + test dependencies
#   scripts/install-deps.sh --bench   also the peers the benchmarks compare with
# Runs apt-get as root, or through sudo when not root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang-14 libclang-rt-14-dev libomp-14-dev lld-14 clang-format clang-tidy
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libcpprest-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev prometheus-cpp-dev
  libsqlite3-dev libopenblas-dev libdnnl-dev zlib1g-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  python3 prometheus procps
  python3-torch
  chromium chromium-driver
)
bench_packages=(python3-numpy python3-optuna python3-sklearn openmpi-bin libopenmpi-dev)

if [[ "${1:-}" == "--bench" ]]; then
  packages+=("${bench_packages[@]}")
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
