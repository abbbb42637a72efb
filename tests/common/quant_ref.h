/* An independent reference quantizer for the tests, written from the rule
 * (DeepGEMM per_block_cast_to_fp8 for 128x128 fp32 scales, its
 * ceil_to_ue8m0 for power-of-two scales, OCP MX v1.0 MXFP8 with e8m0 scales,
 * e4m3fn round to nearest even saturating at +-448; non-finite values left out
 * of amax, NaN -> NaN, Inf -> +-448; amax clamped below at 1e-4). It shares no
 * code with the product: e4m3 by a nearest search over the 127 finite
 * magnitudes decoded from their bit fields, scales by frexp/ldexp. */
#ifndef RS_TEST_QUANT_REF_H
#define RS_TEST_QUANT_REF_H

#include <stdbool.h>
#include <stdint.h>

/** bf16 bits to float. */
float ref_bf16(uint16_t b);
/** e4m3 byte of @p y by the rule. */
uint8_t ref_e4m3(float y);
/** Scale of a block of @p n bf16 values (fp32); @p pow2 rounds up to a power of two. */
float ref_block_scale(const uint16_t *v, int64_t n, bool pow2);
/** Quantize a dense row-major [E x rows x cols] bf16 array into @p q (e4m3
 *  bytes, same shape) and @p s ([E x ceil(rows/br) x ceil(cols/bc)], fp32
 *  when @p mx is false, e8m0 bytes when true). */
void ref_quantize(const uint16_t *x, int64_t E, int64_t rows, int64_t cols, int64_t br, int64_t bc,
                  bool pow2, bool mx, uint8_t *q, void *s);

#endif
