/*
 * reshard_plan_execute: the pipelined chunk loop over a transport.
 *
 * Round k moves the k-th chunk of every stage-0 stream of this rank (and of
 * the forward streams, as far as their landed bytes allow). Round k+1 is
 * packed and posted before round k is waited for and unpacked, so two rounds
 * are in flight and packing overlaps the transfer; forwarding of what landed
 * in round k overlaps the arrival of rounds k+1, k+2, ...
 *
 * A dense plan's round moves a stream's bytes as several messages: each run of a piece
 * dense on both ends (and worth a message) goes straight between the user buffers, the
 * rest is packed into the stream's slot (at most a chunk a round), so a chunk that spans
 * pieces is not copied twice. A forward stream moves everything that is ready in a round,
 * unbounded by the chunk where it goes straight: a landing rank receives from several
 * senders at once, and a forward bounded by one chunk a round would fall behind the
 * landings and trail the network phase.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/agree.h"
#include "exec/delta.h"
#include "exec/delta_codec.h"
#include "exec/delta_dev_ops.h"
#include "exec/writers.h"
#include "exec/pack.h"
#include "exec/peer.h"
#include "exec/quant_steps.h"
#include "exec/zero_fill.h"
#include "plan/plan_util.h"
#include "plan/rounds.h"
#include "util/error.h"

/* Where a stream stands: next piece and the bytes of it already moved. */
typedef struct {
    int64_t piece;
    uint64_t off;
} rs_cursor_t;

/* A relay piece's place in this rank's relay scratch (see topo.h). */
typedef struct {
    int64_t piece;
    uint64_t off;
} rs_relay_t;

typedef struct {
    const reshard_plan_t *plan;
    reshard_comm_t *comm;
    const rs_rank_plan_t *rp;
    const reshard_buffer_t *src_bufs, *dst_bufs;
    uint8_t *staging;
    reshard_exec_stats_t *stats;
    uint8_t *relay; /* relay scratch, or NULL */
    rs_relay_t *rl; /* by piece index */
    int64_t nrl;
    const rs_qbufs_t *qb; /* quantized destinations: scratch and steps, or NULL */
    rs_delta_rank_t *dr;  /* delta plans: this rank's state (exec/delta.h), or NULL */
    /* The first local failure (a pack or quantize step, a local copy) of this rank, or OK.
     * From then on the rank packs and unpacks nothing but still posts every remaining
     * transfer of the schedule, so that its peers' rounds match (NCCL groups and MPI
     * messages pair by order) and every rank reaches the outcome agreement at once instead
     * of waiting out the timeout. */
    reshard_status_t failed;
    char why[1024];
} rs_exec_t;

/* Remember this rank's first local failure (its status and message). */
static void note_failure(rs_exec_t *x, reshard_status_t st)
{
    if (x->failed != RESHARD_OK)
        return;
    x->failed = st;
    snprintf(x->why, sizeof x->why, "%s", reshard_last_error());
}

/* Where the elements of piece @p p are read (sending, forwarding) or written
 * (receiving) on this rank: a fragment and its buffer. Relay pieces live in
 * the relay scratch, row-major over their box (@p tmp describes it). */
static const reshard_fragment_t *piece_place(const rs_exec_t *x, const rs_piece_t *p, bool from,
                                             reshard_fragment_t *tmp, void **buf)
{
    const reshard_plan_t *plan = x->plan;
    if (rs_piece_is_relay(plan->dst, p) && from == (p->stage == RS_STAGE_FORWARD)) {
        int64_t lo = 0, hi = x->nrl, me = p - plan->pieces;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (x->rl[mid].piece < me)
                lo = mid + 1;
            else
                hi = mid;
        }
        memset(tmp, 0, sizeof *tmp);
        tmp->tensor = p->tensor;
        tmp->rank = x->rp->rank;
        tmp->box = p->box;
        tmp->base = lo < x->nrl ? (int64_t)(x->rl[lo].off / p->elem_size) : 0;
        int64_t st = 1;
        for (int d = p->box.ndim - 1; d >= 0; d--) {
            tmp->stride[d] = st;
            st *= p->box.extent[d];
        }
        *buf = x->relay;
        return tmp;
    }
    if (!from) {
        const reshard_fragment_t *f = &plan->dst->f[p->to_frag];
        *buf = x->dst_bufs[f->buffer].ptr;
        return f;
    }
    const reshard_fragment_t *f =
        p->stage == RS_STAGE_DIRECT ? &plan->src->f[p->from_frag] : &plan->dst->f[p->from_frag];
    *buf = p->stage == RS_STAGE_DIRECT ? x->src_bufs[f->buffer].ptr : x->dst_bufs[f->buffer].ptr;
    return f;
}

/* Pack (@p sending) or unpack @p len stream bytes at the cursor, at the place the
 * stream's pieces are read from (@p from: the send side) or written to. */
static reshard_status_t move_chunk_at(const rs_exec_t *x, const rs_stream_t *s, rs_cursor_t *cur,
                                      uint8_t *stage_buf, uint64_t len, bool from, bool sending,
                                      uint64_t *payload)
{
    const reshard_transport_ops_t *ops = x->comm->ops;
    uint64_t done = 0;
    while (done < len) {
        const rs_piece_t *p = &x->plan->pieces[s->idx[cur->piece]];
        uint64_t padded = rs_piece_stream_bytes(p);
        uint64_t take = padded - cur->off < len - done ? padded - cur->off : len - done;
        uint64_t data_end = cur->off + take < p->bytes ? cur->off + take : p->bytes;
        if (sending && from && cur->off == 0 && x->qb) {
            reshard_status_t qs = rs_quant_piece(x->plan, x->comm, x->qb, p);
            if (qs != RESHARD_OK)
                return qs;
        }
        if (data_end > cur->off) {
            *payload += data_end - cur->off;
            reshard_fragment_t tmp;
            void *buf;
            const reshard_fragment_t *f = piece_place(x, p, from, &tmp, &buf);
            reshard_span_t span = {f, &p->box, (int64_t)(cur->off / p->elem_size),
                                   (int64_t)((data_end - cur->off) / p->elem_size), p->elem_size};
            reshard_status_t st = RESHARD_OK;
            if (sending) {
                if (ops->pack)
                    st = ops->pack(x->comm, stage_buf + done, buf, &span);
                else
                    rs_pack_cpu(stage_buf + done, buf, &span);
            } else {
                if (ops->unpack)
                    st = ops->unpack(x->comm, buf, stage_buf + done, &span);
                else
                    rs_unpack_cpu(buf, stage_buf + done, &span);
            }
            if (st != RESHARD_OK)
                return st;
        }
        uint64_t pad_from = data_end > cur->off ? data_end : cur->off;
        if (sending && x->dr && cur->off + take > pad_from) { /* delta: padding compares equal */
            uint8_t *pad = stage_buf + done + (pad_from - cur->off);
            const uint64_t n = cur->off + take - pad_from;
            if (x->comm->delta_dev) { /* device memory: in order with the packs on the stream */
                reshard_status_t st = x->comm->delta_dev->zero(x->comm, pad, n);
                if (st != RESHARD_OK)
                    return st;
            } else {
                memset(pad, 0, n);
            }
        }
        done += take;
        cur->off += take;
        if (cur->off == padded) {
            cur->piece++;
            cur->off = 0;
        }
    }
    return RESHARD_OK;
}

/* Pack (send side) or unpack (receive side) @p len stream bytes at the cursor. */
static reshard_status_t move_chunk(const rs_exec_t *x, const rs_stream_t *s, rs_cursor_t *cur,
                                   uint8_t *stage_buf, uint64_t len, bool sending,
                                   uint64_t *payload)
{
    return move_chunk_at(x, s, cur, stage_buf, len, sending, sending, payload);
}

/* One stream of this rank in the round loop. Stage-0 streams move round k of
 * their schedule (plan/rounds.h: chunk k, tapering at the end in a dense
 * plan); a forward stream (stage 1) moves len[k] bytes in round k, where
 * the schedule only lets bytes through once the landing rank has unpacked
 * them (see forward_schedules). Both ends of a stream compute the same
 * schedule from the global plan, so their messages always match. */
typedef struct {
    const rs_stream_t *s;
    bool send;
    uint64_t slot_off; /* fixed place in each slot */
    rs_cursor_t cur;
    uint64_t *len;     /* forward streams: bytes per round; NULL for stage 0 */
    rs_rounds_t sched; /* stage 0: the schedule of its rounds */
    int64_t rounds;
    bool direct[2];   /* the chunk of the slot moves straight from/to the user buffer */
    rs_cursor_t pcur; /* receives: where the next posted chunk starts */
} rs_xstream_t;

/* The address of the stream bytes of @p xs at @p cur on this side when the piece there is
 * dense in its buffer, else NULL. */
static uint8_t *piece_ptr(const rs_exec_t *x, const rs_xstream_t *xs, const rs_cursor_t *cur)
{
    const rs_piece_t *p = &x->plan->pieces[xs->s->idx[cur->piece]];
    reshard_fragment_t tmp;
    void *buf;
    const reshard_fragment_t *f = piece_place(x, p, xs->send, &tmp, &buf);
    if (!rs_box_dense(&p->box, f))
        return NULL;
    return (uint8_t *)buf + (size_t)rs_frag_pos(f, p->box.offset) * p->elem_size + cur->off;
}

