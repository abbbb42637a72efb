/*
 * reshard_plan_delta_adopt (reshard_delta.h): a rank's delta state (version, destination
 * state, snapshot) moved from the plan it executed last to a new plan of the membership,
 * the snapshot remapped piece by piece onto the new plan's send streams.
 */
#include <stdlib.h>
#include <string.h>

#include "exec/delta.h"
#include "exec/writers.h"
#include "layout/layout_internal.h"
#include "plan/plan_internal.h"
#include "util/error.h"

/* A piece of an old send stream: what its snapshot bytes hold, where, and whether they
 * hold the old plan's version (its stream is one the old plan had valid). */
typedef struct {
    const rs_piece_t *p;
    uint64_t off;
    bool valid;
} rs_snap_piece_t;

static int cmp_piece_key(const rs_piece_t *a, const rs_piece_t *b)
{
    if (a->tensor != b->tensor)
        return a->tensor < b->tensor ? -1 : 1;
    if (a->elem_size != b->elem_size)
        return a->elem_size < b->elem_size ? -1 : 1;
    if (a->box.ndim != b->box.ndim)
        return a->box.ndim < b->box.ndim ? -1 : 1;
    for (int d = 0; d < a->box.ndim; d++) {
        if (a->box.offset[d] != b->box.offset[d])
            return a->box.offset[d] < b->box.offset[d] ? -1 : 1;
        if (a->box.extent[d] != b->box.extent[d])
            return a->box.extent[d] < b->box.extent[d] ? -1 : 1;
    }
    return 0;
}

static int cmp_snap_piece(const void *a, const void *b)
{
    return cmp_piece_key(((const rs_snap_piece_t *)a)->p, ((const rs_snap_piece_t *)b)->p);
}

/* Whether send stream @p i of stage @p s is one whose bytes the snapshot holds: those to
 * other ranks, stage by stage in stream order (run_rounds_delta's order). */
static bool snap_stream(const rs_rank_plan_t *rp, int s, int32_t i)
{
    return rp->send[s][i].peer != rp->rank;
}

/* The rank plan of @p rank under @p plan: its own, or one built into *@p own. */
static reshard_status_t rank_plan_of(const reshard_plan_t *plan, int32_t rank,
                                     const rs_rank_plan_t **rp, rs_rank_plan_t **own)
{
    *own = NULL;
    if (plan->mine) {
        *rp = plan->mine;
        return RESHARD_OK;
    }
    reshard_status_t st = rs_rank_plan_build(plan, rank, own);
    *rp = *own;
    return st;
}

/* Fill @p to's snapshot for the send streams of @p nrp from @p from's (streams of @p orp):
 * each piece whose tensor and box the old snapshot holds is copied; a stream with any
 * piece it does not hold, or holds from a stream not valid there (@p from adopted in turn
 * and never executed: rs_delta_stream_ok), is marked not valid (sent dense once). */
static reshard_status_t remap_snapshot(const reshard_plan_t *np, const rs_rank_plan_t *nrp,
                                       const reshard_plan_t *op, const rs_rank_plan_t *orp,
                                       const rs_delta_rank_t *from, rs_delta_rank_t *to,
                                       int32_t rank)
{
    int64_t nold = 0, nstreams = 0;
    uint64_t bytes = 0;
    for (int s = 0; s < RS_NSTAGES; s++) {
        for (int32_t i = 0; i < orp->nsend[s]; i++)
            nold += snap_stream(orp, s, i) ? orp->send[s][i].n : 0;
        for (int32_t i = 0; i < nrp->nsend[s]; i++)
            if (snap_stream(nrp, s, i) && nrp->send[s][i].bytes) {
                nstreams++;
                bytes += nrp->send[s][i].bytes;
            }
    }
    rs_snap_piece_t *old = calloc((size_t)nold + 1, sizeof *old);
    to->stream_ok = calloc((size_t)nstreams + 1, 1);
    to->snap = bytes && bytes <= SIZE_MAX ? malloc((size_t)bytes) : NULL;
    if (!old || !to->stream_ok || (bytes && !to->snap)) {
        free(old);
        free(to->stream_ok);
        free(to->snap);
        to->stream_ok = NULL;
        to->snap = NULL;
        return rs_error(RESHARD_ERR_NOMEM,
                        "reshard_plan_delta_adopt: rank %d: no host memory for a snapshot of %llu "
                        "bytes",
                        rank, (unsigned long long)bytes);
    }
    uint64_t off = 0;
    int64_t k = 0, oj = 0; /* oj: the old stream's index in snapshot order */
    for (int s = 0; s < RS_NSTAGES; s++)
        for (int32_t i = 0; i < orp->nsend[s]; i++) {
            const rs_stream_t *st = &orp->send[s][i];
            if (!snap_stream(orp, s, i))
                continue;
            bool valid = !st->bytes || rs_delta_stream_ok(from, oj);
            oj += st->bytes ? 1 : 0;
            for (int64_t j = 0; j < st->n; j++) {
                const rs_piece_t *p = &op->pieces[st->idx[j]];
                old[k++] = (rs_snap_piece_t){p, off, valid};
                off += rs_piece_stream_bytes(p);
            }
        }
    if (off != from->snap_bytes) { /* not the snapshot of that plan: keep nothing */
        free(old);
        return RESHARD_OK;
    }
    qsort(old, (size_t)nold, sizeof *old, cmp_snap_piece);
    off = 0;
    int64_t j = 0;
    for (int s = 0; s < RS_NSTAGES; s++)
        for (int32_t i = 0; i < nrp->nsend[s]; i++) {
            const rs_stream_t *st = &nrp->send[s][i];
            if (!snap_stream(nrp, s, i) || !st->bytes)
                continue;
            bool ok = true;
            for (int64_t q = 0; q < st->n; q++) {
                const rs_piece_t *p = &np->pieces[st->idx[q]];
                rs_snap_piece_t key = {p, 0, false};
                const rs_snap_piece_t *hit =
                    nold ? bsearch(&key, old, (size_t)nold, sizeof *old, cmp_snap_piece) : NULL;
                uint64_t pb = rs_piece_stream_bytes(p);
                if (hit) {
                    memcpy(to->snap + off, from->snap + hit->off, (size_t)pb);
                    ok = ok && hit->valid;
                } else {
                    memset(to->snap + off, 0, (size_t)pb);
                    ok = false;
                }
                off += pb;
            }
            to->stream_ok[j++] = ok;
        }
    free(old);
    to->snap_bytes = bytes;
    to->snap_valid = true;
    return RESHARD_OK;
}

