/*
 * Model refits executed in-process, checked against independent oracles.
 *
 * For small configs of every family the Megatron and vLLM layouts are built
 * by the model front end, planned, and executed with one thread per rank.
 * Then every byte of every buffer is checked against an oracle written here
 * from the two frameworks' conventions alone (DESIGN §4): for each local
 * position of a framework parameter, which row and column of which HF
 * tensor must sit there, or "padding". Expected values are the pattern of
 * (tensor id, HF flat index). Sources are checked against the Megatron
 * oracle after reshard_fill_pattern, destinations against the vLLM oracle
 * after the refit; padding must still hold the sentinel.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "layout/layout_internal.h"
#include "plan_check.h"
#include "reshard/reshard_model.h"

#define SENTINEL 0xA5
#define BLOCK 128

/* ------------------------------------------------------------------ */
/* Test configs, written as HF config.json text                        */
/* ------------------------------------------------------------------ */

typedef struct {
    const char *type; /* "qwen3", "llama", "qwen3_moe", "deepseek_v3" */
    int64_t H, I, Im, V;
    int64_t nh, kv, hd;
    int64_t E, nshared, first_dense, mlp_only0;
    int64_t Is; /* qwen2_moe shared_expert_intermediate_size */
    int64_t q_lora, kv_lora, nope, rope, vhd, nmtp;
    int64_t L;
    int tied;
    int64_t nk, nv, kd, vd, K, interval; /* qwen3_next Gated DeltaNet */
} tcfg_t;

static int is_next(const tcfg_t *c)
{
    return !strcmp(c->type, "qwen3_next");
}

static char *config_json(const tcfg_t *c)
{
    char *s = malloc(4096);
    int n =
        snprintf(s, 4096,
                 "{\"model_type\": \"%s\", \"hidden_size\": %lld, \"intermediate_size\": %lld, "
                 "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
                 "\"num_key_value_heads\": %lld, \"head_dim\": %lld, \"vocab_size\": %lld, "
                 "\"tie_word_embeddings\": %s",
                 c->type, (long long)c->H, (long long)c->I, (long long)c->L, (long long)c->nh,
                 (long long)c->kv, (long long)c->hd, (long long)c->V, c->tied ? "true" : "false");
    if (!strcmp(c->type, "qwen3_moe") || !strcmp(c->type, "qwen2_moe") || is_next(c))
        n += snprintf(s + n, 4096 - (size_t)n,
                      ", \"moe_intermediate_size\": %lld, \"num_experts\": %lld, "
                      "\"decoder_sparse_step\": 1, \"mlp_only_layers\": [%s]",
                      (long long)c->Im, (long long)c->E, c->mlp_only0 ? "0" : "");
    if (!strcmp(c->type, "qwen2_moe") || is_next(c))
        n += snprintf(s + n, 4096 - (size_t)n, ", \"shared_expert_intermediate_size\": %lld",
                      (long long)c->Is);
    if (is_next(c))
        n += snprintf(s + n, 4096 - (size_t)n,
                      ", \"linear_num_key_heads\": %lld, \"linear_num_value_heads\": %lld, "
                      "\"linear_key_head_dim\": %lld, \"linear_value_head_dim\": %lld, "
                      "\"linear_conv_kernel_dim\": %lld, \"full_attention_interval\": %lld",
                      (long long)c->nk, (long long)c->nv, (long long)c->kd, (long long)c->vd,
                      (long long)c->K, (long long)c->interval);
    if (!strcmp(c->type, "mixtral"))
        n += snprintf(s + n, 4096 - (size_t)n, ", \"num_local_experts\": %lld", (long long)c->E);
    if (!strcmp(c->type, "deepseek_v3"))
        n +=
            snprintf(s + n, 4096 - (size_t)n,
                     ", \"moe_intermediate_size\": %lld, \"n_routed_experts\": %lld, "
                     "\"n_shared_experts\": %lld, \"first_k_dense_replace\": %lld, "
                     "\"q_lora_rank\": %lld, \"kv_lora_rank\": %lld, \"qk_nope_head_dim\": %lld, "
                     "\"qk_rope_head_dim\": %lld, \"v_head_dim\": %lld, "
                     "\"num_nextn_predict_layers\": %lld, \"topk_method\": \"noaux_tc\"",
                     (long long)c->Im, (long long)c->E, (long long)c->nshared,
                     (long long)c->first_dense, (long long)c->q_lora, (long long)c->kv_lora,
                     (long long)c->nope, (long long)c->rope, (long long)c->vhd, (long long)c->nmtp);
    if (!strcmp(c->type, "gpt_oss"))
        n += snprintf(s + n, 4096 - (size_t)n,
                      ", \"num_local_experts\": %lld, \"num_experts_per_tok\": 2, "
                      "\"attention_bias\": true, \"sliding_window\": 4, "
                      "\"layer_types\": [\"sliding_attention\", \"full_attention\"]",
                      (long long)c->E);
    if (!strcmp(c->type, "glm4_moe"))
        n += snprintf(s + n, 4096 - (size_t)n,
                      ", \"moe_intermediate_size\": %lld, \"n_routed_experts\": %lld, "
                      "\"n_shared_experts\": %lld, \"first_k_dense_replace\": %lld, "
                      "\"attention_bias\": true, \"use_qk_norm\": false, "
                      "\"partial_rotary_factor\": 0.5, \"num_nextn_predict_layers\": 1",
                      (long long)c->Im, (long long)c->E, (long long)c->nshared,
                      (long long)c->first_dense);
    snprintf(s + n, 4096 - (size_t)n, "}");
    return s;
}

static int is_mla(const tcfg_t *c)
{
    return !strcmp(c->type, "deepseek_v3");
}

/* HF/vLLM module names of the family's MoE block and shared expert. */
static const char *moe_block(const tcfg_t *c)
{
    return !strcmp(c->type, "mixtral") ? "block_sparse_moe." : "mlp.";
}

static int64_t shared_I(const tcfg_t *c)
{
    return !strcmp(c->type, "qwen2_moe") || is_next(c) ? c->Is : c->Im * c->nshared;
}

static const char *shared_hf(const tcfg_t *c)
{
    return !strcmp(c->type, "qwen2_moe") || is_next(c) ? "mlp.shared_expert."
                                                       : "mlp.shared_experts.";
}

/* Expert projection names in HF: gate/up/down (mixtral: w1/w3/w2). */
static const char *expert_hf(const tcfg_t *c, int which)
{
    static const char *const std[] = {"gate_proj", "up_proj", "down_proj"};
    static const char *const mx[] = {"w1", "w3", "w2"};
    return !strcmp(c->type, "mixtral") ? mx[which] : std[which];
}

/* ------------------------------------------------------------------ */
/* The oracles                                                         */
/* ------------------------------------------------------------------ */

/* What sits at one local position: HF tensor name and (expert, row, col). */
typedef struct {
    char name[192];
    int64_t e, r, c;
    int pad;  /* no fragment: the sentinel must stay */
    int zero; /* the engine holds zeros there: every refit writes them */
} where_t;

/* Local shape of a framework parameter: experts x rows x width. */
typedef struct {
    int64_t experts, rows, width;
} geom_t;

/* What the oracle knows of one rank. */
typedef struct {
    const tcfg_t *c;
    const reshard_tensors_t *T;
    int32_t tp, t;                  /* TP size and rank */
    int32_t etp, et, ep, epr;       /* Megatron expert TP/EP sizes and ranks */
    const reshard_train_spec_t *ts; /* Megatron: the spec, and the rank's stage */
    int32_t stage;
    int64_t e0, ne;  /* vLLM: experts held (EP) */
    int32_t dp, dpr; /* vLLM: DP size and replica (inside the rank's engine) */
    int vllm_ep;
    int vllm_nested; /* vLLM >= 0.25 (PR #41184): experts.routed_experts.w13_weight */
    int seq_moe;     /* vLLM use_sequence_parallel_moe: EP, tp > 1, dp > 1 in one engine */
    int bridge;      /* Megatron-Bridge: the vocabulary is not padded */
    /* vLLM EPLB: physical_to_logical map (NULL: EPLB off, or vLLM's initial
     * map when eplb_P > 0), P slots per MoE layer, one row or one per layer */
    const int32_t *eplb;
    int64_t eplb_len, eplb_P;
    int32_t eplb_r; /* the rank inside its engine */
    /* SGLang (engine=sglang): attention TP, MoE TP and MoE EP sizes and ranks
     * of the rank inside its server, and the server's modes */
    int sgl;
    int32_t atp, at, mtp, mt, sep, ser;
    int dp_lm_head, dense_whole, deepep, shared_fusion_off;
} rk_t;

static void at(where_t *w, const char *prefix, const char *name, int64_t e, int64_t r, int64_t col)
{
    snprintf(w->name, sizeof w->name, "%s%s", prefix, name);
    w->e = e;
    w->r = r;
    w->c = col;
    w->pad = 0;
    w->zero = 0;
}

/* Rows [0, n) hold tensor a's rows base.., rows [n, 2n) tensor b's. */
static void pair(where_t *w, const char *prefix, const char *a, const char *b, int64_t n,
                 int64_t base, int64_t e, int64_t i, int64_t col)
{
    at(w, prefix, i < n ? a : b, e, base + (i < n ? i : i - n), col);
}

static int64_t shape_of(const rk_t *x, const char *name, int d)
{
    int32_t id = reshard_tensors_find(x->T, name);
    reshard_tensor_info_t info;
    assert_true(id >= 0);
    reshard_tensors_info(x->T, id, &info);
    return d < info.ndim ? info.shape[d] : 1;
}