/* When the next @p len stream bytes of @p xs lie inside one piece's data and
 * that piece is dense in the user buffer of this side: their address. */
static uint8_t *direct_ptr(const rs_exec_t *x, const rs_xstream_t *xs, const rs_cursor_t *cur,
                           uint64_t len)
{
    const rs_piece_t *p = &x->plan->pieces[xs->s->idx[cur->piece]];
    if (cur->off + len > p->bytes || len < RS_DIRECT_MIN_BYTES)
        return NULL;
    return piece_ptr(x, xs, cur);
}

/* Does piece @p p move straight between the user buffers, as messages of its own? When its
 * data is dense where it is read and where it is written (a relay scratch always is: what
 * a landing writes and its forward reads) and worth a message. Both ends decide alike,
 * from the plan's layouts (see piece_place). */
static bool piece_direct(const reshard_plan_t *plan, const rs_piece_t *p)
{
    if (p->bytes < RS_DIRECT_MIN_BYTES)
        return false;
    bool fwd = p->stage == RS_STAGE_FORWARD, relay = rs_piece_is_relay(plan->dst, p);
    const reshard_fragment_t *from =
        fwd ? &plan->dst->f[p->from_frag] : &plan->src->f[p->from_frag];
    bool read = (fwd && relay) || rs_box_dense(&p->box, from);
    return read && ((!fwd && relay) || rs_box_dense(&p->box, &plan->dst->f[p->to_frag]));
}

/* Move @p cur over @p len stream bytes. */
static void advance(const rs_exec_t *x, const rs_stream_t *s, rs_cursor_t *cur, uint64_t len)
{
    while (len > 0) {
        const rs_piece_t *p = &x->plan->pieces[s->idx[cur->piece]];
        uint64_t padded = rs_piece_stream_bytes(p);
        uint64_t take = padded - cur->off < len ? padded - cur->off : len;
        cur->off += take;
        len -= take;
        if (cur->off == padded) {
            cur->piece++;
            cur->off = 0;
        }
    }
}

static uint64_t round_len(const rs_xstream_t *x, int64_t round)
{
    if (round >= x->rounds)
        return 0;
    if (x->len)
        return x->len[round];
    return rs_rounds_len(&x->sched, rs_rounds_start(&x->sched, round));
}

/* A stage-0 piece received by a landing rank, the round that unpacks its last byte, and its
 * place in its stream (offset, the stream's schedule). */
typedef struct {
    int32_t rank, frag;
    int64_t piece, done;
    uint64_t off;
    rs_rounds_t sched;
} rs_landed_t;

static int cmp_landed(const void *pa, const void *pb)
{
    const rs_landed_t *a = pa, *b = pb;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->frag != b->frag)
        return a->frag < b->frag ? -1 : 1;
    return a->piece < b->piece ? -1 : a->piece > b->piece;
}

/* The stage-0 pieces received (through streams) by every rank with want[r]. */
static rs_landed_t *landed_pieces(const reshard_plan_t *plan, const bool *want, int64_t *n_out)
{
    int64_t n = 0, cap = 0;
    rs_landed_t *v = NULL;
    uint64_t off = 0;
    rs_rounds_t sched = {0};
    for (int64_t i = 0; i < plan->npieces; i++) {
        const rs_piece_t *p = &plan->pieces[i];
        if (p->stage != RS_STAGE_DIRECT)
            break; /* pieces are sorted by stage first */
        if (i == 0 || p->sender != plan->pieces[i - 1].sender ||
            p->receiver != plan->pieces[i - 1].receiver) {
            off = 0; /* a new stream: its bytes, up to the next pair */
            uint64_t a = plan->chunk_cap[p->sender], b = plan->chunk_cap[p->receiver];
            sched = (rs_rounds_t){0, a < b ? a : b, rs_plan_dense_rounds(plan)};
            for (int64_t j = i;
                 j < plan->npieces && plan->pieces[j].stage == RS_STAGE_DIRECT &&
                 plan->pieces[j].sender == p->sender && plan->pieces[j].receiver == p->receiver;
                 j++)
                sched.bytes += rs_piece_stream_bytes(&plan->pieces[j]);
        }
        if (p->sender == p->receiver || !want[p->receiver])
            continue;
        if (rs_grow(&v, &cap, n, sizeof *v) != 0) {
            free(v);
            return NULL;
        }
        v[n++] = (rs_landed_t){p->receiver, p->to_frag, i, rs_rounds_of(&sched, off + p->bytes - 1),
                               off,         sched};
        off += rs_piece_stream_bytes(p);
    }
    if (n > 1)
        qsort(v, (size_t)n, sizeof *v, cmp_landed);
    *n_out = n;
    return v ? v : malloc(1);
}

/* First round in which forward piece @p q may be packed on its landing rank:
 * two rounds after the last round unpacking a stage-0 piece that fills part
 * of its box (round k+2 is packed after round k is unpacked). When a single
 * landing fills it, box for box (the same bytes in the same order), that landing
 * goes to *@p same (else NULL): its prefixes are ready chunk by chunk. */
static int64_t forward_ready(const reshard_plan_t *plan, const rs_landed_t *l, int64_t nl,
                             const rs_piece_t *q, const rs_landed_t **same)
{
    int64_t lo = 0, hi = nl;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (l[mid].rank < q->sender || (l[mid].rank == q->sender && l[mid].frag < q->from_frag))
            lo = mid + 1;
        else
            hi = mid;
    }
    int64_t ready = 0, hits = 0;
    *same = NULL;
    for (int64_t i = lo; i < nl && l[i].rank == q->sender && l[i].frag == q->from_frag; i++) {
        reshard_box_t x;
        const reshard_box_t *b = &plan->pieces[l[i].piece].box;
        if (!rs_box_intersect(b, &q->box, &x))
            continue;
        hits++;
        *same = rs_box_cmp(b, &q->box) == 0 ? &l[i] : NULL;
        if (l[i].done + 2 > ready)
            ready = l[i].done + 2;
    }
    if (hits != 1)
        *same = NULL;
    return ready;
}

/* Stream bytes of forward piece @p q ready in round @p g before all of it is (see
 * forward_ready): the prefix that landing @p same unpacked by round g - 2. */
static uint64_t forward_prefix(const rs_piece_t *q, const rs_landed_t *same, int64_t g)
{
    if (!same || g < 1)
        return 0;
    uint64_t unpacked = rs_rounds_start(&same->sched, g - 1); /* by round g - 2 */
    if (unpacked <= same->off)
        return 0;
    uint64_t y = unpacked - same->off; /* a multiple of 8 */
    return y < q->bytes ? y : 0;       /* all of it: forward_ready's round */
}

/* Stream bytes a forward round of a dense plan moves (see the top) from the cursor
 * (*@p ci, *@p coff), with pieces [0, @p pi) of stream @p s ready and @p part bytes of piece
 * pi: every ready byte of direct pieces and up to a chunk of the others. Moves the cursor. */
static uint64_t forward_round(const reshard_plan_t *plan, const rs_stream_t *s, int64_t pi,
                              uint64_t part, int64_t *ci, uint64_t *coff)
{
    uint64_t budget = s->chunk, len = 0;
    while (*ci < s->n && *ci <= pi) {
        const rs_piece_t *p = &plan->pieces[s->idx[*ci]];
        uint64_t have = *ci < pi ? rs_piece_stream_bytes(p) : part;
        if (have <= *coff)
            break;
        bool direct = piece_direct(plan, p);
        uint64_t rest = have - *coff, take = direct || rest < budget ? rest : budget;
        budget -= direct ? 0 : take;
        len += take;
        *coff += take;
        if (take < rest || *ci == pi)
            break; /* out of budget, or at the ready end of a partly ready piece */
        ++*ci;
        *coff = 0;
    }
    return len;
}

/* Per-round lengths of forward stream @p x: in round k it moves up to a chunk
 * of the bytes whose pieces (a prefix of the stream) are all ready; a dense
 * plan's rounds move more (forward_round), partly ready pieces included. */
