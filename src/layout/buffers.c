/* Declared buffers of a layout: per (rank, buffer id) the framework's
 * parameter name, dtype and shape. */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "util/error.h"

/* Position in the list @p l (entries by rank) of the first entry of rank
 * >= @p rank. */
static int64_t name_rank_bound(const rs_decls_t *d, const rs_name_decls_t *l, int32_t rank)
{
    int64_t lo = 0, hi = l->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (d->e[l->i[mid]].rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The entry of name id @p id on @p rank, or -1; its position (or where it
 * would go) in *@p pos. Declarations come rank by rank: the last first. */
static int64_t name_find(const rs_decls_t *d, int64_t id, int32_t rank, int64_t *pos)
{
    if (id >= d->byname_cap) {
        *pos = 0;
        return -1;
    }
    const rs_name_decls_t *l = &d->byname[id];
    int64_t k = l->n > 0 && l->last_rank < rank ? l->n : name_rank_bound(d, l, rank);
    *pos = k;
    return k < l->n && d->e[l->i[k]].rank == rank ? l->i[k] : -1;
}

static bool before(const rs_decl_t *a, const rs_decl_t *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->buffer < b->buffer);
}

/* First position in d->order of an entry not before (@p rank, @p buffer). */
static int64_t order_bound(const rs_decls_t *d, int32_t rank, int32_t buffer)
{
    const rs_decl_t key = {.rank = rank, .buffer = buffer};
    int64_t lo = 0, hi = d->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (before(&d->e[d->order[mid]], &key))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The entry at position @p k of d->order when it is (@p rank, @p buffer). */
static const rs_decl_t *at(const rs_decls_t *d, int64_t k, int32_t rank, int32_t buffer)
{
    if (k < 0 || k >= d->n)
        return NULL;
    const rs_decl_t *e = &d->e[d->order[k]];
    return e->rank == rank && e->buffer == buffer ? e : NULL;
}

const rs_decl_t *rs_decl_find(const rs_decls_t *d, int32_t rank, int32_t buffer)
{
    return at(d, order_bound(d, rank, buffer), rank, buffer);
}

const rs_decl_t *rs_decl_find_near(const rs_decls_t *d, int32_t rank, int32_t buffer, int64_t *pos)
{
    const rs_decl_t *e = at(d, *pos, rank, buffer);
    if (!e && (e = at(d, *pos + 1, rank, buffer)) != NULL)
        ++*pos;
    if (!e) {
        int64_t k = order_bound(d, rank, buffer);
        if ((e = at(d, k, rank, buffer)) != NULL)
            *pos = k;
    }
    return e;
}

void rs_decls_free(rs_decls_t *d)
{
    rs_strpool_free(&d->names);
    free(d->e);
    free(d->order);
    for (int64_t k = 0; k < d->byname_cap; k++)
        free(d->byname[k].i);
    free(d->byname);
    memset(d, 0, sizeof *d);
}

/* Make room for one more entry: entry array and order. */
static int reserve(rs_decls_t *d)
{
    if (d->n == d->cap) {
        int64_t cap = d->cap ? 2 * d->cap : 64;
        rs_decl_t *e = realloc(d->e, (size_t)cap * sizeof *e);
        if (!e)
            return -1;
        d->e = e;
        int64_t *o = realloc(d->order, (size_t)cap * sizeof *o);
        if (!o)
            return -1;
        d->order = o;
        d->cap = cap;
    }
    return 0;
}

/* Put entry @p i (name id @p id) at position @p pos of its name's list. */
static int name_insert(rs_decls_t *d, int64_t id, int64_t pos, int64_t i)
{
    if (id >= d->byname_cap) {
        int64_t cap = d->byname_cap ? 2 * d->byname_cap : 64;
        while (cap <= id)
            cap *= 2;
        rs_name_decls_t *b = realloc(d->byname, (size_t)cap * sizeof *b);
        if (!b)
            return -1;
        memset(b + d->byname_cap, 0, (size_t)(cap - d->byname_cap) * sizeof *b);
        d->byname = b;
        d->byname_cap = cap;
    }
    rs_name_decls_t *l = &d->byname[id];
    if (l->n == l->cap) {
        int64_t *v = realloc(l->i, (size_t)(l->cap ? 2 * l->cap : 4) * sizeof *v);
        if (!v)
            return -1;
        l->i = v;
        l->cap = l->cap ? 2 * l->cap : 4;
    }
    memmove(l->i + pos + 1, l->i + pos, (size_t)(l->n - pos) * sizeof *l->i);
    l->i[pos] = i;
    if (pos == l->n++)
        l->last_rank = d->e[i].rank;
    return 0;
}

reshard_status_t reshard_layout_declare_buffer(reshard_layout_t *layout, int32_t rank,
                                               int32_t buffer, const char *name,
                                               reshard_dtype_t dtype, int ndim,
                                               const int64_t *shape)
{
    rs_error_clear();
    if (!layout || !name || !shape)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_layout_declare_buffer: NULL argument");
    return rs_layout_declare(layout, rank, buffer, name, rs_str_hash(name), dtype, ndim, shape);
}

reshard_status_t rs_layout_declare(reshard_layout_t *layout, int32_t rank, int32_t buffer,
                                   const char *name, uint64_t hash, reshard_dtype_t dtype, int ndim,
                                   const int64_t *shape)
{
    const char *nm = name[0] ? name : "(empty)";
    if (!name[0] || rank < 0 || buffer < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "declared buffer %s: rank %d, buffer %d: empty name or negative rank or "
                        "buffer id",
                        nm, rank, buffer);
    if (ndim < 1 || ndim > RESHARD_MAX_DIMS || reshard_dtype_size(dtype) == 0)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "declared buffer %s, rank %d, buffer %d: ndim %d outside 1..%d or invalid "
                        "dtype %d",
                        name, rank, buffer, ndim, RESHARD_MAX_DIMS, (int)dtype);
    uint64_t numel = 1, esz = reshard_dtype_size(dtype);
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 1)
            return rs_error(RESHARD_ERR_SHAPE,
                            "declared buffer %s, rank %d, buffer %d: extent %lld of dim %d is < 1",
                            name, rank, buffer, (long long)shape[k], k);
        if (numel > (uint64_t)INT64_MAX / esz / (uint64_t)shape[k])
            return rs_error(RESHARD_ERR_OVERFLOW,
                            "declared buffer %s, rank %d, buffer %d: size overflows", name, rank,
                            buffer);
        numel *= (uint64_t)shape[k];
    }
    rs_decls_t *d = &layout->decls;
    int64_t id;
    const char *copy = rs_strpool_add(&d->names, name, hash, &id);
    if (!copy || reserve(d) != 0) {
        return rs_error(RESHARD_ERR_NOMEM, "declared buffer %s, rank %d: out of memory", name,
                        rank);
    }
    /* model layouts declare in (rank, buffer) order: an append after the
     * last entry in order cannot repeat one */
    const rs_decl_t key = {.rank = rank, .buffer = buffer};
    int64_t k = d->n;
    if (d->n > 0 && !before(&d->e[d->order[d->n - 1]], &key)) {
        k = order_bound(d, rank, buffer);
        const rs_decl_t *twin = at(d, k, rank, buffer);
        if (twin)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "rank %d, buffer %d: declared twice (as %s and as %s)", rank, buffer,
                            twin->name, name);
    }
    int64_t npos, i = name_find(d, id, rank, &npos);
    if (i >= 0) {
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "rank %d: parameter %s declared twice (buffers %d and %d)", rank, name,
                        d->e[i].buffer, buffer);
    }
    rs_decl_t *e = &d->e[d->n];
    memset(e, 0, sizeof *e);
    *e = (rs_decl_t){.rank = rank,
                     .buffer = buffer,
                     .name = copy,
                     .dtype = dtype,
                     .ndim = ndim,
                     .numel = (int64_t)numel,
                     .bytes = numel * esz};
    memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
    if (name_insert(d, id, npos, d->n) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "declared buffer %s, rank %d: out of memory", name,
                        rank);
    /* keep order sorted: position k, found above */
    memmove(d->order + k + 1, d->order + k, (size_t)(d->n - k) * sizeof *d->order);
    d->order[k] = d->n++;
    return RESHARD_OK;
}

