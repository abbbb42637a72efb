/*
 * Colocated reads must prove that the pid in an owner's table is the owner's process
 * before any byte of it is trusted (docs/colocated-reference.md, "Who is read").
 *
 *   mpirun -np 2 unshare --pid --fork --mount-proc test_mpi_colocated_owner ns
 *   mpirun -np 2 test_mpi_colocated_owner forged|forged-shared
 *
 * Rank 0 holds W [N] fp32 (owner values i + 0.25), rank 1 wants it whole by a
 * one-sided read; both are on host 0. Rank 1 keeps other bytes (decoy values -(i+1))
 * where rank 0 keeps W: the same address (both map it at a fixed address), or its own
 * shared allocation. So a reader that reads itself instead of the owner gets the decoy.
 *   ns: each rank in its own PID namespace (one container per rank): both are pid 1,
 *       so the owner's pid names the reader itself. Every rank must fail, the reader
 *       naming both ranks and the PID namespace, with every destination byte untouched.
 *   forged: one namespace; rank 0's table is rewritten in flight to carry rank 1's pid
 *       (a pid that names another live process, with namespaces that look alike). Every
 *       rank must fail, the reader saying the pid is not rank 0's process, destination
 *       untouched; then the same plan, unforged, refits every element exactly.
 *       With "no-aslr" (under setarch -R) the token lies at one address in both
 *       processes: the one read must differ, not just be unmapped.
 *   forged-shared: as forged, with W inside a shared allocation (reshard_alloc_shared)
 *       and the table's memfd number rewritten to rank 1's own allocation.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "exec/comm.h"
#include "mpi_check.h"
#include "reshard/reshard.h"
#include "reshard/reshard_mpi.h"
#include "reshard/reshard_shared.h"
#include "transport/peer/peer_read.h"

int g_rank, g_failures;

enum { N = 65536 };
#define FIXED_ADDR ((void *)0x3e0000000000ULL)

static reshard_transport_ops_t forging;
static reshard_status_t (*real_post_send)(reshard_comm_t *, int, int32_t, const void *, uint64_t);
static int64_t forged_pid = -1;
static int32_t forged_fd = -1;

/* Rank 0's table to rank 1 carries rank 1's pid (and memfd number). */
static reshard_status_t forge_table(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                                    uint64_t bytes)
{
    if (slot == 0 && bytes >= sizeof(rs_peer_hdr_t) &&
        ((const rs_peer_hdr_t *)buf)->magic == RS_PEER_MAGIC) {
        rs_peer_hdr_t *h = (rs_peer_hdr_t *)(uintptr_t)buf;
        rs_peer_buf_t *e = (rs_peer_buf_t *)(h + 1);
        h->pid = forged_pid;
        for (uint64_t k = 0; k < h->nbuf && forged_fd >= 0; k++)
            e[k].fd = forged_fd;
    }
    return real_post_send(c, slot, peer, buf, bytes);
}