static int ends(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* A parameter that is one HF tensor, whole (norms, router, replicated
 * projections): local flat index = HF flat index. */
static void whole(const rk_t *x, const char *hf, geom_t *g, where_t *w, int64_t i, int64_t col)
{
    int32_t id = reshard_tensors_find(x->T, hf);
    assert_true(id >= 0);
    reshard_tensor_info_t info;
    reshard_tensors_info(x->T, id, &info);
    g->experts = 1;
    g->rows = info.ndim == 2 ? info.shape[0] : 1;
    g->width = info.shape[info.ndim - 1];
    if (w)
        at(w, "", hf, 0, info.ndim == 2 ? i : 0, col);
}

static void vocab(const rk_t *x, int64_t vpad, const char *hf, geom_t *g, where_t *w, int64_t i,
                  int64_t col)
{
    int64_t per = vpad / x->tp, row = x->t * per + i;
    *g = (geom_t){1, per, x->c->H};
    if (w) {
        at(w, "", hf, 0, row, col);
        w->pad = row >= x->c->V;
    }
}

/* Qwen3-Next's Gated DeltaNet, the rules common to both frameworks
 * (Megatron gated_delta_net/common.py, vLLM qwen_gdn_linear_attn.py):
 * conv1d channels [q (nk*kd); k (nk*kd); v (nv*vd)], a TP rank holding its
 * 1/tp of each section in that order; A_log and dt_bias [nv] split by value
 * head; out_proj [H, nv*vd] by columns. @p rest is the name after the
 * module ("conv1d.weight", ...), @p a_log the rank's name for A_log, @p norm
 * the rank's name for the norm (its HF tensor linear_attn.norm.weight).
 * Returns 0 for another name. */
static int gdn_common(const rk_t *x, const char *pre, const char *rest, const char *a_log,
                      const char *norm, int64_t i, int64_t col, geom_t *g, where_t *w)
{
    const tcfg_t *c = x->c;
    int64_t tp = x->tp, t = x->t;
    char hf[192];
    if (!strcmp(rest, "conv1d.weight")) {
        int64_t qk = c->nk * c->kd, qi = qk / tp, vi = c->nv * c->vd / tp, ch;
        *g = (geom_t){1, 2 * qi + vi, c->K};
        if (i < qi)
            ch = t * qi + i;
        else if (i < 2 * qi)
            ch = qk + t * qi + (i - qi);
        else
            ch = 2 * qk + t * vi + (i - 2 * qi);
        if (w) /* HF [conv_dim, 1, K]: channel = the oracle's "expert" index */
            at(w, pre, "linear_attn.conv1d.weight", ch, 0, col);
        return 1;
    }
    if (!strcmp(rest, "dt_bias") || !strcmp(rest, a_log)) {
        int64_t n = c->nv / tp;
        *g = (geom_t){1, 1, n};
        if (w)
            at(w, pre, !strcmp(rest, "dt_bias") ? "linear_attn.dt_bias" : "linear_attn.A_log", 0, 0,
               t * n + col);
        return 1;
    }
    if (!strcmp(rest, norm)) {
        snprintf(hf, sizeof hf, "%slinear_attn.norm.weight", pre);
        whole(x, hf, g, w, i, col);
        return 1;
    }
    if (!strcmp(rest, "out_proj.weight")) {
        int64_t n = c->nv * c->vd / tp;
        *g = (geom_t){1, c->H, n};
        if (w)
            at(w, pre, "linear_attn.out_proj.weight", 0, i, t * n + col);
        return 1;
    }
    return 0;
}

static int vllm_oracle(const rk_t *x, const char *param, int64_t el, int64_t i, int64_t col,
                       geom_t *g, where_t *w);

/* vLLM's gpt-oss (gpt_oss.py, the bf16 load path): model.embedding, per
 * layer attn.{qkv_proj (+bias), o_proj (+bias, whole), sinks (the rank's
 * heads)}, mlp.router (+bias, whole), FusedMoE experts whose w13 rows and
 * w13_bias entries alternate gate, up of the rank's intermediate slice
 * (HF gate_up_proj: gate at even, up at odd positions), w2 and w2_bias (no
 * EP: only flattened rank 0 holds it, the others zeros: _load_weights_other
 * at vLLM a6b6cfa, tp_rank = dp_rank * tp + tp_rank from
 * flatten_tp_across_dp_and_pcp, "if tp_rank != 0: weight.zero_()"; every
 * rank's bias enters the MoE reduction, so the zeros must be there even when
 * the engine loaded random values). */
static int vllm_gpt_oss_oracle(const rk_t *x, const char *param, int64_t el, int64_t i, int64_t col,
                               geom_t *g, where_t *w)
{
    const tcfg_t *c = x->c;
    int64_t tp = x->tp, t = x->t, H = c->H, vpad = (c->V + 63) / 64 * 64;
    if (!strcmp(param, "model.embedding.weight")) {
        vocab(x, vpad, "model.embed_tokens.weight", g, w, i, col);
        return 1;
    }
    if (!strcmp(param, "lm_head.weight")) {
        vocab(x, vpad, "lm_head.weight", g, w, i, col);
        return 1;
    }
    if (!strcmp(param, "model.norm.weight")) {
        whole(x, param, g, w, i, col);
        return 1;
    }
    int layer, k = 0;
    if (sscanf(param, "model.layers.%d.%n", &layer, &k) != 1 || !k)
        return 0;
    const char *rest = param + k;
    char pre[64], hf[192];
    snprintf(pre, sizeof pre, "model.layers.%d.", layer);
    static const struct {
        const char *vl, *hf;
    } same[] = {{"input_layernorm.weight", "input_layernorm.weight"},
                {"post_attention_layernorm.weight", "post_attention_layernorm.weight"},
                {"attn.o_proj.bias", "self_attn.o_proj.bias"},
                {"mlp.router.weight", "mlp.router.weight"},
                {"mlp.router.bias", "mlp.router.bias"}};
    for (size_t s = 0; s < sizeof same / sizeof *same; s++)
        if (!strcmp(rest, same[s].vl)) {
            snprintf(hf, sizeof hf, "%s%s", pre, same[s].hf);
            whole(x, hf, g, w, i, col);
            return 1;
        }
    if (!strcmp(rest, "attn.sinks")) {
        *g = (geom_t){1, 1, c->nh / tp};
        if (w)
            at(w, pre, "self_attn.sinks", 0, 0, t * (c->nh / tp) + col);
        return 1;
    }
    if (!strncmp(rest, "attn.", 5)) { /* qkv_proj and o_proj as every GQA model's */
        char as[192];
        snprintf(as, sizeof as, "%sself_attn.%s", pre, rest + 5);
        tcfg_t plain = *c;
        plain.type = "qwen2";
        rk_t y = *x;
        y.c = &plain;
        return vllm_oracle(&y, as, el, i, col, g, w);
    }
    int64_t eps = tp * x->dp, ne = x->vllm_ep ? c->E / eps : c->E;
    int64_t e = (x->vllm_ep ? (x->dpr * tp + t) * ne : 0) + el;
    int64_t ni = x->vllm_ep ? c->Im : c->Im / eps, i0 = x->vllm_ep ? 0 : (x->dpr * tp + t) * ni;
    const char *nest = x->vllm_nested ? "routed_experts." : "";
    char nm[4][96];
    static const char *const sfx[4] = {"w13_weight", "w13_bias", "w2_weight", "w2_bias"};
    for (int q = 0; q < 4; q++)
        snprintf(nm[q], sizeof nm[q], "mlp.experts.%s%s", nest, sfx[q]);
    if (!strcmp(rest, nm[0])) { /* row 2j: gate row i0+j, row 2j+1: up row i0+j */
        *g = (geom_t){ne, 2 * ni, H};
        if (w)
            at(w, pre, i % 2 ? "mlp.experts.up_proj.weight" : "mlp.experts.gate_proj.weight", e,
               i0 + i / 2, col);
        return 1;
    }
    if (!strcmp(rest, nm[1])) { /* one element per local row: [E, I] biases */
        *g = (geom_t){ne, 2 * ni, 1};
        if (w)
            at(w, pre, i % 2 ? "mlp.experts.up_proj.bias" : "mlp.experts.gate_proj.bias", 0, e,
               i0 + i / 2);
        return 1;
    }
    if (!strcmp(rest, nm[2])) {
        *g = (geom_t){ne, H, ni};
        if (w)
            at(w, pre, "mlp.experts.down_proj.weight", e, i, i0 + col);
        return 1;
    }
    if (!strcmp(rest, nm[3])) {
        *g = (geom_t){ne, 1, H};
        if (w) {
            at(w, pre, "mlp.experts.down_proj.bias", 0, e, col);
            w->zero = !x->vllm_ep && x->dpr * tp + t != 0;
        }
        return 1;
    }
    return 0;
}

/* The vLLM convention. Returns 0 for an unknown parameter. */
static int vllm_oracle(const rk_t *x, const char *param, int64_t el, int64_t i, int64_t col,
                       geom_t *g, where_t *w)
{
    const tcfg_t *c = x->c;
    int64_t tp = x->tp, t = x->t, H = c->H;
    int64_t vpad = (c->V + 63) / 64 * 64;
    if (!strcmp(param, "model.embed_tokens.weight")) {
        vocab(x, vpad, "model.embed_tokens.weight", g, w, i, col);
        return 1;
    }
    if (!strcmp(param, "lm_head.weight")) {
        vocab(x, vpad, "lm_head.weight", g, w, i, col);
        return 1;
    }
    if (!strcmp(param, "model.norm.weight")) {
        whole(x, param, g, w, i, col);
        return 1;
    }
    if (!strcmp(c->type, "gpt_oss"))
        return vllm_gpt_oss_oracle(x, param, el, i, col, g, w);
    int layer, k = 0;
    if (sscanf(param, "model.layers.%d.%n", &layer, &k) != 1 || !k)
        return 0;
    const char *rest = param + k;
    if (!strncmp(rest, "mtp_block.", 10))
        rest += 10;
    char pre[64];
    snprintf(pre, sizeof pre, "model.layers.%d.", layer);
    char hf[192];
    snprintf(hf, sizeof hf, "%s%s", pre, rest);
    int64_t vdim = is_mla(c) ? c->vhd : c->hd;
    char router[96], rbias[96];
    snprintf(router, sizeof router, "%sgate.weight", moe_block(c));
    snprintf(rbias, sizeof rbias, "%sgate.e_score_correction_bias", moe_block(c));
    if (!strcmp(c->type, "glm4_moe") && !strcmp(rest, "mlp.gate.weight_bf16")) {
        /* vLLM's glm4_moe gate is fp32: the bf16 router is staged whole */
        snprintf(hf, sizeof hf, "%smlp.gate.weight", pre);
        whole(x, hf, g, w, i, col);
        return 1;
    }
    if (ends(rest, "norm.weight") || !strcmp(rest, router) || !strcmp(rest, rbias) ||
        !strcmp(rest, "eh_proj.weight") || !strcmp(rest, "self_attn.kv_a_proj_with_mqa.weight") ||
        (!strcmp(rest, "mlp.shared_expert_gate.weight") && shared_I(c))) {
        whole(x, hf, g, w, i, col);
        return 1;
    }
    if (!strcmp(rest, "mlp.shared_expert_gate.weight")) {
        /* qwen2_moe.py: the gate exists without a shared expert; no trainer
         * holds it, so the refit must leave it alone (bf16 [1, H]: the
         * router's dtype, named for the check of the declaration) */
        *g = (geom_t){1, 1, H};
        if (w) {
            at(w, pre, "mlp.gate.weight", 0, 0, col);
            w->pad = 1;
        }
        return 1;
    }
    if (is_next(c) && !strncmp(rest, "linear_attn.", 12)) {
        /* qwen_gdn_linear_attn.py: in_proj_qkvz / in_proj_ba are
         * MergedColumnParallelLinear of one output shard: rank t holds a
         * contiguous 1/tp of HF's rows (whole key-head groups) */
        const char *m = rest + 12;
        if (!strcmp(m, "in_proj_qkvz.weight") || !strcmp(m, "in_proj_ba.weight")) {
            int64_t r = c->nv / c->nk;
            int64_t per = !strcmp(m, "in_proj_ba.weight") ? 2 * r : 2 * c->kd + 2 * r * c->vd;
            int64_t rows = c->nk * per / tp;
            *g = (geom_t){1, rows, H};
            if (w)
                at(w, "", hf, 0, t * rows + i, col);
            return 1;
        }
        /* A_log (fp32 in vLLM) staged bf16; the norm staged as Megatron's HF - 1 */
        return gdn_common(x, pre, m, "A_log_bf16", "norm.weight_minus_1", i, col, g, w);
    }
    int bias = !strcmp(rest, "self_attn.qkv_proj.bias");
    if (!strcmp(rest, "self_attn.qkv_proj.weight") || bias) {
        /* qwen3_next.py: QKVParallelLinear over 2 x heads, each HF q_proj
         * head [q_h; gate_h] (2 x hd rows) in order */
        int64_t hd = c->hd, nq = c->nh / tp, qm = is_next(c) ? 2 : 1;
        int64_t nkv = tp <= c->kv ? c->kv / tp : 1;
        int64_t k0 = tp <= c->kv ? t * nkv : t / (tp / c->kv); /* kv head replicated */
        *g = (geom_t){1, (qm * nq + 2 * nkv) * hd, bias ? 1 : H};
        if (w) {
            const char *sfx = bias ? "bias" : "weight";
            char q[64], kk[64], vv[64];
            snprintf(q, sizeof q, "self_attn.q_proj.%s", sfx);
            snprintf(kk, sizeof kk, "self_attn.k_proj.%s", sfx);
            snprintf(vv, sizeof vv, "self_attn.v_proj.%s", sfx);
            if (i < qm * nq * hd)
                at(w, pre, q, 0, t * qm * nq * hd + i, col);
            else
                pair(w, pre, kk, vv, nkv * hd, k0 * hd, 0, i - qm * nq * hd, col);
            if (bias) { /* a 1-d tensor: the element index is the column */
                w->c = w->r;
                w->r = 0;
            }
        }
        return 1;
    }
    if (!strcmp(rest, "self_attn.fused_qkv_a_proj.weight")) {
        *g = (geom_t){1, c->q_lora + c->kv_lora + c->rope, H};
        if (w)
            pair(w, pre, "self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight",
                 c->q_lora, 0, 0, i, col);
        return 1;
    }
    if (!strcmp(rest, "self_attn.q_b_proj.weight") || !strcmp(rest, "self_attn.kv_b_proj.weight") ||
        !strcmp(rest, "self_attn.q_proj.weight")) {
        int64_t rows = shape_of(x, hf, 0) / tp;
        *g = (geom_t){1, rows, shape_of(x, hf, 1)};
        if (w)
            at(w, "", hf, 0, t * rows + i, col);
        return 1;
    }
    if (!strcmp(rest, "self_attn.o_proj.weight")) {
        int64_t n = c->nh * vdim / tp;
        *g = (geom_t){1, H, n};
        if (w)
            at(w, "", hf, 0, i, t * n + col);
        return 1;
    }
    int shared = !strncmp(rest, shared_hf(c), strlen(shared_hf(c)));
    /* deepseek_v2.py, qwen3_next.py: shared experts built with disable_tp
     * under vLLM's sequence-parallel MoE: whole on every rank */
    int whole_shared = shared && (is_mla(c) || is_next(c)) && x->seq_moe;
    int64_t I = shared ? shared_I(c) : c->I, n = whole_shared ? I : I / tp;
    if (whole_shared)
        t = 0;
    const char *sub = shared ? shared_hf(c) : "mlp.";
    char a[96], b[96];
    if (ends(rest, "gate_up_proj.weight")) {
        *g = (geom_t){1, 2 * n, H};
        snprintf(a, sizeof a, "%sgate_proj.weight", sub);
        snprintf(b, sizeof b, "%sup_proj.weight", sub);
        if (w)
            pair(w, pre, a, b, n, t * n, 0, i, col);
        return 1;
    }
    if (ends(rest, "down_proj.weight")) {
        *g = (geom_t){1, H, n};
        snprintf(a, sizeof a, "%sdown_proj.weight", sub);
        if (w)
            at(w, pre, a, 0, i, t * n + col);
        return 1;
    }
    /* Experts: EP = whole experts [e0, e0+ne); no EP = all experts, the
     * intermediate dim split over all tp*dp ranks: rank dp_rank*tp + tp_rank
     * holds slice number dp_rank*tp + tp_rank (vLLM flattens expert TP). */
    int64_t ne = x->vllm_ep ? x->ne : c->E, e = (x->vllm_ep ? x->e0 : 0) + el;
    if (x->eplb_P) {
        /* EPLB (eplb_state.py, fused_moe/layer.py): EP rank r holds physical
         * slots [r*P/eps, (r+1)*P/eps) (P divisible by eps), slot p holding
         * logical expert physical_to_logical[moe_layer][p]; without a map,
         * build_initial_global_physical_to_logical_map: p < E holds p, slot
         * E + i holds i % E. MoE layers count from the first after the
         * dense ones (first_k_dense_replace, mlp_only_layers [0]). */
        int64_t P = x->eplb_P, per = P / (tp * x->dp), p = x->eplb_r * per + el;
        int64_t row = layer - (c->first_dense ? c->first_dense : c->mlp_only0 ? 1 : 0);
        ne = per;
        e = !x->eplb ? p % c->E : x->eplb[(x->eplb_len == P ? 0 : row) * P + p];
    }
    int64_t ni = x->vllm_ep ? c->Im : c->Im / (tp * x->dp);
    int64_t i0 = x->vllm_ep ? 0 : (x->dpr * tp + t) * ni;
    char e13[96], e2[96], eg[96], eu[96], ed[96];
    const char *nest = x->vllm_nested ? "routed_experts." : "";
    snprintf(e13, sizeof e13, "%sexperts.%sw13_weight", moe_block(c), nest);
    snprintf(e2, sizeof e2, "%sexperts.%sw2_weight", moe_block(c), nest);
    snprintf(eg, sizeof eg, "%sexperts.%s.weight", moe_block(c), expert_hf(c, 0));
    snprintf(eu, sizeof eu, "%sexperts.%s.weight", moe_block(c), expert_hf(c, 1));
    snprintf(ed, sizeof ed, "%sexperts.%s.weight", moe_block(c), expert_hf(c, 2));
    if (!strcmp(rest, e13)) {
        *g = (geom_t){ne, 2 * ni, H};
        if (w)
            pair(w, pre, eg, eu, ni, i0, e, i, col);
        return 1;
    }
    if (!strcmp(rest, e2)) {
        *g = (geom_t){ne, H, ni};
        if (w)
            at(w, pre, ed, e, i, i0 + col);
        return 1;
    }
    return 0;
}

/* The SGLang convention (sgl-project/sglang main 2026-06-22, mirrored at
 * 1am9trash/sglang@a17753e; docs/sglang-layouts.md), written from its source:
 * - attention (QKVParallelLinear, o_proj, MLA q_b/kv_b/q_proj) over the
 *   attention TP group: tp/dp ranks under DP attention, rank t % (tp/dp)
 *   (dp_attention.py compute_dp_attention_world_info); QKVParallelLinear and
 *   the column/row splits are vLLM's rules (linear.py is adapted from vLLM's),
 *   so the vLLM oracle answers them with tp = the attention TP;
 * - embed_tokens over the attention TP group, lm_head over the whole TP group
 *   (the attention group with --enable-dp-lm-head), padded to 64;
 * - dense MLPs over the whole TP group (DeepSeek's whole with
 *   --moe-dense-tp-size 1);
 * - FusedMoE: moe_tp = tp/ep, EP rank t / moe_tp holds experts
 *   [er*E/ep, (er+1)*E/ep), MoE TP rank t % moe_tp the rows
 *   [mt*Im/moe_tp, ...) of each, w13 = [gate; up]; DeepSeek-V3 (256 routed, 1
 *   shared, no EP, no DeepEP) holds its shared expert as one more expert after
 *   the routed ones (determine_num_fused_shared_experts), else the shared
 *   experts are an MLP over the TP group (whole under DeepEP).
 * Returns 0 for an unknown parameter. */
static int sglang_oracle(const rk_t *x, const char *param, int64_t el, int64_t i, int64_t col,
                         geom_t *g, where_t *w)
{
    const tcfg_t *c = x->c;
    int64_t H = c->H;
    rk_t y = *x; /* the vLLM-rule oracle over the group that splits a parameter */
    y.seq_moe = 0;
    y.tp = x->atp;
    y.t = x->at;
    if (!strcmp(param, "model.embed_tokens.weight"))
        return vllm_oracle(&y, param, el, i, col, g, w);
    if (!strcmp(param, "lm_head.weight")) {
        y.tp = x->dp_lm_head ? x->atp : x->tp;
        y.t = x->dp_lm_head ? x->at : x->t;
        return vllm_oracle(&y, param, el, i, col, g, w);
    }
    int layer, k = 0;
    if (sscanf(param, "model.layers.%d.%n", &layer, &k) != 1 || !k)
        return vllm_oracle(&y, param, el, i, col, g, w); /* model.norm.weight */
    const char *rest = param + k;
    char pre[64], hf[192];
    snprintf(pre, sizeof pre, "model.layers.%d.", layer);
    snprintf(hf, sizeof hf, "%s%s", pre, rest);
    if (!strcmp(rest, "self_attn.fused_qkv_a_proj_with_mqa.weight")) {
        *g = (geom_t){1, c->q_lora + c->kv_lora + c->rope, H};
        if (w)
            pair(w, pre, "self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight",
                 c->q_lora, 0, 0, i, col);
        return 1;
    }
    if (!strncmp(rest, "self_attn.", 10) || ends(rest, "norm.weight") ||
        !strcmp(rest, "mlp.gate.weight") || !strcmp(rest, "mlp.gate.e_score_correction_bias"))
        return vllm_oracle(&y, param, el, i, col, g, w);
    int shared = !strncmp(rest, "mlp.shared_experts.", 19);
    if (!strcmp(rest, "mlp.gate_up_proj.weight") || !strcmp(rest, "mlp.down_proj.weight") ||
        shared) {
        int whole = shared ? x->deepep : x->dense_whole && is_mla(c);
        y.tp = whole ? 1 : x->tp;
        y.t = whole ? 0 : x->t;
        return vllm_oracle(&y, param, el, i, col, g, w);
    }
    int fused = is_mla(c) && c->E == 256 && c->nshared == 1 && !x->shared_fusion_off &&
                !x->deepep && x->sep == 1;
    int64_t nl = c->E / x->sep, ni = c->Im / x->mtp, i0 = x->mt * ni;
    int sh = fused && el == nl; /* the fused shared expert: stack row nl */
    char a[96], b[96], d[96];
    snprintf(a, sizeof a, "mlp.%s.gate_proj.weight", sh ? "shared_experts" : "experts");
    snprintf(b, sizeof b, "mlp.%s.up_proj.weight", sh ? "shared_experts" : "experts");
    snprintf(d, sizeof d, "mlp.%s.down_proj.weight", sh ? "shared_experts" : "experts");
    int64_t e = sh ? 0 : x->ser * nl + el;
    if (!strcmp(rest, "mlp.experts.w13_weight")) {
        *g = (geom_t){nl + fused, 2 * ni, H};
        if (w)
            pair(w, pre, a, b, ni, i0, e, i, col);
        return 1;
    }
    if (!strcmp(rest, "mlp.experts.w2_weight")) {
        *g = (geom_t){nl + fused, H, ni};
        if (w)
            at(w, pre, d, e, i, i0 + col);
        return 1;
    }
    return 0;
}

/* Megatron's pipeline split (transformer_block.py): layers of stage p are
 * the given first/last counts, the rest evenly over the other stages; with
 * vpp chunks, round c holds every stage's c-th vpp-th of its layers in stage
 * order. Returns the first global layer of chunk @p chunk of stage @p p and
 * stores the chunk's layer count in *count when non-NULL. */
static int64_t stage_layers(const reshard_train_spec_t *s, int64_t L, int32_t p)
{
    int64_t left = s->pp, rest = L;
    if (s->first) {
        left--;
        rest -= s->first;
    }
    if (s->last) {
        left--;
        rest -= s->last;
    }
    if (p == 0 && s->first)
        return s->first;
    if (p == s->pp - 1 && s->last)
        return s->last;
    return rest / left;
}

static int64_t chunk_layers(const reshard_train_spec_t *s, int64_t L, int32_t p)
{
    return stage_layers(s, L, p) / (s->vpp > 1 ? s->vpp : 1);
}

static int stage_first_layer(const reshard_train_spec_t *s, int64_t L, int32_t p, int32_t chunk)
{
    int64_t v = s->vpp > 1 ? s->vpp : 1, first = chunk * (L / v);
    for (int32_t q = 0; q < p; q++)
        first += chunk_layers(s, L, q);
    return (int)first;
}

/* The Megatron convention. Returns 0 for an unknown parameter. */
static int megatron_oracle(const rk_t *x, const char *param, int64_t el, int64_t i, int64_t col,
                           geom_t *g, where_t *w)
{
    const tcfg_t *c = x->c;
    int64_t tp = x->tp, t = x->t, H = c->H;
    int64_t vpad = x->bridge ? c->V : (c->V + 128 * tp - 1) / (128 * tp) * (128 * tp);
    int chunk = 0, k = 0;
    if (x->ts->vpp > 1) { /* model chunk c's names start with "c." */
        if (sscanf(param, "%d.%n", &chunk, &k) != 1 || !k)
            return 0;
        param += k;
    }
    if (!strcmp(param, "embedding.word_embeddings.weight")) {
        vocab(x, vpad, "model.embed_tokens.weight", g, w, i, col);
        return 1;
    }
    if (!strcmp(param, "output_layer.weight")) {
        vocab(x, vpad, c->tied ? "model.embed_tokens.weight" : "lm_head.weight", g, w, i, col);
        return 1;
    }
    if (!strcmp(param, "decoder.final_layernorm.weight")) {
        whole(x, "model.norm.weight", g, w, i, col);
        return 1;
    }
    int layer;
    char pre[64], hf[192];
    const char *rest;
    k = 0;
    if (sscanf(param, "decoder.layers.%d.%n", &layer, &k) == 1 && k) {
        rest = param + k;
        layer += stage_first_layer(x->ts, c->L, x->stage, chunk); /* numbered from 0 per chunk */
    } else if (sscanf(param, "mtp.layers.%d.%n", &layer, &k) == 1 && k) {
        rest = param + k;
        layer += (int)c->L; /* HF numbers MTP layers after the decoder layers */
        if (!strncmp(rest, "mtp_model_layer.", 16))
            rest += 16;
        snprintf(pre, sizeof pre, "model.layers.%d.", layer);
        if (!strcmp(rest, "final_layernorm.weight")) {
            snprintf(hf, sizeof hf, "%sshared_head.norm.weight", pre);
            whole(x, hf, g, w, i, col);
            return 1;
        }
        if (!strcmp(rest, "enorm.weight") || !strcmp(rest, "hnorm.weight")) {
            snprintf(hf, sizeof hf, "%s%s", pre, rest);
            whole(x, hf, g, w, i, col);
            return 1;
        }
        if (!strcmp(rest, "eh_proj.weight")) {
            *g = (geom_t){1, H / tp, 2 * H};
            if (w)
                at(w, pre, "eh_proj.weight", 0, t * (H / tp) + i, col);
            return 1;
        }
    } else {
        return 0;
    }
    snprintf(pre, sizeof pre, "model.layers.%d.", layer);
    static const struct {
        const char *mg, *hf;
    } same[] = {
        {"self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"},
        {"self_attention.in_proj.layer_norm_weight", "input_layernorm.weight"},
        {"input_layernorm.weight", "input_layernorm.weight"},
        {"self_attention.q_layernorm.weight", "self_attn.q_norm.weight"},
        {"self_attention.k_layernorm.weight", "self_attn.k_norm.weight"},
        {"self_attention.linear_q_down_proj.weight", "self_attn.q_a_proj.weight"},
        {"self_attention.linear_q_up_proj.layer_norm_weight", "self_attn.q_a_layernorm.weight"},
        {"self_attention.linear_kv_down_proj.weight", "self_attn.kv_a_proj_with_mqa.weight"},
        {"self_attention.linear_kv_up_proj.layer_norm_weight", "self_attn.kv_a_layernorm.weight"},
        {"mlp.linear_fc1.layer_norm_weight", "post_attention_layernorm.weight"},
        {"pre_mlp_layernorm.weight", "post_attention_layernorm.weight"},
        {"mlp.shared_experts.gate_weight", "mlp.shared_expert_gate.weight"},
    };
    int oss = !strcmp(c->type, "gpt_oss");
    /* gpt-oss (Megatron-Bridge gpt_oss_bridge.py): linear_proj.bias whole, the
     * sinks as core_attention.softmax_offset (the rank's heads), router bias,
     * TEGroupedMLP biases: fc1 [gate; up] rows of the rank, fc2 whole */
    if (oss && (!strcmp(rest, "self_attention.linear_proj.bias") ||
                !strcmp(rest, "mlp.router.weight") || !strcmp(rest, "mlp.router.bias"))) {
        snprintf(hf, sizeof hf, "%s%s", pre,
                 !strcmp(rest, "self_attention.linear_proj.bias") ? "self_attn.o_proj.bias" : rest);
        whole(x, hf, g, w, i, col);
        return 1;
    }
    if (oss && !strcmp(rest, "self_attention.core_attention.softmax_offset")) {
        *g = (geom_t){1, 1, c->nh / tp};
        if (w)
            at(w, pre, "self_attn.sinks", 0, 0, t * (c->nh / tp) + col);
        return 1;
    }
    if (oss) {
        int64_t ne = c->E / x->ep, ni = c->Im / x->etp, i0 = x->et * ni;
        int j = -1;
        k = 0;
        if (sscanf(rest, "mlp.experts.linear_fc1.bias%d%n", &j, &k) == 1 && !rest[k]) {
            assert_true(j >= 0 && j < ne);
            *g = (geom_t){1, 2 * ni, 1};
            if (w)
                at(w, pre, i < ni ? "mlp.experts.gate_proj.bias" : "mlp.experts.up_proj.bias", 0,
                   x->epr * ne + j, i0 + (i < ni ? i : i - ni));
            return 1;
        }
        if (sscanf(rest, "mlp.experts.linear_fc2.bias%d%n", &j, &k) == 1 && !rest[k]) {
            assert_true(j >= 0 && j < ne);
            *g = (geom_t){1, 1, H};
            if (w)
                at(w, pre, "mlp.experts.down_proj.bias", 0, x->epr * ne + j, col);
            return 1;
        }
    }
    if (!strcmp(rest, "mlp.router.weight") || !strcmp(rest, "mlp.router.expert_bias")) {
        snprintf(hf, sizeof hf, "%s%s%s", pre, moe_block(c),
                 ends(rest, "weight") ? "gate.weight" : "gate.e_score_correction_bias");
        whole(x, hf, g, w, i, col);
        return 1;
    }
    for (size_t s = 0; s < sizeof same / sizeof *same; s++)
        if (!strcmp(rest, same[s].mg)) {
            snprintf(hf, sizeof hf, "%s%s", pre, same[s].hf);
            whole(x, hf, g, w, i, col);
            return 1;
        }
    if (is_next(c) && !strcmp(rest, "self_attention.in_proj.weight")) {
        /* gated_delta_net/gdn.py in_proj_split_sections: TP rank t holds
         * [q; k; v; z; b; a] of its key-head groups [t*nk/tp, (t+1)*nk/tp),
         * each section the groups in order; HF groups rows by key head
         * (in_proj_qkvz [q_g; k_g; v_g; z_g], in_proj_ba [b_g; a_g]) */
        int64_t r = c->nv / c->nk, ng = c->nk / tp;
        int64_t len[6] = {c->kd, c->kd, r * c->vd, r * c->vd, r, r};
        int64_t at0[6] = {0, c->kd, 2 * c->kd, 2 * c->kd + r * c->vd, 0, r};
        int64_t rows = 0;
        for (int q = 0; q < 6; q++)
            rows += ng * len[q];
        *g = (geom_t){1, rows, H};
        if (w) {
            int64_t j = i;
            int q = 0;
            while (j >= ng * len[q])
                j -= ng * len[q++];
            int64_t grp = t * ng + j / len[q], in = j % len[q];
            int64_t per = q < 4 ? 2 * c->kd + 2 * r * c->vd : 2 * r;
            at(w, pre, q < 4 ? "linear_attn.in_proj_qkvz.weight" : "linear_attn.in_proj_ba.weight",
               0, grp * per + at0[q] + in, col);
        }
        return 1;
    }
    /* Megatron-Bridge RMSNorm2ZeroCenteredRMSNormMapping: out_norm is HF's
     * linear_attn.norm.weight (less 1: a value of the trainer's own) */
    if (is_next(c) && !strncmp(rest, "self_attention.", 15) &&
        gdn_common(x, pre, rest + 15, "A_log", "out_norm.weight", i, col, g, w))
        return 1;
    int bias = !strcmp(rest, "self_attention.linear_qkv.bias");
    if (!strcmp(rest, "self_attention.linear_qkv.weight") || bias) {
        /* rows interleaved per query group g: [q heads of g; k head g; v head
         * g], the whole row sequence split evenly over tp (tp may be a
         * multiple of the groups: then a part of one group per rank). With
         * attention_output_gate (attention.py get_query_key_value_tensors):
         * [q heads of g; their gates; k; v], q and gate the halves of each
         * HF q_proj head's 2 x hd rows (Bridge merge_qkv_weights) */
        int64_t qm = is_next(c) ? 2 : 1;
        int64_t hd = c->hd, hpg = c->nh / c->kv, gs = (qm * hpg + 2) * hd, rows = c->kv * gs / tp;
        *g = (geom_t){1, rows, bias ? 1 : H};
        if (w) {
            int64_t idx = t * rows + i, grp = idx / gs, j = idx % gs;
            const char *sfx = bias ? "bias" : "weight";
            char q[64], kk[64], vv[64];
            snprintf(q, sizeof q, "self_attn.q_proj.%s", sfx);
            snprintf(kk, sizeof kk, "self_attn.k_proj.%s", sfx);
            snprintf(vv, sizeof vv, "self_attn.v_proj.%s", sfx);
            if (j < qm * hpg * hd) { /* q (then gate) of head h of the group */
                int64_t half = j / (hpg * hd), jj = j % (hpg * hd), h = grp * hpg + jj / hd;
                at(w, pre, q, 0, h * qm * hd + half * hd + jj % hd, col);
            } else {
                pair(w, pre, kk, vv, hd, grp * hd, 0, j - qm * hpg * hd, col);
            }
            if (bias) {
                w->c = w->r;
                w->r = 0;
            }
        }
        return 1;
    }
    static const struct {
        const char *mg, *hf;
    } column[] = {
        {"self_attention.linear_q_up_proj.weight", "self_attn.q_b_proj.weight"},
        {"self_attention.linear_q_proj.weight", "self_attn.q_proj.weight"},
        {"self_attention.linear_kv_up_proj.weight", "self_attn.kv_b_proj.weight"},
    };
    for (size_t s = 0; s < sizeof column / sizeof *column; s++)
        if (!strcmp(rest, column[s].mg)) {
            snprintf(hf, sizeof hf, "%s%s", pre, column[s].hf);
            int64_t rows = shape_of(x, hf, 0) / tp;
            *g = (geom_t){1, rows, shape_of(x, hf, 1)};
            if (w)
                at(w, "", hf, 0, t * rows + i, col);
            return 1;
        }
    if (!strcmp(rest, "self_attention.linear_proj.weight")) {
        int64_t n = c->nh * (is_mla(c) ? c->vhd : c->hd) / tp;
        *g = (geom_t){1, H, n};
        if (w)
            at(w, pre, "self_attn.o_proj.weight", 0, i, t * n + col);
        return 1;
    }
    int shared = !strncmp(rest, "mlp.shared_experts.", 19);
    int64_t n = (shared ? shared_I(c) : c->I) / tp;
    const char *sub = shared ? shared_hf(c) : "mlp.";
    char a[96], b[96];
    if (!strcmp(rest, "mlp.linear_fc1.weight") ||
        !strcmp(rest, "mlp.shared_experts.linear_fc1.weight")) {
        *g = (geom_t){1, 2 * n, H};
        snprintf(a, sizeof a, "%sgate_proj.weight", sub);
        snprintf(b, sizeof b, "%sup_proj.weight", sub);
        if (w)
            pair(w, pre, a, b, n, t * n, 0, i, col);
        return 1;
    }
    if (!strcmp(rest, "mlp.linear_fc2.weight") ||
        !strcmp(rest, "mlp.shared_experts.linear_fc2.weight")) {
        *g = (geom_t){1, H, n};
        snprintf(a, sizeof a, "%sdown_proj.weight", sub);
        if (w)
            at(w, pre, a, 0, i, t * n + col);
        return 1;
    }
    /* Experts: EP rank r holds [r*E/EP, (r+1)*E/EP), ETP-split like a dense
     * MLP; TEGroupedMLP: one parameter per local expert, weight0..ne-1. */
    int64_t ne = c->E / x->ep, ni = c->Im / x->etp, i0 = x->et * ni;
    int j = -1;
    k = 0;
    (void)el;
    char eg[96], eu[96], ed[96];
    snprintf(eg, sizeof eg, "%sexperts.%s.weight", moe_block(c), expert_hf(c, 0));
    snprintf(eu, sizeof eu, "%sexperts.%s.weight", moe_block(c), expert_hf(c, 1));
    snprintf(ed, sizeof ed, "%sexperts.%s.weight", moe_block(c), expert_hf(c, 2));
    if (sscanf(rest, "mlp.experts.linear_fc1.weight%d%n", &j, &k) == 1 && !rest[k]) {
        assert_true(j >= 0 && j < ne);
        *g = (geom_t){1, 2 * ni, H};
        if (w)
            pair(w, pre, eg, eu, ni, i0, x->epr * ne + j, i, col);
        return 1;
    }
    if (sscanf(rest, "mlp.experts.linear_fc2.weight%d%n", &j, &k) == 1 && !rest[k]) {
        assert_true(j >= 0 && j < ne);
        *g = (geom_t){1, H, ni};
        if (w)
            at(w, pre, ed, x->epr * ne + j, i, i0 + col);
        return 1;
    }
    return 0;
}

typedef int (*oracle_fn)(const rk_t *, const char *, int64_t, int64_t, int64_t, geom_t *,
                         where_t *);

/* Check one buffer of a rank against an oracle. FP8 scale buffers
 * ("..._scale_inv") mirror their weight parameter block by block. Returns
 * the number of wrong bytes; @p checked counts pattern bytes. */
/* The buffer a framework really has: vLLM stacks its local experts
 * (w13_weight [E_local, 2I, H], w2_weight [E_local, H, I]); every other
 * parameter is one tensor: 1-d (norms, biases, expert_bias) when its HF
 * tensor is, else [rows, width] (Megatron's per-expert weight0..N-1 too); of
 * the HF tensor's dtype (router biases fp32). */
static void check_declared(const reshard_buffer_info_t *bi, const char *param, const geom_t *g,
                           const reshard_tensor_info_t *hf, int scale)
{
    int stacked = ends(param, "w13_weight") || ends(param, "w2_weight");
    /* gpt-oss expert biases: vLLM [E_local, n] stacks, Megatron [n] per expert */
    if (ends(param, "w13_bias") || ends(param, "w2_bias")) {
        assert_int_equal(bi->dtype, hf->dtype);
        assert_int_equal(bi->ndim, 2);
        assert_int_equal(bi->shape[0], g->experts);
        assert_int_equal(bi->shape[1], g->rows * g->width);
        return;
    }
    if (strstr(param, ".linear_fc1.bias") || strstr(param, ".linear_fc2.bias")) {
        assert_int_equal(bi->dtype, hf->dtype);
        assert_int_equal(bi->ndim, 1);
        assert_int_equal(bi->shape[0], g->experts * g->rows * g->width);
        return;
    }
    if (ends(param, "conv1d.weight")) { /* nn.Conv1d / vLLM's conv1d: [channels, 1, K] */
        assert_int_equal(bi->dtype, hf->dtype);
        assert_int_equal(bi->ndim, 3);
        assert_int_equal(bi->shape[0], g->rows);
        assert_int_equal(bi->shape[1], 1);
        assert_int_equal(bi->shape[2], g->width);
        return;
    }
    int64_t rows = scale ? (g->rows + BLOCK - 1) / BLOCK : g->rows;
    int64_t width = scale ? (g->width + BLOCK - 1) / BLOCK : g->width;
    if (scale)
        assert_int_equal(bi->dtype, RESHARD_FP32);
    else
        assert_int_equal(bi->dtype, hf->dtype);
    if (stacked) {
        assert_int_equal(bi->ndim, 3);
        assert_int_equal(bi->shape[0], g->experts);
        assert_int_equal(bi->shape[1], rows);
        assert_int_equal(bi->shape[2], width);
    } else if (hf->ndim == 1 && !scale) {
        assert_int_equal(bi->ndim, 1);
        assert_int_equal(bi->shape[0], rows * width);
    } else {
        assert_int_equal(g->experts, 1);
        if (bi->ndim != 2 || bi->shape[0] != rows || bi->shape[1] != width)
            fail_msg("%s: declared %d-d [%lld, %lld], the framework holds [%lld, %lld]", bi->name,
                     bi->ndim, (long long)bi->shape[0], (long long)bi->shape[1], (long long)rows,
                     (long long)width);
    }
}

static int64_t check_buffer(const rk_t *x, oracle_fn oracle, const reshard_model_buffer_t *b,
                            const reshard_buffer_info_t *bi, const uint8_t *data, uint64_t *checked)
{
    char param[256];
    snprintf(param, sizeof param, "%s", b->name);
    int scale = 0;
    char *sfx = strstr(param, "_scale_inv");
    if (sfx) {
        scale = 1; /* "x.weight_scale_inv" -> "x.weight", "w13_weight_scale_inv" -> "w13_weight" */
        *sfx = '\0';
    }
    geom_t g;
    if (!oracle(x, param, 0, 0, 0, &g, NULL))
        fail_msg("rank %d: the oracle does not know parameter %s", b->rank, b->name);
    int64_t rows = scale ? (g.rows + BLOCK - 1) / BLOCK : g.rows;
    int64_t width = scale ? (g.width + BLOCK - 1) / BLOCK : g.width;
    int64_t bad = 0;
    size_t es = 0;
    char last[200] = "";
    int32_t id = -1;
    reshard_tensor_info_t info;
    for (int64_t e = 0; e < g.experts; e++)
        for (int64_t i = 0; i < rows; i++) {
            /* Along a local row the HF column advances with the local one:
             * ask the oracle once per row. */
            where_t w;
            oracle(x, param, e, scale ? i * BLOCK : i, 0, &g, &w);
            char name[200];
            if (scale) {
                size_t len = strlen(w.name);
                snprintf(name, sizeof name, "%.*s.weight_scale_inv", (int)(len - 7), w.name);
            } else {
                snprintf(name, sizeof name, "%s", w.name);
            }
            if (strcmp(name, last)) { /* most rows share a tensor */
                id = reshard_tensors_find(x->T, name);
                if (id < 0)
                    fail_msg("%s: oracle names unknown tensor %s", b->name, name);
                reshard_tensors_info(x->T, id, &info);
                snprintf(last, sizeof last, "%s", name);
            }
            es = reshard_dtype_size(info.dtype);
            if (e == 0 && i == 0)
                check_declared(bi, param, &g, &info, scale);
            int64_t R = info.ndim >= 2 ? info.shape[info.ndim - 2] : 1;
            int64_t C = info.shape[info.ndim - 1];
            int64_t r = info.ndim == 1 ? 0 : scale ? w.r / BLOCK : w.r;
            int64_t c0 = scale ? w.c / BLOCK : w.c;
            const uint8_t *p = data + (size_t)((e * rows + i) * width * (int64_t)es);
            for (int64_t col = 0; col < width; col++, p += es) {
                if (w.pad) {
                    for (size_t q = 0; q < es; q++)
                        bad += p[q] != SENTINEL;
                    continue;
                }
                if (w.zero) { /* the buffers start as SENTINEL garbage; zero-filled, not */
                    for (size_t q = 0; q < es; q++) /* bytes the plan moves (not checked) */
                        bad += p[q] != 0;
                    continue;
                }
                uint64_t v = rs_pattern_value(id, (w.e * R + r) * C + c0 + col);
                bad += memcmp(p, &v, es) != 0;
                *checked += es;
            }
        }
    uint64_t want = (uint64_t)(g.experts * rows * width) * es;
    if (b->bytes != want)
        fail_msg("rank %d %s: buffer of %llu bytes, the convention says %llu", b->rank, b->name,
                 (unsigned long long)b->bytes, (unsigned long long)want);
    return bad;
}

/* ------------------------------------------------------------------ */
/* In-process execution                                                */
/* ------------------------------------------------------------------ */

typedef struct {
    const tcfg_t *c;
    const reshard_model_t *m;
    const reshard_model_refit_t *f;
    const reshard_plan_t *plan; /* NULL: each rank plans for itself */
    int scoped; /* ... from its scoped layouts (reshard_model_refit_create_scoped) */
    reshard_plan_params_t params;
    reshard_inproc_group_t *group;
    int32_t rank;
    reshard_status_t status;
    char msg[512];
    uint64_t checked;
    int64_t bad;
} job_t;

static reshard_buffer_t *alloc_bufs(const reshard_model_buffers_t *t, int32_t rank, int32_t *n)
{
    *n = reshard_model_buffer_count(t, rank);
    reshard_buffer_t *b = calloc((size_t)*n + 1, sizeof *b);
    for (int32_t i = 0; i < *n; i++) {
        b[i].bytes = reshard_model_buffer_bytes(t, rank, i);
        b[i].ptr = malloc(b[i].bytes + 64);
        memset(b[i].ptr, SENTINEL, b[i].bytes + 64);
    }
    return b;
}

static void rank_ctx(const job_t *j, int train, rk_t *x)
{
    const reshard_train_spec_t *ts = &j->f->train_spec;
    const reshard_infer_spec_t *is = &j->f->infer_spec;
    *x = (rk_t){.c = j->c, .T = j->f->tensors};
    if (train) {
        int32_t S = ts->tp * ts->cp * ts->dp, li = j->rank % S;
        x->tp = ts->tp;
        x->t = li % ts->tp;
        x->etp = ts->etp; /* parsed: tp unless given */
        x->et = li % ts->etp;
        x->ep = ts->ep;
        x->epr = (li / ts->etp) % ts->ep;
        x->ts = ts;
        x->stage = j->rank / S;
        x->bridge = ts->convention == RESHARD_TRAIN_MEGATRON_BRIDGE;
    } else {
        /* independent engines: each holds the whole model on tp*dp ranks
         * (an SGLang server on tp) */
        int sgl = is->engine == RESHARD_ENGINE_SGLANG;
        int32_t eps = sgl ? is->tp : is->tp * is->dp, r = (j->rank - j->f->train_world) % eps;
        if (sgl) {
            int32_t adp = is->dp_attention ? is->dp : 1;
            int32_t sep = !is->ep ? 1 : is->ep_size > 0 ? is->ep_size : is->tp;
            x->sgl = 1;
            x->atp = is->tp / adp;
            x->at = r % x->atp;
            x->sep = sep;
            x->mtp = is->tp / sep;
            x->mt = r % x->mtp;
            x->ser = r / x->mtp;
            x->dp_lm_head = is->dp_lm_head;
            x->dense_whole = is->moe_dense_tp == 1;
            x->deepep = is->a2a == RESHARD_SGLANG_A2A_DEEPEP;
            x->shared_fusion_off = is->shared_fusion_off;
        }
        x->tp = is->tp;
        x->t = r % is->tp;
        x->dp = is->dp;
        x->dpr = r / is->tp;
        x->vllm_ep = is->ep;
        x->vllm_nested = is->vllm != RESHARD_VLLM_0_24;
        x->seq_moe = is->ep && is->tp > 1 && is->dp > 1;
        if (is->redundant > 0 || is->eplb_map) {
            x->eplb = is->eplb_map;
            x->eplb_len = is->eplb_map_len;
            x->eplb_P = j->c->E + is->redundant;
            x->eplb_r = r;
        }
        if (j->c->E) {
            int64_t base = j->c->E / eps, rem = j->c->E % eps; /* remainder to the first ranks */
            x->ne = base + (r < rem);
            x->e0 = r * base + (r < rem ? r : rem);
        }
    }
}

static void check_rank(job_t *j, int train, const reshard_model_buffers_t *t,
                       const reshard_buffer_t *bufs, int32_t n)
{
    rk_t x;
    rank_ctx(j, train, &x);
    for (int64_t k = 0; k < reshard_model_buffers_count(t); k++) {
        reshard_model_buffer_t b;
        reshard_model_buffers_get(t, k, &b);
        if (b.rank != j->rank)
            continue;
        assert_true(b.buffer < n);
        reshard_buffer_info_t bi;
        assert_int_equal(reshard_layout_declared_buffer(train ? j->f->train : j->f->infer, j->rank,
                                                        b.buffer, &bi),
                         RESHARD_OK);
        assert_string_equal(bi.name, b.name);
        /* Megatron's router.expert_bias is a registered buffer (router.py) */
        assert_int_equal(b.module_buffer, train && ends(b.name, ".router.expert_bias"));
        int64_t bad = check_buffer(&x,
                                   train   ? megatron_oracle
                                   : x.sgl ? sglang_oracle
                                           : vllm_oracle,
                                   &b, &bi, bufs[b.buffer].ptr, &j->checked);
        for (int q = 0; q < 64; q++) /* nothing written past the end */
            bad += ((uint8_t *)bufs[b.buffer].ptr)[b.bytes + (uint64_t)q] != SENTINEL;
        if (bad && !j->bad)
            snprintf(j->msg, sizeof j->msg, "rank %d %s: %lld wrong bytes", j->rank, b.name,
                     (long long)bad);
        j->bad += bad;
    }
}

/* Domain size of plan params (0: none given). */
static int32_t domain_of_params(const reshard_plan_params_t *p)
{
    return (p->field_mask & RESHARD_PLAN_PARAM_DOMAIN_SIZE) ? p->domain_size : 0;
}

/* Each rank computes its own plan from the layouts alone (my_rank = rank):
 * the whole ones, or (j->scoped) the part its plan needs, built by itself. */
static reshard_status_t own_plan_execute(job_t *j, reshard_comm_t *comm, reshard_buffer_t *src,
                                         int32_t ns, reshard_buffer_t *dst, int32_t nd)
{
    reshard_plan_params_t pp = j->params;
    pp.my_rank = j->rank;
    reshard_plan_t *plan = NULL;
    reshard_model_refit_t g = {0};
    const reshard_model_refit_t *f = j->f;
    reshard_status_t s = RESHARD_OK;
    if (j->scoped) {
        s = reshard_model_refit_create_scoped(j->m, &f->train_spec, &f->infer_spec, -1, j->rank,
                                              domain_of_params(&pp), &g);
        f = &g;
    }
    if (s == RESHARD_OK)
        s = reshard_plan_create(f->train, f->infer, &pp, &plan);
    reshard_model_refit_destroy(&g); /* the plan keeps what it executes */
    if (s == RESHARD_OK)
        s = reshard_plan_execute(plan, comm, src, ns, dst, nd, NULL);
    reshard_plan_destroy(plan);
    return s;
}

static void *rank_main(void *arg)
{
    job_t *j = arg;
    const reshard_model_refit_t *f = j->f;
    int train = j->rank < f->train_world;
    int32_t ns = 0, nd = 0;
    reshard_buffer_t *src = alloc_bufs(f->train_buffers, j->rank, &ns);
    reshard_buffer_t *dst = alloc_bufs(f->infer_buffers, j->rank, &nd);
    reshard_comm_t *comm = NULL;
    j->status = reshard_comm_create_inproc(j->group, j->rank, &comm);
    if (j->status == RESHARD_OK && train)
        j->status = reshard_fill_pattern(f->train, j->rank, src, ns);
    if (j->status == RESHARD_OK)
        j->status = j->plan ? reshard_plan_execute(j->plan, comm, src, ns, dst, nd, NULL)
                            : own_plan_execute(j, comm, src, ns, dst, nd);
    if (j->status != RESHARD_OK)
        snprintf(j->msg, sizeof j->msg, "rank %d: %s: %s", j->rank,
                 reshard_status_string(j->status), reshard_last_error());
    reshard_comm_destroy(comm);
    if (j->status == RESHARD_OK) {
        if (train)
            check_rank(j, 1, f->train_buffers, src, ns);
        else
            check_rank(j, 0, f->infer_buffers, dst, nd);
    }
    for (int32_t i = 0; i < ns; i++)
        free(src[i].ptr);
    for (int32_t i = 0; i < nd; i++)
        free(dst[i].ptr);
    free(src);
    free(dst);
    return NULL;
}

/* Every train rank holds exactly the layers of its pipeline stage, per
 * model chunk numbered 0..n-1 (Megatron's named_parameters()), the
 * embedding on the first stage's first chunk (and, with MTP and pp > 1, on
 * the last stage's last chunk), final norm, MTP and output layer on the last
 * stage's last chunk. */
static void check_stages(const tcfg_t *c, const reshard_model_refit_t *f)
{
    const reshard_train_spec_t *s = &f->train_spec;
    int32_t S = s->tp * s->cp * s->dp, v = s->vpp > 1 ? s->vpp : 1;
    for (int32_t r = 0; r < f->train_world; r++) {
        int32_t p = r / S;
        uint64_t seen[8] = {0};
        int embeds = 0;
        for (int64_t k = 0; k < reshard_model_buffers_count(f->train_buffers); k++) {
            reshard_model_buffer_t b;
            reshard_model_buffers_get(f->train_buffers, k, &b);
            if (b.rank != r)
                continue;
            const char *name = b.name;
            int chunk = 0, n = 0, layer;
            if (v > 1) {
                assert_int_equal(sscanf(name, "%d.%n", &chunk, &n), 1);
                assert_true(n > 0 && chunk < v);
                name += n;
            }
            int first = p == 0 && chunk == 0, last = p == s->pp - 1 && chunk == v - 1;
            if (sscanf(name, "decoder.layers.%d.", &layer) == 1) {
                assert_true(layer >= 0 && layer < chunk_layers(s, c->L, p));
                seen[chunk] |= 1ull << layer;
            }
            if (!strncmp(name, "embedding.", 10)) {
                assert_true(first || (last && c->nmtp && s->pp > 1));
                embeds++;
            }
            if (!strncmp(name, "output_layer.", 13) || !strncmp(name, "mtp.", 4) ||
                !strncmp(name, "decoder.final", 13))
                assert_true(last);
        }
        for (int32_t ch = 0; ch < v; ch++)
            assert_int_equal(seen[ch], (1ull << chunk_layers(s, c->L, p)) - 1);
        assert_int_equal(embeds, (p == 0) + (p == s->pp - 1 && s->pp > 1 && c->nmtp > 0));
    }
}

/* How a case is planned: NVLink domain size, and per-rank plans (2: from
 * each rank's scoped layouts). */
typedef struct {
    int32_t domain_size;
    int own_plans;
    const int32_t *eplb_map; /* the inference spec's EPLB map (NULL: none) */
    int64_t eplb_len;
} how_t;

/* The buffer table entries of @p rank in @p a and in @p b are the same
 * (rank, buffer, bytes, name), and @p b has no other rank's. */
static void same_rank_buffers(const reshard_model_buffers_t *a, const reshard_model_buffers_t *b,
                              int32_t rank, const char *what)
{
    int64_t nb = reshard_model_buffers_count(b), k = 0;
    for (int64_t i = 0; i < reshard_model_buffers_count(a); i++) {
        reshard_model_buffer_t x, y;
        reshard_model_buffers_get(a, i, &x);
        if (x.rank != rank)
            continue;
        if (k >= nb)
            fail_msg("%s rank %d: scoped buffer table ends before %s", what, rank, x.name);
        reshard_model_buffers_get(b, k++, &y);
        if (x.buffer != y.buffer || x.bytes != y.bytes || strcmp(x.name, y.name) != 0)
            fail_msg("%s rank %d: buffer %d %s (%llu bytes) is %d %s (%llu) scoped", what, rank,
                     x.buffer, x.name, (unsigned long long)x.bytes, y.buffer, y.name,
                     (unsigned long long)y.bytes);
    }
    assert_int_equal(k, nb);
}

/* The fragments of @p part are fragments of @p whole in the same order, and
 * every fragment of @p whole on @p rank is among them. */
static void ordered_subset(const reshard_layout_t *whole, const reshard_layout_t *part,
                           int32_t rank, const char *what)
{
    int64_t n = reshard_layout_count(whole), m = reshard_layout_count(part), k = 0;
    for (int64_t i = 0; i < n && k <= m; i++) {
        reshard_fragment_t a, b;
        reshard_layout_fragment(whole, i, &a);
        if (k < m) {
            reshard_layout_fragment(part, k, &b);
            if (!memcmp(&a, &b, sizeof a)) {
                k++;
                continue;
            }
        }
        if (a.rank == rank)
            fail_msg("%s rank %d: its fragment %lld of the whole layout is not in its scoped one",
                     what, rank, (long long)i);
    }
    if (k != m)
        fail_msg("%s rank %d: scoped fragment %lld is not the whole layout's next", what, rank,
                 (long long)k);
}

/* Rank @p r's scoped refit: a part of the whole one @p f that keeps all of
 * r's fragments and buffers, whose own plan is exactly r's part of the
 * global plan @p all (pieces, streams, chunk sizes, fingerprint). */
static void check_scoped(const reshard_model_t *m, const reshard_model_refit_t *f,
                         const reshard_plan_params_t *pp, const reshard_plan_t *all, int32_t r,
                         const char *what)
{
    reshard_model_refit_t g;
    if (reshard_model_refit_create_scoped(m, &f->train_spec, &f->infer_spec, -1, r,
                                          domain_of_params(pp), &g) != RESHARD_OK)
        fail_msg("%s rank %d: scoped refit: %s", what, r, reshard_last_error());
    ordered_subset(f->train, g.train, r, what);
    ordered_subset(f->infer, g.infer, r, what);
    same_rank_buffers(f->train_buffers, g.train_buffers, r, what);
    same_rank_buffers(f->infer_buffers, g.infer_buffers, r, what);
    char why[512];
    if (rs_test_check_rank_plan(g.train, g.infer, pp, all, r, why, sizeof why) != 0)
        fail_msg("%s scoped: %s", what, why);
    reshard_model_refit_destroy(&g);
}

static void refit_case_how(const tcfg_t *c, reshard_dtype_t dtype, const char *train,
                           const char *infer, how_t how)
{
    char *json = config_json(c);
    reshard_model_options_t o = {.mtp = c->nmtp > 0, .dtype = dtype};
    reshard_model_t *m;
    if (reshard_model_load_json(json, &o, &m) != RESHARD_OK)
        fail_msg("load: %s", reshard_last_error());
    free(json);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse(train, &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse(infer, &is), RESHARD_OK);
    is.eplb_map = how.eplb_map;
    is.eplb_map_len = how.eplb_len;
    reshard_model_refit_t f;
    if (reshard_model_refit_create(m, &ts, &is, &f) != RESHARD_OK)
        fail_msg("%s -> %s: %s", train, infer, reshard_last_error());
    check_stages(c, &f);
    int32_t world = f.train_world + f.infer_world;
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES,
                                .world_size = world,
                                .my_rank = RESHARD_ALL_RANKS,
                                .staging_bytes = 64 << 10};
    if (how.domain_size > 1) {
        pp.field_mask |= RESHARD_PLAN_PARAM_DOMAIN_SIZE;
        pp.domain_size = how.domain_size;
    }
    reshard_plan_t *plan;
    if (reshard_plan_create(f.train, f.infer, &pp, &plan) != RESHARD_OK)
        fail_msg("plan %s -> %s: %s", train, infer, reshard_last_error());
    /* every rank's own plan, from the whole layouts and from its scoped
     * ones, is exactly its part of the global plan */
    char what[256];
    snprintf(what, sizeof what, "%s %s -> %s", c->type, train, infer);
    for (int32_t r = 0; r < world; r++) {
        char why[512];
        if (rs_test_check_rank_plan(f.train, f.infer, &pp, plan, r, why, sizeof why) != 0)
            fail_msg("%s: %s", what, why);
        check_scoped(m, &f, &pp, plan, r, what);
    }
    reshard_inproc_group_t *group;
    assert_int_equal(reshard_inproc_group_create(world, &group), RESHARD_OK);
    job_t *jobs = calloc((size_t)world, sizeof *jobs);
    pthread_t *th = calloc((size_t)world, sizeof *th);
    for (int32_t r = 0; r < world; r++) {
        jobs[r] = (job_t){.c = c,
                          .m = m,
                          .f = &f,
                          .plan = how.own_plans ? NULL : plan,
                          .scoped = how.own_plans == 2,
                          .params = pp,
                          .group = group,
                          .rank = r};
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    uint64_t checked_dst = 0;
    for (int32_t r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    for (int32_t r = 0; r < world; r++) {
        if (jobs[r].status != RESHARD_OK || jobs[r].bad)
            fail_msg("%s %s -> %s: %s", c->type, train, infer, jobs[r].msg);
        if (r >= f.train_world)
            checked_dst += jobs[r].checked;
    }
    /* every inference element came from the refit: exactly the bytes written */
    reshard_plan_stats_t st;
    assert_int_equal(reshard_plan_get_stats(plan, &st), RESHARD_OK);
    assert_int_equal(checked_dst, st.bytes_total);
    free(jobs);
    free(th);
    reshard_inproc_group_destroy(group);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
}

static void refit_case(const tcfg_t *c, reshard_dtype_t dtype, const char *train, const char *infer)
{
    refit_case_how(c, dtype, train, infer, (how_t){.domain_size = 0, .own_plans = 0});
}

/* ------------------------------------------------------------------ */
/* Cases                                                               */
/* ------------------------------------------------------------------ */

/* Qwen3 dense: GQA 8 heads / 2 kv heads, q/k norms, tied embeddings, a
 * vocabulary (203) that no tp divides. */
static const tcfg_t qwen3_tied = {
    .type = "qwen3", .H = 48, .I = 40, .V = 203, .nh = 8, .kv = 2, .hd = 8, .L = 5, .tied = 1};

static void test_gqa_tp_over_kv_heads_tied(void **state)
{
    (void)state;
    /* infer tp=8 > 2 kv heads: each kv head on 4 consecutive ranks */
    refit_case(&qwen3_tied, RESHARD_BF16, "tp=2,pp=2,dp=2,first=3", "tp=8,dp=2");
    /* one stage: Megatron's output layer shares the embedding */
    refit_case(&qwen3_tied, RESHARD_BF16, "tp=1,pp=1,dp=3", "tp=4");
    /* pp=3 over 5 layers: uneven stages given as first/last; tied copy on the last stage */
    refit_case(&qwen3_tied, RESHARD_BF16, "tp=2,pp=3,first=1,last=2", "tp=2,dp=2");
}

/* Llama: untied, 4 query groups; Megatron tp=1 holds 4 groups per rank in
 * one fused linear_qkv, tp=2 two. */
static const tcfg_t llama = {
    .type = "llama", .H = 32, .I = 24, .V = 100, .nh = 8, .kv = 4, .hd = 8, .L = 3};

static void test_fused_qkv_groups(void **state)
{
    (void)state;
    refit_case(&llama, RESHARD_BF16, "tp=1,pp=2,last=1", "tp=2,dp=2");
    refit_case(&llama, RESHARD_BF16, "tp=2,pp=1,dp=2", "tp=1,dp=1");
    refit_case(&llama, RESHARD_BF16, "tp=4,cp=2", "tp=8");
    /* every rank plans for itself; NVLink domains of 4 ranks (forwarding) */
    refit_case_how(&llama, RESHARD_BF16, "tp=2,pp=3", "tp=2,dp=3",
                   (how_t){.domain_size = 1, .own_plans = 1});
    refit_case_how(&llama, RESHARD_BF16, "tp=2,pp=3", "tp=2,dp=3",
                   (how_t){.domain_size = 4, .own_plans = 1});
    /* ... each from its scoped layouts */
    refit_case_how(&llama, RESHARD_BF16, "tp=2,pp=3", "tp=2,dp=3",
                   (how_t){.domain_size = 4, .own_plans = 2});
}

/* Qwen3-MoE: 6 experts, layer 0 dense (mlp_only_layers). */
static const tcfg_t qwen3_moe = {.type = "qwen3_moe",
                                 .H = 32,
                                 .I = 48,
                                 .Im = 16,
                                 .V = 90,
                                 .nh = 4,
                                 .kv = 2,
                                 .hd = 8,
                                 .E = 6,
                                 .mlp_only0 = 1,
                                 .L = 3};

static void test_moe_experts(void **state)
{
    (void)state;
    /* vLLM EP over 4 ranks: 6 experts -> 2, 2, 1, 1 */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on");
    /* etp defaults to tp: experts TP-split like the dense layers */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2", "tp=2,dp=2,ep=on");
    /* Megatron ETP: ep=3, etp=2 over tp*dp=6 */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=3,ep=3,etp=2,pp=3", "tp=4,ep=off");
    /* vLLM without EP at dp=2: each expert's 16 rows split over all 4 ranks
     * (4 each), not over tp and repeated per replica */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=off");
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=1,dp=2,ep=2", "tp=1,dp=4");
    /* vLLM EP over 5 ranks (6 experts: 2,1,1,1,1), Megatron ep=6 */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=1,dp=6,ep=6", "tp=1,dp=5,ep=on");
    /* domains of 4 ranks: pieces land once per domain and are forwarded */
    refit_case_how(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=1,dp=4,ep=on",
                   (how_t){.domain_size = 4, .own_plans = 0});
}

/* DeepSeek-V3 shape: MLA with q_lora, one dense layer, 5 routed experts,
 * a shared expert, router bias, an MTP layer. */
static const tcfg_t dsv3 = {.type = "deepseek_v3",
                            .H = 64,
                            .I = 32,
                            .Im = 8,
                            .V = 77,
                            .nh = 4,
                            .kv = 4,
                            .hd = 8,
                            .E = 5,
                            .nshared = 1,
                            .first_dense = 1,
                            .q_lora = 24,
                            .kv_lora = 16,
                            .nope = 8,
                            .rope = 4,
                            .vhd = 8,
                            .nmtp = 1,
                            .L = 3};

static void test_mla(void **state)
{
    (void)state;
    refit_case(&dsv3, RESHARD_BF16, "tp=2,pp=2,first=2", "tp=2,dp=2,ep=on");
    refit_case(&dsv3, RESHARD_BF16, "tp=1,pp=3,dp=5,ep=5", "tp=4");
    /* every rank plans for itself, NVLink domains of 5 ranks (relays, forwards) */
    refit_case_how(&dsv3, RESHARD_BF16, "tp=1,pp=3,dp=5,ep=5", "tp=2,dp=2,ep=on",
                   (how_t){.domain_size = 5, .own_plans = 1});
    tcfg_t no_q_lora = dsv3;
    no_q_lora.q_lora = 0;
    no_q_lora.nmtp = 0;
    refit_case(&no_q_lora, RESHARD_BF16, "tp=4", "tp=2,dp=2,ep=on");
}

/* Megatron pipeline splits: uneven first/last stages and virtual pipeline
 * chunks (chunk c of stage p holds the (c*pp + p)-th block), names numbered
 * from 0 in each chunk and prefixed by the chunk index. */
static void test_pipeline_chunks(void **state)
{
    (void)state;
    tcfg_t l8 = llama;
    l8.L = 8;
    refit_case(&l8, RESHARD_BF16, "tp=2,pp=2,vpp=2", "tp=2,dp=2");
    refit_case(&l8, RESHARD_BF16, "tp=1,pp=4,vpp=2", "tp=4");
    /* first stage 2 layers, last 2, the middle two 2 each; with vpp=2 one per chunk */
    refit_case(&l8, RESHARD_BF16, "tp=1,pp=3,first=2,last=2", "tp=2");
    refit_case(&l8, RESHARD_BF16, "tp=2,pp=3,first=2,last=4,vpp=2", "tp=1,dp=2");
    /* MTP on the last stage's last chunk with its own embedding copy */
    tcfg_t d4 = dsv3;
    d4.L = 4;
    refit_case(&d4, RESHARD_BF16, "tp=1,pp=2,vpp=2,dp=5,ep=5", "tp=2,dp=2,ep=on");
    refit_case(&d4, RESHARD_BF16, "tp=2,pp=2,first=1,last=3,etp=1", "tp=2");
}

/* Qwen2: q/k/v biases. Megatron tp=4 and tp=8 over 2 query groups: each
 * rank holds a half / a quarter of one group's [q; k; v] rows (tp=8: 12 rows,
 * one and a half heads). */
static const tcfg_t qwen2 = {
    .type = "qwen2", .H = 32, .I = 24, .V = 100, .nh = 8, .kv = 2, .hd = 8, .L = 2};

static void test_qwen2_biases(void **state)
{
    (void)state;
    refit_case(&qwen2, RESHARD_BF16, "tp=1,pp=2", "tp=4");
    refit_case(&qwen2, RESHARD_BF16, "tp=4", "tp=2,dp=2");
    refit_case(&qwen2, RESHARD_BF16, "tp=8", "tp=8");
    refit_case(&qwen2, RESHARD_BF16, "tp=2,dp=2", "tp=1,dp=2");
}

/* Qwen2-MoE: 4 experts, a shared expert (24 rows) with its sigmoid gate;
 * Mixtral: block_sparse_moe with w1/w3/w2 experts. EP on and off, dp > 1. */
static const tcfg_t qwen2_moe = {.type = "qwen2_moe",
                                 .H = 32,
                                 .I = 48,
                                 .Im = 16,
                                 .Is = 24,
                                 .V = 90,
                                 .nh = 4,
                                 .kv = 2,
                                 .hd = 8,
                                 .E = 4,
                                 .L = 2};
/* (mixtral's experts are intermediate_size wide: Im mirrors I for the oracles) */
static const tcfg_t mixtral = {.type = "mixtral",
                               .H = 32,
                               .I = 16,
                               .Im = 16,
                               .V = 70,
                               .nh = 4,
                               .kv = 2,
                               .hd = 8,
                               .E = 4,
                               .L = 2};

static void test_qwen2_moe_mixtral(void **state)
{
    (void)state;
    refit_case(&qwen2_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on");
    refit_case(&qwen2_moe, RESHARD_BF16, "tp=1,dp=2,ep=2,pp=2", "tp=2,dp=2");
    refit_case(&qwen2_moe, RESHARD_BF16, "tp=2,pp=2", "tp=4,ep=on");
    refit_case(&mixtral, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2");
    refit_case(&mixtral, RESHARD_BF16, "tp=2,pp=2", "tp=1,dp=4,ep=on");
    refit_case(&mixtral, RESHARD_BF16, "tp=1,dp=4,ep=4", "tp=2,dp=2,ep=on");
}

/* FP8: e4m3 weights and 128x128 fp32 block scales, sharded at block
 * granularity (head_dim 128, intermediate sizes in whole blocks). */
static const tcfg_t qwen3_moe_fp8 = {.type = "qwen3_moe",
                                     .H = 256,
                                     .I = 256,
                                     .Im = 128,
                                     .V = 300,
                                     .nh = 4,
                                     .kv = 2,
                                     .hd = 128,
                                     .E = 4,
                                     .mlp_only0 = 1,
                                     .L = 2};
static const tcfg_t dsv3_fp8 = {.type = "deepseek_v3",
                                .H = 256,
                                .I = 256,
                                .Im = 256,
                                .V = 200,
                                .hd = 64,
                                .nh = 4,
                                .kv = 4,
                                .E = 2,
                                .nshared = 1,
                                .first_dense = 1,
                                .q_lora = 128,
                                .kv_lora = 128,
                                .nope = 64,
                                .rope = 64,
                                .vhd = 64,
                                .L = 2};

static void test_fp8(void **state)
{
    (void)state;
    refit_case(&qwen3_moe_fp8, RESHARD_FP8_E4M3, "tp=2,ep=2,etp=1", "tp=2,ep=on");
    refit_case(&qwen3_moe_fp8, RESHARD_FP8_E4M3, "tp=1,pp=2,dp=2,ep=2", "tp=2,dp=2,ep=on");
    refit_case(&dsv3_fp8, RESHARD_FP8_E4M3, "tp=2,pp=2", "tp=2,ep=on");
}

/* ------------------------------------------------------------------ */
/* Wave 3: engines, vLLM versions, sequence-parallel MoE, conventions   */
/* ------------------------------------------------------------------ */

/* Independent engines vs vLLM's own DP. Per element the oracle knows: an
 * engine's rank r % (tp*dp) holds what rank r of a single engine holds. */
static void test_engines(void **state)
{
    (void)state;
    /* dense: engines and vLLM DP hold the same */
    refit_case(&llama, RESHARD_BF16, "tp=2,pp=3", "tp=2,engines=3");
    /* MoE, EP inside each engine (EP = TP = 2: 6 experts -> 3, 3 per engine) */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,engines=2,ep=on");
    /* MoE without EP: each engine splits the experts over its own tp */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,engines=2");
    /* engines of vLLM DP: 2 engines of tp=1,dp=2 with EP over each engine's 2 ranks */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=1,dp=2,ep=2", "tp=1,dp=2,ep=on,engines=2");
    /* each engine spans two domains of 2 ranks; every rank plans for itself,
     * and from its scoped layouts */
    refit_case_how(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=4,engines=2,ep=on",
                   (how_t){.domain_size = 2, .own_plans = 1});
    refit_case_how(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=4,engines=2,ep=on",
                   (how_t){.domain_size = 2, .own_plans = 2});
    refit_case_how(&dsv3, RESHARD_BF16, "tp=1,pp=3,dp=5,ep=5", "tp=2,engines=2,ep=on",
                   (how_t){.domain_size = 2, .own_plans = 0});
}

/* Bytes that must cross into the inference domains (plan lower bound), from
 * first principles: a domain receives the unique bytes its ranks hold. */
static uint64_t lower_bound(const tcfg_t *c, const char *train, const char *infer, int32_t dom)
{
    char *json = config_json(c);
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json(json, NULL, &m), RESHARD_OK);
    free(json);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse(train, &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse(infer, &is), RESHARD_OK);
    reshard_model_refit_t f;
    if (reshard_model_refit_create(m, &ts, &is, &f) != RESHARD_OK)
        fail_msg("%s -> %s: %s", train, infer, reshard_last_error());
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                .world_size = f.train_world + f.infer_world,
                                .my_rank = RESHARD_ALL_RANKS,
                                .domain_size = dom};
    reshard_plan_t *plan;
    if (reshard_plan_create(f.train, f.infer, &pp, &plan) != RESHARD_OK)
        fail_msg("%s -> %s: %s", train, infer, reshard_last_error());
    reshard_plan_stats_t st;
    assert_int_equal(reshard_plan_get_stats(plan, &st), RESHARD_OK);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
    return st.bytes_lower_bound;
}

static void test_engines_bound(void **state)
{
    (void)state;
    const tcfg_t *c = &qwen3_moe;
    /* bf16 bytes of the routed experts (layers 1, 2) and of the whole model */
    uint64_t experts = 2 * 3 * (uint64_t)(c->E * c->Im * c->H) * 2;
    uint64_t attn =
        (uint64_t)(c->nh * c->hd * c->H + 2 * c->kv * c->hd * c->H + c->H * c->nh * c->hd) * 2;
    uint64_t norms = (uint64_t)(2 * c->H + 2 * c->hd) * 2; /* + qwen3 q/k norms */
    uint64_t dense = 3 * (uint64_t)(c->I * c->H) * 2;
    uint64_t router = (uint64_t)(c->E * c->H) * 2;
    uint64_t M = 2 * (uint64_t)(c->V * c->H) * 2 + (uint64_t)c->H * 2 + 3 * (attn + norms) + dense +
                 2 * router + experts;
    /* domains of 2 ranks; the 4 inference ranks are 2 domains */
    /* two engines of tp=2, one per domain: each domain needs a whole copy */
    assert_int_equal(lower_bound(c, "tp=2,dp=2,ep=2,etp=1", "tp=2,engines=2,ep=on", 2), 2 * M);
    /* one engine of tp=2,dp=2 with EP over its 4 ranks: each domain needs the
     * non-expert part whole and its own experts (4 and 2 of the 6) */
    assert_int_equal(lower_bound(c, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on", 2),
                     2 * (M - experts) + experts);
    /* dense: the same either way */
    assert_int_equal(lower_bound(&llama, "tp=2,dp=2", "tp=4,engines=2", 4),
                     lower_bound(&llama, "tp=2,dp=2", "tp=4,dp=2", 4));
}

/* vLLM names by version: the oracle expects experts.routed_experts.* from
 * 0.25 (the default) and experts.* up to 0.24; the contents are the same. */
static void test_vllm_versions(void **state)
{
    (void)state;
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on,vllm=0.24");
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on,vllm=0.25");
    refit_case(&mixtral, RESHARD_BF16, "tp=2,pp=2", "tp=1,dp=4,ep=on,vllm=0.24");
    reshard_infer_spec_t is;
    assert_int_equal(reshard_infer_spec_parse("tp=2,vllm=0.26", &is), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "vllm=0.26 is not a supported vLLM version"));
    assert_int_equal(reshard_infer_spec_parse("tp=2,vllm=0.24,vllm=0.25", &is),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_infer_spec_parse("tp=2,engines=0", &is), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_infer_spec_parse("tp=2,dp=3,engines=4,vllm=0.24", &is), RESHARD_OK);
    assert_int_equal(reshard_infer_world(&is), 24);
    char text[96];
    assert_string_equal(reshard_infer_spec_str(&is, text, sizeof text),
                        "tp=2,dp=3,ep=off,engines=4,vllm=0.24");
    is.vllm = 7;
    assert_int_equal(reshard_infer_world(&is), -1);
}

/* DeepSeek shared experts under vLLM's sequence-parallel MoE (EP, tp > 1,
 * dp > 1: whole on every rank) and outside it (TP-split); Qwen2-MoE's
 * shared expert stays TP-split (qwen2_moe.py has no disable_tp). */
static void test_sequence_parallel_shared(void **state)
{
    (void)state;
    refit_case(&dsv3, RESHARD_BF16, "tp=1,pp=3,dp=5,ep=5", "tp=2,dp=2,ep=on");
    refit_case(&dsv3, RESHARD_BF16, "tp=1,pp=3,dp=5,ep=5", "tp=2,dp=2,ep=off");
    refit_case(&dsv3, RESHARD_BF16, "tp=1,pp=3,dp=5,ep=5", "tp=4,ep=on");
    refit_case(&qwen2_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on");
}

/* Megatron-Bridge does not pad the vocabulary (each rank V/tp rows);
 * Megatron-LM pads to 128*tp. */
static void test_megatron_conventions(void **state)
{
    (void)state;
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1,convention=megatron-bridge",
               "tp=2,dp=2,ep=on");
    /* Bridge: etp defaults to 1 with ep > 1 (transformer_config.py); Megatron-LM: tp */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,convention=megatron-bridge",
               "tp=2,dp=2,ep=off");
    reshard_train_spec_t e;
    assert_int_equal(reshard_train_spec_parse("tp=2,dp=2,ep=2,convention=megatron-bridge", &e),
                     RESHARD_OK);
    assert_int_equal(e.etp, 1);
    assert_int_equal(reshard_train_spec_parse("tp=2,dp=2,ep=2", &e), RESHARD_OK);
    assert_int_equal(e.etp, 2);
    assert_int_equal(reshard_train_spec_parse("tp=2,dp=2,convention=megatron-bridge", &e),
                     RESHARD_OK);
    assert_int_equal(e.etp, 2); /* no expert parallelism: tp */
    refit_case(&llama, RESHARD_BF16, "tp=4,cp=2,convention=megatron-bridge", "tp=2,engines=4");
    refit_case(&llama, RESHARD_BF16, "tp=4,convention=megatron-lm", "tp=4");
    /* V = 203 is divisible by no tp: Bridge cannot split it */
    char *json = config_json(&qwen3_tied);
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json(json, NULL, &m), RESHARD_OK);
    free(json);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse("tp=2,convention=megatron-bridge", &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=2", &is), RESHARD_OK);
    assert_int_equal(reshard_model_check(m, &ts, &is, 0), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(),
                           "train (megatron-bridge): tp=2 does not divide the vocabulary 203"));
    assert_int_equal(reshard_train_spec_parse("tp=2,convention=megatron", &ts),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "convention=megatron is not a modelled"));
    char text[128];
    assert_int_equal(reshard_train_spec_parse("tp=2,convention=megatron-bridge", &ts), RESHARD_OK);
    assert_string_equal(reshard_train_spec_str(&ts, text, sizeof text),
                        "tp=2,pp=1,dp=1,cp=1,ep=1,etp=2,convention=megatron-bridge");
    /* the default's name written out gives the default's text */
    assert_int_equal(reshard_train_spec_parse("tp=2,convention=megatron-lm", &ts), RESHARD_OK);
    assert_string_equal(reshard_train_spec_str(&ts, text, sizeof text),
                        "tp=2,pp=1,dp=1,cp=1,ep=1,etp=2");
    reshard_model_destroy(m);
}

