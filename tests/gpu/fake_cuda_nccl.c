/*
 * A fake CUDA runtime and NCCL, in process, for running the NCCL transport's control logic
 * (rounds, nonblocking settle, deadlines, abort, revoke and shrink, the outcome all-reduce,
 * staging cache, device-buffer helpers) on a machine without a GPU. Linked INSTEAD of
 * libcudart and libnccl into the "fake" test programs; the transport's .c files are compiled
 * against the real headers and call these definitions.
 *
 * It follows the real libraries where the transport's correctness depends on them:
 *
 * Streams are asynchronous. "Device" memory is host memory, but kernels, cudaMemcpyAsync,
 * cudaMemsetAsync, NCCL operations and event records are queued on their stream and run in
 * stream order when the fake makes progress (any query, synchronisation or NCCL poll runs
 * every stream as far as it can go), never at enqueue time. A stream created with
 * cudaStreamNonBlocking has no order with the legacy default stream (NULL, cudaStreamLegacy,
 * cudaStreamPerThread are all the legacy stream here); a blocking stream and the legacy stream
 * wait for each other's earlier work. cudaMemcpy and cudaFree synchronise; cudaMemset does
 * not (as CUDA's for device memory); a device-wide synchronisation (cudaFree,
 * cudaDeviceSynchronize) waits for the legacy stream and the calling thread's streams: each
 * rank thread is a device of its own. The copy and quantize kernels run as their CPU
 * emulations, with the kernel's own grid (rs_box_copy_blocks) and thread counts.
 *
 * NCCL ranks are threads of this process that share a group found by unique id. Every
 * communicator is nonblocking (blocking configs are refused):
 *  - ncclCommInitRankConfig returns ncclInProgress; ncclCommGetAsyncError reports
 *    ncclInProgress until every rank joined.
 *  - ncclGroupEnd checks the group (a receive from this rank itself with no send to itself
 *    in the same group is ncclInvalidUsage, as NCCL's p2p checks) and returns ncclInProgress
 *    until the next ncclCommGetAsyncError (the work is then enqueued); the transfers run
 *    later, on the stream, when it reaches them: sends read their buffer then, a receive
 *    completes when the matching send (per sender, receiver and order) has started, a send
 *    when it was received. A size mismatch is an asynchronous ncclInvalidUsage.
 *  - any call on a communicator whose state is ncclInProgress is ncclInvalidArgument
 *    (NCCL's ncclCommEnsureReady: "Attempt to use communicator before the previous operation
 *    returned ncclSuccess").
 *  - ncclCommRevoke returns ncclInProgress; the communicator becomes quiescent (state
 *    ncclSuccess) FAKE_NCCL_ASYNC_MS later, from a background thread; its queued operations
 *    end without moving data; later operations fail.
 *  - ncclCommShrink and ncclCommSplit return ncclInProgress with *newcomm NULL; a background
 *    thread fills *newcomm once every member of the new communicator called in (at least
 *    FAKE_NCCL_ASYNC_MS after the call) and only then sets the parent's state to ncclSuccess,
 *    so the caller must keep the pointer's storage and poll the parent. An empty exclude
 *    list is ncclInvalidArgument (NCCL's `excludeRanksCount > 0`). NCCL_SHRINK_ABORT ends the
 *    parent's queued operations. ncclCommSplit supports color 0 or NCCL_SPLIT_NOCOLOR with
 *    key = the parent rank (what the transport passes).
 *  - ncclCommAbort waits for a background job of the communicator, then frees it.
 *  - ncclAllReduce: int64 min, at most FAKE_AR_MAX elements (the transport's outcome words).
 *
 * Device memory and CUDA IPC (shareable between processes, with the real rules of handles)
 * are in fake_cuda_ipc.c.
 *
 * Knobs: FAKE_CUDA_DEVICES (default 1) = what cudaGetDeviceCount reports; FAKE_NCCL_ASYNC_MS
 * (default 20) = how long revoke, shrink and split take at least.
 * Test hooks (fake_cuda_nccl.h): fail the n-th kernel launch on a stream, a timed "long
 * kernel" entry, a kernel spinning on a host flag.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_cuda_nccl.h"
#include "transport/nccl/nccl_internal.h"

#define FAKE_MAX_RANKS 64
/* Most elements of a fake all-reduce (the transport's outcome words). */
#define FAKE_AR_MAX 8
/* A synchronisation that cannot finish in this long is a bug of the caller: abort loudly. */
#define FAKE_SYNC_LIMIT_S 300.0

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

static double async_s(void)
{
    const char *s = getenv("FAKE_NCCL_ASYNC_MS");
    return (s != NULL && *s != '\0' ? atof(s) : 20.0) * 1e-3;
}

/* ---- streams --------------------------------------------------------------------------- */

