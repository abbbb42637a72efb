#!/usr/bin/env bash
# BF16 -> BF16 and BF16 -> FP8 refits of one model side by side on the
# emulated cluster (refit.sh), in one run: the same ranks, NICs and layouts,
# the inference side holding bf16 weights, then e4m3 + 128x128 fp32 block
# scales quantized on the wire (--infer-dtype fp8), then (with --mxfp8) MXFP8.
#
#   bench/cluster/refit_fp8.sh [refit.sh options] -- <reshard run arguments>
#
# Prints one row per inference dtype: measured seconds (median refit), network
# bytes, the ratio to the bf16 refit, and whether every element verified.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
opts=()
dtypes=(bf16 fp8)
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case $1 in
  --mxfp8) dtypes+=(mxfp8); shift ;;
  --json) shift ;; # refit.sh is always asked for JSON here
  *) opts+=("$1"); shift ;;
  esac
done
[ "${1:-}" = -- ] || { echo "usage: refit_fp8.sh [refit.sh options] [--mxfp8] -- <reshard run arguments>" >&2; exit 2; }
shift
tmp=$(mktemp -d /tmp/refit-fp8.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for d in "${dtypes[@]}"; do
  "$here/refit.sh" "${opts[@]}" --json -- "$@" --infer-dtype "$d" >"$tmp/$d.json"
done
/usr/bin/python3 - "$tmp" "${dtypes[@]}" <<'PY'
import json, sys
tmp, dtypes = sys.argv[1], sys.argv[2:]
rows = {d: json.load(open(f"{tmp}/{d}.json")) for d in dtypes}
b = rows["bf16"]
print(f"refit on the emulated cluster, {b['train_world']} + {b['infer_world']} ranks, "
      f"{b['nic_mbit']} Mbit/s NICs, domains of {b['domain_size']}, median of {b['iters']} refits")
print(f"  {'infer dtype':12} {'seconds':>9} {'/ bf16':>7} {'net MB':>9} {'/ bf16':>7} {'bound s':>8} {'sim s':>7}  verified")
for d, o in rows.items():
    print(f"  {d:12} {o['reshard_s']:9.3f} {o['reshard_s']/b['reshard_s']:7.2f} "
          f"{o['bytes_network']/1e6:9.1f} {o['bytes_network']/b['bytes_network']:7.2f} "
          f"{o['bound_s']:8.3f} {o['sim_reshard_s']:7.3f}  {o['verified']}")
sys.exit(0 if all(o["verified"] for o in rows.values()) else 1)
PY
