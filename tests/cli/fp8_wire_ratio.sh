#!/usr/bin/env bash
# BF16 training -> FP8 inference moves about half the bytes of a BF16 refit:
# for qwen3-30b-a3b (MoE, 8 layers) and deepseek-v3 (MLA + MoE, 6 layers) the
# network bytes of `reshard plan --json --infer-dtype fp8` (and mxfp8) over
# those of the same plan with --infer-dtype bf16 lie in [0.50, 0.60]: the
# quantized weights cross as e4m3 (half of bf16) plus 1/4096 (fp8 128x128
# fp32 scales) or 1/32 (mxfp8 e8m0) of a byte per element; the embedding,
# output layer, norms and router stay bf16. The fp8 plan also moves exactly
# the bytes its inference side holds (every block quantized on the sender).
# usage: fp8_wire_ratio.sh <reshard>
set -euo pipefail
cli=$1
key() { grep -o "\"$1\": [0-9]*" | head -1 | grep -o '[0-9]*$'; }
check() {
  local what=$1
  shift
  local bf16 fp8 mx lb
  bf16=$("$cli" plan "$@" --infer-dtype bf16 --json | key bytes_network)
  out=$("$cli" plan "$@" --infer-dtype fp8 --json)
  fp8=$(key bytes_network <<<"$out")
  lb=$(key bytes_lower_bound <<<"$out")
  mx=$("$cli" plan "$@" --infer-dtype mxfp8 --json | key bytes_network)
  awk -v w="$what" -v b="$bf16" -v f="$fp8" -v m="$mx" -v l="$lb" 'BEGIN {
    rf = f / b; rm = m / b
    printf "%s: bf16 %.0f, fp8 %.0f (%.3f), mxfp8 %.0f (%.3f) network bytes\n", w, b, f, rf, m, rm
    if (rf < 0.50 || rf > 0.60 || rm < 0.50 || rm > 0.60) { print "ratio outside [0.50, 0.60]"; exit 1 }
    if (f != l) { print "fp8 network bytes differ from the lower bound " l; exit 1 }
  }'
}
check "qwen3-30b-a3b, 8 layers" --model qwen3-30b-a3b --layers 8 \
  --train tp=2,ep=4,etp=1,pp=2,dp=2 --infer tp=4,ep=on
check "deepseek-v3, 6 layers" --model deepseek-v3 --layers 6 \
  --train tp=2,ep=8,etp=1,pp=2,dp=4 --infer tp=8,ep=on