/* Qwen2-MoE without a shared expert: vLLM still has shared_expert_gate; the
 * refit declares it and leaves it alone (the oracle checks its sentinel). */
static void test_qwen2_moe_no_shared(void **state)
{
    (void)state;
    tcfg_t c = qwen2_moe;
    c.Is = 0;
    refit_case(&c, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on");
    refit_case(&c, RESHARD_BF16, "tp=1,pp=2", "tp=2,engines=2");
}

/* vLLM EPLB: 6 experts + 2 redundant = 8 physical slots over EP 4 (2 per
 * rank), layer 0 dense, layers 1 and 2 MoE. Every slot must hold its logical
 * expert after the refit, duplicates included; a map that changes between
 * refits gives a new plan whose refit is checked again. */
static void test_eplb(void **state)
{
    (void)state;
    /* vLLM's initial map: slots 0..5 hold 0..5, slots 6, 7 hold 0, 1 */
    refit_case(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on,redundant=2");
    /* one map for both MoE layers: a permutation with experts 3 and 5 twice */
    static const int32_t one[8] = {5, 3, 0, 4, 3, 1, 2, 5};
    refit_case_how(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on,redundant=2",
                   (how_t){.domain_size = 0, .own_plans = 0, .eplb_map = one, .eplb_len = 8});
    /* the balancer moved experts: per-layer maps, each rank's own scoped plan,
     * NVLink domains of 2 (pieces forwarded), Megatron etp=2 */
    static const int32_t two[16] = {0, 0, 1, 2, 3, 4, 5, 5, /* layer 1 */
                                    4, 2, 1, 3, 0, 5, 2, 2 /* layer 2 */};
    refit_case_how(&qwen3_moe, RESHARD_BF16, "tp=2,dp=2,ep=2", "tp=2,dp=2,ep=on,redundant=2",
                   (how_t){.domain_size = 2, .own_plans = 2, .eplb_map = two, .eplb_len = 16});
    /* no redundant experts: EPLB still permutes them (a map alone turns it on) */
    static const int32_t perm[6] = {5, 4, 3, 2, 1, 0};
    refit_case_how(&qwen3_moe, RESHARD_BF16, "tp=1,dp=2,ep=2", "tp=1,dp=3,ep=on,engines=2",
                   (how_t){.domain_size = 0, .own_plans = 1, .eplb_map = perm, .eplb_len = 6});
}

/* A bad EPLB map or spec is refused before any layout is built, naming the
 * layer, slot or expert; two maps give two fingerprints. */
static void test_eplb_refused(void **state)
{
    (void)state;
    char *json = config_json(&qwen3_moe);
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json(json, NULL, &m), RESHARD_OK);
    free(json);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse("tp=2,dp=2,ep=2,etp=1", &ts), RESHARD_OK);
    static const struct {
        const char *infer;
        int32_t map[16];
        int64_t len;
        const char *msg;
    } bad[] = {
        {"tp=2,dp=2,ep=on,redundant=2",
         {0, 1, 2, 3, 4, 5, 0},
         7,
         "EPLB map has 7 entries; it must have one per physical expert slot, 8"},
        {"tp=2,dp=2,ep=on,redundant=2",
         {0, 1, 2, 3, 4, 5, 0, 6},
         8,
         "MoE layer 0: physical slot 7 holds logical expert 6, outside [0, 6)"},
        {"tp=2,dp=2,ep=on,redundant=2",
         {0, 1, 2, 3, 4, 5, 0, 1, 0, 1, 2, 3, 4, 4, 0, 1},
         16,
         "MoE layer 1: logical expert 5 has no physical slot"},
        {"tp=2,dp=2,ep=on,redundant=2",
         {0, 1, 2, -1, 4, 5, 0, 1},
         8,
         "physical slot 3 holds logical expert -1"},
        {"tp=2,dp=2,ep=on,redundant=1", {0}, 0, "EP size tp*dp=4 does not divide the 7 physical"},
        {"tp=2,dp=2,redundant=2", {0}, 0, "EPLB (redundant=2) needs ep=on"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        assert_int_equal(reshard_infer_spec_parse(bad[k].infer, &is), RESHARD_OK);
        is.eplb_map = bad[k].len ? bad[k].map : NULL;
        is.eplb_map_len = bad[k].len;
        reshard_model_refit_t f;
        assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_ERR_CONFIG);
        if (!strstr(reshard_last_error(), bad[k].msg))
            fail_msg("case %zu: '%s' lacks '%s'", k, reshard_last_error(), bad[k].msg);
    }
    /* the spec text keeps the redundant experts */
    char text[128];
    assert_int_equal(reshard_infer_spec_parse("tp=2,ep=on,redundant=2", &is), RESHARD_OK);
    assert_string_equal(reshard_infer_spec_str(&is, text, sizeof text),
                        "tp=2,dp=1,ep=on,redundant=2");
    /* two maps, two origins: plans made from different maps never agree */
    static const int32_t a[8] = {0, 1, 2, 3, 4, 5, 0, 1}, b[8] = {0, 1, 2, 3, 4, 5, 1, 0};
    reshard_model_refit_t fa, fb;
    assert_int_equal(reshard_infer_spec_parse("tp=2,dp=2,ep=on,redundant=2", &is), RESHARD_OK);
    is.eplb_map = a;
    is.eplb_map_len = 8;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &fa), RESHARD_OK);
    is.eplb_map = b;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &fb), RESHARD_OK);
    assert_true(fa.infer->origin.hash != fb.infer->origin.hash);
    assert_true(fa.train->origin.hash == fb.train->origin.hash);
    reshard_model_refit_destroy(&fa);
    reshard_model_refit_destroy(&fb);
    reshard_model_destroy(m);
}

