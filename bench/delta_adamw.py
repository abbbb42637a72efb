#!/usr/bin/env python3
"""Delta refit of real AdamW updates: how many bf16 weights an RL-sized optimizer step
changes, and what a delta refit of them puts on the wire against a dense one.

A small model from a shipped config (qwen3-0.6b's widths, --layers decoder layers, the
vocabulary cut to --vocab rows) is trained on a next-token loss over a fixed random
token batch: fp32 master weights, AdamW (torch.optim.AdamW) at --lr, bf16 weights
copied from the masters after each step, as Megatron keeps them. Each step's bf16
weights are refitted from "training" ranks 0, 1 (every tensor Shard(0)) to "inference"
ranks 2, 3 (Shard(1); norms replicated) in process, twice: a delta plan
(Plan(..., delta=True)) and a dense one; every destination element of both is compared
with the step's bf16 weights (torch.chunk of them, bit for bit).

Printed per step: the fraction of bf16 elements whose bits changed (all tensors, and
the tensor with the most), the bytes the delta refit put on the wire, the dense
refit's, their ratio, and the encoder's chunk kinds.

With --mpi the four ranks are MPI processes, each computing the same steps, and each
step is refitted by the delta plan, the dense plan and the gather+broadcast baseline
(reshard.Baseline) in turn: per step the changed fraction, each method's time (between
barriers, the slowest rank) and network bytes, every element of every method checked.
On the emulated cluster (network namespaces, tc-limited NICs):

    sudo bench/cluster/refit.sh --nic-mbit 400 --job 4 -- \
        /usr/bin/python3 bench/delta_adamw.py --mpi --domain-size 2

usage: /usr/bin/python3 bench/delta_adamw.py [--layers 2] [--steps 4] [--lr 1e-6]
       [--beta2 0.999] [--vocab 4096] [--tokens 128] [--mpi [--domain-size K]] [--json]
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import reshard  # noqa: E402
from reshard import Replicate, Shard  # noqa: E402

TRAIN, INFER, WORLD = [0, 1], [2, 3], 4


def build(cfg, layers, vocab):
    """name -> fp32 master weight, initialised as a fresh model (normal(0, 0.02))."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim", h // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    g = torch.Generator().manual_seed(0)
    shapes = {"embed_tokens.weight": (vocab, h), "norm.weight": (h,), "lm_head.weight": (vocab, h)}
    for i in range(layers):
        p = "layers.%d." % i
        shapes.update({p + "input_layernorm.weight": (h,), p + "q_proj.weight": (q, h),
                       p + "k_proj.weight": (kv, h), p + "v_proj.weight": (kv, h),
                       p + "o_proj.weight": (h, q), p + "post_attention_layernorm.weight": (h,),
                       p + "gate_proj.weight": (inter, h), p + "up_proj.weight": (inter, h),
                       p + "down_proj.weight": (h, inter)})
    out = {}
    for n, s in shapes.items():
        t = torch.ones(s) if len(s) == 1 else torch.randn(s, generator=g) * 0.02
        out[n] = t.requires_grad_(True)
    return out, hd


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def loss_fn(w, tokens, cfg, layers, hd):
    """Next-token cross entropy of a plain causal transformer (GQA, gated MLP)."""
    x = w["embed_tokens.weight"][tokens[:, :-1]]
    b, t, _ = x.shape
    nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    mask = torch.full((t, t), float("-inf")).triu(1)
    for i in range(layers):
        p = "layers.%d." % i
        y = rms(x, w[p + "input_layernorm.weight"])
        qh = (y @ w[p + "q_proj.weight"].T).view(b, t, nq, hd).transpose(1, 2)
        kh = (y @ w[p + "k_proj.weight"].T).view(b, t, nkv, hd).transpose(1, 2)
        vh = (y @ w[p + "v_proj.weight"].T).view(b, t, nkv, hd).transpose(1, 2)
        kh = kh.repeat_interleave(nq // nkv, 1)
        vh = vh.repeat_interleave(nq // nkv, 1)
        a = torch.softmax(qh @ kh.transpose(-1, -2) / hd ** 0.5 + mask, -1) @ vh
        x = x + a.transpose(1, 2).reshape(b, t, nq * hd) @ w[p + "o_proj.weight"].T
        y = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(y @ w[p + "gate_proj.weight"].T)
        m = gate * (y @ w[p + "up_proj.weight"].T)
        x = x + m @ w[p + "down_proj.weight"].T
    logits = rms(x, w["norm.weight"]) @ w["lm_head.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             tokens[:, 1:].reshape(-1))


def placements(shape):
    if len(shape) == 1:
        return [Replicate()], [Replicate()]
    return [Shard(0)], [Shard(1)]


def steps(a, cfg):
    """The weights of each step: (step, name -> bf16 weight, bf16 elements whose bits
    changed, (fraction, name) of the most-changed tensor); step 0 is the start."""
    master, hd = build(cfg, a.layers, a.vocab)
    names = list(master)
    opt = torch.optim.AdamW([master[n] for n in names], lr=a.lr, betas=(0.9, a.beta2),
                            weight_decay=0.01)
    tokens = torch.randint(0, a.vocab, (2, a.tokens // 2 + 1),
                           generator=torch.Generator().manual_seed(1))
    bf16 = {n: master[n].detach().bfloat16() for n in names}
    yield 0, bf16, 0, (0.0, "")
    for step in range(1, a.steps + 1):  # one optimizer step on the bf16 weights' loss
        w = {n: master[n] for n in names}
        loss = loss_fn({n: (w[n] + (bf16[n].float() - w[n]).detach()) for n in names},
                       tokens, cfg, a.layers, hd)
        opt.zero_grad()
        loss.backward()
        opt.step()
        new = {n: master[n].detach().bfloat16() for n in names}
        changed, worst = 0, (0.0, "")
        for n in names:
            c = int((new[n].view(torch.int16) != bf16[n].view(torch.int16)).sum())
            changed += c
            if c / new[n].numel() > worst[0]:
                worst = (c / new[n].numel(), n)
        bf16 = new
        yield step, bf16, changed, worst


def layouts(cfg, a):
    """The catalogue's layouts: every tensor Shard(0) over TRAIN, Shard(1) over INFER
    (norms replicated)."""
    shapes, _ = build(cfg, a.layers, a.vocab)
    tensors = reshard.Tensors()
    for n, t in shapes.items():
        tensors.add(n, tuple(t.shape), torch.bfloat16)
    src = reshard.Layout.from_placements(
        tensors, {n: (TRAIN, placements(t.shape)[0]) for n, t in shapes.items()})
    dst = reshard.Layout.from_placements(
        tensors, {n: (INFER, placements(t.shape)[1]) for n, t in shapes.items()})
    return src, dst, list(shapes), sum(t.numel() for t in shapes.values())


def source_shards(bf16, r):
    """Training rank r's source tensors of one step."""
    return {n: torch.chunk(t, 2, 0)[r].contiguous() if t.dim() > 1 else t
            for n, t in bf16.items()}


def wrong_elements(bf16, r, got):
    """Destination elements of inference rank r that differ from the step's weights."""
    bad = 0
    for n, t in bf16.items():
        want = t if t.dim() == 1 else torch.chunk(t, 2, 1)[r - INFER[0]]
        bad += int((got[n].view(torch.int16) != want.contiguous().view(torch.int16)).sum())
    return bad


def run_threads(a, cfg):
    """The four ranks as threads of this process: bytes only."""
    src, dst, names, total = layouts(cfg, a)
    plans = {m: [reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=16, delta=(m == "delta"))
                 for r in range(WORLD)] for m in ("delta", "dense")}
    dsts = {m: {r: {p.name: torch.zeros(p.shape, dtype=torch.bfloat16) for p in dst.parameters(r)}
                for r in INFER} for m in ("delta", "dense")}
    rows = []
    for step, bf16, changed, worst in steps(a, cfg):
        wire = {}
        for m in ("delta", "dense"):
            def rank_fn(comm, m=m):
                r = comm.rank
                s = source_shards(bf16, r) if r in TRAIN else {}
                st = plans[m][r].execute(comm, src=s, dst=dsts[m].get(r, {}))
                return st["bytes_sent_network"] + st["bytes_sent_nvlink"]
            wire[m] = sum(reshard.run_threads(WORLD, rank_fn))
            for r in INFER:  # every destination element against the step's weights
                if wrong_elements(bf16, r, dsts[m][r]):
                    raise SystemExit("delta_adamw: %s refit of step %d differs on rank %d"
                                     % (m, step, r))
        info = [plans["delta"][r].delta_info() for r in TRAIN]
        kinds = [sum(i["chunks"][k] for i in info) for k in range(4)]
        rows.append({"step": step, "changed_fraction": changed / total if step else 1.0,
                     "worst_tensor": worst[1], "worst_fraction": worst[0],
                     "delta_wire_bytes": wire["delta"], "dense_wire_bytes": wire["dense"],
                     "ratio": wire["delta"] / wire["dense"],
                     "chunks_dense_bitmap_runs_gaps": kinds,
                     "state": plans["delta"][2].delta_info()["state"]})
    if a.json:
        print(json.dumps({"lr": a.lr, "beta2": a.beta2, "layers": a.layers, "elements": total,
                          "steps": rows}, indent=2))
        return 0
    print("delta_adamw: qwen3-0.6b widths, %d layers, vocab %d, %d bf16 elements; AdamW lr %g, "
          "beta2 %g; train Shard(0) over 2 ranks -> infer Shard(1) over 2 ranks, every element "
          "checked" % (a.layers, a.vocab, total, a.lr, a.beta2))
    print("  %4s %12s %14s %12s %14s %14s %9s %s" % (
        "step", "changed", "most-changed", "(fraction)", "delta wire B", "dense wire B",
        "delta/dense", "chunks dense/bitmap/runs/gaps"))
    for r in rows:
        print("  %4d %12.6f %14s %12.6f %14d %14d %9.4f %s" % (
            r["step"], r["changed_fraction"], short(r["worst_tensor"]),
            r["worst_fraction"], r["delta_wire_bytes"], r["dense_wire_bytes"], r["ratio"],
            "/".join(map(str, r["chunks_dense_bitmap_runs_gaps"]))))
    print("  step 0: the first refit (dense: no version held); every refit committed: %s"
          % all(r["state"] == "committed" for r in rows))
    return 0


def run_mpi(a, cfg):
    """The four ranks as MPI processes (mpirun -np 4, or bench/cluster/refit.sh --job 4):
    each computes the same steps (one torch thread: bit-identical everywhere), then the
    delta plan, the dense plan and the gather+broadcast baseline refit each step in
    turn, timed between barriers (the slowest rank), every destination element checked."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    if world.size != WORLD:
        raise SystemExit("delta_adamw --mpi: needs %d ranks (mpirun -np %d), got %d"
                         % (WORLD, WORLD, world.size))
    torch.set_num_threads(1)
    me = world.rank
    comm = reshard.from_mpi(world)
    src, dst, names, total = layouts(cfg, a)
    methods = ("delta", "dense", "baseline")
    run = {m: reshard.Plan(src, dst, rank=me, world=WORLD, staging_mb=16,
                           domain_size=a.domain_size, delta=(m == "delta"), timeout_s=120)
           for m in ("delta", "dense")}
    run["baseline"] = reshard.Baseline(src, dst, comm, staging_mb=16, timeout_s=120)
    mine = {m: {p.name: torch.zeros(p.shape, dtype=torch.bfloat16) for p in dst.parameters(me)}
            for m in methods}
    rows = []
    for step, bf16, changed, worst in steps(a, cfg):
        s = source_shards(bf16, me) if me in TRAIN else {}
        row = {"step": step, "changed_fraction": changed / total if step else 1.0,
               "worst_tensor": worst[1], "worst_fraction": worst[0]}
        for m in methods:
            world.Barrier()
            t0 = time.perf_counter()
            if m == "baseline":
                st = run[m].execute(src=s, dst=mine[m])
            else:
                st = run[m].execute(comm, src=s, dst=mine[m])
            dt = time.perf_counter() - t0
            bad = wrong_elements(bf16, me, mine[m]) if me in INFER else 0
            row[m + "_s"] = world.allreduce(dt, op=MPI.MAX)
            row[m + "_network_bytes"] = world.allreduce(st["bytes_sent_network"], op=MPI.SUM)
            row[m + "_wrong"] = world.allreduce(bad, op=MPI.SUM)
        rows.append(row)
    info = run["delta"].delta_info()
    committed = world.allreduce(int(info["state"] == "committed" or me in TRAIN), op=MPI.SUM)
    comm.close()
    if me != 0:
        return 0
    ok = committed == WORLD and all(r[m + "_wrong"] == 0 for r in rows for m in methods)
    if a.json:
        print(json.dumps({"lr": a.lr, "beta2": a.beta2, "layers": a.layers, "elements": total,
                          "domain_size": a.domain_size, "verified": ok, "steps": rows},
                         indent=2))
        return 0 if ok else 1
    print("delta_adamw --mpi: qwen3-0.6b widths, %d layers, vocab %d, %d bf16 elements (%.1f MB); "
          "AdamW lr %g, beta2 %g; train Shard(0) on ranks 0-1 -> infer Shard(1) on ranks 2-3, "
          "domains of %d; every element of every method checked"
          % (a.layers, a.vocab, total, 2e-6 * total, a.lr, a.beta2, a.domain_size))
    print("  %4s %9s %9s %9s %9s %9s %9s %9s %8s %8s" % (
        "step", "changed", "delta s", "dense s", "base s", "delta MB", "dense MB", "base MB",
        "dn/dl t", "dn/dl B"))
    for r in rows:
        print("  %4d %9.5f %9.3f %9.3f %9.3f %9.2f %9.2f %9.2f %7.2fx %7.2fx" % (
            r["step"], r["changed_fraction"], r["delta_s"], r["dense_s"], r["baseline_s"],
            r["delta_network_bytes"] / 1e6, r["dense_network_bytes"] / 1e6,
            r["baseline_network_bytes"] / 1e6, r["dense_s"] / r["delta_s"],
            r["dense_network_bytes"] / max(r["delta_network_bytes"], 1)))
    print("  network bytes: sent across domains (the baseline: everything it sent); step 0 is "
          "the first refit (delta: dense by rule)")
    print("  OK: every element of every refit verified, every version committed" if ok else
          "  FAILED: a refit did not verify or commit")
    return 0 if ok else 1


def short(name: str) -> str:
    """A parameter name in 14 characters: the layer and the last two parts
    ("model.layers.1.mlp.gate_proj.weight" -> "L1.gate_proj")."""
    parts = name.split(".")
    layer = "L%s." % parts[parts.index("layers") + 1] if "layers" in parts else ""
    tail = parts[-2] if parts[-1] in ("weight", "bias") and len(parts) > 1 else parts[-1]
    return (layer + tail)[:14]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--mpi", action="store_true",
                    help="ranks are MPI processes (mpirun -np 4): times beside bytes, and the "
                         "gather+broadcast baseline")
    ap.add_argument("--domain-size", type=int, default=1,
                    help="with --mpi: ranks per NVLink domain (2 on bench/cluster/refit.sh)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(root, "data", "models", "qwen3-0.6b.json")) as f:
        cfg = json.load(f)
    return run_mpi(a, cfg) if a.mpi else run_threads(a, cfg)


if __name__ == "__main__":
    sys.exit(main())
