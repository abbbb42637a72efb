/* The fingerprint of a plan's inputs: the catalogue, both layouts'
 * fragments and declared buffers, and the params that shape the plan. Every
 * rank computes it from the same data in the same order, whether it plans
 * for itself or for all ranks, so equal inputs give equal fingerprints. */
#include <string.h>

#include "plan/plan_steps.h"

typedef struct {
    uint64_t h;
} rs_fp_t;

static void put(rs_fp_t *f, uint64_t w)
{
    uint64_t x = f->h ^ (w + 0x9e3779b97f4a7c15ULL + (f->h << 6) + (f->h >> 2));
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    f->h = x ^ (x >> 31);
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

/* Fold word @p w into @p h: a bijection of h for each w, so a change in
 * one word of a record always changes the record's fold. Records are
 * folded apart from the running fingerprint (no long dependency chain)
 * and enter it with one put each. */
static uint64_t fold(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

static uint64_t fold_str(uint64_t h, const char *s)
{
    size_t n = strlen(s);
    h = fold(h, n);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        h = fold(h, w);
    }
    return h;
}

static void put_layout(rs_fp_t *f, const reshard_layout_t *l)
{
    put(f, (uint64_t)l->n);
    for (int64_t i = 0; i < l->n; i++) {
        const reshard_fragment_t *g = &l->f[i];
        uint64_t h = fold(0, ((uint64_t)(uint32_t)g->tensor << 32) | (uint32_t)g->rank);
        h = fold(h, ((uint64_t)(uint32_t)g->buffer << 32) | (uint32_t)g->box.ndim);
        h = fold(h, (uint64_t)g->base);
        for (int d = 0; d < g->box.ndim; d++) {
            h = fold(h, (uint64_t)g->box.offset[d]);
            h = fold(h, (uint64_t)g->box.extent[d]);
            h = fold(h, (uint64_t)g->stride[d]);
        }
        put(f, h);
    }
    const rs_decls_t *b = &l->decls;
    put(f, (uint64_t)b->n);
    for (int64_t i = 0; i < b->n; i++) {
        const rs_decl_t *e = &b->e[b->order[i]];
        uint64_t h = fold(0, ((uint64_t)(uint32_t)e->rank << 32) | (uint32_t)e->buffer);
        h = fold(h, ((uint64_t)(uint32_t)e->dtype << 32) | (uint32_t)e->ndim);
        for (int d = 0; d < e->ndim; d++)
            h = fold(h, (uint64_t)e->shape[d]);
        put(f, fold_str(h, e->name));
    }
}

uint64_t rs_fingerprint(const reshard_plan_params_t *p, const reshard_layout_t *src,
                        const reshard_layout_t *dst)
{
    rs_fp_t f = {0x5265736861726421ULL};
    const reshard_tensors_t *ts = src->tensors;
    put(&f, (uint64_t)ts->n);
    for (int32_t i = 0; i < ts->n; i++) {
        const rs_tensor_t *t = &ts->t[i];
        put_str(&f, t->name);
        put(&f, ((uint64_t)(uint32_t)t->dtype << 32) | (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++)
            put(&f, (uint64_t)t->shape[d]);
        put(&f, (uint64_t)t->vndim);
        for (int d = 0; d < t->vndim; d++)
            put(&f, (uint64_t)t->vshape[d]);
    }
    put_layout(&f, src);
    put_layout(&f, dst);
    uint64_t timeout;
    memcpy(&timeout, &p->timeout_s, sizeof timeout);
    put(&f, ((uint64_t)(uint32_t)p->world_size << 32) | (uint32_t)p->domain_size);
    put(&f, p->staging_bytes);
    put(&f, p->relay_bytes);
    put(&f, timeout);
    return f.h;
}
