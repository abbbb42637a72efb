/* Host side of the strided box copies: merging dims, tiling, CPU emulation. No CUDA
 * calls here, so the tests can run all of it on a machine without a GPU. */
#include "transport/nccl/box_copy.h"

#include <inttypes.h>

#include "util/error.h"

void rs_box_packed_strides(int ndim, const int64_t *ext, int64_t *strides)
{
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= ext[k];
    }
}

reshard_status_t rs_box_copy_init(rs_box_copy_t *d, int ndim, const int64_t *ext,
                                  const int64_t *sstr, int64_t sbase, const int64_t *dstr,
                                  int64_t dbase, int64_t first, int64_t count, uint32_t elem_size,
                                  const void *dst, const void *src)
{
    if (d == NULL || ndim < 1 || ndim > RESHARD_MAX_DIMS || elem_size == 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "box copy: bad ndim %d or element size %u", ndim,
                        elem_size);
    memset(d, 0, sizeof *d);
    int64_t numel = 1;
    for (int k = 0; k < ndim; k++) {
        if (ext[k] < 1 || sstr[k] < 0 || dstr[k] < 0)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "box copy: dim %d has extent %" PRId64 ", strides %" PRId64
                            " / %" PRId64,
                            k, ext[k], sstr[k], dstr[k]);
        if (__builtin_mul_overflow(numel, ext[k], &numel))
            return rs_error(RESHARD_ERR_OVERFLOW, "box copy: element count overflows");
    }
    if (first < 0 || count < 0 || first > numel - count)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "box copy: range [%" PRId64 ", +%" PRId64 ") outside a box of %" PRId64
                        " elements",
                        first, count, numel);

    /* Merge dim k into the previous kept dim when both sides are contiguous across the
     * pair (stride[prev] == stride[k] * ext[k]); the row-major linear index and every
     * position are unchanged. Extent-1 dims contribute nothing and are dropped. */
    int n = 0;
    for (int k = 0; k < ndim; k++) {
        if (ext[k] == 1)
            continue;
        int64_t ms, md;
        if (n > 0 && !__builtin_mul_overflow(sstr[k], ext[k], &ms) &&
            !__builtin_mul_overflow(dstr[k], ext[k], &md) && d->sstr[n - 1] == ms &&
            d->dstr[n - 1] == md) {
            d->ext[n - 1] *= ext[k];
            d->sstr[n - 1] = sstr[k];
            d->dstr[n - 1] = dstr[k];
        } else {
            d->ext[n] = ext[k];
            d->sstr[n] = sstr[k];
            d->dstr[n] = dstr[k];
            n++;
        }
    }
    if (n == 0) { /* a single element */
        d->ext[0] = 1;
        d->sstr[0] = 1;
        d->dstr[0] = 1;
        n = 1;
    }
    d->nd = n;
    d->elem_size = elem_size;
    d->contiguous = d->sstr[n - 1] == 1 && d->dstr[n - 1] == 1;
    d->aligned = (uintptr_t)dst % elem_size == 0 && (uintptr_t)src % elem_size == 0;
    d->sbase = sbase;
    d->dbase = dbase;
    d->first = first;
    d->count = count;

    const int64_t len = d->ext[n - 1];
    int64_t tile = RS_BOX_TILE_BYTES / (int64_t)elem_size;
    if (tile < 1)
        tile = 1;
    if (tile > len)
        tile = len;
    d->tile = tile;
    d->tiles_per_row = (len + tile - 1) / tile;
    if (count == 0) {
        d->row0 = 0;
        d->units = 0;
        return RESHARD_OK;
    }
    d->row0 = first / len;
    const int64_t row_last = (first + count - 1) / len;
    d->units = (row_last - d->row0 + 1) * d->tiles_per_row;
    return RESHARD_OK;
}

int rs_box_copy_threads(const rs_box_copy_t *d)
{
    /* One unit is at most `tile` elements of a row. Contiguous rows: a thread moves 64
     * bytes per step (four 16-byte vectors); strided rows: one element per step. */
    const int64_t len = d->ext[d->nd - 1];
    const int64_t elems = len < d->tile ? len : d->tile;
    const int64_t want = d->contiguous ? (elems * (int64_t)d->elem_size + 63) / 64 : elems;
    int threads = 32;
    while (threads < 256 && threads < want)
        threads *= 2;
    return threads;
}

