#!/usr/bin/env bash
# An emulated cluster on one machine, and a refit measured on it.
#
#   bench/cluster/refit.sh [--nic-mbit R] [--domain-size K] [--json] [--build DIR]
#                          -- <reshard run arguments>
#
#   --nic-mbit R     each rank's NIC, Mbit/s per direction (default 800)
#   --domain-size K  ranks per NVLink domain (default 2)
#   --json           one JSON object instead of the table
#   --build DIR      the build holding the reshard binary (default build; a
#                    relative path is taken from the repository root)
#   --job N          run N ranks of the command after -- instead of reshard run
#                    (an MPI program, e.g. /usr/bin/python3 bench/delta_adamw.py
#                    --mpi --domain-size 2): its output is printed as it is, its
#                    exit status is the script's; no plan, prediction or table
#
# Builds, as root, one network namespace per NVLink domain (rank r lives in
# domain r / K, as the planner assumes) and one "switch" namespace holding a
# bridge. Every rank gets its own NIC: a veth pair from its domain namespace
# to the bridge, limited to R Mbit/s in each direction by a tc token bucket
# (tbf) on both ends -- the rank's end shapes what it sends, the bridge's end
# what it receives. Ranks of one domain reach each other over the namespace's
# loopback, unlimited, as over NVLink: a packet to an address of the own
# namespace never leaves it. Source-address policy routing sends each rank's
# traffic out of its own NIC (Open MPI's TCP BTL binds its sockets to the
# address it published).
#
# One mpirun (in the switch namespace, its PMIx server listening on the
# bridge) starts every rank with `ip netns exec` in an MPMD context of its
# own, with btl tcp,self (no shared memory) and btl_tcp_if_include naming the
# rank's NIC. The job is `reshard run ... --baseline --raw --domain-size K
# --json`; beside it the script asks `reshard plan` for the lower bound and
# `reshard sim` for the prediction on the same emulated topology.
#
# Prints a table, or with --json one object with the keys reshard_s,
# baseline_s, raw_s, bound_s, sim_reshard_s, sim_baseline_s, verified,
# nic_mbit, domain_size (and the bytes the NICs' queues counted). With --delta
# (and --change-fraction F) among the run arguments the job measures the delta
# plan beside the dense one on the same updates (reshard run --delta): reshard_s
# is then the dense plan's, and delta_s, sim_delta_s, the network bytes of each
# method (delta_bytes_network, dense_bytes_network, baseline_bytes_network),
# delta_time_ratio, delta_network_ratio (dense / delta) and delta_wire_per_bound
# are added; with --verify-cost too, delta_no_verify_s (the same refits by a delta plan
# without verification, interleaved) and verify_cost (delta_s / delta_no_verify_s - 1).
# Everything is torn down on exit, failure or Ctrl-C; a leftover of a crashed
# run (namespaces named rshc-*) is removed first. A second run waits for
# the first (a lock file, at most 15 minutes). Exit status: 0 ok and verified, 1 a failed or
# unverified refit or setup, 2 bad usage.
set -euo pipefail

PREFIX=rshc
SW=$PREFIX-sw
SUBNET=10.77.0.0/16
SERVER_ADDR=10.77.255.1
LOCK=/run/reshard-cluster.lock

nic_mbit=800
domain_size=2
json=0
build=build
job_world=
run_args=()

usage() {
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
}
die() {
  echo "refit.sh: $*" >&2
  exit 1
}
bad() {
  echo "refit.sh: $*" >&2
  echo "(see 'bench/cluster/refit.sh --help')" >&2
  exit 2
}
say() { echo "refit.sh: $*" >&2; }

while [ $# -gt 0 ]; do
  case $1 in
  --nic-mbit) [ $# -ge 2 ] || bad "--nic-mbit needs a value"; nic_mbit=$2; shift 2 ;;
  --domain-size) [ $# -ge 2 ] || bad "--domain-size needs a value"; domain_size=$2; shift 2 ;;
  --build) [ $# -ge 2 ] || bad "--build needs a value"; build=$2; shift 2 ;;
  --json) json=1; shift ;;
  --job) [ $# -ge 2 ] || bad "--job needs a rank count"; job_world=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  --) shift; run_args=("$@"); break ;;
  *) bad "unknown option '$1'" ;;
  esac
