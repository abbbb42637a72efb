"""What a Megatron-Core training rank and a vLLM inference rank hold of a dense HF
model (llama / qwen3 families), built in plain torch from the HF-named logical
tensors. Written from the frameworks' rules (DESIGN.md section 4 and the framework
sources named there), independently of the reshard library, so a refit can be
checked against it element by element.

Megatron (train spec tp, pp, dp, cp): rank = tp_rank + tp*(cp_rank + cp*(dp_rank +
dp*pp_rank)); stage p holds decoder layers [p*L/pp, (p+1)*L/pp), named
decoder.layers.N with N counted from 0 on the stage; the embedding on the first
stage, final norm and output layer on the last (a copy of the tied embedding there
when pp > 1); fused linear_qkv rows grouped by query group [q heads; k; v], split
evenly over tp; linear_fc1 = [gate; up] of the tp rank; linear_proj and
linear_fc2 split on dim 1; the input norm fused as linear_qkv.layer_norm_weight and
the pre-MLP norm as linear_fc1.layer_norm_weight; vocabulary padded to a multiple of
128*tp (Megatron-LM), or not padded (convention=megatron-bridge: Megatron-Bridge keeps
the HF config's vocabulary).

vLLM (infer spec tp, dp, engines): DP replicas and engines identical for a dense model; qkv_proj = [q; k; v] rows of the tp
rank (with tp > kv heads, rank r holds kv head r // (tp / kv)); gate_up_proj =
[gate; up]; o_proj and down_proj split on dim 1; vocabulary padded to a multiple
of 64; with tied embeddings lm_head is embed_tokens (one parameter).

Qwen3-MoE (every layer MoE: decoder_sparse_step 1, no mlp_only_layers), from
FRAMEWORKS.md: Megatron keeps the pre-MLP norm as pre_mlp_layernorm.weight, the
router as mlp.router.weight [E, H] (whole), and, on expert-grid rank (etp fastest,
then ep, over the ranks of a stage; etp defaults to tp), experts [er*E/ep, ...) as
mlp.experts.linear_fc1.weightK ([gate; up] rows of the etp rank) and
linear_fc2.weightK (columns of it). vLLM keeps the router as mlp.gate.weight
(whole) and, with ep=on, EP rank r of an engine (r = rank % (tp*dp)) physical expert
slots [r*P/(tp*dp), ...) as rows of mlp.experts.routed_experts.w13_weight ([gate;
up]) and w2_weight, slot p holding logical expert eplb_map[layer][p] (P = E +
redundant; without a map, vLLM's initial one: p, then the redundant slot E+i holds
i % E; without redundant slots and map, whole experts contiguous, remainder to the
first ranks).
"""

import json
import os
import zlib

import numpy as np
import torch


def load_config(name_or_path, layers=0):
    """The fields of a HF config.json that fix parameter shapes: a path, or a shipped
    model name looked up in $RESHARD_DATA_DIR/models or the source tree's data/models."""
    path = name_or_path
    if not os.path.exists(path):
        here = os.path.dirname(os.path.abspath(__file__))
        dirs = [os.environ.get("RESHARD_DATA_DIR", ""),
                os.path.join(here, "..", "..", "data"),
                os.path.join(here, "..", "..", "share", "reshard")]
        for d in dirs:
            p = os.path.join(d, "models", name_or_path + ".json")
            if d and os.path.exists(p):
                path = p
                break
    with open(path) as f:
        c = json.load(f)
    if c.get("model_type") not in ("llama", "mistral", "qwen3", "qwen3_moe"):
        raise ValueError("conventions: llama/mistral/qwen3/qwen3_moe only, not %r"
                         % c.get("model_type"))
    moe = c["model_type"] == "qwen3_moe"
    if moe and (c.get("decoder_sparse_step", 1) != 1 or c.get("mlp_only_layers")):
        raise ValueError("conventions: qwen3_moe with every layer MoE only")
    H, nh = c["hidden_size"], c["num_attention_heads"]
    return {
        "E": c.get("num_experts", 0) if moe else 0, "Im": c.get("moe_intermediate_size", 0),
        "H": H, "I": c["intermediate_size"], "nh": nh,
        "kv": c.get("num_key_value_heads", nh), "hd": c.get("head_dim") or H // nh,
        "V": c["vocab_size"], "L": layers or c["num_hidden_layers"],
        "tied": bool(c.get("tie_word_embeddings", False)),
        "qk_norm": c["model_type"] in ("qwen3", "qwen3_moe"),
    }


