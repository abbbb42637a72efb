/*
 * The delta codec on a transport's device memory: the operations exec reaches through
 * reshard_comm_t.delta_dev for a comm whose buffers are device memory
 * (docs/delta-verification.md, "On device memory"). Internal: filled in by the built-in
 * NCCL transport (its kernels,
 * src/transport/nccl/delta_kernels.h); NULL for every other transport, whose buffers are
 * host memory and use the CPU codec (exec/delta_codec.h). Every operation runs on the
 * endpoint's stream in order with its pack, unpack and transfers.
 */
#ifndef RS_EXEC_DELTA_DEV_OPS_H
#define RS_EXEC_DELTA_DEV_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/reshard_transport.h"
#include "exec/delta_codec.h"

/** Directions of rs_delta_dev_ops_t.copy. */
typedef enum { RS_DD_D2D, RS_DD_D2H, RS_DD_H2D } rs_dd_dir_t;

typedef struct rs_delta_dev_ops {
    /** Device memory of @p bytes kept between executions (a snapshot, relay scratch), zeroed.
     *  Errors: NOMEM naming the rank and the size. */
    reshard_status_t (*alloc)(reshard_comm_t *c, uint64_t bytes, void **out);
    /** Free what alloc returned (NULL: nothing); needs no endpoint (a plan may outlive it). */
    void (*free)(void *p);
    /** Copy @p bytes from @p src to @p dst in direction @p dir on the stream; a copy to or
     *  from host memory waits for it. */
    reshard_status_t (*copy)(reshard_comm_t *c, void *dst, const void *src, uint64_t bytes,
                             rs_dd_dir_t dir);
    /** Zero the @p bytes at @p dst (device) on the stream; enqueued, not waited for.
     *  Errors: TRANSPORT. */
    reshard_status_t (*zero)(reshard_comm_t *c, void *dst, uint64_t bytes);
    /** Encode as rs_delta_encode: @p cur against snapshot @p prev (NULL: dense; afterwards it
     *  holds cur) into @p out (device, room for 16 + len bytes), and the count of changed
     *  words to the 8 bytes at @p changed (device, any alignment; NULL: not wanted).
     *  Enqueued, not waited for: the header at @p out gives the size once the stream has
     *  run (exec copies a round's headers to the host in one copy). Errors: TRANSPORT (a
     *  failed launch, an unusable endpoint), NOMEM (the scratch). */
    reshard_status_t (*encode)(reshard_comm_t *c, const void *cur, void *prev, uint64_t len,
                               uint32_t word, void *out, void *changed);
    /** The sender's hash of delta verification into its header message: the 64-bit hash
     *  of the @p len bytes at @p chunk (device) as verification compares it
     *  (rs_dk_hash_final of the sum of rs_dk_hash_term over the chunk's 8-byte words,
     *  delta_kernels.h) to the 8 bytes at @p out (device, little-endian, any alignment),
     *  or 0 when the encoded chunk's header at @p header (device) says dense. Enqueued,
     *  not waited for. Errors: TRANSPORT, NOMEM as encode. */
    reshard_status_t (*hash_msg)(reshard_comm_t *c, const void *chunk, uint64_t len,
                                 const void *header, void *out);
    /** Apply as rs_delta_apply: encoded chunk @p in (device, header @p h checked by
     *  rs_delta_header) onto the @p len bytes at @p chunk (device), enqueued, not waited
     *  for; its outcome, and with @p hash what gives the result's hash, go to the record at
     *  @p rec (device, apply_record_bytes, 8-byte aligned), which applied reads from a host
     *  copy (exec copies a round's records in one copy). An inconsistent body writes no
     *  word of the chunk. Errors: TRANSPORT (a failed launch), NOMEM (the scratch). */
    reshard_status_t (*apply)(reshard_comm_t *c, const void *in, const rs_delta_header_t *h,
                              void *chunk, uint64_t len, bool hash, void *rec);
    /** Bytes of apply's record. */
    uint64_t apply_record_bytes;
    /** The outcome of an apply from a host copy of its record @p rec (the chunk of @p len
     *  bytes, header @p h): OK, with @p hash the result's hash (as hash_msg's) to *@p hash;
     *  or INVALID_ARG naming @p what: the body did not fit its header, the chunk is
     *  unchanged. Host only. */
    reshard_status_t (*applied)(const void *rec, const rs_delta_header_t *h, uint64_t len,
                                const char *what, uint64_t *hash);
} rs_delta_dev_ops_t;

#endif
