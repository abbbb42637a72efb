/*
 * The NCCL transport: rounds of ncclSend/ncclRecv inside ncclGroupStart/End, strided
 * pack/unpack/local copies as CUDA kernels, all on one CUDA stream per endpoint.
 *
 * Ordering. Every operation of an endpoint (pack kernels, the NCCL kernels of a round,
 * unpack kernels, local copies, the outcome all-reduce) is enqueued on the endpoint's one
 * stream, so stream order alone makes each step see the previous one's bytes: a send
 * reads staging only after the pack kernels enqueued before its group, an unpack reads a
 * receive buffer only after the round's NCCL kernel, and a staging slot is rewritten only
 * after everything earlier on the stream finished with it. round_wait is therefore needed
 * only to bound the CPU's run-ahead and to notice failures, not for correctness.
 *
 * Bounded waits. The communicator this file creates is nonblocking: a call may return
 * ncclInProgress, and settle() then polls ncclCommGetAsyncError until the operation is
 * enqueued (NCCL requires that before any other NCCL call or kernel on the stream). Every
 * wait (settle, round_wait, finish, destroy) polls with a deadline and also watches
 * ncclCommGetAsyncError; on an error or at the deadline the communicator is aborted
 * (ncclCommAbort) and the operation returns TRANSPORT or TIMEOUT. Later operations fail
 * fast with the reason.
 */
#include "reshard/reshard_nccl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nccl.h>

#include "exec/delta_dev_ops.h"
#include "transport/nccl/nccl_internal.h"
#include "util/error.h"
#include "util/quant_types.h"
#include "util/timeout.h"

/** Staging blocks an endpoint remembers (in use or cached for the next execution). */
#define RS_NCCL_BLOCKS 8

typedef struct {
    void *p;
    uint64_t bytes;
    bool in_use;
} rs_nccl_block_t;

/* Bytes of the outcome all-reduce: the status and the agreement words. */
#define RS_NCCL_AGREE_BYTES ((1 + RESHARD_AGREE_WORDS) * sizeof(int64_t))

typedef struct {
    ncclComm_t nccl; /**< NULL once aborted or destroyed */
    /** A communicator revoked by a failure (NCCL >= 2.28: ncclCommRevoke instead of
     *  ncclCommAbort), kept so that the survivors can shrink it
     *  (reshard_comm_shrink_nccl); aborted by reshard_comm_destroy. */
    ncclComm_t revoked;
    cudaStream_t stream;
    int device;
    bool own_comm, own_stream;
    bool aborted;
    bool group_open;
    int open_slot;
    bool pending[2];     /**< round_end recorded done[slot], round_wait not yet seen it */
    cudaEvent_t done[2]; /**< end of each slot's last round on the stream */
    cudaEvent_t fin;     /**< end of the outcome agreement / drain */
    int64_t *d_status;   /**< device words of the outcome all-reduce: status, then
                              RESHARD_AGREE_WORDS words */
    int64_t *h_status;   /**< pinned host copy */
    double timeout_s;    /**< bound for waits; the plan's timeout once known */
    /** Where ncclCommShrink/ncclCommSplit write the new communicator: NCCL fills it from a
     *  background job, after the call returned, so it lives as long as the endpoint. */
    ncclComm_t child;
    rs_nccl_block_t blocks[RS_NCCL_BLOCKS];
    void *dk_scratch; /**< the delta kernels' scratch (device), grown on demand */
    uint64_t dk_scratch_bytes;
    char why[512]; /**< reason of the abort */
} rs_nccl_t;

static rs_nccl_t *impl_of(reshard_comm_t *c)
{
    return (rs_nccl_t *)c->impl;
}

/* Spin for the first millisecond of a wait (short rounds), then sleep 50 us per poll. */
static void pause_after(double waited_s)
{
    if (waited_s < 1e-3)
        return;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

static double env_timeout(void)
{
    const char *s = getenv("RESHARD_NCCL_TIMEOUT_S");
    if (s != NULL && *s != '\0') {
        char *end = NULL;
        double v = strtod(s, &end);
        if (end != s && v > 0)
            return rs_timeout_s(v);
    }
    return RESHARD_DEFAULT_TIMEOUT_S;
}

/* Abort the communicator once (ncclCommAbort frees it); the stream stays usable. */
static void abort_comm(rs_nccl_t *t)
{
    if (t->aborted)
        return;
    t->aborted = true;
    if (t->group_open) {
        t->group_open = false;
        (void)ncclGroupEnd();
    }
    if (t->nccl != NULL) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
        const ncclResult_t r = ncclCommRevoke(t->nccl, NCCL_REVOKE_DEFAULT);
        if (r == ncclSuccess || r == ncclInProgress)
            t->revoked = t->nccl;
        else
            (void)ncclCommAbort(t->nccl);
#else
        (void)ncclCommAbort(t->nccl);
#endif
        t->nccl = NULL;
    }
    t->pending[0] = t->pending[1] = false;
}

/* Record a failure: format the reason (before the abort frees anything it names), abort,
 * set the last error. */
