"""The vLLM backend on vLLM's newest weight-transfer API (tests/python/standin):
failures at start, update and finish go through vLLM's worker failure path (abort,
reset, session dropped), vLLM's reported weight version never advances past torn
weights, the next refit is whole and exact; abort's edge cases; sources without
rank-local shards and engines we cannot write refused by name on every rank.
Trainer ranks and workers in threads over gloo, as test_integrations.py."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import reshard  # noqa: E402
from reshard.integrations import ReshardTrainerInitInfo  # noqa: E402
from reshard.integrations.ranks import sizes  # noqa: E402
from reshard.integrations.worker import WorkerCore  # noqa: E402
from test_integrations import (SENT, STANDIN, DirectClient, assert_all,  # noqa: E402
                               dense_case, parallel)

TRAIN, INFER = "tp=2", "tp=2"


@pytest.fixture
def rv(monkeypatch):
    import sys
    monkeypatch.syspath_prepend(STANDIN)
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, k)
    import reshard.integrations.vllm as mod
    monkeypatch.setattr(mod, "_BUILT", {})
    mod.register()
    from vllm.distributed.weight_transfer import factory
    return mod, factory


def steps_threads(tmp, path, sources, workers, steps, rv, timeout_s=4.0, source_of=None,
                  after_step=None, **info):
    """Trainer ranks in threads through vLLM's trainer factory; each rank runs
    ``steps`` refits, recording each step's error instead of stopping (errors[(k, r)]).
    ``after_step(k)`` runs on rank 0 after refit k returned or failed."""
    mod, factory = rv
    s = sizes(TRAIN, INFER)
    werr = {}
    engine = DirectClient(workers, werr, "engine 0")
    store = os.path.join(str(tmp), "store.%d" % time.monotonic_ns())
    errors = {}
    barrier = threading.Barrier(s.train_world)
    source_of = source_of or mod.MegatronSource

    def body(r):
        try:
            ti = ReshardTrainerInitInfo(model=path, train=TRAIN, infer=INFER, store_path=store,
                                        timeout_s=timeout_s, rank=r, **info)
            eng = factory.WeightTransferTrainerFactory.trainer_init(
                ti, client=engine if r == 0 else None, source=source_of(sources[r]))
        except Exception as e:  # noqa: BLE001
            errors[("init", r)] = e
            return
        for k in range(1, steps + 1):
            try:
                eng.send_weights()
            except Exception as e:  # noqa: BLE001
                errors[(k, r)] = e
            barrier.wait(60)
            if r == 0 and after_step is not None:
                after_step(k, eng)
            barrier.wait(60)
        eng.shutdown()
    ts = [threading.Thread(target=body, args=(r,)) for r in range(s.train_world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    engine.join()
    return engine, errors, werr


def fail_once(worker, method, when):
    """Make ``worker.method`` raise once: "before" it runs, or "after" it ran (for
    update_weights: after writing, with a stretch of its weights overwritten, as a
    refit torn part way leaves them)."""
    orig = getattr(worker, method)
    state = {"armed": True}

    def wrapped(*a, **k):
        if state["armed"] and when == "before":
            state["armed"] = False
            raise RuntimeError("injected %s failure on infer rank %d" % (method, worker.rank))
        out = orig(*a, **k)
        if state["armed"] and when == "after":
            state["armed"] = False
            for t in worker.model.parameters():
                t.data.view(torch.uint8)[: t.numel()].fill_(SENT)  # the torn part
                break
            raise RuntimeError("injected %s failure on infer rank %d" % (method, worker.rank))
        return out
    return wrapped, state


@pytest.mark.parametrize("phase", ["start", "update", "finish"])
def test_failure_keeps_vllm_version_and_next_refit_is_whole(tmp_path, rv, phase):
    """delta refits; refit 2 fails on infer rank 3 at ``phase`` (start: before it
    opens; update: after writing, a stretch of its weights torn; finish: before it
    closes). vLLM's worker path runs (abort, reset, session dropped): both trainer
    ranks raise naming it, get_weight_version() stays "1", the aborted workers say
    torn, and refit 3 rewrites them whole (their streams dense): every element of every worker
    equals the oracle, and vLLM reports "3"."""
    mod, factory = rv
    path, sources, expect, models = dense_case(tmp_path, TRAIN, INFER)
    workers = [factory.WeightTransferEngineFactory.create_engine(
        SimpleNamespace(backend="reshard"),
        SimpleNamespace(parallel_config=parallel(INFER, i),
                        model_config=SimpleNamespace(dtype=torch.bfloat16)),
        torch.device("cpu"), m) for i, m in enumerate(models)]
    method = {"start": "start_weight_update", "update": "update_weights",
              "finish": "finish_weight_update"}[phase]
    seen = {}

    def after(k, eng):
        client = eng.clients[0]
        seen[k] = (client.get_weight_version(), client.session,
                   [w.weights_state()["state"] for w in workers],
                   eng.plan.delta_info()["dense_streams"])
        if k == 1:
            wrapped, _ = fail_once(workers[1], method, "after" if phase == "update"
                                   else "before")
            setattr(workers[1], method, wrapped)
    engine, errors, werr = steps_threads(tmp_path, path, sources, workers, 3, rv,
                                         after_step=after, delta=True)
    assert sorted(errors) == [(2, 0), (2, 1)], errors  # refit 2 failed on every rank
    assert "injected %s failure on infer rank 3" % method in str(errors[(2, 0)])
    e = errors[(2, 1)]
    assert isinstance(e, reshard.ReshardError) and e.status == reshard.Status.TRANSPORT
    assert "train rank 1: refit 2" in str(e) and \
        "injected %s failure on infer rank 3" % method in str(e), str(e)
    assert seen[1][:3] == ("1", False, ["committed", "committed"]), seen
    version, session, states, _ = seen[2]
    assert (version, session) == ("1", False), seen  # not advanced, session dropped
    if phase == "start":  # rank 3 never opened (untouched); rank 2's open one aborted
        assert states == ["torn", "committed"], seen
    elif phase == "update":
        assert states == ["torn", "torn"], seen
    else:  # rank 3 aborted; rank 2 torn too unless it had finished first (then whole)
        assert states[1] == "torn" and states[0] in ("torn", "committed"), seen
    assert seen[3][:3] == ("3", False, ["committed", "committed"]), seen
    assert seen[3][3] >= 1, seen  # refit 3 streamed dense to the torn worker(s)
    assert_all(models, expect)
    assert engine.calls[-3:] == ["start", "update", "finish"]


def test_abort_edges_and_finish_on_torn_weights(tmp_path):
    """abort with no session is a no-op (vLLM calls it from its failure path); abort
    twice: the second is a no-op; finish with no session, and finish of a session
    whose refit tore the weights, raise naming engine and rank; a second start
    while a session is open is refused naming both."""
    _, _, _, models = dense_case(tmp_path)
    w = WorkerCore(models[0], parallel(INFER, 0))
    w.info, w.rank = SimpleNamespace(engine_index=1, delta=False), 5
    w.abort_weight_update()
    assert (w.session, w.torn) == (False, False)  # nothing was open: nothing torn
    with pytest.raises(reshard.ReshardError, match="engine 1, infer rank 5: "
                       "finish_weight_update with no update session open"):
        w.finish_weight_update()
    w.start_weight_update()
    with pytest.raises(reshard.ReshardError, match="engine 1, infer rank 5: "
                       "start_weight_update while refit session 0 is still open"):
        w.start_weight_update()
    w.abort_weight_update()
    assert (w.session, w.torn, w.weights_state()["state"]) == (False, True, "torn")
    w.abort_weight_update()  # twice: no-op
    assert (w.session, w.torn) == (False, True)
    w.start_weight_update()  # a torn engine may start the refit that repairs it
    with pytest.raises(reshard.ReshardError, match="engine 1, infer rank 5: refit 0 did "
                       "not land whole") as e:
        w.finish_weight_update()
    assert e.value.status == reshard.Status.VERIFY
    assert w.session is False


def test_full_tensor_source_refused_on_every_rank(tmp_path, rv):
    """vLLM's ModuleSource (full HF tensors, no rank-local shards) on the trainer:
    every trainer rank and every worker fails at init within the bound, each
    naming trainer rank 0's source type."""
    mod, factory = rv
    from vllm.distributed.weight_transfer.base import ModuleSource
    path, sources, expect, models = dense_case(tmp_path)
    workers = [WorkerCore(m, parallel(INFER, i)) for i, m in enumerate(models)]
    t0 = time.monotonic()
    _, errors, werr = steps_threads(tmp_path, path, sources, workers, 1, rv, timeout_s=4.0,
                                    source_of=ModuleSource)
    assert sorted(errors) == [("init", 0), ("init", 1)], errors
    assert sorted(werr) == [2, 3], werr
    for e in list(errors.values()) + list(werr.values()):
        assert "source ModuleSource has no rank-local shards" in str(e), str(e)
        assert "trainer rank 0" in str(e) and "trainer rank 1" in str(e), str(e)
    assert time.monotonic() - t0 < 12
    for m in models:  # nothing written
        assert all(bool((p.detach().view(torch.uint8) == SENT).all()) for p in m.parameters())