/* GLM-4.5 (glm4_moe): GQA with q/k/v biases, no q/k norms, layer 0 dense,
 * 6 routed experts + 1 shared expert with the router's fp32 score-correction
 * bias. */
static const tcfg_t glm = {.type = "glm4_moe",
                           .H = 32,
                           .I = 48,
                           .Im = 16,
                           .V = 90,
                           .nh = 4,
                           .kv = 2,
                           .hd = 8,
                           .E = 6,
                           .nshared = 1,
                           .first_dense = 1,
                           .L = 3};

/* The names (in order), dtypes and shapes rank @p rank of @p t holds must be
 * @p want: {name, dtype, d0, d1, d2} (0: fewer dims). */
typedef struct {
    const char *name;
    reshard_dtype_t dt;
    int64_t d[3];
} want_t;

static void expect_names(const reshard_layout_t *l, int32_t rank, const want_t *want, int n)
{
    assert_int_equal(reshard_layout_declared_count(l, rank), n);
    for (int i = 0; i < n; i++) {
        reshard_buffer_info_t bi;
        assert_int_equal(reshard_layout_declared_buffer(l, rank, i, &bi), RESHARD_OK);
        if (strcmp(bi.name, want[i].name) || bi.dtype != want[i].dt)
            fail_msg("rank %d buffer %d: %s (%s), want %s (%s)", rank, i, bi.name,
                     reshard_dtype_name(bi.dtype), want[i].name, reshard_dtype_name(want[i].dt));
        for (int d = 0; d < 3; d++)
            assert_int_equal(d < bi.ndim ? bi.shape[d] : 0, want[i].d[d]);
    }
}

