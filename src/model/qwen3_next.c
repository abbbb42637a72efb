/*
 * qwen3_next: the Gated DeltaNet (linear attention) layers of Qwen3-Next,
 * its config fields, logical tensors, and the parameters of a Megatron rank
 * (megatron/core/ssm/gated_delta_net/gdn.py, common.py at Megatron-LM
 * 606b9f4) and of a vLLM rank (layers/mamba/gdn/qwen_gdn_linear_attn.py at
 * vLLM 00545a8, gqa_interleaved_layout=True). The gated full attention and
 * the MoE are the shared code of megatron.c / vllm.c. Layer i is full
 * attention iff (i + 1) % full_attention_interval == 0 (Megatron's
 * linear_attention_freq, experimental_attention_variant_module_specs.py;
 * HF's derived layer_types).
 *
 * HF's fused projections group rows by key head g (r = nv / nk value heads
 * per key head):
 *   in_proj_qkvz [nk, q_g (kd); k_g (kd); v_g (r*vd); z_g (r*vd)] x H
 *   in_proj_ba   [nk, b_g (r); a_g (r)] x H
 * vLLM (MergedColumnParallelLinear of one output shard) keeps that order: a
 * rank holds key-head groups [t*nk/tp, (t+1)*nk/tp) of each, contiguous.
 * Megatron's in_proj of TP rank t is six sections of the same groups:
 * [q; k; v; z; b; a] (in_proj_split_sections, Bridge GDNLinearMapping), each
 * the rank's groups in order. conv1d [conv_dim, 1, K] has channels
 * [q (nk*kd); k (nk*kd); v (nv*vd)] in both frameworks; a rank holds its
 * slice of each section (vLLM mamba_v2_sharded_weight_loader).
 *
 * Two value/dtype changes a byte copy cannot make, delivered to staging
 * buffers the worker finishes (as NemotronH's A_log, mamba.c):
 *  - out_norm: Megatron's zero-centered out_norm.weight is HF's
 *    linear_attn.norm.weight - 1 (Bridge RMSNorm2ZeroCenteredRMSNormMapping);
 *    vLLM's RMSNormGated multiplies by the plain weight. The logical tensor
 *    carries Megatron's value; vLLM's buffer is named
 *    "linear_attn.norm.weight_minus_1": the worker sets norm.weight to it + 1.
 *  - A_log: Megatron creates it in params_dtype (bf16); vLLM creates it fp32.
 *    vLLM's buffer is "linear_attn.A_log_bf16": the worker widens it into
 *    A_log (exact).
 * reshard never writes either into the parameter of vLLM's own name.
 */
#include <jansson.h>
#include <stdio.h>

#include "model/model_internal.h"
#include "util/error.h"

reshard_status_t rs_gdn_parse(json_t *root, reshard_model_t *m)
{
    rs_gdn_t *g = &m->gdn;
    int64_t v[6];
    static const char *const keys[6] = {"linear_num_key_heads",   "linear_num_value_heads",
                                        "linear_key_head_dim",    "linear_value_head_dim",
                                        "linear_conv_kernel_dim", "full_attention_interval"};
    for (int k = 0; k < 6; k++)
        TRY(rs_config_int(root, keys[k], -1, 1, &v[k]));
    g->nk = (int32_t)v[0];
    g->nv = (int32_t)v[1];
    g->kd = (int32_t)v[2];
    g->vd = (int32_t)v[3];
    g->K = (int32_t)v[4];
    g->interval = (int32_t)v[5];
    if (g->nv % g->nk)
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: linear_num_key_heads %d does not divide linear_num_value_heads %d",
                        g->nk, g->nv);
    int scale;
    TRY(rs_config_bool(root, "layer_scale", 0, &scale));
    if (scale) /* qwen3_next.py: attn_layer_scale / ffn_layer_scale [1, 1, H] */
        return rs_error(RESHARD_ERR_CONFIG, "config: qwen3_next with layer_scale true is not "
                                            "modelled (vLLM's attn_layer_scale, ffn_layer_scale)");
    if (json_object_get(root, "layer_types") && !json_is_null(json_object_get(root, "layer_types")))
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: qwen3_next with an explicit layer_types is not modelled (the "
                        "layers are derived from full_attention_interval)");
    return RESHARD_OK;
}

