/* Validation of a layout pair before planning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_steps.h"
#include "util/error.h"

/* What a layout's scope is, for messages: "rank R's own plan (domain ranks [lo, hi))". */
static const char *scope_str(const reshard_layout_t *l, char *buf, size_t size)
{
    const rs_layout_origin_t *o = &l->origin;
    if (!o->holders)
        snprintf(buf, size, "every rank's plan (whole)");
    else
        snprintf(buf, size, "rank %d's own plan (domain ranks [%d, %d))", o->rank, o->lo, o->hi);
    return buf;
}

reshard_status_t rs_validate_scope(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                   const reshard_layout_t *dst)
{
    const rs_layout_origin_t *os = &src->origin, *od = &dst->origin;
    if (!os->holders && !od->holders)
        return RESHARD_OK;
    char a[96], b[96];
    const reshard_layout_t *ls[2] = {src, dst};
    const char *side[2] = {"source", "destination"};
    for (int k = 0; k < 2; k++)
        if (ls[k]->origin.holders && !rs_origin_of(ls[k]))
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "the %s layout was built for %s and changed since (%lld fragments, "
                            "%lld buffers and %d tensors then, %lld, %lld and %d now): it "
                            "leaves out other tensors, so build the whole layout to change it",
                            side[k], scope_str(ls[k], a, sizeof a), (long long)ls[k]->origin.n,
                            (long long)ls[k]->origin.ndecls, ls[k]->origin.ntensors,
                            (long long)ls[k]->n, (long long)ls[k]->decls.n, ls[k]->tensors->n);
    if (!os->holders || !od->holders || os->rank != od->rank || os->lo != od->lo ||
        os->hi != od->hi || os->world != od->world)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "the source layout was built for %s, the destination layout for %s: "
                        "both must be one rank's scoped layouts, or both whole",
                        scope_str(src, a, sizeof a), scope_str(dst, b, sizeof b));
    if (os->side != 0 || od->side != 1)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "layouts scoped to %s: the source is the build's %s side and the "
                        "destination its %s side; a scoped build plans from training to "
                        "inference",
                        scope_str(src, a, sizeof a), os->side ? "inference" : "training",
                        od->side ? "inference" : "training");
    if (os->pair != od->pair)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "layouts scoped to %s come from two different builds "
                        "(reshard_model_refit_create_scoped): a scoped layout leaves out what "
                        "its own build's other side does not need, so both must be one "
                        "build's",
                        scope_str(src, a, sizeof a));
    if (p->my_rank == RESHARD_ALL_RANKS)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "the layouts were built for %s: a global plan (my_rank "
                        "RESHARD_ALL_RANKS) needs the whole layouts",
                        scope_str(src, a, sizeof a));
    if (p->my_rank != os->rank)
        return rs_error(RESHARD_ERR_INVALID_ARG, "the layouts were built for %s, not for rank %d's",
                        scope_str(src, a, sizeof a), p->my_rank);
    if (p->world_size < os->world)
        return rs_error(RESHARD_ERR_RANK,
                        "the layouts were built for %s on %d ranks; world size %d is smaller",
                        scope_str(src, a, sizeof a), os->world, p->world_size);
    int32_t d = rs_domain_of(p, p->my_rank), lo = p->my_rank, hi = lo + 1;
    if (p->domain_size > 1) {
        lo = d * p->domain_size;
        hi = lo + rs_domain_ranks(p, d);
    }
    if (hi > os->world) /* ranks past the layouts' world hold nothing: the same scope */
        hi = os->world;
    if (lo != os->lo || hi != os->hi)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "the layouts were built for %s, but domain size %d puts rank %d in "
                        "domain ranks [%d, %d): build them with the plan's domain size",
                        scope_str(src, a, sizeof a), p->domain_size, p->my_rank, lo, hi);
    return RESHARD_OK;
}

