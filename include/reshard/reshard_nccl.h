/*
 * reshard over NCCL: the same plans, executed on GPU memory.
 *
 * Available when the library was built with the NCCL transport (CMake found CUDA and
 * NCCL; the library then defines RESHARD_HAVE_NCCL=1 for everything linking it). Test
 * `#ifdef RESHARD_HAVE_NCCL` before calling anything here.
 *
 * This header needs neither cuda_runtime.h nor nccl.h: a caller's ncclComm_t is a
 * `struct ncclComm *` and a cudaStream_t a `struct CUstream_st *`, so both pass here
 * unchanged.
 *
 * How a refit on GPU memory runs:
 *   1. Make one endpoint per rank: either from an existing NCCL communicator
 *      (reshard_comm_create_nccl), or from a unique id that rank 0 makes
 *      (reshard_nccl_get_unique_id) and every rank receives out of band, e.g. MPI_Bcast
 *      (reshard_comm_create_nccl_from_id).
 *   2. Plan as usual (reshard_plan_create), with buffers that are device pointers on the
 *      endpoint's GPU (reshard_nccl_alloc or the caller's own, e.g. torch tensors).
 *   3. reshard_plan_execute(plan, comm, ...): packs, sends, receives and unpacks on the
 *      endpoint's CUDA stream, and returns when that work is complete and every rank
 *      agrees on the outcome. Staging is device memory bounded by the plan's
 *      staging_bytes, cached by the endpoint between executions (freed with it).
 *      reshard orders its work only on the endpoint's stream: work on OTHER streams that
 *      writes the source buffers must be complete before the call (or give the endpoint
 *      the framework's current stream at creation, so stream order does it); the
 *      destination buffers are complete when the call returns.
 *
 * Outcome: every execution ends with an all-reduce of the ranks' statuses on the stream
 * (and starts with one over the buffer checks), so an error on one rank (a bad buffer,
 * a failed launch) is returned on every rank; a rank keeps its own message.
 *
 * Failure: an NCCL error, an asynchronous NCCL error, a CUDA error, or no progress
 * within the plan's timeout_s aborts the endpoint's communicator (NCCL 2.28 and later:
 * revokes it with ncclCommRevoke, keeps it for reshard_comm_shrink_nccl and aborts it in
 * reshard_comm_destroy; older NCCL: ncclCommAbort at once) and
 * returns RESHARD_ERR_TRANSPORT or RESHARD_ERR_TIMEOUT; a peer whose communicator was
 * aborted stops progressing, so the other ranks reach their own timeout and abort too:
 * they return TIMEOUT within the plan's timeout_s of their last progress (plus polling,
 * well under a second). A failure of one rank that leaves its communicator usable (a
 * kernel launch error the stream survives, e.g. cudaErrorLaunchOutOfResources; a failed
 * pack, unpack, quantize or local copy step) does not cost the others the timeout: that
 * rank stops packing and unpacking but still posts every remaining transfer of the plan
 * (their bytes are then meaningless), so its peers' rounds complete and every rank returns
 * the error at the outcome agreement, after about one refit's time. After any failed
 * execution the destination buffers' contents are undefined.
 * Every wait inside reshard_plan_execute and communicator creation is bounded (it polls
 * with a deadline); the synchronous helpers below and reshard_comm_destroy (cudaFree)
 * wait for the device without one. After such an error the endpoint can only be
 * destroyed.
 *
 * Pipelining: packing, the transfers and unpacking share the endpoint's one stream, so
 * the GPU does them one after another (the CPU posts round k+1 before waiting for round
 * k); packing runs at HBM speed, a small cost next to network transfers.
 *
 * Environment:
 *   RESHARD_NCCL_TIMEOUT_S  seconds to wait for communicator creation, and for the
 *                           enqueueing of operations on a nonblocking communicator before
 *                           a plan's timeout is known (default 60).
 */
#ifndef RESHARD_NCCL_H
#define RESHARD_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/reshard.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ncclComm;    /* ncclComm_t is struct ncclComm * */
struct CUstream_st; /* cudaStream_t is struct CUstream_st * */

/**
 * Number of CUDA devices this process can use. Local; any rank, any time.
 * @param count  receives the number of devices (0 when none)
 * Errors: INVALID_ARG (count NULL); UNSUPPORTED when there is no usable device (no GPU,
 * no driver, CUDA_VISIBLE_DEVICES empty) — the message says why, so
 * `--transport nccl` fails with it.
 */
reshard_status_t reshard_nccl_device_count(int *count);

/** Size in bytes of a unique id (NCCL_UNIQUE_ID_BYTES, 128). */
size_t reshard_nccl_unique_id_size(void);

/**
 * Make the unique id of a new communicator. Called by ONE rank (rank 0); every rank then
 * receives the same reshard_nccl_unique_id_size() bytes out of band (MPI_Bcast) and
 * passes them to reshard_comm_create_nccl_from_id. Needs no GPU. Local.
 * @param id  buffer of reshard_nccl_unique_id_size() bytes
 * Errors: INVALID_ARG (id NULL), TRANSPORT (ncclGetUniqueId failed, e.g. no network
 * interface for the bootstrap).
 */
