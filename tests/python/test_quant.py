"""BF16 -> FP8 refits through the Python package: torch bf16 training shards into e4m3
bytes (torch.uint8 tensors) and scale tensors on the inference ranks, every byte checked
against a reference quantizer written here in numpy from the rule (reshard.h, DeepGEMM
per_block_cast_to_fp8, OCP FP8 E4M3FN and MX v1.0), not from the library:

  amax  = max |x| over a block's finite values, at least 1e-4;
  scale = amax / 448 in fp32, or for pow2 (UE8M0) and MXFP8 the next power of two;
  q     = the e4m3 value nearest to x * (1 / scale) (fp32), ties to the even code,
          |.| >= 448 and Inf saturate to 448, NaN stays NaN (0x7F, 0xFF negative);
  MXFP8 scales are e8m0 bytes log2(scale) + 127.
Sender-side quantization (a training rank holds whole blocks) and receiver-side (it does
not; the inference rank does) must give the same bytes."""

import os

import numpy as np
import pytest
import torch

import reshard
from reshard import Replicate, Shard
from dtensor_oracle import local_shard

needs_quant = pytest.mark.skipif(not reshard._lib.has("reshard_tensors_set_quant"),
                                 reason="this libreshard.so has no quantized destinations")

# --- the reference ---------------------------------------------------------------------

# Values of the non-negative e4m3 codes 0..0x7E (bias 7; subnormals m/8 * 2^-6).
_CODES = np.arange(0x7F)
_VALUES = np.where(_CODES >> 3 == 0, (_CODES & 7) / 8.0 * 2.0 ** -6,
                   (1 + (_CODES & 7) / 8.0) * 2.0 ** ((_CODES >> 3) - 7))