static int forward_schedule(const reshard_plan_t *plan, const rs_landed_t *l, int64_t nl,
                            rs_xstream_t *x)
{
    const rs_stream_t *s = x->s;
    int64_t *ready = malloc((size_t)(s->n ? s->n : 1) * sizeof *ready);
    const rs_landed_t **same = malloc((size_t)(s->n ? s->n : 1) * sizeof *same);
    if (!ready || !same) {
        free(ready);
        free(same);
        return -1;
    }
    int64_t last = 0;
    for (int64_t i = 0; i < s->n; i++) {
        ready[i] = forward_ready(plan, l, nl, &plan->pieces[s->idx[i]], &same[i]);
        if (i > 0 && ready[i] < ready[i - 1])
            ready[i] = ready[i - 1]; /* the stream moves in order */
        last = ready[i];
    }
    int64_t cap = last + (int64_t)((s->bytes + s->chunk - 1) / s->chunk) + 1;
    x->len = calloc((size_t)cap, sizeof *x->len);
    if (!x->len) {
        free(ready);
        free(same);
        return -1;
    }
    uint64_t pos = 0, avail = 0, coff = 0;
    int64_t pi = 0, g = 0, ci = 0; /* pieces [0, pi) are ready; the cursor is (ci, coff) */
    const bool multi = rs_plan_dense_rounds(plan);
    for (; pos < s->bytes; g++) {
        while (pi < s->n && ready[pi] <= g)
            avail += rs_piece_stream_bytes(&plan->pieces[s->idx[pi++]]);
        uint64_t len = avail - pos < s->chunk ? avail - pos : s->chunk;
        if (multi) {
            uint64_t part = pi < s->n ? forward_prefix(&plan->pieces[s->idx[pi]], same[pi], g) : 0;
            len = forward_round(plan, s, pi, part, &ci, &coff);
        }
        x->len[g] = len;
        pos += len;
    }
    x->rounds = g;
    free(ready);
    free(same);
    return 0;
}

/* The streams of this rank in loop order (receives of stage 0 then 1, sends
 * of stage 0 then 1; both ends of a pair post in the same order), their slot
 * places and forward schedules. Forwards to itself are left out (copied
 * after the loop). */
static reshard_status_t build_xstreams(rs_exec_t *x, rs_xstream_t **out, int32_t *n_out,
                                       uint64_t *slot_bytes)
{
    const rs_rank_plan_t *rp = x->rp;
    const reshard_plan_t *plan = x->plan;
    int32_t n = 0, max = 0;
    for (int s = 0; s < RS_NSTAGES; s++)
        max += rp->nrecv[s] + rp->nsend[s];
    rs_xstream_t *v = calloc((size_t)max + 1, sizeof *v);
    bool *want = calloc((size_t)plan->p.world_size, sizeof *want);
    reshard_status_t st = RESHARD_OK;
    if (!v || !want)
        st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory executing", rp->rank);
    uint64_t off = 0;
    bool fwd = false;
    for (int dir = 0; dir < 2 && st == RESHARD_OK; dir++)
        for (int s = 0; s < RS_NSTAGES; s++) {
            int32_t cnt = dir ? rp->nsend[s] : rp->nrecv[s];
            const rs_stream_t *ss = dir ? rp->send[s] : rp->recv[s];
            for (int32_t i = 0; i < cnt; i++) {
                if (ss[i].peer == rp->rank || ss[i].bytes == 0)
                    continue;
                rs_xstream_t *xs = &v[n++];
                xs->s = &ss[i];
                xs->send = dir == 1;
                xs->slot_off = off;
                off += ss[i].bytes < ss[i].chunk ? ss[i].bytes : ss[i].chunk;
                xs->sched = (rs_rounds_t){ss[i].bytes, ss[i].chunk, rs_plan_dense_rounds(plan)};
                xs->rounds = rs_rounds_count(&xs->sched);
                if (s == RS_STAGE_FORWARD) {
                    want[dir ? rp->rank : ss[i].peer] = true;
                    fwd = true;
                }
            }
        }
    int64_t nl = 0;
    rs_landed_t *l = NULL;
    if (st == RESHARD_OK && fwd && !(l = landed_pieces(plan, want, &nl)))
        st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory executing", rp->rank);
    for (int32_t i = 0; st == RESHARD_OK && i < n; i++)
        if (v[i].s->stage == RS_STAGE_FORWARD && forward_schedule(plan, l, nl, &v[i]) != 0)
            st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory executing", rp->rank);
    free(l);
    free(want);
    *out = v;
    *n_out = n;
    *slot_bytes = off;
    return st;
}

static void free_xstreams(rs_xstream_t *v, int32_t n)
{
    for (int32_t i = 0; v && i < n; i++)
        free(v[i].len);
    free(v);
}

/* Count @p payload bytes sent by this rank to @p peer, by link class. */
static void count_sent(rs_exec_t *x, int32_t peer, uint64_t payload)
{
    if (!x->stats)
        return;
    bool same = x->plan->p.domain_size > 1 &&
                rs_domain_of(&x->plan->p, peer) == rs_domain_of(&x->plan->p, x->rp->rank);
    *(same ? &x->stats->bytes_sent_nvlink : &x->stats->bytes_sent_network) += payload;
}

/* The next message of a round (see the top) at @p cur with @p left stream bytes of
 * the round to go: its stream bytes, and whether it moves straight between the user buffers
 * (a direct piece's data; its padding is not sent) or through the slot (a run of other
 * pieces). */
static uint64_t next_message(const rs_exec_t *x, const rs_stream_t *s, rs_cursor_t cur,
                             uint64_t left, bool *direct)
{
    const rs_piece_t *p = &x->plan->pieces[s->idx[cur.piece]];
    *direct = piece_direct(x->plan, p);
    if (*direct) {
        uint64_t rest = rs_piece_stream_bytes(p) - cur.off;
        return rest < left ? rest : left;
    }
    uint64_t run = 0;
    while (run < left) {
        p = &x->plan->pieces[s->idx[cur.piece]];
        if (piece_direct(x->plan, p))
            break;
        uint64_t rest = rs_piece_stream_bytes(p) - cur.off;
        uint64_t take = rest < left - run ? rest : left - run;
        run += take;
        advance(x, s, &cur, take);
    }
    return run;
}

/* The data bytes (not padding) of the @p len stream bytes of a direct message at @p cur. */
static uint64_t message_data(const rs_exec_t *x, const rs_stream_t *s, const rs_cursor_t *cur,
                             uint64_t len)
{
    const rs_piece_t *p = &x->plan->pieces[s->idx[cur->piece]];
    uint64_t end = cur->off + len < p->bytes ? cur->off + len : p->bytes;
    return end > cur->off ? end - cur->off : 0;
}

/* Post stream @p xs's @p len bytes of a round as its messages (next_message),
 * packing what goes through the slot at @p stage_buf. */
static reshard_status_t post_messages(rs_exec_t *x, rs_xstream_t *xs, int slot, uint8_t *stage_buf,
                                      uint64_t len)
{
    const reshard_transport_ops_t *ops = x->comm->ops;
    rs_cursor_t *cur = xs->send ? &xs->cur : &xs->pcur;
    reshard_status_t st = RESHARD_OK;
    uint64_t staged = 0;
    while (len > 0 && st == RESHARD_OK) {
        bool direct;
        uint64_t n = next_message(x, xs->s, *cur, len, &direct);
        uint8_t *buf = direct ? piece_ptr(x, xs, cur) : stage_buf + staged;
        uint64_t bytes = direct ? message_data(x, xs->s, cur, n) : n, payload = direct ? bytes : 0;
        if (xs->send && !direct && x->failed == RESHARD_OK) {
            const rs_cursor_t at = *cur;
            reshard_status_t ls = move_chunk(x, xs->s, cur, buf, n, true, &payload);
            if (ls != RESHARD_OK) {
                *cur = at;
                note_failure(x, ls); /* post the rest of the schedule without data */
            }
        }
        if (!xs->send || direct || x->failed != RESHARD_OK)
            advance(x, xs->s, cur, n); /* nothing packed (or a failed pack): move on */
        if (x->failed != RESHARD_OK)
            payload = 0;
        staged += direct ? 0 : n;
        len -= n;
        if (bytes == 0)
            continue;
        st = xs->send ? ops->post_send(x->comm, slot, xs->s->peer, buf, bytes)
                      : ops->post_recv(x->comm, slot, xs->s->peer, buf, bytes);
        if (st == RESHARD_OK && xs->send)
            count_sent(x, xs->s->peer, payload);
    }
    return st;
}

/* Unpack what stream @p xs received in its messages of a round (@p len bytes). */
static void finish_messages(rs_exec_t *x, rs_xstream_t *xs, uint8_t *stage_buf, uint64_t len)
{
    uint64_t staged = 0;
    while (len > 0) {
        bool direct;
        uint64_t n = next_message(x, xs->s, xs->cur, len, &direct), payload = 0;
        if (direct) {
            payload = message_data(x, xs->s, &xs->cur, n);
            advance(x, xs->s, &xs->cur, n);
        } else if (x->failed == RESHARD_OK) {
            const rs_cursor_t at = xs->cur;
            reshard_status_t ls =
                move_chunk(x, xs->s, &xs->cur, stage_buf + staged, n, false, &payload);
            if (ls != RESHARD_OK) { /* an unpack step: keep the rounds going, without data */
                xs->cur = at;
                advance(x, xs->s, &xs->cur, n);
                note_failure(x, ls);
            }
        } else {
            advance(x, xs->s, &xs->cur, n);
        }
        staged += direct ? 0 : n;
        len -= n;
        if (x->stats)
            x->stats->bytes_recv += payload;
    }
}

