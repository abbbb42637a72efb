/*
 * The FSDP2 training layout (convention "fsdp") against an oracle written
 * here from PyTorch's rules and HF's parameter names alone, never from
 * src/model/fsdp.c:
 *   - torch.chunk(n, k): chunk c = ceil(n/k); piece i = [i*c, min((i+1)*c, n)),
 *     trailing pieces short or empty (Shard._split_tensor, FSDP2's
 *     _chunk_with_empty);
 *   - mesh [dp_replicate=R, dp_shard=N, tp=T], rank = (r*N + s)*T + t;
 *   - HF's tensor-parallel plans, copied below (plan_of) as transformers
 *     writes them and matched to a parameter name as its
 *     _get_parameter_tp_plan does (the name with "model." off, layer numbers
 *     made "*", then the name or its module): "colwise" styles Shard(0) over
 *     tp, then FSDP chunks the local TP shard on dim 0 (_StridedShard(0, T),
 *     Shard(0)); "rowwise" styles Shard(1) (dim -1) over tp, FSDP Shard(0)
 *     over all rows; "packed_colwise" [gate; up] per expert, each cut in
 *     floor(I/T) blocks (get_packed_weights); anything else Replicate over tp,
 *     Shard(0) over dp_shard;
 *   - transformers 4 MoE: "mlp.experts.N.{gate,up,down}_proj.weight" each a
 *     parameter; transformers 5: "mlp.experts.gate_up_proj" [E, 2I, H]
 *     ([gate; up] per expert) and "mlp.experts.down_proj" [E, H, I].
 * For every rank and every parameter: the buffer exists exactly when its
 * shard is not empty, has the shard's bytes, and its element i is the logical
 * tensor's element at the oracle's index, every element written once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "reshard/reshard_model.h"

/* A tiny config. moe: 0 dense (qwen2 with bias, else qwen3), else the MoE
 * family below; Is: qwen2_moe's shared_expert_intermediate_size or the
 * n_shared_experts of deepseek_v3 / glm4_moe; first_k: their
 * first_k_dense_replace; q_lora..vhd: MLA; rbias: noaux_tc routing (the
 * e_score_correction_bias buffer). */
enum { DENSE, QWEN3_MOE, MIXTRAL, QWEN2_MOE, DSV3, GLM4_MOE };
typedef struct {
    int64_t H, I, Im, V, nh, kv, hd, E, L;
    int tied, bias, moe, qk_norm;
    int64_t Is, first_k, q_lora, kv_lora, nope, rope, vhd;
    int rbias, kimi; /* kimi: model_type kimi_k2 (DeepseekV3ForCausalLM's modules) */
} cfg_t;

static reshard_model_t *load(const cfg_t *c)
{
    char json[1536];
    int n = 0;
#define J(...) n += snprintf(json + n, sizeof json - (size_t)n, __VA_ARGS__)
    static const char *const type[] = {"qwen3",     "qwen3_moe",   "mixtral",
                                       "qwen2_moe", "deepseek_v3", "glm4_moe"};
    J("{\"model_type\": \"%s\", \"hidden_size\": %lld, \"intermediate_size\": %lld, "
      "\"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, \"vocab_size\": %lld, "
      "\"tie_word_embeddings\": %s",
      c->moe == DENSE && c->bias ? "qwen2"
      : c->kimi                  ? "kimi_k2"
                                 : type[c->moe],
      (long long)c->H, (long long)(c->moe == MIXTRAL ? c->Im : c->I), (long long)c->L,
      (long long)c->nh, (long long)c->V, c->tied ? "true" : "false");
    if (c->moe != DSV3)
        J(", \"num_key_value_heads\": %lld, \"head_dim\": %lld", (long long)c->kv,
          (long long)c->hd);
    if (c->moe == QWEN3_MOE || c->moe == QWEN2_MOE)
        J(", \"moe_intermediate_size\": %lld, \"num_experts\": %lld, \"num_experts_per_tok\": 1, "
          "\"decoder_sparse_step\": 1, \"mlp_only_layers\": []",
          (long long)c->Im, (long long)c->E);
    if (c->moe == QWEN2_MOE)
        J(", \"shared_expert_intermediate_size\": %lld", (long long)c->Is);
    if (c->moe == MIXTRAL)
        J(", \"num_local_experts\": %lld, \"num_experts_per_tok\": 1", (long long)c->E);
    if (c->moe == DSV3 || c->moe == GLM4_MOE)
        J(", \"moe_intermediate_size\": %lld, \"n_routed_experts\": %lld, \"n_shared_experts\": "
          "%lld, \"num_experts_per_tok\": 1, \"first_k_dense_replace\": %lld",
          (long long)c->Im, (long long)c->E, (long long)c->Is, (long long)c->first_k);
    if (c->moe == GLM4_MOE)
        J(", \"attention_bias\": %s, \"use_qk_norm\": %s", c->bias ? "true" : "false",
          c->qk_norm ? "true" : "false");
    if (c->moe == DSV3)
        J(", \"q_lora_rank\": %s%lld, \"kv_lora_rank\": %lld, \"qk_nope_head_dim\": %lld, "
          "\"qk_rope_head_dim\": %lld, \"v_head_dim\": %lld%s",
          "", (long long)c->q_lora, (long long)c->kv_lora, (long long)c->nope, (long long)c->rope,
          (long long)c->vhd, c->rbias ? ", \"topk_method\": \"noaux_tc\"" : "");
    J("}");
#undef J
    reshard_model_t *m = NULL;
    if (reshard_model_load_json(json, NULL, &m) != RESHARD_OK)
        fail_msg("%s: %s", json, reshard_last_error());
    return m;
}

