"""FSDP2 trainers into vLLM layouts: the train spec fsdp=N (HSDP with dp=R, tensor
parallelism with tp=T), the trainer's live DTensors checked against it and bound in
place (reshard.integrations.fsdp), every element of every inference rank checked.

The trainer ranks' modules come from tests/python/standin/dtensor.py (torch 1.13 has
no DTensor; the stand-in follows PyTorch's attributes and FSDP2's torch.chunk rule,
and is the oracle of what an FSDP2 rank holds); the inference side's oracle is
examples/python/conventions.py (vLLM's rules). Neither uses the library."""

import os
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")

import conventions  # noqa: E402
import reshard  # noqa: E402
from reshard.integrations.fsdp import FSDPModule, hf_name  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "standin"))
import dtensor  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "bench"))
import fsdp_refit  # noqa: E402  (tp_style: transformers' tp plan)

SENT = reshard.SENTINEL_BYTE
TINY = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
        "tie_word_embeddings": False}


def tiny(tmp_path, **kw):
    import json
    path = os.path.join(str(tmp_path), "tiny.json")
    with open(path, "w") as f:
        json.dump(dict(TINY, **kw), f)
    return path


def sizes(train):
    return fsdp_refit.sizes_of(train)


def trainer_modules(w, train):
    fsdp, replicas, tp = sizes(train)
    full = {n: w[n] for n in w.shapes}
    return [dtensor.fully_shard(full, {n: fsdp_refit.tp_style(n) for n in full}, r,
                                fsdp=fsdp, replicas=replicas, tp=tp)
            for r in range(fsdp * replicas * tp)]


