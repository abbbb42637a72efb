"""The engine integrations (reshard.integrations): the vLLM-shaped receiver, the
Megatron-shaped sender and the vLLM shell, over real torch.distributed gloo groups.

- Separate processes: examples/python/rl_loop.py (AdamW steps, then refits, every
  element checked against conventions.py, written from the frameworks' rules) and a
  trainer or a worker killed mid-refit.
- Threads of this process, each a rank with its own gloo group member and store
  client: the vLLM shell through the stand-in of vLLM's base.py/factory.py
  (tests/python/standin: vLLM itself cannot be installed here), bad input at init
  (every rank fails, naming the parameter, nothing written), post-load forms."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import conventions  # noqa: E402
import reshard  # noqa: E402
from modules import Wrapped, module_of  # noqa: E402
from reshard.integrations import (MegatronChunks, ReshardTrainer,  # noqa: E402
                                  ReshardTrainerInitInfo, WorkerCore)
from reshard import ReshardError, Status  # noqa: E402
from reshard.integrations.ranks import sizes  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "python", "rl_loop.py")
STANDIN = os.path.join(HERE, "standin")  # vLLM's newest weight-transfer API
TINY = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
        "tie_word_embeddings": False}
SENT = reshard.SENTINEL_BYTE


def write(tmp, name, cfg):
    path = os.path.join(str(tmp), name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def shrunk(base, **kw):
    """A shipped config with small sizes (every other field as shipped)."""
    with open(os.path.join(ROOT, "data", "models", base + ".json")) as f:
        c = json.load(f)
    c.pop("quantization_config", None)
    c.update(kw)
    return c


# ---- separate processes -------------------------------------------------------------

def run_example(args, timeout=240):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, EXAMPLE] + args, capture_output=True, text=True,
                       timeout=timeout)
    return p, time.monotonic() - t0


def test_rl_loop_processes(tmp_path):
    """4 processes: Megatron pp=2 -> vLLM tp=1 dp=2, two AdamW steps each refit, delta
    refits (the first one dense); every element and weights_state() checked by the
    workers, the wire bytes reported."""
    p, _ = run_example(["--model", write(tmp_path, "tiny", TINY), "--layers", "2",
                        "--train", "pp=2", "--infer", "tp=1,dp=2", "--steps", "2",
                        "--timeout", "20", "--delta"])
    assert p.returncode == 0, p.stdout + p.stderr
    last = p.stdout.strip().splitlines()[-1]
    n = 2 * sum(t.numel() for i in range(2) for t in conventions.vllm_state_dict(
        conventions.Weights(conventions.load_config(write(tmp_path, "tiny", TINY))),
        "tp=1,dp=2", i, SENT).values())
    assert last == ("2 of 2 inference rank(s) reported: %d elements checked over 2 step(s), "
                    "0 wrong: OK" % n), p.stdout
    assert "refit" in p.stdout and "% of the step" in p.stdout
    steps = [x for x in p.stdout.splitlines() if x.startswith("step ")]
    assert len(steps) == 2 and all(" MB on the wire (" in x for x in steps), p.stdout


def test_rl_loop_follows_vllms_eplb(tmp_path):
    """--eplb, a Qwen3-MoE (6 experts, 2 redundant slots): Megatron EP2 -> two vLLM
    engines of tp=2, ep=on, each with its own balancer moving experts before refits 1
    and 3, delta refits; every element of every worker (each slot against the expert
    its engine's map names) checked after each of 4 refits; the refits between moves
    send less than whole."""
    cfg = shrunk("qwen3-30b-a3b", hidden_size=64, intermediate_size=96, head_dim=16,
                 moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, num_experts=6, vocab_size=300)
    p, _ = run_example(["--model", write(tmp_path, "moe", cfg), "--layers", "2",
                        "--train", "tp=1,dp=2,ep=2", "--infer",
                        "tp=2,ep=on,redundant=2,engines=2", "--steps", "4", "--timeout",
                        "20", "--delta", "--lr", "1e-6", "--eplb"])
    assert p.returncode == 0, p.stdout + p.stderr
    w = conventions.Weights(conventions.load_config(write(tmp_path, "moe", cfg)))
    n = 4 * sum(t.numel() for i in range(4) for t in conventions.vllm_state_dict(
        w, "tp=2,ep=on,redundant=2", i, SENT).values())
    assert p.stdout.strip().splitlines()[-1] == (
        "4 of 4 inference rank(s) reported: %d elements checked over 4 step(s), 0 wrong: OK"
        % n), p.stdout
    wire = [float(x.split("(")[-1].split("%")[0]) for x in p.stdout.splitlines()
            if x.startswith("step ")]
    assert wire[0] == wire[2] == 100.0 and wire[1] < 100.0 and wire[3] < 100.0, p.stdout


@pytest.mark.parametrize("phase", ["start", "update", "finish"])
def test_rl_loop_failure_keeps_version_and_next_refit_exact(tmp_path, phase):
    """rl_loop.py, delta refits, 3 steps: inference rank 0 fails refit 2 at ``phase``
    (update: after writing, its weights torn part way). Both trainer ranks raise
    naming it; the worker that failed ran vLLM's path (abort, reset) while vLLM's
    reported version was "1"; vLLM reports "1", "1", "3" after the three refits;
    every element of both workers equals the oracle after each refit they finished.
    A failure after writing tears both workers (the engine aborts every session),
    so refit 3 is whole; at start the failing worker never opened (its weights stay
    committed)."""
    p, _ = run_example(["--model", write(tmp_path, "tiny", TINY), "--steps", "3",
                        "--timeout", "10", "--delta", "--fail-at", "2",
                        "--fail-phase", phase])
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout.splitlines()
    method = {"start": "start_weight_update", "update": "update_weights",
              "finish": "finish_weight_update"}[phase]
    inj = "injected %s failure of refit 2 on inference rank 0" % phase
    assert any(x.startswith("refit 2 failed on train rank 0") and inj in x for x in out), out
    assert any(x.startswith("refit 2 failed on train rank 1") and "RESHARD_ERR_TRANSPORT"
               in x and inj in x for x in out), out
    assert "vLLM's reported version after each refit: 1, 1, 3" in out, out
    state = "committed" if phase == "start" else "torn"
    assert "failed on the inference side: %s (weights then %s)" % (method, state) in out, out
    n = 2 * sum(t.numel() for i in range(2) for t in conventions.vllm_state_dict(
        conventions.Weights(conventions.load_config(write(tmp_path, "tiny", TINY), 1)),
        "tp=2", i, SENT).values())  # rl_loop's default: 1 layer
    assert out[-1].startswith("2 of 2 inference rank(s) reported: ") and \
        out[-1].endswith(" elements checked over 2 step(s) (refit 2 failed as injected), "
                         "0 wrong: OK"), out
    checked = int(out[-1].split("reported: ")[1].split()[0])
    assert checked == n or (phase == "finish" and n < checked <= n * 3 // 2), (checked, n)
    if phase == "update":
        wire = {x.split(":")[0]: x.split("delta ")[1] for x in out if x.startswith("step ")}
        assert wire["step 3"] == wire["step 1"], wire  # whole after the abort, as the first


@pytest.mark.parametrize("victim", [0, 1, 3])
def test_rank_killed_mid_refit(tmp_path, victim):
    """Trainer rank 0 (the control-plane driver), trainer rank 1 or inference rank 3
    dies as refit 2 starts: every other rank fails naming it and no other rank, within
    twice the timeout (plus start-up)."""
    p, secs = run_example(["--model", write(tmp_path, "tiny", TINY), "--train", "tp=2",
                           "--infer", "tp=2", "--steps", "3", "--timeout", "3",
                           "--kill-rank", str(victim), "--kill-at", "2"])
    assert p.returncode == 1
    lines = [x for x in p.stderr.splitlines() if x.startswith("rl_loop: rank")]
    assert "rl_loop: rank %d: exit status 9" % victim in lines, p.stderr
    for r in set(range(4)) - {victim}:
        line = next(x for x in lines if x.startswith("rl_loop: rank %d:" % r))
        assert "RESHARD_ERR_TIMEOUT" in line and "rank(s) %d " % victim in line, p.stderr
        named = re.search(r"rank\(s\) \[?([0-9, ]+)", line).group(1)
        assert [int(x) for x in named.replace(",", " ").split()] == [victim], line
    assert secs < 60, secs


# ---- threads: one rank per thread ------------------------------------------------------

def _standin_engine():
    """The stand-in's engine control plane (standin/vllm/_engine.py), loaded by path:
    WorkerCore tests need no vllm package on sys.path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "standin_engine", os.path.join(STANDIN, "vllm", "_engine.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.StandinEngine


DirectClient = _standin_engine()


def parallel(infer, i):
    s = sizes("tp=1", infer)
    local = i % (s.tp * s.dp)
    return SimpleNamespace(tensor_parallel_size=s.tp, data_parallel_size=s.dp,
                           data_parallel_index=local // s.tp, rank=local % s.tp,
                           pipeline_parallel_size=1)


def on_trainer_threads(world, body, errors):
    """``body(r)`` for each trainer rank r < ``world``, one thread each, joined; what a
    rank raises goes to ``errors[r]`` (the dict its engine clients record into too)."""
    def run(r):
        try:
            body(r)
        except Exception as e:  # noqa: BLE001 - recorded per rank
            errors.setdefault(r, e)
    ts = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)


def refit_threads(tmp, model, train, infer, sources, workers, steps=1, trainer_cls=None,
                  timeout_s=10.0, clients_out=None, **info):
    """Trainer ranks in threads (trainer_cls.trainer_init, send_weights ``steps``
    times), workers driven through DirectClient; returns {rank: exception}."""
    trainer_cls = trainer_cls or ReshardTrainer
    s = sizes(train, infer)
    errors = {}
    per = s.tp * s.dp  # one client per engine, in engine order
    clients = [DirectClient(workers[e * per:(e + 1) * per], errors, "engine %d" % e)
               for e in range(s.engines)]
    client = clients[0] if s.engines == 1 else clients
    if clients_out is not None:
        clients_out.extend(clients)
    path = os.path.join(str(tmp), "store.%d" % time.monotonic_ns())

    def body(r):
        ti = ReshardTrainerInitInfo(model=model, train=train, infer=infer, store_path=path,
                                    timeout_s=timeout_s, rank=r, **info)
        eng = trainer_cls.trainer_init(ti, client=client if r == 0 else None,
                                       source=sources[r])
        for _ in range(steps):
            eng.send_weights()
        eng.shutdown()
    on_trainer_threads(s.train_world, body, errors)
    for c in clients:
        c.join()
    for w in workers:
        w.shutdown()
    return errors


def dense_case(tmp, train="tp=2", infer="tp=2"):
    path = write(tmp, "tiny", TINY)
    w = conventions.Weights(conventions.load_config(path))
    s = sizes(train, infer)
    sources = [Wrapped(Wrapped(module_of(conventions.megatron_state_dict(w, train, r))))
               for r in range(s.train_world)]
    expect = [conventions.vllm_state_dict(w, infer, i, SENT) for i in range(s.world -
                                                                           s.train_world)]
    models = [module_of({n: torch.empty_like(t).view(torch.uint8).fill_(SENT).view(t.dtype)
                         for n, t in e.items()}) for e in expect]
    return path, sources, expect, models


def assert_all(models, expect):
    for i, (m, e) in enumerate(zip(models, expect)):
        live = dict(m.named_parameters())
        assert sorted(live) == sorted(e)
        for n, x in e.items():
            assert conventions.mismatches(live[n].detach(), x) == 0, (i, n)


@pytest.fixture
def standin_vllm(monkeypatch):
    """vLLM's weight-transfer modules as the stand-in gives them (the newest API),
    registries fresh."""
    monkeypatch.syspath_prepend(STANDIN)
    for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, k)
    import reshard.integrations.vllm as rv
    monkeypatch.setattr(rv, "_BUILT", {})
    from vllm.distributed.weight_transfer import factory
    yield rv, factory


