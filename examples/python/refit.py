#!/usr/bin/env python3
"""Refit a model from Megatron-named training tensors to vLLM-named inference
tensors under MPI, every element checked.

    mpirun -np 4 /usr/bin/python3 examples/python/refit.py --model qwen3-0.6b \
        --layers 2 --train tp=2 --infer tp=1,dp=2

Ranks [0, train world) are trainers: each builds the torch state dict its Megatron
rank holds (conventions.megatron_state_dict, from HF-level values). The remaining
ranks are vLLM workers: each allocates its parameters, filled with a sentinel byte,
and binds them by name. After every refit each inference rank compares each of its
tensors, padding rows included, with what vLLM would hold (conventions.vllm_state_dict
of the same HF-level values). Exit status 0 only when every element matched.
"""

import argparse
import sys
import time

import torch
from mpi4py import MPI

import conventions
import reshard


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-0.6b", help="shipped dense model or config.json")
    ap.add_argument("--layers", type=int, default=2, help="keep the first K decoder layers")
    ap.add_argument("--train", default="tp=2", help="Megatron spec")
    ap.add_argument("--infer", default="tp=1,dp=2", help="vLLM spec")
    ap.add_argument("--iters", type=int, default=2, help="refits (the plan is made once)")
    ap.add_argument("--staging-mb", type=float, default=None, help="staging bound per rank")
    ap.add_argument("--domain-size", type=int, default=None, help="ranks per NVLink domain")
    args = ap.parse_args()

    world = MPI.COMM_WORLD
    rank = world.rank
    comm = reshard.Comm.from_mpi(world)
    model = reshard.Model(args.model, layers=args.layers)
    t0 = time.perf_counter()
    try:  # the one-call path: this rank's part of the layouts and its own plan
        plan = model.plan(comm, args.train, args.infer, domain_size=args.domain_size,
                          staging_mb=args.staging_mb)
    except reshard.ReshardError as e:  # every rank raises (the peers are told)
        if rank == 0:
            print("refit.py: %s" % e, file=sys.stderr)
        return 1
    plan_s = time.perf_counter() - t0
    refit = plan.refit
    weights = conventions.Weights(conventions.load_config(args.model, args.layers))

    side, i = refit.role(rank)
    src = dst = expect = None
    if side == "train":
        src = conventions.megatron_state_dict(weights, args.train, i)
    else:
        expect = conventions.vllm_state_dict(weights, args.infer, i, reshard.SENTINEL_BYTE)
        dst = {n: torch.empty_like(t) for n, t in expect.items()}

    times, wrong, checked, moved = [], 0, 0, 0
    for _ in range(args.iters):
        if dst is not None:
            for t in dst.values():
                t.view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
        world.Barrier()
        t0 = time.perf_counter()
        stats = plan.execute(src=src, dst=dst)
        times.append(time.perf_counter() - t0)
        moved += stats["bytes_recv"] + stats["bytes_local"]
        if dst is not None:
            for n, e in expect.items():
                bad = conventions.mismatches(dst[n], e)
                if bad:
                    print("rank %d: %s: %d of %d elements wrong" % (rank, n, bad, e.numel()),
                          file=sys.stderr)
                wrong += bad
                checked += e.numel()
    comm.close()

    wrong, checked, moved = (world.allreduce(x) for x in (wrong, checked, moved))
    seconds = world.allreduce(sorted(times)[len(times) // 2], op=MPI.MAX)
    if rank == 0:
        print("refit %s (%d layers) Megatron %s -> vLLM %s on %d ranks: %d refits, "
              "%.1f MB moved per refit, median %.3f s, plan %.3f s; %d elements checked, "
              "%d wrong: %s" % (args.model, args.layers, args.train, args.infer, refit.world,
                                args.iters, moved / args.iters / 1e6, seconds, plan_s, checked,
                                wrong, "OK" if wrong == 0 and checked > 0 else "FAILED"))
    return 0 if wrong == 0 and checked > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
