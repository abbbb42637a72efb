/*
 * nemotron_h: the hybrid Mamba-2 / attention / MLP / MoE stack of NVIDIA
 * Nemotron-H (Nemotron 3 Nano, Super): its config, its logical tensors, and
 * the parameters of a Megatron rank (HybridStack, ssm/mamba_mixer.py) and of
 * a vLLM rank (models/nemotron_h.py, layers/mamba/mamba_mixer2.py).
 *
 * The Mamba mixer's fused tensors are one logical tensor each, in HF rows:
 *   in_proj.weight [z (I); x (I); B (G*N); C (G*N); dt (Hm)] x H
 *   conv1d.weight  [x (I); B (G*N); C (G*N)] x 1 x K, conv1d.bias likewise
 * Each TP rank of either framework holds, in this order, its slice of every
 * segment: a plain row range of the HF tensor per segment, so every fragment
 * is a box. When vLLM's tp does not divide n_groups (only legal for
 * n_groups == 1) every rank holds the whole of B and C.
 *
 * vLLM keeps A = -exp(A_log) (fp32), a value computed from the checkpoint,
 * not a copy of it. The refit moves A_log, bit for bit, into a per-rank
 * buffer named "model.layers.N.mixer.A_log" ([Hm/tp] fp32, the rank's
 * slice); the caller computes its parameter mixer.A from it after the refit
 * (as vLLM's weight loader does when it loads a checkpoint). reshard never
 * writes A_log bytes into a buffer named mixer.A.
 *
 * One dtype per logical tensor on both sides: A_log, D and dt_bias bf16.
 * Megatron creates A_log fp32, but under bf16 training Float16Module casts
 * every floating parameter not marked keep_in_fp32 (transformer/module.py
 * 458-511 at Megatron-LM d98e8a6; nothing marks A_log), so a trainer holds
 * it bf16; the A_log buffer of the vLLM side is bf16 too (the worker computes
 * the fp32 A = -exp(A_log) from it, losing nothing the trainer had). D and
 * dt_bias: vLLM's MambaMixer2 creates them in the model dtype.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/error.h"

/* ------------------------------------------------------------------ */
/* Config                                                              */
/* ------------------------------------------------------------------ */

#define GETI(key, def, min, dst)                                                                   \
    do {                                                                                           \
        int64_t v_;                                                                                \
        TRY(rs_config_int(root, key, def, min, &v_));                                              \
        dst = v_;                                                                                  \
    } while (0)

/* Refuse a config whose field @p key is true: it implies tensors that are
 * not built. */
static reshard_status_t refuse_true(json_t *root, const char *key, const char *what)
{
    int on;
    TRY(rs_config_bool(root, key, 0, &on));
    if (on)
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: nemotron_h with %s = true (%s) is not modelled", key, what);
    return RESHARD_OK;
}

/* hybrid_override_pattern: per layer one of M * - E; '|' marks a pipeline
 * stage boundary (Megatron's hybrid_layer_pattern). */
