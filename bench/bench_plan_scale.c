/*
 * Planning cost at scale: a rank's own plan and the global plan of a large
 * MoE refit, time and peak memory, at several sizes per side, in one run.
 *
 * Size N per side: training tp=1,pp=16,ep=N/16,dp=N/16,etp=1 (plus
 * --stages, by default first=3,last=2: 61 layers over 16 stages); inference
 * tp=32,dp=N/32; N = 256, 512, 1024 by default. Each measurement runs in a
 * child process (this program re-run with --one), so its peak memory
 * (ru_maxrss) is its own. The global plan is a summary plan
 * (RESHARD_PLAN_PARAM_SUMMARY: counters and stream totals, as `reshard plan`
 * and `reshard sim` make it), with network bytes over their lower bound and
 * the busiest NIC over its bound beside it.
 *
 * usage: bench_plan_scale [--model M] [--system S] [--sizes 256,512,1024]
 *                         [--rank R] [--no-global | --global-max N] [--check K]
 *                         [--mem-cap-mb M] [--repeat K]
 *                         [--layers K]
 *                         [--stages first=F,last=L | --stages none]
 *        bench_plan_scale --hash [--model M] [--system S] [--size N] [--ranks R1,R2,...]
 *                         [--no-global] [--layers K] [--stages ...]
 *
 *   --rank R    the training rank whose own plan is built (default 5)
 *   --infer-rank K  and the K-th inference rank's (default 5; -1: none)
 *   --global-max N  global plans only at sizes up to N per side
 *   --mem-cap-mb M  address-space cap of each measurement (default 8192; 0:
 *               none): a plan over it fails, and its row says so
 *   --repeat K  own plans: K runs each (default 3), the row shows the run
 *               of median total CPU (the growth ratio compares two of them)
 *   --check K   also check, in each global child, that K sampled ranks' own
 *               plans equal their part of the global plan (plan_check.c):
 *               the summary plan keeps those ranks' pieces
 *   --hash      print a digest of the full global plan (not with
 *               --no-global; it holds every piece) and of the listed ranks'
 *               own plans (up to 64; every piece, stream, chunk size and
 *               counter), to compare two builds of the planner, and whether
 *               the summary plan's counters equal the full plan's
 */
#define _DEFAULT_SOURCE /* wait4 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_median.h"
#include "plan/plan_internal.h"
#include "plan_check.h"
#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_sim.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of this process: on a shared machine, steadier than wall time. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* Digest of a plan (FNV-1a, 64 bit, over explicit fields)             */
/* ------------------------------------------------------------------ */

typedef struct {
    uint64_t h;
} digest_t;

static void dg(digest_t *d, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        d->h ^= (v >> (8 * i)) & 0xffu;
        d->h *= 0x100000001b3ULL;
    }
}

static void dg_piece(digest_t *d, const rs_piece_t *p)
{
    dg(d, (uint64_t)p->stage);
    dg(d, (uint64_t)p->sender);
    dg(d, (uint64_t)p->receiver);
    dg(d, (uint64_t)p->tensor);
    dg(d, (uint64_t)p->from_frag);
    dg(d, (uint64_t)p->to_frag);
    dg(d, p->elem_size);
    dg(d, p->bytes);
    dg(d, (uint64_t)p->box.ndim);
    for (int k = 0; k < p->box.ndim; k++) {
        dg(d, (uint64_t)p->box.offset[k]);
        dg(d, (uint64_t)p->box.extent[k]);
    }
}

static uint64_t plan_digest(const reshard_plan_t *plan)
{
    digest_t d = {0xcbf29ce484222325ULL};
    dg(&d, (uint64_t)plan->npieces);
    for (int64_t i = 0; i < plan->npieces; i++)
        dg_piece(&d, &plan->pieces[i]);
    for (int32_t r = 0; r < plan->p.world_size; r++)
        dg(&d, plan->chunk_cap[r]);
    const reshard_plan_stats_t *s = &plan->stats;
    const uint64_t v[] = {s->bytes_total,         s->bytes_local,          s->bytes_network,
                          s->bytes_nvlink,        s->bytes_lower_bound,    s->max_nic_send_bytes,
                          s->max_nic_recv_bytes,  s->nic_send_bound_bytes, s->nic_recv_bound_bytes,
                          (uint64_t)s->transfers, (uint64_t)s->pieces,     s->max_relay_bytes};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        dg(&d, v[i]);
    const rs_rank_plan_t *m = plan->mine;
    for (int st = 0; m && st < RS_NSTAGES; st++)
        for (int dir = 0; dir < 2; dir++) {
            const rs_stream_t *sv = dir ? m->recv[st] : m->send[st];
            int32_t n = dir ? m->nrecv[st] : m->nsend[st];
            dg(&d, (uint64_t)n);
            for (int32_t i = 0; i < n; i++) {
                dg(&d, (uint64_t)sv[i].peer);
                dg(&d, sv[i].bytes);
                dg(&d, sv[i].chunk);
                for (int64_t k = 0; k < sv[i].n; k++)
                    dg_piece(&d, &plan->pieces[sv[i].idx[k]]);
            }
        }
    for (int64_t i = 0; m && i < m->nlocal; i++)
        dg_piece(&d, &plan->pieces[m->local[i]]);
    return d.h;
}

