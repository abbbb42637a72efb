/* The logical tensors of a model: HF names, shapes and planning views. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/error.h"

struct rs_cat {
    const reshard_model_t *m;
    reshard_tensors_t *T;
    rs_model_ids_t *ids;
    int32_t cap;
    char prefix[64];
};
typedef struct rs_cat cat_t;

int64_t rs_scale_block_rows(const reshard_model_t *m)
{
    return m->quant == RESHARD_QUANT_MXFP8 ? 1 : RS_FP8_BLOCK;
}

int64_t rs_scale_block_cols(const reshard_model_t *m)
{
    return m->quant == RESHARD_QUANT_MXFP8 ? 32 : RS_FP8_BLOCK;
}

static reshard_status_t grow(cat_t *c)
{
    rs_model_ids_t *ids = c->ids;
    if (ids->n + 2 <= c->cap)
        return RESHARD_OK;
    int32_t cap = c->cap ? 2 * c->cap : 256;
    int32_t *scale = realloc(ids->scale, (size_t)cap * sizeof *scale);
    if (scale)
        ids->scale = scale;
    uint8_t *expert = realloc(ids->expert, (size_t)cap);
    if (expert)
        ids->expert = expert;
    int8_t *sj = realloc(ids->scale_j, (size_t)cap);
    if (sj)
        ids->scale_j = sj;
    if (!scale || !expert || !sj)
        return rs_error(RESHARD_ERR_NOMEM, "catalogue: out of memory");
    c->cap = cap;
    return RESHARD_OK;
}

static reshard_status_t add_one(cat_t *c, const char *name, reshard_dtype_t dt, int nd,
                                const int64_t *shape, int vnd, const int64_t *view, bool expert,
                                int32_t *id)
{
    reshard_status_t s = grow(c);
    if (s != RESHARD_OK)
        return s;
    *id = c->ids->n;
    if (c->T) {
        int32_t got;
        s = reshard_tensors_add(c->T, name, dt, nd, shape, vnd, view, &got);
        if (s != RESHARD_OK)
            return s;
        if (got != *id)
            return rs_error(RESHARD_ERR_INVALID_ARG, "catalogue: tensors must start empty");
    }
    c->ids->scale[*id] = -1;
    c->ids->expert[*id] = expert;
    c->ids->scale_j[*id] = -1;
    c->ids->n++;
    return RESHARD_OK;
}

/*
 * Add a tensor named prefix + fmt. @p linear: a linear-layer weight, FP8 with
 * a block-scale tensor in the FP8 form. Shape: [E?] rows cols with the
 * planning view @p view (nd_view dims, last one = cols, the row dims split
 * the rows); expert tensors are 3-d [E, R, C] with view = shape.
 */
