/*
 * nemotron_h (hybrid Mamba-2 + attention + MLP + MoE) against oracles
 * written from the frameworks' rules (FRAMEWORKS.md, "Hybrid Mamba-2"):
 *
 *   HF checkpoint   backbone.layers.N.mixer.*: in_proj rows [z; x; B; C; dt],
 *                   conv1d channels [x; B; C], A_log/D/dt_bias [Hm], norm [I]
 *   vLLM            MambaMixer2: rank r holds the r-th 1/tp of each of z, x,
 *                   B, C, dt (B and C whole when n_groups == 1 < tp);
 *                   NemotronH names (model., embed_tokens, norm_f); A is
 *                   -exp(A_log): the refit lands A_log in "mixer.A_log"
 *   Megatron        MambaMixer: the same per-rank segments, n_groups % tp == 0
 *                   required; conv1d_weight/conv1d_bias, in_proj.layer_norm_weight;
 *                   HybridStack: decoder.layers.<i from 0 per stage>, '|' stages,
 *                   final_norm; TEGroupedMLP experts linear_fc1.weight<j>
 *
 * Every rank's parameter list (names, sizes, dtypes) is compared with the
 * buffer table, and every element of every buffer is checked: sources after
 * the fill, destinations after an in-process refit.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "inproc_refit.h"
#include "layout/layout_internal.h"
#include "reshard/reshard_model.h"

/* ------------------------------------------------------------------ */
/* Configs                                                             */
/* ------------------------------------------------------------------ */

typedef struct {
    const char *pattern;
    int64_t H, V, I, nh, kv, hd;
    int64_t mh, mhd, G, N, K;
    int64_t E, Im, nshared, Is, latent;
} ncfg_t;

static int64_t layers_of(const ncfg_t *c)
{
    int64_t n = 0;
    for (const char *p = c->pattern; *p; p++)
        n += *p != '|';
    return n;
}

static char *config_json(const ncfg_t *c, const char *extra)
{
    char *s = malloc(4096);
    char lat[32];
    if (c->latent)
        snprintf(lat, sizeof lat, "%lld", (long long)c->latent);
    else
        snprintf(lat, sizeof lat, "null");
    snprintf(s, 4096,
             "{\"model_type\": \"nemotron_h\", \"architectures\": [\"NemotronHForCausalLM\"], "
             "\"hidden_size\": %lld, \"vocab_size\": %lld, \"intermediate_size\": %lld, "
             "\"num_hidden_layers\": %lld, \"hybrid_override_pattern\": \"%s\", "
             "\"num_attention_heads\": %lld, \"num_key_value_heads\": %lld, \"head_dim\": %lld, "
             "\"mamba_num_heads\": %lld, \"mamba_head_dim\": %lld, \"n_groups\": %lld, "
             "\"ssm_state_size\": %lld, \"conv_kernel\": %lld, \"use_conv_bias\": true, "
             "\"mamba_proj_bias\": false, \"use_bias\": false, \"attention_bias\": false, "
             "\"mlp_bias\": false, \"n_routed_experts\": %lld, \"moe_intermediate_size\": %lld, "
             "\"n_shared_experts\": %lld, \"moe_shared_expert_intermediate_size\": %lld, "
             "\"moe_latent_size\": %s, \"num_experts_per_tok\": 2, "
             "\"tie_word_embeddings\": false%s}",
             (long long)c->H, (long long)c->V, (long long)c->I, (long long)layers_of(c), c->pattern,
             (long long)c->nh, (long long)c->kv, (long long)c->hd, (long long)c->mh,
             (long long)c->mhd, (long long)c->G, (long long)c->N, (long long)c->K, (long long)c->E,
             (long long)c->Im, (long long)c->nshared, (long long)c->Is, lat, extra ? extra : "");
    return s;
}

static reshard_model_t *load(const ncfg_t *c)
{
    char *json = config_json(c, NULL);
    reshard_model_t *m = NULL;
    if (reshard_model_load_json(json, NULL, &m) != RESHARD_OK)
        fail_msg("load: %s", reshard_last_error());
    free(json);
    return m;
}

/* ------------------------------------------------------------------ */
/* HF tensors (the catalogue's oracle)                                 */
/* ------------------------------------------------------------------ */

/* Shape and dtype of HF tensor @p name; 0 when unknown. */
static int hf_shape(const ncfg_t *c, const char *name, int64_t *shape, int *nd, reshard_dtype_t *dt)
{
    int64_t I = c->mh * c->mhd, GN = c->G * c->N, Hin = c->latent ? c->latent : c->H;
    int layer, k = 0;
    *dt = RESHARD_BF16;
#define SHAPE(...)                                                                                 \
    do {                                                                                           \
        int64_t s_[] = {__VA_ARGS__};                                                              \
        *nd = (int)(sizeof s_ / sizeof *s_);                                                       \
        memcpy(shape, s_, sizeof s_);                                                              \
        return 1;                                                                                  \
    } while (0)
    if (!strcmp(name, "backbone.embeddings.weight") || !strcmp(name, "lm_head.weight"))
        SHAPE(c->V, c->H);
    if (!strcmp(name, "backbone.norm_f.weight"))
        SHAPE(c->H);
    if (sscanf(name, "backbone.layers.%d.%n", &layer, &k) != 1 || !k)
        return 0;
    const char *r = name + k;
    if (!strcmp(r, "norm.weight"))
        SHAPE(c->H);
    if (strncmp(r, "mixer.", 6))
        return 0;
    r += 6;
    /* fp32: the router's score-correction bias only. A_log is bf16: Megatron
     * creates it fp32, but under bf16 training Float16Module casts every
     * floating parameter not marked keep_in_fp32 (transformer/module.py), and
     * nothing marks A_log. D and dt_bias are bf16: MambaMixer2 creates them
     * with no dtype (torch.ones(num_heads // tp): the model dtype). The router
     * weight is bf16 (Megatron params_dtype, vLLM GateLinear on SM90+). */
    if (!strcmp(r, "gate.e_score_correction_bias"))
        *dt = RESHARD_FP32;
    if (!strcmp(r, "in_proj.weight"))
        SHAPE(2 * I + 2 * GN + c->mh, c->H);
    if (!strcmp(r, "conv1d.weight"))
        SHAPE(I + 2 * GN, 1, c->K);
    if (!strcmp(r, "conv1d.bias"))
        SHAPE(I + 2 * GN);
    if (!strcmp(r, "A_log") || !strcmp(r, "D") || !strcmp(r, "dt_bias"))
        SHAPE(c->mh);
    if (!strcmp(r, "norm.weight"))
        SHAPE(I);
    if (!strcmp(r, "out_proj.weight"))
        SHAPE(c->H, I);
    if (!strcmp(r, "q_proj.weight"))
        SHAPE(c->nh * c->hd, c->H);
    if (!strcmp(r, "k_proj.weight") || !strcmp(r, "v_proj.weight"))
        SHAPE(c->kv * c->hd, c->H);
    if (!strcmp(r, "o_proj.weight"))
        SHAPE(c->H, c->nh * c->hd);
    if (!strcmp(r, "up_proj.weight"))
        SHAPE(c->I, c->H);
    if (!strcmp(r, "down_proj.weight"))
        SHAPE(c->H, c->I);
    if (!strcmp(r, "gate.weight"))
        SHAPE(c->E, c->H);
    if (!strcmp(r, "gate.e_score_correction_bias"))
        SHAPE(c->E);
    if (!strcmp(r, "experts.up_proj.weight"))
        SHAPE(c->E, c->Im, Hin);
    if (!strcmp(r, "experts.down_proj.weight"))
        SHAPE(c->E, Hin, c->Im);
    if (!strcmp(r, "shared_experts.up_proj.weight"))
        SHAPE(c->Is * c->nshared, c->H);
    if (!strcmp(r, "shared_experts.down_proj.weight"))
        SHAPE(c->H, c->Is * c->nshared);
    if (!strcmp(r, "fc1_latent_proj.weight"))
        SHAPE(c->latent, c->H);
    if (!strcmp(r, "fc2_latent_proj.weight"))
        SHAPE(c->H, c->latent);
#undef SHAPE
    return 0;
}