static reshard_status_t parse_pattern(json_t *root, reshard_model_t *m)
{
    rs_hybrid_t *hy = &m->hy;
    json_t *field = json_object_get(root, "hybrid_override_pattern");
    const char *pat = json_string_value(field);
    if (!pat)
        return rs_error(RESHARD_ERR_CONFIG,
                        field ? "config: field 'hybrid_override_pattern' is not a string (one "
                                "of M * - E per layer; nemotron_h)"
                              : "config: required field 'hybrid_override_pattern' is missing "
                                "(nemotron_h)");
    size_t n = strlen(pat);
    hy->kind = calloc(n + 1, 1);
    hy->stage0 = calloc(n + 1, sizeof *hy->stage0);
    if (!hy->kind || !hy->stage0)
        return rs_error(RESHARD_ERR_NOMEM, "model: out of memory");
    int32_t layers = 0, segs = 1;
    for (size_t i = 0; i < n; i++) {
        char k = pat[i];
        if (k == '|') {
            /* An empty segment ("M||M", a leading or trailing '|') is a
             * stage or model chunk without decoder layers: Megatron's
             * select_pipeline_segment (hybrid_layer_allocation.py 331-490,
             * d98e8a6) splits on '|' and builds a HybridStack of no layers
             * for it, and the validator accepts it, so it is modelled as
             * Megatron runs it (the stage holds only what its position gives
             * it: embedding, final norm, output layer). With the layers
             * option, segments that begin past the kept layers are dropped. */
            if (layers < m->L || m->L == m->Lcfg)
                hy->stage0[segs++] = layers;
            continue;
        }
        if (!strchr("M*-E", k))
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: hybrid_override_pattern has layer symbol '%c' at %zu; "
                            "modelled: M (Mamba-2), * (attention), - (MLP), E (MoE)",
                            k, i);
        if (layers < m->L)
            hy->kind[layers] = k;
        layers++;
    }
    if (layers != m->Lcfg)
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: hybrid_override_pattern has %d layers, num_hidden_layers is %d",
                        layers, m->Lcfg);
    hy->segments = segs;
    return RESHARD_OK;
}

reshard_status_t rs_hybrid_parse(json_t *root, const reshard_model_options_t *o, reshard_model_t *m)
{
    rs_hybrid_t *hy = &m->hy;
    if (o->mtp)
        return rs_error(RESHARD_ERR_CONFIG,
                        "nemotron_h: the MTP layers (mtp_hybrid_override_pattern) are not "
                        "modelled; vLLM's NemotronH drops mtp.* weights from the main model");
    if (o->dtype != RESHARD_BF16 || o->infer_quant != RESHARD_QUANT_NONE)
        return rs_error(RESHARD_ERR_CONFIG, "nemotron_h: only the bf16 form is modelled, not %s",
                        o->infer_quant == RESHARD_QUANT_MXFP8 ? "mxfp8 (1x32 blocks)"
                        : o->infer_quant != RESHARD_QUANT_NONE
                            ? "fp8 128x128 quantized inference weights"
                            : reshard_dtype_name(o->dtype));
    /* attention_bias and mlp_bias are refused for every family (config.c) */
    TRY(refuse_true(root, "mamba_proj_bias", "in_proj/out_proj biases"));
    TRY(refuse_true(root, "use_bias", "in_proj/out_proj biases"));
    int conv_bias;
    TRY(rs_config_bool(root, "use_conv_bias", 1, &conv_bias));
    if (!conv_bias)
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: nemotron_h with use_conv_bias = false is not modelled (Megatron's "
                        "MambaMixer asserts conv_bias)");
    m->qk_norm = 0;
    GETI("mamba_num_heads", -1, 1, hy->mh);
    GETI("mamba_head_dim", -1, 1, hy->mhd);
    GETI("n_groups", -1, 1, hy->G);
    GETI("ssm_state_size", -1, 1, hy->N);
    GETI("conv_kernel", -1, 1, hy->K);
    if (hy->mh % hy->G)
        return rs_error(RESHARD_ERR_CONFIG,
                        "config: n_groups %d does not divide mamba_num_heads %d", hy->G, hy->mh);
    TRY(parse_pattern(root, m));
    bool moe = strchr(hy->kind, 'E') != NULL;
    int64_t nshared = 0;
    GETI("n_routed_experts", 0, 0, m->E);
    if (moe) {
        if (m->E < 1)
            return rs_error(RESHARD_ERR_CONFIG,
                            "config: the pattern has MoE layers (E) but n_routed_experts is %d",
                            m->E);
        GETI("moe_intermediate_size", -1, 1, m->Im);
        GETI("num_experts_per_tok", 1, 1, m->topk);
        GETI("n_shared_experts", 0, 0, nshared);
        if (nshared) {
            int64_t is;
            GETI("moe_shared_expert_intermediate_size", -1, 1, is);
            m->Is = is * nshared;
        }
        GETI("moe_latent_size", 0, 0, hy->latent);
        m->router_bias = 1; /* e_score_correction_bias: vLLM always creates it */
    } else {
        m->E = 0;
    }
    m->moe = calloc((size_t)m->L + 1, sizeof *m->moe);
    if (!m->moe)
        return rs_error(RESHARD_ERR_NOMEM, "model: out of memory");
    for (int32_t i = 0; i < m->L; i++)
        m->moe[i] = hy->kind[i] == 'E';
    return RESHARD_OK;
}