static reshard_status_t add(cat_t *c, int32_t *id, bool linear, int nd, const int64_t *shape,
                            int vnd, const int64_t *view, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

static reshard_status_t add(cat_t *c, int32_t *id, bool linear, int nd, const int64_t *shape,
                            int vnd, const int64_t *view, const char *fmt, ...)
{
    char name[256], sname[272];
    int k = snprintf(name, sizeof name, "%s", c->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + k, sizeof name - (size_t)k, fmt, ap);
    va_end(ap);
    bool expert = strstr(name, ".mlp.experts.") || strstr(name, ".block_sparse_moe.experts.");
    bool quant = c->m->quant != RESHARD_QUANT_NONE;
    bool fp8 = linear && (c->m->dtype == RESHARD_FP8_E4M3 || quant);
    reshard_status_t s = add_one(c, name, fp8 && !quant ? RESHARD_FP8_E4M3 : RESHARD_BF16, nd,
                                 shape, vnd, view, expert, id);
    if (s != RESHARD_OK || !fp8)
        return s;

    /* The scale tensor [E?, ceil(R/BR), ceil(C/BC)] and its view: the
     * weight view with the innermost row dims whose product is a multiple of
     * BR merged into one dim of blocks (all row dims when none is), and the
     * cols in blocks. BR x BC: 128x128, or 1x32 for MXFP8. */
    const int64_t B = rs_scale_block_rows(c->m), BC = rs_scale_block_cols(c->m);
    int ne = nd == 3 ? 1 : 0;
    const int64_t *v = vnd ? view : shape;
    int vn = vnd ? vnd : nd;
    int64_t rows = shape[nd - 2], cols = shape[nd - 1];
    int j = -1;
    int64_t prod = 1;
    for (int d = vn - 2; d >= ne; d--) {
        prod *= v[d];
        if (prod % B == 0) {
            j = d;
            break;
        }
    }
    int64_t merged;
    if (j < 0) {
        j = ne;
        merged = rs_cdiv(rows, B);
    } else {
        merged = prod / B;
    }
    int64_t sshape[3], sview[RESHARD_MAX_DIMS];
    int sn = 0, svn = 0;
    if (ne) {
        sshape[sn++] = shape[0];
        sview[svn++] = shape[0];
    }
    sshape[sn++] = rs_cdiv(rows, B);
    sshape[sn++] = rs_cdiv(cols, BC);
    for (int d = ne; d < j; d++)
        sview[svn++] = v[d];
    sview[svn++] = merged;
    sview[svn++] = rs_cdiv(cols, BC);
    size_t len = strlen(name);
    if (len > 7 && !strcmp(name + len - 7, ".weight"))
        snprintf(sname, sizeof sname, "%.*s.weight_scale_inv", (int)(len - 7), name);
    else
        snprintf(sname, sizeof sname, "%s_scale_inv", name);
    int32_t sid;
    bool mx = c->m->quant == RESHARD_QUANT_MXFP8;
    s = add_one(c, sname, mx ? RESHARD_UINT8 : RESHARD_FP32, sn, sshape, svn, sview, expert, &sid);
    if (s == RESHARD_OK && quant && c->T) {
        reshard_quant_t q = {c->m->quant, sid, c->m->pow2};
        s = reshard_tensors_set_quant(c->T, *id, &q);
    }
    if (s != RESHARD_OK)
        return s;
    c->ids->scale[*id] = sid;
    c->ids->scale_j[*id] = (int8_t)j;
    return RESHARD_OK;
}

const reshard_model_t *rs_cat_model(const rs_cat_t *c)
{
    return c->m;
}

rs_model_ids_t *rs_cat_ids(rs_cat_t *c)
{
    return c->ids;
}

reshard_status_t rs_cat_add(rs_cat_t *c, int32_t *id, reshard_dtype_t dt, int nd,
                            const int64_t *shape, int vnd, const int64_t *view, const char *fmt,
                            ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return add_one(c, name, dt, nd, shape, vnd, view, strstr(name, ".experts.") != NULL, id);
}

static reshard_status_t vec(cat_t *c, int32_t *id, int64_t n, const char *name)
{
    return add(c, id, false, 1, &n, 0, NULL, "%s", name);
}

/* A 1-d fp32 tensor (router score-correction bias: fp32 in both frameworks,
 * vLLM deepseek_v2.py, Megatron router.py _maintain_float32_expert_bias). */
static reshard_status_t vec_fp32(cat_t *c, int32_t *id, int64_t n, const char *name)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", c->prefix, name);
    bool expert = false;
    return add_one(c, full, RESHARD_FP32, 1, &n, 0, NULL, expert, id);
}

static reshard_status_t mat(cat_t *c, int32_t *id, bool linear, int64_t r, int64_t col,
                            const char *name)
{
    int64_t s[2] = {r, col};
    return add(c, id, linear, 2, s, 0, NULL, "%s", name);
}

