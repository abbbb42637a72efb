/* Quantized destinations turned into wire layouts to plan (quant_wire.c). */
#ifndef RS_PLAN_QUANT_WIRE_H
#define RS_PLAN_QUANT_WIRE_H

#include "plan/plan_internal.h"

/** When @p dst's catalogue marks tensors as quantized (reshard_tensors_set_quant):
 *  the wire catalogue and layouts, the pre and post steps of every rank and
 *  the scratch each rank needs, in *@p out; NULL when none is marked.
 *  Errors (naming tensor, rank and box): SHAPE, DTYPE, RANK (as rs_validate),
 *  CONFIG (a block neither side holds whole), UNCOVERED (no scale fragment
 *  on the rank for a block), INVALID_ARG (a source fragment of a scale
 *  tensor), NOMEM. */
reshard_status_t rs_quant_wire(const reshard_layout_t *src, const reshard_layout_t *dst,
                               int32_t world, rs_qplan_t **out);
/** Free the wire catalogue and layouts (once the plan owns its copies). */
void rs_qplan_drop_inputs(rs_qplan_t *qp);
/** Keep only @p rank's steps (a rank's own plan). */
void rs_qplan_keep_rank(rs_qplan_t *qp, int32_t rank);
/** Once @p plan's pieces and own layouts exist (rs_plan_own_inputs) and
 *  plan->quant keeps the steps of the ranks it executes for: keep only the
 *  source regions some piece sends or copies (a replica that never sends
 *  quantizes nothing), packed, and size each rank's source scratch for
 *  them. Moves the scratch fragments of plan->own_src and renumbers the
 *  pieces; in a rank's own plan, other ranks' scratch fragments its pieces
 *  name keep their unpacked positions (only their sender reads them).
 *  Errors: NOMEM. */
reshard_status_t rs_qplan_pack_scratch(reshard_plan_t *plan);
void rs_qplan_free(rs_qplan_t *qp);

#endif
