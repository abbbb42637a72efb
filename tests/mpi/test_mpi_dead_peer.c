/*
 * A peer that dies or stalls in the middle of a refit: every other rank must
 * fail the refit within a bounded time (the job then ends non-zero).
 *
 *   mpirun -np 4 test_mpi_dead_peer CONFIG kill|stall VICTIM TIMEOUT_S
 *
 * Train tp=2 -> infer tp=2 of the model CONFIG, a small staging bound so the
 * refit takes many rounds. The victim's transport is wrapped: at its third
 * round wait it raises SIGKILL (kill) or sleeps for an hour (stall). The other
 * ranks print their status and the seconds they took, then call MPI_Abort.
 * The test passes when mpirun exits non-zero well within the ctest timeout
 * (checked by expect.sh) and, for stall, the survivors report TIMEOUT.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"
#include "exec/comm.h"

static reshard_transport_ops_t faulty;
static reshard_status_t (*real_round_wait)(reshard_comm_t *, int, double);
static int g_stall, g_waits;

static reshard_status_t faulty_round_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    if (++g_waits == 3) {
        fprintf(stderr, "rank %d: victim %s mid-refit\n", c->rank,
                g_stall ? "stalls" : "kills itself");
        fflush(stderr);
        if (!g_stall)
            raise(SIGKILL);
        struct timespec ts = {3600, 0};
        nanosleep(&ts, NULL);
    }
    return real_round_wait(c, slot, timeout_s);
}

static void die(int rank, const char *what, reshard_status_t st)
{
    fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, reshard_status_string(st),
            reshard_last_error());
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static reshard_buffer_t *alloc_bufs(const reshard_layout_t *l, int rank, int32_t *n)
{
    *n = reshard_layout_buffer_count(l, rank);
    reshard_buffer_t *b = calloc((size_t)(*n ? *n : 1), sizeof *b);
    for (int32_t i = 0; b && i < *n; i++) {
        b[i].bytes = reshard_layout_buffer_bytes(l, rank, i);
        b[i].ptr = malloc(b[i].bytes ? (size_t)b[i].bytes : 1);
        if (b[i].ptr)
            memset(b[i].ptr, RESHARD_SENTINEL_BYTE, (size_t)b[i].bytes);
    }
    return b;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5 || size != 4) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 4 %s CONFIG kill|stall VICTIM TIMEOUT_S\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    g_stall = !strcmp(argv[2], "stall");
    int victim = atoi(argv[3]);
    double timeout = atof(argv[4]);

    reshard_model_t *model = NULL;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_refit_t refit = {0};
    reshard_status_t st = reshard_model_load(argv[1], NULL, &model);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse("tp=2", &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse("tp=2", &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(model, &ts, &is, &refit);
    if (st != RESHARD_OK)
        die(rank, "model", st);
    reshard_plan_params_t pp = {.field_mask =
                                    RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT,
                                .world_size = size,
                                .my_rank = rank,
                                .staging_bytes = 64 << 10,
                                .timeout_s = timeout};
    reshard_plan_t *plan = NULL;
    reshard_comm_t *comm = NULL;
    st = reshard_plan_create(refit.train, refit.infer, &pp, &plan);
    if (st != RESHARD_OK)
        die(rank, "plan", st);
    st = reshard_comm_create_mpi(MPI_COMM_WORLD, &comm);
    if (st != RESHARD_OK)
        die(rank, "comm", st);
    if (rank == victim) {
        faulty = *comm->ops;
        real_round_wait = faulty.round_wait;
        faulty.round_wait = faulty_round_wait;
        comm->ops = &faulty;
    }
    int32_t ns, nd;
    reshard_buffer_t *src = alloc_bufs(refit.train, rank, &ns);
    reshard_buffer_t *dst = alloc_bufs(refit.infer, rank, &nd);
    if (ns && reshard_fill_pattern(refit.train, rank, src, ns) != RESHARD_OK)
        die(rank, "fill", RESHARD_ERR_INVALID_ARG);

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    st = reshard_plan_execute(plan, comm, src, ns, dst, nd, NULL);
    double dt = MPI_Wtime() - t0;
    fprintf(stderr, "rank %d: refit returned %s after %.2f s: %s\n", rank,
            reshard_status_string(st), dt, reshard_last_error());
    fflush(stderr);
    /* Survivors end the job: the victim cannot take part in a clean exit. */
    MPI_Abort(MPI_COMM_WORLD, st == RESHARD_OK ? 3 : 1);
    return 1;
}
