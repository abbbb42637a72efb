/* Colocated refit: buffer tables, the binding rule and the one-sided reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/pack.h"
#include "exec/peer.h"
#include "layout/layout_internal.h"
#include "plan/placement.h"
#include "transport/peer/peer_read.h"
#include "util/error.h"
#ifdef RESHARD_HAVE_NCCL
#include "transport/nccl/peer_ipc.h"
#endif

/* The buffers of one (owner, reader) pair, as both ends derive them. */
typedef struct {
    int32_t peer;
    int64_t *buf; /* sorted unique source buffer ids */
    int64_t nbuf;
    uint8_t *msg; /* header + entries */
    uint64_t msg_bytes;
    int64_t *vidx; /* reader: per buffer, its view in the plan's rs_peer_maps */
} rs_pair_t;

struct rs_peer_tables {
    rs_pair_t *out, *in; /* to the readers, from the owners */
    int32_t nout, nin;
};

/* A reader's view of one owner's buffer, kept for the plan's life: the mapping (SHM) or
 * the opened handle (IPC) of its allocation, shared by the buffers of one allocation
 * (only the first of them, @c owns, unmaps or closes it). */
typedef struct {
    int32_t peer;
    int64_t buffer;
    uint32_t kind;
    uint64_t alloc_id, alloc_bytes;
    unsigned char handle[sizeof(((rs_peer_buf_t *)0)->handle)];
    uint8_t *base; /* the allocation's base, here */
    bool owns;
} rs_peer_view_t;

/* The per-plan state of colocated reads (reshard_plan_t.peer_maps): what this rank
 * exports per source buffer (recorded at the first execution, checked at every one) and
 * the views it opened as a reader. */
struct rs_peer_maps {
    rs_peer_buf_t *own; /* by buffer id; kind UINT32_MAX = not bound */
    int32_t nown;
    rs_peer_view_t *view;
    int64_t nview;
};

void rs_peer_maps_free(struct rs_peer_maps *m)
{
    if (!m)
        return;
    for (int64_t i = 0; i < m->nview; i++) {
        rs_peer_view_t *v = &m->view[i];
        if (!v->owns)
            continue;
        if (v->kind == RS_PEER_SHM)
            rs_peer_shm_unmap(v->base, v->alloc_bytes);
#ifdef RESHARD_HAVE_NCCL
        else if (v->kind == RS_PEER_IPC)
            rs_peer_ipc_close(v->base);
#endif
    }
    free(m->view);
    free(m->own);
    free(m);
}

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
        if (!(q->msg = calloc(1, q->msg_bytes)) ||
            !(q->vidx = calloc((size_t)(w > 0 ? w : 1), sizeof *q->vidx)))
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
        free(v[i].vidx);
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

/* What this rank tells its readers about source buffer @p b (kind, allocation, handle). */
static reshard_status_t describe(const reshard_comm_t *comm, int32_t rank, int32_t b,
                                 const reshard_buffer_t *buf, rs_peer_buf_t *e)
{
    memset(e, 0, sizeof *e);
    e->buffer = (uint64_t)b;
    e->addr = (uint64_t)(uintptr_t)buf->ptr;
    e->bytes = buf->bytes;
    e->fd = -1;
    if (comm->ops->device_memory) {
#ifdef RESHARD_HAVE_NCCL
        e->kind = RS_PEER_IPC;
        return rs_peer_ipc_export(buf->ptr, buf->bytes, rank, b, buf->name, e->handle, &e->offset,
                                  &e->alloc_bytes, &e->alloc_id);
#else
        return rs_error(RESHARD_ERR_UNSUPPORTED, "rank %d: no CUDA in this build", rank);
#endif
    }
    int32_t fd;
    if (buf->bytes &&
        rs_peer_shm_find(buf->ptr, buf->bytes, &fd, &e->offset, &e->alloc_bytes, &e->alloc_id)) {
        e->kind = RS_PEER_SHM;
        e->fd = fd;
        rs_peer_shm_file_id(fd, &e->file_dev, &e->file_ino);
    } else {
        e->kind = RS_PEER_VM;
    }
    return RESHARD_OK;
}

/* A device-memory colocated plan moves only reads and local copies: the cuda-ipc endpoint
 * has no data path between ranks (pieces over the network with device buffers are not
 * built; its messages go over the caller's host endpoint, which cannot read device
 * staging). UNSUPPORTED naming the first such piece of @p rank, also for a plan that is not
 * colocated on the cuda-ipc endpoint. */