/* First position in d->order of an entry of rank > @p rank (@p after) or
 * >= @p rank. */
static int64_t rank_bound(const rs_decls_t *d, int32_t rank, bool after)
{
    int64_t lo = 0, hi = d->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int32_t r = d->e[d->order[mid]].rank;
        if (r < rank || (after && r == rank))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int64_t rs_decls_of_rank(const rs_decls_t *d, int32_t rank, int64_t *first)
{
    *first = rank_bound(d, rank, false);
    return rank_bound(d, rank, true) - *first;
}

int64_t reshard_layout_declared_count(const reshard_layout_t *layout, int32_t rank)
{
    if (!layout)
        return 0;
    const rs_decls_t *d = &layout->decls;
    if (rank == RESHARD_ALL_RANKS)
        return d->n;
    if (rank < 0)
        return 0;
    return rank_bound(d, rank, true) - rank_bound(d, rank, false);
}

static void fill_info(const rs_decl_t *e, reshard_buffer_info_t *info)
{
    memset(info, 0, sizeof *info);
    info->rank = e->rank;
    info->buffer = e->buffer;
    info->name = e->name;
    info->dtype = e->dtype;
    info->ndim = e->ndim;
    memcpy(info->shape, e->shape, sizeof e->shape);
    info->numel = e->numel;
    info->bytes = e->bytes;
}

reshard_status_t reshard_layout_buffer_info(const reshard_layout_t *layout, int32_t rank, int64_t i,
                                            reshard_buffer_info_t *info)
{
    rs_error_clear();
    int64_t n = reshard_layout_declared_count(layout, rank);
    if (!layout || !info || i < 0 || i >= n)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_layout_buffer_info: rank %d has %lld declared buffers, no %lld",
                        rank, (long long)n, (long long)i);
    const rs_decls_t *d = &layout->decls;
    int64_t first = rank == RESHARD_ALL_RANKS ? 0 : rank_bound(d, rank, false);
    fill_info(&d->e[d->order[first + i]], info);
    return RESHARD_OK;
}