/* ------------------------------------------------------------------ */
/* Per-rank parameters (the frameworks' oracle)                        */
/* ------------------------------------------------------------------ */

/* The oracle runs on the refit's rank threads, where cmocka cannot fail a
 * test: a broken expectation of the oracle itself aborts. */
#define REQUIRE(x)                                                                                 \
    do {                                                                                           \
        if (!(x)) {                                                                                \
            fprintf(stderr, "%s:%d: oracle: %s\n", __FILE__, __LINE__, #x);                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAXSEG 16
#define MAXP 256

/* One framework parameter of a rank: experts x rows x width local elements.
 * Local row i falls in a segment: HF tensor hf, row row0 + (i - start);
 * local column c is HF column col0 + c; local expert e is HF expert e0 + e.
 * HF rows at or past @p pad_from carry no data (vocabulary padding). */
typedef struct {
    char name[160];
    int64_t experts, rows, width, e0, col0, pad_from;
    reshard_dtype_t dt;
    int nd; /* the framework's shape of the parameter */
    int64_t shape[3];
    int nseg;
    struct {
        int64_t start, n, row0;
        char hf[160];
    } seg[MAXSEG];
    int seen;
} param_t;

typedef struct {
    param_t p[MAXP];
    int n;
} plist_t;

static param_t *newp(plist_t *l, int64_t experts, int64_t rows, int64_t width, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static param_t *newp(plist_t *l, int64_t experts, int64_t rows, int64_t width, const char *fmt, ...)
{
    REQUIRE(l->n < MAXP);
    param_t *p = &l->p[l->n++];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->experts = experts;
    p->rows = rows;
    p->width = width;
    p->pad_from = INT64_MAX;
    p->dt = RESHARD_BF16;
    p->nd = 2;
    p->shape[0] = rows;
    p->shape[1] = width;
    return p;
}

static void shape_of(param_t *p, int nd, int64_t a, int64_t b, int64_t c)
{
    p->nd = nd;
    p->shape[0] = a;
    p->shape[1] = b;
    p->shape[2] = c;
}

/* Append local rows [rows so far, + n) = HF rows [row0, row0 + n) of @p hf. */
static void seg(param_t *p, const char *hf, int64_t row0, int64_t n)
{
    REQUIRE(p->nseg < MAXSEG);
    int64_t start = p->nseg ? p->seg[p->nseg - 1].start + p->seg[p->nseg - 1].n : 0;
    p->seg[p->nseg].start = start;
    p->seg[p->nseg].n = n;
    p->seg[p->nseg].row0 = row0;
    snprintf(p->seg[p->nseg].hf, sizeof p->seg[0].hf, "%s", hf);
    p->nseg++;
}

/* A whole HF tensor (norms, router, replicated projections). */
static void whole(const ncfg_t *c, plist_t *l, const char *name, const char *hf)
{
    int64_t s[3];
    int nd;
    reshard_dtype_t dt;
    REQUIRE(hf_shape(c, hf, s, &nd, &dt));
    param_t *p = newp(l, 1, nd == 1 ? s[0] : s[0], nd == 1 ? 1 : s[nd - 1] * (nd == 3 ? s[1] : 1),
                      "%s", name);
    p->dt = dt;
    shape_of(p, nd, s[0], s[1], s[2]);
    seg(p, hf, 0, s[0]);
}

/* Rows [r0, r0+n) of 2-d or 1-d HF tensor @p hf, all columns. */
static param_t *rows(const ncfg_t *c, plist_t *l, const char *name, const char *hf, int64_t r0,
                     int64_t n)
{
    int64_t s[3];
    int nd;
    reshard_dtype_t dt;
    REQUIRE(hf_shape(c, hf, s, &nd, &dt));
    param_t *p = newp(l, 1, n, nd == 1 ? 1 : s[nd - 1], "%s", name);
    p->dt = dt;
    if (nd == 1)
        shape_of(p, 1, n, 0, 0);
    seg(p, hf, r0, n);
    return p;
}

/* Columns [c0, c0+n) of a row-parallel [R, C] HF tensor. */
static void cols(const ncfg_t *c, plist_t *l, const char *name, const char *hf, int64_t c0,
                 int64_t n)
{
    int64_t s[3];
    int nd;
    reshard_dtype_t dt;
    REQUIRE(hf_shape(c, hf, s, &nd, &dt));
    param_t *p = newp(l, 1, s[0], n, "%s", name);
    p->col0 = c0;
    seg(p, hf, 0, s[0]);
}

/* A column-parallel up projection and its row-parallel down projection
 * (names lp + @p names[0..1]): rows / columns [t*n, (t+1)*n) of HF
 * hp + sub + "up_proj.weight" / "down_proj.weight". */
static void up_down(const ncfg_t *c, plist_t *l, const char *lp, const char *const *names,
                    const char *hp, const char *sub, int64_t n, int64_t t)
{
    char a[160], hf[160];
    snprintf(a, sizeof a, "%s%s", lp, names[0]);
    snprintf(hf, sizeof hf, "%s%sup_proj.weight", hp, sub);
    rows(c, l, a, hf, t * n, n);
    snprintf(a, sizeof a, "%s%s", lp, names[1]);
    snprintf(hf, sizeof hf, "%s%sdown_proj.weight", hp, sub);
    cols(c, l, a, hf, t * n, n);
}

static void vocab(const ncfg_t *c, plist_t *l, const char *name, const char *hf, int64_t vpad,
                  int64_t tp, int64_t t)
{
    int64_t per = vpad / tp;
    param_t *p = rows(c, l, name, hf, t * per, per);
    p->pad_from = c->V;
}

/* The Mamba mixer of TP rank t of tp; @p rep: B and C whole on every rank. */
static void mamba(const ncfg_t *c, plist_t *l, const char *lp, const char *hp, int64_t tp,
                  int64_t t, int megatron)
{
    int64_t I = c->mh * c->mhd, GN = c->G * c->N, zi = I / tp, hi = c->mh / tp;
    int rep = c->G % tp != 0;
    REQUIRE(!rep || (c->G == 1 && !megatron)); /* the frameworks' rules */
    int64_t gi = rep ? GN : GN / tp, g0 = rep ? 0 : t * gi;
    char n[160], hf[160];
    snprintf(hf, sizeof hf, "%sin_proj.weight", hp);
    param_t *p = newp(l, 1, 2 * zi + 2 * gi + hi, c->H, "%smixer.in_proj.weight", lp);
    seg(p, hf, t * zi, zi);
    seg(p, hf, I + t * zi, zi);
    seg(p, hf, 2 * I + g0, gi);
    seg(p, hf, 2 * I + GN + g0, gi);
    seg(p, hf, 2 * I + 2 * GN + t * hi, hi);
    for (int b = 0; b < 2; b++) {
        snprintf(hf, sizeof hf, "%sconv1d.%s", hp, b ? "bias" : "weight");
        snprintf(n, sizeof n, "%smixer.conv1d%s%s", lp, megatron ? "_" : ".",
                 b ? "bias" : "weight");
        p = newp(l, 1, zi + 2 * gi, b ? 1 : c->K, "%s", n);
        shape_of(p, b ? 1 : 3, zi + 2 * gi, 1, c->K); /* weight [channels, 1, K] */
        seg(p, hf, t * zi, zi);
        seg(p, hf, I + g0, gi);
        seg(p, hf, I + GN + g0, gi);
    }
    static const char *const vec[] = {"A_log", "D", "dt_bias"};
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "%smixer.%s", lp, vec[k]); /* vLLM: A_log lands beside A */
        snprintf(hf, sizeof hf, "%s%s", hp, vec[k]);
        rows(c, l, n, hf, t * hi, hi);
    }
    snprintf(n, sizeof n, "%smixer.norm.weight", lp);
    snprintf(hf, sizeof hf, "%snorm.weight", hp);
    rows(c, l, n, hf, t * zi, zi);
    snprintf(n, sizeof n, "%smixer.out_proj.weight", lp);
    snprintf(hf, sizeof hf, "%sout_proj.weight", hp);
    cols(c, l, n, hf, t * zi, zi);
}

/* Non-gated routed experts [e0, e0+ne), intermediate [i0, i0+ni); one
 * parameter per expert (Megatron) or one stack (vLLM). */
static void experts(const ncfg_t *c, plist_t *l, const char *fc1, const char *fc2, const char *hp,
                    int64_t e0, int64_t ne, int64_t i0, int64_t ni, int per_expert)
{
    int64_t Hin = c->latent ? c->latent : c->H;
    char up[160], down[160];
    snprintf(up, sizeof up, "%sexperts.up_proj.weight", hp);
    snprintf(down, sizeof down, "%sexperts.down_proj.weight", hp);
    for (int64_t j = 0; j < (per_expert ? ne : 1); j++) {
        int64_t n = per_expert ? 1 : ne;
        param_t *p = per_expert ? newp(l, 1, ni, Hin, "%s%lld", fc1, (long long)j)
                                : newp(l, ne, ni, Hin, "%s", fc1);
        p->e0 = e0 + j * n;
        if (!per_expert)
            shape_of(p, 3, ne, ni, Hin);
        seg(p, up, i0, ni);
        p = per_expert ? newp(l, 1, Hin, ni, "%s%lld", fc2, (long long)j)
                       : newp(l, ne, Hin, ni, "%s", fc2);
        p->e0 = e0 + j * n;
        if (!per_expert)
            shape_of(p, 3, ne, Hin, ni);
        p->col0 = i0;
        seg(p, down, 0, Hin);
    }
}

typedef struct {
    const ncfg_t *c;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    int32_t train_world;
    const reshard_model_refit_t *f;
} ctx_t;

/* Megatron layers of model chunk @p chunk of stage p (hybrid_layer_allocation.py
 * select_pipeline_segment): '|' segment chunk*pp + p; without '|' the
 * first/last stage counts when given, the rest split evenly. */
static void stage_range(const ncfg_t *c, const reshard_train_spec_t *ts, int64_t p, int64_t chunk,
                        int64_t *first, int64_t *count)
{
    int64_t pp = ts->pp, L = layers_of(c);
    if (strchr(c->pattern, '|')) {
        int64_t seg = 0, i = 0, want = chunk * pp + p;
        *first = -1;
        *count = 0;
        for (const char *q = c->pattern; *q; q++) {
            if (*q == '|') {
                seg++;
                continue;
            }
            if (seg == want) {
                if (*first < 0)
                    *first = i;
                (*count)++;
            }
            i++;
        }
        return;
    }
    int64_t f = ts->first, l = ts->last, mid = pp - (f > 0) - (l > 0),
            per = mid ? (L - f - l) / mid : 0;
    *first = p == 0 && f ? 0 : (f ? f + (p - 1) * per : p * per);
    *count = p == 0 && f ? f : p == pp - 1 && l ? l : per;
}

static char kind_of(const ncfg_t *c, int64_t layer)
{
    int64_t i = 0;
    for (const char *q = c->pattern; *q; q++)
        if (*q != '|' && i++ == layer)
            return *q;
    return 0;
}

static void shared_and_router(const ncfg_t *c, plist_t *l, const char *lp, const char *hp,
                              int64_t tp, int64_t t, const char *const *nm)
{
    char n[160], hf[160];
    snprintf(n, sizeof n, "%s%s", lp, nm[0]);
    snprintf(hf, sizeof hf, "%sgate.weight", hp);
    whole(c, l, n, hf);
    snprintf(n, sizeof n, "%s%s", lp, nm[1]);
    snprintf(hf, sizeof hf, "%sgate.e_score_correction_bias", hp);
    whole(c, l, n, hf);
    if (c->nshared)
        up_down(c, l, lp, nm + 2, hp, "shared_experts.", c->Is * c->nshared / tp, t);
    if (c->latent)
        for (int k = 0; k < 2; k++) {
            snprintf(n, sizeof n, "%s%s", lp, nm[4 + k]);
            snprintf(hf, sizeof hf, "%sfc%d_latent_proj.weight", hp, k + 1);
            whole(c, l, n, hf);
        }
}

static void megatron_params(const ctx_t *x, int32_t rank, plist_t *l)
{
    const ncfg_t *c = x->c;
    const reshard_train_spec_t *s = &x->ts;
    int64_t S = s->tp * s->cp * s->dp, li = rank % S, stage = rank / S, tp = s->tp, t = li % tp;
    int64_t etp = s->etp > 0 ? s->etp : tp; /* Megatron: etp defaults to tp */
    int64_t et = li % etp, epr = (li / etp) % s->ep;
    /* Megatron-LM pads the vocabulary to 128*tp; Megatron-Bridge does not */
    int64_t vpad = s->convention == RESHARD_TRAIN_MEGATRON_BRIDGE
                       ? c->V
                       : (c->V + 128 * tp - 1) / (128 * tp) * (128 * tp);
    /* arguments.py: with '|' in the pattern, vpp = segments / pp */
    int64_t segs = 1;
    for (const char *q = c->pattern; *q; q++)
        segs += *q == '|';
    int64_t v = segs > 1 ? segs / s->pp : s->vpp > 1 ? s->vpp : 1;
    for (int64_t chunk = 0; chunk < v; chunk++) {
        char pfx[24] = "", n0[160];
        if (v > 1) /* a list of model chunks */
            snprintf(pfx, sizeof pfx, "%lld.", (long long)chunk);
        if (stage == 0 && chunk == 0) {
            snprintf(n0, sizeof n0, "%sembedding.word_embeddings.weight", pfx);
            vocab(c, l, n0, "backbone.embeddings.weight", vpad, tp, t);
        }
        int64_t first, count;
        stage_range(c, s, stage, chunk, &first, &count);
        for (int64_t i = first; i < first + count; i++) {
            char lp[64], hp[64], n[160], hf[160];
            /* named_parameters(): each chunk's nn.ModuleList counts from 0 */
            snprintf(lp, sizeof lp, "%sdecoder.layers.%lld.", pfx, (long long)(i - first));
            snprintf(hp, sizeof hp, "backbone.layers.%lld.mixer.", (long long)i);
            snprintf(hf, sizeof hf, "backbone.layers.%lld.norm.weight", (long long)i);
            char k = kind_of(c, i);
            static const char *const norm[] = {
                "mixer.in_proj.layer_norm_weight", "self_attention.linear_qkv.layer_norm_weight",
                "mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"};
            snprintf(n, sizeof n, "%s%s", lp, norm[k == 'M' ? 0 : k == '*' ? 1 : k == '-' ? 2 : 3]);
            whole(c, l, n, hf);
            if (k == 'M') {
                mamba(c, l, lp, hp, tp, t, 1);
            } else if (k == '*') {
                /* rows grouped by query group g: [q heads of g; k head g; v head g],
                 * split evenly into tp contiguous ranges (also when tp > groups) */
                int64_t hpg = c->nh / c->kv, hd = c->hd, gs = (hpg + 2) * hd, R = c->kv * gs;
                int64_t a = t * R / tp, b = (t + 1) * R / tp;
                param_t *p = newp(l, 1, b - a, c->H, "%sself_attention.linear_qkv.weight", lp);
                for (int64_t g = 0; g < c->kv; g++) {
                    static const char *const part[] = {"q_proj.weight", "k_proj.weight",
                                                       "v_proj.weight"};
                    int64_t ps[3] = {g * gs, g * gs + hpg * hd, g * gs + (hpg + 1) * hd};
                    int64_t r0[3] = {g * hpg * hd, g * hd, g * hd}, pn[3] = {hpg * hd, hd, hd};
                    for (int q = 0; q < 3; q++) {
                        int64_t lo = ps[q] > a ? ps[q] : a,
                                hi = ps[q] + pn[q] < b ? ps[q] + pn[q] : b;
                        char nmq[160];
                        snprintf(nmq, sizeof nmq, "%s%s", hp, part[q]);
                        if (lo < hi)
                            seg(p, nmq, r0[q] + (lo - ps[q]), hi - lo);
                    }
                }
                snprintf(n, sizeof n, "%sself_attention.linear_proj.weight", lp);
                snprintf(hf, sizeof hf, "%so_proj.weight", hp);
                cols(c, l, n, hf, t * (c->nh * hd / tp), c->nh * hd / tp);
            } else if (k == '-') {
                static const char *const fc[] = {"mlp.linear_fc1.weight", "mlp.linear_fc2.weight"};
                up_down(c, l, lp, fc, hp, "", c->I / tp, t);
            } else {
                static const char *const nm[] = {"mlp.router.weight",
                                                 "mlp.router.expert_bias",
                                                 "mlp.shared_experts.linear_fc1.weight",
                                                 "mlp.shared_experts.linear_fc2.weight",
                                                 "mlp.fc1_latent_proj.weight",
                                                 "mlp.fc2_latent_proj.weight"};
                shared_and_router(c, l, lp, hp, tp, t, nm);
                int64_t ne = c->E / s->ep, ni = c->Im / etp;
                char f1[160], f2[160];
                snprintf(f1, sizeof f1, "%smlp.experts.linear_fc1.weight", lp);
                snprintf(f2, sizeof f2, "%smlp.experts.linear_fc2.weight", lp);
                experts(c, l, f1, f2, hp, epr * ne, ne, et * ni, ni, 1);
            }
        }
        if (stage == s->pp - 1 && chunk == v - 1) {
            snprintf(n0, sizeof n0, "%sdecoder.final_norm.weight", pfx);
            whole(c, l, n0, "backbone.norm_f.weight");
            snprintf(n0, sizeof n0, "%soutput_layer.weight", pfx);
            vocab(c, l, n0, "lm_head.weight", vpad, tp, t);
        }
    }
}

static void vllm_params(const ctx_t *x, int32_t r, plist_t *l)
{
    const ncfg_t *c = x->c;
    r %= x->is.tp * x->is.dp; /* independent engines hold the same */
    int64_t tp = x->is.tp, t = r % tp, vpad = (c->V + 63) / 64 * 64, L = layers_of(c);
    vocab(c, l, "model.embed_tokens.weight", "backbone.embeddings.weight", vpad, tp, t);
    for (int64_t i = 0; i < L; i++) {
        char lp[64], hp[64], n[160], hf[160];
        snprintf(lp, sizeof lp, "model.layers.%lld.", (long long)i);
        snprintf(hp, sizeof hp, "backbone.layers.%lld.mixer.", (long long)i);
        snprintf(n, sizeof n, "%snorm.weight", lp);
        snprintf(hf, sizeof hf, "backbone.layers.%lld.norm.weight", (long long)i);
        whole(c, l, n, hf);
        char k = kind_of(c, i);
        if (k == 'M') {
            mamba(c, l, lp, hp, tp, t, 0);
        } else if (k == '*') {
            /* [its q heads; its kv heads (k); the same (v)]; kv replicated when tp > kv */
            int64_t nq = c->nh / tp, hd = c->hd;
            int64_t nkv = tp <= c->kv ? c->kv / tp : 1,
                    k0 = tp <= c->kv ? t * nkv : t / (tp / c->kv);
            param_t *p = newp(l, 1, (nq + 2 * nkv) * hd, c->H, "%smixer.qkv_proj.weight", lp);
            char q[160], kk[160], v[160];
            snprintf(q, sizeof q, "%sq_proj.weight", hp);
            snprintf(kk, sizeof kk, "%sk_proj.weight", hp);
            snprintf(v, sizeof v, "%sv_proj.weight", hp);
            seg(p, q, t * nq * hd, nq * hd);
            seg(p, kk, k0 * hd, nkv * hd);
            seg(p, v, k0 * hd, nkv * hd);
            snprintf(n, sizeof n, "%smixer.o_proj.weight", lp);
            snprintf(hf, sizeof hf, "%so_proj.weight", hp);
            cols(c, l, n, hf, t * nq * hd, nq * hd);
        } else if (k == '-') {
            static const char *const fc[] = {"mixer.up_proj.weight", "mixer.down_proj.weight"};
            up_down(c, l, lp, fc, hp, "", c->I / tp, t);
        } else {
            static const char *const nm[] = {"mixer.gate.weight",
                                             "mixer.gate.e_score_correction_bias",
                                             "mixer.shared_experts.up_proj.weight",
                                             "mixer.shared_experts.down_proj.weight",
                                             "mixer.fc1_latent_proj.weight",
                                             "mixer.fc2_latent_proj.weight"};
            /* nemotron_h.py NemotronHMoE: the shared experts with
             * disable_tp=is_sequence_parallel (EP, tp > 1, dp > 1): whole */
            int seq = x->is.ep && tp > 1 && x->is.dp > 1;
            shared_and_router(c, l, lp, hp, seq ? 1 : tp, seq ? 0 : t, nm);
            int64_t eps = tp * x->is.dp, e0, ne, i0, ni;
            if (x->is.ep) { /* whole experts, remainder to the first ranks */
                int64_t base = c->E / eps, rem = c->E % eps;
                ne = base + (r < rem);
                e0 = r * base + (r < rem ? r : rem);
                i0 = 0;
                ni = c->Im;
            } else { /* every expert split over all tp*dp ranks */
                e0 = 0;
                ne = c->E;
                ni = c->Im / eps;
                i0 = r * ni;
            }
            char f1[160], f2[160];
            /* vLLM >= 0.25 (PR #41184): experts.routed_experts.* */
            const char *nest = x->is.vllm == RESHARD_VLLM_0_24 ? "" : "routed_experts.";
            snprintf(f1, sizeof f1, "%smixer.experts.%sw13_weight", lp, nest);
            snprintf(f2, sizeof f2, "%smixer.experts.%sw2_weight", lp, nest);
            if (ne)
                experts(c, l, f1, f2, hp, e0, ne, i0, ni, 0);
        }
    }
    whole(c, l, "model.norm_f.weight", "backbone.norm_f.weight");
    vocab(c, l, "lm_head.weight", "lm_head.weight", vpad, tp, t);
}

/* ------------------------------------------------------------------ */
/* Checking buffers                                                    */
/* ------------------------------------------------------------------ */

static int64_t check_param(const ctx_t *x, const param_t *p, const uint8_t *data, uint64_t bytes)
{
    int64_t bad = 0;
    for (int k = 0; k < p->nseg; k++) {
        int32_t id = reshard_tensors_find(x->f->tensors, p->seg[k].hf);
        REQUIRE(id >= 0);
        int64_t s[3];
        int nd;
        reshard_dtype_t dt;
        REQUIRE(hf_shape(x->c, p->seg[k].hf, s, &nd, &dt));
        size_t es = reshard_dtype_size(dt);
        REQUIRE(dt == p->dt);
        int stacked = strstr(p->seg[k].hf, ".experts.") != NULL;
        int64_t R = stacked ? s[1] : s[0], rowlen = stacked ? s[2] : 1;
        if (!stacked)
            for (int d = 1; d < nd; d++)
                rowlen *= s[d];
        for (int64_t e = 0; e < p->experts; e++)
            for (int64_t i = p->seg[k].start; i < p->seg[k].start + p->seg[k].n; i++) {
                int64_t row = p->seg[k].row0 + (i - p->seg[k].start);
                for (int64_t col = 0; col < p->width; col++) {
                    uint64_t off = (uint64_t)(((e * p->rows + i) * p->width + col) * (int64_t)es);
                    if (off + es > bytes || row >= p->pad_from)
                        continue; /* trailing padding rows are not allocated here */
                    int64_t flat = ((p->e0 + e) * (stacked ? R : 0) + row) * rowlen + p->col0 + col;
                    uint64_t v = rs_pattern_value(id, flat);
                    bad += memcmp(data + off, &v, es) != 0;
                }
            }
    }
    return bad;
}

static int64_t check_rank(void *ctxv, int32_t rank, int dst, const reshard_buffer_t *bufs,
                          int32_t n, char *msg, size_t size)
{
    const ctx_t *x = ctxv;
    int train = rank < x->train_world;
    if (train == dst)
        return 0; /* sources of the train side, destinations of the infer side */
    plist_t *l = calloc(1, sizeof *l);
    if (train)
        megatron_params(x, rank, l);
    else
        vllm_params(x, rank - x->train_world, l);
    const reshard_model_buffers_t *t = train ? x->f->train_buffers : x->f->infer_buffers;
    int64_t bad = 0;
    int32_t count = reshard_model_buffer_count(t, rank);
    if (count != l->n) {
        snprintf(msg, size, "%d parameters, the framework has %d", count, l->n);
        bad++;
    }
    for (int64_t k = 0; k < reshard_model_buffers_count(t); k++) {
        reshard_model_buffer_t b;
        reshard_model_buffers_get(t, k, &b);
        if (b.rank != rank)
            continue;
        param_t *p = NULL;
        for (int i = 0; i < l->n && !p; i++)
            if (!strcmp(l->p[i].name, b.name))
                p = &l->p[i];
        if (!p || p->seen) {
            snprintf(msg, size, "parameter %s is %s", b.name,
                     p ? "given twice" : "not the framework's");
            bad++;
            continue;
        }
        p->seen = 1;
        reshard_buffer_info_t d;
        const reshard_layout_t *lay = train ? x->f->train : x->f->infer;
        int same = reshard_layout_declared_buffer(lay, rank, b.buffer, &d) == RESHARD_OK &&
                   d.dtype == p->dt && d.ndim == p->nd && !strcmp(d.name, p->name);
        for (int q = 0; same && q < p->nd; q++)
            same = d.shape[q] == p->shape[q];
        if (!same) {
            snprintf(msg, size,
                     "%s: declared %s [%lld, %lld, %lld] (%d dims), the framework's %s [%lld, "
                     "%lld, %lld] (%d dims)",
                     b.name, reshard_dtype_name(d.dtype), (long long)d.shape[0],
                     (long long)d.shape[1], (long long)d.shape[2], d.ndim,
                     reshard_dtype_name(p->dt), (long long)p->shape[0], (long long)p->shape[1],
                     (long long)p->shape[2], p->nd);
            bad++;
            continue;
        }
        uint64_t want = (uint64_t)(p->experts * p->rows * p->width) * reshard_dtype_size(p->dt);
        if (b.bytes != want) {
            snprintf(msg, size, "%s: %llu bytes, the framework has %llu", b.name,
                     (unsigned long long)b.bytes, (unsigned long long)want);
            bad++;
            continue;
        }
        /* a buffer past the layout's last fragment is not allocated: all padding */
        int64_t wrong = b.buffer < n ? check_param(x, p, bufs[b.buffer].ptr, bufs[b.buffer].bytes)
                                     : p->seg[0].row0 < p->pad_from;
        if (wrong) {
            snprintf(msg, size, "%s: %lld wrong elements", b.name, (long long)wrong);
            bad += wrong;
        }
    }
    free(l);
    return bad;
}

/* Refit @p c from Megatron @p train to vLLM @p infer in-process; every
 * rank's parameters and every element checked by the oracles above. */
static void refit(const ncfg_t *c, const char *train, const char *infer)
{
    reshard_model_t *m = load(c);
    ctx_t x = {.c = c};
    assert_int_equal(reshard_train_spec_parse(train, &x.ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse(infer, &x.is), RESHARD_OK);
    reshard_model_refit_t f;
    if (reshard_model_refit_create(m, &x.ts, &x.is, &f) != RESHARD_OK)
        fail_msg("%s -> %s: %s", train, infer, reshard_last_error());
    x.f = &f;
    x.train_world = f.train_world;
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES,
                                .world_size = f.train_world + f.infer_world,
                                .my_rank = RESHARD_ALL_RANKS,
                                .staging_bytes = 32 << 10};
    rs_test_refit_t r = rs_test_inproc_refit_check(f.train, f.infer, &pp, 1, 1, check_rank, &x);
    if (r.status != RESHARD_OK)
        fail_msg("%s -> %s: %s", train, infer, r.message);
    assert_true(r.verified_bytes > 0);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(m);
}

static void refused(const ncfg_t *c, const char *train, const char *infer, const char *why)
{
    reshard_model_t *m = load(c);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse(train, &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse(infer, &is), RESHARD_OK);
    reshard_model_refit_t f;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &f), RESHARD_ERR_CONFIG);
    if (!strstr(reshard_last_error(), why))
        fail_msg("%s -> %s: \"%s\" does not say \"%s\"", train, infer, reshard_last_error(), why);
    reshard_model_destroy(m);
}

