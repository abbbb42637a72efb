/* A kernel that stalls a stream: one thread spins until *flag (pinned host memory,
 * cudaMallocHost) becomes non-zero. Defined in spin_kernel.cu for a GPU and by the fake
 * CUDA runtime (fake_cuda_nccl.c) for the CPU. Returns the launch status. */
#ifndef RS_SPIN_KERNEL_H
#define RS_SPIN_KERNEL_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t rs_test_spin_launch(const volatile int *flag, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
