/* The FSDP2 training layout: the HF module's own named_parameters(), each sharded by
 * PyTorch's fully_shard (and, with tp, parallelize_module) as it holds them.
 *
 * PyTorch facts (pytorch/pytorch 00131b6b):
 *   torch/distributed/fsdp/_fully_shard/_fsdp_param.py  FSDP2 chunks each parameter's
 *     local tensor on dim 0 with torch.chunk into dp_shard pieces, empty ones appended
 *     (_chunk_with_empty); the sharded parameter is the unpadded chunk of this rank; a
 *     parameter tensor parallelism sharded on dim 0 gets _StridedShard(0, split_factor
 *     = tp) on the data-parallel dim, i.e. FSDP2 chunks the TP shard. HSDP replicates
 *     over dp_replicate.
 *   torch/distributed/tensor/placement_types.py  Shard(dim) splits like torch.chunk:
 *     chunk c = ceil(n/k), rank i holds [min(i*c, n), min((i+1)*c, n)).
 *   torch/distributed/tensor/parallel/style.py  ColwiseParallel: nn.Linear weight
 *     (and bias) Shard(0); RowwiseParallel: weight Shard(1), bias replicated.
 * transformers facts: base_model_tp_plan of the dense families
 *   (configuration_llama.py, configuration_qwen3.py, configuration_qwen2.py): q_proj,
 *   k_proj, v_proj, gate_proj, up_proj "colwise", o_proj, down_proj "rowwise"; the
 *   causal-LM class's _tp_plan lm_head "colwise_rep"; embed_tokens and the norms are
 *   not in it (replicated over tp). The MoE families of transformers 4.x hold routed
 *   experts as per-expert modules (experts.J.gate_proj / up_proj / down_proj, mixtral
 *   experts.J.w1 / w3 / w2); DeepseekV3's e_score_correction_bias is a buffer
 *   (register_buffer: whole on every rank).
 *
 * Rank r of the side is (dp_replicate r / (fsdp*tp), dp_shard (r / tp) % fsdp,
 * tp r % tp). Every parameter is its own buffer, named as the HF module names it,
 * its local shard contiguous; an empty shard declares no buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "model/model_internal.h"
#include "util/error.h"

typedef enum { REPLICATED, COLWISE, ROWWISE } tp_style_t;

/* torch.chunk's piece @p i of @p k over an extent @p n: [*lo, *hi). */
static void chunk(int64_t n, int64_t k, int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t c = (n + k - 1) / k;
    *lo = i * c < n ? i * c : n;
    *hi = (i + 1) * c < n ? (i + 1) * c : n;
}

reshard_status_t rs_fsdp_check(const reshard_model_t *m, const reshard_train_spec_t *s)
{
    RULE(reshard_train_world(s) > 0,
         "train: fsdp=%d, dp=%d, tp=%d: sizes must be >= 1 and the "
         "world fit in int32",
         s->fsdp, s->dp, s->tp);
    static const char *const fam[] = {"dense",     "qwen3_moe", "deepseek_v3",
                                      "qwen2_moe", "mixtral",   "nemotron_h",
                                      "glm4_moe",  "gpt_oss",   "qwen3_next"};
    const char *name = (unsigned)m->fam < sizeof fam / sizeof *fam ? fam[m->fam] : "?";
    if (m->fam == RS_FAM_NEMOTRON_H || m->fam == RS_FAM_GPT_OSS || m->fam == RS_FAM_QWEN3_NEXT)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "train (fsdp): the %s family's HF module is not modelled for FSDP2 "
                        "(supported: dense, qwen3_moe, qwen2_moe, mixtral, deepseek_v3, glm4_moe)",
                        name);
    if (m->dtype != RESHARD_BF16)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "train (fsdp): an FSDP2 trainer holds bf16 parameters; the model is "
                        "loaded as %s (for FP8 inference weights load bf16 with infer_quant)",
                        reshard_dtype_name(m->dtype));
    if (m->nmtp)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "train (fsdp): the HF module has no multi-token-prediction layers "
                        "(transformers drops them): load the model without mtp");
    if (s->tp > 1) {
        RULE(m->fam == RS_FAM_DENSE,
             "train (fsdp): tp=%d with the %s family: transformers' tensor-parallel plan for "
             "its experts is not modelled (tp > 1 is for the dense families)",
             s->tp, name);
        RULE(m->nh % s->tp == 0 && (m->kv % s->tp == 0),
             "train (fsdp): tp=%d must divide the %d attention heads and the %d kv heads "
             "(ColwiseParallel on q_proj, k_proj and v_proj splits them by rows)",
             s->tp, m->nh, m->kv);
    }
    return RESHARD_OK;
}

