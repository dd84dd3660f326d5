#!/usr/bin/env bash
# Builds kubetrain's container images with podman (or buildah) and saves each
# as an archive for a cluster without a registry:
#
#   scripts/build-images.sh [--tool podman|buildah] [--out DIR] [--jobs N]
#                           [--cuda | --binaries BUILD_DIR] [--refresh-base] [IMAGE...]
#
#   IMAGE       kubetrain-operator, kubetrain-runtime, kubetrain-python-runtime
#               (default: all three)
#   --out DIR   where the archives go (default: out/images)
#   --jobs N    compile jobs in the build stage (default: nproc)
#   --cuda      also kubetrain-runtime:<version>-cuda, with the CUDA toolkit of
#               this machine (/usr/local/cuda, or $CUDA_HOME) mounted into the
#               build stage and the CUDA libraries the runtime loads copied in
#   --binaries BUILD_DIR  take kubetrain-operator and kubetrain-runtime from
#               this build tree (a Release build on Debian 12 without CUDA, such
#               as scripts/test.sh's build/) instead of compiling them in the
#               build stage: no compile, none of the build stage's packages.
#               CI builds its images so; the images' libraries still come only
#               from scripts/packages/, and the build fails when a binary loads
#               one they lack
#   --refresh-base  debootstrap the base image again even if it exists
#
# Each image is tagged docker.io/kubetrain/<image>:<version> (the name
# Kubernetes gives `kubetrain/<image>:<version>`), the version being
# project(VERSION) of CMakeLists.txt, and saved as DIR/<image>-<version>.tar
# (docker-archive), ready for any of:
#   ctr -n k8s.io images import DIR/kubetrain-runtime-0.1.0.tar   (containerd)
#   kind load image-archive DIR/kubetrain-runtime-0.1.0.tar
#   docker load -i DIR/kubetrain-runtime-0.1.0.tar
#
# The base is Debian 12 itself: `debootstrap --variant=minbase bookworm` from
# $DEBIAN_MIRROR (default http://deb.debian.org/debian), slimmed as Debian's
# slim images are and imported as localhost/kubetrain-debian:12 (kept and
# reused by later runs). So the build needs nothing but the Debian mirror. With
# a registry, set KUBETRAIN_BASE_IMAGE=docker.io/library/debian:12 (and
# KUBETRAIN_RUNTIME_BASE_IMAGE=docker.io/library/debian:12-slim) to skip it.
#
# $KUBETRAIN_IMAGE_BUILD_OPTS: more options for every `podman build` /
# `buildah bud` (split at spaces), e.g. "--volume DIR:DIR:ro --build-arg
# COMPILER_LAUNCHER=DIR/launcher".
#
# All images come from one build stage (deploy/docker/Dockerfile) that
# compiles both binaries once (or from --binaries); later images reuse its
# cached layers. Another
# image is one more stage in the Dockerfile and one more line in `images`.
set -euo pipefail
cd "$(dirname "$0")/.."

# image name -> Dockerfile target
declare -A targets=(
  [kubetrain-operator]=operator
  [kubetrain-runtime]=runtime
  [kubetrain-python-runtime]=python-runtime
)
images=(kubetrain-operator kubetrain-runtime kubetrain-python-runtime)

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

tool=""
out=out/images
jobs=$(nproc)
cuda=false
binaries_dir=""
refresh_base=false
selected=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --tool) tool=${2:?--tool needs podman or buildah}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --cuda) cuda=true; shift ;;
    --binaries) binaries_dir=${2:?--binaries needs a build folder}; shift 2 ;;
    --refresh-base) refresh_base=true; shift ;;
    -h|--help) usage ;;
    -*) echo "build-images: unknown flag $1" >&2; usage ;;
    *)
      [[ -n "${targets[$1]:-}" ]] || { echo "build-images: no image named $1 (${images[*]})" >&2; exit 2; }
      selected+=("$1"); shift ;;
  esac
done
[[ ${#selected[@]} -gt 0 ]] || selected=("${images[@]}")
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "build-images: --jobs: a positive number, got '$jobs'" >&2; exit 2; }
if [[ -z $tool ]]; then
  if command -v podman >/dev/null 2>&1; then tool=podman; else tool=buildah; fi
fi
case $tool in
  podman|buildah) command -v "$tool" >/dev/null 2>&1 || { echo "build-images: $tool is not installed (scripts/install-deps.sh --images)" >&2; exit 1; } ;;
  *) echo "build-images: --tool: podman or buildah, got '$tool'" >&2; exit 2 ;;
