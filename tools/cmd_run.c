/*
 * reshard run: execute a model refit under MPI, verified, beside the
 * gather+broadcast baseline.
 *
 *   mpirun -np N reshard run --model M --train SPEC --infer SPEC [options]
 *
 * MPI ranks [0, train world) hold the Megatron layout, the next infer world
 * ranks the vLLM layout. Training ranks fill their buffers with the
 * verification pattern; inference ranks set theirs to the sentinel before
 * every refit and check every element (and every padding byte) after it.
 * The plan is built once and executed --iters times; the buffers are rebound
 * between executions (two bindings, 64 bytes apart, alternate).
 *
 * Exit status: 0 when every refit moved data and verified; 1 on a failed
 * refit or verification (a timeout or transport failure aborts the whole job
 * with MPI_Abort so that no rank hangs); 2 on bad usage.
 */
#ifdef RESHARD_HAVE_MPI

#include <jansson.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "reshard/reshard.h"
#include "reshard/reshard_delta.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"
#include "reshard/reshard_shared.h"
#include "reshard/reshard_sim.h"
#ifdef RESHARD_HAVE_NCCL
#include "reshard/reshard_nccl.h"
#endif

/** Distance between the two buffer bindings that alternate across refits. */
#define REBIND_SHIFT 64

typedef struct {
    const char *model, *train, *infer, *dtype, *transport, *infer_dtype, *fp8_scale, *eplb_map;
    long layers, iters, domain_size;
    double staging_mb, timeout_s, relay_mb, change_fraction;
    int baseline, raw, json, mtp, colocated, shared, delta, delta_checksum, delta_no_verify,
        verify_cost;
} run_args_t;

static void run_usage(FILE *out)
{
    fprintf(
        out,
        "usage: mpirun -np N reshard run --model M --train SPEC --infer SPEC [options]\n"
        "  --model M          shipped model name or path to a HF config.json\n"
        "  --train SPEC       Megatron sizes, e.g. tp=2,pp=2,ep=4,etp=1 (+ dp=, cp=,\n"
        "                     etp= (default tp), vpp=, first=, last=,\n"
        "                     convention=megatron-lm|megatron-bridge)\n"
        "  --infer SPEC       vLLM sizes, e.g. tp=4,dp=2 (+ engines=, ep=on,\n"
        "                     vllm=0.24|0.25, redundant=N: EPLB's redundant "
        "experts)\n" CLI_INFER_SGLANG_HELP
        "  --eplb-map FILE    EPLB physical-to-logical map(s), JSON: a list (every MoE\n"
        "                     layer), a list of per-layer lists, or {\"maps\": [...]}: refit\n"
        "                     i uses map i mod n, each change replanned (this rank's own\n"
        "                     plan; not with --baseline, --raw or --delta when n > 1)\n"
        "                     N must be train world + infer world; ranks [0, train\n"
        "                     world) train, the rest infer\n"
        "  --layers K         keep only the first K decoder layers\n"
        "  --mtp              include the multi-token-prediction layers\n"
        "  --dtype bf16|fp8   weight form (fp8: e4m3 + 128x128 block scales)\n" CLI_INFER_DTYPE_HELP
        "  --iters I          refits to run and verify (default 5; the median is shown)\n"
        "  --baseline         also run gather+broadcast on the same data and ranks\n"
        "  --delta            delta refit (docs/delta.md): refit k changes a deterministic\n"
        "                     --change-fraction F of the elements (default 0.01) and sends\n"
        "                     only changed words; every byte is verified each refit;\n"
        "                     the dense plan (and --baseline, --raw) refits the same\n"
        "                     updates into destinations of their own, side by side\n"
        "  --delta-no-verify  with --delta: the opt-out of verification (on by default: each\n"
        "                     chunk carries the sender's hash of its new bytes, checked by\n"
        "                     the receiver after apply; --delta-checksum, its older flag,\n"
        "                     keeps it on)\n"
        "  --verify-cost      with --delta: beside the verified delta plan, the same refits\n"
        "                     with a delta plan that does not verify, on destinations of\n"
        "                     its own (the cost of verification, side by side)\n"
        "  --raw              also time raw MPI: each (sender, receiver) pair of the\n"
        "                     plan exchanges its byte count in plain messages\n"
        "  --json             print one JSON object (rank 0) instead of the table\n"
        "  --lose-rank R[,R2] elastic refit: ranks are lost mid-run (see run_elastic.c;\n"
        "                     with --lose-at I[,I2] (default 2), --lose-how stop|kill|resume\n"
        "                     (resume: stopped, then resumed after the survivors excluded it),\n"
        "                     --agree-timeout S (default 0.5), --respawn: a new process\n"
        "                     takes R's place; there --iters defaults to 4, --timeout to 5,\n"
        "                     --staging-mb to 1; --result-file F: the outcome as JSON,\n"
        "                     {\"ok\": B, ...}, the one to trust with --lose-how kill, under\n"
        "                     mpirun --enable-recovery, which exits 0 whatever the ranks do)\n"
        "  --staging-mb S     staging memory bound per rank in MiB (default 256)\n"
        "  --relay-mb S       relay scratch bound per rank in MiB (default: none)\n"
        "  --timeout S        seconds after which a silent peer fails the refit (60)\n"
        "  --domain-size N    ranks per NVLink domain, forwarding inside (default 1)\n"
        "  --colocated        pieces between ranks of one host are one-sided reads\n"
        "                     (process_vm_readv; docs/colocated.md); hosts from the MPI\n"
        "                     shared-memory split or RESHARD_HOST per rank; train rank i\n"
        "                     and infer rank i of a host share its device i; source\n"
        "                     buffers stay bound for the run\n"
        "  --shared           with --colocated: source buffers in shared allocations\n"
        "                     (reshard_alloc_shared), read mapped, at memcpy speed\n"
        "  --system S         h100 (8 ranks per domain) or gb200 (72)\n"
        "  --transport T      mpi (host memory, default) or nccl (GPU memory, one\n"
        "                     CUDA device per rank)\n");
}

__attribute__((format(printf, 2, 3))) static int usage_error(int rank, const char *fmt, ...)
{
    if (rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "reshard run: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n(see 'reshard run --help')\n");
        va_end(ap);
    }
    return 2;
}

