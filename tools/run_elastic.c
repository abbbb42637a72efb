/*
 * reshard run --lose-rank R[,R2...]: the elastic-refit demonstration under MPI.
 *
 *   mpirun -np N reshard run --model M --train SPEC --infer SPEC --lose-rank R[,R2...]
 *          [--lose-at I[,I2...]] [--lose-how stop|kill|resume] [--iters K] [--timeout S]
 *          [--layers L] [--agree-timeout S] [--staging-mb B] [--relay-mb B]
 *          [--domain-size D] [--respawn] [--json] [--result-file F]
 *
 * Refits run every iteration as in `reshard run` (MPI transport, host memory). In refit I
 * rank R stops answering while the others are in the refit (SIGSTOP; with kill, SIGKILL,
 * which needs `mpirun --enable-recovery` under Open MPI 4.1); a list loses each rank in its
 * refit (one --lose-at for all, or one each). The others see the refit fail (TIMEOUT),
 * agree who is gone (reshard_comm_agree_gone), build a communicator without them
 * (reshard_comm_shrink_mpi), replan for the membership (reshard_membership_layouts), redo
 * the refit and go on; a later loss is recovered from the same way on the survivors' comm.
 * Every refit of every survivor is verified element by element. The lowest surviving rank
 * reports the last recovery's time: detect (the failed refit), agree (2 x --agree-timeout
 * plus a round trip), shrink, replan. With --respawn the survivors then start a new
 * process of this command (MPI_Comm_spawn over their communicator), which takes rank R's
 * place (reshard_comm_grow_mpi / reshard_comm_join_mpi); everyone replans for the whole
 * world and refits I+1..K include it: its fresh buffers are refit completely and verified.
 * At the end the stopped ranks are resumed (SIGCONT) so that the job can end: one lost on
 * purpose leaves. One stopped from outside and resumed (--lose-how resume shows it: the
 * lowest survivor resumes it right after the recovery, while the survivors refit on) goes
 * on unaware, its refit fails, and the agreement tells it that it was counted lost
 * (reshard_comm_agree_gone: TRANSPORT, its gone set holds this rank): it leaves without
 * touching the survivors. Without ULFM that is all it can do: no MPI_Abort (it would end
 * the survivors too), no exit before MPI_Finalize (mpirun would end the job); it calls
 * MPI_Finalize, which returns when the survivors finalize, and exits with status 0 (the
 * job's outcome is the survivors' report).
 *
 * Defaults (--timeout 5, --agree-timeout 0.5, --iters 4, --lose-at 2, --staging-mb 1) hold
 * on a loaded host; --timeout must exceed a refit's longest wait and a live rank must run
 * within --agree-timeout, or it is taken for a lost one.
 *
 * --result-file F: the reporting survivor writes the outcome to F as one JSON line,
 * {"ok": true|false, "exit_status": 0|1} (F is removed at the start; no file afterwards
 * means the job ended without a report: failed). Use it (or --json's "ok") with
 * --lose-how kill: under `mpirun --enable-recovery` mpirun exits 0 whatever the ranks
 * return.
 *
 * Exit status: 0 when every survivor verified every refit and the refits after the loss
 * moved bytes; 1 otherwise (a rank whose loss leaves an element without any replica ends
 * with UNCOVERED on every survivor; losing every inference rank refits nothing; a failed
 * agreement or shrink, or a refit that still fails, ends the job with MPI_Abort, since the
 * ranks may then disagree on who is left); 2 on bad usage.
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

/* Defaults that hold on a loaded host (a live rank must run within --agree-timeout and a
 * refit's longest wait must fit in --timeout, or a live rank is taken for a lost one). */
#define EL_TIMEOUT_S 5.0
#define EL_AGREE_S 0.5

#define EL_MAX_LOST 8

typedef struct {
    const char *model, *train, *infer, *how, *lose_list, *at_list, *result_file;
    long layers, iters, domain_size;
    int n_lose;                  /* ranks lost on purpose, one after another */
    long lose_rank[EL_MAX_LOST]; /* lose_rank[0]: the one --respawn replaces */
    long lose_at[EL_MAX_LOST];   /* refit in which each stops */
    double timeout_s, agree_s, staging_mb, relay_mb;
    int json, respawn;
} el_args_t;

