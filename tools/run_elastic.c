/*
 * reshard run --lose-rank R: the elastic-refit demonstration under MPI.
 *
 *   mpirun -np N reshard run --model M --train SPEC --infer SPEC --lose-rank R
 *          [--lose-at I] [--lose-how stop|kill] [--iters K] [--timeout S] [--layers L]
 *          [--agree-timeout S] [--staging-mb B] [--respawn] [--json]
 *
 * Refits run every iteration as in `reshard run` (MPI transport, host memory). In refit I
 * rank R stops answering while the others are in the refit (SIGSTOP; with kill, SIGKILL,
 * which needs `mpirun --enable-recovery` under Open MPI 4.1). The others see the refit
 * fail (TIMEOUT), agree that R is gone (reshard_comm_agree_gone), build a communicator
 * without it (reshard_comm_shrink_mpi), replan for the membership
 * (reshard_membership_layouts), redo refit I and go on; every refit of every survivor is
 * verified element by element. The lowest surviving rank reports the recovery time:
 * detect (the failed refit), agree, shrink, replan. At the end a stopped rank is resumed
 * (SIGCONT) so that the job can end normally.
 *
 * Exit status: 0 when every survivor verified every refit; 1 otherwise (a rank whose loss
 * leaves an element without any replica ends with UNCOVERED on every survivor; a failed
 * agreement or shrink ends the job with MPI_Abort, since the ranks may then disagree on
 * who is left); 2 on bad usage. --timeout must exceed a refit's longest wait: a refit that
 * is merely slow is taken for a lost rank.
 */
#ifdef RESHARD_HAVE_MPI

#include <jansson.h>
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "cli.h"
#include "reshard/reshard_elastic.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"

typedef struct {
    const char *model, *train, *infer, *how;
    long layers, iters, lose_rank, lose_at;
    double timeout_s, agree_s, staging_mb;
    int json;
} el_args_t;

static int parse(int rank, int argc, char **argv, el_args_t *a)
{
    *a = (el_args_t){.how = "stop",
                     .iters = 4,
                     .lose_at = 2,
                     .timeout_s = 2,
                     .agree_s = RESHARD_AGREE_GONE_TIMEOUT_S,
                     .staging_mb = 1};
    const cli_opt_t opts[] = {{"--model", CLI_STRING, &a->model, 0, 0},
                              {"--train", CLI_STRING, &a->train, 0, 0},
                              {"--infer", CLI_STRING, &a->infer, 0, 0},
                              {"--lose-how", CLI_STRING, &a->how, 0, 0},
                              {"--json", CLI_FLAG, &a->json, 0, 0},
                              {"--layers", CLI_INT, &a->layers, 1, 0},
                              {"--iters", CLI_INT, &a->iters, 1, 0},
                              {"--lose-rank", CLI_INT, &a->lose_rank, 0, 0},
                              {"--lose-at", CLI_INT, &a->lose_at, 1, 0},
                              {"--staging-mb", CLI_NUMBER, &a->staging_mb, STAGING_MB_MIN, 1 << 20},
                              {"--timeout", CLI_NUMBER, &a->timeout_s, 0.001, 1e9},
                              {"--agree-timeout", CLI_NUMBER, &a->agree_s, 0.001, 1e9}};
    char err[512] = "";
    int rc = cli_parse(argc, argv, opts, sizeof opts / sizeof *opts, err, sizeof err);
    if (rc == 0 && (!a->model || !a->train || !a->infer))
        snprintf(err, sizeof err, "--model, --train and --infer are required"), rc = 2;
    if (rc == 0 && strcmp(a->how, "stop") && strcmp(a->how, "kill"))
        snprintf(err, sizeof err, "--lose-how: '%s' is not stop or kill", a->how), rc = 2;
    if (rc == 0 && a->lose_at > a->iters)
        snprintf(err, sizeof err, "--lose-at %ld is after the last refit (--iters %ld)", a->lose_at,
                 a->iters),
            rc = 2;
    if (rc == 2 && rank == 0)
        fprintf(stderr, "reshard run: %s\n", err);
    return rc;
}

