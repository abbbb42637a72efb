#!/usr/bin/env bash
# Build the libFuzzer targets (clang-14, ASan+UBSan+fuzzer coverage) and run
# each for SECONDS on a scratch copy of its seed corpus; the clang sanitizer
# build also runs the hostile-input regression tests (clang's UBSan sees
# pointer overflows GCC's does not). A crash, leak, timeout or sanitizer
# report fails the run and prints the reproducer (path, base64, command).
# usage: fuzz/run.sh [build-dir (default build-fuzz)] [seconds per target (default 45)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
secs=${2:-45}
tools/apt-install.sh --group fuzz
CC=clang-14 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRESHARD_FUZZ=ON \
  -DRESHARD_SANITIZE=ON -DRESHARD_WITH_MPI=OFF -DRESHARD_WITH_NCCL=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_config fuzz_spec fuzz_refit test_hostile_inputs
"$build/tests/test_hostile_inputs"
out="$build/fuzz-out"
rm -rf "$out"
status=0
for t in config spec refit; do
  mkdir -p "$out/$t/corpus"
  cp fuzz/corpus/$t/* "$out/$t/corpus/"
  echo "fuzz: fuzz_$t for ${secs} s"
  if ! "$build/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=60 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$out/$t/" "$out/$t/corpus" >"$out/$t/log" 2>&1; then
    status=1
    echo "fuzz: fuzz_$t FAILED; the end of its log:"
    tail -n 60 "$out/$t/log"
    for f in "$out/$t"/crash-* "$out/$t"/leak-* "$out/$t"/timeout-* "$out/$t"/oom-*; do
      [ -e "$f" ] || continue
      echo "fuzz: reproducer $f (base64: $(base64 -w0 "$f"))"
      echo "fuzz: reproduce with: $build/fuzz/fuzz_$t $f"
    done
  else
    grep -E "^stat::number_of_executed_units" "$out/$t/log" | sed "s/^/fuzz: fuzz_$t /"
  fi
done
exit $status