/* ------------------------------------------------------------------ */
/* One configuration                                                   */
/* ------------------------------------------------------------------ */

typedef struct {
    const char *model, *system;
    int32_t size;       /* ranks per side */
    const char *stages; /* appended to the training spec, or "none" */
    int32_t layers;     /* 0: all */
} config_t;

typedef struct {
    reshard_model_t *model;
    reshard_model_refit_t refit;
    int32_t world, domain_size;
    int32_t rank; /* the scoped rank, or RESHARD_ALL_RANKS */
    double layout_s, layout_cpu;
} setup_t;

static int domain_size_of(const char *system)
{
    if (!system || !strcmp(system, "none"))
        return 1;
    return !strcmp(system, "gb200") ? 72 : 8;
}

/* A rank as the command line gives it: R >= 0 itself, RESHARD_ALL_RANKS,
 * or inference rank K as infer_rank(K) (the K-th inference rank). */
static int32_t infer_rank(int32_t k)
{
    return -2 - k;
}

/* The refit of @p c: whole, or with @p scoped_rank a rank (infer_rank(K)
 * too) that rank's scoped part (reshard_model_refit_create_scoped), as its
 * own plan is made; the rank goes to s->rank. */
static int setup(const config_t *c, int32_t scoped_rank, setup_t *s)
{
    memset(s, 0, sizeof *s);
    char train[128], infer[64];
    snprintf(train, sizeof train, "tp=1,pp=16,ep=%d,dp=%d,etp=1%s%s", c->size / 16, c->size / 16,
             strcmp(c->stages, "none") ? "," : "", strcmp(c->stages, "none") ? c->stages : "");
    snprintf(infer, sizeof infer, "tp=32,dp=%d", c->size / 32);
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_options_t mo = {.dtype = RESHARD_BF16, .layers = c->layers};
    if (reshard_train_spec_parse(train, &ts) != RESHARD_OK ||
        reshard_infer_spec_parse(infer, &is) != RESHARD_OK ||
        reshard_model_load(c->model, &mo, &s->model) != RESHARD_OK) {
        fprintf(stderr, "bench_plan_scale: %s\n", reshard_last_error());
        return -1;
    }
    s->domain_size = domain_size_of(c->system);
    int32_t tw = reshard_train_world(&ts);
    int32_t offset = s->domain_size > 1 ? reshard_sim_infer_offset(tw, s->domain_size) : -1;
    if (scoped_rank <= -2) /* infer_rank(K) */
        scoped_rank = (offset >= 0 ? offset : tw) + (-2 - scoped_rank);
    s->rank = scoped_rank;
    double t0 = now(), c0 = cpu_now();
    reshard_status_t st =
        scoped_rank >= 0 ? reshard_model_refit_create_scoped(s->model, &ts, &is, offset,
                                                             scoped_rank, s->domain_size, &s->refit)
                         : reshard_model_refit_create_at(s->model, &ts, &is, offset, &s->refit);
    if (st != RESHARD_OK) {
        fprintf(stderr, "bench_plan_scale: layouts: %s\n", reshard_last_error());
        reshard_model_destroy(s->model);
        return -1;
    }
    s->layout_s = now() - t0;
    s->layout_cpu = cpu_now() - c0;
    s->world = s->refit.infer_offset + s->refit.infer_world;
    return 0;
}

static void teardown(setup_t *s)
{
    reshard_model_refit_destroy(&s->refit);
    reshard_model_destroy(s->model);
}

