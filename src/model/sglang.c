/* The SGLang inference layout: which slice of every parameter each rank of
 * one SGLang server holds, under TP, DP attention and expert parallelism.
 * Source: SGLang at 1am9trash/sglang@a17753e449fb4a33070de071942da9cff1e2010e
 * (sgl-project/sglang main of 2026-06-22, PR #26880); the facts with their
 * file:line are in docs/sglang-layouts.md. */
#include <stdio.h>

#include "model/model_internal.h"
#include "util/error.h"

/* The groups of TP rank t of one server (all sizes divide tp, spec checked):
 * dp_attention.py:245-259 compute_dp_attention_world_info (attention TP is the
 * innermost dim: attn_tp_rank = t % (tp/dp)); engine.py:1410-1427 and
 * parallel_state.py:2034-2110 (moe_dp 1: moe_ep_rank = t / (tp/ep), the MoE TP
 * group the contiguous tp/ep ranks). */
typedef struct {
    int32_t tp, t;   /* the server's TP group: dense MLPs (qwen2.py:64-85) */
    int32_t atp, at; /* attention TP: qkv/o_proj, MLA, embed_tokens */
    int32_t mtp, mt; /* MoE TP: each expert's intermediate rows */
    int32_t ep, er;  /* MoE EP: whole experts */
} sgl_rank_t;

static int32_t ep_size(const reshard_infer_spec_t *s)
{
    return !s->ep ? 1 : s->ep_size > 0 ? s->ep_size : s->tp;
}

static int32_t attn_dp(const reshard_infer_spec_t *s)
{
    return s->dp_attention ? s->dp : 1;
}

static sgl_rank_t coords(const reshard_infer_spec_t *s, int32_t t)
{
    int32_t atp = s->tp / attn_dp(s), mtp = s->tp / ep_size(s);
    return (sgl_rank_t){s->tp, t, atp, t % atp, mtp, t % mtp, ep_size(s), t / mtp};
}

/* deepseek_v2.py:2650-2715 determine_num_fused_shared_experts, on an NVIDIA
 * GPU of compute capability >= 8.0 without DeepEP, SBO or TBO: DeepSeek-V3
 * (256 routed experts, one shared) fuses its shared expert into the MoE as
 * expert 256 unless --disable-shared-experts-fusion or moe_ep_size > 1. */
static bool shared_fused(const reshard_model_t *m, const reshard_infer_spec_t *s)
{
    return m->fam == RS_FAM_DSV3 && m->E == 256 && m->nshared == 1 && !s->shared_fusion_off &&
           s->a2a == RESHARD_SGLANG_A2A_NONE && ep_size(s) == 1;
}

reshard_status_t rs_sglang_spec_rules(const reshard_infer_spec_t *s, reshard_status_t code)
{
    int32_t tp = s->tp, dp = s->dp;
    if (dp > 1 && !s->dp_attention)
        return rs_error(code,
                        "infer (sglang): dp=%d without dp_attention=on: SGLang's --dp-size "
                        "without --enable-dp-attention runs %d independent replicas of the "
                        "model; give engines=%d (independent servers) instead, or "
                        "dp_attention=on for DP attention inside one server",
                        dp, dp, dp);
    if (tp < 1 || dp < 1)
        return rs_error(code, "infer (sglang): tp and dp must be >= 1");
    if (s->dp_attention && tp % dp)
        return rs_error(code,
                        "infer (sglang): dp=%d does not divide tp=%d (SGLang's DP attention "
                        "splits the tp ranks of a server into dp attention groups: "
                        "server_args.py:5057 asserts tp_size %% dp_size == 0)",
                        dp, tp);
    if (s->ep_size < 0 || (s->ep_size > 0 && (!s->ep || tp % s->ep_size)))
        return rs_error(code,
                        "infer (sglang): ep=%d does not divide tp=%d (SGLang's --ep-size splits "
                        "the tp ranks of a server: moe_tp_size = tp_size / ep_size)",
                        s->ep_size, tp);
    if (s->dp_lm_head && !s->dp_attention)
        return rs_error(code, "infer (sglang): dp_lm_head=on needs dp_attention=on (SGLang "
                              "server_args.py:5063-5066)");
    if (s->a2a == RESHARD_SGLANG_A2A_DEEPEP && ep_size(s) != tp)
        return rs_error(code, "infer (sglang): a2a=deepep sets --ep-size to tp (server_args.py:"
                              "5288-5293): give ep=on");
    if ((unsigned)s->a2a > RESHARD_SGLANG_A2A_DEEPEP ||
        (s->moe_dense_tp != 0 && s->moe_dense_tp != 1))
        return rs_error(code, "infer (sglang): a2a %d or moe_dense_tp %d is not modelled", s->a2a,
                        s->moe_dense_tp);
    return RESHARD_OK;
}