/* ------------------------------------------------------------------ */
/* Cases                                                               */
/* ------------------------------------------------------------------ */

/* Fields: pattern, H, V, I, nh, kv, hd, mh, mhd, G, N, K, E, Im, nshared, Is, latent. */

/* Four Mamba groups: every tp of both sides up to 4 splits them. */
static const ncfg_t groups4 = {"ME*-EM", 32, 100, 24, 4, 2, 8, 8, 4, 4, 4, 3, 4, 8, 1, 16, 0};

/* One Mamba group: vLLM with tp > 1 replicates B and C; Megatron refuses tp > 1. */
static const ncfg_t groups1 = {"M*ME", 32, 70, 24, 4, 2, 8, 8, 4, 1, 6, 4, 4, 8, 1, 8, 0};

/* Super's shape: latent MoE, two shared experts, '|' stage boundaries. */
static const ncfg_t latent = {"ME*|EM-E", 32, 90, 16, 4, 2, 8, 8, 4, 2, 4, 4, 4, 8, 2, 4, 16};

static void test_catalogue_and_count(void **state)
{
    (void)state;
    const ncfg_t *cs[] = {&groups4, &groups1, &latent};
    for (size_t k = 0; k < 3; k++) {
        const ncfg_t *c = cs[k];
        reshard_model_t *m = load(c);
        reshard_tensors_t *T;
        assert_int_equal(reshard_model_tensors(m, &T), RESHARD_OK);
        int64_t sum = 0;
        for (int32_t i = 0; i < reshard_tensors_count(T); i++) {
            reshard_tensor_info_t info;
            reshard_tensors_info(T, i, &info);
            int64_t s[3];
            int nd;
            reshard_dtype_t dt;
            if (!hf_shape(c, info.name, s, &nd, &dt))
                fail_msg("catalogue has %s, not a HF tensor of the config", info.name);
            assert_int_equal(info.ndim, nd);
            for (int d = 0; d < nd; d++)
                assert_int_equal(info.shape[d], s[d]);
            assert_int_equal(info.dtype, dt);
            sum += info.numel;
        }
        /* parameters from the config alone */
        int64_t H = c->H, I = c->mh * c->mhd, GN = c->G * c->N, Hin = c->latent ? c->latent : H;
        int64_t want = 2 * c->V * H + H;
        for (const char *q = c->pattern; *q; q++) {
            if (*q == '|')
                continue;
            want += H;
            if (*q == 'M')
                want += (2 * I + 2 * GN + c->mh) * H + (I + 2 * GN) * (c->K + 1) + 3 * c->mh + I +
                        H * I;
            if (*q == '*')
                want += (c->nh + 2 * c->kv) * c->hd * H + H * c->nh * c->hd;
            if (*q == '-')
                want += 2 * c->I * H;
            if (*q == 'E')
                want += c->E * (H + 1) + 2 * c->E * c->Im * Hin + 2 * c->nshared * c->Is * H +
                        2 * c->latent * H;
        }
        assert_int_equal(sum, want);
        reshard_model_info_t info;
        assert_int_equal(reshard_model_info(m, &info), RESHARD_OK);
        assert_int_equal(info.params, want);
        assert_string_equal(info.family, "nemotron_h");
        reshard_tensors_destroy(T);
        reshard_model_destroy(m);
    }
}