static void test_glm4_moe(void **state)
{
    (void)state;
    /* vLLM's own DP with EP (sequence-parallel MoE: glm4_moe.py's shared experts
     * stay TP-split), Megatron ep=2 etp=1 */
    refit_case(&glm, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on");
    /* independent engines with EP inside, Megatron pp=3 (one layer each), Bridge */
    refit_case(&glm, RESHARD_BF16, "tp=2,pp=3,convention=megatron-bridge", "tp=2,engines=2,ep=on");
    /* no EP: every expert split over tp*dp; each rank's own scoped plan, domains */
    refit_case_how(&glm, RESHARD_BF16, "tp=1,dp=2,ep=2", "tp=2,dp=2",
                   (how_t){.domain_size = 2, .own_plans = 2});
    /* EPLB: 6 + 2 redundant slots */
    refit_case(&glm, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on,redundant=2");

    /* names, dtypes and shapes from the frameworks' rules: vLLM tp=2 rank 0
     * (glm4_moe.py: qkv_proj with bias, o_proj without; dense gate_up/down;
     * MoE gate + fp32 e_score_correction_bias, FusedMoE w13/w2 (vLLM 0.25
     * routed_experts), shared_experts gate_up/down), Megatron tp=2 rank 0 */
    char *json = config_json(&glm);
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json(json, NULL, &m), RESHARD_OK);
    free(json);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse("tp=2", &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=2", &is), RESHARD_OK);
    reshard_model_refit_t f;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_OK);
    const reshard_dtype_t B = RESHARD_BF16, F = RESHARD_FP32;
    /* q 2 heads + k 1 + v 1 of 8 rows per rank: 32 rows */
    want_t vl[] = {{"model.embed_tokens.weight", B, {64, 32}},
                   {"model.layers.0.input_layernorm.weight", B, {32}},
                   {"model.layers.0.self_attn.qkv_proj.weight", B, {32, 32}},
                   {"model.layers.0.self_attn.qkv_proj.bias", B, {32}},
                   {"model.layers.0.self_attn.o_proj.weight", B, {32, 16}},
                   {"model.layers.0.post_attention_layernorm.weight", B, {32}},
                   {"model.layers.0.mlp.gate_up_proj.weight", B, {48, 32}},
                   {"model.layers.0.mlp.down_proj.weight", B, {32, 24}}};
    want_t vm[] = {{"model.layers.1.input_layernorm.weight", B, {32}},
                   {"model.layers.1.self_attn.qkv_proj.weight", B, {32, 32}},
                   {"model.layers.1.self_attn.qkv_proj.bias", B, {32}},
                   {"model.layers.1.self_attn.o_proj.weight", B, {32, 16}},
                   {"model.layers.1.post_attention_layernorm.weight", B, {32}},
                   /* vLLM's gate.weight is fp32 (nn.Linear(dtype=float32)): the
                    * trainer's bf16 router lands beside it, widened by the worker */
                   {"model.layers.1.mlp.gate.weight_bf16", B, {6, 32}},
                   {"model.layers.1.mlp.gate.e_score_correction_bias", F, {6}},
                   {"model.layers.1.mlp.experts.routed_experts.w13_weight", B, {6, 16, 32}},
                   {"model.layers.1.mlp.experts.routed_experts.w2_weight", B, {6, 32, 8}},
                   {"model.layers.1.mlp.shared_experts.gate_up_proj.weight", B, {16, 32}},
                   {"model.layers.1.mlp.shared_experts.down_proj.weight", B, {32, 8}}};
    want_t all[8 + 11 * 2 + 2];
    int n = 0;
    for (int i = 0; i < 8; i++)
        all[n++] = vl[i];
    char names[2][11][96];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 11; i++) {
            snprintf(names[k][i], sizeof names[k][i], "model.layers.%d.%s", k + 1,
                     vm[i].name + strlen("model.layers.1."));
            all[n] = vm[i];
            all[n++].name = names[k][i];
        }
    all[n++] = (want_t){"model.norm.weight", B, {32}};
    all[n++] = (want_t){"lm_head.weight", B, {64, 32}};
    expect_names(f.infer, f.train_world, all, n);
    /* Megatron-LM (vocab padded to 128*tp = 256): TE linear_qkv with its fused
     * layer norm and bias, dense linear_fc1 with layer_norm_weight; MoE
     * pre_mlp_layernorm, router (+ expert_bias fp32, a module buffer),
     * TEGroupedMLP experts weight0..5 (etp = tp = 2), shared_experts */
    want_t ml[] = {{"embedding.word_embeddings.weight", B, {128, 32}},
                   {"decoder.layers.0.self_attention.linear_qkv.layer_norm_weight", B, {32}},
                   {"decoder.layers.0.self_attention.linear_qkv.weight", B, {32, 32}},
                   {"decoder.layers.0.self_attention.linear_qkv.bias", B, {32}},
                   {"decoder.layers.0.self_attention.linear_proj.weight", B, {32, 16}},
                   {"decoder.layers.0.mlp.linear_fc1.layer_norm_weight", B, {32}},
                   {"decoder.layers.0.mlp.linear_fc1.weight", B, {48, 32}},
                   {"decoder.layers.0.mlp.linear_fc2.weight", B, {32, 24}}};
    /* per MoE layer 4 attention + pre_mlp_layernorm, router, expert_bias + 12
     * expert weights + 2 shared; then the final norm and the output layer */
    assert_int_equal(reshard_layout_declared_count(f.train, 0), 8 + 2 * (7 + 12 + 2) + 2);
    for (int i = 0; i < 8; i++) {
        reshard_buffer_info_t bi;
        assert_int_equal(reshard_layout_declared_buffer(f.train, 0, i, &bi), RESHARD_OK);
        assert_string_equal(bi.name, ml[i].name);
    }
    static const char *const moe_names[] = {
        "self_attention.linear_qkv.layer_norm_weight",
        "self_attention.linear_qkv.weight",
        "self_attention.linear_qkv.bias",
        "self_attention.linear_proj.weight",
        "pre_mlp_layernorm.weight",
        "mlp.router.weight",
        "mlp.router.expert_bias",
        "mlp.experts.linear_fc1.weight0",
    };
    for (int i = 0; i < 8; i++) {
        reshard_buffer_info_t bi;
        char want[128];
        snprintf(want, sizeof want, "decoder.layers.1.%s", moe_names[i]);
        assert_int_equal(reshard_layout_declared_buffer(f.train, 0, 8 + i, &bi), RESHARD_OK);
        assert_string_equal(bi.name, want);
        if (i == 6)
            assert_int_equal(bi.dtype, RESHARD_FP32);
    }
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
    /* the MTP layer (vLLM's separate glm4_moe_mtp drafter) is refused by name */
    json = config_json(&glm);
    reshard_model_options_t o = {.mtp = 1};
    assert_int_equal(reshard_model_load_json(json, &o, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "glm4_moe' with the mtp option"));
    free(json);
}