@pytest.mark.parametrize("what", ["eplb", "lora"])
def test_engine_we_cannot_write_refused_by_name(tmp_path, rv, what):
    """An engine started with --enable-eplb, or with LoRA (vllm_config.lora_config
    set): init fails on every rank (the
    trainer's too), naming the engine, the infer rank and what is refused."""
    mod, factory = rv
    path, sources, expect, models = dense_case(tmp_path)
    workers = []
    for i, m in enumerate(models):
        pc = parallel(INFER, i)
        pc.enable_eplb = what == "eplb"
        vcfg = SimpleNamespace(parallel_config=pc, model_config=SimpleNamespace(dtype=None),
                               lora_config=SimpleNamespace(max_lora_rank=8)
                               if what == "lora" else None)
        workers.append(factory.WeightTransferEngineFactory.create_engine(
            SimpleNamespace(backend="reshard"), vcfg, torch.device("cpu"), m))
    _, errors, werr = steps_threads(tmp_path, path, sources, workers, 1, rv)
    assert sorted(errors) == [("init", 0), ("init", 1)], errors
    assert sorted(werr) == [2, 3], werr
    word = "--enable-eplb" if what == "eplb" else "--enable-lora"
    for e in list(errors.values()) + list(werr.values()):
        assert "engine 0, infer rank 2: the engine runs with %s" % word in str(e), str(e)


