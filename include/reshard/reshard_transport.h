/*
 * reshard over a transport of your own: the operations reshard_plan_execute calls.
 *
 * The built-in transports (in-process, MPI, NCCL) implement this interface, and so can
 * a caller: fill a reshard_transport_ops_t with functions over your own communication
 * layer (a torch.distributed group, UCX, NIXL, ...), make an endpoint with
 * reshard_comm_create_transport, and plan and execute on it as on any other. The
 * planning, packing, verification and the agreement's meaning stay in the library; a
 * transport only moves bytes between ranks and reduces a few words over all of them.
 *
 * Who calls what. Everything here is called by the library, on the thread that called
 * reshard_plan_execute (or reshard_plan_fail, reshard_comm_destroy), never concurrently
 * for one endpoint. One execution on rank r goes:
 *
 *   finish(local, words)              the first agreement: buffer checks, plan
 *                                     fingerprints; nothing has moved yet
 *   alloc_staging(bytes)              once or twice (staging, relay scratch)
 *   round_begin(s) post_recv(s, ...)* post_send(s, ...)* round_end(s)
 *                                     round k into slot s = k % 2; round k+1 is posted
 *                                     before round k is waited for
 *   round_wait(s, timeout_s)          round k complete (receives landed, sends done)
 *   ... (pack, unpack, local_copy, quantize when given)
 *   free_staging(p)                   for every block alloc_staging returned
 *   finish(local, NULL)               the outcome: every rank's status
 *
 * Both ends of every message derive its size from the same plan, so for each pair of
 * ranks and each slot the k-th send of one matches the k-th receive of the other, with
 * the same byte count; messages of one pair and slot must be delivered in posting
 * order. Slots 0 and 1 are independent (keep them apart, e.g. by a tag per slot).
 * A buffer handed to post_send or post_recv is staging or the caller's own tensor
 * memory; it stays valid until round_wait of that slot returns OK. When an execution
 * fails, operations may still be outstanding: the library then marks the endpoint
 * broken (it refuses further executions; it can only be destroyed or shrunk), so a
 * transport that cannot cancel an operation must keep its buffers alive instead of
 * letting free_staging release them.
 *
 * Units: bytes (uint64_t), seconds (double), ranks in [0, size) of the endpoint.
 *
 * Errors. An operation returns RESHARD_OK or a negative reshard_status_t and records
 * a message naming this rank and the peer (reshard_transport_error); the library
 * passes both on. TIMEOUT means a peer did not answer within the time given;
 * TRANSPORT any failure of the layer underneath (a lost connection, an error code);
 * NOMEM an allocation. After a TIMEOUT or TRANSPORT of any operation the execution
 * ends (the final finish still runs, so that every rank returns an error) and the
 * endpoint is broken.
 *
 * Versions. version must be RESHARD_TRANSPORT_VERSION of the header the transport was
 * compiled against. A later version only adds members at the end; the library keeps
 * accepting the versions it knows and reads only the members those had.
 */
#ifndef RESHARD_TRANSPORT_H
#define RESHARD_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/reshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The version of reshard_transport_ops_t this header describes. */
#define RESHARD_TRANSPORT_VERSION 1

/** Words reduced by MIN alongside the status of every agreement (finish). */
#define RESHARD_AGREE_WORDS 6

/** Elements [first, first+count) of @c box in row-major order, stored per
 *  @c frag (base and strides) in a buffer of @c elem_size-byte elements. */
typedef struct {
    const reshard_fragment_t *frag;
    const reshard_box_t *box;
    int64_t first;
    int64_t count;
    uint32_t elem_size;
} reshard_span_t;

/** A quantization rule (the library's; see reshard_model.h): opaque to transports. */
struct reshard_quant_rule;

/**
 * The operations of a transport. Members marked optional may be NULL; the others are
 * required (reshard_comm_create_transport refuses a table without them). Every
 * operation gets the endpoint @p c it was registered with; a transport finds its own
 * state with reshard_comm_transport_ctx(c).
 */