def vllm_worker(factory, model, infer, i, dtype=None):
    """A worker engine as vLLM's worker makes one: the factory, from the config's
    backend name, with the vLLM config, device and model."""
    cfg = SimpleNamespace(backend="reshard")
    vcfg = SimpleNamespace(parallel_config=parallel(infer, i),
                           model_config=SimpleNamespace(dtype=dtype or torch.bfloat16))
    return factory.WeightTransferEngineFactory.create_engine(cfg, vcfg, torch.device("cpu"),
                                                             model)


def test_vllm_shell_refits_through_the_factories(tmp_path, standin_vllm):
    """register(); workers from WeightTransferEngineFactory.create_engine; the trainer
    from WeightTransferTrainerFactory.trainer_init; two refits, every element checked."""
    rv, factory = standin_vllm
    rv.register()
    rv.register()  # idempotent
    from vllm.distributed.weight_transfer.base import (TrainerWeightTransferEngine,
                                                       WeightTransferEngine)
    path, sources, expect, models = dense_case(tmp_path, "tp=2", "tp=1,dp=2")
    workers = [vllm_worker(factory, m, "tp=1,dp=2", i) for i, m in enumerate(models)]
    assert all(isinstance(w, WeightTransferEngine) for w in workers)
    assert issubclass(rv.ReshardTrainerEngine, TrainerWeightTransferEngine)

    built = []

    class ViaFactory:  # the trainer engine as vLLM's trainer factory builds it
        @staticmethod
        def trainer_init(info, *, client, source):
            f = factory.WeightTransferTrainerFactory  # dispatch on info.backend
            eng = f.trainer_init(info, client=client, source=rv.MegatronSource(source))
            built.append(eng)
            return eng
    errors = refit_threads(tmp_path, path, "tp=2", "tp=1,dp=2", sources, workers, steps=2,
                           trainer_cls=ViaFactory)
    assert errors == {}
    assert_all(models, expect)
    assert [w.version for w in workers] == [2, 2]
    assert len(built) == 2 and all(isinstance(e, rv.ReshardTrainerEngine) for e in built)
    assert rv.ReshardWeightTransferEngine.supports_draft_weight_update is False
    assert WeightTransferEngine.supports_draft_weight_update is True


