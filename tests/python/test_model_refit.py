"""Model refits on in-process threads: trainer ranks bind Megatron-named torch
tensors, inference ranks vLLM-named ones (both built by examples/python/conventions.py
from the frameworks' rules); every destination element, padding included, is
checked against the HF-level values."""

import json

import pytest
import torch

import reshard
import conventions

TINY = {  # a qwen3 shaped like the real one, small enough for threads
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300, "tie_word_embeddings": True,
}


@pytest.fixture(params=[True, False], ids=["tied", "untied"])
def config_path(tmp_path, request):
    cfg = dict(TINY, tie_word_embeddings=request.param)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def test_catalogue_is_the_hf_checkpoint(config_path):
    """The library's logical tensors are the HF names and shapes the conventions use."""
    refit = reshard.Model(config_path).refit("tp=1", "tp=1")
    cfg = conventions.load_config(config_path)
    assert {t.name: t.shape for t in refit.tensors} == conventions.hf_shapes(cfg)
    assert all(t.dtype == reshard.DType.bf16 for t in refit.tensors)


@pytest.mark.parametrize("scoped", [False, True], ids=["whole", "scoped"])
@pytest.mark.parametrize("train,infer", [("tp=2,pp=2", "tp=4"), ("tp=2,dp=2", "tp=2,dp=2"),
                                         ("tp=1,pp=2", "tp=1")])
def test_model_refit_threads(config_path, train, infer, scoped):
    """Every rank plans from the whole refit, or (scoped) from its own part of it."""
    model = reshard.Model(config_path)
    refit = model.refit(train, infer)
    w = conventions.Weights(conventions.load_config(config_path))
    if scoped:
        refit_and_check(refit, w, train, infer, domain_size=2,
                        part=lambda r: model.refit(train, infer, rank=r, domain_size=2))
    else:
        refit_and_check(refit, w, train, infer)


def refit_and_check(refit, w, train, infer, part=None, domain_size=None):
    """Run ``refit`` on threads: trainer ranks send the Megatron state dicts of
    ``train``, inference ranks receive into sentinel-filled vLLM state dicts of
    ``infer``; every element (padding still the sentinel) must be the conventions'.
    ``part(rank)``: the refit a rank plans from (its scoped part), default the whole."""
    sentinel = reshard.SENTINEL_BYTE
    got, want = {}, {}

    def rank_fn(comm):
        r = comm.rank
        mine = part(r) if part else refit
        plan = reshard.Plan(mine.train, mine.infer, rank=r, world=refit.world, staging_mb=1,
                            domain_size=domain_size)
        side, i = refit.role(r)
        if side == "train":
            plan.execute(comm, src=conventions.megatron_state_dict(w, train, i))
        else:
            expect = conventions.vllm_state_dict(w, infer, i, sentinel)
            dst = {n: torch.empty_like(t).view(torch.uint8).fill_(sentinel).view(t.dtype)
                   for n, t in expect.items()}
            plan.execute(comm, dst=dst)
            got[i], want[i] = dst, expect

    reshard.run_threads(refit.world, rank_fn)
    assert sorted(got) == list(range(refit.infer_world))
    for i in got:
        for name, e in want[i].items():
            assert got[i][name].shape == e.shape
            assert conventions.mismatches(got[i][name], e) == 0, "infer rank %d %s" % (i, name)


@pytest.mark.parametrize("train", ["tp=2,dp=2", "tp=2,pp=2"])
def test_parameters_name_what_the_frameworks_hold(config_path, train):
    """Layout.parameters(rank) lists exactly the names, shapes and dtypes of the
    framework state dicts (so a rank can allocate from it)."""
    refit = reshard.Model(config_path).refit(train, "tp=4")
    w = conventions.Weights(conventions.load_config(config_path))
    for r in range(refit.train_world):
        sd = conventions.megatron_state_dict(w, train, r)
        assert {p.name: (p.shape, p.dtype) for p in refit.train.parameters(r)} == \
            {n: (tuple(t.shape), reshard.DType.bf16) for n, t in sd.items()}
    for i in range(refit.infer_world):
        sd = conventions.vllm_state_dict(w, "tp=4", i, 0)
        params = refit.infer.parameters(refit.infer_offset + i)
        assert {p.name: p.shape for p in params} == {n: tuple(t.shape) for n, t in sd.items()}