/* ---- buffers ------------------------------------------------------------------------ */

typedef struct {
    int32_t n;
    reshard_buffer_t *b;
} el_bufs_t;

/* This rank's buffers of @p l: declared ones at their declared size. */
static reshard_status_t bufs_make(const reshard_layout_t *l, int32_t rank, el_bufs_t *out)
{
    out->n = reshard_layout_buffer_count(l, rank);
    out->b = calloc((size_t)out->n + 1, sizeof *out->b);
    if (!out->b)
        return RESHARD_ERR_NOMEM;
    for (int32_t i = 0; i < out->n; i++) {
        reshard_buffer_info_t info;
        out->b[i].bytes = reshard_layout_declared_buffer(l, rank, i, &info) == RESHARD_OK
                              ? info.bytes
                              : reshard_layout_buffer_bytes(l, rank, i);
        out->b[i].ptr = malloc(out->b[i].bytes ? (size_t)out->b[i].bytes : 1);
        if (!out->b[i].ptr)
            return RESHARD_ERR_NOMEM;
    }
    return RESHARD_OK;
}

static void bufs_drop(el_bufs_t *b)
{
    for (int32_t i = 0; b->b && i < b->n; i++)
        free(b->b[i].ptr);
    free(b->b);
    b->b = NULL;
    b->n = 0;
}

/* ---- one refit ---------------------------------------------------------------------- */

typedef struct {
    const el_args_t *a;
    int rank, size;
    const reshard_layout_t *src, *dst; /* of the current membership */
    reshard_plan_t *plan;
    reshard_comm_t *comm;
    el_bufs_t sb, db;
} el_run_t;

static reshard_status_t replan(el_run_t *r, double *seconds)
{
    reshard_plan_params_t p = {.field_mask =
                                   RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT,
                               .world_size = r->size,
                               .my_rank = r->rank,
                               .staging_bytes = (uint64_t)(r->a->staging_mb * (1 << 20)),
                               .timeout_s = r->a->timeout_s};
    reshard_plan_destroy(r->plan);
    r->plan = NULL;
    double t0 = MPI_Wtime();
    reshard_status_t st = reshard_plan_create(r->src, r->dst, &p, &r->plan);
    *seconds = MPI_Wtime() - t0;
    return st;
}

static reshard_status_t refit(el_run_t *r, uint64_t *verified)
{
    for (int32_t i = 0; i < r->db.n; i++)
        memset(r->db.b[i].ptr, RESHARD_SENTINEL_BYTE, (size_t)r->db.b[i].bytes);
    reshard_status_t st =
        reshard_plan_execute(r->plan, r->comm, r->sb.b, r->sb.n, r->db.b, r->db.n, NULL);
    *verified = 0;
    if (st == RESHARD_OK && r->db.n > 0)
        st = reshard_verify_pattern(r->dst, r->rank, r->db.b, r->db.n, verified);
    return st;
}

/* What the lowest survivor reports. */
typedef struct {
    double detect, agree, shrink, replan;
} el_times_t;