def test_replaced_parameter_refit_into_the_live_one(tmp_path):
    """A framework that replaces a parameter object after init (a new tensor under
    the same name) gets the refit in the live one: each refit binds what
    named_parameters() holds then (checked again, as at init)."""
    path, sources, expect, models = dense_case(tmp_path)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]
    old = models[0].model.norm.weight
    orig = workers[0].start_weight_update

    def replace():  # between init and the refit, vLLM-side
        models[0].model.norm.weight = torch.nn.Parameter(torch.zeros_like(old),
                                                         requires_grad=False)
        orig()
    workers[0].start_weight_update = replace
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers)
    assert errors == {}
    assert_all(models, expect)
    assert bool((old.detach().view(torch.uint8) == SENT).all())  # the old one untouched


def test_update_refused_at_start_is_named_on_every_trainer_rank(tmp_path):
    """The inference side refuses refit 2's start_weight_update (an engine error):
    rank 0 raises it, trainer rank 1 fails at once with that error (TRANSPORT) instead
    of waiting for peers that never start, and no worker receives refit 2."""
    path, sources, expect, models = dense_case(tmp_path)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]
    starts = []
    orig = workers[1].start_weight_update

    def refuse():
        starts.append(1)
        if len(starts) == 2:
            raise RuntimeError("engine busy: generation in flight")
        orig()
    workers[1].start_weight_update = refuse
    t0 = time.monotonic()
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers, steps=2,
                           timeout_s=30.0)
    assert sorted(errors) == [0, 1, 3], errors  # 3: worker 1's own error, as the engine
    assert "engine busy" in str(errors[0])
    e = errors[1]
    assert isinstance(e, reshard.ReshardError) and e.status == reshard.Status.TRANSPORT, e
    assert "refit 2" in str(e) and "engine busy" in str(e), str(e)
    assert time.monotonic() - t0 < 30.0  # not a wait for the timeout
    assert_all(models, expect)  # refit 1 landed whole


