/*
 * The fake CUDA runtime's device memory and CUDA IPC (part of fake_cuda_nccl.c's fake,
 * linked with it instead of libcudart). Device memory is host memory of a memfd mapped
 * shared, so that another process can map the same pages, as CUDA IPC does between the
 * processes of a GPU. What it models of the real rules (CUDA runtime API reference):
 *  - cudaIpcGetMemHandle takes the BASE of an allocation of cudaMalloc; any other pointer
 *    (inside an allocation, host memory) is cudaErrorInvalidValue. So a caller must find the
 *    base (cuMemGetAddressRange, reached by cudaGetDriverEntryPointByVersion) and send the
 *    offset of its buffer with the handle.
 *  - The handle names one allocation: memory freed and allocated again at the same address
 *    gets a new handle (a serial per allocation).
 *  - cudaIpcOpenMemHandle maps the whole allocation and returns ITS base (the reader adds
 *    the offset). Opening a handle the current process exported is refused
 *    (cudaErrorInvalidResourceHandle: IPC is between processes). Opening a handle already
 *    open in this process returns the same pointer and counts a reference; each open needs
 *    its cudaIpcCloseMemHandle. A handle of a process that is gone, or of memory it freed, is
 *    cudaErrorInvalidResourceHandle.
 *  - cudaPointerGetAttributes: device for cudaMalloc and opened IPC memory, else host.
 * Test hook: fake_cuda_ipc_open_count() = handles open in this process (references).
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <execinfo.h>
#include <signal.h>

#include "fake_cuda_nccl.h"

#define FAKE_IPC_MAGIC 0x46495043u /* "FIPC" */

typedef struct {
    uint32_t magic;
    int32_t pid, fd, pad;
    uint64_t base, size, serial;
    unsigned char rest[24];
} fake_handle_t;
_Static_assert(sizeof(fake_handle_t) == sizeof(cudaIpcMemHandle_t), "handle size");

typedef struct fake_alloc {
    uint8_t *base;
    uint64_t size;
    int fd;          /* own allocations: the memfd; imports: -1 */
    int32_t pid;     /* imports: the exporter */
    uint64_t serial; /* own: this allocation's; imports: the exporter's */
    int refs;        /* imports: opens not yet closed */
    struct fake_alloc *next;
} fake_alloc_t;

static pthread_mutex_t amu = PTHREAD_MUTEX_INITIALIZER;
static fake_alloc_t *allocs, *imports;
static uint64_t serials;

static fake_alloc_t *find(fake_alloc_t *l, const void *p)
{
    const uint8_t *q = p;
    for (; l; l = l->next)
        if (q >= l->base && q < l->base + l->size)
            return l;
    return NULL;
}

/* ---- strict mode -------------------------------------------------------------------------
 * FAKE_CUDA_STRICT=abort|log: device memory (own allocations and IPC imports) is PROT_NONE
 * except while the fake itself runs queued work (fake_dev_window(1/0) around progress()), so
 * a host access to device memory from the library, which a GPU would not survive and the
 * plain fake hides (its device memory is host memory), faults here. Ranks are threads of
 * one process: an access while another rank's work runs is missed (a window is global).
 * A host dereference by product code outside a window faults; the SIGSEGV handler prints
 * the address and a backtrace; "abort" then aborts, "log" opens that allocation and goes on
 * (it is closed again at the next window end). */
static int strict_mode = -1; /* -1 unknown, 0 off, 1 abort, 2 log */
static int window_depth;     /* under amu */
static volatile int strict_hits;

static int strict(void)
{
    if (strict_mode < 0) {
        const char *e = getenv("FAKE_CUDA_STRICT");
        strict_mode = e == NULL || *e == 0 || strcmp(e, "0") == 0 ? 0
                      : strcmp(e, "log") == 0                     ? 2
                                                                  : 1;
    }
    return strict_mode;
}

static void prot_all(int prot) /* caller holds amu */
{
    for (fake_alloc_t *a = allocs; a; a = a->next)
        mprotect(a->base, a->size, prot);
    for (fake_alloc_t *a = imports; a; a = a->next)
        mprotect(a->base, a->size, prot);
}

