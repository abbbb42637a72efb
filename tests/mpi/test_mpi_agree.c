/*
 * The first agreement of an execution over MPI (4 ranks): rank 3 built its
 * destination mesh as {3, 2}, the others {2, 3} -> every rank fails with
 * MISMATCH naming rank 3, at once, nothing written; rank 2's plan fails ->
 * it calls reshard_plan_fail and every other rank fails naming it; the same
 * layouts everywhere -> the refit runs and verifies. Prints the slowest
 * rank's time to fail (the plan timeout is 60 s).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh_pair.h"
#include "mpi_check.h"
#include "reshard/reshard_mpi.h"

static int g_rank, g_failures;

enum { SHARD_BYTES = RS_MESH_PAIR_ROWS / 2 * RS_MESH_PAIR_COLS * 4 };

/* One refit of the mesh pair on this rank; returns its status and time. */
static reshard_status_t one(int swapped_rank, int failed_rank, double *secs, char *msg,
                            size_t msg_size)
{
    reshard_comm_t *c = NULL;
    if (reshard_comm_create_mpi(MPI_COMM_WORLD, &c) != RESHARD_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    rs_mesh_pair_t p;
    rs_mesh_pair_make(&p, g_rank == swapped_rank);
    reshard_plan_params_t prm = {.field_mask =
                                     RESHARD_PLAN_PARAM_TIMEOUT | RESHARD_PLAN_PARAM_STAGING_BYTES,
                                 .world_size = 4,
                                 .my_rank = g_rank,
                                 .timeout_s = 60.0,
                                 .staging_bytes = g_rank == failed_rank ? 100 : 1 << 20};
    reshard_plan_t *plan = NULL;
    static unsigned char buf[SHARD_BYTES];
    reshard_buffer_t b = {.ptr = buf, .bytes = SHARD_BYTES};
    int src = g_rank < 2;
    memset(buf, RESHARD_SENTINEL_BYTE, sizeof buf);
    if (src && reshard_fill_pattern(p.src, g_rank, &b, 1) != RESHARD_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    reshard_status_t st = reshard_plan_create(p.src, p.dst, &prm, &plan);
    if (st != RESHARD_OK) {
        reshard_status_t told = reshard_plan_fail(c, st, 60.0);
        CHECK(told == RESHARD_OK, "plan_fail: %s", reshard_status_string(told));
    } else {
        st = reshard_plan_execute(plan, c, src ? &b : NULL, src, src ? NULL : &b, !src, NULL);
    }
    *secs = MPI_Wtime() - t0;
    snprintf(msg, msg_size, "%s", reshard_last_error());
    if (!src && st != RESHARD_OK)
        for (size_t i = 0; i < sizeof buf; i++)
            if (buf[i] != RESHARD_SENTINEL_BYTE) {
                CHECK(0, "destination byte %zu written by a failed refit", i);
                break;
            }
    if (!src && st == RESHARD_OK)
        st = reshard_verify_pattern(p.dst, g_rank, &b, 1, NULL);
    reshard_plan_destroy(plan);
    rs_mesh_pair_free(&p);
    reshard_comm_destroy(c);
    return st;
}

static double slowest(double s)
{
    double m = 0;
    MPI_Allreduce(&s, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4) {
        if (g_rank == 0)
            fprintf(stderr, "run with 4 ranks\n");
        MPI_Finalize();
        return 2;
    }
    char msg[1024], want[128];
    double secs;

    reshard_status_t st = one(3, -1, &secs, msg, sizeof msg);
    snprintf(want, sizeof want, "rank %d: ranks 0 and 3 planned from different inputs", g_rank);
    CHECK(st == RESHARD_ERR_MISMATCH && strstr(msg, want), "mismatch: %s: %s",
          reshard_status_string(st), msg);
    double t = slowest(secs);
    if (g_rank == 0)
        printf("mesh order mismatch: every rank failed with MISMATCH in %.3f ms (slowest rank)\n",
               t * 1e3);

    st = one(-1, 2, &secs, msg, sizeof msg);
    if (g_rank != 2) {
        snprintf(want, sizeof want, "rank %d: rank 2 could not create its plan", g_rank);
        CHECK(st == RESHARD_ERR_STAGING && strstr(msg, want), "plan_fail: %s: %s",
              reshard_status_string(st), msg);
    }
    t = slowest(secs);
    if (g_rank == 0)
        printf("failed plan on rank 2: every rank failed in %.3f ms (slowest rank)\n", t * 1e3);

    st = one(-1, -1, &secs, msg, sizeof msg);
    CHECK(st == RESHARD_OK, "same layouts: %s: %s", reshard_status_string(st), msg);

    int bad = 0;
    MPI_Allreduce(&g_failures, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s\n", bad ? "FAILED" : "passed");
    MPI_Finalize();
    return bad ? 1 : 0;
}
