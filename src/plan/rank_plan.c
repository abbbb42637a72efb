/* A rank's streams: its pieces grouped by (stage, peer), in stream order. */
#include <stdlib.h>
#include <string.h>

#include "plan/placement.h"
#include "plan/plan_steps.h"
#include "util/error.h"

void rs_rank_plan_free(rs_rank_plan_t *rp)
{
    if (!rp)
        return;
    for (int s = 0; s < RS_NSTAGES; s++) {
        for (int32_t i = 0; i < rp->nsend[s]; i++)
            free(rp->send[s][i].idx);
        for (int32_t i = 0; i < rp->nrecv[s]; i++)
            free(rp->recv[s][i].idx);
        free(rp->send[s]);
        free(rp->recv[s]);
    }
    free(rp->local);
    free(rp->reads);
    free(rp->exposed);
    free(rp);
}

/* Append @p i to the list @p v of @p n (grown at powers of two). */
static int push_index(int64_t **v, int64_t *n, int64_t i)
{
    if ((*n & (*n - 1)) == 0) {
        int64_t *nv = realloc(*v, (size_t)(*n ? 2 * *n : 1) * sizeof *nv);
        if (!nv)
            return -1;
        *v = nv;
    }
    (*v)[(*n)++] = i;
    return 0;
}

/* Append piece @p i to the stream with @p peer (streams arrive grouped by peer). */
static int add_to_stream(rs_stream_t **v, int32_t *n, int32_t peer, int32_t stage, int64_t i,
                         const reshard_plan_t *plan, int32_t self)
{
    rs_stream_t *s = *n ? &(*v)[*n - 1] : NULL;
    if (!s || s->peer != peer) {
        rs_stream_t *nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
        if (!nv)
            return -1;
        *v = nv;
        s = &nv[(*n)++];
        memset(s, 0, sizeof *s);
        s->peer = peer;
        s->stage = stage;
        uint64_t a = plan->chunk_cap[self], b = plan->chunk_cap[peer];
        s->chunk = a < b ? a : b;
    }
    if ((s->n & (s->n - 1)) == 0) { /* grow at powers of two */
        int64_t *ni = realloc(s->idx, (size_t)(s->n ? 2 * s->n : 1) * sizeof *ni);
        if (!ni)
            return -1;
        s->idx = ni;
    }
    s->idx[s->n++] = i;
    s->bytes += rs_piece_stream_bytes(&plan->pieces[i]);
    return 0;
}

reshard_status_t rs_rank_plan_build(const reshard_plan_t *plan, int32_t rank, rs_rank_plan_t **out)
{
    rs_rank_plan_t *rp = calloc(1, sizeof *rp);
    int64_t *recv_order = malloc((size_t)(plan->npieces ? plan->npieces : 1) * sizeof *recv_order);
    int64_t nrecv = 0;
    if (!rp || !recv_order)
        goto oom;
    rp->rank = rank;
    for (int64_t i = 0; i < plan->npieces; i++) {
        const rs_piece_t *p = &plan->pieces[i];
        if (p->sender == rank && p->receiver == rank && p->stage == RS_STAGE_DIRECT) {
            int64_t *nl = realloc(rp->local, (size_t)(rp->nlocal + 1) * sizeof *nl);
            if (!nl)
                goto oom;
            rp->local = nl;
            rp->local[rp->nlocal++] = i;
            continue;
        }
        if (rs_piece_is_peer_read(plan, p)) {
            if ((p->receiver == rank && push_index(&rp->reads, &rp->nreads, i) != 0) ||
                (p->sender == rank && push_index(&rp->exposed, &rp->nexposed, i) != 0))
                goto oom;
            continue;
        }
        if (p->sender == rank && add_to_stream(&rp->send[p->stage], &rp->nsend[p->stage],
                                               p->receiver, p->stage, i, plan, rank) != 0)
            goto oom;
        if (p->receiver == rank)
            recv_order[nrecv++] = i;
    }
    /* Receive streams: pieces are sorted by (stage, sender, ...), so for a fixed
     * receiver they arrive grouped by (stage, sender) already, in stream order. */
    for (int64_t k = 0; k < nrecv; k++) {
        const rs_piece_t *p = &plan->pieces[recv_order[k]];
        if (add_to_stream(&rp->recv[p->stage], &rp->nrecv[p->stage], p->sender, p->stage,
                          recv_order[k], plan, rank) != 0)
            goto oom;
    }
    free(recv_order);
    *out = rp;
    return RESHARD_OK;
oom:
    free(recv_order);
    rs_rank_plan_free(rp);
    return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory building its streams", rank);
}
