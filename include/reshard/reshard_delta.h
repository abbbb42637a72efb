/*
 * Delta refit (docs/delta.md): a plan made with reshard_plan_params_t.delta sends, per
 * chunk of every stream, only the words whose bits changed since the version the
 * receiving rank holds (lossless: the new bits, never arithmetic differences), and the
 * whole chunk where that is smaller or where the receiver is not at that version.
 *
 * Versions. Every rank of a delta plan is at a refit version (0 before its first
 * committed refit) and its destination buffers are in one of three states:
 *   NONE       never written by this plan;
 *   COMMITTED  the last execution succeeded on every rank: they hold that version;
 *   TORN       an execution that wrote some of them failed: some elements may be new
 *              and some old. Do not use the weights; the next execution that succeeds
 *              rewrites them whole (every stream into a torn rank is sent dense).
 * An execution commits (version = the largest version of any rank + 1) only when the
 * outcome agreement says every rank succeeded.
 *
 * What delta mode assumes: between executions, the destination buffers hold exactly what
 * the last committed execution wrote. Rebinding destination buffers (other pointers or
 * sizes) is detected and sent dense; so is another plan (or baseline) of this process
 * writing any byte of them since (every execution records, process-wide, the address
 * ranges it writes: docs/delta-reference.md); changing their contents in place behind
 * reshard's back (an engine that post-processes weights), or freeing a buffer and allocating
 * another at the same address, is detected only in checksum mode: call
 * reshard_plan_delta_invalidate then.
 *
 * Checksum mode (reshard_plan_params_t.delta_checksum): each chunk's header message also
 * carries the sender's XXH3_64bits of the chunk's new bytes; the receiver hashes the chunk
 * after apply, before writing it. A mismatch is RESHARD_ERR_VERIFY on that rank, naming
 * it, the sender, the chunk and the pieces (tensor, box, elements) the chunk covers; the
 * outcome agreement fails the refit on every rank, the receiver is TORN and the next
 * refit is dense. Cost: both ends hash every chunk, and 8 bytes a chunk on the wire.
 *
 * Elastic refit and replanning: a new plan holds no version (its first refit is dense)
 * unless each surviving rank moves its state over with reshard_plan_delta_adopt.
 *
 * Memory: per sending rank, a snapshot of the bytes it last sent
 * (reshard_delta_info_t.snapshot_bytes: the sum of its send streams to other ranks),
 * allocated before anything moves (NOMEM on every rank when it does not fit); on a rank
 * that relays, its relay scratch is kept between executions. Both live in the memory of
 * the comm's buffers: host memory, or device memory on the NCCL transport
 * (docs/delta-verification.md, "On device memory": GPU encode/apply kernels; the host
 * reads a round's headers, and then its apply results, in one copy each).
 *
 * Supported: host-memory transports (MPI, in-process, a caller's transport without
 * device_memory), the NCCL transport, domains, forwards and relays. Refused by name:
 * quantized (FP8) destinations at plan creation (INVALID_ARG naming the tensor); at
 * execution (UNSUPPORTED on every rank, before anything moves) a caller's transport with
 * device_memory (it has no delta kernels). Verification (on by default) runs on device
 * memory too, through the NCCL transport's hash kernel.
 */
#ifndef RESHARD_DELTA_H
#define RESHARD_DELTA_H

#include <stdint.h>

#include "reshard/reshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/** State of a rank's destination buffers under a delta plan (see above). */
typedef enum {
    RESHARD_DELTA_NONE = 0,
    RESHARD_DELTA_COMMITTED = 1,
    RESHARD_DELTA_TORN = 2,
} reshard_delta_state_t;

/** A rank's delta state, and what its last execution sent. Byte counts are bytes. */
typedef struct {
    int64_t version;             /**< committed refit version (0: none yet) */
    reshard_delta_state_t state; /**< of this rank's destination buffers */
    uint64_t snapshot_bytes;     /**< snapshot held by this rank (its send streams; host or
                                      device memory, as the comm's buffers) */
    uint64_t relay_bytes;        /**< relay scratch kept between executions */
    /* The last execution of this rank (zero before the first): */
    uint64_t stream_bytes;  /**< stream bytes it sent to other ranks (what dense sends) */
    uint64_t wire_bytes;    /**< bytes it put on the wire for them: headers and bodies */
    uint64_t changed_bytes; /**< bytes of the words that differed from its snapshot */
    int64_t chunks[4];      /**< chunks sent dense, bitmap+values, runs+values, gaps+values */
    int64_t dense_streams;  /**< streams sent dense: the receiver was not at its version */
} reshard_delta_info_t;