/* The shipped configs: the parameter count from their fields; for Nano
 * 30B-A3B also the published total (31.6 G). Super's 120.67 G (without its
 * MTP layer) has no published figure to this precision. */
static void test_shipped_counts(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t published_g10; /* published total, in units of 0.1 G */
    } ms[] = {{"nemotron-3-nano-30b-a3b", 316}, {"nemotron-3-super-120b-a12b", 0}};
    for (size_t k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s.json", RESHARD_DATA_DIR, ms[k].name);
        json_error_t err;
        json_t *j = json_load_file(path, 0, &err);
        assert_non_null(j);
#define F(key) ((int64_t)json_integer_value(json_object_get(j, key)))
        int64_t H = F("hidden_size"), V = F("vocab_size"), Hm = F("mamba_num_heads");
        int64_t I = Hm * F("mamba_head_dim"), GN = F("n_groups") * F("ssm_state_size");
        int64_t E = F("n_routed_experts"), Im = F("moe_intermediate_size");
        int64_t Is = F("moe_shared_expert_intermediate_size") * F("n_shared_experts");
        int64_t lat = F("moe_latent_size"), Hin = lat ? lat : H;
        int64_t want = 2 * V * H + H;
        for (const char *q = json_string_value(json_object_get(j, "hybrid_override_pattern")); *q;
             q++) {
            want += H;
            if (*q == 'M')
                want += (2 * I + 2 * GN + Hm) * H + (I + 2 * GN) * (F("conv_kernel") + 1) + 3 * Hm +
                        I + H * I;
            if (*q == '*')
                want +=
                    (F("num_attention_heads") + 2 * F("num_key_value_heads")) * F("head_dim") * H +
                    H * F("num_attention_heads") * F("head_dim");
            if (*q == '-')
                want += 2 * F("intermediate_size") * H;
            if (*q == 'E')
                want += E * (H + 1) + 2 * E * Im * Hin + 2 * Is * H + 2 * lat * H;
        }
#undef F
        json_decref(j);
        reshard_model_t *m;
        assert_int_equal(reshard_model_load(ms[k].name, NULL, &m), RESHARD_OK);
        reshard_model_info_t info;
        assert_int_equal(reshard_model_info(m, &info), RESHARD_OK);
        assert_int_equal(info.params, want);
        /* and the published total, rounded to 0.1 G */
        if (ms[k].published_g10)
            assert_int_equal((want + 50000000) / 100000000, ms[k].published_g10);
        reshard_model_destroy(m);
    }
}

