#!/usr/bin/env python3
"""verl's trainer loop with the ``reshard`` checkpoint engine, in separately started
processes: actor workers (Megatron-shaped shards) run AdamW steps, rollout workers
(vLLM-shaped) receive every sync through verl's CheckpointEngineWorker and server
adapter; every element the rollouts hold is checked after every sync.

    /usr/bin/python3 examples/python/verl_loop.py          # qwen3-0.6b, 1 layer, 4 processes
    /usr/bin/python3 examples/python/verl_loop.py --model M.json --train tp=2 --infer tp=1,dp=2 --delta

verl itself is not installed here: its classes are the stand-in of
tests/python/standin/verl (dongha-yoon/verl@d6f2c522; docs/verl.md), and the
single controller's CheckpointEngineManager.update_weights is run over a FileStore
(standin verl/_manager.py): prepare on every worker, build_topology,
init_process_group, the actors' send_weights beside the rollouts' receive_weights
into the server adapter, finalize; before every sync, as verl does. The engine is
chosen by verl's config only: ``checkpoint_engine.backend: reshard``,
``custom_backend_module: reshard.integrations.verl``, its ``engine_kwargs.reshard``
(model, specs, store).

The loop is ray_trainer.fit's: global_steps 0 syncs the initial weights; then each
step an AdamW step on the actor (fp32 masters of the rank's Megatron shards, copied
into the bf16 parameters of its model chunks, which verl's Megatron engine holds as
``engine.module``), then ``update_weights(global_steps)``. Each rollout worker then
compares every element of its vLLM-named parameters (padding rows included: the
engine's rank-local tensors carry zeros there) with the oracle of rl_loop.py (the HF
weights through the same AdamW steps, laid out by vLLM's rules,
examples/python/conventions.py), checks that the server got ``global_steps``, and
then sleeps and wakes (the weights freed, then new memory), as verl's
sleep_replicas / wake_up do between syncs. Each actor also reports how many full
tensors it pulled from verl's ``get_per_tensor_param()`` generator: 0 (nothing
gathered). Exit status 0 only when every element of every sync matched."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
import time
from types import SimpleNamespace
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STANDIN = os.path.join(ROOT, "tests", "python", "standin")
for _p in (os.path.join(ROOT, "python"), HERE, STANDIN, os.path.join(ROOT, "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from rl_loop import (ADAMW, SteppedWeights, adamw, adamw_step, megatron_rank,  # noqa: E402
                     report_rank, spawn)

ACTORS = {"megatron": "Megatron", "fsdp": "FSDP2"}
ROLLOUTS = {"vllm": "vLLM", "sglang": "SGLang"}
DEFAULT_TRAIN = {"megatron": "tp=2", "fsdp": "fsdp=2"}
DEFAULT_INFER = {"vllm": "tp=2", "sglang": "engine=sglang,tp=2"}


def verl_config(args: Any) -> Any:
    """The part of verl's config the checkpoint engine reads
    (actor_rollout_ref.rollout.checkpoint_engine)."""
    kwargs = {"model": args.model, "train": args.train, "infer": args.infer,
              "layers": args.layers, "store_path": os.path.join(args.dir, "refit"),
              "timeout_s": args.timeout, "delta": args.delta}
    ce = SimpleNamespace(backend="reshard", custom_backend_module="reshard.integrations.verl",
                         update_weights_bucket_megabytes=512, engine_kwargs={"reshard": kwargs})
    return SimpleNamespace(rollout=SimpleNamespace(name=args.rollout, checkpoint_engine=ce))


def manager(args: Any) -> Any:
    import torch.distributed as dist
    from reshard.integrations.ranks import sizes
    from verl._manager import StoreManager
    from verl.checkpoint_engine.base import CheckpointEngineRegistry
    s = sizes(args.train, args.infer)
    ctrl = dist.FileStore(os.path.join(args.dir, "control"), -1)
    cls = CheckpointEngineRegistry.get("reshard")
    return ctrl, StoreManager(ctrl, s.train_world, s.world - s.train_world, cls,
                              args.timeout * 2)


def fsdp_rank(args: Any, rank: int) -> Tuple[Any, Any, Any, Dict[str, Any]]:
    """FSDP2 rank ``rank``'s module: the HF parameters as DTensors placed by PyTorch's
    rules for the train spec (bench/fsdp_refit.py's stand-in module,
    tests/python/standin/dtensor.py), fp32 masters of its bf16 local shards and
    torch.optim.AdamW over them: (masters, optimizer, module, local shards by name)."""
    import torch
    import conventions
    from fsdp_refit import sizes_of, standin_module
    w = conventions.Weights(conventions.load_config(args.model, args.layers))
    module = standin_module({n: w[n] for n in w.shapes}, rank, *sizes_of(args.train))
    local = {n: p.to_local() for n, p in module.named_parameters()}
    masters = {n: torch.nn.Parameter(t.float()) for n, t in local.items()}
    opt = torch.optim.AdamW(list(masters.values()), **adamw(args))
    return masters, opt, module, local


def actor(args: Any, rank: int) -> Dict[str, Any]:
    import torch
    import conventions
    from modules import Wrapped
    from reshard.integrations.ranks import sizes
    from verl.workers.engine_workers import ActorWorker, TrainingEngine

    w = conventions.Weights(conventions.load_config(args.model, args.layers))
    if args.actor == "fsdp":  # verl's FSDP engine.module: the FSDP2 module
        masters, opt, module, params = fsdp_rank(args, rank)
    else:  # verl's Megatron engine.module: the model chunks, DDP(Float16Module(GPTModel))
        masters, opt, module = megatron_rank(args, rank)
        params = dict(module.named_parameters())
    if args.fault == "actor" and rank == 1:  # a shard the layout does not have
        module.register_parameter("stale_copy", torch.nn.Parameter(torch.zeros(3)))
    if args.actor == "megatron":
        module = [Wrapped(Wrapped(module))]
    engine = TrainingEngine(module, lambda: ((n, w[n]) for n in w.shapes))
    # verl's actor worker imports custom_backend_module and builds the engine
    worker = ActorWorker(verl_config(args), engine, rank)
    ctrl, mgr = manager(args)
    s = sizes(args.train, args.infer)
    syncs: List[Any] = []
    refused: List[str] = []
    for global_steps in range(args.steps + 1):  # 0: ray_trainer.fit's initial sync
        t0 = time.perf_counter()
        if global_steps:
            adamw_step(list(masters.values()), opt)
        with torch.no_grad():  # the bf16 parameters from the fp32 masters
            for n, m in masters.items():
                params[n].copy_(m)
        t1 = time.perf_counter()
        metrics = mgr.sync(worker, "actor", rank, global_steps=global_steps)
        syncs.append((global_steps, t1 - t0, time.perf_counter() - t1,
                      metrics.get("reshard/wire_bytes", 0), metrics.get("reshard/stream_bytes", 0)))
        ctrl.wait(["checked/%d/%d" % (global_steps, i) for i in range(s.world - s.train_world)],
                  datetime.timedelta(seconds=args.timeout * 8))
        if args.fault == "repeat" and global_steps == 1:
            refused.append(repeated_sync(mgr, worker, "actor", rank))
    worker.checkpoint_engine.close()
    return {"role": "actor", "rank": rank, "syncs": syncs, "gathered": engine.gathered,
            "refused": refused}


def repeated_sync(mgr: Any, worker: Any, side: str, index: int) -> str:
    """--fault repeat: verl's manager runs global_steps 1 again; every worker must refuse
    it at once (INVALID_ARG, nothing sent) instead of the rollouts alone refusing while
    the actors wait out a timeout that ends their communicator. Returns the outcome."""
    from reshard import ReshardError, Status
    try:
        mgr.sync(worker, side, index, global_steps=1)
    except ReshardError as e:
        return "refused" if e.status == Status.INVALID_ARG else "failed: %s" % e
    return "synced"  # wrong: a repeated step was taken


def vllm_rollout(args: Any, i: int, config: Any) -> Any:
    """Rollout worker ``i`` beside a vLLM worker: the vLLM-named parameters of its rank
    (sentinel-filled) behind verl's vLLM ServerAdapter; the engine receives into its own
    tensors and the adapter loads them. Its ``worker`` (the CheckpointEngineWorker),
    ``model`` (the live parameters), ``expected(oracle)`` (what they must hold),
    ``problems(global_steps)`` (the version the server and engine report, as a list of
    problems) and ``close()``."""
    import torch
    import conventions
    import reshard
    from modules import module_of
    from verl.checkpoint_engine.base import CheckpointEngineWorker
    from verl.workers.rollout.vllm_rollout import ServerAdapter

    w = conventions.Weights(conventions.load_config(args.model, args.layers))
    shapes = conventions.vllm_state_dict(w, args.infer, i, reshard.SENTINEL_BYTE)
    model = module_of({n: torch.empty_like(t).view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
                       .view(t.dtype) for n, t in shapes.items()})
    adapter = ServerAdapter(model)
    ce_worker = CheckpointEngineWorker(config.rollout, None, adapter)

    def problems(global_steps: int) -> List[str]:
        st = ce_worker.checkpoint_engine.weights_state()
        if adapter.global_steps != global_steps or st["state"] != "committed" or \
                st["version"] != global_steps:
            return ["server global_steps %s, engine %s" % (adapter.global_steps, st)]
        return []

    return SimpleNamespace(worker=ce_worker, model=model, problems=problems,
                           expected=lambda o: conventions.vllm_state_dict(o, args.infer, i, 0),
                           close=lambda: None)


def sglang_rollout(args: Any, i: int, config: Any) -> Any:
    """Rollout worker ``i`` beside TP rank t of SGLang server e (i = e * tp + t): the
    TP worker (slime_loop.sglang_tp_worker: SGLang's parameters, sentinel-filled, its
    ModelRunner with reshard's loader) answers its server's requests on a thread of
    this process (SGLang runs it in its scheduler process: the stand-in's serve());
    the worker beside TP rank 0 holds the server (the stand-in's HTTP routes), which
    verl's SGLang ServerAdapter talks to. The engine drives the server; the TP worker
    receives in place. As vllm_rollout returns."""
    import threading
    import torch.distributed as dist
    import reshard
    from reshard.integrations.ranks import sizes
    from reshard.integrations.sglang import receiver_of
    from slime_loop import sglang_state_dict, sglang_tp_worker
    from sglang._server import StandinServer, serve
    from verl.checkpoint_engine.base import CheckpointEngineWorker
    from verl.workers.rollout.sglang_rollout.sglang_rollout import ServerAdapter

    s = sizes(args.train, args.infer)
    model, tp_worker, engine, t = sglang_tp_worker(args, i, "reshape" if args.fault == "live"
                                                    and i == 0 else None)
    ctrl = dist.FileStore(os.path.join(args.dir, "control"), -1)
    thread = threading.Thread(target=serve, args=(ctrl, engine, tp_worker),
                              kwargs={"timeout_s": args.timeout * 8}, daemon=True)
    thread.start()
    server = StandinServer(ctrl, engine, s.per_engine, args.timeout * 3) if t == 0 else None
    adapter = ServerAdapter(server)
    ce_worker = CheckpointEngineWorker(config.rollout, None, adapter)

    def problems(global_steps: int) -> List[str]:
        st = receiver_of(model).weights_state()
        out = [] if st["state"] == "committed" and st["version"] == global_steps + 1 else \
            ["TP worker %s (refit round %d)" % (st, global_steps + 1)]
        if server is not None and (server.weight_version != str(global_steps) or
                                   adapter.global_steps != global_steps):
            out.append("SGLang weight_version %r, global_steps %s"
                       % (server.weight_version, adapter.global_steps))
        return out

    def close() -> None:
        if server is not None:
            server.close()  # every TP worker's scheduler returns
        thread.join(args.timeout)

    return SimpleNamespace(worker=ce_worker, model=model, problems=problems, close=close,
                           expected=lambda o: sglang_state_dict(o, s.per_engine, t,
                                                                reshard.SENTINEL_BYTE))


def rollout(args: Any, rank: int) -> Dict[str, Any]:
    import conventions
    from reshard.integrations.ranks import sizes

    s = sizes(args.train, args.infer)
    i = rank - s.train_world
    config = verl_config(args)
    if args.fault == "rollout" and i == 0:  # engine_kwargs that disagree with the actors'
        config.rollout.checkpoint_engine.engine_kwargs["reshard"]["infer"] = \
            args.infer.replace("tp=%d" % s.tp, "tp=%d" % (s.tp * 2))
    r = sglang_rollout(args, i, config) if args.rollout == "sglang" else \
        vllm_rollout(args, i, config)
    ctrl, mgr = manager(args)  # after verl's worker imported custom_backend_module
    w = conventions.Weights(conventions.load_config(args.model, args.layers))
    oracle = SteppedWeights(w, dict(ADAMW, lr=args.lr))
    report = {"role": "rollout", "rank": rank, "checked": 0, "wrong": 0, "syncs": 0,
              "refused": []}
    for global_steps in range(args.steps + 1):
        mgr.sync(r.worker, "rollout", i, global_steps=global_steps)
        while oracle.steps < global_steps:
            oracle.advance()
        expect = r.expected(oracle)
        live = dict(r.model.named_parameters())
        assert sorted(live) == sorted(expect)
        for n, e in expect.items():
            bad = conventions.mismatches(live[n].detach(), e)
            if bad:
                print("rollout rank %d global_steps %d: %s: %d of %d elements wrong"
                      % (i, global_steps, n, bad, e.numel()), file=sys.stderr)
                report.setdefault("bad", []).append([global_steps, n, bad])
            report["wrong"] += bad
            report["checked"] += e.numel()
        for problem in r.problems(global_steps):
            print("rollout rank %d global_steps %d: %s" % (i, global_steps, problem),
                  file=sys.stderr)
            report["wrong"] += 1
        report["syncs"] += 1
        if args.sleep and args.rollout == "vllm":  # sleep_replicas, then wake_up
            asyncio.run(r.worker.server_adapter.release())
            asyncio.run(r.worker.server_adapter.resume(tags=["weights"]))
        ctrl.set("checked/%d/%d" % (global_steps, i), "1")
        if args.fault == "repeat" and global_steps == 1:  # then step 2 is checked as usual
            report["refused"].append(repeated_sync(mgr, r.worker, "rollout", i))
    # every rollout worker checked the last sync before any closes (an SGLang server's
    # shutdown ends every TP worker's receiver)
    ctrl.wait(["checked/%d/%d" % (args.steps, j) for j in range(s.world - s.train_world)],
              datetime.timedelta(seconds=args.timeout * 8))
    r.worker.checkpoint_engine.close()
    r.close()
    return report


def launch(args: Any, argv: List[str]) -> int:
    from reshard.integrations.ranks import sizes
    s = sizes(args.train, args.infer)
    roles = ["actor" if r < s.train_world else "rollout" for r in range(s.world)]
    reports, errors = spawn(__file__, argv, roles, args.timeout * 20, "verl_loop.")
    for e in errors:
        print("verl_loop: %s" % e, file=sys.stderr)
    for r in reports:
        for g, n, bad in r.get("bad", [])[:4]:
            print("verl_loop: rank %d, global_steps %d: %s: %d element(s) wrong"
                  % (r["rank"], g, n, bad), file=sys.stderr)
    actors = [r for r in reports if r["role"] == "actor"]
    rollouts = [r for r in reports if r["role"] == "rollout"]
    print("%s (%d layer(s)), verl actor %s %s -> rollout %s %s, backend reshard, %d processes"
          % (args.model, args.layers, ACTORS[args.actor], args.train, ROLLOUTS[args.rollout],
             args.infer, s.world))
    if actors:
        for k in range(min(len(r["syncs"]) for r in actors)):
            g = actors[0]["syncs"][k][0]
            opt = max(r["syncs"][k][1] for r in actors)
            sync = max(r["syncs"][k][2] for r in actors)
            wire = sum(r["syncs"][k][3] for r in actors)
            dense = sum(r["syncs"][k][4] for r in actors)
            print("global_steps %d: AdamW %.3f s, update_weights %.3f s%s"
                  % (g, opt, sync, ", delta %.2f of %.2f MB on the wire" % (wire / 1e6, dense / 1e6)
                     if dense else ""))
        print("full tensors pulled from verl's get_per_tensor_param(): %d"
              % sum(r["gathered"] for r in actors))
    checked = sum(r["checked"] for r in rollouts)
    wrong = sum(r["wrong"] for r in rollouts)
    ok = not errors and len(rollouts) == s.world - s.train_world and \
        len(actors) == s.train_world and checked > 0 and wrong == 0 and \
        all(r["gathered"] == 0 for r in actors) and \
        all(r["syncs"] == args.steps + 1 for r in rollouts) and \
        all(r["refused"] == (["refused"] if args.fault == "repeat" else []) for r in reports)
    if args.fault == "repeat":
        print("a repeated global_steps 1: %s" % ", ".join(
            "rank %d %s" % (r["rank"], "/".join(r["refused"]) or "not run") for r in reports))
    print("%d of %d rollout rank(s) reported: %d elements checked over %d sync(s), %d wrong: %s"
          % (len(rollouts), s.world - s.train_world, checked, args.steps + 1, wrong,
             "OK" if ok else "FAILED"))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-0.6b", help="shipped dense model or config.json")
    ap.add_argument("--layers", type=int, default=1, help="keep the first K decoder layers")
    ap.add_argument("--actor", choices=sorted(ACTORS), default="megatron",
                    help="the actor's training engine: Megatron model chunks or an FSDP2 module")
    ap.add_argument("--rollout", choices=sorted(ROLLOUTS), default="vllm",
                    help="verl's rollout.name: vLLM or SGLang servers")
    ap.add_argument("--train", help="the actor's spec (default %s)" % DEFAULT_TRAIN)
    ap.add_argument("--infer", help="the rollout's spec (default %s)" % DEFAULT_INFER)
    ap.add_argument("--steps", type=int, default=2, help="training steps after global_steps 0")
    ap.add_argument("--delta", action="store_true", help="delta refits (docs/delta.md)")
    ap.add_argument("--lr", type=float, default=ADAMW["lr"], help="AdamW learning rate")
    ap.add_argument("--no-sleep", dest="sleep", action="store_false",
                    help="rollouts do not sleep and wake between syncs")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds any wait may take")
    ap.add_argument("--fault", choices=["actor", "rollout", "live", "repeat"],
                    help="actor rank 1 holds a parameter the layout lacks, rollout rank 0 "
                    "was configured with another infer spec, or (SGLang) rollout rank 0's "
                    "live model holds a parameter of another shape: every rank refuses; "
                    "repeat: verl runs global_steps 1 twice, every rank refuses the second "
                    "(nothing sent) and the next step syncs")
    ap.add_argument("--role", choices=["actor", "rollout"], help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.train = args.train or DEFAULT_TRAIN[args.actor]
    args.infer = args.infer or DEFAULT_INFER[args.rollout]
    if args.fault == "live" and args.rollout != "sglang":
        ap.error("--fault live: an SGLang rollout's live model (a vLLM rollout's engine "
                 "receives into its own tensors)")
    if args.role is None:
        return launch(args, sys.argv[1:])
    report_rank("train" if args.role == "actor" else "infer", args.rank,
                lambda: (actor if args.role == "actor" else rollout)(args, args.rank))
    os._exit(0)  # at once: an SGLang scheduler thread or a gloo group may hold exit


if __name__ == "__main__":
    sys.exit(main())