void rs_hybrid_free(rs_hybrid_t *hy)
{
    free(hy->kind);
    free(hy->stage0);
    memset(hy, 0, sizeof *hy);
}

/* ------------------------------------------------------------------ */
/* Logical tensors                                                     */
/* ------------------------------------------------------------------ */

static int64_t inner(const rs_hybrid_t *hy)
{
    return (int64_t)hy->mh * hy->mhd;
}

/* Input width of the routed experts: the latent size, or H. */
static int64_t expert_in(const reshard_model_t *m)
{
    return m->hy.latent ? m->hy.latent : m->H;
}

#define BF16 RESHARD_BF16
#define FP32 RESHARD_FP32

static reshard_status_t mamba_tensors(rs_cat_t *c, rs_layer_ids_t *l, const char *p)
{
    const reshard_model_t *m = rs_cat_model(c);
    const rs_hybrid_t *hy = &m->hy;
    int64_t I = inner(hy), GN = (int64_t)hy->G * hy->N, Hm = hy->mh, H = m->H;
    int64_t in[2] = {2 * I + 2 * GN + Hm, H}, cw[3] = {I + 2 * GN, 1, hy->K}, cb = I + 2 * GN;
    int64_t out[2] = {H, I};
    TRY(rs_cat_add(c, &l->m_in, BF16, 2, in, 0, NULL, "%sin_proj.weight", p));
    TRY(rs_cat_add(c, &l->m_conv_w, BF16, 3, cw, 0, NULL, "%sconv1d.weight", p));
    TRY(rs_cat_add(c, &l->m_conv_b, BF16, 1, &cb, 0, NULL, "%sconv1d.bias", p));
    /* bf16: Float16Module casts it (see the top of this file) */
    TRY(rs_cat_add(c, &l->m_A_log, BF16, 1, &Hm, 0, NULL, "%sA_log", p));
    TRY(rs_cat_add(c, &l->m_D, BF16, 1, &Hm, 0, NULL, "%sD", p));
    TRY(rs_cat_add(c, &l->m_dt_bias, BF16, 1, &Hm, 0, NULL, "%sdt_bias", p));
    TRY(rs_cat_add(c, &l->m_norm, BF16, 1, &I, 0, NULL, "%snorm.weight", p));
    return rs_cat_add(c, &l->m_out, BF16, 2, out, 0, NULL, "%sout_proj.weight", p);
}

static reshard_status_t attention_tensors(rs_cat_t *c, rs_layer_ids_t *l, const char *p)
{
    const reshard_model_t *m = rs_cat_model(c);
    int64_t H = m->H, nh = m->nh, kv = m->kv, hd = m->hd;
    int64_t qs[2] = {nh * hd, H}, qv[4] = {kv, nh / kv, hd, H};
    int64_t ks[2] = {kv * hd, H}, kvv[3] = {kv, hd, H}, os[2] = {H, nh * hd};
    TRY(rs_cat_add(c, &l->q, BF16, 2, qs, 4, qv, "%sq_proj.weight", p));
    TRY(rs_cat_add(c, &l->k, BF16, 2, ks, 3, kvv, "%sk_proj.weight", p));
    TRY(rs_cat_add(c, &l->v, BF16, 2, ks, 3, kvv, "%sv_proj.weight", p));
    return rs_cat_add(c, &l->o, BF16, 2, os, 0, NULL, "%so_proj.weight", p);
}