def test_two_engines_each_through_its_client(tmp_path):
    """infer engines=2: rank 0 sends each engine its init info with its engine_index
    (through that engine's client); each engine's worker derives its refit rank from
    it; every element of both engines checked."""
    path, sources, expect, models = dense_case(tmp_path, "tp=2", "tp=1,engines=2")
    workers = [WorkerCore(m, parallel("tp=1,engines=2", i)) for i, m in enumerate(models)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=1,engines=2", sources, workers)
    assert errors == {}
    assert [w.rank for w in workers] == [2, 3] and [w.info.engine_index for w in workers] == [0, 1]
    assert_all(models, expect)


@pytest.mark.parametrize("named", [True, False])
def test_one_trainer_thread_serves_two_engine_groups(tmp_path, named):
    """Each trainer rank's one thread serves two engine groups of equal specs (two
    rendezvous, one model): with plan_name ("a", "b") both groups' refits are exact,
    twice each, interleaved; unnamed, the two plans of equal inputs that thread holds
    are refused on every trainer rank (INVALID_ARG), nothing written."""
    train, infer = "tp=2", "tp=2"
    path, sources, expect, models_a = dense_case(tmp_path, train, infer)
    models_b = dense_case(tmp_path, train, infer)[3]
    s = sizes(train, infer)
    errors = {}
    groups = []
    for g, models in (("a", models_a), ("b", models_b)):
        workers = [WorkerCore(m, parallel(infer, i)) for i, m in enumerate(models)]
        groups.append((g, workers, DirectClient(workers, errors, "engine %s" % g),
                       os.path.join(str(tmp_path), "store.%s.%d" % (g, time.monotonic_ns()))))

    def body(r):
        engs = []
        for g, _, client, store in groups:
            ti = ReshardTrainerInitInfo(model=path, train=train, infer=infer,
                                        store_path=store, timeout_s=10.0, rank=r,
                                        plan_name=g if named else None)
            engs.append(ReshardTrainer.trainer_init(ti, client=client if r == 0 else None,
                                                    source=sources[r]))
        for _ in range(2):
            for eng in engs:
                eng.send_weights()
        for eng in engs:
            eng.shutdown()
    on_trainer_threads(s.train_world, body, errors)
    for _, workers, client, _ in groups:
        client.join()
        for w in workers:
            w.shutdown()
    if named:
        assert errors == {}
        assert_all(models_a, expect)
        assert_all(models_b, expect)
        return
    for r in range(s.train_world):
        assert isinstance(errors.get(r), ReshardError), errors
        assert errors[r].status == Status.INVALID_ARG, errors[r]
        assert "other live unnamed plan(s) of the same inputs" in errors[r].message, errors[r]
    for m in models_a + models_b:  # nothing written
        for n, x in m.named_parameters():
            assert (x.detach().contiguous().view(torch.uint8) == SENT).all(), n


def test_workers_initialised_again_take_the_new_trainers_refits(tmp_path):
    """The engine's workers live on while the trainer starts over: a trainer session
    (refit 1) shuts down, a new one inits the same workers on a new rendezvous and
    numbers its refits from 1 again; both of its refits land on every worker (before:
    refused as an older version, and the trainer blamed live workers as stalled), every
    element checked after each session."""
    path, sources, expect, models = dense_case(tmp_path)
    s = sizes("tp=2", "tp=2")
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]
    errors = {}
    client = DirectClient(workers, errors, "engine 0")
    stores = [os.path.join(str(tmp_path), "store.%d.%d" % (k, time.monotonic_ns()))
              for k in range(2)]
    landed = []

    def body(r):
        for k, refits in enumerate((1, 2)):
            ti = ReshardTrainerInitInfo(model=path, train="tp=2", infer="tp=2",
                                        store_path=stores[k], timeout_s=10.0, rank=r)
            eng = ReshardTrainer.trainer_init(ti, client=client if r == 0 else None,
                                              source=sources[r])
            for _ in range(refits):
                eng.send_weights()
            landed.append((k, r, eng.version))
            eng.shutdown()
    on_trainer_threads(s.train_world, body, errors)
    client.join()
    assert errors == {}
    assert sorted(landed) == [(0, 0, 1), (0, 1, 1), (1, 0, 2), (1, 1, 2)]
    assert [w.weights_state()["version"] for w in workers] == [2, 2]
    for w in workers:
        w.shutdown()
    assert_all(models, expect)


def test_plugin_entry_registers_both_sides(standin_vllm):
    """The vllm.general_plugins entry point (plugin()) registers the worker and the
    trainer engine, lazily: the registry loads reshard.integrations.vllm's classes."""
    rv, factory = standin_vllm
    rv.plugin()
    assert factory.WeightTransferEngineFactory._registry["reshard"]().__name__ == \
        "ReshardWeightTransferEngine"
    assert factory.WeightTransferTrainerFactory._registry["reshard"]().__name__ == \
        "ReshardTrainerEngine"
    with pytest.raises(ValueError, match="already registered"):
        factory.WeightTransferEngineFactory.register_engine("reshard", rv.__name__, "x")


def test_vllm_shell_imports_vllm_lazily():
    code = ("import sys; import reshard.integrations.vllm as v; "
            "assert 'vllm' not in sys.modules; print('lazy')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert p.stdout.strip() == "lazy", p.stderr


def fault(models, kind):
    m = models[0]
    owner, leaf = m.model.embed_tokens, "weight"
    p = owner.weight.detach()
    if kind == "reshape":
        owner.register_parameter(leaf, torch.nn.Parameter(p.reshape(-1), requires_grad=False))
    elif kind == "dtype":
        owner.register_parameter(leaf, torch.nn.Parameter(p.float(), requires_grad=False))
    elif kind == "missing":
        delattr(owner, leaf)
    elif kind == "extra":
        owner.register_parameter("extra", torch.nn.Parameter(p.clone(), requires_grad=False))
    elif kind == "renamed":
        delattr(owner, leaf)
        owner.register_parameter("weights", torch.nn.Parameter(p, requires_grad=False))
    elif kind == "device":
        owner.register_parameter(leaf, torch.nn.Parameter(torch.empty_like(p, device="meta"),
                                                          requires_grad=False))
    elif kind == "noncontiguous":
        owner.register_parameter(leaf, torch.nn.Parameter(
            torch.empty(p.shape[::-1], dtype=p.dtype).t(), requires_grad=False))


WANT = {"reshape": "shape [10240], the layout declares [160, 64]",
        "dtype": "dtype fp32, the layout declares bf16",
        "missing": "'model.embed_tokens.weight' (buffer 0, bf16 [160, 64]) is missing",
        "extra": "'model.embed_tokens.extra' is not in the layout",
        "renamed": "'model.embed_tokens.weights' is not in the layout",
        "device": "is on meta but this communicator moves CPU memory",
        "noncontiguous": "'model.embed_tokens.weight'): the tensor is not contiguous"}


@pytest.mark.parametrize("kind", sorted(WANT))
def test_bad_worker_model_refused_at_init_on_every_rank(tmp_path, kind):
    path, sources, expect, models = dense_case(tmp_path)
    fault(models, kind)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers)
    assert sorted(errors) == [0, 1, 2, 3], errors
    for r, e in errors.items():
        assert isinstance(e, reshard.ReshardError) and e.status == reshard.Status.BUFFER, (r, e)
        assert "rank 2" in str(e) and WANT[kind] in str(e), (r, str(e))
    other = dict(models[1].named_parameters())  # nothing was written at init
    assert all(bool((t.detach().view(torch.uint8) == SENT).all()) for t in other.values())