/* n_groups divisible by tp on both sides; MoE (EP on/off), attention with
 * kv heads replicated on vLLM, MLP, pipeline stages (even split). */
static void test_groups_split(void **state)
{
    (void)state;
    refit(&groups4, "tp=2,dp=2,ep=2", "tp=4");
    refit(&groups4, "tp=1,pp=2,dp=2,ep=2", "tp=2,dp=2,ep=on");
    refit(&groups4, "tp=2,pp=3,ep=2,etp=1", "tp=1,dp=3,ep=on");
    refit(&groups4, "tp=2,dp=2,ep=4,etp=1", "tp=2,dp=2");
    /* Megatron tp=4 over 2 query groups: each rank half a group's linear_qkv rows */
    refit(&groups4, "tp=4,ep=2,etp=2", "tp=2,dp=2,ep=on");
    /* uneven stages from first/last counts (no '|'): the 6 layers as 1, 2, 2, 1 */
    refit(&groups4, "tp=1,pp=4,first=1,last=1", "tp=2");
}

/* n_groups == 1: vLLM's tp > 1 holds B and C whole on every rank. */
static void test_groups_replicated(void **state)
{
    (void)state;
    refit(&groups1, "tp=1,pp=2,dp=2", "tp=2");
    refit(&groups1, "tp=1,dp=2,ep=2", "tp=4");
    refit(&groups1, "tp=1,pp=4", "tp=2,dp=2,ep=on");
}