bool rs_gdn_layer(const reshard_model_t *m, int32_t i)
{
    return (i + 1) % m->gdn.interval != 0;
}

reshard_status_t rs_gdn_catalogue(rs_cat_t *c, rs_layer_ids_t *l, const char *p)
{
    const reshard_model_t *m = rs_cat_model(c);
    const rs_gdn_t *g = &m->gdn;
    int64_t H = m->H, nk = g->nk, r = g->nv / g->nk, kd = g->kd, vd = g->vd;
    int64_t per = 2 * kd + 2 * r * vd, conv = 2 * nk * kd + (int64_t)g->nv * vd, nv = g->nv;
    const reshard_dtype_t BF16 = RESHARD_BF16;
    int64_t qs[2] = {nk * per, H}, qv[3] = {nk, per, H};
    int64_t bs[2] = {nk * 2 * r, H}, bv[3] = {nk, 2 * r, H};
    int64_t cs[3] = {conv, 1, g->K}, os[2] = {H, nv * vd};
    TRY(rs_cat_add(c, &l->gdn_qkvz, BF16, 2, qs, 3, qv, "%slinear_attn.in_proj_qkvz.weight", p));
    TRY(rs_cat_add(c, &l->gdn_ba, BF16, 2, bs, 3, bv, "%slinear_attn.in_proj_ba.weight", p));
    TRY(rs_cat_add(c, &l->m_conv_w, BF16, 3, cs, 0, NULL, "%slinear_attn.conv1d.weight", p));
    TRY(rs_cat_add(c, &l->m_dt_bias, BF16, 1, &nv, 0, NULL, "%slinear_attn.dt_bias", p));
    TRY(rs_cat_add(c, &l->m_A_log, BF16, 1, &nv, 0, NULL, "%slinear_attn.A_log", p));
    int64_t nvd = vd;
    TRY(rs_cat_add(c, &l->m_norm, BF16, 1, &nvd, 0, NULL, "%slinear_attn.norm.weight", p));
    return rs_cat_add(c, &l->m_out, BF16, 2, os, 0, NULL, "%slinear_attn.out_proj.weight", p);
}

/* Section @p k (0 q, 1 k, 2 v, 3 z of in_proj_qkvz; 4 b, 5 a of in_proj_ba)
 * of key-head groups [g0, g0+ng) into buffer @p buf from element @p base,
 * the groups one after another. Returns the rows written through @p rows. */
static reshard_status_t section(rs_emit_t *e, const rs_layer_ids_t *l, int k, int64_t g0,
                                int64_t ng, int32_t buf, int64_t base, int64_t *rows)
{
    const rs_gdn_t *g = &e->m->gdn;
    int64_t H = e->m->H, r = g->nv / g->nk, kd = g->kd, rv = r * g->vd;
    int64_t at[6] = {0, kd, 2 * kd, 2 * kd + rv, 0, r}, len[6] = {kd, kd, rv, rv, r, r};
    int32_t t = k < 4 ? l->gdn_qkvz : l->gdn_ba;
    int64_t off[3] = {g0, at[k], 0}, ext[3] = {ng, len[k], H}, st[3] = {len[k] * H, H, 1};
    *rows = ng * len[k];
    return rs_emit(e, t, buf, off, ext, base, st);
}

/* conv1d [conv_dim/tp, 1, K] of TP rank t: its slice of q, of k, of v. */
static reshard_status_t conv1d(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                               const char *name)
{
    const rs_gdn_t *g = &e->m->gdn;
    int64_t qk = (int64_t)g->nk * g->kd, v = (int64_t)g->nv * g->vd, K = g->K;
    int64_t qi = qk / tp, vi = v / tp, shape[3] = {2 * qi + vi, 1, K};
    int32_t b = rs_emit_buffer_shaped(e, l->m_conv_w, 3, shape, "%s", name);
    if (b < 0)
        return (reshard_status_t)b;
    TRY(rs_emit_dim0(e, l->m_conv_w, b, 0, t * qi, qi));
    TRY(rs_emit_dim0(e, l->m_conv_w, b, qi * K, qk + t * qi, qi));
    return rs_emit_dim0(e, l->m_conv_w, b, 2 * qi * K, 2 * qk + t * vi, vi);
}

