/* The stalling kernel of spin_kernel.h: one thread polls a flag in pinned host memory. */
#include "spin_kernel.h"

__global__ void rs_test_spin_kernel(const volatile int *flag)
{
    while (*flag == 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
        __nanosleep(1000);
#endif
    }
}

extern "C" cudaError_t rs_test_spin_launch(const volatile int *flag, cudaStream_t stream)
{
    rs_test_spin_kernel<<<1, 1, 0, stream>>>(flag);
    return cudaGetLastError();
}