int32_t reshard_layout_find_buffer(const reshard_layout_t *layout, int32_t rank, const char *name)
{
    if (!layout || !name || layout->decls.n == 0)
        return -1;
    const rs_decls_t *d = &layout->decls;
    int64_t pos, id = rs_strpool_find(&d->names, name, rs_str_hash(name));
    int64_t i = id < 0 ? -1 : name_find(d, id, rank, &pos);
    return i < 0 ? -1 : d->e[i].buffer;
}

uint64_t rs_layout_zero_most(const reshard_layout_t *l, int32_t rank)
{
    const rs_decls_t *d = &l->decls;
    int64_t first, cnt = d->n ? rs_decls_of_rank(d, rank, &first) : 0;
    uint64_t most = 0;
    for (int64_t i = 0; i < cnt; i++) {
        const rs_decl_t *e = &d->e[d->order[first + i]];
        if (e->zero && e->bytes > most)
            most = e->bytes;
    }
    return most;
}

reshard_status_t rs_layout_zero_fill(const reshard_layout_t *l, int32_t rank,
                                     const reshard_buffer_t *bufs, rs_zero_put_fn put, void *ctx)
{
    const rs_decls_t *d = &l->decls;
    int64_t first, cnt = d->n ? rs_decls_of_rank(d, rank, &first) : 0;
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; st == RESHARD_OK && i < cnt; i++) {
        const rs_decl_t *e = &d->e[d->order[first + i]];
        if (!e->zero)
            continue;
        if (put)
            st = put(ctx, bufs[e->buffer].ptr, e->bytes);
        else
            memset(bufs[e->buffer].ptr, 0, (size_t)e->bytes);
    }
    return st;
}

reshard_status_t rs_decl_copy(reshard_layout_t *to, const rs_decl_t *e)
{
    reshard_status_t st =
        reshard_layout_declare_buffer(to, e->rank, e->buffer, e->name, e->dtype, e->ndim, e->shape);
    if (st == RESHARD_OK && e->zero)
        st = reshard_layout_zero_buffer(to, e->rank, e->buffer);
    return st;
}

reshard_status_t reshard_layout_zero_buffer(reshard_layout_t *layout, int32_t rank, int32_t buffer)
{
    rs_error_clear();
    if (!layout)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_layout_zero_buffer: NULL layout");
    const rs_decl_t *found = rs_decl_find(&layout->decls, rank, buffer);
    if (!found)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_layout_zero_buffer: rank %d, buffer %d: not declared", rank,
                        buffer);
    rs_decl_t *e = &layout->decls.e[found - layout->decls.e];
    if (!e->zero) {
        e->zero = true;
        layout->facts.unfit++; /* plan creation then looks at every fragment (validate.c) */
    }
    return RESHARD_OK;
}

reshard_status_t reshard_layout_declared_buffer(const reshard_layout_t *layout, int32_t rank,
                                                int32_t buffer, reshard_buffer_info_t *info)
{
    rs_error_clear();
    if (!layout || !info)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_layout_declared_buffer: NULL argument");
    const rs_decl_t *e = rs_decl_find(&layout->decls, rank, buffer);
    if (!e)
        return rs_error(RESHARD_ERR_INVALID_ARG, "rank %d, buffer %d: not declared", rank, buffer);
    fill_info(e, info);
    return RESHARD_OK;
}
