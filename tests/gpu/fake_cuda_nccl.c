/*
 * A fake CUDA runtime and NCCL, in process, for running the NCCL transport's control logic
 * (rounds, nonblocking settle, deadlines, abort, the outcome all-reduce, staging cache,
 * device-buffer helpers) on a machine without a GPU. Linked INSTEAD of libcudart and
 * libnccl into the "fake" test programs; the transport's .c files are compiled against
 * the real headers and call these definitions.
 *
 * Model: "device" memory is host memory and every stream is synchronous (work runs when
 * enqueued), so events are always complete. The copy kernel is replaced by its CPU
 * emulation (rs_box_copy_launch below), the quantize kernel by its own (rs_quant_launch). NCCL
 * ranks are threads of this process that share a group found by unique id. Communicators are
 * nonblocking: ncclGroupEnd deposits the sends and returns ncclInProgress until every receive of
 * the group found its message and every send was received (rendezvous; ncclCommGetAsyncError
 * completes them), and any NCCL call while the state is not ncclSuccess fails: real nonblocking
 * NCCL enqueues the operations only once the state becomes ncclSuccess and forbids calls before
 * that. ncclAllReduce (int32 min, count 1) completes when every rank contributed. Messages are
 * matched per (sender, receiver) in order; a size mismatch is an asynchronous ncclInvalidUsage.
 *
 * Knob: FAKE_CUDA_DEVICES (default 1) = what cudaGetDeviceCount reports.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/nccl/nccl_internal.h"

#define FAKE_MAX_RANKS 64

/* ---- CUDA runtime -------------------------------------------------------------------- */

cudaError_t rs_box_copy_launch(const rs_box_copy_t *d, void *dst, const void *src,
                               cudaStream_t stream)
{
    (void)stream;
    rs_box_copy_emulate(d, dst, src, rs_box_copy_threads(d));
    return cudaSuccess;
}

