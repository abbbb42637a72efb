/* A whole refit description, and what gather+broadcast would move. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h" /* a scoped refit's origin */
#include "model/model_internal.h"
#include "util/error.h"

void reshard_model_refit_destroy(reshard_model_refit_t *r)
{
    if (!r)
        return;
    reshard_layout_destroy(r->train);
    reshard_layout_destroy(r->infer);
    reshard_model_buffers_destroy(r->train_buffers);
    reshard_model_buffers_destroy(r->infer_buffers);
    reshard_tensors_destroy(r->tensors);
    memset(r, 0, sizeof *r);
}

reshard_status_t rs_layout_rule(reshard_status_t s, const char *side)
{
    if (s != RESHARD_ERR_CONFIG)
        return s;
    char why[512];
    snprintf(why, sizeof why, "%s", reshard_last_error());
    return rs_error(RESHARD_ERR_CONFIG, "%s: %s", side, why);
}

reshard_status_t rs_check_layouts(const reshard_model_t *m, const reshard_train_spec_t *train,
                                  const reshard_infer_spec_t *infer)
{
    /* Only the FP8 form has rules the spec checks cannot see. */
    if (m->dtype != RESHARD_FP8_E4M3 && m->quant == RESHARD_QUANT_NONE)
        return RESHARD_OK;
    reshard_tensors_t *ts = NULL;
    reshard_layout_t *l = NULL;
    reshard_status_t s = reshard_model_tensors(m, &ts);
    if (s == RESHARD_OK)
        s = rs_layout_rule(reshard_model_train_layout(m, ts, train, 0, &l, NULL), "train");
    reshard_layout_destroy(l);
    l = NULL;
    if (s == RESHARD_OK)
        s = rs_layout_rule(reshard_model_infer_layout(m, ts, infer, 0, &l, NULL), "infer");
    reshard_layout_destroy(l);
    reshard_tensors_destroy(ts);
    return s;
}

reshard_status_t reshard_model_refit_create(const reshard_model_t *model,
                                            const reshard_train_spec_t *train,
                                            const reshard_infer_spec_t *infer,
                                            reshard_model_refit_t *out)
{
    return reshard_model_refit_create_at(model, train, infer, -1, out);
}

reshard_status_t rs_refit_begin(const char *fn, const reshard_model_t *model,
                                const reshard_train_spec_t *train,
                                const reshard_infer_spec_t *infer, int32_t infer_offset,
                                reshard_model_refit_t *out)
{
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "%s: NULL out", fn);
    memset(out, 0, sizeof *out);
    if (!model || !train || !infer)
        return rs_error(RESHARD_ERR_INVALID_ARG, "%s: NULL argument", fn);
    /* The spec rules; the layout rules are applied by building the layouts. */
    reshard_status_t s = rs_check_train(model, train);
    if (s == RESHARD_OK)
        s = rs_check_infer(model, infer);
    if (s != RESHARD_OK)
        return s;
    out->train_spec = *train;
    out->infer_spec = *infer;
    out->train_world = reshard_train_world(train);
    out->infer_world = reshard_infer_world(infer);
    out->infer_offset = infer_offset < 0 ? out->train_world : infer_offset;
    if (out->infer_offset < out->train_world)
        return rs_error(RESHARD_ERR_CONFIG,
                        "inference ranks start at %d, inside the %d training ranks",
                        out->infer_offset, out->train_world);
    if ((int64_t)out->infer_offset + out->infer_world > RESHARD_MAX_WORLD_SIZE)
        return rs_error(RESHARD_ERR_CONFIG,
                        "inference ranks [%d, %lld) run past the largest world a plan takes, %d "
                        "ranks",
                        out->infer_offset, (long long)out->infer_offset + out->infer_world,
                        RESHARD_MAX_WORLD_SIZE);
    s = reshard_model_tensors(model, &out->tensors);
    if (s != RESHARD_OK)
        memset(out, 0, sizeof *out);
    return s;
}

