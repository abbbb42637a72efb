/*
 * The delta encoding's size model (reshard_sim_delta_chunk_bytes, docs/delta-reference.md "Chunk
 * format") against the codec on random data: chunks whose words each changed with
 * probability p, independently; the encoded size, averaged over a few chunks, must be
 * within a few percent of the model (the model is the expectation of the smallest kind,
 * derived from the format: a geometric gap's varint, E[runs], the bitmap; an upper
 * bound up to sampling), and the
 * exact ends: nothing changed is a bare header, everything changed is dense + 16.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exec/delta_codec.h"
#include "reshard/reshard_sim.h"

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Mean encoded bytes of @p trials chunks of @p len bytes, words of @p w bytes each
 * changed with probability @p p. */
static double measured(uint64_t len, uint32_t w, double p, int trials, uint64_t seed)
{
    uint8_t *prev = malloc(len), *cur = malloc(len), *out = malloc(len + RS_DELTA_HEADER_BYTES);
    assert_non_null(prev);
    assert_non_null(cur);
    assert_non_null(out);
    double sum = 0;
    uint64_t s = seed;
    for (int t = 0; t < trials; t++) {
        for (uint64_t i = 0; i < len; i++)
            prev[i] = (uint8_t)mix(&s);
        memcpy(cur, prev, len);
        for (uint64_t j = 0; j < len / w; j++)
            if ((double)(mix(&s) >> 11) * 0x1p-53 < p)
                cur[j * w] ^= 1;
        sum += (double)rs_delta_encode(cur, prev, len, w, out, NULL);
        assert_memory_equal(prev, cur, len); /* the snapshot took the new bytes */
    }
    free(prev);
    free(cur);
    free(out);
    return sum / trials;
}

static void test_model_matches_codec(void **state)
{
    (void)state;
    /* gaps at 0.05% and 1% (one-byte gaps mostly), 5%, bitmap at 20% and 60%, dense */
    const double fr[] = {0.0005, 0.01, 0.05, 0.2, 0.6};
    const uint32_t words[] = {2, 4};
    for (size_t k = 0; k < sizeof words / sizeof *words; k++)
        for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) {
            const uint64_t len = fr[i] < 0.001 ? 2 << 20 : 256 << 10; /* >= 500 changes */
            double model = reshard_sim_delta_chunk_bytes(len, words[k], fr[i]);
            double got = measured(len, words[k], fr[i], 4, 11 + i);
            print_message("word %u, p %g: codec %.0f bytes, model %.0f\n", words[k], fr[i], got,
                          model);
            /* at most the model (a bound: E[min] <= min E) up to sampling, and close to it */
            double tol = fr[i] < 0.001 ? 0.05 : 0.02; /* ~4 x 500 changes at 0.05% */
            if (got > model * (1 + tol) || got < model * (1 - 2 * tol))
                fail_msg("word %u, p %g: codec %.0f bytes, model %.0f", words[k], fr[i], got,
                         model);
        }
}

static void test_model_ends(void **state)
{
    (void)state;
    assert_true(reshard_sim_delta_chunk_bytes(4096, 2, 0.0) == RS_DELTA_HEADER_BYTES);
    assert_true(reshard_sim_delta_chunk_bytes(4096, 2, 1.0) == 4096 + RS_DELTA_HEADER_BYTES);
    /* 1% of bf16 words: ~1 + 2 bytes a changed word (gaps), far below the bitmap */
    double b = reshard_sim_delta_chunk_bytes(1 << 20, 2, 0.01);
    assert_true(b > 0.01 * (1 << 19) * 3 && b < 0.01 * (1 << 19) * 3.4 + 16);
    assert_true(measured(4096, 2, 0.0, 1, 3) == RS_DELTA_HEADER_BYTES);
    assert_true(measured(4096, 2, 1.0, 1, 3) == 4096 + RS_DELTA_HEADER_BYTES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_model_matches_codec),
                                       cmocka_unit_test(test_model_ends)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