cudaError_t rs_quant_launch(const rs_quant_job_t *j, void *dst, void *scale, const void *src,
                            cudaStream_t stream)
{
    (void)stream;
    rs_quant_emulate(j, dst, scale, src);
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
    return cudaSuccess;
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
    *p = aligned_alloc(256, (size + 255) & ~(size_t)255);
    return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t size)
{
    return cudaMalloc(p, size);
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    (void)kind;
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemset(void *p, int value, size_t count)
{
    memset(p, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t stream)
{
    (void)stream;
    return cudaMemset(p, value, count);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    *s = (cudaStream_t)malloc(16);
    return *s != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = (cudaEvent_t)malloc(16);
    return *e != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)e;
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess; /* synchronous streams: everything recorded is done */
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

/* Most elements of a fake all-reduce (the transport's outcome words). */
#define FAKE_AR_MAX 8

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

typedef struct {
    int kind;
    void *buf;
    const void *sbuf;
    size_t bytes;
    int peer;
    uint64_t seq;
    msg_t *msg; /* OP_SEND: the deposited message */
} op_t;

struct ncclComm {
    group_t *g;
    int rank;
    ncclResult_t state; /* ncclSuccess, ncclInProgress or an error */
    int initialized;
    int revoked; /* ncclCommRevoke: every later operation fails */
    op_t pending[4 * FAKE_MAX_RANKS + 4];
    int npending;
    uint64_t recvseq[FAKE_MAX_RANKS];
    uint64_t arseq;
    char last[256];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static group_t *groups;
static unsigned long long id_counter;

typedef struct {
    ncclComm_t comm;
    op_t op;
} posted_t;

static _Thread_local int depth;
static _Thread_local posted_t posted[4 * FAKE_MAX_RANKS + 4];
static _Thread_local int nposted;

/* Complete what can be completed (caller holds mu). */
static void try_complete(ncclComm_t c)
{
    group_t *g = c->g;
    int keep = 0;
    for (int i = 0; i < c->npending; i++) {
        op_t *op = &c->pending[i];
        int done = 0;
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
                    done = 1;
                    break;
                }
            }
        } else if (op->kind == OP_SEND) {
            if (op->msg->consumed) {
                free(op->msg->data);
                free(op->msg);
                done = 1;
            }
        } else if (op->kind == OP_AR) {
            for (ar_t **pa = &g->ars; *pa != NULL; pa = &(*pa)->next) {
                ar_t *a = *pa;
                if (a->seq == op->seq && a->count == g->nranks) {
                    memcpy(op->buf, a->min, op->bytes);
                    if (++a->consumed == g->nranks) {
                        *pa = a->next;
                        free(a);
                    }
                    done = 1;
                    break;
                }
            }
        }
        if (!done)
            c->pending[keep++] = *op;
    }
    c->npending = keep;
    if (c->state == ncclInProgress && c->npending == 0)
        c->state = ncclSuccess;
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

/* Join the group of @p id as @p rank of @p nranks (created by the first to join). */
static ncclResult_t join(ncclComm_t *comm, int nranks, const char *id, int rank)
{
    ncclComm_t c = calloc(1, sizeof *c);
    if (c == NULL)
        return ncclSystemError;
    pthread_mutex_lock(&mu);
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
    pthread_mutex_unlock(&mu);
    *comm = c;
    return ncclInProgress;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    if (nranks < 1 || nranks > FAKE_MAX_RANKS || rank < 0 || rank >= nranks || config == NULL ||
        config->blocking != 0)
        return ncclInvalidArgument; /* the transport always asks for nonblocking */
    return join(comm, nranks, id.internal, rank);
}

/* Revoke: pending operations are dropped at once (quiescent), later ones fail. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags)
{
    if (comm == NULL || flags != NCCL_REVOKE_DEFAULT)
        return ncclInvalidArgument;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < comm->npending; i++) {
        op_t *op = &comm->pending[i];
        if (op->kind == OP_SEND && op->msg->consumed) { /* unlinked: free it */
            free(op->msg->data);
            free(op->msg);
        } /* an unconsumed message stays in the group's mail */
    }
    comm->npending = 0;
    comm->revoked = 1;
    comm->state = ncclSuccess;
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

