#!/usr/bin/env bash
# The format check itself: on a tree holding one formatted and one planted
# unformatted file it must fail and name the planted file only; once the file
# is fixed it must pass.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
cp "$here/../.clang-format" "$tree/"
mkdir -p "$tree/trainer-runtime"
printf 'int Add(int a, int b) { return a + b; }\n' >"$tree/trainer-runtime/formatted.cc"
printf 'int  Sub( int a,int b ){return a-b;}\n' >"$tree/trainer-runtime/planted.cc"

fail() { echo "check_format_test: $*" >&2; exit 1; }

status=0
output=$("$here/check-format.sh" --root "$tree" 2>&1) || status=$?
[[ $status -eq 1 ]] || fail "expected exit 1 on the planted file, got $status: $output"
grep -q 'trainer-runtime/planted.cc:1:' <<<"$output" || fail "planted.cc not named: $output"
! grep -q 'formatted.cc' <<<"$output" || fail "a formatted file was named: $output"
grep -q '1 of 2 files are not formatted' <<<"$output" || fail "wrong count: $output"

"$here/check-format.sh" --root "$tree" --fix
output=$("$here/check-format.sh" --root "$tree" 2>&1) || fail "still failing after --fix: $output"
grep -q '2 files formatted' <<<"$output" || fail "unexpected output after --fix: $output"
echo "check_format_test: passed"
