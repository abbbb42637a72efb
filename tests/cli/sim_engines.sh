#!/usr/bin/env bash
# Independent engines vs vLLM's own data parallelism, through the command line.
# An engine holds the whole model: with one engine per NVLink domain every domain
# must receive a whole copy (lower bound = engines x model bytes); one engine of
# tp=8,dp=2 splits every expert over its 16 ranks, so a domain needs less. The
# published case is modelled with engines and says what it approximates.
# usage: sim_engines.sh <reshard>
set -euo pipefail
cli=$1
py=/usr/bin/python3
[ -x "$py" ] || py=python3
get() { "$py" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
eng=$("$cli" plan --model qwen3-30b-a3b --train ep=8,pp=2,dp=8 --infer tp=8,engines=2 --system h100 --json)
vdp=$("$cli" plan --model qwen3-30b-a3b --train ep=8,pp=2,dp=8 --infer tp=8,dp=2 --system h100 --json)
m=$(get "d['model_bytes']" <<<"$eng")
lb_e=$(get "d['bytes_lower_bound']" <<<"$eng")
lb_d=$(get "d['bytes_lower_bound']" <<<"$vdp")
[ "$(get "d['infer_world']" <<<"$eng")" = 16 ] || { echo "engines=2 of tp=8: infer world not 16" >&2; exit 1; }
[ "$lb_e" = $((2 * m)) ] || { echo "2 engines: lower bound $lb_e, want 2 x $m" >&2; exit 1; }
[ "$lb_d" -lt "$lb_e" ] || { echo "vLLM dp=2: lower bound $lb_d not below the engines' $lb_e" >&2; exit 1; }
# dense: the same either way
a=$("$cli" plan --model qwen3-0.6b --train tp=2,dp=8 --infer tp=8,engines=2 --system h100 --json | get "d['bytes_lower_bound']")
b=$("$cli" plan --model qwen3-0.6b --train tp=2,dp=8 --infer tp=8,dp=2 --system h100 --json | get "d['bytes_lower_bound']")
[ "$a" = "$b" ] || { echo "dense: engines $a != vLLM dp $b" >&2; exit 1; }
# the published case: engines as it ran, its approximations listed
out=$("$cli" sim --case h100-qwen3-30b --json)
"$py" - "$m" <<PYEOF
import json, sys
c = json.loads('''$out''')["cases"][0]
assert c["infer"].endswith("engines=2"), c["infer"]
assert "convention=megatron-bridge" in c["train"], c["train"]
assert c["modelled_as_run"] is False and c["approximations"], c
assert c["bytes_lower_bound"] == 2 * int(sys.argv[1]), c["bytes_lower_bound"]
assert c["predicted_s"] >= c["bound_s"] > 0, c
PYEOF
# an unknown vLLM version is refused by name
err=$(mktemp)
trap 'rm -f "$err"' EXIT
if "$cli" plan --model qwen3-30b-a3b --train ep=8,pp=2,dp=8 --infer tp=8,vllm=0.9 2>"$err"; then
  echo "vllm=0.9 accepted" >&2; exit 1
fi
grep -q "vllm=0.9 is not a supported vLLM version" "$err" || { cat "$err" >&2; exit 1; }
# a case's own checkpoint dtype (nccl_m2n's dsv3 bench moves the FP8 checkpoint): the
# same lower bound as planning that dtype; --dtype overrides it; an unknown one is named
cases=$(mktemp)
trap 'rm -f "$err" "$cases"' EXIT
cat >"$cases" <<'JSON'
{"cases": [
 {"id": "fp8", "system": "h100", "model": "qwen3-0.6b", "train": {"tp": 2}, "infer": {"tp": 2}, "dtype": "fp8"},
 {"id": "bf16", "system": "h100", "model": "qwen3-0.6b", "train": {"tp": 2}, "infer": {"tp": 2}},
 {"id": "fp4", "system": "h100", "model": "qwen3-0.6b", "train": {"tp": 2}, "infer": {"tp": 2}, "dtype": "fp4"}
]}
JSON
want8=$("$cli" plan --model qwen3-0.6b --dtype fp8 --train tp=2 --infer tp=2 --json | get "d['model_bytes']")
want16=$("$cli" plan --model qwen3-0.6b --train tp=2 --infer tp=2 --json | get "d['model_bytes']")
"$py" - "$want8" "$want16" "$("$cli" sim --cases "$cases" --json)" "$("$cli" sim --cases "$cases" --dtype bf16 --json)" <<'PYEOF'
import json, sys
want8, want16 = int(sys.argv[1]), int(sys.argv[2])
c = {x["id"]: x for x in json.loads(sys.argv[3])["cases"]}
assert want8 < want16, (want8, want16)
assert c["fp8"]["model_bytes"] == want8, c["fp8"]
assert c["bf16"]["model_bytes"] == want16, c["bf16"]
assert 'case dtype "fp4" is not bf16 or fp8' in c["fp4"]["reason"], c["fp4"]
o = {x["id"]: x for x in json.loads(sys.argv[4])["cases"]}
assert o["fp8"]["model_bytes"] == want16, o["fp8"]  # --dtype wins
PYEOF
echo "engines: lower bound 2 x model ($lb_e) vs vLLM dp=2 $lb_d; the published case with engines and its approximations; case dtypes"
