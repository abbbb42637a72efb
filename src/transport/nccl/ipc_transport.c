/*
 * The cuda-ipc endpoint (reshard_comm_create_cuda_ipc): colocated refits on device memory
 * between processes of one host. Buffers are device memory on the endpoint's GPU; the
 * control plane (the buffer-table round and both agreements) goes over a host-memory
 * endpoint of the caller (MPI, a store or torch group), because NCCL refuses two ranks of
 * one communicator on one GPU. The data moves by colocated reads only (exec/peer.c opens
 * the owners' CUDA IPC handles and calls local_copy, the copy kernel on this stream);
 * finish waits for the stream, bounded by the plan's timeout, before the agreement.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "reshard/reshard_nccl.h"
#include "transport/nccl/nccl_internal.h"
#include "util/error.h"
#include "util/timeout.h"

typedef struct {
    reshard_comm_t *control;
    int device;
    cudaStream_t stream;
    bool own_stream;
} rs_ipc_t;

static rs_ipc_t *ipc_of(reshard_comm_t *c)
{
    return (rs_ipc_t *)reshard_comm_transport_ctx(c);
}

static reshard_status_t cuda_fail(reshard_comm_t *c, const char *what, cudaError_t e)
{
    (void)cudaGetLastError();
    return rs_error(RESHARD_ERR_TRANSPORT, "rank %d: cuda-ipc endpoint: %s: %s", c->rank, what,
                    cudaGetErrorString(e));
}

static reshard_status_t ipc_alloc_staging(reshard_comm_t *c, uint64_t bytes, void **out)
{
    *out = NULL;
    if (bytes == 0)
        return RESHARD_OK;
    cudaError_t e = cudaMalloc(out, (size_t)bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: cuda-ipc endpoint: cudaMalloc(%llu): %s",
                        c->rank, (unsigned long long)bytes, cudaGetErrorString(e));
    }
    return RESHARD_OK;
}

static void ipc_free_staging(reshard_comm_t *c, void *p)
{
    (void)c;
    if (p)
        (void)cudaFree(p);
}

/* The control plane: the caller's host-memory endpoint carries the (host) tables. */
static reshard_status_t ipc_round_begin(reshard_comm_t *c, int slot)
{
    reshard_comm_t *k = ipc_of(c)->control;
    return k->ops->round_begin(k, slot);
}

static reshard_status_t ipc_post_send(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                      uint64_t bytes)
{
    reshard_comm_t *k = ipc_of(c)->control;
    return k->ops->post_send(k, slot, peer, buf, bytes);
}

static reshard_status_t ipc_post_recv(reshard_comm_t *c, int slot, int32_t peer, void *buf,
                                      uint64_t bytes)
{
    reshard_comm_t *k = ipc_of(c)->control;
    return k->ops->post_recv(k, slot, peer, buf, bytes);
}

static reshard_status_t ipc_round_end(reshard_comm_t *c, int slot)
{
    reshard_comm_t *k = ipc_of(c)->control;
    return k->ops->round_end(k, slot);
}

static reshard_status_t ipc_round_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    reshard_comm_t *k = ipc_of(c)->control;
    return k->ops->round_wait(k, slot, timeout_s);
}

static reshard_status_t ipc_pack(reshard_comm_t *c, void *out, const void *buf,
                                 const reshard_span_t *span)
{
    return rs_nccl_pack_on(ipc_of(c)->stream, out, buf, span);
}

static reshard_status_t ipc_unpack(reshard_comm_t *c, void *buf, const void *in,
                                   const reshard_span_t *span)
{
    return rs_nccl_unpack_on(ipc_of(c)->stream, buf, in, span);
}

static reshard_status_t ipc_local_copy(reshard_comm_t *c, void *dst,
                                       const reshard_fragment_t *dst_frag, const void *src,
                                       const reshard_fragment_t *src_frag, const reshard_box_t *box,
                                       uint32_t elem_size)
{
    rs_ipc_t *t = ipc_of(c);
    cudaError_t e = cudaSetDevice(t->device);
    if (e != cudaSuccess)
        return cuda_fail(c, "cudaSetDevice", e);
    return rs_nccl_local_copy_on(t->stream, dst, dst_frag, src, src_frag, box, elem_size);
}

