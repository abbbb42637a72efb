/*
 * Elastic refit over MPI: an inference rank stops (SIGSTOP) mid-refit; the
 * survivors agree that it is gone, shrink through MPI_Comm_create_group,
 * replan and refit verified; then the stopped rank is resumed and rejoins
 * through a new communicator over every rank, and its fresh buffers are
 * refit completely.
 *
 *   mpirun -np 5 test_mpi_elastic CONFIG VICTIM TIMEOUT_S
 *
 * Train tp=2 (ranks 0-1) -> infer tp=1, dp=3 (ranks 2-4) of the model
 * CONFIG, a 64 KiB staging bound so the refit takes several rounds. Refit 1
 * runs on every rank and is verified. In refit 2 the victim raises SIGSTOP at
 * its third round wait. The lowest survivor prints
 *   ELASTIC OK: ... survivors verified B bytes; detect D s, agree A s, shrink S s,
 *   replan R s
 * when every survivor verified its refit after the shrink, then resumes the
 * victim (SIGCONT); all ranks refit again on a new comm of every rank and
 * rank 0 prints "REJOIN OK" when every rank verified, the victim included.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refit_once.h"
#include "reshard/reshard.h"
#include "reshard/reshard_elastic.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"
#include "exec/comm.h"

static reshard_transport_ops_t stopping;
static reshard_status_t (*real_round_wait)(reshard_comm_t *, int, double);
static int g_waits, g_kill;

static reshard_status_t stopping_round_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    if (++g_waits == 3) {
        fprintf(stderr, "rank %d: victim %s mid-refit\n", c->rank,
                g_kill ? "is killed (SIGKILL)" : "stops (SIGSTOP)");
        fflush(stderr);
        raise(g_kill ? SIGKILL : SIGSTOP);
        fprintf(stderr, "rank %d: victim resumed\n", c->rank);
    }
    return real_round_wait(c, slot, timeout_s);
}

static void die(int rank, const char *what, reshard_status_t st)
{
    fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, reshard_status_string(st),
            reshard_last_error());
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Plan src -> dst for @p rank, execute on @p comm with fresh buffers, verify;
 * @p t_plan receives the planning seconds. */
