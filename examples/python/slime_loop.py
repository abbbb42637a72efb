#!/usr/bin/env python3
"""slime's update step with reshard, in separately started processes: Megatron
trainer ranks run AdamW steps and refit SGLang-shaped servers, whose TP workers
receive through reshard's SGLang loader; every element every worker holds is checked
after every step against an oracle written from SGLang's rules.

    /usr/bin/python3 examples/python/slime_loop.py           # qwen3-0.6b, 1 layer, 4 processes
    /usr/bin/python3 examples/python/slime_loop.py --train tp=2 --infer tp=2,engines=2 --steps 2
    /usr/bin/python3 examples/python/slime_loop.py --kill-rank 3 --kill-at 2 --timeout 5

SGLang is not installed here: each worker process runs the stand-in of
tests/python/standin/sglang (1am9trash/sglang@a17753e, docs/sglang.md): a ModelRunner
with ``--custom-weight-loader reshard.integrations.sglang.load_weights``, its
TpModelWorker, and a scheduler loop answering the server's requests (standin
sglang/_server.py). Trainer rank 0 drives each server as slime's update step does
(pause generation, update, set the weight version, continue), through
reshard.integrations.sglang.SGLangClient: the update is SGLang's
/update_weights_from_tensor carrying one small control message with the custom
loader as load_format, and the bytes go shard to shard over one gloo group of all
processes (reshard's plan), never as full HF tensors.

Trainer rank r holds what Megatron-Core's rank r holds (conventions.megatron_state_dict),
bf16 parameters under DDP(Float16Module(...)) with fp32 masters and torch.optim.AdamW,
as rl_loop.py. Each worker holds SGLang's parameters for its TP rank filled with a
sentinel byte (sglang_state_dict below, written from SGLang's linear.py and
vocab_parallel_embedding.py), and after each update compares every element, vocab
padding rows included, with the HF weights through the same AdamW steps laid out by
those rules, and checks that its receiver says committed at that version. Delta
refits are on unless --no-delta. Exit status 0 only when every element of every step
matched (or, with --kill-rank, when the kill failed the refit on every live rank and
no server reported it)."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STANDIN = os.path.join(ROOT, "tests", "python", "standin")
for _p in (os.path.join(ROOT, "python"), HERE, STANDIN):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from rl_loop import (ADAMW, SteppedWeights, adamw_step, break_model,  # noqa: E402
                     megatron_rank, report_rank, spawn)

# The inference spec of one SGLang server of --tp-size 2. For dense models SGLang's
# TP layout is vLLM's (see sglang_state_dict), so the vLLM spec "tp=2" plans it
# exactly; "engine=sglang,tp=2" names SGLang's layouts once the library has them.
INFER = "engine=sglang,tp=2"


def sglang_state_dict(w: Any, tp: int, t: int, pad_fill: int) -> Dict[str, Any]:
    """What TP rank ``t`` of an SGLang server of ``tp`` ranks holds of a dense model
    (qwen3 / llama / qwen2), bf16, from SGLang's rules at 1am9trash/sglang@a17753e
    (python/sglang/srt/layers/): ColumnParallelLinear keeps output rows
    [t*n/tp, (t+1)*n/tp) (linear.py 345, 407); MergedColumnParallelLinear
    (gate_up_proj) that slice of each of gate and up, stacked (575, 651-671);
    QKVParallelLinear (qkv_proj) its query heads, then its KV heads, or with more
    ranks than KV heads KV head t // (tp / kv) (949-955, 1102-1142); RowParallelLinear
    (o_proj, down_proj) input columns sliced; VocabParallelEmbedding and ParallelLMHead
    the vocabulary padded to a multiple of 64 (DEFAULT_VOCAB_PADDING_SIZE 45,
    pad_vocab_size 54, 273), rows split evenly, padding rows not loaded; norms whole.
    Tied embeddings: no lm_head parameter."""
    import torch
    from conventions import chunk, padded_rows, roundup
    c = w.cfg
    hd = c["hd"]

    def rows(name: str, n: int) -> Any:  # column parallel: output rows
        a, b = chunk(n, tp, t)
        return w.rows(name, a, b)

    def cols(name: str, n: int) -> Any:  # row parallel: input columns
        a, b = chunk(n, tp, t)
        return w[name][:, a:b]

    def kv_heads(name: str) -> Any:
        if tp <= c["kv"]:
            return rows(name, c["kv"] * hd)
        h = t // (tp // c["kv"])
        return w.rows(name, h * hd, (h + 1) * hd)

    vpad = roundup(c["V"], 64)
    out = {"model.embed_tokens.weight": padded_rows(w, "model.embed_tokens.weight", vpad,
                                                    tp, t, pad_fill),
           "model.norm.weight": w["model.norm.weight"]}
    if not c["tied"]:
        out["lm_head.weight"] = padded_rows(w, "lm_head.weight", vpad, tp, t, pad_fill)
    for n in range(c["L"]):
        p = "model.layers.%d." % n
        a, m = p + "self_attn.", p + "mlp."
        out[a + "qkv_proj.weight"] = torch.cat([rows(a + "q_proj.weight", c["nh"] * hd),
                                                kv_heads(a + "k_proj.weight"),
                                                kv_heads(a + "v_proj.weight")])
        out[a + "o_proj.weight"] = cols(a + "o_proj.weight", c["nh"] * hd)
        out[m + "gate_up_proj.weight"] = torch.cat([rows(m + "gate_proj.weight", c["I"]),
                                                    rows(m + "up_proj.weight", c["I"])])
        out[m + "down_proj.weight"] = cols(m + "down_proj.weight", c["I"])
        for norm in ("input_layernorm", "post_attention_layernorm") + \
                (("self_attn.q_norm", "self_attn.k_norm") if c["qk_norm"] else ()):
            out[p + norm + ".weight"] = w[p + norm + ".weight"]
    return {k: v.contiguous() for k, v in out.items()}


def server_args(infer: str) -> Any:
    """The stand-in's ServerArgs of a server the infer spec describes (its flags:
    --tp-size, --dp-size/--enable-dp-attention, --ep-size), with reshard's loader."""
    from reshard.integrations.sglang import LOADER, spec_keys
    from sglang.srt.server_args import ServerArgs
    kv = spec_keys(infer)
    tp = int(kv.get("tp", 1))
    ep = kv.get("ep", "off")
    return ServerArgs(tp_size=tp, dp_size=int(kv.get("dp", 1)),
                      enable_dp_attention=kv.get("dp_attention") == "on",
                      ep_size=tp if ep == "on" else 1 if ep == "off" else int(ep),
                      custom_weight_loader=[LOADER])


