/* The vLLM inference layout (vLLM conventions: per-rank [q; k; v] with kv-head replication,
 * gate_up, vocab padding to 64, w13/w2 expert stacks). */
#include <stdio.h>
#include <stdlib.h>

#include "model/model_internal.h"
#include "util/error.h"

/* Every parameter name that differs between the vLLM versions reshard
 * models (reshard_vllm_version_t), in one table: the suffix after a MoE
 * module's "experts.", per version.
 *   0.24: FusedMoE holds w13_weight / w2_weight itself (vLLM 9aaf83e,
 *         model_executor/layers/fused_moe/layer.py 747-752).
 *   0.25: PR #41184 moves the routed experts onto a nested module,
 *         MoERunner.routed_experts (runner/moe_runner.py; routed_experts.py
 *         build_expert_params_mapping): "experts.routed_experts.w13_weight". */
static const char *const vllm_names[RS_VN_N][3] = {
    /*            default (0.25)                0.24          0.25 */
    [RS_VN_W13] = {"routed_experts.w13_weight", "w13_weight", "routed_experts.w13_weight"},
    [RS_VN_W2] = {"routed_experts.w2_weight", "w2_weight", "routed_experts.w2_weight"},
    /* FusedMoE(has_bias=True) (gpt_oss.py): the biases live beside the weights */
    [RS_VN_W13_BIAS] = {"routed_experts.w13_bias", "w13_bias", "routed_experts.w13_bias"},
    [RS_VN_W2_BIAS] = {"routed_experts.w2_bias", "w2_bias", "routed_experts.w2_bias"},
};

const char *rs_vllm_name(const reshard_infer_spec_t *s, rs_vllm_name_t which)
{
    return vllm_names[which][rs_vllm(s)];
}

/* qkv_proj weight (or bias: @p bias) of TP rank t: [its q heads; its kv
 * heads (k); the same (v)], each head_dim rows (of H). With tp > kv heads,
 * kv head t / (tp / kv) is replicated on tp / kv consecutive ranks
 * (linear.py QKVParallelLinear). With the attention output gate
 * (qwen3_next.py: QKVParallelLinear over 2 x heads) each q head is 2 x
 * head_dim rows, HF's [q_h; gate_h], kept in that order. */
static reshard_status_t qkv(rs_emit_t *e, const int32_t id[3], bool bias, int32_t tp, int32_t t,
                            const char *name)
{
    const reshard_model_t *m = e->m;
    int64_t H = bias ? 1 : m->H, hd = m->hd, kv = m->kv, hpg = m->nh / kv;
    int64_t qm = m->attn_gate ? 2 : 1; /* row blocks of hd per q head */
    int64_t nq = m->nh / tp, h0 = t * nq;
    int64_t nkv = tp <= kv ? kv / tp : 1, k0 = tp <= kv ? t * nkv : t / (tp / kv);
    int32_t b = rs_emit_buffer(e, id[0], 1, (qm * nq + 2 * nkv) * hd, H, "%s", name);
    if (b < 0)
        return (reshard_status_t)b;
    int64_t ng = nq >= hpg ? nq / hpg : 1, nj = nq >= hpg ? hpg : nq;
    if (qm == 2) { /* q view [kv, hpg, 2, hd, H] */
        int64_t qo[5] = {h0 / hpg, h0 % hpg, 0, 0, 0}, qe[5] = {ng, nj, 2, hd, H};
        int64_t qs[5] = {hpg * 2 * hd * H, 2 * hd * H, hd * H, H, 1};
        TRY(rs_emit(e, id[0], b, qo, qe, 0, qs));
    } else { /* q view [kv, hpg, hd, (H)] */
        int64_t qo[4] = {h0 / hpg, h0 % hpg, 0, 0}, qe[4] = {ng, nj, hd, H};
        int64_t qs[4] = {hpg * hd * H, hd * H, H, 1};
        TRY(rs_emit(e, id[0], b, qo, qe, 0, qs));
    }
    int64_t ko[3] = {k0, 0, 0}, ke[3] = {nkv, hd, H}, ks[3] = {hd * H, H, 1};
    TRY(rs_emit(e, id[1], b, ko, ke, qm * nq * hd * H, ks));
    return rs_emit(e, id[2], b, ko, ke, (qm * nq + nkv) * hd * H, ks);
}

