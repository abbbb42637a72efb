/* gpt-oss (model_type gpt_oss): vLLM's GptOssModel layer and the expert
 * biases of Megatron's TEGroupedMLP.
 *
 * vLLM (vllm-project/vllm a6b6cfa, model_executor/models/gpt_oss.py, the bf16
 * path _load_weights_other): per layer input_layernorm, attn.qkv_proj (with
 * bias), attn.o_proj (RowParallelLinear: its bias [H] whole on every rank),
 * attn.sinks [heads/tp] (the rank's heads), post_attention_layernorm,
 * mlp.router (nn.Linear with bias, replicated) and the FusedMoE experts with
 * biases. HF's gate_up_proj [E, H, 2I] holds gate at even and up at odd
 * columns; vLLM narrows columns [2*start, 2*end) of the rank's intermediate
 * slice and transposes, so w13_weight [E_local, 2*I_local, H] rows alternate
 * gate, up (the swigluoai kernel's order), and w13_bias [E_local, 2*I_local]
 * alike; w2_weight [E_local, H, I_local]. With EP whole experts, E / ep
 * contiguous per rank; without, the intermediate dim split over the
 * flattened tp*dp ranks, and w2_bias [E, H] only on flattened rank 0: the
 * others hold zeros (_load_weights_other: tp_rank is
 * flatten_tp_across_dp_and_pcp's dp_rank*tp + tp_rank; "if tp_rank != 0:
 * weight.zero_()"), and every rank's bias enters the MoE reduction, so they
 * are declared zero-filled (reshard_layout_zero_buffer): every refit writes
 * their zeros, whatever the engine loaded (load_format=dummy: random).
 * Megatron-Bridge (gpt_oss_bridge.py 998a2f3): linear_fc1.weightK is HF's
 * gate_up_proj[K] transposed and de-interleaved ([gate; up]), linear_fc1.biasK
 * likewise, linear_fc2.weightK / biasK the down projection; the sinks are
 * self_attention.core_attention.softmax_offset, the router has mlp.router.bias. */
#include <stdio.h>

#include "model/model_internal.h"
#include "util/error.h"

/* Experts e0..e0+ne, intermediate rows i0..i0+n of each, in vLLM's
 * interleaved w13 / w13_bias, w2 and w2_bias (@p down_bias: this rank holds it;
 * without, it is zero-filled). */
static reshard_status_t experts(rs_emit_t *e, const rs_layer_ids_t *l, int64_t e0, int64_t ne,
                                int64_t i0, int64_t n, bool down_bias, const char *w13,
                                const char *w13b, const char *w2, const char *w2b)
{
    int64_t H = e->m->H;
    int64_t s13[3] = {ne, 2 * n, H}, s13b[2] = {ne, 2 * n}, s2[3] = {ne, H, n}, s2b[2] = {ne, H};
    int32_t b = rs_emit_buffer_shaped(e, l->e_gate, 3, s13, "%s", w13);
    if (b < 0)
        return (reshard_status_t)b;
    int64_t off[3] = {e0, i0, 0}, ext[3] = {ne, n, H}, st[3] = {2 * n * H, 2 * H, 1};
    TRY(rs_emit(e, l->e_gate, b, off, ext, 0, st));
    TRY(rs_emit(e, l->e_up, b, off, ext, H, st));
    if ((b = rs_emit_buffer_shaped(e, l->e_gate_b, 2, s13b, "%s", w13b)) < 0)
        return (reshard_status_t)b;
    int64_t bo[2] = {e0, i0}, be[2] = {ne, n}, bs[2] = {2 * n, 2};
    TRY(rs_emit(e, l->e_gate_b, b, bo, be, 0, bs));
    TRY(rs_emit(e, l->e_up_b, b, bo, be, 1, bs));
    if ((b = rs_emit_buffer_shaped(e, l->e_down, 3, s2, "%s", w2)) < 0)
        return (reshard_status_t)b;
    int64_t o2[3] = {e0, 0, i0}, x2[3] = {ne, H, n}, t2[3] = {H * n, n, 1};
    TRY(rs_emit(e, l->e_down, b, o2, x2, 0, t2));
    if ((b = rs_emit_buffer_shaped(e, l->e_down_b, 2, s2b, "%s", w2b)) < 0)
        return (reshard_status_t)b;
    int64_t db[2] = {e0, 0}, dx[2] = {ne, H}, ds[2] = {H, 1};
    return down_bias ? rs_emit(e, l->e_down_b, b, db, dx, 0, ds) : rs_emit_zero(e, b);
}