/* Pack and post round @p k into slot k % 2. */
static reshard_status_t post_round(rs_exec_t *x, rs_xstream_t *v, int32_t n, int64_t k,
                                   uint64_t slot_bytes)
{
    const reshard_transport_ops_t *ops = x->comm->ops;
    int slot = (int)(k & 1);
    uint8_t *base = x->staging + (size_t)slot * slot_bytes;
    reshard_status_t st = ops->round_begin(x->comm, slot);
    for (int32_t i = 0; st == RESHARD_OK && i < n; i++) {
        rs_xstream_t *xs = &v[i];
        uint64_t len = round_len(xs, k);
        if (!len)
            continue;
        if (rs_plan_dense_rounds(x->plan)) {
            st = post_messages(x, xs, slot, base + xs->slot_off, len);
            continue;
        }
        uint8_t *direct = direct_ptr(x, xs, xs->send ? &xs->cur : &xs->pcur, len);
        xs->direct[slot] = direct != NULL;
        if (!xs->send) {
            advance(x, xs->s, &xs->pcur, len);
            /* a direct receive moves the cursor at once: later rounds follow it */
            st = ops->post_recv(x->comm, slot, xs->s->peer, direct ? direct : base + xs->slot_off,
                                len);
            continue;
        }
        uint64_t payload = 0;
        bool moved = false;
        if (x->failed == RESHARD_OK) {
            reshard_status_t ls = RESHARD_OK;
            if (direct && xs->cur.off == 0 && x->qb)
                ls = rs_quant_piece(x->plan, x->comm, x->qb,
                                    &x->plan->pieces[xs->s->idx[xs->cur.piece]]);
            if (ls == RESHARD_OK && !direct) {
                const rs_cursor_t at = xs->cur;
                ls = move_chunk(x, xs->s, &xs->cur, base + xs->slot_off, len, true, &payload);
                moved = ls == RESHARD_OK;
                if (!moved)
                    xs->cur = at;
            }
            if (ls != RESHARD_OK)
                note_failure(x, ls); /* post the rest of the schedule without data */
            else if (direct)
                payload = len;
        }
        if (!moved) {
            if (x->failed != RESHARD_OK)
                payload = 0;
            advance(x, xs->s, &xs->cur, len);
        }
        st = ops->post_send(x->comm, slot, xs->s->peer, direct ? direct : base + xs->slot_off, len);
        if (st == RESHARD_OK)
            count_sent(x, xs->s->peer, payload);
    }
    if (st == RESHARD_OK)
        st = ops->round_end(x->comm, slot);
    return st;
}

/* Wait for round @p k and unpack what it received. */
static reshard_status_t finish_round(rs_exec_t *x, rs_xstream_t *v, int32_t n, int64_t k,
                                     uint64_t slot_bytes)
{
    int slot = (int)(k & 1);
    uint8_t *base = x->staging + (size_t)slot * slot_bytes;
    reshard_status_t st = x->comm->ops->round_wait(x->comm, slot, x->plan->p.timeout_s);
    for (int32_t i = 0; st == RESHARD_OK && x->failed == RESHARD_OK && i < n; i++) {
        rs_xstream_t *xs = &v[i];
        uint64_t len = round_len(xs, k);
        if (xs->send || !len)
            continue;
        if (rs_plan_dense_rounds(x->plan)) {
            finish_messages(x, xs, base + xs->slot_off, len);
            continue;
        }
        uint64_t payload = 0;
        if (xs->direct[slot]) {
            payload = len;
            advance(x, xs->s, &xs->cur, len);
        } else {
            st = move_chunk(x, xs->s, &xs->cur, base + xs->slot_off, len, false, &payload);
        }
        if (st != RESHARD_OK) { /* an unpack step: keep the rounds going, without data */
            note_failure(x, st);
            st = RESHARD_OK;
        }
        if (x->stats)
            x->stats->bytes_recv += payload;
    }
    return st;
}

/* Forwards from one destination fragment of this rank to another (tied
 * weights, replicas inside one rank): local copies once everything landed. */
static reshard_status_t self_forwards(rs_exec_t *x)
{
    const rs_rank_plan_t *rp = x->rp;
    reshard_status_t st = RESHARD_OK;
    for (int32_t i = 0; i < rp->nsend[RS_STAGE_FORWARD]; i++) {
        const rs_stream_t *s = &rp->send[RS_STAGE_FORWARD][i];
        if (s->peer != rp->rank)
            continue;
        for (int64_t j = 0; st == RESHARD_OK && j < s->n; j++) {
            const rs_piece_t *p = &x->plan->pieces[s->idx[j]];
            reshard_fragment_t tmp, tmp2;
            void *d, *sp;
            const reshard_fragment_t *sf = piece_place(x, p, true, &tmp, &sp);
            const reshard_fragment_t *df = piece_place(x, p, false, &tmp2, &d);
            if (x->comm->ops->local_copy)
                st = x->comm->ops->local_copy(x->comm, d, df, sp, sf, &p->box, p->elem_size);
            else
                rs_copy_box_cpu(d, df, sp, sf, &p->box, p->elem_size);
            if (x->stats)
                x->stats->bytes_local += p->bytes;
        }
    }
    return st;
}

/* A relayed landing of this rank, looked up by (fragment, box) by its forwards. */
typedef struct {
    int32_t frag;
    reshard_box_t box;
    uint64_t off;
} rs_landing_t;

static int cmp_landing(const void *pa, const void *pb)
{
    const rs_landing_t *a = pa, *b = pb;
    if (a->frag != b->frag)
        return a->frag < b->frag ? -1 : 1;
    return rs_box_cmp(&a->box, &b->box);
}

static int cmp_relay(const void *pa, const void *pb)
{
    const rs_relay_t *a = pa, *b = pb;
    return a->piece < b->piece ? -1 : a->piece > b->piece;
}

static int relay_push(rs_exec_t *x, int64_t piece, uint64_t off, int64_t *cap)
{
    if (rs_grow(&x->rl, cap, x->nrl, sizeof *x->rl) != 0)
        return -1;
    x->rl[x->nrl++] = (rs_relay_t){piece, off};
    return 0;
}

/* Places in the relay scratch: each landing this rank relays gets the next
 * stream-padded slot; each forward of it reads the same slot. */
static reshard_status_t relay_setup(rs_exec_t *x)
{
    const reshard_plan_t *plan = x->plan;
    const rs_rank_plan_t *rp = x->rp;
    int64_t cap = 0, nl = 0, lcap = 0;
    rs_landing_t *l = NULL;
    uint64_t off = 0;
    int rc = 0;
    for (int32_t i = 0; rc == 0 && i < rp->nrecv[RS_STAGE_DIRECT]; i++) {
        const rs_stream_t *s = &rp->recv[RS_STAGE_DIRECT][i];
        for (int64_t j = 0; rc == 0 && j < s->n; j++) {
            const rs_piece_t *p = &plan->pieces[s->idx[j]];
            if (!rs_piece_is_relay(plan->dst, p))
                continue;
            if (rs_grow(&l, &lcap, nl, sizeof *l) != 0) {
                rc = -1;
                break;
            }
            l[nl++] = (rs_landing_t){p->to_frag, p->box, off};
            rc = relay_push(x, s->idx[j], off, &cap);
            off += rs_piece_stream_bytes(p);
        }
    }
    if (nl > 1)
        qsort(l, (size_t)nl, sizeof *l, cmp_landing);
    for (int32_t i = 0; rc == 0 && i < rp->nsend[RS_STAGE_FORWARD]; i++) {
        const rs_stream_t *s = &rp->send[RS_STAGE_FORWARD][i];
        for (int64_t j = 0; rc == 0 && j < s->n; j++) {
            const rs_piece_t *p = &plan->pieces[s->idx[j]];
            if (!rs_piece_is_relay(plan->dst, p))
                continue;
            rs_landing_t key = {p->from_frag, p->box, 0};
            const rs_landing_t *hit =
                nl ? bsearch(&key, l, (size_t)nl, sizeof *l, cmp_landing) : NULL;
            if (!hit) {
                free(l);
                return rs_error(RESHARD_ERR_INVALID_ARG,
                                "rank %d: plan forwards a relayed box it never lands", rp->rank);
            }
            rc = relay_push(x, s->idx[j], hit->off, &cap);
        }
    }
    free(l);
    if (rc != 0)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory for relays", rp->rank);
    if (x->nrl > 1)
        qsort(x->rl, (size_t)x->nrl, sizeof *x->rl, cmp_relay);
    if (off == 0)
        return RESHARD_OK;
    if (x->dr) /* kept between executions: it holds the last version of what it relays */
        return rs_delta_relay(x->dr, x->comm, x->rp->rank, off, (void **)&x->relay);
    return x->comm->ops->alloc_staging(x->comm, off, (void **)&x->relay);
}

/* The streams of this rank's execution (build_xstreams), the relay scratch, and the
 * number of rounds: the most any stream needs. */
static reshard_status_t setup_streams(rs_exec_t *x, rs_xstream_t **v, int32_t *n,
                                      uint64_t *slot_bytes, int64_t *rounds)
{
    reshard_status_t st = build_xstreams(x, v, n, slot_bytes);
    if (st == RESHARD_OK)
        st = relay_setup(x);
    *rounds = 0;
    for (int32_t i = 0; i < *n; i++)
        if ((*v)[i].rounds > *rounds)
            *rounds = (*v)[i].rounds;
    return st;
}

