/*
 * Internals of the NCCL transport shared by its files, its tests and the GPU benchmark.
 * Needs cuda_runtime.h (the library links CUDA::cudart publicly when built with NCCL).
 */
#ifndef RS_NCCL_INTERNAL_H
#define RS_NCCL_INTERNAL_H

#include <cuda_runtime.h>

#include "transport/nccl/box_copy.h"
#include "transport/nccl/delta_kernels.h"
#include "transport/nccl/quant_box.h"
#include "exec/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Launch copy @p d from @p src to @p dst (device pointers, base of each side's
 *  positions) on @p stream. Nothing is launched when d->units == 0. Returns the launch
 *  status (cudaGetLastError). Defined in kernels.cu. */
cudaError_t rs_box_copy_launch(const rs_box_copy_t *d, void *dst, const void *src,
                               cudaStream_t stream);

/** Launch quantization job @p j (rs_quant_job_init) on @p stream: bf16 from @p src, e4m3
 *  bytes to @p dst, scales to @p scale (device pointers, base of each side's positions).
 *  Nothing is launched when j->blocks == 0. Returns the launch status (cudaGetLastError).
 *  Defined in quant_kernels.cu. */
cudaError_t rs_quant_launch(const rs_quant_job_t *j, void *dst, void *scale, const void *src,
                            cudaStream_t stream);

/** Delta encode of job @p j (rs_dk_job_init, its scratch in device memory): chunk @p cur
 *  against snapshot @p prev (NULL: dense) into @p out (header + body, room for 16 + len
 *  bytes), the snapshot updated; three launches on @p stream. The header at @p out gives the
 *  size once the stream has run. Defined in delta_kernels.cu. */
cudaError_t rs_delta_encode_launch(const rs_dk_job_t *j, const uint8_t *cur, uint8_t *prev,
                                   uint8_t *out, cudaStream_t stream);

/** Delta apply of encoded chunk @p in (device memory; the header checked on the host into
 *  @p j) onto @p chunk on @p stream; j->err says afterwards whether the body was consistent
 *  (rs_delta_apply_status). Defined in delta_kernels.cu. */
cudaError_t rs_delta_apply_launch(const rs_dk_job_t *j, const uint8_t *in, uint8_t *chunk,
                                  cudaStream_t stream);

/** The sum of rs_dk_hash_term over the @p len bytes at @p chunk (device memory) into *@p sum
 *  (device memory, 8 bytes) on @p stream (delta verification, delta_kernels.h); with @p msg
 *  (device memory, 8 bytes, any alignment) also rs_dk_hash_put of that sum, the encoded
 *  chunk's header at @p header (device memory), into @p msg. Defined in delta_kernels.cu. */
cudaError_t rs_delta_hash_launch(const uint8_t *chunk, uint64_t len, uint64_t *sum,
                                 const uint8_t *header, uint8_t *msg, cudaStream_t stream);

/** The kernel job of quantization rule @p q (util/quant_types.h; conventions in exec/quant.h) over
 * @p box; arguments as the transport's quantize op. Errors: INVALID_ARG (no rule, an unknown kind,
 * and as rs_quant_job_init). */
reshard_status_t rs_nccl_quant_job(rs_quant_job_t *j, const struct reshard_quant_rule *q,
                                   const void *dst, const reshard_fragment_t *dst_frag,
                                   const void *scale, const reshard_fragment_t *scale_frag,
                                   const void *src, const reshard_fragment_t *src_frag,
                                   const reshard_box_t *box);

/** pack / unpack / local copy on a given stream, without a communicator (tests, benchmark).
 *  Asynchronous; errors: INVALID_ARG, TRANSPORT (launch failed). */
reshard_status_t rs_nccl_pack_on(cudaStream_t stream, void *out, const void *buf,
                                 const reshard_span_t *span);
reshard_status_t rs_nccl_unpack_on(cudaStream_t stream, void *buf, const void *in,
                                   const reshard_span_t *span);
reshard_status_t rs_nccl_local_copy_on(cudaStream_t stream, void *dst,
                                       const reshard_fragment_t *dst_frag, const void *src,
                                       const reshard_fragment_t *src_frag, const reshard_box_t *box,
                                       uint32_t elem_size);

/** Elastic refit (nccl_elastic.c): wrap a communicator into an endpoint (as
 *  reshard_comm_create_nccl does; @p own_comm: the endpoint destroys it); the live or
 *  revoked communicator of an endpoint, its device and the caller's stream (NULL when the
 *  endpoint made its own), or NULL for a non-NCCL comm; RESHARD_NCCL_TIMEOUT_S. */
reshard_status_t rs_nccl_make_endpoint(struct ncclComm *nccl, bool own_comm, int device, int rank,
                                       int size, cudaStream_t stream, reshard_comm_t **out);
struct ncclComm *rs_nccl_parent(reshard_comm_t *c, int *device, cudaStream_t *stream);
double rs_nccl_env_timeout(void);

/** The communicator of endpoint @p c's members without the @p nex inner ranks in @p excl
 *  (sorted in place by NCCL): ncclCommShrink(NCCL_SHRINK_ABORT) of its live or revoked
 *  communicator, or ncclCommSplit(color 0) when @p nex is 0. Collective over the survivors.
 *  Waits (RESHARD_NCCL_TIMEOUT_S in all) for a revoke to become quiescent, then for NCCL's
 *  background job, which fills the new communicator into storage owned by the endpoint; at
 *  the deadline the parent is aborted. The result is ready (nonblocking config) and owned by
 *  the caller. Errors: TIMEOUT, TRANSPORT (NCCL refused or failed; its last error quoted). */
reshard_status_t rs_nccl_child(reshard_comm_t *c, int *excl, int nex, struct ncclComm **out);

/** The endpoint's CUDA stream; the delta kernels' scratch of at least @p bytes (kept by the
 *  endpoint, NOMEM naming the rank); usable() and launch_failed() of the transport, for its
 *  other files (the delta ops, nccl_delta.c). */
cudaStream_t rs_nccl_stream(reshard_comm_t *c);
reshard_status_t rs_nccl_delta_scratch(reshard_comm_t *c, uint64_t bytes, void **out);
reshard_status_t rs_nccl_usable(reshard_comm_t *c, const char *what);
reshard_status_t rs_nccl_launch_failed(reshard_comm_t *c, const char *what, cudaError_t e);

/** The delta codec on the transport's device memory (exec/delta_dev_ops.h; nccl_delta.c). */
extern const struct rs_delta_dev_ops rs_nccl_delta_ops;

/** The operations table of the NCCL transport. */
extern const reshard_transport_ops_t rs_nccl_ops;

#ifdef __cplusplus
}
#endif

#endif
