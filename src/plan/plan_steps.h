/* The steps of planning, one file each: validate, cut into cells, choose
 * senders, build and order pieces (with the topology step, topo.h), count
 * bytes. Below them: plan_util.h (helpers) and plan_internal.h (the plan). */
#ifndef RS_PLAN_STEPS_H
#define RS_PLAN_STEPS_H

#include "plan/plan_util.h"

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

/** Layouts scoped to one rank's own plan (reshard_model_refit_create_scoped)
 *  serve that plan only: both scoped alike, unchanged since they were built,
 *  @p p planning for their rank with the domain they were scoped to, a
 *  world holding theirs. INVALID_ARG (RANK for a small world) naming the
 *  rank and what differs otherwise; OK for two unscoped layouts. */
reshard_status_t rs_validate_scope(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                   const reshard_layout_t *dst);

/** Both catalogues describe the same tensors (the same object, or equal
 *  names, dtypes, views and quantized forms): SHAPE or DTYPE otherwise. */
reshard_status_t rs_check_catalogues(const reshard_tensors_t *a, const reshard_tensors_t *b);
/** Every fragment's rank is below @p world (RANK naming the @p side). */
reshard_status_t rs_check_ranks(const reshard_layout_t *l, int32_t world, const char *side);

/** Fragments of both layouts grouped by tensor, and scratch, for cutting one
 *  tensor at a time. */
typedef struct rs_cutter rs_cutter_t;

reshard_status_t rs_cutter_create(const reshard_plan_t *plan, rs_cutter_t **out);
void rs_cutter_free(rs_cutter_t *c);

/** The fragments of tensor @p t the cutter holds: source and destination
 *  layout indices, in layout order. */
void rs_cutter_frags(const rs_cutter_t *c, int32_t t, const int64_t **src, int64_t *nsrc,
                     const int64_t **dst, int64_t *ndst);

/** Replace @p cells by the cells of tensor @p t: every destination fragment
 *  of @p t in the plan's scope (plan->scope) cut along source fragment
 *  boundaries (step 1); UNCOVERED when a cell has no holder. Cells come in
 *  the order of their destination fragments in the layout. */
reshard_status_t rs_cells_build(const reshard_plan_t *plan, rs_cutter_t *cut, int32_t t,
                                rs_cells_t *cells);
void rs_cells_free(rs_cells_t *cells);

/** State of the direct step (direct.c), kept across tensors. */
typedef struct rs_direct rs_direct_t;

reshard_status_t rs_direct_create(const reshard_plan_t *plan, rs_direct_t **out);
void rs_direct_free(rs_direct_t *d);

/** The lower bounds' sums (stats.c), per domain and per rank. */
typedef struct {
    uint64_t *dom_need;  /**< per domain: unique bytes it needs from outside */
    uint64_t *sole_load; /**< per rank: bytes only it holds that other domains need */
    uint64_t path[4];    /**< with a placement: bytes by the nearest holder's path
                              (rs_path_t, placement.h) */
} rs_bounds_t;

/** Groups of tensor @p t that leave nothing to choose (step 1b): no rank of
 *  the domain holds an element of t, no two source fragments of t share one
 *  (each cell has one holder), and the domain's fragments of t land whole
 *  (rs_group_lands_whole). Each of their cells becomes one stage-0 piece
 *  from its holder to its receiver, which is what steps 2-4 would make of
 *  it, appended to @p v where the scope keeps it; its bytes go to @p bounds
 *  (when not NULL). The cells of the other groups stay in @p cells, in
 *  order. NOMEM. */
reshard_status_t rs_direct_take(const reshard_plan_t *plan, rs_direct_t *d, const rs_cutter_t *cut,
                                int32_t t, rs_cells_t *cells, rs_piece_vec_t *v,
                                rs_bounds_t *bounds);

/** Choose one sender per cell held inside its receiver's domain (step 2):
 *  the receiver itself when it holds the cell, else the domain peer with the
 *  least load within the cell's (domain, tensor) group; biggest cells first,
 *  ties rotated by group (rs_group_rotation). Cells no rank of the receiver's
 *  domain holds keep chosen = -1: the topology step (rs_topo_pieces, topo.h)
 *  lands each of them once per domain. */
reshard_status_t rs_assign_senders(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                   rs_cells_t *cells);

/** State of the topology step (topo.h) kept across tensors: per-rank loads (cleared
 *  after each group) and per-domain fragment bytes. */
typedef struct rs_topo rs_topo_t;