struct ncclComm;
typedef struct p2p p2p_t;

enum { E_COPY, E_SET, E_BOX, E_QUANT, E_DENC, E_DAPPLY, E_DHASH, E_WAIT, E_NCCL, E_DELAY, E_SPIN };

typedef struct entry {
    int kind;
    void *dst;
    const void *src;
    size_t bytes;
    int value;
    rs_box_copy_t box;
    rs_quant_job_t quant;
    rs_dk_job_t delta;
    void *scale;
    const uint8_t *header; /* E_DHASH: the encoded chunk's header, and where its hash goes */
    uint8_t *msg;
    struct CUstream_st *other; /* E_WAIT: wait until other->done >= seq */
    uint64_t seq;
    p2p_t *ops; /* E_NCCL: the group's operations of one communicator */
    int nops, started;
    struct ncclComm *comm;
    double until;             /* E_DELAY */
    const volatile int *flag; /* E_SPIN: runs until *flag != 0 */
    struct entry *next;
} entry_t;

struct CUstream_st {
    int legacy, nonblocking, dead;
    pthread_t owner; /* the creating thread: a "device" of its own (see drain) */
    entry_t *head, *tail;
    uint64_t enq, done; /* entries enqueued / completed */
    int fail_launch;    /* > 0: the fail_launch-th kernel launch from now fails */
    struct CUstream_st *next;
};

struct CUevent_st {
    struct CUstream_st *s;
    uint64_t seq; /* complete when s->done >= seq */
};

static struct CUstream_st legacy_stream = {.legacy = 1};
static struct CUstream_st *streams = &legacy_stream;
static _Thread_local cudaError_t last_error = cudaSuccess;

static struct CUstream_st *stream_of(cudaStream_t s)
{
    if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread)
        return &legacy_stream;
    return s;
}

static void push(struct CUstream_st *s, entry_t *e)
{
    e->next = NULL;
    if (s->tail != NULL)
        s->tail->next = e;
    else
        s->head = e;
    s->tail = e;
    s->enq++;
}

static entry_t *new_entry(int kind)
{
    entry_t *e = calloc(1, sizeof *e);
    if (e == NULL) {
        fprintf(stderr, "fake CUDA: out of memory\n");
        abort();
    }
    e->kind = kind;
    return e;
}

/* Queue @p e on @p cs (caller holds mu), after the implicit waits of the legacy stream. */
static void enqueue(cudaStream_t cs, entry_t *e)
{
    struct CUstream_st *s = stream_of(cs);
    if (s->legacy) {
        for (struct CUstream_st *b = streams; b != NULL; b = b->next)
            if (b != s && !b->nonblocking && !b->dead && b->enq > b->done) {
                entry_t *w = new_entry(E_WAIT);
                w->other = b;
                w->seq = b->enq;
                push(s, w);
            }
    } else if (!s->nonblocking && legacy_stream.enq > legacy_stream.done) {
        entry_t *w = new_entry(E_WAIT);
        w->other = &legacy_stream;
        w->seq = legacy_stream.enq;
        push(s, w);
    }
    push(s, e);
}

static int nccl_step(entry_t *e); /* below: start / complete a group's operations */

/* Run entry @p e if it can run now: 1 when it completed. */
static int run_entry(entry_t *e)
{
    switch (e->kind) {
    case E_COPY:
        memmove(e->dst, e->src, e->bytes);
        return 1;
    case E_SET:
        memset(e->dst, e->value, e->bytes);
        return 1;
    case E_BOX: {
        const int64_t blocks = rs_box_copy_blocks(&e->box);
        rs_box_copy_emulate_grid(&e->box, e->dst, e->src, rs_box_copy_threads(&e->box), blocks);
        return 1;
    }
    case E_QUANT:
        rs_quant_emulate(&e->quant, e->dst, e->scale, e->src);
        return 1;
    case E_DENC:
        rs_delta_encode_emulate(&e->delta, e->src, e->scale, e->dst);
        return 1;
    case E_DAPPLY:
        rs_delta_apply_emulate(&e->delta, e->src, e->dst);
        return 1;
    case E_DHASH:
        rs_delta_hash_emulate(e->src, e->bytes, e->dst);
        if (e->msg)
            rs_dk_hash_put(*(const uint64_t *)e->dst, e->bytes, e->header, e->msg);
        return 1;
    case E_WAIT:
        return e->other->done >= e->seq;
    case E_NCCL:
        return nccl_step(e);
    case E_DELAY:
        return now_s() >= e->until;
    case E_SPIN:
        return *e->flag != 0;
    }
    return 1;
}

static void unref_comm(struct ncclComm *c); /* below */

static void free_entry(entry_t *e)
{
    if (e->kind == E_NCCL)
        unref_comm(e->comm);
    free(e->ops);
    free(e);
}

