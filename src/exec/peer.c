/* Colocated refit: buffer tables, the binding rule and the one-sided reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/peer.h"
#include "plan/placement.h"
#include "transport/peer/peer_read.h"
#include "util/error.h"

/* The buffers of one (owner, reader) pair, as both ends derive them. */
typedef struct {
    int32_t peer;
    int64_t *buf; /* sorted unique source buffer ids */
    int64_t nbuf;
    uint8_t *msg; /* header + entries */
    uint64_t msg_bytes;
} rs_pair_t;

struct rs_peer_tables {
    rs_pair_t *out, *in; /* to the readers, from the owners */
    int32_t nout, nin;
};

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Pairs of pieces idx[0..n), grouped by the peer (receiver when @p owner). */
static int make_pairs(const reshard_plan_t *plan, const int64_t *idx, int64_t n, bool owner,
                      rs_pair_t **out, int32_t *nout)
{
    *out = NULL;
    *nout = 0;
    for (int64_t i = 0; i < n;) {
        const rs_piece_t *p = &plan->pieces[idx[i]];
        int32_t peer = owner ? p->receiver : p->sender;
        int64_t j = i;
        while (j < n &&
               (owner ? plan->pieces[idx[j]].receiver : plan->pieces[idx[j]].sender) == peer)
            j++;
        rs_pair_t *nv = realloc(*out, (size_t)(*nout + 1) * sizeof *nv);
        if (!nv)
            return -1;
        *out = nv;
        rs_pair_t *q = &nv[(*nout)++];
        memset(q, 0, sizeof *q);
        q->peer = peer;
        q->buf = malloc((size_t)(j - i) * sizeof *q->buf);
        if (!q->buf)
            return -1;
        for (int64_t k = i; k < j; k++)
            q->buf[q->nbuf++] = plan->src->f[plan->pieces[idx[k]].from_frag].buffer;
        qsort(q->buf, (size_t)q->nbuf, sizeof *q->buf, cmp_i64);
        int64_t w = 0;
        for (int64_t k = 0; k < q->nbuf; k++)
            if (w == 0 || q->buf[w - 1] != q->buf[k])
                q->buf[w++] = q->buf[k];
        q->nbuf = w;
        q->msg_bytes = sizeof(rs_peer_hdr_t) + (uint64_t)w * sizeof(rs_peer_buf_t);
        if (!(q->msg = calloc(1, q->msg_bytes)))
            return -1;
        i = j;
    }
    return 0;
}

static void free_pairs(rs_pair_t *v, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        free(v[i].buf);
        free(v[i].msg);
    }
    free(v);
}

void rs_peer_tables_free(rs_peer_tables_t *t)
{
    if (!t)
        return;
    free_pairs(t->out, t->nout);
    free_pairs(t->in, t->nin);
    free(t);
}

reshard_status_t rs_peer_check_binding(const reshard_plan_t *plan, const reshard_comm_t *comm,
                                       const reshard_buffer_t *src_bufs, int32_t n_src)
{
    if (!plan->p.colocated)
        return RESHARD_OK;
    int32_t rank = comm->rank;
    if (comm->ops->device_memory)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "rank %d: colocated reads of device memory over the %s transport are "
                        "not built in here: plan without colocated reads",
                        rank, comm->ops->name);
    reshard_plan_t *mut = (reshard_plan_t *)(uintptr_t)plan; /* the binding is the plan's state */
    for (int64_t i = 0; i < plan->npieces; i++) {
        const rs_piece_t *q = &plan->pieces[i];
        if (q->sender != rank || !rs_piece_is_peer_read(plan, q))
            continue;
        int32_t b = plan->src->f[q->from_frag].buffer;
        if (b >= n_src) /* rs_layout_check_buffers names it */
            continue;
        if (b >= mut->nbound) {
            int32_t n = b + 1;
            uint64_t *np = realloc(mut->bound_ptr, (size_t)n * sizeof *np);
            if (np)
                mut->bound_ptr = np;
            uint64_t *nb = np ? realloc(mut->bound_bytes, (size_t)n * sizeof *nb) : NULL;
            if (!np || !nb)
                return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory", rank);
            mut->bound_bytes = nb;
            for (int32_t k = mut->nbound; k < n; k++)
                mut->bound_bytes[k] = UINT64_MAX;
            mut->nbound = n;
        }
        uint64_t ptr = (uint64_t)(uintptr_t)src_bufs[b].ptr, bytes = src_bufs[b].bytes;
        if (mut->bound_bytes[b] == UINT64_MAX) {
            mut->bound_ptr[b] = ptr;
            mut->bound_bytes[b] = bytes;
        } else if (mut->bound_ptr[b] != ptr || mut->bound_bytes[b] != bytes) {
            return rs_error(RESHARD_ERR_BUFFER,
                            "rank %d: source buffer %d (%s) is bound to another allocation (%p, "
                            "%llu bytes) than at this colocated plan's first execution (%p, "
                            "%llu bytes): ranks of this host read it in place, so it must stay "
                            "bound for the plan's life; make a new plan to rebind it",
                            rank, b, src_bufs[b].name ? src_bufs[b].name : "unnamed",
                            src_bufs[b].ptr, (unsigned long long)bytes,
                            (void *)(uintptr_t)mut->bound_ptr[b],
                            (unsigned long long)mut->bound_bytes[b]);
        }
    }
    return RESHARD_OK;
}

