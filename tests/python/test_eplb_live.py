"""Following vLLM's live EPLB maps through the integrations (init info eplb=True):
trainer ranks in threads (ReshardTrainer over Megatron-named modules), vLLM-shaped
workers (WorkerCore reading the live map with the vLLM shell's vllm_eplb_map) driven
through the engine control-plane stand-in. Each engine's MoE layers hold EPLB state
as vLLM's FusedMoE.set_eplb_state leaves it (per-layer views of EplbState's
logical_to_physical_map [E, R+1], -1 padded, and logical_replica_count [E]); before
some refits the engine rearranges: the views change in place and every slot whose
expert changed is overwritten with the sentinel (harsher than vLLM, which moves the
weights), so a slot the refit did not rewrite shows. After every refit every
physical slot of every worker must hold, byte for byte, the Megatron weights of the
logical expert the engine's map of that moment gives it. The oracle is the two
frameworks' rules (as test_eplb.py): Megatron EP rank r (tp=1) holds experts
[r*E/ep, ...) as linear_fc1.weightK ([gate; up]) and linear_fc2.weightK; vLLM EP rank
r of an engine holds slots [r*P/(tp*dp), ...) as rows of w13_weight / w2_weight."""

import json
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import reshard  # noqa: E402
from modules import module_of  # noqa: E402
from reshard.integrations import ReshardTrainer, WorkerCore  # noqa: E402
from reshard.integrations.vllm import vllm_eplb_map  # noqa: E402
from test_integrations import parallel, refit_threads  # noqa: E402

E, R, L, I, H = 6, 2, 2, 16, 32
P = E + R
MOE = {  # a tiny Qwen3-MoE: every layer MoE
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": H,
    "intermediate_size": 64, "moe_intermediate_size": I, "num_hidden_layers": L,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_experts": E,
    "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 100, "tie_word_embeddings": False,
}
TRAIN = "tp=1,dp=2,ep=2"  # Megatron: 3 experts per rank
SENT = reshard.SENTINEL_BYTE
INITIAL = [list(range(E)) + [i % E for i in range(R)]] * L  # vLLM's initial map
# maps of later refits: layer 0 moves, layer 1 keeps; then both move
MOVED = [[5, 1, 2, 0, 4, 3, 5, 2], INITIAL[1]]
BOTH = [[0, 3, 1, 4, 2, 5, 0, 1], [4, 5, 0, 1, 2, 3, 3, 4]]


class LiveWorker(WorkerCore):
    """A vLLM-shaped worker: the model's MoE layers carry EPLB state, read as the vLLM
    shell reads it (``fault``: what reading it raises instead)."""

    fault = None

    def live_eplb_map(self):
        if self.fault is not None:
            raise self.fault
        return vllm_eplb_map(self.model)


def write_config(tmp):
    path = tmp / "moe.json"
    path.write_text(json.dumps(MOE))
    return str(path)


def megatron_source(path, rank, step):
    """Megatron rank ``rank``'s tensors at refit ``step``: a fixed random base, then
    every 7th element of every tensor + step (so delta refits have words to send)."""
    refit = reshard.Model(path).refit(TRAIN, "tp=2,ep=on")
    out = {}
    for n, t in refit.train.new_buffers(rank).items():
        g = torch.Generator().manual_seed(hash((rank, n)) % (1 << 31))
        base = torch.randn(t.shape, generator=g)
        base.view(-1)[::7] += step
        out[n] = base.to(t.dtype)
    return out


class SteppingTrainer(ReshardTrainer):
    """Before each refit the rank's tensors become those of that step."""

    def send_weights(self):
        step = self.version + 1
        state = megatron_source(self.path, self.rank, step)
        named = dict(self.source.named()[0])
        with torch.no_grad():
            for n, t in state.items():
                named[n].copy_(t)
        super().send_weights()

    @classmethod
    def trainer_init(cls, init_info, *, client, source):
        self = super().trainer_init(init_info, client=client, source=source)
        self.path = init_info.model
        return self


def engine_state(model, maps):
    """vLLM's EPLB state on ``model``'s MoE layers for ``maps`` (physical_to_logical
    rows): one [L, E, R+1] logical_to_physical tensor and [L, E] replica counts, each
    layer's experts module holding its views (FusedMoE.set_eplb_state)."""
    l2p = torch.full((L, E, R + 1), -1, dtype=torch.int64)
    count = torch.zeros((L, E), dtype=torch.int64)
    state = SimpleNamespace(l2p=l2p, count=count)
    set_map(state, maps)
    for k in range(L):
        experts = model.get_submodule("model.layers.%d.mlp.experts" % k)
        experts.eplb_state = SimpleNamespace(logical_to_physical_map=l2p[k],
                                             logical_replica_count=count[k])
    return state