/* torch.chunk piece i of n over k */
static void piece(int64_t n, int64_t k, int64_t i, int64_t *a, int64_t *len)
{
    int64_t c = (n + k - 1) / k, lo = i * c, hi = (i + 1) * c;
    lo = lo < n ? lo : n;
    hi = hi < n ? hi : n;
    *a = lo;
    *len = hi - lo;
}

enum { REP, COL, ROW, PACKED };

/* One entry of a base_model_tp_plan ("layers.*." left off) or _tp_plan. */
typedef struct {
    const char *pat, *style;
} plan_entry_t;

#define ATTN                                                                                       \
    {"self_attn.q_proj", "colwise"}, {"self_attn.k_proj", "colwise"},                              \
        {"self_attn.v_proj", "colwise"},                                                           \
    {                                                                                              \
        "self_attn.o_proj", "rowwise"                                                              \
    }
#define MLP                                                                                        \
    {"mlp.gate_proj", "colwise"}, {"mlp.up_proj", "colwise"},                                      \
    {                                                                                              \
        "mlp.down_proj", "rowwise"                                                                 \
    }
#define PER_EXPERT                                                                                 \
    {"mlp.experts.*.gate_proj", "colwise"}, {"mlp.experts.*.up_proj", "colwise"},                  \
    {                                                                                              \
        "mlp.experts.*.down_proj", "rowwise"                                                       \
    }
#define FUSED                                                                                      \
    {"mlp.experts.gate_up_proj", "packed_colwise"}, {"mlp.experts.down_proj", "rowwise"},          \
    {                                                                                              \
        "mlp.experts", "moe_tp_experts"                                                            \
    }

/* configuration_<family>.py base_model_tp_plan (without its "layers.*."
 * prefix): dense qwen3 / qwen2; transformers v4.57.6; a597f974 (5). */
static const plan_entry_t dense_plan[] = {ATTN, MLP, {0, 0}};
static const plan_entry_t mixtral4[] = {ATTN,
                                        {"block_sparse_moe.gate", "colwise_rep"},
                                        {"block_sparse_moe.experts.*.w1", "colwise"},
                                        {"block_sparse_moe.experts.*.w2", "rowwise"},
                                        {"block_sparse_moe.experts.*.w3", "colwise"},
                                        {0, 0}};
static const plan_entry_t qwen2_moe45[] = {ATTN, MLP, {0, 0}};
static const plan_entry_t qwen3_moe4[] = {ATTN, PER_EXPERT, MLP, {0, 0}};
static const plan_entry_t dsv3_4[] = {{"mlp.experts.*.gate_proj", "local_colwise"},
                                      {"mlp.experts.*.up_proj", "local_colwise"},
                                      {"mlp.experts.*.down_proj", "local_rowwise"},
                                      {"mlp.experts.*", "local"},
                                      {"mlp.shared_experts.gate_proj", "local_colwise"},
                                      {"mlp.shared_experts.up_proj", "local_colwise"},
                                      {"mlp.shared_experts.down_proj", "local_rowwise"},
                                      {"mlp.shared_experts", "local"},
                                      {"mlp.gate_proj", "local_colwise"},
                                      {"mlp.up_proj", "local_colwise"},
                                      {"mlp.down_proj", "local_rowwise"},
                                      {"mlp", "gather"},
                                      {0, 0}};
static const plan_entry_t mixtral5[] = {ATTN, FUSED, {0, 0}};
static const plan_entry_t qwen3_moe5[] = {ATTN,
                                          {"self_attn.q_norm", "replicated_with_grad_allreduce"},
                                          {"self_attn.k_norm", "replicated_with_grad_allreduce"},
                                          FUSED,
                                          MLP,
                                          {0, 0}};
#define SHARED                                                                                     \
    {"mlp.shared_experts.gate_proj", "colwise"}, {"mlp.shared_experts.up_proj", "colwise"},        \
    {                                                                                              \
        "mlp.shared_experts.down_proj", "rowwise"                                                  \
    }
static const plan_entry_t dsv3_5[] = {FUSED, SHARED, MLP, {0, 0}};
static const plan_entry_t glm4_moe5[] = {ATTN, FUSED, SHARED, MLP, {0, 0}};

static const plan_entry_t *plan_of(int moe, int tfm)
{
    static const plan_entry_t *const v4[] = {dense_plan,  qwen3_moe4, mixtral4,
                                             qwen2_moe45, dsv3_4,     qwen3_moe4 /* glm4_moe */};
    static const plan_entry_t *const v5[] = {dense_plan,  qwen3_moe5, mixtral5,
                                             qwen2_moe45, dsv3_5,     glm4_moe5};
    return tfm == 4 ? v4[moe] : v5[moe];
}

/* transformers' generic name: v4.57.6 turns every digit run into "*"
 * (re.sub(r"\d+", "*", name): "w1" becomes "w*"); 5 only ".N." and a final
 * ".N" (replace_layer_number_by_wildcard). */
static void generic(const char *name, int tfm, char *out, size_t cap)
{
    size_t o = 0;
    for (const char *q = name; *q && o + 1 < cap;) {
        if (*q >= '0' && *q <= '9') {
            const char *e = q;
            while (*e >= '0' && *e <= '9')
                e++;
            if (tfm == 4 || (q > name && q[-1] == '.' && (*e == '.' || !*e))) {
                out[o++] = '*';
                q = e;
                continue;
            }
        }
        out[o++] = *q++;
    }
    out[o] = 0;
}

/* The style of HF parameter @p name under family @p moe's plan at release
 * @p tfm (_get_parameter_tp_plan: the generic name, else its module's). */
