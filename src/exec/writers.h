/*
 * The last writer of destination memory, process-wide: every execution (any plan, dense
 * or delta) paints its destination buffers' address ranges with its writer (the plan and
 * rank) before anything moves, so a delta plan can tell at its next execution that
 * another plan wrote over what it committed (then it receives dense, docs/delta.md).
 */
#ifndef RS_EXEC_WRITERS_H
#define RS_EXEC_WRITERS_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/reshard.h"

/** A writer: an id (a delta plan's rank state, carried by reshard_plan_delta_adopt; a
 *  fresh one per execution of other plans) and the rank it executes. */
typedef struct {
    uint64_t plan;
    int32_t rank;
} rs_writer_t;

/** A process-unique writer id (never 0). Thread-safe. */
uint64_t rs_writer_new_id(void);

/** Whether every byte of the @p n buffers @p b (those with a pointer) was last painted
 *  by @p w at or after the paint numbered @p since: false when another writer painted
 *  any of them later, or none did. Thread-safe; O(n log m) for m painted ranges. */
bool rs_writers_all_mine(rs_writer_t w, const reshard_buffer_t *b, int32_t n, uint64_t since);

/** Paint the @p n buffers @p b as last written by @p w; returns the paint's number
 *  (increasing, process-wide), or 0 when memory ran out (then every later
 *  rs_writers_all_mine is false: delta plans receive dense, never wrong). Thread-safe. */
uint64_t rs_writers_paint(rs_writer_t w, const reshard_buffer_t *b, int32_t n);

#endif