static reshard_status_t fail(reshard_comm_t *c, reshard_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static reshard_status_t fail(reshard_comm_t *c, reshard_status_t st, const char *fmt, ...)
{
    rs_nccl_t *t = impl_of(c);
    char msg[sizeof t->why];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    abort_comm(t);
    memcpy(t->why, msg, sizeof msg);
    return rs_error(st, "NCCL transport, rank %d: %s; communicator aborted", (int)c->rank, msg);
}

static reshard_status_t fail_nccl(reshard_comm_t *c, const char *what, ncclResult_t r)
{
    rs_nccl_t *t = impl_of(c);
    const char *last = t->nccl != NULL ? ncclGetLastError(t->nccl) : NULL;
    const bool has_last = last != NULL && *last != '\0';
    return fail(c, RESHARD_ERR_TRANSPORT, "%s failed: %s%s%s", what, ncclGetErrorString(r),
                has_last ? ": " : "", has_last ? last : "");
}

static reshard_status_t fail_cuda(reshard_comm_t *c, const char *what, cudaError_t e)
{
    (void)cudaGetLastError(); /* clear it unless sticky */
    return fail(c, RESHARD_ERR_TRANSPORT, "%s failed: %s (%s)", what, cudaGetErrorName(e),
                cudaGetErrorString(e));
}

/* Complete an NCCL call; ncclInProgress is polled until enqueued, at most timeout_s. */
static reshard_status_t settle(reshard_comm_t *c, ncclResult_t r, const char *what)
{
    rs_nccl_t *t = impl_of(c);
    if (r == ncclSuccess)
        return RESHARD_OK;
    if (r != ncclInProgress)
        return fail_nccl(c, what, r);
    const double t0 = rs_now_s();
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t q = ncclCommGetAsyncError(t->nccl, &state);
        if (q != ncclSuccess)
            return fail_nccl(c, what, q);
        if (state == ncclSuccess)
            return RESHARD_OK;
        if (state != ncclInProgress)
            return fail_nccl(c, what, state);
        const double waited = rs_now_s() - t0;
        if (waited > t->timeout_s)
            return fail(c, RESHARD_ERR_TIMEOUT,
                        "%s not complete after %.1f s (a peer is dead or stalled)", what,
                        t->timeout_s);
        pause_after(waited);
    }
}

/* Wait for event @p ev, watching NCCL's asynchronous error, at most @p timeout_s. */
static reshard_status_t wait_event(reshard_comm_t *c, cudaEvent_t ev, double timeout_s,
                                   const char *what)
{
    rs_nccl_t *t = impl_of(c);
    const double t0 = rs_now_s();
    for (;;) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return RESHARD_OK;
        if (e != cudaErrorNotReady)
            return fail_cuda(c, what, e);
        if (t->nccl != NULL) {
            ncclResult_t state = ncclSuccess;
            ncclResult_t q = ncclCommGetAsyncError(t->nccl, &state);
            if (q != ncclSuccess)
                return fail_nccl(c, what, q);
            if (state != ncclSuccess && state != ncclInProgress)
                return fail_nccl(c, what, state);
        }
        const double waited = rs_now_s() - t0;
        if (waited > timeout_s)
            return fail(c, RESHARD_ERR_TIMEOUT,
                        "%s not complete after %.1f s (a peer is dead or stalled)", what,
                        timeout_s);
        pause_after(waited);
    }
}

/* Fail fast after an abort; make the endpoint's device current. */
static reshard_status_t usable(reshard_comm_t *c, const char *what)
{
    rs_nccl_t *t = impl_of(c);
    if (t->aborted)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "NCCL transport, rank %d: %s after the communicator was aborted (%s)",
                        (int)c->rank, what, t->why);
    const cudaError_t e = cudaSetDevice(t->device);
    if (e != cudaSuccess)
        return fail_cuda(c, "cudaSetDevice", e);
    return RESHARD_OK;
}

static reshard_status_t check_slot(reshard_comm_t *c, int slot, bool in_round, const char *what)
{
    rs_nccl_t *t = impl_of(c);
    if (slot != 0 && slot != 1)
        return rs_error(RESHARD_ERR_INVALID_ARG, "NCCL transport: %s: slot %d", what, slot);
    if (in_round && (!t->group_open || t->open_slot != slot))
        return rs_error(RESHARD_ERR_INVALID_ARG, "NCCL transport: %s(slot %d) outside its round",
                        what, slot);
    return RESHARD_OK;
}

/* ---- staging ------------------------------------------------------------------------- */

static reshard_status_t nccl_alloc_staging(reshard_comm_t *c, uint64_t bytes, void **out)
{
    rs_nccl_t *t = impl_of(c);
    *out = NULL;
    reshard_status_t st = usable(c, "alloc_staging");
    if (st != RESHARD_OK || bytes == 0)
        return st;
    /* Reuse the smallest cached block that fits (kept from an earlier execution). */
    int best = -1;
    for (int i = 0; i < RS_NCCL_BLOCKS; i++)
        if (t->blocks[i].p != NULL && !t->blocks[i].in_use && t->blocks[i].bytes >= bytes &&
            (best < 0 || t->blocks[i].bytes < t->blocks[best].bytes))
            best = i;
    if (best >= 0) {
        t->blocks[best].in_use = true;
        *out = t->blocks[best].p;
        return RESHARD_OK;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)bytes);
    if (e == cudaErrorMemoryAllocation) { /* drop the cache and retry once */
        (void)cudaGetLastError();
        for (int i = 0; i < RS_NCCL_BLOCKS; i++)
            if (t->blocks[i].p != NULL && !t->blocks[i].in_use) {
                cudaFree(t->blocks[i].p);
                t->blocks[i].p = NULL;
            }
        e = cudaMalloc(&p, (size_t)bytes);
    }
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_NOMEM,
                        "NCCL transport, rank %d: cudaMalloc of %" PRIu64
                        " staging bytes on device %d failed",
                        (int)c->rank, bytes, t->device);
    }
    if (e != cudaSuccess)
        return fail_cuda(c, "cudaMalloc (staging)", e);
    /* Remember it: an empty entry, else evict a cached one; untracked if all are busy. */
    int slot = -1;
    for (int i = 0; i < RS_NCCL_BLOCKS && slot < 0; i++)
        if (t->blocks[i].p == NULL)
            slot = i;
    for (int i = 0; i < RS_NCCL_BLOCKS && slot < 0; i++)
        if (!t->blocks[i].in_use) {
            cudaFree(t->blocks[i].p);
            slot = i;
        }
    if (slot >= 0) {
        t->blocks[slot].p = p;
        t->blocks[slot].bytes = bytes;
        t->blocks[slot].in_use = true;
    }
    *out = p;
    return RESHARD_OK;
}

static void nccl_free_staging(reshard_comm_t *c, void *p)
{
    rs_nccl_t *t = impl_of(c);
    if (p == NULL)
        return;
    for (int i = 0; i < RS_NCCL_BLOCKS; i++)
        if (t->blocks[i].p == p) {
            t->blocks[i].in_use = false; /* cached for the next execution */
            return;
        }
    cudaSetDevice(t->device);
    cudaFree(p);
}

