/*
 * Shared allocations for colocated refits (docs/colocated.md): host memory that reshard
 * allocates from a memfd, so that the ranks of a host that read it in a colocated plan map
 * it into their own address space once per plan and copy from it with memcpy, instead of
 * the process_vm_readv(2) system call that reads any other buffer. Any buffer may be
 * placed in such an allocation (or be a part of one); the plan finds it at its first
 * execution. Buffers elsewhere are read with process_vm_readv as before.
 *
 * What the reader needs is what process_vm_readv needs: it opens the owner's memfd through
 * /proc/<pid>/fd, which takes the same ptrace access (same user; Yama ptrace_scope 0, or 1
 * with PR_SET_PTRACER set by reshard; or CAP_SYS_PTRACE).
 */
#ifndef RESHARD_SHARED_H
#define RESHARD_SHARED_H

#include <stdint.h>

#include "reshard/reshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Allocate @p bytes (> 0) of zeroed host memory that colocated readers map instead of
 * reading it with a system call. Local; any thread. The memory is page-aligned and stays
 * valid until reshard_free_shared. Each allocation holds one file descriptor of this
 * process. Free it only after every plan that reads it was destroyed (a colocated plan
 * keeps its readers' mappings until reshard_plan_destroy; a reader's mapping of a freed
 * allocation keeps the old pages, never another allocation's: a later execution of that
 * plan reports the change, see reshard_plan_execute).
 * Errors: INVALID_ARG (out NULL, bytes 0), NOMEM (memfd_create, ftruncate or mmap failed,
 * with the system's reason).
 */
reshard_status_t reshard_alloc_shared(uint64_t bytes, void **out);

/** Free an allocation of reshard_alloc_shared (its start address); NULL is a no-op.
 *  INVALID_ARG for any other pointer (nothing is freed). */
reshard_status_t reshard_free_shared(void *ptr);

#ifdef __cplusplus
}
#endif
#endif /* RESHARD_SHARED_H */