def sglang_tp_worker(args: Any, i: int, fault: Any = None) -> Tuple[Any, Any, int, int]:
    """Infer rank ``i``'s SGLang TP worker (the stand-in's ModelRunner with reshard's
    loader, in its TpModelWorker): its model holds SGLang's parameters for its TP rank
    (sglang_state_dict) filled with the sentinel byte; ``fault`` breaks the model
    (rl_loop.break_model) or the server's flags ("eplb"). (model, TpModelWorker,
    server index, TP rank)."""
    import torch
    import conventions
    import reshard
    from modules import module_of
    from reshard.integrations.ranks import sizes
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.model_executor.model_runner import ModelRunner
    s = sizes(args.train, args.infer)
    engine, t = divmod(i, s.per_engine)
    w = conventions.Weights(conventions.load_config(args.model, args.layers))
    fill = reshard.SENTINEL_BYTE
    shapes = sglang_state_dict(w, s.per_engine, t, fill)
    model = module_of({n: torch.empty_like(x).view(torch.uint8).fill_(fill).view(x.dtype)
                       for n, x in shapes.items()})
    sargs = server_args(args.infer)
    if fault == "eplb":
        sargs.enable_eplb = True
    elif fault:
        break_model(model, fault)
    return model, TpModelWorker(ModelRunner(model, sargs, tp_rank=t)), engine, t