/* ---- rounds -------------------------------------------------------------------------- */

static reshard_status_t nccl_round_begin(reshard_comm_t *c, int slot)
{
    rs_nccl_t *t = impl_of(c);
    reshard_status_t st = check_slot(c, slot, false, "round_begin");
    if (st == RESHARD_OK)
        st = usable(c, "round_begin");
    if (st != RESHARD_OK)
        return st;
    if (t->group_open)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "NCCL transport: round_begin(%d) while slot %d's round is open", slot,
                        t->open_slot);
    st = settle(c, ncclGroupStart(), "ncclGroupStart");
    if (st != RESHARD_OK)
        return st;
    t->group_open = true;
    t->open_slot = slot;
    return RESHARD_OK;
}

static reshard_status_t check_peer(reshard_comm_t *c, int32_t peer, const char *what)
{
    if (peer < 0 || peer >= c->size)
        return rs_error(RESHARD_ERR_RANK, "NCCL transport: %s to/from rank %d of %d", what,
                        (int)peer, (int)c->size);
    return RESHARD_OK;
}

static reshard_status_t nccl_post_send(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                       uint64_t bytes)
{
    rs_nccl_t *t = impl_of(c);
    reshard_status_t st = check_slot(c, slot, true, "post_send");
    if (st == RESHARD_OK)
        st = check_peer(c, peer, "post_send");
    if (st == RESHARD_OK)
        st = usable(c, "post_send");
    if (st != RESHARD_OK)
        return st;
    return settle(c, ncclSend(buf, (size_t)bytes, ncclUint8, (int)peer, t->nccl, t->stream),
                  "ncclSend");
}

static reshard_status_t nccl_post_recv(reshard_comm_t *c, int slot, int32_t peer, void *buf,
                                       uint64_t bytes)
{
    rs_nccl_t *t = impl_of(c);
    reshard_status_t st = check_slot(c, slot, true, "post_recv");
    if (st == RESHARD_OK)
        st = check_peer(c, peer, "post_recv");
    if (st == RESHARD_OK)
        st = usable(c, "post_recv");
    if (st != RESHARD_OK)
        return st;
    return settle(c, ncclRecv(buf, (size_t)bytes, ncclUint8, (int)peer, t->nccl, t->stream),
                  "ncclRecv");
}

static reshard_status_t nccl_round_end(reshard_comm_t *c, int slot)
{
    rs_nccl_t *t = impl_of(c);
    reshard_status_t st = check_slot(c, slot, true, "round_end");
    if (st == RESHARD_OK)
        st = usable(c, "round_end");
    if (st != RESHARD_OK)
        return st;
    t->group_open = false;
    st = settle(c, ncclGroupEnd(), "ncclGroupEnd (launch of a round)");
    if (st != RESHARD_OK)
        return st;
    const cudaError_t e = cudaEventRecord(t->done[slot], t->stream);
    if (e != cudaSuccess)
        return fail_cuda(c, "cudaEventRecord", e);
    t->pending[slot] = true;
    return RESHARD_OK;
}

static reshard_status_t nccl_round_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    rs_nccl_t *t = impl_of(c);
    reshard_status_t st = check_slot(c, slot, false, "round_wait");
    if (st == RESHARD_OK)
        st = usable(c, "round_wait");
    if (st != RESHARD_OK)
        return st;
    if (timeout_s > 0)
        t->timeout_s = rs_timeout_s(timeout_s);
    if (!t->pending[slot])
        return RESHARD_OK;
    st = wait_event(c, t->done[slot], t->timeout_s, "a round's transfers");
    if (st == RESHARD_OK)
        t->pending[slot] = false;
    return st;
}

/* ---- copies -------------------------------------------------------------------------- */

/* A kernel launch failed with @p e. A launch error the stream survives (cudaErrorLaunch-
 * OutOfResources, a bad configuration: the stream still answers cudaStreamQuery) is this
 * rank's own: the communicator stays usable, so the executor can post the rest of the round
 * and every rank learns the error at the outcome agreement. Anything else (a sticky error:
 * the context is lost) aborts the communicator. */
