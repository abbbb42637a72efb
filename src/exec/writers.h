/*
 * Which plan last wrote which destination memory, process-wide: every execution stamps
 * the address ranges of the destination buffers it writes with a counter that only
 * grows and the writer (plan, rank). A delta plan's destination holds its committed
 * version only while every byte of it was last stamped by that plan's rank at its last
 * execution; another plan (dense or delta) writing an overlapping range in between is
 * seen at the delta plan's next execution, which then sends its streams dense.
 * Thread-safe (one mutex); memory: the ranges of the live plans' last executions.
 */
#ifndef RS_EXEC_WRITERS_H
#define RS_EXEC_WRITERS_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/reshard_transport.h"

/** @p plan's @p rank writes the @p n buffers @p b (zero-byte ones are skipped): stamp
 *  their ranges as its own, forgetting what it stamped at its previous execution.
 *  Returns the stamp (> 0). O(n log ranges) when the buffers are those of the previous
 *  execution. No error: out of memory, every later rs_writers_mine is false (dense). */
uint64_t rs_writers_stamp(const void *plan, int32_t rank, const reshard_buffer_t *b, int32_t n);
/** Whether every byte of the @p n buffers @p b was last stamped by @p plan's @p rank with
 *  @p stamp (no other plan or execution wrote any of it since). */
bool rs_writers_mine(const void *plan, int32_t rank, uint64_t stamp, const reshard_buffer_t *b,
                     int32_t n);
/** reshard_plan_delta_adopt: what @p from's @p rank stamped becomes @p to's @p rank's. */
void rs_writers_transfer(const void *from, const void *to, int32_t rank);
/** @p plan is destroyed: its ranges and records are freed (the memory counts as written
 *  by nobody: a delta plan whose ranges these overwrote stays not at its version). */
void rs_writers_forget(const void *plan);

#endif
