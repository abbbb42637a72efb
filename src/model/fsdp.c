/* The FSDP2 training layout: PyTorch fully_shard over the Hugging Face module.
 *
 * Every parameter is the HF module's own (named_parameters(), unfused:
 * q_proj/k_proj/v_proj, gate_proj/up_proj, down_proj, embed_tokens, norms,
 * lm_head), a DTensor on the mesh [dp_replicate=dp, dp_shard=fsdp, tp]; side
 * rank (r*N + s)*T + t holds replica r's FSDP shard s of TP shard t.
 *
 * Placement semantics (PyTorch at v2.7.0, the release line of FSDP2's
 * fully_shard API; the same code at main in 2026):
 *  - torch/distributed/tensor/placement_types.py, Shard._split_tensor:
 *    torch.chunk(tensor, num_chunks, dim) and, for ranks past the last
 *    chunk, empty tensors (fill_empty_tensor_to_shards): chunk c =
 *    ceil(n/k), rank i holds [i*c, min((i+1)*c, n)), trailing ranks short or
 *    empty (n=5, k=4: 2,2,1,0).
 *  - torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
 *    FSDPParam._init_sharded_param: the local tensor (the TP shard when the
 *    parameter is already a DTensor on a tp mesh) is cut with
 *    _chunk_with_empty(tensor, shard_world_size, dim=0), the same torch.chunk
 *    rule; the placements become (_StridedShard(0, split_factor=T), Shard(0))
 *    for a TP Shard(0) parameter and (Shard(0), Shard(1)) for a TP Shard(1)
 *    one; with HSDP Replicate() over dp_replicate in front
 *    (_init_sharded_param, "dp_replicate" dim of the 2-D mesh).
 *    sharded_param is the unpadded view (sharded_param_data[:length]), so a
 *    rank's to_local() holds its rows only.
 *  - torch/distributed/tensor/_utils.py compute_local_shape_and_global_offset:
 *    mesh dims left to right, each splitting the current local extent with the
 *    torch.chunk rule (so _StridedShard(0, T) then Shard(0) = FSDP chunk s of
 *    TP chunk t).
 *
 * An empty shard (0 rows: more ranks than rows, e.g. a [128] norm over 256
 * ranks, or E experts over more than E ranks) has no buffer on that rank: its
 * to_local() has no element, and a layout declares no 0-byte buffer. A
 * sender skips those parameters when it binds (the buffer table has no
 * entry for them on that rank).
 *
 * Tensor parallelism follows HF's base_model_tp_plan (transformers
 * configuration_qwen3.py / configuration_llama.py / configuration_qwen2.py
 * at 16b6c53 and later): q_proj, k_proj, v_proj, gate_proj, up_proj
 * "colwise" (Shard(0); biases Shard(0)), o_proj and down_proj "rowwise"
 * (Shard(1)); lm_head "colwise_rep" (ForCausalLM._tp_plan: Shard(0) of the
 * vocabulary); embed_tokens, the norms (q_norm/k_norm are
 * "replicated_with_grad_allreduce" in newer plans) and everything else not in
 * the plan: Replicate over tp. The MoE families' plans differ by family and
 * release: tp_plan() below, the facts in docs/fsdp-reference.md. Every TP
 * style cuts by torch.chunk (transformers' get_tensor_shard: ceil(n/tp) per
 * rank), so "local_colwise" (a plain tensor holding the TP piece) and
 * "colwise" (a DTensor) put the same bytes on a rank; only transformers 5's
 * packed_colwise (get_packed_weights: floor(I/tp) rows of gate and of up per
 * rank) needs tp to divide the expert intermediate size.
 *
 * MoE experts (reshard_transformers_t; the facts per family, with lines, are in
 * docs/fsdp-reference.md: transformers 4 read at tag v4.57.6, 5 at
 * huggingface/transformers@a597f974, 5.16.0.dev0). transformers 4 holds one
 * module per expert, "<blk>experts.N.{gate,up,down}_proj.weight" (mixtral:
 * "block_sparse_moe.experts.N.{w1,w2,w3}.weight", w1 gate, w3 up, w2 down),
 * each parameter sharded on its own dim 0. transformers 5 holds the fused
 * "mlp.experts.gate_up_proj" [E, 2I, H] (per expert [gate; up]: forward chunks
 * linear(x, gate_up_proj[e]) in two, gate first; conversion_mapping.py:
 * MergeModulelist(dim=0) then Concatenate(dim=1) of [gate_proj, up_proj]
 * (mixtral [w1, w3]), and "block_sparse_moe." renamed "mlp.") and
 * "mlp.experts.down_proj" [E, H, I], not transposed, sharded on the expert dim.
 * The router "gate.weight" comes before the experts (qwen3_moe 4, mixtral,
 * qwen2_moe) or after them (qwen3_moe 5, deepseek_v3 and glm4_moe, whose MoE
 * module declares experts, gate, shared_experts); qwen2_moe then has
 * "mlp.shared_expert.*" and "mlp.shared_expert_gate.weight" [1, H]. The
 * router's e_score_correction_bias is a registered buffer, not a parameter:
 * fully_shard leaves it whole on every rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/error.h"

/* Coordinates of one FSDP2 rank: replica, FSDP shard, TP rank, and sizes. */
typedef struct {
    int32_t r, s, t;
    int32_t N, T;
} fs_coord_t;