static reshard_status_t launch_failed(reshard_comm_t *c, const char *what, cudaError_t e)
{
    rs_nccl_t *t = impl_of(c);
    (void)cudaGetLastError();
    const cudaError_t q = cudaStreamQuery(t->stream);
    if (q != cudaSuccess && q != cudaErrorNotReady)
        return fail_cuda(c, what, e);
    return rs_error(RESHARD_ERR_TRANSPORT,
                    "NCCL transport, rank %d: %s failed: %s (%s); the device is usable: this "
                    "refit fails on every rank, and a new comm recovers (this one refuses "
                    "further executions)",
                    (int)c->rank, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static reshard_status_t launch(reshard_comm_t *c, const rs_box_copy_t *d, void *dst,
                               const void *src, const char *what)
{
    rs_nccl_t *t = impl_of(c);
    (void)cudaGetLastError(); /* a stale non-sticky error must not be blamed on this launch */
    const cudaError_t e = rs_box_copy_launch(d, dst, src, t->stream);
    if (e != cudaSuccess)
        return launch_failed(c, what, e);
    return RESHARD_OK;
}

static reshard_status_t nccl_pack(reshard_comm_t *c, void *out, const void *buf,
                                  const reshard_span_t *span)
{
    rs_box_copy_t d;
    reshard_status_t st = usable(c, "pack");
    if (st == RESHARD_OK)
        st = rs_box_copy_for_pack(&d, span, out, buf);
    if (st != RESHARD_OK)
        return st;
    return launch(c, &d, out, buf, "pack kernel launch");
}

static reshard_status_t nccl_unpack(reshard_comm_t *c, void *buf, const void *in,
                                    const reshard_span_t *span)
{
    rs_box_copy_t d;
    reshard_status_t st = usable(c, "unpack");
    if (st == RESHARD_OK)
        st = rs_box_copy_for_unpack(&d, span, buf, in);
    if (st != RESHARD_OK)
        return st;
    return launch(c, &d, buf, in, "unpack kernel launch");
}

static reshard_status_t nccl_local_copy(reshard_comm_t *c, void *dst,
                                        const reshard_fragment_t *dst_frag, const void *src,
                                        const reshard_fragment_t *src_frag,
                                        const reshard_box_t *box, uint32_t elem_size)
{
    rs_box_copy_t d;
    reshard_status_t st = usable(c, "local_copy");
    if (st == RESHARD_OK)
        st = rs_box_copy_for_local(&d, dst, dst_frag, src, src_frag, box, elem_size);
    if (st != RESHARD_OK)
        return st;
    return launch(c, &d, dst, src, "local copy kernel launch");
}

static reshard_status_t nccl_quantize(reshard_comm_t *c, const struct reshard_quant_rule *q,
                                      void *dst, const reshard_fragment_t *dst_frag, void *scale,
                                      const reshard_fragment_t *scale_frag, const void *src,
                                      const reshard_fragment_t *src_frag, const reshard_box_t *box)
{
    rs_quant_job_t j;
    reshard_status_t st = usable(c, "quantize");
    if (st == RESHARD_OK)
        st = rs_nccl_quant_job(&j, q, dst, dst_frag, scale, scale_frag, src, src_frag, box);
    if (st != RESHARD_OK)
        return st;
    rs_nccl_t *t = impl_of(c);
    (void)cudaGetLastError(); /* a stale non-sticky error must not be blamed on this launch */
    const cudaError_t e = rs_quant_launch(&j, dst, scale, src, t->stream);
    if (e != cudaSuccess)
        return launch_failed(c, "quantize kernel launch", e);
    return RESHARD_OK;
}

cudaStream_t rs_nccl_stream(reshard_comm_t *c)
{
    return impl_of(c)->stream;
}

reshard_status_t rs_nccl_delta_scratch(reshard_comm_t *c, uint64_t bytes, void **out)
{
    rs_nccl_t *t = impl_of(c);
    if (bytes > t->dk_scratch_bytes) {
        if (t->dk_scratch != NULL)
            cudaFree(t->dk_scratch); /* synchronises: nothing uses it any more */
        t->dk_scratch = NULL;
        t->dk_scratch_bytes = 0;
        const cudaError_t e = cudaMalloc(&t->dk_scratch, (size_t)bytes);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            t->dk_scratch = NULL;
            return rs_error(RESHARD_ERR_NOMEM,
                            "NCCL transport, rank %d: cudaMalloc of %llu bytes of delta scratch "
                            "failed: %s",
                            (int)c->rank, (unsigned long long)bytes, cudaGetErrorString(e));
        }
        t->dk_scratch_bytes = bytes;
    }
    *out = t->dk_scratch;
    return RESHARD_OK;
}

reshard_status_t rs_nccl_usable(reshard_comm_t *c, const char *what)
{
    return usable(c, what);
}

reshard_status_t rs_nccl_launch_failed(reshard_comm_t *c, const char *what, cudaError_t e)
{
    return launch_failed(c, what, e);
}

/* ---- the outcome --------------------------------------------------------------------- */

/* Every rank all-reduces (min) its status and the agreement words on the stream, after all
 * its other work, and waits for the result: OK only when every rank is OK. */
static reshard_status_t agree(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                              int32_t *all, int64_t *min_words)
{
    rs_nccl_t *t = impl_of(c);
    reshard_status_t st = usable(c, "finish");
    if (st != RESHARD_OK)
        return st;
    if (t->group_open) { /* the executor stopped inside a round: launch what was posted */
        t->group_open = false;
        st = settle(c, ncclGroupEnd(), "ncclGroupEnd (round left open)");
        if (st != RESHARD_OK)
            return st;
    }
    t->h_status[0] = (int64_t)local;
    for (int i = 0; i < RESHARD_AGREE_WORDS; i++)
        t->h_status[1 + i] = words ? words[i] : INT64_MAX;
    cudaError_t e = cudaMemcpyAsync(t->d_status, t->h_status, RS_NCCL_AGREE_BYTES,
                                    cudaMemcpyHostToDevice, t->stream);
    if (e != cudaSuccess)
        return fail_cuda(c, "cudaMemcpyAsync (status)", e);
    st = settle(c,
                ncclAllReduce(t->d_status, t->d_status, 1 + RESHARD_AGREE_WORDS, ncclInt64, ncclMin,
                              t->nccl, t->stream),
                "ncclAllReduce (outcome of the refit)");
    if (st != RESHARD_OK)
        return st;
    e = cudaMemcpyAsync(t->h_status, t->d_status, RS_NCCL_AGREE_BYTES, cudaMemcpyDeviceToHost,
                        t->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(t->fin, t->stream);
    if (e != cudaSuccess)
        return fail_cuda(c, "cudaMemcpyAsync (status)", e);
    st = wait_event(c, t->fin, t->timeout_s, "the end-of-refit agreement");
    if (st != RESHARD_OK)
        return st;
    t->pending[0] = t->pending[1] = false; /* the stream is drained */
    *all = (int32_t)t->h_status[0];
    if (min_words)
        memcpy(min_words, t->h_status + 1, RESHARD_AGREE_WORDS * sizeof *min_words);
    return RESHARD_OK;
}

static reshard_status_t nccl_finish(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                                    int64_t *min_words, double timeout_s)
{
    rs_nccl_t *t = impl_of(c);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", reshard_last_error());
    if (timeout_s > 0)
        t->timeout_s = rs_timeout_s(timeout_s);
    int32_t all = RESHARD_OK;
    const reshard_status_t st = agree(c, local, words, &all, min_words);
    if (local != RESHARD_OK) /* keep this rank's own reason */
        return rs_error(local, "%s", saved);
    if (st != RESHARD_OK)
        return st;
    if (all != RESHARD_OK)
        return rs_error((reshard_status_t)all,
                        "NCCL transport, rank %d: another rank ended the refit with %s",
                        (int)c->rank, reshard_status_string((reshard_status_t)all));
    return RESHARD_OK;
}

/* ---- lifetime ------------------------------------------------------------------------ */

static void nccl_destroy(reshard_comm_t *c)
{
    rs_nccl_t *t = impl_of(c);
    if (t == NULL)
        return;
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", reshard_last_error());
    cudaSetDevice(t->device);
    if (t->nccl != NULL && !t->aborted) {
        if (t->group_open) {
            abort_comm(t);
        } else if (t->own_comm) {
            /* Drain the stream (bounded), then finalize + destroy; abort on any trouble. */
            bool ok = cudaEventRecord(t->fin, t->stream) == cudaSuccess &&
                      wait_event(c, t->fin, t->timeout_s, "draining the stream") == RESHARD_OK;
            ok = ok && settle(c, ncclCommFinalize(t->nccl), "ncclCommFinalize") == RESHARD_OK;
            if (ok) {
                (void)ncclCommDestroy(t->nccl);
                t->nccl = NULL;
            } else {
                abort_comm(t);
            }
        }
    }
    if (t->revoked != NULL) {
        (void)ncclCommAbort(t->revoked);
        t->revoked = NULL;
    }
    for (int i = 0; i < RS_NCCL_BLOCKS; i++)
        if (t->blocks[i].p != NULL)
            cudaFree(t->blocks[i].p); /* synchronises the device */
    if (t->d_status != NULL)
        cudaFree(t->d_status);
    if (t->dk_scratch != NULL)
        cudaFree(t->dk_scratch);
    if (t->h_status != NULL)
        cudaFreeHost(t->h_status);
    for (int i = 0; i < 2; i++)
        if (t->done[i] != NULL)
            cudaEventDestroy(t->done[i]);
    if (t->fin != NULL)
        cudaEventDestroy(t->fin);
    if (t->own_stream && t->stream != NULL)
        cudaStreamDestroy(t->stream);
    (void)cudaGetLastError();
    free(t);
    c->impl = NULL;
    rs_error(RESHARD_OK, "%s", saved);
}

const reshard_transport_ops_t rs_nccl_ops = {
    .version = RESHARD_TRANSPORT_VERSION,
    .name = "nccl",
    .device_memory = true,
    .alloc_staging = nccl_alloc_staging,
    .free_staging = nccl_free_staging,
    .round_begin = nccl_round_begin,
    .post_send = nccl_post_send,
    .post_recv = nccl_post_recv,
    .round_end = nccl_round_end,
    .round_wait = nccl_round_wait,
    .pack = nccl_pack,
    .unpack = nccl_unpack,
    .local_copy = nccl_local_copy,
    .quantize = nccl_quantize,
    .finish = nccl_finish,
    .destroy = nccl_destroy,
};

/* ---- public entry points ------------------------------------------------------------- */

reshard_status_t reshard_nccl_device_count(int *count)
{
    rs_error_clear();
    if (count == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_nccl_device_count: count is NULL");
    *count = 0;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "--transport nccl needs a CUDA device, and this process has none: "
                        "cudaGetDeviceCount: %s (%s)",
                        cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (n < 1)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "--transport nccl needs a CUDA device, and this process sees none "
                        "(check CUDA_VISIBLE_DEVICES)");
    *count = n;
    return RESHARD_OK;
}

size_t reshard_nccl_unique_id_size(void)
{
    return sizeof(ncclUniqueId);
}

reshard_status_t reshard_nccl_get_unique_id(void *id)
{
    rs_error_clear();
    if (id == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_nccl_get_unique_id: id is NULL");
    ncclUniqueId uid;
    const ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess)
        return rs_error(RESHARD_ERR_TRANSPORT, "ncclGetUniqueId failed: %s: %s",
                        ncclGetErrorString(r), ncclGetLastError(NULL));
    memcpy(id, &uid, sizeof uid);
    return RESHARD_OK;
}

/* Wrap communicator @p nccl (rank @p rank of @p size on @p device) into an endpoint. On
 * failure nothing is kept and the communicator is left to the caller. */
static reshard_status_t make_endpoint(ncclComm_t nccl, bool own_comm, int device, int rank,
                                      int size, cudaStream_t stream, reshard_comm_t **out)
{
    reshard_comm_t *c = calloc(1, sizeof *c);
    rs_nccl_t *t = calloc(1, sizeof *t);
    if (c == NULL || t == NULL) {
        free(c);
        free(t);
        return rs_error(RESHARD_ERR_NOMEM, "NCCL transport: out of memory");
    }
    c->ops = &rs_nccl_ops;
    c->delta_dev = &rs_nccl_delta_ops;
    c->rank = rank;
    c->size = size;
    c->impl = t;
    t->device = device;
    t->timeout_s = env_timeout();
    const char *what = "cudaSetDevice";
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess && stream == NULL) {
        what = "cudaStreamCreateWithFlags";
        e = cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking);
        t->own_stream = e == cudaSuccess;
    } else {
        t->stream = stream;
    }
    for (int i = 0; i < 2 && e == cudaSuccess; i++) {
        what = "cudaEventCreateWithFlags";
        e = cudaEventCreateWithFlags(&t->done[i], cudaEventDisableTiming);
    }
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&t->fin, cudaEventDisableTiming);
    if (e == cudaSuccess) {
        what = "cudaMalloc (status)";
        e = cudaMalloc((void **)&t->d_status, RS_NCCL_AGREE_BYTES);
    }
    if (e == cudaSuccess) {
        what = "cudaMallocHost (status)";
        e = cudaMallocHost((void **)&t->h_status, RS_NCCL_AGREE_BYTES);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        char msg[256];
        snprintf(msg, sizeof msg, "NCCL transport, rank %d: %s on device %d failed: %s (%s)", rank,
                 what, device, cudaGetErrorName(e), cudaGetErrorString(e));
        nccl_destroy(c); /* t->nccl is still NULL: the communicator is not touched */
        free(c);
        return rs_error(e == cudaErrorMemoryAllocation ? RESHARD_ERR_NOMEM : RESHARD_ERR_TRANSPORT,
                        "%s", msg);
    }
    t->nccl = nccl;
    t->own_comm = own_comm;
    *out = c;
    return RESHARD_OK;
}

