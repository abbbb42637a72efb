/* Test helper shared by the NCCL refit tests: one rank's buffers of a model
 * side (reshard_model_buffers_t) allocated in device memory through the
 * endpoint, and freed again; the bytes a layout places on a rank. */
#ifndef RS_TEST_DEVICE_BUFS_H
#define RS_TEST_DEVICE_BUFS_H

#include <stdlib.h>

#include "reshard/reshard_model.h"
#include "reshard/reshard_nccl.h"

typedef struct {
    int32_t n;
    reshard_buffer_t *b;
} bufs_t;

/* Allocate every buffer @p rank has in @p mb, at its full size. */
static inline reshard_status_t alloc_bufs(reshard_comm_t *c, const reshard_model_buffers_t *mb,
                                          int32_t rank, bufs_t *out)
{
    out->n = reshard_model_buffer_count(mb, rank);
    out->b = calloc((size_t)out->n + 1, sizeof *out->b);
    if (out->b == NULL)
        return RESHARD_ERR_NOMEM;
    for (int32_t i = 0; i < out->n; i++) {
        out->b[i].bytes = reshard_model_buffer_bytes(mb, rank, i);
        reshard_status_t st = reshard_nccl_alloc(c, out->b[i].bytes, &out->b[i].ptr);
        if (st != RESHARD_OK)
            return st;
    }
    return RESHARD_OK;
}

/* Free what alloc_bufs made (also after it failed part way); @p b is reset. */
static inline void free_bufs(reshard_comm_t *c, bufs_t *b)
{
    for (int32_t i = 0; b->b != NULL && i < b->n; i++)
        reshard_nccl_free(c, b->b[i].ptr);
    free(b->b);
    b->b = NULL;
    b->n = 0;
}

/* Bytes of the fragments of @p rank in destination layout @p l (every rank's for
 * RESHARD_ALL_RANKS); a tensor a destination holds quantized (reshard_tensors_set_quant) has
 * 1-byte e4m3 elements there. */
static inline uint64_t layout_rank_bytes(const reshard_layout_t *l, const reshard_tensors_t *T,
                                         int32_t rank)
{
    uint64_t sum = 0;
    for (int64_t i = 0; i < reshard_layout_count(l); i++) {
        reshard_fragment_t f;
        reshard_tensor_info_t ti;
        reshard_layout_fragment(l, i, &f);
        if (rank != RESHARD_ALL_RANKS && f.rank != rank)
            continue;
        reshard_tensors_info(T, f.tensor, &ti);
        reshard_quant_t q;
        const int quantized = reshard_tensors_get_quant(T, f.tensor, &q) == RESHARD_OK &&
                              q.kind != RESHARD_QUANT_NONE;
        uint64_t n = quantized ? 1 : reshard_dtype_size(ti.dtype);
        for (int k = 0; k < f.box.ndim; k++)
            n *= (uint64_t)f.box.extent[k];
        sum += n;
    }
    return sum;
}

#endif