static reshard_plan_params_t params_of(const setup_t *s, int32_t rank)
{
    return (reshard_plan_params_t){.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                   .world_size = s->world,
                                   .my_rank = rank,
                                   .domain_size = s->domain_size};
}

/* A rank's own plan, the full global plan (RESHARD_ALL_RANKS), or with
 * @p summary the global summary plan keeping the pieces of @p keep[0..nkeep). */
static reshard_plan_t *plan_for(const setup_t *s, int32_t rank, int summary, const int32_t *keep,
                                int nkeep, double *secs, double *cpu)
{
    reshard_plan_params_t p = params_of(s, rank);
    if (summary) {
        p.field_mask |= RESHARD_PLAN_PARAM_SUMMARY;
        p.summary = 1;
    }
    reshard_plan_t *plan = NULL;
    double t0 = now(), c0 = cpu_now();
    if (rs_plan_create_keeping(s->refit.train, s->refit.infer, &p, keep, nkeep, &plan) !=
        RESHARD_OK) {
        fprintf(stderr, "bench_plan_scale: plan (rank %d): %s\n", rank, reshard_last_error());
        return NULL;
    }
    *secs = now() - t0;
    *cpu = cpu_now() - c0;
    return plan;
}

/* Sampled ranks: both ends and middles of each side, and the given rank. */
static int sample_ranks(const setup_t *s, int k, int32_t *out)
{
    int32_t T = s->refit.train_world, I0 = s->refit.infer_offset, W = s->world;
    const int32_t cand[] = {0, T - 1, T / 2 + 3, I0, W - 1, I0 + (W - I0) / 2 + 5, T / 3, W - 9};
    int n = 0;
    for (size_t i = 0; i < sizeof cand / sizeof *cand && n < k; i++)
        if (cand[i] >= 0 && cand[i] < W)
            out[n++] = cand[i];
    return n;
}

/* Network bytes over their lower bound, busiest NIC over its bound (global). */
static void quality(const reshard_plan_t *plan, double *net_lb, double *nic)
{
    reshard_plan_stats_t st;
    reshard_plan_get_stats(plan, &st);
    uint64_t most = st.max_nic_send_bytes > st.max_nic_recv_bytes ? st.max_nic_send_bytes
                                                                  : st.max_nic_recv_bytes;
    uint64_t bound = st.nic_send_bound_bytes > st.nic_recv_bound_bytes ? st.nic_send_bound_bytes
                                                                       : st.nic_recv_bound_bytes;
    *net_lb = st.bytes_lower_bound ? (double)st.bytes_network / (double)st.bytes_lower_bound : 0;
    *nic = bound ? (double)most / (double)bound : 0;
}

/* What an own plan has its rank do: streams (both directions, every stage)
 * and pieces (sent, received and local). */
static void touched(const reshard_plan_t *plan, int64_t *streams, int64_t *pieces)
{
    const rs_rank_plan_t *m = plan->mine;
    *streams = *pieces = 0;
    for (int st = 0; m && st < RS_NSTAGES; st++) {
        *streams += m->nsend[st] + m->nrecv[st];
        for (int32_t i = 0; i < m->nsend[st]; i++)
            *pieces += m->send[st][i].n;
        for (int32_t i = 0; i < m->nrecv[st]; i++)
            *pieces += m->recv[st][i].n;
    }
    if (m)
        *pieces += m->nlocal;
}

/* Child: one measurement, printed as "rank layout_s layout_cpu plan_s
 * plan_cpu digest checked net_lb nic streams pieces". A global plan is a
 * summary plan that keeps the sampled ranks' pieces (--check) to compare
 * their own plans with. */
