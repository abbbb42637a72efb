/* Quantized destination forms of catalogue tensors (reshard_tensors_set_quant). */
#include <string.h>

#include "layout/layout_internal.h"
#include "util/error.h"

reshard_status_t reshard_tensors_set_quant(reshard_tensors_t *tensors, int32_t tensor,
                                           const reshard_quant_t *q)
{
    rs_error_clear();
    if (!tensors || !q || tensor < 0 || tensor >= tensors->n)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_tensors_set_quant: bad argument");
    rs_tensor_t *t = &tensors->t[tensor];
    if (q->kind == RESHARD_QUANT_NONE) {
        memset(&t->quant, 0, sizeof t->quant);
        return RESHARD_OK;
    }
    if (q->kind != RESHARD_QUANT_FP8_BLOCK && q->kind != RESHARD_QUANT_MXFP8)
        return rs_error(RESHARD_ERR_INVALID_ARG, "tensor %s: unknown quantization kind %d", t->name,
                        (int)q->kind);
    if (q->scale_tensor < 0 || q->scale_tensor >= tensors->n || q->scale_tensor == tensor)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "tensor %s: scale tensor id %d is not another "
                        "tensor of the catalogue",
                        t->name, q->scale_tensor);
    const rs_tensor_t *s = &tensors->t[q->scale_tensor];
    bool mx = q->kind == RESHARD_QUANT_MXFP8;
    if (t->dtype != RESHARD_BF16)
        return rs_error(RESHARD_ERR_DTYPE, "tensor %s: quantized from %s; only bf16 is", t->name,
                        reshard_dtype_name(t->dtype));
    reshard_dtype_t sdt = mx ? RESHARD_UINT8 : RESHARD_FP32;
    if (s->dtype != sdt)
        return rs_error(RESHARD_ERR_DTYPE, "tensor %s: its scale tensor %s is %s, not %s", t->name,
                        s->name, reshard_dtype_name(s->dtype), reshard_dtype_name(sdt));
    int nd = t->ndim;
    if (nd != 2 && nd != 3)
        return rs_error(RESHARD_ERR_SHAPE,
                        "tensor %s: %d dims; a quantized tensor has 2 "
                        "([rows, cols]) or 3 ([experts, rows, cols])",
                        t->name, nd);
    int64_t br = mx ? 1 : 128, bc = mx ? 32 : 128;
    int64_t want[3] = {t->shape[0], (t->shape[nd - 2] + br - 1) / br,
                       (t->shape[nd - 1] + bc - 1) / bc};
    const int64_t *w = nd == 3 ? want : want + 1;
    bool ok = s->ndim == nd;
    for (int d = 0; ok && d < nd; d++)
        ok = s->shape[d] == w[d];
    if (!ok)
        return rs_error(RESHARD_ERR_SHAPE,
                        "tensor %s: its scale tensor %s does not have the "
                        "shape [%s%lld, %lld] of its %s blocks",
                        t->name, s->name, nd == 3 ? "experts, " : "", (long long)w[nd - 2],
                        (long long)w[nd - 1], mx ? "1x32" : "128x128");
    const rs_tensor_t *both[2] = {t, s};
    for (int i = 0; i < 2; i++) {
        const rs_tensor_t *x = both[i];
        if (x->vshape[x->vndim - 1] != x->shape[nd - 1] || (nd == 3 && x->vshape[0] != x->shape[0]))
            return rs_error(RESHARD_ERR_SHAPE,
                            "tensor %s: its view splits the %s dim; a "
                            "quantized tensor's view may split only the rows",
                            x->name,
                            x->vshape[x->vndim - 1] != x->shape[nd - 1] ? "last" : "expert");
    }
    t->quant = *q;
    t->quant.pow2_scale = mx || q->pow2_scale;
    return RESHARD_OK;
}

reshard_status_t reshard_tensors_get_quant(const reshard_tensors_t *tensors, int32_t tensor,
                                           reshard_quant_t *q)
{
    rs_error_clear();
    if (!tensors || !q || tensor < 0 || tensor >= tensors->n)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_tensors_get_quant: bad argument");
    *q = tensors->t[tensor].quant;
    return RESHARD_OK;
}
