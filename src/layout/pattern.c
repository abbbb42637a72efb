/* The verification pattern: value = mix(tensor id, global flat index). */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "util/error.h"

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t rs_pattern_value(int32_t tensor, int64_t flat)
{
    return splitmix64(splitmix64((uint64_t)(uint32_t)tensor) + (uint64_t)flat);
}

/* Check that every fragment of @p rank has its buffer bound and large enough. */
static reshard_status_t check_bufs(const reshard_layout_t *layout, int32_t rank,
                                   const reshard_buffer_t *bufs, int32_t n_bufs)
{
    for (int64_t i = 0; i < layout->n; i++) {
        const reshard_fragment_t *f = &layout->f[i];
        if (f->rank != rank)
            continue;
        uint64_t need = rs_fragment_end_bytes(layout, f);
        if (f->buffer >= n_bufs || !bufs[f->buffer].ptr || bufs[f->buffer].bytes < need) {
            char bs[256];
            return rs_error(RESHARD_ERR_BUFFER,
                            "tensor %s, rank %d, box %s: buffer %d missing or under %llu bytes",
                            layout->tensors->t[f->tensor].name, rank,
                            rs_box_str(&f->box, bs, sizeof bs), f->buffer,
                            (unsigned long long)need);
        }
    }
    return RESHARD_OK;
}

/* Walk every element of fragment @p f: fill (check == NULL) or count mismatches. */
static int64_t walk_fragment(const reshard_layout_t *layout, const reshard_fragment_t *f,
                             uint8_t *buf, int64_t *first_bad_flat, uint8_t *covered)
{
    const rs_tensor_t *t = &layout->tensors->t[f->tensor];
    size_t es = reshard_dtype_size(t->dtype);
    int last = f->box.ndim - 1;
    int64_t idx[RESHARD_MAX_DIMS], bad = 0;
    memcpy(idx, f->box.offset, sizeof idx);
    do {
        int64_t flat = rs_flat_index(t->vndim, t->vshape, idx);
        int64_t pos = rs_frag_pos(f, idx);
        for (int64_t j = 0; j < f->box.extent[last]; j++) {
            uint64_t v = rs_pattern_value(f->tensor, flat + j);
            uint8_t *p = buf + (size_t)(pos + j * f->stride[last]) * es;
            if (!first_bad_flat) {
                memcpy(p, &v, es);
                continue;
            }
            if (memcmp(p, &v, es) != 0 && bad++ == 0)
                *first_bad_flat = flat + j;
            if (covered) {
                size_t b0 = (size_t)(pos + j * f->stride[last]) * es;
                for (size_t b = b0; b < b0 + es; b++)
                    covered[b >> 3] |= (uint8_t)(1u << (b & 7));
            }
        }
    } while (rs_box_next_row(&f->box, idx));
    return bad;
}

reshard_status_t reshard_fill_pattern(const reshard_layout_t *layout, int32_t rank,
                                      const reshard_buffer_t *bufs, int32_t n_bufs)
{
    rs_error_clear();
    if (!layout || (n_bufs > 0 && !bufs) || n_bufs < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_fill_pattern: bad argument");
    reshard_status_t st = check_bufs(layout, rank, bufs, n_bufs);
    if (st != RESHARD_OK)
        return st;
    for (int64_t i = 0; i < layout->n; i++)
        if (layout->f[i].rank == rank)
            walk_fragment(layout, &layout->f[i], bufs[layout->f[i].buffer].ptr, NULL, NULL);
    return RESHARD_OK;
}

reshard_status_t reshard_verify_pattern(const reshard_layout_t *layout, int32_t rank,
                                        const reshard_buffer_t *bufs, int32_t n_bufs,
                                        uint64_t *verified_bytes)
{
    rs_error_clear();
    if (!layout || (n_bufs > 0 && !bufs) || n_bufs < 0)
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_verify_pattern: bad argument");
    reshard_status_t st = check_bufs(layout, rank, bufs, n_bufs);
    if (st != RESHARD_OK)
        return st;
    uint64_t checked = 0;
    for (int32_t b = 0; b < n_bufs; b++) {
        uint64_t size = reshard_layout_buffer_bytes(layout, rank, b);
        if (size == 0)
            continue;
        uint8_t *covered = calloc((size_t)(size + 7) / 8, 1);
        if (!covered)
            return rs_error(RESHARD_ERR_NOMEM, "verify: out of memory for rank %d buffer %d", rank,
                            b);
        uint8_t *buf = bufs[b].ptr;
        for (int64_t i = 0; i < layout->n && st == RESHARD_OK; i++) {
            const reshard_fragment_t *f = &layout->f[i];
            if (f->rank != rank || f->buffer != b)
                continue;
            int64_t first_bad = -1;
            int64_t bad = walk_fragment(layout, f, buf, &first_bad, covered);
            const rs_tensor_t *t = &layout->tensors->t[f->tensor];
            if (bad) {
                char bs[256];
                st = rs_error(RESHARD_ERR_VERIFY,
                              "tensor %s, rank %d, box %s: %lld wrong elements, first at flat "
                              "index %lld",
                              t->name, rank, rs_box_str(&f->box, bs, sizeof bs), (long long)bad,
                              (long long)first_bad);
            }
            checked += (uint64_t)rs_box_numel(&f->box) * reshard_dtype_size(t->dtype);
        }
        for (uint64_t x = 0; x < size && st == RESHARD_OK; x++)
            if (!(covered[x >> 3] & (1u << (x & 7))) && buf[x] != RESHARD_SENTINEL_BYTE)
                st = rs_error(RESHARD_ERR_VERIFY,
                              "rank %d, buffer %d: byte %llu belongs to no fragment (padding) "
                              "but was written",
                              rank, b, (unsigned long long)x);
        free(covered);
        if (st != RESHARD_OK)
            return st;
    }
    if (verified_bytes)
        *verified_bytes = checked;
    return RESHARD_OK;
}