reshard_status_t rs_peer_exchange(const reshard_plan_t *plan, reshard_comm_t *comm,
                                  const rs_rank_plan_t *rp, const reshard_buffer_t *src_bufs,
                                  bool send_only, rs_peer_tables_t **out)
{
    *out = NULL;
    if (!plan->p.colocated || !rp || (!rp->nreads && !rp->nexposed))
        return RESHARD_OK;
    int32_t me = rp->rank;
    rs_peer_tables_t *t = calloc(1, sizeof *t);
    if (!t || make_pairs(plan, rp->exposed, rp->nexposed, true, &t->out, &t->nout) != 0 ||
        make_pairs(plan, rp->reads, rp->nreads, false, &t->in, &t->nin) != 0) {
        rs_peer_tables_free(t);
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory for colocated tables", me);
    }
    if (t->nout)
        rs_peer_cpu_expose();
    for (int32_t i = 0; i < t->nout; i++) {
        rs_pair_t *q = &t->out[i];
        rs_peer_hdr_t *h = (rs_peer_hdr_t *)q->msg;
        rs_peer_buf_t *e = (rs_peer_buf_t *)(h + 1);
        *h = (rs_peer_hdr_t){RS_PEER_MAGIC, (int64_t)getpid(), (uint64_t)q->nbuf, 0};
        for (int64_t k = 0; k < q->nbuf; k++)
            e[k] =
                (rs_peer_buf_t){(uint64_t)q->buf[k], (uint64_t)(uintptr_t)src_bufs[q->buf[k]].ptr,
                                src_bufs[q->buf[k]].bytes, 0};
    }
    const reshard_transport_ops_t *ops = comm->ops;
    reshard_status_t st = ops->round_begin(comm, 0);
    for (int32_t i = 0; st == RESHARD_OK && i < t->nin; i++)
        st = ops->post_recv(comm, 0, t->in[i].peer, t->in[i].msg, t->in[i].msg_bytes);
    for (int32_t i = 0; st == RESHARD_OK && i < t->nout; i++)
        st = ops->post_send(comm, 0, t->out[i].peer, t->out[i].msg, t->out[i].msg_bytes);
    if (st == RESHARD_OK)
        st = ops->round_end(comm, 0);
    if (st == RESHARD_OK)
        st = ops->round_wait(comm, 0, plan->p.timeout_s);
    if (st != RESHARD_OK) { /* the transport failed: the endpoint will be broken */
        rs_peer_tables_free(t);
        return st;
    }
    *out = t;
    for (int32_t i = 0; st == RESHARD_OK && !send_only && i < t->nin; i++) {
        const rs_pair_t *q = &t->in[i];
        const rs_peer_hdr_t *h = (const rs_peer_hdr_t *)q->msg;
        const rs_peer_buf_t *e = (const rs_peer_buf_t *)(h + 1);
        if (h->magic != RS_PEER_MAGIC || h->nbuf != (uint64_t)q->nbuf)
            return rs_error(RESHARD_ERR_TRANSPORT,
                            "rank %d: rank %d's colocated buffer table is malformed (plans made "
                            "from different inputs?)",
                            me, q->peer);
        for (int64_t k = 0; st == RESHARD_OK && k < q->nbuf; k++) {
            unsigned char probe;
            if (e[k].buffer != (uint64_t)q->buf[k])
                return rs_error(RESHARD_ERR_TRANSPORT,
                                "rank %d: rank %d's colocated buffer table names buffer %llu "
                                "where %lld was expected",
                                me, q->peer, (unsigned long long)e[k].buffer, (long long)q->buf[k]);
            if (e[k].bytes)
                st = rs_peer_cpu_probe(h->pid, me, q->peer, q->buf[k], e[k].addr, &probe, 1);
        }
    }
    return st;
}

reshard_status_t rs_peer_read_all(const reshard_plan_t *plan, reshard_comm_t *comm,
                                  const rs_rank_plan_t *rp, const rs_peer_tables_t *t,
                                  const reshard_buffer_t *dst_bufs, uint64_t *bytes)
{
    (void)comm;
    *bytes = 0;
    if (!rp || !rp->nreads)
        return RESHARD_OK;
    int32_t pi = 0;
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; st == RESHARD_OK && i < rp->nreads; i++) {
        const rs_piece_t *p = &plan->pieces[rp->reads[i]];
        while (pi < t->nin && t->in[pi].peer != p->sender)
            pi++; /* reads come grouped by sender, in the pairs' order */
        if (pi == t->nin)
            return rs_error(RESHARD_ERR_INVALID_ARG, "rank %d: no buffer table from rank %d",
                            rp->rank, p->sender);
        const rs_pair_t *q = &t->in[pi];
        const rs_peer_hdr_t *h = (const rs_peer_hdr_t *)q->msg;
        const rs_peer_buf_t *e = (const rs_peer_buf_t *)(h + 1);
        const reshard_fragment_t *sf = &plan->src->f[p->from_frag], *df = &plan->dst->f[p->to_frag];
        int64_t lo = 0, hi = q->nbuf;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (q->buf[mid] < sf->buffer)
                lo = mid + 1;
            else
                hi = mid;
        }
        st = rs_peer_cpu_read_box(
            h->pid, rp->rank, p->sender, plan->dst->tensors->t[p->tensor].name, sf->buffer,
            dst_bufs[df->buffer].ptr, df, e[lo].addr, e[lo].bytes, sf, &p->box, p->elem_size);
        if (st == RESHARD_OK)
            *bytes += p->bytes;
    }
    return st;
}
