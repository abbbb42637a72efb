/*
 * DTensor front end: a mesh of ranks and one placement per mesh dim compiled
 * into fragments. Semantics follow torch.distributed.tensor: Shard(d) is
 * torch.chunk (chunk = ceil(N/k), trailing ranks may be empty), mesh dims
 * apply left to right on the current local extent, _StridedShard(d, sf) takes
 * the i-th torch.chunk of each of sf torch.chunk blocks.
 *
 * Along each tensor dim a rank's local extent is kept as a list of segments
 * (global offset, length) in local order; the fragments are the cartesian
 * product of the segments of all dims.
 */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "util/error.h"

typedef struct {
    int64_t off; /* global offset */
    int64_t len;
} rs_seg_t;

typedef struct {
    rs_seg_t *s;
    int64_t n;
} rs_segs_t;

static int64_t segs_len(const rs_segs_t *g)
{
    int64_t l = 0;
    for (int64_t i = 0; i < g->n; i++)
        l += g->s[i].len;
    return l;
}

/* Append the local range [lo, hi) of @p in (in concatenated local order) to
 * @p out, merging with the last segment when globally contiguous. */
static void segs_take(const rs_segs_t *in, int64_t lo, int64_t hi, rs_segs_t *out)
{
    int64_t pos = 0;
    for (int64_t i = 0; i < in->n && pos < hi; i++) {
        int64_t a = pos, b = pos + in->s[i].len;
        pos = b;
        int64_t l = a > lo ? a : lo, h = b < hi ? b : hi;
        if (h <= l)
            continue;
        int64_t goff = in->s[i].off + (l - a);
        if (out->n && out->s[out->n - 1].off + out->s[out->n - 1].len == goff)
            out->s[out->n - 1].len += h - l;
        else
            out->s[out->n++] = (rs_seg_t){goff, h - l};
    }
}

/* torch.chunk of length @p len into @p k: [lo, hi) of chunk @p i. */
static void chunk_range(int64_t len, int64_t k, int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t c = (len + k - 1) / k;
    int64_t l = i * c, h = (i + 1) * c;
    *lo = l < len ? l : len;
    *hi = h < len ? h : len;
}

/* Apply one placement (mesh dim size k, coordinate i) to the segments of its dim. */
static reshard_status_t apply_placement(rs_segs_t *g, const reshard_placement_t *pl, int64_t k,
                                        int64_t i)
{
    int64_t len = segs_len(g);
    int64_t nblocks = pl->kind == RESHARD_STRIDED_SHARD ? pl->split_factor : 1;
    rs_segs_t out = {malloc((size_t)(g->n * nblocks + 1) * sizeof(rs_seg_t)), 0};
    if (!out.s)
        return RESHARD_ERR_NOMEM;
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t blo, bhi, lo, hi;
        chunk_range(len, nblocks, b, &blo, &bhi);
        chunk_range(bhi - blo, k, i, &lo, &hi);
        segs_take(g, blo + lo, blo + hi, &out);
    }
    free(g->s);
    *g = out;
    return RESHARD_OK;
}

/* Emit the fragments of one rank: cartesian product of per-dim segments. */
static reshard_status_t emit_fragments(reshard_layout_t *layout, int32_t tensor, int32_t rank,
                                       const rs_segs_t *g, int ndim, int32_t buffer, int64_t base)
{
    int64_t len[RESHARD_MAX_DIMS], stride[RESHARD_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        len[d] = segs_len(&g[d]);
        if (len[d] == 0)
            return RESHARD_OK; /* empty shard: no fragment */
    }
    for (int d = ndim - 1; d >= 0; d--)
        stride[d] = d == ndim - 1 ? 1 : stride[d + 1] * len[d + 1];
    int64_t seg[RESHARD_MAX_DIMS] = {0}, lpos[RESHARD_MAX_DIMS] = {0};
    for (;;) {
        reshard_fragment_t f;
        memset(&f, 0, sizeof f);
        f.tensor = tensor;
        f.rank = rank;
        f.buffer = buffer;
        f.base = base;
        f.box.ndim = ndim;
        for (int d = 0; d < ndim; d++) {
            f.box.offset[d] = g[d].s[seg[d]].off;
            f.box.extent[d] = g[d].s[seg[d]].len;
            f.stride[d] = stride[d];
            f.base += lpos[d] * stride[d];
        }
        reshard_status_t st = reshard_layout_add_fragment(layout, &f);
        if (st != RESHARD_OK)
            return st;
        int d = ndim - 1;
        for (; d >= 0; d--) {
            lpos[d] += g[d].s[seg[d]].len;
            if (++seg[d] < g[d].n)
                break;
            seg[d] = 0;
            lpos[d] = 0;
        }
        if (d < 0)
            return RESHARD_OK;
    }
}