static reshard_status_t attention(cat_t *c, rs_layer_ids_t *l)
{
    const reshard_model_t *m = c->m;
    int64_t H = m->H, nh = m->nh, kv = m->kv, hd = m->hd;
    if (m->fam != RS_FAM_DSV3) {
        int64_t qs[2] = {nh * hd, H}, qv[4] = {kv, nh / kv, hd, H};
        int64_t ks[2] = {kv * hd, H}, kvv[3] = {kv, hd, H};
        if (m->attn_gate) { /* HF Qwen3NextAttention: q_proj [q_h; gate_h] per head */
            int64_t gs[2] = {nh * 2 * hd, H}, gv[5] = {kv, nh / kv, 2, hd, H};
            TRY(add(c, &l->q, true, 2, gs, 5, gv, "self_attn.q_proj.weight"));
        } else {
            TRY(add(c, &l->q, true, 2, qs, 4, qv, "self_attn.q_proj.weight"));
        }
        TRY(add(c, &l->k, true, 2, ks, 3, kvv, "self_attn.k_proj.weight"));
        TRY(add(c, &l->v, true, 2, ks, 3, kvv, "self_attn.v_proj.weight"));
        if (m->qkv_bias) { /* views as the weights' without the hidden dim */
            int64_t qb = nh * hd, kb = kv * hd;
            TRY(add(c, &l->q_bias, false, 1, &qb, 3, qv, "self_attn.q_proj.bias"));
            TRY(add(c, &l->k_bias, false, 1, &kb, 2, kvv, "self_attn.k_proj.bias"));
            TRY(add(c, &l->v_bias, false, 1, &kb, 2, kvv, "self_attn.v_proj.bias"));
        }
        TRY(mat(c, &l->o, true, H, nh * hd, "self_attn.o_proj.weight"));
        if (m->fam == RS_FAM_GPT_OSS) { /* HF GptOssAttention: o_proj bias, sinks [heads] */
            TRY(vec(c, &l->o_bias, H, "self_attn.o_proj.bias"));
            TRY(vec(c, &l->sinks, nh, "self_attn.sinks"));
        }
        if (m->qk_norm) {
            TRY(vec(c, &l->q_norm, hd, "self_attn.q_norm.weight"));
            TRY(vec(c, &l->k_norm, hd, "self_attn.k_norm.weight"));
        }
        return RESHARD_OK;
    }
    int64_t qk = m->nope + m->rope;
    int64_t qbs[2] = {nh * qk, m->q_lora ? m->q_lora : H}, qbv[3] = {nh, qk, qbs[1]};
    if (m->q_lora) {
        TRY(mat(c, &l->q_a, true, m->q_lora, H, "self_attn.q_a_proj.weight"));
        TRY(vec(c, &l->q_a_norm, m->q_lora, "self_attn.q_a_layernorm.weight"));
        TRY(add(c, &l->q_b, true, 2, qbs, 3, qbv, "self_attn.q_b_proj.weight"));
    } else {
        TRY(add(c, &l->q, true, 2, qbs, 3, qbv, "self_attn.q_proj.weight"));
    }
    TRY(mat(c, &l->kv_a, true, m->kv_lora + m->rope, H, "self_attn.kv_a_proj_with_mqa.weight"));
    TRY(vec(c, &l->kv_a_norm, m->kv_lora, "self_attn.kv_a_layernorm.weight"));
    int64_t kbs[2] = {nh * (m->nope + m->vhd), m->kv_lora},
            kbv[3] = {nh, m->nope + m->vhd, m->kv_lora};
    TRY(add(c, &l->kv_b, true, 2, kbs, 3, kbv, "self_attn.kv_b_proj.weight"));
    TRY(mat(c, &l->o, true, H, nh * m->vhd, "self_attn.o_proj.weight"));
    return RESHARD_OK;
}