/* A squared-ReLU MLP (not gated): up [n, H], down [H, n]. */
static reshard_status_t mlp_tensors(rs_cat_t *c, int32_t *up, int32_t *down, int64_t n,
                                    const char *p, const char *sub)
{
    int64_t H = rs_cat_model(c)->H, us[2] = {n, H}, ds[2] = {H, n};
    TRY(rs_cat_add(c, up, BF16, 2, us, 0, NULL, "%s%sup_proj.weight", p, sub));
    return rs_cat_add(c, down, BF16, 2, ds, 0, NULL, "%s%sdown_proj.weight", p, sub);
}

static reshard_status_t moe_tensors(rs_cat_t *c, rs_layer_ids_t *l, const char *p)
{
    const reshard_model_t *m = rs_cat_model(c);
    int64_t H = m->H, E = m->E, Hin = expert_in(m), rs[2] = {E, H};
    int64_t eu[3] = {E, m->Im, Hin}, ed[3] = {E, Hin, m->Im};
    /* gate.weight: bf16 in Megatron (router.py casts to params_dtype) and in
     * vLLM's GateLinear on SM90+ (fp32 only without its kernels) */
    TRY(rs_cat_add(c, &l->router, BF16, 2, rs, 0, NULL, "%sgate.weight", p));
    TRY(rs_cat_add(c, &l->router_bias, FP32, 1, &E, 0, NULL, "%sgate.e_score_correction_bias", p));
    TRY(rs_cat_add(c, &l->e_up, BF16, 3, eu, 0, NULL, "%sexperts.up_proj.weight", p));
    TRY(rs_cat_add(c, &l->e_down, BF16, 3, ed, 0, NULL, "%sexperts.down_proj.weight", p));
    if (m->Is)
        TRY(mlp_tensors(c, &l->s_up, &l->s_down, m->Is, p, "shared_experts."));
    if (m->hy.latent) {
        int64_t f1[2] = {m->hy.latent, H}, f2[2] = {H, m->hy.latent};
        TRY(rs_cat_add(c, &l->lat1, BF16, 2, f1, 0, NULL, "%sfc1_latent_proj.weight", p));
        TRY(rs_cat_add(c, &l->lat2, BF16, 2, f2, 0, NULL, "%sfc2_latent_proj.weight", p));
    }
    return RESHARD_OK;
}

reshard_status_t rs_hybrid_catalogue(rs_cat_t *c)
{
    const reshard_model_t *m = rs_cat_model(c);
    rs_model_ids_t *ids = rs_cat_ids(c);
    int64_t H = m->H, emb[2] = {m->V, H};
    ids->nlayers = m->L;
    ids->layer = malloc((size_t)ids->nlayers * sizeof *ids->layer + 1);
    if (!ids->layer)
        return rs_error(RESHARD_ERR_NOMEM, "catalogue: out of memory");
    TRY(rs_cat_add(c, &ids->embed, BF16, 2, emb, 0, NULL, "backbone.embeddings.weight"));
    for (int32_t i = 0; i < m->L; i++) {
        rs_layer_ids_t *l = &ids->layer[i];
        memset(l, 0xff, sizeof *l); /* every id -1 */
        l->hf_index = i;
        char p[64];
        TRY(rs_cat_add(c, &l->in_norm, BF16, 1, &H, 0, NULL, "backbone.layers.%d.norm.weight", i));
        snprintf(p, sizeof p, "backbone.layers.%d.mixer.", i);
        switch (m->hy.kind[i]) {
        case 'M':
            TRY(mamba_tensors(c, l, p));
            break;
        case '*':
            TRY(attention_tensors(c, l, p));
            break;
        case '-':
            TRY(mlp_tensors(c, &l->up, &l->down, m->I, p, ""));
            break;
        default:
            TRY(moe_tensors(c, l, p));
        }
    }
    TRY(rs_cat_add(c, &ids->norm, BF16, 1, &H, 0, NULL, "backbone.norm_f.weight"));
    if (m->tied)
        ids->lm_head = ids->embed;
    else
        TRY(rs_cat_add(c, &ids->lm_head, BF16, 2, emb, 0, NULL, "lm_head.weight"));
    return RESHARD_OK;
}

