/* Layouts: the fragments of one side, added directly and checked on entry. */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "util/error.h"

reshard_status_t reshard_layout_create(const reshard_tensors_t *tensors, reshard_layout_t **out)
{
    rs_error_clear();
    if (!tensors || !out)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_layout_create: NULL argument");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_layout_create: out of memory");
    (*out)->tensors = tensors;
    return RESHARD_OK;
}

void reshard_layout_destroy(reshard_layout_t *layout)
{
    if (!layout)
        return;
    free(layout->f);
    rs_decls_free(&layout->decls);
    rs_tensor_lists_free(&layout->lists);
    free(layout->origin.holders);
    free(layout->gone);
    free(layout);
}

reshard_status_t reshard_layout_add_fragment(reshard_layout_t *layout, const reshard_fragment_t *fr)
{
    rs_error_clear();
    if (!layout || !fr)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_layout_add_fragment: NULL argument");
    const reshard_tensors_t *ts = layout->tensors;
    if (fr->tensor < 0 || fr->tensor >= ts->n)
        return rs_error(RESHARD_ERR_INVALID_ARG, "fragment on rank %d: no tensor with id %d",
                        fr->rank, fr->tensor);
    const rs_tensor_t *t = &ts->t[fr->tensor];
    char bs[256];
    if (fr->box.ndim != t->vndim)
        return rs_error(RESHARD_ERR_BOX,
                        "tensor %s, rank %d: box has %d dims, the view shape has %d", t->name,
                        fr->rank, fr->box.ndim, t->vndim);
    /* the box as text only for an error: formatting it every time costs more
     * than the checks */
    if (fr->rank < 0)
        return rs_error(RESHARD_ERR_RANK, "tensor %s, rank %d, box %s: negative rank", t->name,
                        fr->rank, rs_box_str(&fr->box, bs, sizeof bs));
    if (fr->buffer < 0 || fr->buffer == INT32_MAX || fr->base < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "tensor %s, rank %d, box %s: buffer id %d outside [0, INT32_MAX) or "
                        "negative base",
                        t->name, fr->rank, rs_box_str(&fr->box, bs, sizeof bs), fr->buffer);
    /* Highest element position, with overflow checks. */
    uint64_t last = (uint64_t)fr->base;
    for (int d = 0; d < t->vndim; d++) {
        if (fr->box.offset[d] < 0 || fr->box.extent[d] < 1 ||
            fr->box.offset[d] > t->vshape[d] - fr->box.extent[d])
            return rs_error(
                RESHARD_ERR_BOX, "tensor %s, rank %d: box %s is outside shape dim %d (%lld)",
                t->name, fr->rank, rs_box_str(&fr->box, bs, sizeof bs), d, (long long)t->vshape[d]);
        if (fr->stride[d] < 0)
            return rs_error(RESHARD_ERR_INVALID_ARG, "tensor %s, rank %d, box %s: negative stride",
                            t->name, fr->rank, rs_box_str(&fr->box, bs, sizeof bs));
        uint64_t step = (uint64_t)(fr->box.extent[d] - 1);
        if (fr->stride[d] && step > (UINT64_MAX / 16) / (uint64_t)fr->stride[d])
            return rs_error(RESHARD_ERR_OVERFLOW, "tensor %s, rank %d, box %s: position overflows",
                            t->name, fr->rank, rs_box_str(&fr->box, bs, sizeof bs));
        last += step * (uint64_t)fr->stride[d];
        if (last > (uint64_t)INT64_MAX / 16)
            return rs_error(RESHARD_ERR_OVERFLOW, "tensor %s, rank %d, box %s: position overflows",
                            t->name, fr->rank, rs_box_str(&fr->box, bs, sizeof bs));
    }
    if (layout->n == layout->cap) {
        int64_t cap = layout->cap ? layout->cap * 2 : 256;
        reshard_fragment_t *f = realloc(layout->f, (size_t)cap * sizeof *f);
        if (!f)
            return rs_error(RESHARD_ERR_NOMEM, "tensor %s: out of memory", t->name);
        layout->f = f;
        layout->cap = cap;
    }
    reshard_fragment_t *dst = &layout->f[layout->n++];
    *dst = *fr;
    for (int d = t->vndim; d < RESHARD_MAX_DIMS; d++) {
        dst->box.offset[d] = 0;
        dst->box.extent[d] = 0;
        dst->stride[d] = 0;
    }
    rs_layout_facts_add(layout);
    rs_tensor_lists_add(layout);
    return RESHARD_OK;
}

int64_t reshard_layout_count(const reshard_layout_t *layout)
{
    return layout ? layout->n : 0;
}

reshard_status_t reshard_layout_fragment(const reshard_layout_t *layout, int64_t i,
                                         reshard_fragment_t *out)
{
    rs_error_clear();
    if (!layout || !out || i < 0 || i >= layout->n)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_layout_fragment: bad index %lld",
                        (long long)i);
    *out = layout->f[i];
    return RESHARD_OK;
}

size_t rs_frag_elem_size(const reshard_layout_t *layout, const reshard_fragment_t *f)
{
    const rs_tensor_t *t = &layout->tensors->t[f->tensor];
    if (t->quant.kind != RESHARD_QUANT_NONE) {
        const rs_decl_t *d = rs_decl_find(&layout->decls, f->rank, f->buffer);
        if (d && d->dtype == RESHARD_FP8_E4M3)
            return 1;
    }
    return reshard_dtype_size(t->dtype);
}

