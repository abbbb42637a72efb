#!/usr/bin/env bash
# The one-shot GPU check of the NCCL transport, for a lent machine with one CUDA GPU (an
# H200: 16 cores, CUDA 13, PyTorch as python3, NCCL only from the nvidia-nccl-cu13 wheel,
# libnccl.so.2 and no libnccl.so, no package registry, 600 s per command).
#
#   1. preflight (seconds): nvidia-smi, nvcc, nccl.h (>= 2.28), libnccl.so.2 (found and passed
#      to CMake explicitly) and its runtime version (ncclGetVersion, >= 2.28);
#   2. configure (Release, kernels for CUDA_ARCH) and build only what the run needs (-j JOBS);
#   3. the checks, each bounded (ctest --no-tests=error, its own timeout, all within BUDGET_S):
#      delta encode/apply kernels and op (byte for byte against the CPU codec; memcheck and
#      racecheck on them), copy kernel (random cases, large-index paths: > 2^31 elements, past 4 GiB, grid-stride
#      later passes), quantize kernel and op, the one-GPU refit and quantized refit, the stall
#      test (a spin kernel holds the stream; TIMEOUT within the bound), compute-sanitizer
#      memcheck on copy and quantize and racecheck/synccheck on quantize, the PyTorch
#      stream-order test (a long kernel writing the source just before execute),
#      bench_gpu_pack --check at BENCH_MIB (verified bytes and the bandwidth target),
#      bench_gpu_delta --check at DELTA_MIB (delta encode and apply against cudaMemcpy D2D at
#      0, 1, 5 and 100% changed, every case byte for byte against the CPU codec; target
#      >= 0.5 x D2D at <= 5% changed), and
#      the colocated refit over CUDA IPC: two processes on ONE GPU (mpirun -np 2, control
#      plane over MPI; needs an MPI build, else SKIP with the reason), and the real-DTensor
#      step (bench/fsdp_refit.py --check-real: PyTorch's own fully_shard + ColwiseParallel /
#      RowwiseParallel on a CPU gloo mesh, every local shard and placement compared with
#      tests/python/standin/dtensor.py, then refit into vLLM tp=2, every element checked);
#      with 2+ GPUs also the multi-rank refits (label multigpu), else they are listed as
#      not run: two ranks of one NCCL communicator cannot share a GPU.
# CPU-only tests are left out (CI runs them). Everything goes to $OUT/gpu-check.log, one line
# per check to $OUT/gpu-check.summary: PASS, FAIL, SKIP (cannot run here, with the reason) or
# NOTRUN (should have run and did not: a missing tool, the time budget); the exit status is
# non-zero on any FAIL or NOTRUN. A check that did not run is never reported as passed.
#
#   --dry-run (or --fake): the same steps on a machine without a GPU, against the fake CUDA
#   runtime + NCCL of tests/gpu: every check runs its CPU counterpart (the kernels' emulation,
#   the transport over the fake, bench_gpu_pack's verification with --no-target, the Python
#   stream-order test over the fake); what needs the device itself (nvidia-smi, the
#   sanitizers, multi-GPU) is SKIP with the command it would run.
#
# usage: tools/gpu-check.sh [--dry-run|--fake] [build-dir (default build-gpu)]
# env:   OUT (default <build-dir>/gpu-check-out), JOBS (default nproc), CUDA_ARCH (default 90),
#        BENCH_MIB (default 1024), DELTA_MIB (default 256),
#        BUDGET_S (default 540: the checks' total wall time),
#        NCCL_LIB / NCCL_INCLUDE (libnccl.so.2 and the directory of nccl.h; default: searched),
#        FORCE_GPU_DEPS=1 (build against .gpu-deps even where the machine has the libraries)
# On a lent GPU machine (no jansson, xxhash, cmocka, pkg-config; no registry): run
# tools/gpu-deps.sh here first and carry .gpu-deps: run(command="tools/gpu-check.sh",
# carry=[".gpu-deps"]). Without them the configure step fails there (seen 2026-12-05).
set -u -o pipefail