/* ------------------------------------------------------------------ */
/* Rules                                                               */
/* ------------------------------------------------------------------ */

static bool has_kind(const reshard_model_t *m, char k)
{
    return memchr(m->hy.kind, k, (size_t)m->L) != NULL;
}

reshard_status_t rs_hybrid_check_train(const reshard_model_t *m, const reshard_train_spec_t *s)
{
    const rs_hybrid_t *hy = &m->hy;
    int32_t tp = s->tp, v = rs_vpp(s);
    if (has_kind(m, 'M')) {
        RULE(hy->mh % tp == 0,
             "train: tp=%d does not divide the %d Mamba heads (Megatron MambaMixer: nheads %% "
             "tp_size == 0)",
             tp, hy->mh);
        RULE(hy->G % tp == 0,
             "train: tp=%d does not divide the %d Mamba groups (Megatron MambaMixer: ngroups %% "
             "tp_size == 0; it does not replicate groups)",
             tp, hy->G);
    }
    /* hybrid_layer_allocation.py select_pipeline_segment */
    if (hy->segments == 1) {
        RULE(v == 1,
             "train: vpp=%d needs '|' stage boundaries in hybrid_override_pattern (Megatron's "
             "hybrid stack has no virtual pipeline without them)",
             v);
        return RESHARD_OK;
    }
    RULE(s->first == 0 && s->last == 0,
         "train: first=/last= stage layer counts with '|' in hybrid_override_pattern (Megatron: "
         "the '|' separators already define the stages)");
    /* arguments.py 840-862 (d98e8a6): segments % pp == 0, and Megatron
     * derives vpp = segments / pp (it refuses
     * --num-virtual-stages-per-pipeline-rank with a hybrid pattern; reshard
     * accepts vpp= when it equals the derived value) */
    RULE(hy->segments % s->pp == 0,
         "train: pp=%d does not divide the %d '|' pipeline segments of hybrid_override_pattern "
         "(Megatron: the segments must split evenly over the pipeline stages)",
         s->pp, hy->segments);
    int32_t derived = hy->segments / s->pp;
    RULE(v == 1 || v == derived,
         "train: vpp=%d with '|' in hybrid_override_pattern: Megatron derives vpp = segments/pp "
         "= %d/%d = %d itself (leave vpp out)",
         v, hy->segments, s->pp, derived);
    /* Megatron-Bridge hybrid_provider.py 291 (067f987): no virtual pipeline */
    RULE(derived == 1 || rs_convention(s) != RESHARD_TRAIN_MEGATRON_BRIDGE,
         "train (megatron-bridge): the %d '|' segments over pp=%d make %d virtual pipeline "
         "stages per rank, which Megatron-Bridge's hybrid provider refuses (\"Virtual pipeline "
         "model parallelism is temporarily unsupported in Hybrid models\"); use pp=%d or "
         "convention=megatron-lm",
         hy->segments, s->pp, derived, hy->segments);
    return RESHARD_OK;
}

reshard_status_t rs_hybrid_check_infer(const reshard_model_t *m, const reshard_infer_spec_t *s)
{
    const rs_hybrid_t *hy = &m->hy;
    int32_t tp = s->tp;
    if (has_kind(m, 'M')) {
        RULE(hy->mh % tp == 0, "infer: tp=%d does not divide the %d Mamba heads (vLLM MambaMixer2)",
             tp, hy->mh);
        RULE(hy->G % tp == 0 || hy->G == 1,
             "infer: tp=%d does not divide the %d Mamba groups (vLLM MambaMixer2 replicates "
             "groups only when n_groups == 1)",
             tp, hy->G);
    }
    return RESHARD_OK;
}

/* ------------------------------------------------------------------ */
/* Fragments shared by both sides                                      */
/* ------------------------------------------------------------------ */