def refit_all(model_path, train, infer, modules, layers=0):
    """Every rank in a thread of one in-process group: trainers bind their FSDP2
    modules' local shards (checked first), workers receive into vLLM-shaped tensors;
    returns (received per inference rank, oracle per inference rank)."""
    refit = reshard.Model(model_path, layers=layers).refit(train, infer)
    w = conventions.Weights(conventions.load_config(model_path, layers))
    ntrain = refit.train_world
    expect = [conventions.vllm_state_dict(w, infer, i, SENT) for i in range(refit.world - ntrain)]
    got = [{n: torch.empty_like(x).view(torch.uint8).fill_(SENT).view(x.dtype)
            for n, x in e.items()} for e in expect]
    plan = reshard.Plan(refit.train, refit.infer, rank=reshard.ALL_RANKS, world=refit.world,
                        timeout_s=20)
    group = reshard.InprocGroup(refit.world)
    errors = {}

    def body(r):
        try:
            if r < ntrain:
                src = FSDPModule(modules[r])
                assert src.problems(refit.train, r) == []
                plan.execute(group.comm(r), src=src.named()[0], dst=None)
            else:
                plan.execute(group.comm(r), src=None, dst=got[r - ntrain])
        except Exception as e:  # noqa: BLE001 - reported below
            errors[r] = e
    ts = [threading.Thread(target=body, args=(r,)) for r in range(refit.world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    group.close()
    assert errors == {}, errors
    return got, expect


def assert_every_element(got, expect):
    for i, (g, e) in enumerate(zip(got, expect)):
        assert sorted(g) == sorted(e)
        for n, x in e.items():
            assert conventions.mismatches(g[n], x) == 0, (i, n)


@pytest.mark.parametrize("train,infer", [
    ("fsdp=4", "tp=2,dp=2"),        # even
    ("fsdp=3", "tp=2"),             # uneven: torch.chunk sizes, short last shard
    ("fsdp=2,dp=2", "tp=1,dp=2"),   # HSDP: two replicas the planner balances
    ("tp=2,fsdp=2", "tp=2"),        # TP x FSDP2: _StridedShard on colwise weights
    ("fsdp=7", "tp=4"),             # trailing ranks short and empty (k_norm: 16 rows)
])
def test_fsdp_sources_refit_every_element(tmp_path, train, infer):
    path = tiny(tmp_path)
    w = conventions.Weights(conventions.load_config(path))
    got, expect = refit_all(path, train, infer, trainer_modules(w, train))
    assert_every_element(got, expect)


def test_hf_names_lose_wrapper_segments():
    assert hf_name("_orig_mod.model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight") \
        == "model.layers.0.mlp.up_proj.weight"
    assert hf_name("module._fsdp_wrapped_module.lm_head.weight") == "lm_head.weight"
    assert hf_name("model.norm.weight") == "model.norm.weight"


def _one_rank(tmp_path, train="fsdp=4", rank=1):
    path = tiny(tmp_path)
    w = conventions.Weights(conventions.load_config(path))
    refit = reshard.Model(path).refit(train, "tp=2")
    return w, refit, trainer_modules(w, train)


def _replace(module, name, p):
    *path, leaf = name.split(".")
    m = module
    for part in path:
        m = getattr(m, part)
    delattr(m, leaf)
    m.register_parameter(leaf, p)


def test_partial_placement_is_refused_by_name(tmp_path):
    w, refit, mods = _one_rank(tmp_path)
    name = "model.layers.1.mlp.down_proj.weight"
    p = dict(mods[1].named_parameters())[name]
    _replace(mods[1], name, dtensor.DTensor(p.to_local(), p.device_mesh,
                                            (dtensor.Partial(),), p.shape))
    problems = FSDPModule(mods[1]).problems(refit.train, 1)
    assert len(problems) == 1, problems
    assert problems[0].startswith("train rank 1: parameter %r: placement" % name)
    assert "Partial" in problems[0]


def test_local_shape_that_placements_do_not_imply_is_refused(tmp_path):
    w, refit, mods = _one_rank(tmp_path)
    name = "model.layers.0.self_attn.q_proj.weight"
    p = dict(mods[2].named_parameters())[name]
    short = p.to_local()[:-1].clone()
    _replace(mods[2], name, dtensor.DTensor(short, p.device_mesh, p.placements, p.shape))
    problems = FSDPModule(mods[2]).problems(refit.train, 2)
    assert any(name in x and "imply" in x for x in problems), problems


def test_live_placement_other_than_the_spec_is_refused(tmp_path):
    """The module was sharded on dim 1 (or as fsdp=2): the spec's layout puts other
    elements on this rank, named before anything moves."""
    w, refit, mods = _one_rank(tmp_path)
    name = "model.layers.0.mlp.gate_proj.weight"
    full = w[name]
    p = dict(mods[0].named_parameters())[name]
    local = dtensor.chunk_with_empty(full, 4, 1)[0].contiguous()
    _replace(mods[0], name, dtensor.DTensor(local, p.device_mesh, (dtensor.Shard(1),),
                                            full.shape))
    problems = FSDPModule(mods[0]).problems(refit.train, 0)
    assert any(name in x and "differs from the spec" in x for x in problems), problems


def test_mesh_that_is_not_the_training_ranks_is_refused(tmp_path):
    w, refit, mods = _one_rank(tmp_path)
    name = "model.norm.weight"
    p = dict(mods[3].named_parameters())[name]
    mesh = dtensor.DeviceMesh("cpu", [0, 1, 2, 5], rank=3)
    _replace(mods[3], name, dtensor.DTensor(p.to_local(), mesh, p.placements, p.shape))
    problems = FSDPModule(mods[3]).problems(refit.train, 3)
    assert any(name in x and "mesh" in x for x in problems), problems
    # the process at another coordinate than its trainer rank
    mesh = dtensor.DeviceMesh("cpu", [0, 1, 2, 3], rank=2)
    _replace(mods[3], name, dtensor.DTensor(p.to_local(), mesh, p.placements, p.shape))
    problems = FSDPModule(mods[3]).problems(refit.train, 3)
    assert any(name in x and "coordinate" in x for x in problems), problems


def test_unsharded_module_is_refused_with_what_to_do(tmp_path):
    w, refit, mods = _one_rank(tmp_path)
    name = "model.layers.0.mlp.up_proj.weight"
    _replace(mods[1], name, torch.nn.Parameter(w[name].clone(), requires_grad=False))
    problems = FSDPModule(mods[1]).problems(refit.train, 1)
    assert any(name in x and "reshard()" in x for x in problems), problems


def test_bench_processes_gloo(tmp_path):
    """bench/fsdp_refit.py at a small size: FSDP2 sources in 4 processes into vLLM tp=2
    x dp=2 in 4 more, over one gloo group; reshard and the gather + broadcast baseline
    both checked element by element."""
    path = tiny(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "fsdp_refit.py"),
                        "--model", path, "--layers", "2", "--iters", "1"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "the stand-in" in p.stdout.splitlines()[0]
    assert p.stdout.strip().endswith("fsdp_refit: OK"), p.stdout
    rows = {x.split("  ")[0]: x.split() for x in p.stdout.splitlines()
            if x.startswith(("reshard (", "full_tensor"))}
    n = sum(t.numel() for i in range(4) for t in conventions.vllm_state_dict(
        conventions.Weights(conventions.load_config(path, 2)), "tp=2,dp=2", i, SENT).values())
    for row in rows.values():
        assert int(row[-2]) == n and int(row[-1]) == 0, rows


def test_every_element_of_the_live_sharding_is_checked_against_the_layout():
    """A layout of DTensor placements (TP x FSDP2 over [[0, 1], [2, 3]], uneven: 10
    rows over tp=2 then fsdp=2): the stand-in's shards agree on every rank; the same
    spec on the transposed mesh gives equal shapes but other elements, and is named."""
    from reshard import Replicate, Shard, StridedShard
    full = {"a.weight": torch.arange(60, dtype=torch.float32).reshape(10, 6),
            "b.weight": torch.arange(32, dtype=torch.float32).reshape(8, 4),
            "n.weight": torch.arange(5, dtype=torch.float32)}
    styles = {"a.weight": dtensor.COLWISE, "b.weight": dtensor.ROWWISE}
    t = reshard.Tensors()
    for n, x in full.items():
        t.add(n, x.shape, torch.float32)
    mesh = [[0, 1], [2, 3]]

    def layout(b_mesh):
        return reshard.Layout.from_placements(t, {
            "a.weight": (mesh, [StridedShard(0, 2), Shard(0)]),
            "b.weight": (b_mesh, [Shard(0), Shard(1)]),
            "n.weight": (mesh, [Shard(0), Replicate()])})
    good, transposed = layout(mesh), layout([[0, 2], [1, 3]])
    for r in range(4):
        m = dtensor.fully_shard(full, styles, r, fsdp=2, tp=2)
        assert FSDPModule(m).problems(good, r) == []
        problems = FSDPModule(m).problems(transposed, r)
        if r in (1, 2):  # ranks 0 and 3 sit on the diagonal: the same elements
            assert len(problems) == 1 and "'b.weight'" in problems[0] and \
                "other elements of the parameter" in problems[0], problems
        else:
            assert problems == [], problems


MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 32,
       "intermediate_size": 64, "moe_intermediate_size": 16, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4,
       "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
       "vocab_size": 100, "tie_word_embeddings": False}


@pytest.mark.parametrize("form", ["4", "5"])
def test_moe_fsdp_source_into_vllm_experts(tmp_path, form):
    """qwen3_moe under FSDP2 (fsdp=3) into vLLM tp=2 with expert parallelism, in both
    of transformers' forms: 4.x per-expert parameters (experts.J.gate_proj.weight, 16
    rows as 6, 6, 4) and 5.x fused expert tensors (experts.gate_up_proj [E, 2I, H],
    per expert [gate; up], and experts.down_proj [E, H, I]: 4 experts as 2, 2, 0).
    Oracle (vLLM's FusedMoE with EP, linear placement): EP rank r holds experts
    [r*E/2, (r+1)*E/2) whole, w13_weight[k] = [gate; up] and w2_weight[k] = down of
    expert r*E/2 + k; the router and the norms whole on both ranks."""
    import json
    path = os.path.join(str(tmp_path), "moe.json")
    with open(path, "w") as f:
        json.dump(MOE, f)
    refit = reshard.Model(path).refit("fsdp=3,transformers=%s" % form, "tp=2,ep=on")
    g = torch.Generator().manual_seed(5)
    full, gate, up, down = {}, {}, {}, {}
    for ti in refit.tensors:
        if ".experts." in ti.name:  # the stacked logical tensor [E, rows, cols]
            x = torch.randn(ti.shape, generator=g).to(torch.bfloat16)
            head, tail = ti.name.split(".experts.")
            {"gate_proj.weight": gate, "up_proj.weight": up,
             "down_proj.weight": down}[tail][head] = x
            if form == "4":  # HF 4.x: experts.J.<proj>.weight, one per expert
                for j in range(ti.shape[0]):
                    full["%s.experts.%d.%s" % (head, j, tail)] = x[j].clone()
        else:
            full[ti.name] = torch.randn(ti.shape, generator=g).to(reshard.torch_dtype(ti.dtype))
    if form == "5":  # HF 5.x Qwen3MoeExperts: gate_up_proj [E, 2I, H], down_proj [E, H, I]
        for head in gate:
            full[head + ".experts.gate_up_proj"] = torch.cat([gate[head], up[head]], dim=1)
            full[head + ".experts.down_proj"] = down[head].clone()
    mods = [dtensor.fully_shard(full, {}, r, fsdp=3) for r in range(3)]
    got = [refit.infer.new_buffers(3 + i, fill=SENT) for i in range(2)]
    plan = reshard.Plan(refit.train, refit.infer, rank=reshard.ALL_RANKS, world=refit.world,
                        timeout_s=20)
    group = reshard.InprocGroup(refit.world)
    errors = {}

    def body(r):
        try:
            if r < 3:
                src = FSDPModule(mods[r])
                assert src.problems(refit.train, r) == []
                plan.execute(group.comm(r), src=src.named()[0], dst=None)
            else:
                plan.execute(group.comm(r), src=None, dst=got[r - 3])
        except Exception as e:  # noqa: BLE001
            errors[r] = e
    ts = [threading.Thread(target=body, args=(r,)) for r in range(refit.world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    group.close()
    assert errors == {}, errors
    bits = lambda x: x.contiguous().view(torch.int16)  # noqa: E731
    for i in range(2):
        for layer in range(2):
            pre = "model.layers.%d.mlp." % layer
            w13 = got[i][pre + "experts.routed_experts.w13_weight"]
            w2 = got[i][pre + "experts.routed_experts.w2_weight"]
            assert w13.shape == (2, 32, 32) and w2.shape == (2, 32, 16)
            head = "model.layers.%d.mlp" % layer
            for k in range(2):
                e = i * 2 + k
                want = torch.cat([gate[head][e], up[head][e]])
                assert torch.equal(bits(w13[k]), bits(want)), (i, layer, k)
                assert torch.equal(bits(w2[k]), bits(down[head][e])), (i, layer, k)
            assert torch.equal(bits(got[i][pre + "gate.weight"]), bits(full[pre + "gate.weight"]))
            for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
                name = "model.layers.%d.%s" % (layer, n)
                assert torch.equal(bits(got[i][name]), bits(full[name])), (i, name)


# The other MoE families, tiny: mixtral (block_sparse_moe, w1/w2/w3), qwen2_moe (shared
# expert and its [1, H] gate), deepseek_v3 (MLA, a dense first layer, shared experts,
# noaux_tc: the router's e_score_correction_bias buffer), glm4_moe (q/k/v biases, the
# bias buffer).
_MOE_BASE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "vocab_size": 100, "tie_word_embeddings": False, "num_experts_per_tok": 1}
FAMILIES = {
    "mixtral": dict(_MOE_BASE, model_type="mixtral", intermediate_size=16,
                    num_key_value_heads=2, head_dim=8, num_local_experts=3),
    "qwen2_moe": dict(_MOE_BASE, model_type="qwen2_moe", intermediate_size=48,
                      moe_intermediate_size=16, shared_expert_intermediate_size=24,
                      num_key_value_heads=2, head_dim=8, num_experts=3,
                      decoder_sparse_step=1, mlp_only_layers=[]),
    "deepseek_v3": dict(_MOE_BASE, model_type="deepseek_v3", intermediate_size=48,
                        moe_intermediate_size=16, num_attention_heads=2, q_lora_rank=24,
                        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                        v_head_dim=8, n_routed_experts=5, n_shared_experts=1,
                        first_k_dense_replace=1, topk_method="noaux_tc"),
    "glm4_moe": dict(_MOE_BASE, model_type="glm4_moe", intermediate_size=48,
                     moe_intermediate_size=16, num_key_value_heads=2, head_dim=8,
                     attention_bias=True, n_routed_experts=5, n_shared_experts=1,
                     first_k_dense_replace=1),
}
# transformers 4's per-expert projections in declaration order
# (MixtralBlockSparseTop2MLP: w1, w2, w3; the others' MLPs: gate, up, down)
_PER_EXPERT = {"w1.weight": "gate", "w3.weight": "up", "w2.weight": "down",
               "gate_proj.weight": "gate", "up_proj.weight": "up",
               "down_proj.weight": "down"}


def hf_module(logical, form):
    """The HF module's (named_parameters, named_buffers) as full tensors, from the
    checkpoint-named logical tensors, by transformers' rules (docs/fsdp-reference.md):
    4.x one module per expert (experts.J.<proj>.weight); 5.x the fused
    experts.gate_up_proj [E, 2I, H] = [gate; up] per expert (conversion_mapping.py:
    MergeModulelist(dim=0), Concatenate(dim=1)) and experts.down_proj [E, H, I], with
    mixtral's block_sparse_moe renamed mlp; e_score_correction_bias a buffer."""
    params, buffers, experts = {}, {}, {}
    for name, x in logical.items():
        if name.endswith("e_score_correction_bias"):
            buffers[name] = x
        elif ".experts." in name:
            head, tail = name.split(".experts.")
            experts.setdefault(head, {})[_PER_EXPERT[tail]] = (tail, x)
        else:
            params[name.replace(".block_sparse_moe.", ".mlp.") if form == "5" else name] = x
    for head, parts in experts.items():
        if form == "4":
            for tail, x in parts.values():
                for j in range(x.shape[0]):
                    params["%s.experts.%d.%s" % (head, j, tail)] = x[j].clone()
        else:
            head = head.replace(".block_sparse_moe", ".mlp")
            params[head + ".experts.gate_up_proj"] = torch.cat(
                [parts["gate"][1], parts["up"][1]], dim=1)
            params[head + ".experts.down_proj"] = parts["down"][1].clone()
    return params, buffers


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("train", ["fsdp=3,transformers=4", "fsdp=2,dp=2",
                                   "fsdp=4,transformers=5"])
def test_moe_families_live_shards_are_the_layouts(tmp_path, family, train):
    """Every trainer rank's live module (the DTensor stand-in's torch.chunk shards of the
    HF module built by hf_module, the router-bias buffer whole on every rank, as
    fully_shard leaves buffers) passes the live check, binds by name (parameters and
    buffers), and holds, byte for byte, what the refit's train layout says each of its
    buffers holds (both filled from the same logical tensors: the global-index
    pattern)."""
    _moe_live_shards_are_the_layouts(tmp_path, family, train)


# transformers' base_model_tp_plan of each MoE family ("layers.*." left off), copied
# from configuration_<family>.py at v4.57.6 (753d6110) and at a597f974 (5), and the
# causal LM's _tp_plan for lm_head ("colwise_rep"; 5: "colwise_gather_output").
_ATTN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise",
         "self_attn.v_proj": "colwise", "self_attn.o_proj": "rowwise"}
_MLP = {"mlp.gate_proj": "colwise", "mlp.up_proj": "colwise", "mlp.down_proj": "rowwise"}
_FUSED = {"mlp.experts.gate_up_proj": "packed_colwise", "mlp.experts.down_proj": "rowwise",
          "mlp.experts": "moe_tp_experts"}
_SHARED = {"mlp.shared_experts.gate_proj": "colwise", "mlp.shared_experts.up_proj": "colwise",
           "mlp.shared_experts.down_proj": "rowwise"}
_PER_EXPERT_TP = {"mlp.experts.*.gate_proj": "colwise", "mlp.experts.*.up_proj": "colwise",
                  "mlp.experts.*.down_proj": "rowwise"}
HF_TP_PLANS = {
    ("mixtral", "4"): dict(_ATTN, **{"block_sparse_moe.gate": "colwise_rep",
                                     "block_sparse_moe.experts.*.w1": "colwise",
                                     "block_sparse_moe.experts.*.w2": "rowwise",
                                     "block_sparse_moe.experts.*.w3": "colwise"}),
    ("mixtral", "5"): dict(_ATTN, **_FUSED),
    ("qwen2_moe", "4"): dict(_ATTN, **_MLP),
    ("qwen2_moe", "5"): dict(_ATTN, **_MLP),
    ("qwen3_moe", "4"): dict(_ATTN, **_PER_EXPERT_TP, **_MLP),
    ("qwen3_moe", "5"): dict(_ATTN, **{"self_attn.q_norm": "replicated_with_grad_allreduce",
                                       "self_attn.k_norm": "replicated_with_grad_allreduce"},
                             **_FUSED, **_MLP),
    ("glm4_moe", "4"): dict(_ATTN, **_PER_EXPERT_TP, **_MLP),
    ("glm4_moe", "5"): dict(_ATTN, **_FUSED, **_SHARED, **_MLP),
    ("deepseek_v3", "4"): {
        "mlp.experts.*.gate_proj": "local_colwise", "mlp.experts.*.up_proj": "local_colwise",
        "mlp.experts.*.down_proj": "local_rowwise", "mlp.experts.*": "local",
        "mlp.shared_experts.gate_proj": "local_colwise",
        "mlp.shared_experts.up_proj": "local_colwise",
        "mlp.shared_experts.down_proj": "local_rowwise", "mlp.shared_experts": "local",
        "mlp.gate_proj": "local_colwise", "mlp.up_proj": "local_colwise",
        "mlp.down_proj": "local_rowwise", "mlp": "gather"},
    ("deepseek_v3", "5"): dict(_FUSED, **_SHARED, **_MLP),
}


def hf_tp_style(family, form, name):
    """The stand-in style of HF parameter ``name`` under the family's plan at the
    release, matched as transformers' _get_parameter_tp_plan does: v4.57.6 turns every
    digit run into "*" (so "experts.*.w1" becomes "experts.*.w*" and mixtral's expert
    entries never match), 5 only the ".N" segments; the name, else its module. 4's
    "colwise"/"rowwise" are DTensors over tp (then _StridedShard under FSDP2), its
    "local_*" and all of 5's plain tensors holding the piece."""
    import re
    n = name[len("model."):] if name.startswith("model.") else name
    g = re.sub(r"\d+", "*", n) if form == "4" else re.sub(r"\.\d+(\.|$)", r".*\1", n)
    plan = {"layers.*." + k: v for k, v in HF_TP_PLANS[(family, form)].items()}
    plan["lm_head"] = "colwise_rep" if form == "4" else "colwise_gather_output"
    style = plan.get(g) or plan.get(g.rsplit(".", 1)[0], "")
    if style == "packed_colwise":
        return dtensor.LOCAL_PACKED
    if "colwise" in style:
        return dtensor.COLWISE if style in ("colwise", "colwise_rep") else dtensor.LOCAL_COLWISE
    if "rowwise" in style:
        return dtensor.ROWWISE if style == "rowwise" and form == "4" else dtensor.LOCAL_ROWWISE
    return dtensor.REPLICATED


def _moe_live_shards_are_the_layouts(tmp_path, family, train, tp_form=None):
    """Every trainer rank's live module (the stand-in's shards of the HF module built by
    hf_module, split over tp by the family's plan, the router-bias buffer whole on
    every rank) passes the live check, binds by name and holds, byte for byte, what
    the refit's train layout says each of its buffers holds."""
    import json
    from reshard.layout import Layout
    from reshard.pattern import fill_pattern
    path = os.path.join(str(tmp_path), family + ".json")
    with open(path, "w") as f:
        json.dump(FAMILIES[family], f)
    refit = reshard.Model(path).refit(train, "tp=2,ep=on")
    whole = Layout(refit.tensors)
    infos = list(refit.tensors)
    for i, ti in enumerate(infos):
        whole.add_dtensor(ti.name, [0], [reshard.Replicate()], buffer=i, name=ti.name)
    logical = whole.new_buffers(0)
    fill_pattern(whole, 0, logical)
    logical = {ti.name: logical[ti.name].reshape(ti.shape) for ti in infos}
    form = "4" if "transformers=4" in train else "5"
    params, buffers = hf_module(logical, form)
    fsdp, replicas, tp = sizes(train)
    styles = {n: hf_tp_style(family, form, n) for n in params} if tp > 1 else {}
    for r in range(refit.train_world):
        m = dtensor.fully_shard(params, styles, r, fsdp=fsdp, replicas=replicas, tp=tp)
        for name, b in buffers.items():  # fully_shard does not shard buffers
            *path_, leaf = name.split(".")
            m.get_submodule(".".join(path_)).register_buffer(leaf, b.clone())
        src = FSDPModule(m)
        assert src.problems(refit.train, r, train=train) == [], \
            (r, src.problems(refit.train, r, train=train))
        p, b = src.named()
        live = dict(p, **b)
        want = refit.train.new_buffers(r)
        fill_pattern(refit.train, r, want)
        assert sorted(live) == sorted(want), (r, sorted(set(live) ^ set(want)))
        for name, x in want.items():
            got = live[name]
            assert tuple(got.shape) == tuple(x.shape), (r, name)
            assert torch.equal(got.contiguous().view(torch.uint8),
                               x.contiguous().view(torch.uint8)), (r, name)
    return styles


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("train", ["tp=2,fsdp=2,transformers=4", "tp=2,fsdp=3,dp=2"])
def test_moe_families_under_tp_live_shards_are_the_layouts(tmp_path, family, train):
    """tp x fsdp: each parameter split over tp as the family's HF plan at the release
    says (hf_tp_style), DTensors or plain pieces, then FSDP2's chunk; byte for byte."""
    styles = _moe_live_shards_are_the_layouts(tmp_path, family, train)
    assert any(s != dtensor.REPLICATED for s in styles.values())


def test_experts_on_a_mesh_of_another_order_are_refused(tmp_path):
    """Per-expert (and fused) parameters cannot be checked element by element against
    a logical tensor of their own; a module whose experts are sharded on a permuted
    mesh (the rest on the spec's) is refused on the ranks it moves, naming the shard
    index, through the spec and through the other parameters."""
    import json
    path = os.path.join(str(tmp_path), "moe.json")
    with open(path, "w") as f:
        json.dump(MOE, f)
    refit = reshard.Model(path).refit("fsdp=4,transformers=4", "tp=2,ep=on")
    g = torch.Generator().manual_seed(3)
    full = {}
    for ti in refit.tensors:
        if ".experts." in ti.name:
            head, tail = ti.name.split(".experts.")
            for j in range(ti.shape[0]):
                full["%s.experts.%d.%s" % (head, j, tail)] = \
                    torch.randn(ti.shape[1:], generator=g).to(torch.bfloat16)
        else:
            full[ti.name] = torch.randn(ti.shape, generator=g).to(reshard.torch_dtype(ti.dtype))
    perm = [1, 0, 3, 2]  # the experts' mesh: rank r sits at shard perm[r]
    for r in range(4):
        m = dtensor.fully_shard(full, {}, r, fsdp=4)
        mesh = dtensor.DeviceMesh("cpu", [perm.index(i) for i in range(4)], rank=r)
        for n, p in list(m.named_parameters()):
            if ".experts." in n:
                local = dtensor.chunk_with_empty(full[n], 4, 0)[perm[r]].contiguous()
                _replace(m, n, dtensor.DTensor(local, mesh, (dtensor.Shard(0),), full[n].shape))
        src = FSDPModule(m)
        assert src.problems(refit.train, r) != []
        by_spec = src.problems(refit.train, r, train="fsdp=4,transformers=4")
        assert any("experts.0.gate_proj.weight" in x and "gives it shard %d" % r in x
                   for x in by_spec), by_spec


def test_uneven_tp_split_under_fsdp_refits(tmp_path):
    """lm_head of 301 rows splits 151/150 over tp=2, then FSDP2 chunks each over 6
    (26 x 5 + 21 and 25 x 6): the live check accepts what FSDP2 holds (its strided
    placement over unequal blocks is checked by shape and shard index) and every
    element arrives."""
    path = tiny(tmp_path, vocab_size=301)
    w = conventions.Weights(conventions.load_config(path))
    got, expect = refit_all(path, "tp=2,fsdp=6", "tp=2", trainer_modules(w, "tp=2,fsdp=6"))
    assert_every_element(got, expect)


def test_plain_tp_piece_sharded_otherwise_is_refused(tmp_path):
    """deepseek_v3 under transformers 4: the dense mlp.gate_proj is "local_colwise" (a
    plain TP piece [I/2, H] that FSDP2 shards over the data-parallel ranks only). Its
    live placements are checked element by element at tp rank t's torch.chunk of the
    whole tensor: the same piece over the dp ranks in reverse order (rank 0 at shard
    1: rows 12..23 of the piece, the spec's 0..11) is named."""
    import json
    path = os.path.join(str(tmp_path), "dsv3.json")
    with open(path, "w") as f:
        json.dump(FAMILIES["deepseek_v3"], f)
    train = "tp=2,fsdp=2,transformers=4"
    refit = reshard.Model(path).refit(train, "tp=2")
    name = "model.layers.0.mlp.gate_proj.weight"
    full = {name: torch.zeros(48, 32, dtype=torch.bfloat16)}
    styles = {name: hf_tp_style("deepseek_v3", "4", name)}
    assert styles[name] == dtensor.LOCAL_COLWISE
    m = dtensor.fully_shard(full, styles, 0, fsdp=2, tp=2)
    p = m.get_parameter(name)
    assert tuple(p.shape) == (24, 32) and list(p.device_mesh.mesh.tolist()) == [0, 2]
    assert FSDPModule(m).problems(refit.train, 0, train=train) == []
    _replace(m, name, dtensor.DTensor(p.to_local(), dtensor.DeviceMesh("cpu", [2, 0], rank=0),
                                      p.placements, p.shape))
    problems = FSDPModule(m).problems(refit.train, 0, train=train)
    assert len(problems) == 1 and name in problems[0] and "other elements" in problems[0], \
        problems