reshard_status_t rs_check_catalogues(const reshard_tensors_t *a, const reshard_tensors_t *b)
{
    if (a == b)
        return RESHARD_OK;
    if (a->n != b->n)
        return rs_error(RESHARD_ERR_SHAPE, "source has %d logical tensors, destination %d", a->n,
                        b->n);
    for (int32_t i = 0; i < a->n; i++) {
        const rs_tensor_t *x = &a->t[i], *y = &b->t[i];
        if (strcmp(x->name, y->name) != 0)
            return rs_error(RESHARD_ERR_SHAPE,
                            "tensor %d is %s in the source, %s in the destination", i, x->name,
                            y->name);
        if (x->dtype != y->dtype)
            return rs_error(RESHARD_ERR_DTYPE,
                            "tensor %s: dtype %s in the source, %s in the destination", x->name,
                            reshard_dtype_name(x->dtype), reshard_dtype_name(y->dtype));
        if (x->vndim != y->vndim || memcmp(x->vshape, y->vshape, sizeof x->vshape) != 0 ||
            x->numel != y->numel)
            return rs_error(RESHARD_ERR_SHAPE, "tensor %s: shapes differ between the two sides",
                            x->name);
        if (memcmp(&x->quant, &y->quant, sizeof x->quant) != 0)
            return rs_error(RESHARD_ERR_DTYPE,
                            "tensor %s: quantized destination forms differ between the two "
                            "catalogues",
                            x->name);
    }
    return RESHARD_OK;
}

reshard_status_t rs_check_ranks(const reshard_layout_t *l, int32_t world, const char *side)
{
    rs_layout_facts_t k;
    rs_layout_facts_of(l, &k);
    for (int64_t i = 0; k.max_rank >= world && i < l->n; i++) {
        const reshard_fragment_t *f = &l->f[i];
        if (f->rank >= world) {
            char bs[256];
            return rs_error(RESHARD_ERR_RANK,
                            "tensor %s, rank %d, box %s: %s rank not below world size %d",
                            l->tensors->t[f->tensor].name, f->rank,
                            rs_box_str(&f->box, bs, sizeof bs), side, world);
        }
    }
    return RESHARD_OK;
}

/* Every fragment in a declared buffer lies inside its bytes and has its dtype. */
static reshard_status_t check_declared(const reshard_layout_t *l, const rs_layout_facts_t *facts,
                                       const char *side)
{
    int64_t pos = 0;
    for (int64_t i = 0; facts->unfit > 0 && l->decls.n > 0 && i < l->n; i++) {
        const reshard_fragment_t *f = &l->f[i];
        const rs_decl_t *b = rs_decl_find_near(&l->decls, f->rank, f->buffer, &pos);
        if (!b || rs_fragment_fits(l, f, b))
            continue;
        const rs_tensor_t *t = &l->tensors->t[f->tensor];
        char bs[256];
        if (b->zero)
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "tensor %s, rank %d, box %s: %s buffer %d (%s) is declared zero-filled "
                            "(reshard_layout_zero_buffer): no fragment may lie in it",
                            t->name, f->rank, rs_box_str(&f->box, bs, sizeof bs), side, f->buffer,
                            b->name);
        if (t->dtype != b->dtype)
            return rs_error(RESHARD_ERR_DTYPE,
                            "tensor %s (%s), rank %d, box %s: %s buffer %d (%s) is declared %s",
                            t->name, reshard_dtype_name(t->dtype), f->rank,
                            rs_box_str(&f->box, bs, sizeof bs), side, f->buffer, b->name,
                            reshard_dtype_name(b->dtype));
        uint64_t end = rs_fragment_end_bytes(l, f);
        if (end > b->bytes)
            return rs_error(RESHARD_ERR_BUFFER,
                            "tensor %s, rank %d, box %s: needs %llu bytes of %s buffer %d (%s), "
                            "declared %llu bytes",
                            t->name, f->rank, rs_box_str(&f->box, bs, sizeof bs),
                            (unsigned long long)end, side, f->buffer, b->name,
                            (unsigned long long)b->bytes);
    }
    return RESHARD_OK;
}

typedef struct {
    int32_t rank, buffer;
    uint64_t lo, hi; /* byte range [lo, hi) that bounds the fragment */
    int64_t frag;
} rs_extent_t;

