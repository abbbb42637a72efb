/* Step 2: senders for the cells a rank of the receiver's domain holds (the
 * receiver itself first, else the domain peer with the least NVLink load
 * within the cell's (domain, tensor) group, so that a rank's own plan makes
 * the same choice from that group alone);
 * cells that must cross the network are left to the topology step (topo.c),
 * marked chosen = -1. */
#include <stdlib.h>
#include <string.h>

#include "plan/placement.h"
#include "plan/plan_steps.h"
#include "util/error.h"

/* Order: by (receiver's domain, tensor) group, then biggest first, then
 * destination fragment, box offset. */
static int cmp_cell(const reshard_plan_params_t *p, const rs_cell_t *a, const rs_cell_t *b)
{
    int32_t da = rs_domain_of(p, a->receiver), db = rs_domain_of(p, b->receiver);
    if (da != db)
        return da < db ? -1 : 1;
    if (a->tensor != b->tensor)
        return a->tensor < b->tensor ? -1 : 1;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    if (a->to_frag != b->to_frag)
        return a->to_frag < b->to_frag ? -1 : 1;
    for (int d = 0; d < a->box.ndim; d++)
        if (a->box.offset[d] != b->box.offset[d])
            return a->box.offset[d] < b->box.offset[d] ? -1 : 1;
    return 0;
}

/* Merge sort of cell indices: stable, deterministic, no qsort_r needed. */
static void sort_idx(const reshard_plan_params_t *p, int64_t *idx, int64_t *tmp, int64_t n,
                     const rs_cell_t *cs)
{
    if (n < 2)
        return;
    int64_t h = n / 2;
    sort_idx(p, idx, tmp, h, cs);
    sort_idx(p, idx + h, tmp, n - h, cs);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp_cell(p, &cs[idx[j]], &cs[idx[i]]) < 0 ? idx[j++] : idx[i++];
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
}

/* The path from the nearest of the @p n holders @p h to @p receiver. */
static rs_path_t nearest(const reshard_plan_params_t *p, const reshard_layout_t *src,
                         const int32_t *h, int32_t n, int32_t receiver)
{
    rs_path_t best = RS_PATH_NETWORK;
    for (int32_t j = 0; j < n && rs_has_placement(p); j++) {
        rs_path_t q = rs_path_of(p, src->f[h[j]].rank, receiver);
        if (q < best)
            best = q;
    }
    return best;
}

/* Sender of one cell: the receiver when it holds the cell; else, with a
 * placement, the least-loaded holder (in the group, ties in rotated order) on
 * the receiver's device, else on its host; else the domain holder with the
 * least group load, else -1. */
static int32_t choose(const reshard_plan_params_t *p, const reshard_layout_t *src,
                      const rs_cells_t *cells, const rs_cell_t *c, int64_t group_cells,
                      const uint64_t *load, int32_t *cand, int32_t *crank)
{
    const int32_t *h = cells->h + c->holders;
    int32_t rdom = rs_domain_of(p, c->receiver), m = 0;
    rs_path_t near = nearest(p, src, h, c->nholders, c->receiver);
    for (int32_t j = 0; j < c->nholders; j++) {
        int32_t r = src->f[h[j]].rank;
        if (r == c->receiver)
            return h[j];
        if (near != RS_PATH_NETWORK ? rs_path_of(p, r, c->receiver) == near
                                    : rs_domain_of(p, r) == rdom) {
            cand[m] = h[j];
            crank[m++] = r;
        }
    }
    if (m == 0)
        return -1;
    int32_t rot = rs_group_rotation(rdom, c->tensor, group_cells, m);
    return cand[rs_least_loaded(load, crank, m, rot)];
}

reshard_status_t rs_assign_senders(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                   rs_cells_t *cells)
{
    int32_t maxh = 1;
    for (int64_t i = 0; i < cells->n; i++)
        if (cells->c[i].nholders > maxh)
            maxh = cells->c[i].nholders;
    int64_t *idx = malloc((size_t)(cells->n ? cells->n : 1) * sizeof *idx);
    int64_t *tmp = malloc((size_t)(cells->n ? cells->n : 1) * sizeof *tmp);
    uint64_t *load = calloc((size_t)p->world_size, sizeof *load);
    int32_t *cand = malloc((size_t)maxh * sizeof *cand);
    int32_t *crank = malloc((size_t)maxh * sizeof *crank);
    if (!idx || !tmp || !load || !cand || !crank) {
        free(idx);
        free(tmp);
        free(load);
        free(cand);
        free(crank);
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory choosing senders");
    }
    for (int64_t i = 0; i < cells->n; i++)
        idx[i] = i;
    sort_idx(p, idx, tmp, cells->n, cells->c);
    for (int64_t q0 = 0; q0 < cells->n;) {
        const rs_cell_t *c0 = &cells->c[idx[q0]];
        int64_t q1 = q0 + 1;
        while (q1 < cells->n && cells->c[idx[q1]].tensor == c0->tensor &&
               rs_domain_of(p, cells->c[idx[q1]].receiver) == rs_domain_of(p, c0->receiver))
            q1++;
        for (int64_t q = q0; q < q1; q++) {
            rs_cell_t *c = &cells->c[idx[q]];
            /* no holder in the receiver's domain: the topology step places it */
            c->chosen = choose(p, src, cells, c, q1 - q0, load, cand, crank);
            if (c->chosen >= 0 && src->f[c->chosen].rank != c->receiver)
                load[src->f[c->chosen].rank] += c->bytes;
        }
        /* loads are per group: clear what this one added */
        for (int64_t q = q0; q < q1; q++) {
            const rs_cell_t *c = &cells->c[idx[q]];
            if (c->chosen >= 0)
                load[src->f[c->chosen].rank] = 0;
        }
        q0 = q1;
    }
    free(idx);
    free(tmp);
    free(load);
    free(cand);
    free(crank);
    return RESHARD_OK;
}