/* Both stages in one round loop: forwards of what landed in round k go out
 * from round k+2 on, while later rounds are still arriving. */
static reshard_status_t run_rounds(rs_exec_t *x)
{
    rs_xstream_t *v = NULL;
    int32_t n = 0;
    uint64_t slot_bytes = 0;
    int64_t rounds = 0;
    reshard_status_t st = setup_streams(x, &v, &n, &slot_bytes, &rounds);
    if (st == RESHARD_OK && slot_bytes)
        st = x->comm->ops->alloc_staging(x->comm, 2 * slot_bytes, (void **)&x->staging);
    if (st == RESHARD_OK && rounds > 0)
        st = post_round(x, v, n, 0, slot_bytes);
    for (int64_t k = 0; st == RESHARD_OK && k < rounds; k++) {
        if (k + 1 < rounds)
            st = post_round(x, v, n, k + 1, slot_bytes);
        if (st == RESHARD_OK)
            st = finish_round(x, v, n, k, slot_bytes);
    }
    if (st == RESHARD_OK && x->failed == RESHARD_OK)
        st = self_forwards(x);
    if (x->staging)
        x->comm->ops->free_staging(x->comm, x->staging);
    x->staging = NULL;
    if (x->relay && !x->dr)
        x->comm->ops->free_staging(x->comm, x->relay);
    x->relay = NULL;
    free(x->rl);
    x->rl = NULL;
    x->nrl = 0;
    free_xstreams(v, n);
    return st;
}

/* A 64-bit word in little-endian order (the checksum after a delta header). */
static void put_le64(uint8_t *out, uint64_t v)
{
    for (int b = 0; b < 8; b++)
        out[b] = (uint8_t)(v >> (8 * b));
}

static uint64_t get_le64(const uint8_t *in)
{
    uint64_t v = 0;
    for (int b = 0; b < 8; b++)
        v |= (uint64_t)in[b] << (8 * b);
    return v;
}

/* What a receiving rank tells each of its senders before a delta execution: the version
 * its destination (and relay) bytes hold, or -1 when they hold none (send dense). */
typedef struct {
    int64_t version;
    int64_t zero;
} rs_held_t;

/* The delta codec in the memory of the comm's buffers: the CPU codec on host memory, the
 * transport's delta operations (exec/delta_dev_ops.h) on device memory. */

/* Encode chunk @p cur against @p prev (NULL: dense) into @p enc. Host memory: its header
 * to @p hdr, its size to *@p size, the changed words to *@p changed; *@p body_in_prev: the
 * chunk is dense and its body was not copied to @p enc: it is the @p len bytes at @p prev.
 * Device memory: enqueued only (the header at @p enc once the stream has run, the changed
 * count to the 8 bytes at @p changed_dev); run_rounds_delta reads a round's headers and
 * counts back in one copy after the header exchange. */
static reshard_status_t delta_encode(rs_exec_t *x, const uint8_t *cur, uint8_t *prev, uint64_t len,
                                     uint32_t word, uint8_t *enc, uint8_t *hdr, uint64_t *size,
                                     uint64_t *changed, void *changed_dev, bool *body_in_prev)
{
    const rs_delta_dev_ops_t *dev = x->comm->delta_dev;
    *body_in_prev = false;
    if (dev)
        return dev->encode(x->comm, cur, prev, len, word, enc, changed_dev);
    /* host memory: a dense body is sent from the snapshot, not copied */
    *size = rs_delta_encode_keep(cur, prev, len, word, enc, changed, prev ? body_in_prev : NULL);
    memcpy(hdr, enc, RS_DELTA_HEADER_BYTES);
    return RESHARD_OK;
}

/* Copy @p len bytes between two places of the comm's memory. */
static reshard_status_t delta_copy(rs_exec_t *x, void *dst, const void *src, uint64_t len)
{
    if (!x->comm->delta_dev) {
        memcpy(dst, src, len);
        return RESHARD_OK;
    }
    return x->comm->delta_dev->copy(x->comm, dst, src, len, RS_DD_D2D);
}

/* The verification of received chunk @p k of stream @p xs (starting at @p at, @p len
 * bytes): its result hashes to @p hash; the sender's hash is in its message @p msg. */
static reshard_status_t delta_verify(rs_exec_t *x, const rs_xstream_t *xs, const uint8_t *msg,
                                     uint64_t hash, rs_cursor_t at, uint64_t len, int64_t k)
{
    if (hash == get_le64(msg + RS_DELTA_HEADER_BYTES))
        return RESHARD_OK;
    return rs_delta_checksum_error(x->plan, xs->s, at.piece, at.off, len, x->rp->rank, k);
}

/* The name of received chunk @p k of stream @p xs in errors. */
static void delta_chunk_name(char *what, size_t size, const rs_exec_t *x, const rs_xstream_t *xs,
                             int64_t k)
{
    snprintf(what, size, "rank %d: chunk %lld from rank %d", x->rp->rank, (long long)k,
             xs->s->peer);
}

/* What a sent chunk adds to the execution's delta counts and stats: its stream bytes
 * @p len, the encoded chunk's header @p msg and size @p enc_len, @p changed words of
 * @p word bytes. */
static void count_sent_delta(rs_exec_t *x, const rs_xstream_t *xs, const uint8_t *msg,
                             uint64_t enc_len, uint64_t hash_bytes, uint64_t len, uint64_t changed,
                             uint32_t word)
{
    reshard_delta_info_t *li = &x->dr->last;
    li->stream_bytes += len;
    li->wire_bytes += enc_len + hash_bytes;
    li->changed_bytes += changed * word;
    li->chunks[msg[0] < RS_DELTA_NKINDS ? msg[0] : 0]++;
    count_sent(x, xs->s->peer, enc_len + hash_bytes);
}

/* Delta mode (docs/delta.md): the rounds of run_rounds, each in two exchanges so that
 * every message has a size both ends know: the 16-byte headers of the encoded chunks
 * (slot 0; in checksum mode followed by the 8-byte hash of the chunk's new bytes), then
 * their bodies (slot 1, the sizes the headers give; none when empty).
 * A round is waited for before the next is posted: the forward schedule (a landed piece
 * is forwarded two rounds after it is unpacked) holds as it is. Before the rounds, each
 * receiver tells each of its senders the version it holds (one exchange). */
