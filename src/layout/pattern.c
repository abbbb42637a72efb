/* The verification pattern: value = mix(tensor id, global flat index). */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "reshard/reshard_delta.h"
#include "util/error.h"

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Per-tensor seed, then one multiply and a fold per element: the value of
 * consecutive elements differs in every byte, and a folded product makes
 * even the low byte depend on all bits of the index. */
static inline uint64_t pattern_mix(uint64_t seed, int64_t flat)
{
    uint64_t x = (seed + (uint64_t)flat) * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 32);
}

uint64_t rs_pattern_value(int32_t tensor, int64_t flat)
{
    return pattern_mix(splitmix64((uint64_t)(uint32_t)tensor), flat);
}

/* Synthetic updates (reshard_delta.h): the value of an element at @p version is the
 * pattern mixed with the last version <= @p version that changed it (0: none). Version j
 * changes an element when a hash of (tensor seed, j, flat index) is below @p thr (all
 * elements when @p all). */
typedef struct {
    int64_t version;
    uint64_t thr;
    bool all;
} rs_pattern_version_t;

static inline uint64_t versioned_value(uint64_t seed, int64_t flat, const rs_pattern_version_t *pv)
{
    for (int64_t j = pv->version; j >= 1; j--) {
        uint64_t sj = splitmix64(seed + (uint64_t)j * 0xd1b54a32d192ed03ull);
        if (pv->all || splitmix64(sj ^ (uint64_t)flat) < pv->thr)
            return pattern_mix(sj, flat);
    }
    return pattern_mix(seed, flat);
}

/* Little-endian load/store of the low @p es bytes of an element (es 1, 2, 4
 * or 8, fixed-size copies so the compiler emits plain moves). */
static inline uint64_t load_elem(const uint8_t *p, size_t es)
{
    uint8_t b1;
    uint16_t b2;
    uint32_t b4;
    uint64_t b8;
    switch (es) {
    case 1:
        memcpy(&b1, p, 1);
        return b1;
    case 2:
        memcpy(&b2, p, 2);
        return b2;
    case 4:
        memcpy(&b4, p, 4);
        return b4;
    default:
        memcpy(&b8, p, 8);
        return b8;
    }
}

static inline void store_elem(uint8_t *p, uint64_t v, size_t es)
{
    uint8_t b1 = (uint8_t)v;
    uint16_t b2 = (uint16_t)v;
    uint32_t b4 = (uint32_t)v;
    switch (es) {
    case 1:
        memcpy(p, &b1, 1);
        break;
    case 2:
        memcpy(p, &b2, 2);
        break;
    case 4:
        memcpy(p, &b4, 4);
        break;
    default:
        memcpy(p, &v, 8);
    }
}

/* Fill fragment @p f with the pattern (@p check false) or count the elements
 * that differ from it, remembering the first. */
static int64_t walk_fragment(const reshard_layout_t *layout, const reshard_fragment_t *f,
                             uint8_t *buf, bool check, int64_t *first_bad_flat,
                             const rs_pattern_version_t *pv)
{
    const rs_tensor_t *t = &layout->tensors->t[f->tensor];
    size_t es = reshard_dtype_size(t->dtype);
    uint64_t seed = splitmix64((uint64_t)(uint32_t)f->tensor);
    int last = f->box.ndim - 1;
    int64_t idx[RESHARD_MAX_DIMS], bad = 0, step = f->stride[last];
    uint64_t mask = es == 8 ? ~(uint64_t)0 : (((uint64_t)1 << (8 * es)) - 1);
    memcpy(idx, f->box.offset, sizeof idx);
    do {
        int64_t flat = rs_flat_index(t->vndim, t->vshape, idx);
        uint8_t *p = buf + (size_t)rs_frag_pos(f, idx) * es;
        int64_t n = f->box.extent[last];
        if (pv && pv->version > 0) {
            for (int64_t j = 0; j < n; j++, p += (size_t)step * es) {
                uint64_t v = versioned_value(seed, flat + j, pv);
                if (!check)
                    store_elem(p, v, es);
                else if (((load_elem(p, es) ^ v) & mask) != 0 && bad++ == 0)
                    *first_bad_flat = flat + j;
            }
            continue;
        }
        if (!check) {
            for (int64_t j = 0; j < n; j++, p += (size_t)step * es) {
                store_elem(p, pattern_mix(seed, flat + j), es);
            }
            continue;
        }
        for (int64_t j = 0; j < n; j++, p += (size_t)step * es) {
            if (((load_elem(p, es) ^ pattern_mix(seed, flat + j)) & mask) != 0 && bad++ == 0)
                *first_bad_flat = flat + j;
        }
    } while (rs_box_next_row(&f->box, idx));
    return bad;
}