reshard_status_t reshard_model_refit_create_at(const reshard_model_t *model,
                                               const reshard_train_spec_t *train,
                                               const reshard_infer_spec_t *infer,
                                               int32_t infer_offset, reshard_model_refit_t *out)
{
    rs_error_clear();
    reshard_status_t s =
        rs_refit_begin("reshard_model_refit_create", model, train, infer, infer_offset, out);
    if (s == RESHARD_OK)
        s = rs_layout_rule(
            rs_train_emit(model, out->tensors, train, 0, NULL, &out->train, &out->train_buffers),
            "train");
    if (s == RESHARD_OK)
        s = rs_layout_rule(rs_infer_emit(model, out->tensors, infer, out->infer_offset, NULL,
                                         &out->infer, &out->infer_buffers),
                           "infer");
    if (s != RESHARD_OK)
        reshard_model_refit_destroy(out);
    return s;
}

static int64_t box_numel(const reshard_box_t *b)
{
    int64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= b->extent[d];
    return n;
}

static bool boxes_meet(const reshard_box_t *a, const reshard_box_t *b)
{
    for (int d = 0; d < a->ndim; d++)
        if (a->offset[d] >= b->offset[d] + b->extent[d] ||
            b->offset[d] >= a->offset[d] + a->extent[d])
            return false;
    return true;
}

typedef struct {
    int32_t world, dsize;
    uint64_t *net_send, *net_recv;
    int32_t *pairs; /* (src, dst) of every transfer, for counting distinct ones */
    int64_t npairs, cap;
    reshard_plan_stats_t *st;
} bl_t;

static reshard_status_t move(bl_t *b, int32_t from, int32_t to, uint64_t bytes)
{
    if (from == to || bytes == 0)
        return RESHARD_OK;
    bool same = b->dsize > 1 && from / b->dsize == to / b->dsize;
    if (same) {
        b->st->bytes_nvlink += bytes;
    } else {
        b->st->bytes_network += bytes;
        b->net_send[from] += bytes;
        b->net_recv[to] += bytes;
    }
    b->st->pieces++;
    if (b->npairs == b->cap) {
        int64_t cap = b->cap ? 2 * b->cap : 4096;
        int32_t *p = realloc(b->pairs, (size_t)cap * 2 * sizeof *p);
        if (!p)
            return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
        b->pairs = p;
        b->cap = cap;
    }
    b->pairs[2 * b->npairs] = from;
    b->pairs[2 * b->npairs + 1] = to;
    b->npairs++;
    return RESHARD_OK;
}

static int pair_cmp(const void *a, const void *b)
{
    const int32_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int frag_cmp(const void *a, const void *b)
{
    const reshard_fragment_t *x = a, *y = b;
    if (x->tensor != y->tensor)
        return x->tensor < y->tensor ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->buffer < y->buffer ? -1 : x->buffer > y->buffer;
}

/* For each tensor: the fragments of the first replica of its first stage. */
static reshard_status_t gather(bl_t *b, const reshard_model_refit_t *r, const rs_model_ids_t *ids,
                               int32_t *stage_of)
{
    const reshard_train_spec_t *s = &r->train_spec;
    int32_t S = r->train_world / s->pp; /* ranks of a pipeline stage */
    int64_t n = reshard_layout_count(r->train);
    reshard_fragment_t *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    if (!f)
        return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
    for (int32_t t = 0; t < ids->n; t++)
        stage_of[t] = INT32_MAX;
    for (int64_t i = 0; i < n; i++) {
        reshard_layout_fragment(r->train, i, &f[i]);
        int32_t st = f[i].rank / S;
        if (st < stage_of[f[i].tensor])
            stage_of[f[i].tensor] = st;
    }
    /* Keep fragments of the first replica on the tensor's stage; a box met
     * by a kept one on a lower rank is a replica the root need not fetch. */
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t st = f[i].rank / S, li = f[i].rank % S;
        /* the first replica: Megatron's first tp (expert: etp*ep) ranks of
         * the stage; FSDP2's first dp_shard x tp ranks */
        int32_t width = rs_fsdp(s)                 ? s->fsdp * s->tp
                        : ids->expert[f[i].tensor] ? rs_etp(s) * s->ep
                                                   : s->tp;
        if (st == stage_of[f[i].tensor] && li < width)
            f[kept++] = f[i];
    }
    qsort(f, (size_t)kept, sizeof *f, frag_cmp);
    reshard_status_t rc = RESHARD_OK;
    for (int64_t i = 0; i < kept && rc == RESHARD_OK; i++) {
        bool dup = false;
        for (int64_t k = i - 1; k >= 0 && f[k].tensor == f[i].tensor && !dup; k--)
            dup = f[k].rank < f[i].rank && boxes_meet(&f[k].box, &f[i].box);
        if (dup)
            continue;
        reshard_tensor_info_t info;
        reshard_tensors_info(r->tensors, f[i].tensor, &info);
        uint64_t bytes = (uint64_t)box_numel(&f[i].box) * reshard_dtype_size(info.dtype);
        rc = move(b, f[i].rank, stage_of[f[i].tensor] * S, bytes);
    }
    free(f);
    return rc;
}

