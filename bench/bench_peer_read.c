/*
 * The colocated CPU read's own speed: rs_peer_cpu_read_box (process_vm_readv) of a
 * dense box from a forked child's buffer, and of the same box with 4 KiB rows (one run
 * per row), against memcpy of the same bytes inside this process. The ratio is the
 * bound the mechanism puts on a colocated refit here (bench_mpi_colocated compares the
 * refit with memcpy).
 *
 *   bench_peer_read [MiB (default 171)] [repeats (default 5)]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_median.h"
#include "transport/peer/peer_read.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long mib = argc > 1 ? atol(argv[1]) : 171, reps = argc > 2 ? atol(argv[2]) : 5;
    if (mib < 1 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench_peer_read [MiB >= 1] [repeats 1..%d]\n", MAX_REPS);
        return 2;
    }
    const int64_t row = 4096, rows = (int64_t)mib * 256; /* 4 KiB rows */
    const size_t n = (size_t)(row * rows);
    int fd[2];
    if (pipe(fd) != 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        unsigned char *m = malloc(n);
        if (!m)
            _exit(1);
        memset(m, 3, n);
        if (write(fd[1], &m, sizeof m) != (ssize_t)sizeof m)
            _exit(1);
        for (;;)
            pause();
    }
    unsigned char *remote = NULL;
    if (pid < 0 || read(fd[0], &remote, sizeof remote) != (ssize_t)sizeof remote)
        return 1;
    unsigned char *a = malloc(n), *b = malloc(n + (size_t)rows); /* + a spare byte per row */
    if (!a || !b)
        return 1;
    memset(a, 1, n);
    memset(b, 2, n);
    reshard_box_t box = {.ndim = 2, .extent = {rows, row}};
    reshard_fragment_t dense = {.box = box, .stride = {row, 1}};
    reshard_fragment_t padded = {.box = box, .stride = {row + 1, 1}}; /* one run per row */
    double tm[MAX_REPS], td[MAX_REPS], tr[MAX_REPS];
    for (long k = 0; k < reps; k++) {
        double t0 = now();
        memcpy(b, a, n);
        double t1 = now();
        reshard_status_t s1 = rs_peer_cpu_read_box(pid, 0, 1, "bench", 0, b, &dense,
                                                   (uint64_t)(uintptr_t)remote, n, &dense, &box, 1);
        double t2 = now();
        /* destination rows one byte apart: every row is its own run */
        reshard_fragment_t dst = padded;
        dst.box.extent[0] = rows - 1;
        reshard_box_t sub = {.ndim = 2, .extent = {rows - 1, row}};
        reshard_status_t s2 = rs_peer_cpu_read_box(pid, 0, 1, "bench", 0, b, &dst,
                                                   (uint64_t)(uintptr_t)remote, n, &dense, &sub, 1);
        double t3 = now();
        if (s1 != RESHARD_OK || s2 != RESHARD_OK) {
            fprintf(stderr, "bench_peer_read: %s\n", reshard_last_error());
            kill(pid, SIGKILL);
            return 1;
        }
        tm[k] = t1 - t0;
        td[k] = t2 - t1;
        tr[k] = (t3 - t2) * (double)rows / (double)(rows - 1);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    double m = median(tm, (int)reps), d = median(td, (int)reps), r = median(tr, (int)reps);
    printf("colocated CPU read of %ld MiB from another process, median of %ld\n", mib, reps);
    printf("  %-26s %8.2f GB/s %8.2fx memcpy time\n", "memcpy (same process)", (double)n / m / 1e9,
           1.0);
    printf("  %-26s %8.2f GB/s %8.2fx memcpy time\n", "read, dense box", (double)n / d / 1e9,
           d / m);
    printf("  %-26s %8.2f GB/s %8.2fx memcpy time\n", "read, 4 KiB runs", (double)n / r / 1e9,
           r / m);
    return 0;
}