/* This process's memfd of reshard_alloc_shared (the only one): its fd number. */
static int32_t own_memfd(void)
{
    DIR *d = opendir("/proc/self/fd");
    int32_t fd = -1;
    struct dirent *ent;
    for (int n = 0; d && fd < 0 && n < 4096 && (ent = readdir(d)); n++) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", ent->d_name);
        ssize_t k = readlink(path, target, sizeof target - 1);
        if (k > 0) {
            target[k] = '\0';
            if (strstr(target, "memfd:reshard-shared"))
                fd = atoi(ent->d_name);
        }
    }
    if (d)
        closedir(d);
    return fd;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "";
    bool ns = !strcmp(mode, "ns"), shared = !strcmp(mode, "forged-shared");
    bool forged = !strcmp(mode, "forged") || shared;
    /* forged no-aslr: run under setarch -R, the token is at one address in both processes */
    bool same_addr = forged && argc > 2 && !strcmp(argv[2], "no-aslr");
    if (size != 2 || (!ns && !forged)) {
        if (g_rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 %s ns|forged [no-aslr]|forged-shared\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    reshard_tensors_t *ts = NULL;
    int32_t W;
    const int64_t shape[1] = {N}, zero[1] = {0}, one[1] = {1};
    CHECK(reshard_tensors_create(&ts) == RESHARD_OK, "tensors");
    CHECK(reshard_tensors_add(ts, "W", RESHARD_FP32, 1, shape, 0, NULL, &W) == RESHARD_OK, "W");
    reshard_layout_t *src = NULL, *dst = NULL;
    CHECK(reshard_layout_create(ts, &src) == RESHARD_OK && reshard_layout_create(ts, &dst) == 0,
          "layouts");
    reshard_fragment_t f = {.tensor = W, .rank = 0, .buffer = 0, .base = 0};
    f.box.ndim = 1;
    f.box.offset[0] = zero[0];
    f.box.extent[0] = N;
    f.stride[0] = one[0];
    CHECK(reshard_layout_add_fragment(src, &f) == RESHARD_OK, "src fragment");
    f.rank = 1;
    CHECK(reshard_layout_add_fragment(dst, &f) == RESHARD_OK, "dst fragment");
    int32_t host[2] = {0, 0}, dev[2] = {0, 1};
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_PLACEMENT |
                                              RESHARD_PLAN_PARAM_COLOCATED |
                                              RESHARD_PLAN_PARAM_TIMEOUT,
                                .world_size = 2,
                                .my_rank = g_rank,
                                .timeout_s = 5.0,
                                .host = host,
                                .device = dev,
                                .colocated = 1};
    reshard_plan_t *plan = NULL;
    reshard_comm_t *comm = NULL;
    CHECK(reshard_plan_create(src, dst, &pp, &plan) == RESHARD_OK, "plan");
    CHECK(reshard_comm_create_mpi(MPI_COMM_WORLD, &comm) == RESHARD_OK, "comm");

    /* W on rank 0, the decoy on rank 1: at one fixed address, or in a shared allocation */
    const size_t bytes = (size_t)N * sizeof(float);
    float *w = NULL;
    if (shared) {
        void *p = NULL;
        CHECK(reshard_alloc_shared(bytes, &p) == RESHARD_OK, "alloc_shared");
        w = p;
    } else {
        void *p = mmap(FIXED_ADDR, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        CHECK(p == FIXED_ADDR, "mmap at %p: got %p", FIXED_ADDR, p);
        w = p == FIXED_ADDR ? p : NULL;
    }
    float *out = malloc(bytes);
    if (!w || !out || !plan || !comm)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < N; i++)
        w[i] = g_rank == 0 ? (float)i + 0.25f : -(float)(i + 1);

    /* ns: the pids each rank sees (both 1 in their own namespaces) */
    int64_t pids[2], me = (int64_t)getpid();
    MPI_Allgather(&me, 1, MPI_INT64_T, pids, 1, MPI_INT64_T, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: pids %lld %lld\n", mode, (long long)pids[0], (long long)pids[1]);
    int32_t fds[2] = {-1, -1}, myfd = shared ? own_memfd() : -1;
    MPI_Allgather(&myfd, 1, MPI_INT32_T, fds, 1, MPI_INT32_T, MPI_COMM_WORLD);
    const reshard_transport_ops_t *real = comm->ops;
    if (forged && g_rank == 0) {
        forging = *comm->ops;
        real_post_send = forging.post_send;
        forging.post_send = forge_table;
        forged_pid = pids[1];
        forged_fd = fds[1];
        comm->ops = &forging;
    }
    reshard_buffer_t sb = {.ptr = w, .bytes = bytes, .name = "W"};
    reshard_buffer_t db = {.ptr = out, .bytes = bytes, .name = "W"};
    const int iters = forged ? 2 : 1;
    for (int it = 0; it < iters; it++) {
        bool bad = it == 0; /* the first refit reads from an unproven owner */
        if (!bad && g_rank == 0)
            comm->ops = real;
        memset(out, RESHARD_SENTINEL_BYTE, bytes);
        reshard_exec_stats_t es = {0};
        reshard_status_t st = g_rank == 0 ? reshard_plan_execute(plan, comm, &sb, 1, NULL, 0, &es)
                                          : reshard_plan_execute(plan, comm, NULL, 0, &db, 1, &es);
        const char *err = reshard_last_error();
        printf("%s: refit %d rank %d: %s: %s\n", mode, it, g_rank, reshard_status_string(st), err);
        fflush(stdout);
        int64_t wrong = 0, touched = 0;
        const unsigned char *ob = (const unsigned char *)out;
        for (size_t b = 0; g_rank == 1 && b < bytes; b++)
            touched += ob[b] != RESHARD_SENTINEL_BYTE;
        for (int i = 0; g_rank == 1 && i < N; i++)
            wrong += out[i] != (float)i + 0.25f;
        if (bad) {
            CHECK(st != RESHARD_OK,
                  "refit %d: OK from an unproven owner (%lld of %d elements "
                  "wrong)",
                  it, (long long)wrong, N);
            CHECK(g_rank != 1 || touched == 0, "refit %d: %lld destination bytes written", it,
                  (long long)touched);
            CHECK(g_rank != 1 || (strstr(err, "rank 1") && strstr(err, "rank 0")),
                  "the reader's error names both ranks");
            CHECK(g_rank != 1 || !ns || strstr(err, "PID namespace"), "ns: names the namespace");
            CHECK(g_rank != 1 || !forged || shared || strstr(err, "rank 0's process"),
                  "forged: the pid is not rank 0's process");
            CHECK(g_rank != 1 || !same_addr || strstr(err, "reads back different"),
                  "forged no-aslr: the token read from the wrong process differs");
            CHECK(g_rank != 1 || !shared || strstr(err, "rank 0's allocation"),
                  "forged-shared: the file is not rank 0's allocation");
        } else {
            CHECK(st == RESHARD_OK, "refit %d", it);
            CHECK(g_rank != 1 || wrong == 0, "refit %d: %lld of %d elements wrong", it,
                  (long long)wrong, N);
            CHECK(g_rank != 1 || es.bytes_peer_read == bytes, "read %llu bytes",
                  (unsigned long long)es.bytes_peer_read);
        }
    }
    comm->ops = real;
    reshard_plan_destroy(plan);
    reshard_comm_destroy(comm);
    if (shared)
        reshard_free_shared(w);
    else
        munmap(w, bytes);
    free(out);
    reshard_layout_destroy(src);
    reshard_layout_destroy(dst);
    reshard_tensors_destroy(ts);
    int fails = 0;
    MPI_Allreduce(&g_failures, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: %s\n", mode, fails ? "FAILED" : "passed");
    MPI_Finalize();
    return fails ? 1 : 0;
}
