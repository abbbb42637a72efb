/*
 * The gather+broadcast baseline over MPI (see reshard_mpi.h): per root, per
 * bucket: gather the bucket's full tensors on the root, pass the packed bucket
 * down a pipelined chain through every destination rank, each destination
 * copies its fragments out.
 *
 * Everything is decided at create time from the layouts alone, identically on
 * every rank: the buckets and their items (row blocks of tensors along view
 * dim 0) and the global list of gather moves (one replica's box of one item),
 * sorted by (bucket, sender) so that each sender's part of a bucket is one
 * message in a fixed order, and one broadcast chain per root.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/pack.h"
#include "exec/writers.h"
#include "layout/layout_internal.h"
#include "transport/mpi/mpi_internal.h"
#include "util/error.h"
#include "util/timeout.h"

/** A row block of one tensor inside a bucket, described as a fragment of the
 *  bucket (row-major view-shape strides). */
typedef struct {
    int32_t tensor;
    int32_t bucket;
    reshard_fragment_t frag; /**< box = the row block; base = position in the bucket */
    uint64_t bytes;
} rs_item_t;

typedef struct {
    int32_t root;
    int32_t group;        /**< index into groups */
    int64_t item0, item1; /**< items [item0, item1) */
    int64_t move0, move1; /**< gather moves [move0, move1) */
    uint64_t bytes;       /**< packed payload */
} rs_bucket_t;

/** One source box gathered into one item. */
typedef struct {
    int64_t item;
    int64_t src_frag; /**< index into the source layout */
    int32_t sender;
    reshard_box_t box;
    uint64_t bytes;
} rs_move_t;

/** A destination fragment's share of an item. */
typedef struct {
    int64_t item;
    int64_t dst_frag;
    reshard_box_t box;
    uint64_t bytes;
} rs_copy_t;

/** The broadcast chain of one root: the root, then the destination ranks in
 *  rank order; each member receives from the one before it and sends to the
 *  one after it. */
typedef struct {
    int32_t root;
    int32_t members; /**< chain length, the root included */
    int32_t prev;    /**< this rank's predecessor in the chain, -1 for none */
    int32_t next;    /**< this rank's successor in the chain, -1 for none */
    bool member;     /**< this rank is in the chain */
} rs_group_t;

/** Broadcast segments: each link of the chain carries the bucket in
 *  segments of this size, up to RS_CHAIN_WINDOW of them in flight, so that
 *  every link of the chain is busy at once (as NCCL's ring broadcast). */
#define RS_CHAIN_SEGMENT ((uint64_t)1 << 20)
#define RS_CHAIN_WINDOW 8

struct reshard_baseline {
    reshard_comm_t *comm;
    rs_mpi_t *m;
    const reshard_layout_t *src, *dst;
    double timeout_s;
    rs_group_t *groups;
    int32_t ngroups;
    rs_bucket_t *buckets;
    int32_t nbuckets;
    rs_item_t *items;
    int64_t nitems;
    rs_move_t *moves;
    int64_t nmoves;
    rs_copy_t *copies; /**< this rank's, sorted by item */
    int64_t ncopies;
    uint64_t bucket_max, send_max, recv_max; /**< this rank's staging needs */
    uint64_t bytes_moved;
    /** This rank's buffers, allocated by the first execution and kept. */
    uint8_t *bucket, *sendbuf, *recvbuf;
};

static uint32_t elem_size_of(const reshard_layout_t *l, int32_t tensor)
{
    return (uint32_t)reshard_dtype_size(l->tensors->t[tensor].dtype);
}

/* Grow an array by one element. */
static void *grow(void *arr, int64_t n, int64_t *cap, size_t size)
{
    if (n < *cap)
        return arr;
    int64_t c = *cap ? 2 * *cap : 64;
    void *p = realloc(arr, (size_t)c * size);
    if (p)
        *cap = c;
    return p;
}