def hf_shapes(cfg):
    """HF parameter name -> shape, in checkpoint order."""
    H, I, hd = cfg["H"], cfg["I"], cfg["hd"]
    out = {"model.embed_tokens.weight": (cfg["V"], H)}
    for n in range(cfg["L"]):
        p = "model.layers.%d." % n
        out[p + "input_layernorm.weight"] = (H,)
        out[p + "self_attn.q_proj.weight"] = (cfg["nh"] * hd, H)
        out[p + "self_attn.k_proj.weight"] = (cfg["kv"] * hd, H)
        out[p + "self_attn.v_proj.weight"] = (cfg["kv"] * hd, H)
        out[p + "self_attn.o_proj.weight"] = (H, cfg["nh"] * hd)
        if cfg["qk_norm"]:
            out[p + "self_attn.q_norm.weight"] = (hd,)
            out[p + "self_attn.k_norm.weight"] = (hd,)
        out[p + "post_attention_layernorm.weight"] = (H,)
        if cfg["E"]:
            out[p + "mlp.gate.weight"] = (cfg["E"], H)
            for e in range(cfg["E"]):
                x = p + "mlp.experts.%d." % e
                out[x + "gate_proj.weight"] = (cfg["Im"], H)
                out[x + "up_proj.weight"] = (cfg["Im"], H)
                out[x + "down_proj.weight"] = (H, cfg["Im"])
            continue
        out[p + "mlp.gate_proj.weight"] = (I, H)
        out[p + "mlp.up_proj.weight"] = (I, H)
        out[p + "mlp.down_proj.weight"] = (H, I)
    out["model.norm.weight"] = (H,)
    if not cfg["tied"]:
        out["lm_head.weight"] = (cfg["V"], H)
    return out


def _mix16(name, what, idx):
    """16 well-mixed bits of (name, what, index) for each index of ``idx``."""
    h = idx.astype(np.uint32) * np.uint32(0x9E3779B1) + np.uint32(zlib.crc32(
        (name + what).encode()))
    h ^= h >> np.uint32(15)
    h *= np.uint32(0x85EBCA77)
    return (h >> np.uint32(16)).astype(np.uint16)


