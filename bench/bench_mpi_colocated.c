/*
 * Colocated refit on one host: reshard's one-sided reads against the scheme NeMo RL
 * uses colocated and against the memcpy bound, side by side from one run.
 *
 *   mpirun -np W bench_mpi_colocated --model M --train SPEC --infer SPEC
 *          [--layers K] [--iters I] [--bucket-mb B]
 *
 * Ranks [0, T) train, [T, W) infer; training rank i and inference rank i share
 * device i (as trainer and engine share a GPU). Methods, each verified on every
 * destination element after every refit:
 *   vm_readv  one plan, colocated: each inference rank reads exactly its pieces from
 *             the training ranks' buffers (malloc'ed: process_vm_readv), nothing else
 *             moves.
 *   shared    the same plan over a copy of the sources in shared allocations
 *             (reshard_alloc_shared): the readers map them once per plan and memcpy.
 *   nemo      NeMo RL's colocated scheme: per bucket of tensors (--bucket-mb, default
 *             512), every training rank gathers the bucket's full tensors into its
 *             own buffer (an all-gather over its parallel groups), then every
 *             inference rank copies its slice from the full tensors of the training
 *             rank on its device (CUDA IPC there). Both steps run as colocated
 *             reshard plans here, over the shared copy of the sources and shared full
 *             buffers (mapped, as CUDA IPC maps them): the gather at mapped-read
 *             speed, which favours the scheme.
 *   memcpy    every inference rank memcpy's as many bytes as it needs from a private
 *             buffer: the bound of any scheme that moves each needed byte once.
 * Prints per method the median over refits of the slowest rank's time, the bytes
 * moved, and the ratios. Timings on a shared machine are noisy: compare ratios from
 * one run.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_median.h"
#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"
#include "reshard/reshard_shared.h"

static int g_rank;

static void die(const char *what, reshard_status_t st)
{
    fprintf(stderr, "rank %d: %s: %s: %s\n", g_rank, what, reshard_status_string(st),
            reshard_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CK(call, what)                                                                             \
    do {                                                                                           \
        reshard_status_t st_ = (call);                                                             \
        if (st_ != RESHARD_OK)                                                                     \
            die(what, st_);                                                                        \
    } while (0)

static reshard_buffer_t *alloc_bufs(const reshard_layout_t *l, int rank, int32_t *n, int fill,
                                    int shared)
{
    *n = reshard_layout_buffer_count(l, rank);
    reshard_buffer_t *b = calloc((size_t)(*n ? *n : 1), sizeof *b);
    for (int32_t i = 0; b && i < *n; i++) {
        b[i].bytes = reshard_layout_buffer_bytes(l, rank, i);
        if (shared && b[i].bytes)
            CK(reshard_alloc_shared(b[i].bytes, &b[i].ptr), "shared allocation");
        else
            b[i].ptr = malloc(b[i].bytes ? (size_t)b[i].bytes : 1);
        if (!b[i].ptr)
            die("out of memory", RESHARD_ERR_NOMEM);
        memset(b[i].ptr, fill, (size_t)b[i].bytes);
    }
    return b;
}

/* The fragments of @p l whose tensor is in [t0, t1). */
static reshard_layout_t *subset(const reshard_tensors_t *ts, const reshard_layout_t *l, int32_t t0,
                                int32_t t1)
{
    reshard_layout_t *out = NULL;
    CK(reshard_layout_create(ts, &out), "layout");
    reshard_fragment_t f;
    for (int64_t i = 0; i < reshard_layout_count(l); i++)
        if (reshard_layout_fragment(l, i, &f) == RESHARD_OK && f.tensor >= t0 && f.tensor < t1)
            CK(reshard_layout_add_fragment(out, &f), "fragment");
    return out;
}

/* Every training rank holds tensors [t0, t1) whole, row-major, one after another in
 * its buffer 0 (8-byte aligned); returns the bytes that takes. */