def test_bad_trainer_chunk_and_rank_mapping_refused(tmp_path):
    path, sources, expect, models = dense_case(tmp_path)
    gpt = sources[1].module.module
    p = gpt.decoder.final_layernorm.weight
    del gpt.decoder.final_layernorm.weight
    gpt.decoder.final_layernorm.register_parameter("bias", p)  # renamed
    pcs = [parallel("tp=2", i) for i in range(2)]
    pcs[1].tensor_parallel_size = 4  # the engine runs another tp than the spec
    workers = [WorkerCore(m, pc) for m, pc in zip(models, pcs)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers)
    assert sorted(errors) == [0, 1, 2, 3]
    for e in errors.values():
        s = str(e)
        assert "'decoder.final_layernorm.bias' is not in the layout" in s, s
        assert "vLLM tensor_parallel_size 4, the infer spec says tp=2" in s, s


def pattern_sources(refit_of, train_world):
    out = []
    for r in range(train_world):
        refit = refit_of(r)
        bufs = refit.train.new_buffers(r)
        reshard.fill_pattern(refit.train, r, bufs)
        extra = set(refit.module_buffers(r))
        out.append(module_of({n: t for n, t in bufs.items() if n not in extra},
                             {n: t for n, t in bufs.items() if n in extra}))
    return out


NEMO = dict(hidden_size=64, intermediate_size=64, mamba_num_heads=4, mamba_head_dim=16,
            n_groups=2, ssm_state_size=8, hybrid_override_pattern="ME", num_hidden_layers=2,
            n_routed_experts=4, moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=32, num_experts_per_tok=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256)


def nemotron_case(tmp):
    path = write(tmp, "nemo", shrunk("nemotron-3-nano-30b-a3b", **NEMO))
    model = reshard.Model(path)
    sources = pattern_sources(lambda r: model.refit("tp=2", "tp=2", rank=r), 2)
    models = []
    for i in range(2):
        refit = model.refit("tp=2", "tp=2", rank=2 + i)
        bufs = refit.infer.new_buffers(2 + i, fill=SENT)
        a_log = bufs.pop("model.layers.0.mixer.A_log")  # vLLM holds A (fp32) instead
        bufs["model.layers.0.mixer.A"] = torch.zeros(a_log.shape, dtype=torch.float32)
        models.append(module_of(bufs))
    return path, sources, models


def test_nemotron_a_refit_from_a_log(tmp_path, standin_vllm):
    """vLLM's mixer.A = -exp(A_log) (fp32): refit into staging, then A set in place.
    Oracle: Megatron and vLLM both split the Hm heads contiguously by tp rank, so
    vLLM rank i's A is -exp of Megatron rank i's A_log."""
    rv, factory = standin_vllm
    rv.register()
    path, sources, models = nemotron_case(tmp_path)
    workers = [vllm_worker(factory, m, "tp=2", i) for i, m in enumerate(models)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers)
    assert errors == {}
    for i in range(2):
        a_log = dict(sources[i].named_parameters())["decoder.layers.0.mixer.A_log"]
        got = dict(models[i].named_parameters())["model.layers.0.mixer.A"].detach()
        assert torch.equal(got, -torch.exp(a_log.detach().float())), (i, got, a_log)


NEXT = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, full_attention_interval=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=16,
            num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=32,
            num_experts_per_tok=2, vocab_size=256)


def test_qwen3_next_norm_and_a_log_staged(tmp_path, standin_vllm):
    """Qwen3-Next: vLLM's linear_attn.norm.weight is Megatron's zero-centered out_norm
    + 1 (Megatron-Bridge RMSNorm2ZeroCenteredRMSNormMapping), its A_log fp32 (the
    trainer's bf16): both refit into staging, then set in place. Oracle: both
    frameworks hold out_norm whole and split A_log contiguously by tp rank."""
    rv, factory = standin_vllm
    rv.register()
    path = write(tmp_path, "next", shrunk("qwen3-next-80b-a3b-instruct", **NEXT))
    model = reshard.Model(path)
    sources = pattern_sources(lambda r: model.refit("tp=2", "tp=2", rank=r), 2)
    models = []
    for i in range(2):
        bufs = model.refit("tp=2", "tp=2", rank=2 + i).infer.new_buffers(2 + i, fill=SENT)
        norm = bufs.pop("model.layers.0.linear_attn.norm.weight_minus_1")
        a_log = bufs.pop("model.layers.0.linear_attn.A_log_bf16")
        bufs["model.layers.0.linear_attn.norm.weight"] = torch.zeros(norm.shape, dtype=norm.dtype)
        bufs["model.layers.0.linear_attn.A_log"] = torch.zeros(a_log.shape, dtype=torch.float32)
        models.append(module_of(bufs))
    workers = [vllm_worker(factory, m, "tp=2", i) for i, m in enumerate(models)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers)
    assert errors == {}
    for i in range(2):
        src = dict(sources[i].named_parameters())
        got = dict(models[i].named_parameters())
        out_norm = src["decoder.layers.0.self_attention.out_norm.weight"].detach()
        want = (out_norm.float() + 1).to(out_norm.dtype)
        assert torch.equal(got["model.layers.0.linear_attn.norm.weight"].detach(), want), i
        a = src["decoder.layers.0.self_attention.A_log"].detach()
        assert torch.equal(got["model.layers.0.linear_attn.A_log"].detach(), a.float()), i


