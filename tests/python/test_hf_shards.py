"""reshard.shards_from_hf / hf_from_shards / open_safetensors against oracles written by
hand from the frameworks' rules (/work/shared/FRAMEWORKS.md), every element.

The models are the shipped qwen3-0.6b (dense, tied embeddings) and qwen3-30b-a3b (MoE)
configs with their sizes shrunk (hidden 64, 8 experts, vocabulary 1100) so that every
rank of every case runs in well under a second; the families, head ratios and rules are
the shipped ones. The vocabulary of 1100 is padded by Megatron-LM at tp=2 to 1280
(128*tp) and by vLLM to 1152 (64), so every padding rule shows.

Megatron-Core (train): rank = tp_rank + tp*(cp*(ep...)) with tp fastest; expert grid
etp fastest, then ep. linear_qkv rows per query group [q heads; k; v], split evenly over
tp; linear_fc1 = [gate; up] of the tp rank; linear_proj / linear_fc2 split on dim 1;
input norm fused as linear_qkv.layer_norm_weight, pre-MLP norm as
linear_fc1.layer_norm_weight (dense) or pre_mlp_layernorm (MoE); experts of ep rank r
[r*E/ep, ...), one parameter per local expert, linear_fc1.weightK = [gate; up] of the
etp rank. Megatron-LM pads the vocabulary to 128*tp with copies of the last row
(its HF converter); Megatron-Bridge does not pad.

vLLM (infer): qkv_proj = [q; k; v] of the tp rank (tp > kv heads: kv head
tp_rank // (tp / kv)); gate_up_proj = [gate; up]; vocabulary padded to 64 with zero
rows; tied embeddings one parameter; FusedMoE w13 = [gate; up] per expert, w2 split on
its last dim; with EP (tp*dp ranks) whole experts contiguous, remainder first; without
EP the intermediate dim split over all tp*dp ranks (slice dp_rank*tp + tp_rank).
"""

import json
import os
import struct
import zlib

import numpy as np
import pytest
import torch

import reshard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = dict(hidden_size=64, intermediate_size=96, vocab_size=1100)
DENSE = dict(SMALL, num_attention_heads=16, num_key_value_heads=8, head_dim=8)
MOE = dict(SMALL, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
           moe_intermediate_size=32, num_experts=8)


def small_config(tmp_path, name, sizes):
    with open(os.path.join(ROOT, "data", "models", name + ".json")) as f:
        c = json.load(f)
    c.update(sizes)
    path = os.path.join(str(tmp_path), name + "-small.json")
    with open(path, "w") as f:
        json.dump(c, f)
    return c, path


# --- HF tensors -------------------------------------------------------------------------------

