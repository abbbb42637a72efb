/*
 * Colocated refit over MPI: pieces between ranks of one host are one-sided reads
 * (process_vm_readv), the others MPI messages.
 *
 *   mpirun -np 4 test_mpi_colocated one|two|kill|shared|shared-two|shared-kill
 *
 * Ranks 0, 1 train, 2, 3 infer. T [8, 6] fp32: rank r (0, 1) holds rows [4r, 4r+4)
 * stored column-major after a 3-element gap; infer rank 2+c holds columns [3c, 3c+3)
 * row-major. U [5] fp32 is replicated on both training ranks and wanted whole by both
 * inference ranks. Train rank i and infer rank 2+i share device i.
 *   one: every rank on one host: every byte is read one-sided.
 *   two: host = rank % 2 (ranks 0, 2 on one host, 1, 3 on another): half of T
 *        crosses hosts over MPI, the rest (and U, from the nearest replica) is read.
 *   kill: as one; rank 0, whose memory is read, kills itself in the table exchange:
 *        every survivor must fail within the bound (checked by expect.sh).
 *   shared, shared-two: as one, two, with the training ranks' sources inside ONE shared
 *        allocation (reshard_alloc_shared, at offsets 64 and 512 of it): readers map it
 *        once per plan (the mapping is gone after reshard_plan_destroy); a last refit
 *        after rank 0 freed it and allocated again (same address or not) is BUFFER on
 *        every rank. shared-kill: kill with shared sources.
 * Every destination byte is checked against an oracle of its own (1000 i + j + 0.5,
 * 7 k + 1), the path counters against numbers derived here from the layouts, and a
 * rebinding of a read buffer must fail on every rank before any byte moves.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/comm.h"
#include "mpi_check.h"
#include "reshard/reshard.h"
#include "reshard/reshard_mpi.h"
#include "reshard/reshard_shared.h"

int g_rank, g_failures;

static reshard_transport_ops_t faulty;
static reshard_status_t (*real_round_wait)(reshard_comm_t *, int, double);

static reshard_status_t kill_at_exchange(reshard_comm_t *c, int slot, double timeout_s)
{
    fprintf(stderr, "rank %d: victim kills itself in the colocated table exchange\n", c->rank);
    fflush(stderr);
    raise(SIGKILL);
    return real_round_wait(c, slot, timeout_s);
}

#define SRC_GAP 3

/* Mappings of shared allocations in this process (the memfd's name in /proc/self/maps). */
static int shared_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, "reshard-shared") != NULL;
    if (f)
        fclose(f);
    return n;
}

static float t_value(int i, int j)
{
    return 1000.0f * (float)i + (float)j + 0.5f;
}

static float u_value(int k)
{
    return 7.0f * (float)k + 1.0f;
}