/* Rows [r0, r0+n) of tensor @p t (every other dim whole) at buffer row
 * @p at of a buffer whose rows are the tensor's rows. */
static reshard_status_t rows_at(rs_emit_t *e, int32_t t, int32_t buf, int64_t at, int64_t r0,
                                int64_t n)
{
    reshard_tensor_info_t info;
    TRY(reshard_tensors_info(e->T, t, &info));
    int64_t row = 1;
    for (int d = 1; d < info.ndim; d++)
        row *= info.shape[d];
    return rs_emit_dim0(e, t, buf, at * row, r0, n);
}

/* The Mamba mixer of TP rank t of tp, in the names of @p names (Megatron or
 * vLLM, indexed as below). B and C: the rank's groups, or all of them when
 * the groups are replicated (vLLM with n_groups == 1 < tp). */
enum { MX_IN, MX_CONV_W, MX_CONV_B, MX_A_LOG, MX_D, MX_DT_BIAS, MX_NORM, MX_OUT, MX_N };

static reshard_status_t mixer(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                              const char *const *names)
{
    const reshard_model_t *m = e->m;
    const rs_hybrid_t *hy = &m->hy;
    int64_t I = inner(hy), GN = (int64_t)hy->G * hy->N, Hm = hy->mh;
    int64_t zi = I / tp, hi = Hm / tp;
    bool split = hy->G % tp == 0;
    int64_t gi = split ? GN / tp : GN, g0 = split ? t * gi : 0;
    /* in_proj: [z; x; B; C; dt] */
    int32_t b = rs_emit_buffer(e, l->m_in, 1, 2 * zi + 2 * gi + hi, m->H, "%s", names[MX_IN]);
    if (b < 0)
        return (reshard_status_t)b;
    TRY(rows_at(e, l->m_in, b, 0, t * zi, zi));
    TRY(rows_at(e, l->m_in, b, zi, I + t * zi, zi));
    TRY(rows_at(e, l->m_in, b, 2 * zi, 2 * I + g0, gi));
    TRY(rows_at(e, l->m_in, b, 2 * zi + gi, 2 * I + GN + g0, gi));
    TRY(rows_at(e, l->m_in, b, 2 * zi + 2 * gi, 2 * I + 2 * GN + t * hi, hi));
    /* conv1d weight and bias: [x; B; C] */
    const int32_t conv[2] = {l->m_conv_w, l->m_conv_b};
    for (int k = 0; k < 2; k++) {
        int64_t shape[3] = {zi + 2 * gi, 1, hy->K}; /* weight [channels, 1, K], bias [channels] */
        b = rs_emit_buffer_shaped(e, conv[k], k ? 1 : 3, shape, "%s", names[MX_CONV_W + k]);
        if (b < 0)
            return (reshard_status_t)b;
        TRY(rows_at(e, conv[k], b, 0, t * zi, zi));
        TRY(rows_at(e, conv[k], b, zi, I + g0, gi));
        TRY(rows_at(e, conv[k], b, zi + gi, I + GN + g0, gi));
    }
    TRY(rs_emit_column(e, l->m_A_log, tp, t, names[MX_A_LOG]));
    TRY(rs_emit_column(e, l->m_D, tp, t, names[MX_D]));
    TRY(rs_emit_column(e, l->m_dt_bias, tp, t, names[MX_DT_BIAS]));
    TRY(rs_emit_column(e, l->m_norm, tp, t, names[MX_NORM]));
    return rs_emit_row(e, l->m_out, tp, t, names[MX_OUT]);
}