/* Latent MoE with two shared experts; stages from the '|' in the pattern. */
static void test_latent_and_pipe_stages(void **state)
{
    (void)state;
    refit(&latent, "tp=2,pp=2,ep=2,etp=1", "tp=2,dp=2");
    refit(&latent, "tp=1,pp=2,dp=4,ep=4", "tp=2,ep=on");
    /* virtual pipeline: four '|' segments over pp=2 x vpp=2, chunk c of stage p
     * is segment c*pp + p */
    static const ncfg_t chunks = {
        "ME|*E|M-|EM", 32, 90, 16, 4, 2, 8, 8, 4, 2, 4, 4, 4, 8, 2, 4, 16};
    refit(&chunks, "tp=2,pp=2,vpp=2,etp=1", "tp=2");
}

/* Wave 3: what Megatron derives from '|', empty segments, the two training
 * conventions, vLLM's sequence-parallel MoE, engines and vLLM versions. */
static void test_wave3(void **state)
{
    (void)state;
    static const ncfg_t chunks = {
        "ME|*E|M-|EM", 32, 90, 16, 4, 2, 8, 8, 4, 2, 4, 4, 4, 8, 2, 4, 16};
    /* vpp = segments / pp, derived as Megatron does (no vpp given) */
    refit(&chunks, "tp=2,pp=2,etp=1", "tp=2");
    refit(&chunks, "tp=1,pp=4", "tp=2,engines=2");
    refused(&chunks, "tp=2,pp=2,vpp=4,etp=1", "tp=2",
            "Megatron derives vpp = segments/pp = 4/2 = 2 itself");
    refused(&chunks, "tp=1,pp=3", "tp=1", "pp=3 does not divide the 4 '|' pipeline segments");
    /* Megatron-Bridge's hybrid provider has no virtual pipeline */
    refused(&chunks, "tp=2,pp=2,etp=1,convention=megatron-bridge", "tp=2",
            "Megatron-Bridge's hybrid provider refuses");
    refit(&chunks, "tp=2,pp=4,etp=1,convention=megatron-bridge", "tp=2");
    /* empty segments (doubled, leading, trailing '|'): stages without decoder
     * layers, as Megatron's select_pipeline_segment builds them */
    ncfg_t e = groups4;
    e.pattern = "ME||*-EM";
    refit(&e, "tp=2,pp=3,ep=2,etp=1", "tp=2,dp=2,ep=on");
    e.pattern = "|ME*-EM";
    refit(&e, "tp=1,pp=2", "tp=2");
    e.pattern = "ME|*-|EM||";
    refit(&e, "tp=1,pp=5", "tp=4");
    /* sequence-parallel MoE: shared experts whole (tp=2, dp=2, EP); not
     * with engines of dp=1, nor without EP */
    refit(&groups4, "tp=2,dp=2,ep=2", "tp=2,dp=2,ep=on");
    refit(&groups4, "tp=2,dp=2,ep=2", "tp=2,engines=2,ep=on");
    refit(&latent, "tp=2,pp=2,ep=2,etp=1", "tp=2,dp=2,ep=on,engines=2");
    /* vLLM up to 0.24: experts.w13_weight */
    refit(&groups4, "tp=1,pp=2,dp=2,ep=2", "tp=2,dp=2,ep=on,vllm=0.24");
    /* Megatron-Bridge: vocabulary 100 not padded (50 rows per rank) */
    refit(&groups4, "tp=2,dp=2,ep=2,convention=megatron-bridge", "tp=4");
}

