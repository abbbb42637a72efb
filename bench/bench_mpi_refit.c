/*
 * bench_mpi_refit: in one run on the same ranks, the refit time of reshard,
 * of the gather+broadcast baseline, and of raw MPI moving the plan's bytes.
 *
 *   mpirun -np N bench_mpi_refit --model M --train SPEC --infer SPEC
 *                                [--layers K] [--iters I] [--staging-mb S]
 *
 * Three ways to move the same refit between the same ranks, interleaved:
 *   raw MPI    every (sender, receiver) pair of the plan exchanges the plan's
 *              byte count in one MPI_Isend/MPI_Irecv between contiguous
 *              buffers (no packing, no staging bound, MPI_Waitall): what the
 *              MPI library itself reaches for this traffic
 *   reshard    reshard_plan_execute (pack, bounded staging, unpack)
 *   baseline   reshard_baseline_execute (gather + bucketed broadcast)
 * Times are the slowest rank's, median over --iters. Bandwidth per receiving
 * rank = payload bytes received per receiving rank / time. Every reshard and
 * baseline refit is verified (#wrong must be 0). Targets (issue 4): reshard at
 * least 3x faster than the baseline when infer tp >= 4, and at least 0.6 of
 * the raw MPI bandwidth per receiving rank. Exit status 1 when a refit fails
 * or does not verify.
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"

static int g_rank, g_size;

static void die(const char *what, reshard_status_t st)
{
    fprintf(stderr, "bench_mpi_refit: rank %d: %s: %s: %s\n", g_rank, what,
            reshard_status_string(st), reshard_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static reshard_buffer_t *alloc_bufs(const reshard_layout_t *l, int32_t *n)
{
    *n = reshard_layout_buffer_count(l, g_rank);
    reshard_buffer_t *b = calloc((size_t)*n + 1, sizeof *b);
    for (int32_t i = 0; b && i < *n; i++) {
        b[i].bytes = reshard_layout_buffer_bytes(l, g_rank, i);
        b[i].ptr = malloc((size_t)b[i].bytes + 1);
        if (!b[i].ptr)
            die("alloc", RESHARD_ERR_NOMEM);
    }
    if (!b)
        die("alloc", RESHARD_ERR_NOMEM);
    return b;
}

static void free_bufs(reshard_buffer_t *b, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        free(b[i].ptr);
    free(b);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Raw MPI: each pair of the plan exchanges its bytes in one message (split
 * at 1 GiB), all posted at once. Returns this rank's seconds. */
static double raw_exchange(const reshard_plan_t *plan, char *sbuf, char *rbuf)
{
    const uint64_t max = (uint64_t)1 << 30;
    int cap = 16, n = 0;
    MPI_Request *req = malloc((size_t)cap * sizeof *req);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    uint64_t roff = 0, soff = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int p = 0; p < g_size; p++) {
            if (p == g_rank)
                continue;
            uint64_t bytes = pass == 0 ? reshard_plan_pair_bytes(plan, p, g_rank)
                                       : reshard_plan_pair_bytes(plan, g_rank, p);
            for (uint64_t o = 0; o < bytes; o += max) {
                int len = (int)(bytes - o < max ? bytes - o : max);
                if (n == cap) {
                    cap *= 2;
                    req = realloc(req, (size_t)cap * sizeof *req);
                    if (!req)
                        die("raw", RESHARD_ERR_NOMEM);
                }
                if (pass == 0)
                    MPI_Irecv(rbuf + roff + o, len, MPI_BYTE, p, 7, MPI_COMM_WORLD, &req[n++]);
                else
                    MPI_Isend(sbuf + soff + o, len, MPI_BYTE, p, 7, MPI_COMM_WORLD, &req[n++]);
            }
            *(pass == 0 ? &roff : &soff) += bytes;
        }
    }
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    double dt = MPI_Wtime() - t0;
    free(req);
    return dt;
}