/** Name of a state ("committed"). Never NULL. */
const char *reshard_delta_state_string(reshard_delta_state_t state);

/**
 * The delta state of @p rank under @p plan: the plan's own rank (or any rank of a
 * RESHARD_ALL_RANKS plan), read by the thread that executes it, between executions.
 * Errors: INVALID_ARG (NULL argument, a plan made without delta), RANK (@p rank is not
 * a rank this plan executes).
 */
reshard_status_t reshard_plan_delta_info(const reshard_plan_t *plan, int32_t rank,
                                         reshard_delta_info_t *out);

/**
 * Tell a delta plan that @p rank's destination buffers no longer hold what its last
 * committed execution wrote: an engine post-processed or reloaded them, or they were
 * freed and allocated again (possibly at the same address, with the same size: reshard
 * cannot tell that allocation from the old one by its pointer). The rank's next
 * execution receives every stream dense and commits; its version is kept. Called by
 * the thread that executes @p rank, between executions. Without it (and without
 * checksum mode) a delta lands on whatever the buffers then hold.
 * Errors: INVALID_ARG (NULL, a plan made without delta), RANK (@p rank is not a rank
 * this plan executes).
 */
reshard_status_t reshard_plan_delta_invalidate(reshard_plan_t *plan, int32_t rank);

/**
 * Elastic refit (reshard_elastic.h) and replanning: move @p rank's delta state from
 * @p from, the delta plan this rank executed last (with every other rank of it), to
 * @p plan, a delta plan not executed yet for the new membership
 * (reshard_membership_layouts) or of the same layouts. Called by each surviving rank,
 * locally, before the new plan's first execution; a new or restarted rank does not call
 * it (it holds no version, so everything it receives comes dense). Afterwards:
 *  - the rank keeps its version; its destination keeps its state (committed or torn)
 *    when its destination fragments are the same in both plans (then, as always, its
 *    buffers must be the same ones for a delta to land on them), else it is NONE;
 *  - its snapshot is rebuilt for the new plan's send streams: each piece whose tensor and
 *    box the old snapshot held, in a stream valid there, is copied from it; a stream with
 *    a piece it did not hold (the new membership moved that box to this rank) or held in
 *    a stream not valid (@p from adopted in turn and never executed: its dense-once
 *    streams) is sent dense once;
 *  - the destination address ranges @p from's rank last wrote count as @p plan's;
 *  - its relay scratch is not kept (a relaying rank receives dense once);
 *  - @p from's state for @p rank is emptied (version 0, no snapshot): executing @p from
 *    again sends and receives dense. @p from is retired (reshard_plan_set_name): it no
 *    longer counts among the rank's plans of these inputs, and pairs only with itself.
 * A snapshot from an execution that failed is never valid, so after a rank was lost
 * mid-execution the next refit is dense everywhere (and its torn destinations stay torn
 * until it commits).
 * Errors: INVALID_ARG (NULL, one plan twice, a plan without delta, different world sizes,
 * @p plan executed already), MISMATCH (different catalogues), RANK (@p rank not executed
 * by both), NOMEM (the new snapshot; nothing changed).
 */
reshard_status_t reshard_plan_delta_adopt(reshard_plan_t *plan, reshard_plan_t *from, int32_t rank);

/**
 * Synthetic updates for delta refits (the CLI's --change-fraction, tests): the pattern
 * of reshard_fill_pattern at refit @p version. Version 0 is reshard_fill_pattern's
 * pattern; version j > 0 changes a deterministic @p change_fraction of the elements of
 * every tensor (chosen by a hash of tensor, j and global flat index, so replicas agree)
 * to new values. Local; buffers as in reshard_fill_pattern.
 * Errors: INVALID_ARG (version < 0, change_fraction outside [0, 1]), BUFFER.
 */
reshard_status_t reshard_fill_pattern_version(const reshard_layout_t *layout, int32_t rank,
                                              const reshard_buffer_t *bufs, int32_t n_bufs,
                                              int64_t version, double change_fraction);

/**
 * reshard_verify_pattern against the pattern at @p version (reshard_fill_pattern_version):
 * every element of @p rank's fragments and every padding byte. Errors: as
 * reshard_verify_pattern, and INVALID_ARG for a version > 0 of a quantized tensor.
 */
reshard_status_t reshard_verify_pattern_version(const reshard_layout_t *layout, int32_t rank,
                                                const reshard_buffer_t *bufs, int32_t n_bufs,
                                                int64_t version, double change_fraction,
                                                uint64_t *verified_bytes);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_DELTA_H */