static int hf_style(int moe, int tfm, const char *name)
{
    char g[192], key[192];
    const char *n = strncmp(name, "model.", 6) ? name : name + 6;
    generic(n, tfm, g, sizeof g);
    if (!strcmp(g, "lm_head.weight")) /* ForCausalLM._tp_plan: colwise_rep (5: _gather_output) */
        return COL;
    const char *style = NULL;
    for (int pass = 0; pass < 2 && !style; pass++) {
        if (pass == 1) {
            char *dot = strrchr(g, '.');
            if (!dot)
                break;
            *dot = 0;
        }
        for (const plan_entry_t *e = plan_of(moe, tfm); e->pat && !style; e++) {
            snprintf(key, sizeof key, "layers.*.%s", e->pat);
            if (!strcmp(key, g))
                style = e->style;
        }
    }
    if (!style)
        return REP;
    if (!strcmp(style, "packed_colwise"))
        return PACKED;
    if (strstr(style, "colwise"))
        return COL;
    return strstr(style, "rowwise") ? ROW : REP;
}

/* One expected parameter of a rank: its local block, and how a local
 * element maps to the logical tensor (name, flat index). */
typedef struct {
    char name[160];
    int64_t n0, n1; /* HF shape [n0, n1] (a vector: n1 = 1) */
    /* per-expert (transformers 4): logical tensor name and expert block base */
    char logical[160];
    int64_t lbase;
} hf_param_t;

typedef struct {
    const cfg_t *c;
    int32_t N, T, R, tfm;
    reshard_tensors_t *ts;
    reshard_layout_t *lay;
    reshard_model_buffers_t *bufs;
    int64_t checked, nbufs;
} ctx_t;

/* Check buffer @p name of rank @p rank against the expected elements
 * @p want[i] = logical (tensor id, flat index), @p n of them. */
typedef struct {
    int32_t t;
    int64_t flat;
} elem_t;

static int32_t find_buffer(const ctx_t *x, int32_t rank, const char *name, uint64_t *bytes)
{
    int64_t nb = reshard_model_buffers_count(x->bufs);
    for (int64_t i = 0; i < nb; i++) {
        reshard_model_buffer_t b;
        assert_int_equal(reshard_model_buffers_get(x->bufs, i, &b), RESHARD_OK);
        if (b.rank == rank && !strcmp(b.name, name)) {
            *bytes = b.bytes;
            return b.buffer;
        }
    }
    return -1;
}

static void check_buffer(ctx_t *x, int32_t rank, const char *name, const elem_t *want, int64_t n,
                         int64_t esize)
{
    uint64_t bytes = 0;
    int32_t buf = find_buffer(x, rank, name, &bytes);
    if (n == 0) {
        if (buf >= 0)
            fail_msg("rank %d: %s has an empty shard but a buffer", rank, name);
        return;
    }
    if (buf < 0)
        fail_msg("rank %d: no buffer %s (%lld elements expected)", rank, name, (long long)n);
    if (bytes != (uint64_t)(n * esize))
        fail_msg("rank %d: %s has %llu bytes, want %lld", rank, name, (unsigned long long)bytes,
                 (long long)(n * esize));
    elem_t *got = calloc((size_t)n, sizeof *got);
    for (int64_t i = 0; i < n; i++)
        got[i].t = -1;
    int64_t nf = reshard_layout_count(x->lay);
    for (int64_t i = 0; i < nf; i++) {
        reshard_fragment_t f;
        assert_int_equal(reshard_layout_fragment(x->lay, i, &f), RESHARD_OK);
        if (f.rank != rank || f.buffer != buf)
            continue;
        reshard_tensor_info_t ti;
        assert_int_equal(reshard_tensors_info(x->ts, f.tensor, &ti), RESHARD_OK);
        int nd = ti.view_ndim;
        int64_t vst[RESHARD_MAX_DIMS], idx[RESHARD_MAX_DIMS] = {0}, acc = 1, cnt = 1;
        for (int d = nd - 1; d >= 0; d--) {
            vst[d] = acc;
            acc *= ti.view_shape[d];
            cnt *= f.box.extent[d];
        }
        for (int64_t k = 0; k < cnt; k++) {
            int64_t at = f.base, flat = 0;
            for (int d = 0; d < nd; d++) {
                at += idx[d] * f.stride[d];
                flat += (f.box.offset[d] + idx[d]) * vst[d];
            }
            if (at < 0 || at >= n)
                fail_msg("rank %d %s: fragment element at %lld outside the buffer", rank, name,
                         (long long)at);
            if (got[at].t >= 0)
                fail_msg("rank %d %s: element %lld written twice", rank, name, (long long)at);
            got[at] = (elem_t){f.tensor, flat};
            for (int d = nd - 1; d >= 0; d--) {
                if (++idx[d] < f.box.extent[d])
                    break;
                idx[d] = 0;
            }
        }
    }
    for (int64_t i = 0; i < n; i++)
        if (got[i].t != want[i].t || got[i].flat != want[i].flat)
            fail_msg("rank %d %s element %lld: layout (tensor %d, %lld), oracle (tensor %d, %lld)",
                     rank, name, (long long)i, got[i].t, (long long)got[i].flat, want[i].t,
                     (long long)want[i].flat);
    x->checked += n;
    x->nbufs++;
    free(got);
}

static int32_t tid(const ctx_t *x, const char *name)
{
    int32_t t = reshard_tensors_find(x->ts, name);
    if (t < 0)
        fail_msg("no logical tensor %s", name);
    return t;
}

