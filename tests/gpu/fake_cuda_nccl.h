/* Test hooks of the fake CUDA runtime (fake_cuda_nccl.c); only the fake test programs,
 * which link it instead of libcudart, may call them. */
#ifndef RS_FAKE_CUDA_NCCL_H
#define RS_FAKE_CUDA_NCCL_H

#include <cuda_runtime.h>

#include "spin_kernel.h"

/** The @p nth kernel launch on @p stream from now on fails with a non-sticky launch error
 *  (cudaErrorLaunchOutOfResources); 0 disarms. */
void fake_cuda_fail_launch(cudaStream_t stream, int nth);

/** Queue a "long kernel" on @p stream: it completes @p seconds after this call. */
void fake_cuda_delay(cudaStream_t stream, double seconds);

#endif