reshard_status_t rs_sglang_check(const reshard_model_t *m, const reshard_infer_spec_t *s)
{
    TRY(rs_sglang_spec_rules(s, RESHARD_ERR_CONFIG));
    RULE(s->engines >= 0, "infer: engines=%d must be >= 1", s->engines);
    RULE(reshard_infer_world(s) > 0, "infer (sglang): the world (engines*tp) must fit in int32");
    RULE(!s->vllm && !s->redundant && !s->eplb_map,
         "infer (sglang): vllm= and EPLB (redundant=, a map) are vLLM settings; SGLang's own "
         "--ep-num-redundant-experts / --enable-eplb are not modelled");
    bool qwen3 = m->fam == RS_FAM_DENSE && m->qk_norm;
    RULE(m->fam == RS_FAM_DENSE || m->fam == RS_FAM_QWEN3_MOE || m->fam == RS_FAM_DSV3,
         "infer (sglang): the model's family is not modelled under engine=sglang (modelled: "
         "dense qwen3, qwen2 and llama; qwen3_moe; deepseek_v3)");
    RULE(!s->dp_attention || m->fam != RS_FAM_DENSE || qwen3,
         "infer (sglang): dp_attention=on with a llama or qwen2 model: SGLang's llama.py and "
         "qwen2.py attention uses the whole TP group (not modelled; qwen3 is)");
    RULE(m->nmtp == 0,
         "infer (sglang): the MTP layers are SGLang's separate draft model (deepseek_nextn.py), "
         "not modelled: load the model without mtp");
    RULE(m->dtype == RESHARD_BF16 && m->quant == RESHARD_QUANT_NONE,
         "infer (sglang): only bf16 weights are modelled under engine=sglang (FP8 forms are not)");
    int32_t atp = s->tp / attn_dp(s), ep = ep_size(s), mtp = s->tp / ep;
    /* qwen3.py:90-101, QKVParallelLinear linear.py:944-955 */
    RULE(m->nh % atp == 0, "infer (sglang): attention TP %d (tp/dp) does not divide the %d heads",
         atp, m->nh);
    if (m->fam != RS_FAM_DSV3)
        RULE(m->kv % atp == 0 || atp % m->kv == 0,
             "infer (sglang): attention TP %d (tp/dp) does not divide the %d kv heads nor is a "
             "multiple of them",
             atp, m->kv);
    RULE(m->I % s->tp == 0, "infer (sglang): tp=%d does not divide the MLP intermediate size %lld",
         s->tp, (long long)m->I);
    /* vocab_parallel_embedding.py:273-318: padded to 64, divide() by the group */
    int64_t vpad = rs_roundup(m->V, 64);
    int32_t head = s->dp_lm_head ? atp : s->tp; /* lm_head's group (none when tied) */
    RULE(vpad % atp == 0 && (m->tied || vpad % head == 0),
         "infer (sglang): the vocabulary padded to 64 (%lld) does not split over the %d ranks "
         "of %s",
         (long long)vpad, vpad % atp ? atp : head,
         vpad % atp ? "embed_tokens' group" : "lm_head's group");
    bool moe = m->fam != RS_FAM_DENSE;
    if (!moe) {
        RULE(!s->ep && s->a2a == RESHARD_SGLANG_A2A_NONE,
             "infer (sglang): ep and a2a: the model has no experts");
        return RESHARD_OK;
    }
    /* fused_moe_triton/layer.py:210-217 */
    RULE(m->E % ep == 0, "infer (sglang): ep=%d does not divide the %d experts", ep, m->E);
    RULE(m->Im % mtp == 0,
         "infer (sglang): the MoE TP size %d (tp/ep) does not divide the expert intermediate size "
         "%lld",
         mtp, (long long)m->Im);
    if (m->fam == RS_FAM_QWEN3_MOE) /* qwen3_moe.py:240-244 */
        RULE(mtp <= m->E, "infer (sglang): the MoE TP size %d is more than the %d experts", mtp,
             m->E);
    if (m->Is && !shared_fused(m, s) && s->a2a == RESHARD_SGLANG_A2A_NONE)
        RULE(m->Is % s->tp == 0,
             "infer (sglang): tp=%d does not divide the shared-expert intermediate size %lld",
             s->tp, (long long)m->Is);
    if (shared_fused(m, s))
        RULE(m->Is == m->Im && m->Im % mtp == 0,
             "infer (sglang): the fused shared expert needs its intermediate size %lld to be the "
             "routed experts' %lld",
             (long long)m->Is, (long long)m->Im);
    return RESHARD_OK;
}

