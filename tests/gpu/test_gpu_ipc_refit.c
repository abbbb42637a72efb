/*
 * A colocated refit on device memory between processes that share one GPU (CUDA IPC over
 * the cuda-ipc endpoint, control plane over MPI): training ranks 0..N/2-1 and inference
 * ranks N/2..N-1 all on device 0 of one host. Each rank's buffers are carved out of ONE
 * device allocation at odd 256-byte offsets (as PyTorch's caching allocator sub-allocates),
 * so a reader that forgot the offset from the allocation's base reads the wrong bytes.
 * Checks, every destination element and padding byte by the pattern:
 *   1. two refits of the same plan (handles opened once: the second reuses them);
 *   2. a source buffer rebound to another allocation at the same address (freed and
 *      allocated again) is BUFFER on every rank, naming it, and no destination changes;
 *   3. (fake CUDA) every handle opened is closed at reshard_plan_destroy.
 * With "kill" after the model, rank 0 (whose memory is read) kills itself in the table
 * exchange of the first refit: every survivor must return an error within the plan's
 * bound (it prints it and aborts; tests/mpi/expect.sh checks the time).
 * Refits the endpoint cannot run are refused, UNSUPPORTED on every rank, destinations
 * untouched (the fake only: they touch nothing a GPU would):
 *   noncolocated   the same plan, not colocated: its messages would carry device staging
 *                  over the host control plane;
 *   mixed          rank 0's sources in host shared memory (reshard_alloc_shared), executed
 *                  on the MPI endpoint: the readers' copy kernel cannot take host memory;
 *   mixed-reverse  rank 1 executes on the MPI endpoint: the CPU cannot read device memory.
 *
 * usage: mpirun -np N test_gpu_ipc_refit [model name or config path
 *        [kill|noncolocated|mixed|mixed-reverse]]   (N even; default
 *        qwen3-0.6b, 1 layer; train tp=N/2 -> infer tp=N/2)
 * Exit 77 (skipped) on every rank when a rank sees no CUDA device or N is odd.
 */
#include <cuda_runtime.h>
#include <inttypes.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/comm.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"
#include "reshard/reshard_nccl.h"
#include "reshard/reshard_shared.h"
#include "../common/rank_bytes.h"
#ifdef RS_FAKE_IPC
#include "fake_cuda_nccl.h"
#endif

static int rank, size;

static reshard_transport_ops_t faulty;
static reshard_status_t (*real_round_wait)(reshard_comm_t *, int, double);

static reshard_status_t kill_at_exchange(reshard_comm_t *c, int slot, double timeout_s)
{
    fprintf(stderr, "rank %d: victim kills itself in the colocated table exchange\n", c->rank);
    fflush(stderr);
    raise(SIGKILL);
    return real_round_wait(c, slot, timeout_s);
}

static int all_ok(int ok)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* One rank's buffers in one device allocation, at offsets 256 * (2i + 1) apart. */
typedef struct {
    int32_t n;
    reshard_buffer_t *b;
    void *alloc;
    uint64_t alloc_bytes;
    uint8_t **host; /* a host copy per buffer */
} side_t;

static const char *mode = ""; /* argv[2] */

/* "mixed": rank 0's sources live in host shared memory. */
static int host_owner(void)
{
    return !strcmp(mode, "mixed") && rank == 0;
}

static reshard_status_t side_alloc(const reshard_model_buffers_t *mb, side_t *s)
{
    memset(s, 0, sizeof *s);
    s->n = reshard_model_buffer_count(mb, rank);
    s->b = calloc((size_t)s->n + 1, sizeof *s->b);
    s->host = calloc((size_t)s->n + 1, sizeof *s->host);
    if (!s->b || !s->host)
        return RESHARD_ERR_NOMEM;
    uint64_t off = 256;
    for (int32_t i = 0; i < s->n; i++) {
        s->b[i].bytes = reshard_model_buffer_bytes(mb, rank, i);
        off = (off + s->b[i].bytes + 511) / 256 * 256 + 256;
        if (!(s->host[i] = malloc(s->b[i].bytes ? s->b[i].bytes : 1)))
            return RESHARD_ERR_NOMEM;
    }
    s->alloc_bytes = off;
    if (host_owner() ? reshard_alloc_shared(off, &s->alloc) != RESHARD_OK
                     : cudaMalloc(&s->alloc, off) != cudaSuccess)
        return RESHARD_ERR_NOMEM;
    off = 256;
    for (int32_t i = 0; i < s->n; i++) {
        s->b[i].ptr = (uint8_t *)s->alloc + off;
        off = (off + s->b[i].bytes + 511) / 256 * 256 + 256;
    }
    return RESHARD_OK;
}

