/* The delta codec's block passes in portable C (SSE2 compares where the target has SSE2). */
#include "exec/delta_blocks.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline uint64_t load8(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

/* Per word of the 8-byte lane difference @p d (words of @p w bytes): one bit, word k
 * of the lane at bit k. */
static inline uint64_t lane_words(uint64_t d, uint32_t w)
{
    if (w == 8)
        return d != 0;
    if (w == 2) { /* the top bit of each 16-bit word: set when the word is not 0 */
        const uint64_t lo = 0x7fff7fff7fff7fffull;
        uint64_t t = (((d & lo) + lo) | d) & ~lo;
        t >>= 15;
        return (t | t >> 15 | t >> 30 | t >> 45) & 0xf;
    }
    uint64_t m = 0;
    uint32_t per = 8 / w;
    uint64_t wmask = ((uint64_t)1 << (8 * w)) - 1;
    for (uint32_t k = 0; k < per; k++)
        if ((d >> (k * 8 * w)) & wmask)
            m |= (uint64_t)1 << k;
    return m;
}

#if defined(__SSE2__)
/* The equality of 16 bytes at @p a and @p b per word of @p w bytes (all ones: equal). */
static inline __m128i eq16(const uint8_t *a, const uint8_t *b, uint32_t w)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)a),
            y = _mm_loadu_si128((const __m128i *)(const void *)b);
    switch (w) {
    case 2:
        return _mm_cmpeq_epi16(x, y);
    case 4:
        return _mm_cmpeq_epi32(x, y);
    case 8: {
        __m128i e = _mm_cmpeq_epi32(x, y);
        return _mm_and_si128(e, _mm_shuffle_epi32(e, _MM_SHUFFLE(2, 3, 0, 1)));
    }
    default:
        return _mm_cmpeq_epi8(x, y);
    }
}
#endif

/* The change mask of the 64 words at @p a against @p b: 16 bytes at a time with SSE2 (the
 * equality masks of 16 words packed into one movemask), else 8 bytes at a time, a block
 * with no difference costing one pass of XORs. */
static inline uint64_t block_mask(const uint8_t *a, const uint8_t *b, uint32_t w)
{
#if defined(__SSE2__)
    uint64_t eq = 0;
    switch (w) {
    case 2: /* 8 words a vector: two vectors, packed to bytes, make 16 bits */
        for (int k = 0; k < 4; k++) {
            const uint8_t *p = a + 32 * k, *q = b + 32 * k;
            __m128i e = _mm_packs_epi16(eq16(p, q, 2), eq16(p + 16, q + 16, 2));
            eq |= (uint64_t)(uint16_t)_mm_movemask_epi8(e) << (16 * k);
        }
        break;
    case 4: /* 4 words a vector: four vectors make 16 bits */
        for (int k = 0; k < 4; k++) {
            const uint8_t *p = a + 64 * k, *q = b + 64 * k;
            __m128i lo = _mm_packs_epi32(eq16(p, q, 4), eq16(p + 16, q + 16, 4));
            __m128i hi = _mm_packs_epi32(eq16(p + 32, q + 32, 4), eq16(p + 48, q + 48, 4));
            eq |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_packs_epi16(lo, hi)) << (16 * k);
        }
        break;
    case 8: /* 2 words a vector */
        for (int k = 0; k < 32; k++)
            eq |= (uint64_t)_mm_movemask_pd(_mm_castsi128_pd(eq16(a + 16 * k, b + 16 * k, 8)))
                  << (2 * k);
        break;
    default: /* 16 words a vector */
        for (int k = 0; k < 4; k++)
            eq |= (uint64_t)(uint16_t)_mm_movemask_epi8(eq16(a + 16 * k, b + 16 * k, 1))
                  << (16 * k);
    }
    return ~eq;
#else
    uint64_t m = 0, acc = 0;
    uint32_t per = 8 / w;
    for (uint64_t l = 0; l < 8 * (uint64_t)w; l++)
        acc |= load8(a + 8 * l) ^ load8(b + 8 * l);
    if (acc)
        for (uint64_t l = 0; l < 8 * (uint64_t)w; l++) {
            uint64_t d = load8(a + 8 * l) ^ load8(b + 8 * l);
            if (d)
                m |= lane_words(d, w) << (l * per);
        }
    return m;
#endif
}

/* The 64 @p w bytes of a block (w is a constant here: an inline move). */
static inline void copy_block(uint8_t *d, const uint8_t *s, uint32_t w)
{
    memcpy(d, s, (size_t)64 * w);
}

static inline uint64_t scan_step(const uint8_t *cur, uint8_t *prev, rs_gap_writer_t *gw, uint64_t i,
                                 uint32_t w)
{
    uint64_t m = block_mask(cur, prev, w);
    if (gw->on)
        rs_gaps_block(gw, cur, m, i, w);
    if (m)
        copy_block(prev, cur, w);
    return m;
}

static inline void scan_drain(rs_gap_writer_t *gw)
{
    (void)gw; /* scan_step writes its records at once */
}

static inline uint8_t *gather_step(const uint8_t *cur, uint64_t m, uint32_t w, uint8_t *v)
{
    for (; m; m &= m - 1, v += w)
        rs_copy_word(v, cur + (uint64_t)__builtin_ctzll(m) * w, w);
    return v;
}

static inline void scatter_step(uint8_t *chunk, uint64_t m, uint32_t w, const uint8_t *v)
{
    for (; m; m &= m - 1, v += w)
        rs_copy_word(chunk + (uint64_t)__builtin_ctzll(m) * w, v, w);
}

RS_DELTA_BLOCKS_DEFINE(rs_delta_blocks_portable, "portable")