static int cur_prot(void) /* caller holds amu */
{
    return strict() && window_depth == 0 ? PROT_NONE : PROT_READ | PROT_WRITE;
}

void fake_dev_window(int open_)
{
    if (!strict())
        return;
    pthread_mutex_lock(&amu);
    if (open_) {
        if (window_depth++ == 0)
            prot_all(PROT_READ | PROT_WRITE);
    } else if (--window_depth == 0) {
        prot_all(PROT_NONE);
    }
    pthread_mutex_unlock(&amu);
}

static void wr(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const uint8_t *q = si->si_addr;
    fake_alloc_t *a = NULL;
    for (fake_alloc_t *l = allocs; l && !a; l = l->next)
        if (q >= l->base && q < l->base + l->size)
            a = l;
    for (fake_alloc_t *l = imports; l && !a; l = l->next)
        if (q >= l->base && q < l->base + l->size)
            a = l;
    if (a == NULL) {
        signal(sig, SIG_DFL);
        return; /* re-faults: a real crash */
    }
    char buf[256];
    snprintf(buf, sizeof buf,
             "\n=== FAKE_CUDA_STRICT: HOST ACCESS TO DEVICE MEMORY at %p (alloc %p + %lu of %lu%s)"
             " thread %lu ===\n",
             (const void *)q, (void *)a->base, (unsigned long)(q - a->base), (unsigned long)a->size,
             a->fd < 0 ? ", IPC import" : "", (unsigned long)pthread_self());
    wr(buf);
    void *bt[64];
    int n = backtrace(bt, 64);
    backtrace_symbols_fd(bt, n, 2);
    wr("=== end ===\n");
    __atomic_add_fetch(&strict_hits, 1, __ATOMIC_RELAXED);
    if (strict_mode == 2) {
        mprotect(a->base, a->size, PROT_READ | PROT_WRITE);
        return;
    }
    signal(SIGABRT, SIG_DFL);
    abort();
}

static void strict_report(void)
{
    if (strict_hits) {
        char buf[128];
        snprintf(buf, sizeof buf, "FAKE_CUDA_STRICT: %d host access(es) to device memory\n",
                 strict_hits);
        wr(buf);
    }
}

static void strict_init(void)
{
    static int once;
    if (!strict() || __atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL))
        return;
    void *bt[4];
    backtrace(bt, 4); /* load libgcc now, not in the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    atexit(strict_report);
}

cudaError_t fake_dev_alloc(void **p, size_t size)
{
    strict_init();
    static int once;
    if (!__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL)) { /* one memfd per allocation */
        struct rlimit r;
        if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
            r.rlim_cur = r.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &r);
        }
    }
    *p = NULL;
    size_t bytes = (size + 255) & ~(size_t)255;
    if (bytes == 0)
        bytes = 256;
    fake_alloc_t *a = calloc(1, sizeof *a);
    if (!a)
        return cudaErrorMemoryAllocation;
    a->fd = memfd_create("fake-cuda", MFD_CLOEXEC);
    void *m = MAP_FAILED;
    if (a->fd >= 0 && ftruncate(a->fd, (off_t)bytes) == 0)
        m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (m == MAP_FAILED) {
        if (a->fd >= 0)
            close(a->fd);
        free(a);
        return cudaErrorMemoryAllocation;
    }
    a->base = m;
    a->size = bytes;
    pthread_mutex_lock(&amu);
    if (cur_prot() == PROT_NONE)
        mprotect(m, bytes, PROT_NONE);
    a->serial = ++serials;
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&amu);
    *p = m;
    return cudaSuccess;
}

int fake_dev_free(void *p)
{
    pthread_mutex_lock(&amu);
    fake_alloc_t **pp = &allocs;
    while (*pp && (*pp)->base != p)
        pp = &(*pp)->next;
    fake_alloc_t *a = *pp;
    if (a)
        *pp = a->next;
    pthread_mutex_unlock(&amu);
    if (!a)
        return 0;
    munmap(a->base, a->size);
    close(a->fd);
    free(a);
    return 1;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *at, const void *ptr)
{
    memset(at, 0, sizeof *at);
    pthread_mutex_lock(&amu);
    int dev = find(allocs, ptr) != NULL || find(imports, ptr) != NULL;
    pthread_mutex_unlock(&amu);
    at->type = dev ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    at->device = 0;
    at->devicePointer = dev ? (void *)(uintptr_t)ptr : NULL;
    at->hostPointer = dev ? NULL : (void *)(uintptr_t)ptr;
    return cudaSuccess;
}