reshard_status_t reshard_layout_add_dtensor(reshard_layout_t *layout, int32_t tensor,
                                            const reshard_mesh_t *mesh,
                                            const reshard_placement_t *placements, int32_t buffer,
                                            int64_t base)
{
    rs_error_clear();
    if (!layout || !mesh || !placements || !mesh->ranks)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_layout_add_dtensor: NULL argument");
    if (tensor < 0 || tensor >= layout->tensors->n)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_layout_add_dtensor: no tensor id %d",
                        tensor);
    const rs_tensor_t *t = &layout->tensors->t[tensor];
    if (mesh->ndim < 1 || mesh->ndim > RESHARD_MAX_DIMS)
        return rs_error(RESHARD_ERR_INVALID_ARG, "tensor %s: mesh ndim %d out of range", t->name,
                        mesh->ndim);
    int64_t nranks = 1;
    for (int m = 0; m < mesh->ndim; m++) {
        const reshard_placement_t *pl = &placements[m];
        if (mesh->shape[m] < 1)
            return rs_error(RESHARD_ERR_INVALID_ARG, "tensor %s: mesh dim %d has size %lld",
                            t->name, m, (long long)mesh->shape[m]);
        nranks *= mesh->shape[m];
        if (pl->kind == RESHARD_REPLICATE)
            continue;
        if ((pl->kind != RESHARD_SHARD && pl->kind != RESHARD_STRIDED_SHARD) || pl->dim < 0 ||
            pl->dim >= t->vndim)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "tensor %s: placement %d of mesh dim %d names tensor dim %d of %d",
                            t->name, (int)pl->kind, m, pl->dim, t->vndim);
        if (pl->kind == RESHARD_STRIDED_SHARD && pl->split_factor < 1)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "tensor %s: StridedShard split_factor %d on mesh dim %d is < 1",
                            t->name, pl->split_factor, m);
    }
    for (int64_t a = 0; a < nranks; a++) {
        if (mesh->ranks[a] < 0)
            return rs_error(RESHARD_ERR_RANK, "tensor %s: mesh holds negative rank %d", t->name,
                            mesh->ranks[a]);
        for (int64_t b = a + 1; b < nranks && nranks <= 65536; b++)
            if (mesh->ranks[a] == mesh->ranks[b])
                return rs_error(RESHARD_ERR_INVALID_ARG, "tensor %s: rank %d twice in the mesh",
                                t->name, mesh->ranks[a]);
    }
    reshard_status_t st = RESHARD_OK;
    rs_segs_t g[RESHARD_MAX_DIMS];
    for (int64_t r = 0; r < nranks && st == RESHARD_OK; r++) {
        int64_t coord[RESHARD_MAX_DIMS];
        int64_t rr = r;
        for (int m = mesh->ndim - 1; m >= 0; m--) {
            coord[m] = rr % mesh->shape[m];
            rr /= mesh->shape[m];
        }
        int d = 0;
        for (; d < t->vndim; d++) {
            g[d].s = malloc(sizeof(rs_seg_t));
            if (!g[d].s)
                break;
            g[d].s[0] = (rs_seg_t){0, t->vshape[d]};
            g[d].n = 1;
        }
        if (d < t->vndim)
            st = RESHARD_ERR_NOMEM;
        for (int m = 0; m < mesh->ndim && st == RESHARD_OK; m++)
            if (placements[m].kind != RESHARD_REPLICATE)
                st = apply_placement(&g[placements[m].dim], &placements[m], mesh->shape[m],
                                     coord[m]);
        if (st == RESHARD_OK)
            st = emit_fragments(layout, tensor, mesh->ranks[r], g, t->vndim, buffer, base);
        for (int q = 0; q < d; q++)
            free(g[q].s);
    }
    if (st == RESHARD_ERR_NOMEM)
        return rs_error(st, "tensor %s: out of memory compiling the mesh", t->name);
    return st;
}
