/* The (destination domain, tensor) groups a plan computes: all of them for a
 * global plan, the ones a rank takes part in for its own plan, some of them
 * on the rank's own cells only (RS_SCOPE_SENDS). */
#include <stdlib.h>
#include <string.h>

#include "plan/scope.h"
#include "util/error.h"

void rs_scope_free(rs_scope_t *s)
{
    free(s->in);
    free(s->sole);
    free(s->any);
    s->in = s->sole = s->any = NULL;
}

/* Dim-0 interval of a fragment, for the sweep of disjoint_all. */
typedef struct {
    int64_t lo, hi, frag;
} rs_span0_t;

static int cmp_span0(const void *pa, const void *pb)
{
    const rs_span0_t *a = pa, *b = pb;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    return a->frag < b->frag ? -1 : a->frag > b->frag;
}

int rs_frags_disjoint(const reshard_layout_t *src, const int64_t *sf, int64_t n)
{
    rs_span0_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        const reshard_box_t *b = &src->f[sf[i]].box;
        v[i] = (rs_span0_t){b->offset[0], b->offset[0] + b->extent[0], sf[i]};
    }
    qsort(v, (size_t)n, sizeof *v, cmp_span0);
    int ok = 1;
    for (int64_t a = 0; a < n && ok; a++)
        for (int64_t b = a + 1; b < n && v[b].lo < v[a].hi && ok; b++) {
            reshard_box_t x;
            ok = !rs_box_intersect(&src->f[v[a].frag].box, &src->f[v[b].frag].box, &x);
        }
    free(v);
    return ok;
}

bool rs_group_lands_whole(const reshard_plan_params_t *p, const reshard_layout_t *dst,
                          int32_t domain, const int64_t *df, int64_t n, uint64_t *load)
{
    int32_t R = rs_domain_ranks(p, domain),
            lo = p->domain_size > 1 ? domain * p->domain_size : domain;
    uint64_t total = 0;
    bool ok = true;
    for (int64_t a = 0; a < n && ok; a++) {
        const reshard_fragment_t *A = &dst->f[df[a]];
        uint64_t b =
            (uint64_t)rs_box_numel(&A->box) * reshard_dtype_size(dst->tensors->t[A->tensor].dtype);
        total += b;
        load[A->rank - lo] += b;
        for (int64_t k = a + 1; k < n && ok; k++) {
            reshard_box_t x;
            ok = !rs_box_intersect(&A->box, &dst->f[df[k]].box, &x);
        }
    }
    uint64_t limit = rs_group_relay_limit(total, R);
    for (int32_t r = 0; r < R; r++) {
        ok = ok && (R < 2 || load[r] <= limit);
        load[r] = 0;
    }
    return ok;
}

/* Mark RS_SCOPE_SENDS the groups of the tensors @p rank holds (rs_scope_build). */
static reshard_status_t sends_only(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                   const reshard_layout_t *dst, const uint8_t *held, rs_scope_t *s)
{
    int32_t rank = p->my_rank, nt = s->ntensors, mine = rs_domain_of(p, rank);
    int64_t *ss = NULL, *ds = NULL, *si = rs_layout_by_tensor(src, held, &ss);
    int64_t *di = si ? rs_layout_by_tensor(dst, held, &ds) : NULL;
    uint8_t *holds = calloc((size_t)s->ndomains, 1);
    int32_t *seen = calloc((size_t)s->ndomains, sizeof *seen);
    int32_t dmax = p->domain_size > 1 ? p->domain_size : 1;
    uint64_t *load = calloc((size_t)dmax, sizeof *load);
    reshard_status_t st = RESHARD_OK;
    if (!si || !di || !holds || !seen || !load)
        st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory scoping its plan", rank);
    for (int32_t t = 0; st == RESHARD_OK && t < nt; t++) {
        if (!held[t])
            continue;
        int sole = rs_frags_disjoint(src, si + ss[t], ss[t + 1] - ss[t]);
        if (sole < 0) {
            st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory scoping its plan", rank);
            break;
        }
        s->sole[t] = (uint8_t)sole;
        /* with replicas, senders are chosen over all of the tensor's groups
         * (topo.c): every group is computed whole */
        if (!sole)
            continue;
        memset(holds, 0, (size_t)s->ndomains);
        for (int64_t q = ss[t]; q < ss[t + 1]; q++)
            holds[rs_domain_of(p, src->f[si[q]].rank)] = 1;
        /* the tensor's destination fragments, a run of one domain's at a time */
        const int64_t *df = di + ds[t];
        int64_t n = ds[t + 1] - ds[t];
        for (int64_t a = 0; a < n;) {
            int32_t d;
            int64_t b = rs_domain_run(p, dst, df, n, a, &d);
            uint8_t *in = &s->in[(int64_t)d * nt + t];
            if (seen[d] == t + 1) /* a second run of the domain: not checked whole */
                *in = RS_SCOPE_ALL;
            else if (d != mine && !holds[d] && rs_group_lands_whole(p, dst, d, df + a, b - a, load))
                *in = RS_SCOPE_SENDS;
            seen[d] = t + 1;
            a = b;
        }
    }
    free(ss);
    free(ds);
    free(si);
    free(di);
    free(holds);
    free(seen);
    free(load);
    return st;
}