static reshard_status_t device_pieces_ok(const reshard_plan_t *plan, const reshard_comm_t *comm,
                                         int32_t rank)
{
    if (strcmp(comm->ops->name, "cuda-ipc") != 0)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "rank %d: colocated reads of device memory need the cuda-ipc endpoint "
                        "(reshard_comm_create_cuda_ipc over an MPI or store endpoint), not the "
                        "%s transport: NCCL refuses two ranks on one GPU",
                        rank, comm->ops->name);
    for (int64_t i = 0; i < plan->npieces; i++) {
        const rs_piece_t *q = &plan->pieces[i];
        if ((q->sender == rank || q->receiver == rank) && q->sender != q->receiver &&
            !rs_piece_is_peer_read(plan, q))
            return rs_error(RESHARD_ERR_UNSUPPORTED,
                            "rank %d: tensor %s goes from rank %d to rank %d over the network "
                            "(or a relay): the cuda-ipc endpoint moves device memory only by "
                            "colocated reads inside a host (%s)",
                            rank, plan->dst->tensors->t[q->tensor].name, q->sender, q->receiver,
                            plan->p.colocated ? "mixed GPU refits are not built"
                                              : "the plan is not colocated: plan it with "
                                                "colocated = 1 and every rank's host");
    }
    return RESHARD_OK;
}

reshard_status_t rs_peer_check_binding(const reshard_plan_t *plan, const reshard_comm_t *comm,
                                       const reshard_buffer_t *src_bufs, int32_t n_src)
{
    int32_t rank = comm->rank;
    const bool ipc = strcmp(comm->ops->name, "cuda-ipc") == 0;
    if (comm->ops->device_memory && (plan->p.colocated || ipc)) {
        reshard_status_t st = device_pieces_ok(plan, comm, rank);
        if (st != RESHARD_OK)
            return st;
    }
    if (!plan->p.colocated)
        return RESHARD_OK;
    reshard_plan_t *mut = (reshard_plan_t *)(uintptr_t)plan; /* the binding is the plan's state */
    if (!mut->peer_maps && !(mut->peer_maps = calloc(1, sizeof *mut->peer_maps)))
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory", rank);
    struct rs_peer_maps *m = mut->peer_maps;
    uint8_t *seen = calloc((size_t)(n_src > 0 ? n_src : 1), 1);
    if (!seen)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory", rank);
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; st == RESHARD_OK && i < plan->npieces; i++) {
        const rs_piece_t *q = &plan->pieces[i];
        if (q->sender != rank || !rs_piece_is_peer_read(plan, q))
            continue;
        int32_t b = plan->src->f[q->from_frag].buffer;
        if (b >= n_src) /* rs_layout_check_buffers names it */
            continue;
        if (b >= m->nown) {
            int32_t n = b + 1;
            rs_peer_buf_t *no = realloc(m->own, (size_t)n * sizeof *no);
            if (!no) {
                st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory", rank);
                break;
            }
            m->own = no;
            for (int32_t k = m->nown; k < n; k++)
                m->own[k].kind = UINT32_MAX;
            m->nown = n;
        }
        rs_peer_buf_t *o = &m->own[b], now;
        if (seen[b])
            continue;
        seen[b] = 1;
        st = describe(comm, rank, b, &src_bufs[b], &now);
        if (st != RESHARD_OK)
            break;
        const char *nm = src_bufs[b].name ? src_bufs[b].name : "unnamed";
        if (o->kind == UINT32_MAX) {
            *o = now;
        } else if (o->addr != now.addr || o->bytes != now.bytes) {
            st = rs_error(RESHARD_ERR_BUFFER,
                          "rank %d: source buffer %d (%s) is bound to another allocation (%p, "
                          "%llu bytes) than at this colocated plan's first execution (%p, "
                          "%llu bytes): ranks of this host read it in place, so it must stay "
                          "bound for the plan's life; make a new plan to rebind it",
                          rank, b, nm, src_bufs[b].ptr, (unsigned long long)now.bytes,
                          (void *)(uintptr_t)o->addr, (unsigned long long)o->bytes);
        } else if (o->kind != now.kind || o->alloc_id != now.alloc_id ||
                   memcmp(o->handle, now.handle, sizeof o->handle) != 0) {
            st = rs_error(RESHARD_ERR_BUFFER,
                          "rank %d: source buffer %d (%s) at %p lies in another allocation "
                          "than at this colocated plan's first execution (same address, but "
                          "it was freed and allocated again: a new %s): its readers hold the "
                          "old one; make a new plan to rebind it",
                          rank, b, nm, src_bufs[b].ptr,
                          now.kind == RS_PEER_IPC   ? "CUDA IPC handle"
                          : now.kind == RS_PEER_SHM ? "shared allocation"
                                                    : "kind of memory");
        }
    }
    free(seen);
    return st;
}

/* The reader's view of (peer, buffer) per entry @p e of the owner's table: opened (mapped)
 * once per plan and allocation, checked to be the same allocation at every execution. */
