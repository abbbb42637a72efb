/*
 * Chunk sizes: every rank stages two slots, each holding one chunk of each of
 * its streams, within the staging bound. A stream's chunk is the smaller of
 * its two ends' capacities, so both ends must know the other's: each rank's
 * stream count is bounded from the layouts alone (not from the plan's
 * choices), which every rank computes the same way for every rank, with or
 * without the rest of the plan.
 *
 * Bound for rank r: stage-0 streams it may send (every rank of each domain
 * that needs a tensor r holds: any may be a landing or a relay), stage-0
 * streams it may receive (every holder of a tensor r's domain needs), and,
 * in a domain with destination fragments, one forward stream to and from
 * each other rank of the domain.
 */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"
#include "util/error.h"

typedef struct {
    int64_t wd, ww;   /* 64-bit words of a domain set, of a rank set */
    uint64_t *tdom;   /* per tensor: domains with a destination fragment of it */
    uint64_t *tsrc;   /* per tensor: ranks holding a source fragment of it */
    uint64_t *sendto; /* per rank: domains it may send to */
    uint64_t *recvf;  /* per domain: ranks its ranks may receive from */
    bool *forwards;   /* per domain: it has destination fragments (forward streams) */
} rs_bound_sets_t;

static void set_bit(uint64_t *w, int64_t i)
{
    w[i >> 6] |= (uint64_t)1 << (i & 63);
}

static bool has_bit(const uint64_t *w, int64_t i)
{
    return (w[i >> 6] >> (i & 63)) & 1u;
}

static void or_into(uint64_t *dst, const uint64_t *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] |= src[i];
}

/* Per tensor, the domains of its destination fragments and the ranks of its
 * source fragments: from every fragment of whole layouts. */
static void from_fragments(const reshard_plan_t *plan, rs_bound_sets_t *b)
{
    for (int64_t i = 0; i < plan->dst->n; i++) {
        const reshard_fragment_t *f = &plan->dst->f[i];
        set_bit(b->tdom + (int64_t)f->tensor * b->wd, rs_domain_of(&plan->p, f->rank));
    }
    for (int64_t i = 0; i < plan->src->n; i++) {
        const reshard_fragment_t *f = &plan->src->f[i];
        set_bit(b->tsrc + (int64_t)f->tensor * b->ww, f->rank);
    }
}

/* The same from the holders that scoped layouts record of the whole ones. */
static void from_holders(const reshard_plan_t *plan, rs_bound_sets_t *b)
{
    const rs_layout_origin_t *hs = plan->holders_src, *hd = plan->holders_dst;
    int32_t nt = plan->dst->tensors->n;
    for (int32_t t = 0; t < nt; t++) {
        const uint64_t *s = hs->holders + (int64_t)t * hs->words;
        const uint64_t *d = hd->holders + (int64_t)t * hd->words;
        memcpy(b->tsrc + (int64_t)t * b->ww, s, (size_t)hs->words * sizeof *s);
        for (int64_t w = 0; w < hd->words; w++)
            for (uint64_t bits = d[w]; bits; bits &= bits - 1) {
                int32_t r = (int32_t)(w * 64 + __builtin_ctzll(bits));
                set_bit(b->tdom + (int64_t)t * b->wd, rs_domain_of(&plan->p, r));
            }
    }
}