class Weights:
    """Deterministic bf16 values of every HF tensor: element (r, c) of tensor T (rows
    r, the other dims flattened to c) has the bits hash(T, row r) ^ hash(T, col c),
    so a misplaced row, column or block shows. rows(name, a, b) gives rows [a, b)
    without building the rest (the embedding is large)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.shapes = hf_shapes(cfg)

    def rows(self, name, a=0, b=None):
        shape = self.shapes[name]
        cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        b = shape[0] if b is None else b
        r = _mix16(name, "/row", np.arange(a, b))
        c = _mix16(name, "/col", np.arange(cols))
        bits = np.bitwise_xor(r[:, None], c[None, :]).view(np.int16)
        return torch.from_numpy(bits).view(torch.bfloat16).reshape((b - a,) + tuple(shape[1:]))

    def __getitem__(self, name):
        return self.rows(name)


def chunk(n, parts, i):
    """Rows [i*n/parts, (i+1)*n/parts) of an evenly split extent."""
    assert n % parts == 0, "%d does not split into %d" % (n, parts)
    return i * (n // parts), (i + 1) * (n // parts)


def padded_rows(w, name, vpad, parts, i, fill):
    """Rows chunk i of ``parts`` of the vocabulary padded to vpad; padding rows hold
    the byte ``fill``."""
    a, b = chunk(vpad, parts, i)
    V = w.shapes[name][0]
    out = torch.empty((b - a, w.shapes[name][1]), dtype=torch.bfloat16)
    out.view(torch.uint8).fill_(fill)
    if a < V:
        out[:min(b, V) - a] = w.rows(name, a, min(b, V))
    return out


def roundup(n, m):
    return -(-n // m) * m


def parse_spec(text):
    spec = {}
    for item in text.split(","):
        k, v = item.split("=")
        spec[k] = v
    return spec


# The pieces of a dense layer both frameworks cut alike (norms whole, o_proj and
# down_proj split on dim 1, [gate; up] rows of the tp rank), by framework name.
MEGATRON_NAMES = {
    "input_layernorm": "self_attention.linear_qkv.layer_norm_weight",
    "q_norm": "self_attention.q_layernorm.weight", "k_norm": "self_attention.k_layernorm.weight",
    "o_proj": "self_attention.linear_proj.weight",
    "post_attention_layernorm": "mlp.linear_fc1.layer_norm_weight",
    "gate_up": "mlp.linear_fc1.weight", "down": "mlp.linear_fc2.weight",
}
VLLM_NAMES = {
    "input_layernorm": "input_layernorm.weight", "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight", "o_proj": "self_attn.o_proj.weight",
    "post_attention_layernorm": "post_attention_layernorm.weight",
    "gate_up": "mlp.gate_up_proj.weight", "down": "mlp.down_proj.weight",
}


def dense_pieces(w, hf, tp, t):
    """Of HF layer prefix ``hf``, what tp rank ``t`` of ``tp`` holds besides q/k/v."""
    cfg = w.cfg
    a, b = chunk(cfg["nh"] * cfg["hd"], tp, t)
    i0, i1 = chunk(cfg["I"], tp, t)
    out = {
        "input_layernorm": w[hf + "input_layernorm.weight"],
        "o_proj": w[hf + "self_attn.o_proj.weight"][:, a:b],
        "post_attention_layernorm": w[hf + "post_attention_layernorm.weight"],
    }
    if not cfg["E"]:
        out["gate_up"] = torch.cat([w[hf + "mlp.gate_proj.weight"][i0:i1],
                                    w[hf + "mlp.up_proj.weight"][i0:i1]])
        out["down"] = w[hf + "mlp.down_proj.weight"][:, i0:i1]
    if cfg["qk_norm"]:
        out["q_norm"] = w[hf + "self_attn.q_norm.weight"]
        out["k_norm"] = w[hf + "self_attn.k_norm.weight"]
    return out


def expert(w, hf, e, parts=1, i=0):
    """HF expert ``e`` of layer prefix ``hf``: ([gate; up] rows, down columns) of the
    intermediate chunk i of ``parts``."""
    x = hf + "mlp.experts.%d." % e
    a, b = chunk(w.cfg["Im"], parts, i)
    return (torch.cat([w[x + "gate_proj.weight"][a:b], w[x + "up_proj.weight"][a:b]]),
            w[x + "down_proj.weight"][:, a:b])


def megatron_experts(w, hf, p, s, rank):
    """Megatron's MoE pieces of HF layer prefix ``hf`` on ``rank`` (names under ``p``)."""
    tp, cp, dp = s.get("tp", 1), s.get("cp", 1), s.get("dp", 1)
    ep, etp = s.get("ep", 1), s.get("etp", tp)
    idx = rank % (tp * cp * dp)  # the expert grid of the stage: etp fastest, then ep
    et, er = idx % etp, (idx // etp) % ep
    E = w.cfg["E"]
    out = {p + "pre_mlp_layernorm.weight": w[hf + "post_attention_layernorm.weight"],
           p + "mlp.router.weight": w[hf + "mlp.gate.weight"]}
    a, b = chunk(E, ep, er)
    for k, e in enumerate(range(a, b)):
        fc1, fc2 = expert(w, hf, e, etp, et)
        out[p + "mlp.experts.linear_fc1.weight%d" % k] = fc1
        out[p + "mlp.experts.linear_fc2.weight%d" % k] = fc2
    return out


def vllm_experts(w, hf, s, rank, eplb_map=None, layer=0):
    """vLLM's MoE pieces of HF layer prefix ``hf`` (the ``layer``-th MoE layer) on
    inference ``rank``; ``eplb_map``: physical_to_logical rows, one per MoE layer."""
    E = w.cfg["E"]
    eps = int(s.get("tp", 1)) * int(s.get("dp", 1))
    r = rank % eps
    red = int(s.get("redundant", 0))
    if s.get("ep") != "on":
        raise ValueError("conventions: vLLM MoE with ep=on only")
    if red or eplb_map is not None:  # EPLB: P/eps slots each, from the map
        P = E + red
        row = eplb_map[layer] if eplb_map is not None else \
            list(range(E)) + [i % E for i in range(red)]
        slots = row[r * (P // eps):(r + 1) * (P // eps)]
    else:  # whole experts, contiguous, remainder to the first ranks
        base, rem = E // eps, E % eps
        e0 = r * base + min(r, rem)
        slots = list(range(e0, e0 + base + (r < rem)))
    pieces = [expert(w, hf, e) for e in slots]
    pre = hf + "mlp.experts.routed_experts."
    return {hf + "mlp.gate.weight": w[hf + "mlp.gate.weight"],
            pre + "w13_weight": torch.stack([a for a, _ in pieces]),
            pre + "w2_weight": torch.stack([b for _, b in pieces])}


def megatron_state_dict(w, train, rank, pad_fill=0):
    """Megatron-Core named_parameters() of training rank ``rank`` for spec ``train``
    ("tp=2,pp=2,dp=2"), as bf16 torch tensors."""
    s = parse_spec(train)
    convention = s.pop("convention", "megatron-lm")
    cfg, s = w.cfg, {k: int(v) for k, v in s.items()}
    tp, pp, dp, cp = s.get("tp", 1), s.get("pp", 1), s.get("dp", 1), s.get("cp", 1)
    t, stage = rank % tp, rank // (tp * cp * dp)
    if cfg["L"] % pp:
        raise ValueError("Megatron needs pp=%d to divide the %d layers" % (pp, cfg["L"]))
    per = cfg["L"] // pp
    H, hd, kv, hpg = cfg["H"], cfg["hd"], cfg["kv"], cfg["nh"] // cfg["kv"]
    # Megatron-LM pads the vocabulary to 128*tp; Megatron-Bridge keeps the HF size
    vpad = cfg["V"] if convention == "megatron-bridge" else roundup(cfg["V"], 128 * tp)
    out = {}
    if stage == 0:
        out["embedding.word_embeddings.weight"] = padded_rows(w, "model.embed_tokens.weight",
                                                              vpad, tp, t, pad_fill)
    for local in range(per):
        hf, p = "model.layers.%d." % (stage * per + local), "decoder.layers.%d." % local
        for piece, x in dense_pieces(w, hf, tp, t).items():
            out[p + MEGATRON_NAMES[piece]] = x
        if cfg["E"]:
            del out[p + MEGATRON_NAMES["post_attention_layernorm"]]
            out.update(megatron_experts(w, hf, p, s, rank))
        q = w[hf + "self_attn.q_proj.weight"].reshape(kv, hpg * hd, H)
        k = w[hf + "self_attn.k_proj.weight"].reshape(kv, hd, H)
        v = w[hf + "self_attn.v_proj.weight"].reshape(kv, hd, H)
        qkv = torch.cat([q, k, v], dim=1).reshape(kv * (hpg + 2) * hd, H)
        a, b = chunk(qkv.shape[0], tp, t)
        out[p + "self_attention.linear_qkv.weight"] = qkv[a:b]
    if stage == pp - 1:
        out["decoder.final_layernorm.weight"] = w["model.norm.weight"]
        if not cfg["tied"] or pp > 1:
            src = "model.embed_tokens.weight" if cfg["tied"] else "lm_head.weight"
            out["output_layer.weight"] = padded_rows(w, src, vpad, tp, t, pad_fill)
    return {n: x.contiguous() for n, x in out.items()}


def vllm_state_dict(w, infer, rank, pad_fill, eplb_map=None):
    """vLLM named_parameters() of inference rank ``rank`` (0-based on the inference
    side) for spec ``infer`` ("tp=2,dp=2"), bf16; padding rows hold byte pad_fill;
    ``eplb_map``: the rank's engine's EPLB map (MoE, vllm_experts)."""
    cfg, s = w.cfg, parse_spec(infer)
    tp = int(s.get("tp", 1))
    t = rank % tp
    hd, kv, nh = cfg["hd"], cfg["kv"], cfg["nh"]
    vpad = roundup(cfg["V"], 64)
    out = {"model.embed_tokens.weight": padded_rows(w, "model.embed_tokens.weight", vpad, tp, t,
                                                    pad_fill)}
    for n in range(cfg["L"]):
        p = "model.layers.%d." % n
        for piece, x in dense_pieces(w, p, tp, t).items():
            out[p + VLLM_NAMES[piece]] = x
        if cfg["E"]:
            out.update(vllm_experts(w, p, s, rank, eplb_map, n))
        a, b = chunk(nh * hd, tp, t)
        q = w[p + "self_attn.q_proj.weight"][a:b]
        if tp <= kv:
            a, b = chunk(kv * hd, tp, t)
        else:
            head = t // (tp // kv)
            a, b = head * hd, (head + 1) * hd
        k = w[p + "self_attn.k_proj.weight"][a:b]
        v = w[p + "self_attn.v_proj.weight"][a:b]
        out[p + "self_attn.qkv_proj.weight"] = torch.cat([q, k, v])
    out["model.norm.weight"] = w["model.norm.weight"]
    if not cfg["tied"]:
        out["lm_head.weight"] = padded_rows(w, "lm_head.weight", vpad, tp, t, pad_fill)
    return {n: x.contiguous() for n, x in out.items()}


def mismatches(got, want):
    """Elements of ``got`` whose bits differ from ``want`` (same shape and dtype)."""
    g = got.reshape(-1).view(torch.int16)
    e = want.reshape(-1).view(torch.int16)
    return 0 if torch.equal(g, e) else int((g != e).sum())
