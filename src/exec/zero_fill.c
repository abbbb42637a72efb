/* Zero-filled destination buffers (exec/zero_fill.h). */
#include "exec/zero_fill.h"

#include "exec/comm.h"
#include "exec/delta_dev_ops.h"
#include "layout/layout_internal.h"
#include "util/error.h"

reshard_status_t rs_zero_fill_check(const reshard_plan_t *plan, const reshard_comm_t *comm,
                                    int32_t rank)
{
    if (!comm->ops->device_memory || comm->delta_dev || rs_layout_zero_most(plan->dst, rank) == 0)
        return RESHARD_OK;
    return rs_error(RESHARD_ERR_UNSUPPORTED,
                    "rank %d: a destination buffer is declared zero-filled "
                    "(reshard_layout_zero_buffer) and the %s transport keeps buffers in device "
                    "memory without device operations to write it",
                    rank, comm->ops->name);
}

typedef struct {
    reshard_comm_t *comm;
    const void *zeros; /* device: a zeroed block of the largest buffer's size */
} dev_put_t;

static reshard_status_t dev_put(void *ctx, void *dst, uint64_t bytes)
{
    dev_put_t *d = ctx;
    return d->comm->delta_dev->copy(d->comm, dst, d->zeros, bytes, RS_DD_D2D);
}

reshard_status_t rs_zero_fill(const reshard_plan_t *plan, reshard_comm_t *comm, int32_t rank,
                              const reshard_buffer_t *bufs)
{
    uint64_t most = rs_layout_zero_most(plan->dst, rank);
    if (most == 0)
        return RESHARD_OK;
    if (!comm->ops->device_memory)
        return rs_layout_zero_fill(plan->dst, rank, bufs, NULL, NULL);
    void *zeros = NULL;
    reshard_status_t st = comm->delta_dev->alloc(comm, most, &zeros);
    dev_put_t d = {comm, zeros};
    if (st == RESHARD_OK)
        st = rs_layout_zero_fill(plan->dst, rank, bufs, dev_put, &d);
    comm->delta_dev->free(zeros);
    return st;
}