def trainer(args: Any, rank: int) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist
    from modules import Wrapped
    from reshard.integrations import ReshardTrainer, ReshardTrainerInitInfo
    from reshard.integrations.ranks import sizes
    from reshard.integrations.sglang import SGLangClient
    from sglang._server import StandinServer
    from sglang.srt.utils import MultiprocessingSerializer

    masters, opt, gpt = megatron_rank(args, rank)
    model = Wrapped(Wrapped(gpt))  # DDP(Float16Module(GPTModel))
    s = sizes(args.train, args.infer)
    ctrl = dist.FileStore(os.path.join(args.dir, "control"), -1)
    servers, clients = [], None
    if rank == 0:  # slime's rollout manager: one client per SGLang server
        servers = [StandinServer(ctrl, e, s.per_engine, args.timeout * 3)
                   for e in range(s.engines)]
        ser = lambda obj: MultiprocessingSerializer.serialize(obj, output_str=True)  # noqa: E731
        clients = [SGLangClient(srv, s.per_engine, serialize=ser) for srv in servers]
    info = ReshardTrainerInitInfo(model=args.model, train=args.train, infer=args.infer,
                                  layers=args.layers, store_path=os.path.join(args.dir, "refit"),
                                  timeout_s=args.timeout, rank=rank, delta=args.delta)
    t0 = time.perf_counter()
    try:
        engine = ReshardTrainer.trainer_init(info, client=clients, source=model)
    finally:
        if rank == 0 and "engine" not in locals():  # refused: the servers stop serving
            for srv in servers:
                srv.close()
    report: Dict[str, Any] = {"role": "train", "rank": rank, "init_s": time.perf_counter() - t0,
                              "steps": [], "failed": [], "versions": []}
    params = dict(gpt.named_parameters())
    for k in range(1, args.steps + 1):
        t0 = time.perf_counter()
        adamw_step(list(masters.values()), opt)
        with torch.no_grad():
            for n, m in masters.items():
                params[n].copy_(m)
        t1 = time.perf_counter()
        try:
            engine.send_weights()
        except Exception as e:  # noqa: BLE001 - a killed worker: reported, the loop ends
            report["failed"].append([k, "%s: %s" % (type(e).__name__, e)])
            report["versions"] += [srv.weight_version for srv in servers]
            break
        d = engine.plan.delta_info() if args.delta else {"wire_bytes": 0, "stream_bytes": 0}
        report["steps"].append([t1 - t0, time.perf_counter() - t1, d["wire_bytes"],
                                d["stream_bytes"]])
        report["versions"] += [srv.weight_version for srv in servers]
        ctrl.wait(["checked/%d/%d" % (k, i) for i in range(s.world - s.train_world)],
                  datetime.timedelta(seconds=args.timeout * 8))  # the workers' check
    if not report["failed"]:
        for c in clients or []:
            c.shutdown()  # every worker closes its communicator
        engine.shutdown()
    for srv in servers:
        srv.close()
    return report


def worker(args: Any, rank: int) -> Dict[str, Any]:
    import torch.distributed as dist
    import conventions
    import reshard
    from reshard.integrations.ranks import sizes
    from reshard.integrations.sglang import UPDATE, receiver_of
    from sglang._server import serve
    from sglang.srt.utils import MultiprocessingSerializer

    s = sizes(args.train, args.infer)
    i = rank - s.train_world
    model, tp_worker, engine, t = sglang_tp_worker(args, i, args.fault if i == 0 else None)
    w = conventions.Weights(conventions.load_config(args.model, args.layers))
    fill = reshard.SENTINEL_BYTE
    oracle = SteppedWeights(w, dict(ADAMW, lr=args.lr))
    ctrl = dist.FileStore(os.path.join(args.dir, "control"), -1)
    report = {"role": "infer", "rank": rank, "checked": 0, "wrong": 0, "steps": 0,
              "states": [], "bad": []}

    def after(req: Any) -> None:  # once the scheduler replied to the server
        (name, x), = MultiprocessingSerializer.deserialize(req.serialized_named_tensors[t])
        if name != UPDATE:
            return
        version = int(x.reshape(-1)[0])
        state = receiver_of(model).weights_state()
        report["states"].append([version, state["state"], state["version"]])
        if state["state"] != "committed":
            return  # torn: never checked as an update, never reported as one
        while oracle.steps < version:
            oracle.advance()
        expect = sglang_state_dict(oracle, s.per_engine, t, fill)
        live = dict(model.named_parameters())
        assert sorted(live) == sorted(expect)
        for n, e in expect.items():
            bad = conventions.mismatches(live[n].detach(), e)
            report["wrong"] += bad
            report["checked"] += e.numel()
            if bad:
                report["bad"].append([version, n, bad])
        if state["version"] != version:
            report["wrong"] += 1
        report["steps"] += 1
        ctrl.set("checked/%d/%d" % (version, i), "1")

    runner = tp_worker.model_runner
    update = runner.update_weights_from_tensor

    def update_or_die(named_tensors: Any, load_format: Any = None) -> Any:  # --kill-rank
        (name, x), = named_tensors
        if name == UPDATE and rank == args.kill_rank and int(x[0]) == args.kill_at:
            os._exit(9)
        return update(named_tensors, load_format)

    runner.update_weights_from_tensor = update_or_die
    serve(ctrl, engine, tp_worker, timeout_s=args.timeout * 8, after=after)
    recv = receiver_of(model)
    if recv is not None and recv.comm is None and recv.last_error:  # init refused
        raise RuntimeError(recv.last_error)
    return report


