/*
 * The shrink's watchdog (reshard_mpi.h, RESHARD_SHRINK_WATCHDOG_S):
 *
 *   mpirun -np 3 test_mpi_shrink_watchdog
 *
 * Ranks 0 and 1 shrink a comm of 3 ranks with nothing gone, so MPI_Comm_create_group
 * waits for rank 2, which never calls it (a survivor that stopped after the agreement).
 * The job must end (MPI_Abort) with the watchdog's message naming the call and the bound,
 * never hang and never return from the shrink. Exit status non-zero. ctest sets
 * RESHARD_SHRINK_WATCHDOG_S=3 (the environment's override of the bound).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "reshard/reshard_mpi.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    reshard_comm_t *comm = NULL, *next = NULL;
    if (size != 3 || reshard_comm_create_mpi(MPI_COMM_WORLD, &comm) != RESHARD_OK) {
        fprintf(stderr, "usage: mpirun -np 3 %s\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 2) { /* stays away from the collective, alive, until the job is ended */
        sleep((unsigned)(3 * RESHARD_SHRINK_WATCHDOG_S)); /* 90 s: well past any bound set */
        fprintf(stderr, "rank 2: the job was not ended by the watchdog\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    reshard_status_t st = reshard_comm_shrink_mpi(comm, NULL, 0, &next);
    /* not reached: the shrink cannot complete without rank 2 */
    printf("rank %d: the shrink returned %s without rank 2 (WATCHDOG FAILED)\n", rank,
           reshard_status_string(st));
    MPI_Abort(MPI_COMM_WORLD, 4);
    return 1;
}