reshard_status_t reshard_nccl_get_unique_id(void *id);

/**
 * Create this rank's endpoint of a new NCCL communicator of @p nranks ranks.
 * Collective: every rank 0..nranks-1 calls it with the same @p id, each with its own
 * rank; it returns when all have joined, or fails after RESHARD_NCCL_TIMEOUT_S seconds.
 * The communicator is nonblocking (ncclConfig_t.blocking = 0) so that no later call
 * waits without a bound; it is owned by the endpoint and destroyed with it.
 * @param id           the bytes from reshard_nccl_get_unique_id on rank 0
 * @param rank         this rank, 0..nranks-1 (the reshard rank numbering of the plan)
 * @param nranks       ranks in the communicator (the plan's world_size)
 * @param cuda_device  CUDA device of this rank; -1 means rank % device count. Under MPI
 *                     with several GPUs per host pass the host-local rank % device count.
 *                     Made the calling thread's current device.
 * @param stream       stream on which every operation of this endpoint runs and completes
 *                     (the caller's cudaStream_t of @p cuda_device, e.g.
 *                     torch.cuda.current_stream); NULL makes the endpoint create and own a
 *                     non-blocking stream. To use the legacy default stream pass
 *                     cudaStreamLegacy (the Python package passes PyTorch's default
 *                     stream, handle 0, that way).
 * @param out          receives the endpoint; free it with reshard_comm_destroy
 * Errors: INVALID_ARG (NULL id/out, rank or nranks out of range, device out of range),
 * UNSUPPORTED (no CUDA device: "--transport nccl needs a CUDA device ..."), TRANSPORT
 * (CUDA or NCCL failure, message names the call and NCCL's last error), TIMEOUT (not all
 * ranks joined in time), NOMEM.
 */
reshard_status_t reshard_comm_create_nccl_from_id(const void *id, int32_t rank, int32_t nranks,
                                                  int cuda_device, struct CUstream_st *stream,
                                                  reshard_comm_t **out);

/**
 * Create an endpoint on a caller's existing NCCL communicator (e.g. the one a training
 * framework already has). Local: no communication. Rank and size are the communicator's
 * (ncclCommUserRank / ncclCommCount), the device is its device (ncclCommCuDevice).
 * The communicator stays the caller's: reshard_comm_destroy does not destroy it — but an
 * error or timeout during execution ABORTS it (ncclCommAbort frees it), after which the
 * caller must not use it. For the no-hang guarantee the communicator should be
 * nonblocking (config.blocking = 0); with a blocking one, NCCL calls that block inside
 * NCCL (connection setup in ncclGroupEnd) are not bounded by reshard's timeout.
 * Do not use the communicator from another thread while an execution runs.
 * @param comm    the caller's ncclComm_t
 * @param stream  as in reshard_comm_create_nccl_from_id (NULL: the endpoint's own stream)
 * @param out     receives the endpoint; free it with reshard_comm_destroy
 * Errors: INVALID_ARG (NULL comm/out), UNSUPPORTED (no CUDA device), TRANSPORT (an NCCL
 * query or a CUDA call failed), NOMEM.
 */
reshard_status_t reshard_comm_create_nccl(struct ncclComm *comm, struct CUstream_st *stream,
                                          reshard_comm_t **out);

/**
 * A colocated endpoint on device memory (docs/colocated.md): rank and size of @p control,
 * buffers on GPU @p cuda_device (-1: rank % device count), made current. For plans with
 * RESHARD_PLAN_PARAM_COLOCATED whose ranks share a host (several may share one GPU, which
 * NCCL refuses): every piece between two ranks is a one-sided read over CUDA IPC. The
 * owner exports the base of each device allocation holding a buffer its peers read
 * (cudaIpcGetMemHandle) with the buffer's offset in it (cuMemGetAddressRange; PyTorch's
 * caching allocator sub-allocates); the handles travel in the plan's table round over
 * @p control; each reader opens a handle once per plan and allocation and closes it at
 * reshard_plan_destroy; the copy kernel reads the peer's memory on @p stream. The buffer
 * tables and both agreements go over @p control, a host-memory endpoint (MPI, a store,
 * torch gloo) of the same ranks that the caller keeps alive longer than this one and does
 * not use meanwhile. Local: no communication. A source buffer must be device memory
 * (cudaMalloc, PyTorch) and stay the same allocation for the plan's life: another one,
 * even at the same address, is BUFFER naming it before anything moves. A plan with pieces
 * between hosts is UNSUPPORTED on it (not built). Execution returns when the copies are
 * complete (the stream is waited for within the plan's timeout) and every rank agrees.
 * The sender must have finished writing its sources (on any stream) before it calls
 * reshard_plan_execute and must not write them until the call returns; the receiver must
 * not run work on its destinations meanwhile.
 * @param stream  the stream of the copies (NULL: the endpoint makes its own)
 * Errors: INVALID_ARG (NULL, a device-memory control, device out of range), UNSUPPORTED
 * (no CUDA device), TRANSPORT (a CUDA error), NOMEM.
 */
