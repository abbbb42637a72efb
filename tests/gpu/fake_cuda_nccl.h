/* Test hooks of the fake CUDA runtime (fake_cuda_nccl.c); only the fake test programs,
 * which link it instead of libcudart, may call them. */
#ifndef RS_FAKE_CUDA_NCCL_H
#define RS_FAKE_CUDA_NCCL_H

#include <cuda_runtime.h>

#include "spin_kernel.h"

/** The @p nth kernel launch on @p stream from now on fails with a non-sticky launch error
 *  (cudaErrorLaunchOutOfResources); 0 disarms. */
void fake_cuda_fail_launch(cudaStream_t stream, int nth);

/** Host waits for the device by this thread so far (cudaStreamSynchronize, cudaMemcpy,
 *  cudaEventSynchronize, cudaDeviceSynchronize): each is a round trip a GPU would pay. */
unsigned long long fake_cuda_host_waits(void);

/** Strict mode (FAKE_CUDA_STRICT, fake_cuda_ipc.c): open (1) or close (0) the window in
 *  which device memory may be touched; the fake opens it around its own work. */
void fake_dev_window(int open_);

/** Queue a "long kernel" on @p stream: it completes @p seconds after this call. */
void fake_cuda_delay(cudaStream_t stream, double seconds);

/** Device memory of the fake (fake_cuda_ipc.c): cudaMalloc's allocation, shareable by
 *  CUDA IPC; fake_dev_free returns 0 for a pointer that is not one (nothing freed). */
cudaError_t fake_dev_alloc(void **p, size_t size);
int fake_dev_free(void *p);

/** CUDA IPC handles open in this process (each open counts until its close). */
int fake_cuda_ipc_open_count(void);

#endif
