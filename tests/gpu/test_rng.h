/* The random cases' generator of the kernel tests (xorshift64: the same cases on every run
 * and machine, so a failure names a case that can be run again). */
#ifndef RS_TEST_RNG_H
#define RS_TEST_RNG_H

#include <stdint.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static inline uint64_t next_u64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Uniform in [lo, hi]. */
static inline int64_t rnd(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}

#endif