/* torch.chunk(n, k) piece @p i (with empty pieces past the last):
 * [*a, *a + *len). */
static void chunk(int64_t n, int64_t k, int64_t i, int64_t *a, int64_t *len)
{
    int64_t c = rs_cdiv(n, k), lo = i * c < n ? i * c : n, hi = (i + 1) * c < n ? (i + 1) * c : n;
    *a = lo;
    *len = hi - lo;
}

/* Elements [lo, hi) (row-major flat indices of tensor @p t, from dim @p d on,
 * inside the block fixed by off[0..d-1]) contiguous in buffer @p buf from
 * @p base: at most two partial blocks per dim and one box of whole ones. */
static reshard_status_t flat_rec(rs_emit_t *e, int32_t t, const reshard_tensor_info_t *ti,
                                 int32_t buf, int64_t *off, int d, int64_t lo, int64_t hi,
                                 int64_t base)
{
    int n = ti->view_ndim;
    if (lo >= hi)
        return RESHARD_OK;
    int64_t st[RESHARD_MAX_DIMS], ext[RESHARD_MAX_DIMS], o[RESHARD_MAX_DIMS];
    int64_t acc = 1;
    for (int k = n - 1; k >= 0; k--) {
        st[k] = acc;
        acc *= ti->view_shape[k];
    }
    int64_t inner = st[d];
    int64_t first = lo / inner, last = (hi - 1) / inner;
    if (lo % inner == 0 && hi % inner == 0) { /* whole blocks of dim d */
        for (int k = 0; k < n; k++) {
            o[k] = k < d ? off[k] : 0;
            ext[k] = k < d ? 1 : ti->view_shape[k];
        }
        o[d] = first;
        ext[d] = hi / inner - first;
        return rs_emit(e, t, buf, o, ext, base, st);
    }
    if (first == last) {
        off[d] = first;
        return flat_rec(e, t, ti, buf, off, d + 1, lo - first * inner, hi - first * inner, base);
    }
    if (lo % inner) {
        off[d] = first;
        TRY(flat_rec(e, t, ti, buf, off, d + 1, lo % inner, inner, base));
        base += inner - lo % inner;
        lo = (first + 1) * inner;
    }
    int64_t whole = hi / inner * inner;
    TRY(flat_rec(e, t, ti, buf, off, d, lo, whole, base));
    base += whole - lo;
    if (hi > whole) {
        off[d] = hi / inner;
        TRY(flat_rec(e, t, ti, buf, off, d + 1, 0, hi - whole, base));
    }
    return RESHARD_OK;
}

/* Flat elements [lo, hi) of tensor @p t contiguous in @p buf from @p base. */
static reshard_status_t flat(rs_emit_t *e, int32_t t, int32_t buf, int64_t base, int64_t lo,
                             int64_t hi)
{
    reshard_tensor_info_t ti;
    TRY(reshard_tensors_info(e->T, t, &ti));
    int64_t off[RESHARD_MAX_DIMS] = {0};
    return flat_rec(e, t, &ti, buf, off, 0, lo, hi, 0 + base);
}

