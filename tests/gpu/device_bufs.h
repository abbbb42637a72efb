/* Test helper shared by the NCCL refit tests: one rank's buffers of a model
 * side (reshard_model_buffers_t) allocated in device memory through the
 * endpoint, and freed again; the bytes a layout places on a rank. */
#ifndef RS_TEST_DEVICE_BUFS_H
#define RS_TEST_DEVICE_BUFS_H

#include <stdlib.h>

#include "reshard/reshard_model.h"
#include "reshard/reshard_nccl.h"
#include "../common/rank_bytes.h"

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

#endif
