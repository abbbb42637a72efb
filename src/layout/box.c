/* Boxes: element counts, intersection, containment, positions. */
#include "layout/layout_internal.h"

int64_t rs_box_numel(const reshard_box_t *b)
{
    int64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= b->extent[d] > 0 ? b->extent[d] : 0;
    return n;
}

bool rs_box_intersect(const reshard_box_t *a, const reshard_box_t *b, reshard_box_t *out)
{
    out->ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) {
        int64_t lo = a->offset[d] > b->offset[d] ? a->offset[d] : b->offset[d];
        int64_t ha = a->offset[d] + a->extent[d], hb = b->offset[d] + b->extent[d];
        int64_t hi = ha < hb ? ha : hb;
        if (hi <= lo)
            return false;
        out->offset[d] = lo;
        out->extent[d] = hi - lo;
    }
    return true;
}

bool rs_box_contains(const reshard_box_t *outer, const reshard_box_t *inner)
{
    for (int d = 0; d < outer->ndim; d++)
        if (inner->offset[d] < outer->offset[d] ||
            inner->offset[d] + inner->extent[d] > outer->offset[d] + outer->extent[d])
            return false;
    return true;
}

int64_t rs_flat_index(int ndim, const int64_t *shape, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < ndim; d++)
        f = f * shape[d] + idx[d];
    return f;
}

int64_t rs_frag_pos(const reshard_fragment_t *f, const int64_t *idx)
{
    int64_t p = f->base;
    for (int d = 0; d < f->box.ndim; d++)
        p += (idx[d] - f->box.offset[d]) * f->stride[d];
    return p;
}

bool rs_box_next_row(const reshard_box_t *box, int64_t *idx)
{
    int last = box->ndim - 1;
    idx[last] = box->offset[last];
    for (int d = last - 1; d >= 0; d--) {
        if (++idx[d] < box->offset[d] + box->extent[d])
            return true;
        idx[d] = box->offset[d];
    }
    return false;
}