reshard_status_t reshard_comm_create_cuda_ipc(reshard_comm_t *control, int cuda_device,
                                              struct CUstream_st *stream, reshard_comm_t **out);

/* ---- device buffers, for tools and tests ----------------------------------------------
 * Synchronous, on the endpoint's device; copies and sets run on the endpoint's stream and
 * wait for it, so a following reshard_plan_execute sees their bytes. */

/**
 * cudaMalloc @p bytes on @p comm's device (bytes 0 gives NULL). Local.
 * Errors: INVALID_ARG (comm not an NCCL endpoint, out NULL), NOMEM (cudaMalloc failed),
 * TRANSPORT (other CUDA error).
 */
reshard_status_t reshard_nccl_alloc(reshard_comm_t *comm, uint64_t bytes, void **out);
/** cudaFree a pointer from reshard_nccl_alloc; NULL ok. Local. */
void reshard_nccl_free(reshard_comm_t *comm, void *ptr);
/**
 * Copy @p bytes between any two of host and device memory (kind inferred), on @p comm's
 * stream, and wait. Local. Errors: INVALID_ARG, TRANSPORT.
 */
reshard_status_t reshard_nccl_memcpy(reshard_comm_t *comm, void *dst, const void *src,
                                     uint64_t bytes);
/** Set @p bytes of device memory at @p dst to @p value on @p comm's stream, and wait.
 *  Local. Errors: INVALID_ARG, TRANSPORT. */
reshard_status_t reshard_nccl_memset(reshard_comm_t *comm, void *dst, int value, uint64_t bytes);

/**
 * reshard_fill_pattern for DEVICE buffers: each buffer @p rank's fragments use is copied
 * to host memory, filled there and copied back (bytes outside fragments are kept).
 * Host memory of the buffers' total size is used temporarily. Local.
 * Errors: as reshard_fill_pattern, plus NOMEM, TRANSPORT.
 */
reshard_status_t reshard_nccl_fill_pattern(reshard_comm_t *comm, const reshard_layout_t *layout,
                                           int32_t rank, const reshard_buffer_t *dev_bufs,
                                           int32_t n_bufs);
/**
 * reshard_verify_pattern for DEVICE buffers (copied to host memory, then checked there,
 * including the sentinel bytes outside fragments). Local.
 * Errors: as reshard_verify_pattern (VERIFY names the first wrong element), plus NOMEM,
 * TRANSPORT.
 */
reshard_status_t reshard_nccl_verify_pattern(reshard_comm_t *comm, const reshard_layout_t *layout,
                                             int32_t rank, const reshard_buffer_t *dev_bufs,
                                             int32_t n_bufs, uint64_t *verified_bytes);

/**
 * Elastic refit (reshard_elastic.h): the survivors of @p comm (an NCCL endpoint, or a view
 * of one from an earlier shrink) make the endpoint of the membership without the
 * @p n_gone plan ranks in @p gone (as agreed, e.g. by reshard_comm_agree_gone over a CPU
 * side channel: an aborted NCCL communicator cannot carry the agreement). Collective over
 * the survivors only: ncclCommShrink(NCCL_SHRINK_ABORT) of the endpoint's communicator,
 * which after a failed execution is revoked (ncclCommRevoke, NCCL 2.28 and later) rather
 * than freed, so that it can be shrunk; the lost ranks take no part. The new communicator
 * is nonblocking, owned by the returned endpoint, on the same device and the same caller's
 * stream (or a stream of its own). With @p n_gone 0 (nobody gone, e.g. an agreement after a
 * stall that every rank survived) every rank must call it: NCCL refuses a shrink that
 * excludes nobody, so the communicator is split instead (ncclCommSplit, color 0), a fresh one
 * of the same members. NCCL completes the revoke, the shrink and the split asynchronously:
 * this call first waits until a revoked communicator is quiescent, then until NCCL's job has
 * filled in the new communicator (into storage owned by @p comm's endpoint), all within
 * RESHARD_NCCL_TIMEOUT_S; at the deadline the old communicator is aborted.
 * Returns a view (reshard_comm_create_view): rank and size are the plan rank and plan world
 * size. Destroy @p comm afterwards (that aborts the old communicator).
 * Errors: INVALID_ARG (NULL, not an NCCL endpoint, its communicator already aborted, the
 * caller is in gone), TRANSPORT (NCCL refused or failed; NCCL's last error is quoted),
 * TIMEOUT (the revoke did not end, or not every survivor joined), UNSUPPORTED (NCCL older
 * than 2.27), NOMEM.
 */
reshard_status_t reshard_comm_shrink_nccl(reshard_comm_t *comm, const int32_t *gone, int32_t n_gone,
                                          reshard_comm_t **out);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_NCCL_H */
