/*
 * The cost of delta checksum mode (docs/delta-verification.md): the same refits with a
 * plain delta plan and with a delta_checksum plan, side by side in one run, over the
 * in-process transport
 * (4 threads: ranks 0, 1 send Shard(0) of one bf16 tensor, ranks 2, 3 receive Shard(1)).
 * Every iteration changes a fraction F of the elements, then runs both plans (alternating
 * which goes first) into their own destination buffers; every destination byte of both is
 * checked against the whole tensor. Prints the median refit time (slowest rank) of each,
 * their ratio, the wire bytes of each, and XXH3 against memcpy on one 1 MiB chunk.
 *
 * usage: bench_delta_checksum [MiB (default 64)] [iterations (default 7)] [F (default 0.01)]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_median.h"
#include "exec/delta.h"
#include "reshard/reshard.h"
#include "reshard/reshard_delta.h"

enum { WORLD = 4, COLS = 4096 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct {
    int64_t rows;
    int iters;
    double frac;
    uint16_t *g; /* the whole tensor, this iteration */
    reshard_layout_t *src, *dst;
    reshard_inproc_group_t *group;
    pthread_barrier_t bar;
    double t[2][WORLD];        /* this iteration: each rank's time per plan */
    double times[2][MAX_REPS]; /* per iteration: the slowest rank's */
    uint64_t wire[2][WORLD], wrong[2][WORLD];
    int failed;
} bench_t;

typedef struct {
    bench_t *b;
    int32_t rank;
} arg_t;