static int run_one(const config_t *c, int32_t rank, int check)
{
    setup_t s;
    if (setup(c, rank, &s) != 0) /* an own plan from its rank's scoped layouts */
        return 1;
    rank = s.rank;
    double secs = 0, cpu = 0;
    int32_t ranks[16];
    int n = check > 0 ? sample_ranks(&s, check < 16 ? check : 16, ranks) : 0;
    bool global = rank == RESHARD_ALL_RANKS;
    reshard_plan_t *plan = plan_for(&s, rank, global, ranks, global ? n : 0, &secs, &cpu);
    if (!plan) {
        teardown(&s);
        return 1;
    }
    int rc = 0, checked = 0;
    for (int i = 0; i < n && global; i++) {
        char why[512];
        reshard_plan_params_t p = params_of(&s, RESHARD_ALL_RANKS);
        if (rs_test_check_rank_plan(s.refit.train, s.refit.infer, &p, plan, ranks[i], why,
                                    sizeof why) != 0) {
            fprintf(stderr, "bench_plan_scale: %s\n", why);
            rc = 1;
        } else {
            checked++;
        }
    }
    double net_lb = 0, nic = 0;
    if (global)
        quality(plan, &net_lb, &nic);
    int64_t streams, pieces;
    touched(plan, &streams, &pieces);
    printf("%d %.3f %.3f %.3f %.3f %016llx %d %.4f %.4f %lld %lld\n", rank, s.layout_s,
           s.layout_cpu, secs, cpu, (unsigned long long)plan_digest(plan), checked, net_lb, nic,
           (long long)streams, (long long)pieces);
    reshard_plan_destroy(plan);
    teardown(&s);
    return rc;
}

/* Parent: run a child for one measurement; its output line and peak memory. */
typedef struct {
    int rank;
    double layout_s, layout_cpu, plan_s, plan_cpu, wall;
    char digest[32];
    int checked;
    double net_lb, nic;
    long long streams, pieces; /* an own plan's (touched) */
    long maxrss_kb;
    int status; /* of the child (wait4) */
} result_t;

/* Address-space cap of each child, MiB (0: none): a plan that would not fit
 * fails there instead of crowding the machine. */
static long mem_cap_mb = 8192;

static int measure(const char *self, const config_t *c, int32_t rank, int check, result_t *r)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    char size[16], rk[16], ck[16], ly[16];
    snprintf(size, sizeof size, "%d", c->size);
    snprintf(ly, sizeof ly, "%d", c->layers);
    snprintf(rk, sizeof rk, "%d", rank);
    snprintf(ck, sizeof ck, "%d", check);
    double t0 = now();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        struct rlimit cap = {(rlim_t)mem_cap_mb << 20, (rlim_t)mem_cap_mb << 20};
        if (mem_cap_mb > 0)
            setrlimit(RLIMIT_AS, &cap);
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl(self, self, "--one", c->model, c->system ? c->system : "none", size, rk, ck,
              c->stages, ly, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char line[256] = {0};
    FILE *f = fdopen(fd[0], "r");
    if (!f || !fgets(line, sizeof line, f))
        line[0] = 0;
    if (f)
        fclose(f);
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0)
        return -1;
    r->wall = now() - t0;
    r->maxrss_kb = ru.ru_maxrss;
    r->status = status;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        sscanf(line, "%d %lf %lf %lf %lf %16s %d %lf %lf %lld %lld", &r->rank, &r->layout_s,
               &r->layout_cpu, &r->plan_s, &r->plan_cpu, r->digest, &r->checked, &r->net_lb,
               &r->nic, &r->streams, &r->pieces) != 11)
        return -1;
    return 0;
}

/* measure() @p reps times; the run of median total CPU goes to @p r (the
 * first failure, if any, instead). */
static int measure_median(const char *self, const config_t *c, int32_t rank, int check, int reps,
                          result_t *r)
{
    result_t runs[MAX_REPS];
    double t[MAX_REPS];
    for (int k = 0; k < reps; k++) {
        memset(&runs[k], 0, sizeof runs[k]);
        if (measure(self, c, rank, check, &runs[k]) != 0) {
            *r = runs[k];
            return -1;
        }
        t[k] = runs[k].layout_cpu + runs[k].plan_cpu;
    }
    double m = median(t, reps);
    for (int k = 0; k < reps; k++)
        if (runs[k].layout_cpu + runs[k].plan_cpu == m)
            *r = runs[k];
    return 0;
}