reshard_status_t rs_gpt_oss_vllm_layer(rs_emit_t *e, const reshard_infer_spec_t *s, int32_t r,
                                       int32_t i)
{
    const reshard_model_t *m = e->m;
    const rs_layer_ids_t *l = &e->ids->layer[i];
    char p[96], n[160], n2[160], n3[160], n4[160];
    int32_t tp = s->tp, t = r % tp;
    rs_name_join(p, sizeof p, "", "model.layers.", l->hf_index, ".");
    TRY(rs_emit_own(e, l->in_norm, rs_nm(n, sizeof n, p, "input_layernorm.weight")));
    TRY(rs_vllm_qkv(e, l, tp, t, rs_nm(n, sizeof n, p, "attn.qkv_proj.weight")));
    TRY(rs_vllm_qkv_bias(e, l, tp, t, rs_nm(n, sizeof n, p, "attn.qkv_proj.bias")));
    TRY(rs_emit_row(e, l->o, tp, t, rs_nm(n, sizeof n, p, "attn.o_proj.weight")));
    TRY(rs_emit_own(e, l->o_bias, rs_nm(n, sizeof n, p, "attn.o_proj.bias")));
    int64_t nh = m->nh / tp;
    int32_t b = rs_emit_buffer(e, l->sinks, 1, 1, nh, "%s", rs_nm(n, sizeof n, p, "attn.sinks"));
    if (b < 0)
        return (reshard_status_t)b;
    TRY(rs_emit_dim0(e, l->sinks, b, 0, t * nh, nh));
    TRY(rs_emit_own(e, l->post_norm, rs_nm(n, sizeof n, p, "post_attention_layernorm.weight")));
    TRY(rs_emit_own(e, l->router, rs_nm(n, sizeof n, p, "mlp.router.weight")));
    TRY(rs_emit_own(e, l->router_b, rs_nm(n, sizeof n, p, "mlp.router.bias")));
    int64_t eps = (int64_t)s->tp * s->dp, e0 = 0, ne = m->E, i0 = 0, ni = m->Im;
    if (s->ep) { /* load_weights: E / ep_size contiguous experts per EP rank */
        ne = m->E / eps;
        e0 = r * ne;
    } else { /* flatten_tp_across_dp: slice r of the intermediate dim */
        ni = m->Im / eps;
        i0 = r * ni;
    }
    rs_name_join(n, sizeof n, p, "mlp.experts.", -1, rs_vllm_name(s, RS_VN_W13));
    rs_name_join(n2, sizeof n2, p, "mlp.experts.", -1, rs_vllm_name(s, RS_VN_W13_BIAS));
    rs_name_join(n3, sizeof n3, p, "mlp.experts.", -1, rs_vllm_name(s, RS_VN_W2));
    rs_name_join(n4, sizeof n4, p, "mlp.experts.", -1, rs_vllm_name(s, RS_VN_W2_BIAS));
    return experts(e, l, e0, ne, i0, ni, s->ep || r == 0, n, n2, n3, n4);
}

reshard_status_t rs_gpt_oss_megatron_expert_biases(rs_emit_t *e, const rs_layer_ids_t *l,
                                                   int64_t e0, int64_t ne, int64_t i0, int64_t n,
                                                   const char *prefix)
{
    int64_t H = e->m->H;
    char name[192];
    /* TE GroupedLinear: bias0..N-1 of fc1 ([gate; up] rows i0..i0+n), then of fc2 (whole) */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t k = 0; k < ne; k++) {
            snprintf(name, sizeof name, "%smlp.experts.linear_fc%d.bias%lld", prefix, pass + 1,
                     (long long)k);
            int64_t len = pass ? H : 2 * n;
            int32_t b =
                rs_emit_buffer_shaped(e, pass ? l->e_down_b : l->e_gate_b, 1, &len, "%s", name);
            if (b < 0)
                return (reshard_status_t)b;
            int64_t off[2] = {e0 + k, pass ? 0 : i0}, ext[2] = {1, pass ? H : n}, st[2] = {len, 1};
            if (pass) {
                TRY(rs_emit(e, l->e_down_b, b, off, ext, 0, st));
            } else {
                TRY(rs_emit(e, l->e_gate_b, b, off, ext, 0, st));
                TRY(rs_emit(e, l->e_up_b, b, off, ext, n, st));
            }
        }
    return RESHARD_OK;
}