dry=0
case ${1:-} in
--dry-run | --fake) dry=1 && shift ;;
-h | --help) sed -n '2,46p' "$0" && exit 0 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
OUT=${OUT:-$build/gpu-check-out}
mkdir -p "$build" "$OUT/logs"
log=$OUT/gpu-check.log
sum=$OUT/gpu-check.summary
: >"$log"
: >"$sum"
t0=$(date +%s)
budget=${BUDGET_S:-540}
deadline=$((t0 + budget))
failed=0
detail_re=""

# A single-host check: NCCL's bootstrap on the loopback interface, its warnings in the log.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

say() { echo "$*" | tee -a "$log"; }
# result STATUS NAME SECONDS DETAIL: one summary line; FAIL and NOTRUN fail the run.
result() {
    printf '%-6s %-28s %5ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$sum" "$log"
    [ "$1" = FAIL ] || [ "$1" = NOTRUN ] && failed=1
    return 0
}

# check NAME BOUND_S CMD...: run CMD bounded by min(BOUND_S, what is left of the budget);
# PASS on exit 0 (unless its output says something was skipped), SKIP on 77 where a skip
# is legitimate (dry run only), else FAIL; NOTRUN when the budget is spent.
check() {
    local name=$1 bound=$2
    shift 2
    local left=$((deadline - $(date +%s)))
    if [ "$left" -lt 15 ]; then
        result NOTRUN "$name" 0 "time budget ($budget s) spent"
        return
    fi
    [ "$bound" -gt "$left" ] && bound=$left
    say ""
    say "== $name (bound ${bound} s, t=$(($(date +%s) - t0)) s): $*"
    local s rc
    s=$(date +%s)
    timeout -k 10 "$bound" "$@" >"$OUT/logs/$name.log" 2>&1
    rc=$?
    cat "$OUT/logs/$name.log" >>"$log"
    local dt=$(($(date +%s) - s)) last
    # the detail: the lines matching $detail_re (set by the caller), else the last line of
    # the program's own output (ctest -V prefixes it with "N: ")
    if [ -n "${detail_re:-}" ]; then
        last=$(grep -E "$detail_re" "$OUT/logs/$name.log" | tr '\n' ' ' | cut -c1-160)
    else
        last=$(grep -E '^[0-9]+: ' "$OUT/logs/$name.log" |
            grep -vE ': (Test command|Test timeout|Working Directory|Environment variables)' |
            grep -vE '^[0-9]+: [A-Z_]+=' | tail -1 | cut -c1-160)
        [ -n "$last" ] || last=$(grep -v '^\s*$' "$OUT/logs/$name.log" | tail -1 | cut -c1-160)
    fi
    detail_re=
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        result FAIL "$name" "$dt" "timed out after $bound s"
    elif [ $rc -eq 77 ] || grep -qE '\*\*\*Skipped|^SKIPPED|: SKIPPED' "$OUT/logs/$name.log"; then
        if [ $dry -eq 1 ] && [ $rc -eq 77 ]; then
            result SKIP "$name" "$dt" "$last"
        else
            result FAIL "$name" "$dt" "skipped (no device visible?): $last"
        fi
    elif [ $rc -ne 0 ]; then
        result FAIL "$name" "$dt" "exit $rc: $last"
    else
        result PASS "$name" "$dt" "$last"
    fi
}

# ctest_check NAME BOUND_S TEST: one ctest test by exact name.
ctest_check() {
    check "$1" "$2" ctest --test-dir "$build" -R "^$3\$" --no-tests=error -V --timeout "$2"
}

say "gpu-check: $([ $dry -eq 1 ] && echo "DRY RUN against the fake CUDA/NCCL" || echo "GPU run")," \
    "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown), out $OUT"

