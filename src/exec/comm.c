/* Transport-independent accessors of reshard_comm_t. */
#include <stdlib.h>

#include "exec/comm.h"

void reshard_comm_destroy(reshard_comm_t *comm)
{
    if (!comm)
        return;
    if (comm->ops && comm->ops->destroy)
        comm->ops->destroy(comm);
    free(comm);
}

int32_t reshard_comm_rank(const reshard_comm_t *comm)
{
    return comm ? comm->rank : -1;
}

int32_t reshard_comm_size(const reshard_comm_t *comm)
{
    return comm ? comm->size : 0;
}