/* 0 ok, 1 --help shown, 2 usage error. */
static int parse_args(int rank, int argc, char **argv, run_args_t *a)
{
    *a = (run_args_t){.dtype = "bf16",
                      .transport = "mpi",
                      .iters = 5,
                      .domain_size = -1,
                      .staging_mb = 256,
                      .relay_mb = -1,
                      .timeout_s = RESHARD_DEFAULT_TIMEOUT_S,
                      .change_fraction = -1};
    const char *system = NULL;
    const cli_opt_t opts[] = {{"--model", CLI_STRING, &a->model, 0, 0},
                              {"--train", CLI_STRING, &a->train, 0, 0},
                              {"--infer", CLI_STRING, &a->infer, 0, 0},
                              {"--dtype", CLI_STRING, &a->dtype, 0, 0},
                              {"--infer-dtype", CLI_STRING, &a->infer_dtype, 0, 0},
                              {"--fp8-scale", CLI_STRING, &a->fp8_scale, 0, 0},
                              {"--eplb-map", CLI_STRING, &a->eplb_map, 0, 0},
                              {"--system", CLI_STRING, &system, 0, 0},
                              {"--transport", CLI_STRING, &a->transport, 0, 0},
                              {"--baseline", CLI_FLAG, &a->baseline, 0, 0},
                              {"--raw", CLI_FLAG, &a->raw, 0, 0},
                              {"--json", CLI_FLAG, &a->json, 0, 0},
                              {"--mtp", CLI_FLAG, &a->mtp, 0, 0},
                              {"--colocated", CLI_FLAG, &a->colocated, 0, 0},
                              {"--shared", CLI_FLAG, &a->shared, 0, 0},
                              {"--delta", CLI_FLAG, &a->delta, 0, 0},
                              {"--delta-checksum", CLI_FLAG, &a->delta_checksum, 0, 0},
                              {"--delta-no-verify", CLI_FLAG, &a->delta_no_verify, 0, 0},
                              {"--verify-cost", CLI_FLAG, &a->verify_cost, 0, 0},
                              {"--change-fraction", CLI_NUMBER, &a->change_fraction, 0, 1},
                              {"--layers", CLI_INT, &a->layers, 1, 0},
                              {"--iters", CLI_INT, &a->iters, 1, 0},
                              {"--domain-size", CLI_INT, &a->domain_size, 1, 0},
                              {"--staging-mb", CLI_NUMBER, &a->staging_mb, STAGING_MB_MIN, 1 << 20},
                              {"--relay-mb", CLI_NUMBER, &a->relay_mb, 0, 1 << 30},
                              {"--timeout", CLI_NUMBER, &a->timeout_s, 0.001, 1e9}};
    char err[512];
    int rc = cli_parse(argc, argv, opts, sizeof opts / sizeof *opts, err, sizeof err);
    if (rc == 1 && rank == 0)
        run_usage(stdout);
    if (rc)
        return rc == 1 ? 1 : usage_error(rank, "%s", err);
    if (!a->model || !a->train || !a->infer)
        return usage_error(rank, "--model, --train and --infer are required");
    if (strcmp(a->transport, "mpi") && strcmp(a->transport, "nccl"))
        return usage_error(rank, "--transport: '%s' is not mpi or nccl", a->transport);
    if ((a->baseline || a->raw) && !strcmp(a->transport, "nccl"))
        return usage_error(rank, "--baseline and --raw run over MPI on host memory; not with "
                                 "--transport nccl");
    if (a->colocated && (strcmp(a->transport, "mpi") || a->domain_size > 1 || system))
        return usage_error(rank, "--colocated reads host memory with every rank its own "
                                 "domain: not with --transport nccl, --domain-size or --system");
    if (a->shared && !a->colocated)
        return usage_error(rank, "--shared puts the sources of --colocated reads in shared "
                                 "allocations: add --colocated");
    if ((a->delta_checksum || a->delta_no_verify || a->verify_cost) && !a->delta)
        return usage_error(rank, "--delta-checksum, --delta-no-verify and --verify-cost are for "
                                 "--delta refits: add --delta");
    if (a->delta_no_verify && (a->delta_checksum || a->verify_cost))
        return usage_error(rank, "--delta-no-verify turns verification off; --delta-checksum and "
                                 "--verify-cost need it on");
    if (a->change_fraction >= 0 && !a->delta)
        return usage_error(rank, "--change-fraction is for --delta refits");
    if (a->change_fraction < 0)
        a->change_fraction = 0.01;
    if (a->delta && a->iters < 2)
        return usage_error(rank, "--delta needs --iters 2 or more: refit 1 is dense by rule, "
                                 "the delta figures come from the refits after it");
    if (a->delta && strcmp(a->transport, "mpi"))
        return usage_error(rank, "--delta runs over MPI on host memory: not with --transport nccl");
    if (a->delta && (strcmp(a->dtype, "bf16") || a->infer_dtype))
        return usage_error(rank, "--delta refits bf16 weights into bf16 destinations: delta "
                                 "refit of quantized (FP8) destinations is not supported");
    if (a->delta && a->colocated)
        return usage_error(rank, "--delta sends encoded chunks and --colocated reads whole pieces "
                                 "one-sided: choose one");
    if (strcmp(a->dtype, "bf16") && strcmp(a->dtype, "fp8"))
        return usage_error(rank, "--dtype: '%s' is not bf16 or fp8", a->dtype);
    reshard_model_options_t probe = {0};
    char qerr[256];
    if (cli_infer_dtype(a->infer_dtype, a->fp8_scale, &probe, qerr, sizeof qerr))
        return usage_error(rank, "%s", qerr);
    if (system) {
        if (a->domain_size >= 0)
            return usage_error(rank, "--system and --domain-size exclude each other");
        a->domain_size = cli_system_domain_size(system);
        if (a->domain_size < 0)
            return usage_error(rank, "--system: '%s' is not h100 or gb200", system);
    }
    return 0;
}

/* ---- buffers ------------------------------------------------------------- */

/** One side's buffers of this rank: allocations REBIND_SHIFT bytes larger
 *  than the buffer, bound at offset 0 or REBIND_SHIFT. */
typedef struct {
    int32_t n;
    unsigned char **base;
    reshard_buffer_t *bind;
    int shift;              /**< current binding offset; -1 before the first binding */
    reshard_comm_t *device; /**< NCCL endpoint when the buffers are device memory, else NULL */
    bool shared;            /**< allocations of reshard_alloc_shared (--shared) */
} rank_bufs_t;

static void bufs_free(rank_bufs_t *b)
{
    for (int32_t i = 0; i < b->n; i++) {
#ifdef RESHARD_HAVE_NCCL
        if (b->device) {
            reshard_nccl_free(b->device, b->base[i]);
            continue;
        }
#endif
        if (b->shared)
            reshard_free_shared(b->base[i]);
        else
            free(b->base[i]);
    }
    free(b->base);
    free(b->bind);
    memset(b, 0, sizeof *b);
}

static reshard_status_t bufs_alloc(const reshard_layout_t *layout,
                                   const reshard_model_buffers_t *table, int32_t rank,
                                   reshard_comm_t *device, bool shared, rank_bufs_t *b)
{
    memset(b, 0, sizeof *b);
    b->shift = -1;
    b->device = device;
    b->shared = shared && !device;
    int32_t n = reshard_layout_buffer_count(layout, rank);
    if (n == 0)
        return RESHARD_OK;
    b->base = calloc((size_t)n, sizeof *b->base);
    b->bind = calloc((size_t)n, sizeof *b->bind);
    if (!b->base || !b->bind) {
        bufs_free(b);
        return RESHARD_ERR_NOMEM;
    }
    b->n = n;
    for (int32_t i = 0; i < n; i++) {
        uint64_t bytes = reshard_model_buffer_bytes(table, rank, i);
        uint64_t need = reshard_layout_buffer_bytes(layout, rank, i);
        if (need > bytes)
            bytes = need;
        void *p = NULL;
#ifdef RESHARD_HAVE_NCCL
        if (device) {
            reshard_status_t st = reshard_nccl_alloc(device, bytes + REBIND_SHIFT, &p);
            if (st != RESHARD_OK) {
                bufs_free(b);
                return st;
            }
        } else
#endif
            if (b->shared) {
            reshard_status_t st = reshard_alloc_shared(bytes + REBIND_SHIFT, &p);
            if (st != RESHARD_OK) {
                bufs_free(b);
                return st;
            }
        } else if (posix_memalign(&p, 4096, (size_t)bytes + REBIND_SHIFT) != 0) {
            bufs_free(b);
            return RESHARD_ERR_NOMEM;
        }
        b->base[i] = p;
        b->bind[i].bytes = bytes;
    }
    return RESHARD_OK;
}

/* Bind the buffers for refit @p iter (offset 0 or REBIND_SHIFT, alternating).
 * With @p keep_content the bytes move along with the binding (memmove is far
 * cheaper than filling the pattern again). False on the first binding. */
static bool bufs_bind(rank_bufs_t *b, long iter, bool keep_content)
{
    int shift = (int)(iter % 2) * REBIND_SHIFT;
    bool had = b->shift >= 0;
    if (b->device && keep_content) /* no overlapping moves on the device: source stays put */
        shift = 0;
    for (int32_t i = 0; i < b->n; i++) {
        if (keep_content && had && shift != b->shift)
            memmove(b->base[i] + shift, b->base[i] + b->shift, (size_t)b->bind[i].bytes);
        b->bind[i].ptr = b->base[i] + shift;
    }
    b->shift = shift;
    return had;
}

/* ---- one method (reshard or baseline) ----------------------------------- */

typedef struct method {
    const char *name;
    double *seconds;         /**< per refit, the slowest rank's */
    uint64_t bytes_moved;    /**< per refit, all ranks */
    uint64_t verified_bytes; /**< per refit, all ranks */
    uint64_t max_recv_bytes; /**< busiest receiving rank, per refit */
    uint64_t bytes_network;  /**< measured, sent across domains, per refit, all ranks */
    uint64_t bytes_nvlink;   /**< measured, sent inside domains, per refit, all ranks */
    int32_t receivers;       /**< ranks that received bytes */
    long wrong;              /**< refits x ranks that failed verification */
    /* delta refits, all ranks: the first and the last refit */
    uint64_t delta_stream[2], delta_wire[2], delta_changed[2], snapshot_max;
    int64_t delta_chunks[2];
    int64_t dense_streams[2], version_min, committed;
    long done; /**< refits completed */
    long skip; /**< refits left out of the median (--delta: the first, dense by rule) */
} method_t;

typedef struct {
    const run_args_t *a;
    int rank, size;
    reshard_model_refit_t *refit;
    reshard_comm_t *comm;
    rank_bufs_t src, dst;
    reshard_plan_t *plan;
    reshard_plan_t *dense;        /**< --delta: the dense plan of the same layouts */
    rank_bufs_t dst_dense;        /**< --delta: destinations of the dense plan and the baseline */
    reshard_plan_t *trust;        /**< --verify-cost: the delta plan without verification */
    rank_bufs_t dst_trust;        /**< its destinations */
    const struct method *trust_m; /**< its refits */
    reshard_baseline_t *baseline;
    uint64_t dst_bytes;     /**< bytes the inference side needs: its fragments, summed */
    double *replan_seconds; /**< per EPLB map change, the slowest rank's own replan */
    long replans;
    uint64_t peer_read;         /**< measured one-sided reads per refit, all ranks */
    reshard_plan_stats_t paths; /**< --colocated, rank 0: the global plan's bytes by path */
} run_t;

