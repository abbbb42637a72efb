"""Megatron trainer ranks refitting SGLang TP workers, in separate processes over one
torch.distributed gloo group: reshard (each trainer rank's Megatron shards sent shard
to shard into each worker's SGLang parameters, the plan the SGLang loader runs) beside
the refit slime does today (per parameter an all-gather of the TP shards over the
trainer ranks, conversion to full HF tensors on trainer rank 0, HF tensors packed
into buckets of --bucket-mb and broadcast to every SGLang worker, which loads its
slice as SGLang's weight loaders do). The same model and layouts as
examples/python/slime_loop.py. Every element every worker holds is checked against
the oracle (slime_loop.sglang_state_dict: SGLang's rules, written from its source)
after each timed refit, outside the timing, for both paths.

    /usr/bin/python3 bench/sglang_refit.py                      # qwen3-0.6b, 2 layers, tp=2 -> tp=2 x 2 servers
    /usr/bin/python3 bench/sglang_refit.py --train tp=4 --infer tp=2 --iters 3

Prints one row per path: the median refit seconds (the slowest rank's median over
--iters), elements verified, wrong elements, and the ratio."""

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
           os.path.join(ROOT, "tests", "python", "standin"), HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

# Megatron-Core's TP split of each dense parameter: rows (ColumnParallelLinear,
# VocabParallelEmbedding), columns (RowParallelLinear), or whole (norms).
ROWS = ("linear_qkv.weight", "linear_fc1.weight", "word_embeddings.weight",
        "output_layer.weight")
COLS = ("linear_proj.weight", "linear_fc2.weight")
# Megatron name suffix -> HF name suffix, for what converts one to one
HF_NAME = {"self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
           "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
           "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
           "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
           "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
           "mlp.linear_fc2.weight": "mlp.down_proj.weight"}