def hf_state_dict(c, layers):
    """Distinct random bf16 values for every HF tensor, experts one tensor each."""
    H, I, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, kv, V = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, H)
    for n in range(layers):
        p = "model.layers.%d." % n
        shapes.update({p + "input_layernorm.weight": (H,),
                       p + "post_attention_layernorm.weight": (H,),
                       p + "self_attn.q_proj.weight": (nh * hd, H),
                       p + "self_attn.k_proj.weight": (kv * hd, H),
                       p + "self_attn.v_proj.weight": (kv * hd, H),
                       p + "self_attn.o_proj.weight": (H, nh * hd),
                       p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
        if "num_experts" in c:
            I = c["moe_intermediate_size"]
            shapes[p + "mlp.gate.weight"] = (c["num_experts"], H)
            for e in range(c["num_experts"]):
                q = p + "mlp.experts.%d." % e
                shapes.update({q + "gate_proj.weight": (I, H), q + "up_proj.weight": (I, H),
                               q + "down_proj.weight": (H, I)})
        else:
            shapes.update({p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                           p + "mlp.down_proj.weight": (H, I)})
    out = {}
    for name, shape in shapes.items():
        g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        out[name] = torch.randn(shape, generator=g).to(torch.bfloat16)
    return out


def chunk(n, parts, i):
    assert n % parts == 0
    return slice(i * (n // parts), (i + 1) * (n // parts))


def roundup(n, m):
    return -(-n // m) * m


def padded(x, vpad, parts, i, fill_last):
    """Rows chunk i of ``x`` padded to vpad rows: zero rows, or copies of the last."""
    pad = x[-1:].expand(vpad - x.shape[0], -1) if fill_last else \
        torch.zeros((vpad - x.shape[0], x.shape[1]), dtype=x.dtype)
    return torch.cat([x, pad])[chunk(vpad, parts, i)]


def spec(text):
    return {k: v for k, v in (kv.split("=") for kv in text.split(","))}


# --- the oracles ---------------------------------------------------------------------------

def megatron(c, hf, train, rank, layers):
    s = spec(train)
    bridge = s.pop("convention", "megatron-lm") == "megatron-bridge"
    s = {k: int(v) for k, v in s.items()}
    tp, ep, dp, pp = s.get("tp", 1), s.get("ep", 1), s.get("dp", 1), s.get("pp", 1)
    etp = s.get("etp", tp)
    t, stage, per = rank % tp, rank // (tp * dp), layers // pp
    H, hd, kv = c["hidden_size"], c["head_dim"], c["num_key_value_heads"]
    hpg, V = c["num_attention_heads"] // kv, c["vocab_size"]
    vpad = V if bridge else roundup(V, 128 * tp)
    out = {}
    if stage == 0:
        out["embedding.word_embeddings.weight"] = padded(hf["model.embed_tokens.weight"], vpad,
                                                         tp, t, True)
    for local in range(per):  # decoder.layers.N counted from 0 on each stage
        h, m = "model.layers.%d." % (stage * per + local), "decoder.layers.%d." % local
        q = hf[h + "self_attn.q_proj.weight"].reshape(kv, hpg * hd, H)
        k = hf[h + "self_attn.k_proj.weight"].reshape(kv, hd, H)
        v = hf[h + "self_attn.v_proj.weight"].reshape(kv, hd, H)
        qkv = torch.cat([q, k, v], dim=1).reshape(-1, H)
        out.update({
            m + "self_attention.linear_qkv.layer_norm_weight": hf[h + "input_layernorm.weight"],
            m + "self_attention.linear_qkv.weight": qkv[chunk(qkv.shape[0], tp, t)],
            m + "self_attention.q_layernorm.weight": hf[h + "self_attn.q_norm.weight"],
            m + "self_attention.k_layernorm.weight": hf[h + "self_attn.k_norm.weight"],
            m + "self_attention.linear_proj.weight":
                hf[h + "self_attn.o_proj.weight"][:, chunk(kv * hpg * hd, tp, t)]})
        if "num_experts" in c:
            E, I = c["num_experts"], c["moe_intermediate_size"]
            et, er = rank % etp, (rank // etp) % ep
            out[m + "pre_mlp_layernorm.weight"] = hf[h + "post_attention_layernorm.weight"]
            out[m + "mlp.router.weight"] = hf[h + "mlp.gate.weight"]
            for local, e in enumerate(range(er * E // ep, (er + 1) * E // ep)):
                x = h + "mlp.experts.%d." % e
                rows = chunk(I, etp, et)
                out[m + "mlp.experts.linear_fc1.weight%d" % local] = torch.cat(
                    [hf[x + "gate_proj.weight"][rows], hf[x + "up_proj.weight"][rows]])
                out[m + "mlp.experts.linear_fc2.weight%d" % local] = \
                    hf[x + "down_proj.weight"][:, rows]
        else:
            rows = chunk(c["intermediate_size"], tp, t)
            out.update({
                m + "mlp.linear_fc1.layer_norm_weight": hf[h + "post_attention_layernorm.weight"],
                m + "mlp.linear_fc1.weight": torch.cat([hf[h + "mlp.gate_proj.weight"][rows],
                                                        hf[h + "mlp.up_proj.weight"][rows]]),
                m + "mlp.linear_fc2.weight": hf[h + "mlp.down_proj.weight"][:, rows]})
    if stage == pp - 1:
        out["decoder.final_layernorm.weight"] = hf["model.norm.weight"]
        if not c["tie_word_embeddings"] or pp > 1:  # tied: the last stage's own copy
            head = "model.embed_tokens.weight" if c["tie_word_embeddings"] else "lm_head.weight"
            out["output_layer.weight"] = padded(hf[head], vpad, tp, t, True)
    return out


def vllm(c, hf, infer, i, layers):
    s = spec(infer)
    tp, dp, ep = int(s.get("tp", 1)), int(s.get("dp", 1)), s.get("ep") == "on"
    t, d = i % tp, (i // tp) % dp
    hd, kv, nh = c["head_dim"], c["num_key_value_heads"], c["num_attention_heads"]
    vpad = roundup(c["vocab_size"], 64)
    out = {"model.embed_tokens.weight": padded(hf["model.embed_tokens.weight"], vpad, tp, t,
                                               False)}
    for n in range(layers):
        p = "model.layers.%d." % n
        kvrows = chunk(kv * hd, tp, t) if tp <= kv else \
            slice(t // (tp // kv) * hd, (t // (tp // kv) + 1) * hd)
        out.update({
            p + "input_layernorm.weight": hf[p + "input_layernorm.weight"],
            p + "post_attention_layernorm.weight": hf[p + "post_attention_layernorm.weight"],
            p + "self_attn.q_norm.weight": hf[p + "self_attn.q_norm.weight"],
            p + "self_attn.k_norm.weight": hf[p + "self_attn.k_norm.weight"],
            p + "self_attn.qkv_proj.weight": torch.cat([
                hf[p + "self_attn.q_proj.weight"][chunk(nh * hd, tp, t)],
                hf[p + "self_attn.k_proj.weight"][kvrows],
                hf[p + "self_attn.v_proj.weight"][kvrows]]),
            p + "self_attn.o_proj.weight": hf[p + "self_attn.o_proj.weight"][:, chunk(nh * hd,
                                                                                      tp, t)]})
        if "num_experts" in c:
            E, I, f, n_all = c["num_experts"], c["moe_intermediate_size"], d * tp + t, tp * dp
            if ep:
                base, extra = divmod(E, n_all)
                first = f * base + min(f, extra)
                experts, rows = range(first, first + base + (f < extra)), slice(0, I)
            else:
                experts, rows = range(E), chunk(I, n_all, f)
            x = p + "mlp.experts.%d."
            out[p + "mlp.gate.weight"] = hf[p + "mlp.gate.weight"]
            out[p + "mlp.experts.routed_experts.w13_weight"] = torch.stack([torch.cat(
                [hf[x % e + "gate_proj.weight"][rows], hf[x % e + "up_proj.weight"][rows]])
                for e in experts])
            out[p + "mlp.experts.routed_experts.w2_weight"] = torch.stack(
                [hf[x % e + "down_proj.weight"][:, rows] for e in experts])
        else:
            rows = chunk(c["intermediate_size"], tp, t)
            out[p + "mlp.gate_up_proj.weight"] = torch.cat([hf[p + "mlp.gate_proj.weight"][rows],
                                                            hf[p + "mlp.up_proj.weight"][rows]])
            out[p + "mlp.down_proj.weight"] = hf[p + "mlp.down_proj.weight"][:, rows]
    out["model.norm.weight"] = hf["model.norm.weight"]
    if not c["tie_word_embeddings"]:
        out["lm_head.weight"] = padded(hf["lm_head.weight"], vpad, tp, t, False)
    return out


def assert_same(got, want, what):
    assert sorted(got) == sorted(want), what
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape), (what, name)
        bad = int((g.contiguous().view(torch.int16) != w.contiguous().view(torch.int16)).sum())
        assert bad == 0, "%s: %s: %d of %d elements wrong" % (what, name, bad, w.numel())


# --- the cases -----------------------------------------------------------------------------

CASES = [  # (shipped config, sizes, train, infer); 2 layers
    ("qwen3-0.6b", DENSE, "tp=2", "tp=2"),
    ("qwen3-0.6b", DENSE, "tp=2,pp=2", "tp=2"),                    # tied: the last stage's copy
    ("qwen3-0.6b", DENSE, "tp=2,convention=megatron-bridge", "tp=1,dp=2"),
    ("qwen3-30b-a3b", MOE, "tp=2", "tp=2"),
    ("qwen3-30b-a3b", MOE, "tp=2,ep=2,etp=1", "tp=4"),             # vLLM tp > kv heads
    ("qwen3-30b-a3b", MOE, "tp=2,dp=2,ep=2", "tp=2,dp=2,ep=on"),   # EP on both sides
    ("qwen3-30b-a3b", MOE, "tp=2", "tp=2,dp=2"),                   # expert TP over tp*dp
]


@pytest.mark.parametrize("name,sizes,train,infer", CASES)
def test_every_rank_matches_the_frameworks(tmp_path, name, sizes, train, infer):
    c, path = small_config(tmp_path, name, sizes)
    hf = hf_state_dict(c, 2)
    refit = reshard.Model(path, layers=2).refit(train, infer)
    for rank in range(refit.world):
        side, i = refit.role(rank)
        got = reshard.shards_from_hf(refit, side, rank, hf)
        want = megatron(c, hf, train, i, 2) if side == "train" else vllm(c, hf, infer, i, 2)
        assert_same(got, want, "%s %s rank %d" % (name, side, rank))


def stacked(hf, name):
    """The catalogue's form of an HF tensor: experts stacked on a new dim 0."""
    if name in hf:
        return hf[name]
    head, tail = name.split(".experts.")
    n = sum(1 for k in hf if k.startswith(head + ".experts.") and k.endswith("." + tail))
    return torch.stack([hf["%s.experts.%d.%s" % (head, e, tail)] for e in range(n)])


@pytest.mark.parametrize("name,sizes,train,infer", [CASES[1], CASES[4], CASES[5]])
def test_shards_to_hf_and_back(tmp_path, name, sizes, train, infer):
    """Every rank's slices equal the HF tensors there; the slices of one side's ranks
    cover every HF tensor, and the shards made from them equal the first ones."""
    c, path = small_config(tmp_path, name, sizes)
    hf = hf_state_dict(c, 2)
    refit = reshard.Model(path, layers=2).refit(train, infer)
    for side, ranks in (("train", range(refit.train_world)),
                        ("infer", range(refit.infer_offset, refit.world))):
        shards = {r: reshard.shards_from_hf(refit, side, r, hf) for r in ranks}
        rebuilt = {t.name: torch.full(t.shape, float("nan"), dtype=torch.bfloat16)
                   for t in refit.tensors}
        for r in ranks:
            for tname, slices in reshard.hf_from_shards(refit, side, r, shards[r]).items():
                full = stacked(hf, tname)
                for off, ext, arr in slices:
                    box = tuple(slice(o, o + e) for o, e in zip(off, ext))
                    assert arr.dtype == torch.bfloat16 and tuple(arr.shape) == tuple(ext)
                    assert torch.equal(arr.view(torch.int16), full[box].view(torch.int16)), \
                        (side, r, tname, off, ext)
                    rebuilt[tname][box] = arr
        for tname, t in rebuilt.items():
            assert torch.equal(t.view(torch.int16), stacked(hf, tname).view(torch.int16)), tname
        for r in ranks:
            assert_same(reshard.shards_from_hf(refit, side, r, rebuilt), shards[r],
                        "%s rank %d again" % (side, r))


def write_safetensors(path, tensors):
    """The format by its specification: 8-byte little-endian header length, the JSON
    header (dtype, shape, data_offsets per tensor), then the raw bytes."""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16 \
            else t.contiguous().view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": {torch.bfloat16: "BF16", torch.float32: "F32"}[t.dtype],
                        "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_safetensors_files_read_lazily_give_the_same_shards(tmp_path):
    c, path = small_config(tmp_path, "qwen3-30b-a3b", MOE)
    hf = hf_state_dict(c, 1)
    names = sorted(hf)
    d = tmp_path / "ckpt"
    d.mkdir()
    write_safetensors(str(d / "model-00001-of-00002.safetensors"),
                      {n: hf[n] for n in names[::2]})
    write_safetensors(str(d / "model-00002-of-00002.safetensors"),
                      {n: hf[n] for n in names[1::2]})
    files = reshard.open_safetensors(str(d))
    assert sorted(files) == names and len(files) == len(names)
    for n in names:
        assert files[n].dtype == torch.bfloat16
        assert torch.equal(files[n].view(torch.int16), hf[n].view(torch.int16)), n
    bits = reshard.open_safetensors(str(d), library="numpy")["model.norm.weight"]
    assert bits.dtype == np.uint16
    assert np.array_equal(bits, hf["model.norm.weight"].view(torch.int16).numpy().view(np.uint16))
    refit = reshard.Model(path, layers=1).refit("tp=2,dp=2,ep=2", "tp=2,dp=2,ep=on")
    for rank in (1, 5):
        side, _ = refit.role(rank)
        assert_same(reshard.shards_from_hf(refit, side, rank, files),
                    reshard.shards_from_hf(refit, side, rank, hf), "safetensors rank %d" % rank)


def test_numpy_in_and_out(tmp_path):
    """numpy arrays in (bf16 as uint16 bits), numpy arrays out, the same bits."""
    c, path = small_config(tmp_path, "qwen3-0.6b", DENSE)
    hf = hf_state_dict(c, 1)
    as_np = {n: t.view(torch.int16).numpy().view(np.uint16) for n, t in hf.items()}
    refit = reshard.Model(path, layers=1).refit("tp=2", "tp=2")
    want = reshard.shards_from_hf(refit, "infer", 3, hf)
    got = reshard.shards_from_hf(refit, "infer", 3, as_np, library="numpy")
    assert sorted(got) == sorted(want)
    for n, a in got.items():
        assert a.dtype == np.uint16
        assert np.array_equal(a, want[n].view(torch.int16).numpy().view(np.uint16)), n
    back = reshard.hf_from_shards(refit, "infer", 3, got)
    assert isinstance(back["model.norm.weight"][0].array, np.ndarray)


def test_bad_hf_tensors_are_named(tmp_path):
    c, path = small_config(tmp_path, "qwen3-30b-a3b", MOE)
    hf = hf_state_dict(c, 1)
    refit = reshard.Model(path, layers=1).refit("tp=2", "tp=2")
    missing = dict(hf)
    del missing["model.layers.0.self_attn.k_proj.weight"]
    with pytest.raises(reshard.ReshardError, match=r"'model\.layers\.0\.self_attn\.k_proj\."
                       r"weight' is missing") as e:
        reshard.shards_from_hf(refit, "train", 0, missing)
    assert e.value.status == reshard.Status.INVALID_ARG
    no_expert = dict(hf)
    del no_expert["model.layers.0.mlp.experts.5.up_proj.weight"]
    with pytest.raises(reshard.ReshardError, match=r"experts\.up_proj\.weight' is missing .*"
                       r"'model\.layers\.0\.mlp\.experts\.5\.up_proj\.weight'"):
        reshard.shards_from_hf(refit, "infer", 2, no_expert)
    wrong = dict(hf, **{"model.norm.weight": hf["model.norm.weight"][:10]})
    with pytest.raises(reshard.ReshardError, match=r"'model\.norm\.weight' has shape \[10\], "
                       r"reshard expects \[64\]") as e:
        reshard.shards_from_hf(refit, "train", 1, wrong)
    assert e.value.status == reshard.Status.SHAPE
    router = "model.layers.0.mlp.gate.weight"
    fp32 = dict(hf, **{router: hf[router].float()})
    with pytest.raises(reshard.ReshardError, match=r"'model\.layers\.0\.mlp\.gate\.weight' has "
                       r"dtype float32, reshard expects bf16") as e:
        reshard.shards_from_hf(refit, "infer", 3, fp32)
    assert e.value.status == reshard.Status.DTYPE
    shards = reshard.shards_from_hf(refit, "infer", 3, hf)
    del shards["lm_head.weight"]
    with pytest.raises(reshard.ReshardError, match=r"infer rank 3: parameter 'lm_head\.weight'"):
        reshard.hf_from_shards(refit, "infer", 3, shards)


def test_a_scoped_refit_refuses_other_ranks(tmp_path):
    c, path = small_config(tmp_path, "qwen3-0.6b", DENSE)
    refit = reshard.Model(path, layers=1).refit("tp=2", "tp=2", rank=1)
    with pytest.raises(reshard.ReshardError, match="scoped to rank 1"):
        reshard.shards_from_hf(refit, "infer", 2, hf_state_dict(c, 1))
    got = reshard.shards_from_hf(refit, "train", 1, hf_state_dict(c, 1))
    assert_same(got, megatron(c, hf_state_dict(c, 1), "tp=2", 1, 1), "scoped rank 1")


def test_zero_filled_buffers_and_interleaved_rows(tmp_path):
    """gpt-oss without EP (FRAMEWORKS.md, December audit): vLLM loads w2_bias on the
    flattened rank 0 only and zeroes it on the others; w13 holds gate and up rows
    alternating (gate row i at 2i, up row i at 2i + 1) of the rank's intermediate
    slice. The catalogue's stacked tensors stand in for HF's fused gate_up_proj."""
    c, path = small_config(tmp_path, "gpt-oss-20b", dict(
        hidden_size=64, intermediate_size=32, num_local_experts=4, num_attention_heads=8,
        num_key_value_heads=2, head_dim=8, vocab_size=1100))
    refit = reshard.Model(path, layers=1).refit("tp=2", "tp=2")
    hf = {}
    for t in refit.tensors:
        g = torch.Generator().manual_seed(zlib.crc32(t.name.encode()))
        hf[t.name] = torch.randn(t.shape, generator=g).to(torch.bfloat16)
    p = "model.layers.0.mlp.experts."
    for t in range(2):
        got = reshard.shards_from_hf(refit, "infer", refit.infer_offset + t, hf)
        w2_bias = got["model.layers.0.mlp.experts.routed_experts.w2_bias"]
        want = hf[p + "down_proj.bias"] if t == 0 else torch.zeros_like(hf[p + "down_proj.bias"])
        assert torch.equal(w2_bias.view(torch.int16), want.view(torch.int16)), t
        rows = chunk(32, 2, t)
        w13 = torch.stack([hf[p + "gate_proj.weight"][:, rows], hf[p + "up_proj.weight"][:, rows]],
                          dim=2).reshape(4, 32, 64)
        assert torch.equal(got["model.layers.0.mlp.experts.routed_experts.w13_weight"]
                           .view(torch.int16), w13.view(torch.int16)), t


class Counting(dict):
    """A state dict that counts the reads of each name."""

    def __init__(self, *a):
        super().__init__(*a)
        self.reads = {}

    def __getitem__(self, name):
        x = super().__getitem__(name)
        self.reads[name] = self.reads.get(name, 0) + 1
        return x


def test_each_hf_tensor_is_read_once_and_only_the_experts_held(tmp_path):
    c, path = small_config(tmp_path, "qwen3-30b-a3b", MOE)
    refit = reshard.Model(path, layers=1).refit("tp=2,dp=2,ep=2", "tp=2,dp=2,ep=on")
    for rank, experts in ((0, range(4)), (3, range(4, 8)), (5, range(2, 4))):
        hf = Counting(hf_state_dict(c, 1))
        reshard.shards_from_hf(refit, refit.role(rank)[0], rank, hf)
        assert set(hf.reads.values()) == {1}, hf.reads
        read = {int(n.split(".")[5]) for n in hf.reads if ".experts." in n}
        assert read == set(experts), (rank, read)


def test_the_real_qwen3_0_6b_against_the_examples_conventions():
    """Full-size qwen3-0.6b (one layer) on two ranks, against the independent oracle
    of examples/python/conventions.py (padding rows aside: it fills them with one byte,
    so Megatron-Bridge's unpadded vocabulary and vLLM's, a multiple of 64, are used)."""
    import conventions

    class Cached(conventions.Weights):  # each tensor computed once
        full = {}

        def rows(self, name, a=0, b=None):
            if name not in self.full:
                self.full[name] = super().rows(name)
            return self.full[name][a:b]

    w = Cached(conventions.load_config("qwen3-0.6b", 1))
    train, infer = "tp=2,convention=megatron-bridge", "tp=2"
    refit = reshard.Model("qwen3-0.6b", layers=1).refit(train, infer)
    for rank in (1, 2):  # the last trainer, the first worker: both vocabulary ends
        side, i = refit.role(rank)
        want = conventions.megatron_state_dict(w, train, i) if side == "train" else \
            conventions.vllm_state_dict(w, infer, i, 0)
        assert_same(reshard.shards_from_hf(refit, side, rank, w), want, "%s %d" % (side, rank))


def test_slices_under_hf_expert_names(tmp_path):
    """split_experts: the slices of stacked experts under HF's per-expert names."""
    c, path = small_config(tmp_path, "qwen3-30b-a3b", MOE)
    hf = hf_state_dict(c, 1)
    refit = reshard.Model(path, layers=1).refit("tp=2,dp=2,ep=2", "tp=2")
    for rank, experts in ((2, range(4, 8)), (refit.infer_offset + 1, range(8))):
        side = refit.role(rank)[0]
        got = reshard.hf_from_shards(refit, side, rank,
                                     reshard.shards_from_hf(refit, side, rank, hf),
                                     split_experts=True)
        names = {n for n in got if ".experts." in n}
        assert names == {"model.layers.0.mlp.experts.%d.%s_proj.weight" % (e, w)
                         for e in experts for w in ("gate", "up", "down")}, (rank, names)
        for name, slices in got.items():
            for off, ext, arr in slices:
                box = tuple(slice(o, o + e) for o, e in zip(off, ext))
                assert torch.equal(arr.view(torch.int16), hf[name][box].view(torch.int16))
