/* Test helper: a rank's own plan against the global plan. */
#include "plan_check.h"

#include <stdio.h>
#include <string.h>

#include "plan/plan_internal.h"

/* Fragment @p i of @p l (the plan's own copy), as the caller described it. */
static const reshard_fragment_t *frag(const reshard_layout_t *l, int32_t i)
{
    return &l->f[i];
}

/* Piece @p a of plan @p one equals piece @p b of plan @p all: every field,
 * and the fragments they name by content (a rank's own plan keeps and
 * renumbers only the fragments it needs). */
static bool same_piece(const reshard_plan_t *one, const rs_piece_t *a, const reshard_plan_t *all,
                       const rs_piece_t *b)
{
    rs_piece_t x = *a, y = *b;
    const reshard_layout_t *fa = a->stage == RS_STAGE_DIRECT ? one->src : one->dst;
    const reshard_layout_t *fb = b->stage == RS_STAGE_DIRECT ? all->src : all->dst;
    reshard_fragment_t ff = *frag(fa, a->from_frag), gf = *frag(fb, b->from_frag);
    if (a->stage == RS_STAGE_DIRECT && a->sender != one->p.my_rank && one->quant &&
        (ff.buffer == one->quant->src_scratch[ff.rank] ||
         ff.buffer == one->quant->src_scratch[ff.rank] + 1))
        ff.base = gf.base; /* another rank's quantization scratch: packed by that rank's plan
                              (rs_qplan_pack_scratch), read by its sender only */
    if (a->stage != b->stage || memcmp(&ff, &gf, sizeof ff) ||
        memcmp(frag(one->dst, a->to_frag), frag(all->dst, b->to_frag), sizeof(reshard_fragment_t)))
        return false;
    x.from_frag = y.from_frag = x.to_frag = y.to_frag = 0;
    return memcmp(&x, &y, sizeof x) == 0;
}

/* Streams v[0..n) of @p one equal w[0..n) of @p all, piece by piece. */
static int same_streams(const reshard_plan_t *one, const rs_stream_t *v, int32_t nv,
                        const reshard_plan_t *all, const rs_stream_t *w, int32_t nw,
                        const char *what, char *why, size_t ws)
{
    if (nv != nw) {
        snprintf(why, ws, "%s: %d streams, global plan %d", what, nv, nw);
        return -1;
    }
    for (int32_t i = 0; i < nv; i++) {
        const rs_stream_t *a = &v[i], *b = &w[i];
        if (a->peer != b->peer || a->n != b->n || a->bytes != b->bytes || a->chunk != b->chunk) {
            snprintf(why, ws,
                     "%s stream %d: peer %d, %lld pieces, %llu bytes, chunk %llu; global plan "
                     "peer %d, %lld pieces, %llu bytes, chunk %llu",
                     what, i, a->peer, (long long)a->n, (unsigned long long)a->bytes,
                     (unsigned long long)a->chunk, b->peer, (long long)b->n,
                     (unsigned long long)b->bytes, (unsigned long long)b->chunk);
            return -1;
        }
        for (int64_t k = 0; k < a->n; k++)
            if (!same_piece(one, &one->pieces[a->idx[k]], all, &all->pieces[b->idx[k]])) {
                snprintf(why, ws, "%s stream %d (peer %d): piece %lld differs", what, i, a->peer,
                         (long long)k);
                return -1;
            }
    }
    return 0;
}

int rs_test_check_rank_plan(const reshard_layout_t *src, const reshard_layout_t *dst,
                            const reshard_plan_params_t *params, const reshard_plan_t *all,
                            int32_t rank, char *why, size_t ws)
{
    reshard_plan_params_t q = *params;
    q.my_rank = rank;
    reshard_plan_t *one = NULL;
    rs_rank_plan_t *g = NULL;
    reshard_status_t st = reshard_plan_create(src, dst, &q, &one);
    if (st != RESHARD_OK) {
        snprintf(why, ws, "rank %d: own plan failed: %s", rank, reshard_last_error());
        return -1;
    }
    int rc = 0;
    if (one->fingerprint != all->fingerprint) {
        snprintf(why, ws, "rank %d: fingerprint %016llx, global plan %016llx", rank,
                 (unsigned long long)one->fingerprint, (unsigned long long)all->fingerprint);
        rc = -1;
    }
    if (rc == 0 && rs_rank_plan_build(all, rank, &g) != RESHARD_OK) {
        snprintf(why, ws, "rank %d: global rank plan failed", rank);
        rc = -1;
    }
    const rs_rank_plan_t *m = one->mine;
    if (rc == 0 && m->nlocal != g->nlocal) {
        snprintf(why, ws, "rank %d: %lld local pieces, global plan %lld", rank,
                 (long long)m->nlocal, (long long)g->nlocal);
        rc = -1;
    }
    for (int64_t i = 0; rc == 0 && i < m->nlocal; i++)
        if (!same_piece(one, &one->pieces[m->local[i]], all, &all->pieces[g->local[i]])) {
            snprintf(why, ws, "rank %d: local piece %lld differs", rank, (long long)i);
            rc = -1;
        }
    for (int s = 0; rc == 0 && s < RS_NSTAGES; s++) {
        char what[64];
        snprintf(what, sizeof what, "rank %d stage %d send", rank, s);
        rc =
            same_streams(one, m->send[s], m->nsend[s], all, g->send[s], g->nsend[s], what, why, ws);
        snprintf(what, sizeof what, "rank %d stage %d receive", rank, s);
        if (rc == 0)
            rc = same_streams(one, m->recv[s], m->nrecv[s], all, g->recv[s], g->nrecv[s], what, why,
                              ws);
    }
    /* the stage-0 pieces landing in its domain, in order, with their chunk sizes */
    int32_t dom = rs_domain_of(&all->p, rank);
    int64_t j = 0;
    for (int64_t i = 0; rc == 0 && i < all->npieces; i++) {
        const rs_piece_t *p = &all->pieces[i];
        if (p->stage != RS_STAGE_DIRECT || rs_domain_of(&all->p, p->receiver) != dom)
            continue;
        while (j < one->npieces && (one->pieces[j].stage != RS_STAGE_DIRECT ||
                                    rs_domain_of(&all->p, one->pieces[j].receiver) != dom))
            j++;
        if (j == one->npieces || !same_piece(one, &one->pieces[j], all, p) ||
            one->chunk_cap[p->sender] != all->chunk_cap[p->sender] ||
            one->chunk_cap[p->receiver] != all->chunk_cap[p->receiver]) {
            snprintf(why, ws, "rank %d: landing %lld in its domain differs", rank, (long long)i);
            rc = -1;
        }
        j++;
    }
    rs_rank_plan_free(g);
    reshard_plan_destroy(one);
    return rc;
}
