/* Delta refit state: versions, snapshots, the commit after the outcome agreement, and the
 * checksum of checksum mode. */
#include "exec/delta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxh_x86dispatch.h> /* Debian's libxxhash: XXH3 dispatched to the CPU's widest */
#include <xxhash.h>

#include "exec/comm.h"
#include "exec/delta_dev_ops.h"
#include "exec/writers.h"
#include "layout/layout_internal.h"
#include "plan/plan_internal.h"
#include "util/error.h"

rs_delta_t *rs_delta_create(int32_t my_rank, int32_t world)
{
    rs_delta_t *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->my_rank = my_rank;
    d->n = my_rank == RESHARD_ALL_RANKS ? world : 1;
    d->r = calloc((size_t)d->n, sizeof *d->r);
    if (!d->r) {
        free(d);
        return NULL;
    }
    return d;
}

void rs_delta_free(rs_delta_t *d)
{
    if (!d)
        return;
    for (int32_t i = 0; i < d->n; i++) {
        rs_delta_release(&d->r[i]);
        free(d->r[i].stream_ok);
    }
    free(d->r);
    free(d);
}

rs_delta_rank_t *rs_delta_rank(const rs_delta_t *d, int32_t rank)
{
    if (!d)
        return NULL;
    if (d->my_rank != RESHARD_ALL_RANKS)
        return rank == d->my_rank ? &d->r[0] : NULL;
    return rank >= 0 && rank < d->n ? &d->r[rank] : NULL;
}

static uint64_t buffers_key(const reshard_buffer_t *b, int32_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) {
        uint64_t v[2] = {(uint64_t)(uintptr_t)b[i].ptr, b[i].bytes};
        for (int j = 0; j < 2; j++) {
            h ^= v[j] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
            h *= 0xff51afd7ed558ccdull;
        }
    }
    return h;
}

/* Free @p p, kept in @p r's memory (device memory through r->dev, else host memory). */
static void kept_free(const rs_delta_rank_t *r, void *p)
{
    if (r->dev)
        r->dev->free(p);
    else
        free(p);
}

/* @p bytes (> 0) kept between executions in @p r's memory into *@p out: device memory (zeroed)
 * through r->dev, else host memory (zeroed when @p zero). Errors: NOMEM naming @p rank, @p what,
 * the size and @p note (device memory: the transport's message). */
static reshard_status_t kept_alloc(const rs_delta_rank_t *r, reshard_comm_t *comm, int32_t rank,
                                   uint64_t bytes, bool zero, const char *what, const char *note,
                                   uint8_t **out)
{
    void *p = NULL;
    if (r->dev) {
        reshard_status_t st = r->dev->alloc(comm, bytes, &p);
        *out = p;
        return st;
    }
    if (bytes <= SIZE_MAX)
        p = zero ? calloc(1, (size_t)bytes) : malloc((size_t)bytes);
    *out = p;
    if (!p)
        return rs_error(RESHARD_ERR_NOMEM,
                        "rank %d: delta refit: no host memory for %s of %llu bytes%s", rank, what,
                        (unsigned long long)bytes, note);
    return RESHARD_OK;
}

void rs_delta_release(rs_delta_rank_t *r)
{
    kept_free(r, r->snap);
    kept_free(r, r->relay);
    r->snap = r->relay = NULL;
    r->snap_bytes = r->relay_bytes = 0;
    r->snap_valid = false;
    r->dev = NULL;
}

reshard_status_t rs_delta_prepare(rs_delta_rank_t *r, const reshard_plan_t *plan,
                                  reshard_comm_t *comm, int32_t rank, uint64_t snap_bytes,
                                  const reshard_buffer_t *dst, int32_t n_dst)
{
    r->key_now = buffers_key(dst, n_dst);
    /* another plan wrote (part of) the destination since this one committed there */
    if (r->state == RESHARD_DELTA_COMMITTED && !rs_writers_mine(plan, rank, r->wstamp, dst, n_dst))
        r->state = RESHARD_DELTA_NONE;
    r->wrote = false;
    if (comm->delta_dev != r->dev) { /* the other memory: nothing kept is a version there */
        rs_delta_release(r);
        r->dev = comm->delta_dev;
    }
    if (snap_bytes != r->snap_bytes || (!r->snap && snap_bytes)) {
        kept_free(r, r->snap);
        r->snap = NULL;
        r->snap_bytes = 0;
        r->snap_valid = false;
        free(r->stream_ok);
        r->stream_ok = NULL;
        if (snap_bytes) {
            reshard_status_t st = kept_alloc(r, comm, rank, snap_bytes, false, "its snapshot",
                                             " (the bytes it sends each refit)", &r->snap);
            if (st != RESHARD_OK)
                return st;
        }
        r->snap_bytes = snap_bytes;
    }
    return RESHARD_OK;
}

reshard_status_t rs_delta_relay(rs_delta_rank_t *r, reshard_comm_t *comm, int32_t rank,
                                uint64_t bytes, void **out)
{
    if (bytes != r->relay_bytes || !r->relay) {
        kept_free(r, r->relay);
        r->relay = NULL;
        r->relay_bytes = 0;
        reshard_status_t st =
            kept_alloc(r, comm, rank, bytes, true, "relay scratch", "", &r->relay);
        if (st != RESHARD_OK)
            return st;
        r->relay_bytes = bytes;
        r->dst_key = ~r->key_now; /* new scratch holds no version: this time dense */
    }
    *out = r->relay;
    return RESHARD_OK;
}

