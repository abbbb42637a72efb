/* reshard_mpi_placement: which ranks of a communicator share a host and a device. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reshard/reshard_mpi.h"
#include "util/error.h"

reshard_status_t reshard_mpi_placement(MPI_Comm comm, int32_t *host, int32_t *device)
{
    rs_error_clear();
    if (!host || comm == MPI_COMM_NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_mpi_placement: NULL argument");
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    char name[RESHARD_HOST_NAME_MAX];
    memset(name, 0, sizeof name);
    const char *env = getenv("RESHARD_HOST");
    int32_t dev = RESHARD_DEVICE_CPU;
    const char *denv = getenv("RESHARD_DEVICE");
    if (denv && *denv) {
        char *end = NULL;
        long v = strtol(denv, &end, 10);
        if (*end || v < 0 || v > 1 << 20)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "reshard_mpi_placement: rank %d: RESHARD_DEVICE=\"%s\" is not a GPU "
                            "index",
                            rank, denv);
        dev = (int32_t)v;
    }
    if (env && *env) {
        snprintf(name, sizeof name, "env:%s", env);
    } else {
        /* ranks that can share memory, named by their lowest rank and the host name */
        MPI_Comm node = MPI_COMM_NULL;
        int leader = rank;
        if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) !=
                MPI_SUCCESS ||
            MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, node) != MPI_SUCCESS) {
            if (node != MPI_COMM_NULL)
                MPI_Comm_free(&node);
            return rs_error(RESHARD_ERR_TRANSPORT,
                            "reshard_mpi_placement: rank %d: the shared-memory split failed", rank);
        }
        MPI_Comm_free(&node);
        char hn[128] = {0};
        if (gethostname(hn, sizeof hn - 1) != 0)
            hn[0] = '\0';
        snprintf(name, sizeof name, "node:%d:%s", leader, hn);
    }
    char *all = malloc((size_t)size * sizeof name);
    int32_t *devs = malloc((size_t)size * sizeof *devs);
    if (!all || !devs) {
        free(all);
        free(devs);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_mpi_placement: out of memory");
    }
    int rc = MPI_Allgather(name, (int)sizeof name, MPI_CHAR, all, (int)sizeof name, MPI_CHAR, comm);
    if (rc == MPI_SUCCESS)
        rc = MPI_Allgather(&dev, 1, MPI_INT32_T, devs, 1, MPI_INT32_T, comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        free(devs);
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "reshard_mpi_placement: rank %d: MPI_Allgather failed", rank);
    }
    for (int r = 0; r < size; r++) {
        host[r] = r;
        for (int q = 0; q < r; q++)
            if (!strncmp(all + (size_t)q * sizeof name, all + (size_t)r * sizeof name,
                         sizeof name)) {
                host[r] = host[q];
                break;
            }
        if (device)
            device[r] = devs[r];
    }
    free(all);
    free(devs);
    return RESHARD_OK;
}
