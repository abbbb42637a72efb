/* The Megatron training layout (Megatron-LM conventions: rank grids, fused QKV by query group,
 * [gate; up] fc1, vocab padding to 128 x tp, experts by EP rank). */
#include <stdio.h>
#include <stdlib.h>

#include "model/model_internal.h"
#include "util/error.h"

/* Coordinates of one training rank. */
typedef struct {
    int32_t stage, tp, etp, ep;
} mg_coord_t;

/* Rows [a, b) of query group g's block of the weights (@p bias false: rows
 * of H) or biases @p t[3], into buffer @p buf from buffer row @p r0. The
 * block is [q heads of g; k_g; v_g] (head_dim rows each), or with the
 * attention output gate (m->attn_gate, attention.py get_query_key_value_tensors
 * with output_gate) [q heads of g; their gates; k_g; v_g]: q and gate are
 * the halves of each head's rows of q_proj (view [kv, hpg, 2, hd, (H)]).
 * Heads cut by [a, b) become boxes of part of a head. */
static reshard_status_t group_rows(rs_emit_t *e, const int32_t t[3], bool bias, int32_t buf,
                                   int64_t g, int64_t a, int64_t b, int64_t r0)
{
    const reshard_model_t *m = e->m;
    int64_t hd = m->hd, hpg = m->nh / m->kv, W = bias ? 1 : m->H;
    int gated = m->attn_gate ? 1 : 0, parts = 3 + gated;
    int64_t qr = hpg * hd; /* rows of q (and of the gate) per group */
    int64_t start[4], len[4];
    int32_t src[4];
    int sub[4];
    for (int p = 0, r = 0; p < parts; p++) {
        bool q = p <= gated;
        start[p] = r;
        len[p] = q ? qr : hd;
        src[p] = q ? t[0] : t[p - gated];
        sub[p] = q ? p : -1;
        r += (int)len[p];
    }
    int64_t gst = ((1 + gated) * hpg + 2) * hd * W; /* a group's block */
    for (int p = 0; p < parts; p++) {
        int64_t x = (a > start[p] ? a : start[p]) - start[p];
        int64_t y = (b < start[p] + len[p] ? b : start[p] + len[p]) - start[p];
        while (x < y) {
            int64_t h = x / hd, in = x % hd, heads = 1, rows;
            if (in == 0 && y - x >= hd) { /* whole heads */
                heads = (y - x) / hd;
                rows = hd;
            } else {
                rows = (hd - in < y - x) ? hd - in : y - x;
            }
            int64_t base = (r0 + start[p] + x - a) * W;
            if (sub[p] < 0) { /* k/v view [kv, hd, (H)] (extent 1 in g: any stride) */
                int64_t ko[3] = {g, in, 0}, ke[3] = {1, rows, W}, ks[3] = {gst, W, 1};
                TRY(rs_emit(e, src[p], buf, ko, ke, base, ks));
            } else if (gated) { /* q view [kv, hpg, 2, hd, H] */
                int64_t off[5] = {g, h, sub[p], in, 0}, ext[5] = {1, heads, 1, rows, W},
                        st[5] = {gst, hd * W, hd * W, W, 1};
                TRY(rs_emit(e, src[p], buf, off, ext, base, st));
            } else { /* q view [kv, hpg, hd, (H)] */
                int64_t off[4] = {g, h, in, 0}, ext[4] = {1, heads, rows, W},
                        st[4] = {gst, hd * W, W, 1};
                TRY(rs_emit(e, src[p], buf, off, ext, base, st));
            }
            x += heads * rows;
        }
    }
    return RESHARD_OK;
}

/* linear_qkv weight or bias of TP rank @p r: rows interleaved by query group
 * (group_rows; transformer_config.py, attention.py), split evenly by rows:
 * whole groups when tp <= groups, else 1/(tp/groups) of one group's rows. */
static reshard_status_t qkv(rs_emit_t *e, const int32_t t[3], bool bias, int32_t tp, int32_t r,
                            const char *name)
{
    const reshard_model_t *m = e->m;
    int64_t gs = ((m->attn_gate ? 2 : 1) * m->nh / m->kv + 2) * m->hd; /* rows per group */
    int64_t rows = m->kv * gs / tp, W = bias ? 1 : m->H;
    int32_t b = rs_emit_buffer(e, t[0], 1, rows, W, "%s", name);
    if (b < 0)
        return (reshard_status_t)b;
    if (tp > m->kv) {
        int64_t per = tp / m->kv, g = r / per, a = (r % per) * rows;
        return group_rows(e, t, bias, b, g, a, a + rows, 0);
    }
    int64_t ng = m->kv / tp;
    for (int64_t k = 0; k < ng; k++)
        TRY(group_rows(e, t, bias, b, r * ng + k, 0, gs, k * gs));
    return RESHARD_OK;
}

