/* Where ranks live (RESHARD_PLAN_PARAM_PLACEMENT): the path between two ranks,
 * the plan's own copy of the placement, and the per-path lower bounds. */
#ifndef RS_PLAN_PLACEMENT_H
#define RS_PLAN_PLACEMENT_H

#include "plan/plan_steps.h"

/** The path a piece takes from @p a to @p b, nearest first. */
typedef enum { RS_PATH_LOCAL, RS_PATH_DEVICE, RS_PATH_HOST, RS_PATH_NETWORK } rs_path_t;

/** True when @p p carries a placement. */
static inline bool rs_has_placement(const reshard_plan_params_t *p)
{
    return (p->field_mask & RESHARD_PLAN_PARAM_PLACEMENT) && p->host;
}

/** Path from rank @p a to rank @p b (RS_PATH_NETWORK without a placement). */
static inline rs_path_t rs_path_of(const reshard_plan_params_t *p, int32_t a, int32_t b)
{
    if (a == b)
        return RS_PATH_LOCAL;
    if (!rs_has_placement(p) || p->host[a] != p->host[b])
        return RS_PATH_NETWORK;
    if (p->device && p->device[a] == p->device[b] && p->device[a] != RESHARD_DEVICE_CPU)
        return RS_PATH_DEVICE;
    return RS_PATH_HOST;
}

/** True when the piece @p q is a one-sided read of a colocated plan: a stage-0
 *  piece between distinct ranks of one host landing in its receiver's own
 *  destination fragment. */
static inline bool rs_piece_is_peer_read(const reshard_plan_t *plan, const rs_piece_t *q)
{
    return plan->p.colocated && q->stage == RS_STAGE_DIRECT && q->sender != q->receiver &&
           rs_path_of(&plan->p, q->sender, q->receiver) != RS_PATH_NETWORK &&
           !rs_piece_is_relay(plan->dst, q);
}

/** Check the placement and colocated fields of @p plan->p (given by the caller) and
 *  point them at the plan's own copies. INVALID_ARG naming the rank; NOMEM. */
reshard_status_t rs_placement_own(reshard_plan_t *plan);
void rs_placement_free(reshard_plan_t *plan);

/** Add each cell's bytes to @p bound[path] for the nearest holder's path to
 *  its receiver (nothing for cells the receiver holds). */
void rs_placement_bounds_add(const reshard_plan_t *plan, const rs_cells_t *cells,
                             uint64_t bound[4]);

#endif
