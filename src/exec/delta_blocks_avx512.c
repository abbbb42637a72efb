/*
 * The delta codec's block passes with AVX-512 (F, BW, VBMI2): a block of 64 words is w
 * vectors; compares give its change mask, masked stores update the snapshot, compress and
 * expand move the changed words. This file is compiled with those instructions enabled
 * (CMakeLists.txt) and runs only where rs_delta_encode's dispatch found them.
 */
#include "exec/delta_blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI2__)
#include <immintrin.h>

/* Vector k (64 bytes) of a block's change mask @p m, for words of @p w bytes. */
static inline uint64_t part(uint64_t m, uint32_t w, uint32_t k)
{
    return w == 1 ? m : (m >> (k * 64 / w)) & (((uint64_t)1 << (64 / w)) - 1);
}

static inline uint64_t scan_step(const uint8_t *cur, uint8_t *prev, uint8_t *dense, uint32_t w)
{
    uint64_t m = 0;
    for (uint32_t k = 0; k < w; k++) {
        __m512i a = _mm512_loadu_si512(cur + 64 * k), b = _mm512_loadu_si512(prev + 64 * k);
        uint64_t e;
        switch (w) {
        case 2:
            e = _mm512_cmpneq_epi16_mask(a, b);
            _mm512_mask_storeu_epi16(prev + 64 * k, (__mmask32)e, a);
            break;
        case 4:
            e = _mm512_cmpneq_epi32_mask(a, b);
            _mm512_mask_storeu_epi32(prev + 64 * k, (__mmask16)e, a);
            break;
        case 8:
            e = _mm512_cmpneq_epi64_mask(a, b);
            _mm512_mask_storeu_epi64(prev + 64 * k, (__mmask8)e, a);
            break;
        default:
            e = _mm512_cmpneq_epi8_mask(a, b);
            _mm512_mask_storeu_epi8(prev + 64 * k, (__mmask64)e, a);
        }
        m |= e << (k * 64 / w);
        if (dense)
            _mm512_storeu_si512(dense + 64 * k, a);
    }
    return m;
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
    return NULL; /* built without AVX-512 F/BW/VBMI2 */
}
#endif
