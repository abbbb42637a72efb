/* Where ranks live: the plan's copy of the placement and the per-path bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/placement.h"
#include "util/error.h"

void rs_placement_free(reshard_plan_t *plan)
{
    if (!rs_has_placement(&plan->p))
        return;
    free((void *)(uintptr_t)plan->p.host);
    free((void *)(uintptr_t)plan->p.device);
    plan->p.host = plan->p.device = NULL;
}

reshard_status_t rs_placement_own(reshard_plan_t *plan)
{
    reshard_plan_params_t *p = &plan->p;
    if (!(p->field_mask & RESHARD_PLAN_PARAM_COLOCATED))
        p->colocated = 0;
    if (!(p->field_mask & RESHARD_PLAN_PARAM_PLACEMENT)) {
        p->host = p->device = NULL;
        if (p->colocated)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "reshard_plan_create: colocated reads need a placement "
                            "(RESHARD_PLAN_PARAM_PLACEMENT: which ranks share a host)");
        return RESHARD_OK;
    }
    const int32_t *host = p->host, *device = p->device;
    p->host = p->device = NULL; /* until the copies exist */
    if (!host)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_create: RESHARD_PLAN_PARAM_PLACEMENT without host ids");
    for (int32_t r = 0; r < p->world_size; r++) {
        if (host[r] < 0)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "reshard_plan_create: placement: rank %d has host id %d (< 0)", r,
                            host[r]);
        if (device && device[r] < RESHARD_DEVICE_CPU)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "reshard_plan_create: placement: rank %d has device %d (neither a "
                            "GPU index nor RESHARD_DEVICE_CPU)",
                            r, device[r]);
    }
    if (p->colocated && p->domain_size > 1)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_create: colocated reads take every rank as its own "
                        "domain, but domain_size is %d: leave it unset",
                        p->domain_size);
    size_t n = (size_t)p->world_size * sizeof(int32_t);
    int32_t *h = malloc(n), *d = device ? malloc(n) : NULL;
    if (!h || (device && !d)) {
        free(h);
        free(d);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_plan_create: out of memory");
    }
    memcpy(h, host, n);
    if (d)
        memcpy(d, device, n);
    p->host = h;
    p->device = d;
    return RESHARD_OK;
}

void rs_placement_bounds_add(const reshard_plan_t *plan, const rs_cells_t *cells, uint64_t bound[4])
{
    if (!rs_has_placement(&plan->p))
        return;
    for (int64_t i = 0; i < cells->n; i++) {
        const rs_cell_t *c = &cells->c[i];
        rs_path_t best = RS_PATH_NETWORK;
        for (int32_t j = 0; j < c->nholders; j++) {
            rs_path_t q =
                rs_path_of(&plan->p, plan->src->f[cells->h[c->holders + j]].rank, c->receiver);
            if (q < best)
                best = q;
        }
        bound[best] += c->bytes;
    }
}
