/*
 * Quantization on the wire: bf16 elements into fp8 e4m3 with per-block scales.
 *
 * Conventions followed:
 *   - RS_QUANT_FP8_BLOCK: DeepSeek-V3 / vLLM 128x128 block quantization, the
 *     rule of DeepGEMM's per_block_cast_to_fp8 (deep_gemm/utils/math.py) that
 *     vLLM's FP8 checkpoints (weight + "weight_scale_inv") are made with:
 *       amax  = max |x| over the block (clamped below at 1e-4),
 *       scale = amax / 448                      (fp32; what "weight_scale_inv" holds),
 *               or, with pow2_scale (UE8M0, as DeepGEMM wants on Blackwell),
 *               2^ceil(log2(amax / 448))        (ceil_to_ue8m0),
 *       q     = e4m3(x * (1 / scale))           (fp32 product, the reciprocal in fp32).
 *   - RS_QUANT_MXFP8: OCP Microscaling Formats (MX) v1.0, MXFP8 E4M3: blocks
 *     of 32 consecutive elements along the last (input) dim, one E8M0 scale
 *     per block (a biased power-of-two exponent: byte = log2(scale) + 127). The
 *     scale is the power-of-two rule above (rounded up, so no element
 *     saturates; NVIDIA Transformer Engine's MXFP8 quantizer does the same,
 *     where the MX spec's example rounds down and clamps).
 *
 * e4m3 is OCP FP8 E4M3 ("e4m3fn": bias 7, no infinities, 0x7F/0xFF NaN,
 * largest finite 448 = 0x7E). The conversion x -> e4m3 is round to nearest,
 * ties to even, saturating at +-448 (finite values above 448 become 448 of
 * their sign), sign kept (so -0 and negatives that round to zero are 0x80).
 *
 * Non-finite source values (a rule of this product; torch would spread them
 * over the whole block through amax):
 *   - amax is taken over the block's FINITE values only, so one Inf or NaN
 *     does not spoil its block's other elements;
 *   - NaN becomes e4m3 NaN (0x7F, 0xFF when negative);
 *   - +-Inf saturates to +-448 (0x7E / 0xFE).
 * amax = 0 (an all-zero, all-non-finite or tiny block): the clamp makes amax
 * 1e-4 (DeepGEMM's clamp(1e-4)), so the scale is 1e-4/448 (pow2: 2^-22) and
 * zeros stay zeros.
 *
 * The conversion is written on the bits (no compiler float8 type); the only
 * floating-point operations are the fp32 reciprocal, product and (below
 * 2^-6, e4m3's subnormal range) one fp32 add, all IEEE-754 round to nearest.
 */
#ifndef RS_EXEC_QUANT_H
#define RS_EXEC_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/reshard.h"
#include "util/quant_types.h"

/** The e4m3 byte of fp32 @p x: RNE, saturating at +-448, NaN kept (see above). */
uint8_t rs_e4m3_from_f32(float x);

/** Scale of a block whose finite |values| have maximum @p amax, per @p q
 *  (fp32; for MXFP8 the power of two that rs_e8m0_from_scale encodes). */
float rs_quant_scale(const rs_quant_t *q, float amax);

/** E8M0 byte of a power-of-two scale (its biased exponent). */
uint8_t rs_e8m0_from_scale(float scale);

/* Quantize the bf16 elements of box (tensor coordinates; last two dims are rows, cols; an optional
 * leading expert dim) read from src per src_frag, writing e4m3 bytes to dst per dst_frag and one
 * scale per block to scale per scale_frag (scale-tensor coordinates: [E?] x ceil(rows/br) x
 * ceil(cols/bc); fp32 for FP8_BLOCK, uint8 e8m0 for MXFP8). The box's edges lie on block bounds or
 * the tensor's end, so every block it touches is whole. */
void rs_quant_box_cpu(const rs_quant_t *q, void *dst, const reshard_fragment_t *dst_frag,
                      void *scale, const reshard_fragment_t *scale_frag, const void *src,
                      const reshard_fragment_t *src_frag, const reshard_box_t *box);

#endif