static int cmp_extent(const void *pa, const void *pb)
{
    const rs_extent_t *a = pa, *b = pb;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->buffer != b->buffer)
        return a->buffer < b->buffer ? -1 : 1;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    return a->frag < b->frag ? -1 : a->frag > b->frag;
}

/* Mark the bytes of fragment @p f within [span_lo, ...) in @p bits; true on a byte marked twice. */
static bool mark_fragment(const reshard_layout_t *l, const reshard_fragment_t *f, uint64_t span_lo,
                          uint8_t *bits)
{
    size_t es = reshard_dtype_size(l->tensors->t[f->tensor].dtype);
    int last = f->box.ndim - 1;
    int64_t idx[RESHARD_MAX_DIMS];
    memcpy(idx, f->box.offset, sizeof idx);
    do {
        int64_t pos = rs_frag_pos(f, idx);
        for (int64_t j = 0; j < f->box.extent[last]; j++) {
            uint64_t b0 = (uint64_t)(pos + j * f->stride[last]) * es - span_lo;
            for (uint64_t b = b0; b < b0 + es; b++) {
                if (bits[b >> 3] & (1u << (b & 7)))
                    return true;
                bits[b >> 3] |= (uint8_t)(1u << (b & 7));
            }
        }
    } while (rs_box_next_row(&f->box, idx));
    return false;
}

/* Report that fragment @p f shares bytes with another fragment of its side,
 * or, when @p self, that its strides make two of its own elements share one. */
static reshard_status_t overlap_error(const reshard_layout_t *l, const reshard_fragment_t *f,
                                      const char *side, bool self)
{
    char bs[256];
    if (self)
        return rs_error(RESHARD_ERR_OVERLAP,
                        "tensor %s, rank %d, box %s: the %s fragment overlaps itself in buffer "
                        "%d (its strides make two of its elements share a position)",
                        l->tensors->t[f->tensor].name, f->rank, rs_box_str(&f->box, bs, sizeof bs),
                        side, f->buffer);
    return rs_error(RESHARD_ERR_OVERLAP,
                    "tensor %s, rank %d, box %s: %s bytes in buffer %d are also "
                    "written by another %s fragment",
                    l->tensors->t[f->tensor].name, f->rank, rs_box_str(&f->box, bs, sizeof bs),
                    side, f->buffer, side);
}

/* Exact check by bitmap over [lo, hi): one bit per byte, every element marked. */
static reshard_status_t check_group_bitmap(const reshard_layout_t *l, const rs_extent_t *e,
                                           int64_t n, uint64_t lo, uint64_t hi, const char *side)
{
    uint8_t *bits = calloc((size_t)((hi - lo + 7) / 8), 1);
    if (!bits)
        return rs_error(RESHARD_ERR_NOMEM, "overlap check: out of memory on rank %d", e->rank);
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; i < n && st == RESHARD_OK; i++)
        if (mark_fragment(l, &l->f[e[i].frag], lo, bits))
            st = overlap_error(l, &l->f[e[i].frag], side, n == 1);
    free(bits);
    return st;
}

/* Runs above this many in one group fall back to the bitmap. */
#define RS_MAX_CHECK_RUNS (1 << 23)

/* Exact check of a group of fragments whose byte bounds overlap: sort their
 * contiguous runs and look for a run that starts before the previous ends. */
static reshard_status_t check_group(const reshard_layout_t *l, const rs_extent_t *e, int64_t n,
                                    uint64_t lo, uint64_t hi, const char *side)
{
    int64_t total = 0;
    for (int64_t i = 0; i < n && total <= RS_MAX_CHECK_RUNS; i++) {
        rs_runs_t r;
        rs_fragment_runs(l, &l->f[e[i].frag], &r);
        total += r.runs;
    }
    if (total > RS_MAX_CHECK_RUNS || total > (int64_t)((hi - lo) / 64))
        return check_group_bitmap(l, e, n, lo, hi, side);
    rs_run_t *runs = malloc((size_t)total * sizeof *runs);
    if (!runs)
        return rs_error(RESHARD_ERR_NOMEM, "overlap check: out of memory on rank %d", e->rank);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += rs_fragment_run_list(l, &l->f[e[i].frag], e[i].frag, runs + k);
    rs_run_sort(runs, k);
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 1; i < k && st == RESHARD_OK; i++)
        if (runs[i].lo < runs[i - 1].hi)
            st = overlap_error(l, &l->f[runs[i].frag], side, runs[i].frag == runs[i - 1].frag);
    free(runs);
    return st;
}