static void add(reshard_layout_t *l, int32_t t, int32_t rank, int32_t buf, int nd,
                const int64_t *off, const int64_t *ext, int64_t base, const int64_t *stride)
{
    reshard_fragment_t f = {.tensor = t, .rank = rank, .buffer = buf, .base = base};
    f.box.ndim = nd;
    for (int d = 0; d < nd; d++) {
        f.box.offset[d] = off[d];
        f.box.extent[d] = ext[d];
        f.stride[d] = stride[d];
    }
    CHECK(reshard_layout_add_fragment(l, &f) == RESHARD_OK, "add fragment");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "";
    bool shared = !strncmp(mode, "shared", 6);
    bool two = !strcmp(mode, "two") || !strcmp(mode, "shared-two");
    bool kill = !strcmp(mode, "kill") || !strcmp(mode, "shared-kill");
    if (size != 4 || (!two && !kill && strcmp(mode, "one") && strcmp(mode, "shared"))) {
        if (g_rank == 0)
            fprintf(stderr, "usage: mpirun -np 4 %s one|two|kill|shared|shared-two|shared-kill\n",
                    argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    reshard_tensors_t *ts = NULL;
    int32_t T, U;
    const int64_t tshape[2] = {8, 6}, ushape[1] = {5};
    CHECK(reshard_tensors_create(&ts) == RESHARD_OK, "tensors");
    CHECK(reshard_tensors_add(ts, "T", RESHARD_FP32, 2, tshape, 0, NULL, &T) == RESHARD_OK, "T");
    CHECK(reshard_tensors_add(ts, "U", RESHARD_FP32, 1, ushape, 0, NULL, &U) == RESHARD_OK, "U");
    reshard_layout_t *src = NULL, *dst = NULL;
    CHECK(reshard_layout_create(ts, &src) == RESHARD_OK && reshard_layout_create(ts, &dst) == 0,
          "layouts");
    const int64_t zero[1] = {0}, one[1] = {1};
    for (int r = 0; r < 2; r++) {
        const int64_t off[2] = {4 * r, 0}, ext[2] = {4, 6}, cm[2] = {1, 4};
        add(src, T, r, 0, 2, off, ext, SRC_GAP, cm);
        add(src, U, r, 1, 1, zero, ushape, 0, one);
        const int64_t doff[2] = {0, 3 * r}, dext[2] = {8, 3}, rm[2] = {3, 1};
        add(dst, T, 2 + r, 0, 2, doff, dext, 0, rm);
        add(dst, U, 2 + r, 1, 1, zero, ushape, 0, one);
    }
    int32_t host[4], dev[4] = {0, 1, 0, 1};
    for (int r = 0; r < 4; r++)
        host[r] = two ? r % 2 : 0;
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_PLACEMENT |
                                              RESHARD_PLAN_PARAM_COLOCATED |
                                              RESHARD_PLAN_PARAM_TIMEOUT,
                                .world_size = 4,
                                .my_rank = g_rank,
                                .timeout_s = 2.0,
                                .host = host,
                                .device = dev,
                                .colocated = 1};
    /* the global plan's paths against what the layouts say */
    reshard_plan_params_t gp = pp;
    gp.my_rank = RESHARD_ALL_RANKS;
    reshard_plan_t *g = NULL;
    reshard_plan_stats_t s = {0};
    CHECK(reshard_plan_create(src, dst, &gp, &g) == RESHARD_OK, "global plan");
    reshard_plan_get_stats(g, &s);
    reshard_plan_destroy(g);
    /* per receiver: a 4x3 quarter of T (48 B) from the same device, the other quarter
     * from the other training rank; U (20 B) from the nearest replica: its device */
    uint64_t dev_b = 2 * (48 + 20), other = 2 * 48;
    CHECK(s.bytes_same_device == dev_b && s.bound_same_device_bytes == dev_b, "same device %llu",
          (unsigned long long)s.bytes_same_device);
    CHECK(s.bytes_same_host == (two ? 0 : other) && s.bound_same_host_bytes == s.bytes_same_host,
          "same host %llu", (unsigned long long)s.bytes_same_host);
    CHECK(s.bytes_cross_host == (two ? other : 0) && s.bound_cross_host_bytes == s.bytes_cross_host,
          "cross host %llu", (unsigned long long)s.bytes_cross_host);
    CHECK(s.bytes_peer_read == dev_b + (two ? 0 : other), "peer read %llu",
          (unsigned long long)s.bytes_peer_read);

    reshard_plan_t *plan = NULL;
    reshard_comm_t *comm = NULL;
    CHECK(reshard_plan_create(src, dst, &pp, &plan) == RESHARD_OK, "plan");
    CHECK(reshard_comm_create_mpi(MPI_COMM_WORLD, &comm) == RESHARD_OK, "comm");
    if (kill && g_rank == 0) {
        faulty = *comm->ops;
        real_round_wait = faulty.round_wait;
        faulty.round_wait = kill_at_exchange;
        comm->ops = &faulty;
    }
    float sown[SRC_GAP + 24], copy[SRC_GAP + 24], uown[5], dbuf[24], dubuf[5];
    float *sbuf = sown, *ubuf = uown;
    void *region = NULL;
    const size_t sbytes = sizeof sown, ubytes = sizeof uown;
    if (shared && g_rank < 2) {
        CHECK(reshard_alloc_shared(4096, &region) == RESHARD_OK, "alloc_shared");
        sbuf = (float *)((char *)region + 64);
        ubuf = (float *)((char *)region + 512);
    }
    reshard_buffer_t sb[2] = {{.ptr = sbuf, .bytes = sbytes}, {.ptr = ubuf, .bytes = ubytes}};
    reshard_buffer_t db[2] = {{.ptr = dbuf, .bytes = sizeof dbuf},
                              {.ptr = dubuf, .bytes = sizeof dubuf}};
    bool train = g_rank < 2;
    if (train) {
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++)
                sbuf[SRC_GAP + i + 4 * j] = t_value(4 * g_rank + i, j);
        for (int k = 0; k < 5; k++)
            ubuf[k] = u_value(k);
        memcpy(copy, sbuf, sizeof copy);
    }
    const int iters = shared ? 4 : 3;
    for (int it = 0; it < iters; it++) {
        memset(dbuf, RESHARD_SENTINEL_BYTE, sizeof dbuf);
        memset(dubuf, RESHARD_SENTINEL_BYTE, sizeof dubuf);
        bool rebind = it == 1 || it == 3;
        if (train)
            sb[0].ptr = it == 1 && g_rank == 0 ? copy : sbuf;
        if (it == 3 && g_rank == 0) { /* freed and allocated again */
            void *old = region;
            CHECK(reshard_free_shared(region) == RESHARD_OK, "free_shared");
            CHECK(reshard_alloc_shared(4096, &region) == RESHARD_OK, "alloc_shared again");
            sb[0].ptr = sbuf = (float *)((char *)region + 64);
            sb[1].ptr = ubuf = (float *)((char *)region + 512);
            memcpy(sbuf, copy, sizeof copy);
            for (int k = 0; k < 5; k++)
                ubuf[k] = u_value(k);
            printf("rank 0: shared sources allocated again at %s address\n",
                   region == old ? "the same" : "another");
        }
        reshard_exec_stats_t es = {0};
        double t0 = MPI_Wtime();
        reshard_status_t st = reshard_plan_execute(plan, comm, train ? sb : NULL, train ? 2 : 0,
                                                   train ? NULL : db, train ? 0 : 2, &es);
        if (kill) {
            fprintf(stderr, "rank %d: %s after %.2f s: %s\n", g_rank, reshard_status_string(st),
                    MPI_Wtime() - t0, reshard_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (rebind) { /* refused on every rank before anything moved */
            CHECK(st == RESHARD_ERR_BUFFER, "rebinding: %s", reshard_status_string(st));
            CHECK(g_rank != 0 || strstr(reshard_last_error(), "source buffer 0"),
                  "the rebound buffer is named: %s", reshard_last_error());
            for (size_t b = 0; !train && b < sizeof dbuf; b++)
                CHECK(((unsigned char *)dbuf)[b] == RESHARD_SENTINEL_BYTE, "byte %zu written", b);
            continue;
        }
        CHECK(st == RESHARD_OK, "execute %d: %s", it, reshard_status_string(st));
        if (train)
            continue;
        int c = g_rank - 2;
        long wrong = 0;
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 3; j++)
                wrong += dbuf[3 * i + j] != t_value(i, 3 * c + j);
        for (int k = 0; k < 5; k++)
            wrong += dubuf[k] != u_value(k);
        CHECK(wrong == 0, "%ld wrong elements", wrong);
        uint64_t read = 48 + 20 + (two ? 0 : 48), net = two ? 48 : 0;
        CHECK(es.bytes_peer_read == read && es.bytes_recv == net, "read %llu recv %llu",
              (unsigned long long)es.bytes_peer_read, (unsigned long long)es.bytes_recv);
        CHECK(!shared || shared_maps() >= 1, "the readers map the shared sources");
    }
    reshard_plan_destroy(plan);
    CHECK(train || shared_maps() == 0, "%d shared mapping(s) left after plan destroy",
          shared_maps());
    MPI_Barrier(MPI_COMM_WORLD); /* every plan that reads it is gone */
    if (region)
        CHECK(reshard_free_shared(region) == RESHARD_OK, "free_shared");
    reshard_comm_destroy(comm);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
    int all = 0;
    MPI_Allreduce(&g_failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: %s\n", mode, all ? "FAILED" : "passed");
    MPI_Finalize();
    return all ? 1 : 0;
}
