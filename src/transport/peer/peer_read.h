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
    uint64_t file_dev;        /**< SHM: st_dev of the owner's memfd (proves the mapped file) */
    uint64_t file_ino;        /**< SHM: st_ino of the owner's memfd */
} rs_peer_buf_t;

/** The bytes of a process's identity token (rs_peer_identity). */
#define RS_PEER_TOKEN_BYTES 16

/** The header of a rank's table of buffers for one reader: the owner's pid and what
 *  proves that this pid names the owner in the reader (rs_peer_prove_owner). */
typedef struct {
    uint64_t magic;      /**< RS_PEER_MAGIC */
    int64_t pid;         /**< the owner's process id, in the owner's PID namespace */
    uint64_t nbuf;       /**< entries that follow */
    uint64_t token_addr; /**< where the owner keeps its token, in its address space */
    unsigned char token[RS_PEER_TOKEN_BYTES]; /**< the owner's random token (per process) */
    char boot_id[40];   /**< /proc/sys/kernel/random/boot_id of the owner's kernel ("" unknown) */
    uint64_t pidns_dev; /**< st_dev and st_ino of the owner's /proc/self/ns/pid */
    uint64_t pidns_ino;
} rs_peer_hdr_t;

#define RS_PEER_MAGIC 0x7273687270656532ULL /* "rshrpee2": with the owner's identity */

/** Fill @p h's pid, token_addr, token, boot_id and PID namespace with this process's
 *  (the token is drawn once per process with getrandom and kept at token_addr). */
void rs_peer_identity(rs_peer_hdr_t *h);

/**
 * On reader @p me, before the first byte of owner rank @p peer is read: prove that the
 * owner described by @p h is the process this rank would read. Its kernel's boot id
 * must be this one's; with @p by_pid (the table has buffers reached through the pid:
 * process_vm_readv or /proc/<pid>/fd) its PID namespace must be this one's; with
 * @p by_vm (some buffer is read with process_vm_readv) the token at h->token_addr,
 * read from process h->pid with process_vm_readv, must equal h->token. UNSUPPORTED
 * naming this rank, the owner rank, its pid and the reason otherwise (another host,
 * another PID namespace, the pid names another process: the token is not mapped there or
 * differs), or the read's error (rs_peer_cpu_probe's: a process that is gone, a refused
 * read). Nothing but the token is read.
 */
reshard_status_t rs_peer_prove_owner(const rs_peer_hdr_t *h, bool by_pid, bool by_vm, int32_t me,
                                     int32_t peer);

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

/** st_dev and st_ino of memfd @p fd of this process (0, 0 when fstat fails). */
void rs_peer_shm_file_id(int32_t fd, uint64_t *dev, uint64_t *ino);

/** Map @p bytes of memfd @p fd of process @p pid (rank @p peer) read-only into this
 *  process: *@p out, after checking that the file opened is the owner's memfd (st_dev
 *  @p dev, st_ino @p ino: a pid that names another process here opens another file).
 *  Errors, naming this rank @p me, the peer and source buffer @p buffer: TRANSPORT (its
 *  process is gone or closed the allocation, refused access, mmap failed); UNSUPPORTED
 *  (the file is not the owner's allocation: the pid names another process here). */
reshard_status_t rs_peer_shm_map(int64_t pid, int32_t fd, uint64_t bytes, uint64_t dev,
                                 uint64_t ino, int32_t me, int32_t peer, int64_t buffer,
                                 void **out);

/** Undo rs_peer_shm_map. */
void rs_peer_shm_unmap(void *p, uint64_t bytes);

#endif
