#!/usr/bin/env bash
# The default demo: install and build when needed, then refit Qwen3-30B-A3B
# (the shipped config, first 2 layers: 3.74 GB of weights) from a Megatron
# layout with TP 2, PP 2 and EP 2 on 4 ranks to a vLLM layout with TP 4 on 4
# ranks, every byte verified, beside the built-in gather+broadcast baseline.
# About 8 GB; from a fresh clone on a 2-core machine with the packages installed
# 1.5-2.5 minutes (measured 84 s: 45 s build + 39 s demo, and 142 s; README);
# later runs skip the build.
# usage: tools/demo.sh [extra reshard run flags, e.g. --json]
set -euo pipefail
cd "$(dirname "$0")/.."
echo "demo: building reshard when needed (about 45 s the first time on 2 cores), then" >&2
echo "demo: the refit on 8 ranks, baseline beside (about 40 s on a 2-core machine)" >&2
tools/setup.sh build >/dev/null
export OMPI_MCA_mpi_yield_when_idle=1
mpi_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
exec mpirun "${mpi_flags[@]}" -np 8 build/reshard run --model qwen3-30b-a3b --layers 2 \
  --train tp=2,pp=2,ep=2,etp=1 --infer tp=4 --iters 3 --staging-mb 32 --baseline "$@"