static reshard_status_t run_rounds_delta(rs_exec_t *x)
{
    const reshard_transport_ops_t *ops = x->comm->ops;
    rs_delta_rank_t *dr = x->dr;
    double timeout = x->plan->p.timeout_s;
    int32_t me = x->rp->rank;
    rs_xstream_t *v = NULL;
    int32_t n = 0;
    uint64_t slot_bytes = 0;
    int64_t rounds = 0;
    reshard_status_t st = setup_streams(x, &v, &n, &slot_bytes, &rounds);
    uint64_t dense_max = 0, snap_total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint64_t c = v[i].s->bytes < v[i].s->chunk ? v[i].s->bytes : v[i].s->chunk;
        if (c > dense_max)
            dense_max = c;
    }
    rs_held_t *held = calloc((size_t)n + 1, sizeof *held);
    uint64_t *pos = calloc((size_t)n + 1, sizeof *pos), *snap_off = calloc((size_t)n + 1, 8);
    uint64_t *enc_len = calloc((size_t)n + 1, sizeof *enc_len);
    uint8_t **body_at = calloc((size_t)n + 1, sizeof *body_at); /* a dense body's place */
    bool *use_delta = calloc((size_t)n + 1, sizeof *use_delta);
    /* device memory: the chunks of this round whose results are read after the round's copy
     * to the host (a sent chunk's header and changed count, a received chunk's apply record) */
    bool *pending = calloc((size_t)n + 1, sizeof *pending);
    uint32_t *word_of = calloc((size_t)n + 1, sizeof *word_of);
    rs_delta_header_t *hdr_of = calloc((size_t)n + 1, sizeof *hdr_of);
    rs_cursor_t *at_of = calloc((size_t)n + 1, sizeof *at_of);
    /* The header message of each stream's chunk, MSG apart: the header, then (checksum
     * mode) the hash of the chunk's new bytes, little-endian. Then, on device memory, each
     * chunk's count of changed words: a round's messages and counts are copied back to the
     * host in one copy. */
    enum { MSG = RS_DELTA_HEADER_BYTES + RS_DELTA_HASH_BYTES };
    const bool ck = x->plan->p.delta_checksum;
    const uint64_t hash_bytes = ck ? RS_DELTA_HASH_BYTES : 0; /* counted as wire bytes */
    const uint64_t msg_bytes = RS_DELTA_HEADER_BYTES + hash_bytes;
    const uint64_t hmsg_bytes = ((uint64_t)n + 1) * (MSG + sizeof(uint64_t));
    uint8_t *hmsg = calloc(1, hmsg_bytes);
    if (st == RESHARD_OK && (!held || !pos || !snap_off || !enc_len || !body_at || !use_delta ||
                             !pending || !word_of || !hdr_of || !at_of || !hmsg))
        st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory executing", me);
    for (int32_t i = 0; i < n; i++)
        if (v[i].send) {
            snap_off[i] = snap_total;
            snap_total += v[i].s->bytes;
        }
    if (st == RESHARD_OK && snap_total != dr->snap_bytes)
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "rank %d: delta snapshot of %llu bytes, the streams send %llu", me,
                      (unsigned long long)dr->snap_bytes, (unsigned long long)snap_total);
    /* Device memory: the messages of the version exchange, the header messages and the
     * changed counts live in staging too. */
    const rs_delta_dev_ops_t *dev = x->comm->delta_dev;
    uint64_t enc_bytes = slot_bytes + (uint64_t)n * RS_DELTA_HEADER_BYTES;
    dense_max = (dense_max + 7) & ~(uint64_t)7;
    uint64_t held_bytes = dev ? ((uint64_t)n + 1) * sizeof(rs_held_t) : 0;
    const uint64_t hd_bytes = dev ? hmsg_bytes : 0;
    /* device memory: the apply records of a round, 8-byte aligned (64 bytes of room) */
    const uint64_t rec_bytes = dev ? (dev->apply_record_bytes + 7) & ~(uint64_t)7 : 0;
    const uint64_t drec_bytes = dev ? (uint64_t)n * rec_bytes + 64 : 0;
    uint8_t *hrec = dev ? calloc((size_t)n + 1, rec_bytes) : NULL;
    if (st == RESHARD_OK && dev && !hrec)
        st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory executing", me);
    const uint64_t staging_bytes = enc_bytes + dense_max + held_bytes + hd_bytes + drec_bytes;
    if (st == RESHARD_OK && staging_bytes)
        st = ops->alloc_staging(x->comm, staging_bytes, (void **)&x->staging);
    uint8_t *dense = x->staging + enc_bytes;
    uint8_t *hd = hd_bytes ? dense + dense_max + held_bytes : NULL;
    uint8_t *drec =
        dev ? x->staging + ((enc_bytes + dense_max + held_bytes + hd_bytes + 63) & ~(uint64_t)63)
            : NULL;
    const uint8_t *hchanged = hmsg + (size_t)n * MSG; /* the counts' copy on the host */
    rs_held_t mine = {rs_delta_held_version(dr), 0};
    rs_held_t *held_at = dev ? (rs_held_t *)(void *)(dense + dense_max) : held;
    rs_held_t *mine_at = dev ? held_at + n : &mine;
    if (st == RESHARD_OK && dev && n > 0)
        st = dev->copy(x->comm, (void *)mine_at, &mine, sizeof mine, RS_DD_H2D);
    /* Who holds which version. */
    if (st == RESHARD_OK && n > 0) {
        st = ops->round_begin(x->comm, 0);
        for (int32_t i = 0; st == RESHARD_OK && i < n; i++)
            st = v[i].send ? ops->post_recv(x->comm, 0, v[i].s->peer, &held_at[i], sizeof held[i])
                           : ops->post_send(x->comm, 0, v[i].s->peer, mine_at, sizeof mine);
        if (st == RESHARD_OK)
            st = ops->round_end(x->comm, 0);
        if (st == RESHARD_OK)
            st = ops->round_wait(x->comm, 0, timeout);
        if (st == RESHARD_OK && dev)
            st = dev->copy(x->comm, held, held_at, (uint64_t)n * sizeof *held, RS_DD_D2H);
    }
    reshard_delta_info_t *li = &dr->last;
    memset(li, 0, sizeof *li);
    for (int32_t i = 0, j = 0; i < n; i++)
        if (v[i].send) {
            use_delta[i] = rs_delta_stream_ok(dr, j++) && held[i].version >= 0 &&
                           held[i].version == dr->version;
            li->dense_streams += !use_delta[i];
        }
    for (int64_t k = 0; st == RESHARD_OK && k < rounds; k++) {
        /* Encode each send chunk against the snapshot, which keeps its new bytes (before the
         * round's group opens). On device memory every step is enqueued on the stream, none
         * waited for: the message (header, hash) is assembled in device staging. */
        for (int32_t i = 0; st == RESHARD_OK && i < n; i++) {
            rs_xstream_t *xs = &v[i];
            uint64_t len = round_len(xs, k);
            uint8_t *enc = x->staging + xs->slot_off + (uint64_t)i * RS_DELTA_HEADER_BYTES;
            uint8_t *msg = hmsg + (size_t)i * MSG;
            uint8_t *dmsg = hd ? hd + (size_t)i * MSG : NULL;
            uint8_t *dchanged = hd ? hd + (size_t)n * MSG + (size_t)i * 8 : NULL;
            pending[i] = false;
            if (!len || !xs->send)
                continue;
            const rs_piece_t *p = &x->plan->pieces[xs->s->idx[xs->cur.piece]];
            uint32_t word = rs_delta_word(len, p->elem_size);
            uint64_t payload = 0, changed = 0;
            bool in_snap = false;
            body_at[i] = NULL;
            if (x->failed == RESHARD_OK) {
                const rs_cursor_t at = xs->cur;
                reshard_status_t ls =
                    move_chunk_at(x, xs->s, &xs->cur, dense, len, true, true, &payload);
                if (ls != RESHARD_OK) {
                    xs->cur = at;
                    note_failure(x, ls); /* post the rest of the schedule without data */
                }
            }
            const bool live = x->failed == RESHARD_OK;
            uint8_t *snap = dr->snap + snap_off[i] + pos[i];
            if (!live)
                advance(x, xs->s, &xs->cur, len);
            reshard_status_t ls =
                delta_encode(x, dense, live && use_delta[i] ? snap : NULL, len, word, enc, msg,
                             &enc_len[i], &changed, dchanged, &in_snap);
            if (live) {
                body_at[i] = in_snap ? snap : NULL;    /* sent from there in this round */
                if (ls == RESHARD_OK && !use_delta[i]) /* a delta encode updated it itself */
                    ls = delta_copy(x, snap, dense, len);
            }
            pos[i] += len;
            /* A dense chunk's result is its wire bytes, whatever the destination held before:
             * only a delta chunk's result is hashed (its field is 0 in a dense one). */
            if (dev) {
                if (ls == RESHARD_OK)
                    ls = dev->copy(x->comm, dmsg, enc, RS_DELTA_HEADER_BYTES, RS_DD_D2D);
                if (ls == RESHARD_OK && ck)
                    ls = dev->hash_msg(x->comm, dense, len, enc, dmsg + RS_DELTA_HEADER_BYTES);
                if (ls != RESHARD_OK) {
                    /* The chunk is lost (a failed launch): the refit fails on every rank at
                     * its agreement. The message says dense, so the pair stays in step. */
                    note_failure(x, ls);
                    uint8_t lost[MSG] = {0};
                    rs_delta_dense_header(lost, len, word);
                    st = dev->copy(x->comm, dmsg, lost, msg_bytes, RS_DD_H2D);
                }
                pending[i] = x->failed == RESHARD_OK;
                word_of[i] = word;
                continue;
            }
            st = ls; /* host memory: encode and copy cannot fail */
            if (ck)
                put_le64(msg + RS_DELTA_HEADER_BYTES,
                         msg[0] != RS_DELTA_DENSE ? rs_delta_hash(dense, len) : 0);
            if (live)
                count_sent_delta(x, xs, msg, enc_len[i], hash_bytes, len, changed, word);
        }
        /* Headers: fixed size. */
        if (st == RESHARD_OK)
            st = ops->round_begin(x->comm, 0);
        for (int32_t i = 0; st == RESHARD_OK && i < n; i++) {
            rs_xstream_t *xs = &v[i];
            uint8_t *at = (hd ? hd : hmsg) + (size_t)i * MSG;
            if (!round_len(xs, k))
                continue;
            st = xs->send ? ops->post_send(x->comm, 0, xs->s->peer, at, msg_bytes)
                          : ops->post_recv(x->comm, 0, xs->s->peer, at, msg_bytes);
        }
        if (st == RESHARD_OK)
            st = ops->round_end(x->comm, 0);
        if (st == RESHARD_OK)
            st = ops->round_wait(x->comm, 0, timeout);
        /* Device memory: every message of the round, sent and received, and the sent
         * chunks' changed counts back to the host in one copy. */
        if (st == RESHARD_OK && dev)
            st = dev->copy(x->comm, hmsg, hd, (uint64_t)n * (MSG + 8), RS_DD_D2H);
        for (int32_t i = 0; st == RESHARD_OK && dev && i < n; i++) {
            rs_xstream_t *xs = &v[i];
            const uint8_t *msg = hmsg + (size_t)i * MSG;
            uint64_t len = round_len(xs, k);
            if (!xs->send || !len)
                continue;
            enc_len[i] = RS_DELTA_HEADER_BYTES + get_le64(msg + 8);
            if (pending[i])
                count_sent_delta(x, xs, msg, enc_len[i], hash_bytes, len,
                                 get_le64(hchanged + (size_t)i * 8), word_of[i]);
        }
        /* The received headers, checked: they give the bodies' sizes. */
        for (int32_t i = 0; st == RESHARD_OK && i < n; i++) {
            rs_xstream_t *xs = &v[i];
            uint64_t len = round_len(xs, k);
            const uint8_t *msg = hmsg + (size_t)i * MSG;
            if (xs->send || !len)
                continue;
            char what[96];
            delta_chunk_name(what, sizeof what, x, xs, k);
            if (!dev) /* the CPU codec reads the encoded chunk whole */
                memcpy(x->staging + xs->slot_off + (uint64_t)i * RS_DELTA_HEADER_BYTES, msg,
                       RS_DELTA_HEADER_BYTES);
            rs_delta_header_t *h = &hdr_of[i]; /* kept for the apply */
            memset(h, 0, sizeof *h);
            if (rs_delta_header(msg, len, h, what) != RESHARD_OK)
                /* the sizes of the rest are unknown: the pair cannot stay in step */
                st = rs_error(RESHARD_ERR_TRANSPORT, "%s", reshard_last_error());
            enc_len[i] = RS_DELTA_HEADER_BYTES + h->body;
        }
        /* Bodies. */
        if (st == RESHARD_OK)
            st = ops->round_begin(x->comm, 1);
        for (int32_t i = 0; st == RESHARD_OK && i < n; i++) {
            rs_xstream_t *xs = &v[i];
            uint64_t len = round_len(xs, k);
            uint8_t *enc = x->staging + xs->slot_off + (uint64_t)i * RS_DELTA_HEADER_BYTES;
            if (!len)
                continue;
            uint8_t *body = xs->send && body_at[i] ? body_at[i] : enc + RS_DELTA_HEADER_BYTES;
            if (enc_len[i] > RS_DELTA_HEADER_BYTES)
                st = xs->send ? ops->post_send(x->comm, 1, xs->s->peer, body,
                                               enc_len[i] - RS_DELTA_HEADER_BYTES)
                              : ops->post_recv(x->comm, 1, xs->s->peer, enc + RS_DELTA_HEADER_BYTES,
                                               enc_len[i] - RS_DELTA_HEADER_BYTES);
        }
        if (st == RESHARD_OK)
            st = ops->round_end(x->comm, 1);
        if (st == RESHARD_OK)
            st = ops->round_wait(x->comm, 1, timeout);
        /* Apply: the chunk's previous bytes from where they live, the changes, back. On host
         * memory a chunk is verified before it is written back; on device memory every step
         * is enqueued, and the round's apply records come back in one copy after the last:
         * a chunk that fails is written, and fails the refit on every rank (its destination
         * torn, so the next refit sends it dense). */
        bool records = false;
        for (int32_t i = 0; st == RESHARD_OK && i < n; i++) {
            rs_xstream_t *xs = &v[i];
            uint64_t len = round_len(xs, k);
            uint8_t *enc = x->staging + xs->slot_off + (uint64_t)i * RS_DELTA_HEADER_BYTES;
            pending[i] = false;
            if (xs->send || !len)
                continue;
            if (x->stats)
                x->stats->bytes_recv += enc_len[i] + hash_bytes;
            if (x->failed != RESHARD_OK) {
                advance(x, xs->s, &xs->cur, len);
                continue;
            }
            char what[96];
            delta_chunk_name(what, sizeof what, x, xs, k);
            const rs_delta_header_t *h = &hdr_of[i]; /* checked after the header exchange */
            uint64_t payload = 0;
            const rs_cursor_t at = xs->cur; /* the chunk's start */
            rs_cursor_t rd = at;
            const uint8_t *msg = hmsg + (size_t)i * MSG;
            reshard_status_t ls = RESHARD_OK;
            const bool check = ck && h->kind != RS_DELTA_DENSE; /* the sender's rule above */
            if (ls == RESHARD_OK && h->kind != RS_DELTA_DENSE)
                ls = move_chunk_at(x, xs->s, &rd, dense, len, false, true, &payload);
            if (ls == RESHARD_OK && dev) {
                ls = dev->apply(x->comm, enc, h, dense, len, check, drec + (size_t)i * rec_bytes);
            } else if (ls == RESHARD_OK) {
                ls = rs_delta_apply(enc, h, dense, len, what);
                if (ls == RESHARD_OK && check)
                    ls = delta_verify(x, xs, msg, rs_delta_hash(dense, len), at, len, k);
            }
            dr->wrote = true;
            if (ls == RESHARD_OK)
                ls = move_chunk_at(x, xs->s, &xs->cur, dense, len, false, false, &payload);
            if (ls != RESHARD_OK) {
                xs->cur = at;
                advance(x, xs->s, &xs->cur, len);
                note_failure(x, ls);
            } else if (dev) {
                pending[i] = records = true; /* its record to read */
                at_of[i] = at;
            }
        }
        if (st == RESHARD_OK && records)
            st = dev->copy(x->comm, hrec, drec, (uint64_t)n * rec_bytes, RS_DD_D2H);
        for (int32_t i = 0; st == RESHARD_OK && records && i < n; i++) {
            if (!pending[i])
                continue;
            const rs_delta_header_t *h = &hdr_of[i];
            const bool check = ck && h->kind != RS_DELTA_DENSE;
            const uint64_t len = round_len(&v[i], k);
            char what[96];
            delta_chunk_name(what, sizeof what, x, &v[i], k);
            uint64_t hash = 0;
            reshard_status_t ls =
                dev->applied(hrec + (size_t)i * rec_bytes, h, len, what, check ? &hash : NULL);
            if (ls == RESHARD_OK && check)
                ls = delta_verify(x, &v[i], hmsg + (size_t)i * MSG, hash, at_of[i], len, k);
            if (ls != RESHARD_OK)
                note_failure(x, ls);
        }
    }
    if (st == RESHARD_OK && x->failed == RESHARD_OK) {
        if (x->rp->nsend[RS_STAGE_FORWARD] > 0)
            dr->wrote = true;
        st = self_forwards(x);
    }
    if (x->staging)
        ops->free_staging(x->comm, x->staging);
    x->staging = NULL;
    x->relay = NULL; /* kept by the delta state */
    free(x->rl);
    x->rl = NULL;
    x->nrl = 0;
    free_xstreams(v, n);
    free(held);
    free(pos);
    free(snap_off);
    free(enc_len);
    free(body_at);
    free(use_delta);
    free(pending);
    free(word_of);
    free(hdr_of);
    free(at_of);
    free(hrec);
    free(hmsg);
    return st;
}

