/* Shared allocations (reshard_alloc_shared): memfd-backed host memory that colocated
 * readers map once per plan and copy from with memcpy. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "reshard/reshard_shared.h"
#include "transport/peer/peer_read.h"
#include "util/error.h"

typedef struct rs_shm {
    uint8_t *base;
    uint64_t bytes;
    int fd;
    uint64_t serial;
    struct rs_shm *next;
} rs_shm_t;

static pthread_mutex_t shm_mu = PTHREAD_MUTEX_INITIALIZER;
static rs_shm_t *shm_list;
static uint64_t shm_serial;

reshard_status_t reshard_alloc_shared(uint64_t bytes, void **out)
{
    rs_error_clear();
    if (!out || bytes == 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_alloc_shared: %s",
                        !out ? "out is NULL" : "bytes is 0");
    *out = NULL;
    rs_shm_t *a = calloc(1, sizeof *a);
    if (!a)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_alloc_shared: out of memory");
    a->fd = memfd_create("reshard-shared", MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)bytes) != 0) {
        int e = errno;
        const char *what = a->fd < 0 ? "memfd_create" : "ftruncate";
        if (a->fd >= 0)
            close(a->fd);
        free(a);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_alloc_shared(%llu bytes): %s: %s",
                        (unsigned long long)bytes, what, strerror(e));
    }
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(a->fd);
        free(a);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_alloc_shared(%llu bytes): mmap: %s",
                        (unsigned long long)bytes, strerror(e));
    }
    a->base = p;
    a->bytes = bytes;
    pthread_mutex_lock(&shm_mu);
    a->serial = ++shm_serial;
    a->next = shm_list;
    shm_list = a;
    pthread_mutex_unlock(&shm_mu);
    *out = p;
    return RESHARD_OK;
}

reshard_status_t reshard_free_shared(void *ptr)
{
    rs_error_clear();
    if (!ptr)
        return RESHARD_OK;
    pthread_mutex_lock(&shm_mu);
    rs_shm_t **pp = &shm_list;
    while (*pp && (*pp)->base != ptr)
        pp = &(*pp)->next;
    rs_shm_t *a = *pp;
    if (a)
        *pp = a->next;
    pthread_mutex_unlock(&shm_mu);
    if (!a)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_free_shared: %p is not the start of an allocation of "
                        "reshard_alloc_shared",
                        ptr);
    munmap(a->base, (size_t)a->bytes);
    close(a->fd);
    free(a);
    return RESHARD_OK;
}

bool rs_peer_shm_find(const void *ptr, uint64_t bytes, int32_t *fd, uint64_t *offset,
                      uint64_t *alloc_bytes, uint64_t *alloc_id)
{
    const uint8_t *p = ptr;
    bool found = false;
    pthread_mutex_lock(&shm_mu);
    for (const rs_shm_t *a = shm_list; a && !found; a = a->next)
        if (p >= a->base && p < a->base + a->bytes && bytes <= a->bytes - (uint64_t)(p - a->base)) {
            *fd = a->fd;
            *offset = (uint64_t)(p - a->base);
            *alloc_bytes = a->bytes;
            *alloc_id = a->serial;
            found = true;
        }
    pthread_mutex_unlock(&shm_mu);
    return found;
}

void rs_peer_shm_file_id(int32_t fd, uint64_t *dev, uint64_t *ino)
{
    struct stat s;
    if (fstat(fd, &s) != 0) {
        *dev = *ino = 0;
        return;
    }
    *dev = (uint64_t)s.st_dev;
    *ino = (uint64_t)s.st_ino;
}

reshard_status_t rs_peer_shm_map(int64_t pid, int32_t fd, uint64_t bytes, uint64_t dev,
                                 uint64_t ino, int32_t me, int32_t peer, int64_t buffer, void **out)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%lld/fd/%d", (long long)pid, (int)fd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: colocated map of rank %d's (pid %lld) shared source buffer "
                        "%lld: open %s: %s (%s)",
                        me, peer, (long long)pid, (long long)buffer, path, strerror(e),
                        e == ENOENT ? "its process is gone or it freed the allocation"
                        : e == EACCES || e == EPERM
                            ? "the ranks need the same user and ptrace access to each other, as "
                              "for process_vm_readv"
                            : "unexpected");
    }
    uint64_t fdev, fino;
    rs_peer_shm_file_id(f, &fdev, &fino);
    if (fdev != dev || fino != ino || ino == 0) {
        close(f);
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "rank %d: colocated map of rank %d's shared source buffer %lld: %s "
                        "is not rank %d's allocation (file %llu:%llu, rank %d sent %llu:%llu): "
                        "pid %lld names another process here (another PID namespace or /proc "
                        "of another one?): plan without colocated reads; nothing was read from it",
                        me, peer, (long long)buffer, path, peer, (unsigned long long)fdev,
                        (unsigned long long)fino, peer, (unsigned long long)dev,
                        (unsigned long long)ino, (long long)pid);
    }
    void *p = mmap(NULL, (size_t)bytes, PROT_READ, MAP_SHARED, f, 0);
    int e = errno;
    close(f);
    if (p == MAP_FAILED)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: colocated map of rank %d's (pid %lld) shared source buffer "
                        "%lld (%llu bytes): mmap: %s",
                        me, peer, (long long)pid, (long long)buffer, (unsigned long long)bytes,
                        strerror(e));
    *out = p;
    return RESHARD_OK;
}

void rs_peer_shm_unmap(void *p, uint64_t bytes)
{
    if (p)
        munmap(p, (size_t)bytes);
}