static void mixer_names(char (*buf)[160], const char **names, const char *p, bool vllm)
{
    static const char *const mg[MX_N] = {"mixer.in_proj.weight",
                                         "mixer.conv1d_weight",
                                         "mixer.conv1d_bias",
                                         "mixer.A_log",
                                         "mixer.D",
                                         "mixer.dt_bias",
                                         "mixer.norm.weight",
                                         "mixer.out_proj.weight"};
    static const char *const vl[MX_N] = {"mixer.in_proj.weight",
                                         "mixer.conv1d.weight",
                                         "mixer.conv1d.bias",
                                         "mixer.A_log",
                                         "mixer.D",
                                         "mixer.dt_bias",
                                         "mixer.norm.weight",
                                         "mixer.out_proj.weight"};
    for (int k = 0; k < MX_N; k++) {
        snprintf(buf[k], 160, "%s%s", p, vllm ? vl[k] : mg[k]);
        names[k] = buf[k];
    }
}

/* The parts of a MoE layer both sides hold alike: router, bias, latent
 * projections (replicated) and the TP-split shared expert. */
static reshard_status_t moe_common(rs_emit_t *e, const rs_layer_ids_t *l, int32_t tp, int32_t t,
                                   const char *const *names)
{
    TRY(rs_emit_own(e, l->router, names[0]));
    TRY(rs_emit_own(e, l->router_bias, names[1]));
    if (l->s_up >= 0) { /* tp 1: whole (vLLM's sequence-parallel MoE) */
        TRY(rs_emit_column(e, l->s_up, tp, t, names[2]));
        TRY(rs_emit_row(e, l->s_down, tp, t, names[3]));
    }
    if (l->lat1 >= 0) {
        TRY(rs_emit_own(e, l->lat1, names[4]));
        TRY(rs_emit_own(e, l->lat2, names[5]));
    }
    return RESHARD_OK;
}

/* Names "<p><suffix>" for a list of suffixes. */
static void names_of(char (*buf)[160], const char **names, const char *p, const char *const *suffix,
                     int n)
{
    for (int k = 0; k < n; k++) {
        snprintf(buf[k], 160, "%s%s", p, suffix[k]);
        names[k] = buf[k];
    }
}

/* ------------------------------------------------------------------ */
/* Megatron: HybridStack                                               */
/* ------------------------------------------------------------------ */

void rs_hybrid_stage_layers(const reshard_model_t *m, const reshard_train_spec_t *s, int32_t p,
                            int32_t chunk, int32_t *first, int32_t *count)
{
    const rs_hybrid_t *hy = &m->hy;
    if (hy->segments == 1) {
        rs_stage_layers(m->L, s, p, chunk, first, count);
        return;
    }
    int32_t k = chunk * s->pp + p; /* segment of model chunk `chunk` of stage p */
    *first = hy->stage0[k];
    *count = (k + 1 < hy->segments ? hy->stage0[k + 1] : m->L) - *first;
}

reshard_status_t rs_hybrid_megatron_layer(rs_emit_t *e, const reshard_train_spec_t *s, int32_t t,
                                          int32_t et, int32_t epr, const char *pfx, int32_t i,
                                          int32_t local)
{
    const reshard_model_t *m = e->m;
    const rs_layer_ids_t *l = &e->ids->layer[i];
    char p[64], buf[8][160];
    const char *names[8];
    int32_t tp = s->tp;
    snprintf(p, sizeof p, "%sdecoder.layers.%d.", pfx, local);
    switch (m->hy.kind[i]) {
    case 'M': {
        names_of(buf, names, p, (const char *const[]){"mixer.in_proj.layer_norm_weight"}, 1);
        TRY(rs_emit_own(e, l->in_norm, names[0]));
        mixer_names(buf, names, p, false);
        return mixer(e, l, tp, t, names);
    }
    case '*': {
        static const char *const sfx[] = {"self_attention.linear_qkv.layer_norm_weight",
                                          "self_attention.linear_qkv.weight",
                                          "self_attention.linear_proj.weight"};
        names_of(buf, names, p, sfx, 3);
        TRY(rs_emit_own(e, l->in_norm, names[0]));
        TRY(rs_megatron_qkv(e, l, tp, t, names[1]));
        return rs_emit_row(e, l->o, tp, t, names[2]);
    }
    case '-': {
        static const char *const sfx[] = {"mlp.linear_fc1.layer_norm_weight",
                                          "mlp.linear_fc1.weight", "mlp.linear_fc2.weight"};
        names_of(buf, names, p, sfx, 3);
        TRY(rs_emit_own(e, l->in_norm, names[0]));
        TRY(rs_emit_column(e, l->up, tp, t, names[1]));
        return rs_emit_row(e, l->down, tp, t, names[2]);
    }
    default: {
        static const char *const sfx[] = {"mlp.router.weight",
                                          "mlp.router.expert_bias",
                                          "mlp.shared_experts.linear_fc1.weight",
                                          "mlp.shared_experts.linear_fc2.weight",
                                          "mlp.fc1_latent_proj.weight",
                                          "mlp.fc2_latent_proj.weight",
                                          "mlp.experts.linear_fc1.weight",
                                          "mlp.experts.linear_fc2.weight"};
        char n[160];
        snprintf(n, sizeof n, "%spre_mlp_layernorm.weight", p);
        TRY(rs_emit_own(e, l->in_norm, n));
        names_of(buf, names, p, sfx, 8);
        TRY(moe_common(e, l, tp, t, names));
        int64_t ne = m->E / s->ep, ni = m->Im / rs_etp(s);
        return rs_emit_experts(e, l, epr * ne, ne, et * ni, ni, true, names[6], names[7]);
    }
    }
}