# ---- 1. preflight ------------------------------------------------------------------------
s=$(date +%s)
if [ $dry -eq 1 ]; then
    result SKIP nvidia-smi 0 "dry run: would run nvidia-smi --query-gpu=name,memory.total,driver_version"
    ngpu=0
elif nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader \
    >>"$log" 2>&1; then
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
    result PASS nvidia-smi 0 "$ngpu GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
else
    ngpu=0
    result FAIL nvidia-smi 0 "nvidia-smi failed or absent: no usable GPU"
fi
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
    result PASS nvcc 0 "$("$nvcc" --version | grep -o 'release [0-9.]*' | head -1) ($nvcc)"
else
    result FAIL nvcc 0 "nvcc not found (PATH, /usr/local/cuda/bin)"
fi
py=$(command -v python3 || true)
wheel_dir=""
if [ -n "$py" ]; then # the nvidia-nccl wheel's directory, when installed
    wheel_dir=$("$py" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
fi
nccl_lib=${NCCL_LIB:-}
for d in ${NCCL_HOME:+$NCCL_HOME/lib} ${wheel_dir:+$wheel_dir/lib} /usr/local/cuda/lib64 \
    /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [ -z "$nccl_lib" ] && [ -e "$d/libnccl.so.2" ] && nccl_lib=$d/libnccl.so.2
done
nccl_inc=${NCCL_INCLUDE:-}
for d in ${NCCL_HOME:+$NCCL_HOME/include} ${wheel_dir:+$wheel_dir/include} /usr/local/cuda/include \
    /usr/include; do
    [ -z "$nccl_inc" ] && [ -e "$d/nccl.h" ] && nccl_inc=$d
done
hdr_ver=""
if [ -n "$nccl_inc" ]; then
    hdr_ver=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' "$nccl_inc/nccl.h")
fi
ver_ok() { # "2.28.9" >= 2.28
    local maj=${1%%.*} rest=${1#*.}
    local min=${rest%%.*}
    [ -n "$maj" ] && [ -n "$min" ] && { [ "$maj" -gt 2 ] || { [ "$maj" -eq 2 ] && [ "$min" -ge 28 ]; }; }
}
if [ -n "$hdr_ver" ] && ver_ok "$hdr_ver"; then
    result PASS nccl-headers 0 "nccl.h $hdr_ver in $nccl_inc"
else
    result FAIL nccl-headers 0 "nccl.h >= 2.28 not found (got '${hdr_ver:-none}' in '${nccl_inc:-nowhere}'; set NCCL_INCLUDE)"
fi
rt_ver=""
if [ -n "$nccl_lib" ] && [ -n "$nccl_inc" ]; then
    probe=$OUT/nccl_version_probe
    printf '#include <stdio.h>\n#include <nccl.h>\nint main(void){int v=0;if(ncclGetVersion(&v))return 1;printf("%%d.%%d.%%d\\n",v/10000,v/100%%100,v%%100);return 0;}\n' >"$probe.c"
    if cc -I"$nccl_inc" -I/usr/local/cuda/include "$probe.c" "$nccl_lib" -Wl,-rpath,"$(dirname "$nccl_lib")" \
        -o "$probe" >>"$log" 2>&1; then
        rt_ver=$("$probe" 2>>"$log")
    fi
fi
if [ -n "$rt_ver" ] && ver_ok "$rt_ver"; then
    result PASS nccl-runtime 0 "ncclGetVersion $rt_ver ($nccl_lib)"
else
    result FAIL nccl-runtime 0 "libnccl.so.2 >= 2.28 not found or not loadable (got '${rt_ver:-none}' from '${nccl_lib:-nothing}'; set NCCL_LIB)"
fi
say "preflight: $(($(date +%s) - s)) s"
if [ $failed -ne 0 ]; then
    say "preflight failed: nothing built (see above)"
    say "total: $(($(date +%s) - t0)) s; log $log; summary $sum"
    exit 1
fi

# ---- 2. configure and build -----------------------------------------------------------------
# The build's libraries where the machine lacks them (a lent GPU machine has no jansson,
# xxhash, cmocka or pkg-config, and no registry): those tools/gpu-deps.sh gathered into
# .gpu-deps/root on a Debian machine and the run carried; FORCE_GPU_DEPS=1 uses them anyway.
deps=$root/.gpu-deps/root
deps_lib=$deps/usr/lib/x86_64-linux-gnu
pkg_cmake=()
have_libs() { command -v pkg-config >/dev/null && pkg-config --exists jansson libxxhash cmocka; }
if [ "${FORCE_GPU_DEPS:-0}" = 1 ] || ! have_libs; then
    if [ -x "$deps/usr/bin/pkgconf" ]; then
        export LD_LIBRARY_PATH=$deps_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export PKG_CONFIG_LIBDIR=$deps_lib/pkgconfig:$deps/usr/share/pkgconfig
        export PKG_CONFIG_SYSROOT_DIR=$deps
        pkg_cmake=(-DPKG_CONFIG_EXECUTABLE="$deps/usr/bin/pkgconf")
        say "libraries: jansson, xxhash, cmocka and pkgconf from $deps (tools/gpu-deps.sh)"
    else
        say "libraries: jansson, xxhash, cmocka or pkg-config missing, and no $deps: run"
        say "  tools/gpu-deps.sh on a Debian machine and carry .gpu-deps (configure will fail)"
    fi
fi
gpu_targets="test_nccl_delta_kernels test_nccl_box_copy test_nccl_large test_nccl_quant test_nccl_quant_refit test_gpu_refit"
gpu_targets="$gpu_targets test_gpu_timeout bench_gpu_pack bench_gpu_delta reshard_shared"
fake_targets="test_nccl_delta_kernels fake_nccl_delta_kernels test_nccl_box_copy test_nccl_large test_nccl_quant fake_nccl_quant fake_nccl_refit"
fake_targets="$fake_targets fake_nccl_quant_refit fake_nccl_timeout fake_bench_gpu_pack fake_bench_gpu_delta"
fake_targets="$fake_targets reshard_fakegpu_shared"
ipc_target=$([ $dry -eq 1 ] && echo fake_gpu_ipc_refit || echo test_gpu_ipc_refit)
targets=$([ $dry -eq 1 ] && echo "$fake_targets" || echo "$gpu_targets")
s=$(date +%s)
say ""
say "== configure + build ($targets)"
# shellcheck disable=SC2086 # $targets: a list of targets
if cmake -S "$root" -B "$build" -DRESHARD_WITH_NCCL=ON -DCMAKE_BUILD_TYPE=Release \
    -DRESHARD_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DRESHARD_NCCL_LIBRARY="$nccl_lib" \
    -DRESHARD_NCCL_INCLUDE_DIR="$nccl_inc" "${pkg_cmake[@]}" >>"$log" 2>&1 &&
    cmake --build "$build" -j "${JOBS:-$(nproc)}" --target $targets >>"$log" 2>&1; then
    result PASS build "$(($(date +%s) - s))" "$(grep -o 'reshard: CUDA.*' "$log" | tail -1)"
else
    result FAIL build "$(($(date +%s) - s))" "configure or build failed (see the log)"
    say "total: $(($(date +%s) - t0)) s; log $log; summary $sum"
    exit 1
fi
# the colocated CUDA IPC refit exists only in MPI builds (its control plane is MPI)
if cmake --build "$build" --target help | grep "$ipc_target" >/dev/null; then
    cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "$ipc_target" >>"$log" 2>&1 || true
fi
# ipc_check MODEL: the two-process refit on one GPU, or SKIP without an MPI build
ipc_check() {
    local exe=$build/tests/gpu/$ipc_target
    if [ -x "$exe" ] && command -v mpirun >/dev/null; then
        check ipc_colocated 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -np 2 "$exe" "$1"
    else
        result SKIP ipc_colocated 0 "no MPI build (mpirun, $ipc_target): the two-process CUDA IPC refit needs MPI for its control plane"
    fi
}
if [ $dry -eq 0 ] && [ "$ngpu" -ge 2 ] && cmake --build "$build" --target help | grep test_gpu_mpi_refit >/dev/null; then
    cmake --build "$build" -j "${JOBS:-$(nproc)}" --target test_gpu_mpi_refit >>"$log" 2>&1 || true
fi

# ---- 3. the checks ---------------------------------------------------------------------------
bench_mib=${BENCH_MIB:-1024}
pyenv=(env "RESHARD_LIBRARY=$build/libreshard.so" "PYTHONPATH=$root/python:$root/tests/python")
if [ $dry -eq 0 ]; then
    ctest_check delta_kernels 120 gpu_delta_kernels
    ctest_check delta_op 120 gpu_delta_op
    ctest_check box_copy 120 gpu_box_copy
    ctest_check large_index 180 gpu_large_index
    ctest_check quant 120 gpu_quant
    ctest_check quant_op 120 gpu_quant_op
    ctest_check refit 180 gpu_refit
    ctest_check quant_refit 120 gpu_quant_refit
    ctest_check stall_timeout 60 gpu_timeout
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
    if [ -n "$san" ]; then
        check memcheck_delta 120 "$san" --tool memcheck --error-exitcode 3 \
            "$build/tests/gpu/test_nccl_delta_kernels" --gpu --cases 60
        check racecheck_delta 120 "$san" --tool racecheck --error-exitcode 3 \
            "$build/tests/gpu/test_nccl_delta_kernels" --gpu --cases 20
        # the sequence that faulted on the first H100 (8 MiB, runs repeated on one scratch)
        check memcheck_delta_bench 180 "$san" --tool memcheck --error-exitcode 3 \
            "$build/bench_gpu_delta" --mib 8 --iters 2 --check --no-target
        check memcheck_box_copy 120 "$san" --tool memcheck --error-exitcode 3 \
            "$build/tests/gpu/test_nccl_box_copy" --gpu --cases 300
        check memcheck_quant 120 "$san" --tool memcheck --error-exitcode 3 \
            "$build/tests/gpu/test_nccl_quant" --gpu --cases 100
        check racecheck_quant 120 "$san" --tool racecheck --error-exitcode 3 \
            "$build/tests/gpu/test_nccl_quant" --gpu --cases 40
        check synccheck_quant 120 "$san" --tool synccheck --error-exitcode 3 \
            "$build/tests/gpu/test_nccl_quant" --gpu --cases 40
    else
        for c in memcheck_delta racecheck_delta memcheck_delta_bench memcheck_box_copy \
            memcheck_quant racecheck_quant synccheck_quant; do
            result NOTRUN $c 0 "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"
        done
    fi
    check torch_stream_order 120 "${pyenv[@]}" python3 "$root/tests/python/test_nccl_stream.py"
    detail_re='^(real FSDP2|fsdp_refit:|reshard speed)'
    check real_dtensor 240 "${pyenv[@]}" python3 "$root/bench/fsdp_refit.py" --check-real \
        --model qwen3-0.6b --layers 2 --train tp=2,fsdp=2 --infer tp=2 --iters 2
    ipc_check qwen3-0.6b
    detail_re='^# (verify|target)'
    check bench_gpu_pack 240 "$build/bench_gpu_pack" --mib "$bench_mib" --iters 10 --check
    detail_re='^# verify'
    check bench_gpu_delta_repeat 120 "$build/bench_gpu_delta" --mib 8 --iters 5 --check --no-target
    detail_re='^# (verify|target)'
    check bench_gpu_delta 180 "$build/bench_gpu_delta" --mib "${DELTA_MIB:-256}" --iters 10 --check
    if [ "$ngpu" -ge 2 ] && [ -x "$build/tests/gpu/test_gpu_mpi_refit" ]; then
        check multigpu 300 ctest --test-dir "$build" -L '^multigpu$' --no-tests=error \
            --output-on-failure --timeout 150
    else
        result SKIP multigpu 0 "$ngpu GPU(s) (or no MPI build): multi-rank NCCL refits need 2+ GPUs"
    fi
else
    ctest_check delta_kernels 120 fake_nccl_delta_kernels
    ctest_check delta_op 120 fake_nccl_delta_op
    ctest_check box_copy 300 nccl_box_copy_emulated
    ctest_check large_index 300 nccl_large_index_emulated
    ctest_check quant 300 nccl_quant_emulated
    ctest_check quant_op 300 fake_nccl_quant
    ctest_check refit 300 fake_nccl_refit
    ctest_check quant_refit 300 fake_nccl_quant_refit
    ctest_check stall_timeout 120 fake_nccl_timeout
    for c in "memcheck_delta test_nccl_delta_kernels --gpu --cases 60" \
        "racecheck_delta test_nccl_delta_kernels --gpu --cases 20" \
        "memcheck_delta_bench bench_gpu_delta --mib 8 --iters 2 --check" \
        "memcheck_box_copy test_nccl_box_copy --gpu --cases 300" \
        "memcheck_quant test_nccl_quant --gpu --cases 100" \
        "racecheck_quant test_nccl_quant --gpu --cases 40" \
        "synccheck_quant test_nccl_quant --gpu --cases 40"; do
        # shellcheck disable=SC2086 # a name and its command's words
        set -- $c
        result SKIP "$1" 0 "dry run: needs the GPU; would run compute-sanitizer --tool ${1%%_*} ${*:2}"
    done
    check torch_stream_order 120 env "RESHARD_LIBRARY=$build/tests/gpu/libreshard_fakegpu_shared.so" \
        RESHARD_TEST_FAKE_NCCL=1 "PYTHONPATH=$root/python:$root/tests/python" \
        /usr/bin/python3 "$root/tests/python/test_nccl_stream.py"
    # the real-DTensor step on the stand-in (torch 1.13 has no DTensor): the same program
    detail_re='^(real FSDP2|fsdp_refit:|reshard speed)'
    check real_dtensor 240 env "RESHARD_LIBRARY=$build/tests/gpu/libreshard_fakegpu_shared.so" \
        "PYTHONPATH=$root/python" /usr/bin/python3 "$root/bench/fsdp_refit.py" --check-real \
        --model qwen3-0.6b --layers 1 --train tp=2,fsdp=2 --infer tp=2 --iters 1
    detail_re='^# verify'
    check bench_gpu_pack 240 "$build/tests/gpu/fake_bench_gpu_pack" --mib 4 --iters 1 --check \
        --no-target
    detail_re='^# verify'
    check bench_gpu_delta_repeat 240 "$build/tests/gpu/fake_bench_gpu_delta" --mib 8 --iters 3 \
        --check --no-target
    detail_re='^# verify'
    check bench_gpu_delta 240 "$build/tests/gpu/fake_bench_gpu_delta" --mib 4 --iters 1 --check \
        --no-target
    ipc_check "$root/tests/mpi/configs/tiny-moe.json"
    result SKIP multigpu 0 "dry run: multi-rank NCCL refits need 2+ GPUs"
fi

say ""
say "== summary ($(($(date +%s) - t0)) s; log $log)"
cat "$sum"
grep -hE "^# (target|verify)|verified: |^copy |^stalled|^unmatched|cases, |quantize: |^word " \
    "$OUT"/logs/*.log 2>/dev/null | sed 's/^/  /' >>"$log"
[ $failed -eq 0 ]