/* cuMemGetAddressRange_v2: CUDA_SUCCESS 0, CUDA_ERROR_NOT_FOUND 500 */
static int fake_range(unsigned long long *base, size_t *size, unsigned long long ptr)
{
    pthread_mutex_lock(&amu);
    fake_alloc_t *a = find(allocs, (const void *)(uintptr_t)ptr);
    if (!a)
        a = find(imports, (const void *)(uintptr_t)ptr);
    if (a) {
        *base = (unsigned long long)(uintptr_t)a->base;
        *size = a->size;
    }
    pthread_mutex_unlock(&amu);
    return a ? 0 : 500;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    (void)version;
    (void)flags;
    int ok = strcmp(symbol, "cuMemGetAddressRange") == 0;
    *fn = ok ? (void *)fake_range : NULL;
    if (status)
        *status = ok ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *ptr)
{
    fake_handle_t h;
    memset(&h, 0, sizeof h);
    pthread_mutex_lock(&amu);
    fake_alloc_t *a = find(allocs, ptr);
    int ok = a && a->base == ptr; /* the base of an allocation only */
    if (ok)
        h = (fake_handle_t){
            FAKE_IPC_MAGIC, (int32_t)getpid(), a->fd, 0, (uint64_t)(uintptr_t)a->base,
            a->size,        a->serial,         {0}};
    pthread_mutex_unlock(&amu);
    if (!ok)
        return cudaErrorInvalidValue;
    memcpy(handle, &h, sizeof h);
    return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **ptr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    (void)flags;
    fake_handle_t h;
    memcpy(&h, &handle, sizeof h);
    *ptr = NULL;
    if (h.magic != FAKE_IPC_MAGIC)
        return cudaErrorInvalidValue;
    if (h.pid == (int32_t)getpid())
        return cudaErrorInvalidResourceHandle;
    pthread_mutex_lock(&amu);
    for (fake_alloc_t *a = imports; a; a = a->next)
        if (a->pid == h.pid && a->serial == h.serial) {
            a->refs++;
            *ptr = a->base;
            pthread_mutex_unlock(&amu);
            return cudaSuccess;
        }
    pthread_mutex_unlock(&amu);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return cudaErrorInvalidResourceHandle;
    /* the same memfd (not a later allocation that reused the descriptor number) */
    off_t end = lseek(fd, 0, SEEK_END);
    void *m = end == (off_t)h.size ? mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                   : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED)
        return cudaErrorInvalidResourceHandle;
    fake_alloc_t *a = calloc(1, sizeof *a);
    if (!a) {
        munmap(m, h.size);
        return cudaErrorMemoryAllocation;
    }
    *a = (fake_alloc_t){m, h.size, -1, h.pid, h.serial, 1, NULL};
    strict_init();
    pthread_mutex_lock(&amu);
    if (cur_prot() == PROT_NONE)
        mprotect(m, h.size, PROT_NONE);
    a->next = imports;
    imports = a;
    pthread_mutex_unlock(&amu);
    *ptr = m;
    return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *ptr)
{
    pthread_mutex_lock(&amu);
    fake_alloc_t **pp = &imports;
    while (*pp && (*pp)->base != ptr)
        pp = &(*pp)->next;
    fake_alloc_t *a = *pp;
    if (a && --a->refs == 0)
        *pp = a->next;
    else
        a = a ? NULL : (fake_alloc_t *)-1;
    pthread_mutex_unlock(&amu);
    if (a == (fake_alloc_t *)-1)
        return cudaErrorInvalidValue;
    if (a) {
        munmap(a->base, a->size);
        free(a);
    }
    return cudaSuccess;
}

int fake_cuda_ipc_open_count(void)
{
    int n = 0;
    pthread_mutex_lock(&amu);
    for (fake_alloc_t *a = imports; a; a = a->next)
        n += a->refs;
    pthread_mutex_unlock(&amu);
    return n;
}