/* "A,B,..." of at most EL_MAX_LOST integers >= @p lo into @p v; the count, or -1. */
static int int_list(const char *s, long lo, long *v)
{
    int n = 0;
    while (s && *s && n < EL_MAX_LOST) {
        char *end = NULL;
        long x = strtol(s, &end, 10);
        if (end == s || x < lo || (*end && *end != ','))
            return -1;
        v[n++] = x;
        s = *end ? end + 1 : end;
    }
    return s && *s == 0 && n > 0 ? n : -1;
}

/* The lists of --lose-rank and --lose-at (one refit for all, or one per rank). */
static int lose_lists(el_args_t *a, char *err, size_t cap)
{
    a->n_lose = int_list(a->lose_list, 0, a->lose_rank);
    if (a->n_lose < 0) {
        snprintf(err, cap, "--lose-rank '%s': need a rank or a list R1,R2,... of at most %d",
                 a->lose_list ? a->lose_list : "", EL_MAX_LOST);
        return 2;
    }
    int n_at = a->at_list ? int_list(a->at_list, 1, a->lose_at) : 1;
    if (!a->at_list)
        a->lose_at[0] = 2;
    if (n_at != 1 && n_at != a->n_lose) {
        snprintf(err, cap, "--lose-at '%s': need one refit (>= 1) or one per lost rank (%d)",
                 a->at_list, a->n_lose);
        return 2;
    }
    for (int i = 0; i < a->n_lose; i++) {
        a->lose_at[i] = a->lose_at[n_at == 1 ? 0 : i];
        for (int j = 0; j < i; j++)
            if (a->lose_rank[j] == a->lose_rank[i]) {
                snprintf(err, cap, "--lose-rank: rank %ld is given twice", a->lose_rank[i]);
                return 2;
            }
        if (a->lose_at[i] > a->iters) {
            snprintf(err, cap, "--lose-at %ld is after the last refit (--iters %ld)", a->lose_at[i],
                     a->iters);
            return 2;
        }
    }
    return 0;
}