reshard_status_t rs_gdn_megatron(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                                 const char *p)
{
    const rs_gdn_t *g = &e->m->gdn;
    int64_t H = e->m->H, ng = g->nk / tp, g0 = t * ng;
    int64_t rows = (2 * (int64_t)g->nk * g->kd + 2 * (int64_t)g->nv * g->vd + 2 * g->nv) / tp;
    char n[192];
    TRY(rs_emit_own(e, l->in_norm,
                    rs_nm(n, sizeof n, p, "self_attention.in_proj.layer_norm_weight")));
    /* common.py: in_proj, conv1d, dt_bias, A_log, out_norm, out_proj */
    int32_t b = rs_emit_buffer(e, l->gdn_qkvz, 1, rows, H, "%s",
                               rs_nm(n, sizeof n, p, "self_attention.in_proj.weight"));
    if (b < 0)
        return (reshard_status_t)b;
    int64_t at = 0, got;
    for (int k = 0; k < 6; k++) {
        TRY(section(e, l, k, g0, ng, b, at * H, &got));
        at += got;
    }
    TRY(conv1d(e, l, tp, t, rs_nm(n, sizeof n, p, "self_attention.conv1d.weight")));
    TRY(rs_emit_column(e, l->m_dt_bias, tp, t, rs_nm(n, sizeof n, p, "self_attention.dt_bias")));
    TRY(rs_emit_column(e, l->m_A_log, tp, t, rs_nm(n, sizeof n, p, "self_attention.A_log")));
    TRY(rs_emit_own(e, l->m_norm, rs_nm(n, sizeof n, p, "self_attention.out_norm.weight")));
    return rs_emit_row(e, l->m_out, tp, t, rs_nm(n, sizeof n, p, "self_attention.out_proj.weight"));
}

reshard_status_t rs_gdn_vllm(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                             const char *p)
{
    char n[192];
    /* qwen_gdn_linear_attn.py: conv1d, in_proj_qkvz, in_proj_ba, dt_bias,
     * A_log, norm, out_proj (the input norm is the caller's) */
    TRY(conv1d(e, l, tp, t, rs_nm(n, sizeof n, p, "linear_attn.conv1d.weight")));
    TRY(rs_emit_column(e, l->gdn_qkvz, tp, t,
                       rs_nm(n, sizeof n, p, "linear_attn.in_proj_qkvz.weight")));
    TRY(rs_emit_column(e, l->gdn_ba, tp, t,
                       rs_nm(n, sizeof n, p, "linear_attn.in_proj_ba.weight")));
    TRY(rs_emit_column(e, l->m_dt_bias, tp, t, rs_nm(n, sizeof n, p, "linear_attn.dt_bias")));
    TRY(rs_emit_column(e, l->m_A_log, tp, t, rs_nm(n, sizeof n, p, "linear_attn.A_log_bf16")));
    TRY(rs_emit_own(e, l->m_norm, rs_nm(n, sizeof n, p, "linear_attn.norm.weight_minus_1")));
    return rs_emit_row(e, l->m_out, tp, t, rs_nm(n, sizeof n, p, "linear_attn.out_proj.weight"));
}

reshard_status_t rs_gdn_check_tp(const reshard_model_t *m, int32_t tp, const char *side)
{
    const rs_gdn_t *g = &m->gdn;
    RULE(g->nk % tp == 0 && g->nv % tp == 0,
         "%s: qwen3_next: tp=%d does not divide linear_num_key_heads %d and "
         "linear_num_value_heads %d (Megatron's GatedDeltaNet and vLLM's "
         "QwenGatedDeltaNetAttention split whole key-head groups)",
         side, tp, g->nk, g->nv);
    return RESHARD_OK;
}