/* How a parameter is split over tp (HF base_model_tp_plan). */
typedef enum { TP_REPLICATE, TP_COLWISE, TP_ROWWISE } tp_style_t;

/* One HF parameter: rows [0, n0) of @p width elements each (a vector: width
 * 1), starting at flat element @p pbase of logical tensor @p t (a per-expert
 * parameter is one expert's block of the stacked tensor). Its local shard on
 * rank @p c in a buffer of its own named @p name, or none when empty. */
static reshard_status_t param(rs_emit_t *e, const fs_coord_t *c, int32_t t, int64_t pbase,
                              int64_t n0, int64_t width, bool vector, tp_style_t style,
                              const char *name)
{
    int64_t ta = 0, tl = n0, ca = 0, cl = width, a, l;
    if (style == TP_COLWISE) /* Shard(0) over tp, then FSDP chunks the local TP shard */
        chunk(n0, c->T, c->t, &ta, &tl);
    else if (style == TP_ROWWISE) /* Shard(1) over tp, FSDP Shard(0) over all rows */
        chunk(width, c->T, c->t, &ca, &cl);
    chunk(tl, c->N, c->s, &a, &l);
    a += ta;
    if (l == 0 || cl == 0) /* an empty local shard: no buffer */
        return RESHARD_OK;
    int32_t b = vector ? rs_emit_buffer(e, t, 1, l, 1, "%s", name)
                       : rs_emit_buffer(e, t, 0, l, cl, "%s", name);
    if (b < 0)
        return (reshard_status_t)b;
    if (style != TP_ROWWISE)
        return flat(e, t, b, 0, pbase + a * width, pbase + (a + l) * width);
    /* rows [a, a+l) of columns [ca, ca+cl) of the [n0, width] matrix at @p pbase:
     * a 2-d tensor, or block pbase / (n0 * width) of a stacked 3-d one */
    reshard_tensor_info_t ti;
    TRY(reshard_tensors_info(e->T, t, &ti));
    int nd = ti.view_ndim == 3 ? 3 : 2, k = nd - 2;
    int64_t off[3] = {pbase / (n0 * width), 0, 0}, ext[3] = {1, 0, 0}, st[3] = {l * cl, 0, 0};
    off[k] = a;
    off[k + 1] = ca;
    ext[k] = l;
    ext[k + 1] = cl;
    st[k] = cl;
    st[k + 1] = 1;
    return rs_emit(e, t, b, off, ext, 0, st);
}

/* A whole 2-d (or 1-d) logical tensor as one parameter. */
static reshard_status_t whole(rs_emit_t *e, const fs_coord_t *c, int32_t t, tp_style_t style,
                              const char *name)
{
    reshard_tensor_info_t ti;
    TRY(reshard_tensors_info(e->T, t, &ti));
    bool vector = ti.ndim == 1;
    int64_t n0 = ti.shape[0], width = vector ? 1 : ti.shape[ti.ndim - 1];
    return param(e, c, t, 0, n0, width, vector, style, name);
}

/* Which parameter groups a family's HF tensor-parallel plan splits over tp
 * (colwise: gate/up rows, q/k/v rows, the router's expert rows; rowwise:
 * down/o columns); the rest is replicated. transformers 4, base_model_tp_plan
 * at v4.57.6 (753d6110): mixtral attention and block_sparse_moe.gate
 * "colwise_rep" only: its "experts.*.w1"/"w3" "colwise", "w2" "rowwise" never
 * apply there, as _get_parameter_tp_plan turns every digit run into "*"
 * ("experts.*.w*"; fixed for 5 by PR #42129), so the experts stay replicated;
 * qwen3_moe and
 * glm4_moe attention, experts.*.{gate,up}_proj "colwise", down_proj "rowwise",
 * the dense mlp; qwen2_moe attention and the dense mlp only (experts,
 * shared_expert and its gate replicated); deepseek_v3 routed experts, shared
 * experts and the dense mlp "local_colwise"/"local_rowwise" (MLA replicated).
 * transformers 5, at a597f974: experts.gate_up_proj "packed_colwise",
 * experts.down_proj "rowwise" with "moe_tp_experts" for mixtral, qwen3_moe,
 * deepseek_v3 and glm4_moe (no router entry: mixtral's is replicated),
 * shared_experts colwise/rowwise for deepseek_v3 and glm4_moe, qwen2_moe as in
 * 4, MLA replicated. Dense families: attention and mlp in both. */