/* A 2-d (or 1-d) HF parameter on rank (s, t). */
static void check_param(ctx_t *x, int32_t rank, int32_t s, int32_t t, const hf_param_t *p)
{
    int64_t r0 = 0, rn = p->n0, c0 = 0, cn = p->n1;
    int style = hf_style(x->c->moe, x->tfm, p->name);
    if (style == COL)
        piece(p->n0, x->T, t, &r0, &rn);
    if (style == ROW && p->n1 > 1) /* rowwise: a bias (1-d) is replicated */
        piece(p->n1, x->T, t, &c0, &cn);
    int64_t a, l;
    piece(rn, x->N, s, &a, &l);
    a += r0;
    int64_t n = l * cn;
    elem_t *want = calloc((size_t)(n ? n : 1), sizeof *want);
    int32_t id = tid(x, p->logical[0] ? p->logical : p->name);
    for (int64_t i = 0; i < l; i++)
        for (int64_t j = 0; j < cn; j++)
            want[i * cn + j] = (elem_t){id, p->lbase + (a + i) * p->n1 + c0 + j};
    check_buffer(x, rank, p->name, want, cn ? n : 0, 2);
    free(want);
}

/* The logical (checkpoint) names of a layer's routed experts: gate, up,
 * down (mixtral: block_sparse_moe.experts.w1 / w3 / w2). */
static void expert_logical(const cfg_t *c, const char *pfx, char lg[3][160])
{
    bool mx = c->moe == MIXTRAL;
    static const char *const qw[3] = {"gate_proj", "up_proj", "down_proj"}, *const mw[3] = {
                                                                                "w1", "w3", "w2"};
    for (int k = 0; k < 3; k++)
        snprintf(lg[k], 160, "%s%s.experts.%s.weight", pfx, mx ? "block_sparse_moe" : "mlp",
                 mx ? mw[k] : qw[k]);
}

/* transformers 5's fused expert tensors on FSDP shard s: experts chunked;
 * "<blk>experts.gate_up_proj" [E, 2I, H] is [gate rows; up rows] per expert
 * (conversion_mapping.py: MergeModulelist(dim=0), Concatenate(dim=1) of
 * [gate, up]) and "<blk>experts.down_proj" [E, H, I]. */
static void check_fused(ctx_t *x, int32_t rank, int32_t s, int32_t t, const char *pfx,
                        const char *blk)
{
    const cfg_t *c = x->c;
    int64_t e0, ne, I = c->Im, H = c->H, g0 = 0, gn = I, d0 = 0, dn = I;
    piece(c->E, x->N, s, &e0, &ne);
    char nm[192], lg[3][160];
    expert_logical(c, pfx, lg);
    snprintf(nm, sizeof nm, "%s%sexperts.gate_up_proj", pfx, blk);
    if (hf_style(c->moe, x->tfm, nm) == PACKED) { /* block_size // world_size of gate, of up */
        gn = I / x->T;
        g0 = t * gn;
    }
    int64_t n = ne * 2 * gn * H;
    elem_t *want = calloc((size_t)(n ? n : 1) + (size_t)(ne * H * I), sizeof *want);
    for (int64_t e = 0; e < ne; e++)
        for (int64_t r = 0; r < 2 * gn; r++)
            for (int64_t h = 0; h < H; h++)
                want[(e * 2 * gn + r) * H + h] =
                    (elem_t){tid(x, lg[r < gn ? 0 : 1]), (e0 + e) * I * H + (g0 + r % gn) * H + h};
    check_buffer(x, rank, nm, want, n, 2);
    snprintf(nm, sizeof nm, "%s%sexperts.down_proj", pfx, blk);
    if (hf_style(c->moe, x->tfm, nm) == ROW) /* get_tensor_shard on dim -1: torch.chunk */
        piece(I, x->T, t, &d0, &dn);
    n = ne * H * dn;
    for (int64_t e = 0; e < ne; e++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < dn; i++)
                want[(e * H + h) * dn + i] =
                    (elem_t){tid(x, lg[2]), (e0 + e) * H * I + h * I + d0 + i};
    check_buffer(x, rank, nm, want, n, 2);
    free(want);
}

#define P(...) snprintf(p.name, sizeof p.name, __VA_ARGS__)

/* The MoE block of layer prefix @p pf on rank (s, t), from HF's modules:
 * qwen3_moe / mixtral / qwen2_moe: the router "gate" before the experts
 * (qwen3_moe under transformers 5 after them), deepseek_v3 / glm4_moe: the
 * experts, the router, the shared experts; mixtral under transformers 4 in
 * "block_sparse_moe." with experts.N.{w1,w2,w3}; qwen2_moe's shared_expert and
 * shared_expert_gate [1, H]; the router's e_score_correction_bias (fp32) a
 * buffer fully_shard leaves whole on every rank. */
