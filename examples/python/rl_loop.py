#!/usr/bin/env python3
"""An RL post-training loop's refit, in separately started processes: Megatron-named
trainers run an AdamW step, then refit vLLM-named inference workers; every element
the workers hold is checked after every step.

    /usr/bin/python3 examples/python/rl_loop.py            # qwen3-0.6b, 1 layer, 4 processes
    /usr/bin/python3 examples/python/rl_loop.py --model qwen3-0.6b --layers 2 \
        --train tp=2 --infer tp=1,dp=2 --steps 3
    /usr/bin/python3 examples/python/rl_loop.py --delta --lr 1e-6   # delta refits
    /usr/bin/python3 examples/python/rl_loop.py --fail-at 2 --fail-phase update  # a refit fails
    /usr/bin/python3 examples/python/rl_loop.py --model tiny-moe.json --train tp=1,dp=2,ep=2 \
        --infer tp=2,ep=on,redundant=2 --eplb   # a Qwen3-MoE config.json; EPLB moves

This process starts train world + infer world processes of itself (--role), which
meet in one torch.distributed gloo group over a FileStore. Trainer rank r holds what
Megatron-Core's rank r holds (conventions.megatron_state_dict), as bf16 parameters of
a module wrapped twice (DistributedDataParallel over Float16Module: names unwrapped by
reshard.integrations.MegatronChunks), with fp32 master weights and torch.optim.AdamW
over them, as Megatron's mixed-precision optimizer keeps them. Each step: the gradient
of sum(0.25 m^2 + 0.25 m) over the masters (0.5 m + 0.25), an AdamW step, masters copied into
the bf16 parameters, then ReshardTrainer.send_weights(). Each worker holds vLLM's
parameters (conventions.vllm_state_dict), filled with a sentinel byte, receives
through WorkerCore (the engine-independent body of the vLLM backend), driven over
the control-plane stand-in (control_plane.py) as vLLM's worker is. After each step
it compares every element, padding rows included, with the oracle: the HF-level
weights through the same AdamW steps (elementwise, so a slice steps as the whole
tensor does), laid out by vLLM's rules, and that WorkerCore.weights_state() says
the weights are committed at that step. With --delta each refit after the first
sends only the words that changed (docs/delta.md); the step lines add the bytes the
trainers put on the wire beside what a dense refit sends. Exit status 0 only when
every element of every step matched.

The control plane follows vLLM's newest weight-transfer API: the trainer's version
goes to finish_weight_update(weight_version), and the client reports it as vLLM's
weight version once every worker finished. --fail-at K --fail-phase start|update|
finish makes inference rank 0 fail refit K there: the workers run vLLM's failure
path (abort_weight_update, reset_weight_update_target), every trainer rank raises,
the reported version stays K-1, and refit K+1 is checked element by element as
every other.

--eplb (a Qwen3-MoE config, infer spec ep=on): each engine's workers hold vLLM's EPLB
state on their MoE layers (the views FusedMoE.set_eplb_state leaves: rows of
logical_to_physical_map and logical_replica_count) and, before every odd refit, their
engine's balancer moves experts (a map of that refit, other per engine; every slot
whose expert changed overwritten with the sentinel); the refit follows the live maps
(init info eplb=True) and every slot is checked against the expert its map names."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for _p in (os.path.join(ROOT, "python"), HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

ADAMW = {"lr": 1e-3, "betas": (0.9, 0.95), "weight_decay": 0.01, "foreach": False}

# A rank's own report of its failure on stderr ("train rank 1: ReshardError: ..."), as
# main() prints it; anything else there is torch's or gloo's logging (e.g. gloo's warning
# on a host whose name does not resolve), not the rank's error.
OWN_LINE = re.compile(r"^(train|infer) rank \d+: ")


def adamw(args: Any) -> Dict[str, Any]:
    return dict(ADAMW, lr=args.lr)


def adamw_step(params: List[Any], opt: Any) -> None:
    """One step of ``opt`` on the gradient of sum(0.25 m^2 + 0.25 m): 0.5 m + 0.25."""
    for m in params:
        m.grad = m.detach() * 0.5 + 0.25
    opt.step()


class SteppedWeights:
    """The oracle: conventions.Weights after ``steps`` AdamW steps; rows(name, a, b)
    steps only those rows (each piece its own fp32 master and optimizer)."""

    def __init__(self, base: Any, opt_args: Dict[str, Any]) -> None:
        import torch
        self.torch, self.base, self.cfg, self.shapes = torch, base, base.cfg, base.shapes
        self.opt_args = opt_args
        self.steps = 0
        self.pieces: Dict[Tuple[str, int, int], Tuple[Any, Any]] = {}

    def rows(self, name: str, a: int = 0, b: Any = None) -> Any:
        b = self.shapes[name][0] if b is None else b
        key = (name, a, b)
        if key not in self.pieces:
            m = self.torch.nn.Parameter(self.base.rows(name, a, b).float())
            opt = self.torch.optim.AdamW([m], **self.opt_args)
            for _ in range(self.steps):
                adamw_step([m], opt)
            self.pieces[key] = (m, opt)
        return self.pieces[key][0].detach().to(self.torch.bfloat16)

    def __getitem__(self, name: str) -> Any:
        return self.rows(name)

    def advance(self) -> None:
        self.steps += 1
        for m, opt in self.pieces.values():
            adamw_step([m], opt)


def megatron_rank(args: Any, rank: int) -> Tuple[Any, Any, Any]:
    """Megatron-Core rank ``rank``'s shards (conventions.megatron_state_dict) as bf16
    parameters of a GPT module, their fp32 masters and torch.optim.AdamW over them:
    (masters by name, optimizer, module)."""
    import torch
    import conventions
    from modules import module_of
    w = conventions.Weights(conventions.load_config(args.model, args.layers))
    state = conventions.megatron_state_dict(w, args.train, rank)
    masters = {n: torch.nn.Parameter(t.float()) for n, t in state.items()}
    opt = torch.optim.AdamW(list(masters.values()), **adamw(args))
    return masters, opt, module_of({n: t.clone() for n, t in state.items()})


def trainer(args: Any, rank: int, world: int) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist
    from control_plane import StoreClient
    from modules import Wrapped
    from reshard.integrations import ReshardTrainer, ReshardTrainerInitInfo
    from reshard.integrations.ranks import sizes

    masters, opt, gpt = megatron_rank(args, rank)
    model = Wrapped(Wrapped(gpt))  # DDP(Float16Module(GPTModel)): names "module.module."
    s = sizes(args.train, args.infer)
    clients = None
    ctrl = dist.FileStore(os.path.join(args.dir, "control"), -1)
    if rank == 0:
        clients = [StoreClient(ctrl, e, s.tp * s.dp, args.timeout * 2) for e in range(s.engines)]
    info = ReshardTrainerInitInfo(model=args.model, train=args.train, infer=args.infer,
                                  layers=args.layers, store_path=os.path.join(args.dir, "refit"),
                                  timeout_s=args.timeout, rank=rank, delta=args.delta,
                                  eplb=args.eplb)
    t0 = time.perf_counter()
    engine = ReshardTrainer.trainer_init(info, client=clients, source=model)
    init_s = time.perf_counter() - t0
    params = dict(gpt.named_parameters())
    steps: List[Any] = []
    failed: List[Any] = []
    versions: List[Any] = []  # engine 0's reported weight version after each refit
    for k in range(args.steps):
        t0 = time.perf_counter()
        adamw_step(list(masters.values()), opt)
        with torch.no_grad():
            for n, m in masters.items():
                params[n].copy_(m)  # the bf16 model parameters from the fp32 masters
        t1 = time.perf_counter()
        if args.kill_at == k + 1 and args.kill_rank == rank:
            os._exit(9)
        if args.fail_at == k + 1:  # inference rank 0 fails this refit: every rank raises
            try:
                engine.send_weights()
            except Exception as e:  # noqa: BLE001 - the injected failure, named
                failed.append((k + 1, "%s: %s" % (type(e).__name__, e)))
                if rank == 0:
                    versions.append(clients[0].weight_version)
                continue
            raise RuntimeError("refit %d was to fail at %s on inference rank 0, and did not"
                               % (k + 1, args.fail_phase))
        engine.send_weights()
        if rank == 0:
            versions.append(clients[0].weight_version)
        t2 = time.perf_counter()
        d = engine.plan.delta_info() if args.delta else {"wire_bytes": 0, "stream_bytes": 0}
        steps.append((t1 - t0, t2 - t1, d["wire_bytes"], d["stream_bytes"]))
        ctrl.wait(["checked/%d/%d" % (k + 1, i) for i in range(s.world - s.train_world)],
                  datetime.timedelta(seconds=args.timeout * 8))  # untimed: the workers' check
    if rank == 0:
        for c in clients:
            c.shutdown()
    engine.shutdown()
    return {"role": "train", "rank": rank, "init_s": init_s, "steps": steps, "failed": failed,
            "versions": versions}


def worker(args: Any, rank: int, world: int) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist
    import conventions
    import reshard
    from control_plane import serve
    from modules import module_of
    from reshard.integrations import WorkerCore
    from reshard.integrations.ranks import sizes

    s = sizes(args.train, args.infer)
    i = rank - s.train_world  # inference rank
    w = conventions.Weights(conventions.load_config(args.model, args.layers))
    shapes = conventions.vllm_state_dict(w, args.infer, i, reshard.SENTINEL_BYTE)
    model = module_of({n: torch.empty_like(t).view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
                       .view(t.dtype) for n, t in shapes.items()})
    if args.fault and i == 0:
        break_model(model, args.fault)
    local = i % (s.tp * s.dp)
    pc = SimpleNamespace(tensor_parallel_size=s.tp, data_parallel_size=s.dp,
                         data_parallel_index=local // s.tp, rank=local % s.tp,
                         pipeline_parallel_size=1)
    if args.fault == "rank" and i == 0:
        pc.data_parallel_index, pc.rank = (1, 0) if s.tp == 1 else (0, 1)
    core = (_live_eplb_worker() if args.eplb else WorkerCore)(model, pc, "cpu")
    engine = i // (s.tp * s.dp)
    if args.eplb:
        follow_balancer(core, model, w.cfg, args.infer, i, engine)
    oracle = SteppedWeights(w, adamw(args))
    report = {"role": "infer", "rank": rank, "checked": 0, "wrong": 0, "steps": 0,
              "versions": [], "failures": []}
    reported: Dict[str, Any] = {"version": None}  # vLLM's get_weight_version()

    def failed(method: str, err: str) -> bool:  # vLLM's worker path ran (abort, reset)
        report["failures"].append([method, reported["version"], core.weights_state()["state"]])
        return "injected" not in err  # any other failure ends this worker with its error

    def check(weight_version: Any) -> None:  # after finish_weight_update's reply
        reported["version"] = weight_version
        report["versions"].append(weight_version)
        while oracle.steps < int(weight_version):  # a failed refit's step is skipped
            oracle.advance()
        expect = conventions.vllm_state_dict(
            oracle, args.infer, i, reshard.SENTINEL_BYTE,
            balancer_map(w.cfg, args.infer, engine, oracle.steps) if args.eplb else None)
        live = dict(model.named_parameters())
        assert sorted(live) == sorted(expect)
        for n, e in expect.items():
            bad = conventions.mismatches(live[n].detach(), e)
            if bad:
                print("infer rank %d step %d: %s: %d of %d elements wrong"
                      % (i, oracle.steps, n, bad, e.numel()), file=sys.stderr)
            report["wrong"] += bad
            report["checked"] += e.numel()
        state = core.weights_state()  # the engine may generate: committed at this step
        if state["state"] != "committed" or state["version"] != oracle.steps:
            print("infer rank %d step %d: weights_state %s, expected committed at %d"
                  % (i, oracle.steps, state, oracle.steps), file=sys.stderr)
            report["wrong"] += 1
        report["steps"] += 1
        ctrl.set("checked/%d/%d" % (oracle.steps, i), "1")

    receive = core.receive_weights

    def receive_or_die(update: Any) -> None:  # --kill-rank: this worker dies mid-refit
        if args.kill_at == update.version and args.kill_rank == rank:
            os._exit(9)
        receive(update)

    core.receive_weights = receive_or_die
    if args.fail_at and i == 0:
        inject_failure(core, model, args.fail_at, args.fail_phase)

    ctrl = dist.FileStore(os.path.join(args.dir, "control"), -1)
    serve(ctrl, i // (s.tp * s.dp), local, core, on_finish=check, timeout_s=args.timeout * 8,
          driver_timeout_s=args.timeout, on_error=failed)
    return report


def balancer_map(cfg: Dict[str, Any], infer: str, engine: int, refit: int) -> List[List[int]]:
    """The EPLB map (physical_to_logical rows, one per MoE layer) engine ``engine``'s
    balancer holds at refit ``refit`` (0: vLLM's initial map). It moves before every
    odd refit (epoch m = (refit + 1) // 2): slot p < E holds expert
    (p + m + layer + engine) % E, redundant slot E + j expert (3*m + j + layer) % E."""
    E, red = cfg["E"], int(conventions_spec(infer).get("redundant", 0))
    m = (refit + 1) // 2
    if m == 0:
        return [list(range(E)) + [j % E for j in range(red)] for _ in range(cfg["L"])]
    return [[(p + m + layer + engine) % E for p in range(E)] +
            [(3 * m + j + layer) % E for j in range(red)] for layer in range(cfg["L"])]


def conventions_spec(infer: str) -> Dict[str, str]:
    import conventions
    return conventions.parse_spec(infer)


def follow_balancer(core: Any, model: Any, cfg: Dict[str, Any], infer: str, i: int,
                    engine: int) -> None:
    """vLLM's EPLB state on ``model``'s MoE layers (one [L, E, R+1] logical_to_physical
    tensor and [L, E] replica counts; each layer's experts module holds its views, as
    FusedMoE.set_eplb_state leaves them), rearranged before every refit to
    balancer_map's map of that refit; slots whose expert changed are overwritten
    with the sentinel (vLLM moves the weights: the refit rewrites them anyway)."""
    import torch
    import reshard
    E, L = cfg["E"], cfg["L"]
    red = int(conventions_spec(infer).get("redundant", 0))
    l2p = torch.full((L, E, red + 1), -1, dtype=torch.int64)
    count = torch.zeros((L, E), dtype=torch.int64)
    for k in range(L):
        model.get_submodule("model.layers.%d.mlp.experts" % k).eplb_state = SimpleNamespace(
            logical_to_physical_map=l2p[k], logical_replica_count=count[k])
    held = [balancer_map(cfg, infer, engine, 0)]

    def rearrange(rows: List[List[int]]) -> None:
        s = conventions_spec(infer)
        per = (E + red) // (int(s.get("tp", 1)) * int(s.get("dp", 1)))
        first = (i % (int(s.get("tp", 1)) * int(s.get("dp", 1)))) * per
        live = dict(model.named_parameters())
        l2p.fill_(-1)
        count.zero_()
        for k, row in enumerate(rows):
            for p, e in enumerate(row):
                l2p[k, e, count[k, e]] = p
                count[k, e] += 1
            pre = "model.layers.%d.mlp.experts.routed_experts." % k
            for j in range(per):
                if held[0][k][first + j] != row[first + j]:
                    for n in ("w13_weight", "w2_weight"):
                        live[pre + n].data[j].view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
        held[0] = rows

    rearrange(held[0])
    start = core.start_weight_update

    def start_after_balancing() -> None:  # the balancer ran while the engine served
        rearrange(balancer_map(cfg, infer, engine, core.attempted + 1))
        start()
    core.start_weight_update = start_after_balancing


def _live_eplb_worker() -> Any:
    from reshard.integrations import WorkerCore
    from reshard.integrations.vllm import vllm_eplb_map

    class LiveEplbWorker(WorkerCore):
        """WorkerCore reading the live map as the vLLM shell's worker does."""

        def live_eplb_map(self) -> Any:
            return vllm_eplb_map(self.model)
    return LiveEplbWorker


def inject_failure(core: Any, model: Any, refit: int, phase: str) -> None:
    """Make ``core`` (inference rank 0) fail refit ``refit`` at ``phase``: start
    (before opening it), update (after writing, with a stretch of its first
    parameter overwritten: weights torn part way) or finish (before closing it)."""
    import torch
    import reshard
    method = {"start": "start_weight_update", "update": "update_weights",
              "finish": "finish_weight_update"}[phase]
    orig = getattr(core, method)
    calls = [0]

    def wrapped(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        if calls[0] != refit:
            return orig(*a, **k)
        if phase == "update":
            orig(*a, **k)
            p = next(iter(model.parameters()))
            p.data.view(torch.uint8)[:1].fill_(reshard.SENTINEL_BYTE)
        raise RuntimeError("injected %s failure of refit %d on inference rank 0"
                           % (phase, refit))
    setattr(core, method, wrapped)


def break_model(model: Any, fault: str) -> None:
    """Make inference rank 0's model differ from the layout (for the bad-input tests):
    reshape, dtype, missing, extra, or rank (its vLLM rank mapping)."""
    import torch
    name, p = next(iter(model.named_parameters()))
    *path, leaf = name.split(".")
    owner = model
    for part in path:
        owner = getattr(owner, part)
    if fault == "reshape":
        owner.register_parameter(leaf, torch.nn.Parameter(p.detach().reshape(-1),
                                                          requires_grad=False))
    elif fault == "dtype":
        owner.register_parameter(leaf, torch.nn.Parameter(p.detach().float(),
                                                          requires_grad=False))
    elif fault == "missing":
        delattr(owner, leaf)
    elif fault == "extra":
        owner.register_parameter("stale_copy", torch.nn.Parameter(p.detach().clone(),
                                                                  requires_grad=False))


def spawn(script: str, argv: List[str], roles: List[str], timeout_s: float,
          prefix: str) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Start one process of ``script`` per rank (``--role roles[r] --rank r --dir D``,
    D a fresh directory), wait at most timeout_s for each; return (the JSON reports
    they printed, one error line per process that failed: its own report, else how
    it ended)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        procs = [subprocess.Popen([sys.executable, os.path.abspath(script)] + argv +
                                  ["--role", role, "--rank", str(r), "--dir", d],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r, role in enumerate(roles)]
        reports, errors = [], []
        for r, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            reports += [json.loads(x) for x in out.splitlines() if x.startswith("{")]
            if p.returncode != 0:
                own = [x for x in err.splitlines() if OWN_LINE.match(x)]
                errors.append("rank %d: %s" % (r, own[-1] if own else
                                                "exit status %d" % p.returncode))
    return reports, errors


def report_rank(side: str, rank: int, body: Any) -> None:
    """One rank's process of spawn(): run ``body()`` and print its report as the JSON
    line spawn() reads; on an exception print this rank's one line (``side rank N:
    Type: message``, what OWN_LINE matches) and leave at once (a control-plane call may
    still wait on a dead peer)."""
    try:
        rep = body()
    except Exception as e:  # noqa: BLE001 - reported as this rank's one line
        print("%s rank %d: %s: %s" % (side, rank, type(e).__name__, e),
              file=sys.stderr, flush=True)
        os._exit(1)
    print(json.dumps(rep), flush=True)


def launch(args: Any, argv: List[str]) -> int:
    """Start every process of the refit, print what they report, return the status."""
    from reshard.integrations.ranks import sizes
    s = sizes(args.train, args.infer)
    roles = ["train" if r < s.train_world else "infer" for r in range(s.world)]
    reports, errors = spawn(__file__, argv, roles, args.timeout * 20, "rl_loop.")
    return summarize(args, s, reports, errors)


def summarize(args: Any, s: Any, reports: List[Dict[str, Any]], errors: List[str]) -> int:
    for e in errors:
        print("rl_loop: %s" % e, file=sys.stderr)
    trainers = [r for r in reports if r["role"] == "train"]
    workers = [r for r in reports if r["role"] == "infer"]
    checked = sum(r["checked"] for r in workers)
    wrong = sum(r["wrong"] for r in workers)
    landed = [k for k in range(1, args.steps + 1) if k != args.fail_at]
    if trainers:
        print("%s (%d layer(s)), Megatron %s -> vLLM %s, %d processes, init %.2f s"
              % (args.model, args.layers, args.train, args.infer, s.world,
                 max(r["init_s"] for r in trainers)))
        for k in range(min(len(r["steps"]) for r in trainers)):
            opt = max(r["steps"][k][0] for r in trainers)
            refit = max(r["steps"][k][1] for r in trainers)
            wire = sum(r["steps"][k][2] for r in trainers)
            dense = sum(r["steps"][k][3] for r in trainers)
            print("step %d: AdamW %.3f s, refit %.3f s: refit %.0f%% of the step%s"
                  % (landed[k], opt, refit, 100.0 * refit / (opt + refit),
                     ", delta %.2f of %.2f MB on the wire (%.1f%%)"
                     % (wire / 1e6, dense / 1e6, 100.0 * wire / dense) if dense else ""))
    # a worker checks each refit it finished: with a failure injected at finish on
    # inference rank 0, the others may have finished that refit whole before it failed
    may = [landed, list(range(1, args.steps + 1))] if args.fail_phase == "finish" \
        else [landed]
    ok = not errors and len(workers) == s.world - s.train_world and checked > 0 and \
        wrong == 0 and all([int(v) for v in r["versions"]] in may for r in workers)
    want = [str(k if k != args.fail_at else k - 1) for k in range(1, args.steps + 1)]
    rank0 = [r for r in trainers if r["rank"] == 0]
    ok = ok and bool(rank0) and rank0[0]["versions"] == want
    if rank0:
        print("vLLM's reported version after each refit: %s"
              % ", ".join(str(v) for v in rank0[0]["versions"]))
    if args.fail_at:  # every trainer rank saw it fail; the worker that failed ran the
        # abort path while vLLM's version was still the refit before
        before = str(args.fail_at - 1)
        fails = [f for r in workers for f in r["failures"]]
        ok = ok and all([k for k, _ in r["failed"]] == [args.fail_at] for r in trainers) \
            and bool(fails) and all(f[1] == before for f in fails)
        for r in trainers:
            for k, e in r["failed"]:
                print("refit %d failed on train rank %d (as injected): %s" % (k, r["rank"], e))
        print("failed on the inference side: %s" % ", ".join(
            "%s (weights then %s)" % (f[0], f[2]) for f in fails))
    n_infer = s.world - s.train_world
    print("%d of %d inference rank(s) reported: %d elements checked over %d step(s)%s, "
          "%d wrong: %s" % (len(workers), n_infer, checked, len(landed),
                            " (refit %d failed as injected)" % args.fail_at
                            if args.fail_at else "", wrong, "OK" if ok else "FAILED"))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-0.6b", help="shipped dense model or config.json")
    ap.add_argument("--layers", type=int, default=1, help="keep the first K decoder layers")
    ap.add_argument("--train", default="tp=2", help="Megatron spec")
    ap.add_argument("--infer", default="tp=2", help="vLLM spec")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps, each then refit")
    ap.add_argument("--delta", action="store_true", help="delta refits (docs/delta.md)")
    ap.add_argument("--lr", type=float, default=ADAMW["lr"], help="AdamW learning rate")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds any wait may take")
    ap.add_argument("--fault", choices=["reshape", "dtype", "missing", "extra", "rank"],
                    help="break inference rank 0's model: every rank must refuse at init")
    ap.add_argument("--kill-rank", type=int, default=-1, help="this rank dies ...")
    ap.add_argument("--kill-at", type=int, default=0, help="... as refit K (from 1) starts")
    ap.add_argument("--fail-at", type=int, default=0,
                    help="inference rank 0 fails refit K (from 2) ...")
    ap.add_argument("--fail-phase", choices=["start", "update", "finish"], default="update",
                    help="... at this phase: every rank raises, vLLM's version stays, the "
                    "next refit is whole and exact")
    ap.add_argument("--eplb", action="store_true",
                    help="MoE with ep=on: each engine's EPLB map moves before every refit "
                    "and the refit follows it (init info eplb=True)")
    ap.add_argument("--role", choices=["train", "infer"], help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from reshard.integrations.ranks import sizes
    world = sizes(args.train, args.infer).world
    if args.kill_rank >= 0 or args.kill_at:
        if not 0 <= args.kill_rank < world:
            ap.error("--kill-rank %d: the ranks are 0..%d" % (args.kill_rank, world - 1))
        if not 1 <= args.kill_at <= args.steps:
            ap.error("--kill-at %d: the refits are 1..%d (--steps)" % (args.kill_at, args.steps))
    if args.fail_at and not 2 <= args.fail_at < args.steps:
        ap.error("--fail-at %d: a refit after the first and before the last (2..%d)"
                 % (args.fail_at, args.steps - 1))
    if args.role is None:
        return launch(args, sys.argv[1:])
    report_rank(args.role, args.rank,
                lambda: (trainer if args.role == "train" else worker)(args, args.rank, world))
    return 0


if __name__ == "__main__":
    sys.exit(main())