/* Ping-pong bandwidth of one pair (rank a -> rank b, 64 MiB, 5 times). */
static double pair_bandwidth(int a, int b)
{
    const int bytes = 64 << 20, reps = 5;
    char *buf = (g_rank == a || g_rank == b) ? malloc((size_t)bytes) : NULL;
    if (buf)
        memset(buf, 1, (size_t)bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < reps; i++) {
        if (g_rank == a)
            MPI_Send(buf, bytes, MPI_BYTE, b, 8, MPI_COMM_WORLD);
        else if (g_rank == b)
            MPI_Recv(buf, bytes, MPI_BYTE, a, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (g_rank == b)
        MPI_Send(buf, 1, MPI_BYTE, a, 9, MPI_COMM_WORLD);
    else if (g_rank == a)
        MPI_Recv(buf, 1, MPI_BYTE, b, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double dt = MPI_Wtime() - t0, gbps = (double)bytes * reps / dt / 1e9;
    MPI_Bcast(&gbps, 1, MPI_DOUBLE, a, MPI_COMM_WORLD);
    free(buf);
    return gbps;
}

typedef struct {
    const char *model, *train, *infer;
    int layers, iters;
    double staging_mb;
} args_t;

static void parse(int argc, char **argv, args_t *a)
{
    *a = (args_t){.model = "qwen3-0.6b",
                  .train = "tp=2",
                  .infer = "tp=4",
                  .layers = 4,
                  .iters = 5,
                  .staging_mb = 256};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--model"))
            a->model = v;
        else if (!strcmp(k, "--train"))
            a->train = v;
        else if (!strcmp(k, "--infer"))
            a->infer = v;
        else if (!strcmp(k, "--layers"))
            a->layers = atoi(v);
        else if (!strcmp(k, "--iters"))
            a->iters = atoi(v) > 0 ? atoi(v) : 1;
        else if (!strcmp(k, "--staging-mb"))
            a->staging_mb = atof(v);
        else {
            if (g_rank == 0)
                fprintf(stderr,
                        "usage: mpirun -np N bench_mpi_refit --model M --train SPEC --infer SPEC "
                        "[--layers K] [--iters I] [--staging-mb S]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    args_t a;
    parse(argc, argv, &a);

    reshard_model_options_t mo = {.layers = a.layers};
    reshard_model_t *model = NULL;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_refit_t rf = {0};
    reshard_status_t st = reshard_model_load(a.model, &mo, &model);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse(a.train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(a.infer, &is);
    if (st == RESHARD_OK)
        st = reshard_model_check(model, &ts, &is, g_size);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(model, &ts, &is, &rf);
    if (st != RESHARD_OK)
        die("setup", st);
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES,
                                .world_size = g_size,
                                .my_rank = g_rank,
                                .staging_bytes = (uint64_t)(a.staging_mb * 1048576.0)};
    reshard_plan_t *plan = NULL;
    reshard_comm_t *comm = NULL;
    reshard_baseline_t *base = NULL;
    if ((st = reshard_plan_create(rf.train, rf.infer, &pp, &plan)) != RESHARD_OK)
        die("plan", st);
    if ((st = reshard_comm_create_mpi(MPI_COMM_WORLD, &comm)) != RESHARD_OK)
        die("comm", st);
    /* baseline roots: the first rank of each tensor's pipeline stage */
    int32_t nt = reshard_tensors_count(rf.tensors), stage = rf.train_world / ts.pp;
    int32_t *roots = malloc((size_t)nt * sizeof *roots);
    for (int32_t t = 0; t < nt; t++)
        roots[t] = -1;
    reshard_fragment_t fr;
    for (int64_t i = 0; i < reshard_layout_count(rf.train); i++)
        if (reshard_layout_fragment(rf.train, i, &fr) == RESHARD_OK && fr.rank % stage == 0 &&
            (roots[fr.tensor] < 0 || fr.rank < roots[fr.tensor]))
            roots[fr.tensor] = fr.rank;
    for (int32_t t = 0; t < nt; t++)
        if (roots[t] < 0)
            roots[t] = 0; /* not held by a stage's first rank: checked by the call */
    if ((st = reshard_baseline_create_mpi(rf.train, rf.infer, roots, &pp, comm, &base)) !=
        RESHARD_OK)
        die("baseline", st);
    free(roots);

    int32_t ns, nd;
    reshard_buffer_t *src = alloc_bufs(rf.train, &ns), *dst = alloc_bufs(rf.infer, &nd);
    if (ns && (st = reshard_fill_pattern(rf.train, g_rank, src, ns)) != RESHARD_OK)
        die("fill", st);
    uint64_t sbytes = 0, rbytes = 0;
    for (int p = 0; p < g_size; p++) {
        if (p == g_rank)
            continue;
        sbytes += reshard_plan_pair_bytes(plan, g_rank, p);
        rbytes += reshard_plan_pair_bytes(plan, p, g_rank);
    }
    char *sbuf = malloc((size_t)sbytes + 1), *rbuf = malloc((size_t)rbytes + 1);
    memset(sbuf, 3, (size_t)sbytes + 1);
    memset(rbuf, 0, (size_t)rbytes + 1);

    double *t_raw = calloc((size_t)a.iters, sizeof(double));
    double *t_rs = calloc((size_t)a.iters, sizeof(double));
    double *t_bl = calloc((size_t)a.iters, sizeof(double));
    long wrong = 0;
    uint64_t recv_rs = 0, recv_bl = 0;
    for (int it = 0; it < a.iters; it++) {
        double dt = raw_exchange(plan, sbuf, rbuf);
        MPI_Allreduce(&dt, &t_raw[it], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        for (int method = 0; method < 2; method++) {
            for (int32_t i = 0; i < nd; i++)
                memset(dst[i].ptr, RESHARD_SENTINEL_BYTE, (size_t)dst[i].bytes);
            reshard_exec_stats_t es;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            st = method == 0 ? reshard_plan_execute(plan, comm, src, ns, dst, nd, &es)
                             : reshard_baseline_execute(base, src, ns, dst, nd, &es);
            dt = MPI_Wtime() - t0;
            if (st != RESHARD_OK)
                die(method == 0 ? "reshard refit" : "baseline refit", st);
            *(method == 0 ? &recv_rs : &recv_bl) = es.bytes_recv;
            MPI_Allreduce(&dt, method == 0 ? &t_rs[it] : &t_bl[it], 1, MPI_DOUBLE, MPI_MAX,
                          MPI_COMM_WORLD);
            if (nd && reshard_verify_pattern(rf.infer, g_rank, dst, nd, NULL) != RESHARD_OK) {
                fprintf(stderr, "rank %d: %s: %s\n", g_rank, method ? "baseline" : "reshard",
                        reshard_last_error());
                wrong++;
            }
        }
    }
    double link = pair_bandwidth(0, rf.train_world);
    long wrong_all = 0;
    uint64_t sum[3] = {rbytes, recv_rs, recv_bl}, tot[3];
    int receiving = rbytes > 0, receivers = 0;
    MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(sum, tot, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&receiving, &receivers, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

    if (g_rank == 0) {
        double raw = median(t_raw, a.iters), rs = median(t_rs, a.iters), bl = median(t_bl, a.iters);
        double per = receivers ? 1.0 / receivers / 1e9 : 0;
        char tsp[96], isp[96];
        printf("bench_mpi_refit: %s (%d layers, %.1f MB), train %s -> infer %s, %d ranks, "
               "staging %.0f MiB, %d iterations\n",
               a.model, a.layers, (double)reshard_tensors_bytes(rf.tensors) / 1e6,
               reshard_train_spec_str(&ts, tsp, sizeof tsp),
               reshard_infer_spec_str(&is, isp, sizeof isp), g_size, a.staging_mb, a.iters);
        printf("  %-34s %10s %12s %16s\n", "method", "median s", "bytes moved",
               "GB/s per recv rank");
        printf("  %-34s %10.4f %12.1f MB %13.2f\n", "raw MPI (plan's pairs, 1 msg each)", raw,
               (double)tot[0] / 1e6, (double)tot[0] * per / raw);
        printf("  %-34s %10.4f %12.1f MB %13.2f\n", "reshard", rs, (double)tot[1] / 1e6,
               (double)tot[1] * per / rs);
        printf("  %-34s %10.4f %12.1f MB %13.2f\n", "baseline (gather + broadcast)", bl,
               (double)tot[2] / 1e6, (double)tot[2] * per / bl);
        printf("  ping-pong bandwidth rank 0 -> rank %d: %.2f GB/s\n", rf.train_world, link);
        printf("  speedup vs baseline: %.2fx (target >= 3x when infer tp >= 4)\n", bl / rs);
        printf("  reshard / raw MPI bandwidth: %.2f (target >= 0.6)\n", raw / rs);
        printf("  #wrong: %ld\n", wrong_all);
    }
    free(t_raw);
    free(t_rs);
    free(t_bl);
    free(sbuf);
    free(rbuf);
    free_bufs(src, ns);
    free_bufs(dst, nd);
    reshard_baseline_destroy(base);
    reshard_comm_destroy(comm);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&rf);
    reshard_model_destroy(model);
    MPI_Finalize();
    return wrong_all ? 1 : 0;
}