reshard_status_t rs_nccl_make_endpoint(struct ncclComm *nccl, bool own_comm, int device, int rank,
                                       int size, cudaStream_t stream, reshard_comm_t **out)
{
    return make_endpoint(nccl, own_comm, device, rank, size, stream, out);
}

struct ncclComm *rs_nccl_parent(reshard_comm_t *c, int *device, cudaStream_t *stream)
{
    if (c == NULL || c->ops != &rs_nccl_ops || c->impl == NULL)
        return NULL;
    rs_nccl_t *t = impl_of(c);
    *device = t->device;
    *stream = t->own_stream ? NULL : t->stream;
    return t->nccl != NULL ? t->nccl : t->revoked;
}

double rs_nccl_env_timeout(void)
{
    return env_timeout();
}

/* Poll @p comm's state (ncclCommGetAsyncError) until it is not ncclInProgress, at most
 * @p timeout_s from @p t0: that state in *res and true, or false at the deadline. */
static bool wait_state(ncclComm_t comm, double t0, double timeout_s, ncclResult_t *res)
{
    for (;;) {
        ncclResult_t state = ncclInProgress;
        const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
        *res = q != ncclSuccess ? q : state;
        if (*res != ncclInProgress)
            return true;
        const double waited = rs_now_s() - t0;
        if (waited > timeout_s)
            return false;
        pause_after(waited);
    }
}

