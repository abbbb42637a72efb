/* Totals of a plan's pieces, tensor by tensor (tally.h). */
#include <stdlib.h>
#include <string.h>

#include "plan/placement.h"
#include "plan/tally.h"
#include "util/error.h"

/* The per-rank arrays (fwd per domain, of which there are at most world). */
#define RS_TALLY_ARRAYS(X)                                                                         \
    X(nic_send) X(nic_recv) X(nvl_send) X(nvl_recv) X(local) X(relay) X(copied) X(fwd)

reshard_status_t rs_tally_init(rs_tally_t *t, const reshard_plan_params_t *p)
{
    memset(t, 0, sizeof *t);
    t->world = p->world_size;
    t->rank = p->my_rank;
    bool ok = true;
#define RS_ALLOC(f) ok = ok && (t->f = calloc((size_t)t->world, sizeof *t->f)) != NULL;
    RS_TALLY_ARRAYS(RS_ALLOC)
#undef RS_ALLOC
    if (!ok) {
        rs_tally_free(t);
        return rs_error(RESHARD_ERR_NOMEM, "plan statistics: out of memory");
    }
    return RESHARD_OK;
}

void rs_tally_free(rs_tally_t *t)
{
#define RS_FREE(f)                                                                                 \
    free(t->f);                                                                                    \
    t->f = NULL;
    RS_TALLY_ARRAYS(RS_FREE)
#undef RS_FREE
    free(t->streams);
    t->streams = NULL;
    t->nstreams = t->cap = 0;
}

static int64_t slot_of(uint64_t key, int64_t cap)
{
    /* every key bit reaches the slot: sender and receiver alike */
    return (int64_t)(rs_hash_mix(0, key) & (uint64_t)(cap - 1));
}

/* Slot of @p key in s[0..cap) (a power of two): its own, or the free one it
 * would take. */
static int64_t find(const rs_stream_total_t *s, int64_t cap, uint64_t key)
{
    int64_t i = slot_of(key, cap);
    while (s[i].key && s[i].key != key)
        i = (i + 1) & (cap - 1);
    return i;
}

/* Add @p bytes (@p padded on the wire) to stream @p key. -1 when out of memory. */
static int add_stream(rs_tally_t *t, uint64_t key, uint64_t bytes, uint64_t padded)
{
    if (2 * (t->nstreams + 1) > t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 1024;
        rs_stream_total_t *s = calloc((size_t)cap, sizeof *s);
        if (!s)
            return -1;
        for (int64_t i = 0; i < t->cap; i++)
            if (t->streams[i].key)
                s[find(s, cap, t->streams[i].key)] = t->streams[i];
        free(t->streams);
        t->streams = s;
        t->cap = cap;
    }
    int64_t i = find(t->streams, t->cap, key);
    if (!t->streams[i].key) {
        t->streams[i].key = key;
        t->nstreams++;
    }
    t->streams[i].bytes += bytes;
    t->streams[i].padded += padded;
    return 0;
}

const rs_stream_total_t *rs_tally_stream(const rs_tally_t *t, uint64_t key)
{
    if (!t->cap)
        return NULL;
    int64_t i = find(t->streams, t->cap, key);
    return t->streams[i].key ? &t->streams[i] : NULL;
}

/* Does piece @p q move straight from (@p send) or to the user buffer on that
 * side, as the executor does (exec.c): dense in the fragment it is read from
 * or written to (relay scratch always is) and at least RS_DIRECT_MIN_BYTES. */
static bool direct_side(const reshard_plan_t *plan, const rs_piece_t *q, bool send)
{
    if (q->bytes < RS_DIRECT_MIN_BYTES)
        return false;
    if (rs_piece_is_relay(plan->dst, q) && send == (q->stage == RS_STAGE_FORWARD))
        return true;
    const reshard_fragment_t *f = !send                         ? &plan->dst->f[q->to_frag]
                                  : q->stage == RS_STAGE_DIRECT ? &plan->src->f[q->from_frag]
                                                                : &plan->dst->f[q->from_frag];
    return rs_box_dense(&q->box, f);
}

reshard_status_t rs_tally_add(rs_tally_t *t, const reshard_plan_t *plan, const rs_piece_t *v,
                              int64_t n)
{
    const reshard_plan_params_t *p = &plan->p;
    bool all = t->rank == RESHARD_ALL_RANKS;
    uint64_t run = 0, run_padded = 0;
    for (int64_t i = 0; i < n; i++) {
        const rs_piece_t *q = &v[i];
        bool in = all || q->receiver == t->rank, out = all || q->sender == t->rank;
        if (!in && !out)
            continue;
        int32_t ds = rs_domain_of(p, q->sender), dr = rs_domain_of(p, q->receiver);
        bool net = ds != dr, moves = q->sender != q->receiver;
        if (in) {
            /* relayed landings are forwarded, not written: they take scratch */
            if (!(q->stage == RS_STAGE_DIRECT && rs_piece_is_relay(plan->dst, q)))
                t->bytes_total += q->bytes;
            else
                t->relay[q->receiver] += rs_piece_stream_bytes(q);
            if (net)
                t->nic_recv[q->receiver] += q->bytes;
            else if (moves)
                t->nvl_recv[q->receiver] += q->bytes;
            if (moves && !direct_side(plan, q, false))
                t->copied[q->receiver] += q->bytes;
        }
        if (out) {
            t->pieces++;
            t->bytes_path[rs_path_of(p, q->sender, q->receiver)] += q->bytes;
            if (rs_piece_is_peer_read(plan, q))
                t->bytes_peer_read += q->bytes;
            if (!moves) {
                t->bytes_local += q->bytes;
                t->local[q->sender] += q->bytes;
            } else if (!net) {
                t->bytes_nvlink += q->bytes;
                t->nvl_send[q->sender] += q->bytes;
                if (q->stage == RS_STAGE_FORWARD)
                    t->fwd[dr] += q->bytes;
            } else {
                t->bytes_network += q->bytes;
                t->nic_send[q->sender] += q->bytes;
            }
            if (moves && !direct_side(plan, q, true))
                t->copied[q->sender] += q->bytes;
        }
        /* a stream's pieces are consecutive (stream order): one update per run */
        run += q->bytes;
        run_padded += rs_piece_stream_bytes(q);
        const rs_piece_t *nx = i + 1 < n ? &v[i + 1] : NULL;
        if (!nx || nx->stage != q->stage || nx->sender != q->sender ||
            nx->receiver != q->receiver) {
            if (add_stream(t, rs_tally_key(q->stage, q->sender, q->receiver), run, run_padded) != 0)
                return rs_error(RESHARD_ERR_NOMEM,
                                "plan statistics: out of memory for %lld "
                                "streams",
                                (long long)t->nstreams);
            run = run_padded = 0;
        }
    }
    return RESHARD_OK;
}