static reshard_status_t mlp(cat_t *c, rs_layer_ids_t *l, bool moe)
{
    const reshard_model_t *m = c->m;
    int64_t H = m->H;
    if (!moe) {
        TRY(mat(c, &l->gate, true, m->I, H, "mlp.gate_proj.weight"));
        TRY(mat(c, &l->up, true, m->I, H, "mlp.up_proj.weight"));
        TRY(mat(c, &l->down, true, H, m->I, "mlp.down_proj.weight"));
        return RESHARD_OK;
    }
    /* HF and vLLM: "mlp." (mixtral: "block_sparse_moe."); the routed experts
     * stacked, gate/up/down (mixtral: w1/w3/w2) */
    bool mx = m->fam == RS_FAM_MIXTRAL, oss = m->fam == RS_FAM_GPT_OSS;
    const char *b = m->moe_block;
    char nm[128];
    /* gpt_oss: HF GptOssTopKRouter "mlp.router" with a bias */
    snprintf(nm, sizeof nm, "%s.%s.weight", b, oss ? "router" : "gate");
    TRY(mat(c, &l->router, false, m->E, H, nm));
    if (oss)
        TRY(vec(c, &l->router_b, m->E, "mlp.router.bias"));
    if (m->router_bias) {
        snprintf(nm, sizeof nm, "%s.gate.e_score_correction_bias", b);
        TRY(vec_fp32(c, &l->router_bias, m->E, nm));
    }
    int64_t eg[3] = {m->E, m->Im, H}, ed[3] = {m->E, H, m->Im};
    TRY(add(c, &l->e_gate, true, 3, eg, 0, NULL, "%s.experts.%s.weight", b,
            mx ? "w1" : "gate_proj"));
    TRY(add(c, &l->e_up, true, 3, eg, 0, NULL, "%s.experts.%s.weight", b, mx ? "w3" : "up_proj"));
    TRY(add(c, &l->e_down, true, 3, ed, 0, NULL, "%s.experts.%s.weight", b,
            mx ? "w2" : "down_proj"));
    if (oss) { /* HF gate_up_proj_bias [E, 2I] (gate even, up odd) and down_proj_bias [E, H] */
        int64_t gb[2] = {m->E, m->Im}, db[2] = {m->E, H};
        TRY(add(c, &l->e_gate_b, false, 2, gb, 0, NULL, "mlp.experts.gate_proj.bias"));
        TRY(add(c, &l->e_up_b, false, 2, gb, 0, NULL, "mlp.experts.up_proj.bias"));
        TRY(add(c, &l->e_down_b, false, 2, db, 0, NULL, "mlp.experts.down_proj.bias"));
    }
    if (m->Is) {
        const char *sh = m->shared;
        TRY(add(c, &l->s_gate, true, 2, (int64_t[2]){m->Is, H}, 0, NULL, "mlp.%s.gate_proj.weight",
                sh));
        TRY(add(c, &l->s_up, true, 2, (int64_t[2]){m->Is, H}, 0, NULL, "mlp.%s.up_proj.weight",
                sh));
        TRY(add(c, &l->s_down, true, 2, (int64_t[2]){H, m->Is}, 0, NULL, "mlp.%s.down_proj.weight",
                sh));
        if (m->shared_gate)
            TRY(mat(c, &l->s_sigmoid, false, 1, H, "mlp.shared_expert_gate.weight"));
    }
    return RESHARD_OK;
}