/* The tensor-parallel style of catalogue tensor @p t (transformers' tp plan). */
static tp_style_t style_of(const rs_model_ids_t *ids, int32_t t)
{
    if (t == ids->lm_head && ids->lm_head != ids->embed)
        return COLWISE;
    for (int32_t i = 0; i < ids->nlayers; i++) {
        const rs_layer_ids_t *l = &ids->layer[i];
        if (t == l->q || t == l->k || t == l->v || t == l->q_bias || t == l->k_bias ||
            t == l->v_bias || t == l->gate || t == l->up)
            return COLWISE;
        if (t == l->o || t == l->down)
            return ROWWISE;
    }
    return REPLICATED;
}

/* Rows [a, b) and columns [c0, c0 + nc) of catalogue tensor @p t (of expert @p j of a
 * stacked tensor, or -1) into buffer @p buf, contiguous: the view's leading dims
 * split the HF rows (q_proj viewed [kv, heads per group, head_dim, H]), so the rows
 * become boxes of whole runs at each level of that split. */
static reshard_status_t rows_into(rs_emit_t *e, int32_t t, int32_t buf, int64_t j, int64_t a,
                                  int64_t b, int64_t c0, int64_t nc)
{
    reshard_tensor_info_t ti;
    TRY(reshard_tensors_info(e->T, t, &ti));
    if (ti.view_ndim == 0) { /* no planning view: the shape */
        ti.view_ndim = ti.ndim;
        memcpy(ti.view_shape, ti.shape, sizeof ti.shape);
    }
    int trail = j >= 0 ? 1 : ti.ndim - 1; /* dims after the row dim */
    int lead = j >= 0 ? 0 : ti.view_ndim - trail;
    int64_t w[RESHARD_MAX_DIMS], acc = 1;
    for (int d = lead - 1; d >= 0; d--) {
        w[d] = acc;
        acc *= ti.view_shape[d];
    }
    bool same_trail = j >= 0 || (trail == 0 || ti.view_shape[ti.view_ndim - 1] == ti.shape[1]);
    if (j < 0 && (lead < 1 || acc != ti.shape[0] || !same_trail))
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "train (fsdp): tensor %s: its planning view does not split its rows",
                        ti.name);
    const int64_t a0 = a;
    while (a < b) {
        int64_t off[RESHARD_MAX_DIMS], ext[RESHARD_MAX_DIMS], st[RESHARD_MAX_DIMS];
        int n = 0;
        int64_t run = 1;
        if (j >= 0) { /* stacked experts [E, rows, cols]: one expert's rows */
            off[n] = j, ext[n] = 1, st[n] = (b - a) * nc;
            n++;
            off[n] = a, ext[n] = b - a, st[n] = nc;
            n++;
            run = b - a;
        } else {
            int i = lead - 1; /* the coarsest level whose whole runs fit from a */
            for (int d = 0; d < lead; d++)
                if (a % w[d] == 0 && a + w[d] <= b) {
                    i = d;
                    break;
                }
            int64_t idx = (a / w[i]) % ti.view_shape[i];
            int64_t cnt = (b - a) / w[i];
            if (cnt > ti.view_shape[i] - idx)
                cnt = ti.view_shape[i] - idx;
            for (int d = 0; d < lead; d++) {
                off[n] = d < i ? (a / w[d]) % ti.view_shape[d] : d == i ? idx : 0;
                ext[n] = d < i ? 1 : d == i ? cnt : ti.view_shape[d];
                st[n] = w[d] * nc;
                n++;
            }
            run = cnt * w[i];
        }
        if (trail) {
            off[n] = c0, ext[n] = nc, st[n] = 1;
            n++;
        }
        (void)n;
        TRY(rs_emit(e, t, buf, off, ext, (a - a0) * nc, st)); /* the run's place in the shard */
        a += run;
        if (j >= 0)
            break;
    }
    return RESHARD_OK;
}

/* Buffer @p name: rows [a, b) x columns [c0, c0 + nc) of tensor @p t (expert @p j or
 * -1); nothing for an empty shard. */