/* gpt-oss (gpt_oss): q/k/v/o biases, attention sinks, a router with a bias,
 * 4 experts with biases whose gate and up vLLM interleaves; sliding-window
 * layers have no tensors of their own. */
static const tcfg_t oss = {.type = "gpt_oss",
                           .H = 32,
                           .I = 16,
                           .Im = 16,
                           .V = 90,
                           .nh = 4,
                           .kv = 2,
                           .hd = 8,
                           .E = 4,
                           .L = 2};

static void test_gpt_oss(void **state)
{
    (void)state;
    /* vLLM EP over 4 ranks (one expert each, vLLM's own DP), Megatron ep=2 */
    refit_case(&oss, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "tp=2,dp=2,ep=on");
    /* no EP: the intermediate dim over all 4 ranks; w2_bias on flattened rank 0
     * only, zeros on the others (the oracle checks every element of every rank,
     * the buffers starting as garbage);
     * Megatron etp = tp = 2 splits the experts like a dense MLP */
    refit_case(&oss, RESHARD_BF16, "tp=2,pp=2", "tp=2,dp=2");
    /* engines with EP inside, Megatron-Bridge, each rank's own scoped plan, domains */
    refit_case_how(&oss, RESHARD_BF16, "tp=1,dp=2,ep=2,convention=megatron-bridge",
                   "tp=2,engines=2,ep=on", (how_t){.domain_size = 2, .own_plans = 2});
    /* vLLM 0.24 names (experts.w13_weight, experts.w13_bias) */
    refit_case(&oss, RESHARD_BF16, "tp=2", "tp=1,dp=2,vllm=0.24");

    char *json = config_json(&oss);
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json(json, NULL, &m), RESHARD_OK);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_refit_t f;
    assert_int_equal(reshard_train_spec_parse("tp=2", &ts), RESHARD_OK);
    /* refused: EPLB (vLLM's gpt-oss has none), an EP size not dividing the experts */
    assert_int_equal(reshard_infer_spec_parse("tp=2,ep=on,redundant=2", &is), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "vLLM's gpt-oss has no expert load balancer"));
    assert_int_equal(reshard_infer_spec_parse("tp=1,dp=3,ep=on", &is), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "does not divide the 4 experts"));
    assert_int_equal(reshard_infer_spec_parse("tp=4", &is), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "gpt_oss: tp=4 does not divide the 2 kv heads"));
    /* vLLM tp=2 rank 0's names, dtypes and shapes (gpt_oss.py): qkv rows 2 q heads +
     * 1 k + 1 v of 8, o_proj columns 2 heads of 8, experts' 16 rows split in two */
    assert_int_equal(reshard_infer_spec_parse("tp=2", &is), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_OK);
    const reshard_dtype_t B = RESHARD_BF16;
    want_t vl[] = {{"model.embedding.weight", B, {64, 32}},
                   {"model.layers.0.input_layernorm.weight", B, {32}},
                   {"model.layers.0.attn.qkv_proj.weight", B, {32, 32}},
                   {"model.layers.0.attn.qkv_proj.bias", B, {32}},
                   {"model.layers.0.attn.o_proj.weight", B, {32, 16}},
                   {"model.layers.0.attn.o_proj.bias", B, {32}},
                   {"model.layers.0.attn.sinks", B, {2}},
                   {"model.layers.0.post_attention_layernorm.weight", B, {32}},
                   {"model.layers.0.mlp.router.weight", B, {4, 32}},
                   {"model.layers.0.mlp.router.bias", B, {4}},
                   {"model.layers.0.mlp.experts.routed_experts.w13_weight", B, {4, 16, 32}},
                   {"model.layers.0.mlp.experts.routed_experts.w13_bias", B, {4, 16}},
                   {"model.layers.0.mlp.experts.routed_experts.w2_weight", B, {4, 32, 8}},
                   {"model.layers.0.mlp.experts.routed_experts.w2_bias", B, {4, 32}}};
    want_t all[1 + 13 * 2 + 2];
    char names[2][13][96];
    int n = 0;
    all[n++] = vl[0];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 13; i++) {
            snprintf(names[k][i], sizeof names[k][i], "model.layers.%d.%s", k,
                     vl[i + 1].name + strlen("model.layers.0."));
            all[n] = vl[i + 1];
            all[n++].name = names[k][i];
        }
    all[n++] = (want_t){"model.norm.weight", B, {32}};
    all[n++] = (want_t){"lm_head.weight", B, {64, 32}};
    expect_names(f.infer, f.train_world, all, n);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
    /* only the bf16 form: MXFP4 (the released experts) and FP8 destinations are refused */
    reshard_model_options_t o = {.infer_quant = RESHARD_QUANT_FP8_BLOCK};
    assert_int_equal(reshard_model_load_json(json, &o, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "'gpt_oss': only the bf16 form is modelled"));
    free(json);
}

