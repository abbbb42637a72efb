/* CUDA IPC handles of the allocations colocated readers read (peer_ipc.h). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "transport/nccl/peer_ipc.h"
#include "util/error.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == RS_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t size");

/* cuMemGetAddressRange (the driver's, version 2), reached through the runtime so that the
 * library needs no link to libcuda: CUresult f(CUdeviceptr *base, size_t *size, CUdeviceptr). */
typedef int (*rs_range_fn)(unsigned long long *base, size_t *size, unsigned long long ptr);

static rs_range_fn range_fn(void)
{
    static rs_range_fn fn;
    if (!fn) {
        void *f = NULL;
        enum cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (rs_range_fn)f;
        (void)cudaGetLastError();
    }
    return fn;
}

reshard_status_t rs_peer_ipc_export(const void *ptr, uint64_t bytes, int32_t me, int64_t buffer,
                                    const char *name, unsigned char *handle, uint64_t *offset,
                                    uint64_t *alloc_bytes, uint64_t *alloc_id)
{
    const char *nm = name ? name : "unnamed";
    struct cudaPointerAttributes at;
    memset(&at, 0, sizeof at);
    if (cudaPointerGetAttributes(&at, ptr) != cudaSuccess || at.type != cudaMemoryTypeDevice) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_BUFFER,
                        "rank %d: source buffer %lld (%s) at %p is not device memory (cudaMalloc "
                        "or PyTorch's allocator): colocated reads over CUDA IPC need it",
                        me, (long long)buffer, nm, ptr);
    }
    rs_range_fn fn = range_fn();
    unsigned long long base = 0;
    size_t size = 0;
    if (!fn || fn(&base, &size, (unsigned long long)(uintptr_t)ptr) != 0)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: source buffer %lld (%s) at %p: cuMemGetAddressRange %s", me,
                        (long long)buffer, nm, ptr, fn ? "failed" : "is not available");
    uint64_t off = (uint64_t)(uintptr_t)ptr - base;
    if (off > size || bytes > size - off)
        return rs_error(RESHARD_ERR_BUFFER,
                        "rank %d: source buffer %lld (%s): %llu bytes at %p run past the end of "
                        "its device allocation (%llu bytes at 0x%llx)",
                        me, (long long)buffer, nm, (unsigned long long)bytes, ptr,
                        (unsigned long long)size, base);
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: source buffer %lld (%s): cudaIpcGetMemHandle of its "
                        "allocation's base 0x%llx: %s",
                        me, (long long)buffer, nm, base, cudaGetErrorString(e));
    }
    memcpy(handle, &h, sizeof h);
    *offset = off;
    *alloc_bytes = size;
    *alloc_id = base;
    return RESHARD_OK;
}

reshard_status_t rs_peer_ipc_open(const unsigned char *handle, int32_t me, int32_t peer,
                                  int64_t buffer, void **base)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    cudaError_t e = cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: cudaIpcOpenMemHandle of rank %d's source buffer %lld: %s (the "
                        "owner must be another process of this host, its allocation still "
                        "alive)",
                        me, peer, (long long)buffer, cudaGetErrorString(e));
    }
    return RESHARD_OK;
}

void rs_peer_ipc_close(void *base)
{
    if (base && cudaIpcCloseMemHandle(base) != cudaSuccess)
        (void)cudaGetLastError();
}
