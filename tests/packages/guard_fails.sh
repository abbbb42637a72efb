#!/usr/bin/env bash
# The package guard (tools/check_packages.py) must fail, naming what is missing,
# (1) when tools/packages.txt lacks a package a test imports (python3-pytest),
# (2) when it lacks a package a CMake test calls (iproute2: tc and ip in
#     cluster_refit_smoke),
# (3) when a new test in the tree imports a module no package installed, and
# (4) when a new script calls a command no package installed;
# and pass on the repository as it is. usage: guard_fails.sh <repository root>
set -uo pipefail
root=$1
guard=("/usr/bin/python3" "$root/tools/check_packages.py")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "guard_fails: $*" >&2; exit 1; }
expect_fail() {  # name regex args...
  local name=$1 re=$2
  shift 2
  out=$("${guard[@]}" "$@" 2>&1)
  rc=$?
  [ $rc -eq 1 ] || fail "$name: the guard exited $rc, not 1: $out"
  grep -Eq "$re" <<<"$out" || fail "$name: the guard's report does not match '$re': $out"
  echo "guard_fails: $name: refused as it must: $(grep -E "$re" <<<"$out" | head -1 | sed 's/^ *//')"
}
[ -x /usr/bin/python3 ] || { echo "SKIP: needs /usr/bin/python3 (tools/apt-install.sh --group python)"; exit 77; }
"${guard[@]}" >"$tmp/ok.log" 2>&1
rc=$?
[ $rc -eq 77 ] && { cat "$tmp/ok.log"; exit 77; }
[ $rc -eq 0 ] || fail "the guard fails on the repository itself: $(cat "$tmp/ok.log")"

grep -v '^python3-pytest ' "$root/tools/packages.txt" >"$tmp/no-pytest.txt"
expect_fail "list without python3-pytest" 'tests/python/.*module pytest .*(python3-pytest|not installed)' \
  --list "$tmp/no-pytest.txt"

grep -v '^iproute2 ' "$root/tools/packages.txt" >"$tmp/no-iproute2.txt"
expect_fail "list without iproute2" 'tests/mpi/CMakeLists.txt:[0-9]+: command (tc|ip) .*(iproute2|not installed)' \
  --list "$tmp/no-iproute2.txt"

mkdir -p "$tmp/tree/tools" "$tmp/tree/tests/python" "$tmp/tree/tests/new"
cp "$root/tools/packages.txt" "$tmp/tree/tools/"
printf 'import os\nimport reshard_no_such_module\n' >"$tmp/tree/tests/python/test_new.py"
expect_fail "a test importing an unlisted module" \
  'tests/python/test_new.py:2: module reshard_no_such_module is not installed' --root "$tmp/tree"

rm "$tmp/tree/tests/python/test_new.py"
printf '#!/bin/sh\nset -e\nreshard-no-such-tool --version | grep -q 1\n' >"$tmp/tree/tests/new/check.sh"
expect_fail "a script calling an unlisted command" \
  'tests/new/check.sh:3: command reshard-no-such-tool is not installed' --root "$tmp/tree"
echo "guard_fails: the guard passes the repository and refuses each missing package"