/* No fragment of @p l, on any rank, has strides that make two of its
 * elements share a position: checked exactly where the cheap sufficient
 * condition does not hold. */
static reshard_status_t check_self_overlap(const reshard_layout_t *l,
                                           const rs_layout_facts_t *facts, const char *side)
{
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; facts->strided > 0 && i < l->n && st == RESHARD_OK; i++) {
        const reshard_fragment_t *f = &l->f[i];
        if (rs_strides_injective(f))
            continue;
        size_t es = reshard_dtype_size(l->tensors->t[f->tensor].dtype);
        rs_extent_t e = {f->rank, f->buffer, (uint64_t)f->base * es, rs_fragment_end_bytes(l, f),
                         i};
        st = check_group(l, &e, 1, e.lo, e.hi, side);
    }
    return st;
}

/* No two destination fragments share buffer bytes, on rank @p rank
 * (RESHARD_ALL_RANKS: on every rank); each fragment alone is already known
 * not to overlap itself. */
static reshard_status_t check_dst_overlap(const reshard_layout_t *l, int32_t rank)
{
    rs_extent_t *e = malloc((size_t)(l->n ? l->n : 1) * sizeof *e);
    if (!e)
        return rs_error(RESHARD_ERR_NOMEM, "overlap check: out of memory");
    int64_t n = 0;
    for (int64_t i = 0; i < l->n; i++) {
        const reshard_fragment_t *f = &l->f[i];
        if (rank != RESHARD_ALL_RANKS && f->rank != rank)
            continue;
        size_t es = reshard_dtype_size(l->tensors->t[f->tensor].dtype);
        e[n++] = (rs_extent_t){f->rank, f->buffer, (uint64_t)f->base * es,
                               rs_fragment_end_bytes(l, f), i};
    }
    qsort(e, (size_t)n, sizeof *e, cmp_extent);
    reshard_status_t st = RESHARD_OK;
    for (int64_t i = 0; i < n && st == RESHARD_OK;) {
        /* A group: consecutive fragments of one buffer with overlapping bounds. */
        int64_t j = i + 1;
        uint64_t hi = e[i].hi;
        while (j < n && e[j].rank == e[i].rank && e[j].buffer == e[i].buffer && e[j].lo < hi) {
            if (e[j].hi > hi)
                hi = e[j].hi;
            j++;
        }
        if (j > i + 1)
            st = check_group(l, &e[i], j - i, e[i].lo, hi, "destination");
        i = j;
    }
    free(e);
    return st;
}

reshard_status_t rs_validate(const reshard_layout_t *src, const reshard_layout_t *dst,
                             int32_t world, int32_t rank)
{
    /* what every fragment alone must satisfy, as the layouts kept it while
     * fragments were added: a whole pass only over a layout that breaks it */
    rs_layout_facts_t fs, fd;
    rs_layout_facts_of(src, &fs);
    rs_layout_facts_of(dst, &fd);
    reshard_status_t st = rs_check_catalogues(src->tensors, dst->tensors);
    if (st == RESHARD_OK)
        st = rs_check_ranks(src, world, "source");
    if (st == RESHARD_OK)
        st = rs_check_ranks(dst, world, "destination");
    if (st == RESHARD_OK)
        st = check_declared(src, &fs, "source");
    if (st == RESHARD_OK)
        st = check_declared(dst, &fd, "destination");
    if (st == RESHARD_OK)
        st = check_self_overlap(src, &fs, "source");
    if (st == RESHARD_OK)
        st = check_self_overlap(dst, &fd, "destination");
    if (st == RESHARD_OK)
        st = check_dst_overlap(dst, rank);
    return st;
}