static uint64_t full_layout(const reshard_tensors_t *ts, int32_t train, int32_t t0, int32_t t1,
                            reshard_layout_t **out)
{
    CK(reshard_layout_create(ts, out), "layout");
    uint64_t off = 0;
    for (int32_t t = t0; t < t1; t++) {
        reshard_tensor_info_t info;
        CK(reshard_tensors_info(ts, t, &info), "tensor");
        uint64_t es = reshard_dtype_size(info.dtype);
        reshard_fragment_t f = {.tensor = t, .base = (int64_t)(off / es)};
        f.box.ndim = info.view_ndim;
        int64_t st = 1;
        for (int d = info.view_ndim - 1; d >= 0; d--) {
            f.box.extent[d] = info.view_shape[d];
            f.stride[d] = st;
            st *= info.view_shape[d];
        }
        for (int32_t r = 0; r < train; r++) {
            f.rank = r;
            CK(reshard_layout_add_fragment(*out, &f), "full fragment");
        }
        off += (info.bytes + 7) & ~(uint64_t)7;
    }
    return off;
}

typedef struct {
    reshard_plan_t *gather, *slice;
} bucket_t;

/* 1 (and the first wrong element, named) when a destination of this rank is wrong after
 * a refit by @p method, else 0. */
static long wrong_after(const char *method, const reshard_layout_t *l, const reshard_buffer_t *db,
                        int32_t nd)
{
    if (!nd || reshard_verify_pattern(l, g_rank, db, nd, NULL) == RESHARD_OK)
        return 0;
    fprintf(stderr, "rank %d: %s refit: %s\n", g_rank, method, reshard_last_error());
    return 1;
}

/* Every destination byte back to the sentinel, so that the next refit's check sees what
 * it wrote (padding included). */
static void reset(reshard_buffer_t *db, int32_t nd)
{
    for (int32_t i = 0; i < nd; i++)
        memset(db[i].ptr, RESHARD_SENTINEL_BYTE, (size_t)db[i].bytes);
}

