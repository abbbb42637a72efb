#!/usr/bin/env bash
# Stop each rank at each point of both agreements of a refit (test_mpi_atomic) and check
# that every survivor returned the same verdict and recovered: 5 ranks x 2 agreements x 5
# points = 50 runs of about 4 s each. Prints one line per run and a summary.
#   tests/mpi/atomic_sweep.sh [build-dir (default build)] [timeout-s (default 2)] [kill]
# kill: the victim is killed (SIGKILL) at the point instead of stopped.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
t=${2:-2}
how=${3:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
pass=0 fail=0
for agreement in preflight outcome; do
  for point in enter posted decided confirm confirmed; do
    for victim in 0 1 2 3 4; do
      out=$(timeout -k 5 120 mpirun --enable-recovery --oversubscribe -np 5 \
        "$build/tests/mpi/test_mpi_atomic" tests/mpi/configs/tiny-gqa.json \
        "$victim" "$agreement" "$point" "$t" $how 2>&1)
      line=$(grep -m1 -E "ATOMIC (OK|FAIL)" <<<"$out")
      if [[ $line == "ATOMIC OK"* ]]; then
        pass=$((pass + 1))
        echo "$line"
      else
        fail=$((fail + 1))
        echo "FAIL: victim $victim at $agreement/$point: ${line:-no verdict}"
        grep -E "refit|agree|shrink" <<<"$out" | head -8 | sed 's/^/    /'
      fi
    done
  done
done
echo "atomic sweep: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
