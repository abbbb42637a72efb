/* Small helpers shared by the steps of planning: growable arrays, sorting
 * large records, box order and boundaries, stage-0 pieces. They sit below
 * the steps (plan_steps.h) and know nothing of them. */
#ifndef RS_PLAN_UTIL_H
#define RS_PLAN_UTIL_H

#include "plan/plan_internal.h"

/** A growable array of pieces. */
typedef struct {
    rs_piece_t *p;
    int64_t n, cap;
} rs_piece_vec_t;

/** Make room for one more element in the array *@p v of *@p cap elements of
 *  @p size bytes holding @p n: doubles it when full (from 64). -1 when out
 *  of memory (the array is left as it was). */
int rs_grow(void *v, int64_t *cap, int64_t n, size_t size);

/** Append @p piece when @p plan's scope keeps its stream (rs_scope_keeps);
 *  -1 when out of memory. */
int rs_piece_vec_push(const reshard_plan_t *plan, rs_piece_vec_t *v, const rs_piece_t *piece);

/** Order of boxes of one ndim: offsets lexicographically, then extents. */
int rs_box_cmp(const reshard_box_t *a, const reshard_box_t *b);

/** What is sorted: a record's two leading keys, its address and the comparator. */
typedef struct {
    uint64_t key, key2;
    const void *rec;
    int (*cmp)(const void *, const void *);
} rs_ref_t;

/** Sort @p n refs by (key, key2, cmp, address): stable for refs in address
 *  order. Radix on the keys, then the comparator within runs of equal keys. */
void rs_sort_refs(rs_ref_t *r, size_t n);

/** Reorder @p n records of @p size bytes so that position i holds the
 *  record that was at @p from[i] (a permutation, overwritten); each record
 *  moves once, through @p tmp (@p size bytes). */
void rs_permute_records(void *base, size_t n, size_t size, size_t *from, void *tmp);

/** Step the index @p k (lo[d] <= k[d] < hi[d] per dim, last dim fastest)
 *  to the next point of its grid; false, with @p k back at @p lo, after
 *  the last. */
bool rs_grid_next(int nd, int64_t *k, const int64_t *lo, const int64_t *hi);

/** Index of the first of the sorted @p n points @p pts that is >= @p x. */
int64_t rs_lower_bound(const int64_t *pts, int64_t n, int64_t x);

/** Sorted distinct boundaries (offset and end) along dim @p d of @p n boxes,
 *  the i-th at (const char *)first + i * stride; malloc'd, count in *np;
 *  NULL when out of memory. */
int64_t *rs_box_cuts(const reshard_box_t *first, size_t stride, int64_t n, int d, int64_t *np);

/** A stage-0 piece of @p box of @p tensor from source fragment @p from_frag
 *  (its rank sends) to destination fragment @p to_frag on @p receiver. */
rs_piece_t rs_direct_piece(const reshard_plan_t *plan, const reshard_box_t *box, int32_t tensor,
                           int32_t from_frag, int32_t to_frag, int32_t receiver, uint64_t bytes);

/** Sort @p n records of @p size bytes by @p cmp (ties by position: stable),
 *  moving each record only twice. @p key and then @p key2, when not NULL,
 *  give leading keys that order records as @p cmp does where they differ
 *  (records are radix-sorted by them; @p cmp only orders runs of equal
 *  keys). -1 when out of memory. */
int rs_sort_records(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *),
                    uint64_t (*key)(const void *), uint64_t (*key2)(const void *));

#endif