/* Run every stream as far as it can go (caller holds mu): the device making progress. */
static void progress_inner(void);
static void progress(void)
{
    int work = 0;
    for (struct CUstream_st *s = streams; s != NULL && !work; s = s->next)
        work = s->head != NULL;
    if (!work)
        return;
    fake_dev_window(1);
    progress_inner();
    fake_dev_window(0);
}

static void progress_inner(void)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (struct CUstream_st *s = streams; s != NULL; s = s->next)
            while (s->head != NULL && run_entry(s->head)) {
                entry_t *e = s->head;
                s->head = e->next;
                if (s->head == NULL)
                    s->tail = NULL;
                s->done++;
                free_entry(e);
                changed = 1;
            }
    }
}

/* Wait until @p s has nothing queued; NULL: the device, i.e. the legacy stream and every
 * stream the calling thread created. (Ranks are threads that all report device 0; on real
 * hardware each has a GPU of its own, so a device-wide synchronisation must not wait for
 * another rank's streams.) Bounded. */
static void drain(struct CUstream_st *s)
{
    const double t0 = now_s();
    pthread_mutex_lock(&mu);
    for (;;) {
        progress();
        int busy = 0;
        for (struct CUstream_st *x = streams; x != NULL; x = x->next)
            busy |= (s == NULL ? x->legacy || pthread_equal(x->owner, pthread_self()) : x == s) &&
                    x->head != NULL;
        if (!busy)
            break;
        pthread_mutex_unlock(&mu);
        if (now_s() - t0 > FAKE_SYNC_LIMIT_S) {
            fprintf(stderr, "fake CUDA: a synchronisation waited %.0f s: hung stream\n",
                    FAKE_SYNC_LIMIT_S);
            abort();
        }
        nap();
        pthread_mutex_lock(&mu);
    }
    pthread_mutex_unlock(&mu);
}

/* ---- CUDA runtime -------------------------------------------------------------------- */

static cudaError_t launch_check(struct CUstream_st *s)
{
    if (s->fail_launch > 0 && --s->fail_launch == 0) {
        last_error = cudaErrorLaunchOutOfResources; /* not sticky: the stream stays usable */
        return last_error;
    }
    return cudaSuccess;
}

/* Queue entry @p x on @p stream (takes mu). */
static void queue(cudaStream_t stream, entry_t *x)
{
    pthread_mutex_lock(&mu);
    enqueue(stream, x);
    pthread_mutex_unlock(&mu);
}

/* Queue kernel entry @p x on @p stream, unless the launch is to fail (fake_cuda_fail_launch). */
static cudaError_t launch(cudaStream_t stream, entry_t *x)
{
    pthread_mutex_lock(&mu);
    const cudaError_t e = launch_check(stream_of(stream));
    if (e == cudaSuccess)
        enqueue(stream, x);
    else
        free(x);
    pthread_mutex_unlock(&mu);
    return e;
}

cudaError_t rs_box_copy_launch(const rs_box_copy_t *d, void *dst, const void *src,
                               cudaStream_t stream)
{
    if (d->units == 0)
        return cudaSuccess;
    entry_t *x = new_entry(E_BOX);
    x->box = *d;
    x->dst = dst;
    x->src = src;
    return launch(stream, x);
}

cudaError_t rs_quant_launch(const rs_quant_job_t *j, void *dst, void *scale, const void *src,
                            cudaStream_t stream)
{
    if (j->blocks == 0)
        return cudaSuccess;
    entry_t *x = new_entry(E_QUANT);
    x->quant = *j;
    x->dst = dst;
    x->scale = scale;
    x->src = src;
    return launch(stream, x);
}

cudaError_t rs_delta_encode_launch(const rs_dk_job_t *j, const uint8_t *cur, uint8_t *prev,
                                   uint8_t *out, cudaStream_t stream)
{
    if (j->groups == 0)
        return cudaErrorInvalidValue;
    entry_t *x = new_entry(E_DENC);
    x->delta = *j;
    x->src = cur;
    x->scale = prev;
    x->dst = out;
    return launch(stream, x);
}

cudaError_t rs_delta_apply_launch(const rs_dk_job_t *j, const uint8_t *in, uint8_t *chunk,
                                  cudaStream_t stream)
{
    entry_t *x = new_entry(E_DAPPLY);
    x->delta = *j;
    x->src = in;
    x->dst = chunk;
    return launch(stream, x);
}

cudaError_t rs_delta_hash_launch(const uint8_t *chunk, uint64_t len, uint64_t *sum,
                                 const uint8_t *header, uint8_t *msg, cudaStream_t stream)
{
    entry_t *x = new_entry(E_DHASH);
    x->src = chunk;
    x->bytes = len;
    x->dst = sum;
    x->header = header;
    x->msg = msg;
    return launch(stream, x);
}

