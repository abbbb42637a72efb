/* Strided pack/unpack of boxes on the CPU. */
#include <string.h>

#include "exec/pack.h"
#include "layout/layout_internal.h"

/* Copy @p n elements of @p es bytes from @p in (every @p is-th element) to
 * @p out (every @p os-th); contiguous runs become one memcpy, and the element
 * sizes get fixed-size copies the compiler turns into plain moves. Offsets
 * are formed only for elements that exist (j < n), so a huge stride over an
 * extent of 1 never forms an out-of-range pointer. */
#define RS_COPY_EACH(size)                                                                         \
    for (int64_t j = 0; j < n; j++)                                                                \
    memcpy(out + (size_t)(j * os) * es, in + (size_t)(j * is) * es, size)

static void copy_run(uint8_t *out, int64_t os, const uint8_t *in, int64_t is, int64_t n,
                     uint32_t es)
{
    if (os == 1 && is == 1) {
        memcpy(out, in, (size_t)n * es);
        return;
    }
    switch (es) {
    case 2:
        RS_COPY_EACH(2);
        break;
    case 4:
        RS_COPY_EACH(4);
        break;
    case 8:
        RS_COPY_EACH(8);
        break;
    default:
        RS_COPY_EACH(es);
    }
}

/* Walk the rows of a span. Packing reads the strided buffer @p in and writes
 * the contiguous @p out; unpacking reads the contiguous @p in and writes the
 * strided @p out. */
static void walk_span(const reshard_span_t *s, const uint8_t *in, uint8_t *out, bool packing)
{
    const reshard_box_t *b = s->box;
    int last = b->ndim - 1;
    int64_t idx[RESHARD_MAX_DIMS], rem = s->first;
    /* multi-index of element `first` in row-major order of the box */
    for (int d = last; d >= 0; d--) {
        idx[d] = b->offset[d] + rem % b->extent[d];
        rem /= b->extent[d];
    }
    int64_t left = s->count;
    size_t es = s->elem_size, contig = 0;
    int64_t pos = rs_frag_pos(s->frag, idx); /* element position, updated row by row */
    const int64_t *stride = s->frag->stride;
    while (left > 0) {
        int64_t run = b->offset[last] + b->extent[last] - idx[last];
        if (run > left)
            run = left;
        if (packing)
            copy_run(out + contig, 1, in + (size_t)pos * es, stride[last], run, s->elem_size);
        else
            copy_run(out + (size_t)pos * es, stride[last], in + contig, 1, run, s->elem_size);
        contig += (size_t)run * es;
        left -= run;
        if (left <= 0)
            break;
        /* next row: rewind the last dim, then count the outer dims like an odometer */
        pos -= (idx[last] - b->offset[last]) * stride[last];
        idx[last] = b->offset[last];
        for (int d = last - 1; d >= 0; d--) {
            if (++idx[d] < b->offset[d] + b->extent[d]) {
                pos += stride[d];
                break;
            }
            pos -= (b->extent[d] - 1) * stride[d];
            idx[d] = b->offset[d];
        }
    }
}

void rs_pack_cpu(void *out, const void *buf, const reshard_span_t *span)
{
    walk_span(span, buf, out, true);
}

void rs_unpack_cpu(void *buf, const void *in, const reshard_span_t *span)
{
    walk_span(span, in, buf, false);
}

void rs_copy_box_cpu(void *dst, const reshard_fragment_t *dst_frag, const void *src,
                     const reshard_fragment_t *src_frag, const reshard_box_t *box,
                     uint32_t elem_size)
{
    int last = box->ndim - 1;
    int64_t idx[RESHARD_MAX_DIMS];
    memcpy(idx, box->offset, sizeof idx);
    int64_t ds = dst_frag->stride[last], ss = src_frag->stride[last], n = box->extent[last];
    do {
        uint8_t *o = (uint8_t *)dst + (size_t)rs_frag_pos(dst_frag, idx) * elem_size;
        const uint8_t *i = (const uint8_t *)src + (size_t)rs_frag_pos(src_frag, idx) * elem_size;
        copy_run(o, ds, i, ss, n, elem_size);
    } while (rs_box_next_row(box, idx));
}