static double max_over_ranks(double t)
{
    double m = 0;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static uint64_t sum_over_ranks(uint64_t v)
{
    uint64_t s = 0;
    MPI_Allreduce(&v, &s, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return s;
}

/* One timed refit of @p plan by every rank (the slowest rank's seconds); *@p read gets the
 * bytes every rank read or received, *@p wrong counts a destination that is not the
 * pattern; the destinations are reset to the sentinel afterwards. */
static double timed_refit(const char *method, reshard_plan_t *plan, reshard_comm_t *comm,
                          const reshard_buffer_t *src, int32_t ns, const reshard_layout_t *infer,
                          reshard_buffer_t *db, int32_t nd, uint64_t *read, long *wrong)
{
    reshard_exec_stats_t es;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    CK(reshard_plan_execute(plan, comm, src, ns, db, nd, &es), method);
    double t = max_over_ranks(MPI_Wtime() - t0);
    *read = sum_over_ranks(es.bytes_peer_read + es.bytes_recv);
    *wrong += wrong_after(method, infer, db, nd);
    reset(db, nd);
    return t;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *model_name = "qwen3-30b-a3b", *train_s = "tp=2,dp=2,ep=2,etp=1", *infer_s = "tp=4";
    long layers = 1, iters = 5, bucket_mb = 512;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model_name = argv[i + 1];
        else if (!strcmp(argv[i], "--train"))
            train_s = argv[i + 1];
        else if (!strcmp(argv[i], "--infer"))
            infer_s = argv[i + 1];
        else if (!strcmp(argv[i], "--layers"))
            layers = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            iters = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--bucket-mb"))
            bucket_mb = atol(argv[i + 1]);
        else {
            if (g_rank == 0)
                fprintf(stderr, "bench_mpi_colocated: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (iters < 1 || iters > MAX_REPS || bucket_mb < 1)
        die("--iters in [1, 64], --bucket-mb >= 1", RESHARD_ERR_INVALID_ARG);
    reshard_model_options_t mo = {.layers = (int32_t)layers};
    reshard_model_t *model = NULL;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_model_refit_t f;
    CK(reshard_train_spec_parse(train_s, &ts), "train spec");
    CK(reshard_infer_spec_parse(infer_s, &is), "infer spec");
    CK(reshard_model_load(model_name, &mo, &model), "model");
    CK(reshard_model_refit_create(model, &ts, &is, &f), "refit");
    int32_t T = f.train_world;
    if (T + f.infer_world != size)
        die("world size != train world + infer world", RESHARD_ERR_CONFIG);
    int32_t *host = calloc((size_t)size, sizeof *host), *dev = malloc((size_t)size * sizeof *dev);
    for (int32_t r = 0; r < size; r++)
        dev[r] = r < T ? r : r - T; /* training rank i and inference rank i: device i */
    reshard_plan_params_t pp = {.field_mask =
                                    RESHARD_PLAN_PARAM_PLACEMENT | RESHARD_PLAN_PARAM_COLOCATED,
                                .world_size = size,
                                .my_rank = g_rank,
                                .host = host,
                                .device = dev,
                                .colocated = 1};
    reshard_plan_t *plan = NULL, *plan_sh = NULL; /* one per source binding */
    CK(reshard_plan_create(f.train, f.infer, &pp, &plan), "plan");
    CK(reshard_plan_create(f.train, f.infer, &pp, &plan_sh), "plan");
    /* the buckets of the NeMo scheme: consecutive tensors up to --bucket-mb */
    int32_t nt = reshard_tensors_count(f.tensors), nb = 0;
    bucket_t *bk = calloc((size_t)nt, sizeof *bk);
    uint64_t full_bytes = 0, cap = (uint64_t)bucket_mb << 20;
    for (int32_t t0 = 0; t0 < nt;) {
        int32_t t1 = t0;
        uint64_t bytes = 0;
        reshard_tensor_info_t info;
        while (t1 < nt && reshard_tensors_info(f.tensors, t1, &info) == RESHARD_OK &&
               (t1 == t0 || bytes + info.bytes <= cap)) {
            bytes += (info.bytes + 7) & ~(uint64_t)7;
            t1++;
        }
        reshard_layout_t *full = NULL, *src = subset(f.tensors, f.train, t0, t1),
                         *dst = subset(f.tensors, f.infer, t0, t1);
        uint64_t b = full_layout(f.tensors, T, t0, t1, &full);
        full_bytes = b > full_bytes ? b : full_bytes;
        CK(reshard_plan_create(src, full, &pp, &bk[nb].gather), "gather plan");
        CK(reshard_plan_create(full, dst, &pp, &bk[nb].slice), "slice plan");
        nb++;
        reshard_layout_destroy(full);
        reshard_layout_destroy(src);
        reshard_layout_destroy(dst);
        t0 = t1;
    }
    reshard_comm_t *comm = NULL;
    CK(reshard_comm_create_mpi(MPI_COMM_WORLD, &comm), "comm");
    int32_t ns = 0, nd = 0;
    reshard_buffer_t *sb = alloc_bufs(f.train, g_rank, &ns, 0, 0);
    reshard_buffer_t *ss = alloc_bufs(f.train, g_rank, &ns, 0, 1);
    reshard_buffer_t *db = alloc_bufs(f.infer, g_rank, &nd, RESHARD_SENTINEL_BYTE, 0);
    if (ns) {
        CK(reshard_fill_pattern(f.train, g_rank, sb, ns), "fill");
        CK(reshard_fill_pattern(f.train, g_rank, ss, ns), "fill");
    }
    reshard_buffer_t fb = {.bytes = g_rank < T ? full_bytes : 0};
    if (fb.bytes)
        CK(reshard_alloc_shared(fb.bytes, &fb.ptr), "shared full buffer");
    uint64_t need = 0; /* the bytes this rank's fragments hold (padding excluded) */
    reshard_fragment_t fr;
    for (int64_t i = 0; i < reshard_layout_count(f.infer); i++) {
        reshard_tensor_info_t info;
        if (reshard_layout_fragment(f.infer, i, &fr) != RESHARD_OK || fr.rank != g_rank ||
            reshard_tensors_info(f.tensors, fr.tensor, &info) != RESHARD_OK)
            continue;
        uint64_t n = reshard_dtype_size(info.dtype);
        for (int d = 0; d < fr.box.ndim; d++)
            n *= (uint64_t)fr.box.extent[d];
        need += n;
    }
    unsigned char *priv = malloc(need ? (size_t)need : 1);
    memset(priv, 1, need ? (size_t)need : 1);
    double t_rs[MAX_REPS], t_sh[MAX_REPS], t_nemo[MAX_REPS], t_mc[MAX_REPS];
    uint64_t read_rs = 0, read_sh = 0, read_nemo = 0;
    long wrong = 0;
    for (long it = 0; it < iters; it++) {
        reshard_exec_stats_t es;
        /* reshard, then reshard over shared allocations */
        t_rs[it] = timed_refit("vm_readv", plan, comm, sb, ns, f.infer, db, nd, &read_rs, &wrong);
        t_sh[it] = timed_refit("shared", plan_sh, comm, ss, ns, f.infer, db, nd, &read_sh, &wrong);
        /* nemo: gather each bucket whole on every training rank, slice from it */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        uint64_t moved = 0;
        for (int32_t b = 0; b < nb; b++) {
            CK(reshard_plan_execute(bk[b].gather, comm, ss, ns, &fb, g_rank < T, &es),
               "nemo gather");
            moved += es.bytes_peer_read + es.bytes_recv + es.bytes_local;
            CK(reshard_plan_execute(bk[b].slice, comm, &fb, g_rank < T, db, nd, &es), "nemo slice");
            moved += es.bytes_peer_read + es.bytes_recv;
        }
        t_nemo[it] = max_over_ranks(MPI_Wtime() - t0);
        read_nemo = sum_over_ranks(moved);
        wrong += wrong_after("nemo", f.infer, db, nd);
        /* memcpy of the bytes each inference rank needs */
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        uint64_t o = 0;
        for (int32_t i = 0; i < nd && o < need; i++) {
            size_t n = (size_t)(db[i].bytes < need - o ? db[i].bytes : need - o);
            memcpy(db[i].ptr, priv + o, n);
            o += n;
        }
        t_mc[it] = max_over_ranks(MPI_Wtime() - t0);
        reset(db, nd); /* the next refit starts from the sentinel again */
    }
    long wrong_all = 0;
    MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    uint64_t need_all = sum_over_ranks(need);
    if (g_rank == 0) {
        double rs = median(t_rs, (int)iters), sh = median(t_sh, (int)iters),
               nm = median(t_nemo, (int)iters), mc = median(t_mc, (int)iters);
        printf("colocated refit: %s --layers %ld, train %s (%d ranks) -> infer %s (%d ranks), "
               "one host, %ld refits, NeMo buckets of %ld MiB (%d)\n",
               model_name, layers, train_s, T, infer_s, f.infer_world, iters, bucket_mb, nb);
        printf("  %-8s %12s %16s %14s\n", "method", "time/refit", "bytes moved", "x memcpy");
        printf("  %-8s %10.4f s %16llu %13.2fx\n", "vm_readv", rs, (unsigned long long)read_rs,
               mc > 0 ? rs / mc : 0);
        printf("  %-8s %10.4f s %16llu %13.2fx\n", "shared", sh, (unsigned long long)read_sh,
               mc > 0 ? sh / mc : 0);
        printf("  %-8s %10.4f s %16llu %13.2fx\n", "nemo", nm, (unsigned long long)read_nemo,
               mc > 0 ? nm / mc : 0);
        printf("  %-8s %10.4f s %16llu %13.2fx\n", "memcpy", mc, (unsigned long long)need_all, 1.0);
        printf("  bytes read by reshard / bytes the receivers need: %.4f (vm_readv), %.4f "
               "(shared); nemo / reshard time: %.2fx (vm_readv), %.2fx (shared)\n",
               need_all ? (double)read_rs / (double)need_all : 0,
               need_all ? (double)read_sh / (double)need_all : 0, rs > 0 ? nm / rs : 0,
               sh > 0 ? nm / sh : 0);
        printf("%s\n", wrong_all ? "FAILED: a refit left a wrong element"
                                 : "OK: every destination element of every refit verified");
    }
    for (int32_t b = 0; b < nb; b++) {
        reshard_plan_destroy(bk[b].gather);
        reshard_plan_destroy(bk[b].slice);
    }
    reshard_plan_destroy(plan);
    reshard_plan_destroy(plan_sh); /* its mappings first, then the allocations */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int32_t i = 0; i < ns; i++)
        if (ss[i].bytes)
            reshard_free_shared(ss[i].ptr);
    if (fb.bytes)
        reshard_free_shared(fb.ptr);
    reshard_comm_destroy(comm);
    MPI_Finalize();
    return wrong_all ? 1 : 0;
}