/* Whether @p rank's destination fragments are the same (in order) in both layouts: then
 * the destination bytes the old plan committed are where the new plan expects them. */
static bool same_dst_fragments(const reshard_layout_t *a, const reshard_layout_t *b, int32_t rank)
{
    int64_t i = 0, j = 0;
    for (;;) {
        while (i < a->n && a->f[i].rank != rank)
            i++;
        while (j < b->n && b->f[j].rank != rank)
            j++;
        if (i == a->n || j == b->n)
            return i == a->n && j == b->n;
        const reshard_fragment_t *x = &a->f[i++], *y = &b->f[j++];
        if (x->buffer != y->buffer || !rs_fragment_same_place(x, y))
            return false;
    }
}

reshard_status_t reshard_plan_delta_adopt(reshard_plan_t *plan, reshard_plan_t *from, int32_t rank)
{
    rs_error_clear();
    if (!plan || !from || plan == from)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_delta_adopt: NULL argument, or one plan twice");
    if (!plan->delta || !from->delta)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_delta_adopt: rank %d: both plans must be delta plans "
                        "(reshard_plan_params_t.delta)",
                        rank);
    if (plan->p.world_size != from->p.world_size)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_delta_adopt: rank %d: world sizes %d and %d differ (plans "
                        "of a membership keep the original world size)",
                        rank, plan->p.world_size, from->p.world_size);
    if (plan->fp_part[RS_FP_CATALOGUE] != from->fp_part[RS_FP_CATALOGUE])
        return rs_error(RESHARD_ERR_MISMATCH,
                        "reshard_plan_delta_adopt: rank %d: the plans were made over different "
                        "catalogues (tensor names, dtypes or shapes differ)",
                        rank);
    rs_delta_rank_t *to = rs_delta_rank(plan->delta, rank), *old = rs_delta_rank(from->delta, rank);
    if (!to || !old)
        return rs_error(RESHARD_ERR_RANK,
                        "reshard_plan_delta_adopt: rank %d is not a rank both plans execute", rank);
    if (to->version || to->state != RESHARD_DELTA_NONE || to->snap || to->relay)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_delta_adopt: rank %d: the new plan has executed or adopted "
                        "already (adopt once, before its first execution)",
                        rank);
    reshard_status_t st = RESHARD_OK;
    /* A snapshot in device memory is not carried over: the new plan's streams go dense once. */
    if (old->snap_valid && old->snap_bytes && !old->dev) {
        const rs_rank_plan_t *nrp = NULL, *orp = NULL;
        rs_rank_plan_t *nown = NULL, *oown = NULL;
        st = rank_plan_of(plan, rank, &nrp, &nown);
        if (st == RESHARD_OK)
            st = rank_plan_of(from, rank, &orp, &oown);
        if (st == RESHARD_OK)
            st = remap_snapshot(plan, nrp, from, orp, old, to, rank);
        rs_rank_plan_free(nown);
        rs_rank_plan_free(oown);
        if (st != RESHARD_OK)
            return st;
    }
    to->version = old->version;
    to->wstamp = old->wstamp; /* the old plan's writes to the destination become this one's */
    rs_writers_transfer(from, plan, rank);
    /* the destination keeps its version only where the new plan writes the same places */
    if (same_dst_fragments(plan->dst, from->dst, rank)) {
        to->state = old->state;
        to->dst_key = old->dst_key;
    }
    to->last.version = to->version;
    to->last.state = to->state;
    /* moved: the old plan's rank holds nothing any more (its next execution is dense);
     * the old plan is retired, and the new one takes its number among the rank's plans of
     * these inputs (plan/identity.c) */
    rs_identity_replace(plan, from, "reshard_plan_delta_adopt moved its delta state to a new plan");
    rs_delta_release(old);
    free(old->stream_ok);
    memset(old, 0, sizeof *old);
    return RESHARD_OK;
}
