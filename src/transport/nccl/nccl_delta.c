/* The NCCL transport's delta operations (exec/delta_dev_ops.h): device snapshots and the
 * delta kernels (delta_kernels.h) on the endpoint's stream, their scratch kept by the
 * endpoint. */
#include "exec/delta_dev_ops.h"

#include <nccl.h>
#include <string.h>

#include "transport/nccl/nccl_internal.h"
#include "util/error.h"

static reshard_status_t dev_alloc(reshard_comm_t *c, uint64_t bytes, void **out)
{
    *out = NULL;
    if (bytes == 0)
        return RESHARD_OK;
    cudaError_t e = cudaMalloc(out, (size_t)bytes);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(*out, 0, (size_t)bytes, rs_nccl_stream(c));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (*out)
            cudaFree(*out);
        *out = NULL;
        return rs_error(RESHARD_ERR_NOMEM,
                        "rank %d: delta state of %llu bytes does not fit in device memory: %s",
                        (int)c->rank, (unsigned long long)bytes, cudaGetErrorString(e));
    }
    return RESHARD_OK;
}

static void dev_free(void *p)
{
    if (p)
        cudaFree(p);
}

static reshard_status_t cuda_fail(reshard_comm_t *c, const char *what, cudaError_t e)
{
    (void)cudaGetLastError();
    return rs_error(RESHARD_ERR_TRANSPORT, "NCCL transport, rank %d: %s failed: %s", (int)c->rank,
                    what, cudaGetErrorString(e));
}

static reshard_status_t dev_copy(reshard_comm_t *c, void *dst, const void *src, uint64_t bytes,
                                 rs_dd_dir_t dir)
{
    if (bytes == 0)
        return RESHARD_OK;
    cudaStream_t s = rs_nccl_stream(c);
    const enum cudaMemcpyKind k = dir == RS_DD_D2H   ? cudaMemcpyDeviceToHost
                                  : dir == RS_DD_H2D ? cudaMemcpyHostToDevice
                                                     : cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)bytes, k, s);
    if (e == cudaSuccess && dir != RS_DD_D2D)
        e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? RESHARD_OK : cuda_fail(c, "delta copy", e);
}

static reshard_status_t dev_zero(reshard_comm_t *c, void *dst, uint64_t bytes)
{
    const cudaError_t e =
        bytes ? cudaMemsetAsync(dst, 0, (size_t)bytes, rs_nccl_stream(c)) : cudaSuccess;
    return e == cudaSuccess ? RESHARD_OK : cuda_fail(c, "delta zero", e);
}

static reshard_status_t dev_encode(reshard_comm_t *c, const void *cur, void *prev, uint64_t len,
                                   uint32_t word, void *out, void *changed)
{
    void *scratch = NULL;
    reshard_status_t st = rs_nccl_usable(c, "delta encode");
    if (st == RESHARD_OK)
        st = rs_nccl_delta_scratch(c, rs_delta_dev_scratch_bytes(len, word), &scratch);
    if (st != RESHARD_OK)
        return st;
    rs_dk_job_t j;
    rs_dk_job_init(&j, len, word, NULL, scratch);
    cudaStream_t s = rs_nccl_stream(c);
    (void)cudaGetLastError(); /* a stale non-sticky error must not be blamed on this launch */
    const cudaError_t e = rs_delta_encode_launch(&j, cur, prev, out, s);
    if (e != cudaSuccess)
        return rs_nccl_launch_failed(c, "delta encode kernel launch", e);
    /* the count out of the scratch, which the next chunk's encode takes: no wait */
    const cudaError_t ce = changed ? cudaMemcpyAsync(changed, &j.total->s.c, sizeof(uint64_t),
                                                     cudaMemcpyDeviceToDevice, s)
                                   : cudaSuccess;
    return ce == cudaSuccess ? RESHARD_OK : cuda_fail(c, "delta copy", ce);
}

static reshard_status_t dev_hash_msg(reshard_comm_t *c, const void *chunk, uint64_t len,
                                     const void *header, void *out)
{
    void *scratch = NULL;
    reshard_status_t st = rs_nccl_usable(c, "delta hash");
    if (st == RESHARD_OK)
        st = rs_nccl_delta_scratch(c, sizeof(uint64_t), &scratch);
    if (st != RESHARD_OK)
        return st;
    (void)cudaGetLastError();
    const cudaError_t e = rs_delta_hash_launch(chunk, len, scratch, header, out, rs_nccl_stream(c));
    return e == cudaSuccess ? RESHARD_OK : rs_nccl_launch_failed(c, "delta hash kernel launch", e);
}

/* An apply's record (rs_delta_dev_ops_t.apply): the kernels' error record and the sum of
 * the result's hash terms. */
typedef struct {
    rs_dk_err_t err;
    uint64_t sum;
} apply_rec_t;

static reshard_status_t dev_apply(reshard_comm_t *c, const void *in, const rs_delta_header_t *h,
                                  void *chunk, uint64_t len, bool hash, void *rec)
{
    void *scratch = NULL;
    reshard_status_t st = rs_nccl_usable(c, "delta apply");
    if (st == RESHARD_OK)
        st = rs_nccl_delta_scratch(c, rs_delta_dev_scratch_bytes(len, h->word), &scratch);
    if (st != RESHARD_OK)
        return st;
    rs_dk_job_t j;
    rs_dk_job_init(&j, len, h->word, h, scratch);
    cudaStream_t s = rs_nccl_stream(c);
    apply_rec_t *r = rec;
    (void)cudaGetLastError();
    cudaError_t e = rs_delta_apply_launch(&j, in, chunk, s);
    if (e == cudaSuccess && hash)
        e = rs_delta_hash_launch(chunk, len, &r->sum, NULL, NULL, s);
    if (e != cudaSuccess)
        return rs_nccl_launch_failed(c, "delta apply kernel launch", e);
    /* the error record out of the scratch, which the next chunk's apply takes: no wait */
    e = cudaMemcpyAsync(&r->err, j.err, sizeof r->err, cudaMemcpyDeviceToDevice, s);
    return e == cudaSuccess ? RESHARD_OK : cuda_fail(c, "delta copy", e);
}

static reshard_status_t dev_applied(const void *rec, const rs_delta_header_t *h, uint64_t len,
                                    const char *what, uint64_t *hash)
{
    apply_rec_t r;
    memcpy(&r, rec, sizeof r);
    if (hash)
        *hash = rs_dk_hash_final(r.sum, len);
    return rs_delta_apply_status(&r.err, h, len, what);
}

const rs_delta_dev_ops_t rs_nccl_delta_ops = {
    .alloc = dev_alloc,
    .free = dev_free,
    .copy = dev_copy,
    .zero = dev_zero,
    .encode = dev_encode,
    .hash_msg = dev_hash_msg,
    .apply = dev_apply,
    .apply_record_bytes = sizeof(apply_rec_t),
    .applied = dev_applied,
};