/* The attention of a layer (names "<p>self_attention."), its input norm
 * fused into linear_qkv (or MLA's projections), of TP rank @p t of @p tp. */
static reshard_status_t attention(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                                  const char *p)
{
    const reshard_model_t *m = e->m;
    char n[160];
    if (m->fam != RS_FAM_DSV3) {
        TRY(rs_emit_own(e, l->in_norm,
                        rs_nm(n, sizeof n, p, "self_attention.linear_qkv.layer_norm_weight")));
        TRY(qkv(e, (int32_t[3]){l->q, l->k, l->v}, false, tp, t,
                rs_nm(n, sizeof n, p, "self_attention.linear_qkv.weight")));
        if (l->q_bias >= 0)
            TRY(qkv(e, (int32_t[3]){l->q_bias, l->k_bias, l->v_bias}, true, tp, t,
                    rs_nm(n, sizeof n, p, "self_attention.linear_qkv.bias")));
        if (m->qk_norm) {
            TRY(rs_emit_own(e, l->q_norm,
                            rs_nm(n, sizeof n, p, "self_attention.q_layernorm.weight")));
            TRY(rs_emit_own(e, l->k_norm,
                            rs_nm(n, sizeof n, p, "self_attention.k_layernorm.weight")));
        }
    } else {
        TRY(rs_emit_own(e, l->in_norm, rs_nm(n, sizeof n, p, "input_layernorm.weight")));
        if (m->q_lora) {
            TRY(rs_emit_own(e, l->q_a,
                            rs_nm(n, sizeof n, p, "self_attention.linear_q_down_proj.weight")));
            TRY(rs_emit_own(
                e, l->q_a_norm,
                rs_nm(n, sizeof n, p, "self_attention.linear_q_up_proj.layer_norm_weight")));
            TRY(rs_emit_column(e, l->q_b, tp, t,
                               rs_nm(n, sizeof n, p, "self_attention.linear_q_up_proj.weight")));
        } else {
            TRY(rs_emit_column(e, l->q, tp, t,
                               rs_nm(n, sizeof n, p, "self_attention.linear_q_proj.weight")));
        }
        TRY(rs_emit_own(e, l->kv_a,
                        rs_nm(n, sizeof n, p, "self_attention.linear_kv_down_proj.weight")));
        TRY(rs_emit_own(
            e, l->kv_a_norm,
            rs_nm(n, sizeof n, p, "self_attention.linear_kv_up_proj.layer_norm_weight")));
        TRY(rs_emit_column(e, l->kv_b, tp, t,
                           rs_nm(n, sizeof n, p, "self_attention.linear_kv_up_proj.weight")));
    }
    TRY(rs_emit_row(e, l->o, tp, t, rs_nm(n, sizeof n, p, "self_attention.linear_proj.weight")));
    if (l->o_bias >= 0) /* row-parallel bias: whole on every TP rank */
        TRY(rs_emit_own(e, l->o_bias, rs_nm(n, sizeof n, p, "self_attention.linear_proj.bias")));
    if (l->sinks >= 0) { /* gpt-oss sinks (Megatron-Bridge gpt_oss_bridge.py): the rank's heads */
        int64_t nh = m->nh / tp;
        int32_t b =
            rs_emit_buffer(e, l->sinks, 1, 1, nh, "%s",
                           rs_nm(n, sizeof n, p, "self_attention.core_attention.softmax_offset"));
        if (b < 0)
            return (reshard_status_t)b;
        TRY(rs_emit_dim0(e, l->sinks, b, 0, t * nh, nh));
    }
    return RESHARD_OK;
}

/* Layer @p i (catalogue index) as the @p local-th layer of its model chunk,
 * whose parameter names start with @p chunk ("" or "c." with vpp). */