/* --colocated: unless RESHARD_DEVICE named them, the i-th training rank and the i-th
 * inference rank of a host share its device i (trainer and engine on the same GPUs). */
static void colocated_devices(int32_t train_world, int32_t size, const int32_t *host, int32_t *dev)
{
    for (int32_t r = 0; r < size; r++) {
        if (dev[r] != RESHARD_DEVICE_CPU)
            continue;
        int32_t i = 0;
        for (int32_t q = r < train_world ? 0 : train_world; q < r; q++)
            i += host[q] == host[r];
        dev[r] = i;
    }
}

static void print_paths(const reshard_plan_stats_t *s)
{
    printf("colocated plan, bytes by path (plan / lower bound):\n"
           "  same device %llu / %llu, same host %llu / %llu, cross host %llu / %llu; "
           "read one-sided %llu\n",
           (unsigned long long)s->bytes_same_device, (unsigned long long)s->bound_same_device_bytes,
           (unsigned long long)s->bytes_same_host, (unsigned long long)s->bound_same_host_bytes,
           (unsigned long long)s->bytes_cross_host, (unsigned long long)s->bound_cross_host_bytes,
           (unsigned long long)s->bytes_peer_read);
}

/* The bytes of every destination fragment (padding excluded). */
static uint64_t layout_bytes(const reshard_model_refit_t *f)
{
    uint64_t sum = 0;
    reshard_fragment_t fr;
    reshard_tensor_info_t info;
    reshard_buffer_info_t bi;
    for (int64_t i = 0; i < reshard_layout_count(f->infer); i++) {
        if (reshard_layout_fragment(f->infer, i, &fr) != RESHARD_OK ||
            reshard_tensors_info(f->tensors, fr.tensor, &info) != RESHARD_OK)
            continue;
        /* a quantized tensor's fragments are e4m3 in buffers declared so */
        bool declared =
            reshard_layout_declared_buffer(f->infer, fr.rank, fr.buffer, &bi) == RESHARD_OK;
        uint64_t n = reshard_dtype_size(declared ? bi.dtype : info.dtype);
        for (int d = 0; d < fr.box.ndim; d++)
            n *= (uint64_t)fr.box.extent[d];
        sum += n;
    }
    return sum;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(const double *v, long n);

/* The median refit time of @p m, its first @p m->skip refits left out. */
static double method_median(const method_t *m)
{
    long k = m->done > m->skip ? m->skip : 0;
    return median(m->seconds + k, m->done - k);
}

static double median(const double *v, long n)
{
    if (n <= 0)
        return 0;
    double *s = malloc((size_t)n * sizeof *s);
    if (!s)
        return v[0];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* A failure that leaves peers in an unknown state ends the whole job. */
static void abort_if_transport(const run_t *r, reshard_status_t st)
{
    if (st == RESHARD_ERR_TIMEOUT || st == RESHARD_ERR_TRANSPORT) {
        fprintf(stderr, "reshard run: rank %d: aborting the job after %s\n", r->rank,
                reshard_status_string(st));
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static reshard_status_t agree_setup(reshard_status_t st);

/* Pattern fill, sentinel and verification on host or device buffers. */
static reshard_status_t fill_pattern(const run_t *r, const reshard_layout_t *l, rank_bufs_t *b)
{
#ifdef RESHARD_HAVE_NCCL
    if (b->device)
        return reshard_nccl_fill_pattern(b->device, l, r->rank, b->bind, b->n);
#endif
    return reshard_fill_pattern(l, r->rank, b->bind, b->n);
}

static void set_sentinel(rank_bufs_t *b, int32_t i)
{
    const uint64_t bytes = b->bind[i].bytes + REBIND_SHIFT;
#ifdef RESHARD_HAVE_NCCL
    if (b->device) {
        if (reshard_nccl_memset(b->device, b->base[i], RESHARD_SENTINEL_BYTE, bytes) !=
            RESHARD_OK) {
            fprintf(stderr, "reshard run: sentinel: %s\n", reshard_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        return;
    }
#endif
    memset(b->base[i], RESHARD_SENTINEL_BYTE, (size_t)bytes);
}

static reshard_status_t verify_pattern(const run_t *r, const reshard_layout_t *l,
                                       const rank_bufs_t *b, uint64_t *verified)
{
#ifdef RESHARD_HAVE_NCCL
    if (b->device)
        return reshard_nccl_verify_pattern(b->device, l, r->rank, b->bind, b->n, verified);
#endif
    return reshard_verify_pattern(l, r->rank, b->bind, b->n, verified);
}

/* The NCCL endpoint of this rank: every rank must see a CUDA device (agreed first, so no
 * rank waits in NCCL for one that cannot join); rank 0 makes the unique id, MPI_Bcast
 * spreads it; the device is the host-local rank modulo the host's devices. */
static reshard_status_t comm_create_nccl(int rank, int size, reshard_comm_t **out)
{
#ifdef RESHARD_HAVE_NCCL
    int ndev = 0;
    reshard_status_t st = reshard_nccl_device_count(&ndev);
    if (st != RESHARD_OK)
        fprintf(stderr, "reshard run: rank %d: %s\n", rank, reshard_last_error());
    if ((st = agree_setup(st)) != RESHARD_OK)
        return st;
    MPI_Comm node;
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    const size_t idn = reshard_nccl_unique_id_size();
    unsigned char *id = calloc(1, idn);
    int idst = id ? RESHARD_OK : RESHARD_ERR_NOMEM;
    if (rank == 0 && id && (idst = reshard_nccl_get_unique_id(id)) != RESHARD_OK)
        fprintf(stderr, "reshard run: %s\n", reshard_last_error());
    MPI_Bcast(&idst, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (idst == RESHARD_OK && id)
        MPI_Bcast(id, (int)idn, MPI_BYTE, 0, MPI_COMM_WORLD);
    st = idst == RESHARD_OK && id
             ? reshard_comm_create_nccl_from_id(id, rank, size, local % ndev, NULL, out)
             : (reshard_status_t)idst;
    free(id);
    return st;
#else
    (void)size;
    *out = NULL;
    if (rank == 0)
        fprintf(stderr,
                "reshard run: --transport nccl: this build has no NCCL transport "
                "(configure with -DRESHARD_WITH_NCCL=ON where CUDA and NCCL are installed)\n");
    return RESHARD_ERR_UNSUPPORTED;
#endif
}

/* Complete nonblocking collective @p req within the run's timeout; a peer
 * that died or stalled between refits ends the job with an error instead of
 * a hang (MPI_Abort: mpirun then ends every rank with a non-zero status). */
static void wait_or_abort(const run_t *r, MPI_Request *req, const char *what)
{
    double deadline = MPI_Wtime() + r->a->timeout_s;
    struct timespec nap = {0, 100000};
    for (int done = 0;;) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done)
            return;
        if (MPI_Wtime() > deadline) {
            fprintf(stderr,
                    "reshard run: rank %d: RESHARD_ERR_TIMEOUT: not every rank reached %s within "
                    "%g s (dead or stalled peer)\n",
                    r->rank, what, r->a->timeout_s);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        nanosleep(&nap, NULL);
    }
}

/* The delta counters of the refit just run, summed over ranks, into slot @p at of @p m. */
static void delta_totals(const run_t *r, const reshard_plan_t *plan, method_t *m, int at)
{
    reshard_delta_info_t di;
    memset(&di, 0, sizeof di);
    reshard_plan_delta_info(plan, r->rank, &di);
    uint64_t in[5] = {di.stream_bytes, di.wire_bytes, di.changed_bytes, (uint64_t)di.dense_streams,
                      (uint64_t)(di.chunks[0] + di.chunks[1] + di.chunks[2] + di.chunks[3])},
             sum[5];
    int64_t v[2] = {di.version, r->dst.n ? di.state == RESHARD_DELTA_COMMITTED : 1}, vmin[2];
    MPI_Request q[3];
    MPI_Iallreduce(in, sum, 5, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD, &q[0]);
    MPI_Iallreduce(&di.snapshot_bytes, &m->snapshot_max, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                   &q[1]);
    MPI_Iallreduce(v, vmin, 2, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD, &q[2]);
    for (int k = 0; k < 3; k++)
        wait_or_abort(r, &q[k], "the delta summary");
    m->delta_stream[at] = sum[0];
    m->delta_wire[at] = sum[1];
    m->delta_changed[at] = sum[2];
    m->dense_streams[at] = (int64_t)sum[3];
    m->delta_chunks[at] = (int64_t)sum[4];
    m->version_min = vmin[0];
    m->committed = vmin[1];
}

/** What refit_once runs: the plan (a delta plan with --delta), the dense plan beside a
 *  delta plan, or the gather+broadcast baseline. */
typedef enum { METHOD_PLAN, METHOD_DENSE, METHOD_BASELINE, METHOD_TRUST } method_kind_t;

/* Prepare the buffers of refit @p iter, run method @p kind, verify. Returns the agreed
 * execution status. With --delta the sources take refit iter's values (the plan runs
 * first in every refit); the dense plan and the baseline write destinations of their
 * own (rebound and set to the sentinel every refit), so the delta plan's stay at its
 * committed version. */
static reshard_status_t refit_once(run_t *r, method_t *m, long iter, method_kind_t kind)
{
    const reshard_model_refit_t *f = r->refit;
    reshard_status_t st = RESHARD_OK;
    const bool delta = r->a->delta && (kind == METHOD_PLAN || kind == METHOD_TRUST);
    const bool versioned = r->a->delta;
    const double frac = r->a->change_fraction;
    rank_bufs_t *dst = kind == METHOD_TRUST               ? &r->dst_trust
                       : versioned && kind != METHOD_PLAN ? &r->dst_dense
                                                          : &r->dst;
    if (delta) { /* buffers stay bound; the sources take refit iter's values (the plan's run) */
        bufs_bind(&r->src, 0, true);
        bufs_bind(dst, 0, false);
        if (r->src.n && kind == METHOD_PLAN)
            st = reshard_fill_pattern_version(f->train, r->rank, r->src.bind, r->src.n, iter, frac);
    } else if (versioned) { /* the sources as the delta refit left them */
        bufs_bind(&r->src, 0, true);
        bufs_bind(dst, iter, false);
    } else {
        if (!bufs_bind(&r->src, r->a->colocated ? 0 : iter, true) && r->src.n)
            st = fill_pattern(r, f->train, &r->src);
        bufs_bind(dst, iter, false);
    }
    if (st != RESHARD_OK) {
        fprintf(stderr, "reshard run: rank %d: fill: %s\n", r->rank, reshard_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int32_t i = 0; i < dst->n && (!delta || iter == 0); i++)
        set_sentinel(dst, i);

    reshard_exec_stats_t stats = {0};
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    wait_or_abort(r, &req, "the start of a refit");
    double t0 = MPI_Wtime();
    st = kind == METHOD_BASELINE
             ? reshard_baseline_execute(r->baseline, r->src.bind, r->src.n, dst->bind, dst->n,
                                        &stats)
             : reshard_plan_execute(kind == METHOD_DENSE   ? r->dense
                                    : kind == METHOD_TRUST ? r->trust
                                                           : r->plan,
                                    r->comm, r->src.bind, r->src.n, dst->bind, dst->n, &stats);
    double dt = MPI_Wtime() - t0;
    if (st != RESHARD_OK) {
        fprintf(stderr, "reshard run: rank %d: %s refit %ld failed: %s: %s\n", r->rank, m->name,
                iter + 1, reshard_status_string(st), reshard_last_error());
        abort_if_transport(r, st);
        return st; /* every rank got the same status from the agreement */
    }
    uint64_t verified = 0;
    long wrong = 0;
    if (dst->n) {
        reshard_status_t vs = versioned
                                  ? reshard_verify_pattern_version(f->infer, r->rank, dst->bind,
                                                                   dst->n, iter, frac, &verified)
                                  : verify_pattern(r, f->infer, dst, &verified);
        if (vs != RESHARD_OK) {
            fprintf(stderr, "reshard run: rank %d: %s refit %ld: verification failed: %s\n",
                    r->rank, m->name, iter + 1, reshard_last_error());
            wrong = 1;
        }
    }
    double tmax = 0;
    /* bytes moved between distinct ranks: received, or read one-sided (colocated) */
    uint64_t sums[5] = {stats.bytes_recv + stats.bytes_peer_read, verified,
                        stats.bytes_sent_network, stats.bytes_sent_nvlink, stats.bytes_peer_read},
             tot[5];
    uint64_t recv = stats.bytes_recv, recv_max = 0;
    int got = stats.bytes_recv > 0, receivers = 0;
    long wrong_all = 0;
    MPI_Request reqs[5];
    MPI_Iallreduce(&dt, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &reqs[0]);
    MPI_Iallreduce(sums, tot, 5, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD, &reqs[1]);
    MPI_Iallreduce(&recv, &recv_max, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD, &reqs[2]);
    MPI_Iallreduce(&got, &receivers, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[3]);
    MPI_Iallreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &reqs[4]);
    for (int q = 0; q < 5; q++)
        wait_or_abort(r, &reqs[q], "the verification summary");
    m->seconds[m->done++] = tmax;
    m->bytes_moved = tot[0];
    m->verified_bytes = tot[1];
    m->bytes_network = tot[2];
    m->bytes_nvlink = tot[3];
    if (kind == METHOD_PLAN)
        r->peer_read = tot[4];
    m->max_recv_bytes = recv_max;
    m->receivers = receivers;
    m->wrong += wrong_all;
    if (delta)
        delta_totals(r, kind == METHOD_TRUST ? r->trust : r->plan, m, iter == 0 ? 0 : 1);
    return RESHARD_OK;
}

/* Root of each tensor for the baseline: the first rank of the pipeline stage
 * that holds it (when it holds part of the tensor), else its lowest holder. */
static int32_t *stage_roots(const reshard_model_refit_t *f)
{
    int32_t nt = reshard_tensors_count(f->tensors);
    int32_t stage = f->train_world / (f->train_spec.pp > 0 ? f->train_spec.pp : 1);
    int32_t *root = malloc((size_t)(nt ? nt : 1) * sizeof *root);
    char *holds = calloc((size_t)(nt ? nt : 1), 1);
    if (!root || !holds) {
        free(root);
        free(holds);
        return NULL;
    }
    for (int32_t t = 0; t < nt; t++)
        root[t] = -1;
    int64_t n = reshard_layout_count(f->train);
    reshard_fragment_t fr;
    for (int64_t i = 0; i < n; i++)
        if (reshard_layout_fragment(f->train, i, &fr) == RESHARD_OK &&
            (root[fr.tensor] < 0 || fr.rank < root[fr.tensor]))
            root[fr.tensor] = fr.rank;
    for (int64_t i = 0; i < n; i++)
        if (reshard_layout_fragment(f->train, i, &fr) == RESHARD_OK &&
            fr.rank == root[fr.tensor] / stage * stage)
            holds[fr.tensor] = 1;
    for (int32_t t = 0; t < nt; t++)
        if (holds[t])
            root[t] = root[t] / stage * stage;
    free(holds);
    return root;
}

/* ---- raw MPI: the plan's pairs as plain messages ----------------------- */

/** This rank's raw-MPI buffers: one message's worth to send from (every send
 *  reads the same bytes; MPI allows concurrent sends from one buffer), and
 *  everything it receives. */
typedef struct {
    char *sbuf, *rbuf;
    uint64_t sbytes, rbytes; /**< largest message sent; bytes received */
} raw_bufs_t;

static reshard_status_t raw_alloc(const run_t *r, raw_bufs_t *x)
{
    memset(x, 0, sizeof *x);
    for (int p = 0; p < r->size; p++) {
        if (p == r->rank)
            continue;
        uint64_t out = reshard_plan_pair_bytes(r->plan, r->rank, p);
        x->sbytes = out > x->sbytes ? out : x->sbytes;
        x->rbytes += reshard_plan_pair_bytes(r->plan, p, r->rank);
    }
    x->sbytes = x->sbytes < ((uint64_t)1 << 30) ? x->sbytes : (uint64_t)1 << 30;
    x->sbuf = malloc((size_t)x->sbytes + 1);
    x->rbuf = malloc((size_t)x->rbytes + 1);
    if (!x->sbuf || !x->rbuf)
        return RESHARD_ERR_NOMEM;
    memset(x->sbuf, 3, (size_t)x->sbytes + 1);
    memset(x->rbuf, 0, (size_t)x->rbytes + 1);
    return RESHARD_OK;
}

/* Every (sender, receiver) pair of the plan exchanges its byte count between
 * contiguous buffers in one MPI_Isend/MPI_Irecv (split at 1 GiB), all posted
 * at once: what the MPI library itself reaches for this traffic, without
 * packing or a staging bound. Records the slowest rank's seconds in @p m. */
static void raw_once(const run_t *r, method_t *m, const raw_bufs_t *x)
{
    const uint64_t max = (uint64_t)1 << 30;
    int cap = 16, n = 0;
    MPI_Request *req = malloc((size_t)cap * sizeof *req), bar;
    MPI_Ibarrier(MPI_COMM_WORLD, &bar);
    wait_or_abort(r, &bar, "the start of a raw MPI exchange");
    double t0 = MPI_Wtime();
    uint64_t roff = 0;
    for (int pass = 0; pass < 2 && req; pass++) {
        for (int p = 0; p < r->size && req; p++) {
            if (p == r->rank)
                continue;
            uint64_t bytes = pass == 0 ? reshard_plan_pair_bytes(r->plan, p, r->rank)
                                       : reshard_plan_pair_bytes(r->plan, r->rank, p);
            for (uint64_t o = 0; o < bytes && req; o += max) {
                int len = (int)(bytes - o < max ? bytes - o : max);
                if (n == cap) {
                    MPI_Request *q = realloc(req, (size_t)(cap *= 2) * sizeof *req);
                    if (!q)
                        free(req);
                    req = q;
                    if (!req)
                        break;
                }
                if (pass == 0)
                    MPI_Irecv(x->rbuf + roff + o, len, MPI_BYTE, p, 7, MPI_COMM_WORLD, &req[n++]);
                else
                    MPI_Isend(x->sbuf, len, MPI_BYTE, p, 7, MPI_COMM_WORLD, &req[n++]);
            }
            roff += pass == 0 ? bytes : 0;
        }
    }
    if (!req) {
        fprintf(stderr, "reshard run: rank %d: raw MPI: out of memory\n", r->rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* bounded like every other wait of the run: a dead peer ends the job */
    double deadline = MPI_Wtime() + r->a->timeout_s;
    struct timespec nap = {0, 100000};
    for (int done = 0; !done;) {
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (!done && MPI_Wtime() > deadline) {
            fprintf(stderr,
                    "reshard run: rank %d: RESHARD_ERR_TIMEOUT: raw MPI exchange not done "
                    "within %g s\n",
                    r->rank, r->a->timeout_s);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (!done)
            nanosleep(&nap, NULL);
    }
    double dt = MPI_Wtime() - t0, tmax = 0;
    free(req);
    uint64_t got = x->rbytes, tot = 0;
    MPI_Request q[2];
    MPI_Iallreduce(&dt, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &q[0]);
    MPI_Iallreduce(&got, &tot, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD, &q[1]);
    wait_or_abort(r, &q[0], "the raw MPI summary");
    wait_or_abort(r, &q[1], "the raw MPI summary");
    m->seconds[m->done++] = tmax;
    m->bytes_moved = tot;
}

/* ---- output -------------------------------------------------------------- */

static void fmt_bytes(uint64_t b, char *out, size_t size)
{
    if (b >= 1000000000ull)
        snprintf(out, size, "%.2f GB", (double)b / 1e9);
    else if (b >= 1000000ull)
        snprintf(out, size, "%.2f MB", (double)b / 1e6);
    else
        snprintf(out, size, "%llu B", (unsigned long long)b);
}

/* One rate for every method: the bytes the inference side needs (each
 * inference rank's destination bytes, summed) / inference ranks / time. The
 * same numerator and denominator for reshard, the baseline and raw MPI, so
 * the ratio of two rates is the ratio of their times. */
static double method_gbps(const run_t *r, double sec)
{
    return sec > 0 ? (double)r->dst_bytes / r->refit->infer_world / sec / 1e9 : 0;
}

static void print_row(const run_t *r, const method_t *m, bool verified)
{
    char moved[32], ver[32];
    fmt_bytes(m->bytes_moved, moved, sizeof moved);
    fmt_bytes(m->verified_bytes, ver, sizeof ver);
    double med = method_median(m), best = med;
    for (long i = 0; i < m->done; i++)
        best = m->seconds[i] < best ? m->seconds[i] : best;
    printf("  %-9s %9.4f s %9.4f s %13s %12.3f", m->name, med, best, moved, method_gbps(r, med));
    if (verified)
        printf(" %14s %7ld\n", ver, m->wrong);
    else
        printf(" %14s %7s\n", "(not checked)", "-");
}

/* The header, printed before the refits start. */
static void print_header(const run_t *r, double plan_s)
{
    const reshard_model_refit_t *f = r->refit;
    const run_args_t *a = r->a;
    char tspec[192], ispec[128], model_b[32], need[32];
    reshard_train_spec_str(&f->train_spec, tspec, sizeof tspec);
    reshard_infer_spec_str(&f->infer_spec, ispec, sizeof ispec);
    fmt_bytes(reshard_tensors_bytes(f->tensors), model_b, sizeof model_b);
    fmt_bytes(r->dst_bytes, need, sizeof need);
    printf("reshard run: %s, %s of weights (%d tensors); the inference side needs %s\n", a->model,
           model_b, reshard_tensors_count(f->tensors), need);
    printf("  train %s on ranks 0-%d, infer %s on ranks %d-%d; ", tspec, f->train_world - 1, ispec,
           f->train_world, f->train_world + f->infer_world - 1);
    if (a->domain_size > 1)
        printf("NVLink domains of %ld ranks\n", a->domain_size);
    else
        printf("no NVLink domains (every rank its own)\n");
    if (a->delta)
        printf("  %ld delta refits, refit k changes %g of the elements (buffers stay bound); "
               "staging %.0f MiB/rank; timeout %.0f s; plan built in %.3f s\n\n",
               a->iters, a->change_fraction, a->staging_mb, a->timeout_s, plan_s);
    else
        printf("  %ld refits per method, %s rebound every refit; staging %.0f MiB/rank; "
               "timeout %.0f s; plan built in %.3f s\n\n",
               a->iters, a->colocated ? "destination buffers (sources read in place)" : "buffers",
               a->staging_mb, a->timeout_s, plan_s);
    printf("  %-9s %11s %11s %13s %12s %14s %7s\n", "method", "time/refit", "fastest",
           "bytes moved", "GB/s/infer", "verified", "#wrong");
    fflush(stdout);
}

/** --delta: the last refit's delta figures beside the dense plan's, all ranks. */
typedef struct {
    double fraction;       /**< measured: changed bytes / stream bytes */
    double bound_bytes;    /**< the encoding's bound for that fraction, its chunks */
    double wire_per_bound; /**< wire bytes / bound_bytes */
    double wire_per_dense; /**< wire bytes / stream bytes */
    double network_ratio;  /**< dense network bytes / delta network bytes (0: neither has any) */
    double nvlink_ratio;   /**< the same for the bytes inside domains */
    double time_ratio;     /**< dense median / delta median */
} delta_figs_t;

static delta_figs_t delta_figs(const method_t *rs, const method_t *dn, bool checksum)
{
    delta_figs_t d = {0};
    const double stream = (double)rs->delta_stream[1], wire = (double)rs->delta_wire[1];
    const int64_t chunks = rs->delta_chunks[1];
    if (stream > 0 && chunks > 0) {
        d.fraction = (double)rs->delta_changed[1] / stream;
        /* chunks of the mean length; bf16 words (--delta refits bf16) */
        d.bound_bytes = (double)chunks * reshard_sim_delta_chunk_bytes(
                                             (uint64_t)(stream / (double)chunks), 2, d.fraction);
        if (checksum) /* each chunk's header carries its 8-byte XXH3 */
            d.bound_bytes += 8.0 * (double)chunks;
        d.wire_per_bound = wire / d.bound_bytes;
        d.wire_per_dense = wire / stream;
    }
    if (dn) {
        d.network_ratio =
            rs->bytes_network ? (double)dn->bytes_network / (double)rs->bytes_network : 0;
        d.nvlink_ratio = rs->bytes_nvlink ? (double)dn->bytes_nvlink / (double)rs->bytes_nvlink : 0;
        double t = method_median(rs);
        d.time_ratio = t > 0 ? method_median(dn) / t : 0;
    }
    return d;
}

static void print_table(const run_t *r, const method_t *rs, const method_t *dn, const method_t *bl,
                        const method_t *raw, bool ok)
{
    print_row(r, rs, true);
    if (dn)
        print_row(r, dn, true);
    if (bl)
        print_row(r, bl, true);
    if (raw)
        print_row(r, raw, false);
    double s = method_median(rs);
    if (bl)
        printf("  speedup   %.2fx (baseline median / %s median)\n",
               s > 0 ? method_median(bl) / s : 0, rs->name);
    printf("\n  time/refit: median over refits of the slowest rank; bytes moved: between "
           "distinct ranks, per refit;\n  GB/s/infer: bytes the inference side needs / "
           "inference ranks / time/refit (the same for every method)\n");
    if (r->replans)
        printf("  EPLB map changes: %ld, each replanned (own plan) in %.4f s (median of the "
               "slowest rank)\n",
               r->replans, median(r->replan_seconds, r->replans));
    if (dn) {
        delta_figs_t d = delta_figs(rs, dn, !r->a->delta_no_verify);
        /* one domain holding every rank: nothing crosses the network, compare NVLink */
        const bool net = rs->bytes_network || dn->bytes_network;
        char dnet[32], nnet[32], bnet[32];
        fmt_bytes(net ? rs->bytes_network : rs->bytes_nvlink, dnet, sizeof dnet);
        fmt_bytes(net ? dn->bytes_network : dn->bytes_nvlink, nnet, sizeof nnet);
        fmt_bytes(bl ? (net ? bl->bytes_network : bl->bytes_nvlink) : 0, bnet, sizeof bnet);
        printf("  dense reshard / delta: time %.2fx, %s bytes %.2fx (delta %s vs dense %s%s%s)\n",
               d.time_ratio, net ? "network" : "NVLink (no network bytes)",
               net ? d.network_ratio : d.nvlink_ratio, dnet, nnet, bl ? "; baseline " : "",
               bl ? bnet : "");
        printf("  delta wire bytes (last refit): %.4f of dense, %.4f x the encoding's bound for "
               "the measured\n  changed fraction %.5f (reshard_sim_delta_chunk_bytes, its "
               "chunks of bf16)\n",
               d.wire_per_dense, d.wire_per_bound, d.fraction);
    }
    if (r->trust) {
        const double v = method_median(rs), t = method_median(r->trust_m);
        printf("  verification: delta (verified) %.4f s vs delta without verification %.4f s "
               "per refit: %+.1f%% (medians, refits interleaved, each on its own "
               "destinations)\n",
               v, t, t > 0 ? 100.0 * (v / t - 1) : 0);
    }
    if (r->a->delta && rs->skip)
        printf("  time/refit of every method: median of refits 2..%ld (refit 1 of a delta plan is "
               "dense by rule)\n",
               rs->done);
    if (r->a->delta)
        for (int at = 0; at < 2; at++) {
            char st[32], w[32], snap[32];
            fmt_bytes(rs->delta_stream[at], st, sizeof st);
            fmt_bytes(rs->delta_wire[at], w, sizeof w);
            fmt_bytes(rs->snapshot_max, snap, sizeof snap);
            printf("  delta %s refit: %s on the wire for %s of streams (%.4f of dense), %lld "
                   "streams sent dense%s%s%s\n",
                   at ? "last" : "first", w, st,
                   rs->delta_stream[at] ? (double)rs->delta_wire[at] / rs->delta_stream[at] : 0,
                   (long long)rs->dense_streams[at], at ? "; snapshot " : "", at ? snap : "",
                   at ? " per rank at most" : "");
        }
    printf("%s\n", ok ? "OK: every destination element of every refit verified"
                      : "FAILED: see the errors above");
}

static void print_json(const run_t *r, const method_t *rs, const method_t *dn, const method_t *bl,
                       const method_t *raw, const reshard_plan_stats_t *ps, double plan_s, bool ok)
{
    const reshard_model_refit_t *f = r->refit;
    double sec = method_median(rs);
    json_t *o = json_object();
    json_object_set_new(o, "ok", json_boolean(ok));
    json_object_set_new(o, "seconds", json_real(sec));
    json_object_set_new(o, "bytes_moved", json_integer((json_int_t)rs->bytes_moved));
    json_object_set_new(o, "verified_bytes", json_integer((json_int_t)rs->verified_bytes));
    json_object_set_new(o, "wrong", json_integer(rs->wrong));
    json_object_set_new(o, "gbps_per_infer_rank", json_real(method_gbps(r, sec)));
    json_object_set_new(o, "infer_bytes", json_integer((json_int_t)r->dst_bytes));
    json_object_set_new(o, "iters", json_integer(rs->done));
    json_object_set_new(o, "model", json_string(r->a->model));
    json_object_set_new(o, "model_bytes",
                        json_integer((json_int_t)reshard_tensors_bytes(f->tensors)));
    json_object_set_new(o, "train_world", json_integer(f->train_world));
    json_object_set_new(o, "infer_world", json_integer(f->infer_world));
    json_object_set_new(o, "plan_seconds", json_real(plan_s));
    if (r->a->eplb_map) { /* EPLB map changes: this rank's own replan, the slowest rank */
        json_object_set_new(o, "replans", json_integer(r->replans));
        json_object_set_new(o, "replan_seconds", json_real(median(r->replan_seconds, r->replans)));
    }
    /* measured link-class bytes beside the plan's (they must be equal) */
    json_object_set_new(o, "domain_size",
                        json_integer(r->a->domain_size > 0 ? r->a->domain_size : 1));
    json_object_set_new(o, "bytes_network", json_integer((json_int_t)rs->bytes_network));
    json_object_set_new(o, "bytes_nvlink", json_integer((json_int_t)rs->bytes_nvlink));
    json_object_set_new(o, "plan_bytes_network", json_integer((json_int_t)ps->bytes_network));
    json_object_set_new(o, "plan_bytes_nvlink", json_integer((json_int_t)ps->bytes_nvlink));
    json_object_set_new(o, "plan_max_relay_bytes", json_integer((json_int_t)ps->max_relay_bytes));
    if (r->a->colocated) {
        const reshard_plan_stats_t *q = &r->paths;
        json_t *c = json_object();
        json_object_set_new(c, "bytes_same_device", json_integer((json_int_t)q->bytes_same_device));
        json_object_set_new(c, "bytes_same_host", json_integer((json_int_t)q->bytes_same_host));
        json_object_set_new(c, "bytes_cross_host", json_integer((json_int_t)q->bytes_cross_host));
        json_object_set_new(c, "bound_same_device_bytes",
                            json_integer((json_int_t)q->bound_same_device_bytes));
        json_object_set_new(c, "bound_same_host_bytes",
                            json_integer((json_int_t)q->bound_same_host_bytes));
        json_object_set_new(c, "bound_cross_host_bytes",
                            json_integer((json_int_t)q->bound_cross_host_bytes));
        json_object_set_new(c, "plan_bytes_peer_read",
                            json_integer((json_int_t)q->bytes_peer_read));
        json_object_set_new(c, "bytes_peer_read", json_integer((json_int_t)r->peer_read));
        json_object_set_new(o, "colocated", c);
    }
    if (bl) {
        double bsec = method_median(bl);
        json_object_set_new(o, "baseline_seconds", json_real(bsec));
        json_object_set_new(o, "speedup", json_real(sec > 0 ? bsec / sec : 0));
        json_object_set_new(o, "baseline_bytes_moved", json_integer((json_int_t)bl->bytes_moved));
        json_object_set_new(o, "baseline_verified_bytes",
                            json_integer((json_int_t)bl->verified_bytes));
        json_object_set_new(o, "baseline_wrong", json_integer(bl->wrong));
        json_object_set_new(o, "baseline_bytes_network",
                            json_integer((json_int_t)bl->bytes_network));
    }
    if (dn) { /* --delta: the dense plan on the same updates */
        json_object_set_new(o, "dense_seconds", json_real(method_median(dn)));
        json_object_set_new(o, "dense_bytes_moved", json_integer((json_int_t)dn->bytes_moved));
        json_object_set_new(o, "dense_bytes_network", json_integer((json_int_t)dn->bytes_network));
        json_object_set_new(o, "dense_bytes_nvlink", json_integer((json_int_t)dn->bytes_nvlink));
        json_object_set_new(o, "dense_verified_bytes",
                            json_integer((json_int_t)dn->verified_bytes));
        json_object_set_new(o, "dense_wrong", json_integer(dn->wrong));
    }
    if (r->a->delta) {
        json_t *d = json_object();
        json_object_set_new(d, "change_fraction", json_real(r->a->change_fraction));
        json_object_set_new(d, "verified", json_boolean(!r->a->delta_no_verify));
        if (r->trust) { /* --verify-cost: the same refits by a delta plan that trusts */
            json_object_set_new(d, "no_verify_seconds", json_real(method_median(r->trust_m)));
            json_object_set_new(d, "verify_cost",
                                json_real(method_median(r->trust_m) > 0
                                              ? method_median(rs) / method_median(r->trust_m) - 1
                                              : 0));
        }
        json_object_set_new(d, "first_stream_bytes", json_integer((json_int_t)rs->delta_stream[0]));
        json_object_set_new(d, "first_wire_bytes", json_integer((json_int_t)rs->delta_wire[0]));
        json_object_set_new(d, "stream_bytes", json_integer((json_int_t)rs->delta_stream[1]));
        json_object_set_new(d, "wire_bytes", json_integer((json_int_t)rs->delta_wire[1]));
        json_object_set_new(d, "changed_bytes", json_integer((json_int_t)rs->delta_changed[1]));
        json_object_set_new(d, "dense_streams", json_integer(rs->dense_streams[1]));
        json_object_set_new(d, "snapshot_bytes_max", json_integer((json_int_t)rs->snapshot_max));
        json_object_set_new(d, "version", json_integer(rs->version_min));
        json_object_set_new(d, "committed", json_boolean(rs->committed));
        json_object_set_new(d, "chunks", json_integer(rs->delta_chunks[1]));
        if (dn) {
            delta_figs_t g = delta_figs(rs, dn, !r->a->delta_no_verify);
            json_object_set_new(d, "measured_fraction", json_real(g.fraction));
            json_object_set_new(d, "bound_bytes", json_real(g.bound_bytes));
            json_object_set_new(d, "wire_per_bound", json_real(g.wire_per_bound));
            json_object_set_new(d, "wire_per_dense", json_real(g.wire_per_dense));
            json_object_set_new(d, "network_ratio",
                                rs->bytes_network ? json_real(g.network_ratio) : json_null());
            json_object_set_new(d, "nvlink_ratio",
                                rs->bytes_nvlink ? json_real(g.nvlink_ratio) : json_null());
            json_object_set_new(d, "time_ratio", json_real(g.time_ratio));
        }
        json_object_set_new(o, "delta", d);
    }
    if (raw) {
        json_object_set_new(o, "raw_seconds", json_real(method_median(raw)));
        json_object_set_new(o, "raw_bytes_moved", json_integer((json_int_t)raw->bytes_moved));
    }
    json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    printf("\n");
    json_decref(o);
}

/* ---- the command ---------------------------------------------------------- */

/* Every rank's status: the lowest wins; a rank that failed prints its own. */
static reshard_status_t agree_setup(reshard_status_t st)
{
    int in = (int)st, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return (reshard_status_t)out;
}

/* Each rank's plan counts what it sends: their sum is the plan's. */
static reshard_plan_stats_t plan_sum(const reshard_plan_t *plan)
{
    reshard_plan_stats_t mine, tot = {0};
    reshard_plan_get_stats(plan, &mine);
    uint64_t in[3] = {mine.bytes_network, mine.bytes_nvlink, mine.bytes_peer_read}, sum[3];
    MPI_Allreduce(in, sum, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    tot.bytes_network = sum[0];
    tot.bytes_nvlink = sum[1];
    tot.bytes_peer_read = sum[2];
    MPI_Allreduce(&mine.max_relay_bytes, &tot.max_relay_bytes, 1, MPI_UINT64_T, MPI_MAX,
                  MPI_COMM_WORLD);
    return tot;
}

/* The EPLB map changed: this rank's own part of the layouts with the new map
 * (reshard_model_refit_create_scoped) and its own plan, replacing the refit and
 * the plan once every rank has its new one. The buffers stay: the map moves
 * experts between stack rows, never changes a buffer's shape. */
static reshard_status_t replan(run_t *r, const reshard_model_t *model,
                               const reshard_train_spec_t *ts, const reshard_infer_spec_t *is,
                               const reshard_plan_params_t *pp, reshard_plan_stats_t *totals)
{
    reshard_model_refit_t nf = {0};
    reshard_plan_t *np = NULL;
    double t0 = MPI_Wtime();
    reshard_status_t st =
        reshard_model_refit_create_scoped(model, ts, is, -1, r->rank, pp->domain_size, &nf);
    if (st == RESHARD_OK)
        st = reshard_plan_create(nf.train, nf.infer, pp, &np);
    double dt = MPI_Wtime() - t0, dmax = 0;
    if (st != RESHARD_OK)
        fprintf(stderr, "reshard run: rank %d: EPLB replan: %s: %s\n", r->rank,
                reshard_status_string(st), reshard_last_error());
    MPI_Allreduce(&dt, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if ((st = agree_setup(st)) != RESHARD_OK) {
        reshard_plan_destroy(np);
        reshard_model_refit_destroy(&nf);
        return st;
    }
    reshard_plan_destroy(r->plan);
    reshard_model_refit_destroy(r->refit);
    *r->refit = nf;
    r->plan = np;
    r->replan_seconds[r->replans++] = dmax;
    *totals = plan_sum(np);
    return RESHARD_OK;
}

static int run(const run_args_t *a, int rank, int size)
{
    run_t r = {.a = a, .rank = rank, .size = size};
    reshard_model_refit_t refit = {0};
    reshard_model_t *model = NULL;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    const long skip = a->delta && a->iters > 1;
    method_t rs = {.name = a->delta ? "delta" : "reshard", .skip = skip},
             dn = {.name = "reshard", .skip = skip}, bl = {.name = "baseline", .skip = skip},
             raw = {.name = "raw MPI", .skip = skip},
             tr = {.name = "delta, no verify", .skip = skip};
    raw_bufs_t rawb = {0};
    int exit_code = 1;
    double plan_s = 0;

    /* Deterministic checks: every rank reaches the same verdict, rank 0 says it. */
    reshard_model_options_t mo = {.mtp = a->mtp,
                                  .layers = (int32_t)a->layers,
                                  .dtype =
                                      strcmp(a->dtype, "fp8") ? RESHARD_BF16 : RESHARD_FP8_E4M3};
    char qerr[256];
    cli_infer_dtype(a->infer_dtype, a->fp8_scale, &mo, qerr, sizeof qerr);
    /* a spec that does not parse is a malformed command line: status 2 */
    reshard_status_t st = reshard_train_spec_parse(a->train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(a->infer, &is);
    if (st != RESHARD_OK) {
        if (rank == 0)
            fprintf(stderr, "reshard run: %s\n", reshard_last_error());
        return 2;
    }
    cli_eplb_maps_t maps = {0};
    if (a->eplb_map) {
        char merr[512];
        if (cli_eplb_maps(a->eplb_map, &maps, merr, sizeof merr))
            return usage_error(rank, "%s", merr);
        if (maps.n > 1 && (a->baseline || a->raw || a->delta)) {
            const int n = maps.n; /* cli_eplb_free clears it */
            cli_eplb_free(&maps);
            return usage_error(rank,
                               "--eplb-map with %d maps replans between refits; "
                               "--baseline, --raw and --delta (beside its dense plan) run one "
                               "fixed layout",
                               n);
        }
        cli_eplb_use(&maps, 0, &is);
    }
    r.replan_seconds = calloc((size_t)a->iters, sizeof *r.replan_seconds);
    if (!r.replan_seconds) {
        cli_eplb_free(&maps);
        return 1;
    }
    st = reshard_model_load(a->model, &mo, &model);
    /* reshard_model_refit_create applies reshard_model_check's spec and layout
     * rules while it builds the layouts (once); the world size is checked here */
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(model, &ts, &is, &refit);
    char world_err[160] = "";
    if (st == RESHARD_OK && refit.train_world + refit.infer_world != size) {
        snprintf(world_err, sizeof world_err, "world size %d != train world %d + infer world %d",
                 size, refit.train_world, refit.infer_world);
        st = RESHARD_ERR_CONFIG;
    }
    r.refit = &refit;
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES |
                                              RESHARD_PLAN_PARAM_TIMEOUT |
                                              RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                .world_size = size,
                                .my_rank = rank,
                                .staging_bytes = (uint64_t)(a->staging_mb * 1048576.0),
                                .domain_size = a->domain_size > 0 ? (int32_t)a->domain_size : 1,
                                .timeout_s = a->timeout_s,
                                .delta = a->delta};
    if (a->delta)
        pp.field_mask |= RESHARD_PLAN_PARAM_DELTA;
    if (a->delta_no_verify) { /* verification is on for delta plans unless turned off */
        pp.field_mask |= RESHARD_PLAN_PARAM_DELTA_CHECKSUM;
        pp.delta_checksum = 0;
    }
    if (a->relay_mb >= 0) {
        pp.field_mask |= RESHARD_PLAN_PARAM_RELAY_BYTES;
        pp.relay_bytes = (uint64_t)(a->relay_mb * 1048576.0);
    }
    int32_t *host = NULL, *dev = NULL;
    if (st == RESHARD_OK && a->colocated) {
        host = malloc((size_t)size * sizeof *host);
        dev = malloc((size_t)size * sizeof *dev);
        st = host && dev ? reshard_mpi_placement(MPI_COMM_WORLD, host, dev) : RESHARD_ERR_NOMEM;
        if (st == RESHARD_OK)
            colocated_devices(refit.train_world, size, host, dev);
        pp.field_mask |= RESHARD_PLAN_PARAM_PLACEMENT | RESHARD_PLAN_PARAM_COLOCATED;
        pp.host = host;
        pp.device = dev;
        pp.colocated = 1;
        pp.domain_size = 1;
    }
    reshard_plan_stats_t paths = {0};
    if (st == RESHARD_OK && a->colocated && rank == 0) { /* the bounds need the global plan */
        reshard_plan_params_t gp = pp;
        gp.my_rank = RESHARD_ALL_RANKS;
        gp.field_mask |= RESHARD_PLAN_PARAM_SUMMARY;
        gp.summary = 1;
        reshard_plan_t *g = NULL;
        st = reshard_plan_create(refit.train, refit.infer, &gp, &g);
        if (st == RESHARD_OK)
            reshard_plan_get_stats(g, &paths);
        reshard_plan_destroy(g);
    }
    if (st == RESHARD_OK) {
        double t0 = MPI_Wtime();
        st = reshard_plan_create(refit.train, refit.infer, &pp, &r.plan);
        plan_s = MPI_Wtime() - t0;
    }
    if (st == RESHARD_OK && a->delta) { /* the dense plan, side by side */
        reshard_plan_params_t dp = pp;
        dp.field_mask &= ~(uint64_t)(RESHARD_PLAN_PARAM_DELTA | RESHARD_PLAN_PARAM_DELTA_CHECKSUM);
        dp.delta = 0;
        dp.delta_checksum = 0;
        st = reshard_plan_create(refit.train, refit.infer, &dp, &r.dense);
    }
    if (st == RESHARD_OK && a->verify_cost) { /* the delta plan without verification */
        reshard_plan_params_t tp = pp;
        tp.field_mask |= RESHARD_PLAN_PARAM_DELTA_CHECKSUM;
        tp.delta_checksum = 0;
        st = reshard_plan_create(refit.train, refit.infer, &tp, &r.trust);
    }
    free(host);
    free(dev);
    if (st == RESHARD_OK && a->colocated && rank == 0 && !a->json)
        print_paths(&paths);
    r.paths = paths;
    if (st != RESHARD_OK) {
        if (rank == 0 || st == RESHARD_ERR_NOMEM)
            fprintf(stderr, "reshard run: %s: %s\n", reshard_status_string(st),
                    world_err[0] ? world_err : reshard_last_error());
        st = agree_setup(st);
        goto out;
    }
    st = agree_setup(st);
    reshard_plan_stats_t plan_totals = {0};
    if (st == RESHARD_OK)
        plan_totals = plan_sum(r.plan);
    if (st != RESHARD_OK)
        goto out;

    /* Per-rank resources. */
    const bool nccl = !strcmp(a->transport, "nccl");
    st = nccl ? comm_create_nccl(rank, size, &r.comm)
              : reshard_comm_create_mpi(MPI_COMM_WORLD, &r.comm);
    reshard_comm_t *device = nccl ? r.comm : NULL;
    if (st == RESHARD_OK && rank < refit.train_world)
        st = bufs_alloc(refit.train, refit.train_buffers, rank, device, a->shared, &r.src);
    if (st == RESHARD_OK && rank >= refit.train_world)
        st = bufs_alloc(refit.infer, refit.infer_buffers, rank, device, false, &r.dst);
    if (st == RESHARD_OK && rank >= refit.train_world && a->delta)
        st = bufs_alloc(refit.infer, refit.infer_buffers, rank, device, false, &r.dst_dense);
    if (st == RESHARD_OK && rank >= refit.train_world && a->verify_cost)
        st = bufs_alloc(refit.infer, refit.infer_buffers, rank, device, false, &r.dst_trust);
    if (st == RESHARD_OK && a->baseline) {
        int32_t *roots = stage_roots(&refit);
        st = roots ? reshard_baseline_create_mpi(refit.train, refit.infer, roots, &pp, r.comm,
                                                 &r.baseline)
                   : RESHARD_ERR_NOMEM;
        free(roots);
    }
    if (st == RESHARD_OK && a->raw)
        st = raw_alloc(&r, &rawb);
    rs.seconds = calloc((size_t)a->iters, sizeof *rs.seconds);
    dn.seconds = calloc((size_t)a->iters, sizeof *dn.seconds);
    bl.seconds = calloc((size_t)a->iters, sizeof *bl.seconds);
    raw.seconds = calloc((size_t)a->iters, sizeof *raw.seconds);
    tr.seconds = calloc((size_t)a->iters, sizeof *tr.seconds);
    r.trust_m = &tr;
    if (st == RESHARD_OK &&
        (!rs.seconds || !dn.seconds || !bl.seconds || !raw.seconds || !tr.seconds))
        st = RESHARD_ERR_NOMEM;
    if (st != RESHARD_OK)
        fprintf(stderr, "reshard run: rank %d: %s: %s\n", rank, reshard_status_string(st),
                reshard_last_error());
    if (agree_setup(st) != RESHARD_OK)
        goto out;

    /* The refits, the methods interleaved so that all see the same load; the
     * header first, and a line per round on stderr once a run is slow. */
    r.dst_bytes = layout_bytes(&refit);
    if (rank == 0 && !a->json)
        print_header(&r, plan_s);
    double started = MPI_Wtime();
    for (long i = 0; i < a->iters && st == RESHARD_OK; i++) {
        if (i > 0 && maps.n > 1 && i % maps.n != (i - 1) % maps.n) {
            cli_eplb_use(&maps, i, &is);
            st = replan(&r, model, &ts, &is, &pp, &plan_totals);
            if (st != RESHARD_OK)
                break;
        }
        st = refit_once(&r, &rs, i, METHOD_PLAN);
        if (st == RESHARD_OK && r.trust)
            st = refit_once(&r, &tr, i, METHOD_TRUST);
        if (st == RESHARD_OK && r.dense)
            st = refit_once(&r, &dn, i, METHOD_DENSE);
        if (st == RESHARD_OK && r.baseline)
            st = refit_once(&r, &bl, i, METHOD_BASELINE);
        if (st == RESHARD_OK && a->raw)
            raw_once(&r, &raw, &rawb);
        if (st == RESHARD_OK && rank == 0 && MPI_Wtime() - started > 3) {
            fprintf(stderr, "  refit %ld/%ld: %s %.3f s", i + 1, a->iters, rs.name, rs.seconds[i]);
            if (r.dense)
                fprintf(stderr, ", reshard %.3f s", dn.seconds[i]);
            if (r.baseline)
                fprintf(stderr, ", baseline %.3f s", bl.seconds[i]);
            if (a->raw)
                fprintf(stderr, ", raw MPI %.3f s", raw.seconds[i]);
            fprintf(stderr, "\n");
        }
    }
    /* the bytes measured per link class must be the plan's, to the byte */
    /* the plan counts a one-sided read as the path it replaces (sent side); a delta sends
     * what changed, not the plan */
    const method_t *lk = a->delta ? &dn : &rs; /* the dense plan's bytes are the plan's */
    bool links_ok =
        lk->done == 0 || (lk->bytes_network + r.peer_read == plan_totals.bytes_network &&
                          lk->bytes_nvlink == plan_totals.bytes_nvlink &&
                          r.peer_read == plan_totals.bytes_peer_read);
    bool ok = st == RESHARD_OK && (!a->delta || rs.committed) && rs.wrong == 0 && dn.wrong == 0 &&
              tr.wrong == 0 && (!r.trust || (tr.committed && tr.verified_bytes > 0)) &&
              bl.wrong == 0 && rs.bytes_moved > 0 && rs.verified_bytes > 0 &&
              (!r.dense || dn.verified_bytes > 0) && (!r.baseline || bl.verified_bytes > 0) &&
              links_ok;
    if (st == RESHARD_OK && rank == 0 && (rs.bytes_moved == 0 || rs.verified_bytes == 0))
        fprintf(stderr, "reshard run: the refit moved or verified zero bytes\n");
    if (st == RESHARD_OK && rank == 0 && !links_ok)
        fprintf(stderr,
                "reshard run: measured network/NVLink bytes %llu/%llu differ from the plan's "
                "%llu/%llu\n",
                (unsigned long long)lk->bytes_network, (unsigned long long)lk->bytes_nvlink,
                (unsigned long long)plan_totals.bytes_network,
                (unsigned long long)plan_totals.bytes_nvlink);
    if (rank == 0 && rs.done > 0) {
        if (a->json)
            print_json(&r, &rs, r.dense ? &dn : NULL, r.baseline ? &bl : NULL, a->raw ? &raw : NULL,
                       &plan_totals, plan_s, ok);
        else
            print_table(&r, &rs, r.dense ? &dn : NULL, r.baseline ? &bl : NULL,
                        a->raw ? &raw : NULL, ok);
        fflush(stdout);
    }
    exit_code = ok ? 0 : 1;
out:
    free(rs.seconds);
    free(dn.seconds);
    free(bl.seconds);
    free(raw.seconds);
    free(rawb.sbuf);
    free(rawb.rbuf);
    reshard_baseline_destroy(r.baseline);
    reshard_plan_destroy(r.plan); /* its mappings of shared sources before their free */
    reshard_plan_destroy(r.dense);
    reshard_plan_destroy(r.trust);
    bufs_free(&r.src); /* device buffers before their endpoint */
    bufs_free(&r.dst);
    bufs_free(&r.dst_dense);
    bufs_free(&r.dst_trust);
    free(tr.seconds);
    reshard_comm_destroy(r.comm);
    reshard_model_refit_destroy(&refit);
    reshard_model_destroy(model);
    cli_eplb_free(&maps);
    free(r.replan_seconds);
    return exit_code;
}

int cmd_run(int argc, char **argv)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        MPI_Init(NULL, NULL);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--lose-", 7) || !strcmp(argv[i], "--respawn") ||
            !strncmp(argv[i], "--agree-timeout", 15))
            return cmd_run_elastic(rank, size, !inited, argc, argv);
    run_args_t a;
    int rc = parse_args(rank, argc, argv, &a);
    if (rc == 1)
        rc = 0; /* --help */
    else if (rc == 0)
        rc = run(&a, rank, size);
    /* every rank returns the same code, except after a verification failure
     * that only some ranks saw: report the worst everywhere */
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!inited)
        MPI_Finalize();
    return worst;
}

#endif /* RESHARD_HAVE_MPI */
