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

usage: /usr/bin/python3 bench/delta_adamw.py [--layers 2] [--steps 4] [--lr 1e-6]
       [--beta2 0.999] [--vocab 4096] [--tokens 128]
"""

import argparse
import json
import os
import sys

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(root, "data", "models", "qwen3-0.6b.json")) as f:
        cfg = json.load(f)
    master, hd = build(cfg, a.layers, a.vocab)
    names = list(master)
    opt = torch.optim.AdamW([master[n] for n in names], lr=a.lr, betas=(0.9, a.beta2),
                            weight_decay=0.01)
    tokens = torch.randint(0, a.vocab, (2, a.tokens // 2 + 1),
                           generator=torch.Generator().manual_seed(1))

    tensors = reshard.Tensors()
    for n in names:
        tensors.add(n, tuple(master[n].shape), torch.bfloat16)
    src = reshard.Layout.from_placements(
        tensors, {n: (TRAIN, placements(master[n].shape)[0]) for n in names})
    dst = reshard.Layout.from_placements(
        tensors, {n: (INFER, placements(master[n].shape)[1]) for n in names})
    plans = {m: [reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=16, delta=(m == "delta"))
                 for r in range(WORLD)] for m in ("delta", "dense")}
    dsts = {m: {r: {p.name: torch.zeros(p.shape, dtype=torch.bfloat16) for p in dst.parameters(r)}
                for r in INFER} for m in ("delta", "dense")}
    total = sum(master[n].numel() for n in names)
    bf16 = {n: master[n].detach().bfloat16() for n in names}
    rows = []
    for step in range(a.steps + 1):
        changed, worst = 0, (0.0, "")
        if step > 0:  # one optimizer step on the bf16 weights' loss, fp32 masters
            w = {n: master[n] for n in names}
            loss = loss_fn({n: (w[n] + (bf16[n].float() - w[n]).detach()) for n in names},
                           tokens, cfg, a.layers, hd)
            opt.zero_grad()
            loss.backward()
            opt.step()
            new = {n: master[n].detach().bfloat16() for n in names}
            for n in names:
                c = int((new[n].view(torch.int16) != bf16[n].view(torch.int16)).sum())
                changed += c
                if c / new[n].numel() > worst[0]:
                    worst = (c / new[n].numel(), n)
            bf16 = new
        wire = {}
        for m in ("delta", "dense"):
            def rank_fn(comm, m=m):
                r = comm.rank
                s = {}
                if r in TRAIN:
                    for n in names:
                        t = bf16[n]
                        s[n] = torch.chunk(t, 2, 0)[r].contiguous() if t.dim() > 1 else t
                st = plans[m][r].execute(comm, src=s, dst=dsts[m].get(r, {}))
                return st["bytes_sent_network"] + st["bytes_sent_nvlink"]
            wire[m] = sum(reshard.run_threads(WORLD, rank_fn))
            for r in INFER:  # every destination element against the step's weights
                for n in names:
                    want = bf16[n] if bf16[n].dim() == 1 else torch.chunk(bf16[n], 2, 1)[r - 2]
                    got = dsts[m][r][n].view(torch.int16)
                    if not torch.equal(got, want.contiguous().view(torch.int16)):
                        raise SystemExit("delta_adamw: %s refit of step %d: %s on rank %d differs"
                                         % (m, step, n, r))
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
        return
    print("delta_adamw: qwen3-0.6b widths, %d layers, vocab %d, %d bf16 elements; AdamW lr %g, "
          "beta2 %g; train Shard(0) over 2 ranks -> infer Shard(1) over 2 ranks, every element "
          "checked" % (a.layers, a.vocab, total, a.lr, a.beta2))
    print("  %4s %12s %14s %12s %14s %14s %9s %s" % (
        "step", "changed", "most-changed", "(fraction)", "delta wire B", "dense wire B",
        "delta/dense", "chunks dense/bitmap/runs/gaps"))
    for r in rows:
        print("  %4d %12.6f %14s %12.6f %14d %14d %9.4f %s" % (
            r["step"], r["changed_fraction"], r["worst_tensor"].replace("layers.", "L")[-14:],
            r["worst_fraction"], r["delta_wire_bytes"], r["dense_wire_bytes"], r["ratio"],
            "/".join(map(str, r["chunks_dense_bitmap_runs_gaps"]))))
    print("  step 0: the first refit (dense: no version held); every refit committed: %s"
          % all(r["state"] == "committed" for r in rows))


if __name__ == "__main__":
    main()