static int parse(int rank, int argc, char **argv, el_args_t *a)
{
    *a = (el_args_t){.how = "stop",
                     .iters = 4,
                     .domain_size = 1,
                     .timeout_s = EL_TIMEOUT_S,
                     .agree_s = EL_AGREE_S,
                     .staging_mb = 1,
                     .relay_mb = -1};
    const cli_opt_t opts[] = {{"--model", CLI_STRING, &a->model, 0, 0},
                              {"--train", CLI_STRING, &a->train, 0, 0},
                              {"--infer", CLI_STRING, &a->infer, 0, 0},
                              {"--lose-how", CLI_STRING, &a->how, 0, 0},
                              {"--result-file", CLI_STRING, &a->result_file, 0, 0},
                              {"--json", CLI_FLAG, &a->json, 0, 0},
                              {"--respawn", CLI_FLAG, &a->respawn, 0, 0},
                              {"--layers", CLI_INT, &a->layers, 1, 0},
                              {"--iters", CLI_INT, &a->iters, 1, 0},
                              {"--domain-size", CLI_INT, &a->domain_size, 1, 0},
                              {"--lose-rank", CLI_STRING, &a->lose_list, 0, 0},
                              {"--lose-at", CLI_STRING, &a->at_list, 0, 0},
                              {"--staging-mb", CLI_NUMBER, &a->staging_mb, STAGING_MB_MIN, 1 << 20},
                              {"--relay-mb", CLI_NUMBER, &a->relay_mb, 0, 1 << 30},
                              {"--timeout", CLI_NUMBER, &a->timeout_s, 0.001, 1e9},
                              {"--agree-timeout", CLI_NUMBER, &a->agree_s, 0.001, 1e9}};
    char err[512] = "";
    int seen = 0;
    static const char *const plain_only[] = {
        "--system", "--transport",      "--baseline",       "--raw",
        "--dtype",  "--infer-dtype",    "--fp8-scale",      "--mtp",
        "--delta",  "--delta-checksum", "--change-fraction"};
    for (int i = 1; i < argc; i++) {
        seen += !strcmp(argv[i], "--lose-rank") || !strncmp(argv[i], "--lose-rank=", 12);
        for (size_t k = 0; k < sizeof plain_only / sizeof *plain_only; k++)
            if (!strcmp(argv[i], plain_only[k]) && rank == 0) {
                fprintf(stderr,
                        "reshard run: %s is not supported with --lose-rank (the elastic "
                        "demonstration refits bf16 weights densely over MPI in host memory; "
                        "--domain-size and --relay-mb are; a rank lost mid-delta is "
                        "test_delta_rank_lost_mid_delta, docs/delta-reference.md)\n",
                        argv[i]);
                return 2;
            }
    }
    int rc = cli_parse(argc, argv, opts, sizeof opts / sizeof *opts, err, sizeof err);
    if (rc == 0 && seen == 0)
        snprintf(err, sizeof err,
                 "--respawn, --lose-at, --lose-how and --agree-timeout need --lose-rank R"),
            rc = 2;
    if (rc == 0 && seen > 1)
        snprintf(err, sizeof err,
                 "--lose-rank is given %d times: give one list instead (--lose-rank 4,5)", seen),
            rc = 2;
    if (rc == 0 && (!a->model || !a->train || !a->infer))
        snprintf(err, sizeof err, "--model, --train and --infer are required"), rc = 2;
    if (rc == 0 && strcmp(a->how, "stop") && strcmp(a->how, "kill") && strcmp(a->how, "resume"))
        snprintf(err, sizeof err, "--lose-how: '%s' is not stop, kill or resume", a->how), rc = 2;
    if (rc == 0)
        rc = lose_lists(a, err, sizeof err);
    if (rc == 0 && a->respawn && a->lose_at[0] >= a->iters)
        snprintf(err, sizeof err,
                 "--respawn needs a refit after the loss (--lose-at %ld < --iters %ld)",
                 a->lose_at[0], a->iters),
            rc = 2;
    if (rc == 0 && a->respawn && a->n_lose > 1)
        snprintf(err, sizeof err, "--respawn replaces one lost rank: give one --lose-rank"), rc = 2;
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
    bool excluded; /* the survivors counted this rank lost and went on without it */
} el_run_t;

/* Free a run's buffers, plan and comm. */
static void run_free(el_run_t *r)
{
    bufs_drop(&r->sb);
    bufs_drop(&r->db);
    reshard_plan_destroy(r->plan);
    reshard_comm_destroy(r->comm);
    r->plan = NULL;
    r->comm = NULL;
}

