/*
 * Colocated refit on device memory: CUDA IPC between processes of one host (one GPU or
 * several). The owner exports the base of the allocation holding each buffer that peers
 * read (cudaIpcGetMemHandle takes an allocation's base; PyTorch's caching allocator
 * sub-allocates, so the buffer's offset from that base travels with the handle); the
 * reader opens each handle once per plan (cudaIpcOpenMemHandle) and closes it when the
 * plan is destroyed. No CUDA types here: a handle is 64 opaque bytes.
 */
#ifndef RS_TRANSPORT_NCCL_PEER_IPC_H
#define RS_TRANSPORT_NCCL_PEER_IPC_H

#include <stdint.h>

#include "reshard/reshard.h"

#define RS_IPC_HANDLE_BYTES 64

/** The IPC handle of the device allocation holding [@p ptr, @p ptr + @p bytes) of this
 *  process (on the calling thread's device), the buffer's @p offset from the allocation's
 *  base, the allocation's size and base address (@p alloc_id). Errors naming rank @p me,
 *  source buffer @p buffer and tensor name @p name: BUFFER (not device memory of
 *  cudaMalloc, or past its allocation's end), TRANSPORT (another CUDA error). */
reshard_status_t rs_peer_ipc_export(const void *ptr, uint64_t bytes, int32_t me, int64_t buffer,
                                    const char *name, unsigned char *handle, uint64_t *offset,
                                    uint64_t *alloc_bytes, uint64_t *alloc_id);

/** Open @p handle (from rank @p peer, source buffer @p buffer) in this process: *@p base,
 *  the allocation's base as mapped here. Errors: TRANSPORT (CUDA refused it: the message
 *  quotes CUDA's and names rank, peer and buffer). */
reshard_status_t rs_peer_ipc_open(const unsigned char *handle, int32_t me, int32_t peer,
                                  int64_t buffer, void **base);

/** Close a base from rs_peer_ipc_open. */
void rs_peer_ipc_close(void *base);

#endif