static reshard_status_t build(cat_t *c)
{
    const reshard_model_t *m = c->m;
    rs_model_ids_t *ids = c->ids;
    int64_t H = m->H;
    ids->nlayers = m->L + m->nmtp;
    ids->layer = malloc((size_t)ids->nlayers * sizeof *ids->layer + 1);
    if (!ids->layer)
        return rs_error(RESHARD_ERR_NOMEM, "catalogue: out of memory");
    c->prefix[0] = '\0';
    TRY(mat(c, &ids->embed, false, m->V, H, "model.embed_tokens.weight"));
    for (int32_t i = 0; i < ids->nlayers; i++) {
        rs_layer_ids_t *l = &ids->layer[i];
        memset(l, 0xff, sizeof *l); /* every id -1 */
        bool mtp = i >= m->L;
        l->hf_index = mtp ? m->Lcfg + (i - m->L) : i;
        snprintf(c->prefix, sizeof c->prefix, "model.layers.%d.", l->hf_index);
        if (mtp) {
            TRY(vec(c, &l->enorm, H, "enorm.weight"));
            TRY(vec(c, &l->hnorm, H, "hnorm.weight"));
            /* vLLM deepseek_mtp.py builds eh_proj as a plain nn.Linear without the
             * quant config: bf16 and no weight_scale_inv in every form. */
            TRY(mat(c, &l->eh_proj, false, H, 2 * H, "eh_proj.weight"));
        }
        TRY(vec(c, &l->in_norm, H, "input_layernorm.weight"));
        if (m->fam == RS_FAM_QWEN3_NEXT && rs_gdn_layer(m, l->hf_index))
            TRY(rs_gdn_catalogue(c, l, c->prefix));
        else
            TRY(attention(c, l));
        TRY(vec(c, &l->post_norm, H, "post_attention_layernorm.weight"));
        TRY(mlp(c, l, m->moe[i]));
        if (mtp)
            TRY(vec(c, &l->head_norm, H, "shared_head.norm.weight"));
    }
    c->prefix[0] = '\0';
    TRY(vec(c, &ids->norm, H, "model.norm.weight"));
    if (m->tied)
        ids->lm_head = ids->embed;
    else
        TRY(mat(c, &ids->lm_head, false, m->V, H, "lm_head.weight"));
    return RESHARD_OK;
}

void rs_model_ids_free(rs_model_ids_t *ids)
{
    if (!ids)
        return;
    free(ids->layer);
    free(ids->scale);
    free(ids->expert);
    free(ids->scale_j);
    memset(ids, 0, sizeof *ids);
}

reshard_status_t rs_model_catalogue(const reshard_model_t *m, reshard_tensors_t *tensors,
                                    rs_model_ids_t *ids)
{
    memset(ids, 0, sizeof *ids);
    cat_t c = {.m = m, .T = tensors, .ids = ids};
    reshard_status_t s = m->fam == RS_FAM_NEMOTRON_H ? rs_hybrid_catalogue(&c) : build(&c);
    if (s != RESHARD_OK)
        rs_model_ids_free(ids);
    return s;
}

reshard_status_t rs_model_ids_for(const reshard_model_t *m, const reshard_tensors_t *tensors,
                                  rs_model_ids_t *ids)
{
    reshard_status_t s = rs_model_catalogue(m, NULL, ids);
    if (s != RESHARD_OK)
        return s;
    reshard_tensor_info_t a, b;
    if (reshard_tensors_count(tensors) != ids->n ||
        reshard_tensors_info(tensors, 0, &a) != RESHARD_OK ||
        reshard_tensors_info(tensors, ids->n - 1, &b) != RESHARD_OK ||
        strcmp(a.name, m->fam == RS_FAM_NEMOTRON_H ? "backbone.embeddings.weight"
                                                   : "model.embed_tokens.weight") != 0) {
        rs_model_ids_free(ids);
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "layout: the tensors catalogue was not made by reshard_model_tensors for "
                        "model '%s'",
                        m->name);
    }
    return RESHARD_OK;
}

reshard_status_t reshard_model_tensors(const reshard_model_t *model, reshard_tensors_t **out)
{
    rs_error_clear();
    if (!model || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_tensors: NULL argument");
    reshard_tensors_t *t;
    reshard_status_t s = reshard_tensors_create(&t);
    if (s != RESHARD_OK)
        return s;
    rs_model_ids_t ids;
    s = rs_model_catalogue(model, t, &ids);
    if (s != RESHARD_OK) {
        reshard_tensors_destroy(t);
        return s;
    }
    rs_model_ids_free(&ids);
    *out = t;
    return RESHARD_OK;
}
