"""vLLM's expert load balancer (EPLB) through Model.plan on in-process threads: after
a refit every physical expert slot of every vLLM rank holds exactly the Megatron
weights of the logical expert the map gives it (redundant copies included), for
vLLM's initial map and for maps that change between refits; bad maps are refused by
name. The oracle is the two frameworks' rules: Megatron EP rank r (tp=1) holds experts
[r*E/ep, ...) as linear_fc1.weightK ([gate; up]) and linear_fc2.weightK; vLLM EP rank
r holds slots [r*P/ep_size, ...) of P = E + redundant as the rows of w13_weight
([gate; up]) and w2_weight (eplb_state.py physical_to_logical_map)."""

import json

import pytest
import torch

import reshard

E, REDUNDANT, L = 6, 2, 2
P = E + REDUNDANT
MOE = {  # a tiny Qwen3-MoE: every layer MoE
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 32,
    "intermediate_size": 64, "moe_intermediate_size": 16, "num_hidden_layers": L,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_experts": E,
    "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 100, "tie_word_embeddings": False,
}
TRAIN, INFER = "tp=1,dp=2,ep=2", "tp=2,ep=on"  # Megatron: 3 experts per rank; vLLM: 4 slots


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(MOE))
    return reshard.Model(str(p))


def refit_threads(model, eplb_map, step, infer=INFER, world=4):
    """One refit with ``eplb_map``: the trainers' random weights and what each vLLM
    rank received."""
    src, dst = {}, {}

    def rank_fn(comm):
        plan = model.plan(comm, TRAIN, infer, redundant=REDUNDANT, eplb_map=eplb_map)
        side, i = plan.refit.role(comm.rank)
        if side == "train":
            g = torch.Generator().manual_seed(1000 * step + i)
            bufs = plan.refit.train.new_buffers(comm.rank)
            for t in bufs.values():
                t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))
            src[i] = bufs
            plan.execute(src=bufs)
        else:
            bufs = plan.refit.infer.new_buffers(comm.rank, fill=reshard.SENTINEL_BYTE)
            plan.execute(dst=bufs)
            dst[i] = bufs

    reshard.run_threads(world, rank_fn)
    return src, dst


def check_slots(src, dst, rows):
    per_train, per_infer = E // 2, P // 2
    for i in range(2):
        for layer in range(L):
            pre = "model.layers.%d.mlp.experts.routed_experts." % layer
            w13, w2 = dst[i][pre + "w13_weight"], dst[i][pre + "w2_weight"]
            assert w13.shape == (per_infer, 2 * 16, 32) and w2.shape == (per_infer, 32, 16)
            for k in range(per_infer):
                e = rows[layer][i * per_infer + k]
                mg = src[e // per_train]
                fc = "decoder.layers.%d.mlp.experts.linear_fc%%d.weight%d" % (layer, e % per_train)
                assert torch.equal(w13[k], mg[fc % 1]), (i, layer, k, e)
                assert torch.equal(w2[k], mg[fc % 2]), (i, layer, k, e)


def test_eplb_slots_hold_their_logical_experts(model):
    """vLLM's initial map, then the balancer's moves (one map for every layer, then one
    per layer, as a torch tensor): each refit replans and every slot is checked."""
    initial = list(range(E)) + [i % E for i in range(REDUNDANT)]
    shared = [5, 3, 0, 4, 3, 1, 2, 5]
    per_layer = torch.tensor([[0, 0, 1, 2, 3, 4, 5, 5], [4, 2, 1, 3, 0, 5, 2, 2]],
                             dtype=torch.int32)
    for step, (m, rows) in enumerate([(None, [initial] * L), (shared, [shared] * L),
                                      (per_layer, per_layer.tolist())]):
        src, dst = refit_threads(model, m, step)
        check_slots(src, dst, rows)


@pytest.mark.parametrize("eplb_map,msg", [
    ([0, 1, 2, 3, 4, 5, 0], "EPLB map has 7 entries"),
    ([0, 1, 2, 3, 4, 5, 0, 9], "physical slot 7 holds logical expert 9, outside"),
    ([0, 1, 2, 3, 4, 4, 0, 1], "logical expert 5 has no physical slot"),
])
def test_eplb_bad_maps_refused(model, eplb_map, msg):
    with pytest.raises(reshard.ReshardError, match=msg) as e:
        model.refit(TRAIN, INFER, redundant=REDUNDANT, eplb_map=eplb_map)
    assert e.value.status == reshard.Status.CONFIG


ENGINES_INFER = "tp=2,ep=on,engines=2"  # two engines of 2 ranks, each its own EplbState


def test_each_engine_has_its_own_map(model):
    """Two independent engines whose balancers placed experts differently: one map per
    engine ([engines][layers][P], as each engine's physical_to_logical_map); every slot
    of every rank of both engines holds its own engine's expert."""
    maps = [[[0, 0, 1, 2, 3, 4, 5, 5], [4, 2, 1, 3, 0, 5, 2, 2]],   # engine 0
            [[5, 4, 3, 2, 1, 0, 1, 2], [0, 1, 2, 3, 4, 5, 0, 1]]]   # engine 1
    src, dst = refit_threads(model, maps, 0, ENGINES_INFER, 6)
    for engine in range(2):
        check_slots(src, {i: dst[2 * engine + i] for i in range(2)}, maps[engine])


def test_a_map_shared_by_engines_per_layer_is_refused(model):
    """engines x P entries (here also layers x P: 2 layers, 2 engines) would read as
    per-layer rows for every engine: refused, naming the per-engine form."""
    rows = [[0, 0, 1, 2, 3, 4, 5, 5], [4, 2, 1, 3, 0, 5, 2, 2]]
    with pytest.raises(reshard.ReshardError, match=r"with engines=2 each engine has its own "
                       r"map .*: 32 entries \(2 engines x 2 MoE layers x 8") as e:
        model.refit(TRAIN, ENGINES_INFER, redundant=REDUNDANT, eplb_map=rows)
    assert e.value.status == reshard.Status.CONFIG
    bad = [rows, [[0, 1, 2, 3, 4, 4, 0, 1], rows[1]]]
    with pytest.raises(reshard.ReshardError, match="EPLB map engine 1, MoE layer 0: logical "
                       "expert 5 has no physical slot"):
        model.refit(TRAIN, ENGINES_INFER, redundant=REDUNDANT, eplb_map=bad)


@pytest.mark.parametrize("bad", [
    [[0, 1, 2, 3, 4, 5, 0, 1], [0, 1, 2, 3, 4, 5, 0]],            # a row short
    [[[0, 1, 2, 3, 4, 5, 0, 1]], [0, 1, 2, 3, 4, 5, 0, 1]],       # ragged nesting
    [[[[0, 1, 2, 3, 4, 5, 0, 1]]]],                               # a level too many
])
def test_eplb_maps_must_be_rectangular(model, bad):
    """A ragged map would be read as one flat sequence (another layer's or engine's
    rows): refused before any layout is built."""
    with pytest.raises(reshard.ReshardError, match="EPLB map: (not a rectangular|4 levels)") as e:
        model.refit(TRAIN, INFER, redundant=REDUNDANT, eplb_map=bad)
    assert e.value.status == reshard.Status.CONFIG
