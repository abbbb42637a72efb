/*
 * The outcome of an execution is one decision over MPI: a rank stops (SIGSTOP) at a given
 * point of one of the two agreements of a refit, and every survivor returns the same
 * verdict from that refit (all OK, or all an error), leaves it within a bounded spread of
 * each other, agrees on who is gone, shrinks and refits verified.
 *
 *   mpirun --enable-recovery -np 5 test_mpi_atomic CONFIG VICTIM AGREEMENT POINT TIMEOUT_S [kill]
 *
 * AGREEMENT: preflight | outcome (the first or the last agreement of refit 2);
 * POINT: enter | posted | decided | confirm | confirmed — before the decision round is
 * posted, right after it is posted (the point of the reported defect: some ranks completed
 * the MPI_Iallreduce, others timed out), after it completed on the victim, after the
 * confirmation round is posted, after it completed on the victim.
 * Train tp=1, dp=2 (ranks 0-1, so a lost source has a replica) -> infer tp=1, dp=3 (ranks 2-4) of
 * the model CONFIG. Refit 1 runs on every rank and is verified. In refit 2 the victim stops at the
 * point. Each survivor notes its status; a survivor whose refit 2 succeeded refits once more, which
 * fails (the victim is gone). Then the survivors agree on who is gone (reshard_comm_agree_gone with
 * TIMEOUT_S / 4), shrink, replan and refit verified, and compare over a communicator of
 * their own: the lowest prints
 *   ATOMIC OK: victim V stopped at AGREEMENT/POINT: every survivor returned S from refit 2;
 *   they entered the recovery within X s of each other; refit after the shrink verified B bytes
 * and kills the victim (hence --enable-recovery); every rank then ends with _exit(0).
 */
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "refit_once.h"
#include "reshard/reshard.h"
#include "reshard/reshard_elastic.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"
#include "transport/mpi/mpi_internal.h"

static int g_stop_epoch = -1, g_kill;
static rs_mpi_agree_point_t g_stop_point;

static void stop_here(const rs_mpi_t *m, rs_mpi_agree_point_t point)
{
    if (m->epoch != g_stop_epoch || point != g_stop_point)
        return;
    fprintf(stderr, "rank %d: victim %s at point %d of agreement %d\n", m->rank,
            g_kill ? "is killed (SIGKILL)" : "stops (SIGSTOP)", (int)point, m->epoch);
    fflush(stderr);
    raise(g_kill ? SIGKILL : SIGSTOP);
}

static void die(int rank, const char *what, reshard_status_t st)
{
    fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, reshard_status_string(st),
            reshard_last_error());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* one clock for every process of the host */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static reshard_status_t refit(const reshard_layout_t *src, const reshard_layout_t *dst,
                              reshard_comm_t *comm, int rank, int world, double timeout,
                              uint64_t *verified)
{
    reshard_plan_params_t pp = {.field_mask =
                                    RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT,
                                .world_size = world,
                                .my_rank = rank,
                                .staging_bytes = 64 << 10,
                                .timeout_s = timeout};
    return rs_test_refit_once(src, dst, &pp, comm, rank, verified, NULL);
}

