#!/bin/sh
# Run an elastic `reshard run` with --result-file and check the outcome it wrote,
# whatever mpirun's exit status (0 under --enable-recovery whatever the ranks return).
#   result_file.sh true|false MAX_SECONDS command [args...]
want=$1 max=$2
shift 2
dir=$(mktemp -d)
file="$dir/result.json"
echo '{"ok": "stale"}' >"$file" # a file left from an earlier run must not count
timeout -k 5 "$(awk "BEGIN { print $max * 2 }")" "$@" --result-file "$file" 2>&1
status=$?
echo "result_file.sh: exit status $status (mpirun's, not the outcome)"
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then # a job that never ends is a hang
  rm -rf "$dir"
  echo "result_file.sh: FAIL: the job did not end within $(awk "BEGIN { print $max * 2 }") s"
  exit 1
fi
got=$(cat "$file" 2>/dev/null)
rm -rf "$dir"
echo "result_file.sh: result file: ${got:-<none>} (want ok $want)"
case "$got" in
*"\"ok\": $want,"*) exit 0 ;;
*) echo "result_file.sh: FAIL"; exit 1 ;;
esac