const char *rs_sglang_spec_str(const reshard_infer_spec_t *s, char *out, size_t size)
{
    int n = snprintf(out, size, "engine=sglang,tp=%d", s->tp);
#define MORE(...)                                                                                  \
    do {                                                                                           \
        if (n >= 0 && (size_t)n < size)                                                            \
            n += snprintf(out + n, size - (size_t)n, __VA_ARGS__);                                 \
    } while (0)
    if (s->dp_attention)
        MORE(",dp=%d,dp_attention=on", s->dp);
    if (s->ep && s->ep_size > 0)
        MORE(",ep=%d", s->ep_size);
    else if (s->ep)
        MORE(",ep=on");
    if (rs_engines(s) > 1)
        MORE(",engines=%d", s->engines);
    if (s->dp_lm_head)
        MORE(",dp_lm_head=on");
    if (s->moe_dense_tp == 1)
        MORE(",moe_dense_tp=1");
    if (s->a2a == RESHARD_SGLANG_A2A_DEEPEP)
        MORE(",a2a=deepep");
    if (s->shared_fusion_off)
        MORE(",shared_fusion=off");
#undef MORE
    return out;
}

/* MLA (deepseek_v2.py:1536-1631): fused_qkv_a_proj_with_mqa replicated
 * ([q_a; kv_a], deepseek_weight_loader.py:277-325), q_b_proj / q_proj and
 * kv_b_proj column-parallel over attention TP. w_kc / w_vc are derived from
 * kv_b_proj by SGLang's post_load_weights (deepseek_weight_loader.py:411-621):
 * not parameters, not written here. */
static reshard_status_t mla(rs_emit_t *e, const rs_layer_ids_t *l, const sgl_rank_t *c,
                            const char *p)
{
    const reshard_model_t *m = e->m;
    char n[160];
    if (m->q_lora) {
        TRY(rs_vllm_qkv_a(e, l,
                          rs_nm(n, sizeof n, p, "self_attn.fused_qkv_a_proj_with_mqa.weight")));
        TRY(rs_emit_own(e, l->q_a_norm, rs_nm(n, sizeof n, p, "self_attn.q_a_layernorm.weight")));
        TRY(rs_emit_column(e, l->q_b, c->atp, c->at,
                           rs_nm(n, sizeof n, p, "self_attn.q_b_proj.weight")));
    } else {
        TRY(rs_emit_column(e, l->q, c->atp, c->at,
                           rs_nm(n, sizeof n, p, "self_attn.q_proj.weight")));
        TRY(rs_emit_own(e, l->kv_a, rs_nm(n, sizeof n, p, "self_attn.kv_a_proj_with_mqa.weight")));
    }
    TRY(rs_emit_own(e, l->kv_a_norm, rs_nm(n, sizeof n, p, "self_attn.kv_a_layernorm.weight")));
    return rs_emit_column(e, l->kv_b, c->atp, c->at,
                          rs_nm(n, sizeof n, p, "self_attn.kv_b_proj.weight"));
}

/* The MoE block (qwen3_moe.py:228-276, deepseek_v2.py:520-715): the router
 * replicated, the experts as FusedMoE holds them (layer.py:197-217, 441-503,
 * 603-611: EP rank er holds experts [er*E/ep, (er+1)*E/ep), each its MoE TP
 * rank's intermediate rows, w13 = [gate; up]), DeepSeek's shared expert
 * fused as the last w13/w2 row or a TP-split MLP (whole under DeepEP). */
static reshard_status_t moe(rs_emit_t *e, const rs_layer_ids_t *l, const reshard_infer_spec_t *s,
                            const sgl_rank_t *c, const char *p)
{
    const reshard_model_t *m = e->m;
    char n[160], n2[160];
    TRY(rs_emit_own(e, l->router, rs_nm(n, sizeof n, p, "mlp.gate.weight")));
    if (l->router_bias >= 0)
        TRY(rs_emit_own(e, l->router_bias,
                        rs_nm(n, sizeof n, p, "mlp.gate.e_score_correction_bias")));
    int64_t nl = m->E / c->ep, ni = m->Im / c->mtp;
    rs_nm(n, sizeof n, p, "mlp.experts.w13_weight");
    rs_nm(n2, sizeof n2, p, "mlp.experts.w2_weight");
    if (l->s_gate >= 0 && shared_fused(m, s))
        return rs_emit_experts_fused_shared(e, l, c->er * nl, nl, c->mt * ni, ni, n, n2);
    TRY(rs_emit_experts(e, l, c->er * nl, nl, c->mt * ni, ni, false, n, n2));
    if (l->s_gate < 0)
        return RESHARD_OK;
    bool whole = s->a2a == RESHARD_SGLANG_A2A_DEEPEP; /* deepseek_v2.py:694-713 tp_size=1 */
    int64_t ns = whole ? m->Is : m->Is / c->tp;
    return rs_emit_mlp(e, l->s_gate, l->s_up, l->s_down, whole ? 0 : c->t * ns, ns,
                       rs_nm(n, sizeof n, p, "mlp.shared_experts.gate_up_proj.weight"),
                       rs_nm(n2, sizeof n2, p, "mlp.shared_experts.down_proj.weight"));
}

