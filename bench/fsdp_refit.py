"""An FSDP2 trainer refitting vLLM-named inference workers, in separate processes over
one torch.distributed gloo group: reshard (each trainer rank's DTensor shards bound in
place, sent shard to shard) beside the refit users write today (every parameter's
full_tensor(): an all-gather over the FSDP mesh, then trainer rank 0 broadcasts it to
the inference ranks, which keep their tensor-parallel slice). Every element every
inference rank holds is checked against the oracle (conventions.vllm_state_dict:
vLLM's rules, written independently of the library) after each timed refit, outside
the timing, for both paths.

    /usr/bin/python3 bench/fsdp_refit.py                     # qwen3-0.6b, 2 layers, fsdp=4 -> tp=2,dp=2
    /usr/bin/python3 bench/fsdp_refit.py --train tp=2,fsdp=2 --infer tp=2 --iters 3
    /usr/bin/python3 bench/fsdp_refit.py --check-real        # torch >= 2.4: also real FSDP2 vs the stand-in

With PyTorch's DTensor and FSDP2 importable (torch >= 2.4) the trainer ranks shard a
module of nn.Linear / nn.Embedding layers with fully_shard (and parallelize_module with
ColwiseParallel / RowwiseParallel for tp=T), on a CPU device mesh; otherwise (torch
1.13 here) with the stand-in of tests/python/standin/dtensor.py, which follows
PyTorch's rules; the first line says which. --check-real compares every real local
shard and placement with the stand-in's, element by element.

Prints one row per path: the median refit seconds (the slowest rank's median over
--iters), bytes verified, and reshard's speed-up."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (os.path.join(ROOT, "python"), os.path.join(ROOT, "examples", "python"),
           os.path.join(ROOT, "tests", "python", "standin")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

# transformers' base_model_tp_plan of the dense families (configuration_qwen3.py,
# configuration_llama.py: q/k/v/gate/up "colwise", o/down "rowwise") and the causal-LM
# class's _tp_plan (lm_head "colwise_rep"); the embedding and the norms are not in it
# (replicated over tp).
COLWISE = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
           "mlp.gate_proj.weight", "mlp.up_proj.weight")
ROWWISE = ("self_attn.o_proj.weight", "mlp.down_proj.weight")


def tp_style(name: str) -> str:
    if name == "lm_head.weight" or name.endswith(COLWISE):
        return "colwise"
    if name.endswith(ROWWISE):
        return "rowwise"
    return "replicated"


def sizes_of(train: str):
    kv = dict(x.split("=") for x in train.split(","))
    return int(kv.get("fsdp", 1)), int(kv.get("dp", 1)), int(kv.get("tp", 1))


def real_torch() -> bool:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        from torch.distributed.tensor import DTensor  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - ImportError, or torch 1.13's FSDP1 failing to import
        return False


def standin_module(full, rank, fsdp, replicas, tp):
    import dtensor
    return dtensor.fully_shard(full, {n: tp_style(n) for n in full}, rank, fsdp=fsdp,
                               replicas=replicas, tp=tp)


def real_module(full, fsdp, replicas, tp):
    """The HF module as nn.Linear / nn.Embedding / norm weights, then TP
    (parallelize_module) and FSDP2 (fully_shard) as PyTorch applies them."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    root = torch.nn.Module()
    for name, x in full.items():
        *path, leaf = name.split(".")
        m = root
        for part in path[:-1]:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        if leaf == "weight" and x.ndim == 2 and "embed_tokens" in name:
            mod = torch.nn.Embedding(x.shape[0], x.shape[1], dtype=x.dtype)
        elif leaf == "weight" and x.ndim == 2:
            mod = torch.nn.Linear(x.shape[1], x.shape[0], bias=False, dtype=x.dtype)
        else:
            mod = torch.nn.Module()
            mod.register_parameter(leaf, torch.nn.Parameter(torch.empty_like(x)))
        with torch.no_grad():
            getattr(mod, leaf).copy_(x)
        m.add_module(path[-1], mod)
    dims = [(n, d) for n, d in ((replicas, "dp_replicate"), (fsdp, "dp_shard"), (tp, "tp"))
            if n > 1 or d == "dp_shard"]
    mesh = init_device_mesh("cpu", tuple(n for n, _ in dims),
                            mesh_dim_names=tuple(d for _, d in dims))
    if tp > 1:
        plan = {}
        for name in full:
            mod = name.rsplit(".", 1)[0]
            style = tp_style(name)
            if style == "colwise":
                plan[mod] = ColwiseParallel()
            elif style == "rowwise":
                plan[mod] = RowwiseParallel()
        parallelize_module(root, mesh["tp"], plan)
    dp = mesh[("dp_replicate", "dp_shard")] if replicas > 1 else mesh["dp_shard"]
    fully_shard(root, mesh=dp)
    return root