reshard_status_t rs_vllm_experts(rs_emit_t *e, const rs_layer_ids_t *l,
                                 const reshard_infer_spec_t *s, int32_t r, const char *w13,
                                 const char *w2)
{
    const reshard_model_t *m = e->m;
    int64_t eps = (int64_t)s->tp * s->dp, e0, ne, i0, ni;
    if (rs_eplb_on(s)) { /* EPLB: P/eps physical slots, each holding its logical expert */
        int64_t per = ((int64_t)m->E + s->redundant) / eps;
        int32_t row = rs_eplb_row(m, (int32_t)(l - e->ids->layer));
        int32_t *logical = malloc((size_t)per * sizeof *logical);
        if (!logical)
            return rs_error(RESHARD_ERR_NOMEM, "EPLB slots: out of memory");
        for (int64_t k = 0; k < per; k++)
            logical[k] = rs_eplb_slot(m, s, e->side_rank / rs_engine_world(s), row, r * per + k);
        reshard_status_t st = rs_emit_expert_slots(e, l, logical, per, 0, m->Im, w13, w2);
        free(logical);
        return st;
    }
    if (s->ep) { /* whole experts, contiguous, remainder to the first ranks */
        int64_t base = m->E / eps, rem = m->E % eps;
        ne = base + (r < rem);
        e0 = r * base + (r < rem ? r : rem);
        i0 = 0;
        ni = m->Im;
    } else {
        /* fused_moe/config.py: without EP the expert-TP group is
         * flattened to tp*dp; rank r = dp_rank*tp + tp_rank holds slice r */
        e0 = 0;
        ne = m->E;
        ni = m->Im / eps;
        i0 = r * ni;
    }
    return rs_emit_experts(e, l, e0, ne, i0, ni, false, w13, w2);
}

/* fused_qkv_a_proj: replicated [q_a rows; kv_a rows] of H. */
reshard_status_t rs_vllm_qkv_a(rs_emit_t *e, const rs_layer_ids_t *l, const char *name)
{
    const reshard_model_t *m = e->m;
    int64_t rows = m->q_lora + m->kv_lora + m->rope;
    int32_t b = rs_emit_buffer(e, l->q_a, 1, rows, m->H, "%s", name);
    if (b < 0)
        return (reshard_status_t)b;
    TRY(rs_emit_full(e, l->q_a, b, 0));
    return rs_emit_full(e, l->kv_a, b, m->q_lora * m->H);
}

