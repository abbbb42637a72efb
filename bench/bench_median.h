/* The median of repeated timings, shared by the benchmarks. */
#ifndef RS_BENCH_MEDIAN_H
#define RS_BENCH_MEDIAN_H

#include <stdlib.h>

/** Most repeats a benchmark takes. */
#define MAX_REPS 64

static int bench_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/** Median of t[0..n) (sorts t). */
static inline double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, bench_cmp_d);
    return t[n / 2];
}

#endif
