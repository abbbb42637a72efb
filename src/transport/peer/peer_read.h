/*
 * One-sided reads between processes of one host (colocated refit), the CPU mechanisms:
 * process_vm_readv(2) for any buffer (vm_read.c), and shared allocations
 * (reshard_alloc_shared, shm.c) that readers map once per plan and copy with memcpy. The
 * receiver copies a box straight from a peer process's buffer into its own with both
 * fragments' strides; the peer does nothing (no send, no copy). process_vm_readv needs no
 * change to how the user allocates (PyTorch tensors, numpy arrays, any malloc), no mapping
 * per buffer and no file descriptor passing, but copies in the kernel (below memcpy speed
 * in a VM); a shared allocation reads at memcpy speed where the owner placed its tensors
 * there. Both need ptrace access to the peer (same user; Yama ptrace_scope 0, or 1 with
 * the peer's PR_SET_PTRACER, which rs_peer_cpu_expose sets; or CAP_SYS_PTRACE).
 */
#ifndef RS_TRANSPORT_PEER_READ_H
#define RS_TRANSPORT_PEER_READ_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/reshard.h"

/** How a reader reaches one buffer of its owner. */
enum {
    RS_PEER_VM = 0,  /**< process_vm_readv(2) of the owner's address (any host buffer) */
    RS_PEER_SHM = 1, /**< mapping of the owner's memfd (reshard_alloc_shared), then memcpy */
    RS_PEER_IPC = 2  /**< CUDA IPC handle of the owner's device allocation, then the copy kernel */
};

/** What a rank tells a reader about one of its source buffers (fixed size, sent
 *  as is between processes of one host). */
typedef struct {
    uint64_t buffer;          /**< the buffer id in the source layout */
    uint64_t addr;            /**< its address in the owner's address space */
    uint64_t bytes;           /**< its size */
    uint32_t kind;            /**< RS_PEER_VM, RS_PEER_SHM or RS_PEER_IPC */
    int32_t fd;               /**< SHM: the owner's memfd (opened by the reader via /proc) */
    uint64_t offset;          /**< SHM, IPC: the buffer's offset from its allocation's base */
    uint64_t alloc_bytes;     /**< SHM, IPC: the allocation's size */
    uint64_t alloc_id;        /**< SHM, IPC: the owner's id of the allocation, never reused */
    unsigned char handle[64]; /**< IPC: the cudaIpcMemHandle_t of the allocation's base */
} rs_peer_buf_t;

/** The header of a rank's table of buffers for one reader. */
typedef struct {
    uint64_t magic; /**< RS_PEER_MAGIC */
    int64_t pid;    /**< the owner's process id */
    uint64_t nbuf;  /**< entries that follow */
    uint64_t pad;
} rs_peer_hdr_t;

#define RS_PEER_MAGIC 0x72736872706565ULL /* "rshrpee" */

/** Let ranks of this host read this process's memory: under Yama ptrace_scope 1,
 *  PR_SET_PTRACER_ANY (once per process). Never fails: a refused read names
 *  the cause (rs_peer_cpu_read_box). */
void rs_peer_cpu_expose(void);

/**
 * Copy the elements of @p box from the buffer at @p remote (address space of
 * process @p pid, rank @p peer) laid out per @p src_frag into @p dst laid out
 * per @p dst_frag; @p elem_size bytes per element; @p me is this rank (for
 * messages). @p remote_bytes bounds the remote buffer: a position past it is
 * BUFFER before anything is read. Errors, each naming this rank, the peer,
 * tensor @p tensor_name and the buffer id: TRANSPORT for a process that is
 * gone (ESRCH), a refused read (EPERM: Yama's ptrace_scope and the fix are
 * named), an address no longer mapped (EFAULT: the owner freed the buffer) or
 * a short read; UNSUPPORTED where the system call does not exist (ENOSYS).
 */
reshard_status_t rs_peer_cpu_read_box(int64_t pid, int32_t me, int32_t peer,
                                      const char *tensor_name, int64_t buffer, void *dst,
                                      const reshard_fragment_t *dst_frag, uint64_t remote,
                                      uint64_t remote_bytes, const reshard_fragment_t *src_frag,
                                      const reshard_box_t *box, uint32_t elem_size);

/** Read @p bytes at @p remote of process @p pid into @p out: the probe a reader
 *  makes once per buffer before a refit reads it. Errors as rs_peer_cpu_read_box. */
reshard_status_t rs_peer_cpu_probe(int64_t pid, int32_t me, int32_t peer, int64_t buffer,
                                   uint64_t remote, void *out, uint64_t bytes);

/** Where the owner's buffer [@p ptr, @p ptr + @p bytes) lies in a shared allocation of this
 *  process (reshard_alloc_shared): true and its memfd, the offset from the allocation's
 *  start, the allocation's size and its serial (never reused in this process); false
 *  when it is not inside one. */
bool rs_peer_shm_find(const void *ptr, uint64_t bytes, int32_t *fd, uint64_t *offset,
                      uint64_t *alloc_bytes, uint64_t *alloc_id);

/** Map @p bytes of memfd @p fd of process @p pid (rank @p peer) read-only into this
 *  process: *@p out. Errors, naming this rank @p me, the peer and source buffer @p buffer:
 *  TRANSPORT (its process is gone or closed the allocation, refused access, mmap failed). */
reshard_status_t rs_peer_shm_map(int64_t pid, int32_t fd, uint64_t bytes, int32_t me, int32_t peer,
                                 int64_t buffer, void **out);

/** Undo rs_peer_shm_map. */
void rs_peer_shm_unmap(void *p, uint64_t bytes);

#endif