/* ------------------------------------------------------------------ */
/* vLLM: NemotronHForCausalLM                                          */
/* ------------------------------------------------------------------ */

reshard_status_t rs_hybrid_vllm_layer(rs_emit_t *e, const reshard_infer_spec_t *s, int32_t r,
                                      int32_t i)
{
    const reshard_model_t *m = e->m;
    const rs_layer_ids_t *l = &e->ids->layer[i];
    int32_t tp = s->tp, t = r % tp;
    char p[64], buf[8][160];
    const char *names[8];
    snprintf(p, sizeof p, "model.layers.%d.", i);
    names_of(buf, names, p, (const char *const[]){"norm.weight"}, 1);
    TRY(rs_emit_own(e, l->in_norm, names[0]));
    switch (m->hy.kind[i]) {
    case 'M':
        mixer_names(buf, names, p, true);
        return mixer(e, l, tp, t, names);
    case '*':
        names_of(buf, names, p,
                 (const char *const[]){"mixer.qkv_proj.weight", "mixer.o_proj.weight"}, 2);
        TRY(rs_vllm_qkv(e, l, tp, t, names[0]));
        return rs_emit_row(e, l->o, tp, t, names[1]);
    case '-':
        names_of(buf, names, p,
                 (const char *const[]){"mixer.up_proj.weight", "mixer.down_proj.weight"}, 2);
        TRY(rs_emit_column(e, l->up, tp, t, names[0]));
        return rs_emit_row(e, l->down, tp, t, names[1]);
    default: {
        static const char *const sfx[] = {"mixer.gate.weight",
                                          "mixer.gate.e_score_correction_bias",
                                          "mixer.shared_experts.up_proj.weight",
                                          "mixer.shared_experts.down_proj.weight",
                                          "mixer.fc1_latent_proj.weight",
                                          "mixer.fc2_latent_proj.weight"};
        names_of(buf, names, p, sfx, 6);
        char w13[160], w2[160];
        snprintf(w13, sizeof w13, "%smixer.experts.%s", p, rs_vllm_name(s, RS_VN_W13));
        snprintf(w2, sizeof w2, "%smixer.experts.%s", p, rs_vllm_name(s, RS_VN_W2));
        /* nemotron_h.py NemotronHMoE: the shared experts get
         * disable_tp=is_sequence_parallel, so under vLLM's sequence-parallel
         * MoE every rank holds them whole */
        bool whole = rs_vllm_sequence_parallel_moe(s);
        TRY(moe_common(e, l, whole ? 1 : tp, whole ? 0 : t, names));
        return rs_vllm_experts(e, l, s, r, w13, w2);
    }
    }
}