reshard_status_t rs_nccl_child(reshard_comm_t *c, int *excl, int nex, struct ncclComm **out)
{
    *out = NULL;
    rs_nccl_t *t = impl_of(c);
    ncclComm_t parent = t->nccl != NULL ? t->nccl : t->revoked;
    const bool revoked = t->nccl == NULL;
    const char *what = nex > 0 ? "ncclCommShrink" : "ncclCommSplit";
    const double timeout = env_timeout(), t0 = rs_now_s();
    cudaSetDevice(t->device);
    /* A revoke is asynchronous: the parent is usable for a shrink only once quiescent. */
    ncclResult_t r = ncclSuccess;
    if (!wait_state(parent, t0, timeout, &r))
        return rs_error(RESHARD_ERR_TIMEOUT,
                        "rank %d: the %s communicator did not become quiescent in %.0f s "
                        "(RESHARD_NCCL_TIMEOUT_S sets the bound)",
                        (int)c->rank, revoked ? "revoked" : "live", timeout);
    if (r != ncclSuccess)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: %s: the parent communicator reports %s: %s", (int)c->rank, what,
                        ncclGetErrorString(r), ncclGetLastError(parent));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    t->child = NULL;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    /* ncclCommShrink refuses an empty exclude list: with nobody gone, a split (color 0, key =
     * rank) makes the new communicator of the same members. */
    r = nex > 0 ? ncclCommShrink(parent, excl, nex, &t->child, &cfg, NCCL_SHRINK_ABORT)
                : ncclCommSplit(parent, 0, (int)c->rank, &t->child, &cfg);
#else
    (void)excl;
    r = ncclCommSplit(parent, 0, (int)c->rank, &t->child, &cfg);
#endif
    /* nonblocking: NCCL fills t->child when its job ends and then settles the parent */
    if (r == ncclInProgress && !wait_state(parent, t0, timeout, &r)) {
        /* ncclCommAbort waits for NCCL's job; t->child stays valid storage meanwhile */
        (void)ncclCommAbort(parent);
        if (revoked)
            t->revoked = NULL;
        else {
            t->nccl = NULL;
            t->aborted = true;
            snprintf(t->why, sizeof t->why, "%s timed out", what);
        }
        if (t->child != NULL)
            (void)ncclCommAbort(t->child);
        t->child = NULL;
        return rs_error(RESHARD_ERR_TIMEOUT,
                        "rank %d: %s not complete after %.0f s: did every survivor call "
                        "reshard_comm_shrink_nccl with the same gone set? (parent aborted)",
                        (int)c->rank, what, timeout);
    }
    ncclComm_t child = t->child;
    t->child = NULL;
    if (r != ncclSuccess || child == NULL) {
        if (child != NULL)
            (void)ncclCommAbort(child);
        return rs_error(RESHARD_ERR_TRANSPORT, "rank %d: %s failed: %s: %s", (int)c->rank, what,
                        r != ncclSuccess ? ncclGetErrorString(r) : "no communicator returned",
                        ncclGetLastError(parent));
    }
    if (!wait_state(child, t0, timeout, &r) || r != ncclSuccess) {
        (void)ncclCommAbort(child);
        return rs_error(r == ncclInProgress ? RESHARD_ERR_TIMEOUT : RESHARD_ERR_TRANSPORT,
                        "rank %d: the communicator made by %s is not ready: %s", (int)c->rank, what,
                        ncclGetErrorString(r));
    }
    *out = child;
    return RESHARD_OK;
}

reshard_status_t reshard_comm_create_nccl_from_id(const void *id, int32_t rank, int32_t nranks,
                                                  int cuda_device, struct CUstream_st *stream,
                                                  reshard_comm_t **out)
{
    rs_error_clear();
    if (out != NULL)
        *out = NULL;
    if (id == NULL || out == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_nccl_from_id: NULL %s",
                        id == NULL ? "id" : "out");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_create_nccl_from_id: rank %d of %d ranks", (int)rank,
                        (int)nranks);
    int ndev = 0;
    reshard_status_t st = reshard_nccl_device_count(&ndev);
    if (st != RESHARD_OK)
        return st;
    if (cuda_device < 0)
        cuda_device = (int)(rank % ndev);
    if (cuda_device >= ndev)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_create_nccl_from_id: CUDA device %d, but only %d visible",
                        cuda_device, ndev);
    cudaError_t e = cudaSetDevice(cuda_device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_TRANSPORT, "rank %d: cudaSetDevice(%d) failed: %s", (int)rank,
                        cuda_device, cudaGetErrorString(e));
    }

    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t nccl = NULL;
    const double timeout = env_timeout();
    const double t0 = rs_now_s();
    ncclResult_t r = ncclCommInitRankConfig(&nccl, (int)nranks, uid, (int)rank, &cfg);
    if (r == ncclInProgress && nccl != NULL) {
        if (!wait_state(nccl, t0, timeout, &r)) {
            ncclCommAbort(nccl);
            return rs_error(RESHARD_ERR_TIMEOUT,
                            "rank %d: NCCL communicator of %d ranks not created after %.0f s: did "
                            "every rank call reshard_comm_create_nccl_from_id with the same id? "
                            "(RESHARD_NCCL_TIMEOUT_S sets the bound)",
                            (int)rank, (int)nranks, timeout);
        }
    }
    if (r != ncclSuccess) {
        const char *last = ncclGetLastError(nccl);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", last != NULL ? last : "");
        if (nccl != NULL)
            ncclCommAbort(nccl);
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: ncclCommInitRankConfig (%d ranks, device %d) failed: %s: %s",
                        (int)rank, (int)nranks, cuda_device, ncclGetErrorString(r), msg);
    }
    st = make_endpoint(nccl, true, cuda_device, (int)rank, (int)nranks, stream, out);
    if (st != RESHARD_OK)
        ncclCommAbort(nccl);
    return st;
}