def test_trainer_binds_expert_bias_from_named_buffers(tmp_path):
    """Megatron's router.expert_bias is a module buffer: the sender takes it from
    named_buffers(); a chunk without it is refused at init, naming it."""
    path, sources, models = nemotron_case(tmp_path)
    name = "decoder.layers.1.mlp.router.expert_bias"
    assert name in dict(sources[0].named_buffers()) and \
        name not in dict(sources[0].named_parameters())
    router = getattr(sources[0].decoder.layers, "1").mlp.router
    del router._buffers["expert_bias"]
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers)
    assert sorted(errors) == [0, 1, 2, 3]
    for e in errors.values():
        assert "train rank 0: parameter %r" % name in str(e) and "is missing" in str(e), str(e)


def test_flashinfer_moe_refused_by_name(tmp_path, standin_vllm):
    rv, factory = standin_vllm
    rv.register()
    path, sources, models = nemotron_case(tmp_path)
    workers = [vllm_worker(factory, m, "tp=2", i) for i, m in enumerate(models)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers,
                           moe_backend="flashinfer_cutlass")
    assert sorted(errors) == [0, 1, 2, 3]
    for e in errors.values():
        assert "'model.layers.1.mixer.experts.routed_experts.w13_weight': the " \
               "flashinfer_cutlass MoE backend swaps w13" in str(e), str(e)


DS = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=1,
          num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
          qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=4,
          num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1,
          num_nextn_predict_layers=0, vocab_size=256)


@pytest.mark.parametrize("hook", [True, False])
def test_mla_derived_copies_rerun_or_refused(tmp_path, standin_vllm, hook):
    """An MLA attention module keeping W_UV (derived from kv_b_proj): its
    process_weights_after_loading reruns after each refit, seeing the new kv_b_proj;
    without one, init is refused naming kv_b_proj."""
    rv, factory = standin_vllm
    rv.register()
    path = write(tmp_path, "ds", shrunk("deepseek-v3", **DS))
    model = reshard.Model(path)
    sources = pattern_sources(lambda r: model.refit("tp=2", "tp=2", rank=r), 2)
    models, seen = [], []
    for i in range(2):
        m = module_of(model.refit("tp=2", "tp=2", rank=2 + i).infer.new_buffers(2 + i,
                                                                               fill=SENT))
        attn = getattr(m.model.layers, "0").self_attn
        attn.W_UV = None
        if hook:
            attn.process_weights_after_loading = \
                lambda dtype, a=attn: seen.append((dtype, a.kv_b_proj.weight.detach().clone()))
        models.append(m)
    workers = [vllm_worker(factory, m, "tp=2", i) for i, m in enumerate(models)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers, steps=2)
    if not hook:
        assert sorted(errors) == [0, 1, 2, 3]
        assert all("'model.layers.0.self_attn.kv_b_proj.weight': MLA module" in str(e)
                   for e in errors.values())
        return
    assert errors == {}
    assert len(seen) == 4 and all(d == torch.bfloat16 for d, _ in seen)
    for i, m in enumerate(models):
        now = getattr(m.model.layers, "0").self_attn.kv_b_proj.weight.detach()
        assert not bool((now.view(torch.uint8) == SENT).all())
        assert any(torch.equal(now.view(torch.int16), w.view(torch.int16)) for _, w in seen)


def test_megatron_chunks_unwrap_and_name_virtual_stages():
    """Chunks of stage 0 under pp=2, vpp=2: Megatron names layers from 0 in every chunk (each
    chunk its own GPTModel); the layout names chunk c's "c."; wrappers add "module."."""
    model = reshard.Model("qwen3-0.6b", layers=4)
    refit = model.refit("tp=1,pp=2,vpp=2", "tp=1", rank=0)
    names = [p.name for p in refit.train.parameters(0)]
    per = {c: {n[2:]: p for n, p in ((p.name, p) for p in refit.train.parameters(0))
               if n.startswith("%d." % c)} for c in (0, 1)}
    assert all(n[:2] in ("0.", "1.") for n in names)
    chunks = [Wrapped(module_of({n: torch.empty(0) for n in per[c]})) for c in (0, 1)]
    params, _ = MegatronChunks(chunks).named()
    assert sorted(params) == sorted(names)
    assert "0.decoder.layers.0.mlp.linear_fc2.weight" in params
    assert "1.decoder.layers.0.mlp.linear_fc2.weight" in params
    one, _ = MegatronChunks(Wrapped(Wrapped(chunks[0].module))).named()
    assert sorted(one) == sorted(per[0])