def set_map(state, maps):
    """Rearrange: the engine's views change in place to ``maps``."""
    state.l2p.fill_(-1)
    state.count.zero_()
    for k, row in enumerate(maps):
        for p, e in enumerate(row):
            state.l2p[k, e, state.count[k, e]] = p
            state.count[k, e] += 1


def expected_slot(path, layer, e, step):
    """Megatron's expert ``e`` of ``layer`` at ``step``: (w13 [gate; up], w2)."""
    per = E // 2
    src = megatron_source(path, e // per, step)
    fc = "decoder.layers.%d.mlp.experts.linear_fc%%d.weight%d" % (layer, e % per)
    return src[fc % 1], src[fc % 2]


def check_worker(path, model, i, maps, step):
    """Every slot of inference rank ``i`` (its engine's ``maps``) at ``step`` against
    the oracle; returns the number of slots checked."""
    per_rank, n = P // 2, 0
    live = dict(model.named_parameters())
    for layer in range(L):
        pre = "model.layers.%d.mlp.experts.routed_experts." % layer
        w13, w2 = live[pre + "w13_weight"].detach(), live[pre + "w2_weight"].detach()
        for k in range(per_rank):
            e = maps[layer][(i % 2) * per_rank + k]
            want13, want2 = expected_slot(path, layer, e, step)
            assert torch.equal(w13[k], want13), (step, i, layer, k, e)
            assert torch.equal(w2[k], want2), (step, i, layer, k, e)
            n += 1
    return n


def run(tmp, infer, schedule, steps, delta=False, tamper=None, broken=None, raising=None):
    """``steps`` refits; ``schedule(engine, step)``: the engine's map at that refit,
    set before it starts (``tamper(i, step, maps)``: what inference rank i's engine
    state holds instead; ``broken`` = (i, step): there layer 0's logical expert 0
    has no replica, a state that is no map; ``raising`` = (i, step): there reading the
    live map raises a RuntimeError). After each refit each worker checks every slot. Returns
    (errors, workers, checks: (step, inference rank, slots checked))."""
    path = write_config(tmp)
    refit = reshard.Model(path).refit(TRAIN, infer)
    n_infer = 4 if "engines=2" in infer else 2
    sources = [module_of(megatron_source(path, r, 0)) for r in range(2)]
    workers, checks = [], []
    for i in range(n_infer):
        model = module_of(refit.infer.new_buffers(2 + i, fill=SENT))
        state = engine_state(model, INITIAL)
        w = LiveWorker(model, parallel(infer, i))
        seen = [0]

        def start(w=w, model=model, state=state, i=i, orig=w.start_weight_update, seen=seen):
            seen[0] += 1
            new = schedule(i // 2, seen[0])
            held = new if tamper is None else tamper(i, seen[0], new)
            old = vllm_eplb_map(model)
            set_map(state, held)
            if broken == (i, seen[0]):
                state.count[0, 0] = 0
            w.fault = RuntimeError("the balancer's state is gone") \
                if raising == (i, seen[0]) else None
            live = dict(model.named_parameters())
            for layer in range(L):  # a moved slot holds nothing of the refit's yet
                pre = "model.layers.%d.mlp.experts.routed_experts." % layer
                for k in range(P // 2):
                    p = (i % 2) * (P // 2) + k
                    if old[layer][p] != held[layer][p]:
                        for name in ("w13_weight", "w2_weight"):
                            live[pre + name].data[k].view(torch.uint8).fill_(SENT)
            orig()

        def finish(model=model, i=i, orig=w.finish_weight_update, seen=seen):
            orig()
            maps = schedule(i // 2, seen[0])
            checks.append((seen[0], i, check_worker(path, model, i, maps, seen[0])))

        w.start_weight_update, w.finish_weight_update = start, finish
        workers.append(w)
    errors = refit_threads(tmp, path, TRAIN, infer, sources, workers, steps=steps,
                           trainer_cls=SteppingTrainer, eplb=True, delta=delta,
                           timeout_s=30.0)
    return errors, workers, sorted(checks)


def schedule_one(engine, step):
    """One engine: the initial map, then layer 0 moved (kept a refit), then both."""
    return {1: INITIAL, 2: MOVED, 3: MOVED, 4: BOTH}[step]


@pytest.mark.parametrize("delta", [False, True])
def test_slots_follow_the_live_map_every_refit(tmp_path, delta):
    """Four refits, the map moving before refits 2 and 4 (and kept before 3): after
    each, every slot of every worker holds its logical expert of that step."""
    plans = []
    orig = LiveWorker.receive_weights

    def receive(self, update):  # the plan each refit ran with
        orig(self, update)
        if self.rank == 2:
            plans.append(self.plan)
    LiveWorker.receive_weights = receive
    try:
        errors, workers, checks = run(tmp_path, "tp=2,ep=on,redundant=%d" % R, schedule_one,
                                      4, delta=delta)
    finally:
        LiveWorker.receive_weights = orig
    plans = [plans[0], plans[-1]]
    assert errors == {}, errors
    assert checks == [(s, i, L * P // 2) for s in range(1, 5) for i in range(2)]
    assert [w.weights_state()["state"] for w in workers] == ["committed"] * 2
    assert [w.version for w in workers] == [4, 4]
    assert workers[0].eplb_maps == [BOTH]
    assert plans[0]._h is None and plans[1]._h is not None  # the replaced plan was freed


def schedule_two(engine, step):
    """Two engines, each its own balancer: engine 1 moves on other refits."""
    return schedule_one(0, step) if engine == 0 else {1: BOTH, 2: BOTH, 3: MOVED}[step]


def test_each_engine_followed_with_its_own_map(tmp_path):
    """Two engines whose maps differ and move at different refits: every slot of
    each engine's workers holds what its own engine's map says."""
    errors, workers, checks = run(tmp_path, "tp=2,ep=on,redundant=%d,engines=2" % R,
                                  schedule_two, 3)
    assert errors == {}, errors
    assert checks == [(s, i, L * P // 2) for s in range(1, 4) for i in range(4)]
    assert all(w.eplb_maps == [MOVED, MOVED] for w in workers)


def test_a_worker_whose_map_differs_from_its_engine_fails_every_rank(tmp_path):
    """Inference rank 1 holds another map than its engine's first worker at refit 2
    (a balancer out of step): refit 2 fails on every rank naming that worker's map
    (CONFIG), and no worker reports it as updated."""
    def tamper(i, step, maps):
        return BOTH if (i, step) == (1, 2) else maps
    errors, workers, checks = run(tmp_path, "tp=2,ep=on,redundant=%d" % R, schedule_one, 3,
                                  tamper=tamper)
    assert sorted(errors) == [0, 1, 2, 3]  # both trainer ranks and both workers
    for e in errors.values():
        assert e.status == reshard.Status.CONFIG, e
        assert "infer rank 3: refit 2: the EPLB map this worker holds is not its " \
            "engine's" in str(e), e
    assert "MoE layer 0, slot 0: logical expert 0 here, 5 in the published map" \
        in str(errors[3])
    assert checks == [(1, 0, L * P // 2), (1, 1, L * P // 2)]
    assert [w.version for w in workers] == [1, 1]
    assert all(w.weights_state()["state"] != "committed" for w in workers)


def test_a_map_that_is_no_map_is_named_on_every_rank(tmp_path):
    """The first worker's EPLB state lists a logical expert with no replica at refit
    2: every rank fails that refit naming it (CONFIG), and no worker reports it."""
    errors, workers, checks = run(tmp_path, "tp=2,ep=on,redundant=%d" % R, schedule_one, 3,
                                  broken=(0, 2))
    assert sorted(errors) == [0, 1, 2, 3]
    for e in errors.values():
        assert e.status == reshard.Status.CONFIG, e
        assert "model.layers.0.mlp.experts: EPLB: logical expert 0 has 0 replicas" \
            in str(e), e
    assert checks == [(1, 0, L * P // 2), (1, 1, L * P // 2)]
    assert [w.version for w in workers] == [1, 1]


@pytest.mark.parametrize("who", [0, 1])
def test_a_worker_that_cannot_read_its_map_is_named_on_every_rank(tmp_path, who):
    """Reading the live map raises a plain RuntimeError at refit 2 on the engine's first
    worker (its map is then never published) or on the second: every rank fails that
    refit at once, naming it (CONFIG), instead of waiting out the timeout and blaming
    a live rank; nothing reports it."""
    t0 = time.monotonic()
    errors, workers, checks = run(tmp_path, "tp=2,ep=on,redundant=%d" % R, schedule_one, 3,
                                  raising=(who, 2))
    assert sorted(errors) == [0, 1, 2, 3]
    for e in errors.values():
        assert e.status == reshard.Status.CONFIG, e
        assert "the balancer's state is gone" in str(e), e
    assert checks == [(1, 0, L * P // 2), (1, 1, L * P // 2)]
    assert time.monotonic() - t0 < 25  # not the 30 s timeout