/* Bytes of this rank's snapshot under a delta plan: everything its streams send to
 * other ranks. */
static uint64_t delta_snapshot_bytes(const rs_rank_plan_t *rp)
{
    uint64_t b = 0;
    for (int s = 0; rp && s < RS_NSTAGES; s++)
        for (int32_t i = 0; i < rp->nsend[s]; i++)
            if (rp->send[s][i].peer != rp->rank)
                b += rp->send[s][i].bytes;
    return b;
}

static reshard_status_t execute(const reshard_plan_t *plan, reshard_comm_t *comm,
                                const reshard_buffer_t *src_bufs, int32_t n_src,
                                const reshard_buffer_t *dst_bufs, int32_t n_dst,
                                reshard_exec_stats_t *stats)
{
    int32_t rank = comm->rank;
    if (comm->size != plan->p.world_size ||
        (plan->p.my_rank != RESHARD_ALL_RANKS && plan->p.my_rank != rank))
        return rs_error(
            RESHARD_ERR_INVALID_ARG,
            "reshard_plan_execute: comm is rank %d of %d, the plan is for rank %d of %d", rank,
            comm->size, plan->p.my_rank, plan->p.world_size);
    if (plan->p.summary)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_execute: rank %d: the plan is a summary (counters only, "
                        "no pieces): plan with summary = 0 to execute",
                        rank);
    /* Quantized destinations: the caller's buffers plus this rank's scratch. */
    rs_qbufs_t qb = {0};
    reshard_status_t st = RESHARD_OK;
    if (rs_comm_two_threads(comm))
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "rank %d: two threads called this comm at once in an earlier call, so "
                      "since then a thread's plan on this rank may pair with another thread's "
                      "plan on its peers (equal layouts look alike): the comm refuses every "
                      "execution; destroy it and give each thread its own comm (a name= of its "
                      "own on a torch group)",
                      rank);
    if (st == RESHARD_OK)
        st = rs_identity_check_alone(plan, rank);
    if (st == RESHARD_OK && plan->quant) {
        st = rs_qbufs_setup(plan, comm, src_bufs, n_src, dst_bufs, n_dst, &qb);
        src_bufs = qb.src;
        n_src = qb.nsrc;
        dst_bufs = qb.dst;
        n_dst = qb.ndst;
    }
    if (st == RESHARD_OK)
        st = rs_layout_check_buffers(plan->src, rank, src_bufs, n_src, "source");
    if (st == RESHARD_OK)
        st = rs_layout_check_buffers(plan->dst, rank, dst_bufs, n_dst, "destination");
    if (st == RESHARD_OK)
        st = rs_layout_check_aliases(plan->dst, rank, dst_bufs, n_dst, "destination");
    if (st == RESHARD_OK)
        st = rs_layout_check_src_dst(plan->src, src_bufs, n_src, plan->dst, dst_bufs, n_dst, rank);
    if (st == RESHARD_OK)
        st = rs_peer_check_binding(plan, comm, src_bufs, n_src);
    if (st == RESHARD_OK)
        st = rs_zero_fill_check(plan, comm, rank);
    /* Delta plans: this rank's snapshot is allocated before anything moves. */
    rs_delta_rank_t *dr = plan->delta ? rs_delta_rank(plan->delta, rank) : NULL;
    rs_rank_plan_t *own = NULL;
    const rs_rank_plan_t *rp = plan->mine;
    if (st == RESHARD_OK && plan->delta && comm->ops->device_memory && !comm->delta_dev)
        st = rs_error(RESHARD_ERR_UNSUPPORTED,
                      "rank %d: delta refit on device memory needs the transport's delta kernels; "
                      "the %s transport has none: plan without delta",
                      rank, comm->ops->name);
    else if (st == RESHARD_OK && plan->delta && plan->p.delta_checksum && comm->delta_dev &&
             !comm->delta_dev->hash_msg)
        st = rs_error(RESHARD_ERR_UNSUPPORTED,
                      "rank %d: delta verification on device memory needs the transport's hash "
                      "kernel; the %s transport has none: plan with delta_checksum = 0",
                      rank, comm->ops->name);
    else if (st == RESHARD_OK && plan->delta && !dr)
        st = rs_error(RESHARD_ERR_RANK, "rank %d: the delta plan is not for this rank", rank);
    if (st == RESHARD_OK && dr && !rp) {
        st = rs_rank_plan_build(plan, rank, &own);
        rp = own;
    }
    if (st == RESHARD_OK && dr)
        st = rs_delta_prepare(dr, plan, comm, rank, delta_snapshot_bytes(rp), dst_bufs, n_dst);
    /* Preflight: every rank agrees that every plan exists, that all were made
     * from the same inputs and that its buffers are good before any byte
     * moves, so a bad plan or buffer anywhere leaves every destination untouched. */
    st = rs_agree_preflight(comm, st, plan, plan->p.timeout_s);
    if (st != RESHARD_OK) {
        rs_rank_plan_free(own);
        rs_qbufs_free(comm, &qb);
        return st;
    }
    if (!rp) {
        st = rs_rank_plan_build(plan, rank, &own);
        rp = own;
    }
    /* From here the destination may be written: this plan is its last writer. */
    uint64_t wstamp = rs_writers_stamp(plan, rank, dst_bufs, n_dst);
    if (dr)
        dr->wstamp = wstamp;
    if (stats)
        memset(stats, 0, sizeof *stats);
    rs_exec_t x = {.plan = plan,
                   .comm = comm,
                   .rp = rp,
                   .src_bufs = src_bufs,
                   .dst_bufs = dst_bufs,
                   .stats = stats,
                   .qb = plan->quant ? &qb : NULL,
                   .dr = dr,
                   .failed = RESHARD_OK};
    if (dr && rp && rp->nlocal > 0)
        dr->wrote = true;
    if (st == RESHARD_OK)
        st = rs_zero_fill(plan, comm, rank, dst_bufs);
    for (int64_t i = 0; st == RESHARD_OK && i < (rp ? rp->nlocal : 0); i++) {
        const rs_piece_t *p = &plan->pieces[rp->local[i]];
        const reshard_fragment_t *sf = &plan->src->f[p->from_frag], *df = &plan->dst->f[p->to_frag];
        void *d = dst_bufs[df->buffer].ptr;
        const void *s = src_bufs[sf->buffer].ptr;
        if (x.qb && (st = rs_quant_piece(plan, comm, x.qb, p)) != RESHARD_OK)
            break;
        if (comm->ops->local_copy)
            st = comm->ops->local_copy(comm, d, df, s, sf, &p->box, p->elem_size);
        else
            rs_copy_box_cpu(d, df, s, sf, &p->box, p->elem_size);
        if (stats)
            stats->bytes_local += p->bytes;
    }
    if (rp != NULL && st != RESHARD_OK) { /* a local copy failed: the peers still need the */
        note_failure(&x, st);             /* rounds, posted without data */
        st = RESHARD_OK;
    }
    /* Colocated reads: the owners' buffer tables, before the data rounds. */
    rs_peer_tables_t *pt = NULL;
    if (st == RESHARD_OK && plan->p.colocated) {
        reshard_status_t ps =
            rs_peer_exchange(plan, comm, rp, src_bufs, x.failed != RESHARD_OK, &pt);
        if (ps != RESHARD_OK && pt)
            note_failure(&x, ps); /* a refused probe: keep to the schedule */
        else if (ps != RESHARD_OK)
            st = ps;
    }
    if (st == RESHARD_OK)
        st = dr ? run_rounds_delta(&x) : run_rounds(&x);
    if (st == RESHARD_OK && x.failed == RESHARD_OK && pt) {
        uint64_t read = 0;
        reshard_status_t ps = rs_peer_read_all(plan, comm, rp, pt, dst_bufs, &read);
        if (ps != RESHARD_OK)
            note_failure(&x, ps);
        if (stats)
            stats->bytes_peer_read += read;
    }
    rs_peer_tables_free(pt);
    if (st == RESHARD_OK && x.failed == RESHARD_OK && plan->quant)
        st = rs_quant_post(plan, comm, &qb);
    if (x.failed != RESHARD_OK && st == RESHARD_OK) /* the first local failure is the outcome */
        st = rs_error(x.failed,
                      "%s (the rest of this rank's transfers were posted without data, so that "
                      "every rank ends the refit at the outcome agreement)",
                      x.why);
    else if (x.failed != RESHARD_OK) /* and the transport failed too: it could not drain */
        st = rs_error(x.failed, "%s", x.why);
    rs_rank_plan_free(own);
    if (plan->quant)
        rs_qbufs_free(comm, &qb);
    /* Another thread called this comm meanwhile: its peers may have paired this rank's
     * messages with that thread's plan, so the outcome fails on every rank. */
    if (st == RESHARD_OK && rs_comm_contended(comm))
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "rank %d: another thread called this comm during the execution (refused "
                      "there); a peer may have run that thread's plan in this one's place, so "
                      "the refit fails on every rank: give each thread its own comm",
                      rank);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", reshard_last_error());
    int64_t words[RESHARD_AGREE_WORDS], min_words[RESHARD_AGREE_WORDS];
    if (dr)
        rs_delta_words(dr, words);
    reshard_status_t agreed =
        comm->ops->finish(comm, st, dr ? words : NULL, dr ? min_words : NULL, plan->p.timeout_s);
    if (dr) /* the version commits only when every rank succeeded */
        rs_delta_commit(dr, st == RESHARD_OK ? agreed : st, min_words);
    /* This rank's wait on a peer failed: the agreement's message names the rank at the
     * root of it (the one that stalled or died, not this one that noticed). */
    if ((st == RESHARD_ERR_TIMEOUT || st == RESHARD_ERR_TRANSPORT) && agreed != RESHARD_OK &&
        reshard_last_error()[0] != '\0') {
        snprintf(msg, sizeof msg, "%s", reshard_last_error());
        return rs_error(st, "%s", msg);
    }
    if (st != RESHARD_OK)
        return rs_error(st, "%s", msg);
    if (agreed != RESHARD_OK && reshard_last_error()[0] == '\0')
        return rs_error(agreed, "rank %d: another rank failed the refit (%s)", rank,
                        reshard_status_string(agreed));
    return agreed;
}

