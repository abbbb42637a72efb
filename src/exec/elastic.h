/* Internal helpers of elastic refit shared by the transports' shrink paths. */
#ifndef RS_EXEC_ELASTIC_H
#define RS_EXEC_ELASTIC_H

#include <stdbool.h>

#include "reshard/reshard_elastic.h"
#include "exec/comm.h"

/** True when @p c is a view (reshard_comm_create_view). */
bool rs_comm_is_view(const reshard_comm_t *c);

/** The comm under the view @p c, or NULL when @p c is not a view. */
const reshard_comm_t *rs_view_inner(const reshard_comm_t *c);

/** The comm under a view (and its plan-rank -> inner-rank map), or @p c
 *  itself with *to_inner = NULL. */
reshard_comm_t *rs_comm_inner(reshard_comm_t *c, const int32_t **to_inner);

/**
 * The plan-rank map of the membership of @p comm without @p gone: map[p] =
 * rank in the new communicator (members in increasing plan-rank order, the
 * order MPI_Comm_create_group and ncclCommShrink keep) or -1. *n_members =
 * the new size. Errors: INVALID_ARG (the calling rank is gone), NOMEM.
 */
reshard_status_t rs_survivor_map(const reshard_comm_t *comm, const int32_t *gone, int32_t n_gone,
                                 int32_t **map_out, int32_t *n_members);

#endif