def test_failed_send_still_finishes_the_update_session(tmp_path):
    """A refit that fails on rank 0 (its own send raises): the workers' update fails
    (the collective is short), the engine aborts every worker and drops the session
    (vLLM's worker failure path), nothing is finished and vLLM's weight version stays
    unset; the next start_weight_update is not refused as a second session."""
    path, sources, expect, models = dense_case(tmp_path)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]

    class FailOnce(ReshardTrainer):
        def _send(self):
            if self.rank == 0 and self.version == 1:
                raise RuntimeError("injected send failure on rank 0")
            super()._send()

        def send_weights(self):
            try:
                super().send_weights()
            except RuntimeError as e:
                if "injected" not in str(e):
                    raise
                self.failed = str(e)
    clients = []
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers, steps=1,
                           trainer_cls=FailOnce, timeout_s=3, clients_out=clients)
    assert clients[0].calls == ["start", "update"], clients[0].calls
    assert clients[0].session is False and clients[0].weight_version is None
    assert [w.weights_state()["state"] for w in workers] == ["torn", "torn"]
    assert errors  # the workers and rank 1 saw the aborted refit (rank 0 did not send)
    assert 0 not in errors


def test_shut_down_engines_refuse_by_name(tmp_path):
    """After shutdown(): the trainer's send_weights raises ReshardError INVALID_ARG
    naming its rank; the worker's update_weights says it was shut down."""
    path, sources, expect, models = dense_case(tmp_path)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]

    class ShutThenSend(ReshardTrainer):
        def send_weights(self):
            if self.rank == 1:
                self.shutdown()
            super().send_weights()
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers, steps=1,
                           trainer_cls=ShutThenSend, timeout_s=2)
    e = errors[1]
    assert isinstance(e, reshard.ReshardError) and e.status.name == "INVALID_ARG", repr(e)
    assert "trainer rank 1 was shut down" in str(e)
    w = workers[0]
    with pytest.raises(reshard.ReshardError, match="infer rank 2: receive_weights after "
                       "shutdown"):
        w.update_weights({"version": 1})


def test_trainer_rank_is_required():
    """ReshardTrainerInitInfo has no default rank (vLLM's TrainerInitInfo: keyword-only,
    no default): leaving it out is a TypeError naming it."""
    with pytest.raises(TypeError, match="rank"):
        ReshardTrainerInitInfo(model="m.json", train="tp=2", infer="tp=2", store_path="x")


def test_trainer_rank_checked_against_megatron_parallel_state(tmp_path, monkeypatch):
    """Trainer ranks given each other's shards (rank= swapped against Megatron's
    parallel state, names and shapes alike): every rank fails at init naming the
    rank and its tp_rank, nothing written (a stand-in megatron.core.parallel_state
    answers per thread)."""
    local = threading.local()
    ps = SimpleNamespace(model_parallel_is_initialized=lambda: True,
                         get_tensor_model_parallel_world_size=lambda: 2,
                         get_tensor_model_parallel_rank=lambda: local.tp_rank,
                         get_pipeline_model_parallel_world_size=lambda: 1,
                         get_pipeline_model_parallel_rank=lambda: 0)
    core = SimpleNamespace(parallel_state=ps)
    monkeypatch.setitem(sys.modules, "megatron", SimpleNamespace(core=core))
    monkeypatch.setitem(sys.modules, "megatron.core", core)
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", ps)
    monkeypatch.setattr(dist, "get_world_size", lambda *a: 2)
    path, sources, expect, models = dense_case(tmp_path)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]

    class Swapped(ReshardTrainer):  # this process is Megatron tp rank 1 - rank
        @classmethod
        def trainer_init(cls, info, **kw):
            local.tp_rank = 1 - info.rank
            return super().trainer_init(info, **kw)
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", [sources[1], sources[0]], workers,
                           trainer_cls=Swapped, timeout_s=3)
    assert sorted(errors) == [0, 1, 2, 3], errors
    for r in range(4):
        assert "trainer rank 0: Megatron's parallel state says tp_rank 1" in str(errors[r]), \
            (r, errors[r])
    assert all(bool((t.detach().view(torch.uint8) == SENT).all())
               for m in models for t in m.parameters())

    local_ok = []

    class Right(ReshardTrainer):
        @classmethod
        def trainer_init(cls, info, **kw):
            local.tp_rank = info.rank
            local_ok.append(info.rank)
            return super().trainer_init(info, **kw)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]
    assert refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers,
                         trainer_cls=Right, timeout_s=3) == {}
    assert_all(models, expect)


# ---- delta refits through the integrations --------------------------------------------

def flip(t, k):
    """Step k's sparse update, elementwise on the bf16 bits (so the Megatron shards
    and the HF-level oracle change alike, whatever the layout): the low mantissa bit
    of every element whose bits hash to k mod 64 (about 1 in 64) flips."""
    b = t.view(torch.int16)
    h = ((b.to(torch.int32) & 0xFFFF) * 40503 >> 9) & 63
    b[h == k % 64] ^= 1


class FlippedWeights:
    """conventions.Weights after the updates flip(., 1) .. flip(., steps)."""

    def __init__(self, base, steps):
        self.base, self.cfg, self.shapes, self.steps = base, base.cfg, base.shapes, steps

    def rows(self, name, a=0, b=None):
        t = self.base.rows(name, a, b).clone()
        for k in range(1, self.steps + 1):
            flip(t, k)
        return t

    def __getitem__(self, name):
        return self.rows(name)


