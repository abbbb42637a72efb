/* Step 1b: groups that leave nothing to choose. When no rank of a
 * destination domain holds an element of a tensor, each cell has one holder
 * and the domain's fragments land whole (disjoint, none over the relay
 * limit), steps 2-4 can only send each cell from its holder to its
 * receiver: the topology step's units are the cells, each lands on its one
 * needer, and nothing is striped, relayed or forwarded. Those cells become
 * their pieces here, without the sorting and balancing of the other steps
 * (in a large MoE refit, almost every expert group). The conditions are
 * those of a rank's sends-only groups (scope.c). */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"
#include "util/error.h"

struct rs_direct {
    int32_t ndomains;
    uint8_t *holds;  /* per domain: a rank of it holds an element of the tensor */
    uint8_t *direct; /* per domain: its group of the tensor is direct */
    int32_t *seen;   /* per domain: 1 + the last tensor whose fragments it had */
    int32_t *marked; /* domains set in holds or direct, to clear */
    int64_t nmarked;
    uint64_t *load; /* per rank of a domain: scratch of rs_group_lands_whole */
};

void rs_direct_free(rs_direct_t *d)
{
    if (!d)
        return;
    free(d->holds);
    free(d->direct);
    free(d->seen);
    free(d->marked);
    free(d->load);
    free(d);
}

reshard_status_t rs_direct_create(const reshard_plan_t *plan, rs_direct_t **out)
{
    rs_direct_t *d = calloc(1, sizeof *d);
    int32_t nd = rs_domain_count(&plan->p), R = plan->p.domain_size > 1 ? plan->p.domain_size : 1;
    if (d) {
        d->ndomains = nd;
        d->holds = calloc((size_t)nd, 1);
        d->direct = calloc((size_t)nd, 1);
        d->seen = calloc((size_t)nd, sizeof *d->seen);
        d->marked = malloc(2 * (size_t)nd * sizeof *d->marked);
        d->load = calloc((size_t)R, sizeof *d->load);
    }
    if (!d || !d->holds || !d->direct || !d->seen || !d->marked || !d->load) {
        rs_direct_free(d);
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory");
    }
    *out = d;
    return RESHARD_OK;
}

static void mark(rs_direct_t *d, uint8_t *flags, int32_t domain)
{
    if (!d->holds[domain] && !d->direct[domain])
        d->marked[d->nmarked++] = domain;
    flags[domain] = 1;
}

/* Set d->direct for the groups of tensor @p t; -1 when out of memory. */
static int classify(const reshard_plan_t *plan, rs_direct_t *d, const rs_cutter_t *cut, int32_t t)
{
    const reshard_plan_params_t *p = &plan->p;
    const int64_t *sf, *df;
    int64_t ns, n;
    rs_cutter_frags(cut, t, &sf, &ns, &df, &n);
    int sole = rs_frags_disjoint(plan->src, sf, ns);
    if (sole <= 0)
        return sole;
    for (int64_t q = 0; q < ns; q++)
        mark(d, d->holds, rs_domain_of(p, plan->src->f[sf[q]].rank));
    /* the destination fragments, a run of one domain's at a time; a domain
     * with a second run is not checked whole, so not direct */
    for (int64_t a = 0; a < n;) {
        int32_t dom;
        int64_t b = rs_domain_run(p, plan->dst, df, n, a, &dom);
        if (d->seen[dom] == t + 1)
            d->direct[dom] = 0;
        else if (!d->holds[dom] && rs_group_lands_whole(p, plan->dst, dom, df + a, b - a, d->load))
            mark(d, d->direct, dom);
        d->seen[dom] = t + 1;
        a = b;
    }
    return 0;
}

reshard_status_t rs_direct_take(const reshard_plan_t *plan, rs_direct_t *d, const rs_cutter_t *cut,
                                int32_t t, rs_cells_t *cells, rs_piece_vec_t *v,
                                rs_bounds_t *bounds)
{
    if (classify(plan, d, cut, t) != 0)
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory");
    uint64_t es = (uint64_t)reshard_dtype_size(plan->dst->tensors->t[t].dtype);
    reshard_status_t st = RESHARD_OK;
    int64_t w = 0;
    for (int64_t i = 0; i < cells->n && st == RESHARD_OK; i++) {
        const rs_cell_t *c = &cells->c[i];
        int32_t dom = rs_domain_of(&plan->p, c->receiver);
        if (!d->direct[dom] || c->nholders != 1) {
            cells->c[w++] = *c;
            continue;
        }
        int32_t h = cells->h[c->holders];
        rs_piece_t p =
            rs_direct_piece(plan, &c->box, c->tensor, h, c->to_frag, c->receiver, c->bytes);
        if (rs_piece_vec_push(plan, v, &p) != 0)
            st = rs_error(RESHARD_ERR_NOMEM, "planning: out of memory for %lld pieces",
                          (long long)v->n);
        if (bounds)
            rs_bounds_add_sole(bounds, dom, plan->src->f[h].rank,
                               (uint64_t)rs_box_numel(&c->box) * es);
    }
    if (st == RESHARD_OK)
        cells->n = w;
    for (int64_t i = 0; i < d->nmarked; i++)
        d->holds[d->marked[i]] = d->direct[d->marked[i]] = 0;
    d->nmarked = 0;
    return st;
}