def to_hf(name, full, cfg, tp):
    """slime's conversion of one full (TP-gathered) Megatron tensor to HF tensors:
    linear_qkv's query groups [q of g; k_g; v_g] split into q/k/v; linear_fc1's
    per-rank [gate_r; up_r] split into gate and up; the vocabulary padding dropped."""
    if name in ("embedding.word_embeddings.weight", "output_layer.weight"):
        hf = "model.embed_tokens.weight" if name.startswith("embedding") else "lm_head.weight"
        return [(hf, full[:cfg["V"]])]
    if name == "decoder.final_layernorm.weight":
        return [("model.norm.weight", full)]
    layer, rest = name[len("decoder.layers."):].split(".", 1)
    p = "model.layers.%s." % layer
    H, hd, kv = cfg["H"], cfg["hd"], cfg["kv"]
    if rest == "self_attention.linear_qkv.weight":
        hpg = cfg["nh"] // kv
        g = full.reshape(kv, (hpg + 2) * hd, H)
        return [(p + "self_attn.q_proj.weight", g[:, :hpg * hd].reshape(-1, H)),
                (p + "self_attn.k_proj.weight", g[:, hpg * hd:(hpg + 1) * hd].reshape(-1, H)),
                (p + "self_attn.v_proj.weight", g[:, (hpg + 1) * hd:].reshape(-1, H))]
    if rest == "mlp.linear_fc1.weight":
        x = full.reshape(tp, 2, cfg["I"] // tp, H)
        return [(p + "mlp.gate_proj.weight", x[:, 0].reshape(-1, H)),
                (p + "mlp.up_proj.weight", x[:, 1].reshape(-1, H))]
    return [(p + HF_NAME[rest], full)]


def gather_full(name, local, tp, group):
    """The full Megatron tensor from every trainer rank's TP shard (gloo all-gather of
    the bytes: no bf16 collectives in gloo)."""
    import torch
    import torch.distributed as dist
    pieces = [torch.empty_like(local) for _ in range(tp)]
    dist.all_gather([x.view(torch.uint8) for x in pieces], local.contiguous().view(torch.uint8),
                    group=group)
    if name.endswith(ROWS):
        return torch.cat(pieces, 0)
    if name.endswith(COLS):
        return torch.cat(pieces, 1)
    return pieces[0]


def broadcast_baseline(a, cfg, src, dst, rank, ntrain, train_group, bcast_group, order):
    """slime's refit: every Megatron parameter gathered and converted on trainer rank 0,
    the HF tensors packed into buckets of a.bucket_mb, each bucket broadcast to the
    SGLang workers (update_weights_from_distributed with a flattened bucket), each
    worker copying its slice of every HF tensor into its parameters."""
    import torch
    import torch.distributed as dist
    from fsdp_refit import load_slice
    from conventions import parse_spec
    tp_train = int(parse_spec(a.train).get("tp", 1))
    tp_infer = int(parse_spec(a.infer).get("tp", 1))
    limit = int(a.bucket_mb * (1 << 20))
    bucket, meta, size = [], [], 0

    def flush():
        nonlocal bucket, meta, size
        if not meta or 0 < rank < ntrain:  # trainer ranks but 0 are not in the broadcast
            bucket, meta, size = [], [], 0
            return
        flat = torch.cat([x.reshape(-1).view(torch.uint8) for x in bucket]) if bucket else \
            torch.empty(size, dtype=torch.uint8)
        dist.broadcast(flat, src=0, group=bcast_group)
        if rank >= ntrain:
            off = 0
            for hf, shape in meta:
                n = 2 * int(torch.tensor(shape).prod())
                full = flat[off:off + n].view(torch.bfloat16).reshape(shape)
                load_slice(hf, full, dst, rank - ntrain, tp_infer, cfg)
                off += n
        bucket, meta, size = [], [], 0

    for name, shape in order:  # the Megatron parameters, in model order
        hf_tensors = []
        if rank < ntrain:
            full = gather_full(name, src[name], tp_train, train_group)
            hf_tensors = to_hf(name, full, cfg, tp_train)
        else:  # the workers learn names and shapes from the request (names, dtypes, shapes)
            full = torch.empty(shape, dtype=torch.bfloat16)
            hf_tensors = to_hf(name, full, cfg, tp_train)
        for hf, x in hf_tensors:
            nbytes = 2 * x.numel()
            if size and size + nbytes > limit:
                flush()
            meta.append((hf, tuple(x.shape)))
            if rank == 0:
                bucket.append(x.contiguous())
            size += nbytes
    flush()


def sglang_expected(a, w, i):
    """What infer rank ``i`` holds: SGLang's layout (slime_loop.sglang_state_dict)."""
    import conventions
    import reshard
    from slime_loop import sglang_state_dict
    tp_infer = int(conventions.parse_spec(a.infer).get("tp", 1))
    return sglang_state_dict(w, tp_infer, i % tp_infer, reshard.SENTINEL_BYTE)


def rank_main(a, expected=sglang_expected) -> None:
    """One rank of both paths (``expected(a, w, i)``: what infer rank i must hold, its
    padding rows the sentinel byte); prints its JSON report."""
    import torch
    import torch.distributed as dist
    import conventions
    import reshard

    rank, world = a.rank, a.world
    dist.init_process_group("gloo", init_method="file://" + a.store, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))
    refit = reshard.Model(a.model, layers=a.layers).refit(a.train, a.infer)
    ntrain = refit.train_world
    cfg = conventions.load_config(a.model, a.layers)
    w = conventions.Weights(cfg)
    train_group = dist.new_group(list(range(ntrain)))
    bcast_group = dist.new_group([0] + list(range(ntrain, world)))
    full_megatron = conventions.megatron_state_dict(w, "tp=1", 0)
    order = [(n, tuple(x.shape)) for n, x in full_megatron.items()]
    del full_megatron
    src = dst = expect = None
    if rank < ntrain:
        src = conventions.megatron_state_dict(w, a.train, rank)
    else:
        expect = expected(a, w, rank - ntrain)
        dst = {n: torch.empty_like(x) for n, x in expect.items()}
    comm = reshard.Comm.from_torch()
    plan = reshard.Plan(refit.train, refit.infer, rank=rank, world=world, timeout_s=300)
    out = {"rank": rank, "times": [], "base_times": [], "checked": 0, "wrong": 0,
           "base_checked": 0, "base_wrong": 0}

    def run(path, key):
        for _ in range(a.iters):
            if dst:
                for t in dst.values():
                    t.view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
            dist.barrier()
            t0 = time.perf_counter()
            path()
            out[key + "times"].append(time.perf_counter() - t0)
            if dst:
                for n, x in expect.items():
                    out[key + "wrong"] += conventions.mismatches(dst[n], x)
                    out[key + "checked"] += x.numel()

    run(lambda: plan.execute(comm, src=src, dst=dst), "")
    if a.baseline:
        run(lambda: broadcast_baseline(a, cfg, src, dst, rank, ntrain, train_group,
                                       bcast_group, order), "base_")
    comm.close()
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def main(name: str = "sglang_refit", doc: str = __doc__, rollouts=None,
         baseline: str = "slime: gather + HF + bucketed broadcast") -> None:
    """The benchmark's command line (also verl_refit.py's): ``rollouts`` maps a
    --rollout choice to (its label, default infer spec, expected(a, w, i)); the first
    is the default."""
    rollouts = rollouts or {"sglang": ("SGLang", "engine=sglang,tp=2,engines=2",
                                       sglang_expected)}
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--train", default="tp=2", help="Megatron spec (tp only: the baseline "
                    "all-gathers over the trainer ranks)")
    ap.add_argument("--rollout", choices=list(rollouts), default=list(rollouts)[0])
    ap.add_argument("--infer", help="the rollouts' spec (default: %s)"
                    % {k: v[1] for k, v in rollouts.items()})
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, default=512.0, help="the baseline's bucket size")
    ap.add_argument("--no-baseline", dest="baseline", action="store_false")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    a = ap.parse_args()
    label, infer, expected = rollouts[a.rollout]
    a.infer = a.infer or infer
    if a.rank is not None:
        rank_main(a, expected)
        return
    import reshard
    from conventions import parse_spec
    if set(parse_spec(a.train)) - {"tp"}:
        sys.exit("%s: --train takes tp=N only (the baseline gathers over every "
                 "trainer rank)" % name)
    refit = reshard.Model(a.model, layers=a.layers).refit(a.train, a.infer)
    world = refit.world
    print("%s: %s, %d layers, Megatron %s -> %s %s, %d processes, gloo"
          % (name, a.model, a.layers, a.train, label, a.infer, world), flush=True)
    from rank_runs import print_paths, run_ranks
    with tempfile.TemporaryDirectory() as d:
        args = [sys.executable, os.path.abspath(sys.argv[0]), "--model", a.model, "--layers",
                str(a.layers), "--train", a.train, "--rollout", a.rollout, "--infer", a.infer,
                "--iters", str(a.iters), "--bucket-mb", str(a.bucket_mb), "--world",
                str(world), "--store", os.path.join(d, "store")]
        args += [] if a.baseline else ["--no-baseline"]
        reps = run_ranks(args, world, name)
    paths = [("reshard (shard to shard)", "")]
    if a.baseline:
        paths.append((baseline, "base_"))
    ok = print_paths(reps, paths, 40)
    print("%s: %s" % (name, "OK" if ok else "WRONG ELEMENTS"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