reshard_status_t rs_scope_build(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                const reshard_layout_t *dst, rs_scope_t *s)
{
    int32_t rank = p->my_rank;
    s->rank = rank;
    s->ndomains = rs_domain_count(p);
    s->ntensors = dst->tensors->n;
    s->in = s->sole = s->any = NULL;
    if (rank == RESHARD_ALL_RANKS)
        return RESHARD_OK;
    size_t nt = (size_t)(s->ntensors ? s->ntensors : 1);
    s->in = calloc((size_t)s->ndomains * nt, 1);
    s->sole = calloc(nt, 1);
    s->any = calloc(nt, 1);
    uint8_t *held = calloc(nt, 1);
    if (!s->in || !s->sole || !s->any || !held) {
        free(held);
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory scoping its plan", rank);
    }
    /* every domain, for each tensor it holds: what it may send */
    for (int64_t i = 0; i < src->n; i++)
        if (src->f[i].rank == rank)
            held[src->f[i].tensor] = 1;
    for (int32_t d = 0; d < s->ndomains; d++)
        for (int32_t t = 0; t < s->ntensors; t++)
            s->in[(int64_t)d * s->ntensors + t] = held[t] ? RS_SCOPE_ALL : RS_SCOPE_OUT;
    reshard_status_t st = sends_only(p, src, dst, held, s);
    /* its own domain: everything it may receive, forward or relay */
    int32_t mine = rs_domain_of(p, rank);
    memset(s->in + (int64_t)mine * s->ntensors, RS_SCOPE_ALL, (size_t)s->ntensors);
    /* the tensors with a computed group that has a destination fragment:
     * those it holds (every domain's groups of them are computed) and those
     * its own domain needs */
    memcpy(s->any, held, nt);
    for (int64_t i = 0; i < dst->n; i++)
        if (rs_domain_of(p, dst->f[i].rank) == mine)
            s->any[dst->f[i].tensor] = 1;
    /* of those its domain needs and it does not hold, the ones with replicas:
     * their senders are chosen over every group of the tensor (topo.c), so
     * every group is computed */
    if (st == RESHARD_OK) {
        uint8_t *other = calloc(nt, 1);
        int64_t *ss = NULL, *si = NULL;
        for (int32_t t = 0; other && t < s->ntensors; t++)
            other[t] = s->any[t] && !held[t];
        if (other)
            si = rs_layout_by_tensor(src, other, &ss);
        if (!si)
            st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory scoping its plan", rank);
        for (int32_t t = 0; st == RESHARD_OK && t < s->ntensors; t++) {
            if (!other[t])
                continue;
            int sole = rs_frags_disjoint(src, si + ss[t], ss[t + 1] - ss[t]);
            if (sole < 0)
                st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory scoping its plan", rank);
            else if (!sole)
                for (int32_t d = 0; d < s->ndomains; d++)
                    s->in[(int64_t)d * s->ntensors + t] = RS_SCOPE_ALL;
        }
        free(si);
        free(ss);
        free(other);
    }
    free(held);
    return st;
}