/* The stream's work (the reads' kernels) complete, or an error: never past @p timeout_s. */
static reshard_status_t drain(reshard_comm_t *c, double timeout_s)
{
    rs_ipc_t *t = ipc_of(c);
    double t0 = rs_now_s(), limit = rs_timeout_s(timeout_s);
    for (;;) {
        cudaError_t e = cudaStreamQuery(t->stream);
        if (e == cudaSuccess)
            return RESHARD_OK;
        if (e != cudaErrorNotReady)
            return cuda_fail(c, "the copy kernels on the stream", e);
        double waited = rs_now_s() - t0;
        if (waited > limit)
            return rs_error(RESHARD_ERR_TIMEOUT,
                            "rank %d: cuda-ipc endpoint: the copy kernels did not finish within "
                            "%.1f s",
                            c->rank, limit);
        if (waited > 1e-3) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

static reshard_status_t ipc_finish(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                                   int64_t *min_words, double timeout_s)
{
    reshard_status_t d = drain(c, timeout_s);
    if (local == RESHARD_OK && d != RESHARD_OK)
        local = d; /* drain recorded the message */
    reshard_comm_t *k = ipc_of(c)->control;
    return k->ops->finish(k, local, words, min_words, timeout_s);
}

static void ipc_unresponsive(const reshard_comm_t *c, unsigned char *flags)
{
    const reshard_comm_t *k = ((const rs_ipc_t *)reshard_comm_transport_ctx(c))->control;
    if (k->ops->unresponsive)
        k->ops->unresponsive(k, flags);
}

static void ipc_destroy(reshard_comm_t *c)
{
    rs_ipc_t *t = ipc_of(c);
    if (!t)
        return;
    (void)cudaSetDevice(t->device);
    if (t->own_stream) {
        (void)cudaStreamSynchronize(t->stream);
        (void)cudaStreamDestroy(t->stream);
    }
    free(t);
}

static const reshard_transport_ops_t ipc_ops = {
    .version = RESHARD_TRANSPORT_VERSION,
    .name = "cuda-ipc",
    .device_memory = true,
    .alloc_staging = ipc_alloc_staging,
    .free_staging = ipc_free_staging,
    .round_begin = ipc_round_begin,
    .post_send = ipc_post_send,
    .post_recv = ipc_post_recv,
    .round_end = ipc_round_end,
    .round_wait = ipc_round_wait,
    .pack = ipc_pack,
    .unpack = ipc_unpack,
    .local_copy = ipc_local_copy,
    .finish = ipc_finish,
    .unresponsive = ipc_unresponsive,
    .destroy = ipc_destroy,
};

reshard_status_t reshard_comm_create_cuda_ipc(reshard_comm_t *control, int cuda_device,
                                              struct CUstream_st *stream, reshard_comm_t **out)
{
    rs_error_clear();
    if (!control || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_cuda_ipc: %s is NULL",
                        !control ? "control" : "out");
    *out = NULL;
    if (control->ops->device_memory)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_create_cuda_ipc: rank %d: the control endpoint (%s) must "
                        "carry host memory (MPI, a store or a CPU torch group)",
                        control->rank, control->ops->name);
    int ndev = 0;
    reshard_status_t st = reshard_nccl_device_count(&ndev);
    if (st != RESHARD_OK)
        return st;
    if (cuda_device < -1 || cuda_device >= ndev)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_create_cuda_ipc: rank %d: device %d of %d", control->rank,
                        cuda_device, ndev);
    rs_ipc_t *t = calloc(1, sizeof *t);
    if (!t)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_create_cuda_ipc: out of memory");
    t->control = control;
    t->device = cuda_device >= 0 ? cuda_device : control->rank % ndev;
    t->stream = stream;
    cudaError_t e = cudaSetDevice(t->device);
    if (e == cudaSuccess && !stream) {
        e = cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking);
        t->own_stream = e == cudaSuccess;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(t);
        return rs_error(RESHARD_ERR_TRANSPORT, "reshard_comm_create_cuda_ipc: rank %d: %s",
                        control->rank, cudaGetErrorString(e));
    }
    st = reshard_comm_create_transport(&ipc_ops, t, control->rank, control->size, out);
    if (st != RESHARD_OK) {
        if (t->own_stream)
            (void)cudaStreamDestroy(t->stream);
        free(t);
    }
    return st;
}
