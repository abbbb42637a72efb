/* The (destination domain, tensor) groups a plan computes: all of them for a
 * global plan, the ones a rank takes part in for its own plan. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "util/error.h"

void rs_scope_free(rs_scope_t *s)
{
    free(s->in);
    s->in = NULL;
}

reshard_status_t rs_scope_build(reshard_plan_t *plan)
{
    rs_scope_t *s = &plan->scope;
    int32_t rank = plan->p.my_rank;
    s->ndomains = rs_domain_count(&plan->p);
    s->ntensors = plan->dst->tensors->n;
    s->in = NULL;
    if (rank == RESHARD_ALL_RANKS)
        return RESHARD_OK;
    s->in = calloc((size_t)s->ndomains * (size_t)(s->ntensors ? s->ntensors : 1), 1);
    if (!s->in)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory scoping its plan", rank);
    /* its own domain: everything it may receive, forward or relay */
    memset(s->in + (int64_t)rs_domain_of(&plan->p, rank) * s->ntensors, 1, (size_t)s->ntensors);
    /* every domain, for each tensor it holds: what it may send */
    for (int64_t i = 0; i < plan->src->n; i++) {
        const reshard_fragment_t *f = &plan->src->f[i];
        if (f->rank != rank)
            continue;
        for (int32_t d = 0; d < s->ndomains; d++)
            s->in[(int64_t)d * s->ntensors + f->tensor] = 1;
    }
    return RESHARD_OK;
}