static reshard_status_t view_of(struct rs_peer_maps *m, int32_t me, int32_t peer, int64_t pid,
                                const rs_peer_buf_t *e, const rs_peer_view_t **out)
{
    for (int64_t i = 0; i < m->nview; i++) {
        const rs_peer_view_t *v = &m->view[i];
        if (v->peer != peer || v->buffer != (int64_t)e->buffer)
            continue;
        if (v->kind != e->kind || v->alloc_id != e->alloc_id ||
            memcmp(v->handle, e->handle, sizeof v->handle) != 0)
            return rs_error(RESHARD_ERR_BUFFER,
                            "rank %d: rank %d's source buffer %llu is another allocation than "
                            "at this colocated plan's first execution: make a new plan to rebind "
                            "it",
                            me, peer, (unsigned long long)e->buffer);
        *out = v;
        return RESHARD_OK;
    }
    rs_peer_view_t nv;
    memset(&nv, 0, sizeof nv);
    nv.peer = peer;
    nv.buffer = (int64_t)e->buffer;
    nv.kind = e->kind;
    nv.alloc_id = e->alloc_id;
    nv.alloc_bytes = e->alloc_bytes;
    memcpy(nv.handle, e->handle, sizeof nv.handle);
    for (int64_t i = 0; i < m->nview && e->kind != RS_PEER_VM && !nv.base; i++) {
        const rs_peer_view_t *v = &m->view[i]; /* another buffer of the same allocation */
        if (v->peer == peer && v->kind == e->kind && v->alloc_id == e->alloc_id &&
            memcmp(v->handle, e->handle, sizeof v->handle) == 0)
            nv.base = v->base;
    }
    if (e->kind != RS_PEER_VM && !nv.base) {
        reshard_status_t st = RESHARD_OK;
        void *p = NULL;
        if (e->kind == RS_PEER_SHM)
            st = rs_peer_shm_map(pid, e->fd, e->alloc_bytes, e->file_dev, e->file_ino, me, peer,
                                 (int64_t)e->buffer, &p);
#ifdef RESHARD_HAVE_NCCL
        else if (e->kind == RS_PEER_IPC)
            st = rs_peer_ipc_open(e->handle, me, peer, (int64_t)e->buffer, &p);
#endif
        else
            st = rs_error(RESHARD_ERR_TRANSPORT,
                          "rank %d: rank %d's source buffer %llu is of kind %u, which this "
                          "build cannot read",
                          me, peer, (unsigned long long)e->buffer, e->kind);
        if (st != RESHARD_OK)
            return st;
        nv.base = p;
        nv.owns = true;
    }
    rs_peer_view_t *g = realloc(m->view, (size_t)(m->nview + 1) * sizeof *g);
    if (!g) {
        if (nv.owns && nv.kind == RS_PEER_SHM)
            rs_peer_shm_unmap(nv.base, nv.alloc_bytes);
#ifdef RESHARD_HAVE_NCCL
        else if (nv.owns && nv.kind == RS_PEER_IPC)
            rs_peer_ipc_close(nv.base);
#endif
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory", me);
    }
    m->view = g;
    m->view[m->nview] = nv;
    *out = &m->view[m->nview++];
    return RESHARD_OK;
}

