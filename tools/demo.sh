#!/usr/bin/env bash
# The default demo: install and build when needed, then refit Qwen3-30B-A3B
# (first 2 layers of the shipped config) from a Megatron layout with TP, PP and
# EP on 8 ranks to a vLLM layout with TP 4 on 4 ranks, every byte verified,
# beside the built-in gather+broadcast baseline.
# usage: tools/demo.sh [extra reshard run flags, e.g. --json]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build >/dev/null
export OMPI_MCA_mpi_yield_when_idle=1
mpi_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
exec mpirun "${mpi_flags[@]}" -np 12 build/reshard run --model qwen3-30b-a3b --layers 2 \
  --train tp=2,pp=2,ep=4,dp=2 --infer tp=4,dp=1 --iters 3 --baseline "$@"