typedef struct reshard_transport_ops {
    /** RESHARD_TRANSPORT_VERSION. */
    uint32_t version;
    /** Short name for messages ("mpi", "torch-gloo"); not NULL. */
    const char *name;
    /** True when buffers and staging are device (GPU) memory: then pack, unpack and
     *  local_copy are required (the CPU implementations cannot reach the memory). */
    bool device_memory;
    /** Staging memory of @p bytes (may be 0) usable for pack/unpack and transfers, into
     *  *@p out. Errors: NOMEM, OVERFLOW. */
    reshard_status_t (*alloc_staging)(reshard_comm_t *c, uint64_t bytes, void **out);
    /** Release a block alloc_staging returned (or keep it, see above). */
    void (*free_staging)(reshard_comm_t *c, void *p);
    /** Start collecting round operations into @p slot (0 or 1); the slot's previous
     *  round was waited for. */
    reshard_status_t (*round_begin)(reshard_comm_t *c, int slot);
    /** Send @p bytes (> 0) at @p buf to rank @p peer (never this rank) in @p slot. It may
     *  start at once or at round_end. */
    reshard_status_t (*post_send)(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                  uint64_t bytes);
    /** Receive exactly @p bytes (> 0) from rank @p peer into @p buf in @p slot; a message
     *  of another size is TRANSPORT. */
    reshard_status_t (*post_recv)(reshard_comm_t *c, int slot, int32_t peer, void *buf,
                                  uint64_t bytes);
    /** Launch everything posted into @p slot. */
    reshard_status_t (*round_end)(reshard_comm_t *c, int slot);
    /** Wait until every operation of @p slot completed; TIMEOUT when @p timeout_s
     *  seconds pass without completion, naming the peers still outstanding (and
     *  recording them for unresponsive). Never blocks past the timeout. */
    reshard_status_t (*round_wait)(reshard_comm_t *c, int slot, double timeout_s);
    /** Optional: pack @p span from @p buf into @p out; NULL means the CPU implementation. */
    reshard_status_t (*pack)(reshard_comm_t *c, void *out, const void *buf,
                             const reshard_span_t *span);
    /** Optional: unpack @p span from @p in into @p buf; NULL means the CPU implementation. */
    reshard_status_t (*unpack)(reshard_comm_t *c, void *buf, const void *in,
                               const reshard_span_t *span);
    /** Optional: copy box @p box from (src_frag in src) to (dst_frag in dst) on this
     *  rank; NULL means the CPU implementation. */
    reshard_status_t (*local_copy)(reshard_comm_t *c, void *dst, const reshard_fragment_t *dst_frag,
                                   const void *src, const reshard_fragment_t *src_frag,
                                   const reshard_box_t *box, uint32_t elem_size);
    /** Optional, for device memory: quantize the bf16 elements of @p box read from
     *  (src_frag in src) into e4m3 bytes in (dst_frag in dst) and one scale per block in
     *  (scale_frag in scale) by the rule @p q; NULL means the CPU implementation. The
     *  built-in NCCL transport's; a caller's transport leaves it NULL (with device_memory,
     *  a refit that quantizes then fails with UNSUPPORTED on every rank). */
    reshard_status_t (*quantize)(reshard_comm_t *c, const struct reshard_quant_rule *q, void *dst,
                                 const reshard_fragment_t *dst_frag, void *scale,
                                 const reshard_fragment_t *scale_frag, const void *src,
                                 const reshard_fragment_t *src_frag, const reshard_box_t *box);
    /** Agree on an outcome: every rank passes its local status and gets an
     *  error of some rank if any failed (or TIMEOUT if a rank does not arrive
     *  within @p timeout_s; once some rank timed out, the others stop waiting
     *  promptly: the first to give up releases all, see reshard_elastic.h). Collective over
     *  all ranks of the comm; called twice per execution: before any byte moves (buffer
     *  checks, plan fingerprints) and at the end, and once by reshard_plan_fail. With
     *  the same reduction every rank also passes RESHARD_AGREE_WORDS words (@p words;
     *  NULL = all INT64_MAX) and receives their element-wise minimum over all ranks in
     *  @p min_words (may be NULL); the library gives them their meaning, the transport
     *  only reduces them. The message of this rank's failure is the last error when
     *  finish is called (reshard_last_error); on an error the transport records one
     *  that names the failing rank. Errors: the failing rank's status, TIMEOUT,
     *  TRANSPORT. */
    reshard_status_t (*finish)(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                               int64_t *min_words, double timeout_s);
    /** Elastic refit (reshard_elastic.h), optional (NULL: not supported).
     *  Set flags[p] = 1 for every peer p this rank found unresponsive: its
     *  operations were outstanding when a wait timed out. */
    void (*unresponsive)(const reshard_comm_t *c, unsigned char *flags);
    /** Elastic refit, optional (NULL: the comm cannot be shrunk).
     *  Survivor-only exchange of one agreement round, on a channel apart from
     *  round data: send @p bytes of @p msg to each of the @p n @p peers and
     *  receive @p bytes from each into recv + i * bytes, setting got[i] = 1
     *  for each that arrived before @p deadline (seconds of CLOCK_MONOTONIC).
     *  Waits (until the deadline) only for the first @p n_need peers; the
     *  messages of the others are taken when they are already there.
     *  Rounds (@p round) are kept apart. Never blocks past the deadline. */
    reshard_status_t (*agree_exchange)(reshard_comm_t *c, int round, const int32_t *peers,
                                       int32_t n, int32_t n_need, const void *msg, uint64_t bytes,
                                       void *recv, unsigned char *got, double deadline);
    /** Optional: free the transport's state; called once by reshard_comm_destroy. */
    void (*destroy)(reshard_comm_t *c);
} reshard_transport_ops_t;

/**
 * An endpoint over a caller's transport: rank @p rank of @p size, operations @p ops
 * (copied: the table need not outlive the call), state @p ctx (the caller's; the library
 * never reads it, reshard_comm_transport_ctx returns it). Local, not collective: every
 * rank makes its own, with the same size. Plan, execute, plan_fail and destroy it like
 * any other endpoint; reshard_comm_destroy calls ops->destroy (when given) and frees the
 * endpoint.
 * Errors: INVALID_ARG (NULL ops or out, a version this library does not know, a
 * required operation NULL, device_memory without pack, unpack and local_copy, size < 1),
 * RANK (rank outside [0, size)), NOMEM.
 */
reshard_status_t reshard_comm_create_transport(const reshard_transport_ops_t *ops, void *ctx,
                                               int32_t rank, int32_t size, reshard_comm_t **out);

/** The @p ctx an endpoint made by reshard_comm_create_transport was given (the state of a
 *  built-in transport for the others); NULL for NULL. */
void *reshard_comm_transport_ctx(const reshard_comm_t *comm);

/** The name of an endpoint's transport ("inproc", "mpi", "nccl", or the caller's ops->name);
 *  "" for NULL. */
const char *reshard_comm_transport_name(const reshard_comm_t *comm);

/**
 * For a transport's operations: record @p message as the calling thread's last error
 * (reshard_last_error; NULL: the status's name) and return @p status, so that
 * `return reshard_transport_error(RESHARD_ERR_TIMEOUT, "rank 2: no data from rank 5");`
 * ends an operation. The message should name this rank and the peer at fault.
 */
reshard_status_t reshard_transport_error(reshard_status_t status, const char *message);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_TRANSPORT_H */