reshard_status_t reshard_plan_execute(const reshard_plan_t *plan, reshard_comm_t *comm,
                                      const reshard_buffer_t *src_bufs, int32_t n_src,
                                      const reshard_buffer_t *dst_bufs, int32_t n_dst,
                                      reshard_exec_stats_t *stats)
{
    rs_error_clear();
    if (!plan || !comm || (n_src && !src_bufs) || (n_dst && !dst_bufs) || n_src < 0 || n_dst < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_plan_execute: bad argument");
    if (comm->broken)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: this comm ended an earlier execution with a timeout or a "
                        "transport error, so its peers' progress is unknown; destroy it (or "
                        "shrink it, reshard_elastic.h) and execute on a new one",
                        comm->rank);
    if (rs_comm_enter(comm, "reshard_plan_execute") != RESHARD_OK)
        return RESHARD_ERR_INVALID_ARG;
    reshard_status_t st = execute(plan, comm, src_bufs, n_src, dst_bufs, n_dst, stats);
    if (st == RESHARD_ERR_TIMEOUT || st == RESHARD_ERR_TRANSPORT) {
        comm->broken = true;
        /* its peers are lost: the plans made next (elastic) no longer count it, and it
         * pairs only with itself if executed again (plan/identity.c) */
        rs_identity_retire(plan, "an execution of it lost its peers (TIMEOUT or TRANSPORT)");
        if (reshard_last_error()[0] == '\0')
            rs_error(st, "rank %d: %s", comm->rank,
                     st == RESHARD_ERR_TIMEOUT ? "a peer did not answer within the plan's timeout"
                                               : "the transport failed");
    }
    rs_comm_leave(comm);
    return st;
}