static void check_moe(ctx_t *x, int32_t rank, int32_t s, int32_t t, const char *pf)
{
    const cfg_t *c = x->c;
    bool v5 = x->tfm == 5;
    const char *blk = c->moe == MIXTRAL && !v5 ? "block_sparse_moe." : "mlp.";
    const char *lblk = c->moe == MIXTRAL ? "block_sparse_moe." : "mlp.";
    char lg[3][160];
    expert_logical(c, pf, lg);
    hf_param_t p;
    memset(&p, 0, sizeof p);
    P("%s%sgate.weight", pf, blk);
    snprintf(p.logical, sizeof p.logical, "%s%sgate.weight", pf, lblk);
    p.n0 = c->E;
    p.n1 = c->H;
    check_param(x, rank, s, t, &p);
    if (c->rbias || c->moe == GLM4_MOE) { /* the buffer: every element on every rank */
        char nm[192];
        snprintf(nm, sizeof nm, "%smlp.gate.e_score_correction_bias", pf);
        elem_t *want = calloc((size_t)c->E, sizeof *want);
        for (int64_t e = 0; e < c->E; e++)
            want[e] = (elem_t){tid(x, nm), e};
        check_buffer(x, rank, nm, want, c->E, 4);
        free(want);
    }
    if (v5) {
        check_fused(x, rank, s, t, pf, blk);
    } else {
        bool mx = c->moe == MIXTRAL;
        /* declaration order: gate_proj, up_proj, down_proj; mixtral w1, w2, w3 */
        static const char *const qn[3] = {"gate_proj", "up_proj", "down_proj"}, *const mn[3] = {
                                                                                    "w1", "w2",
                                                                                    "w3"};
        static const int qr[3] = {0, 1, 2}, mr[3] = {0, 2, 1};
        for (int64_t e = 0; e < c->E; e++)
            for (int k = 0; k < 3; k++) {
                int role = mx ? mr[k] : qr[k];
                memset(&p, 0, sizeof p);
                P("%s%sexperts.%lld.%s.weight", pf, blk, (long long)e, mx ? mn[k] : qn[k]);
                snprintf(p.logical, sizeof p.logical, "%s", lg[role]);
                p.n0 = role < 2 ? c->Im : c->H;
                p.n1 = role < 2 ? c->H : c->Im;
                p.lbase = e * c->Im * c->H;
                check_param(x, rank, s, t, &p);
            }
    }
    if (c->moe == QWEN3_MOE || c->moe == MIXTRAL)
        return;
    int64_t Is = c->moe == QWEN2_MOE ? c->Is : c->Im * c->Is;
    const char *sh = c->moe == QWEN2_MOE ? "shared_expert" : "shared_experts";
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int k = 0; k < 3; k++) {
        memset(&p, 0, sizeof p);
        P("%smlp.%s.%s.weight", pf, sh, proj[k]);
        p.n0 = k < 2 ? Is : c->H;
        p.n1 = k < 2 ? c->H : Is;
        check_param(x, rank, s, t, &p);
    }
    if (c->moe == QWEN2_MOE) {
        memset(&p, 0, sizeof p);
        P("%smlp.shared_expert_gate.weight", pf);
        p.n0 = 1;
        p.n1 = c->H;
        check_param(x, rank, s, t, &p);
    }
}

static void check_rank(ctx_t *x, int32_t rank)
{
    const cfg_t *c = x->c;
    int32_t t = rank % x->T, s = (rank / x->T) % x->N;
    hf_param_t p;
    memset(&p, 0, sizeof p);
#define ONE(n0_, n1_, ...)                                                                         \
    do {                                                                                           \
        memset(&p, 0, sizeof p);                                                                   \
        P(__VA_ARGS__);                                                                            \
        p.n0 = n0_;                                                                                \
        p.n1 = n1_;                                                                                \
        check_param(x, rank, s, t, &p);                                                            \
    } while (0)
    ONE(c->V, c->H, "model.embed_tokens.weight");
    for (int64_t L = 0; L < c->L; L++) {
        char pf[64];
        snprintf(pf, sizeof pf, "model.layers.%lld.", (long long)L);
        if (c->moe == DSV3) { /* DeepseekV3Attention (MLA) */
            int64_t qk = c->nope + c->rope;
            if (c->q_lora) {
                ONE(c->q_lora, c->H, "%sself_attn.q_a_proj.weight", pf);
                ONE(c->q_lora, 1, "%sself_attn.q_a_layernorm.weight", pf);
                ONE(c->nh * qk, c->q_lora, "%sself_attn.q_b_proj.weight", pf);
            } else {
                ONE(c->nh * qk, c->H, "%sself_attn.q_proj.weight", pf);
            }
            ONE(c->kv_lora + c->rope, c->H, "%sself_attn.kv_a_proj_with_mqa.weight", pf);
            ONE(c->kv_lora, 1, "%sself_attn.kv_a_layernorm.weight", pf);
            ONE(c->nh * (c->nope + c->vhd), c->kv_lora, "%sself_attn.kv_b_proj.weight", pf);
            ONE(c->H, c->nh * c->vhd, "%sself_attn.o_proj.weight", pf);
        } else {
            ONE(c->nh * c->hd, c->H, "%sself_attn.q_proj.weight", pf);
            ONE(c->kv * c->hd, c->H, "%sself_attn.k_proj.weight", pf);
            ONE(c->kv * c->hd, c->H, "%sself_attn.v_proj.weight", pf);
            if (c->bias || c->moe == QWEN2_MOE) {
                ONE(c->nh * c->hd, 1, "%sself_attn.q_proj.bias", pf);
                ONE(c->kv * c->hd, 1, "%sself_attn.k_proj.bias", pf);
                ONE(c->kv * c->hd, 1, "%sself_attn.v_proj.bias", pf);
            }
            ONE(c->H, c->nh * c->hd, "%sself_attn.o_proj.weight", pf);
            if (c->qk_norm) {
                ONE(c->hd, 1, "%sself_attn.q_norm.weight", pf);
                ONE(c->hd, 1, "%sself_attn.k_norm.weight", pf);
            }
        }
        if (!c->moe || L < c->first_k) {
            ONE(c->I, c->H, "%smlp.gate_proj.weight", pf);
            ONE(c->I, c->H, "%smlp.up_proj.weight", pf);
            ONE(c->H, c->I, "%smlp.down_proj.weight", pf);
        } else {
            check_moe(x, rank, s, t, pf);
        }
        ONE(c->H, 1, "%sinput_layernorm.weight", pf);
        ONE(c->H, 1, "%spost_attention_layernorm.weight", pf);
    }
    ONE(c->H, 1, "model.norm.weight");
    if (!c->tied)
        ONE(c->V, c->H, "lm_head.weight");
#undef ONE
}

/* Build the refit of @p c from @p train, check every rank against the
 * oracle, and that each rank declares no buffer beyond the oracle's. */