static void side_free(side_t *s)
{
    for (int32_t i = 0; s->host && i < s->n; i++)
        free(s->host[i]);
    free(s->host);
    free(s->b);
    if (s->alloc && host_owner())
        reshard_free_shared(s->alloc);
    else if (s->alloc)
        cudaFree(s->alloc);
    memset(s, 0, sizeof *s);
}

static int copy(void *dst, const void *src, uint64_t bytes)
{
    return !bytes || cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) == cudaSuccess;
}

/* Fill the host copies by the pattern (or the sentinel) and copy them to the device. */
static reshard_status_t side_fill(const reshard_layout_t *l, side_t *s, int pattern)
{
    reshard_buffer_t *hb = calloc((size_t)s->n + 1, sizeof *hb);
    if (!hb)
        return RESHARD_ERR_NOMEM;
    for (int32_t i = 0; i < s->n; i++) {
        hb[i] = (reshard_buffer_t){.ptr = s->host[i], .bytes = s->b[i].bytes};
        memset(s->host[i], RESHARD_SENTINEL_BYTE, s->b[i].bytes);
    }
    reshard_status_t st = pattern ? reshard_fill_pattern(l, rank, hb, s->n) : RESHARD_OK;
    for (int32_t i = 0; st == RESHARD_OK && i < s->n; i++)
        if (!copy(s->b[i].ptr, s->host[i], s->b[i].bytes))
            st = RESHARD_ERR_TRANSPORT;
    free(hb);
    return st;
}

/* Copy the device buffers back and check them against the pattern (expect) or the
 * sentinel (every byte untouched). */
