/*
 * Topology-aware planning (step 3): per destination domain, every
 * element its ranks need that no rank of the domain holds crosses the network
 * exactly once, landing on a rank that needs it (or, to balance the NICs, on
 * a relay rank's scratch); the landing rank forwards it to the other
 * fragments of the domain that need it (stage 1, NVLink, or a local copy
 * when the other fragment is on the landing rank itself).
 */
#ifndef RS_PLAN_TOPO_H
#define RS_PLAN_TOPO_H

#include "plan/plan_steps.h"

reshard_status_t rs_topo_create(const reshard_plan_t *plan, rs_topo_t **out);
void rs_topo_free(rs_topo_t *t);

/**
 * Pieces for every cell of @p cells (any tensors) that must cross the
 * network (chosen < 0, see rs_assign_senders): per (destination domain,
 * tensor) the needed boxes are
 * refined until any two are equal or disjoint; each distinct box (a unit)
 * lands once, on a rank that needs it (least bytes landed in the group
 * first; a large unit needed by several ranks is striped across them), is
 * sent by the holder with the least bytes sent in the group (biggest first,
 * sole holders first), and is forwarded to every other fragment of the
 * domain that needs it. Loads are per group, so the groups of the plan's
 * scope alone decide their pieces. Appends the pieces the scope keeps to
 * @p out; deterministic.
 */
reshard_status_t rs_topo_pieces(rs_topo_t *t, const rs_cells_t *cells, rs_piece_vec_t *out);

#endif
