/* Step 2: senders for the cells a rank of the receiver's domain holds (the
 * receiver itself first, else the domain peer with the least NVLink load);
 * cells that must cross the network are left to the topology step (topo.c),
 * marked chosen = -1. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"
#include "util/error.h"

/* Order: biggest first, then tensor, destination fragment, box offset. */
static int cmp_cell(const rs_cell_t *a, const rs_cell_t *b)
{
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    if (a->tensor != b->tensor)
        return a->tensor < b->tensor ? -1 : 1;
    if (a->to_frag != b->to_frag)
        return a->to_frag < b->to_frag ? -1 : 1;
    for (int d = 0; d < a->box.ndim; d++)
        if (a->box.offset[d] != b->box.offset[d])
            return a->box.offset[d] < b->box.offset[d] ? -1 : 1;
    return 0;
}

/* Merge sort of cell indices: stable, deterministic, no qsort_r needed. */
static void sort_idx(int64_t *idx, int64_t *tmp, int64_t n, const rs_cell_t *cs)
{
    if (n < 2)
        return;
    int64_t h = n / 2;
    sort_idx(idx, tmp, h, cs);
    sort_idx(idx + h, tmp, n - h, cs);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp_cell(&cs[idx[j]], &cs[idx[i]]) < 0 ? idx[j++] : idx[i++];
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
}

reshard_status_t rs_assign_senders(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                   rs_cells_t *cells)
{
    int64_t *idx = malloc((size_t)(cells->n ? cells->n : 1) * sizeof *idx);
    int64_t *tmp = malloc((size_t)(cells->n ? cells->n : 1) * sizeof *tmp);
    uint64_t *load = calloc((size_t)p->world_size, sizeof *load);
    if (!idx || !tmp || !load) {
        free(idx);
        free(tmp);
        free(load);
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory choosing senders");
    }
    for (int64_t i = 0; i < cells->n; i++)
        idx[i] = i;
    sort_idx(idx, tmp, cells->n, cells->c);
    for (int64_t q = 0; q < cells->n; q++) {
        rs_cell_t *c = &cells->c[idx[q]];
        const int32_t *h = cells->h + c->holders;
        int32_t rdom = rs_domain_of(p, c->receiver);
        int best = -1, best_class = 2;
        for (int32_t j = 0; j < c->nholders; j++) {
            int32_t r = src->f[h[j]].rank;
            int cls = r == c->receiver ? 0 : rs_domain_of(p, r) == rdom ? 1 : 2;
            if (cls == 2)
                continue;
            if (best < 0 || cls < best_class ||
                (cls == best_class &&
                 (load[r] < load[src->f[h[best]].rank] ||
                  (load[r] == load[src->f[h[best]].rank] && r < src->f[h[best]].rank)))) {
                best = (int)j;
                best_class = cls;
            }
        }
        /* no holder in the receiver's domain: the topology step places it */
        c->chosen = best < 0 ? -1 : h[best];
        if (best_class == 1)
            load[src->f[h[best]].rank] += c->bytes;
    }
    free(idx);
    free(tmp);
    free(load);
    return RESHARD_OK;
}