typedef struct {
    bool attn, router, experts, shared, mlp;
} tp_plan_t;

static tp_plan_t tp_plan(const reshard_model_t *m, const reshard_train_spec_t *s)
{
    bool v5 = rs_transformers(s) == RESHARD_TRANSFORMERS_5;
    switch (m->fam) {
    case RS_FAM_MIXTRAL:
        return (tp_plan_t){.attn = true, .router = !v5, .experts = v5};
    case RS_FAM_QWEN2_MOE:
        return (tp_plan_t){.attn = true, .mlp = true};
    case RS_FAM_QWEN3_MOE:
        return (tp_plan_t){.attn = true, .experts = true, .mlp = true};
    case RS_FAM_DSV3:
        return (tp_plan_t){.experts = true, .shared = true, .mlp = true};
    case RS_FAM_GLM4_MOE:
        return (tp_plan_t){.attn = true, .experts = true, .shared = v5, .mlp = true};
    default:
        return (tp_plan_t){.attn = true, .mlp = true};
    }
}

/* @p style when the plan splits the group (@p split), else replicated. */
static tp_style_t when(bool split, tp_style_t style)
{
    return split ? style : TP_REPLICATE;
}

/* The HF MoE block of a family at a transformers release (see the header's
 * table): its module prefix, whether the experts are declared before the
 * router "gate", and transformers 4's per-expert projections in declaration
 * order with the logical tensor each is (0 gate, 1 up, 2 down). */
typedef struct {
    const char *blk;
    bool experts_first;
    const char *proj[3];
    int role[3];
} moe_form_t;

static moe_form_t moe_form(const reshard_model_t *m, const reshard_train_spec_t *s)
{
    bool v5 = rs_transformers(s) == RESHARD_TRANSFORMERS_5;
    moe_form_t f = {
        "mlp.", false, {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}, {0, 1, 2}};
    if (m->fam == RS_FAM_MIXTRAL && !v5) /* MixtralBlockSparseTop2MLP: w1, w2, w3 */
        f = (moe_form_t){
            "block_sparse_moe.", false, {"w1.weight", "w2.weight", "w3.weight"}, {0, 2, 1}};
    else if (m->fam == RS_FAM_QWEN3_MOE)
        f.experts_first = v5;
    else if (m->fam == RS_FAM_DSV3 || m->fam == RS_FAM_GLM4_MOE)
        f.experts_first = true;
    return f;
}

/* The routed experts of a MoE layer (names "<p><blk>experts."), split over
 * tp when @p split. */
static reshard_status_t experts(rs_emit_t *e, const reshard_train_spec_t *s, const fs_coord_t *c,
                                const rs_layer_ids_t *l, const char *p, const moe_form_t *f,
                                bool split)
{
    const reshard_model_t *m = e->m;
    int64_t E = m->E, I = m->Im, H = m->H;
    char q[128], n[160], n2[160];
    if (rs_transformers(s) == RESHARD_TRANSFORMERS_5) {
        /* gate_up_proj [E, 2I, H], down_proj [E, H, I]; with tp, tp rank t holds
         * [E, 2I/tp, H] ([gate rows t; up rows t] per expert: packed_colwise) and
         * [E, H, I/tp] (columns t: rowwise); FSDP2 Shard(0) on E of that */
        int64_t e0, ne, it = split ? I / c->T : I;
        chunk(E, c->N, c->s, &e0, &ne);
        if (ne == 0)
            return RESHARD_OK;
        rs_nm(q, sizeof q, p, f->blk);
        return rs_emit_experts(e, l, e0, ne, split ? c->t * it : 0, it, false,
                               rs_nm(n, sizeof n, q, "experts.gate_up_proj"),
                               rs_nm(n2, sizeof n2, q, "experts.down_proj"));
    }
    /* transformers 4: <blk>experts.N.<proj>, each parameter sharded alone */
    const int32_t ids[3] = {l->e_gate, l->e_up, l->e_down};
    for (int64_t x = 0; x < E; x++) {
        char b[96];
        rs_nm(b, sizeof b, p, f->blk);
        rs_name_join(q, sizeof q, b, "experts.", x, ".");
        for (int k = 0; k < 3; k++) {
            bool down = f->role[k] == 2;
            TRY(param(e, c, ids[f->role[k]], x * I * H, down ? H : I, down ? I : H, false,
                      when(split, down ? TP_ROWWISE : TP_COLWISE),
                      rs_nm(n, sizeof n, q, f->proj[k])));
        }
    }
    return RESHARD_OK;
}

