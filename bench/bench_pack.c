/*
 * Pack/unpack throughput of strided boxes against memcpy of the same bytes,
 * measured side by side in one run.
 *
 * A box of R rows x C elements (bf16) sits in a buffer whose rows are 2*C
 * elements apart, so every row is one contiguous run of C*2 bytes. Pack
 * gathers the runs into contiguous staging; unpack scatters them back.
 *
 * usage: bench_pack [total_MiB (default 64)] [repeats (default 15)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_median.h"
#include "exec/pack.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    size_t total = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 15;
    if (reps < 1 || reps > MAX_REPS || total == 0) {
        fprintf(stderr, "usage: bench_pack [total_MiB] [repeats 1..%d]\n", MAX_REPS);
        return 2;
    }
    const size_t runs[] = {64, 4096, 1 << 20};
    uint8_t *strided = malloc(2 * total), *contig = malloc(total), *contig2 = malloc(total);
    if (!strided || !contig || !contig2) {
        fprintf(stderr, "bench_pack: out of memory\n");
        return 1;
    }
    memset(strided, 1, 2 * total);
    memset(contig, 2, total);
    memset(contig2, 3, total);
    printf("# pack/unpack of a bf16 box, contiguous runs of R bytes every 2R bytes; %zu MiB "
           "moved per op, median of %d\n",
           total >> 20, reps);
    printf("%10s %12s %12s %12s %10s %10s\n", "run_bytes", "memcpy_GB/s", "pack_GB/s",
           "unpack_GB/s", "pack/mem", "unpack/mem");
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int64_t cols = (int64_t)(runs[i] / 2), rows = (int64_t)(total / runs[i]);
        reshard_fragment_t frag = {.tensor = 0,
                                   .rank = 0,
                                   .buffer = 0,
                                   .box = {2, {0, 0}, {rows, cols}},
                                   .base = 0,
                                   .stride = {2 * cols, 1}};
        reshard_span_t span = {&frag, &frag.box, 0, rows * cols, 2};
        /* warm up every page once */
        rs_pack_cpu(contig, strided, &span);
        memcpy(contig2, contig, total);
        /* interleave the three so load from other processes hits them alike */
        double tm[MAX_REPS], tp[MAX_REPS], tu[MAX_REPS];
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            memcpy(contig2, contig, total);
            double t1 = now();
            rs_pack_cpu(contig, strided, &span);
            double t2 = now();
            rs_unpack_cpu(strided, contig, &span);
            double t3 = now();
            tm[r] = t1 - t0;
            tp[r] = t2 - t1;
            tu[r] = t3 - t2;
        }
        double m = median(tm, reps), p = median(tp, reps), u = median(tu, reps);
        printf("%10zu %12.2f %12.2f %12.2f %10.2f %10.2f\n", runs[i], (double)total / m / 1e9,
               (double)total / p / 1e9, (double)total / u / 1e9, m / p, m / u);
    }
    free(strided);
    free(contig);
    free(contig2);
    return 0;
}