static void report(const el_args_t *a, int size, bool ok, long refits, uint64_t verified,
                   const el_times_t *t, const int32_t *gone, int32_t n_gone)
{
    double total = t->detect + t->agree + t->shrink + t->replan;
    if (!a->json) {
        printf("reshard run --lose-rank %ld: rank %ld %s in refit %ld of %ld\n", a->lose_rank,
               a->lose_rank, !strcmp(a->how, "kill") ? "killed" : "stopped", a->lose_at, a->iters);
        printf("  agreed lost rank(s):");
        for (int32_t i = 0; i < n_gone; i++)
            printf(" %d", (int)gone[i]);
        printf("\n  recovery %.3f s = detect %.3f s + agree %.3f s + shrink %.4f s + replan "
               "%.4f s (timeout %.3g s)\n",
               total, t->detect, t->agree, t->shrink, t->replan, a->timeout_s);
        printf("  %ld refits on %d survivors verified, %llu bytes\n", refits, size - n_gone,
               (unsigned long long)verified);
        printf("%s\n", ok ? "OK: every destination element of every survivor verified"
                          : "FAILED: a survivor did not verify");
        fflush(stdout);
        return;
    }
    json_t *lost = json_array();
    for (int32_t i = 0; i < n_gone; i++)
        json_array_append_new(lost, json_integer(gone[i]));
    json_t *o = json_pack("{s:b, s:i, s:i, s:o, s:i, s:I, s:f, s:{s:f, s:f, s:f, s:f}}", "ok", ok,
                          "lost_rank", (int)a->lose_rank, "lost_at", (int)a->lose_at, "agreed_lost",
                          lost, "survivors", size - n_gone, "verified_bytes", (json_int_t)verified,
                          "recovery_seconds", total, "recovery", "detect_s", t->detect, "agree_s",
                          t->agree, "shrink_s", t->shrink, "replan_s", t->replan);
    char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(o);
    fflush(stdout);
}

