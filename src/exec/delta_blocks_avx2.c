/*
 * The delta codec's block passes with AVX2 (x86-64 CPUs without AVX-512): a block of 64 words is
 * 2w vectors of 32 bytes; compares give its change mask (movemasks, 16-bit equalities packed to
 * bytes first), masked 32- or 64-bit stores update the snapshot without a branch (only the dwords
 * or qwords that differ: unchanged lines stay clean), and the dense body is stored from the
 * vectors compared. Gaps records, gathers and scatters go word by word, as in the portable
 * implementation. This file is compiled with AVX2 enabled (CMakeLists.txt) and runs only where
 * rs_delta_encode's dispatch found it.
 */
#include "exec/delta_blocks.h"

#if defined(__AVX2__) && defined(__POPCNT__) && defined(__BMI__)
#include <immintrin.h>

static inline __m256i load32(const uint8_t *p)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* Vector @p k of a block at @p cur against @p prev: the cur vector to *@p a, the differing dwords
 * (qwords for 8-byte words) of it stored into @p prev, the equality per word to the return (all
 * ones: equal). */
static inline __m256i step_vector(const uint8_t *cur, uint8_t *prev, uint32_t k, uint32_t w,
                                  __m256i *a)
{
    __m256i x = load32(cur + 32 * k), y = load32(prev + 32 * k), e, ne;
    const __m256i ones = _mm256_set1_epi8(-1);
    switch (w) {
    case 8:
        e = _mm256_cmpeq_epi64(x, y);
        _mm256_maskstore_epi64((long long *)(void *)(prev + 32 * k), _mm256_xor_si256(e, ones), x);
        break;
    default:
        e = w == 4   ? _mm256_cmpeq_epi32(x, y)
            : w == 2 ? _mm256_cmpeq_epi16(x, y)
                     : _mm256_cmpeq_epi8(x, y);
        ne = _mm256_xor_si256(w == 4 ? e : _mm256_cmpeq_epi32(x, y), ones);
        _mm256_maskstore_epi32((int *)(void *)(prev + 32 * k), ne, x);
    }
    *a = x;
    return e;
}

static inline uint64_t scan_step(const uint8_t *cur, uint8_t *prev, rs_gap_writer_t *gw, uint64_t i,
                                 uint32_t w)
{
    uint64_t eq = 0;
    __m256i a[16], pe = _mm256_setzero_si256();
    for (uint32_t k = 0; k < 2 * w; k++) {
        __m256i e = step_vector(cur, prev, k, w, &a[k]);
        switch (w) {
        case 2: /* two vectors' 16-bit equalities packed to bytes, the lanes put back in order */
            if (k % 2 == 1) {
                __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi16(pe, e), 0xd8);
                eq |= (uint64_t)(uint32_t)_mm256_movemask_epi8(p) << (16 * (k - 1));
            }
            pe = e;
            break;
        case 4:
            eq |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(e)) << (8 * k);
            break;
        case 8:
            eq |= (uint64_t)(uint32_t)_mm256_movemask_pd(_mm256_castsi256_pd(e)) << (4 * k);
            break;
        default:
            eq |= (uint64_t)(uint32_t)_mm256_movemask_epi8(e) << (32 * k);
        }
    }
    if (gw->dense)
        for (uint32_t k = 0; k < 2 * w; k++)
            _mm256_storeu_si256((__m256i *)(void *)(gw->dense + i * w + 32 * k), a[k]);
    uint64_t m = ~eq;
    if (gw->on) /* written by scan_drain */
        rs_gaps_enqueue(gw, cur, m, i);
    return m;
}

/* 2-byte words, 8 at a time by the byte shuffles of delta_blocks.h; other sizes word by word. */
static inline uint8_t *gather_step(const uint8_t *cur, uint64_t m, uint32_t w, uint8_t *v)
{
    if (w != 2)
        return rs_delta_gather_words(cur, m, w, v);
    for (uint32_t g = 0; g < 8; g++, m >>= 8) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(cur + 16 * g));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)rs_delta_lut_gather16[m & 0xff]);
        _mm_storeu_si128((__m128i *)(void *)v, _mm_shuffle_epi8(x, c));
        v += 2 * rs_pop64(m & 0xff);
    }
    return v;
}

static inline void scatter_step(uint8_t *chunk, uint64_t m, uint32_t w, const uint8_t *v)
{
    if (w != 2) {
        rs_delta_scatter_words(chunk, m, w, v);
        return;
    }
    const __m128i bit = _mm_setr_epi8(1, 1, 2, 2, 4, 4, 8, 8, 16, 16, 32, 32, 64, 64, -128, -128);
    for (uint32_t g = 0; g < 8; g++, m >>= 8) {
        uint8_t *d = chunk + 16 * g;
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)rs_delta_lut_expand16[m & 0xff]);
        __m128i x = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(const void *)v), c);
        __m128i sel = _mm_cmpeq_epi8(_mm_and_si128(_mm_set1_epi8((char)(m & 0xff)), bit), bit);
        __m128i old = _mm_loadu_si128((const __m128i *)(const void *)d);
        _mm_storeu_si128((__m128i *)(void *)d, _mm_blendv_epi8(old, x, sel));
        v += 2 * rs_pop64(m & 0xff);
    }
}

#define scan_drain rs_delta_drain_words

RS_DELTA_BLOCKS_DEFINE(rs_delta_blocks_avx2, "avx2")
#else
const rs_delta_blocks_t *rs_delta_blocks_avx2(void)
{
    return NULL; /* built without AVX2 */
}
#endif