int64_t rs_box_copy_blocks(const rs_box_copy_t *d)
{
    return d->units < RS_BOX_COPY_MAX_BLOCKS ? d->units : RS_BOX_COPY_MAX_BLOCKS;
}

void rs_box_copy_emulate_grid(const rs_box_copy_t *d, void *dst, const void *src, int nthr,
                              int64_t blocks)
{
    for (int64_t b = 0; b < blocks; b++)
        for (int64_t u = b; u < d->units; u += blocks) /* the kernel's grid-stride loop */
            for (int tid = 0; tid < nthr; tid++)
                rs_box_copy_unit(d, (char *)dst, (const char *)src, u, tid, nthr);
}

void rs_box_copy_emulate(const rs_box_copy_t *d, void *dst, const void *src, int nthr)
{
    rs_box_copy_emulate_grid(d, dst, src, nthr, rs_box_copy_blocks(d));
}

/* Element position, in @p f's buffer, of global view point @p idx. */
static int64_t frag_pos(const reshard_fragment_t *f, const int64_t *idx)
{
    int64_t p = f->base;
    for (int k = 0; k < f->box.ndim; k++)
        p += (idx[k] - f->box.offset[k]) * f->stride[k];
    return p;
}

static reshard_status_t check_inside(const reshard_fragment_t *f, const reshard_box_t *box)
{
    if (f == NULL || box == NULL || f->box.ndim != box->ndim || box->ndim < 1 ||
        box->ndim > RESHARD_MAX_DIMS)
        return rs_error(RESHARD_ERR_INVALID_ARG, "box copy: fragment and box disagree on ndim");
    for (int k = 0; k < box->ndim; k++)
        if (box->offset[k] < f->box.offset[k] ||
            box->offset[k] + box->extent[k] > f->box.offset[k] + f->box.extent[k]) {
            char a[256], b[256];
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "box copy: box %s is not inside tensor %d's fragment %s on rank %d",
                            rs_box_str(box, a, sizeof a), f->tensor,
                            rs_box_str(&f->box, b, sizeof b), f->rank);
        }
    return RESHARD_OK;
}

reshard_status_t rs_box_copy_for_pack(rs_box_copy_t *d, const reshard_span_t *span, void *out,
                                      const void *buf)
{
    if (span == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "pack: NULL span");
    reshard_status_t st = check_inside(span->frag, span->box);
    if (st != RESHARD_OK)
        return st;
    int64_t packed[RESHARD_MAX_DIMS];
    rs_box_packed_strides(span->box->ndim, span->box->extent, packed);
    return rs_box_copy_init(d, span->box->ndim, span->box->extent, span->frag->stride,
                            frag_pos(span->frag, span->box->offset), packed, -span->first,
                            span->first, span->count, span->elem_size, out, buf);
}

reshard_status_t rs_box_copy_for_unpack(rs_box_copy_t *d, const reshard_span_t *span, void *buf,
                                        const void *in)
{
    if (span == NULL)
        return rs_error(RESHARD_ERR_INVALID_ARG, "unpack: NULL span");
    reshard_status_t st = check_inside(span->frag, span->box);
    if (st != RESHARD_OK)
        return st;
    int64_t packed[RESHARD_MAX_DIMS];
    rs_box_packed_strides(span->box->ndim, span->box->extent, packed);
    return rs_box_copy_init(d, span->box->ndim, span->box->extent, packed, -span->first,
                            span->frag->stride, frag_pos(span->frag, span->box->offset),
                            span->first, span->count, span->elem_size, buf, in);
}

reshard_status_t rs_box_copy_for_local(rs_box_copy_t *d, void *dst,
                                       const reshard_fragment_t *dst_frag, const void *src,
                                       const reshard_fragment_t *src_frag, const reshard_box_t *box,
                                       uint32_t elem_size)
{
    reshard_status_t st = check_inside(dst_frag, box);
    if (st == RESHARD_OK)
        st = check_inside(src_frag, box);
    if (st != RESHARD_OK)
        return st;
    int64_t numel = 1;
    for (int k = 0; k < box->ndim; k++)
        numel *= box->extent[k];
    return rs_box_copy_init(d, box->ndim, box->extent, src_frag->stride,
                            frag_pos(src_frag, box->offset), dst_frag->stride,
                            frag_pos(dst_frag, box->offset), 0, numel, elem_size, dst, src);
}