static reshard_status_t layer(rs_emit_t *e, const reshard_infer_spec_t *s, int32_t r, int32_t i)
{
    const reshard_model_t *m = e->m;
    const rs_layer_ids_t *l = &e->ids->layer[i];
    char p[96], n[160], n2[160];
    bool mtp = i >= m->L;
    int32_t tp = s->tp, t = r % tp;
    if (mtp) {
        rs_name_join(p, sizeof p, "", "model.layers.", l->hf_index, ".");
        TRY(rs_emit_own(e, l->enorm, rs_nm(n, sizeof n, p, "enorm.weight")));
        TRY(rs_emit_own(e, l->hnorm, rs_nm(n, sizeof n, p, "hnorm.weight")));
        TRY(rs_emit_own(e, l->eh_proj, rs_nm(n, sizeof n, p, "eh_proj.weight")));
        rs_name_join(p, sizeof p, "", "model.layers.", l->hf_index, ".mtp_block.");
    } else {
        rs_name_join(p, sizeof p, "", "model.layers.", l->hf_index, ".");
    }
    TRY(rs_emit_own(e, l->in_norm, rs_nm(n, sizeof n, p, "input_layernorm.weight")));
    if (l->gdn_qkvz >= 0) { /* qwen3_next: a Gated DeltaNet layer (qwen3_next.c) */
        TRY(rs_gdn_vllm(e, l, tp, t, p));
    } else if (m->fam != RS_FAM_DSV3) {
        TRY(qkv(e, (int32_t[3]){l->q, l->k, l->v}, false, tp, t,
                rs_nm(n, sizeof n, p, "self_attn.qkv_proj.weight")));
        if (l->q_bias >= 0)
            TRY(qkv(e, (int32_t[3]){l->q_bias, l->k_bias, l->v_bias}, true, tp, t,
                    rs_nm(n, sizeof n, p, "self_attn.qkv_proj.bias")));
        if (m->qk_norm) {
            TRY(rs_emit_own(e, l->q_norm, rs_nm(n, sizeof n, p, "self_attn.q_norm.weight")));
            TRY(rs_emit_own(e, l->k_norm, rs_nm(n, sizeof n, p, "self_attn.k_norm.weight")));
        }
    } else {
        if (m->q_lora) {
            TRY(rs_vllm_qkv_a(e, l, rs_nm(n, sizeof n, p, "self_attn.fused_qkv_a_proj.weight")));
            TRY(rs_emit_own(e, l->q_a_norm,
                            rs_nm(n, sizeof n, p, "self_attn.q_a_layernorm.weight")));
            TRY(rs_emit_column(e, l->q_b, tp, t,
                               rs_nm(n, sizeof n, p, "self_attn.q_b_proj.weight")));
        } else {
            TRY(rs_emit_column(e, l->q, tp, t, rs_nm(n, sizeof n, p, "self_attn.q_proj.weight")));
            TRY(rs_emit_own(e, l->kv_a,
                            rs_nm(n, sizeof n, p, "self_attn.kv_a_proj_with_mqa.weight")));
        }
        TRY(rs_emit_own(e, l->kv_a_norm, rs_nm(n, sizeof n, p, "self_attn.kv_a_layernorm.weight")));
        TRY(rs_emit_column(e, l->kv_b, tp, t, rs_nm(n, sizeof n, p, "self_attn.kv_b_proj.weight")));
    }
    if (l->o >= 0)
        TRY(rs_emit_row(e, l->o, tp, t, rs_nm(n, sizeof n, p, "self_attn.o_proj.weight")));
    TRY(rs_emit_own(e, l->post_norm, rs_nm(n, sizeof n, p, "post_attention_layernorm.weight")));
    if (l->gate >= 0) {
        int64_t ni = m->I / tp;
        TRY(rs_emit_mlp(e, l->gate, l->up, l->down, t * ni, ni,
                        rs_nm(n, sizeof n, p, "mlp.gate_up_proj.weight"),
                        rs_nm(n2, sizeof n2, p, "mlp.down_proj.weight")));
    } else {
        /* mixtral: block_sparse_moe.gate / .experts; others mlp. */
        char q[128];
        rs_name_join(q, sizeof q, p, m->moe_block, -1, ".");
        /* glm4_moe.py (vLLM 002d607) creates the gate as nn.Linear(dtype=float32):
         * vLLM holds it fp32, the trainer bf16, and the refit changes no dtype
         * on the way (beyond the FP8 forms). The bf16 router lands in a buffer of
         * its own, "...mlp.gate.weight_bf16", which the worker widens into
         * gate.weight (exact), as NemotronH's A_log becomes A. */
        TRY(rs_emit_own(
            e, l->router,
            rs_nm(n, sizeof n, q, m->fam == RS_FAM_GLM4_MOE ? "gate.weight_bf16" : "gate.weight")));
        if (l->router_bias >= 0)
            TRY(rs_emit_own(e, l->router_bias,
                            rs_nm(n, sizeof n, q, "gate.e_score_correction_bias")));
        rs_name_join(n, sizeof n, q, "experts.", -1, rs_vllm_name(s, RS_VN_W13));
        rs_name_join(n2, sizeof n2, q, "experts.", -1, rs_vllm_name(s, RS_VN_W2));
        TRY(rs_vllm_experts(e, l, s, r, n, n2));
        if (l->s_gate >= 0) {
            /* deepseek_v2.py DeepseekV2MoE and qwen3_next.py
             * Qwen3NextSparseMoeBlock: the shared experts get
             * disable_tp=is_sequence_parallel (vLLM's sequence-parallel MoE:
             * every rank holds them whole; Qwen3-Next's Qwen2MoeMLP takes
             * disable_tp); qwen2_moe.py's own block passes none: its
             * shared_expert is TP-split always (vLLM 002fb90) */
            bool whole = (m->fam == RS_FAM_DSV3 || m->fam == RS_FAM_QWEN3_NEXT) &&
                         rs_vllm_sequence_parallel_moe(s);
            int64_t ns = whole ? m->Is : m->Is / tp;
            char mlp[128];
            rs_name_join(mlp, sizeof mlp, p, "mlp.", -1, "");
            rs_name_join(q, sizeof q, mlp, m->shared, -1, ".");
            TRY(rs_emit_mlp(e, l->s_gate, l->s_up, l->s_down, whole ? 0 : t * ns, ns,
                            rs_nm(n, sizeof n, q, "gate_up_proj.weight"),
                            rs_nm(n2, sizeof n2, q, "down_proj.weight")));
        }
        if (l->s_sigmoid >= 0) /* qwen2_moe.py: torch.nn.Linear(H, 1), replicated */
            TRY(rs_emit_own(e, l->s_sigmoid,
                            rs_nm(n, sizeof n, p, "mlp.shared_expert_gate.weight")));
        else if (m->fam == RS_FAM_QWEN2_MOE) {
            /* qwen2_moe.py Qwen2MoeSparseMoeBlock creates shared_expert_gate
             * even when shared_expert_intermediate_size is 0 (then there is
             * no shared expert and the gate is never used; Megatron holds
             * no such parameter). Declared, so that the engine's
             * named_parameters() bind, and written by no fragment: the refit
             * leaves it as loaded. bf16 [1, H], the router's dtype. */
            int32_t b = rs_emit_buffer(e, l->router, 1, 1, m->H, "%s",
                                       rs_nm(n, sizeof n, p, "mlp.shared_expert_gate.weight"));
            if (b < 0)
                return (reshard_status_t)b;
        }
    }
    if (mtp) {
        rs_name_join(p, sizeof p, "", "model.layers.", l->hf_index, ".");
        TRY(rs_emit_own(e, l->head_norm, rs_nm(n, sizeof n, p, "shared_head.norm.weight")));
    }
    return RESHARD_OK;
}