def test_sleep_level_2_invalidates_delta_state_by_itself(tmp_path, rv):
    """delta refits; after refit 1, engine 0's vLLM worker sleeps at level 2 (its
    weights freed and mapped back with other contents) and wakes, nobody calling
    invalidate_weights(): refit 2 (the trainers' weights unchanged) rewrites that
    worker whole (a dense stream), so every element equals the oracle; refit 3 is a
    delta again (no dense stream). A level-1 sleep keeps the weights and the delta."""
    mod, factory = rv
    from vllm.v1.worker.gpu_worker import Worker  # imported: the engine wraps its sleep
    path, sources, expect, models = dense_case(tmp_path, TRAIN, INFER)
    workers = [factory.WeightTransferEngineFactory.create_engine(
        SimpleNamespace(backend="reshard"),
        SimpleNamespace(parallel_config=parallel(INFER, i), model_config=SimpleNamespace()),
        torch.device("cpu"), m) for i, m in enumerate(models)]
    vllm_workers = [Worker(m, e) for m, e in zip(models, workers)]
    dense = {}

    def after(k, eng):
        dense[k] = eng.plan.delta_info()["dense_streams"]
        if k == 1:
            vllm_workers[0].sleep(level=2)
            vllm_workers[0].wake_up()
            vllm_workers[1].sleep(level=1)
            vllm_workers[1].wake_up()
    _, errors, werr = steps_threads(tmp_path, path, sources, workers, 3, rv,
                                    after_step=after, delta=True)
    assert errors == {} and werr == {}, (errors, werr)
    assert dense == {1: 2, 2: 1, 3: 0}, dense  # rank 0's streams: to each worker
    assert_all(models, expect)