void fake_cuda_fail_launch(cudaStream_t stream, int nth)
{
    pthread_mutex_lock(&mu);
    stream_of(stream)->fail_launch = nth;
    pthread_mutex_unlock(&mu);
}

void fake_cuda_delay(cudaStream_t stream, double seconds)
{
    entry_t *x = new_entry(E_DELAY);
    x->until = now_s() + seconds;
    queue(stream, x);
}

cudaError_t rs_test_spin_launch(const volatile int *flag, cudaStream_t stream)
{
    entry_t *x = new_entry(E_SPIN);
    x->flag = flag;
    queue(stream, x);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    const char *s = getenv("FAKE_CUDA_DEVICES");
    *count = s != NULL ? atoi(s) : 1;
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device)
{
    return device >= 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

const char *cudaGetErrorName(cudaError_t error)
{
    return error == cudaSuccess ? "cudaSuccess" : "cudaErrorFake";
}

const char *cudaGetErrorString(cudaError_t error)
{
    return error == cudaSuccess ? "no error" : "fake CUDA error";
}

cudaError_t cudaMalloc(void **p, size_t size)
{
    return fake_dev_alloc(p, size); /* fake_cuda_ipc.c: shareable between processes */
}

cudaError_t cudaFree(void *p)
{
    drain(NULL); /* cudaFree synchronises the device */
    if (!fake_dev_free(p))
        free(p); /* cudaMallocHost's */
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t size)
{
    *p = aligned_alloc(256, (size + 255) & ~(size_t)255);
    return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
    return cudaFree(p);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)kind;
    if (count == 0)
        return cudaSuccess;
    entry_t *x = new_entry(E_COPY);
    x->dst = dst;
    x->src = src;
    x->bytes = count;
    queue(stream, x);
    return cudaSuccess;
}

static _Thread_local unsigned long long host_waits; /* fake_cuda_host_waits */

unsigned long long fake_cuda_host_waits(void)
{
    return host_waits;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    host_waits++;
    cudaMemcpyAsync(dst, src, count, kind, NULL);
    drain(&legacy_stream);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t stream)
{
    if (count == 0)
        return cudaSuccess;
    entry_t *x = new_entry(E_SET);
    x->dst = p;
    x->value = value;
    x->bytes = count;
    queue(stream, x);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t count)
{
    return cudaMemsetAsync(p, value, count, NULL); /* asynchronous for device memory */
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    struct CUstream_st *x = calloc(1, sizeof *x);
    if (x == NULL)
        return cudaErrorMemoryAllocation;
    x->nonblocking = (flags & cudaStreamNonBlocking) != 0;
    x->owner = pthread_self();
    pthread_mutex_lock(&mu);
    x->next = streams->next; /* after the legacy stream, which stays first */
    streams->next = x;
    pthread_mutex_unlock(&mu);
    *s = x;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

/* The queued work still completes; the stream object stays listed (reachable) until then. */
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (stream_of(s)->legacy)
        return cudaErrorInvalidResourceHandle;
    pthread_mutex_lock(&mu);
    s->dead = 1;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    host_waits++;
    drain(stream_of(s));
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t cs)
{
    struct CUstream_st *s = stream_of(cs);
    pthread_mutex_lock(&mu);
    progress();
    const int busy = s->head != NULL;
    pthread_mutex_unlock(&mu);
    return busy ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    host_waits++;
    drain(NULL);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = calloc(1, sizeof **e);
    return *e != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t cs)
{
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = stream_of(cs);
    e->s = s;
    e->seq = s->enq;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (e->s == NULL)
        return cudaSuccess; /* never recorded */
    pthread_mutex_lock(&mu);
    progress();
    const int done = e->s->done >= e->seq;
    pthread_mutex_unlock(&mu);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    host_waits++;
    if (e->s != NULL)
        drain(e->s);
    return cudaSuccess;
}