reshard_status_t reshard_comm_create_nccl(struct ncclComm *comm, struct CUstream_st *stream,
                                          reshard_comm_t **out)
{
    rs_error_clear();
    if (out != NULL)
        *out = NULL;
    if (comm == NULL || out == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_nccl: NULL %s",
                        comm == NULL ? "comm" : "out");
    int ndev = 0;
    reshard_status_t st = reshard_nccl_device_count(&ndev);
    if (st != RESHARD_OK)
        return st;
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r == ncclSuccess && state == ncclInProgress)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_create_nccl: the communicator is still initialising "
                        "(wait until ncclCommGetAsyncError returns ncclSuccess)");
    if (r == ncclSuccess)
        r = state;
    int n = 0, rank = 0, dev = 0;
    if (r == ncclSuccess)
        r = ncclCommCount(comm, &n);
    if (r == ncclSuccess)
        r = ncclCommUserRank(comm, &rank);
    if (r == ncclSuccess)
        r = ncclCommCuDevice(comm, &dev);
    if (r != ncclSuccess)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "reshard_comm_create_nccl: the communicator reports %s: %s",
                        ncclGetErrorString(r), ncclGetLastError(comm));
    return make_endpoint(comm, false, dev, rank, n, stream, out);
}

/* ---- device buffer helpers ----------------------------------------------------------- */

static reshard_status_t nccl_endpoint(reshard_comm_t *comm, const char *fn)
{
    if (comm == NULL || comm->ops != &rs_nccl_ops || comm->impl == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "%s: not an NCCL endpoint", fn);
    const cudaError_t e = cudaSetDevice(impl_of(comm)->device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_TRANSPORT, "%s: cudaSetDevice: %s", fn, cudaGetErrorString(e));
    }
    return RESHARD_OK;
}

