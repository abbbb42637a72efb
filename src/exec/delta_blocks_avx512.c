/*
 * The delta codec's block passes with AVX-512 (F, BW, VBMI, VBMI2): a block of 64 words is w
 * vectors; compares give its change mask, masked stores update the snapshot, compress and
 * expand move the changed words, byte permutes build bf16 gaps records. This file is compiled with
 * those instructions enabled (CMakeLists.txt) and runs only where rs_delta_encode's dispatch found
 * them.
 */
#include "exec/delta_blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__) &&                    \
    defined(__AVX512VBMI2__)
#include <immintrin.h>

/* Vector k (64 bytes) of a block's change mask @p m, for words of @p w bytes. */
static inline uint64_t part(uint64_t m, uint32_t w, uint32_t k)
{
    return w == 1 ? m : (m >> (k * 64 / w)) & (((uint64_t)1 << (64 / w)) - 1);
}

/* The gaps records of the changed words (mask @p m, not 0) of the block of 64 bf16 words at
 * @p cur, word @p i of the chunk, appended to @p gw without a branch per word: the positions
 * compressed to bytes, a position's gap to the one before it (the first's from gw->next, its
 * varint's leading bytes written first); then per 64 bytes of records (21 1/3 of them), one byte
 * permute puts each record's gap byte and, at its value bytes, its position in place, a second
 * fetches the value bytes from the block's two vectors by those positions, and a masked blend keeps
 * the gap bytes: two shuffle-port permutes per 64 bytes, stored as whole vectors (of which 3 bytes
 * per changed word count). */
static inline void gaps64(rs_gap_writer_t *gw, const uint8_t *cur, uint64_t m, uint64_t i)
{
    static const uint8_t pos_of[64] = {
#define P8(b) b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7
        P8(0), P8(8), P8(16), P8(24), P8(32), P8(40), P8(48), P8(56),
    };
    static const uint8_t before[64] = {0,  P8(0), P8(8), P8(16), P8(24), P8(32), P8(40), P8(48),
                                       56, 57,    58,    59,     60,     61,     62};
#undef P8
    /* byte b of the records: record b / 3's gap (b % 3 == 0: the second source, the gaps) or
     * position (the first source); its value's byte (b % 3 - 1) is 2 position + src_hi[b] */
#define R(b) (uint8_t)((b) % 3 == 0 ? 64 + (b) / 3 : (b) / 3)
#define H(b) (uint8_t)((b) % 3 == 2)
#define X8(F, b) F(b), F(b + 1), F(b + 2), F(b + 3), F(b + 4), F(b + 5), F(b + 6), F(b + 7)
#define X64(F, b)                                                                                  \
    X8(F, b), X8(F, b + 8), X8(F, b + 16), X8(F, b + 24), X8(F, b + 32), X8(F, b + 40),            \
        X8(F, b + 48), X8(F, b + 56)
    static const uint8_t src[192] = {X64(R, 0), X64(R, 64), X64(R, 128)};
    static const uint8_t src_hi[192] = {X64(H, 0), X64(H, 64), X64(H, 128)};
#undef X64
#undef X8
#undef H
#undef R
    /* the gap bytes of each 64 bytes of records: b % 3 == 0 for b from 0, 64, 128 */
    static const uint64_t gap_at[3] = {0x9249249249249249ull, 0x4924924924924924ull,
                                       0x2492492492492492ull};
    uint64_t d = i + (uint64_t)__builtin_ctzll(m) - gw->next;
    uint8_t *g = gw->g;
    if (d >= 0x4000) { /* a gap of 3 or more varint bytes: all but the last here */
        while (d >= 0x80) {
            *g++ = (uint8_t)(d | 0x80);
            d >>= 7;
        }
    }
    *g = (uint8_t)(d | 0x80); /* a 2-byte varint's first byte; overwritten when not one */
    uint64_t two = d > 0x7f;
    g += two;
    d >>= 7 * two;
    __m512i pos = _mm512_maskz_compress_epi8(m, _mm512_loadu_si512(pos_of));
    __m512i gap = _mm512_sub_epi8(
        _mm512_sub_epi8(pos, _mm512_permutexvar_epi8(_mm512_loadu_si512(before), pos)),
        _mm512_set1_epi8(1));
    /* the first gap into byte 0: a move from a general register and a masked byte move (one
     * shuffle-port uop; a masked broadcast takes two) */
    gap = _mm512_mask_mov_epi8(gap, 1, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)d)));
    __m512i c0 = _mm512_loadu_si512(cur), c1 = _mm512_loadu_si512(cur + 64);
    uint64_t p = rs_pop64(m);
    for (uint32_t t = 0; t < 3 && 64 * t < 3 * p; t++) {
        __m512i both = _mm512_permutex2var_epi8(pos, _mm512_loadu_si512(src + 64 * t), gap);
        __m512i at =
            _mm512_add_epi8(_mm512_add_epi8(both, both), _mm512_loadu_si512(src_hi + 64 * t));
        __m512i val = _mm512_permutex2var_epi8(c0, at, c1);
        _mm512_storeu_si512(g + 64 * t, _mm512_mask_blend_epi8(gap_at[t], val, both));
    }
    gw->g = g + 3 * p;
    gw->next = i + 64 - (uint64_t)__builtin_clzll(m);
}

