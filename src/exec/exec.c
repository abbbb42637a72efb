/*
 * reshard_plan_execute: the pipelined chunk loop over a transport.
 *
 * Per stage, round k moves the k-th chunk of every stream of this rank. Round
 * k+1 is packed and posted before round k is waited for and unpacked, so two
 * rounds are in flight and packing overlaps the transfer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/pack.h"
#include "plan/plan_internal.h"
#include "util/error.h"

/* Where a stream stands: next piece and the bytes of it already moved. */
typedef struct {
    int64_t piece;
    uint64_t off;
} rs_cursor_t;

typedef struct {
    const reshard_plan_t *plan;
    reshard_comm_t *comm;
    const rs_rank_plan_t *rp;
    const reshard_buffer_t *src_bufs, *dst_bufs;
    uint8_t *staging;
    reshard_exec_stats_t *stats;
} rs_exec_t;

static const reshard_fragment_t *from_frag(const rs_exec_t *x, const rs_piece_t *p)
{
    return p->stage == RS_STAGE_DIRECT ? &x->plan->src->f[p->from_frag]
                                       : &x->plan->dst->f[p->from_frag];
}

static const reshard_buffer_t *from_buf(const rs_exec_t *x, const rs_piece_t *p)
{
    const reshard_fragment_t *f = from_frag(x, p);
    return p->stage == RS_STAGE_DIRECT ? &x->src_bufs[f->buffer] : &x->dst_bufs[f->buffer];
}