done
[[ $nic_mbit =~ ^[0-9]+$ ]] && [ "$nic_mbit" -ge 1 ] || bad "--nic-mbit: '$nic_mbit' is not a positive integer (Mbit/s)"
[[ $domain_size =~ ^[0-9]+$ ]] && [ "$domain_size" -ge 1 ] || bad "--domain-size: '$domain_size' is not a positive integer"
[ ${#run_args[@]} -gt 0 ] || bad "give the reshard run arguments after --, e.g. -- --model qwen3-0.6b --train tp=2 --infer tp=4"
[ -z "$job_world" ] || { [[ $job_world =~ ^[0-9]+$ ]] && [ "$job_world" -ge 1 ]; } ||
  bad "--job: '$job_world' is not a positive rank count"
[ -z "$job_world" ] || [ $json = 0 ] || bad "--json is for reshard run jobs; give the job its own"

# The arguments `reshard plan` and `reshard sim` share with `reshard run`; those
# the script sets itself are refused.
plan_args=() # reshard plan's (and reshard sim's, but for --relay-mb)
sim_args=()
n_args=${#run_args[@]}
[ -z "$job_world" ] || n_args=0 # a job's arguments are its own
for ((i = 0; i < n_args; i++)); do
  a=${run_args[i]}
  case $a in
  --domain-size | --system | --json | --baseline | --raw | --transport | --domain-size=* | --system=* | --transport=*)
    bad "'$a' is set by refit.sh; leave it out of the reshard run arguments" ;;
  --model | --train | --infer | --layers | --dtype | --infer-dtype | --fp8-scale | --staging-mb | --relay-mb)
    [ $((i + 1)) -lt ${#run_args[@]} ] || bad "$a needs a value"
    plan_args+=("$a" "${run_args[i + 1]}")
    [ "$a" = --relay-mb ] || sim_args+=("$a" "${run_args[i + 1]}")
    i=$((i + 1)) ;;
  --model=* | --train=* | --infer=* | --layers=* | --dtype=* | --infer-dtype=* | --fp8-scale=* | --staging-mb=* | --relay-mb=* | --mtp)
    plan_args+=("$a")
    [ "${a%%=*}" = --relay-mb ] || sim_args+=("$a") ;;
  --delta) sim_args+=("$a") ;; # the prediction of a delta refit beside the dense one
  --change-fraction)
    [ $((i + 1)) -lt ${#run_args[@]} ] || bad "$a needs a value"
    sim_args+=("$a" "${run_args[i + 1]}")
    i=$((i + 1)) ;;
  --change-fraction=*) sim_args+=("$a") ;;
  esac
done
# The gather+broadcast baseline moves the source dtype only: a quantized
# inference side (--infer-dtype fp8|mxfp8) is measured without it.
quantized=0
for ((i = 0; i < ${#run_args[@]}; i++)); do
  case ${run_args[i]} in
  --infer-dtype) [ "${run_args[i + 1]:-bf16}" = bf16 ] || quantized=1 ;;
  --infer-dtype=*) [ "${run_args[i]#*=}" = bf16 ] || quantized=1 ;;
  esac
done
methods=(--baseline --raw)
[ $quantized = 0 ] || methods=(--raw)

# ---- refuse what cannot work --------------------------------------------------
[ "$(id -u)" = 0 ] || die "needs root (it creates network namespaces, veth pairs and tc queues); run it with sudo"
for tool in ip tc mpirun; do
  command -v $tool >/dev/null || die "'$tool' not found: install iproute2 (ip, tc) and Open MPI (mpirun)"
done
cd "$(dirname "$0")/../.."
case $build in /*) reshard=$build/reshard ;; *) reshard=$PWD/$build/reshard ;; esac
[ -x "$reshard" ] || die "$reshard not found: build first (tools/setup.sh $build)"
py=/usr/bin/python3
[ -x $py ] || py=python3
command -v $py >/dev/null || die "python3 is needed to read the JSON of reshard plan/run/sim"

exec 9>"$LOCK"
if ! flock -n 9; then
  say "another refit.sh holds $LOCK; waiting for it (at most 15 minutes)"
  flock -w 900 9 || die "another refit.sh still holds $LOCK after 15 minutes"
fi

# ---- what the job needs: world sizes, lower bound, prediction ----------------
jget() { $py -c 'import json,sys
o=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: o=o[k]
print(o)' "$@"; }

tmp=$(mktemp -d /tmp/reshard-cluster.XXXXXX)
mpirun_pid=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$mpirun_pid" ] && kill -0 "$mpirun_pid" 2>/dev/null; then
    kill -TERM "$mpirun_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$mpirun_pid" 2>/dev/null || true
  fi
  teardown
  rm -rf "$tmp"
  exit $rc
}

# Remove every rshc-* namespace: first end the processes still inside it (a
# crashed run's ranks), then the namespace (its veths and bridge go with it).
teardown() {
  local ns pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-" || true); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "$job_world" ]; then # a job of its own: N ranks, no plan
  world=$job_world
  train_world=$(((world + 1) / 2 / domain_size * domain_size))
  [ "$train_world" -ge "$domain_size" ] || train_world=$domain_size
  infer_world=$((world - train_world))
else
  say "planning (reshard plan --domain-size $domain_size)"
  "$reshard" plan "${plan_args[@]}" --domain-size "$domain_size" --json >"$tmp/plan.json" ||
    die "reshard plan refused the configuration (message above)"
  train_world=$(jget "$tmp/plan.json" train_world)
  infer_world=$(jget "$tmp/plan.json" infer_world)
  world=$((train_world + infer_world))
fi
[ "$world" -le 64 ] || die "$world ranks: more than this emulation is meant for (64)"
[ $((train_world % domain_size)) = 0 ] ||
  die "the training world ($train_world ranks) is not a whole number of domains of $domain_size; the emulated cluster gives each side whole domains"
ndomains=$(((world + domain_size - 1) / domain_size))

# ---- the cluster ----------------------------------------------------------------
addr() { echo "10.77.$(($1 / 250)).$(($1 % 250 + 1))"; } # rank -> its NIC's address
teardown                                                  # leftovers of a crashed run
say "building the cluster: $ndomains domains of $domain_size ranks, one ${nic_mbit} Mbit/s NIC per rank"
# token bucket: the rate, a burst of 1 ms at that rate (at least 64 KiB, a
# segmentation-offload packet), a drop-tail queue of 20 ms at that rate (this
# kernel offers no AQM under tbf; 200 ms queues lost fewer packets but added
# their delay to every MPI handshake and measured slower)
burst=$((nic_mbit * 1000 / 8))
[ $burst -ge 65536 ] || burst=65536
ip netns add $SW
ip -n $SW link set lo up
ip -n $SW link add br0 type bridge
ip -n $SW link set br0 mtu 9000
ip -n $SW addr add $SERVER_ADDR/16 dev br0
ip -n $SW link set br0 up
for ((d = 0; d < ndomains; d++)); do
  ns=$PREFIX-d$d
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  for opt in arp_ignore=1 arp_announce=2 rp_filter=0; do
    ip netns exec "$ns" sysctl -qw "net.ipv4.conf.all.${opt%=*}=${opt#*=}"
    ip netns exec "$ns" sysctl -qw "net.ipv4.conf.default.${opt%=*}=${opt#*=}"
  done
done
for ((r = 0; r < world; r++)); do
  ns=$PREFIX-d$((r / domain_size))
  a=$(addr $r)
  ip link add "nic$r" netns "$ns" mtu 9000 type veth peer name "p$r" netns $SW mtu 9000
  ip -n $SW link set "p$r" master br0
  ip -n $SW link set "p$r" up
  ip -n "$ns" addr add "$a/16" dev "nic$r" noprefixroute
  ip -n "$ns" link set "nic$r" up
  # the rank's traffic leaves by its own NIC
  ip -n "$ns" rule add from "$a" lookup $((100 + r))
  ip -n "$ns" route add $SUBNET dev "nic$r" src "$a" table $((100 + r))
  [ $((r % domain_size)) != 0 ] || ip -n "$ns" route add $SUBNET dev "nic$r" src "$a"
  ip netns exec "$ns" tc qdisc replace dev "nic$r" root tbf rate "${nic_mbit}mbit" burst "$burst" latency 20ms
  ip netns exec $SW tc qdisc replace dev "p$r" root tbf rate "${nic_mbit}mbit" burst "$burst" latency 20ms
done
# every NIC reaches the switch before the job starts: a TCP connection from
# the NIC's address to a closed port of the bridge is refused (reachable), not
# timed out (2 s each)
for ((r = 0; r < world; r++)); do
  ip netns exec "$PREFIX-d$((r / domain_size))" $py -c '
import socket, sys
s = socket.socket(); s.settimeout(2); s.bind((sys.argv[1], 0))
try: s.connect((sys.argv[2], 9))
except ConnectionRefusedError: sys.exit(0)
except OSError: sys.exit(1)' "$(addr $r)" $SERVER_ADDR ||
    die "rank $r's NIC $(addr $r) cannot reach the switch at $SERVER_ADDR"
done
nic_counters() { # bytes that left every NIC (rank side) and reached every NIC (switch side)
  local s=0 r ns b
  for ((r = 0; r < world; r++)); do
    ns=$PREFIX-d$((r / domain_size))
    b=$(ip netns exec "$ns" tc -s qdisc show dev "nic$r" | awk '/Sent/ {print $2; exit}')
    s=$((s + b))
  done
  echo $s
}
nic_before=$(nic_counters)

# ---- the job ----------------------------------------------------------------------
contexts=()
for ((r = 0; r < world; r++)); do
  [ $r = 0 ] || contexts+=(:)
  contexts+=(-np 1 ip netns exec "$PREFIX-d$((r / domain_size))" env OMPI_MCA_btl_tcp_if_include="nic$r")
  if [ -n "$job_world" ]; then
    contexts+=(env RESHARD_LIBRARY="$(dirname "$reshard")/libreshard.so" PYTHONPATH="$PWD/python" "${run_args[@]}")
  else
    contexts+=("$reshard" run "${run_args[@]}" --domain-size "$domain_size" "${methods[@]}" --json)
  fi
done
if [ -n "$job_world" ]; then
  say "running $world ranks of: ${run_args[*]}"
else
  say "running $world ranks (train $train_world, infer $infer_world): reshard, ${methods[*]}"
fi
set +e
ip netns exec $SW env PMIX_MCA_ptl_tcp_if_include=br0 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun --bind-to none --mca btl tcp,self --mca pml ob1 --mca oob_tcp_if_include br0 \
  --mca btl_tcp_if_include $SUBNET "${contexts[@]}" >"$tmp/run.json" 2>"$tmp/run.err" &
mpirun_pid=$!
wait $mpirun_pid
run_rc=$?
mpirun_pid=
set -e
nic_bytes=$(($(nic_counters) - nic_before))
if [ -n "$job_world" ]; then # the job's own output and status
  cat "$tmp/run.json"
  [ $run_rc = 0 ] || { cat "$tmp/run.err" >&2; die "the job failed (mpirun exit status $run_rc)"; }
  say "bytes through the NICs' queues (tc): $((nic_bytes / 1000000)) MB"
  exit 0
fi
if [ $run_rc != 0 ] || ! $py -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/run.json" 2>/dev/null; then
  cat "$tmp/run.err" >&2
  die "the refit job failed (mpirun exit status $run_rc)"
fi

# ---- the prediction -------------------------------------------------------------
nic_gbps=$(awk -v m="$nic_mbit" 'BEGIN { printf "%g", m / 1000 }')
# a delta refit's CPU work at the rates of this machine with every rank working at once,
# as the emulated ranks share its cores
[[ " ${sim_args[*]} " != *" --delta "* ]] || sim_args+=(--measure-codec --codec-ranks "$world")
"$reshard" sim "${sim_args[@]}" --system emulated --domain-size "$domain_size" \
  --nic-gbps "$nic_gbps" --json >"$tmp/sim.json" || die "reshard sim failed (message above)"

$py - "$tmp/plan.json" "$tmp/run.json" "$tmp/sim.json" "$nic_mbit" "$domain_size" "$json" \
  "$nic_bytes" "${run_args[*]}" <<'EOF'
import json, sys
plan, run, sim = (json.load(open(p)) for p in sys.argv[1:4])
mbit, k, as_json, nic_bytes, args = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1", int(sys.argv[7]), sys.argv[8]
nic_Bps = mbit * 1e6 / 8
bound_bytes = max(plan["nic_send_bound_bytes"], plan["nic_recv_bound_bytes"])
case = sim["cases"][0]
delta = "dense_seconds" in run  # reshard run --delta: the delta plan beside the dense one
o = {
    "reshard_s": run["dense_seconds"] if delta else run["seconds"],
    "baseline_s": run.get("baseline_seconds"),
    "raw_s": run["raw_seconds"],
    "bound_s": bound_bytes / nic_Bps,
    "sim_reshard_s": case["predicted_s"],
    "sim_baseline_s": case["baseline_predicted_s"] if "baseline_seconds" in run else None,
    "verified": bool(run["ok"]) and run["wrong"] == 0 and run.get("dense_wrong", 0) == 0 and
                run.get("baseline_wrong", 0 if "baseline_seconds" not in run else 1) == 0,
    "nic_mbit": mbit,
    "domain_size": k,
    "iters": run["iters"],
    "model_bytes": run["model_bytes"],
    "train_world": run["train_world"],
    "infer_world": run["infer_world"],
    "bytes_network": run["bytes_network"],
    "nic_bound_bytes": bound_bytes,
    "nic_queue_bytes": nic_bytes,
}
if delta:
    d = run["delta"]
    o.update({
        "delta_s": run["seconds"],
        "sim_delta_s": case["delta"]["predicted_s"],
        "change_fraction": d["change_fraction"],
        "measured_fraction": d["measured_fraction"],
        "delta_bytes_network": run["bytes_network"],
        "dense_bytes_network": run["dense_bytes_network"],
        "baseline_bytes_network": run.get("baseline_bytes_network"),
        "delta_wire_bytes": d["wire_bytes"],
        "delta_bound_bytes": d["bound_bytes"],
        "delta_wire_per_bound": d["wire_per_bound"],
        "delta_wire_per_dense": d["wire_per_dense"],
        "delta_time_ratio": run["dense_seconds"] / run["seconds"],
        "delta_network_ratio": d["network_ratio"],
        "sim_delta_network_bytes": case["delta"]["bytes_network"],
    })
    if "no_verify_seconds" in d:  # --verify-cost: a trusting delta plan beside
        o.update({"delta_no_verify_s": d["no_verify_seconds"], "verify_cost": d["verify_cost"]})
if as_json:
    print(json.dumps(o, indent=2))
    sys.exit(0 if o["verified"] else 1)
r = o["reshard_s"]
print(f"refit on an emulated cluster: {args}")
print(f"  {o['train_world']} + {o['infer_world']} ranks, NVLink domains of {k} (one network "
      f"namespace each, loopback inside), one {mbit} Mbit/s NIC per rank ({nic_Bps/1e6:.0f} MB/s "
      f"each way); {o['model_bytes']/1e6:.1f} MB of weights; median of {o['iters']} refits")
print(f"  {'':22} {'measured s':>10} {'sim s':>8} {'sim/meas':>8} {'/ bound':>8}")
def row(name, meas, pred):
    s = f"  {name:22} {meas:10.3f}"
    s += f" {pred:8.3f} {pred/meas:8.2f}" if pred is not None else f" {'-':>8} {'-':>8}"
    print(s + f" {meas/o['bound_s']:8.2f}")
if delta:
    row("delta", o["delta_s"], o["sim_delta_s"])
if "delta_no_verify_s" in o:
    row("delta, no verify", o["delta_no_verify_s"], None)
row("reshard (dense)" if delta else "reshard", r, o["sim_reshard_s"])
if o["baseline_s"] is not None:
    row("baseline", o["baseline_s"], o["sim_baseline_s"])
row("raw MPI (plan's pairs)", o["raw_s"], None)
print(f"  {'lower bound':22} {o['bound_s']:10.3f}   (busiest NIC's lower-bound bytes "
      f"{bound_bytes/1e6:.1f} MB / {nic_Bps/1e6:.0f} MB/s)")
vs = f"baseline / reshard {o['baseline_s']/r:.2f}x; " if o["baseline_s"] is not None else ""
print(f"  {vs}reshard / lower bound {r/o['bound_s']:.2f}x; "
      f"bytes through the NICs' queues (tc) {nic_bytes/1e6:.1f} MB")
if delta:
    bl = o["baseline_bytes_network"]
    print(f"  delta at {o['change_fraction']:g} changed (measured {o['measured_fraction']:.5f}): "
          f"dense / delta time {o['delta_time_ratio']:.2f}x, dense / delta network bytes "
          f"{o['delta_network_ratio']:.2f}x ({o['delta_bytes_network']/1e6:.2f} MB vs {o['dense_bytes_network']/1e6:.2f} MB"
          + (f"; baseline {bl/1e6:.2f} MB" if bl is not None else "") + ")")
    if o["baseline_s"] is not None:
        print(f"  baseline / delta {o['baseline_s']/o['delta_s']:.2f}x; "
              f"sim's delta network bytes {o['sim_delta_network_bytes']/1e6:.2f} MB")
    print(f"  delta wire bytes {o['delta_wire_per_dense']:.4f} of dense, "
          f"{o['delta_wire_per_bound']:.4f} x the encoding's bound for the measured fraction")
print("  OK: every refit verified" if o["verified"] else "  FAILED: a refit did not verify")
sys.exit(0 if o["verified"] else 1)
EOF