def test_bind_named_parameters_of_a_module(config_path):
    """dict(module.named_parameters()) binds as is: nn.Parameters in an nn.Module."""
    refit = reshard.Model(config_path).refit("tp=1", "tp=1")
    w = conventions.Weights(conventions.load_config(config_path))
    module = torch.nn.Module()
    for n, t in conventions.megatron_state_dict(w, "tp=1", 0).items():
        parent = module
        parts = n.split(".")
        for part in parts[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.register_parameter(parts[-1], torch.nn.Parameter(t))
    expect = conventions.vllm_state_dict(w, "tp=1", 0, reshard.SENTINEL_BYTE)
    out = {}

    def rank_fn(comm):
        plan = reshard.Plan(refit.train, refit.infer, rank=comm.rank, world=2)
        if comm.rank == 0:
            with torch.no_grad():
                plan.execute(comm, src=dict(module.named_parameters()))
        else:
            out.update(refit.infer.new_buffers(1, fill=reshard.SENTINEL_BYTE))
            plan.execute(comm, dst=out)

    reshard.run_threads(2, rank_fn)
    assert sorted(out) == sorted(expect)
    for n, e in expect.items():
        assert conventions.mismatches(out[n], e) == 0, n


def test_scoped_refit_serves_its_rank_only(config_path):
    """A scoped refit names its own rank's parameters only, and a plan for another
    rank, a global plan or another domain size is refused with the reason."""
    model = reshard.Model(config_path)
    whole = model.refit("tp=2,pp=2", "tp=4")
    mine = model.refit("tp=2,pp=2", "tp=4", rank=1, domain_size=2)
    assert mine.rank == 1 and whole.rank is None
    assert mine.train.parameters(1) == whole.train.parameters(1)
    for ask in (mine.train.parameters, mine.infer.parameters, mine.train.new_buffers):
        with pytest.raises(reshard.ReshardError, match="scoped to rank 1") as e:
            ask(0)  # another rank's: an error, not a silent []
        assert e.value.status == reshard.Status.RANK
    with pytest.raises(reshard.ReshardError, match="scoped to rank 1"):
        mine.train.find_parameter(0, "embedding.word_embeddings.weight")
    assert whole.train.parameters(9) == []  # the whole refit: a rank with none holds none
    reshard.Plan(mine.train, mine.infer, rank=1, world=mine.world, domain_size=2)
    for rank, ds, text in [(2, 2, "not for rank 2's"), (reshard.ALL_RANKS, 2, "global plan"),
                           (1, 4, "domain size 4")]:
        with pytest.raises(reshard.ReshardError) as e:
            reshard.Plan(mine.train, mine.infer, rank=rank, world=mine.world, domain_size=ds)
        assert e.value.status == reshard.Status.INVALID_ARG and text in str(e.value)
    with pytest.raises(reshard.ReshardError) as e:
        model.refit("tp=2,pp=2", "tp=4", rank=8)
    assert e.value.status == reshard.Status.RANK
    for kw in [dict(rank=2**40), dict(rank=1, domain_size=2**33), dict(domain_size=2)]:
        with pytest.raises(ValueError):
            model.refit("tp=2,pp=2", "tp=4", **kw)


@pytest.mark.parametrize("train,infer,kw", [
    ("tp=2,convention=megatron-bridge", "tp=2,engines=2", {}),
    ("tp=2,pp=2", "tp=2", {"engines": 2, "convention": "megatron-bridge"}),
    ("tp=2", "tp=1,dp=2", {"engines": 2, "vllm": "0.24"}),
])
def test_engines_and_conventions_threads(tmp_path, train, infer, kw):
    """Independent engines and Megatron-Bridge (no vocabulary padding) through
    Model.refit, keywords or spec keys alike: every element against the conventions."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY))
    model = reshard.Model(str(p))
    refit = model.refit(train, infer, **kw)
    full_train = train + (",convention=%s" % kw["convention"] if "convention" in kw else "")
    eng = kw.get("engines") or int(conventions.parse_spec(infer).get("engines", 1))
    assert refit.engines == eng
    assert refit.convention == ("megatron-bridge" if "bridge" in full_train else "megatron-lm")
    assert refit.vllm == kw.get("vllm", "0.25")
    s = conventions.parse_spec(infer)
    assert refit.infer_world == eng * int(s.get("tp", 1)) * int(s.get("dp", 1))
    w = conventions.Weights(conventions.load_config(str(p)))
    # Bridge: 300 vocabulary rows split 150/150, no padding rows
    emb = [q for q in refit.train.parameters(0) if q.name == "embedding.word_embeddings.weight"]
    vrows = 300 // 2 if "bridge" in full_train else 512 // 2  # LM: 300 padded to 128 * tp
    assert emb[0].shape == (vrows, 64)
    refit_and_check(refit, w, full_train, infer)


def test_spec_keywords_refused_twice_or_unknown(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY))
    model = reshard.Model(str(p))
    with pytest.raises(reshard.ReshardError, match="given twice"):
        model.refit("tp=1", "tp=1,engines=2", engines=2)
    with pytest.raises(reshard.ReshardError, match="vllm=0.9 is not a supported vLLM version"):
        model.refit("tp=1", "tp=1", vllm="0.9")
    with pytest.raises(reshard.ReshardError, match="convention=nemo is not a modelled"):
        model.refit("tp=1", "tp=1", convention="nemo")
    # V = 300 is not divisible by tp=8: Megatron-Bridge cannot split it
    with pytest.raises(reshard.ReshardError, match="megatron-bridge.*tp=8 does not divide"):
        model.refit("tp=8", "tp=1", convention="megatron-bridge")


def test_expert_bias_is_a_module_buffer():
    """Megatron registers router.expert_bias as a buffer (named_buffers()); the router
    weight and everything else are parameters."""
    refit = reshard.Model("deepseek-v3", layers=4).refit("tp=1,pp=1", "tp=8,ep=on")
    names = refit.module_buffers(0)
    assert names == ["decoder.layers.3.mlp.router.expert_bias"]
    params = {q.name for q in refit.train.parameters(0)}
    assert set(names) <= params and "decoder.layers.3.mlp.router.weight" in params
    # vLLM 0.25 names the routed experts under routed_experts
    inames = {q.name for q in refit.infer.parameters(refit.infer_offset)}
    assert "model.layers.3.mlp.experts.routed_experts.w13_weight" in inames
    assert "model.layers.3.mlp.experts.w13_weight" not in inames


def test_parameter_dtype_is_reshards_and_torch_dtype_is_torchs(config_path):
    """Parameter.dtype is reshard's DType; Parameter.torch_dtype is what a bound tensor
    has (fp8: torch.uint8 where torch has no float8)."""
    refit = reshard.Model(config_path).refit("tp=2", "tp=2")
    p = refit.train.parameters(0)[0]
    assert p.dtype is reshard.DType.bf16 and p.torch_dtype is torch.bfloat16
    fp8 = reshard.Parameter("w", (2, 2), reshard.DType.fp8_e4m3, 0, 0, 4)
    assert fp8.torch_dtype == getattr(torch, "float8_e4m3fn", torch.uint8)
    assert reshard.Parameter("b", (2,), reshard.DType.fp32, 0, 1, 8).torch_dtype is torch.float32
    assert refit.train.new_buffers(0)[p.name].dtype == p.torch_dtype
