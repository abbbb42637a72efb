/* Test helper: the layouts of one refit as one rank builds them, optionally
 * with that rank's destination mesh in another rank order (the mistake a
 * plan fingerprint must catch). */
#ifndef RS_TEST_MESH_PAIR_H
#define RS_TEST_MESH_PAIR_H

#include "reshard/reshard.h"

/** Rows and columns of the fp32 tensor "w" of the pair. */
enum { RS_MESH_PAIR_ROWS = 64, RS_MESH_PAIR_COLS = 32 };

typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *src, *dst;
} rs_mesh_pair_t;

/**
 * Tensor "w" [64, 32] fp32: source Shard(0) over mesh {0, 1}, destination
 * Shard(0) over mesh {2, 3} — or {3, 2} when @p swapped — each shard in
 * buffer 0 of its rank, declared as parameter "w" [32, 32] fp32. World 4.
 */
void rs_mesh_pair_make(rs_mesh_pair_t *p, int swapped);
void rs_mesh_pair_free(rs_mesh_pair_t *p);

#endif