/* Which source fragments of @p tensor are gathered: the root's first, then by
 * rank; a fragment whose box lies inside an already kept one is a replica. */
static reshard_status_t kept_fragments(const reshard_layout_t *src, int32_t tensor, int32_t root,
                                       int64_t **out, int64_t *nout)
{
    int64_t n = 0;
    for (int64_t i = 0; i < src->n; i++)
        n += src->f[i].tensor == tensor;
    int64_t *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    if (!idx)
        return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
    n = 0;
    for (int64_t i = 0; i < src->n; i++)
        if (src->f[i].tensor == tensor)
            idx[n++] = i;
    /* insertion sort by (not root, rank, index): stable and deterministic */
    for (int64_t i = 1; i < n; i++) {
        int64_t v = idx[i], j = i;
        const reshard_fragment_t *fv = &src->f[v];
        while (j > 0) {
            const reshard_fragment_t *fu = &src->f[idx[j - 1]];
            int ku = fu->rank != root, kv = fv->rank != root;
            if (ku < kv || (ku == kv && fu->rank <= fv->rank))
                break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        bool replica = false;
        for (int64_t j = 0; j < k && !replica; j++)
            replica = rs_box_contains(&src->f[idx[j]].box, &src->f[idx[i]].box);
        if (!replica)
            idx[k++] = idx[i];
    }
    *out = idx;
    *nout = k;
    return RESHARD_OK;
}

static int32_t default_root(const reshard_layout_t *src, int32_t tensor)
{
    int32_t r = -1;
    for (int64_t i = 0; i < src->n; i++)
        if (src->f[i].tensor == tensor && (r < 0 || src->f[i].rank < r))
            r = src->f[i].rank;
    return r;
}

/* Cut every tensor of @p root into items of buckets of at most @p cap bytes. */
static reshard_status_t make_buckets(reshard_baseline_t *b, const int32_t *roots, int32_t root,
                                     int32_t group, uint64_t cap, int64_t *buckets_cap,
                                     int64_t *items_cap)
{
    const reshard_tensors_t *cat = b->src->tensors;
    uint64_t off = 0;
    bool open = false;
    for (int32_t t = 0; t < cat->n; t++) {
        if (roots[t] != root)
            continue;
        const rs_tensor_t *ti = &cat->t[t];
        uint32_t es = (uint32_t)reshard_dtype_size(ti->dtype);
        int64_t rows = ti->vshape[0];
        uint64_t row_bytes = (uint64_t)(ti->numel / rows) * es;
        if (row_bytes > cap)
            return rs_error(RESHARD_ERR_STAGING,
                            "baseline: tensor %s: one row of view dim 0 (%llu bytes) does not fit "
                            "in a bucket of %llu bytes (the staging bound)",
                            ti->name, (unsigned long long)row_bytes, (unsigned long long)cap);
        for (int64_t r0 = 0; r0 < rows;) {
            uint64_t start = (off + 7) & ~(uint64_t)7;
            if (!open || start > cap || cap - start < row_bytes) {
                rs_bucket_t *bk = grow(b->buckets, b->nbuckets, buckets_cap, sizeof *bk);
                if (!bk)
                    return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
                b->buckets = bk;
                bk = &b->buckets[b->nbuckets++];
                memset(bk, 0, sizeof *bk);
                bk->root = root;
                bk->group = group;
                bk->item0 = bk->item1 = b->nitems;
                open = true;
                start = 0;
            }
            int64_t fit = (int64_t)((cap - start) / row_bytes);
            int64_t nrows = rows - r0 < fit ? rows - r0 : fit;
            rs_item_t *it = grow(b->items, b->nitems, items_cap, sizeof *it);
            if (!it)
                return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
            b->items = it;
            it = &b->items[b->nitems++];
            memset(it, 0, sizeof *it);
            it->tensor = t;
            it->bucket = (int32_t)(b->nbuckets - 1);
            it->bytes = (uint64_t)nrows * row_bytes;
            reshard_fragment_t *f = &it->frag;
            f->tensor = t;
            f->rank = root;
            f->box.ndim = ti->vndim;
            for (int d = 0; d < ti->vndim; d++)
                f->box.extent[d] = ti->vshape[d];
            f->box.offset[0] = r0;
            f->box.extent[0] = nrows;
            f->base = (int64_t)(start / es);
            int64_t stride = 1;
            for (int d = ti->vndim - 1; d >= 0; d--) {
                f->stride[d] = stride;
                stride *= ti->vshape[d];
            }
            rs_bucket_t *bk = &b->buckets[b->nbuckets - 1];
            bk->item1 = b->nitems;
            off = start + it->bytes;
            bk->bytes = off;
            r0 += nrows;
        }
    }
    return RESHARD_OK;
}

/* The gather moves of every bucket, sorted by (bucket, sender, item, fragment). */
static reshard_status_t make_moves(reshard_baseline_t *b, const int32_t *roots)
{
    const reshard_layout_t *src = b->src;
    int64_t cap = 0;
    int32_t ntensors = src->tensors->n;
    /* kept fragments per tensor, computed once */
    int64_t **kept = calloc((size_t)(ntensors ? ntensors : 1), sizeof *kept);
    int64_t *nkept = calloc((size_t)(ntensors ? ntensors : 1), sizeof *nkept);
    reshard_status_t st =
        kept && nkept ? RESHARD_OK : rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
    for (int32_t t = 0; st == RESHARD_OK && t < ntensors; t++)
        if (roots[t] >= 0)
            st = kept_fragments(src, t, roots[t], &kept[t], &nkept[t]);
    for (int32_t k = 0; st == RESHARD_OK && k < b->nbuckets; k++) {
        rs_bucket_t *bk = &b->buckets[k];
        bk->move0 = b->nmoves;
        int64_t first = b->nmoves;
        for (int64_t i = bk->item0; st == RESHARD_OK && i < bk->item1; i++) {
            const rs_item_t *it = &b->items[i];
            for (int64_t j = 0; j < nkept[it->tensor]; j++) {
                const reshard_fragment_t *f = &src->f[kept[it->tensor][j]];
                reshard_box_t box;
                if (!rs_box_intersect(&f->box, &it->frag.box, &box))
                    continue;
                rs_move_t *mv = grow(b->moves, b->nmoves, &cap, sizeof *mv);
                if (!mv) {
                    st = rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
                    break;
                }
                b->moves = mv;
                mv = &b->moves[b->nmoves++];
                mv->item = i;
                mv->src_frag = kept[it->tensor][j];
                mv->sender = f->rank;
                mv->box = box;
                mv->bytes = (uint64_t)rs_box_numel(&box) * elem_size_of(src, it->tensor);
            }
        }
        /* stable insertion sort of this bucket's moves by sender */
        for (int64_t i = first + 1; st == RESHARD_OK && i < b->nmoves; i++) {
            rs_move_t v = b->moves[i];
            int64_t j = i;
            while (j > first && b->moves[j - 1].sender > v.sender) {
                b->moves[j] = b->moves[j - 1];
                j--;
            }
            b->moves[j] = v;
        }
        bk->move1 = b->nmoves;
    }
    for (int32_t t = 0; kept && t < ntensors; t++)
        free(kept[t]);
    free(kept);
    free(nkept);
    return st;
}

/* This rank's copies out of the buckets, and its staging needs. */
static reshard_status_t make_rank_part(reshard_baseline_t *b)
{
    int32_t me = b->m->rank;
    const reshard_layout_t *dst = b->dst;
    int64_t cap = 0;
    for (int64_t i = 0; i < b->nitems; i++) {
        const rs_item_t *it = &b->items[i];
        for (int64_t j = 0; j < dst->n; j++) {
            const reshard_fragment_t *g = &dst->f[j];
            reshard_box_t box;
            if (g->rank != me || g->tensor != it->tensor ||
                !rs_box_intersect(&g->box, &it->frag.box, &box))
                continue;
            rs_copy_t *c = grow(b->copies, b->ncopies, &cap, sizeof *c);
            if (!c)
                return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
            b->copies = c;
            c = &b->copies[b->ncopies++];
            c->item = i;
            c->dst_frag = j;
            c->box = box;
            c->bytes = (uint64_t)rs_box_numel(&box) * elem_size_of(dst, it->tensor);
        }
    }
    for (int32_t k = 0; k < b->nbuckets; k++) {
        const rs_bucket_t *bk = &b->buckets[k];
        const rs_group_t *g = &b->groups[bk->group];
        uint64_t send = 0, recv = 0;
        for (int64_t i = bk->move0; i < bk->move1; i++) {
            const rs_move_t *mv = &b->moves[i];
            if (mv->sender == me && me != bk->root)
                send += mv->bytes;
            if (me == bk->root && mv->sender != me)
                recv += mv->bytes;
        }
        if (send > b->send_max)
            b->send_max = send;
        if (recv > b->recv_max)
            b->recv_max = recv;
        if (g->member && bk->bytes > b->bucket_max)
            b->bucket_max = bk->bytes;
        /* global payload: remote gather bytes + broadcast bytes per receiver */
        for (int64_t i = bk->move0; i < bk->move1; i++)
            if (b->moves[i].sender != bk->root)
                b->bytes_moved += b->moves[i].bytes;
        b->bytes_moved += bk->bytes * (uint64_t)(g->members - 1);
    }
    return RESHARD_OK;
}

/* One broadcast chain per root: the root first, then the destination ranks
 * in order. Decided from the layouts alone, identically on every rank. */
static reshard_status_t make_groups(reshard_baseline_t *b, const int32_t *roots)
{
    rs_mpi_t *m = b->m;
    int32_t ntensors = b->src->tensors->n;
    int32_t *uniq = malloc((size_t)(ntensors ? ntensors : 1) * sizeof *uniq);
    bool *dst = calloc((size_t)m->size, sizeof *dst);
    if (!uniq || !dst) {
        free(uniq);
        free(dst);
        return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
    }
    for (int64_t i = 0; i < b->dst->n; i++)
        dst[b->dst->f[i].rank] = true;
    int32_t n = 0;
    for (int32_t t = 0; t < ntensors; t++) {
        if (roots[t] < 0)
            continue;
        int32_t j = n;
        while (j > 0 && uniq[j - 1] > roots[t])
            j--;
        if (j > 0 && uniq[j - 1] == roots[t])
            continue;
        memmove(&uniq[j + 1], &uniq[j], (size_t)(n - j) * sizeof *uniq);
        uniq[j] = roots[t];
        n++;
    }
    b->groups = calloc((size_t)(n ? n : 1), sizeof *b->groups);
    if (!b->groups) {
        free(uniq);
        free(dst);
        return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
    }
    for (int32_t gi = 0; gi < n; gi++) {
        rs_group_t *g = &b->groups[b->ngroups++];
        g->root = uniq[gi];
        g->prev = g->next = -1;
        g->members = 1;
        g->member = g->root == m->rank;
        int32_t last = g->root; /* the chain so far ends here */
        for (int32_t r = 0; r < m->size; r++) {
            if (r == g->root || !dst[r])
                continue;
            if (last == m->rank)
                g->next = r;
            if (r == m->rank) {
                g->prev = last;
                g->member = true;
            }
            last = r;
            g->members++;
        }
    }
    free(uniq);
    free(dst);
    return RESHARD_OK;
}

void reshard_baseline_destroy(reshard_baseline_t *b)
{
    if (!b)
        return;
    rs_writers_forget(b);
    free(b->groups);
    free(b->buckets);
    free(b->items);
    free(b->moves);
    free(b->copies);
    free(b->bucket);
    free(b->sendbuf);
    free(b->recvbuf);
    free(b);
}

uint64_t reshard_baseline_bytes_moved(const reshard_baseline_t *b)
{
    return b ? b->bytes_moved : 0;
}

reshard_status_t reshard_baseline_create_mpi(const reshard_layout_t *src,
                                             const reshard_layout_t *dst, const int32_t *roots,
                                             const reshard_plan_params_t *params,
                                             reshard_comm_t *comm, reshard_baseline_t **out)
{
    rs_error_clear();
    if (!out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_baseline_create_mpi: out is NULL");
    *out = NULL;
    rs_mpi_t *m = rs_mpi_of(comm);
    if (!src || !dst || !params || !m)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_baseline_create_mpi: NULL argument or not an MPI comm");
    if (src->tensors != dst->tensors)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_baseline_create_mpi: the layouts use different catalogues");
    if (params->world_size != m->size)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_baseline_create_mpi: world_size %d != communicator size %d",
                        params->world_size, m->size);
    uint64_t cap = params->field_mask & RESHARD_PLAN_PARAM_STAGING_BYTES
                       ? params->staging_bytes
                       : RESHARD_DEFAULT_STAGING_BYTES;
    double timeout =
        rs_timeout_s(params->field_mask & RESHARD_PLAN_PARAM_TIMEOUT ? params->timeout_s : 0);
    const reshard_tensors_t *cat = src->tensors;
    int32_t *root = malloc((size_t)(cat->n ? cat->n : 1) * sizeof *root);
    reshard_baseline_t *b = calloc(1, sizeof *b);
    if (!root || !b) {
        free(root);
        free(b);
        return rs_error(RESHARD_ERR_NOMEM, "baseline: out of memory");
    }
    b->comm = comm;
    b->m = m;
    b->src = src;
    b->dst = dst;
    b->timeout_s = timeout;
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; st == RESHARD_OK && i < src->n; i++)
        if (src->f[i].rank >= m->size)
            st = rs_error(RESHARD_ERR_RANK, "baseline: tensor %s: source rank %d outside [0, %d)",
                          cat->t[src->f[i].tensor].name, src->f[i].rank, m->size);
    for (int64_t i = 0; st == RESHARD_OK && i < dst->n; i++)
        if (dst->f[i].rank >= m->size)
            st = rs_error(RESHARD_ERR_RANK,
                          "baseline: tensor %s: destination rank %d outside [0, %d)",
                          cat->t[dst->f[i].tensor].name, dst->f[i].rank, m->size);
    for (int32_t t = 0; st == RESHARD_OK && t < cat->n; t++) {
        bool needed = false;
        for (int64_t i = 0; i < dst->n && !needed; i++)
            needed = dst->f[i].tensor == t;
        int32_t r = default_root(src, t);
        if (!needed) {
            root[t] = -1; /* nobody needs it: not moved */
            continue;
        }
        if (r < 0) {
            st = rs_error(RESHARD_ERR_UNCOVERED,
                          "baseline: tensor %s has destination fragments but no source",
                          cat->t[t].name);
            break;
        }
        root[t] = roots ? roots[t] : r;
        bool holds = false;
        for (int64_t i = 0; i < src->n && !holds; i++)
            holds = src->f[i].tensor == t && src->f[i].rank == root[t];
        if (!holds)
            st = rs_error(RESHARD_ERR_INVALID_ARG,
                          "baseline: tensor %s: root rank %d holds no source fragment of it",
                          cat->t[t].name, root[t]);
    }
    if (st == RESHARD_OK)
        st = make_groups(b, root);
    int64_t buckets_cap = 0, items_cap = 0;
    for (int32_t g = 0; st == RESHARD_OK && g < b->ngroups; g++)
        st = make_buckets(b, root, b->groups[g].root, g, cap, &buckets_cap, &items_cap);
    if (st == RESHARD_OK)
        st = make_moves(b, root);
    if (st == RESHARD_OK)
        st = make_rank_part(b);
    free(root);
    if (st != RESHARD_OK) {
        reshard_baseline_destroy(b);
        return st;
    }
    *out = b;
    return RESHARD_OK;
}

