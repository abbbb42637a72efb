/* Zero-filled destination buffers (exec/zero_fill.h). */
#include "exec/zero_fill.h"

#include <string.h>

#include "exec/comm.h"
#include "exec/delta_dev_ops.h"
#include "layout/layout_internal.h"
#include "util/error.h"

/* The largest zero-filled destination buffer of @p rank, in bytes (0: none). */
static uint64_t largest(const reshard_plan_t *plan, int32_t rank)
{
    const rs_decls_t *d = &plan->dst->decls;
    int64_t first, cnt = d->n ? rs_decls_of_rank(d, rank, &first) : 0;
    uint64_t most = 0;
    for (int64_t i = 0; i < cnt; i++) {
        const rs_decl_t *e = &d->e[d->order[first + i]];
        if (e->zero && e->bytes > most)
            most = e->bytes;
    }
    return most;
}

reshard_status_t rs_zero_fill_check(const reshard_plan_t *plan, const reshard_comm_t *comm,
                                    int32_t rank)
{
    if (!comm->ops->device_memory || comm->delta_dev || largest(plan, rank) == 0)
        return RESHARD_OK;
    return rs_error(RESHARD_ERR_UNSUPPORTED,
                    "rank %d: a destination buffer is declared zero-filled "
                    "(reshard_layout_zero_buffer) and the %s transport keeps buffers in device "
                    "memory without device operations to write it",
                    rank, comm->ops->name);
}

reshard_status_t rs_zero_fill(const reshard_plan_t *plan, reshard_comm_t *comm, int32_t rank,
                              const reshard_buffer_t *bufs)
{
    uint64_t most = largest(plan, rank);
    if (most == 0)
        return RESHARD_OK;
    void *zeros = NULL; /* device: one zeroed block copied into each buffer */
    reshard_status_t st = RESHARD_OK;
    if (comm->ops->device_memory)
        st = comm->delta_dev->alloc(comm, most, &zeros);
    const rs_decls_t *d = &plan->dst->decls;
    int64_t first, cnt = rs_decls_of_rank(d, rank, &first);
    for (int64_t i = 0; st == RESHARD_OK && i < cnt; i++) {
        const rs_decl_t *e = &d->e[d->order[first + i]];
        if (!e->zero)
            continue;
        if (zeros)
            st = comm->delta_dev->copy(comm, bufs[e->buffer].ptr, zeros, e->bytes, RS_DD_D2D);
        else
            memset(bufs[e->buffer].ptr, 0, (size_t)e->bytes);
    }
    if (zeros)
        comm->delta_dev->free(zeros);
    return st;
}