static void check_spec(const cfg_t *c, const char *train, const char *infer)
{
    reshard_model_t *m = load(c);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    assert_int_equal(reshard_train_spec_parse(train, &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse(infer, &is), RESHARD_OK);
    assert_int_equal(ts.convention, RESHARD_TRAIN_FSDP);
    reshard_model_refit_t r;
    reshard_status_t st = reshard_model_refit_create(m, &ts, &is, &r);
    if (st != RESHARD_OK)
        fail_msg("%s -> %s: %s", train, infer, reshard_last_error());
    ctx_t x = {.c = c,
               .N = ts.fsdp,
               .T = ts.tp,
               .R = ts.dp,
               .tfm = ts.transformers == RESHARD_TRANSFORMERS_4 ? 4 : 5,
               .ts = r.tensors,
               .lay = r.train,
               .bufs = r.train_buffers};
    assert_int_equal(r.train_world, ts.tp * ts.fsdp * ts.dp);
    int64_t before = 0;
    for (int32_t k = 0; k < r.train_world; k++)
        check_rank(&x, k);
    /* every element of every replica: R copies of the model (with tp, the
     * parameters replicated over tp are T copies more) */
    reshard_tensor_info_t ti;
    for (int32_t k = 0; k < reshard_tensors_count(r.tensors); k++) {
        assert_int_equal(reshard_tensors_info(r.tensors, k, &ti), RESHARD_OK);
        before += ti.numel;
    }
    /* the router-bias buffers are whole on every rank, not one copy per replica */
    int64_t whole_extra = 0;
    for (int32_t k = 0; k < reshard_tensors_count(r.tensors); k++) {
        assert_int_equal(reshard_tensors_info(r.tensors, k, &ti), RESHARD_OK);
        if (strstr(ti.name, "e_score_correction_bias"))
            whole_extra += ti.numel * (r.train_world - ts.dp);
    }
    if (ts.tp == 1)
        assert_int_equal(x.checked, before * ts.dp + whole_extra);
    else
        assert_true(x.checked > before * ts.dp);
    /* no extra buffers: the table has as many entries as the oracle found */
    assert_int_equal(reshard_model_buffers_count(r.train_buffers), x.nbufs);
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(m);
}

/* qwen3 dense, uneven everywhere: k_norm [6] over 4 is 2,2,2,0 (an empty
 * trailing shard), V=50 over 3 is 17,17,16, I=10 over 4 is 3,3,3,1 */
static const cfg_t dense = {
    .H = 24, .I = 10, .V = 50, .nh = 4, .kv = 2, .hd = 6, .L = 2, .qk_norm = 1};
static const cfg_t qwen2 = {
    .H = 24, .I = 10, .V = 50, .nh = 4, .kv = 2, .hd = 6, .L = 1, .tied = 1, .bias = 1};
/* 3 experts over fsdp=4: 1,1,1,0 */
static const cfg_t moe = {.H = 16,
                          .I = 20,
                          .Im = 6,
                          .V = 37,
                          .nh = 2,
                          .kv = 1,
                          .hd = 8,
                          .E = 3,
                          .L = 2,
                          .moe = 1,
                          .qk_norm = 1};

static void test_fsdp_even_and_uneven(void **state)
{
    (void)state;
    check_spec(&dense, "fsdp=4", "tp=2");
    check_spec(&dense, "fsdp=3", "tp=1");
    check_spec(&dense, "fsdp=7", "tp=2"); /* more ranks than k_norm rows: 1 x 6, 0 */
    check_spec(&qwen2, "fsdp=3", "tp=2");
}

static void test_hsdp(void **state)
{
    (void)state;
    check_spec(&dense, "fsdp=2,dp=2", "tp=2,dp=2");
    check_spec(&dense, "dp=3,fsdp=2", "tp=2");
}

static void test_tp_fsdp(void **state)
{
    (void)state;
    check_spec(&dense, "tp=2,fsdp=2", "tp=2");
    check_spec(&dense, "tp=2,fsdp=3", "tp=2,dp=2");
    check_spec(&dense, "tp=2,fsdp=2,dp=2", "tp=1");
    check_spec(&qwen2, "tp=2,fsdp=3", "tp=2");
}

static void test_moe_forms(void **state)
{
    (void)state;
    check_spec(&moe, "fsdp=4", "tp=2,ep=on");
    check_spec(&moe, "fsdp=2,transformers=5", "tp=1");
    check_spec(&moe, "fsdp=4,transformers=4", "tp=2");
    check_spec(&moe, "fsdp=3,dp=2,transformers=4", "tp=1,dp=2,ep=on");
}

/* mixtral: 3 experts over fsdp=4 (1,1,1,0); Im=6 rows per expert over 4:
 * 2,2,2,0 */
static const cfg_t mixtral = {
    .H = 16, .Im = 6, .V = 37, .nh = 2, .kv = 1, .hd = 8, .E = 3, .L = 2, .moe = MIXTRAL};
/* qwen2_moe: q/k/v biases, a shared expert of 10 rows and its [1, H] gate
 * (one row: only FSDP shard 0 holds it) */
static const cfg_t qwen2_moe = {.H = 16,
                                .I = 20,
                                .Im = 6,
                                .Is = 10,
                                .V = 37,
                                .nh = 2,
                                .kv = 1,
                                .hd = 8,
                                .E = 5,
                                .L = 2,
                                .moe = QWEN2_MOE};
/* deepseek_v3: MLA with q_lora_rank, layer 0 dense, 5 experts, one shared
 * expert, noaux_tc (the e_score_correction_bias buffer) */
static const cfg_t dsv3 = {.H = 16,
                           .I = 20,
                           .Im = 6,
                           .Is = 1,
                           .V = 37,
                           .nh = 2,
                           .E = 5,
                           .L = 3,
                           .first_k = 1,
                           .q_lora = 12,
                           .kv_lora = 8,
                           .nope = 4,
                           .rope = 2,
                           .vhd = 4,
                           .rbias = 1,
                           .moe = DSV3};
/* deepseek_v3 without q_lora_rank (q_proj) nor noaux_tc (no bias buffer) */
static const cfg_t dsv3_plain = {.H = 16,
                                 .I = 20,
                                 .Im = 6,
                                 .Is = 2,
                                 .V = 37,
                                 .nh = 2,
                                 .E = 4,
                                 .L = 2,
                                 .first_k = 1,
                                 .kv_lora = 8,
                                 .nope = 4,
                                 .rope = 2,
                                 .vhd = 4,
                                 .moe = DSV3};
/* glm4_moe: q/k/v biases, layer 0 dense, 6 experts + 1 shared, the bias buffer */
static const cfg_t glm4_moe = {.H = 16,
                               .I = 20,
                               .Im = 6,
                               .Is = 1,
                               .V = 37,
                               .nh = 4,
                               .kv = 2,
                               .hd = 4,
                               .E = 6,
                               .L = 2,
                               .first_k = 1,
                               .bias = 1,
                               .moe = GLM4_MOE};

static void test_mixtral(void **state)
{
    (void)state;
    check_spec(&mixtral, "fsdp=4", "tp=2,ep=on");
    check_spec(&mixtral, "fsdp=4,transformers=4", "tp=2");
    check_spec(&mixtral, "fsdp=2,dp=2,transformers=4", "tp=1,dp=2,ep=on");
    check_spec(&mixtral, "fsdp=3,dp=2", "tp=2");
}

static void test_qwen2_moe(void **state)
{
    (void)state;
    check_spec(&qwen2_moe, "fsdp=4", "tp=2,ep=on");
    check_spec(&qwen2_moe, "fsdp=3,transformers=4", "tp=2");
    check_spec(&qwen2_moe, "fsdp=2,dp=2,transformers=4", "tp=1,dp=2,ep=on");
    check_spec(&qwen2_moe, "fsdp=7", "tp=1");
}

static void test_deepseek_v3(void **state)
{
    (void)state;
    check_spec(&dsv3, "fsdp=4", "tp=2,ep=on");
    check_spec(&dsv3, "fsdp=3,transformers=4", "tp=2");
    check_spec(&dsv3, "fsdp=2,dp=2", "tp=1,dp=2,ep=on");
    check_spec(&dsv3_plain, "fsdp=3", "tp=2");
    check_spec(&dsv3_plain, "fsdp=4,transformers=4", "tp=2,ep=on");
}

/* kimi_k2 (Kimi-K2's config model_type; the deepseek_v3 modules), 6 experts */
static void test_kimi_k2(void **state)
{
    (void)state;
    cfg_t kimi = dsv3;
    kimi.kimi = 1;
    kimi.E = 6;
    check_spec(&kimi, "fsdp=4", "tp=2,ep=on");
    check_spec(&kimi, "fsdp=4,transformers=4", "tp=2");
}

static void test_glm4_moe(void **state)
{
    (void)state;
    check_spec(&glm4_moe, "fsdp=4", "tp=2,ep=on");
    check_spec(&glm4_moe, "fsdp=4,transformers=4", "tp=2");
    check_spec(&glm4_moe, "fsdp=2,dp=2", "tp=1,dp=2,ep=on");
}

/* MoE families under tp x fsdp: each parameter split over tp as its family's
 * plan at the release says (plan_of), then FSDP2's chunk; uneven splits
 * (E=3 router rows over tp=2 for mixtral 4: 2,1; Im=6 columns over tp=4 for
 * transformers 4; I=20 over tp=3), HSDP, both releases. */
static void test_moe_tp(void **state)
{
    (void)state;
    static const char *const specs[][2] = {{"tp=2,fsdp=2", "tp=2,ep=on"},
                                           {"tp=2,fsdp=3,transformers=4", "tp=2"},
                                           {"tp=3,fsdp=2,dp=2", "tp=1,dp=2,ep=on"},
                                           {"tp=4,fsdp=2,transformers=4", "tp=2"}};
    const cfg_t *fams[] = {&moe, &mixtral, &qwen2_moe, &dsv3, &dsv3_plain, &glm4_moe};
    for (unsigned f = 0; f < sizeof fams / sizeof *fams; f++)
        for (unsigned k = 0; k < sizeof specs / sizeof *specs; k++)
            check_spec(fams[f], specs[k][0], specs[k][1]);
}

/* The spec's text round trip and the refusals, each naming what is wrong. */
static void test_spec_text_and_refusals(void **state)
{
    (void)state;
    reshard_train_spec_t s, s2;
    char text[128];
    static const char *const good[] = {"fsdp=4",
                                       "fsdp=4,dp=2",
                                       "tp=2,fsdp=2",
                                       "tp=2,fsdp=3,dp=2",
                                       "convention=fsdp,fsdp=2",
                                       "fsdp=2,transformers=4",
                                       "convention=fsdp"};
    for (unsigned i = 0; i < sizeof good / sizeof *good; i++) {
        assert_int_equal(reshard_train_spec_parse(good[i], &s), RESHARD_OK);
        assert_int_equal(s.convention, RESHARD_TRAIN_FSDP);
        reshard_train_spec_str(&s, text, sizeof text);
        assert_int_equal(reshard_train_spec_parse(text, &s2), RESHARD_OK);
        assert_memory_equal(&s, &s2, sizeof s);
        assert_int_equal(reshard_train_world(&s), s.tp * s.dp * s.fsdp);
    }
    assert_int_equal(reshard_train_spec_parse("tp=2,fsdp=3,dp=2", &s), RESHARD_OK);
    assert_string_equal(reshard_train_spec_str(&s, text, sizeof text), "fsdp=3,dp=2,tp=2");
    assert_string_equal(reshard_train_convention_name(RESHARD_TRAIN_FSDP), "fsdp");
    static const struct {
        const char *spec, *why;
    } bad[] = {{"fsdp=2,pp=2", "pp= is a Megatron size"},
               {"pp=2,fsdp=2", "pp= is a Megatron size"},
               {"fsdp=2,ep=2", "ep= is a Megatron size"},
               {"fsdp=2,etp=1", "etp= is a Megatron size"},
               {"fsdp=2,cp=2", "cp= is a Megatron size"},
               {"fsdp=2,vpp=2", "vpp= is a Megatron size"},
               {"fsdp=0", "fsdp=0 is not a positive integer"},
               {"fsdp=2,convention=megatron-bridge", "fsdp= needs convention=fsdp"},
               {"fsdp=2,transformers=6", "transformers=6 is not a modelled"},
               {"tp=2,transformers=4", "transformers= belongs to an FSDP2 spec"}};
    for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(reshard_train_spec_parse(bad[i].spec, &s), RESHARD_ERR_INVALID_ARG);
        if (!strstr(reshard_last_error(), bad[i].why))
            fail_msg("%s: \"%s\" does not say \"%s\"", bad[i].spec, reshard_last_error(),
                     bad[i].why);
    }
}