static int parse_point(const char *s)
{
    static const char *names[] = {"enter", "posted", "decided", "confirm", "confirmed"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bool args = argc == 6 || (argc == 7 && !strcmp(argv[6], "kill"));
    int point = args ? parse_point(argv[4]) : -1;
    int outcome = args && !strcmp(argv[3], "outcome");
    g_kill = argc == 7;
    if (!args || size != 5 || point < 0 || (!outcome && strcmp(argv[3], "preflight"))) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: mpirun -np 5 %s CONFIG VICTIM preflight|outcome "
                    "enter|posted|decided|confirm|confirmed TIMEOUT_S [kill]\n",
                    argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int victim = atoi(argv[2]);
    double timeout = atof(argv[5]);
    int pids[5], me = (int)getpid();
    MPI_Allgather(&me, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);

    reshard_model_t *model = NULL;
    reshard_model_refit_t r = {0};
    reshard_status_t st = rs_test_model_refit(argv[1], "tp=1,dp=2", "tp=1,dp=3", &model, &r);
    if (st != RESHARD_OK)
        die(rank, "model", st);
    reshard_comm_t *comm = NULL;
    st = reshard_comm_create_mpi(MPI_COMM_WORLD, &comm);
    if (st != RESHARD_OK)
        die(rank, "comm", st);

    /* refit 1 (agreements 0 and 1): everyone */
    uint64_t v = 0;
    st = refit(r.train, r.infer, comm, rank, size, timeout, &v);
    if (st != RESHARD_OK)
        die(rank, "refit 1", st);

    /* refit 2 (agreements 2 and 3): the victim stops at the point */
    if (rank == victim) {
        g_stop_epoch = outcome ? 3 : 2;
        g_stop_point = (rs_mpi_agree_point_t)point;
        rs_mpi_agree_hook = stop_here;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    reshard_status_t st2 = refit(r.train, r.infer, comm, rank, size, timeout, &v);
    char msg2[1024];
    snprintf(msg2, sizeof msg2, "%s", reshard_last_error());
    if (rank == victim) { /* resumed only if the point was never reached: a test error */
        fprintf(stderr, "rank %d: the victim never stopped (%s)\n", rank,
                reshard_status_string(st2));
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    fprintf(stderr, "rank %d: refit 2: %s%s%s\n", rank, reshard_status_string(st2),
            st2 != RESHARD_OK ? ": " : "", st2 != RESHARD_OK ? msg2 : "");
    if (st2 == RESHARD_OK) { /* the loss shows in the next refit */
        st = refit(r.train, r.infer, comm, rank, size, timeout, &v);
        if (st == RESHARD_OK)
            die(rank, "a refit without the victim succeeded", RESHARD_ERR_VERIFY);
        fprintf(stderr, "rank %d: refit 3: %s: %s\n", rank, reshard_status_string(st),
                reshard_last_error());
    }
    double entered = now_s();
    int32_t gone[5], n_gone = 0;
    st = reshard_comm_agree_gone(comm, timeout / 4, gone, 5, &n_gone);
    if (st != RESHARD_OK)
        die(rank, "agree", st);
    if (n_gone != 1 || gone[0] != victim) {
        fprintf(stderr, "rank %d: agreed on %d lost ranks, first %d; want only %d\n", rank, n_gone,
                n_gone ? gone[0] : -1, victim);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    reshard_comm_t *next = NULL;
    st = reshard_comm_shrink_mpi(comm, gone, n_gone, &next);
    if (st != RESHARD_OK)
        die(rank, "shrink", st);
    reshard_layout_t *s = NULL, *d = NULL;
    uint64_t v3 = 0;
    st = reshard_membership_layouts(r.train, r.infer, gone, n_gone, &s, &d);
    if (st == RESHARD_OK)
        st = refit(s, d, next, rank, size, timeout, &v3);
    if (st != RESHARD_OK)
        die(rank, "refit after shrink", st);

    /* the survivors compare their verdicts of refit 2 and their entry times */
    MPI_Group wg, sg;
    MPI_Comm surv;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_excl(wg, 1, &victim, &sg);
    MPI_Comm_create_group(MPI_COMM_WORLD, sg, 7, &surv);
    int verdict = st2 == RESHARD_OK, lo = 0, hi = 0;
    double t[2] = {entered, -entered}, tm[2];
    unsigned long long mine = v3, total = 0;
    MPI_Allreduce(&verdict, &lo, 1, MPI_INT, MPI_MIN, surv);
    MPI_Allreduce(&verdict, &hi, 1, MPI_INT, MPI_MAX, surv);
    MPI_Allreduce(t, tm, 2, MPI_DOUBLE, MPI_MIN, surv);
    MPI_Allreduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, surv);
    int srank;
    MPI_Comm_rank(surv, &srank);
    if (lo != hi) {
        fprintf(stderr, "rank %d: ATOMIC FAIL: survivors differ on refit 2 (this rank: %s)\n", rank,
                reshard_status_string(st2));
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    if (srank == 0) {
        printf("ATOMIC OK: victim %d %s at %s/%s: every survivor returned %s from refit 2; "
               "they entered the recovery within %.3f s of each other; refit after the shrink "
               "verified %llu bytes\n",
               victim, g_kill ? "killed" : "stopped", argv[3], argv[4], lo ? "OK" : "an error",
               -tm[1] - tm[0], total);
        fflush(stdout);
        kill((pid_t)pids[victim], SIGKILL);
    }
    MPI_Barrier(surv);
    fflush(stdout);
    fflush(stderr);
    _exit(0);
}