static reshard_status_t side_check(const reshard_layout_t *l, side_t *s, int expect,
                                   uint64_t *verified)
{
    *verified = 0;
    reshard_buffer_t *hb = calloc((size_t)s->n + 1, sizeof *hb);
    if (!hb)
        return RESHARD_ERR_NOMEM;
    reshard_status_t st = RESHARD_OK;
    for (int32_t i = 0; st == RESHARD_OK && i < s->n; i++) {
        hb[i] = (reshard_buffer_t){.ptr = s->host[i], .bytes = s->b[i].bytes};
        if (!copy(s->host[i], s->b[i].ptr, s->b[i].bytes))
            st = RESHARD_ERR_TRANSPORT;
        for (uint64_t k = 0; st == RESHARD_OK && !expect && k < s->b[i].bytes; k++)
            if (s->host[i][k] != RESHARD_SENTINEL_BYTE) {
                fprintf(stderr, "rank %d: buffer %d byte %" PRIu64 " changed\n", rank, i, k);
                st = RESHARD_ERR_VERIFY;
            }
    }
    if (st == RESHARD_OK && expect)
        st = reshard_verify_pattern(l, rank, hb, s->n, verified);
    free(hb);
    return st;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *model = argc > 1 ? argv[1] : "qwen3-0.6b";
    mode = argc > 2 ? argv[2] : "";
    const int kill = !strcmp(mode, "kill");
    const int refused =
        !strcmp(mode, "noncolocated") || !strcmp(mode, "mixed") || !strcmp(mode, "mixed-reverse");
    int ndev = 0;
    reshard_status_t st = reshard_nccl_device_count(&ndev);
    if (!all_ok(st == RESHARD_OK && ndev >= 1 && size % 2 == 0)) {
        if (rank == 0)
            printf("SKIPPED: needs a CUDA device and an even number of ranks (%d device(s), %d "
                   "ranks)\n",
                   ndev, size);
        MPI_Finalize();
        return 77;
    }
    reshard_comm_t *mpi = NULL, *c = NULL;
    reshard_model_t *m = NULL;
    reshard_model_refit_t refit;
    memset(&refit, 0, sizeof refit);
    reshard_plan_t *plan = NULL;
    side_t sb, db;
    memset(&sb, 0, sizeof sb);
    memset(&db, 0, sizeof db);
    int failed = 0;
    char train[32], infer[32];
    snprintf(train, sizeof train, "tp=%d", size / 2);
    snprintf(infer, sizeof infer, "tp=%d", size / 2);
    reshard_model_options_t o;
    memset(&o, 0, sizeof o);
    o.dtype = RESHARD_BF16;
    o.layers = 1;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    int32_t *host = calloc((size_t)size, sizeof *host), *dev = calloc((size_t)size, sizeof *dev);
    if (st == RESHARD_OK)
        st = reshard_comm_create_mpi(MPI_COMM_WORLD, &mpi);
    if (st == RESHARD_OK)
        st = reshard_comm_create_cuda_ipc(mpi, 0, NULL, &c); /* every rank on device 0 */
    if (st == RESHARD_OK && kill && rank == 0) {             /* the control plane's wait kills it */
        faulty = *mpi->ops;
        real_round_wait = faulty.round_wait;
        faulty.round_wait = kill_at_exchange;
        mpi->ops = &faulty;
    }
    if (st == RESHARD_OK)
        st = reshard_model_load(model, &o, &m);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse(train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(infer, &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(m, &ts, &is, &refit);
    reshard_plan_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask =
        RESHARD_PLAN_PARAM_TIMEOUT | RESHARD_PLAN_PARAM_PLACEMENT | RESHARD_PLAN_PARAM_COLOCATED;
    p.world_size = size;
    p.my_rank = rank;
    p.timeout_s = kill ? 2.0 : 30.0;
    p.host = host;
    p.device = dev;
    p.colocated = 1;
    if (!strcmp(mode, "noncolocated")) {
        p.field_mask &= ~RESHARD_PLAN_PARAM_COLOCATED;
        p.colocated = 0;
    }
    if (st == RESHARD_OK && (!host || !dev))
        st = RESHARD_ERR_NOMEM;
    if (st == RESHARD_OK)
        st = reshard_plan_create(refit.train, refit.infer, &p, &plan);
    const int trainer = rank < refit.train_world;
    if (st == RESHARD_OK)
        st = side_alloc(trainer ? refit.train_buffers : refit.infer_buffers, trainer ? &sb : &db);
    if (st == RESHARD_OK)
        st = trainer ? side_fill(refit.train, &sb, 1) : RESHARD_OK;
    if (st != RESHARD_OK)
        fprintf(stderr, "rank %d: setup: %s: %s\n", rank, reshard_status_string(st),
                reshard_last_error());
    if (!all_ok(st == RESHARD_OK)) {
        failed = 1;
        goto out;
    }
    if (refused) { /* UNSUPPORTED on every rank, the detecting rank says why; untouched */
        const int on_mpi = host_owner() || (!strcmp(mode, "mixed-reverse") && rank == 1);
        st = trainer ? RESHARD_OK : side_fill(refit.infer, &db, 0);
        reshard_status_t e =
            reshard_plan_execute(plan, on_mpi ? mpi : c, sb.b, sb.n, db.b, db.n, NULL);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", reshard_last_error());
        const char *why = !strcmp(mode, "noncolocated") ? "the plan is not colocated"
                          : !strcmp(mode, "mixed")
                              ? "is host memory and this rank's destinations are device memory"
                              : "is device memory and this rank's destinations are host memory";
        uint64_t v = 0;
        if (st == RESHARD_OK && !trainer)
            st = side_check(refit.infer, &db, 0, &v); /* untouched */
        const int ok = st == RESHARD_OK && e == RESHARD_ERR_UNSUPPORTED &&
                       (rank != 1 || strstr(msg, why) != NULL);
        if (!ok)
            fprintf(stderr, "rank %d: %s: got %s (%s), check %s\n", rank, mode,
                    reshard_status_string(e), msg, reshard_status_string(st));
        failed = !all_ok(ok);
        if (!failed && rank == 1)
            printf("ok   %s: UNSUPPORTED on every rank, destinations untouched: %s\n", mode, msg);
        goto out;
    }
    const uint64_t want = trainer ? 0 : layout_rank_bytes(refit.infer, refit.tensors, rank);
    for (int it = 0; it < 2 && !failed; it++) { /* 1. two refits of one plan */
        reshard_exec_stats_t es;
        memset(&es, 0, sizeof es);
        st = trainer ? RESHARD_OK : side_fill(refit.infer, &db, 0);
        double t0 = MPI_Wtime();
        if (st == RESHARD_OK)
            st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, &es);
        if (kill) {
            fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank, reshard_status_string(st),
                    MPI_Wtime() - t0, reshard_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        uint64_t verified = 0;
        if (st == RESHARD_OK && !trainer)
            st = side_check(refit.infer, &db, 1, &verified);
        if (st == RESHARD_OK && verified != want) {
            fprintf(stderr, "rank %d: verified %" PRIu64 " of %" PRIu64 " bytes\n", rank, verified,
                    want);
            st = RESHARD_ERR_VERIFY;
        }
        if (st != RESHARD_OK)
            fprintf(stderr, "rank %d: refit %d: %s: %s\n", rank, it, reshard_status_string(st),
                    reshard_last_error());
        uint64_t v_all = 0, r_all = 0, r = es.bytes_peer_read;
        MPI_Allreduce(&verified, &v_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&r, &r_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (!all_ok(st == RESHARD_OK && (trainer || es.bytes_peer_read == want)))
            failed = 1;
        else if (rank == 0)
            printf("ok   refit %d: %s, %d ranks on one GPU, %s -> %s, %" PRIu64 " B read over CUDA "
                   "IPC, %" PRIu64 " B verified\n",
                   it, model, size, train, infer, r_all, v_all);
    }
    /* 2. rank 0 frees its allocation and allocates again: at the same address under the
     * fake when the allocator returns it (the handle differs either way) */
    if (!failed && trainer && rank == 0) {
        void *old = sb.alloc;
        cudaFree(sb.alloc);
        if (cudaMalloc(&sb.alloc, sb.alloc_bytes) != cudaSuccess)
            sb.alloc = NULL;
        uint64_t off = 256;
        for (int32_t i = 0; sb.alloc && i < sb.n; i++) {
            sb.b[i].ptr = (uint8_t *)sb.alloc + off;
            off = (off + sb.b[i].bytes + 511) / 256 * 256 + 256;
        }
        printf("     rank 0 reallocated its sources: %s address\n",
               sb.alloc == old ? "the same" : "another");
        st = sb.alloc ? side_fill(refit.train, &sb, 1) : RESHARD_ERR_NOMEM;
    }
    if (!failed) {
        st = trainer ? RESHARD_OK : side_fill(refit.infer, &db, 0);
        reshard_status_t e = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, NULL);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", reshard_last_error());
        uint64_t v = 0;
        if (st == RESHARD_OK && !trainer)
            st = side_check(refit.infer, &db, 0, &v); /* untouched */
        int ok = st == RESHARD_OK && e == RESHARD_ERR_BUFFER &&
                 (rank != 0 || strstr(msg, "source buffer") != NULL);
        if (!ok)
            fprintf(stderr, "rank %d: rebinding: got %s (%s), check %s\n", rank,
                    reshard_status_string(e), msg, reshard_status_string(st));
        if (!all_ok(ok))
            failed = 1;
        else if (rank == 0)
            printf("ok   a rebound allocation: BUFFER on every rank, destinations untouched: %s\n",
                   msg);
    }
out:
    reshard_plan_destroy(plan);
#ifdef RS_FAKE_IPC
    if (fake_cuda_ipc_open_count() != 0) { /* 3. closed at plan destroy */
        fprintf(stderr, "rank %d: %d CUDA IPC handle(s) still open after plan destroy\n", rank,
                fake_cuda_ipc_open_count());
        failed = 1;
    }
#endif
    failed = !all_ok(!failed);
    side_free(&sb);
    side_free(&db);
    reshard_model_refit_destroy(&refit);
    reshard_model_destroy(m);
    reshard_comm_destroy(c);
    reshard_comm_destroy(mpi);
    free(host);
    free(dev);
    if (rank == 0)
        printf("%s: colocated CUDA IPC refit on %d ranks\n", failed ? "FAILED" : "passed", size);
    MPI_Finalize();
    return failed ? 1 : 0;
}
