/* The stage-0 round schedule: how many bytes a stream moves in each round.
 * Both ends of a stream, the landing ranks that time their forwards and the
 * simulator compute it alike, from the stream's bytes and its chunk alone. */
#ifndef RS_PLAN_ROUNDS_H
#define RS_PLAN_ROUNDS_H

#include <stdbool.h>
#include <stdint.h>

#include "plan/plan_internal.h"

/** Below this, the tail of a tapered stream is not cut further (bytes). */
#define RS_TAPER_MIN_BYTES ((uint64_t)64 << 10)

/** A stream's stage-0 rounds: @p bytes on the wire (a multiple of 8), at most
 *  @p chunk a round (a multiple of 8, > 0). Without @p taper, chunk k moves
 *  in round k. With it (rs_plan_dense_rounds), the rounds stay a chunk each while two
 *  chunks or more are left; from there each round moves half of what is
 *  left (a multiple of 8), down to max(chunk / 16, RS_TAPER_MIN_BYTES), then
 *  the rest: a landing is forwarded two rounds after it is unpacked
 *  (exec/exec.c), so a short last round shortens the forwards that trail
 *  the network by as much. */
typedef struct {
    uint64_t bytes, chunk;
    bool taper;
} rs_rounds_t;

/** Bytes of the round that starts @p start bytes into the stream (< bytes). */
uint64_t rs_rounds_len(const rs_rounds_t *s, uint64_t start);

/** Stream bytes moved before round @p k (k >= 0; the stream's bytes after its last). */
uint64_t rs_rounds_start(const rs_rounds_t *s, int64_t k);

/** The round that moves stream byte @p y (y < bytes). */
int64_t rs_rounds_of(const rs_rounds_t *s, uint64_t y);

/** The number of rounds (0 for an empty stream). */
int64_t rs_rounds_count(const rs_rounds_t *s);

/** Does @p plan move its streams' own bytes in its rounds (a dense plan)? Then a round
 *  posts a stream's bytes as several messages (exec/exec.c) and its stage-0 streams
 *  taper. Not a delta plan (one encoded chunk a stream, over chunk-sized state) nor
 *  quantized destinations (one scaled chunk a stream). */
static inline bool rs_plan_dense_rounds(const reshard_plan_t *plan)
{
    return !plan->delta && !plan->quant;
}

#endif