/* ---- execution ------------------------------------------------------------ */

typedef struct {
    reshard_baseline_t *b;
    const reshard_buffer_t *src_bufs, *dst_bufs;
    uint8_t *bucket, *sendbuf, *recvbuf;
    rs_mpi_reqs_t reqs;
    reshard_exec_stats_t st;
} rs_bexec_t;

static void pack_move(const rs_bexec_t *x, const rs_move_t *mv, uint8_t *out)
{
    const reshard_fragment_t *f = &x->b->src->f[mv->src_frag];
    reshard_span_t span = {f, &mv->box, 0, rs_box_numel(&mv->box),
                           elem_size_of(x->b->src, f->tensor)};
    rs_pack_cpu(out, x->src_bufs[f->buffer].ptr, &span);
}

/* Gather bucket @p k: senders send their packed part, the root assembles. */
static reshard_status_t gather(rs_bexec_t *x, int32_t k)
{
    reshard_baseline_t *b = x->b;
    const rs_bucket_t *bk = &b->buckets[k];
    int32_t me = b->m->rank;
    reshard_status_t st = RESHARD_OK;
    if (me == bk->root) {
        /* post one receive per sender, then copy our own part meanwhile */
        uint64_t off = 0;
        for (int64_t i = bk->move0; st == RESHARD_OK && i < bk->move1;) {
            int32_t q = b->moves[i].sender;
            uint64_t bytes = 0;
            int64_t j = i;
            for (; j < bk->move1 && b->moves[j].sender == q; j++)
                bytes += b->moves[j].bytes;
            if (q != me) {
                st = rs_mpi_post(b->m, &x->reqs, false, q, x->recvbuf + off, bytes,
                                 RS_MPI_TAG_GATHER);
                off += bytes;
                x->st.bytes_recv += bytes;
            }
            i = j;
        }
        for (int64_t i = bk->move0; st == RESHARD_OK && i < bk->move1; i++) {
            const rs_move_t *mv = &b->moves[i];
            if (mv->sender != me)
                continue;
            const reshard_fragment_t *f = &b->src->f[mv->src_frag];
            uint32_t es = elem_size_of(b->src, f->tensor);
            rs_copy_box_cpu(x->bucket, &b->items[mv->item].frag, x->src_bufs[f->buffer].ptr, f,
                            &mv->box, es);
            x->st.bytes_local += mv->bytes;
        }
        if (st == RESHARD_OK)
            st = rs_mpi_wait(b->m, &x->reqs, b->timeout_s, true, "baseline gather");
        off = 0;
        for (int64_t i = bk->move0; st == RESHARD_OK && i < bk->move1; i++) {
            const rs_move_t *mv = &b->moves[i];
            if (mv->sender == me)
                continue;
            const rs_item_t *it = &b->items[mv->item];
            reshard_span_t span = {&it->frag, &mv->box, 0, rs_box_numel(&mv->box),
                                   elem_size_of(b->src, it->tensor)};
            rs_unpack_cpu(x->bucket, x->recvbuf + off, &span);
            off += mv->bytes;
        }
        return st;
    }
    uint64_t off = 0;
    for (int64_t i = bk->move0; i < bk->move1; i++) {
        const rs_move_t *mv = &b->moves[i];
        if (mv->sender != me)
            continue;
        pack_move(x, mv, x->sendbuf + off);
        off += mv->bytes;
    }
    if (off == 0)
        return RESHARD_OK;
    st = rs_mpi_post(b->m, &x->reqs, true, bk->root, x->sendbuf, off, RS_MPI_TAG_GATHER);
    x->st.bytes_sent_network += off;
    if (st == RESHARD_OK)
        st = rs_mpi_wait(b->m, &x->reqs, b->timeout_s, true, "baseline gather");
    return st;
}

