/* The fingerprint of a plan's inputs: the catalogue, both layouts'
 * fragments and declared buffers, and the params that shape the plan. Every
 * rank computes it from the same data in the same order, whether it plans
 * for itself or for all ranks, so equal inputs give equal fingerprints. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"

typedef struct {
    uint64_t h;
} rs_fp_t;

static void put(rs_fp_t *f, uint64_t w)
{
    f->h = rs_hash_mix(f->h, w);
}

static void put_str(rs_fp_t *f, const char *s)
{
    size_t n = strlen(s);
    put(f, n);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        put(f, w);
    }
}

static uint64_t fold_str(uint64_t h, const char *s)
{
    size_t n = strlen(s);
    h = rs_hash_fold(h, n);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        h = rs_hash_fold(h, w);
    }
    return h;
}

/* A layout's fragments: for a generated layout unchanged since, what it was generated
 * from (the same for the whole layout and each rank's scoped part of it); else their
 * records' hashes chained in order, as the layout kept them while they were added
 * (rs_layout_facts_of). */
static void put_fragments(rs_fp_t *f, const reshard_layout_t *l)
{
    const rs_layout_origin_t *o = rs_origin_of(l);
    if (o) {
        put(f, 0x6f726967696eULL);
        put(f, o->hash);
        return;
    }
    rs_layout_facts_t k;
    rs_layout_facts_of(l, &k);
    put(f, (uint64_t)l->n);
    put(f, k.hash);
}

/* A hand-built layout's declared buffers (a generated one's are in its origin). */
static void put_decls(rs_fp_t *f, const reshard_layout_t *l)
{
    if (rs_origin_of(l))
        return;
    const rs_decls_t *b = &l->decls;
    put(f, (uint64_t)b->n);
    for (int64_t i = 0; i < b->n; i++) {
        const rs_decl_t *e = &b->e[b->order[i]];
        uint64_t h = rs_hash_fold(0, ((uint64_t)(uint32_t)e->rank << 32) | (uint32_t)e->buffer);
        h = rs_hash_fold(h, ((uint64_t)(uint32_t)e->dtype << 32) | (uint32_t)e->ndim);
        for (int d = 0; d < e->ndim; d++)
            h = rs_hash_fold(h, (uint64_t)e->shape[d]);
        if (e->zero) /* layouts without zero-filled buffers keep their fingerprints */
            h = rs_hash_fold(h, 0x7a65726full);
        put(f, fold_str(h, e->name));
    }
}

static void put_layout(rs_fp_t *f, const reshard_layout_t *l)
{
    put_fragments(f, l);
    put_decls(f, l);
}

/* A tensor of the catalogue: name, dtype, shape, view shape. */
static void put_tensor(rs_fp_t *f, const rs_tensor_t *t)
{
    put_str(f, t->name);
    put(f, ((uint64_t)(uint32_t)t->dtype << 32) | (uint32_t)t->ndim);
    for (int d = 0; d < t->ndim; d++)
        put(f, (uint64_t)t->shape[d]);
    put(f, (uint64_t)t->vndim);
    for (int d = 0; d < t->vndim; d++)
        put(f, (uint64_t)t->vshape[d]);
}

static void put_catalogue(rs_fp_t *f, const reshard_tensors_t *ts)
{
    put(f, (uint64_t)ts->n);
    for (int32_t i = 0; i < ts->n; i++)
        put_tensor(f, &ts->t[i]);
}

static void put_params(rs_fp_t *f, const reshard_plan_params_t *p)
{
    uint64_t timeout;
    memcpy(&timeout, &p->timeout_s, sizeof timeout);
    put(f, ((uint64_t)(uint32_t)p->world_size << 32) | (uint32_t)p->domain_size);
    put(f, p->staging_bytes);
    put(f, p->relay_bytes);
    put(f, timeout);
    /* the placement and colocated reads: ranks must agree on who reads whom */
    bool placed = (p->field_mask & RESHARD_PLAN_PARAM_PLACEMENT) && p->host;
    if (placed || p->colocated) /* plans without them keep their fingerprints */
        put(f, ((uint64_t)placed << 1) | (uint64_t)(p->colocated != 0));
    for (int32_t r = 0; placed && r < p->world_size; r++)
        put(f, ((uint64_t)(uint32_t)p->host[r] << 32) |
                   (uint32_t)(p->device ? p->device[r] : RESHARD_DEVICE_CPU - 1));
    if (p->delta) /* plans without delta keep their fingerprints */
        put(f, 0x64656c7461ull);
    if (p->delta_checksum) /* its headers carry a hash: both ends must agree */
        put(f, 0x78786833ull);
}

void rs_fingerprint_parts(const reshard_plan_params_t *p, const reshard_layout_t *src,
                          const reshard_layout_t *dst, uint64_t part[RS_FP_PARTS])
{
    rs_fp_t c = {1}, l = {2}, b = {3}, q = {4};
    put_catalogue(&c, src->tensors);
    put_fragments(&l, src);
    put_fragments(&l, dst);
    put_decls(&b, src);
    put_decls(&b, dst);
    put_params(&q, p);
    part[RS_FP_CATALOGUE] = c.h;
    part[RS_FP_LAYOUTS] = l.h;
    part[RS_FP_BUFFERS] = b.h;
    part[RS_FP_PARAMS] = q.h;
}

/* Fold each fragment of a hand-built layout into its tensor's hash. */
static void fold_fragments(const reshard_layout_t *l, uint64_t *th, int32_t n)
{
    if (rs_origin_of(l))
        return;
    for (int64_t i = 0; i < l->n; i++)
        if (l->f[i].tensor >= 0 && l->f[i].tensor < n)
            th[l->f[i].tensor] = rs_hash_mix(th[l->f[i].tensor], rs_fragment_hash(&l->f[i]));
}

uint64_t *rs_fingerprint_tensors(const reshard_layout_t *src, const reshard_layout_t *dst,
                                 int32_t *n_out)
{
    const reshard_tensors_t *ts = src->tensors;
    *n_out = ts->n;
    uint64_t *th = malloc((size_t)(ts->n ? ts->n : 1) * sizeof *th);
    if (!th)
        return NULL;
    for (int32_t i = 0; i < ts->n; i++) {
        rs_fp_t f = {5};
        put_tensor(&f, &ts->t[i]);
        th[i] = f.h;
    }
    fold_fragments(src, th, ts->n);
    fold_fragments(dst, th, ts->n);
    return th;
}

uint64_t rs_fingerprint(const reshard_plan_params_t *p, const reshard_layout_t *src,
                        const reshard_layout_t *dst)
{
    rs_fp_t f = {0x5265736861726421ULL};
    put_catalogue(&f, src->tensors);
    put_layout(&f, src);
    put_layout(&f, dst);
    put_params(&f, p);
    return f.h;
}
