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

/** Checks before planning: catalogues agree, ranks in range, destination fragments
 *  do not share bytes. */
reshard_status_t rs_validate(const reshard_layout_t *src, const reshard_layout_t *dst,
                             int32_t world);

/** Cut every destination fragment along source fragment boundaries (step 1);
 *  UNCOVERED when a cell has no holder. */
reshard_status_t rs_cells_build(const reshard_layout_t *src, const reshard_layout_t *dst,
                                rs_cells_t *cells);
void rs_cells_free(rs_cells_t *cells);

/** Choose one sender per cell held inside its receiver's domain (step 2):
 *  the receiver itself when it holds the cell, else the least-loaded holder
 *  of the domain; biggest cells first, deterministic ties. Cells no rank of
 *  the receiver's domain holds keep chosen = -1: the topology step
 *  (rs_topo_pieces, topo.h) lands each of them once per domain. */
reshard_status_t rs_assign_senders(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                   rs_cells_t *cells);

/** Turn assigned cells into pieces, merge neighbours and sort into stream
 *  order (step 4). */
reshard_status_t rs_pieces_build(reshard_plan_t *plan, const rs_cells_t *cells);

/** Fill plan->stats from the pieces and the cells (for the lower bounds). */
reshard_status_t rs_stats_compute(reshard_plan_t *plan, const rs_cells_t *cells);

/** Per-rank chunk capacity from the staging bound (STAGING when too small). */
reshard_status_t rs_chunk_caps(reshard_plan_t *plan);

#endif