static reshard_status_t fill(const reshard_layout_t *layout, int32_t rank,
                             const reshard_buffer_t *bufs, int32_t n_bufs,
                             const rs_pattern_version_t *pv)
{
    if (!layout || (n_bufs > 0 && !bufs) || n_bufs < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_fill_pattern: bad argument");
    reshard_status_t st = rs_layout_check_buffers(layout, rank, bufs, n_bufs, "pattern");
    if (st != RESHARD_OK)
        return st;
    for (int64_t i = 0; i < layout->n; i++)
        if (layout->f[i].rank == rank)
            walk_fragment(layout, &layout->f[i], bufs[layout->f[i].buffer].ptr, false, NULL, pv);
    return RESHARD_OK;
}

reshard_status_t reshard_fill_pattern(const reshard_layout_t *layout, int32_t rank,
                                      const reshard_buffer_t *bufs, int32_t n_bufs)
{
    rs_error_clear();
    return fill(layout, rank, bufs, n_bufs, NULL);
}

/* The version rule of @p version and @p fraction, or INVALID_ARG naming @p what. */
static reshard_status_t pattern_version(int64_t version, double fraction, rs_pattern_version_t *pv,
                                        const char *what)
{
    if (version < 0 || !(fraction >= 0.0 && fraction <= 1.0))
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "%s: version %lld must be >= 0 and change_fraction %g in [0, 1]", what,
                        (long long)version, fraction);
    pv->version = version;
    pv->all = fraction >= 1.0;
    pv->thr = pv->all ? UINT64_MAX : (uint64_t)(fraction * 18446744073709551616.0);
    return RESHARD_OK;
}

reshard_status_t reshard_fill_pattern_version(const reshard_layout_t *layout, int32_t rank,
                                              const reshard_buffer_t *bufs, int32_t n_bufs,
                                              int64_t version, double change_fraction)
{
    rs_error_clear();
    rs_pattern_version_t pv;
    reshard_status_t st =
        pattern_version(version, change_fraction, &pv, "reshard_fill_pattern_version");
    return st == RESHARD_OK ? fill(layout, rank, bufs, n_bufs, &pv) : st;
}

/* First byte of [lo, hi) of @p buf that is not the sentinel, or hi. */
static uint64_t first_touched(const uint8_t *buf, uint64_t lo, uint64_t hi)
{
    for (uint64_t x = lo; x < hi; x++)
        if (buf[x] != RESHARD_SENTINEL_BYTE)
            return x;
    return hi;
}

/* Every byte of buffer @p b that none of @p rank's fragments covers still
 * holds the sentinel: the runs of the fragments are sorted and the gaps
 * between them (up to the buffer's full size) scanned. */
static reshard_status_t check_padding(const reshard_layout_t *layout, int32_t rank, int32_t b,
                                      const reshard_buffer_t *buf)
{
    int64_t total = 0;
    for (int64_t i = 0; i < layout->n; i++)
        if (layout->f[i].rank == rank && layout->f[i].buffer == b) {
            rs_runs_t r;
            rs_fragment_runs(layout, &layout->f[i], &r);
            total += r.runs;
        }
    rs_run_t *runs = malloc((size_t)(total ? total : 1) * sizeof *runs);
    if (!runs)
        return rs_error(RESHARD_ERR_NOMEM, "verify: out of memory for rank %d buffer %d", rank, b);
    int64_t k = 0;
    for (int64_t i = 0; i < layout->n; i++)
        if (layout->f[i].rank == rank && layout->f[i].buffer == b)
            k += rs_fragment_run_list(layout, &layout->f[i], i, runs + k);
    qsort(runs, (size_t)k, sizeof *runs, rs_run_cmp);
    const uint8_t *p = buf->ptr;
    uint64_t covered_to = 0, bad = buf->bytes;
    for (int64_t i = 0; i <= k && bad == buf->bytes; i++) {
        uint64_t gap_end = i < k ? runs[i].lo : buf->bytes;
        if (gap_end > buf->bytes)
            gap_end = buf->bytes;
        if (gap_end > covered_to)
            bad = first_touched(p, covered_to, gap_end);
        if (bad == gap_end && gap_end < buf->bytes)
            bad = buf->bytes;
        if (i < k && runs[i].hi > covered_to)
            covered_to = runs[i].hi;
    }
    free(runs);
    if (bad < buf->bytes)
        return rs_error(RESHARD_ERR_VERIFY,
                        "rank %d, buffer %d: byte %llu belongs to no fragment (padding) but was "
                        "written",
                        rank, b, (unsigned long long)bad);
    return RESHARD_OK;
}

