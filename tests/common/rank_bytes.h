/* Test helper: the element bytes a rank's fragments hold (what a verified refit of
 * that rank counts), from the layout's fragments alone. */
#ifndef RS_TEST_RANK_BYTES_H
#define RS_TEST_RANK_BYTES_H

#include "reshard/reshard.h"

/* Bytes of the fragments of @p rank in destination layout @p l (every rank's for
 * RESHARD_ALL_RANKS); a tensor destinations hold quantized (reshard_tensors_set_quant) has
 * 1-byte e4m3 elements there. */
static inline uint64_t layout_rank_bytes(const reshard_layout_t *l, const reshard_tensors_t *T,
                                         int32_t rank)
{
    uint64_t sum = 0;
    for (int64_t i = 0; i < reshard_layout_count(l); i++) {
        reshard_fragment_t f;
        reshard_tensor_info_t ti;
        reshard_layout_fragment(l, i, &f);
        if (rank != RESHARD_ALL_RANKS && f.rank != rank)
            continue;
        reshard_tensors_info(T, f.tensor, &ti);
        reshard_quant_t q;
        const int quantized = reshard_tensors_get_quant(T, f.tensor, &q) == RESHARD_OK &&
                              q.kind != RESHARD_QUANT_NONE;
        uint64_t n = quantized ? 1 : reshard_dtype_size(ti.dtype);
        for (int k = 0; k < f.box.ndim; k++)
            n *= (uint64_t)f.box.extent[k];
        sum += n;
    }
    return sum;
}

#endif