static reshard_status_t rank_params(rs_emit_t *e, const reshard_infer_spec_t *s, int32_t r)
{
    const reshard_model_t *m = e->m;
    const rs_model_ids_t *ids = e->ids;
    int64_t vpad = rs_roundup(m->V, 64);
    int32_t t = r % s->tp;
    bool oss = m->fam == RS_FAM_GPT_OSS; /* gpt_oss.py: GptOssModel.embedding */
    TRY(rs_emit_vocab(e, ids->embed, vpad, s->tp, t,
                      oss ? "model.embedding.weight" : "model.embed_tokens.weight"));
    bool hybrid = m->fam == RS_FAM_NEMOTRON_H;
    for (int32_t i = 0; i < ids->nlayers; i++)
        TRY(hybrid ? rs_hybrid_vllm_layer(e, s, r, i)
            : oss  ? rs_gpt_oss_vllm_layer(e, s, r, i)
                   : layer(e, s, r, i));
    TRY(rs_emit_own(e, ids->norm, hybrid ? "model.norm_f.weight" : "model.norm.weight"));
    /* Tied: lm_head is embed_tokens (one parameter). */
    if (!m->tied)
        TRY(rs_emit_vocab(e, ids->lm_head, vpad, s->tp, t, "lm_head.weight"));
    return RESHARD_OK;
}

/* Side rank r is rank r % (tp*dp) of engine r / (tp*dp): every engine holds
 * the whole model alike. */
static reshard_status_t infer_rank(rs_emit_t *e, int32_t r, const void *spec)
{
    const reshard_infer_spec_t *s = spec;
    int32_t local = r % rs_engine_world(s);
    return s->engine == RESHARD_ENGINE_SGLANG ? rs_sglang_rank_params(e, s, local)
                                              : rank_params(e, s, local);
}

reshard_status_t reshard_model_infer_layout(const reshard_model_t *model,
                                            const reshard_tensors_t *tensors,
                                            const reshard_infer_spec_t *spec, int32_t rank_offset,
                                            reshard_layout_t **out,
                                            reshard_model_buffers_t **buffers)
{
    rs_error_clear();
    if (!model || !tensors || !spec || !out || rank_offset < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_infer_layout: bad argument");
    return rs_infer_emit(model, tensors, spec, rank_offset, NULL, out, buffers);
}

reshard_status_t rs_infer_emit(const reshard_model_t *model, const reshard_tensors_t *tensors,
                               const reshard_infer_spec_t *spec, int32_t rank_offset,
                               const rs_emit_scope_t *scope, reshard_layout_t **out,
                               reshard_model_buffers_t **buffers)
{
    reshard_status_t s = rs_check_infer(model, spec);
    if (s != RESHARD_OK)
        return s;
    char text[64];
    uint64_t origin = rs_eplb_hash(
        model, spec,
        rs_side_origin(model, false, reshard_infer_spec_str(spec, text, sizeof text), rank_offset));
    return rs_emit_side(model, tensors, false, reshard_infer_world(spec), rank_offset, infer_rank,
                        spec, scope, origin, out, buffers);
}

reshard_status_t rs_vllm_qkv(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                             const char *name)
{
    const int32_t ids[3] = {l->q, l->k, l->v};
    return qkv(e, ids, false, tp, t, name);
}

reshard_status_t rs_vllm_qkv_bias(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                                  const char *name)
{
    const int32_t ids[3] = {l->q_bias, l->k_bias, l->v_bias};
    return qkv(e, ids, true, tp, t, name);
}