/* A zero-filled buffer (reshard_layout_zero_buffer): every declared byte is 0. */
static reshard_status_t check_zero(int32_t rank, int32_t b, const rs_decl_t *d,
                                   const reshard_buffer_t *buf)
{
    const uint8_t *p = buf->ptr;
    for (uint64_t x = 0; x < d->bytes; x++)
        if (p[x])
            return rs_error(RESHARD_ERR_VERIFY,
                            "rank %d, buffer %d (%s): byte %llu of a zero-filled buffer is "
                            "0x%02x, not 0",
                            rank, b, d->name, (unsigned long long)x, p[x]);
    return RESHARD_OK;
}

static reshard_status_t verify(const reshard_layout_t *layout, int32_t rank,
                               const reshard_buffer_t *bufs, int32_t n_bufs,
                               uint64_t *verified_bytes, const rs_pattern_version_t *pv)
{
    if (!layout || (n_bufs > 0 && !bufs) || n_bufs < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_verify_pattern: bad argument");
    reshard_status_t st = rs_layout_check_buffers(layout, rank, bufs, n_bufs, "pattern");
    if (st != RESHARD_OK)
        return st;
    uint64_t checked = 0;
    /* quantized destinations: per tensor, the tensor whose scales it holds */
    const reshard_tensors_t *T = layout->tensors;
    int32_t *scale_of = malloc((size_t)(T->n ? T->n : 1) * sizeof *scale_of);
    if (!scale_of)
        return rs_error(RESHARD_ERR_NOMEM, "verify: out of memory");
    for (int32_t i = 0; i < T->n; i++)
        scale_of[i] = -1;
    for (int32_t i = 0; i < T->n; i++)
        if (T->t[i].quant.kind != RESHARD_QUANT_NONE)
            scale_of[T->t[i].quant.scale_tensor] = i;
    for (int64_t i = 0; i < layout->n && st == RESHARD_OK; i++) {
        const reshard_fragment_t *f = &layout->f[i];
        if (f->rank != rank)
            continue;
        const rs_tensor_t *t = &layout->tensors->t[f->tensor];
        int64_t first_bad = -1, bad;
        size_t es = rs_frag_elem_size(layout, f);
        if (pv && pv->version > 0 &&
            (scale_of[f->tensor] >= 0 || t->quant.kind != RESHARD_QUANT_NONE)) {
            st = rs_error(RESHARD_ERR_INVALID_ARG,
                          "tensor %s, rank %d: versions of the pattern are for unquantized "
                          "tensors only",
                          t->name, rank);
            break;
        }
        if (scale_of[f->tensor] >= 0)
            bad = rs_quant_pattern_check(layout, f, bufs[f->buffer].ptr, scale_of[f->tensor], true,
                                         &first_bad);
        else if (t->quant.kind != RESHARD_QUANT_NONE && es == 1)
            bad = rs_quant_pattern_check(layout, f, bufs[f->buffer].ptr, f->tensor, false,
                                         &first_bad);
        else
            bad = walk_fragment(layout, f, bufs[f->buffer].ptr, true, &first_bad, pv);
        if (bad) {
            char bs[256];
            st = rs_error(RESHARD_ERR_VERIFY,
                          "tensor %s, rank %d, box %s: %lld wrong elements, first at flat index "
                          "%lld",
                          t->name, rank, rs_box_str(&f->box, bs, sizeof bs), (long long)bad,
                          (long long)first_bad);
        }
        checked += (uint64_t)rs_box_numel(&f->box) * es;
    }
    free(scale_of);
    for (int32_t b = 0; b < n_bufs && st == RESHARD_OK; b++) {
        const rs_decl_t *d = bufs[b].ptr ? rs_decl_find(&layout->decls, rank, b) : NULL;
        if (d && d->zero)
            st = check_zero(rank, b, d, &bufs[b]);
        else if (bufs[b].ptr)
            st = check_padding(layout, rank, b, &bufs[b]);
    }
    if (st == RESHARD_OK && verified_bytes)
        *verified_bytes = checked;
    return st;
}

reshard_status_t reshard_verify_pattern(const reshard_layout_t *layout, int32_t rank,
                                        const reshard_buffer_t *bufs, int32_t n_bufs,
                                        uint64_t *verified_bytes)
{
    rs_error_clear();
    return verify(layout, rank, bufs, n_bufs, verified_bytes, NULL);
}

reshard_status_t reshard_verify_pattern_version(const reshard_layout_t *layout, int32_t rank,
                                                const reshard_buffer_t *bufs, int32_t n_bufs,
                                                int64_t version, double change_fraction,
                                                uint64_t *verified_bytes)
{
    rs_error_clear();
    rs_pattern_version_t pv;
    reshard_status_t st =
        pattern_version(version, change_fraction, &pv, "reshard_verify_pattern_version");
    return st == RESHARD_OK ? verify(layout, rank, bufs, n_bufs, verified_bytes, &pv) : st;
}
