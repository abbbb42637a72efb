/*
 * The layouts of a membership (reshard_membership_layouts): the original
 * layouts without the lost ranks' fragments and declared buffers, and the
 * check that no surviving destination element lost every replica.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "reshard/reshard_elastic.h"
#include "util/error.h"

static bool is_gone(const int32_t *gone, int32_t n, int32_t rank)
{
    for (int32_t i = 0; i < n; i++)
        if (gone[i] == rank)
            return true;
    return false;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* @p l's gone set: @p in's and @p gone's ranks, sorted, unique. */
static reshard_status_t set_gone(reshard_layout_t *l, const reshard_layout_t *in,
                                 const int32_t *gone, int32_t n_gone)
{
    int64_t n = (int64_t)in->ngone + n_gone;
    if (n == 0)
        return RESHARD_OK;
    int32_t *g = malloc((size_t)n * sizeof *g);
    if (!g)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_membership_layouts: out of memory");
    if (in->ngone)
        memcpy(g, in->gone, (size_t)in->ngone * sizeof *g);
    if (n_gone)
        memcpy(g + in->ngone, gone, (size_t)n_gone * sizeof *g);
    qsort(g, (size_t)n, sizeof *g, cmp_i32);
    int32_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (k == 0 || g[k - 1] != g[i])
            g[k++] = g[i];
    l->gone = g;
    l->ngone = k;
    return RESHARD_OK;
}

/* A generated layout's membership stays generated (its fingerprint is the
 * origin's, so every rank's scoped part of it and the whole agree): the
 * origin of @p in with the gone set (l->gone) folded into its hash and pair,
 * the counts of @p l, and, scoped, the holders without the gone ranks. */
static reshard_status_t keep_origin(reshard_layout_t *l, const reshard_layout_t *in)
{
    const rs_layout_origin_t *o = rs_origin_of(in);
    if (!o)
        return RESHARD_OK;
    rs_layout_origin_t n = *o;
    n.holders = NULL;
    for (int32_t i = 0; i < l->ngone; i++) {
        uint64_t w = 0x676f6e65ULL << 32 | (uint32_t)l->gone[i];
        n.hash = rs_hash_mix(n.hash, w);
        n.pair = rs_hash_mix(n.pair, w);
    }
    n.hash = n.hash ? n.hash : 1; /* 0 means "not generated" */
    n.n = l->n;
    n.ndecls = l->decls.n;
    if (o->holders) {
        size_t words = (size_t)o->words * (size_t)in->tensors->n;
        n.holders = malloc(words ? words * sizeof *n.holders : 1);
        if (!n.holders)
            return rs_error(RESHARD_ERR_NOMEM, "reshard_membership_layouts: out of memory");
        memcpy(n.holders, o->holders, words * sizeof *n.holders);
        for (int32_t i = 0; i < l->ngone; i++)
            if (l->gone[i] < o->world)
                for (int32_t t = 0; t < in->tensors->n; t++)
                    n.holders[(int64_t)t * o->words + l->gone[i] / 64] &=
                        ~((uint64_t)1 << (l->gone[i] % 64));
    }
    l->origin = n;
    return RESHARD_OK;
}

/* A copy of @p in without the fragments and declarations of gone ranks. */
static reshard_status_t filter(const reshard_layout_t *in, const int32_t *gone, int32_t n_gone,
                               reshard_layout_t **out)
{
    reshard_layout_t *l = NULL;
    reshard_status_t st = reshard_layout_create(in->tensors, &l);
    if (st == RESHARD_OK)
        st = set_gone(l, in, gone, n_gone);
    for (int64_t i = 0; st == RESHARD_OK && i < in->n; i++)
        if (!is_gone(gone, n_gone, in->f[i].rank))
            st = reshard_layout_add_fragment(l, &in->f[i]);
    for (int64_t i = 0; st == RESHARD_OK && i < in->decls.n; i++) {
        const rs_decl_t *e = &in->decls.e[in->decls.order[i]];
        if (!is_gone(gone, n_gone, e->rank))
            st = rs_decl_copy(l, e);
    }
    if (st == RESHARD_OK)
        st = keep_origin(l, in);
    if (st != RESHARD_OK) {
        reshard_layout_destroy(l);
        return st;
    }
    *out = l;
    return RESHARD_OK;
}

/* A growable list of boxes: what is still uncovered. */
typedef struct {
    reshard_box_t *b;
    int64_t n, cap;
} rs_boxes_t;

static bool push(rs_boxes_t *v, const reshard_box_t *b)
{
    if (v->n == v->cap) {
        int64_t cap = v->cap ? 2 * v->cap : 16;
        reshard_box_t *p = realloc(v->b, (size_t)cap * sizeof *p);
        if (!p)
            return false;
        v->b = p;
        v->cap = cap;
    }
    v->b[v->n++] = *b;
    return true;
}