reshard_status_t rs_peer_exchange(const reshard_plan_t *plan, reshard_comm_t *comm,
                                  const rs_rank_plan_t *rp, const reshard_buffer_t *src_bufs,
                                  bool send_only, rs_peer_tables_t **out)
{
    (void)src_bufs; /* described by rs_peer_check_binding */
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
        memset(h, 0, sizeof *h);
        h->magic = RS_PEER_MAGIC;
        h->nbuf = (uint64_t)q->nbuf;
        rs_peer_identity(h); /* pid, and what proves it to the reader */
        for (int64_t k = 0; k < q->nbuf; k++)
            e[k] = plan->peer_maps->own[q->buf[k]]; /* rs_peer_check_binding's */
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
    reshard_plan_t *mut = (reshard_plan_t *)(uintptr_t)plan; /* the views are the plan's state */
    if (t->nin && !mut->peer_maps && !(mut->peer_maps = calloc(1, sizeof *mut->peer_maps)))
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory", me);
    struct rs_peer_maps *m = mut->peer_maps;
    for (int32_t i = 0; st == RESHARD_OK && !send_only && i < t->nin; i++) {
        const rs_pair_t *q = &t->in[i];
        const rs_peer_hdr_t *h = (const rs_peer_hdr_t *)q->msg;
        const rs_peer_buf_t *e = (const rs_peer_buf_t *)(h + 1);
        if (h->magic != RS_PEER_MAGIC || h->nbuf != (uint64_t)q->nbuf)
            return rs_error(RESHARD_ERR_TRANSPORT,
                            "rank %d: rank %d's colocated buffer table is malformed (plans made "
                            "from different inputs?)",
                            me, q->peer);
        /* The owner's identity, before anything of it is mapped, opened or read. */
        bool by_pid = false, by_vm = false;
        for (int64_t k = 0; k < q->nbuf; k++) {
            by_vm |= e[k].kind == RS_PEER_VM && e[k].bytes;
            by_pid |= e[k].kind == RS_PEER_VM || e[k].kind == RS_PEER_SHM;
        }
        st = rs_peer_prove_owner(h, by_pid, by_vm, me, q->peer);
        for (int64_t k = 0; st == RESHARD_OK && k < q->nbuf; k++) {
            unsigned char probe;
            if (e[k].buffer != (uint64_t)q->buf[k])
                return rs_error(RESHARD_ERR_TRANSPORT,
                                "rank %d: rank %d's colocated buffer table names buffer %llu "
                                "where %lld was expected",
                                me, q->peer, (unsigned long long)e[k].buffer, (long long)q->buf[k]);
            /* the owner's memory must be the reader's kind: device memory is read by the
             * copy kernel of a cuda-ipc endpoint, host memory by the CPU */
            if (e[k].bytes && (e[k].kind == RS_PEER_IPC) != comm->ops->device_memory)
                return rs_error(RESHARD_ERR_UNSUPPORTED,
                                "rank %d: rank %d's buffer %lld is %s memory and this rank's "
                                "destinations are %s memory (the %s transport): every rank of a "
                                "colocated refit executes on the same kind of endpoint",
                                me, q->peer, (long long)q->buf[k],
                                e[k].kind == RS_PEER_IPC ? "device" : "host",
                                comm->ops->device_memory ? "device" : "host", comm->ops->name);
            const rs_peer_view_t *v = NULL;
            st = view_of(m, me, q->peer, h->pid, &e[k], &v);
            if (st == RESHARD_OK)
                q->vidx[k] = v - m->view;
            if (st == RESHARD_OK && e[k].kind == RS_PEER_VM && e[k].bytes)
                st = rs_peer_cpu_probe(h->pid, me, q->peer, q->buf[k], e[k].addr, &probe, 1);
        }
    }
    return st;
}

/* The positions of @p box in @p sf lie inside the owner's buffer of @p bytes: BUFFER
 * before anything is read otherwise (a mapped or opened allocation is not checked by the
 * kernel, as process_vm_readv is). */
static reshard_status_t box_within(int32_t me, int32_t peer, const char *tensor,
                                   const reshard_fragment_t *sf, const reshard_box_t *box,
                                   uint32_t elem_size, uint64_t bytes)
{
    if (rs_box_numel(box) <= 0)
        return RESHARD_OK;
    int64_t lo[RESHARD_MAX_DIMS], hi[RESHARD_MAX_DIMS];
    for (int d = 0; d < box->ndim; d++) {
        lo[d] = box->offset[d];
        hi[d] = box->offset[d] + box->extent[d] - 1;
    }
    int64_t a = rs_frag_pos(sf, lo), b = rs_frag_pos(sf, hi);
    if (a < 0 || b < a || (uint64_t)(b + 1) * elem_size > bytes)
        return rs_error(RESHARD_ERR_BUFFER,
                        "rank %d: colocated read of tensor %s from rank %d source buffer %d: "
                        "elements [%lld, %lld] lie past its %llu bytes",
                        me, tensor, peer, sf->buffer, (long long)a, (long long)b,
                        (unsigned long long)bytes);
    return RESHARD_OK;
}

reshard_status_t rs_peer_read_all(const reshard_plan_t *plan, reshard_comm_t *comm,
                                  const rs_rank_plan_t *rp, const rs_peer_tables_t *t,
                                  const reshard_buffer_t *dst_bufs, uint64_t *bytes)
{
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
        const rs_peer_view_t *v = &plan->peer_maps->view[q->vidx[lo]];
        void *dst = dst_bufs[df->buffer].ptr;
        const char *tname = plan->dst->tensors->t[p->tensor].name;
        if (v->kind == RS_PEER_VM)
            st = rs_peer_cpu_read_box(h->pid, rp->rank, p->sender, tname, sf->buffer, dst, df,
                                      e[lo].addr, e[lo].bytes, sf, &p->box, p->elem_size);
        else
            st = box_within(rp->rank, p->sender, tname, sf, &p->box, p->elem_size, e[lo].bytes);
        if (st != RESHARD_OK || v->kind == RS_PEER_VM)
            ;
        else if (v->kind == RS_PEER_SHM)
            rs_copy_box_cpu(dst, df, v->base + e[lo].offset, sf, &p->box, p->elem_size);
        else /* IPC: the endpoint's copy kernel reads the peer's memory, on its stream */
            st = comm->ops->local_copy(comm, dst, df, v->base + e[lo].offset, sf, &p->box,
                                       p->elem_size);
        if (st == RESHARD_OK)
            *bytes += p->bytes;
    }
    return st;
}
