#!/usr/bin/env bash
# GPU check of the NCCL transport, for a machine with one (or more) CUDA GPUs:
#   1. configure and build with -DRESHARD_WITH_NCCL=ON (Release, kernels for CUDA_ARCH),
#   2. run the tests labelled gpu and nccl (ctest; a skipped gpu test is a failure here,
#      since a device should be visible),
#   3. run bench_gpu_pack: pack/unpack bandwidth against cudaMemcpy device-to-device in the
#      same run; target >= 0.7 of it for runs >= 4 KiB; then the quantize kernel's (shown).
# With 2+ GPUs and an MPI build it also runs the multi-rank refits over NCCL (label
# multigpu: mpirun -np 2/4/8, those that fit the GPUs; the others skip).
# Everything is logged to <build>/gpu-check.log; a summary comes last. Budget: under 8
# minutes on one H100/H200 (build about 1 minute with 16 cores, tests about 2, bench < 1).
#
# usage: tools/gpu-check.sh [build-dir]      (default: build-gpu in the repository)
# env:   JOBS (default nproc), CUDA_ARCH (default 90; "native" = the local GPU),
#        BENCH_MIB (default 256), BENCH_ITERS (default 20)
set -u -o pipefail

# A single-host check: NCCL's bootstrap on the loopback interface, and NCCL's own warnings
# in the log (both overridable).
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
mkdir -p "$build"
log=$build/gpu-check.log
: >"$log"
t0=$(date +%s)

say() { echo "$*" | tee -a "$log"; }
step() { say ""; say "== $* (t=$(($(date +%s) - t0)) s)"; }
run() { "$@" 2>&1 | tee -a "$log"; return "${PIPESTATUS[0]}"; }

step "device"
run nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader ||
    say "nvidia-smi failed or absent"
say "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"

step "configure"
run cmake -S "$root" -B "$build" -DRESHARD_WITH_NCCL=ON -DCMAKE_BUILD_TYPE=Release \
    -DRESHARD_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" || { say "FAIL: configure"; exit 1; }

step "build"
targets="test_nccl_box_copy test_nccl_quant test_nccl_nodevice test_gpu_refit test_gpu_timeout"
targets="$targets bench_gpu_pack fake_nccl_refit fake_nccl_timeout fake_nccl_ranks fake_nccl_elastic"
targets="$targets fake_nccl_quant fake_nccl_quant_refit test_nccl_quant_refit" # quantize: nccl + gpu
targets="$targets reshard_fakegpu_shared" # label nccl: CPU-side (Python rejoin over the fake)
if cmake --build "$build" --target help | grep -q test_gpu_mpi_refit; then
    targets="$targets test_gpu_mpi_refit" # built with MPI: multi-GPU refits
fi
# shellcheck disable=SC2086
run cmake --build "$build" -j "${JOBS:-$(nproc)}" --target $targets || { say "FAIL: build"; exit 1; }

step "tests: ctest -L '^(gpu|nccl)$'"
(cd "$build" && run timeout 420 ctest -L '^(gpu|nccl)$' --output-on-failure --timeout 300)
tests_rc=$?
skipped=$(grep -cE ": gpu_[a-z_]+ .*\*\*\*Skipped" "$log")
if [ "$skipped" -gt 0 ]; then
    say "FAIL: $skipped gpu test(s) skipped: no CUDA device visible to the tests"
    tests_rc=1
fi

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if [ "$ngpu" -ge 2 ] && [[ $targets == *test_gpu_mpi_refit* ]]; then
    step "multi-GPU tests: ctest -L '^multigpu$' ($ngpu GPUs)"
    (cd "$build" && run timeout 600 ctest -L '^multigpu$' --output-on-failure --timeout 300) ||
        tests_rc=1
else
    say "multi-GPU tests not run: $ngpu GPU(s) visible (they need 2+ and an MPI build)"
fi

step "benchmark: bench_gpu_pack"
run timeout 180 "$build/bench_gpu_pack" --mib "${BENCH_MIB:-256}" --iters "${BENCH_ITERS:-20}" --check
bench_rc=$?

step "summary"
say "tests: $([ $tests_rc -eq 0 ] && echo passed || echo "FAILED (rc $tests_rc)")"
case $bench_rc in
0) say "bench: target met" ;;
1) say "bench: target MISSED (see the table) or error" ;;
77) say "bench: SKIPPED (no CUDA device)" ;;
*) say "bench: error (rc $bench_rc)" ;;
esac
grep -E "^# target|^ok   refit|gpu: .* cases|quantize: .* cases|^  (fp8|mxfp8) |tests passed|tests failed" "$log" | sed 's/^/  /' | tee -a "$log.summary"
say "total: $(($(date +%s) - t0)) s; log: $log"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