static reshard_status_t layer(rs_emit_t *e, const reshard_infer_spec_t *s, const sgl_rank_t *c,
                              int32_t i)
{
    const reshard_model_t *m = e->m;
    const rs_layer_ids_t *l = &e->ids->layer[i];
    char p[96], n[160], n2[160];
    rs_name_join(p, sizeof p, "", "model.layers.", l->hf_index, ".");
    TRY(rs_emit_own(e, l->in_norm, rs_nm(n, sizeof n, p, "input_layernorm.weight")));
    if (m->fam == RS_FAM_DSV3) {
        TRY(mla(e, l, c, p));
    } else { /* QKVParallelLinear over attention TP (qwen3.py:121-139, qwen3_moe.py:485-503) */
        TRY(rs_vllm_qkv(e, l, c->atp, c->at, rs_nm(n, sizeof n, p, "self_attn.qkv_proj.weight")));
        if (l->q_bias >= 0)
            TRY(rs_vllm_qkv_bias(e, l, c->atp, c->at,
                                 rs_nm(n, sizeof n, p, "self_attn.qkv_proj.bias")));
        if (m->qk_norm) {
            TRY(rs_emit_own(e, l->q_norm, rs_nm(n, sizeof n, p, "self_attn.q_norm.weight")));
            TRY(rs_emit_own(e, l->k_norm, rs_nm(n, sizeof n, p, "self_attn.k_norm.weight")));
        }
    }
    TRY(rs_emit_row(e, l->o, c->atp, c->at, rs_nm(n, sizeof n, p, "self_attn.o_proj.weight")));
    TRY(rs_emit_own(e, l->post_norm, rs_nm(n, sizeof n, p, "post_attention_layernorm.weight")));
    if (l->gate < 0)
        return moe(e, l, s, c, p);
    /* dense MLP over the whole TP group (qwen2.py:64-85); DeepSeek's with
     * --moe-dense-tp-size 1 whole (deepseek_v2.py:2033-2046) */
    bool whole = m->fam == RS_FAM_DSV3 && s->moe_dense_tp == 1;
    int64_t ni = whole ? m->I : m->I / c->tp;
    return rs_emit_mlp(e, l->gate, l->up, l->down, whole ? 0 : c->t * ni, ni,
                       rs_nm(n, sizeof n, p, "mlp.gate_up_proj.weight"),
                       rs_nm(n2, sizeof n2, p, "mlp.down_proj.weight"));
}

reshard_status_t rs_sglang_rank_params(rs_emit_t *e, const reshard_infer_spec_t *s, int32_t t)
{
    const reshard_model_t *m = e->m;
    const rs_model_ids_t *ids = e->ids;
    sgl_rank_t c = coords(s, t);
    int64_t vpad = rs_roundup(m->V, 64);
    /* embed_tokens: the attention TP group under DP attention (qwen2.py:283-288,
     * qwen2_moe.py:832-838, vocab_parallel_embedding.py:163-182, 243-249) */
    TRY(rs_emit_vocab(e, ids->embed, vpad, c.atp, c.at, "model.embed_tokens.weight"));
    for (int32_t i = 0; i < ids->nlayers; i++)
        TRY(layer(e, s, &c, i));
    TRY(rs_emit_own(e, ids->norm, "model.norm.weight"));
    /* lm_head: the whole TP group, or the attention TP group with
     * --enable-dp-lm-head (qwen3.py:495-500); tied: embed_tokens itself */
    if (!m->tied)
        TRY(rs_emit_vocab(e, ids->lm_head, vpad, s->dp_lm_head ? c.atp : c.tp,
                          s->dp_lm_head ? c.at : c.t, "lm_head.weight"));
    return RESHARD_OK;
}