/* Times mean nothing here: 1 ms between any two events (bench_gpu_pack --no-target). */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    (void)start;
    (void)end;
    *ms = 1.0f;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    (void)device;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "fake CUDA device (host memory)");
    prop->major = 9;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t cs, cudaEvent_t e, unsigned int flags)
{
    (void)flags;
    if (e->s == NULL)
        return cudaSuccess;
    pthread_mutex_lock(&mu);
    entry_t *w = new_entry(E_WAIT);
    w->other = e->s;
    w->seq = e->seq;
    enqueue(cs, w);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* ---- NCCL ------------------------------------------------------------------------------ */

typedef struct msg {
    int src, dst;
    uint64_t seq;
    size_t bytes;
    void *data;
    int consumed; /* set by the receiver; the sender's send completes then */
    struct msg *next;
} msg_t;

typedef struct ar {
    uint64_t seq;
    int count, consumed;
    int64_t min[FAKE_AR_MAX];
    struct ar *next;
} ar_t;

typedef struct group {
    char id[NCCL_UNIQUE_ID_BYTES];
    int nranks, joined;
    msg_t *mail;
    ar_t *ars;
    uint64_t sendseq[FAKE_MAX_RANKS][FAKE_MAX_RANKS];
    struct group *next;
} group_t;

enum { OP_SEND, OP_RECV, OP_AR };

struct p2p {
    int kind;
    void *buf;
    const void *sbuf;
    size_t bytes;
    int peer;
    uint64_t seq;
    msg_t *msg; /* OP_SEND once started: the deposited message */
    int done;
};

/* A background job of a communicator (revoke, shrink, split). */
typedef struct {
    int active, cancel, finished;
    pthread_t thread;
    struct ncclComm *parent, *child;
    ncclComm_t *newcomm; /* the caller's pointer, written when the job ends */
    double ready_at;
} job_t;

struct ncclComm {
    group_t *g;
    int rank;
    ncclResult_t state; /* ncclSuccess, ncclInProgress or an error */
    int initialized;
    int enqueue_polls; /* > 0: a group end is being enqueued (state ncclInProgress) */
    int revoked;       /* revoked or shrunk with abort: queued operations end, later ones fail */
    int aborted;       /* ncclCommAbort/Destroy called: its queued operations end */
    int released;      /* ... and the caller's handle is gone: freed when refs reach 0 */
    int refs;          /* stream entries that point here: the last one frees a released comm */
    uint64_t recvseq[FAKE_MAX_RANKS];
    uint64_t arseq;
    int children; /* splits so far (names the child groups) */
    job_t job;
    char last[256];
};

static group_t *groups;
static unsigned long long id_counter;

/* A stream entry of @p c completed (caller holds mu): the last one frees a released comm. */
static void unref_comm(struct ncclComm *c)
{
    if (--c->refs == 0 && c->released)
        free(c);
}

/* Start the group's operations of @p e (sends deposit, the all-reduce contributes: they read
 * their buffers now, in stream order), then complete what can complete; 1 when all did. */
static int nccl_step(entry_t *e)
{
    ncclComm_t c = e->comm;
    if (c->revoked || c->aborted || (c->state != ncclSuccess && c->state != ncclInProgress))
        return 1; /* aborted kernels quit; an asynchronous error ends the work too */
    group_t *g = c->g;
    if (!e->started) {
        e->started = 1;
        for (int i = 0; i < e->nops; i++) {
            p2p_t *op = &e->ops[i];
            if (op->kind == OP_SEND) {
                msg_t *m = calloc(1, sizeof *m);
                m->src = c->rank;
                m->dst = op->peer;
                m->seq = op->seq;
                m->bytes = op->bytes;
                m->data = malloc(op->bytes ? op->bytes : 1);
                memcpy(m->data, op->sbuf, op->bytes);
                m->next = g->mail;
                g->mail = m;
                op->msg = m;
            } else if (op->kind == OP_AR) {
                ar_t *a = g->ars;
                while (a != NULL && a->seq != op->seq)
                    a = a->next;
                if (a == NULL) {
                    a = calloc(1, sizeof *a);
                    a->seq = op->seq;
                    for (int k = 0; k < FAKE_AR_MAX; k++)
                        a->min[k] = INT64_MAX;
                    a->next = g->ars;
                    g->ars = a;
                }
                for (size_t k = 0; k < op->bytes / sizeof(int64_t); k++) {
                    int64_t v;
                    memcpy(&v, (const char *)op->sbuf + k * sizeof v, sizeof v);
                    if (v < a->min[k])
                        a->min[k] = v;
                }
                a->count++;
            }
        }
    }
    int all = 1;
    for (int i = 0; i < e->nops; i++) {
        p2p_t *op = &e->ops[i];
        if (op->done)
            continue;
        if (op->kind == OP_RECV) {
            for (msg_t **pm = &g->mail; *pm != NULL; pm = &(*pm)->next) {
                msg_t *m = *pm;
                if (m->src == op->peer && m->dst == c->rank && m->seq == op->seq) {
                    if (m->bytes != op->bytes) {
                        snprintf(c->last, sizeof c->last,
                                 "fake: recv of %zu bytes from rank %d matched a send of %zu",
                                 op->bytes, op->peer, m->bytes);
                        c->state = ncclInvalidUsage;
                    } else {
                        memcpy(op->buf, m->data, m->bytes);
                    }
                    *pm = m->next;
                    m->consumed = 1; /* the sender frees it */
                    op->done = 1;
                    break;
                }
            }
        } else if (op->kind == OP_SEND) {
            if (op->msg->consumed) {
                free(op->msg->data);
                free(op->msg);
                op->msg = NULL;
                op->done = 1;
            }
        } else {
            for (ar_t **pa = &g->ars; *pa != NULL; pa = &(*pa)->next) {
                ar_t *a = *pa;
                if (a->seq == op->seq && a->count == g->nranks) {
                    memcpy(op->buf, a->min, op->bytes);
                    if (++a->consumed == g->nranks) {
                        *pa = a->next;
                        free(a);
                    }
                    op->done = 1;
                    break;
                }
            }
        }
        all &= op->done;
    }
    return all;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclInProgress:
        return "operation in progress";
    case ncclInvalidUsage:
        return "invalid usage";
    case ncclInvalidArgument:
        return "invalid argument";
    default:
        return "fake NCCL error";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    return comm != NULL ? comm->last : "";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    pthread_mutex_lock(&mu);
    snprintf(id->internal, sizeof id->internal, "fake-nccl-%llu", ++id_counter);
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

/* A new communicator, rank @p rank of @p nranks of the group of @p id (made by the first to
 * join). Caller holds mu. */
static ncclComm_t join_locked(int nranks, const char *id, int rank)
{
    ncclComm_t c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    group_t *g = groups;
    while (g != NULL && memcmp(g->id, id, sizeof g->id) != 0)
        g = g->next;
    if (g == NULL) {
        g = calloc(1, sizeof *g);
        memcpy(g->id, id, sizeof g->id);
        g->nranks = nranks;
        g->next = groups;
        groups = g;
    }
    g->joined++;
    c->g = g;
    c->rank = rank;
    c->state = ncclInProgress; /* ready once every rank joined */
    return c;
}

/* NCCL's ncclCommEnsureReady (caller holds mu). */
static ncclResult_t ensure_ready(ncclComm_t c, const char *what)
{
    if (c->state == ncclInProgress) {
        snprintf(c->last, sizeof c->last,
                 "fake: %s: Attempt to use communicator before the previous operation returned "
                 "ncclSuccess",
                 what);
        return ncclInvalidArgument;
    }
    return c->state;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    if (nranks < 1 || nranks > FAKE_MAX_RANKS || rank < 0 || rank >= nranks || config == NULL ||
        config->blocking != 0)
        return ncclInvalidArgument; /* the transport always asks for nonblocking */
    pthread_mutex_lock(&mu);
    ncclComm_t c = join_locked(nranks, id.internal, rank);
    pthread_mutex_unlock(&mu);
    if (c == NULL)
        return ncclSystemError;
    *comm = c;
    return ncclInProgress;
}

/* The background job of c->job: wait at least FAKE_NCCL_ASYNC_MS; a shrink or split also
 * until every member of the child joined; then publish the child and settle the parent. */
static void *job_main(void *arg)
{
    ncclComm_t c = arg;
    job_t *j = &c->job;
    for (;;) {
        pthread_mutex_lock(&mu);
        const int ready =
            j->cancel || (now_s() >= j->ready_at &&
                          (j->child == NULL || j->child->g->joined == j->child->g->nranks));
        if (ready) {
            if (!j->cancel && j->newcomm != NULL) {
                *j->newcomm = j->child; /* written through the caller's pointer, now */
                j->child->initialized = 1;
                j->child->state = ncclSuccess;
            } else if (j->child != NULL) {
                free(j->child); /* cancelled: never published */
            }
            if (!j->cancel && c->state == ncclInProgress)
                c->state = ncclSuccess;
            j->child = NULL;
            j->finished = 1;
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        pthread_mutex_unlock(&mu);
        nap();
    }
}

/* Start a background job (caller holds mu). */
static void start_job(ncclComm_t c, ncclComm_t child, ncclComm_t *newcomm)
{
    job_t *j = &c->job;
    if (j->active) /* the previous job finished (the state was ncclSuccess): reap it */
        pthread_join(j->thread, NULL);
    j->active = 1;
    j->cancel = 0;
    j->finished = 0;
    j->child = child;
    j->newcomm = newcomm;
    j->ready_at = now_s() + async_s();
    c->state = ncclInProgress;
    pthread_create(&j->thread, NULL, job_main, c);
}

/* Wait for the communicator's background job to end (caller does NOT hold mu). */
static void join_job(ncclComm_t c, int cancel)
{
    if (!c->job.active)
        return;
    pthread_mutex_lock(&mu);
    c->job.cancel = cancel;
    pthread_mutex_unlock(&mu);
    pthread_join(c->job.thread, NULL);
    c->job.active = 0;
}

/* Revoke: queued operations end at once without moving data; the communicator is quiescent
 * (ncclSuccess) only FAKE_NCCL_ASYNC_MS later. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags)
{
    if (comm == NULL)
        return ncclSuccess;
    if (flags != NCCL_REVOKE_DEFAULT)
        return ncclInvalidArgument;
    pthread_mutex_lock(&mu);
    if (comm->revoked || (comm->job.active && !comm->job.finished)) {
        pthread_mutex_unlock(&mu);
        return ncclInvalidArgument; /* a revoke (or another job) in progress or done */
    }
    comm->revoked = 1;
    comm->enqueue_polls = 0;
    start_job(comm, NULL, NULL);
    pthread_mutex_unlock(&mu);
    return ncclInProgress;
}

/* Shrink and split: a child joins a group named by the parent's and @p suffix; published by
 * a background job. */
static ncclResult_t child_of(ncclComm_t comm, const char *suffix, int nranks, int rank,
                             ncclComm_t *newcomm, int abort_parent)
{
    char id[NCCL_UNIQUE_ID_BYTES];
    memset(id, 0, sizeof id);
    snprintf(id, sizeof id, "%.40s/%s", comm->g->id, suffix);
    pthread_mutex_lock(&mu);
    ncclResult_t r = ensure_ready(comm, "shrink/split");
    if (r != ncclSuccess) {
        pthread_mutex_unlock(&mu);
        return r;
    }
    *newcomm = NULL; /* until the background job publishes the child */
    if (abort_parent)
        comm->revoked = 1; /* NCCL_SHRINK_ABORT: ongoing parent operations end */
    ncclComm_t child = rank >= 0 ? join_locked(nranks, id, rank) : NULL;
    start_job(comm, child, rank >= 0 ? newcomm : NULL);
    pthread_mutex_unlock(&mu);
    return ncclInProgress;
}

/* Only NCCL_SHRINK_ABORT is modelled (the transport always passes it); ranks keep order. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excl, int nexcl, ncclComm_t *newcomm,
                            ncclConfig_t *config, int flags)
{
    if (comm == NULL || newcomm == NULL || excl == NULL || nexcl <= 0 || config == NULL ||
        config->blocking != 0 || flags != NCCL_SHRINK_ABORT) {
        if (comm != NULL)
            snprintf(comm->last, sizeof comm->last,
                     "fake: ncclCommShrink: %d excluded ranks (must be > 0), flags %d", nexcl,
                     flags);
        return ncclInvalidArgument;
    }
    char suffix[NCCL_UNIQUE_ID_BYTES];
    size_t n = (size_t)snprintf(suffix, sizeof suffix, "shrink");
    int below = 0;
    for (int i = 0; i < nexcl; i++) {
        if (excl[i] == comm->rank || excl[i] < 0 || excl[i] >= comm->g->nranks)
            return ncclInvalidArgument;
        below += excl[i] < comm->rank;
        if (n < sizeof suffix)
            n += (size_t)snprintf(suffix + n, sizeof suffix - n, ",%d", excl[i]);
    }
    return child_of(comm, suffix, comm->g->nranks - nexcl, comm->rank - below, newcomm, 1);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    if (comm == NULL || newcomm == NULL || (color != 0 && color != NCCL_SPLIT_NOCOLOR) ||
        key != comm->rank || (config != NULL && config->blocking != 0))
        return ncclInvalidArgument; /* the fake models what the transport passes */
    char suffix[32];
    snprintf(suffix, sizeof suffix, "split%d", ++comm->children);
    return child_of(comm, suffix, comm->g->nranks, color == 0 ? comm->rank : -1, newcomm, 0);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state)
{
    pthread_mutex_lock(&mu);
    if (!comm->initialized && comm->g->joined == comm->g->nranks) {
        comm->initialized = 1;
        if (comm->state == ncclInProgress && !comm->job.active)
            comm->state = ncclSuccess;
    }
    if (comm->enqueue_polls > 0 && --comm->enqueue_polls == 0 && comm->state == ncclInProgress)
        comm->state = ncclSuccess; /* the group's work is enqueued */
    progress();
    *state = comm->state;
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

/* Free the communicator: its queued operations end; a background job is waited for. */
static ncclResult_t release(ncclComm_t comm)
{
    if (comm == NULL)
        return ncclSuccess;
    join_job(comm, 1);
    pthread_mutex_lock(&mu);
    comm->aborted = 1;
    progress(); /* entries of this communicator complete now (unless behind other work) */
    comm->released = 1;
    if (comm->refs == 0)
        free(comm); /* else the last queued entry frees it */
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return release(comm);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    pthread_mutex_lock(&mu);
    ncclResult_t r = ensure_ready(comm, "ncclCommFinalize");
    if (r == ncclSuccess && comm->revoked)
        r = ncclInvalidUsage; /* NCCL: finalize after revoke is invalid */
    pthread_mutex_unlock(&mu);
    return r;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return release(comm);
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    *count = comm->g->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    (void)comm;
    *device = 0;
    return ncclSuccess;
}

/* ---- groups ---------------------------------------------------------------------------- */

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    p2p_t op;
} posted_t;

