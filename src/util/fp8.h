/*
 * The FP8 quantization rule as inline functions that compile for the CPU and for CUDA
 * devices alike (__host__ __device__ under nvcc), so that the CPU quantizer and the GPU
 * kernel are one arithmetic. The rule, its sources and its choices for amax = 0 and for
 * non-finite values are documented in src/exec/quant.h; in short:
 *   key   = |bf16 bits| of each finite value (non-finite: 0), amax = the largest key's value,
 *           clamped below at RS_FP8_AMAX_MIN (DeepGEMM per_block_cast_to_fp8);
 *   scale = amax / 448 in fp32; pow2 (UE8M0, MXFP8): the next power of two >= it;
 *   q     = e4m3(x * (1 / scale)): fp32 reciprocal and product, each rounded to nearest;
 *   e4m3  = OCP FP8 E4M3FN, round to nearest even, saturating at +-448 (Inf too), NaN kept.
 * Every floating-point step is an explicitly rounded IEEE operation on the device
 * (__fdiv_rn, __fmul_rn, __fadd_rn), so nvcc cannot contract or approximate it.
 */
#ifndef RS_UTIL_FP8_H
#define RS_UTIL_FP8_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define RS_FP8_FN static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
/* always inlined: CPU callers are built per target (function multiversioning) and need the
 * rule compiled, and vectorized, inside their loops */
#define RS_FP8_FN static inline __attribute__((always_inline))
#else
#define RS_FP8_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define RS_FP8_DIV(a, b) __fdiv_rn((a), (b))
#define RS_FP8_MUL(a, b) __fmul_rn((a), (b))
#define RS_FP8_ADD(a, b) __fadd_rn((a), (b))
#else
#define RS_FP8_DIV(a, b) ((a) / (b))
#define RS_FP8_MUL(a, b) ((a) * (b))
#define RS_FP8_ADD(a, b) ((a) + (b))
#endif

/** Largest finite e4m3 value (0x7E). */
#define RS_FP8_E4M3_MAX 448.0f
/** amax is clamped below at this value (DeepGEMM per_block_cast_to_fp8: clamp(1e-4)). */
#define RS_FP8_AMAX_MIN 1e-4f

RS_FP8_FN uint32_t rs_fp8_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

RS_FP8_FN float rs_fp8_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/** fp32 value of bf16 bits (exact). */
RS_FP8_FN float rs_fp8_bf16(uint16_t h)
{
    return rs_fp8_float((uint32_t)h << 16);
}

/** The key whose maximum over a block gives its amax: |v| as bf16 bits for finite v (they
 *  order like the values), 0 for Inf and NaN. */
RS_FP8_FN uint32_t rs_fp8_amax_key(uint16_t h)
{
    const uint32_t a = h & 0x7FFFu;
    return a < 0x7F80u ? a : 0u;
}

/** The fp32 scale of a block whose finite |values| have maximum @p amax (any value below
 *  RS_FP8_AMAX_MIN, NaN included, counts as RS_FP8_AMAX_MIN); @p pow2: rounded up to a power
 *  of two. */
RS_FP8_FN float rs_fp8_scale_of_amax(float amax, int pow2)
{
    if (!(amax >= RS_FP8_AMAX_MIN))
        amax = RS_FP8_AMAX_MIN;
    float s = RS_FP8_DIV(amax, RS_FP8_E4M3_MAX);
    if (pow2) {
        uint32_t b = rs_fp8_bits(s);
        if (b & 0x7FFFFFu) /* not a power of two: the next one up */
            b = (b & 0x7F800000u) + 0x800000u;
        s = rs_fp8_float(b);
    }
    return s;
}

/** The fp32 scale of a block whose largest key is @p key; @p pow2: rounded up to a power of
 *  two. */
RS_FP8_FN float rs_fp8_scale(uint32_t key, int pow2)
{
    return rs_fp8_scale_of_amax(rs_fp8_bf16((uint16_t)key), pow2);
}

/** The multiplier of a block's values: 1 / scale in fp32. */
RS_FP8_FN float rs_fp8_inverse(float scale)
{
    return RS_FP8_DIV(1.0f, scale);
}

/** E8M0 byte of a power-of-two scale (its biased exponent). */
RS_FP8_FN uint8_t rs_fp8_e8m0(float scale)
{
    return (uint8_t)(rs_fp8_bits(scale) >> 23);
}

/** a < b as an all-ones / all-zeros mask; @p a and @p b below 2^31, so that the compare is a
 *  signed one (one vector instruction on x86). */
RS_FP8_FN uint32_t rs_fp8_lt_mask(uint32_t a, uint32_t b)
{
    return 0u - (uint32_t)((int32_t)a < (int32_t)b);
}

RS_FP8_FN uint32_t rs_fp8_umin(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

/** The e4m3 byte of fp32 @p x: round to nearest even, saturating at +-448 (Inf too), NaN
 *  0x7F with the sign. Branch-free, selections by masks and mins, so that CPU loops over it
 *  vectorize (GCC does not vectorize the equivalent chain of conditional expressions). */
RS_FP8_FN uint8_t rs_fp8_e4m3(float x)
{
    const uint32_t b = rs_fp8_bits(x);
    const uint32_t sign = (b >> 24) & 0x80u, a = b & 0x7FFFFFFFu;
    /* normal range (|x| >= 2^-6): round the fp32 mantissa to 3 bits, ties to even, and rebias
     * the exponent (127 -> 7); above 448 (and Inf) the min saturates to 448 (0x7E) */
    const uint32_t norm =
        rs_fp8_umin(((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - (120u << 3), 0x7Eu);
    /* subnormal range (|x| < 2^-6, multiples of 2^-9): adding 2^14, whose fp32 ulp is 2^-9,
     * rounds |x| to the grid; the low bits count steps (|x| clamped to 2^-6: elsewhere the
     * result is not used) */
    const uint32_t sub =
        rs_fp8_bits(RS_FP8_ADD(rs_fp8_float(rs_fp8_umin(a, 0x3C800000u)), 16384.0f)) - 0x46800000u;
    const uint32_t is_sub = rs_fp8_lt_mask(a, 0x3C800000u);
    const uint32_t is_nan = rs_fp8_lt_mask(0x7F800000u, a);
    uint32_t code = (sub & is_sub) | (norm & ~is_sub);
    code = (0x7Fu & is_nan) | (code & ~is_nan);
    return (uint8_t)(code | sign);
}

/** The e4m3 byte of bf16 @p h in a block whose multiplier is @p inv. */
RS_FP8_FN uint8_t rs_fp8_quantize(uint16_t h, float inv)
{
    return rs_fp8_e4m3(RS_FP8_MUL(rs_fp8_bf16(h), inv));
}

#endif