/* The router "<blk>gate.weight" [E, H], sharded (its expert rows over tp
 * when @p split: mixtral's "colwise_rep"); its score-correction bias [E] fp32
 * is a registered buffer (DeepseekV3TopkRouter, Glm4MoeTopkRouter), which
 * fully_shard does not shard: every rank holds it whole. */
static reshard_status_t router(rs_emit_t *e, const fs_coord_t *c, const rs_layer_ids_t *l,
                               const char *p, const moe_form_t *f, bool split)
{
    char q[96], n[160];
    rs_nm(q, sizeof q, p, f->blk);
    TRY(whole(e, c, l->router, when(split, TP_COLWISE), rs_nm(n, sizeof n, q, "gate.weight")));
    if (l->router_bias < 0)
        return RESHARD_OK;
    return rs_emit_own(e, l->router_bias, rs_nm(n, sizeof n, q, "gate.e_score_correction_bias"));
}

/* A MoE layer's block in HF module order: router and routed experts (the
 * family's order), then the shared expert(s) ("mlp.shared_expert." for
 * qwen2_moe, "mlp.shared_experts." for deepseek_v3 / glm4_moe: a plain
 * gate/up/down MLP) and qwen2_moe's "mlp.shared_expert_gate.weight" [1, H]. */
static reshard_status_t moe(rs_emit_t *e, const reshard_train_spec_t *s, const fs_coord_t *c,
                            const rs_layer_ids_t *l, const char *p)
{
    const reshard_model_t *m = e->m;
    moe_form_t f = moe_form(m, s);
    tp_plan_t tp = tp_plan(m, s);
    if (!f.experts_first)
        TRY(router(e, c, l, p, &f, tp.router));
    TRY(experts(e, s, c, l, p, &f, tp.experts));
    if (f.experts_first)
        TRY(router(e, c, l, p, &f, tp.router));
    if (l->s_gate < 0)
        return RESHARD_OK;
    char q[128], n[160];
    rs_name_join(q, sizeof q, p, "mlp.", -1, m->shared);
    const int32_t ids[3] = {l->s_gate, l->s_up, l->s_down};
    static const char *const proj[3] = {".gate_proj.weight", ".up_proj.weight",
                                        ".down_proj.weight"};
    for (int k = 0; k < 3; k++)
        TRY(whole(e, c, ids[k], when(tp.shared, k == 2 ? TP_ROWWISE : TP_COLWISE),
                  rs_nm(n, sizeof n, q, proj[k])));
    if (l->s_sigmoid < 0)
        return RESHARD_OK;
    return whole(e, c, l->s_sigmoid, TP_REPLICATE,
                 rs_nm(n, sizeof n, p, "mlp.shared_expert_gate.weight"));
}

/* MLA (DeepseekV3Attention, module order): q_a_proj, q_a_layernorm, q_b_proj
 * (q_proj without q_lora_rank), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
 * o_proj. Not in deepseek_v3's tp plan (either release): replicated over tp. */