static void *rank_main(void *arg)
{
    arg_t *a = arg;
    bench_t *b = a->b;
    int32_t me = a->rank;
    reshard_plan_t *plan[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        reshard_plan_params_t p = {.field_mask =
                                       RESHARD_PLAN_PARAM_DELTA | RESHARD_PLAN_PARAM_DELTA_CHECKSUM,
                                   .world_size = WORLD,
                                   .my_rank = me,
                                   .delta = 1,
                                   .delta_checksum = k};
        if (reshard_plan_create(b->src, b->dst, &p, &plan[k]) != RESHARD_OK) {
            fprintf(stderr, "rank %d: %s\n", me, reshard_last_error());
            b->failed = 1;
        }
    }
    reshard_comm_t *comm = NULL;
    reshard_comm_create_inproc(b->group, me, &comm);
    uint64_t sb = me < 2 ? reshard_layout_buffer_bytes(b->src, me, 0) : 0;
    uint64_t db = me >= 2 ? reshard_layout_buffer_bytes(b->dst, me, 0) : 0;
    uint16_t *src = calloc(1, sb + 2), *dst[2] = {calloc(1, db + 2), calloc(1, db + 2)};
    int64_t half = b->rows / 2, wcols = COLS / 2;
    for (int it = 0; it < b->iters + 1; it++) { /* iteration 0: the dense first refit */
        pthread_barrier_wait(&b->bar);          /* rank 0 has made this iteration's tensor */
        if (me < 2)
            memcpy(src, b->g + (size_t)(me * half * COLS), sb);
        for (int o = 0; o < 2; o++) {
            int k = (it + o) % 2; /* alternate which plan goes first */
            reshard_buffer_t sbuf = {.ptr = src, .bytes = sb}, dbuf = {.ptr = dst[k], .bytes = db};
            pthread_barrier_wait(&b->bar);
            double t0 = now();
            reshard_status_t st =
                reshard_plan_execute(plan[k], comm, &sbuf, me < 2, &dbuf, me >= 2, NULL);
            b->t[k][me] = now() - t0;
            if (st != RESHARD_OK) {
                fprintf(stderr, "rank %d: %s\n", me, reshard_last_error());
                b->failed = 1;
            }
            reshard_delta_info_t di;
            reshard_plan_delta_info(plan[k], me, &di);
            b->wire[k][me] = di.wire_bytes;
            for (int64_t r = 0; me >= 2 && r < b->rows; r++)
                for (int64_t c = 0; c < wcols; c++)
                    b->wrong[k][me] +=
                        dst[k][r * wcols + c] != b->g[r * COLS + (me - 2) * wcols + c];
        }
        pthread_barrier_wait(&b->bar); /* rank 0 reads the times */
        if (me == 0 && it > 0)
            for (int k = 0; k < 2; k++) {
                double m = 0;
                for (int r = 0; r < WORLD; r++)
                    m = b->t[k][r] > m ? b->t[k][r] : m;
                b->times[k][it - 1] = m;
            }
        pthread_barrier_wait(&b->bar);
    }
    free(src);
    free(dst[0]);
    free(dst[1]);
    reshard_comm_destroy(comm);
    reshard_plan_destroy(plan[0]);
    reshard_plan_destroy(plan[1]);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_t b = {.iters = argc > 2 ? atoi(argv[2]) : 7, .frac = argc > 3 ? atof(argv[3]) : 0.01};
    double mib = argc > 1 ? atof(argv[1]) : 64;
    b.rows = (int64_t)(mib * 1048576.0 / (COLS * 2)) & ~(int64_t)1;
    if (b.rows < 2 || b.iters < 1 || b.iters > MAX_REPS || !(b.frac >= 0 && b.frac <= 1)) {
        fprintf(stderr, "usage: bench_delta_checksum [MiB] [iterations 1..%d] [F in [0, 1]]\n",
                MAX_REPS);
        return 2;
    }
    const int64_t shape[2] = {b.rows, COLS};
    reshard_tensors_t *ts = NULL;
    reshard_tensors_create(&ts);
    reshard_tensors_add(ts, "w", RESHARD_BF16, 2, shape, 0, NULL, NULL);
    reshard_layout_create(ts, &b.src);
    reshard_layout_create(ts, &b.dst);
    const int32_t sr[2] = {0, 1}, dr[2] = {2, 3};
    const reshard_mesh_t ms = {.ndim = 1, .shape = {2}, .ranks = sr};
    const reshard_mesh_t md = {.ndim = 1, .shape = {2}, .ranks = dr};
    const reshard_placement_t shard0 = {.kind = RESHARD_SHARD, .dim = 0};
    const reshard_placement_t shard1 = {.kind = RESHARD_SHARD, .dim = 1};
    reshard_layout_add_dtensor(b.src, 0, &ms, &shard0, 0, 0);
    reshard_layout_add_dtensor(b.dst, 0, &md, &shard1, 0, 0);
    reshard_inproc_group_create(WORLD, &b.group);
    pthread_barrier_init(&b.bar, NULL, WORLD + 1);
    uint64_t n = (uint64_t)b.rows * COLS;
    b.g = malloc(n * 2);
    for (uint64_t i = 0; i < n; i++)
        b.g[i] = (uint16_t)mix(i);
    pthread_t th[WORLD];
    arg_t args[WORLD];
    for (int32_t r = 0; r < WORLD; r++) {
        args[r] = (arg_t){&b, r};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int it = 0; it < b.iters + 1; it++) {
        for (uint64_t i = 0; it > 0 && i < n; i++) /* F of the elements get new bits */
            if ((double)(mix(i * 131 + (uint64_t)it) % 1000000) < b.frac * 1e6)
                b.g[i] = (uint16_t)(b.g[i] ^ (1 + mix(i + 7 * (uint64_t)it) % 0xffff));
        pthread_barrier_wait(&b.bar);
        pthread_barrier_wait(&b.bar);
        pthread_barrier_wait(&b.bar);
        pthread_barrier_wait(&b.bar);
        pthread_barrier_wait(&b.bar);
    }
    for (int32_t r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    uint64_t wire[2] = {b.wire[0][0] + b.wire[0][1], b.wire[1][0] + b.wire[1][1]};
    uint64_t wrong = b.wrong[0][2] + b.wrong[0][3] + b.wrong[1][2] + b.wrong[1][3];
    double t0 = median(b.times[0], b.iters), t1 = median(b.times[1], b.iters);
    /* XXH3 against memcpy on one 1 MiB chunk, as each end of checksum mode hashes it */
    size_t len = 1 << 20;
    uint8_t *x = malloc(len), *y = malloc(len);
    memcpy(x, b.g, len < n * 2 ? len : n * 2);
    double th_[MAX_REPS], tm[MAX_REPS];
    volatile uint64_t sink = 0;
    for (int r = 0; r < 15; r++) {
        double s0 = now();
        for (int q = 0; q < 20; q++)
            sink += rs_delta_hash(x, len);
        double s1 = now();
        for (int q = 0; q < 20; q++) {
            memcpy(y, x, len);
            x[q] ^= y[len - 1 - q] & 1; /* keep the copies */
        }
        th_[r] = (s1 - s0) / 20;
        tm[r] = (now() - s1) / 20;
    }
    double mh = median(th_, 15), mm = median(tm, 15);
    printf("delta refit of %.1f MiB bf16 (2 -> 2 ranks, in-process), %.4g of the elements "
           "changed per refit, %d refits each, alternating:\n",
           (double)n * 2 / 1048576.0, b.frac, b.iters);
    printf("  plain delta   : median %.4f s, %llu wire bytes per refit\n", t0,
           (unsigned long long)wire[0]);
    printf("  delta+checksum: median %.4f s, %llu wire bytes per refit\n", t1,
           (unsigned long long)wire[1]);
    printf("  checksum / plain: time %.3fx, wire bytes %.4fx\n", t0 > 0 ? t1 / t0 : 0,
           wire[0] ? (double)wire[1] / (double)wire[0] : 0);
    printf("  XXH3_64bits of a 1 MiB chunk: %.2f GB/s; memcpy %.2f GB/s (%.2fx memcpy)\n",
           len / mh / 1e9, len / mm / 1e9, mm / mh);
    printf("%s: every destination byte of every refit of both plans %s\n",
           wrong || b.failed ? "FAIL" : "OK", wrong || b.failed ? "NOT as sent" : "verified");
    free(x);
    free(y);
    free(b.g);
    pthread_barrier_destroy(&b.bar);
    reshard_inproc_group_destroy(b.group);
    reshard_layout_destroy(b.src);
    reshard_layout_destroy(b.dst);
    reshard_tensors_destroy(ts);
    return wrong || b.failed ? 1 : 0;
}
