/* The steps of planning, one file each: validate, cut into cells, choose
 * senders, build and order pieces, count bytes. */
#ifndef RS_PLAN_STEPS_H
#define RS_PLAN_STEPS_H

#include "plan/plan_internal.h"

/** A cell: a part of one destination fragment that every one of its holders
 *  (source fragments) holds whole. */
typedef struct {
    reshard_box_t box;
    int32_t tensor;
    int32_t to_frag;
    int32_t receiver;
    int32_t nholders;
    int64_t holders; /**< offset into rs_cells_t.h (source fragment indices) */
    int32_t chosen;  /**< chosen source fragment index; -1: placed by the topology step */
    uint64_t bytes;
} rs_cell_t;

typedef struct {
    rs_cell_t *c;
    int64_t n, cap;
    int32_t *h;
    int64_t hn, hcap;
} rs_cells_t;

/** Checks before planning: catalogues agree, ranks in range, fragments in
 *  declared buffers fit them and have their dtype, destination
 *  fragments do not share bytes (those of @p rank, or of every rank for
 *  RESHARD_ALL_RANKS: each rank checks the buffers it writes). */
reshard_status_t rs_validate(const reshard_layout_t *src, const reshard_layout_t *dst,
                             int32_t world, int32_t rank);

/** Cut every destination fragment of the plan's scope (plan->scope) along
 *  source fragment boundaries (step 1); UNCOVERED when a cell has no holder. */
reshard_status_t rs_cells_build(const reshard_plan_t *plan, rs_cells_t *cells);
void rs_cells_free(rs_cells_t *cells);

/** Choose one sender per cell held inside its receiver's domain (step 2):
 *  the receiver itself when it holds the cell, else the domain peer with the
 *  least load within the cell's (domain, tensor) group; biggest cells first,
 *  ties rotated by group (rs_group_rotation). Cells no rank of the receiver's
 *  domain holds keep chosen = -1: the topology step (rs_topo_pieces, topo.h)
 *  lands each of them once per domain. */
reshard_status_t rs_assign_senders(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                   rs_cells_t *cells);

/** Turn assigned cells into pieces, merge neighbours and sort into stream
 *  order (step 4). */
reshard_status_t rs_pieces_build(reshard_plan_t *plan, const rs_cells_t *cells);

/** Fill plan->stats from the pieces and the cells (for the lower bounds); for
 *  a rank's own plan, that rank's counters only (reshard_plan_stats_t). */
reshard_status_t rs_stats_compute(reshard_plan_t *plan, const rs_cells_t *cells);

/** Per-rank chunk capacity from the staging bound and a bound on each rank's
 *  streams computed from the layouts alone (STAGING when too small). */
reshard_status_t rs_chunk_caps(reshard_plan_t *plan);

/** Start of the tie-break rotation of the group (@p domain, @p tensor) over
 *  @p n candidates: consecutive domains continue where the previous one's
 *  @p per_group choices ended, and tensors are staggered, so equal choices
 *  spread over replicas without any load shared between groups. */
static inline int32_t rs_group_rotation(int32_t domain, int32_t tensor, int64_t per_group,
                                        int32_t n)
{
    if (n <= 1)
        return 0;
    uint64_t k = (uint64_t)domain * (uint64_t)(per_group > 0 ? per_group : 1) + (uint64_t)tensor;
    return (int32_t)(k % (uint64_t)n);
}

/** Of the @p k ranks rk[0..k), the index of the one with the least @p load
 *  (indexed by rank); ties go in the order rotated to start at @p rot. */
static inline int32_t rs_least_loaded(const uint64_t *load, const int32_t *rk, int32_t k,
                                      int32_t rot)
{
    int32_t best = -1;
    for (int32_t q = 0; q < k; q++) {
        int32_t i = (rot + q) % k;
        if (best < 0 || load[rk[i]] < load[rk[best]])
            best = i;
    }
    return best;
}

/** Fingerprint of the inputs that shape a plan: the catalogue, both
 *  layouts' fragments and declared buffers (in order), and world size,
 *  domain size, staging and relay bounds and timeout of @p p (after
 *  defaults). Independent of p->my_rank. */
uint64_t rs_fingerprint(const reshard_plan_params_t *p, const reshard_layout_t *src,
                        const reshard_layout_t *dst);

/** Make the plan independent of the caller's layouts and catalogue: copy
 *  what execution reads (the catalogue; for a rank's own plan its own
 *  fragments and declared buffers and the fragments its pieces name, the
 *  pieces renumbered to them; for RESHARD_ALL_RANKS everything) and point
 *  plan->src and plan->dst at the copies. Last step of planning. */
reshard_status_t rs_plan_own_inputs(reshard_plan_t *plan);
void rs_plan_own_free(reshard_plan_t *plan);

#endif