/* Broadcast bucket @p k down its root's chain: receive each segment from
 * the predecessor, pass it on to the successor, RS_CHAIN_WINDOW segments in
 * flight each way. Segment s uses receive slot and send slot s % window; a
 * slot is waited for before it is reused. */
static reshard_status_t broadcast(rs_bexec_t *x, int32_t k)
{
    reshard_baseline_t *b = x->b;
    const rs_bucket_t *bk = &b->buckets[k];
    const rs_group_t *g = &b->groups[bk->group];
    if (!g->member || g->members < 2 || bk->bytes == 0)
        return RESHARD_OK;
    rs_mpi_t *m = b->m;
    const int64_t nseg = (int64_t)((bk->bytes + RS_CHAIN_SEGMENT - 1) / RS_CHAIN_SEGMENT);
    rs_mpi_reqs_t recv[RS_CHAIN_WINDOW], send[RS_CHAIN_WINDOW];
    memset(recv, 0, sizeof recv);
    memset(send, 0, sizeof send);
    reshard_status_t st = RESHARD_OK;
#define SEG_LEN(s)                                                                                 \
    (bk->bytes - (uint64_t)(s)*RS_CHAIN_SEGMENT < RS_CHAIN_SEGMENT                                 \
         ? bk->bytes - (uint64_t)(s)*RS_CHAIN_SEGMENT                                              \
         : RS_CHAIN_SEGMENT)
    for (int64_t s = 0; st == RESHARD_OK && g->prev >= 0 && s < nseg && s < RS_CHAIN_WINDOW; s++)
        st = rs_mpi_post(m, &recv[s], false, g->prev, x->bucket + (uint64_t)s * RS_CHAIN_SEGMENT,
                         SEG_LEN(s), RS_MPI_TAG_CHAIN);
    for (int64_t s = 0; st == RESHARD_OK && s < nseg; s++) {
        int w = (int)(s % RS_CHAIN_WINDOW);
        if (g->prev >= 0) {
            st = rs_mpi_wait(m, &recv[w], b->timeout_s, true, "baseline broadcast");
            int64_t ahead = s + RS_CHAIN_WINDOW;
            if (st == RESHARD_OK && ahead < nseg)
                st = rs_mpi_post(m, &recv[w], false, g->prev,
                                 x->bucket + (uint64_t)ahead * RS_CHAIN_SEGMENT, SEG_LEN(ahead),
                                 RS_MPI_TAG_CHAIN);
        }
        if (st == RESHARD_OK && g->next >= 0) {
            st = rs_mpi_wait(m, &send[w], b->timeout_s, true, "baseline broadcast");
            if (st == RESHARD_OK)
                st = rs_mpi_post(m, &send[w], true, g->next,
                                 x->bucket + (uint64_t)s * RS_CHAIN_SEGMENT, SEG_LEN(s),
                                 RS_MPI_TAG_CHAIN);
        }
    }
#undef SEG_LEN
    for (int w = 0; w < RS_CHAIN_WINDOW; w++) {
        if (st == RESHARD_OK)
            st = rs_mpi_wait(m, &send[w], b->timeout_s, true, "baseline broadcast");
        /* after a failure, outstanding requests move to the caller's list,
         * which leaks them on purpose (MPI may still touch the bucket) */
        for (int i = 0; i < recv[w].n; i++)
            rs_mpi_reqs_push(&x->reqs, recv[w].req[i], recv[w].peer[i]);
        for (int i = 0; i < send[w].n; i++)
            rs_mpi_reqs_push(&x->reqs, send[w].req[i], send[w].peer[i]);
        rs_mpi_reqs_free(&recv[w]);
        rs_mpi_reqs_free(&send[w]);
    }
    if (g->next >= 0)
        x->st.bytes_sent_network += bk->bytes;
    if (g->prev >= 0)
        x->st.bytes_recv += bk->bytes;
    return st;
}

