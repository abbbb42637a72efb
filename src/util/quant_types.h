/*
 * The parameters of a quantization rule: which kind, its block shape and its scale rounding.
 * The rule's arithmetic is util/fp8.h; its conventions and their sources are documented in
 * src/exec/quant.h. A low header so that the layout, the transports and the executor name a
 * rule without depending on one another.
 */
#ifndef RS_UTIL_QUANT_TYPES_H
#define RS_UTIL_QUANT_TYPES_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { RS_QUANT_NONE = 0, RS_QUANT_FP8_BLOCK, RS_QUANT_MXFP8 } rs_quant_kind_t;

typedef struct reshard_quant_rule {
    rs_quant_kind_t kind;
    int64_t block_rows, block_cols; /* 128,128 for FP8_BLOCK; 1,32 for MXFP8 (blocks along the
                                       input dim = last dim) */
    bool pow2_scale;                /* FP8_BLOCK: round scale up to a power of two (UE8M0,
                                       DeepGEMM); MXFP8 is always pow2 with e8m0 scales */
} rs_quant_t;

/** Whether @p q's scales are powers of two (MXFP8 always, FP8_BLOCK with pow2_scale). */
static inline bool rs_quant_pow2(const rs_quant_t *q)
{
    return q->kind == RS_QUANT_MXFP8 || q->pow2_scale;
}

/** Bytes of one scale element: 4 (fp32) for FP8_BLOCK, 1 (e8m0) for MXFP8. */
static inline uint32_t rs_quant_scale_size(const rs_quant_t *q)
{
    return q->kind == RS_QUANT_MXFP8 ? 1u : 4u;
}

#endif
