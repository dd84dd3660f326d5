#!/usr/bin/env bash
# Fails when a C, C++ or CUDA source differs from what clang-format 14 makes of
# it under the repository's .clang-format, and names each such file with the
# first lines that differ. The version is pinned: another clang-format
# formats some constructs differently, and CI installs 14 (Debian 12's).
#   scripts/check-format.sh [--root DIR]      check
#   scripts/check-format.sh [--root DIR] --fix  rewrite the files in place
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
fix=false
while [[ $# -gt 0 ]]; do
  case $1 in
    --root) root=$(cd "$2" && pwd); shift 2 ;;
    --fix) fix=true; shift ;;
    *) echo "check-format: unknown argument $1 (--root DIR, --fix)" >&2; exit 2 ;;
  esac
done

formatter=$(command -v clang-format-14 || true)
if [[ -z $formatter ]]; then
  echo "check-format: clang-format-14 not found (Debian package clang-format-14;" \
    "scripts/install-deps.sh installs it)" >&2
  exit 2
fi

cd "$root"
# The tracked files when this is a git checkout; otherwise every source outside
# build trees and image outputs.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [[ -z $(git rev-parse --show-prefix) ]]; then
  mapfile -d '' files < <(git ls-files -z -- '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -d '' files < <(find . \( -path './build*' -o -path './out' -o -path './.git' \) -prune \
    -o -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check-format: no C++ sources found under $root" >&2
  exit 2
fi

if $fix; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 50 "$formatter" -i --style=file
  exit 0
fi

# One clang-format run per hundred files; --dry-run names each file and line
# that would change.
report=$(printf '%s\0' "${files[@]}" |
  xargs -0 -n 100 "$formatter" --style=file --dry-run -ferror-limit=1 2>&1) || true
violations=$(grep -E '^[^ ].*: (error|warning):' <<<"$report" | sed 's/ \[-Wclang-format-violations\]//' || true)
if [[ -n $report ]]; then
  echo "${violations:-$report}"
  count=$(cut -d: -f1 <<<"$violations" | sort -u | grep -c . || true)
  echo "check-format: $count of ${#files[@]} files are not formatted (clang-format-14 would" \
    "change them at the lines above); run scripts/check-format.sh --fix"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