/* Qwen3-Next (qwen3_next): layers 0 and 2 Gated DeltaNet, 1 and 3 gated
 * full attention (full_attention_interval 2), every layer MoE with a gated
 * shared expert. 2 key heads / 4 value heads: two value heads per key-head
 * group, so the grouped HF rows and Megatron's sections differ. */
static const tcfg_t next = {.type = "qwen3_next",
                            .H = 32,
                            .I = 64,
                            .Im = 16,
                            .Is = 16,
                            .V = 96,
                            .nh = 4,
                            .kv = 2,
                            .hd = 8,
                            .E = 4,
                            .L = 4,
                            .nk = 2,
                            .nv = 4,
                            .kd = 4,
                            .vd = 8,
                            .K = 4,
                            .interval = 2};

static void test_qwen3_next(void **state)
{
    (void)state;
    /* whole query groups and key-head groups per TP rank, experts by EP */
    refit_case(&next, RESHARD_BF16, "tp=2,ep=2,etp=1", "tp=2,ep=on");
    /* Megatron pp=2 tp=2 -> vLLM tp=1 x DP 2 without EP (experts split over 2) */
    refit_case(&next, RESHARD_BF16, "tp=2,pp=2", "tp=1,dp=2");
    /* Megatron-Bridge, engines, EPLB's redundant slots, own plans */
    refit_case_how(&next, RESHARD_BF16, "tp=1,dp=2,ep=2,convention=megatron-bridge",
                   "tp=2,engines=2,ep=on,redundant=2", (how_t){.domain_size = 2, .own_plans = 2});
    /* one kv head: tp=2 cuts Megatron's gated group [q; gate; k; v] in two
     * (rank 0: q, gate of head 0; rank 1: gates 1-3, k, v), vLLM replicates k/v */
    tcfg_t mqa = next;
    mqa.kv = 1;
    refit_case(&mqa, RESHARD_BF16, "tp=2", "tp=2");
    /* vLLM's sequence-parallel MoE (EP, tp > 1, dp > 1): qwen3_next.py builds
     * the shared expert with disable_tp=is_sequence_parallel: every rank holds
     * shared_expert.gate_up_proj / down_proj whole (every element checked on
     * every rank by the oracle) */
    refit_case(&next, RESHARD_BF16, "tp=2,ep=2,etp=1", "tp=2,dp=2,ep=on");
    refit_case(&next, RESHARD_BF16, "tp=1,pp=2,dp=2,ep=2", "tp=2,dp=2,ep=on");

    char *json = config_json(&next);
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json(json, NULL, &m), RESHARD_OK);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_refit_t f;
    /* refused: tp not dividing the key heads */
    assert_int_equal(reshard_train_spec_parse("tp=4", &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=1", &is), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "qwen3_next: tp=4 does not divide"));
    /* the staged names say what the worker must do: out_norm + 1, A_log widened */
    reshard_tensors_t *T;
    reshard_layout_t *l;
    reshard_model_buffers_t *b;
    assert_int_equal(reshard_model_tensors(m, &T), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=1", &is), RESHARD_OK);
    assert_int_equal(reshard_model_infer_layout(m, T, &is, 0, &l, &b), RESHARD_OK);
    int staged = 0, plain = 0;
    for (int64_t k = 0; k < reshard_model_buffers_count(b); k++) {
        reshard_model_buffer_t e;
        assert_int_equal(reshard_model_buffers_get(b, k, &e), RESHARD_OK);
        staged += ends(e.name, "linear_attn.norm.weight_minus_1") ||
                  ends(e.name, "linear_attn.A_log_bf16");
        plain += ends(e.name, "linear_attn.norm.weight") || ends(e.name, "linear_attn.A_log");
    }
    assert_int_equal(staged, 4); /* 2 DeltaNet layers x (norm, A_log) */
    assert_int_equal(plain, 0);
    reshard_model_buffers_destroy(b);
    reshard_layout_destroy(l);
    reshard_tensors_destroy(T);
    reshard_model_destroy(m);
    free(json);
}

/* SGLang's layouts (engine=sglang), every element of every rank against
 * the SGLang oracle: TP, DP attention, EP (on and numeric), DeepEP, the
 * fused shared expert, --enable-dp-lm-head and --moe-dense-tp-size 1. */
static void test_sglang_dense(void **state)
{
    (void)state;
    /* qwen3, tied: attention TP 2 of tp=4 (kv heads 2: one each) */
    refit_case(&qwen3_tied, RESHARD_BF16, "tp=2,pp=2,first=3",
               "engine=sglang,tp=4,dp=2,dp_attention=on");
    /* attention TP 1: every rank whole attention and embedding, MLP over tp=4 */
    refit_case(&qwen3_tied, RESHARD_BF16, "tp=2", "engine=sglang,tp=4,dp=4,dp_attention=on");
    refit_case(&qwen3_tied, RESHARD_BF16, "tp=1,dp=2", "engine=sglang,tp=8,engines=2");
    tcfg_t untied = qwen3_tied;
    untied.tied = 0;
    untied.V = 256;
    refit_case(&untied, RESHARD_BF16, "tp=2",
               "engine=sglang,tp=4,dp=2,dp_attention=on,dp_lm_head=on");
    refit_case(&untied, RESHARD_BF16, "tp=2", "engine=sglang,tp=4,dp=2,dp_attention=on");
    /* llama and qwen2 (biases) under TP */
    refit_case(&llama, RESHARD_BF16, "tp=2,pp=3", "engine=sglang,tp=2,engines=2");
    refit_case(&qwen2, RESHARD_BF16, "tp=2", "engine=sglang,tp=4");
}

static void test_sglang_moe(void **state)
{
    (void)state;
    tcfg_t q = qwen3_moe;
    q.E = 8;
    refit_case(&q, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "engine=sglang,tp=4");
    refit_case(&q, RESHARD_BF16, "tp=2,dp=2,ep=2,etp=1", "engine=sglang,tp=4,ep=on");
    /* --ep-size 2 of tp=4: moe_tp 2 */
    refit_case(&q, RESHARD_BF16, "tp=2,dp=2,ep=4,etp=1", "engine=sglang,tp=4,ep=2");
    refit_case(&q, RESHARD_BF16, "tp=2,dp=2,ep=2", "engine=sglang,tp=4,dp=2,dp_attention=on,ep=on");
    refit_case(&q, RESHARD_BF16, "tp=1,dp=4,ep=4", "engine=sglang,tp=4,dp=4,dp_attention=on,ep=2");
    refit_case(&q, RESHARD_BF16, "tp=2,ep=2,etp=1",
               "engine=sglang,tp=2,ep=on,a2a=deepep,engines=2");
}

/* DeepSeek-V3 shape without MTP: MLA with q_lora, one dense layer, a shared expert. */
static void test_sglang_mla(void **state)
{
    (void)state;
    tcfg_t d = dsv3;
    d.nmtp = 0;
    d.E = 8;
    refit_case(&d, RESHARD_BF16, "tp=2,pp=2,first=2", "engine=sglang,tp=4");
    refit_case(&d, RESHARD_BF16, "tp=2,ep=2,etp=1",
               "engine=sglang,tp=4,dp=2,dp_attention=on,ep=on");
    refit_case(&d, RESHARD_BF16, "tp=1,dp=4,ep=4",
               "engine=sglang,tp=4,dp=4,dp_attention=on,ep=2,moe_dense_tp=1");
    refit_case(&d, RESHARD_BF16, "tp=2,ep=2,etp=1", "engine=sglang,tp=2,ep=on,a2a=deepep");
    /* 256 routed experts and one shared: fused as expert 256 without EP */
    tcfg_t f = d;
    f.E = 256;
    f.H = 32;
    f.Im = 4;
    f.L = 2;
    refit_case(&f, RESHARD_BF16, "tp=2,ep=2,etp=1", "engine=sglang,tp=2,dp=2,dp_attention=on");
    refit_case(&f, RESHARD_BF16, "tp=2,ep=2,etp=1", "engine=sglang,tp=4,shared_fusion=off");
    refit_case(&f, RESHARD_BF16, "tp=2,ep=2,etp=1", "engine=sglang,tp=4,ep=2");
    tcfg_t no_q_lora = d;
    no_q_lora.q_lora = 0;
    refit_case(&no_q_lora, RESHARD_BF16, "tp=4", "engine=sglang,tp=2,dp=2,dp_attention=on");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gqa_tp_over_kv_heads_tied),
        cmocka_unit_test(test_fused_qkv_groups),
        cmocka_unit_test(test_moe_experts),
        cmocka_unit_test(test_pipeline_chunks),
        cmocka_unit_test(test_qwen2_biases),
        cmocka_unit_test(test_qwen2_moe_mixtral),
        cmocka_unit_test(test_mla),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_engines),
        cmocka_unit_test(test_engines_bound),
        cmocka_unit_test(test_vllm_versions),
        cmocka_unit_test(test_sequence_parallel_shared),
        cmocka_unit_test(test_megatron_conventions),
        cmocka_unit_test(test_qwen2_moe_no_shared),
        cmocka_unit_test(test_eplb),
        cmocka_unit_test(test_eplb_refused),
        cmocka_unit_test(test_glm4_moe),
        cmocka_unit_test(test_gpt_oss),
        cmocka_unit_test(test_qwen3_next),
        cmocka_unit_test(test_sglang_dense),
        cmocka_unit_test(test_sglang_moe),
        cmocka_unit_test(test_sglang_mla),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