/* Replace every box of @p v by its parts outside @p cut (at most 2 per dim). */
static bool subtract(rs_boxes_t *v, const reshard_box_t *cut, rs_boxes_t *tmp)
{
    tmp->n = 0;
    for (int64_t i = 0; i < v->n; i++) {
        reshard_box_t rest = v->b[i], in;
        if (!rs_box_intersect(&rest, cut, &in)) {
            if (!push(tmp, &rest))
                return false;
            continue;
        }
        for (int d = 0; d < rest.ndim; d++) {
            int64_t lo = rest.offset[d], hi = rest.offset[d] + rest.extent[d];
            int64_t ilo = in.offset[d], ihi = in.offset[d] + in.extent[d];
            if (ilo > lo) {
                reshard_box_t part = rest;
                part.extent[d] = ilo - lo;
                if (!push(tmp, &part))
                    return false;
            }
            if (ihi < hi) {
                reshard_box_t part = rest;
                part.offset[d] = ihi;
                part.extent[d] = hi - ihi;
                if (!push(tmp, &part))
                    return false;
            }
            rest.offset[d] = ilo;
            rest.extent[d] = ihi - ilo;
        }
    }
    rs_boxes_t t = *v;
    *v = *tmp;
    *tmp = t;
    return true;
}

/* The lost ranks whose fragments of @p tensor intersect @p box, as text. */
static void lost_holders(const reshard_layout_t *src, int32_t tensor, const reshard_box_t *box,
                         const int32_t *gone, int32_t n_gone, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (int32_t g = 0; g < n_gone && n + 16 < size; g++) {
        bool held = false, seen = false;
        for (int32_t h = 0; h < g; h++)
            seen = seen || gone[h] == gone[g];
        for (int64_t i = 0; i < src->n && !held && !seen; i++) {
            reshard_box_t x;
            held = src->f[i].tensor == tensor && src->f[i].rank == gone[g] &&
                   rs_box_intersect(&src->f[i].box, box, &x);
        }
        if (held)
            n += (size_t)snprintf(out + n, size - n, "%s%d", n ? ", " : "", (int)gone[g]);
    }
}

/* Every element of a surviving destination fragment that a lost source held
 * must still have a surviving source. */
static reshard_status_t check_covered(const reshard_layout_t *src, const reshard_layout_t *dst,
                                      const reshard_layout_t *live_src, const int32_t *gone,
                                      int32_t n_gone)
{
    rs_boxes_t left = {0}, tmp = {0};
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; i < src->n && st == RESHARD_OK; i++) {
        const reshard_fragment_t *lost = &src->f[i];
        if (!is_gone(gone, n_gone, lost->rank))
            continue;
        for (int64_t j = 0; j < dst->n && st == RESHARD_OK; j++) {
            const reshard_fragment_t *d = &dst->f[j];
            reshard_box_t need;
            if (d->tensor != lost->tensor || is_gone(gone, n_gone, d->rank) ||
                !rs_box_intersect(&lost->box, &d->box, &need))
                continue;
            left.n = 0;
            if (!push(&left, &need)) {
                st = rs_error(RESHARD_ERR_NOMEM, "reshard_membership_layouts: out of memory");
                break;
            }
            for (int64_t k = 0; k < live_src->n && left.n > 0; k++)
                if (live_src->f[k].tensor == d->tensor &&
                    !subtract(&left, &live_src->f[k].box, &tmp)) {
                    st = rs_error(RESHARD_ERR_NOMEM, "reshard_membership_layouts: out of memory");
                    break;
                }
            if (st != RESHARD_OK || left.n == 0)
                continue;
            char dbox[256], ubox[256], who[256];
            lost_holders(src, d->tensor, &left.b[0], gone, n_gone, who, sizeof who);
            reshard_tensor_info_t ti;
            reshard_tensors_info(src->tensors, d->tensor, &ti);
            st = rs_error(RESHARD_ERR_UNCOVERED,
                          "tensor '%s': destination box %s of rank %d: elements %s lost every "
                          "replica (held only by lost rank(s) %s)",
                          ti.name, rs_box_str(&d->box, dbox, sizeof dbox), d->rank,
                          rs_box_str(&left.b[0], ubox, sizeof ubox), who);
        }
    }
    free(left.b);
    free(tmp.b);
    return st;
}

reshard_status_t reshard_membership_layouts(const reshard_layout_t *src,
                                            const reshard_layout_t *dst, const int32_t *gone,
                                            int32_t n_gone, reshard_layout_t **src_out,
                                            reshard_layout_t **dst_out)
{
    rs_error_clear();
    if (!src || !dst || !src_out || !dst_out || n_gone < 0 || (n_gone > 0 && !gone))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_membership_layouts: bad argument");
    *src_out = *dst_out = NULL;
    for (int32_t i = 0; i < n_gone; i++)
        if (gone[i] < 0)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "reshard_membership_layouts: gone rank %d is negative", gone[i]);
    reshard_layout_t *s = NULL, *d = NULL;
    reshard_status_t st = filter(src, gone, n_gone, &s);
    if (st == RESHARD_OK)
        st = filter(dst, gone, n_gone, &d);
    if (st == RESHARD_OK)
        st = check_covered(src, dst, s, gone, n_gone);
    if (st != RESHARD_OK) {
        reshard_layout_destroy(s);
        reshard_layout_destroy(d);
        return st;
    }
    *src_out = s;
    *dst_out = d;
    return RESHARD_OK;
}