/** Pieces of assigned @p cells (step 4: in-domain moves) and of those that
 *  cross the network (rs_topo_pieces), appended to @p v where the plan's
 *  scope keeps them. */
reshard_status_t rs_pieces_add(const reshard_plan_t *plan, const rs_cells_t *cells, rs_topo_t *topo,
                               rs_piece_vec_t *v);

/** Merge the pieces @p v->p[from..n) (one tensor's) whose boxes touch
 *  (same stream and fragments, every dim but one equal; never a relayed
 *  landing or its forwards): when two share their fragments, they are
 *  sorted into stream order and merged; otherwise left as they are. NOMEM. */
reshard_status_t rs_pieces_merge(const reshard_plan_t *plan, rs_piece_vec_t *v, int64_t from);

/** Drop from @p v->p[from..n) the pieces a summary plan does not keep
 *  (rs_plan_keeps). */
void rs_pieces_keep(const reshard_plan_t *plan, rs_piece_vec_t *v, int64_t from);

/** Move the pieces of @p v (merged tensor by tensor) into the plan, sorted
 *  into stream order. */
reshard_status_t rs_pieces_finish(reshard_plan_t *plan, rs_piece_vec_t *v);

/** The lower bounds' sums, per domain and per rank (reshard_plan_stats_t),
 *  gathered one tensor's cells at a time. */
reshard_status_t rs_bounds_create(const reshard_plan_t *plan, rs_bounds_t *b);
void rs_bounds_free(rs_bounds_t *b);

/** Add to @p b a need of @p domain from outside it, of @p bytes, that no
 *  other need of its (domain, tensor) group overlaps and only @p holder
 *  holds: what rs_bounds_add counts for such a cell (a direct group's,
 *  rs_direct_take). */
static inline void rs_bounds_add_sole(rs_bounds_t *b, int32_t domain, int32_t holder,
                                      uint64_t bytes)
{
    b->dom_need[domain] += bytes;
    b->sole_load[holder] += bytes;
}

/** Add the needs of @p cells (all of their (domain, tensor) groups) to @p b. */
reshard_status_t rs_bounds_add(const reshard_plan_t *plan, const rs_cells_t *cells, rs_bounds_t *b);

/** Fill plan->stats from the pieces and, for a global plan, the bounds @p b;
 *  for a rank's own plan, that rank's counters only (reshard_plan_stats_t). */
reshard_status_t rs_stats_compute(reshard_plan_t *plan, const rs_bounds_t *b);

/** Per-rank chunk capacity from the staging bound and a bound on each rank's
 *  streams computed from the layouts alone (STAGING when too small). */
reshard_status_t rs_chunk_caps(reshard_plan_t *plan);

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
 *  layouts' fragments and declared buffers (in order) or, for a layout a
 *  generator built and nobody changed since, what it was built from (its
 *  origin: the same for the whole layout and every rank's scoped one), and
 *  world size, domain size, staging and relay bounds and timeout of @p p
 *  (after defaults). Independent of p->my_rank. */
uint64_t rs_fingerprint(const reshard_plan_params_t *p, const reshard_layout_t *src,
                        const reshard_layout_t *dst);

/** The parts of what rs_fingerprint covers, each hashed alone, so that ranks whose
 *  fingerprints differ can find which differ: the catalogue, the layouts' fragments
 *  (or their origins), the declared buffers of hand-built layouts, the params. */
void rs_fingerprint_parts(const reshard_plan_params_t *p, const reshard_layout_t *src,
                          const reshard_layout_t *dst, uint64_t part[RS_FP_PARTS]);

/** Per tensor of the catalogue (*n_out of them): a hash of its catalogue entry and of
 *  its fragments in hand-built layouts, for finding the first tensor where two ranks'
 *  inputs differ. Heap (the caller frees it); NULL when out of memory. */
uint64_t *rs_fingerprint_tensors(const reshard_layout_t *src, const reshard_layout_t *dst,
                                 int32_t *n_out);

/** Make the plan independent of the caller's layouts and catalogue: copy
 *  what execution reads (the catalogue; for a rank's own plan its own
 *  fragments and declared buffers and the fragments its pieces name, the
 *  pieces renumbered to them; for RESHARD_ALL_RANKS everything) and point
 *  plan->src and plan->dst at the copies. Last step of planning. */
reshard_status_t rs_plan_own_inputs(reshard_plan_t *plan);
void rs_plan_own_free(reshard_plan_t *plan);

#endif