static int bound_sets(const reshard_plan_t *plan, rs_bound_sets_t *b)
{
    const reshard_plan_params_t *p = &plan->p;
    int32_t W = p->world_size, ND = rs_domain_count(p), nt = plan->dst->tensors->n;
    b->wd = (ND + 63) / 64;
    b->ww = (W + 63) / 64;
    size_t ntt = (size_t)(nt ? nt : 1);
    b->tdom = calloc(ntt * (size_t)b->wd, sizeof *b->tdom);
    b->tsrc = calloc(ntt * (size_t)b->ww, sizeof *b->tsrc);
    b->sendto = calloc((size_t)W * (size_t)b->wd, sizeof *b->sendto);
    b->recvf = calloc((size_t)ND * (size_t)b->ww, sizeof *b->recvf);
    b->forwards = calloc((size_t)ND, sizeof *b->forwards);
    uint8_t *need = calloc((size_t)ND * ntt, 1); /* (domain, tensor) pairs needed */
    if (!b->tdom || !b->tsrc || !b->sendto || !b->recvf || !b->forwards || !need) {
        free(need);
        return -1;
    }
    if (plan->holders_src)
        from_holders(plan, b);
    else
        from_fragments(plan, b);
    for (int32_t t = 0; t < nt; t++)
        for (int32_t d = 0; d < ND; d++)
            if (has_bit(b->tdom + (int64_t)t * b->wd, d)) {
                need[(int64_t)d * nt + t] = 1;
                b->forwards[d] = true;
            }
    /* what each rank may send to: the domains needing a tensor it holds */
    for (int32_t t = 0; t < nt; t++) {
        const uint64_t *hs = b->tsrc + (int64_t)t * b->ww;
        for (int64_t w = 0; w < b->ww; w++)
            for (uint64_t bits = hs[w]; bits; bits &= bits - 1) {
                int64_t r = w * 64 + __builtin_ctzll(bits);
                or_into(b->sendto + r * b->wd, b->tdom + (int64_t)t * b->wd, b->wd);
            }
    }
    for (int32_t d = 0; d < ND; d++)
        for (int32_t t = 0; t < nt; t++)
            if (need[(int64_t)d * nt + t])
                or_into(b->recvf + (int64_t)d * b->ww, b->tsrc + (int64_t)t * b->ww, b->ww);
    free(need);
    return 0;
}

static void bound_sets_free(rs_bound_sets_t *b)
{
    free(b->tdom);
    free(b->tsrc);
    free(b->sendto);
    free(b->recvf);
    free(b->forwards);
}

/* At most how many streams rank @p r takes part in (both directions, all stages). */
static uint64_t stream_bound(const reshard_plan_t *plan, const rs_bound_sets_t *b, int32_t r)
{
    const reshard_plan_params_t *p = &plan->p;
    int32_t ND = rs_domain_count(p), dom = rs_domain_of(p, r);
    const uint64_t *to = b->sendto + (int64_t)r * b->wd;
    const uint64_t *from = b->recvf + (int64_t)dom * b->ww;
    uint64_t n = 0;
    for (int32_t d = 0; d < ND; d++)
        if (has_bit(to, d))
            n += (uint64_t)rs_domain_ranks(p, d) - (d == dom); /* not to itself */
    for (int64_t w = 0; w < b->ww; w++)
        n += (uint64_t)__builtin_popcountll(from[w]);
    n -= has_bit(from, r);
    int32_t R = rs_domain_ranks(p, dom);
    if (b->forwards[dom] && R > 1)
        n += 2 * (uint64_t)(R - 1);
    return n;
}

reshard_status_t rs_chunk_caps(reshard_plan_t *plan)
{
    rs_bound_sets_t b;
    memset(&b, 0, sizeof b);
    plan->chunk_cap = calloc((size_t)plan->p.world_size, sizeof *plan->chunk_cap);
    if (!plan->chunk_cap || bound_sets(plan, &b) != 0) {
        bound_sets_free(&b);
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory for the chunk schedule");
    }
    reshard_status_t st = RESHARD_OK;
    for (int32_t r = 0; r < plan->p.world_size; r++) {
        uint64_t n = stream_bound(plan, &b, r);
        uint64_t streams = n ? n : 1;
        /* two slots, each holding one chunk of every stream of this rank */
        uint64_t cap = (plan->p.staging_bytes / (2 * streams)) & ~(uint64_t)7;
        if (cap < 64 && st == RESHARD_OK)
            st = rs_error(RESHARD_ERR_STAGING,
                          "rank %d: staging bound %llu bytes is too small for its up to %llu "
                          "streams (needs at least %llu)",
                          r, (unsigned long long)plan->p.staging_bytes, (unsigned long long)streams,
                          (unsigned long long)(128 * streams));
        plan->chunk_cap[r] = cap;
    }
    bound_sets_free(&b);
    return st;
}