/* Families and forms not modelled are refused by name before anything is built. */
static void test_refused_models(void **state)
{
    (void)state;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_refit_t r;
    reshard_model_t *m = NULL;
    assert_int_equal(reshard_infer_spec_parse("tp=2", &is), RESHARD_OK);
    /* transformers 5's packed_colwise gate_up_proj with a tp that does not
     * divide the expert intermediate size (6 over 4): get_packed_weights would
     * leave rows on no rank; transformers 4 cuts by torch.chunk and is modelled */
    m = load(&moe);
    assert_int_equal(reshard_train_spec_parse("tp=4,fsdp=2", &ts), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &r), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(),
                           "tp=4 does not divide the qwen3_moe family's expert intermediate "
                           "size 6"));
    assert_non_null(strstr(reshard_last_error(), "model.layers.N.mlp.experts.gate_up_proj"));
    reshard_model_destroy(m);
    m = load(&dsv3);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &r), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "the deepseek_v3 family's expert"));
    reshard_model_destroy(m);
    /* qwen2_moe's plan leaves its experts replicated: any tp */
    m = load(&qwen2_moe);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &r), RESHARD_OK);
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(m);
    /* deepseek_v3 with moe_layer_freq 2: HF's module has every layer from
     * first_k_dense_replace on as MoE */
    assert_int_equal(
        reshard_model_load_json(
            "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 16, \"intermediate_size\": 8, "
            "\"moe_intermediate_size\": 4, \"num_hidden_layers\": 3, \"num_attention_heads\": 2, "
            "\"kv_lora_rank\": 8, \"qk_nope_head_dim\": 4, \"qk_rope_head_dim\": 2, "
            "\"v_head_dim\": 4, \"n_routed_experts\": 2, \"num_experts_per_tok\": 1, "
            "\"moe_layer_freq\": 2, \"vocab_size\": 32}",
            NULL, &m),
        RESHARD_OK);
    assert_int_equal(reshard_train_spec_parse("fsdp=2", &ts), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &r), RESHARD_ERR_CONFIG);
    assert_non_null(strstr(reshard_last_error(), "layer 1 of this deepseek_v3 config is dense"));
    reshard_model_destroy(m);
    /* an unmodelled family: UNSUPPORTED naming it and the convention */
    reshard_model_options_t g = {.layers = 1};
    assert_int_equal(reshard_model_load("gpt-oss-20b", &g, &m), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &r), RESHARD_ERR_UNSUPPORTED);
    assert_non_null(strstr(reshard_last_error(), "gpt_oss family is not modelled under the FSDP2"));
    reshard_model_destroy(m);
    /* the FP8 checkpoint form: an FSDP2 trainer holds bf16 */
    reshard_model_options_t o = {.dtype = RESHARD_FP8_E4M3};
    assert_int_equal(reshard_model_load("qwen3-0.6b", &o, &m), RESHARD_OK);
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &r), RESHARD_ERR_UNSUPPORTED);
    assert_non_null(strstr(reshard_last_error(), "bf16"));
    reshard_model_destroy(m);
}

