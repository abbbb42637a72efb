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

/** A growable array of pieces. */
typedef struct {
    rs_piece_t *p;
    int64_t n, cap;
} rs_piece_vec_t;

/** State of the topology step kept across tensors: per-rank loads (cleared
 *  after each group) and per-domain fragment bytes. */
typedef struct rs_topo rs_topo_t;

/** Make room for one more element in the array *@p v of *@p cap elements of
 *  @p size bytes holding @p n: doubles it when full (from 64). -1 when out
 *  of memory (the array is left as it was). */
int rs_grow(void *v, int64_t *cap, int64_t n, size_t size);

/** Append @p piece when @p plan's scope keeps its stream (rs_scope_keeps);
 *  -1 when out of memory. */
int rs_piece_vec_push(const reshard_plan_t *plan, rs_piece_vec_t *v, const rs_piece_t *piece);

/** Order of boxes of one ndim: offsets lexicographically, then extents. */
int rs_box_cmp(const reshard_box_t *a, const reshard_box_t *b);

/** What is sorted: a record's leading key, its address and the comparator. */
typedef struct {
    uint64_t key;
    const void *rec;
    int (*cmp)(const void *, const void *);
} rs_ref_t;

/** Sort @p n refs by (key, cmp, address): stable for refs in address order. */
void rs_sort_refs(rs_ref_t *r, size_t n);

/** Reorder @p n records of @p size bytes so that position i holds the
 *  record that was at @p from[i] (a permutation, overwritten); each record
 *  moves once, through @p tmp (@p size bytes). */
void rs_permute_records(void *base, size_t n, size_t size, size_t *from, void *tmp);

/** Sorted distinct boundaries (offset and end) along dim @p d of @p n boxes,
 *  the i-th at (const char *)first + i * stride; malloc'd, count in *np;
 *  NULL when out of memory. */
int64_t *rs_box_cuts(const reshard_box_t *first, size_t stride, int64_t n, int d, int64_t *np);

/** A stage-0 piece of @p box of @p tensor from source fragment @p from_frag
 *  (its rank sends) to destination fragment @p to_frag on @p receiver. */
rs_piece_t rs_direct_piece(const reshard_plan_t *plan, const reshard_box_t *box, int32_t tensor,
                           int32_t from_frag, int32_t to_frag, int32_t receiver, uint64_t bytes);

/** Sort @p n records of @p size bytes by @p cmp (ties by position: stable),
 *  moving each record only twice. @p key, when not NULL, gives a leading key
 *  that orders records as @p cmp does where keys differ (comparisons of
 *  distinct keys then skip @p cmp). -1 when out of memory. */
int rs_sort_records(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *),
                    uint64_t (*key)(const void *));

/** True when a source fragment holding cell @p c lives in the domain of its
 *  receiver (the cell then moves over NVLink or by a local copy, never over
 *  the network). */
bool rs_cell_in_domain(const reshard_plan_params_t *p, const reshard_layout_t *src,
                       const rs_cells_t *cells, const rs_cell_t *c);

/** True for a relay piece: a stage-0 piece landing on a rank that does not
 *  own its destination fragment (it lands in that rank's relay scratch), or
 *  a stage-1 piece forwarding from such scratch. */
static inline bool rs_piece_is_relay(const reshard_layout_t *dst, const rs_piece_t *p)
{
    return p->stage == RS_STAGE_DIRECT ? dst->f[p->to_frag].rank != p->receiver
                                       : dst->f[p->from_frag].rank != p->sender;
}

/** Pieces of assigned @p cells (step 4: in-domain moves) and of those that
 *  cross the network (rs_topo_pieces), appended to @p v where the plan's
 *  scope keeps them. */
reshard_status_t rs_pieces_add(const reshard_plan_t *plan, const rs_cells_t *cells, rs_topo_t *topo,
                               rs_piece_vec_t *v);

/** Move the pieces of @p v into the plan, merged where boxes touch and
 *  sorted into stream order. */
reshard_status_t rs_pieces_finish(reshard_plan_t *plan, rs_piece_vec_t *v);

/** Ranks in domain @p domain (the last domain may be short). */
int32_t rs_domain_ranks(const reshard_plan_params_t *p, int32_t domain);

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
