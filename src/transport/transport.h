/*
 * The transport interface every engine implements (in-process, MPI, NCCL).
 *
 * The executor moves data in rounds. In round k every stream (one per pair of
 * ranks) moves its k-th chunk: the sender packs it into staging and posts a
 * send, the receiver posts a receive into staging and unpacks after the wait.
 * Two rounds may be in flight (slots 0 and 1), so packing round k+1 overlaps
 * the transfer of round k. Both sides of a pair agree on every chunk size
 * because both derive it from the same global plan.
 */
#ifndef RS_TRANSPORT_H
#define RS_TRANSPORT_H

#include <stdbool.h>

#include "reshard/reshard.h"
#include "util/quant_types.h"

/** Elements [first, first+count) of @c box in row-major order, stored per
 *  @c frag (base and strides) in a buffer of @c elem_size-byte elements. */
typedef struct {
    const reshard_fragment_t *frag;
    const reshard_box_t *box;
    int64_t first;
    int64_t count;
    uint32_t elem_size;
} rs_span_t;

/** Words reduced by MIN alongside the status of every agreement. */
#define RS_AGREE_WORDS 6

typedef struct rs_transport_ops {
    const char *name;
    /** True when buffers and staging are device (GPU) memory. */
    bool device_memory;
    /** Staging memory of @p bytes usable for pack/unpack and transfers. */
    reshard_status_t (*alloc_staging)(reshard_comm_t *c, uint64_t bytes, void **out);
    void (*free_staging)(reshard_comm_t *c, void *p);
    /** Start collecting round operations into @p slot (0 or 1). */
    reshard_status_t (*round_begin)(reshard_comm_t *c, int slot);
    reshard_status_t (*post_send)(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                  uint64_t bytes);
    reshard_status_t (*post_recv)(reshard_comm_t *c, int slot, int32_t peer, void *buf,
                                  uint64_t bytes);
    /** Launch everything posted into @p slot. */
    reshard_status_t (*round_end)(reshard_comm_t *c, int slot);
    /** Wait until every operation of @p slot completed; TIMEOUT after
     *  @p timeout_s seconds without completion. */
    reshard_status_t (*round_wait)(reshard_comm_t *c, int slot, double timeout_s);
    /** Pack @p span from @p buf into @p out; NULL means the CPU implementation. */
    reshard_status_t (*pack)(reshard_comm_t *c, void *out, const void *buf, const rs_span_t *span);
    /** Unpack @p span from @p in into @p buf; NULL means the CPU implementation. */
    reshard_status_t (*unpack)(reshard_comm_t *c, void *buf, const void *in, const rs_span_t *span);
    /** Copy box @p box from (src_frag in src) to (dst_frag in dst) on this
     *  rank; NULL means the CPU implementation. */
    reshard_status_t (*local_copy)(reshard_comm_t *c, void *dst, const reshard_fragment_t *dst_frag,
                                   const void *src, const reshard_fragment_t *src_frag,
                                   const reshard_box_t *box, uint32_t elem_size);
    /** Quantize the bf16 elements of @p box read from (src_frag in src) into
     *  e4m3 bytes in (dst_frag in dst) and one scale per block in
     *  (scale_frag in scale), by the rule of util/fp8.h, conventions in exec/quant.h
     * (rs_quant_box_cpu, whose arguments these are); NULL means the CPU implementation. */
    reshard_status_t (*quantize)(reshard_comm_t *c, const struct rs_quant *q, void *dst,
                                 const reshard_fragment_t *dst_frag, void *scale,
                                 const reshard_fragment_t *scale_frag, const void *src,
                                 const reshard_fragment_t *src_frag, const reshard_box_t *box);
    /** Agree on an outcome: every rank passes its local status and gets an
     *  error of some rank if any failed (or TIMEOUT if a rank does not arrive
     *  within @p timeout_s; once some rank timed out, the others stop waiting
     *  promptly: the first to give up releases all, see reshard_elastic.h). Collective over all
     * ranks of the comm; called twice per execution: before any byte moves (buffer checks, plan
     *  fingerprints) and at the end. With the same reduction every rank also
     *  passes RS_AGREE_WORDS words (@p words; NULL = all INT64_MAX) and
     *  receives their element-wise minimum over all ranks in @p min_words
     *  (may be NULL); exec/agree.c gives them their meaning. */
    reshard_status_t (*finish)(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                               int64_t *min_words, double timeout_s);
    /** Elastic refit (reshard_elastic.h), optional (NULL: not supported).
     *  Set flags[p] = 1 for every peer p this rank found unresponsive: its
     *  operations were outstanding when a wait timed out. */
    void (*unresponsive)(const reshard_comm_t *c, unsigned char *flags);
    /** Survivor-only exchange of one agreement round, on a channel apart from
     *  round data: send @p bytes of @p msg to each of the @p n @p peers and
     *  receive @p bytes from each into recv + i * bytes, setting got[i] = 1
     *  for each that arrived before @p deadline (seconds of CLOCK_MONOTONIC).
     *  Waits (until the deadline) only for the first @p n_need peers; the
     *  messages of the others are taken when they are already there.
     *  Rounds (@p round) are kept apart. Never blocks past the deadline. */
    reshard_status_t (*agree_exchange)(reshard_comm_t *c, int round, const int32_t *peers,
                                       int32_t n, int32_t n_need, const void *msg, uint64_t bytes,
                                       void *recv, unsigned char *got, double deadline);
    /** Free the transport's state (impl). */
    void (*destroy)(reshard_comm_t *c);
} rs_transport_ops_t;

struct reshard_comm {
    const rs_transport_ops_t *ops;
    int32_t rank;
    int32_t size;
    void *impl;
    /** Set when an execution on this endpoint ended in TIMEOUT or TRANSPORT:
     *  the peers' progress is unknown, so a later execution could pair this
     *  rank's messages with another step's. reshard_plan_execute and
     *  reshard_plan_fail refuse a broken endpoint; it can still be shrunk
     *  (reshard_elastic.h) or destroyed. */
    bool broken;
    /** RS_COMM_BUSY while a call uses the endpoint (an execution, an
     *  agreement), RS_COMM_CLOSING once reshard_comm_destroy began; read and
     *  written with __atomic builtins only (exec/comm.c). */
    int use;
};

enum { RS_COMM_BUSY = 1, RS_COMM_CLOSING = 2 };

/** Take @p comm for one call @p what (a function name) of this thread: INVALID_ARG naming
 *  the rank when another thread is using it (two threads on one endpoint would
 *  interleave their messages, and peers would take one's bytes for the other's) or it is
 *  being destroyed; nothing is sent then. Release with rs_comm_leave. */
reshard_status_t rs_comm_enter(reshard_comm_t *comm, const char *what);
void rs_comm_leave(reshard_comm_t *comm);

#endif