#define FAKE_MAX_POSTED (4 * FAKE_MAX_RANKS + 4)
static _Thread_local int depth;
static _Thread_local posted_t posted[FAKE_MAX_POSTED];
static _Thread_local int nposted;

/* nccl.h declares these without (void); give them prototypes. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGroupStart(void)
{
    depth++;
    return ncclSuccess;
}

static ncclResult_t post(ncclComm_t comm, cudaStream_t stream, p2p_t op)
{
    if (comm == NULL)
        return ncclInvalidArgument;
    pthread_mutex_lock(&mu);
    ncclResult_t r = ensure_ready(comm, "ncclSend/ncclRecv/ncclAllReduce");
    if (r == ncclSuccess && comm->revoked) {
        snprintf(comm->last, sizeof comm->last, "fake: communicator revoked");
        r = ncclInvalidUsage;
    }
    pthread_mutex_unlock(&mu);
    if (r != ncclSuccess)
        return r;
    if (op.kind != OP_AR && (op.peer < 0 || op.peer >= comm->g->nranks))
        return ncclInvalidArgument;
    if (nposted == FAKE_MAX_POSTED)
        return ncclInvalidUsage;
    const int alone = depth == 0;
    if (alone)
        ncclGroupStart();
    posted[nposted++] = (posted_t){comm, stream, op};
    return alone ? ncclGroupEnd() : ncclSuccess;
}

/* NCCL's p2p check: a receive from oneself needs a send to oneself in the same group. */
static ncclResult_t check_self(ncclComm_t c)
{
    int sends = 0, recvs = 0;
    for (int i = 0; i < nposted; i++)
        if (posted[i].comm == c && posted[i].op.peer == c->rank) {
            sends += posted[i].op.kind == OP_SEND;
            recvs += posted[i].op.kind == OP_RECV;
        }
    if (sends != recvs) {
        snprintf(c->last, sizeof c->last,
                 "fake: %d receive(s) from rank %d itself but %d send(s) to itself in the group",
                 recvs, c->rank, sends);
        return ncclInvalidUsage;
    }
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (depth == 0)
        return ncclInvalidUsage;
    if (--depth > 0)
        return ncclSuccess;
    ncclResult_t ret = ncclSuccess;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nposted && ret == ncclSuccess; i++)
        ret = check_self(posted[i].comm);
    if (ret != ncclSuccess) {
        for (int i = 0; i < nposted; i++)
            posted[i].comm->state = ret; /* an asynchronous error of every comm of the group */
        nposted = 0;
        pthread_mutex_unlock(&mu);
        return ret;
    }
    /* One stream entry per (communicator, stream), operations in posting order. */
    for (int i = 0; i < nposted; i++) {
        if (posted[i].comm == NULL)
            continue;
        ncclComm_t c = posted[i].comm;
        cudaStream_t s = posted[i].stream;
        entry_t *e = new_entry(E_NCCL);
        e->comm = c;
        e->ops = calloc((size_t)nposted, sizeof *e->ops);
        for (int k = i; k < nposted; k++) {
            if (posted[k].comm != c || posted[k].stream != s)
                continue;
            p2p_t op = posted[k].op;
            if (op.kind == OP_SEND)
                op.seq = c->g->sendseq[c->rank][op.peer]++;
            else if (op.kind == OP_RECV)
                op.seq = c->recvseq[op.peer]++;
            else
                op.seq = c->arseq++;
            e->ops[e->nops++] = op;
            posted[k].comm = NULL;
        }
        enqueue(s, e);
        c->refs++;
        c->state = ncclInProgress; /* enqueued by the next ncclCommGetAsyncError */
        c->enqueue_polls = 1;
        ret = ncclInProgress;
    }
    nposted = 0;
    pthread_mutex_unlock(&mu);
    return ret;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    if (type != ncclUint8 && type != ncclInt8)
        return ncclInvalidArgument;
    p2p_t op = {.kind = OP_SEND, .sbuf = buf, .bytes = count, .peer = peer};
    return post(comm, stream, op);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    if (type != ncclUint8 && type != ncclInt8)
        return ncclInvalidArgument;
    p2p_t op = {.kind = OP_RECV, .buf = buf, .bytes = count, .peer = peer};
    return post(comm, stream, op);
}

ncclResult_t ncclAllReduce(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t type,
                           ncclRedOp_t red, ncclComm_t comm, cudaStream_t stream)
{
    if (count < 1 || count > FAKE_AR_MAX || type != ncclInt64 || red != ncclMin)
        return ncclInvalidArgument;
    p2p_t op = {.kind = OP_AR,
                .buf = recvbuf,
                .sbuf = sendbuf,
                .bytes = count * sizeof(int64_t),
                .peer = -1};
    return post(comm, stream, op);
}