bool rs_delta_stream_ok(const rs_delta_rank_t *r, int64_t j)
{
    return r->snap_valid && (!r->stream_ok || r->stream_ok[j]);
}

int64_t rs_delta_held_version(const rs_delta_rank_t *r)
{
    return r->state == RESHARD_DELTA_COMMITTED && r->dst_key == r->key_now ? r->version : -1;
}

void rs_delta_words(const rs_delta_rank_t *r, int64_t *words)
{
    for (int i = 0; i < RESHARD_AGREE_WORDS; i++)
        words[i] = INT64_MAX;
    words[0] = -r->version; /* the minimum is minus the largest version */
}

void rs_delta_commit(rs_delta_rank_t *r, reshard_status_t agreed, const int64_t *min_words)
{
    free(r->stream_ok); /* a commit makes every stream's snapshot valid, a failure none */
    r->stream_ok = NULL;
    if (agreed == RESHARD_OK) {
        r->version = -min_words[0] + 1;
        r->state = RESHARD_DELTA_COMMITTED;
        r->dst_key = r->key_now;
        r->snap_valid = true;
    } else {
        r->snap_valid = false;
        if (r->wrote)
            r->state = RESHARD_DELTA_TORN;
    }
    r->last.version = r->version;
    r->last.state = r->state;
}

const char *reshard_delta_state_string(reshard_delta_state_t state)
{
    switch (state) {
    case RESHARD_DELTA_NONE:
        return "none";
    case RESHARD_DELTA_COMMITTED:
        return "committed";
    case RESHARD_DELTA_TORN:
        return "torn";
    }
    return "unknown";
}

reshard_status_t reshard_plan_delta_info(const reshard_plan_t *plan, int32_t rank,
                                         reshard_delta_info_t *out)
{
    rs_error_clear();
    if (!plan || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_plan_delta_info: NULL argument");
    if (!plan->delta)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_delta_info: the plan was made without delta "
                        "(reshard_plan_params_t.delta)");
    const rs_delta_rank_t *r = rs_delta_rank(plan->delta, rank);
    if (!r)
        return rs_error(RESHARD_ERR_RANK,
                        "reshard_plan_delta_info: rank %d is not a rank this "
                        "plan executes",
                        rank);
    *out = r->last;
    out->version = r->version;
    out->state = r->state;
    out->snapshot_bytes = r->snap_bytes;
    out->relay_bytes = r->relay_bytes;
    return RESHARD_OK;
}

reshard_status_t reshard_plan_delta_invalidate(reshard_plan_t *plan, int32_t rank)
{
    rs_error_clear();
    if (!plan)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_plan_delta_invalidate: NULL plan");
    if (!plan->delta)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_delta_invalidate: the plan was made without delta "
                        "(reshard_plan_params_t.delta)");
    rs_delta_rank_t *r = rs_delta_rank(plan->delta, rank);
    if (!r)
        return rs_error(RESHARD_ERR_RANK,
                        "reshard_plan_delta_invalidate: rank %d is not a rank this plan executes",
                        rank);
    if (r->state == RESHARD_DELTA_COMMITTED)
        r->state = RESHARD_DELTA_NONE; /* held version -1: its senders send dense */
    return RESHARD_OK;
}

uint64_t rs_delta_hash(const void *bytes, uint64_t len)
{
    return (uint64_t)XXH3_64bits_dispatch(bytes, (size_t)len);
}

reshard_status_t rs_delta_checksum_error(const reshard_plan_t *plan, const rs_stream_t *s,
                                         int64_t piece, uint64_t off, uint64_t len, int32_t rank,
                                         int64_t k)
{
    char what[768] = "";
    size_t at = 0;
    int listed = 0, more = 0;
    for (uint64_t done = 0; done < len && piece < s->n; piece++, off = 0) {
        const rs_piece_t *p = &plan->pieces[s->idx[piece]];
        uint64_t take = rs_piece_stream_bytes(p) - off;
        if (take > len - done)
            take = len - done;
        uint64_t end = off + take < p->bytes ? off + take : p->bytes;
        done += take;
        if (end <= off)
            continue; /* padding only */
        if (listed == 3) {
            more++;
            continue;
        }
        char bs[256];
        int w = snprintf(
            what + at, sizeof what - at, "%stensor '%s' box %s (elements %llu..%llu of the box)",
            listed ? "; " : "", plan->dst->tensors->t[p->tensor].name,
            rs_box_str(&p->box, bs, sizeof bs), (unsigned long long)(off / p->elem_size),
            (unsigned long long)(end / p->elem_size - 1));
        if (w > 0 && (size_t)w < sizeof what - at)
            at += (size_t)w;
        listed++;
    }
    return rs_error(RESHARD_ERR_VERIFY,
                    "rank %d: delta checksum: chunk %lld from rank %d differs after apply from "
                    "the sender's new bytes: %s%s%.0d%s; its destination was changed since the "
                    "last committed refit (behind reshard's back): not used, the refit fails "
                    "and the next one is dense",
                    rank, (long long)k, s->peer, what, more ? " and " : "", more,
                    more ? " more pieces" : "");
}
