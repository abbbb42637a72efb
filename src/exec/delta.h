/*
 * Delta refit state (reshard_delta.h): per rank its version, the state of its
 * destination buffers, its snapshot of the bytes last sent and its kept relay scratch;
 * and the version commit that follows the outcome agreement.
 */
#ifndef RS_EXEC_DELTA_H
#define RS_EXEC_DELTA_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/reshard_delta.h"
#include "plan/plan_internal.h"
#include "reshard/reshard_transport.h"

typedef struct {
    int64_t version;
    reshard_delta_state_t state;
    uint64_t dst_key; /**< the destination buffers (pointers, sizes) of the last commit */
    uint64_t key_now; /**< those of the running execution */
    uint8_t *snap;    /**< bytes last sent, per send stream in loop order */
    uint64_t snap_bytes;
    bool snap_valid; /**< snap holds what the last committed execution sent */
    /** After reshard_plan_delta_adopt: per send stream (snapshot order), whether its part
     *  of snap holds the committed version; NULL: every stream (when snap_valid). */
    uint8_t *stream_ok;
    uint8_t *relay;
    uint64_t relay_bytes;
    /** The device memory snap and relay live in (exec/delta_dev_ops.h), NULL: host memory. */
    const struct rs_delta_dev_ops *dev;
    bool wrote; /**< the running execution wrote a destination or relay byte */
    /** The stamp of this rank's destination ranges at its last execution (exec/writers.h). */
    uint64_t wstamp;
    reshard_delta_info_t last;
} rs_delta_rank_t;

typedef struct rs_delta {
    int32_t my_rank; /**< the plan's rank, or RESHARD_ALL_RANKS (then one per rank) */
    int32_t n;
    rs_delta_rank_t *r;
} rs_delta_t;

/** The state of a delta plan for @p my_rank of @p world ranks (NULL: NOMEM). */
rs_delta_t *rs_delta_create(int32_t my_rank, int32_t world);
void rs_delta_free(rs_delta_t *d);
/** The state of @p rank, or NULL when the plan does not execute it. */
rs_delta_rank_t *rs_delta_rank(const rs_delta_t *d, int32_t rank);

/** Before the first agreement: a snapshot of @p snap_bytes (kept when it has that size and
 *  lives in the memory of @p comm, else reallocated and invalid: device memory through
 *  comm->delta_dev when the comm has it, else host memory) and the key of this execution's
 *  destination buffers. A committed destination that another plan (or execution) of this
 *  process wrote since @p plan's last one (exec/writers.h) holds no version any more: its
 *  state becomes none, so its senders send dense. Errors: NOMEM naming @p rank and the size. */
reshard_status_t rs_delta_prepare(rs_delta_rank_t *r, const reshard_plan_t *plan,
                                  reshard_comm_t *comm, int32_t rank, uint64_t snap_bytes,
                                  const reshard_buffer_t *dst, int32_t n_dst);
/** Free @p r's snapshot and relay scratch (in whichever memory they live). */
void rs_delta_release(rs_delta_rank_t *r);
/** Relay scratch of @p bytes kept between executions into *@p out; a new one holds no
 *  version, so this execution's senders are told to send dense (must be called after
 *  rs_delta_prepare and before rs_delta_held_version). Errors: NOMEM. */
reshard_status_t rs_delta_relay(rs_delta_rank_t *r, reshard_comm_t *comm, int32_t rank,
                                uint64_t bytes, void **out);
/** The version this rank tells its senders it holds: its version when its destination
 *  buffers are committed and the same ones as at that commit, else -1 (send dense). */
int64_t rs_delta_held_version(const rs_delta_rank_t *r);
/** Whether send stream @p j (in snapshot order) may be encoded against the snapshot. */
bool rs_delta_stream_ok(const rs_delta_rank_t *r, int64_t j);
/** Fill the words of the outcome agreement (RESHARD_AGREE_WORDS) with this rank's. */
void rs_delta_words(const rs_delta_rank_t *r, int64_t *words);
/** After the outcome agreement: commit version max + 1 when @p agreed is OK (with the
 *  agreement's @p min_words), else mark the destination torn when anything was written
 *  and the snapshot invalid. */
void rs_delta_commit(rs_delta_rank_t *r, reshard_status_t agreed, const int64_t *min_words);

/** Checksum mode (reshard_plan_params_t.delta_checksum): the 64-bit hash of @p len bytes
 *  (XXH3_64bits, seed 0) that a chunk's sender puts after its header and its receiver
 *  compares with the chunk it holds after apply. */
uint64_t rs_delta_hash(const void *bytes, uint64_t len);
/** The bytes a checksum-mode header message takes after the chunk header: the hash. */
#define RS_DELTA_HASH_BYTES 8u

/** The error of a chunk whose hash after apply is not the sender's: VERIFY, naming the
 *  receiving @p rank, the sender @p peer, the round @p k and every piece the chunk
 *  covers (tensor, box, elements of the box in row-major order). The chunk is the @p len
 *  stream bytes of stream @p s of @p plan from piece @p piece, byte @p off on. */
reshard_status_t rs_delta_checksum_error(const reshard_plan_t *plan, const rs_stream_t *s,
                                         int64_t piece, uint64_t off, uint64_t len, int32_t rank,
                                         int64_t k);

#endif