static reshard_status_t layer(rs_emit_t *e, const reshard_train_spec_t *s, const mg_coord_t *c,
                              const char *chunk, int32_t i, int32_t local)
{
    const reshard_model_t *m = e->m;
    const rs_layer_ids_t *l = &e->ids->layer[i];
    char p[96], n[160];
    bool mtp = i >= m->L;
    int32_t tp = s->tp, t = c->tp;
    if (mtp) {
        int32_t k = i - m->L;
        rs_name_join(p, sizeof p, chunk, "mtp.layers.", k, ".");
        TRY(rs_emit_own(e, l->enorm, rs_nm(n, sizeof n, p, "enorm.weight")));
        TRY(rs_emit_own(e, l->hnorm, rs_nm(n, sizeof n, p, "hnorm.weight")));
        TRY(rs_emit_column(e, l->eh_proj, tp, t, rs_nm(n, sizeof n, p, "eh_proj.weight")));
        /* multi_token_prediction.py: the inner layer is mtp_model_layer */
        rs_name_join(p, sizeof p, chunk, "mtp.layers.", k, ".mtp_model_layer.");
    } else {
        rs_name_join(p, sizeof p, chunk, "decoder.layers.", local, ".");
    }
    if (l->gdn_qkvz >= 0) /* qwen3_next: a Gated DeltaNet layer (qwen3_next.c) */
        TRY(rs_gdn_megatron(e, l, tp, t, p));
    else
        TRY(attention(e, l, tp, t, p));
    if (l->gate >= 0) {
        TRY(rs_emit_own(e, l->post_norm,
                        rs_nm(n, sizeof n, p, "mlp.linear_fc1.layer_norm_weight")));
        int64_t ni = m->I / tp;
        char n2[160];
        TRY(rs_emit_mlp(e, l->gate, l->up, l->down, t * ni, ni,
                        rs_nm(n, sizeof n, p, "mlp.linear_fc1.weight"),
                        rs_nm(n2, sizeof n2, p, "mlp.linear_fc2.weight")));
    } else {
        TRY(rs_emit_own(e, l->post_norm, rs_nm(n, sizeof n, p, "pre_mlp_layernorm.weight")));
        TRY(rs_emit_own(e, l->router, rs_nm(n, sizeof n, p, "mlp.router.weight")));
        if (l->router_b >= 0)
            TRY(rs_emit_own(e, l->router_b, rs_nm(n, sizeof n, p, "mlp.router.bias")));
        if (l->router_bias >= 0)
            TRY(rs_emit_own(e, l->router_bias, rs_nm(n, sizeof n, p, "mlp.router.expert_bias")));
        int64_t ne = m->E / s->ep, ni = m->Im / rs_etp(s);
        char n2[160];
        /* TEGroupedMLP: one parameter per local expert, weight0..ne-1 */
        TRY(rs_emit_experts(e, l, c->ep * ne, ne, c->etp * ni, ni, true,
                            rs_nm(n, sizeof n, p, "mlp.experts.linear_fc1.weight"),
                            rs_nm(n2, sizeof n2, p, "mlp.experts.linear_fc2.weight")));
        if (l->e_gate_b >= 0)
            TRY(rs_gpt_oss_megatron_expert_biases(e, l, c->ep * ne, ne, c->etp * ni, ni, p));
        if (l->s_gate >= 0) {
            int64_t ns = m->Is / tp;
            TRY(rs_emit_mlp(e, l->s_gate, l->s_up, l->s_down, t * ns, ns,
                            rs_nm(n, sizeof n, p, "mlp.shared_experts.linear_fc1.weight"),
                            rs_nm(n2, sizeof n2, p, "mlp.shared_experts.linear_fc2.weight")));
            /* shared_experts.py: the sigmoid gate, replicated */
            if (l->s_sigmoid >= 0)
                TRY(rs_emit_own(e, l->s_sigmoid,
                                rs_nm(n, sizeof n, p, "mlp.shared_experts.gate_weight")));
        }
    }
    if (mtp) {
        rs_name_join(p, sizeof p, chunk, "mtp.layers.", i - m->L, ".");
        TRY(rs_emit_own(e, l->head_norm, rs_nm(n, sizeof n, p, "final_layernorm.weight")));
    }
    return RESHARD_OK;
}

/* Model chunk @p chunk of the rank's stage, in GPTModel's parameter order:
 * embedding (first stage; with MTP also the last), decoder layers, final
 * layernorm, MTP layers, output layer (last stage). */