uint64_t rs_fragment_end_bytes(const reshard_layout_t *layout, const reshard_fragment_t *f)
{
    uint64_t last = (uint64_t)f->base;
    for (int d = 0; d < f->box.ndim; d++)
        last += (uint64_t)(f->box.extent[d] - 1) * (uint64_t)f->stride[d];
    return (last + 1) * rs_frag_elem_size(layout, f);
}

/* Does @p layout hold tensor @p t quantized: @p t is marked quantized and
 * the layout holds fragments of its scale tensor (only destinations do)? */
static bool is_quant_dest(const reshard_layout_t *l, int32_t t)
{
    const rs_tensor_t *x = &l->tensors->t[t];
    if (x->quant.kind == RESHARD_QUANT_NONE)
        return false;
    for (int64_t i = 0; i < l->n; i++)
        if (l->f[i].tensor == x->quant.scale_tensor)
            return true;
    return false;
}

uint64_t reshard_layout_buffer_bytes(const reshard_layout_t *layout, int32_t rank, int32_t buffer)
{
    const rs_decl_t *d = layout ? rs_decl_find(&layout->decls, rank, buffer) : NULL;
    if (d)
        return d->bytes;
    uint64_t bytes = 0;
    int32_t last = -1;
    bool e4m3 = false;
    for (int64_t i = 0; layout && i < layout->n; i++) {
        const reshard_fragment_t *f = &layout->f[i];
        if (f->rank == rank && f->buffer == buffer) {
            uint64_t e = rs_fragment_end_bytes(layout, f);
            if (f->tensor != last) {
                last = f->tensor;
                e4m3 = is_quant_dest(layout, last);
            }
            if (e4m3) /* undeclared: rs_fragment_end_bytes counted source elements */
                e /= reshard_dtype_size(layout->tensors->t[f->tensor].dtype);
            if (e > bytes)
                bytes = e;
        }
    }
    return bytes;
}

int32_t reshard_layout_buffer_count(const reshard_layout_t *layout, int32_t rank)
{
    int32_t n = 0;
    for (int64_t i = 0; layout && i < layout->n; i++)
        if (layout->f[i].rank == rank && layout->f[i].buffer >= n)
            n = layout->f[i].buffer + 1;
    return n;
}

/* Given declared buffers match their declaration exactly. */
static reshard_status_t check_declared(const reshard_layout_t *l, int32_t rank,
                                       const reshard_buffer_t *bufs, int32_t n, const char *side)
{
    const rs_decls_t *d = &l->decls;
    int64_t first, cnt = d->n ? rs_decls_of_rank(d, rank, &first) : 0;
    for (int64_t i = 0; i < cnt; i++) {
        const rs_decl_t *e = &d->e[d->order[first + i]];
        if (e->zero && (e->buffer >= n || !bufs[e->buffer].ptr))
            return rs_error(RESHARD_ERR_BUFFER,
                            "rank %d, %s buffer %d (%s, zero-filled by every execution): "
                            "missing",
                            rank, side, e->buffer, e->name);
        if (e->buffer >= n || !bufs[e->buffer].ptr)
            continue; /* missing: an error when a fragment uses it (below) */
        const reshard_buffer_t *b = &bufs[e->buffer];
        if (b->bytes != e->bytes)
            return rs_error(RESHARD_ERR_BUFFER,
                            "rank %d, %s buffer %d (%s): given %llu bytes, declared %llu bytes "
                            "(%lld %s elements)",
                            rank, side, e->buffer, e->name, (unsigned long long)b->bytes,
                            (unsigned long long)e->bytes, (long long)e->numel,
                            reshard_dtype_name(e->dtype));
        if ((b->flags & RESHARD_BUFFER_DTYPE) && b->dtype != e->dtype)
            return rs_error(RESHARD_ERR_BUFFER,
                            "rank %d, %s buffer %d (%s): given as %s, declared %s (%llu bytes "
                            "both)",
                            rank, side, e->buffer, e->name, reshard_dtype_name(b->dtype),
                            reshard_dtype_name(e->dtype), (unsigned long long)e->bytes);
        if (b->name && strcmp(b->name, e->name) != 0)
            return rs_error(RESHARD_ERR_BUFFER,
                            "rank %d, %s buffer %d: given as %s, declared %s (%llu bytes both)",
                            rank, side, e->buffer, b->name, e->name, (unsigned long long)e->bytes);
    }
    return RESHARD_OK;
}

reshard_status_t rs_layout_check_buffers(const reshard_layout_t *l, int32_t rank,
                                         const reshard_buffer_t *bufs, int32_t n, const char *side)
{
    reshard_status_t st = check_declared(l, rank, bufs, n, side);
    if (st != RESHARD_OK)
        return st;
    for (int64_t i = 0; i < l->n; i++) {
        const reshard_fragment_t *f = &l->f[i];
        if (f->rank != rank)
            continue;
        uint64_t need = rs_fragment_end_bytes(l, f);
        if (f->buffer >= n || !bufs[f->buffer].ptr || bufs[f->buffer].bytes < need) {
            char bs[256];
            return rs_error(RESHARD_ERR_BUFFER,
                            "tensor %s, rank %d, box %s: %s buffer %d is missing or under %llu "
                            "bytes",
                            l->tensors->t[f->tensor].name, rank, rs_box_str(&f->box, bs, sizeof bs),
                            side, f->buffer, (unsigned long long)need);
        }
    }
    return RESHARD_OK;
}