static reshard_status_t refit(const reshard_layout_t *src, const reshard_layout_t *dst,
                              reshard_comm_t *comm, int rank, int world, double timeout,
                              uint64_t *verified, double *t_plan)
{
    reshard_plan_params_t pp = {.field_mask =
                                    RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT,
                                .world_size = world,
                                .my_rank = rank,
                                .staging_bytes = 64 << 10,
                                .timeout_s = timeout};
    return rs_test_refit_once(src, dst, &pp, comm, rank, verified, t_plan);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4 || argc > 5 || size != 5) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 5 %s CONFIG VICTIM TIMEOUT_S [kill]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int victim = atoi(argv[2]);
    double timeout = atof(argv[3]);
    g_kill = argc == 5 && !strcmp(argv[4], "kill");
    int pids[5], me = (int)getpid();
    MPI_Allgather(&me, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);

    reshard_model_t *model = NULL;
    reshard_model_refit_t r = {0};
    reshard_status_t st = rs_test_model_refit(argv[1], "tp=2", "tp=1,dp=3", &model, &r);
    if (st != RESHARD_OK)
        die(rank, "model", st);
    reshard_comm_t *comm = NULL;
    st = reshard_comm_create_mpi(MPI_COMM_WORLD, &comm);
    if (st != RESHARD_OK)
        die(rank, "comm", st);

    /* refit 1: everyone */
    uint64_t v = 0;
    st = refit(r.train, r.infer, comm, rank, size, timeout, &v, NULL);
    if (st != RESHARD_OK)
        die(rank, "refit 1", st);

    /* refit 2: the victim stops mid-refit */
    if (rank == victim) {
        stopping = *comm->ops;
        real_round_wait = stopping.round_wait;
        stopping.round_wait = stopping_round_wait;
        comm->ops = &stopping;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    st = refit(r.train, r.infer, comm, rank, size, timeout, &v, NULL);
    double t1 = MPI_Wtime();
    if (rank == victim) {
        fprintf(stderr, "rank %d: victim's refit returned %s: %s\n", rank,
                reshard_status_string(st), reshard_last_error());
    } else {
        if (st == RESHARD_OK)
            die(rank, "refit 2 succeeded without the victim", RESHARD_ERR_VERIFY);
        fprintf(stderr, "rank %d: refit 2 failed after %.2f s: %s\n", rank, t1 - t0,
                reshard_last_error());
        int32_t gone[5], n_gone = 0;
        st = reshard_comm_agree_gone(comm, timeout / 2, gone, 5, &n_gone);
        double t2 = MPI_Wtime();
        if (st != RESHARD_OK)
            die(rank, "agree", st);
        if (n_gone != 1 || gone[0] != victim) {
            fprintf(stderr, "rank %d: agreed on %d lost ranks, first %d; want only %d\n", rank,
                    n_gone, n_gone ? gone[0] : -1, victim);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        reshard_comm_t *next = NULL;
        st = reshard_comm_shrink_mpi(comm, gone, n_gone, &next);
        double t3 = MPI_Wtime();
        if (st != RESHARD_OK)
            die(rank, "shrink", st);
        reshard_layout_t *s = NULL, *d = NULL;
        double t_plan = 0;
        st = reshard_membership_layouts(r.train, r.infer, gone, n_gone, &s, &d);
        if (st == RESHARD_OK)
            st = refit(s, d, next, rank, size, timeout, &v, &t_plan);
        double t4 = MPI_Wtime();
        if (st != RESHARD_OK)
            die(rank, "refit after shrink", st);
        /* every survivor verified? (a comm of the survivors of our own) */
        MPI_Group wg, sg;
        MPI_Comm surv;
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Group_excl(wg, 1, &victim, &sg);
        MPI_Comm_create_group(MPI_COMM_WORLD, sg, 7, &surv);
        /* after the shrink, errors name plan ranks: rank 0 sits one refit out; each other
         * survivor's error begins with its plan rank (above the victim: its rank in the
         * shrunken comm is one less) */
        int bad = 0, bad_all = 0;
        if (rank != 0) {
            uint64_t v2 = 0;
            reshard_status_t st2 = refit(s, d, next, rank, size, timeout, &v2, NULL);
            char want[32];
            snprintf(want, sizeof want, "rank %d:", rank);
            const char *msg = reshard_last_error();
            if (st2 == RESHARD_OK)
                die(rank, "a refit without a member succeeded", RESHARD_ERR_VERIFY);
            bad = strncmp(msg, want, strlen(want)) != 0;
            fprintf(stderr, "rank %d: refit without rank 0: %s\n", rank, msg);
        }
        MPI_Allreduce(&bad, &bad_all, 1, MPI_INT, MPI_SUM, surv);
        if (bad_all != 0)
            die(rank, "an error after a shrink does not name the plan rank", RESHARD_ERR_VERIFY);
        unsigned long long mine = v, total = 0;
        double times[4] = {t1 - t0, t2 - t1, t3 - t2, t_plan}, worst[4];
        MPI_Reduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, surv);
        MPI_Reduce(times, worst, 4, MPI_DOUBLE, MPI_MAX, 0, surv);
        int srank;
        MPI_Comm_rank(surv, &srank);
        if (srank == 0) {
            printf("ELASTIC OK: rank %d lost, %d survivors verified %llu bytes; detect %.3f s, "
                   "agree %.3f s, shrink %.4f s, replan %.4f s; refit after shrink %.3f s "
                   "(timeout %.1f s)\n",
                   victim, size - 1, total, worst[0], worst[1], worst[2], worst[3], t4 - t3,
                   timeout);
            fflush(stdout);
            if (!g_kill)
                kill((pid_t)pids[victim], SIGCONT); /* the victim resumes and rejoins */
        }
        MPI_Comm_free(&surv);
        MPI_Group_free(&sg);
        MPI_Group_free(&wg);
        reshard_layout_destroy(s);
        reshard_layout_destroy(d);
        reshard_comm_destroy(next);
    }
    reshard_comm_destroy(comm);
    if (g_kill) { /* no rejoin of a dead process; MPI_Finalize needs every rank */
        reshard_model_refit_destroy(&r);
        reshard_model_destroy(model);
        fflush(stdout);
        _exit(0);
    }

    /* rejoin: a new comm of every rank, the original layouts; the victim's
     * buffers are fresh (sentinel only) and refit completely */
    reshard_comm_t *again = NULL;
    st = reshard_comm_create_mpi(MPI_COMM_WORLD, &again);
    if (st == RESHARD_OK)
        st = refit(r.train, r.infer, again, rank, size, timeout, &v, NULL);
    if (st != RESHARD_OK)
        die(rank, "refit after rejoin", st);
    unsigned long long mine = v, total = 0, victim_v = rank == victim ? v : 0, vv = 0;
    MPI_Reduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&victim_v, &vv, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (vv == 0)
            die(rank, "the rejoined rank verified nothing", RESHARD_ERR_VERIFY);
        printf("REJOIN OK: every rank verified, %llu bytes, rank %d %llu bytes\n", total, victim,
               vv);
    }
    reshard_comm_destroy(again);
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(model);
    MPI_Finalize();
    return 0;
}