def test_delta_refits_commit_and_an_invalidated_worker_is_rewritten(tmp_path):
    """delta=True through ReshardTrainer and WorkerCore (Megatron tp=2 -> vLLM tp=1
    dp=2): before each refit the trainers change about 1/64 of their bf16 words. After
    every refit every element each worker holds (padding rows included) equals the
    oracle (the HF-level weights through the same updates, laid out by vLLM's rules)
    and weights_state() says committed at that version; refits 2 and 3 put fewer than
    a tenth of the dense bytes on the wire. Then worker 0's weights are overwritten
    behind reshard's back and invalidate_weights() told: refit 4 rewrites all of its
    elements (its streams dense), worker 1 still gets a delta."""
    path, sources, expect, models = dense_case(tmp_path, "tp=2", "tp=1,dp=2")
    workers = [WorkerCore(m, parallel("tp=1,dp=2", i)) for i, m in enumerate(models)]
    base = conventions.Weights(conventions.load_config(path))
    seen = []  # (step, worker, wrong elements, weights_state) and (step, "wire", ...)
    wire = {}

    class UpdateThenSend(ReshardTrainer):
        def send_weights(self):
            k = self.version + 1
            with torch.no_grad():
                for t in self.source.named()[0].values():
                    flip(t.data, k)
            if self.rank == 0 and k == 4:  # worker 0's engine reloads its weights
                for t in dict(models[0].named_parameters()).values():
                    t.data.view(torch.uint8).fill_(SENT)  # padding rows hold it already
                workers[0].invalidate_weights()
            super().send_weights()
            d = self.plan.delta_info()
            wire[(k, self.rank)] = (d["wire_bytes"], d["stream_bytes"], d["dense_streams"])
            if self.rank == 0:  # update_weights has returned on every worker
                oracle = FlippedWeights(base, k)
                for i, m in enumerate(models):
                    want = conventions.vllm_state_dict(oracle, "tp=1,dp=2", i, SENT)
                    live = dict(m.named_parameters())
                    bad = sum(conventions.mismatches(live[n].detach(), x)
                              for n, x in want.items())
                    seen.append((k, i, bad, workers[i].weights_state()))
    errors = refit_threads(tmp_path, path, "tp=2", "tp=1,dp=2", sources, workers, steps=4,
                           trainer_cls=UpdateThenSend, delta=True)
    assert errors == {}
    assert [(k, i, bad) for k, i, bad, _ in seen] == \
        [(k, i, 0) for k in (1, 2, 3, 4) for i in (0, 1)], seen
    for k, i, _, st in seen:
        assert (st["state"], st["version"], st["delta"]["state"]) == \
            ("committed", k, "committed"), (k, i, st)
    for k in (2, 3):
        sent = sum(wire[(k, r)][0] for r in (0, 1))
        dense = sum(wire[(k, r)][1] for r in (0, 1))
        assert 0 < sent < dense / 10, (k, sent, dense)
        assert all(wire[(k, r)][2] == 0 for r in (0, 1)), wire
    # refit 4: each trainer rank streams to both workers; those to worker 0 went dense
    assert all(wire[(4, r)][2] == 1 for r in (0, 1)), wire
    assert sum(wire[(4, r)][0] for r in (0, 1)) > sum(wire[(4, r)][1] for r in (0, 1)) / 2


@pytest.mark.parametrize("field,value", [("delta", True), ("staging_mb", 1.0),
                                         ("timeout_s", 4.0)])
def test_plan_fields_are_agreed_at_init(tmp_path, field, value):
    """A worker whose plan would differ from the trainers' (delta on, another staging
    bound, another timeout: each enters the plan's fingerprint): init fails on every
    rank naming the field, instead of every refit failing MISMATCH later (the init
    agreement compares ReshardInitInfo.record())."""
    path, sources, expect, models = dense_case(tmp_path)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]
    orig = workers[1].init_transfer_engine

    def with_other(info):
        setattr(info, field, value)
        orig(info)
    workers[1].init_transfer_engine = with_other
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers, timeout_s=5)
    assert sorted(errors) == [0, 1, 2, 3], errors
    for e in errors.values():
        assert field in str(e), repr(e)
    for m in models:  # nothing written
        for t in m.parameters():
            assert bool((t.detach().view(torch.uint8) == SENT).all())


@pytest.mark.parametrize("field,value", [("delta", "false"), ("delta", 1),
                                         ("delta_checksum", "yes")])
def test_delta_flags_must_be_bools(tmp_path, field, value):
    """delta / delta_checksum from a config are checked, never coerced: a string such
    as "false" would otherwise turn delta on. CONFIG naming the field and the value."""
    from reshard.integrations.worker import ReshardInitInfo, build_plan
    path = write(tmp_path, "tiny", TINY)
    info = ReshardInitInfo(model=path, train="tp=2", infer="tp=2", **{field: value})
    with pytest.raises(reshard.ReshardError, match="rank 2: %s must be True or False, got %r"
                       % (field, value)):
        build_plan(info, 2, 4)


@pytest.mark.parametrize("hosts", [[0, 0, 1, 1], (0, 0, 1, 1), np.array([0, 0, 1, 1])],
                         ids=["list", "tuple", "numpy"])
def test_init_agreement_takes_hosts_in_any_sequence(hosts):
    """hosts/devices given as a tuple or numpy array agree with the list a peer gave
    (the record travels as JSON, where both are lists), and a real difference is
    still named."""
    import torch.distributed as dist
    from reshard.integrations.rendezvous import agree
    from reshard.integrations.worker import ReshardInitInfo
    info = ReshardInitInfo(model="qwen3-0.6b", train="tp=2", infer="tp=2", colocated=True,
                           hosts=hosts, devices=(0, 1, 0, 1))
    assert info.record()["hosts"] == [0, 0, 1, 1]
    assert info.record()["devices"] == [0, 1, 0, 1]
    agree(dist.HashStore(), 0, 1, info.record(), [], 5.0)  # one rank agrees with itself
    store = dist.HashStore()
    other = ReshardInitInfo(model="qwen3-0.6b", train="tp=2", infer="tp=2", colocated=True,
                            hosts=[0, 1, 1, 1], devices=[0, 1, 0, 1])
    errs = []

    def rank(r, rec):
        try:
            agree(store, r, 2, rec, [], 5.0)
        except reshard.ReshardError as e:
            errs.append(e)
    ts = [threading.Thread(target=rank, args=(r, rec))
          for r, rec in ((0, info.record()), (1, other.record()))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(errs) == 2 and all("hosts" in str(e) for e in errs), errs