/* Copy this rank's fragments out of bucket @p k; @p c is the cursor into the
 * copies (sorted by item, so by bucket). */
static void copy_out(rs_bexec_t *x, int32_t k, int64_t *c)
{
    reshard_baseline_t *b = x->b;
    for (; *c < b->ncopies && b->items[b->copies[*c].item].bucket == k; (*c)++) {
        const rs_copy_t *cp = &b->copies[*c];
        const rs_item_t *it = &b->items[cp->item];
        const reshard_fragment_t *g = &b->dst->f[cp->dst_frag];
        rs_copy_box_cpu(x->dst_bufs[g->buffer].ptr, g, x->bucket, &it->frag, &cp->box,
                        elem_size_of(b->dst, it->tensor));
        x->st.bytes_local += cp->bytes;
    }
}

static reshard_status_t alloc_buf(rs_mpi_t *m, uint64_t bytes, uint8_t **out)
{
    *out = NULL;
    if (!bytes)
        return RESHARD_OK;
    void *p = NULL;
    if (bytes > SIZE_MAX - 4096 || posix_memalign(&p, 4096, (size_t)bytes) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: baseline: cannot allocate %llu bytes", m->rank,
                        (unsigned long long)bytes);
    *out = p;
    return RESHARD_OK;
}

reshard_status_t reshard_baseline_execute(reshard_baseline_t *b, const reshard_buffer_t *src_bufs,
                                          int32_t n_src, const reshard_buffer_t *dst_bufs,
                                          int32_t n_dst, reshard_exec_stats_t *stats)
{
    rs_error_clear();
    if (!b || (n_src && !src_bufs) || (n_dst && !dst_bufs) || n_src < 0 || n_dst < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_baseline_execute: bad argument");
    rs_mpi_t *m = b->m;
    if (m->broken)
        return rs_mpi_broken_error(m);
    rs_bexec_t x = {b, src_bufs, dst_bufs, NULL, NULL, NULL, {0}, {0}};
    reshard_status_t st = rs_layout_check_buffers(b->src, m->rank, src_bufs, n_src, "source");
    if (st == RESHARD_OK)
        st = rs_layout_check_buffers(b->dst, m->rank, dst_bufs, n_dst, "destination");
    if (st == RESHARD_OK) /* what the engine holds at zero (host memory) */
        st = rs_layout_zero_fill(b->dst, m->rank, dst_bufs, NULL, NULL);
    if (st == RESHARD_OK && !b->bucket)
        st = alloc_buf(m, b->bucket_max, &b->bucket);
    if (st == RESHARD_OK && !b->sendbuf)
        st = alloc_buf(m, b->send_max, &b->sendbuf);
    if (st == RESHARD_OK && !b->recvbuf)
        st = alloc_buf(m, b->recv_max, &b->recvbuf);
    x.bucket = b->bucket;
    x.sendbuf = b->sendbuf;
    x.recvbuf = b->recvbuf;
    if (st == RESHARD_OK) /* the last writer of these bytes (a delta plan's are not its own) */
        rs_writers_stamp(b, m->rank, dst_bufs, n_dst);
    int64_t c = 0;
    for (int32_t k = 0; st == RESHARD_OK && k < b->nbuckets; k++) {
        st = gather(&x, k);
        if (st == RESHARD_OK)
            st = broadcast(&x, k);
        if (st == RESHARD_OK)
            copy_out(&x, k, &c);
    }
    if (x.reqs.n > 0) /* MPI may still touch them: leak them on purpose */
        b->bucket = b->sendbuf = b->recvbuf = NULL;
    rs_mpi_reqs_free(&x.reqs);
    if (stats)
        *stats = x.st;
    return rs_mpi_agree(m, st, NULL, NULL, b->timeout_s);
}