/* The FP8 inference destination (infer_quant): the FSDP2 side stays bf16 and
 * the plan is built (the vLLM side quantizes). */
static void test_infer_quant(void **state)
{
    (void)state;
    reshard_model_options_t o = {.layers = 1, .infer_quant = RESHARD_QUANT_FP8_BLOCK};
    reshard_model_t *m = NULL;
    assert_int_equal(reshard_model_load("qwen3-0.6b", &o, &m), RESHARD_OK);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_refit_t r;
    assert_int_equal(reshard_train_spec_parse("fsdp=3", &ts), RESHARD_OK);
    assert_int_equal(reshard_infer_spec_parse("tp=2", &is), RESHARD_OK);
    reshard_status_t st = reshard_model_refit_create(m, &ts, &is, &r);
    if (st != RESHARD_OK)
        fail_msg("%s", reshard_last_error());
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fsdp_even_and_uneven),
        cmocka_unit_test(test_hsdp),
        cmocka_unit_test(test_tp_fsdp),
        cmocka_unit_test(test_moe_forms),
        cmocka_unit_test(test_mixtral),
        cmocka_unit_test(test_qwen2_moe),
        cmocka_unit_test(test_deepseek_v3),
        cmocka_unit_test(test_kimi_k2),
        cmocka_unit_test(test_glm4_moe),
        cmocka_unit_test(test_moe_tp),
        cmocka_unit_test(test_spec_text_and_refusals),
        cmocka_unit_test(test_refused_models),
        cmocka_unit_test(test_infer_quant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