static reshard_status_t cuda_status(cudaError_t e, const char *fn)
{
    if (e == cudaSuccess)
        return RESHARD_OK;
    (void)cudaGetLastError();
    return rs_error(e == cudaErrorMemoryAllocation ? RESHARD_ERR_NOMEM : RESHARD_ERR_TRANSPORT,
                    "%s: %s (%s)", fn, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Copy on the endpoint's stream and wait. The stream is non-blocking (no implicit order with
 * the legacy default stream, where plain cudaMemcpy/cudaMemset run, and a pageable-host
 * cudaMemcpy or a cudaMemset may still be in flight when they return), so every helper works
 * on the endpoint's own stream and synchronises it: the next refit sees the bytes. */
static reshard_status_t copy_sync(reshard_comm_t *comm, void *dst, const void *src, uint64_t bytes,
                                  const char *fn)
{
    cudaStream_t s = impl_of(comm)->stream;
    cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDefault, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    return cuda_status(e, fn);
}

reshard_status_t reshard_nccl_alloc(reshard_comm_t *comm, uint64_t bytes, void **out)
{
    rs_error_clear();
    if (out == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_nccl_alloc: out is NULL");
    *out = NULL;
    reshard_status_t st = nccl_endpoint(comm, "reshard_nccl_alloc");
    if (st != RESHARD_OK || bytes == 0)
        return st;
    return cuda_status(cudaMalloc(out, (size_t)bytes), "reshard_nccl_alloc: cudaMalloc");
}

void reshard_nccl_free(reshard_comm_t *comm, void *ptr)
{
    if (ptr != NULL && nccl_endpoint(comm, "reshard_nccl_free") == RESHARD_OK)
        cudaFree(ptr);
}

reshard_status_t reshard_nccl_memcpy(reshard_comm_t *comm, void *dst, const void *src,
                                     uint64_t bytes)
{
    rs_error_clear();
    reshard_status_t st = nccl_endpoint(comm, "reshard_nccl_memcpy");
    if (st != RESHARD_OK || bytes == 0)
        return st;
    if (dst == NULL || src == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_nccl_memcpy: NULL pointer");
    return copy_sync(comm, dst, src, bytes, "reshard_nccl_memcpy: cudaMemcpyAsync");
}

reshard_status_t reshard_nccl_memset(reshard_comm_t *comm, void *dst, int value, uint64_t bytes)
{
    rs_error_clear();
    reshard_status_t st = nccl_endpoint(comm, "reshard_nccl_memset");
    if (st != RESHARD_OK || bytes == 0)
        return st;
    if (dst == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_nccl_memset: NULL pointer");
    cudaStream_t s = impl_of(comm)->stream;
    cudaError_t e = cudaMemsetAsync(dst, value, (size_t)bytes, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    return cuda_status(e, "reshard_nccl_memset: cudaMemsetAsync");
}

static void free_host(reshard_buffer_t *h, int32_t n)
{
    if (h == NULL)
        return;
    for (int32_t b = 0; b < n; b++)
        free(h[b].ptr);
    free(h);
}

/* Host copies of the bytes of @p rank's fragments in each device buffer. */
static reshard_status_t host_mirror(reshard_comm_t *comm, const char *fn,
                                    const reshard_layout_t *layout, int32_t rank,
                                    const reshard_buffer_t *dev, int32_t n, reshard_buffer_t **out)
{
    *out = NULL;
    reshard_status_t st = nccl_endpoint(comm, fn);
    if (st != RESHARD_OK)
        return st;
    if (layout == NULL || n < 0 || (n > 0 && dev == NULL))
        return rs_error(RESHARD_ERR_INVALID_ARG, "%s: NULL layout or buffers", fn);
    reshard_buffer_t *h = calloc(n > 0 ? (size_t)n : 1, sizeof *h);
    if (h == NULL)
        return rs_error(RESHARD_ERR_NOMEM, "%s: out of memory", fn);
    for (int32_t b = 0; b < n; b++) {
        const uint64_t need = reshard_layout_buffer_bytes(layout, rank, b);
        if (need == 0)
            continue;
        if (dev[b].ptr == NULL || dev[b].bytes < need) {
            free_host(h, n);
            return rs_error(RESHARD_ERR_BUFFER,
                            "%s: buffer %d of rank %d has %" PRIu64
                            " bytes at %p; its fragments need %" PRIu64,
                            fn, (int)b, (int)rank, dev[b].bytes, dev[b].ptr, need);
        }
        h[b].ptr = malloc((size_t)need);
        h[b].bytes = need;
        if (h[b].ptr == NULL) {
            free_host(h, n);
            return rs_error(RESHARD_ERR_NOMEM, "%s: no host memory for %" PRIu64 " bytes", fn,
                            need);
        }
        st = copy_sync(comm, h[b].ptr, dev[b].ptr, need, fn);
        if (st != RESHARD_OK) {
            free_host(h, n);
            return st;
        }
    }
    *out = h;
    return RESHARD_OK;
}

reshard_status_t reshard_nccl_fill_pattern(reshard_comm_t *comm, const reshard_layout_t *layout,
                                           int32_t rank, const reshard_buffer_t *dev_bufs,
                                           int32_t n_bufs)
{
    rs_error_clear();
    reshard_buffer_t *h = NULL;
    reshard_status_t st =
        host_mirror(comm, "reshard_nccl_fill_pattern", layout, rank, dev_bufs, n_bufs, &h);
    if (st == RESHARD_OK)
        st = reshard_fill_pattern(layout, rank, h, n_bufs);
    for (int32_t b = 0; st == RESHARD_OK && b < n_bufs; b++)
        if (h[b].ptr != NULL)
            st =
                copy_sync(comm, dev_bufs[b].ptr, h[b].ptr, h[b].bytes, "reshard_nccl_fill_pattern");
    free_host(h, n_bufs);
    return st;
}

reshard_status_t reshard_nccl_verify_pattern(reshard_comm_t *comm, const reshard_layout_t *layout,
                                             int32_t rank, const reshard_buffer_t *dev_bufs,
                                             int32_t n_bufs, uint64_t *verified_bytes)
{
    rs_error_clear();
    if (verified_bytes != NULL)
        *verified_bytes = 0;
    reshard_buffer_t *h = NULL;
    reshard_status_t st =
        host_mirror(comm, "reshard_nccl_verify_pattern", layout, rank, dev_bufs, n_bufs, &h);
    if (st == RESHARD_OK)
        st = reshard_verify_pattern(layout, rank, h, n_bufs, verified_bytes);
    free_host(h, n_bufs);
    return st;
}

/* ---- stream-level entry points for tests and the benchmark ----------------------------- */

reshard_status_t rs_nccl_quant_job(rs_quant_job_t *j, const struct reshard_quant_rule *q,
                                   const void *dst, const reshard_fragment_t *dst_frag,
                                   const void *scale, const reshard_fragment_t *scale_frag,
                                   const void *src, const reshard_fragment_t *src_frag,
                                   const reshard_box_t *box)
{
    if (q == NULL || (q->kind != RS_QUANT_FP8_BLOCK && q->kind != RS_QUANT_MXFP8))
        return rs_error(RESHARD_ERR_INVALID_ARG, "quantize: no quantization rule or kind %d",
                        q != NULL ? (int)q->kind : -1);
    return rs_quant_job_init(j, q->kind == RS_QUANT_MXFP8, q->block_rows, q->block_cols,
                             q->pow2_scale, dst, dst_frag, scale, scale_frag, src, src_frag, box);
}

static reshard_status_t launch_on(cudaStream_t stream, const rs_box_copy_t *d, void *dst,
                                  const void *src, const char *what)
{
    (void)cudaGetLastError();
    const cudaError_t e = rs_box_copy_launch(d, dst, src, stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_TRANSPORT, "%s: %s", what, cudaGetErrorString(e));
    }
    return RESHARD_OK;
}

reshard_status_t rs_nccl_pack_on(cudaStream_t stream, void *out, const void *buf,
                                 const reshard_span_t *span)
{
    rs_box_copy_t d;
    reshard_status_t st = rs_box_copy_for_pack(&d, span, out, buf);
    return st != RESHARD_OK ? st : launch_on(stream, &d, out, buf, "pack kernel launch");
}

reshard_status_t rs_nccl_unpack_on(cudaStream_t stream, void *buf, const void *in,
                                   const reshard_span_t *span)
{
    rs_box_copy_t d;
    reshard_status_t st = rs_box_copy_for_unpack(&d, span, buf, in);
    return st != RESHARD_OK ? st : launch_on(stream, &d, buf, in, "unpack kernel launch");
}

reshard_status_t rs_nccl_local_copy_on(cudaStream_t stream, void *dst,
                                       const reshard_fragment_t *dst_frag, const void *src,
                                       const reshard_fragment_t *src_frag, const reshard_box_t *box,
                                       uint32_t elem_size)
{
    rs_box_copy_t d;
    reshard_status_t st = rs_box_copy_for_local(&d, dst, dst_frag, src, src_frag, box, elem_size);
    return st != RESHARD_OK ? st : launch_on(stream, &d, dst, src, "local copy kernel launch");
}