/* Pack (send side) or unpack (receive side) @p len stream bytes at the cursor. */
static reshard_status_t move_chunk(const rs_exec_t *x, const rs_stream_t *s, rs_cursor_t *cur,
                                   uint8_t *stage_buf, uint64_t len, bool sending,
                                   uint64_t *payload)
{
    const rs_transport_ops_t *ops = x->comm->ops;
    uint64_t done = 0;
    while (done < len) {
        const rs_piece_t *p = &x->plan->pieces[s->idx[cur->piece]];
        uint64_t padded = rs_piece_stream_bytes(p);
        uint64_t take = padded - cur->off < len - done ? padded - cur->off : len - done;
        uint64_t data_end = cur->off + take < p->bytes ? cur->off + take : p->bytes;
        if (data_end > cur->off) {
            *payload += data_end - cur->off;
            const reshard_fragment_t *to = &x->plan->dst->f[p->to_frag];
            rs_span_t span = {sending ? from_frag(x, p) : to, &p->box,
                              (int64_t)(cur->off / p->elem_size),
                              (int64_t)((data_end - cur->off) / p->elem_size), p->elem_size};
            reshard_status_t st = RESHARD_OK;
            if (sending) {
                const void *buf = from_buf(x, p)->ptr;
                if (ops->pack)
                    st = ops->pack(x->comm, stage_buf + done, buf, &span);
                else
                    rs_pack_cpu(stage_buf + done, buf, &span);
            } else {
                void *buf = x->dst_bufs[to->buffer].ptr;
                if (ops->unpack)
                    st = ops->unpack(x->comm, buf, stage_buf + done, &span);
                else
                    rs_unpack_cpu(buf, stage_buf + done, &span);
            }
            if (st != RESHARD_OK)
                return st;
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

static uint64_t chunk_len(const rs_stream_t *s, int64_t round)
{
    uint64_t start = (uint64_t)round * s->chunk;
    if (start >= s->bytes)
        return 0;
    return s->bytes - start < s->chunk ? s->bytes - start : s->chunk;
}

static int64_t stream_rounds(const rs_stream_t *s)
{
    return (int64_t)((s->bytes + s->chunk - 1) / s->chunk);
}

/* Pack and post round @p k into slot k % 2. */
static reshard_status_t post_round(rs_exec_t *x, int stage, int64_t k, rs_cursor_t *scur,
                                   const uint64_t *soff, const uint64_t *roff)
{
    const rs_transport_ops_t *ops = x->comm->ops;
    const rs_rank_plan_t *rp = x->rp;
    int slot = (int)(k & 1);
    uint8_t *base = x->staging + (size_t)slot * (rp->staging_bytes / 2);
    reshard_status_t st = ops->round_begin(x->comm, slot);
    for (int32_t i = 0; st == RESHARD_OK && i < rp->nrecv[stage]; i++) {
        const rs_stream_t *s = &rp->recv[stage][i];
        uint64_t len = chunk_len(s, k);
        if (len)
            st = ops->post_recv(x->comm, slot, s->peer, base + roff[i], len);
    }
    for (int32_t i = 0; st == RESHARD_OK && i < rp->nsend[stage]; i++) {
        const rs_stream_t *s = &rp->send[stage][i];
        uint64_t len = chunk_len(s, k);
        if (!len)
            continue;
        uint64_t payload = 0;
        st = move_chunk(x, s, &scur[i], base + soff[i], len, true, &payload);
        if (st == RESHARD_OK)
            st = ops->post_send(x->comm, slot, s->peer, base + soff[i], len);
        if (st == RESHARD_OK && x->stats) {
            bool same = x->plan->p.domain_size > 1 && rs_domain_of(&x->plan->p, s->peer) ==
                                                          rs_domain_of(&x->plan->p, x->rp->rank);
            *(same ? &x->stats->bytes_sent_nvlink : &x->stats->bytes_sent_network) += payload;
        }
    }
    if (st == RESHARD_OK)
        st = ops->round_end(x->comm, slot);
    return st;
}

/* Wait for round @p k and unpack what it received. */
static reshard_status_t finish_round(rs_exec_t *x, int stage, int64_t k, rs_cursor_t *rcur,
                                     const uint64_t *roff)
{
    const rs_rank_plan_t *rp = x->rp;
    int slot = (int)(k & 1);
    uint8_t *base = x->staging + (size_t)slot * (rp->staging_bytes / 2);
    reshard_status_t st = x->comm->ops->round_wait(x->comm, slot, x->plan->p.timeout_s);
    for (int32_t i = 0; st == RESHARD_OK && i < rp->nrecv[stage]; i++) {
        const rs_stream_t *s = &rp->recv[stage][i];
        uint64_t len = chunk_len(s, k);
        if (!len)
            continue;
        uint64_t payload = 0;
        st = move_chunk(x, s, &rcur[i], base + roff[i], len, false, &payload);
        if (x->stats)
            x->stats->bytes_recv += payload;
    }
    return st;
}

static reshard_status_t run_stage(rs_exec_t *x, int stage)
{
    const rs_rank_plan_t *rp = x->rp;
    int32_t ns = rp->nsend[stage], nr = rp->nrecv[stage];
    if (ns + nr == 0)
        return RESHARD_OK;
    rs_cursor_t *scur = calloc((size_t)ns + 1, sizeof *scur);
    rs_cursor_t *rcur = calloc((size_t)nr + 1, sizeof *rcur);
    uint64_t *soff = calloc((size_t)ns + 1, sizeof *soff);
    uint64_t *roff = calloc((size_t)nr + 1, sizeof *roff);
    reshard_status_t st = RESHARD_OK;
    if (!scur || !rcur || !soff || !roff)
        st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory executing", rp->rank);
    /* each stream's fixed place in a slot: sends first, then receives */
    int64_t rounds = 0;
    uint64_t off = 0;
    for (int32_t i = 0; st == RESHARD_OK && i < ns; i++) {
        soff[i] = off;
        off += rp->send[stage][i].bytes < rp->send[stage][i].chunk ? rp->send[stage][i].bytes
                                                                   : rp->send[stage][i].chunk;
        if (stream_rounds(&rp->send[stage][i]) > rounds)
            rounds = stream_rounds(&rp->send[stage][i]);
    }
    for (int32_t i = 0; st == RESHARD_OK && i < nr; i++) {
        roff[i] = off;
        off += rp->recv[stage][i].bytes < rp->recv[stage][i].chunk ? rp->recv[stage][i].bytes
                                                                   : rp->recv[stage][i].chunk;
        if (stream_rounds(&rp->recv[stage][i]) > rounds)
            rounds = stream_rounds(&rp->recv[stage][i]);
    }
    if (st == RESHARD_OK && rounds > 0)
        st = post_round(x, stage, 0, scur, soff, roff);
    for (int64_t k = 0; st == RESHARD_OK && k < rounds; k++) {
        if (k + 1 < rounds)
            st = post_round(x, stage, k + 1, scur, soff, roff);
        if (st == RESHARD_OK)
            st = finish_round(x, stage, k, rcur, roff);
    }
    free(scur);
    free(rcur);
    free(soff);
    free(roff);
    return st;
}

/* Every buffer a fragment of this rank uses must be bound and large enough. */
static reshard_status_t check_buffers(const reshard_layout_t *l, int32_t rank,
                                      const reshard_buffer_t *bufs, int32_t n, const char *side)
{
    for (int64_t i = 0; i < l->n; i++) {
        const reshard_fragment_t *f = &l->f[i];
        if (f->rank != rank)
            continue;
        uint64_t need = rs_fragment_end_bytes(l, f);
        if (f->buffer >= n || !bufs[f->buffer].ptr || bufs[f->buffer].bytes < need) {
            char bs[256];
            return rs_error(RESHARD_ERR_BUFFER,
                            "tensor %s, rank %d, box %s: %s buffer %d is missing or under %llu "
                            "bytes",
                            l->tensors->t[f->tensor].name, rank, rs_box_str(&f->box, bs, sizeof bs),
                            side, f->buffer, (unsigned long long)need);
        }
    }
    return RESHARD_OK;
}

reshard_status_t reshard_plan_execute(const reshard_plan_t *plan, reshard_comm_t *comm,
                                      const reshard_buffer_t *src_bufs, int32_t n_src,
                                      const reshard_buffer_t *dst_bufs, int32_t n_dst,
                                      reshard_exec_stats_t *stats)
{
    rs_error_clear();
    if (!plan || !comm || (n_src && !src_bufs) || (n_dst && !dst_bufs) || n_src < 0 || n_dst < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_plan_execute: bad argument");
    int32_t rank = comm->rank;
    if (comm->size != plan->p.world_size ||
        (plan->p.my_rank != RESHARD_ALL_RANKS && plan->p.my_rank != rank))
        return rs_error(
            RESHARD_ERR_INVALID_ARG,
            "reshard_plan_execute: comm is rank %d of %d, the plan is for rank %d of %d", rank,
            comm->size, plan->p.my_rank, plan->p.world_size);
    reshard_status_t st = check_buffers(plan->src, rank, src_bufs, n_src, "source");
    if (st == RESHARD_OK)
        st = check_buffers(plan->dst, rank, dst_bufs, n_dst, "destination");
    /* Preflight: every rank agrees its buffers are good before any byte moves,
     * so a bad buffer anywhere leaves every destination untouched. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", reshard_last_error());
    reshard_status_t agreed = comm->ops->finish(comm, st, plan->p.timeout_s);
    if (st != RESHARD_OK)
        return rs_error(st, "%s", msg);
    if (agreed != RESHARD_OK)
        return reshard_last_error()[0] ? agreed
                                       : rs_error(agreed,
                                                  "rank %d: another rank rejected its buffers "
                                                  "(%s); nothing was sent",
                                                  rank, reshard_status_string(agreed));
    rs_rank_plan_t *own = NULL;
    const rs_rank_plan_t *rp = plan->mine;
    if (!rp) {
        st = rs_rank_plan_build(plan, rank, &own);
        rp = own;
    }
    if (stats)
        memset(stats, 0, sizeof *stats);
    rs_exec_t x = {plan, comm, rp, src_bufs, dst_bufs, NULL, stats};
    if (st == RESHARD_OK && rp->staging_bytes)
        st = comm->ops->alloc_staging(comm, rp->staging_bytes, (void **)&x.staging);
    for (int64_t i = 0; st == RESHARD_OK && i < (rp ? rp->nlocal : 0); i++) {
        const rs_piece_t *p = &plan->pieces[rp->local[i]];
        const reshard_fragment_t *sf = &plan->src->f[p->from_frag], *df = &plan->dst->f[p->to_frag];
        void *d = dst_bufs[df->buffer].ptr;
        const void *s = src_bufs[sf->buffer].ptr;
        if (comm->ops->local_copy)
            st = comm->ops->local_copy(comm, d, df, s, sf, &p->box, p->elem_size);
        else
            rs_copy_box_cpu(d, df, s, sf, &p->box, p->elem_size);
        if (stats)
            stats->bytes_local += p->bytes;
    }
    for (int stage = 0; st == RESHARD_OK && stage < RS_NSTAGES; stage++)
        st = run_stage(&x, stage);
    if (x.staging)
        comm->ops->free_staging(comm, x.staging);
    rs_rank_plan_free(own);
    snprintf(msg, sizeof msg, "%s", reshard_last_error());
    agreed = comm->ops->finish(comm, st, plan->p.timeout_s);
    if (st != RESHARD_OK)
        return rs_error(st, "%s", msg);
    if (agreed != RESHARD_OK && reshard_last_error()[0] == '\0')
        return rs_error(agreed, "rank %d: another rank failed the refit (%s)", rank,
                        reshard_status_string(agreed));
    return agreed;
}