/* The words of @p a that @p e marks (words of @p w bytes) to @p d. */
static inline void store_words(uint8_t *d, uint64_t e, __m512i a, uint32_t w)
{
    switch (w) {
    case 2:
        _mm512_mask_storeu_epi16(d, (__mmask32)e, a);
        break;
    case 4:
        _mm512_mask_storeu_epi32(d, (__mmask16)e, a);
        break;
    case 8:
        _mm512_mask_storeu_epi64(d, (__mmask8)e, a);
        break;
    default:
        _mm512_mask_storeu_epi8(d, (__mmask64)e, a);
    }
}

static inline uint64_t scan_step(const uint8_t *cur, uint8_t *prev, rs_gap_writer_t *gw, uint64_t i,
                                 uint32_t w)
{
    uint64_t m = 0;
    for (uint32_t k = 0; k < w; k++) {
        __m512i a = _mm512_loadu_si512(cur + 64 * k), b = _mm512_loadu_si512(prev + 64 * k);
        uint64_t e;
        switch (w) {
        case 2:
            e = _mm512_cmpneq_epi16_mask(a, b);
            break;
        case 4:
            e = _mm512_cmpneq_epi32_mask(a, b);
            break;
        case 8:
            e = _mm512_cmpneq_epi64_mask(a, b);
            break;
        default:
            e = _mm512_cmpneq_epi8_mask(a, b);
        }
        m |= e << (k * 64 / w);
        store_words(prev + 64 * k, e, a, w); /* unchanged lines stay clean */
        if (gw->dense)
            _mm512_storeu_si512(gw->dense + i * w + 64 * k, a);
    }
    if (gw->on) /* written by scan_drain */
        rs_gaps_enqueue(gw, cur, m, i);
    return m;
}

static inline void scan_drain(rs_gap_writer_t *gw, uint32_t w)
{
    if (w != 2) { /* other word sizes: record by record */
        rs_delta_drain_words(gw, w);
        return;
    }
    for (uint32_t q = 0; q < gw->nq; q++)
        gaps64(gw, gw->qp[q], gw->qm[q], gw->qi[q]);
    gw->nq = 0;
}

static inline uint8_t *gather_step(const uint8_t *cur, uint64_t m, uint32_t w, uint8_t *v)
{
    for (uint32_t k = 0; k < w; k++) {
        uint64_t e = part(m, w, k);
        __m512i a = _mm512_loadu_si512(cur + 64 * k), c;
        switch (w) {
        case 2:
            c = _mm512_maskz_compress_epi16((__mmask32)e, a);
            break;
        case 4:
            c = _mm512_maskz_compress_epi32((__mmask16)e, a);
            break;
        case 8:
            c = _mm512_maskz_compress_epi64((__mmask8)e, a);
            break;
        default:
            c = _mm512_maskz_compress_epi8((__mmask64)e, a);
        }
        _mm512_storeu_si512(v, c);
        v += rs_pop64(e) * w;
    }
    return v;
}

static inline void scatter_step(uint8_t *chunk, uint64_t m, uint32_t w, const uint8_t *v)
{
    for (uint32_t k = 0; k < w; k++) {
        uint64_t e = part(m, w, k);
        uint8_t *d = chunk + 64 * k;
        switch (w) {
        case 2:
            _mm512_mask_storeu_epi16(d, (__mmask32)e,
                                     _mm512_maskz_expandloadu_epi16((__mmask32)e, v));
            break;
        case 4:
            _mm512_mask_storeu_epi32(d, (__mmask16)e,
                                     _mm512_maskz_expandloadu_epi32((__mmask16)e, v));
            break;
        case 8:
            _mm512_mask_storeu_epi64(d, (__mmask8)e,
                                     _mm512_maskz_expandloadu_epi64((__mmask8)e, v));
            break;
        default:
            _mm512_mask_storeu_epi8(d, (__mmask64)e,
                                    _mm512_maskz_expandloadu_epi8((__mmask64)e, v));
        }
        v += rs_pop64(e) * w;
    }
}

RS_DELTA_BLOCKS_DEFINE(rs_delta_blocks_avx512, "avx512")
#else
const rs_delta_blocks_t *rs_delta_blocks_avx512(void)
{
    return NULL; /* built without AVX-512 F/BW/VBMI/VBMI2 */
}
#endif