static reshard_status_t shard(rs_emit_t *e, int32_t t, int64_t j, int64_t a, int64_t b, int64_t c0,
                              int64_t nc, const char *name)
{
    if (b <= a || nc <= 0)
        return RESHARD_OK; /* FSDP2's empty chunk: a zero-size parameter, not declared */
    reshard_tensor_info_t ti;
    TRY(reshard_tensors_info(e->T, t, &ti));
    int32_t buf = ti.ndim == 1 ? rs_emit_buffer(e, t, 0, 1, b - a, "%s", name)
                               : rs_emit_buffer(e, t, 0, b - a, nc, "%s", name);
    if (buf < 0)
        return (reshard_status_t)buf;
    return rows_into(e, t, buf, j, a, b, c0, nc);
}

/* Routed expert @p j's HF name: the stacked tensor's name with "J." after "experts.". */
static void expert_name(char *out, size_t size, const char *stacked, int64_t j)
{
    const char *at = strstr(stacked, ".experts.");
    if (!at) {
        snprintf(out, size, "%s", stacked);
        return;
    }
    size_t head = (size_t)(at - stacked) + strlen(".experts.");
    snprintf(out, size, "%.*s%lld.%s", (int)head, stacked, (long long)j, stacked + head);
}

/* Every parameter of side rank @p r. */
static reshard_status_t fsdp_rank(rs_emit_t *e, int32_t r, const void *spec_v)
{
    const reshard_train_spec_t *s = spec_v;
    const rs_model_ids_t *ids = e->ids;
    int64_t tp = s->tp, t = r % s->tp, sh = (r / s->tp) % s->fsdp, n = s->fsdp;
    bool *scale = calloc((size_t)e->T->n + 1, sizeof *scale);
    if (!scale)
        return rs_error(RESHARD_ERR_NOMEM, "train (fsdp): out of memory");
    for (int32_t k = 0; k < ids->n; k++)
        if (ids->scale[k] >= 0)
            scale[ids->scale[k]] = true;
    reshard_status_t st = RESHARD_OK;
    for (int32_t k = 0; k < ids->n && st == RESHARD_OK; k++) {
        if (scale[k])
            continue;
        reshard_tensor_info_t ti;
        st = reshard_tensors_info(e->T, k, &ti);
        if (st != RESHARD_OK)
            break;
        int64_t rows = ti.ndim == 1 ? ti.shape[0] : ti.shape[ti.ndim - 2];
        int64_t cols = ti.ndim == 1 ? 1 : ti.shape[ti.ndim - 1];
        int64_t a, b;
        if (ids->expert[k] && ti.ndim == 3) { /* per-expert modules, each sharded alone */
            chunk(rows, n, sh, &a, &b);
            char nm[320];
            for (int64_t j = 0; j < ti.shape[0] && st == RESHARD_OK; j++) {
                expert_name(nm, sizeof nm, ti.name, j);
                st = shard(e, k, j, a, b, 0, cols, nm);
            }
            continue;
        }
        bool whole = false;
        for (int32_t i = 0; i < ids->nlayers; i++)
            whole = whole || k == ids->layer[i].router_bias; /* a module buffer */
        if (whole) {
            st = shard(e, k, -1, 0, rows, 0, cols, ti.name);
            continue;
        }
        tp_style_t style = tp > 1 ? style_of(ids, k) : REPLICATED;
        int64_t c0 = 0, nc = cols;
        if (style == COLWISE) { /* the TP shard's rows, then FSDP2's chunk of them */
            int64_t ta, tb;
            chunk(rows, tp, t, &ta, &tb);
            chunk(tb - ta, n, sh, &a, &b);
            a += ta, b += ta;
        } else {
            if (style == ROWWISE)
                chunk(cols, tp, t, &c0, &nc), nc -= c0;
            chunk(rows, n, sh, &a, &b);
        }
        st = shard(e, k, -1, a, b, c0, nc, ti.name);
    }
    free(scale);
    return st;
}

reshard_status_t rs_fsdp_emit(const reshard_model_t *model, const reshard_tensors_t *tensors,
                              const reshard_train_spec_t *spec, int32_t rank_offset,
                              const rs_emit_scope_t *scope, reshard_layout_t **out,
                              reshard_model_buffers_t **buffers)
{
    char text[96];
    uint64_t origin =
        rs_side_origin(model, true, reshard_train_spec_str(spec, text, sizeof text), rank_offset);
    return rs_emit_side(model, tensors, true, reshard_train_world(spec), rank_offset, fsdp_rank,
                        spec, scope, origin, out, buffers);
}