reshard_status_t reshard_model_baseline(const reshard_model_t *model,
                                        const reshard_model_refit_t *r, int32_t domain_size,
                                        reshard_plan_stats_t *stats)
{
    rs_error_clear();
    if (!model || !r || !r->train || !r->infer || !stats || domain_size < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_model_baseline: bad argument");
    if (r->train->origin.holders || r->infer->origin.holders)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_model_baseline: the refit was built for rank %d's own plan "
                        "(reshard_model_refit_create_scoped); the baseline moves every tensor, "
                        "so it needs the whole refit",
                        r->train->origin.rank);
    memset(stats, 0, sizeof *stats);
    rs_model_ids_t ids;
    reshard_status_t s = rs_model_ids_for(model, r->tensors, &ids);
    if (s != RESHARD_OK)
        return s;
    /* inference ranks where the refit puts them: [O, O + I) */
    int32_t O = r->infer_offset > 0 ? r->infer_offset : r->train_world, I = r->infer_world, S;
    S = r->train_world / r->train_spec.pp;
    bl_t b = {.world = O + I, .dsize = domain_size, .st = stats};
    b.net_send = calloc((size_t)b.world, sizeof *b.net_send);
    b.net_recv = calloc((size_t)b.world, sizeof *b.net_recv);
    int32_t *stage_of = calloc((size_t)ids.n, sizeof *stage_of);
    if (!b.net_send || !b.net_recv || !stage_of)
        s = rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
    if (s == RESHARD_OK)
        s = gather(&b, r, &ids, stage_of);
    /* Broadcast: per tensor, stage root -> infer 0 -> infer 1 -> ... */
    for (int32_t t = 0; s == RESHARD_OK && t < ids.n; t++) {
        reshard_tensor_info_t info;
        reshard_tensors_info(r->tensors, t, &info);
        int32_t root = stage_of[t] == INT32_MAX ? 0 : stage_of[t] * S;
        s = move(&b, root, O, info.bytes);
        for (int32_t i = 0; s == RESHARD_OK && i + 1 < I; i++)
            s = move(&b, O + i, O + i + 1, info.bytes);
        stats->bytes_total += info.bytes * (uint64_t)I;
    }
    if (s == RESHARD_OK) {
        qsort(b.pairs, (size_t)b.npairs, 2 * sizeof *b.pairs, pair_cmp);
        for (int64_t i = 0; i < b.npairs; i++)
            if (i == 0 || pair_cmp(&b.pairs[2 * i], &b.pairs[2 * i - 2]) != 0)
                stats->transfers++;
        for (int32_t k = 0; k < b.world; k++) {
            if (b.net_send[k] > stats->max_nic_send_bytes)
                stats->max_nic_send_bytes = b.net_send[k];
            if (b.net_recv[k] > stats->max_nic_recv_bytes)
                stats->max_nic_recv_bytes = b.net_recv[k];
        }
    }
    free(b.pairs);
    free(b.net_send);
    free(b.net_recv);
    free(stage_of);
    rs_model_ids_free(&ids);
    if (s != RESHARD_OK)
        memset(stats, 0, sizeof *stats);
    return s;
}