static reshard_status_t replan(el_run_t *r, double *seconds)
{
    reshard_plan_params_t p = {.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES |
                                             RESHARD_PLAN_PARAM_TIMEOUT |
                                             RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                               .world_size = r->size,
                               .my_rank = r->rank,
                               .staging_bytes = (uint64_t)(r->a->staging_mb * (1 << 20)),
                               .domain_size = (int32_t)r->a->domain_size,
                               .timeout_s = r->a->timeout_s};
    if (r->a->relay_mb >= 0) {
        p.field_mask |= RESHARD_PLAN_PARAM_RELAY_BYTES;
        p.relay_bytes = (uint64_t)(r->a->relay_mb * 1048576.0);
    }
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

/* What the lowest survivor reports (the maxima over the team). */
typedef struct {
    double detect, agree, shrink, replan, join;
} el_times_t;

/* Sums and maxima over the team that finished: survivors (and the new process). */
typedef struct {
    unsigned long long verified, joined_verified;
    unsigned long long verified_after;     /* in the refits after the first loss */
    long refits, joined_refits, uncovered; /* survivors that ended with UNCOVERED */
    long recoveries;
    el_times_t t; /* of the last recovery */
} el_totals_t;

/* "R in refit I, ..." of the ranks lost on purpose. */
static void print_losses(const el_args_t *a)
{
    for (int i = 0; i < a->n_lose; i++)
        printf("%s rank %ld %s in refit %ld", i ? "," : "", a->lose_rank[i],
               !strcmp(a->how, "kill") ? "killed" : "stopped", a->lose_at[i]);
}

static void report(const el_args_t *a, int size, bool ok, const el_totals_t *s, const int32_t *gone,
                   int32_t n_gone, const char *why)
{
    const el_times_t *t = &s->t;
    double total = t->detect + t->agree + t->shrink + t->replan;
    bool moved = s->verified_after > 0; /* losing every inference rank refits nothing */
    bool joined = a->respawn && s->joined_refits > 0; /* a new process ran refits */
    if (!a->json) {
        printf("reshard run --lose-rank %s:", a->lose_list);
        print_losses(a);
        printf(" of %ld\n  agreed lost rank(s):", a->iters);
        for (int32_t i = 0; i < n_gone; i++)
            printf(" %d", (int)gone[i]);
        printf("\n  recovery%s %.3f s = detect %.3f s + agree %.3f s + shrink %.4f s + replan "
               "%.4f s (timeout %.3g s, agreement timeout %.3g s)\n",
               s->recoveries > 1 ? " (the last of them)" : "", total, t->detect, t->agree,
               t->shrink, t->replan, a->timeout_s, a->agree_s);
        printf("  %ld recover%s; %ld refits on %d survivors verified, %llu bytes (%llu after the "
               "first loss)\n",
               s->recoveries, s->recoveries == 1 ? "y" : "ies", s->refits, size - n_gone,
               s->verified, s->verified_after);
        if (s->uncovered)
            printf("  RESHARD_ERR_UNCOVERED on %ld of %d survivors: %s\n", s->uncovered,
                   size - n_gone, why);
        if (ok && !moved)
            printf("  no surviving inference rank: the refits after the loss moved nothing\n");
        if (joined)
            printf("  respawned rank %ld: a new process joined in %.3f s (spawn, grow, replan); "
                   "its %ld refits verified %llu destination bytes, the first one complete\n",
                   a->lose_rank[0], t->join, s->joined_refits, s->joined_verified);
        printf("%s\n", ok && moved ? (a->respawn ? "OK: every destination element of every "
                                                   "survivor and of the new process verified"
                                                 : "OK: every destination element of every "
                                                   "survivor verified")
                                   : "FAILED: a survivor did not verify, or nothing was refit");
        fflush(stdout);
        return;
    }
    json_t *lost = json_array(), *meant = json_array();
    for (int32_t i = 0; i < n_gone; i++)
        json_array_append_new(lost, json_integer(gone[i]));
    for (int i = 0; i < a->n_lose; i++)
        json_array_append_new(meant, json_integer(a->lose_rank[i]));
    json_t *o = json_pack(
        "{s:b, s:i, s:o, s:i, s:o, s:i, s:i, s:I, s:I, s:f, s:{s:f, s:f, s:f, s:f}}", "ok",
        ok && moved, "lost_rank", (int)a->lose_rank[0], "lost_ranks", meant, "lost_at",
        (int)a->lose_at[0], "agreed_lost", lost, "survivors", size - n_gone, "recoveries",
        (int)s->recoveries, "verified_bytes", (json_int_t)s->verified, "verified_bytes_after_loss",
        (json_int_t)s->verified_after, "recovery_seconds", total, "recovery", "detect_s", t->detect,
        "agree_s", t->agree, "shrink_s", t->shrink, "replan_s", t->replan);
    if (o && joined)
        json_object_set_new(o, "respawn",
                            json_pack("{s:f, s:i, s:I}", "join_s", t->join, "refits",
                                      (int)s->joined_refits, "verified_bytes",
                                      (json_int_t)s->joined_verified));
    char *str = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    if (str)
        printf("%s\n", str);
    free(str);
    json_decref(o);
    fflush(stdout);
}

/* The model's layouts for the run; exit status 2 (rank 0 says why) when they cannot be
 * made or do not fit @p size ranks. */
static int setup(const el_args_t *a, int rank, int size, reshard_model_t **model,
                 reshard_model_refit_t *f)
{
    reshard_model_options_t mo;
    memset(&mo, 0, sizeof mo);
    mo.layers = (int32_t)a->layers;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_status_t st = reshard_model_load(a->model, &mo, model);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse(a->train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(a->infer, &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(*model, &ts, &is, f);
    char why[512] = "";
    if (st != RESHARD_OK)
        snprintf(why, sizeof why, "%s", reshard_last_error());
    else if (f->train_world + f->infer_world != size)
        snprintf(why, sizeof why,
                 "--train %s --infer %s need a world of %d ranks (%d train + %d infer), not %d",
                 a->train, a->infer, (int)(f->train_world + f->infer_world), (int)f->train_world,
                 (int)f->infer_world, size);
    for (int i = 0; !why[0] && i < a->n_lose; i++)
        if (a->lose_rank[i] >= size)
            snprintf(why, sizeof why, "--lose-rank %ld is outside the world of %d ranks",
                     a->lose_rank[i], size);
    if (!why[0])
        return 0;
    if (rank == 0)
        fprintf(stderr, "reshard run: %s\n", why);
    return 2;
}

/* The team's totals (sums of bytes, maxima of counts and times) and its worst exit
 * status, on every member. Collective over @p team. */
static int team_totals(MPI_Comm team, int rc, const el_totals_t *mine, el_totals_t *all)
{
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, team);
    MPI_Allreduce(&mine->verified, &all->verified, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, team);
    MPI_Allreduce(&mine->joined_verified, &all->joined_verified, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                  team);
    MPI_Allreduce(&mine->verified_after, &all->verified_after, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                  team);
    MPI_Allreduce(&mine->refits, &all->refits, 1, MPI_LONG, MPI_MAX, team);
    MPI_Allreduce(&mine->recoveries, &all->recoveries, 1, MPI_LONG, MPI_MAX, team);
    MPI_Allreduce(&mine->joined_refits, &all->joined_refits, 1, MPI_LONG, MPI_MAX, team);
    MPI_Allreduce(&mine->uncovered, &all->uncovered, 1, MPI_LONG, MPI_SUM, team);
    MPI_Allreduce(&mine->t, &all->t, (int)(sizeof mine->t / sizeof(double)), MPI_DOUBLE, MPI_MAX,
                  team);
    return worst;
}

/* Buffers of this rank, sources filled with the pattern. */
static reshard_status_t bind(el_run_t *r, const reshard_model_refit_t *f)
{
    reshard_status_t st = bufs_make(f->train, r->rank, &r->sb);
    if (st == RESHARD_OK)
        st = bufs_make(f->infer, r->rank, &r->db);
    if (st == RESHARD_OK && r->sb.n)
        st = reshard_fill_pattern(f->train, r->rank, r->sb.b, r->sb.n);
    return st;
}

/* Refits @p first..iters on the current comm and plan, each verified. */
static reshard_status_t refits(el_run_t *r, long first, long *count, unsigned long long *verified)
{
    reshard_status_t st = RESHARD_OK;
    for (long it = first; st == RESHARD_OK && it <= r->a->iters; it++) {
        uint64_t v = 0;
        st = refit(r, &v);
        if (st != RESHARD_OK) {
            fprintf(stderr, "rank %d: refit %ld: %s: %s\n", r->rank, it, reshard_status_string(st),
                    reshard_last_error());
            break;
        }
        *verified += v;
        (*count)++;
    }
    return st;
}

/* --respawn, the survivors' side: spawn one process running this command, which takes
 * the lost rank's place (reshard_comm_grow_mpi); replan for the whole world again.
 * @p team receives a communicator of the survivors and the new process for the report. */
static reshard_status_t respawn(el_run_t *r, const reshard_model_refit_t *f, char **argv,
                                MPI_Comm *team)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return RESHARD_ERR_TRANSPORT;
    exe[n] = 0;
    MPI_Comm inter = MPI_COMM_NULL;
    int err = 0;
    int rc = MPI_Comm_spawn(exe, argv, 1, MPI_INFO_NULL, 0, reshard_comm_mpi_comm(r->comm), &inter,
                            &err);
    if (rc != MPI_SUCCESS || err != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: MPI_Comm_spawn failed (%d, %d)\n", r->rank, rc, err);
        return RESHARD_ERR_TRANSPORT;
    }
    int32_t joining = (int32_t)r->a->lose_rank[0];
    reshard_comm_t *grown = NULL;
    reshard_status_t st = reshard_comm_grow_mpi(r->comm, inter, &joining, 1, &grown);
    if (st == RESHARD_OK && MPI_Intercomm_merge(inter, 0, team) != MPI_SUCCESS)
        st = RESHARD_ERR_TRANSPORT;
    MPI_Comm_free(&inter);
    if (st != RESHARD_OK)
        return st;
    reshard_comm_destroy(r->comm);
    r->comm = grown;
    r->src = f->train; /* nobody is missing any more */
    r->dst = f->infer;
    double dummy;
    return replan(r, &dummy);
}

/* --respawn, the new process's side: join the survivors, take the lost rank's place
 * with fresh buffers and run the refits after the loss with them. */
static int newcomer(const el_args_t *a, MPI_Comm parent)
{
    reshard_model_t *model = NULL;
    reshard_model_refit_t f = {0};
    el_run_t r = {.a = a};
    MPI_Comm team = MPI_COMM_NULL;
    reshard_status_t st = reshard_comm_join_mpi(parent, &r.comm);
    if (st == RESHARD_OK && MPI_Intercomm_merge(parent, 1, &team) != MPI_SUCCESS)
        st = RESHARD_ERR_TRANSPORT;
    if (st != RESHARD_OK) {
        fprintf(stderr, "reshard run: the new process could not join: %s\n", reshard_last_error());
        MPI_Abort(parent, 1);
    }
    r.rank = reshard_comm_rank(r.comm);
    r.size = reshard_comm_size(r.comm);
    if (setup(a, r.rank, r.size, &model, &f) != 0)
        MPI_Abort(team, 2);
    r.src = f.train;
    r.dst = f.infer;
    double dummy;
    el_totals_t mine = {0}, all = {0};
    st = replan(&r, &dummy);
    if (st == RESHARD_OK)
        st = bind(&r, &f);
    if (st == RESHARD_OK)
        st = refits(&r, a->lose_at[0] + 1, &mine.joined_refits, &mine.joined_verified);
    fprintf(stderr, "rank %d (new process): %ld refits verified, %llu bytes: %s\n", r.rank,
            mine.joined_refits, mine.joined_verified, reshard_status_string(st));
    if (st == RESHARD_OK && r.db.n > 0 && mine.joined_verified == 0)
        st = RESHARD_ERR_VERIFY; /* a destination that got nothing */
    int worst = team_totals(team, st == RESHARD_OK ? 0 : 1, &mine, &all);
    MPI_Comm_free(&team);
    run_free(&r);
    reshard_model_refit_destroy(&f);
    reshard_model_destroy(model);
    return worst;
}

/* After a failed refit: agree, shrink, replan for the survivors. */
static reshard_status_t recover(el_run_t *r, const reshard_model_refit_t *f, el_times_t *t,
                                int32_t *gone, int32_t *n_gone, reshard_layout_t **msrc,
                                reshard_layout_t **mdst)
{
    double t1 = MPI_Wtime();
    reshard_comm_t *next = NULL;
    reshard_status_t st = reshard_comm_agree_gone(r->comm, r->a->agree_s, gone, 64, n_gone);
    double t2 = MPI_Wtime();
    if (st == RESHARD_OK)
        st = reshard_comm_shrink_mpi(r->comm, gone, *n_gone, &next);
    double t3 = MPI_Wtime();
    t->agree = t2 - t1;
    t->shrink = t3 - t2;
    bool me_gone = false;
    for (int32_t i = 0; st == RESHARD_ERR_TRANSPORT && i < *n_gone; i++)
        me_gone = me_gone || gone[i] == r->rank;
    if (me_gone) { /* excluded: the survivors' comm lacks this rank; leave them alone */
        fprintf(stderr,
                "rank %d: the survivors counted this rank lost and went on without it; "
                "leaving without touching them: %s\n",
                r->rank, reshard_last_error());
        r->excluded = true;
        *n_gone = 0;
        return st;
    }
    if (!next) { /* no agreement or no comm: the ranks may now disagree on who is left,
                  * and any collective among them could hang */
        fprintf(stderr, "rank %d: recovery failed, ending the job: %s: %s\n", r->rank,
                reshard_status_string(st), reshard_last_error());
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    reshard_comm_destroy(r->comm);
    r->comm = next;
    reshard_layout_t *s = NULL, *d = NULL; /* the gone set is cumulative */
    st = reshard_membership_layouts(f->train, f->infer, gone, *n_gone, &s, &d);
    if (st == RESHARD_OK) {
        r->src = s;
        r->dst = d;
        st = replan(r, &t->replan); /* the old plan goes first, then its layouts */
    }
    reshard_layout_destroy(*msrc);
    reshard_layout_destroy(*mdst);
    *msrc = s;
    *mdst = d;
    return st;
}

/* Whether rank @p rank stops in refit @p it on purpose. */
/* --lose-how resume: the lowest survivor resumes the stopped ranks right after the
 * recovery, while the survivors go on refitting: they find that they were excluded. */
static void resume_lost(const el_run_t *r, const int *pids, const int32_t *gone, int32_t n_gone)
{
    int inner = -1;
    MPI_Comm_rank(reshard_comm_mpi_comm(r->comm), &inner);
    if (inner != 0) /* members are in plan-rank order: 0 is the lowest survivor */
        return;
    for (int32_t i = 0; i < n_gone; i++)
        kill((pid_t)pids[gone[i]], SIGCONT);
}

static bool loses_now(const el_args_t *a, int rank, long it)
{
    for (int i = 0; i < a->n_lose; i++)
        if (a->lose_rank[i] == rank && a->lose_at[i] == it)
            return true;
    return false;
}

/* --result-file: the outcome as one JSON line, {"ok": B, "exit_status": N}, written by
 * the reporting survivor (to a temporary name, then renamed: never half a file). Under
 * `mpirun --enable-recovery` the exit status is mpirun's (0 whatever the ranks return),
 * so this file is the outcome; no file means the job ended without a report (failed). */
static void write_result(const el_args_t *a, bool ok, int rc)
{
    if (!a->result_file)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", a->result_file, (int)getpid());
    FILE *fp = fopen(tmp, "w");
    bool done =
        fp && fprintf(fp, "{\"ok\": %s, \"exit_status\": %d}\n", ok ? "true" : "false", rc) > 0;
    done = fp && fclose(fp) == 0 && done;
    if (!done || rename(tmp, a->result_file) != 0) {
        fprintf(stderr, "reshard run: cannot write --result-file %s\n", a->result_file);
        unlink(tmp);
    }
}

static int elastic(const el_args_t *a, int rank, int size, char **argv)
{
    reshard_model_t *model = NULL;
    reshard_model_refit_t f = {0};
    if (setup(a, rank, size, &model, &f) != 0) {
        reshard_model_refit_destroy(&f);
        reshard_model_destroy(model);
        return 2;
    }
    if (rank == 0 && a->result_file)
        unlink(a->result_file); /* no stale outcome: written again only by the reporter */
    int pid = (int)getpid();
    int *pids = malloc((size_t)size * sizeof *pids);
    if (!pids)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
    el_run_t r = {.a = a, .rank = rank, .size = size, .src = f.train, .dst = f.infer};
    reshard_layout_t *msrc = NULL, *mdst = NULL;
    el_totals_t mine = {0}, all = {0};
    int32_t gone[64], n_gone = 0;
    MPI_Comm team = MPI_COMM_NULL; /* the survivors and the new process, after --respawn */
    char why[1024] = "";           /* this rank's error */
    double dummy;
    reshard_status_t st = reshard_comm_create_mpi(MPI_COMM_WORLD, &r.comm);
    if (st == RESHARD_OK)
        st = replan(&r, &dummy);
    if (st == RESHARD_OK)
        st = bind(&r, &f);
    bool lost = false, respawned = false;
    for (long it = 1; st == RESHARD_OK && it <= a->iters && !lost; it++) {
        if (loses_now(a, rank, it)) {
            /* the others are inside refit `it` and wait for this rank */
            bool kill_it = !strcmp(a->how, "kill"), resume = !strcmp(a->how, "resume");
            fprintf(stderr, "rank %d: lost on purpose (%s) in refit %ld\n", rank,
                    kill_it ? "SIGKILL" : "SIGSTOP", it);
            fflush(stderr);
            raise(kill_it ? SIGKILL : SIGSTOP);
            if (resume) /* resumed while the survivors go on, as if stopped from outside */
                fprintf(stderr, "rank %d: resumed; going on as if nothing happened\n", rank);
            lost = !resume; /* else resumed after the survivors finished: leave */
            if (lost)
                break;
        }
        double t0 = MPI_Wtime();
        uint64_t v = 0;
        bool recovered = false;
        st = refit(&r, &v);
        /* every loss (one after another, too) is recovered from: agree, shrink, replan,
         * refit `it` again on the survivors; each step is bounded */
        while ((st == RESHARD_ERR_TIMEOUT || st == RESHARD_ERR_TRANSPORT) &&
               mine.recoveries < size) {
            mine.t.detect = MPI_Wtime() - t0;
            fprintf(stderr, "rank %d: refit %ld failed after %.2f s, recovering: %s\n", rank, it,
                    mine.t.detect, reshard_last_error());
            st = recover(&r, &f, &mine.t, gone, &n_gone, &msrc, &mdst);
            if (r.excluded)
                break;
            mine.recoveries++;
            if (st == RESHARD_OK && !strcmp(a->how, "resume"))
                resume_lost(&r, pids, gone, n_gone);
            recovered = true;
            t0 = MPI_Wtime();
            if (st == RESHARD_OK)
                st = refit(&r, &v);
        }
        if (r.excluded) {
            lost = true; /* leave: no collective with the survivors, no abort */
            st = RESHARD_OK;
            break;
        }
        if (st == RESHARD_OK) {
            mine.verified += v;
            mine.verified_after += n_gone > 0 ? v : 0;
            mine.refits++;
        } else {
            snprintf(why, sizeof why, "%s", reshard_last_error());
            fprintf(stderr, "rank %d: refit %ld: %s: %s\n", rank, it, reshard_status_string(st),
                    why);
        }
        if (st == RESHARD_ERR_TIMEOUT || st == RESHARD_ERR_TRANSPORT) {
            fprintf(stderr, "rank %d: no recovery left, ending the job\n", rank);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1); /* the ranks may disagree on who is left */
        }
        if (st == RESHARD_OK && recovered && a->respawn && !respawned) {
            double t1 = MPI_Wtime();
            st = respawn(&r, &f, argv, &team);
            mine.t.join = MPI_Wtime() - t1;
            respawned = true;
            if (st != RESHARD_OK)
                fprintf(stderr, "rank %d: respawn failed: %s: %s\n", rank,
                        reshard_status_string(st), reshard_last_error());
        }
    }
    int rc = st == RESHARD_OK ? 0 : 1;
    mine.uncovered = st == RESHARD_ERR_UNCOVERED;
    if (!lost) {
        /* the survivors (and the new process): the members of the current comm */
        if (team == MPI_COMM_NULL)
            MPI_Comm_dup(reshard_comm_mpi_comm(r.comm), &team);
        int worst = team_totals(team, rc, &mine, &all);
        bool joined_ok = !a->respawn || all.joined_refits > 0;
        bool ok = worst == 0 && n_gone > 0 && joined_ok && all.verified_after > 0;
        int trank;
        MPI_Comm_rank(team, &trank);
        if (trank == 0) {
            report(a, size, worst == 0 && n_gone > 0 && joined_ok, &all, gone, n_gone, why);
            if (n_gone == 0)
                fprintf(stderr, "reshard run: no rank was found lost\n");
            for (int32_t i = 0; strcmp(a->how, "kill") && i < n_gone; i++)
                kill((pid_t)pids[gone[i]], SIGCONT); /* let the stopped ones end with the job */
        }
        rc = ok ? 0 : 1;
        if (trank == 0)
            write_result(a, ok, rc);
        MPI_Comm_free(&team);
    }
    free(pids);
    run_free(&r);
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
    MPI_Comm parent = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    if (rc == 0 && parent != MPI_COMM_NULL)
        rc = newcomer(&a, parent); /* spawned by --respawn */
    else if (rc == 0)
        rc = elastic(&a, rank, size, argv);
    else if (rc == 1)
        rc = 0;
    /* with a killed rank, Finalize can wait for it forever (Open MPI 4.1's fence counts the
     * dead process), whatever the outcome: the survivors leave without it */
    if (finalize && strcmp(a.how, "kill") != 0)
        MPI_Finalize();
    return rc;
}

#endif /* RESHARD_HAVE_MPI */