static reshard_status_t mla(rs_emit_t *e, const fs_coord_t *c, const rs_layer_ids_t *l,
                            const char *p)
{
    const int32_t ids[7] = {l->q_a, l->q_a_norm, l->q_b, l->kv_a, l->kv_a_norm, l->kv_b, l->o};
    static const char *const names[7] = {
        "self_attn.q_a_proj.weight",       "self_attn.q_a_layernorm.weight",
        "self_attn.q_b_proj.weight",       "self_attn.kv_a_proj_with_mqa.weight",
        "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight",
        "self_attn.o_proj.weight"};
    char n[160];
    for (int k = 0; k < 7; k++) {
        int32_t t = k == 2 && l->q_b < 0 ? l->q : ids[k];
        if (t < 0) /* no q_lora_rank: no q_a_proj, q_a_layernorm */
            continue;
        const char *nm = k == 2 && l->q_b < 0 ? "self_attn.q_proj.weight" : names[k];
        TRY(whole(e, c, t, TP_REPLICATE, rs_nm(n, sizeof n, p, nm)));
    }
    return RESHARD_OK;
}

/* Decoder layer @p i in HF module order: self_attn (q, k, v, o, q_norm,
 * k_norm; or MLA), mlp, input_layernorm, post_attention_layernorm. */
static reshard_status_t layer(rs_emit_t *e, const reshard_train_spec_t *s, const fs_coord_t *c,
                              int32_t i)
{
    const reshard_model_t *m = e->m;
    const rs_layer_ids_t *l = &e->ids->layer[i];
    tp_plan_t tp = tp_plan(m, s);
    tp_style_t col = when(tp.attn, TP_COLWISE), row = when(tp.attn, TP_ROWWISE);
    char p[96], n[160];
    rs_name_join(p, sizeof p, "", "model.layers.", l->hf_index, ".");
    if (m->fam == RS_FAM_DSV3) {
        TRY(mla(e, c, l, p));
    } else {
        const int32_t qkv[3] = {l->q, l->k, l->v}, bias[3] = {l->q_bias, l->k_bias, l->v_bias};
        static const char *const wn[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                          "self_attn.v_proj.weight"};
        static const char *const bn[3] = {"self_attn.q_proj.bias", "self_attn.k_proj.bias",
                                          "self_attn.v_proj.bias"};
        for (int k = 0; k < 3; k++) {
            TRY(whole(e, c, qkv[k], col, rs_nm(n, sizeof n, p, wn[k])));
            if (bias[k] >= 0)
                TRY(whole(e, c, bias[k], col, rs_nm(n, sizeof n, p, bn[k])));
        }
        TRY(whole(e, c, l->o, row, rs_nm(n, sizeof n, p, "self_attn.o_proj.weight")));
        if (m->qk_norm) {
            TRY(whole(e, c, l->q_norm, TP_REPLICATE,
                      rs_nm(n, sizeof n, p, "self_attn.q_norm.weight")));
            TRY(whole(e, c, l->k_norm, TP_REPLICATE,
                      rs_nm(n, sizeof n, p, "self_attn.k_norm.weight")));
        }
    }
    if (l->gate >= 0) {
        col = when(tp.mlp, TP_COLWISE);
        TRY(whole(e, c, l->gate, col, rs_nm(n, sizeof n, p, "mlp.gate_proj.weight")));
        TRY(whole(e, c, l->up, col, rs_nm(n, sizeof n, p, "mlp.up_proj.weight")));
        TRY(whole(e, c, l->down, when(tp.mlp, TP_ROWWISE),
                  rs_nm(n, sizeof n, p, "mlp.down_proj.weight")));
    } else {
        TRY(moe(e, s, c, l, p));
    }
    TRY(whole(e, c, l->in_norm, TP_REPLICATE, rs_nm(n, sizeof n, p, "input_layernorm.weight")));
    return whole(e, c, l->post_norm, TP_REPLICATE,
                 rs_nm(n, sizeof n, p, "post_attention_layernorm.weight"));
}

/* Side rank @p r: (replica, shard, tp) = (r / (N*T), (r / T) % N, r % T). The
 * parameters in named_parameters() order: embed_tokens, layers, norm,
 * lm_head (absent when tied: named_parameters() lists a shared tensor once). */
