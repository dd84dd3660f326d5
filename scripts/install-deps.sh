#!/usr/bin/env bash
# Installs every Debian 12 package kubetrain needs to build and test.
#   scripts/install-deps.sh           build + test dependencies
#   scripts/install-deps.sh --bench   also the peers the benchmarks compare with
#   scripts/install-deps.sh --images  also what builds and runs the container images
#   scripts/install-deps.sh --list    print the packages (one a line), install nothing
# Runs apt-get as root, or through sudo when not root.
set -euo pipefail

# What compiles the binaries: one list, shared with the images' build stage.
build_list="$(dirname "$0")/packages/build.txt"
mapfile -t packages < <(sed -e 's/#.*//' "$build_list" | tr -s ' \t' '\n' | sed '/^$/d')
if [[ ${#packages[@]} -eq 0 ]]; then echo "install-deps: no packages read from $build_list" >&2; exit 1; fi
packages+=(
  git
  clang-14 libclang-rt-14-dev libomp-14-dev lld-14 lld clang-format clang-tidy
  libbenchmark-dev
  dataset-fashion-mnist
  python3 python3-pip prometheus procps
  python3-torch
  chromium chromium-driver
)
bench_packages=(python3-numpy python3-optuna python3-sklearn openmpi-bin libopenmpi-dev)
# podman with runc (crun refuses hosts whose cgroup v2 mount keeps
# controllers beside v1) and the CNI plugins with DNS, so containers on one
# network reach each other by name; debootstrap makes the images' base.
image_packages=(podman buildah runc containernetworking-plugins
  golang-github-containernetworking-plugin-dnsname debootstrap)

list=false
for arg in "$@"; do
  case $arg in
    --bench) packages+=("${bench_packages[@]}") ;;
    --images) packages+=("${image_packages[@]}") ;;
    --list) list=true ;;
    *) echo "install-deps: unknown flag $arg (--bench, --images, --list)" >&2; exit 2 ;;
  esac
done
if $list; then
  printf '%s\n' "${packages[@]}"
  exit 0
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
