/*
 * Elastic refit over NCCL: the survivors shrink the endpoint's communicator (live, or
 * revoked by the failed execution) with ncclCommShrink(NCCL_SHRINK_ABORT); the lost
 * ranks take no part. With nobody gone (NCCL refuses an empty exclude list) every rank
 * splits it instead (ncclCommSplit, color 0): a fresh communicator of the same members.
 */
#include <nccl.h>
#include <stdlib.h>

#include "exec/elastic.h"
#include "reshard/reshard_nccl.h"
#include "transport/nccl/nccl_internal.h"
#include "util/error.h"
#include "util/timeout.h"

reshard_status_t reshard_comm_shrink_nccl(reshard_comm_t *comm, const int32_t *gone, int32_t n_gone,
                                          reshard_comm_t **out)
{
    rs_error_clear();
    if (comm == NULL || out == NULL || n_gone < 0 || (n_gone > 0 && gone == NULL))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_shrink_nccl: bad argument");
    *out = NULL;
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 27, 0)
    return rs_error(RESHARD_ERR_UNSUPPORTED,
                    "reshard_comm_shrink_nccl: NCCL %d has no ncclCommShrink (2.27 or later)",
                    NCCL_VERSION_CODE);
#else
    const int32_t *to_inner = NULL;
    reshard_comm_t *inner = rs_comm_inner(comm, &to_inner);
    int device = 0;
    cudaStream_t stream = NULL;
    ncclComm_t parent = rs_nccl_parent(inner, &device, &stream);
    if (parent == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_shrink_nccl: not an NCCL endpoint, or its communicator "
                        "was aborted (NCCL older than 2.28 cannot revoke)");
    int32_t *map = NULL, k = 0;
    reshard_status_t st = rs_survivor_map(comm, gone, n_gone, &map, &k);
    if (st != RESHARD_OK)
        return st;
    /* the inner ranks to exclude; ncclCommShrink numbers the rest in inner-rank order */
    int32_t n = inner->size;
    unsigned char *keep = calloc((size_t)n, 1);
    int *excl = malloc((size_t)n * sizeof *excl);
    if (keep == NULL || excl == NULL) {
        free(keep);
        free(excl);
        free(map);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_shrink_nccl: out of memory");
    }
    for (int32_t p = 0; p < comm->size; p++)
        if (map[p] >= 0)
            keep[to_inner ? to_inner[p] : p] = 1;
    int nex = 0;
    for (int32_t q = 0; q < n; q++)
        if (!keep[q])
            excl[nex++] = (int)q;
    for (int32_t p = 0; p < comm->size; p++) {
        if (map[p] < 0)
            continue;
        int32_t q = to_inner ? to_inner[p] : p, below = 0;
        for (int32_t r = 0; r < q; r++)
            below += keep[r];
        map[p] = below;
    }
    /* NCCL fills the new communicator asynchronously: rs_nccl_child keeps the pointer's
     * storage in the endpoint, waits for a revoke to finish and polls the parent. */
    ncclComm_t child = NULL;
    st = rs_nccl_child(inner, excl, nex, &child);
    reshard_comm_t *ep = NULL;
    if (st == RESHARD_OK)
        st = rs_nccl_make_endpoint(child, true, device, (int)map[comm->rank], (int)k, stream, &ep);
    if (st != RESHARD_OK && child != NULL)
        ncclCommAbort(child);
    else if (st == RESHARD_OK)
        st = reshard_comm_create_view(ep, comm->size, map, out);
    free(keep);
    free(excl);
    free(map);
    return st;
#endif
}