static reshard_status_t chunk_params(rs_emit_t *e, const reshard_train_spec_t *s,
                                     const mg_coord_t *c, int32_t chunk)
{
    const reshard_model_t *m = e->m;
    const rs_model_ids_t *ids = e->ids;
    /* Megatron-LM pads the vocabulary to a multiple of 128*tp (vocab_utils.py
     * 58-59); Megatron-Bridge keeps the HF config's (gpt_provider.py 266-271) */
    int64_t vpad = rs_convention(s) == RESHARD_TRAIN_MEGATRON_LM
                       ? rs_roundup(m->V, 128 * (int64_t)s->tp)
                       : m->V;
    int32_t v = rs_vpp(s);
    bool pre = c->stage == 0 && chunk == 0, post = c->stage == s->pp - 1 && chunk == v - 1;
    char pfx[16] = "", n[96];
    if (v > 1) /* the chunks are a list of models: name them as nn.ModuleList does */
        snprintf(pfx, sizeof pfx, "%d.", chunk);
    /* gpt_model.py: with MTP the last stage holds its own embedding copy */
    if (pre || (post && m->nmtp > 0))
        TRY(rs_emit_vocab(e, ids->embed, vpad, s->tp, c->tp,
                          rs_nm(n, sizeof n, pfx, "embedding.word_embeddings.weight")));
    int32_t first, count;
    bool hybrid = m->fam == RS_FAM_NEMOTRON_H; /* HybridStack (mamba.c) */
    if (hybrid)
        rs_hybrid_stage_layers(m, s, c->stage, chunk, &first, &count);
    else
        rs_stage_layers(m->L, s, c->stage, chunk, &first, &count);
    for (int32_t i = first; i < first + count; i++)
        TRY(hybrid ? rs_hybrid_megatron_layer(e, s, c->tp, c->etp, c->ep, pfx, i, i - first)
                   : layer(e, s, c, pfx, i, i - first));
    if (!post)
        return RESHARD_OK;
    TRY(rs_emit_own(
        e, ids->norm,
        rs_nm(n, sizeof n, pfx,
              hybrid ? "decoder.final_norm.weight" : "decoder.final_layernorm.weight")));
    for (int32_t i = m->L; i < m->L + m->nmtp; i++)
        TRY(layer(e, s, c, pfx, i, i - m->L));
    /* Tied and one stage: the output layer uses the embedding's weight. */
    if (!m->tied || s->pp > 1)
        TRY(rs_emit_vocab(e, ids->lm_head, vpad, s->tp, c->tp,
                          rs_nm(n, sizeof n, pfx, "output_layer.weight")));
    return RESHARD_OK;
}

static reshard_status_t rank_params(rs_emit_t *e, const reshard_train_spec_t *s,
                                    const mg_coord_t *c)
{
    for (int32_t chunk = 0; chunk < rs_vpp(s); chunk++)
        TRY(chunk_params(e, s, c, chunk));
    return RESHARD_OK;
}

/* Side rank r of the Megatron grid: dense tp fastest, then cp, dp, pp;
 * experts etp fastest, then ep, edp, pp, in the same world. */
static reshard_status_t train_rank(rs_emit_t *e, int32_t r, const void *spec_v)
{
    const reshard_train_spec_t *spec = spec_v;
    int32_t S = spec->tp * spec->cp * spec->dp, li = r % S;
    mg_coord_t c = {.stage = r / S,
                    .tp = li % spec->tp,
                    .etp = li % rs_etp(spec),
                    .ep = (li / rs_etp(spec)) % spec->ep};
    return rank_params(e, spec, &c);
}

reshard_status_t reshard_model_train_layout(const reshard_model_t *model,
                                            const reshard_tensors_t *tensors,
                                            const reshard_train_spec_t *spec, int32_t rank_offset,
                                            reshard_layout_t **out,
                                            reshard_model_buffers_t **buffers)
{
    rs_error_clear();
    if (!model || !tensors || !spec || !out || rank_offset < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_train_layout: bad argument");
    return rs_train_emit(model, tensors, spec, rank_offset, NULL, out, buffers);
}

reshard_status_t rs_train_emit(const reshard_model_t *model, const reshard_tensors_t *tensors,
                               const reshard_train_spec_t *spec, int32_t rank_offset,
                               const rs_emit_scope_t *scope, reshard_layout_t **out,
                               reshard_model_buffers_t **buffers)
{
    if (rs_fsdp(spec)) /* FSDP2 over the HF module (fsdp.c) */
        return rs_fsdp_emit(model, tensors, spec, rank_offset, scope, out, buffers);
    reshard_status_t s = rs_check_train(model, spec);
    if (s != RESHARD_OK)
        return s;
    reshard_train_spec_t eff = *spec; /* vpp as Megatron derives it */
    rs_train_effective(model, &eff);
    char text[192];
    uint64_t origin =
        rs_side_origin(model, true, reshard_train_spec_str(&eff, text, sizeof text), rank_offset);
    return rs_emit_side(model, tensors, true, reshard_train_world(&eff), rank_offset, train_rank,
                        &eff, scope, origin, out, buffers);
}

reshard_status_t rs_megatron_qkv(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                                 const char *name)
{
    const int32_t ids[3] = {l->q, l->k, l->v};
    return qkv(e, ids, false, tp, t, name);
}
