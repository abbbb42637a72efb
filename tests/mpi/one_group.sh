#!/bin/sh
# Run an elastic `reshard run ... --json` whose agreement may fail, N times,
# and check that the survivors never split into groups that carry on:
#   one_group.sh N MAX_SECONDS command [args...]
# Each run passes when it exits 0 with exactly one JSON object, which says
# "ok": true, or exits non-zero with no "ok": true in its output (a live rank
# counted lost by the others ended the job); and within MAX_SECONDS.
n=$1 max=$2
shift 2
out=$(mktemp)
fail=0
i=0
while [ $i -lt "$n" ]; do
  i=$((i + 1))
  start=$(date +%s.%N)
  timeout -k 5 "$(awk "BEGIN { print $max * 2 }")" "$@" >"$out" 2>&1
  rc=$?
  secs=$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $start }")
  objects=$(grep -c '"agreed_lost"' "$out")
  oks=$(grep -c '"ok": true' "$out")
  grep -E '"ok"|agreed_lost|recovery failed|counts this rank|not a majority' "$out"
  echo "one_group.sh: run $i: exit status $rc after $secs s, $objects report(s), $oks ok"
  if [ $rc -eq 0 ] && { [ "$objects" -ne 1 ] || [ "$oks" -ne 1 ]; }; then
    echo "one_group.sh: FAIL: exit 0 needs exactly one report, ok"; fail=1
  fi
  if [ $rc -ne 0 ] && [ "$oks" -ne 0 ]; then
    echo "one_group.sh: FAIL: a group reported ok while the job failed"; fail=1
  fi
  if [ "$objects" -gt 1 ]; then echo "one_group.sh: FAIL: $objects groups reported"; fail=1; fi
  if [ "$(awk "BEGIN { print ($secs > $max) }")" = 1 ]; then
    echo "one_group.sh: FAIL: took over $max s"; fail=1
  fi
done
rm -f "$out"
exit $fail
