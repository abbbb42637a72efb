/*
 * Multi-rank refits through the NCCL transport: one GPU per rank, communicator from an MPI
 * bootstrap (rank 0 makes the unique id, MPI_Bcast), device buffers, every destination
 * element and padding byte verified. This is the executor's real send/recv path over NCCL
 * (a one-rank plan only copies locally).
 *
 * usage: mpirun -np N test_gpu_mpi_refit      (N even: N/2 training ranks, N/2 inference)
 * Exit 77 (skipped) on every rank when a rank sees no CUDA device, a host runs more ranks
 * than it has GPUs, or N is odd.
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/reshard_model.h"
#include "reshard/reshard_nccl.h"
#include "device_bufs.h"

typedef struct {
    const char *model;
    reshard_dtype_t dtype;
    int32_t layers;
    int32_t domain_size;
    uint64_t staging;
} case_t;

static int rank, size;

static int all_ok(int ok)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* One case; returns 1 when it passed on this rank. */
static int run_case(reshard_comm_t *c, const case_t *k)
{
    reshard_model_t *m = NULL;
    reshard_model_refit_t refit;
    reshard_plan_t *plan = NULL;
    bufs_t sb = {0, NULL}, db = {0, NULL};
    memset(&refit, 0, sizeof refit);
    char train[64], infer[64];
    snprintf(train, sizeof train, "tp=%d", size / 2);
    snprintf(infer, sizeof infer, "tp=%d", size / 2);
    reshard_model_options_t o;
    memset(&o, 0, sizeof o);
    o.dtype = k->dtype;
    o.layers = k->layers;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    int ok = 0;
    reshard_status_t st = reshard_model_load(k->model, &o, &m);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse(train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(infer, &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(m, &ts, &is, &refit);
    reshard_plan_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT |
                   RESHARD_PLAN_PARAM_DOMAIN_SIZE;
    p.world_size = size;
    p.my_rank = rank;
    p.staging_bytes = k->staging;
    p.timeout_s = 60.0;
    p.domain_size = k->domain_size;
    if (st == RESHARD_OK)
        st = reshard_plan_create(refit.train, refit.infer, &p, &plan);
    const int trainer = rank < refit.train_world;
    if (st == RESHARD_OK && trainer)
        st = alloc_bufs(c, refit.train_buffers, rank, &sb);
    if (st == RESHARD_OK && !trainer)
        st = alloc_bufs(c, refit.infer_buffers, rank, &db);
    if (st == RESHARD_OK && trainer)
        st = reshard_nccl_fill_pattern(c, refit.train, rank, sb.b, sb.n);
    if (st != RESHARD_OK)
        fprintf(stderr, "rank %d: setup: %s: %s\n", rank, reshard_status_string(st),
                reshard_last_error());
    if (!all_ok(st == RESHARD_OK))
        goto out;
    const uint64_t want = trainer ? 0 : layout_rank_bytes(refit.infer, refit.tensors, rank);
    for (int it = 0; it < 2; it++) {
        for (int32_t i = 0; i < db.n; i++)
            st = st == RESHARD_OK
                     ? reshard_nccl_memset(c, db.b[i].ptr, RESHARD_SENTINEL_BYTE, db.b[i].bytes)
                     : st;
        reshard_exec_stats_t es;
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        if (st == RESHARD_OK)
            st = reshard_plan_execute(plan, c, sb.b, sb.n, db.b, db.n, &es);
        double dt = MPI_Wtime() - t0, tmax = 0;
        MPI_Allreduce(&dt, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        uint64_t verified = 0;
        if (st == RESHARD_OK && !trainer)
            st = reshard_nccl_verify_pattern(c, refit.infer, rank, db.b, db.n, &verified);
        if (st == RESHARD_OK && verified != want) {
            fprintf(stderr, "rank %d: verified %" PRIu64 " bytes of %" PRIu64 "\n", rank, verified,
                    want);
            st = RESHARD_ERR_VERIFY;
        } else if (st != RESHARD_OK) {
            fprintf(stderr, "rank %d: %s iteration %d: %s: %s\n", rank, k->model, it,
                    reshard_status_string(st), reshard_last_error());
        }
        uint64_t v_all = 0, r_all = 0, r = st == RESHARD_OK ? es.bytes_recv : 0;
        MPI_Allreduce(&verified, &v_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&r, &r_all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (!all_ok(st == RESHARD_OK))
            goto out;
        if (rank == 0)
            printf("ok   %s %s %d layers, train %s / infer %s, domain %d, staging %" PRIu64
                   " B, iteration %d: %.3f s, %" PRIu64 " B received, %" PRIu64 " B verified\n",
                   k->model, reshard_dtype_name(k->dtype), (int)k->layers, train, infer,
                   (int)k->domain_size, k->staging, it, tmax, r_all, v_all);
    }
    ok = 1;
out:
    free_bufs(c, &sb);
    free_bufs(c, &db);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&refit);
    reshard_model_destroy(m);
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm node;
    int local = 0, local_size = 1, ndev = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    const reshard_status_t dst = reshard_nccl_device_count(&ndev);
    if (!all_ok(dst == RESHARD_OK && local_size <= ndev && size % 2 == 0)) {
        if (rank == 0)
            printf("SKIPPED: needs an even number of ranks and one CUDA device per rank "
                   "(rank 0: %d device(s), %d ranks on its host%s%s)\n",
                   ndev, local_size, dst == RESHARD_OK ? "" : ": ",
                   dst == RESHARD_OK ? "" : reshard_last_error());
        MPI_Finalize();
        return 77;
    }
    char id[128];
    int id_ok = 1;
    if (rank == 0)
        id_ok = reshard_nccl_unique_id_size() == sizeof id && reshard_nccl_get_unique_id(id) == 0;
    MPI_Bcast(&id_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    reshard_comm_t *c = NULL;
    reshard_status_t st = id_ok ? reshard_comm_create_nccl_from_id(id, rank, size, local, NULL, &c)
                                : RESHARD_ERR_TRANSPORT;
    if (st != RESHARD_OK)
        fprintf(stderr, "rank %d: NCCL endpoint: %s\n", rank, reshard_last_error());
    int failed = 0;
    if (!all_ok(st == RESHARD_OK)) {
        failed = 1;
    } else {
        const case_t cases[] = {
            {"qwen3-0.6b", RESHARD_BF16, 2, 1, 64 << 20},
            {"qwen3-0.6b", RESHARD_BF16, 2, 1, 1 << 20},        /* many rounds */
            {"qwen3-0.6b", RESHARD_FP8_E4M3, 2, 1, 4 << 20},    /* 1-byte elements + scales */
            {"qwen3-0.6b", RESHARD_BF16, 2, size / 2, 8 << 20}, /* forwarding inside domains */
            {"qwen3-30b-a3b", RESHARD_BF16, 1, 1, 64 << 20},    /* experts */
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            failed += !run_case(c, &cases[i]);
    }
    reshard_comm_destroy(c);
    if (rank == 0)
        printf("%s: %d case(s) failed on %d ranks\n", failed ? "FAILED" : "passed", failed, size);
    MPI_Finalize();
    return failed ? 1 : 0;
}