def e4m3(y):
    """e4m3 bytes of float32 array y (nearest code value, ties to the even code)."""
    a = np.abs(y.astype(np.float64))
    lo = np.clip(np.searchsorted(_VALUES, a, side="right") - 1, 0, 0x7E)
    hi = np.minimum(lo + 1, 0x7E)
    dl, dh = a - _VALUES[lo], _VALUES[hi] - a
    code = np.where((dh < dl) | ((dh == dl) & (lo % 2 == 1)), hi, lo)
    code = np.where(a >= 448.0, 0x7E, code)
    code = np.where(np.isnan(y), 0x7F, code)
    return (code | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


def block_scale(amax, pow2):
    amax = np.float32(max(amax, np.float32(1e-4)))
    s = np.float32(amax / np.float32(448.0))
    if pow2:
        m, e = np.frexp(s)  # s = m * 2^e, m in [0.5, 1)
        if m != 0.5:
            s = np.float32(np.ldexp(np.float32(1.0), e))
    return s


def bf16_values(bits):
    """float32 values of int16 bf16 bit patterns."""
    return (bits.astype(np.int32).astype(np.uint32) << 16).astype(np.uint32).view(np.float32)


@np.errstate(invalid="ignore", over="ignore")  # Inf * inv, NaN: the rule handles them
def quantize(bits, br, bc, mx, pow2):
    """Reference: bf16 bits [E?, R, C] -> (e4m3 bytes, scales) per the rule."""
    x = bf16_values(bits)
    lead = x.shape[:-2]
    R, C = x.shape[-2:]
    nbr, nbc = -(-R // br), -(-C // bc)
    q = np.zeros(x.shape, dtype=np.uint8)
    sc = np.zeros(lead + (nbr, nbc), dtype=np.uint8 if mx else np.float32)
    for e in np.ndindex(*lead):
        for i in range(nbr):
            for k in range(nbc):
                blk = x[e][i * br:(i + 1) * br, k * bc:(k + 1) * bc]
                fin = np.abs(blk[np.isfinite(blk)])
                s = block_scale(fin.max() if fin.size else np.float32(0), pow2 or mx)
                inv = np.float32(np.float32(1.0) / s)
                q[e][i * br:(i + 1) * br, k * bc:(k + 1) * bc] = e4m3(
                    (blk * inv).astype(np.float32))
                sc[e][i, k] = (np.frexp(s)[1] - 1 + 127) if mx else s
    return q, sc


def random_bits(shape, seed):
    """bf16 bits: blocks of varied magnitude, a zero row, a huge value, NaN and Inf."""
    g = np.random.default_rng(seed)
    exp = g.integers(100, 150, size=shape[:-1] + (1,))
    bits = (g.integers(0, 2, size=shape) << 15) | (exp << 7) | g.integers(0, 128, size=shape)
    bits = bits.astype(np.uint16)
    flat = bits.reshape(-1, shape[-1])
    flat[1, :] = 0                       # zeros
    flat[2, 3] = 0x7F7F                  # +3.39e38 among ordinary values
    flat[3, 5], flat[3, 6], flat[3, 7] = 0x7FC0, 0xFF80, 0x7F80  # NaN, -Inf, +Inf
    return bits.view(np.int16)


def test_reference_rule_spot_values():
    """The reference itself on hand-checked values: RNE ties, saturation, NaN, subnormals."""
    y = np.array([1.0, 1.0625, 1.1875, 448.0, 464.0, 1e9, -np.inf, np.nan, 2.0 ** -9,
                  2.0 ** -10, 3 * 2.0 ** -10, -0.0], dtype=np.float32)
    assert list(e4m3(y)) == [0x38, 0x38, 0x3A, 0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0x01, 0x00,
                             0x02, 0x80]
    assert block_scale(np.float32(448.0), False) == np.float32(1.0)
    assert block_scale(np.float32(0.0), True) == np.float32(2.0 ** -22)


# --- refits ------------------------------------------------------------------------------

TRAIN = [0, 1]
INFER = [2, 3]
WORLD = 4

# name: (shape, kind, pow2, train placements, infer placements of weight and scales)
CASES = {
    # sender side: each training rank holds 128 whole rows (every block whole)
    "layers.0.mlp.down_proj.weight": ((256, 300), "fp8_block", False, [Shard(0)],
                                      [Shard(0)]),
    # receiver side: training splits the columns at 150 (inside a 128-block); each
    # inference rank holds 128 whole rows
    "layers.0.mlp.up_proj.weight": ((256, 300), "fp8_block", True, [Shard(1)], [Shard(0)]),
    # ragged rows, replicated on the inference side
    "layers.0.self_attn.o_proj.weight": ((200, 136), "fp8_block", False, [Shard(0)],
                                         [Replicate()]),
    # MXFP8 expert stack [E, rows, cols]: experts split on both sides
    "layers.0.mlp.experts.w2_weight": ((4, 48, 96), "mxfp8", True, [Shard(1)], [Shard(0)]),
}


def scale_name(name):
    return name[:-len("weight")] + "weight_scale_inv" if name.endswith("weight") else name + "_scale"


def scale_shape(shape, kind):
    br, bc = (1, 32) if kind == "mxfp8" else (128, 128)
    return tuple(shape[:-2]) + (-(-shape[-2] // br), -(-shape[-1] // bc))


def quantized_case():
    """The catalogue, layouts, source bits and reference bytes of CASES."""
    tensors = reshard.Tensors()
    for name, (shape, kind, pow2, _, _) in CASES.items():
        tensors.add(name, shape, torch.bfloat16)
        tensors.add(scale_name(name), scale_shape(shape, kind),
                    torch.uint8 if kind == "mxfp8" else torch.float32)
        tensors.set_quant(name, kind, scale=scale_name(name), pow2_scale=pow2)
        info = tensors.quant(name)
        assert info.kind == reshard.to_quant(kind) and info.pow2_scale == pow2
        assert info.scale_tensor == tensors.find(scale_name(name))
    src = reshard.Layout.from_placements(tensors, {n: (TRAIN, c[3]) for n, c in CASES.items()})
    placed = {}
    for n, c in CASES.items():
        placed[n] = (INFER, c[4])
        placed[scale_name(n)] = (INFER, c[4])
    dst = reshard.Layout.from_placements(tensors, placed, quantized=True)
    full = {n: random_bits(c[0], i) for i, (n, c) in enumerate(CASES.items())}
    want = {}
    for n, (shape, kind, pow2, _, _) in CASES.items():
        mx = kind == "mxfp8"
        want[n], want[scale_name(n)] = quantize(full[n], 1 if mx else 128, 32 if mx else 128,
                                                mx, pow2)
    return tensors, src, dst, full, want


def check_quantized(got, want):
    """Every byte of every inference rank's e4m3 and scale arrays (got[rank][name])."""
    checked = 0
    for r in INFER:
        for n, c in CASES.items():
            for name in (n, scale_name(n)):
                w = local_shard(want[name], INFER, c[4], r)
                g = got[r][name]
                if name == n:
                    assert g.dtype == np.uint8, "e4m3 bytes in a uint8 array"
                assert g.shape == w.shape, (r, name)
                bad = np.flatnonzero(g.view(np.uint8).ravel() != w.view(np.uint8).ravel())
                assert bad.size == 0, "rank %d %s: %d bytes differ, first at byte %d" % (
                    r, name, bad.size, bad[0])
                checked += w.nbytes
    assert checked == sum(
        2 * (np.prod(c[0]) + np.prod(scale_shape(c[0], c[1])) * (1 if c[1] == "mxfp8" else 4))
        if isinstance(c[4][0], Replicate) else
        np.prod(c[0]) + np.prod(scale_shape(c[0], c[1])) * (1 if c[1] == "mxfp8" else 4)
        for c in CASES.values())


@needs_quant
def test_refit_bf16_to_fp8_every_byte():
    tensors, src, dst, full, want = quantized_case()
    got = {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1)
        s = {}
        for n, c in CASES.items():
            shard = local_shard(full[n], TRAIN, c[3], r)
            if shard is not None and shard.size:
                s[n] = torch.from_numpy(np.ascontiguousarray(shard)).view(torch.bfloat16)
        d = dst.new_buffers(r, fill=reshard.SENTINEL_BYTE)
        plan.execute(comm, src=s, dst=d)
        got[r] = {n: t.numpy().copy() for n, t in d.items()}

    reshard.run_threads(WORLD, rank_fn)
    check_quantized(got, want)


@needs_quant
def test_quant_marks_errors():
    tensors = reshard.Tensors()
    tensors.add("w", (256, 256), torch.bfloat16)
    tensors.add("w_scale", (2, 3), torch.float32)
    tensors.add("f", (256, 256), torch.float32)
    tensors.add("f_scale", (2, 2), torch.float32)
    with pytest.raises(reshard.ReshardError) as e:
        tensors.set_quant("w", "fp8", scale="w_scale")  # scale shape should be 2 x 2
    assert e.value.status == reshard.Status.SHAPE and "w_scale" in e.value.message
    with pytest.raises(reshard.ReshardError) as e:
        tensors.set_quant("f", "fp8", scale="f_scale")  # not bf16
    assert e.value.status == reshard.Status.DTYPE and "tensor f" in e.value.message
    with pytest.raises(ValueError):
        tensors.set_quant("w", "int4", scale="w_scale")
    assert tensors.quant("w") is None


@needs_quant
def test_scale_without_its_weight_blocks_refused():
    # the weight's columns split at 150 on two ranks (sender side) while each rank holds
    # every scale: the scale columns of the other rank's blocks would never be written
    tensors = reshard.Tensors()
    tensors.add("w", (256, 300), torch.bfloat16)
    tensors.add("w_scale", (2, 3), torch.float32)
    tensors.set_quant("w", "fp8", scale="w_scale")
    src = reshard.Layout.from_placements(tensors, {"w": ([0], [Replicate()])})
    dst = reshard.Layout.from_placements(
        tensors, {"w": ([1, 2], [Shard(1)]), "w_scale": ([1, 2], [Replicate()])}, quantized=True)
    with pytest.raises(reshard.ReshardError) as e:
        reshard.Plan(src, dst, rank=1, world=3)
    assert e.value.status == reshard.Status.UNCOVERED
    assert "w_scale" in e.value.message and "rank 1" in e.value.message


# --- a model refit: Megatron bf16 -> vLLM FP8 form ----------------------------------------

FP8_DENSE = {  # qwen3-shaped, 128-row heads: every vLLM tp=2 shard lies on 128x128 blocks
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1000, "tie_word_embeddings": False,
}


def vllm_fp8_expected(w, quantized, tp, t):
    """vLLM tp rank t's FP8-form parameters (e4m3 bytes, fp32 scales) assembled from the
    reference-quantized HF tensors the way vLLM fuses and shards them (qkv_proj = [q; k; v]
    rows, gate_up_proj = [gate; up] rows, o_proj and down_proj split on columns); the
    scales follow at block granularity."""
    import conventions
    cfg, out = w.cfg, {}
    hd, kv, nh, B = cfg["hd"], cfg["kv"], cfg["nh"], 128

    def rows(name, a, b):
        q, s = quantized[name]
        return q[a:b], s[a // B:-(-b // B)]

    def cols(name, a, b):
        q, s = quantized[name]
        return q[:, a:b], s[:, a // B:-(-b // B)]

    for n in range(cfg["L"]):
        p = "model.layers.%d." % n
        parts = {}
        a, b = conventions.chunk(nh * hd, tp, t)
        ka, kb = conventions.chunk(kv * hd, tp, t)
        parts["self_attn.qkv_proj.weight"] = [rows(p + "self_attn.q_proj.weight", a, b),
                                              rows(p + "self_attn.k_proj.weight", ka, kb),
                                              rows(p + "self_attn.v_proj.weight", ka, kb)]
        i0, i1 = conventions.chunk(cfg["I"], tp, t)
        parts["mlp.gate_up_proj.weight"] = [rows(p + "mlp.gate_proj.weight", i0, i1),
                                            rows(p + "mlp.up_proj.weight", i0, i1)]
        parts["self_attn.o_proj.weight"] = [cols(p + "self_attn.o_proj.weight", a, b)]
        parts["mlp.down_proj.weight"] = [cols(p + "mlp.down_proj.weight", i0, i1)]
        for name, ps in parts.items():
            out[p + name] = np.concatenate([q for q, _ in ps])
            out[p + name + "_scale_inv"] = np.concatenate([s for _, s in ps])
    return out


@needs_quant
@pytest.mark.parametrize("pow2", [False, True], ids=["fp32-scales", "ue8m0-scales"])
def test_model_refit_bf16_to_fp8(tmp_path, pow2):
    import json
    import conventions
    path = tmp_path / "config.json"
    path.write_text(json.dumps(FP8_DENSE))
    refit = reshard.Model(str(path), infer_dtype="fp8", pow2_scale=pow2).refit("tp=2", "tp=2")
    cfg = conventions.load_config(str(path))
    w = conventions.Weights(cfg)
    quantized = {}
    for name, shape in w.shapes.items():
        info = refit.tensors.quant(name)
        if info is not None:
            assert info.kind == reshard.Quant.fp8_block and info.pow2_scale == pow2
            bits = w[name].view(torch.int16).numpy()
            quantized[name] = quantize(bits, 128, 128, False, pow2)
    # the FP8 form: every linear weight but the embedding and output layer (vLLM checkpoints)
    assert sorted(n for n in quantized) == sorted(
        n for n in w.shapes if n.endswith("proj.weight"))
    got, want = {}, {}

    def rank_fn(comm):
        r = comm.rank
        plan = reshard.Plan(refit.train, refit.infer, rank=r, world=refit.world, staging_mb=1)
        side, i = refit.role(r)
        if side == "train":
            plan.execute(comm, src=conventions.megatron_state_dict(w, "tp=2", i))
            return
        dst = refit.infer.new_buffers(r, fill=reshard.SENTINEL_BYTE)
        plan.execute(comm, dst=dst)
        got[i] = dst
        want[i] = vllm_fp8_expected(w, quantized, 2, i)
        for n, t in conventions.vllm_state_dict(w, "tp=2", i, reshard.SENTINEL_BYTE).items():
            want[i].setdefault(n, t)  # the bf16 parameters as they are

    reshard.run_threads(refit.world, rank_fn)
    assert sorted(got) == [0, 1]
    for i in got:
        assert sorted(got[i]) == sorted(want[i])
        for n, g in got[i].items():
            e = want[i][n]
            e = e.view(torch.uint8).numpy() if isinstance(e, torch.Tensor) else e.view(np.uint8)
            g = g.contiguous().view(torch.uint8).numpy()
            assert g.shape[0] == e.shape[0], (i, n)
            bad = np.flatnonzero(g.ravel() != e.ravel())
            assert bad.size == 0, "infer rank %d %s: %d bytes differ" % (i, n, bad.size)


# --- the same refit over the NCCL transport (the fake CUDA runtime + NCCL) ----------------

@needs_quant
@pytest.mark.skipif(os.environ.get("RESHARD_TEST_FAKE_NCCL") != "1",
                    reason="needs the fake CUDA/NCCL library (ctest python_fake_nccl_quant)")
def test_refit_bf16_to_fp8_over_fake_nccl():
    """The layouts of test_refit_bf16_to_fp8_every_byte over NCCL comms bootstrapped
    through a store: the executor's quantize steps run through the NCCL transport's
    quantize op (its kernel emulated by the fake); "device" tensors are host arrays."""
    import threading
    from test_nccl_bootstrap import DictStore
    from test_nccl_rejoin import FakeDeviceTensor

    tensors, src, dst, full, want = quantized_case()
    store, got, errors = DictStore(timeout=20.0), {}, []

    def rank_fn(r):
        try:
            comm = reshard.from_nccl_store(store, r, WORLD, key="quant/nccl")
            plan = reshard.Plan(src, dst, rank=r, world=WORLD, staging_mb=1, timeout_s=10)
            s = {}
            for n, c in CASES.items():
                shard = local_shard(full[n], TRAIN, c[3], r)
                if shard is not None and shard.size:
                    s[n] = FakeDeviceTensor(shard)
                    s[n].dtype = torch.bfloat16  # int16 bits presented as bf16
            d = {p.name: FakeDeviceTensor(np.full(p.bytes, reshard.SENTINEL_BYTE, np.uint8)
                                          .view(np.float32 if p.dtype == reshard.DType.fp32
                                                else np.uint8).reshape(p.shape))
                 for p in dst.parameters(r)}
            plan.execute(comm, src=s or None, dst=d or None)
            got[r] = {n: t.array for n, t in d.items()}
            comm.close()
        except Exception as e:  # noqa: BLE001 - reported below with the rank
            errors.append((r, repr(e)))

    threads = [threading.Thread(target=rank_fn, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    check_quantized(got, want)
