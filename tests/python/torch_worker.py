"""One rank of a refit over a torch.distributed gloo group, started as its own process
by test_torch_gloo.py (and bench/torch_vs_mpi.py):

    python3 torch_worker.py CASE[,CASE...] RANK WORLD STORE_FILE WORKDIR [TIMEOUT_S]

It joins the group through a FileStore, runs each CASE on one comm and prints one
JSON line per case: rank, case, ok, status, message, verified (elements checked),
seconds (the refit), elapsed (the case)."""

import datetime
import json
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (os.path.join(ROOT, "python"), os.path.join(ROOT, "examples", "python"), HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import reshard  # noqa: E402
from reshard import Shard  # noqa: E402
import conventions  # noqa: E402
from dtensor_oracle import four_rank_refit  # noqa: E402

TINY = {  # the qwen3 of test_model_refit.py, untied
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300, "tie_word_embeddings": False,
}
TINY_MOE = {  # a qwen3-moe: 4 experts, 2 per token
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
    "intermediate_size": 96, "moe_intermediate_size": 32, "num_experts": 4,
    "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300, "tie_word_embeddings": False,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
}


def config(workdir, name, cfg):
    path = os.path.join(workdir, name + ".json")
    tmp = "%s.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(cfg, f)
    os.replace(tmp, path)  # every rank writes the same bytes
    return path


def model_refit(comm, path, train, infer, domain_size=None, verify=True, iters=1,
                planned=None):
    """A Megatron -> vLLM refit of the config at ``path`` checked against the
    frameworks' rules (examples/python/conventions.py); returns (elements, seconds).
    ``planned()`` runs once the plan exists (Model.plan's own agreements are over)."""
    plan = reshard.Model(path).plan(comm, train, infer, domain_size=domain_size,
                                    timeout_s=TIMEOUT_S)  # the one-call path
    if planned is not None:
        planned()
    refit = plan.refit
    w = conventions.Weights(conventions.load_config(path))
    side, i = refit.role(comm.rank)
    src = conventions.megatron_state_dict(w, train, i) if side == "train" else None
    expect = conventions.vllm_state_dict(w, infer, i, reshard.SENTINEL_BYTE) \
        if side == "infer" else {}
    checked, times = 0, []
    for _ in range(iters):
        dst = {n: torch.empty_like(t).view(torch.uint8).fill_(reshard.SENTINEL_BYTE)
               .view(t.dtype) for n, t in expect.items()}
        t0 = time.perf_counter()
        plan.execute(src=src, dst=dst or None)
        times.append(time.perf_counter() - t0)
        if verify:
            assert sorted(dst) == sorted(expect)
            for n, e in expect.items():
                bad = conventions.mismatches(dst[n], e)
                assert bad == 0, "infer rank %d %s: %d wrong elements" % (i, n, bad)
                checked += e.numel()
    stats = plan.stats()
    return checked, sorted(times)[len(times) // 2], stats


def case_dense(comm, workdir):
    checked, secs, _ = model_refit(comm, config(workdir, "tiny", TINY), "tp=2", "tp=2", iters=2)
    return checked, secs


def case_forwards(comm, workdir):
    """Two domains of two ranks: each piece enters the inference domain once and is
    forwarded to the other dp replica."""
    checked, secs, stats = model_refit(comm, config(workdir, "tiny", TINY), "tp=2",
                                       "tp=1,dp=2", domain_size=2)
    if comm.rank >= 2:
        assert stats["bytes_nvlink"] > 0, stats  # this rank forwards what it landed
    return checked, secs


def case_dtensor(comm, workdir):
    """DTensor placements (StridedShard, 2-d meshes) against a numpy oracle of
    torch's chunk rules."""
    t0 = time.perf_counter()
    checked = four_rank_refit(comm, TIMEOUT_S)
    return checked, time.perf_counter() - t0


def pattern_refit(comm, refit, plan):
    """Every source element the pattern of (tensor, index); every destination element,
    padding bytes included, checked against it."""
    side, _ = refit.role(comm.rank)
    src = refit.train.new_buffers(comm.rank) if side == "train" else None
    if src:
        reshard.fill_pattern(refit.train, comm.rank, src)
    dst = refit.infer.new_buffers(comm.rank, fill=reshard.SENTINEL_BYTE) \
        if side == "infer" else None
    t0 = time.perf_counter()
    plan.execute(comm, src=src, dst=dst)
    secs = time.perf_counter() - t0
    checked = reshard.verify_pattern(refit.infer, comm.rank, dst) if dst else 0
    return checked, secs


def case_moe(comm, workdir):
    """Experts: Megatron ep=2 on the training ranks, vLLM tp=2 with expert parallelism."""
    refit = reshard.Model(config(workdir, "tiny_moe", TINY_MOE)).refit("tp=1,dp=2,ep=2",
                                                                        "tp=2,ep=on")
    plan = reshard.Plan(refit.train, refit.infer, rank=comm.rank, world=refit.world,
                        timeout_s=TIMEOUT_S)
    return pattern_refit(comm, refit, plan)


def case_fp8(comm, workdir):
    """bf16 training weights to vLLM's FP8 form, quantized during the refit; the e4m3
    bytes and scales checked against the reference rule of test_quant.py."""
    import test_quant
    path = config(workdir, "fp8", test_quant.FP8_DENSE)
    refit = reshard.Model(path, infer_dtype="fp8").refit("tp=2", "tp=2")
    w = conventions.Weights(conventions.load_config(path))
    plan = reshard.Plan(refit.train, refit.infer, rank=comm.rank, world=refit.world,
                        staging_mb=1, timeout_s=TIMEOUT_S)
    side, i = refit.role(comm.rank)
    if side == "train":
        t0 = time.perf_counter()
        plan.execute(comm, src=conventions.megatron_state_dict(w, "tp=2", i))
        return 0, time.perf_counter() - t0
    quantized = {n: test_quant.quantize(w[n].view(torch.int16).numpy(), 128, 128, False, False)
                 for n in w.shapes if refit.tensors.quant(n) is not None}
    dst = refit.infer.new_buffers(comm.rank, fill=reshard.SENTINEL_BYTE)
    t0 = time.perf_counter()
    plan.execute(comm, dst=dst)
    secs = time.perf_counter() - t0
    want = test_quant.vllm_fp8_expected(w, quantized, 2, i)
    for n, t in conventions.vllm_state_dict(w, "tp=2", i, reshard.SENTINEL_BYTE).items():
        want.setdefault(n, t)
    assert sorted(dst) == sorted(want)
    checked = 0
    for n, g in dst.items():
        e = want[n]
        e = e.view(torch.uint8).numpy() if isinstance(e, torch.Tensor) else e.view(np.uint8)
        g = g.contiguous().view(torch.uint8).numpy()
        assert g.shape == e.shape and np.array_equal(g, e), n
        checked += g.size
    return checked, secs


def case_mismatch(comm, workdir):
    """Rank 3 plans from another destination layout: MISMATCH on every rank."""
    tensors = reshard.Tensors()
    tensors.add("x", (8, 4), np.float32)
    src = reshard.Layout.from_placements(tensors, {"x": ([0, 1], [Shard(0)])})
    placement = Shard(0) if comm.rank == 3 else Shard(1)
    dst = reshard.Layout.from_placements(tensors, {"x": ([2, 3], [placement])})
    plan = reshard.Plan(src, dst, rank=comm.rank, world=4, timeout_s=TIMEOUT_S)
    s = {"x": np.ones((4, 4), np.float32)} if comm.rank < 2 else None
    d = dst.new_buffers(comm.rank, library="numpy", fill=reshard.SENTINEL_BYTE)
    try:
        plan.execute(comm, src=s, dst=d)
    finally:
        for t in d.values():
            assert (t.view(np.uint8) == reshard.SENTINEL_BYTE).all(), "a byte was written"
    return 0, 0.0


def _misbehave(how):
    """Rank 2's transport stops on its second post (mid-refit): it stalls (sleeps far
    past the timeout) or dies (SIGKILL)."""
    real = reshard.torch_comm.GlooTransport.post
    count = [0]

    def post(self, *args):
        count[0] += 1
        if count[0] == 2:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(20 * TIMEOUT_S)
            os._exit(3)
        return real(self, *args)
    reshard.torch_comm.GlooTransport.post = post


def case_stall(comm, workdir):
    if comm.rank == 2:
        _misbehave("stall")
    return case_dense(comm, workdir)


def case_stall_delta(comm, workdir):
    """Rank 0, a sender of a delta refit, stalls on its fourth post (the headers of the
    first round, after the version exchange)."""
    refit = reshard.Model(config(workdir, "tiny", TINY)).refit("tp=2", "tp=2")
    plan = reshard.Plan(refit.train, refit.infer, rank=comm.rank, world=refit.world,
                        timeout_s=TIMEOUT_S, delta=True)
    if comm.rank == 0:
        real = reshard.torch_comm.GlooTransport.post
        count = [0]

        def post(self, *args):
            count[0] += 1
            if count[0] == 4:
                time.sleep(20 * TIMEOUT_S)
                os._exit(3)
            return real(self, *args)
        reshard.torch_comm.GlooTransport.post = post
    return pattern_refit(comm, refit, plan)


def case_kill(comm, workdir):
    if comm.rank == 2:
        _misbehave("kill")
    return case_dense(comm, workdir)


def _stop_in_agreement(method, tag):
    """Rank 2 stops (sleeps far past the timeout) in the outcome agreement of its first
    refit (the second agreement after planning: installed once the plan exists), at
    GlooTransport.``method`` for the message with ``tag`` of peer 1: the one of peer 0
    was posted, the ones of peers 1 and 3 never are. gloo's own threads go on (they
    deliver what was posted)."""
    real = getattr(reshard.torch_comm.GlooTransport, method)

    def stop(self, tensor, peer, t):
        if t == tag and peer == 1:
            with open(os.path.join(WORKDIR, "stopped_at"), "w") as f:
                f.write(repr(time.time()))
            time.sleep(20 * TIMEOUT_S)
            os._exit(3)
        return real(self, tensor, peer, t)
    setattr(reshard.torch_comm.GlooTransport, method, stop)


def case_stop_deciding(comm, workdir):
    """Rank 2 posts its agreement message to everyone and its receive for rank 0 only:
    rank 0 has every contribution and its own sends completed, ranks 1 and 3 wait on a
    send to rank 2 that never completes."""
    stop = lambda: _stop_in_agreement("_recv", reshard.torch_comm.TAG_AGREE + 1)  # noqa: E731
    return model_refit(comm, config(workdir, "tiny", TINY), "tp=2", "tp=2",
                       planned=stop if comm.rank == 2 else None)[:2]


def case_stop_confirming(comm, workdir):
    """Rank 2 decided, then sends its confirmation to rank 0 only."""
    stop = lambda: _stop_in_agreement("_send", reshard.torch_comm.TAG_CONFIRM + 1)  # noqa: E731
    return model_refit(comm, config(workdir, "tiny", TINY), "tp=2", "tp=2",
                       planned=stop if comm.rank == 2 else None)[:2]


def case_stop_confirming_first(comm, workdir):
    """Rank 2 decided the first agreement of its refit (before any data moves), then
    sends its confirmation to rank 0 only and stops: ranks 1 and 3 never get it."""
    stop = lambda: _stop_in_agreement("_send", reshard.torch_comm.TAG_CONFIRM)  # noqa: E731
    return model_refit(comm, config(workdir, "tiny", TINY), "tp=2", "tp=2",
                       planned=stop if comm.rank == 2 else None)[:2]


def case_stop_confirming_last(comm, workdir):
    """Rank 2 decides the last agreement of its first refit, confirms it to rank 0 only
    and stops; the others (who take its confirmation as owed) start the second refit."""
    stop = lambda: _stop_in_agreement("_send", reshard.torch_comm.TAG_CONFIRM + 1)  # noqa: E731
    return model_refit(comm, config(workdir, "tiny", TINY), "tp=2", "tp=2", iters=2,
                       planned=stop if comm.rank == 2 else None)[:2]


def case_slow_confirming(comm, workdir):
    """Rank 2 confirms each agreement of its first refit (the first, before the data; the
    last, after it) to rank 0, then pauses for 0.75 x the timeout before confirming it to
    ranks 1 and 3 (longer than they wait for the last confirmation before taking it in
    the next agreement, shorter than the timeout); two refits on the comm."""
    real = reshard.torch_comm.GlooTransport._send
    paused = set()
    tags = (reshard.torch_comm.TAG_CONFIRM, reshard.torch_comm.TAG_CONFIRM + 1)

    def send(self, tensor, peer, t):
        if t in tags and peer == 1 and t not in paused:
            paused.add(t)
            time.sleep(0.75 * TIMEOUT_S)
        return real(self, tensor, peer, t)

    def planned():
        if comm.rank == 2:
            reshard.torch_comm.GlooTransport._send = send
    return model_refit(comm, config(workdir, "tiny", TINY), "tp=2", "tp=2", iters=2,
                       planned=planned)[:2]


def case_absent(comm, workdir):
    """Rank 1 never reaches execute (it stalls after planning)."""
    if comm.rank == 1:
        time.sleep(20 * TIMEOUT_S)
        os._exit(3)
    return case_dense(comm, workdir)


def case_two_comms(comm, workdir):
    """Two comms on the one world group, one per thread, named "a" and "b" (the same on
    every rank), each with its own plan of the same layouts and its own source values,
    5 refits each at once: every destination element is its own plan's (one tag space
    per comm; on one shared space gloo matched the plans' messages across). Then an
    unnamed comm made on a thread is refused on every rank."""
    import threading
    shape = (64, 48)
    tensors = reshard.Tensors()
    tensors.add("w", shape, np.float32)
    src = reshard.Layout.from_placements(tensors, {"w": ([0, 1], [Shard(0)])})
    dst = reshard.Layout.from_placements(tensors, {"w": ([2, 3], [Shard(1)])})
    results, errors = {}, {}
    t0 = time.perf_counter()

    def body(name, salt):
        try:
            c = reshard.Comm.from_torch(name=name)
            # plans of equal inputs made in threads: named, so they pair by name
            plan = reshard.Plan(src, dst, rank=c.rank, world=c.size, timeout_s=TIMEOUT_S,
                                name=name)
            checked = 0
            for step in range(5):
                full = (np.arange(shape[0] * shape[1]) * 3 + salt + step).astype(
                    np.float32).reshape(shape)
                r = c.rank
                s = {"w": np.ascontiguousarray(full[r * 32:(r + 1) * 32])} if r < 2 else {}
                d = {"w": np.zeros((64, 24), np.float32)} if r >= 2 else {}
                plan.execute(c, src=s, dst=d)
                if d:
                    want = full[:, (r - 2) * 24:(r - 1) * 24]
                    assert np.array_equal(d["w"], want), \
                        "comm %s step %d: %d wrong elements" % (name, step,
                                                               int((d["w"] != want).sum()))
                    checked += want.size
            results[name] = checked
            c.close()
        except BaseException as e:  # noqa: BLE001 - reported on the main thread
            errors[name] = e

    threads = [threading.Thread(target=body, args=(n, k * 100000))
               for k, n in enumerate(("a", "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors.values():
        raise e
    refused = []

    def unnamed():
        try:
            reshard.Comm.from_torch()
        except reshard.ReshardError as e:
            refused.append(e)
    t = threading.Thread(target=unnamed)
    t.start()
    t.join()
    assert len(refused) == 1 and refused[0].status.name == "INVALID_ARG" and \
        "pass name=" in refused[0].message, refused
    # a second unnamed comm beside the live one (the worker's own) is refused too: ranks
    # that made two in different orders would pair them silently
    try:
        reshard.Comm.from_torch()
        raise AssertionError("a second live unnamed comm was made")
    except reshard.ReshardError as e:
        assert e.status.name == "INVALID_ARG" and "second unnamed comm" in e.message, e
    return results["a"] + results["b"], time.perf_counter() - t0


def case_bench(comm, workdir):
    """The timing refit of bench/torch_vs_mpi.py: qwen3-0.6b, 2 layers, tp=2 -> tp=1,dp=2."""
    refit = reshard.Model("qwen3-0.6b", layers=2).refit("tp=2", "tp=1,dp=2")
    plan = reshard.Plan(refit.train, refit.infer, rank=comm.rank, world=refit.world,
                        timeout_s=TIMEOUT_S)
    times = [pattern_refit(comm, refit, plan) for _ in range(int(os.environ.get("ITERS", "5")))]
    return times[-1][0], sorted(t for _, t in times)[len(times) // 2]


TIMEOUT_S = 30.0
WORKDIR = "."


def main():
    global TIMEOUT_S, WORKDIR
    case, rank, world, store, workdir = sys.argv[1:6]
    WORKDIR = workdir
    if len(sys.argv) > 6:
        TIMEOUT_S = float(sys.argv[6])
    rank, world = int(rank), int(world)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    comm = reshard.Comm.from_torch()
    for name in case.split(","):  # one report per case, on one comm
        out = {"rank": rank, "case": name, "ok": True, "status": "OK", "message": "",
               "verified": 0}
        t0 = time.monotonic()
        try:
            out["verified"], out["seconds"] = globals()["case_" + name](comm, workdir)
        except reshard.ReshardError as e:
            out.update(ok=False, status=e.status.name, message=e.message)
        except AssertionError as e:
            out.update(ok=False, status="ASSERT", message=str(e))
        out["elapsed"] = time.monotonic() - t0
        out["ended"] = time.time()  # beside a stop's time (_stop_in_agreement's file)
        print(json.dumps(out), flush=True)
    comm.close()
    os._exit(0)  # gloo's connections to a dead or stalled peer must not hold the exit


if __name__ == "__main__":
    main()
