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
 * varint's leading bytes written first), the values of each half compressed, gap bytes and
 * values interleaved by byte permutes into 3-byte records, stored as whole vectors (up to 128
 * bytes from each half's first record, of which 3 per changed word count). */
static inline void gaps64(rs_gap_writer_t *gw, const uint8_t *cur, uint64_t m, uint64_t i)
{
    static const uint8_t pos_of[64] = {
#define P8(b) b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7
        P8(0), P8(8), P8(16), P8(24), P8(32), P8(40), P8(48), P8(56),
    };
    static const uint8_t before[64] = {0,  P8(0), P8(8), P8(16), P8(24), P8(32), P8(40), P8(48),
                                       56, 57,    58,    59,     60,     61,     62};
#undef P8
    /* output byte b of a half's records: record b / 3's gap (byte b / 3 of the gaps, plus the
     * records of the half before) or one of its value's bytes (byte 2 (b / 3) + b % 3 - 1 of the
     * values, bit 6: the second source) */
    static const uint8_t rec_idx[128] = {
#define R(b) (uint8_t)((b) % 3 == 0 ? (b) / 3 : 64 + 2 * ((b) / 3) + (b) % 3 - 1)
#define R8(b) R(b), R(b + 1), R(b + 2), R(b + 3), R(b + 4), R(b + 5), R(b + 6), R(b + 7)
        R8(0),  R8(8),  R8(16), R8(24), R8(32), R8(40),  R8(48),  R8(56),
        R8(64), R8(72), R8(80), R8(88), R8(96), R8(104), R8(112), R8(120),
#undef R8
#undef R
    };
    const __mmask64 gap_lo = 0x9249249249249249ull, gap_hi = 0x4924924924924924ull;
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
    gap = _mm512_mask_set1_epi8(gap, 1, (char)d);
    __m512i lo = _mm512_loadu_si512(rec_idx), hi = _mm512_loadu_si512(rec_idx + 64);
    uint64_t p0 = (uint64_t)__builtin_popcount((uint32_t)m),
             p1 = (uint64_t)__builtin_popcount((uint32_t)(m >> 32));
    __m512i v0 = _mm512_maskz_compress_epi16((__mmask32)m, _mm512_loadu_si512(cur));
    __m512i v1 = _mm512_maskz_compress_epi16((__mmask32)(m >> 32), _mm512_loadu_si512(cur + 64));
    _mm512_storeu_si512(g, _mm512_permutex2var_epi8(gap, lo, v0));
    if (p0 > 21) /* records past the first 64 bytes */
        _mm512_storeu_si512(g + 64, _mm512_permutex2var_epi8(gap, hi, v0));
    g += 3 * p0;
    __m512i off = _mm512_set1_epi8((char)p0); /* the second half's gaps follow the first's */
    lo = _mm512_mask_add_epi8(lo, gap_lo, lo, off);
    _mm512_storeu_si512(g, _mm512_permutex2var_epi8(gap, lo, v1));
    if (p1 > 21) {
        hi = _mm512_mask_add_epi8(hi, gap_hi, hi, off);
        _mm512_storeu_si512(g + 64, _mm512_permutex2var_epi8(gap, hi, v1));
    }
    gw->g = g + 3 * p1;
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
    }
    if (gw->on && w == 2) { /* queued without a branch on m; written by scan_drain */
        gw->qp[gw->nq] = cur;
        gw->qi[gw->nq] = i;
        gw->qm[gw->nq] = m;
        gw->nq += m != 0;
    } else if (gw->on) { /* other word sizes: record by record (the block is in L1) */
        rs_gaps_block(gw, cur, m, i, w);
    }
    return m;
}

static inline void scan_drain(rs_gap_writer_t *gw)
{
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
