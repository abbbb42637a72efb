#!/bin/sh
# Run a command and check how it ended.
#   expect.sh ok|fail MAX_SECONDS REGEX command [args...]
# ok: exit status 0; fail: non-zero. The combined output must match the
# extended REGEX (use '.' for any) and the command must end within
# MAX_SECONDS (it is killed at twice that). The output is echoed for ctest.
want=$1 max=$2 regex=$3
shift 3
out=$(mktemp)
start=$(date +%s.%N)
# TERM first (mpirun forwards it to its ranks), KILL 5 s later
timeout -k 5 "$(awk "BEGIN { print $max * 2 }")" "$@" >"$out" 2>&1
rc=$?
end=$(date +%s.%N)
cat "$out"
secs=$(awk "BEGIN { printf \"%.2f\", $end - $start }")
echo "expect.sh: exit status $rc after $secs s (want $want within $max s)"
fail=0
if [ "$want" = ok ] && [ $rc -ne 0 ]; then echo "expect.sh: FAIL: non-zero exit"; fail=1; fi
if [ "$want" = fail ] && [ $rc -eq 0 ]; then echo "expect.sh: FAIL: exit status 0"; fail=1; fi
if [ "$(awk "BEGIN { print ($secs > $max) }")" = 1 ]; then echo "expect.sh: FAIL: took over $max s"; fail=1; fi
if ! grep -Eq -- "$regex" "$out"; then echo "expect.sh: FAIL: output does not match /$regex/"; fail=1; fi
rm -f "$out"
exit $fail