def test_fail_closed_worker_refuses_later_refits_by_name(tmp_path, rv):
    """vLLM's gpu_worker at the followed revision fails closed: after refit 2's
    update fails on infer rank 3 it refuses every later start ("serving is
    disabled"). Refit 3 then fails at start on both trainer ranks, naming it;
    vLLM's weight version stays "1" throughout; no worker is written after refit 1
    except by the failed round's own collective."""
    mod, factory = rv
    path, sources, expect, models = dense_case(tmp_path, TRAIN, INFER)
    workers = [WorkerCore(m, parallel(INFER, i)) for i, m in enumerate(models)]
    seen = {}
    engines = []

    def after(k, eng):
        client = eng.clients[0]
        client.fail_closed = True
        engines.append(client)
        seen[k] = client.get_weight_version()
        if k == 1:
            wrapped, _ = fail_once(workers[1], "update_weights", "before")
            workers[1].update_weights = wrapped
    _, errors, _ = steps_threads(tmp_path, path, sources, workers, 3, rv, timeout_s=2.0,
                                 after_step=after)
    assert seen == {1: "1", 2: "1", 3: "1"}, seen
    assert sorted(errors) == [(2, 0), (2, 1), (3, 0), (3, 1)], errors
    for r in (0, 1):
        assert "serving is disabled" in str(errors[(3, r)]), errors[(3, r)]
    assert engines[-1].calls[-1] == "start"


@pytest.mark.parametrize("kernel", ["FLASHINFER_CUTLASS", "TRITON"])
def test_moe_kernel_read_from_the_live_layers(kernel):
    """vLLM picks the unquantized MoE kernel itself: the engine reads it from the
    live layers' quant_method.unquantized_backend. CUTLASS (w13 kept as [up; gate]) is
    refused naming the layer's w13_weight and the kernel; Triton passes."""
    import enum
    from reshard.integrations.vllm import vllm_engine_problems

    class UnquantizedMoeBackend(enum.Enum):  # vLLM's enum, the members used here
        TRITON = "TRITON"
        FLASHINFER_CUTLASS = "FlashInfer CUTLASS"
    model = torch.nn.Module()
    model.add_module("layers", torch.nn.Module())
    experts = torch.nn.Module()
    experts.w13_weight = torch.nn.Parameter(torch.zeros(2, 8, 4), requires_grad=False)
    experts.quant_method = SimpleNamespace(unquantized_backend=UnquantizedMoeBackend[kernel])
    model.layers.add_module("0", torch.nn.Module())
    getattr(model.layers, "0").add_module("experts", experts)
    got = vllm_engine_problems(SimpleNamespace(parallel_config=SimpleNamespace()), model)
    if kernel == "TRITON":
        assert got == []
    else:
        assert got == ["layers.0.experts.w13_weight: vLLM runs this MoE layer on its "
                       "FLASHINFER_CUTLASS kernel, whose w13 layout the refit does not "
                       "write (it writes Triton's [gate; up])"]


@pytest.mark.parametrize("enabled,follow,refused", [
    (True, False, "the engine runs with --enable-eplb: vLLM moves experts"),
    (False, True, "the init info has eplb=True but the engine runs without --enable-eplb"),
    (True, True, None)])
def test_eplb_refused_unless_followed(enabled, follow, refused):
    """vllm_engine_problems: --enable-eplb is refused unless the init info follows
    the live maps (eplb=True), and eplb=True without --enable-eplb is refused too."""
    from reshard.integrations.vllm import vllm_engine_problems
    cfg = SimpleNamespace(parallel_config=SimpleNamespace(enable_eplb=enabled))
    got = vllm_engine_problems(cfg, torch.nn.Module(), follow)
    assert [p for p in got if "eplb" in p.lower()] == ([] if refused is None else got)
    assert refused is None or refused in got[0]