def rank_main(a) -> None:
    import torch
    import torch.distributed as dist
    import conventions
    import reshard
    from reshard.integrations.fsdp import FSDPModule

    rank, world = a.rank, a.world
    dist.init_process_group("gloo", init_method="file://" + a.store, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    fsdp, replicas, tp = sizes_of(a.train)
    refit = reshard.Model(a.model, layers=a.layers).refit(a.train, a.infer)
    ntrain = refit.train_world
    w = conventions.Weights(conventions.load_config(a.model, a.layers))
    out = {"rank": rank, "real": False, "checked": 0, "wrong": 0, "times": [],
           "base_times": [], "base_checked": 0, "base_wrong": 0, "real_vs_standin": None}
    # trainer ranks: the FSDP2 module; the sub-group of trainer ranks for the
    # baseline's all-gathers (made by every rank, as torch requires)
    train_group = dist.new_group(list(range(ntrain)))
    bcast_group = dist.new_group([0] + list(range(ntrain, world)))
    if rank < ntrain:
        full = {n: w[n] for n in w.shapes}
        if real_torch() and a.real:
            module = real_module(full, fsdp, replicas, tp)
            out["real"] = True
            if a.check_real:
                ref = dict(standin_module(full, rank, fsdp, replicas, tp).named_parameters())
                bad = [n for n, p in module.named_parameters()
                       if not torch.equal(p.to_local().view(torch.int16),
                                          ref[n].to_local().view(torch.int16))
                       or tuple(type(x).__name__ for x in p.placements)
                       != tuple(type(x).__name__ for x in ref[n].placements)]
                out["real_vs_standin"] = bad
        else:
            module = standin_module(full, rank, fsdp, replicas, tp)
        source = FSDPModule(module)
        problems = source.problems(refit.train, rank)
        if problems:
            raise SystemExit("rank %d: %s" % (rank, "; ".join(problems)))
        src, _ = source.named()
        dst = None
        expect = None
    else:
        i = rank - ntrain
        expect = conventions.vllm_state_dict(w, a.infer, i, reshard.SENTINEL_BYTE)
        dst = {n: torch.empty_like(x) for n, x in expect.items()}
        src = None
    comm = reshard.Comm.from_torch()
    plan = reshard.Plan(refit.train, refit.infer, rank=rank, world=world, timeout_s=120)

    def timed(refit_once, into, key):
        """a.iters refits by ``refit_once`` into ``into`` (None on a sender), each
        timed from a barrier and every element of ``into`` checked."""
        for _ in range(a.iters):
            for t in (into or {}).values():
                t.view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
            dist.barrier()
            t0 = time.perf_counter()
            refit_once(into)
            out[key + "times"].append(time.perf_counter() - t0)
            for n, x in (into or {}).items():
                out[key + "wrong"] += conventions.mismatches(x, expect[n])
                out[key + "checked"] += expect[n].numel()

    timed(lambda into: plan.execute(comm, src=src, dst=into), dst, "")
    if a.baseline:
        base_dst = {n: torch.empty_like(x) for n, x in expect.items()} if expect else None
        timed(lambda into: gather_broadcast(a, w, src, into, rank, ntrain, fsdp, replicas, tp,
                                            train_group, bcast_group), base_dst, "base_")
    comm.close()
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def gather_broadcast(a, w, src, dst, rank, ntrain, fsdp, replicas, tp, train_group,
                     bcast_group):
    """The refit users write today: per HF parameter, full_tensor() on every trainer
    rank (an all-gather of the FSDP shards, padded to the chunk size as FSDP2 does;
    with tp, the TP shards too), trainer rank 0 broadcasts it to the inference ranks,
    each copies its vLLM slice (vLLM's weight_loader). Parameter order: the HF
    checkpoint's."""
    import torch
    import torch.distributed as dist
    import conventions
    hf = conventions.hf_shapes(w.cfg)
    ntp = int(conventions.parse_spec(a.infer).get("tp", 1))
    for name, shape in hf.items():
        full = torch.empty(shape, dtype=torch.bfloat16)
        if rank < ntrain:
            local = src[name]
            # all-gather over every trainer rank (each rank's shard padded to the
            # largest; with HSDP replicas this gathers more than full_tensor() does:
            # measure without dp=), then the pieces put back by their placements
            pad = max(1, -(-shape[0] // fsdp)) * (shape[1] if len(shape) > 1 else 1)
            flat = torch.zeros(pad, dtype=torch.bfloat16)
            n = local.numel()
            flat[:n] = local.reshape(-1)
            pieces = [torch.empty_like(flat) for _ in range(ntrain)]
            # gloo has no bf16 (nor int16): the same bytes
            dist.all_gather([x.view(torch.uint8) for x in pieces], flat.view(torch.uint8),
                            group=train_group)
            if rank == 0:
                full = assemble(name, shape, pieces, fsdp, replicas, tp)
        if rank == 0 or rank >= ntrain:
            dist.broadcast(full.view(torch.uint8), src=0, group=bcast_group)
        if rank >= ntrain:
            load_slice(name, full, dst, rank - ntrain, ntp, w.cfg)


def assemble(name, shape, pieces, fsdp, replicas, tp):
    """The full tensor from every trainer rank's padded flat shard (rank = (r*fsdp +
    s)*tp + t): replica 0's, each tp shard rebuilt from its FSDP chunks."""
    import torch
    import dtensor
    style = tp_style(name)
    tparts = []
    for t in range(tp):
        rows = []
        for s in range(fsdp):
            want = dtensor.local_shard(torch.zeros(shape, dtype=torch.bfloat16), style, fsdp,
                                       tp, s, t).shape
            rows.append(pieces[s * tp + t][:int(torch.tensor(want).prod())].reshape(want))
        tparts.append(torch.cat(rows, 0))
    if tp == 1 or style == "replicated":
        return tparts[0]
    return torch.cat(tparts, 0 if style == "colwise" else 1)


def load_slice(name, full, dst, i, tp, cfg):
    """vLLM's weight_loader for the dense layers: this rank's part of ``full`` into
    its parameter (qkv_proj / gate_up_proj fused by shard id, vocab padded)."""
    import conventions
    t = i % tp
    hd, kv, nh = cfg["hd"], cfg["kv"], cfg["nh"]
    pre, _, leaf = name.rpartition(".")
    if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
        base = name.rsplit(".", 2)[0]
        p = dst[base + ".qkv_proj.weight"]
        qrows = nh * hd // tp
        if name.endswith("q_proj.weight"):
            a, b = conventions.chunk(nh * hd, tp, t)
            p[:qrows] = full[a:b]
            return
        if tp <= kv:
            a, b = conventions.chunk(kv * hd, tp, t)
        else:
            head = t // (tp // kv)
            a, b = head * hd, (head + 1) * hd
        off = qrows + (0 if name.endswith("k_proj.weight") else b - a)
        p[off:off + b - a] = full[a:b]
        return
    if name.endswith(("gate_proj.weight", "up_proj.weight")):
        base = name.rsplit(".", 2)[0]
        p = dst[base + ".gate_up_proj.weight"]
        a, b = conventions.chunk(cfg["I"], tp, t)
        off = 0 if name.endswith("gate_proj.weight") else b - a
        p[off:off + b - a] = full[a:b]
        return
    p = dst[name]
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        a, b = conventions.chunk(full.shape[1], tp, t)
        p.copy_(full[:, a:b])
    elif name in ("model.embed_tokens.weight", "lm_head.weight"):
        rows = p.shape[0]
        a = t * rows
        b = min(a + rows, full.shape[0])
        if b > a:
            p[:b - a] = full[a:b]
    else:
        p.copy_(full)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--train", default="fsdp=4", help="fsdp=N[,dp=R][,tp=T]")
    ap.add_argument("--infer", default="tp=2,dp=2")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--no-baseline", dest="baseline", action="store_false")
    ap.add_argument("--standin", dest="real", action="store_false",
                    help="the stand-in even where real DTensors exist")
    ap.add_argument("--check-real", action="store_true")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank is not None:
        rank_main(a)
        return
    import reshard
    from rank_runs import print_paths, run_ranks
    refit = reshard.Model(a.model, layers=a.layers).refit(a.train, a.infer)
    world = refit.world
    print("fsdp_refit: %s, %d layers, %s -> %s, %d processes, DTensors: %s"
          % (a.model, a.layers, a.train, a.infer, world,
             "real PyTorch (torch.distributed.tensor, fully_shard)" if real_torch() and a.real
             else "the stand-in (tests/python/standin/dtensor.py)"), flush=True)
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        args = [sys.executable, os.path.abspath(__file__), "--model", a.model, "--layers",
                str(a.layers), "--train", a.train, "--infer", a.infer, "--iters", str(a.iters),
                "--world", str(world), "--store", store]
        args += [] if a.baseline else ["--no-baseline"]
        args += [] if a.real else ["--standin"]
        args += ["--check-real"] if a.check_real else []
        reps = run_ranks(args, world, "fsdp_refit")
    paths = [("reshard (shard to shard)", "")]
    if a.baseline:
        paths.append(("full_tensor gather + broadcast", "base_"))
    ok = print_paths(reps, paths, 34)
    real = [r["real_vs_standin"] for r in reps if r["real_vs_standin"] is not None]
    if real:
        bad = sorted({n for b in real for n in b})
        print("real FSDP2 vs stand-in: %s" % ("every local shard and placement equal on %d "
                                              "trainer ranks" % len(real) if not bad else
                                              "DIFFER in %s" % bad[:5]))
        ok = ok and not bad
    print("fsdp_refit: %s" % ("OK" if ok else "WRONG ELEMENTS"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