static void test_refusals(void **state)
{
    (void)state;
    /* Megatron does not replicate Mamba groups */
    refused(&groups1, "tp=2", "tp=2", "tp=2 does not divide the 1 Mamba groups");
    /* vLLM replicates groups only when n_groups == 1 */
    refused(&latent, "tp=2,pp=2", "tp=4", "replicates groups only when n_groups == 1");
    /* '|' segments must match pp; without '|' the layers must split evenly */
    refused(&latent, "tp=1,pp=3", "tp=1", "pp=3 does not divide the 2 '|' pipeline segments");
    refused(&latent, "tp=1,pp=2,first=3", "tp=1", "the '|' separators already define the stages");
    refused(&groups4, "tp=1,pp=2,vpp=3", "tp=1", "vpp=3 needs '|' stage boundaries");
    refused(&groups4, "tp=1,pp=4", "tp=1", "pp=4 does not divide the 6 layers");
    /* without EP, every expert is split over all tp*dp ranks */
    refused(&groups4, "tp=1", "tp=4,dp=4", "tp*dp=16 does not divide the expert intermediate");

    /* config fields that imply tensors not built are refused by name */
    static const char *const extra[] = {", \"mamba_proj_bias\": true", ", \"attention_bias\": true",
                                        ", \"mlp_bias\": true", ", \"use_conv_bias\": false"};
    static const char *const field[] = {"mamba_proj_bias", "attention_bias", "mlp_bias",
                                        "use_conv_bias"};
    for (int k = 0; k < 4; k++) {
        /* a later duplicate key wins in jansson: build the text by hand */
        char *json = config_json(&groups4, NULL);
        char key[64];
        snprintf(key, sizeof key, "\"%s\": ", field[k]);
        char *at = strstr(json, key);
        assert_non_null(at);
        char *end = strchr(at, ',');
        char *fixed = malloc(4200);
        snprintf(fixed, 4200, "%.*s%s%s", (int)(at - json), json, extra[k] + 2, end);
        reshard_model_t *m;
        assert_int_equal(reshard_model_load_json(fixed, NULL, &m), RESHARD_ERR_CONFIG);
        assert_non_null(strstr(reshard_last_error(), field[k]));
        free(fixed);
        free(json);
    }
    ncfg_t bad = groups4;
    bad.pattern = "ME*-XM";
    char *json = config_json(&bad, NULL);
    reshard_model_t *m;
    assert_int_equal(reshard_model_load_json(json, NULL, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "'X'"));
    free(json);
    /* the pattern of another JSON type is named as such, not as missing */
    json = config_json(&groups4, NULL);
    char *pat = strstr(json, "\"hybrid_override_pattern\": \"");
    assert_non_null(pat);
    char *num = malloc(4200);
    snprintf(num, 4200, "%.*s\"hybrid_override_pattern\": 5%s", (int)(pat - json), json,
             strchr(pat + strlen("\"hybrid_override_pattern\": \""), '"') + 1);
    assert_int_equal(reshard_model_load_json(num, NULL, &m), RESHARD_ERR_CONFIG);
    if (!strstr(reshard_last_error(), "field 'hybrid_override_pattern' is not a string"))
        fail_msg("%s", reshard_last_error());
    free(num);
    free(json);
    json = config_json(&groups4, NULL);
    reshard_model_options_t o = {.mtp = 1};
    assert_int_equal(reshard_model_load_json(json, &o, &m), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "MTP"));
    free(json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_catalogue_and_count),
        cmocka_unit_test(test_shipped_counts),
        cmocka_unit_test(test_groups_split),
        cmocka_unit_test(test_groups_replicated),
        cmocka_unit_test(test_latent_and_pipe_stages),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_wave3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