static int parse_list(const char *s, int32_t *out, int max)
{
    int n = 0;
    char *end;
    while (s && *s && n < max) {
        out[n++] = (int32_t)strtol(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int hash_mode(const config_t *c, const int32_t *ranks, int nranks, int global)
{
    setup_t s;
    if (setup(c, -1, &s) != 0)
        return 1;
    double secs, cpu;
    if (global) {
        reshard_plan_t *all = plan_for(&s, RESHARD_ALL_RANKS, 0, NULL, 0, &secs, &cpu);
        reshard_plan_t *sum = plan_for(&s, RESHARD_ALL_RANKS, 1, NULL, 0, &secs, &cpu);
        if (!all || !sum)
            return 1;
        /* the summary plan counts what the full plan's pieces add up to */
        reshard_plan_stats_t a, b;
        reshard_plan_get_stats(all, &a);
        reshard_plan_get_stats(sum, &b);
        printf("%s %s %d+%d global %016llx summary stats %s\n", c->model,
               c->system ? c->system : "none", c->size, c->size,
               (unsigned long long)plan_digest(all), memcmp(&a, &b, sizeof a) ? "DIFFER" : "equal");
        reshard_plan_destroy(sum);
        reshard_plan_destroy(all);
    }
    for (int i = 0; i < nranks; i++) {
        int32_t r = ranks[i] < 0 ? s.world + ranks[i] : ranks[i];
        reshard_plan_t *one = plan_for(&s, r, 0, NULL, 0, &secs, &cpu);
        setup_t sc; /* the same rank's plan from its scoped layouts */
        if (!one || setup(c, r, &sc) != 0)
            return 1;
        reshard_plan_t *two = plan_for(&sc, r, 0, NULL, 0, &secs, &cpu);
        if (!two)
            return 1;
        uint64_t d1 = plan_digest(one), d2 = plan_digest(two);
        printf("%s %s %d+%d rank %d %016llx scoped %s fingerprint %s\n", c->model,
               c->system ? c->system : "none", c->size, c->size, r, (unsigned long long)d1,
               d1 == d2 ? "equal" : "DIFFER",
               one->fingerprint == two->fingerprint ? "equal" : "DIFFER");
        reshard_plan_destroy(two);
        teardown(&sc);
        reshard_plan_destroy(one);
    }
    teardown(&s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 9 && !strcmp(argv[1], "--one")) {
        config_t c = {argv[2], strcmp(argv[3], "none") ? argv[3] : NULL, atoi(argv[4]), argv[7],
                      atoi(argv[8])};
        return run_one(&c, atoi(argv[5]), atoi(argv[6]));
    }
    config_t c = {"kimi-k2", "h100", 256, "first=3,last=2", 0};
    int32_t sizes[8] = {256, 512, 1024}, nsizes = 3, rank = 5, irank = 5, check = 0, global = 1,
            hash = 0, global_max = INT32_MAX, repeat = 3;
    int32_t ranks[64] = {5, -1}, nranks = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v)
            c.model = argv[++i];
        else if (!strcmp(a, "--system") && v)
            c.system = strcmp(argv[++i], "none") ? v : NULL;
        else if (!strcmp(a, "--sizes") && v)
            nsizes = parse_list(argv[++i], sizes, 8);
        else if (!strcmp(a, "--size") && v)
            c.size = atoi(argv[++i]);
        else if (!strcmp(a, "--rank") && v)
            rank = atoi(argv[++i]);
        else if (!strcmp(a, "--infer-rank") && v)
            irank = atoi(argv[++i]);
        else if (!strcmp(a, "--ranks") && v)
            nranks = parse_list(argv[++i], ranks, 64);
        else if (!strcmp(a, "--check") && v)
            check = atoi(argv[++i]);
        else if (!strcmp(a, "--stages") && v)
            c.stages = argv[++i];
        else if (!strcmp(a, "--layers") && v)
            c.layers = atoi(argv[++i]);
        else if (!strcmp(a, "--global-max") && v)
            global_max = atoi(argv[++i]);
        else if (!strcmp(a, "--repeat") && v)
            repeat = atoi(argv[++i]);
        else if (!strcmp(a, "--mem-cap-mb") && v)
            mem_cap_mb = atol(argv[++i]);
        else if (!strcmp(a, "--no-global"))
            global = 0;
        else if (!strcmp(a, "--hash"))
            hash = 1;
        else {
            fprintf(stderr, "usage: see the comment at the top of bench/bench_plan_scale.c\n");
            return 2;
        }
    }
    if (repeat < 1 || repeat > MAX_REPS) {
        fprintf(stderr, "bench_plan_scale: --repeat %d outside [1, %d]\n", repeat, MAX_REPS);
        return 2;
    }
    /* N per side: ep = dp = N/16 training, dp = N/32 inference replicas of 32 */
    for (int i = 0; i < (hash ? 1 : nsizes); i++) {
        int32_t n = hash ? c.size : sizes[i];
        if (n < 32 || n % 32) {
            fprintf(stderr, "bench_plan_scale: size %d per side is not a positive multiple of 32\n",
                    n);
            return 2;
        }
    }
    if (hash)
        return hash_mode(&c, ranks, nranks, global);
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return 1;
    self[len] = 0;
    bool stages = strcmp(c.stages, "none") != 0;
    printf("# reshard plan of %s%s, system %s; train tp=1,pp=16,ep=N/16,dp=N/16,etp=1%s%s, infer "
           "tp=32,dp=N/32; own plans of rank %d and of inference rank %d, from their scoped "
           "layouts (layout_s: reshard_model_refit_create_scoped)\n",
           c.model, c.layers ? " (first layers only)" : "", c.system ? c.system : "none",
           stages ? "," : "", stages ? c.stages : "", rank, irank);
    printf("# times in seconds (wall; cpu = this process's CPU time, steadier on a shared "
           "machine), peak = max RSS; streams, pieces: what the own plan has its rank do\n");
    printf("# global = summary plan (counters and stream totals; the sampled ranks' pieces kept "
           "for --check); net/lb = network bytes / lower bound, nic = busiest NIC / its bound\n");
    printf("%-11s %-6s %5s %9s %9s %9s %9s %9s %9s %8s %8s %17s %7s %6s %6s\n", "ranks", "plan",
           "rank", "layout_s", "layout_cpu", "plan_s", "plan_cpu", "total_cpu", "peak_MiB",
           "streams", "pieces", "digest", "checked", "net/lb", "nic");
    int bad = 0;
    const int32_t owners[2] = {rank, irank >= 0 ? infer_rank(irank) : RESHARD_ALL_RANKS};
    result_t first[2], last[2];
    memset(first, 0, sizeof first);
    memset(last, 0, sizeof last);
    for (int i = 0; i < nsizes; i++) {
        c.size = sizes[i];
        for (int g = 0; g < 3; g++) {
            if ((g < 2 && owners[g] == RESHARD_ALL_RANKS) ||
                (g == 2 && !(global && c.size <= global_max)))
                continue;
            result_t r;
            memset(&r, 0, sizeof r);
            if (measure_median(self, &c, g < 2 ? owners[g] : RESHARD_ALL_RANKS, g == 2 ? check : 0,
                               g == 2 ? 1 : repeat, &r) != 0) {
                printf("%5d+%-5d %-6s failed after %.1f s wall, peak %.1f MiB (cap %ld MiB)\n",
                       c.size, c.size, g == 2 ? "global" : "own", r.wall,
                       (double)r.maxrss_kb / 1024.0, mem_cap_mb);
                bad = 1;
                continue;
            }
            char who[16] = "all";
            if (g < 2)
                snprintf(who, sizeof who, "%d", r.rank);
            printf("%5d+%-5d %-6s %5s", c.size, c.size, g == 2 ? "global" : "own", who);
            printf(" %9.3f %9.3f %9.3f %9.3f %9.3f %9.1f", r.layout_s, r.layout_cpu, r.plan_s,
                   r.plan_cpu, r.layout_cpu + r.plan_cpu, (double)r.maxrss_kb / 1024.0);
            if (g < 2)
                printf(" %8lld %8lld", r.streams, r.pieces);
            else
                printf(" %8s %8s", "-", "-");
            printf(" %17s %7d", r.digest, r.checked);
            if (g == 2)
                printf(" %6.3f %6.3f", r.net_lb, r.nic);
            printf("\n");
            if (g < 2 && i == 0)
                first[g] = r;
            if (g < 2)
                last[g] = r;
        }
        fflush(stdout);
    }
    for (int g = 0; g < 2 && nsizes > 1; g++) {
        double a = first[g].layout_cpu + first[g].plan_cpu,
               b = last[g].layout_cpu + last[g].plan_cpu;
        if (owners[g] == RESHARD_ALL_RANKS || a <= 0)
            continue;
        printf("# own plan of %s rank (layouts included), %d vs %d per side: cpu %.2fx, streams "
               "%.2fx, pieces %.2fx, peak memory %.2fx\n",
               g ? "the inference" : "the training", sizes[nsizes - 1], sizes[0], b / a,
               first[g].streams ? (double)last[g].streams / (double)first[g].streams : 0,
               first[g].pieces ? (double)last[g].pieces / (double)first[g].pieces : 0,
               first[g].maxrss_kb ? (double)last[g].maxrss_kb / (double)first[g].maxrss_kb : 0);
    }
    return bad;
}