def summarize(args: Any, s: Any, reports: List[Dict[str, Any]], errors: List[str]) -> int:
    trainers = [r for r in reports if r["role"] == "train"]
    workers = [r for r in reports if r["role"] == "infer"]
    for r in workers:
        for v, n, bad in r["bad"][:4]:
            print("slime_loop: rank %d, step %d: %s: %d element(s) wrong"
                  % (r["rank"], v, n, bad), file=sys.stderr)
    print("%s (%d layer(s)), Megatron %s -> SGLang %s, %d server(s), %d processes, delta %s"
          % (args.model, args.layers, args.train, args.infer, s.engines, s.world,
             "on" if args.delta else "off"))
    for k in range(min([len(r["steps"]) for r in trainers] or [0])):
        opt = max(r["steps"][k][0] for r in trainers)
        refit = max(r["steps"][k][1] for r in trainers)
        wire = sum(r["steps"][k][2] for r in trainers)
        dense = sum(r["steps"][k][3] for r in trainers)
        print("step %d: AdamW %.3f s, update %.3f s%s" % (
            k + 1, opt, refit, ", delta %.2f of %.2f MB on the wire" % (wire / 1e6, dense / 1e6)
            if dense else ""))
    checked = sum(r["checked"] for r in workers)
    wrong = sum(r["wrong"] for r in workers)
    rank0 = [r for r in trainers if r["rank"] == 0]
    versions = rank0[0]["versions"] if rank0 else []
    print("SGLang weight_version of each server after each update: %s" % versions)
    if args.kill_rank >= 0:
        k = args.kill_at
        live = [r for r in range(s.world) if r != args.kill_rank]
        failed = {r["rank"]: r["failed"] for r in trainers}
        torn = [st for r in workers for st in r["states"] if st[0] == k]
        ok = len(reports) == len(live) and wrong == 0 and \
            all([f[0] for f in failed.get(r, [])] == [k] for r in range(s.train_world)) and \
            all(st[1] != "committed" for st in torn) and \
            versions[-s.engines:] == [str(k - 1) if k > 1 else "default"] * s.engines
        for r in sorted(failed):
            for kk, e in failed[r]:
                print("refit %d failed on train rank %d: %s" % (kk, r, e[:300]))
        print("live workers' state after refit %d: %s" % (k, [st[1] for st in torn]))
        print("killed rank %d at refit %d: every live rank failed it, no server advanced "
              "its version: %s" % (args.kill_rank, k, "OK" if ok else "FAILED"))
        return 0 if ok else 1
    for e in errors:
        print("slime_loop: %s" % e, file=sys.stderr)
    ok = not errors and len(workers) == s.world - s.train_world and checked > 0 and \
        wrong == 0 and all(r["steps"] == args.steps for r in workers) and \
        versions == [str(k) for k in range(1, args.steps + 1) for _ in range(s.engines)]
    print("%d of %d SGLang worker(s) reported: %d elements checked over %d step(s), %d wrong: %s"
          % (len(workers), s.world - s.train_world, checked, args.steps, wrong,
             "OK" if ok else "FAILED"))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-0.6b", help="shipped dense model or config.json")
    ap.add_argument("--layers", type=int, default=1, help="keep the first K decoder layers")
    ap.add_argument("--train", default="tp=2", help="Megatron spec")
    ap.add_argument("--infer", default=INFER, help="inference spec of the SGLang servers")
    ap.add_argument("--steps", type=int, default=2, help="optimizer steps, each then an update")
    ap.add_argument("--no-delta", dest="delta", action="store_false", help="dense refits")
    ap.add_argument("--lr", type=float, default=ADAMW["lr"], help="AdamW learning rate")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds any wait may take")
    ap.add_argument("--fault", choices=["reshape", "dtype", "missing", "extra", "eplb"],
                    help="break the first worker's model or flags: every rank refuses at init")
    ap.add_argument("--kill-rank", type=int, default=-1, help="this rank dies ...")
    ap.add_argument("--kill-at", type=int, default=0, help="... as update K (from 1) arrives")
    ap.add_argument("--role", choices=["train", "infer"], help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from reshard.integrations.ranks import sizes
    s = sizes(args.train, args.infer)
    if args.role is None:
        roles = ["train" if r < s.train_world else "infer" for r in range(s.world)]
        reports, errors = spawn(__file__, sys.argv[1:], roles, args.timeout * 20, "slime_loop.")
        if args.fault:
            for e in errors:
                print("slime_loop: %s" % e)
            return 0 if len(errors) == s.world and not reports else 1
        return summarize(args, s, reports, errors)
    report_rank(args.role, args.rank,
                lambda: (trainer if args.role == "train" else worker)(args, args.rank))
    os._exit(0)  # at once: a gloo group of a killed peer may block interpreter exit


if __name__ == "__main__":
    sys.exit(main())