esac

if [[ -n $binaries_dir ]] && $cuda; then
  echo "build-images: --cuda compiles in the build stage; it does not go with --binaries" >&2
  exit 2
fi

version=$(sed -n 's/^project(kubetrain VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[[ -n $version ]] || { echo "build-images: no project(kubetrain VERSION ...) in CMakeLists.txt" >&2; exit 1; }

mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
source scripts/containers-env.sh
kubetrain_containers_env "$work"

started=$SECONDS
phase_started=$SECONDS
phase() {  # prints how long the previous phase took
  echo "build-images: $* (after $((SECONDS - phase_started)) s)"
  phase_started=$SECONDS
}

image_exists() {
  if [[ $tool == podman ]]; then podman image exists "$1"; else buildah inspect --type image "$1" >/dev/null 2>&1; fi
}

# ---- With --binaries: the build tree's binaries, stripped, for the prebuilt stage. ----
dockerfile=deploy/docker/Dockerfile
prebuilt_args=()
if [[ -n $binaries_dir ]]; then
  cache=$binaries_dir/CMakeCache.txt
  [[ -f $cache ]] || { echo "build-images: --binaries: no CMakeCache.txt in $binaries_dir" >&2; exit 1; }
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")
  [[ $build_type == Release ]] || {
    echo "build-images: --binaries: $binaries_dir is a '$build_type' build; the images take Release binaries" >&2
    exit 1
  }
  if grep -q '^KUBETRAIN_SANITIZE:BOOL=ON' "$cache"; then
    echo "build-images: --binaries: $binaries_dir is a sanitizer build" >&2
    exit 1
  fi
  mkdir -p "$work/prebuilt"
  # A build with CUDA also links kubetrain-runtime-cpu, the runtime without
  # the CUDA device: that one goes into the images, as kubetrain-runtime.
  runtime_binary=trainer-runtime/cmd/kubetrain-runtime
  if grep -q '^kubetrain-runtime-cpu:' <(ninja -C "$binaries_dir" -t targets all 2>/dev/null); then
    runtime_binary=trainer-runtime/cmd/kubetrain-runtime-cpu
  fi
  for binary in operator/cmd/kubetrain-operator $runtime_binary; do
    path=$binaries_dir/$binary
    [[ -x $path ]] || { echo "build-images: --binaries: $path is not built (cmake --build $binaries_dir --target $(basename "$binary"))" >&2; exit 1; }
    # The images hold Debian's libraries only: a binary that loads one from
    # elsewhere (the CUDA toolkit under /usr/local) needs the build stage.
    outside=$(ldd "$path" | awk '$3 ~ /^\// && $3 !~ /^\/(usr\/)?lib/ { print $1 " => " $3 }')
    if [[ -n $outside ]]; then
      echo "build-images: --binaries: $path loads libraries from outside Debian's packages:" >&2
      echo "$outside" >&2
      echo "  (a build with -DKUBETRAIN_CUDA=OFF, or without --binaries)" >&2
      exit 1
    fi
    name=$(basename "$binary"); name=${name%-cpu}
    strip -o "$work/prebuilt/$name" "$path"
  done
  # The same Dockerfile with the prebuilt stage in place of the compile.
  dockerfile=$work/Dockerfile
  sed 's/^FROM build AS binaries$/FROM prebuilt AS binaries/' deploy/docker/Dockerfile >"$dockerfile"
  grep -q '^FROM prebuilt AS binaries$' "$dockerfile" || {
    echo "build-images: deploy/docker/Dockerfile has no 'FROM build AS binaries' line" >&2
    exit 1
  }
  prebuilt_args=(--volume "$work/prebuilt:/prebuilt:ro"
    --build-arg "OPERATOR_SHA256=$(sha256sum <"$work/prebuilt/kubetrain-operator" | cut -d' ' -f1)"
    --build-arg "RUNTIME_SHA256=$(sha256sum <"$work/prebuilt/kubetrain-runtime" | cut -d' ' -f1)")
  echo "build-images: binaries from $binaries_dir (no build stage)"
fi

# ---- The base: Debian 12 minbase from the mirror. ----
base=${KUBETRAIN_BASE_IMAGE:-}
runtime_base=${KUBETRAIN_RUNTIME_BASE_IMAGE:-${KUBETRAIN_BASE_IMAGE:-}}
if [[ -z $base ]]; then
  base=localhost/kubetrain-debian:12
  runtime_base=${runtime_base:-$base}
  if $refresh_base || ! image_exists "$base"; then
    command -v debootstrap >/dev/null 2>&1 || { echo "build-images: debootstrap is not installed (scripts/install-deps.sh --images)" >&2; exit 1; }
    mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
    rootfs=$work/rootfs
    echo "build-images: debootstrap --variant=minbase bookworm from $mirror"
    if ! debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
      tail -n 30 "$work/debootstrap.log"
      echo "build-images: debootstrap failed (log above)" >&2
      exit 1
    fi
    # As Debian's own images: updates and security updates, no recommends, no
    # docs, man pages or translations from later installs, no package caches.
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    cat >"$rootfs/etc/apt/apt.conf.d/90kubetrain-image" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/90kubetrain-image" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
EOF
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
      "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* \
      "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
    find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    tar -C "$rootfs" --numeric-owner -cf "$work/rootfs.tar" .
    rm -rf "$rootfs"
    if [[ $tool == podman ]]; then
      podman import --change 'CMD ["bash"]' "$work/rootfs.tar" "$base" >/dev/null
    else
      container=$(buildah from scratch)
      buildah add --quiet "$container" "$work/rootfs.tar" / >/dev/null
      buildah config --cmd bash "$container"
      buildah commit --quiet --rm "$container" "$base" >/dev/null
    fi
    rm -f "$work/rootfs.tar"
    phase "base image $base made"
  else
    echo "build-images: reusing the base image $base (--refresh-base makes it again)"
  fi
fi
runtime_base=${runtime_base:-$base}

# ---- The images. ----
build_args=(--network host --layers -f "$dockerfile"
  --build-arg "BASE=$base" --build-arg "RUNTIME_BASE=$runtime_base" --build-arg "JOBS=$jobs"
  "${prebuilt_args[@]}")
read -r -a extra_opts <<<"${KUBETRAIN_IMAGE_BUILD_OPTS:-}"
build_args+=("${extra_opts[@]}")
build() {  # build TARGET TAG [extra args...]
  local target=$1 tag=$2
  shift 2
  if [[ $tool == podman ]]; then
    podman build "${build_args[@]}" "$@" --target "$target" -t "$tag" .
  else
    buildah bud "${build_args[@]}" "$@" --target "$target" -t "$tag" .
  fi
}
save() {  # save TAG FILE
  rm -f "$2"
  if [[ $tool == podman ]]; then
    podman save --format docker-archive -o "$2" "$1" >/dev/null
  else
    buildah push --quiet "$1" "docker-archive:$2:$1" >/dev/null
  fi
}
size_of() {  # the image's unpacked size, e.g. "160 MB"
  if [[ $tool == podman ]]; then
    echo "$(($(podman image inspect --format '{{.Size}}' "$1") / 1000000)) MB"
  else
    buildah images --format '{{.Size}}' "$1"
  fi
}

built=()
for image in "${selected[@]}"; do
  tag=docker.io/kubetrain/$image:$version
  echo "build-images: $tag (target ${targets[$image]})"
  build "${targets[$image]}" "$tag"
  save "$tag" "$out/$image-$version.tar"
  built+=("$tag=$out/$image-$version.tar")
  phase "$tag built and saved"
done

if $cuda; then
  cuda_home=${CUDA_HOME:-/usr/local/cuda}
  [[ -x $cuda_home/bin/nvcc ]] || { echo "build-images: --cuda: no nvcc under $cuda_home (set CUDA_HOME)" >&2; exit 1; }
  cuda_home=$(readlink -f "$cuda_home")
  tag=docker.io/kubetrain/kubetrain-runtime:$version-cuda
  echo "build-images: $tag (toolkit $cuda_home)"
  build runtime "$tag" --build-arg CUDA=ON --build-arg "CUDA_HOME=$cuda_home" \
    --volume "$cuda_home:$cuda_home:ro"
  save "$tag" "$out/kubetrain-runtime-$version-cuda.tar"
  built+=("$tag=$out/kubetrain-runtime-$version-cuda.tar")
  phase "$tag built and saved"
fi

echo "build-images: done in $((SECONDS - started)) s"
printf '%-52s %10s %10s  %s\n' IMAGE SIZE ARCHIVE FILE
for entry in "${built[@]}"; do
  tag=${entry%%=*}
  file=${entry#*=}
  printf '%-52s %10s %10s  %s\n' "$tag" "$(size_of "$tag")" \
    "$(($(stat -c %s "$file") / 1000000)) MB" "$file"
done