static int elastic(const el_args_t *a, int rank, int size)
{
    reshard_model_t *model = NULL;
    reshard_model_refit_t f = {0};
    reshard_model_options_t mo;
    memset(&mo, 0, sizeof mo);
    mo.layers = (int32_t)a->layers;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_status_t st = reshard_model_load(a->model, &mo, &model);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse(a->train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(a->infer, &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(model, &ts, &is, &f);
    if (st == RESHARD_OK && f.train_world + f.infer_world != size)
        st = RESHARD_ERR_CONFIG;
    if (st != RESHARD_OK || a->lose_rank >= size) {
        if (rank == 0)
            fprintf(stderr, "reshard run: %s (world size %d, --lose-rank %ld)\n",
                    st != RESHARD_OK ? reshard_last_error() : "bad --lose-rank", size,
                    a->lose_rank);
        reshard_model_refit_destroy(&f);
        reshard_model_destroy(model);
        return 2;
    }
    int pid = (int)getpid(), victim_pid = 0;
    MPI_Allreduce(rank == a->lose_rank ? &pid : &victim_pid, &victim_pid, 1, MPI_INT, MPI_MAX,
                  MPI_COMM_WORLD);
    el_run_t r = {.a = a, .rank = rank, .size = size, .src = f.train, .dst = f.infer};
    reshard_layout_t *msrc = NULL, *mdst = NULL;
    el_times_t t = {0};
    int32_t gone[64], n_gone = 0;
    uint64_t verified = 0;
    long refits = 0;
    double dummy;
    st = reshard_comm_create_mpi(MPI_COMM_WORLD, &r.comm);
    if (st == RESHARD_OK)
        st = replan(&r, &dummy);
    if (st == RESHARD_OK)
        st = bufs_make(f.train, rank, &r.sb);
    if (st == RESHARD_OK)
        st = bufs_make(f.infer, rank, &r.db);
    if (st == RESHARD_OK && r.sb.n)
        st = reshard_fill_pattern(f.train, rank, r.sb.b, r.sb.n);
    bool lost = false;
    for (long it = 1; st == RESHARD_OK && it <= a->iters && !lost; it++) {
        if (it == a->lose_at && rank == a->lose_rank) {
            /* the others are inside refit `it` and wait for this rank */
            bool kill_it = !strcmp(a->how, "kill");
            fprintf(stderr, "rank %d: lost on purpose (%s) in refit %ld\n", rank,
                    kill_it ? "SIGKILL" : "SIGSTOP", it);
            fflush(stderr);
            raise(kill_it ? SIGKILL : SIGSTOP);
            lost = true; /* resumed after the survivors finished: leave */
            break;
        }
        double t0 = MPI_Wtime();
        uint64_t v = 0;
        st = refit(&r, &v);
        if ((st == RESHARD_ERR_TIMEOUT || st == RESHARD_ERR_TRANSPORT) && n_gone == 0) {
            double t1 = MPI_Wtime();
            fprintf(stderr, "rank %d: refit %ld failed after %.2f s, recovering: %s\n", rank, it,
                    t1 - t0, reshard_last_error());
            reshard_comm_t *next = NULL;
            st = reshard_comm_agree_gone(r.comm, a->agree_s, gone, 64, &n_gone);
            double t2 = MPI_Wtime();
            if (st == RESHARD_OK)
                st = reshard_comm_shrink_mpi(r.comm, gone, n_gone, &next);
            double t3 = MPI_Wtime();
            if (st == RESHARD_OK) {
                reshard_comm_destroy(r.comm);
                r.comm = next;
                st = reshard_membership_layouts(f.train, f.infer, gone, n_gone, &msrc, &mdst);
            }
            if (st == RESHARD_OK) {
                r.src = msrc;
                r.dst = mdst;
                st = replan(&r, &t.replan);
            }
            t.detect = t1 - t0;
            t.agree = t2 - t1;
            t.shrink = t3 - t2;
            if (!next) { /* no agreement or no comm: the ranks may now disagree on who is
                          * left, and any collective among them could hang */
                fprintf(stderr, "rank %d: recovery failed: %s: %s\n", rank,
                        reshard_status_string(st), reshard_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if (st == RESHARD_OK)
                st = refit(&r, &v); /* refit `it` again, on the survivors */
        }
        if (st == RESHARD_OK) {
            verified += v;
            refits++;
        } else {
            fprintf(stderr, "rank %d: refit %ld: %s: %s\n", rank, it, reshard_status_string(st),
                    reshard_last_error());
        }
    }
    int rc = st == RESHARD_OK ? 0 : 1;
    if (!lost) {
        /* the survivors' totals, over a communicator of their own */
        MPI_Group wg, sg;
        MPI_Comm surv = MPI_COMM_NULL;
        int excl[64];
        for (int32_t i = 0; i < n_gone; i++)
            excl[i] = gone[i];
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Group_excl(wg, n_gone, excl, &sg);
        MPI_Comm_create_group(MPI_COMM_WORLD, sg, 77, &surv);
        unsigned long long mine = verified, all = 0;
        int worst = rc;
        el_times_t tmax;
        MPI_Reduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, surv);
        MPI_Reduce(&rc, &worst, 1, MPI_INT, MPI_MAX, 0, surv);
        MPI_Reduce(&t, &tmax, 4, MPI_DOUBLE, MPI_MAX, 0, surv);
        int srank;
        MPI_Comm_rank(surv, &srank);
        if (srank == 0) {
            report(a, size, worst == 0 && n_gone > 0, refits, all, &tmax, gone, n_gone);
            if (n_gone == 0)
                fprintf(stderr, "reshard run: rank %ld was never found lost\n", a->lose_rank);
            if (strcmp(a->how, "kill") && victim_pid > 0)
                kill((pid_t)victim_pid, SIGCONT); /* let it end with the job */
        }
        MPI_Bcast(&worst, 1, MPI_INT, 0, surv);
        rc = worst != 0 || n_gone == 0 ? 1 : 0;
        MPI_Comm_free(&surv);
        MPI_Group_free(&sg);
        MPI_Group_free(&wg);
    }
    bufs_drop(&r.sb);
    bufs_drop(&r.db);
    reshard_plan_destroy(r.plan);
    reshard_comm_destroy(r.comm);
    reshard_layout_destroy(msrc);
    reshard_layout_destroy(mdst);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(model);
    return rc;
}

int cmd_run_elastic(int rank, int size, int finalize, int argc, char **argv)
{
    el_args_t a;
    int rc = parse(rank, argc, argv, &a);
    if (rc == 0)
        rc = elastic(&a, rank, size);
    else if (rc == 1)
        rc = 0;
    if (finalize && !(rc == 0 && !strcmp(a.how, "kill")))
        MPI_Finalize(); /* with a killed rank, Finalize would wait for it */
    return rc;
}

#endif /* RESHARD_HAVE_MPI */