/* Shrink: the survivors join a new group named by the parent's id and the excluded
 * ranks; ranks keep their order. Only NCCL_SHRINK_ABORT is modelled (the transport
 * always passes it). */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excl, int nexcl, ncclComm_t *newcomm,
                            ncclConfig_t *config, int flags)
{
    if (comm == NULL || newcomm == NULL || nexcl < 0 || (nexcl > 0 && excl == NULL) ||
        config == NULL || config->blocking != 0 || flags != NCCL_SHRINK_ABORT)
        return ncclInvalidArgument;
    char id[NCCL_UNIQUE_ID_BYTES];
    memset(id, 0, sizeof id);
    size_t n = (size_t)snprintf(id, sizeof id, "%.64s/shrink", comm->g->id);
    int below = 0;
    for (int i = 0; i < nexcl; i++) {
        if (excl[i] == comm->rank || excl[i] < 0 || excl[i] >= comm->g->nranks)
            return ncclInvalidArgument;
        below += excl[i] < comm->rank;
        if (n < sizeof id)
            n += (size_t)snprintf(id + n, sizeof id - n, ",%d", excl[i]);
    }
    pthread_mutex_lock(&mu);
    comm->npending = 0; /* NCCL_SHRINK_ABORT: ongoing parent operations end */
    comm->revoked = 1;
    pthread_mutex_unlock(&mu);
    return join(newcomm, comm->g->nranks - nexcl, id, comm->rank - below);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state)
{
    pthread_mutex_lock(&mu);
    if (!comm->initialized && comm->g->joined == comm->g->nranks) {
        comm->initialized = 1;
        if (comm->state == ncclInProgress && comm->npending == 0)
            comm->state = ncclSuccess;
    }
    if (comm->initialized && comm->state == ncclInProgress)
        try_complete(comm);
    *state = comm->state;
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    return comm->npending == 0 ? ncclSuccess : ncclInvalidUsage;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    free(comm);
    return ncclSuccess;
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

/* nccl.h declares these without (void); give them prototypes. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGroupStart(void)
{
    depth++;
    return ncclSuccess;
}

static ncclResult_t post(ncclComm_t comm, op_t op)
{
    if (comm == NULL || comm->state != ncclSuccess || comm->revoked)
        return comm == NULL ? ncclInvalidArgument : ncclInvalidUsage;
    if (op.kind != OP_AR && (op.peer < 0 || op.peer >= comm->g->nranks))
        return ncclInvalidArgument;
    if (nposted == (int)(sizeof posted / sizeof posted[0]))
        return ncclInvalidUsage;
    const int alone = depth == 0;
    if (alone)
        ncclGroupStart();
    posted[nposted].comm = comm;
    posted[nposted].op = op;
    nposted++;
    return alone ? ncclGroupEnd() : ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (depth == 0)
        return ncclInvalidUsage;
    if (--depth > 0)
        return ncclSuccess;
    ncclResult_t ret = ncclSuccess;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nposted; i++) {
        ncclComm_t c = posted[i].comm;
        op_t op = posted[i].op;
        if (op.kind == OP_SEND) {
            msg_t *m = calloc(1, sizeof *m);
            m->src = c->rank;
            m->dst = op.peer;
            m->seq = c->g->sendseq[c->rank][op.peer]++;
            m->bytes = op.bytes;
            m->data = malloc(op.bytes ? op.bytes : 1);
            memcpy(m->data, op.sbuf, op.bytes);
            m->next = c->g->mail;
            c->g->mail = m;
            op.msg = m; /* rendezvous: the send completes when it is received */
            c->pending[c->npending++] = op;
        } else if (op.kind == OP_RECV) {
            op.seq = c->recvseq[op.peer]++;
            c->pending[c->npending++] = op;
        } else { /* OP_AR: contribute now */
            op.seq = c->arseq++;
            ar_t *a = c->g->ars;
            while (a != NULL && a->seq != op.seq)
                a = a->next;
            if (a == NULL) {
                a = calloc(1, sizeof *a);
                a->seq = op.seq;
                for (int k = 0; k < FAKE_AR_MAX; k++)
                    a->min[k] = INT64_MAX;
                a->next = c->g->ars;
                c->g->ars = a;
            }
            for (size_t k = 0; k < op.bytes / sizeof(int64_t); k++) {
                int64_t v;
                memcpy(&v, (const char *)op.sbuf + k * sizeof v, sizeof v);
                if (v < a->min[k])
                    a->min[k] = v;
            }
            a->count++;
            c->pending[c->npending++] = op;
        }
    }
    for (int i = 0; i < nposted; i++) {
        ncclComm_t c = posted[i].comm;
        if (c->npending > 0 && c->state == ncclSuccess) {
            c->state = ncclInProgress;
            try_complete(c);
        }
        if (c->state == ncclInProgress)
            ret = ncclInProgress;
    }
    nposted = 0;
    pthread_mutex_unlock(&mu);
    return ret;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    (void)stream;
    if (type != ncclUint8 && type != ncclInt8)
        return ncclInvalidArgument;
    op_t op = {OP_SEND, NULL, buf, count, peer, 0, NULL};
    return post(comm, op);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    (void)stream;
    if (type != ncclUint8 && type != ncclInt8)
        return ncclInvalidArgument;
    op_t op = {OP_RECV, buf, NULL, count, peer, 0, NULL};
    return post(comm, op);
}

ncclResult_t ncclAllReduce(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t type,
                           ncclRedOp_t red, ncclComm_t comm, cudaStream_t stream)
{
    (void)stream;
    if (count < 1 || count > FAKE_AR_MAX || type != ncclInt64 || red != ncclMin)
        return ncclInvalidArgument;
    op_t op = {OP_AR, recvbuf, sendbuf, count * sizeof(int64_t), -1, 0, NULL};
    return post(comm, op);
}
