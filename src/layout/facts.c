/* Facts about a layout's fragments, kept as they are added, so that
 * planning does not pass over a million fragments again to learn them: the
 * greatest rank, whether any fragment's strides may fold two elements onto
 * one position, whether each lies in its declared buffer, and a hash of
 * every fragment record in order. */
#include <string.h>

#include "layout/layout_internal.h"

uint64_t rs_fragment_hash(const reshard_fragment_t *g)
{
    uint64_t h = rs_hash_fold(0, ((uint64_t)(uint32_t)g->tensor << 32) | (uint32_t)g->rank);
    h = rs_hash_fold(h, ((uint64_t)(uint32_t)g->buffer << 32) | (uint32_t)g->box.ndim);
    h = rs_hash_fold(h, (uint64_t)g->base);
    for (int d = 0; d < g->box.ndim; d++) {
        h = rs_hash_fold(h, (uint64_t)g->box.offset[d]);
        h = rs_hash_fold(h, (uint64_t)g->box.extent[d]);
        h = rs_hash_fold(h, (uint64_t)g->stride[d]);
    }
    return h;
}

bool rs_strides_injective(const reshard_fragment_t *f)
{
    int64_t st[RESHARD_MAX_DIMS], ex[RESHARD_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < f->box.ndim; d++)
        if (f->box.extent[d] > 1) {
            int k = n++;
            while (k > 0 && st[k - 1] > f->stride[d]) {
                st[k] = st[k - 1];
                ex[k] = ex[k - 1];
                k--;
            }
            st[k] = f->stride[d];
            ex[k] = f->box.extent[d];
        }
    int64_t span = 0;
    for (int k = 0; k < n; k++) {
        if (st[k] <= span)
            return false;
        span += (ex[k] - 1) * st[k];
    }
    return true;
}

bool rs_fragment_fits(const reshard_layout_t *l, const reshard_fragment_t *f, const rs_decl_t *b)
{
    return !b->zero && l->tensors->t[f->tensor].dtype == b->dtype &&
           rs_fragment_end_bytes(l, f) <= b->bytes;
}

static void facts_fold(const reshard_layout_t *l, rs_layout_facts_t *k, const reshard_fragment_t *f)
{
    const rs_decl_t *b =
        l->decls.n ? rs_decl_find_near(&l->decls, f->rank, f->buffer, &k->decl_pos) : NULL;
    k->unfit += !b || !rs_fragment_fits(l, f, b);
    k->hash = rs_hash_mix(k->hash, rs_fragment_hash(f));
    if (f->rank > k->max_rank)
        k->max_rank = f->rank;
    k->strided += !rs_strides_injective(f);
    k->n++;
}

void rs_layout_facts_add(reshard_layout_t *l)
{
    rs_layout_facts_t *k = &l->facts;
    if (k->n == 0 && l->n == 1) {
        k->hash = RS_FRAGMENTS_SEED;
        k->max_rank = -1;
        k->strided = k->unfit = k->decl_pos = 0;
    }
    if (k->n == l->n - 1)
        facts_fold(l, k, &l->f[l->n - 1]);
    else
        k->n = -1; /* the fragments changed another way: never valid again */
}

void rs_layout_facts_of(const reshard_layout_t *l, rs_layout_facts_t *out)
{
    if (l->facts.n == l->n && l->n > 0) {
        *out = l->facts;
        return;
    }
    rs_layout_facts_t k = {0, RS_FRAGMENTS_SEED, -1, 0, 0, 0};
    for (int64_t i = 0; i < l->n; i++)
        facts_fold(l, &k, &l->f[i]);
    *out = k;
}