static reshard_status_t fsdp_rank(rs_emit_t *e, int32_t r, const void *spec_v)
{
    const reshard_train_spec_t *s = spec_v;
    const reshard_model_t *m = e->m;
    const rs_model_ids_t *ids = e->ids;
    fs_coord_t c = {.r = r / (s->fsdp * s->tp),
                    .s = (r / s->tp) % s->fsdp,
                    .t = r % s->tp,
                    .N = s->fsdp,
                    .T = s->tp};
    TRY(whole(e, &c, ids->embed, TP_REPLICATE, "model.embed_tokens.weight"));
    for (int32_t i = 0; i < m->L; i++)
        TRY(layer(e, s, &c, i));
    TRY(whole(e, &c, ids->norm, TP_REPLICATE, "model.norm.weight"));
    if (!m->tied)
        TRY(whole(e, &c, ids->lm_head, TP_COLWISE, "lm_head.weight"));
    return RESHARD_OK;
}

static const char *family_name(const reshard_model_t *m)
{
    reshard_model_info_t info;
    return reshard_model_info(m, &info) == RESHARD_OK ? info.family : "?";
}

reshard_status_t rs_fsdp_check(const reshard_model_t *m, const reshard_train_spec_t *s)
{
    RULE(reshard_train_world(s) > 0,
         "train (fsdp): sizes fsdp, dp and tp must be >= 1, pp, cp and ep 1, and the world "
         "(dp*fsdp*tp) fit in int32");
    if (m->fam != RS_FAM_DENSE && m->fam != RS_FAM_QWEN3_MOE && m->fam != RS_FAM_MIXTRAL &&
        m->fam != RS_FAM_QWEN2_MOE && m->fam != RS_FAM_DSV3 && m->fam != RS_FAM_GLM4_MOE)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "train (fsdp): the %s family is not modelled under the FSDP2 convention "
                        "(modelled: dense (llama, mistral, qwen2, qwen3), qwen3_moe, mixtral, "
                        "qwen2_moe, deepseek_v3, kimi_k2 and glm4_moe)",
                        family_name(m));
    if (m->dtype == RESHARD_FP8_E4M3)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "train (fsdp): an FSDP2 trainer holds bf16 parameters, not the FP8 "
                        "checkpoint form (--dtype fp8); for FP8 on the inference side use the "
                        "quantized destination (infer_quant; CLI --infer-dtype fp8 or mxfp8)");
    if (m->nmtp > 0)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "train (fsdp): the HF modules have no MTP layers (mtp option)");
    if (m->fam != RS_FAM_DENSE && s->tp > 1 && rs_transformers(s) == RESHARD_TRANSFORMERS_5 &&
        tp_plan(m, s).experts)
        RULE(m->Im % s->tp == 0,
             "train (fsdp): tp=%d does not divide the %s family's expert intermediate size %lld: "
             "transformers 5 splits model.layers.N.mlp.experts.gate_up_proj \"packed_colwise\" "
             "(get_packed_weights gives each tp rank floor(I/tp) rows of gate and of up, so the "
             "rest would be on no rank); use a tp that divides it",
             s->tp, family_name(m), (long long)m->Im);
    if (m->fam == RS_FAM_DSV3) /* DeepseekV3DecoderLayer: MoE iff layer >= first_k_dense_replace */
        for (int32_t i = 1; i < m->L; i++)
            RULE(m->moe[i] || !m->moe[i - 1],
                 "train (fsdp): layer %d of this %s config is dense after a MoE layer "
                 "(moe_layer_freq > 1): transformers' DeepseekV3 builds every layer from "
                 "first_k_dense_replace on as MoE, so the HF module has other parameters",
                 i, family_name(m));
    return RESHARD_OK;
}

reshard_status_t rs_fsdp_emit(const reshard_model_t *model, const reshard_tensors_t *tensors,
                              const reshard_train_spec_t *spec, int32_t rank_offset,
                              const rs_emit_scope_t *scope, reshard_layout_t **out,
                              reshard_model_buffers_t **buffers)
{
    TRY(rs_fsdp_check(model, spec));
    char text[192];
    uint64_t origin =
        rs_side_origin(model, true, reshard_train_spec_str(spec, text, sizeof text), rank_offset);
    return rs_emit_side(model, tensors, true, reshard_train_world(spec), rank_offset, fsdp_rank,
                        spec, scope, origin, out, buffers);
}
