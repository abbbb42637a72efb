/* rs_run_sort (the overlap check's sort of a buffer's byte runs) against
 * qsort with rs_run_cmp on the same input: interleaved ascending stretches
 * (fused gate/up rows), descending input, equal starts, random input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "layout/layout_internal.h"

/* Deterministic draws (rand_r with a fixed seed). */
static unsigned seed = 14;

static uint64_t next(void)
{
    return ((uint64_t)rand_r(&seed) << 31) ^ (uint64_t)rand_r(&seed);
}

/* Sort a copy both ways and compare every field of every run. */
static void check(const rs_run_t *in, int64_t n)
{
    rs_run_t *a = malloc((size_t)(n ? n : 1) * sizeof *a),
             *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    memcpy(a, in, (size_t)n * sizeof *a);
    memcpy(b, in, (size_t)n * sizeof *b);
    rs_run_sort(a, n);
    qsort(b, (size_t)n, sizeof *b, rs_run_cmp);
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(a[i].lo, b[i].lo);
        assert_int_equal(a[i].hi, b[i].hi);
        assert_int_equal(a[i].frag, b[i].frag);
    }
    for (int64_t i = 1; i < n; i++)
        assert_true(a[i - 1].lo <= a[i].lo);
    free(a);
    free(b);
}

/* Fragments k = 0..nf-1 each with one run per row, rows of all fragments
 * interleaved in the buffer (row r of fragment k at (r * nf + k) * 64). */
static void test_interleaved(void **state)
{
    (void)state;
    for (int nf = 1; nf <= 5; nf++) {
        int64_t rows = 301, n = rows * nf;
        rs_run_t *r = malloc((size_t)n * sizeof *r);
        assert_non_null(r);
        for (int k = 0; k < nf; k++)
            for (int64_t q = 0; q < rows; q++) {
                uint64_t lo = (uint64_t)(q * nf + k) * 64;
                r[k * rows + q] = (rs_run_t){lo, lo + 64, k};
            }
        check(r, n);
        free(r);
    }
}

static void test_descending_and_equal(void **state)
{
    (void)state;
    rs_run_t r[200];
    for (int i = 0; i < 200; i++)
        r[i] = (rs_run_t){(uint64_t)(200 - i) * 8, (uint64_t)(200 - i) * 8 + 8, i % 3};
    check(r, 200);
    for (int i = 0; i < 200; i++) /* equal starts: ordered by fragment */
        r[i] = (rs_run_t){(uint64_t)(i % 7) * 16, (uint64_t)(i % 7) * 16 + 16, 199 - i};
    check(r, 200);
    check(r, 1);
    check(r, 0);
}

static void test_random(void **state)
{
    (void)state;
    for (int t = 0; t < 50; t++) {
        int64_t n = (int64_t)(next() % 2000);
        rs_run_t *r = malloc((size_t)(n ? n : 1) * sizeof *r);
        assert_non_null(r);
        for (int64_t i = 0; i < n; i++) {
            /* a fragment's run at one start has one length, as real runs do */
            uint64_t lo = next() % 5000;
            int64_t frag = (int64_t)(next() % 50);
            r[i] = (rs_run_t){lo, lo + 1 + (lo * 31 + (uint64_t)frag) % 100, frag};
        }
        check(r, n);
        free(r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interleaved),
        cmocka_unit_test(test_descending_and_equal),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
