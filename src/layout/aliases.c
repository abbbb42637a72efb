/* Bound destination buffers that share memory (rs_layout_check_aliases): two buffers of
 * one rank whose written bytes overlap would have one written over the other, so an
 * execution refuses them before anything moves. */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"
#include "util/error.h"

/* The bytes [lo, hi) of buffer @c buffer that @p rank's fragments write, by address. */
typedef struct {
    uintptr_t lo, hi;
    int32_t buffer;
} rs_span_t;

static int cmp_span(const void *pa, const void *pb)
{
    const rs_span_t *a = pa, *b = pb;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    return a->buffer < b->buffer ? -1 : a->buffer > b->buffer;
}

static const char *buffer_name(const reshard_layout_t *l, int32_t rank, const reshard_buffer_t *b,
                               int32_t id)
{
    const rs_decl_t *e = rs_decl_find(&l->decls, rank, id);
    return e ? e->name : b->name ? b->name : "undeclared";
}

/* Buffers @p a and @p b are one memory (same pointer and size) into which both write the
 * same elements at the same bytes: a tied weight bound under both of its names. */
static bool same_writes(const reshard_layout_t *l, int32_t rank, const reshard_buffer_t *bufs,
                        int32_t a, int32_t b)
{
    if (bufs[a].ptr != bufs[b].ptr || bufs[a].bytes != bufs[b].bytes)
        return false;
    int64_t i = 0, j = 0;
    for (;;) {
        while (i < l->n && (l->f[i].rank != rank || l->f[i].buffer != a))
            i++;
        while (j < l->n && (l->f[j].rank != rank || l->f[j].buffer != b))
            j++;
        if (i == l->n || j == l->n)
            return i == l->n && j == l->n;
        if (!rs_fragment_same_place(&l->f[i++], &l->f[j++]))
            return false;
    }
}

/* Whether @p rank's buffer @p b is zero-filled (reshard_layout_zero_buffer): every byte
 * of it is written. */
static bool zero_filled(const reshard_layout_t *l, int32_t rank, int32_t b)
{
    const rs_decl_t *e = rs_decl_find(&l->decls, rank, b);
    return e && e->zero;
}

/* The buffer a run of runs_overlap belongs to: its fragment's, or -1 - frag (a whole
 * zero-filled buffer). */
static int32_t run_buffer(const reshard_layout_t *l, const rs_run_t *r)
{
    return r->frag >= 0 ? l->f[r->frag].buffer : (int32_t)(-1 - r->frag);
}

/* The byte runs of buffers @p a and @p b by address; whether two of different buffers
 * overlap, the first such address in *@p at. NOMEM when the runs do not fit. */
static reshard_status_t runs_overlap(const reshard_layout_t *l, int32_t rank,
                                     const reshard_buffer_t *bufs, int32_t a, int32_t b, bool *hit,
                                     uintptr_t *at)
{
    int64_t total = 0;
    for (int64_t i = 0; i < l->n; i++)
        if (l->f[i].rank == rank && (l->f[i].buffer == a || l->f[i].buffer == b)) {
            rs_runs_t r;
            rs_fragment_runs(l, &l->f[i], &r);
            total += r.runs;
        }
    rs_run_t *runs = malloc((size_t)(total + 2) * sizeof *runs);
    if (!runs)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory checking buffers %d and %d",
                        rank, a, b);
    int64_t k = 0;
    const int32_t ab[2] = {a, b};
    for (int q = 0; q < 2; q++)
        if (zero_filled(l, rank, ab[q]))
            runs[k++] = (rs_run_t){(uintptr_t)bufs[ab[q]].ptr,
                                   (uintptr_t)bufs[ab[q]].ptr + bufs[ab[q]].bytes, -1 - ab[q]};
    for (int64_t i = 0; i < l->n; i++)
        if (l->f[i].rank == rank && (l->f[i].buffer == a || l->f[i].buffer == b)) {
            int64_t n = rs_fragment_run_list(l, &l->f[i], i, runs + k);
            uintptr_t base = (uintptr_t)bufs[l->f[i].buffer].ptr;
            for (int64_t q = k; q < k + n; q++) { /* by address */
                runs[q].lo += base;
                runs[q].hi += base;
            }
            k += n;
        }
    qsort(runs, (size_t)k, sizeof *runs, rs_run_cmp);
    *hit = false;
    uint64_t reach = 0;
    int32_t reach_buf = -1;
    for (int64_t q = 0; q < k && !*hit; q++) {
        int32_t buf = run_buffer(l, &runs[q]);
        if (runs[q].lo < reach && buf != reach_buf) {
            *hit = true;
            *at = (uintptr_t)runs[q].lo;
        }
        if (runs[q].hi > reach) {
            reach = runs[q].hi;
            reach_buf = buf;
        }
    }
    free(runs);
    return RESHARD_OK;
}

/* The bytes each of @p rank's @p n bound buffers is read or written at by its fragments
 * (zero-filled ones whole), non-empty ones only, sorted by start, into @p sp (n entries);
 * returns how many. */
static int32_t touched_spans(const reshard_layout_t *l, int32_t rank, const reshard_buffer_t *bufs,
                             int32_t n, rs_span_t *sp)
{
    for (int32_t b = 0; b < n; b++)
        sp[b] = (rs_span_t){UINTPTR_MAX, 0, b};
    for (int64_t i = 0; i < l->n; i++) {
        const reshard_fragment_t *f = &l->f[i];
        if (f->rank != rank || f->buffer >= n || !bufs[f->buffer].ptr)
            continue;
        uintptr_t p = (uintptr_t)bufs[f->buffer].ptr;
        uintptr_t lo = p + (uintptr_t)f->base * rs_frag_elem_size(l, f);
        uintptr_t hi = p + rs_fragment_end_bytes(l, f);
        rs_span_t *s = &sp[f->buffer];
        s->lo = lo < s->lo ? lo : s->lo;
        s->hi = hi > s->hi ? hi : s->hi;
    }
    for (int32_t b = 0; b < n; b++) /* a zero-filled buffer is written whole */
        if (bufs[b].ptr && bufs[b].bytes && zero_filled(l, rank, b))
            sp[b] = (rs_span_t){(uintptr_t)bufs[b].ptr, (uintptr_t)bufs[b].ptr + bufs[b].bytes, b};
    int32_t m = 0;
    for (int32_t b = 0; b < n; b++)
        if (sp[b].hi > sp[b].lo)
            sp[m++] = sp[b];
    qsort(sp, (size_t)m, sizeof *sp, cmp_span);
    return m;
}

reshard_status_t rs_layout_check_aliases(const reshard_layout_t *l, int32_t rank,
                                         const reshard_buffer_t *bufs, int32_t n, const char *side)
{
    rs_span_t *sp = calloc((size_t)(n > 0 ? n : 1), sizeof *sp);
    if (!sp)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory checking %s buffers", rank,
                        side);
    int32_t m = touched_spans(l, rank, bufs, n, sp);
    reshard_status_t st = RESHARD_OK;
    uintptr_t reach = m ? sp[0].hi : 0; /* the furthest end of the spans before i */
    for (int32_t i = 1; i < m && st == RESHARD_OK; reach = sp[i].hi > reach ? sp[i].hi : reach, i++)
        for (int32_t j = i - 1; reach > sp[i].lo && j >= 0 && st == RESHARD_OK; j--) {
            if (sp[j].hi <= sp[i].lo)
                continue; /* spans are sorted by start: an earlier one may still reach */
            int32_t a = sp[j].buffer, b = sp[i].buffer;
            bool hit = false;
            uintptr_t at = 0;
            if (same_writes(l, rank, bufs, a, b))
                continue;
            st = runs_overlap(l, rank, bufs, a, b, &hit, &at);
            if (st == RESHARD_OK && hit)
                st = rs_error(RESHARD_ERR_BUFFER,
                              "rank %d: %s buffers %d (%s) and %d (%s) share memory: byte %llu of "
                              "buffer %d is byte %llu of buffer %d, and both are written (one "
                              "would overwrite the other); bind each its own memory",
                              rank, side, a, buffer_name(l, rank, &bufs[a], a), b,
                              buffer_name(l, rank, &bufs[b], b),
                              (unsigned long long)(at - (uintptr_t)bufs[a].ptr), a,
                              (unsigned long long)(at - (uintptr_t)bufs[b].ptr), b);
        }
    free(sp);
    return st;
}

reshard_status_t rs_layout_check_src_dst(const reshard_layout_t *src, const reshard_buffer_t *sb,
                                         int32_t ns, const reshard_layout_t *dst,
                                         const reshard_buffer_t *db, int32_t nd, int32_t rank)
{
    rs_span_t *a = calloc((size_t)(ns > 0 ? ns : 1), sizeof *a);
    rs_span_t *b = calloc((size_t)(nd > 0 ? nd : 1), sizeof *b);
    reshard_status_t st = RESHARD_OK;
    if (!a || !b)
        st = rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory checking buffers", rank);
    int32_t ma = st == RESHARD_OK ? touched_spans(src, rank, sb, ns, a) : 0;
    int32_t mb = st == RESHARD_OK ? touched_spans(dst, rank, db, nd, b) : 0;
    for (int32_t i = 0, j = 0; st == RESHARD_OK && i < ma && j < mb;) {
        if (a[i].hi <= b[j].lo) {
            i++;
        } else if (b[j].hi <= a[i].lo) {
            j++;
        } else {
            uintptr_t at = a[i].lo > b[j].lo ? a[i].lo : b[j].lo;
            int32_t x = a[i].buffer, y = b[j].buffer;
            st = rs_error(RESHARD_ERR_BUFFER,
                          "rank %d: source buffer %d (%s) and destination buffer %d (%s) share "
                          "memory: byte %llu of the source is byte %llu of the destination, and "
                          "a refit writes destinations while it still reads sources; bind the "
                          "destination its own memory",
                          rank, x, buffer_name(src, rank, &sb[x], x), y,
                          buffer_name(dst, rank, &db[y], y),
                          (unsigned long long)(at - (uintptr_t)sb[x].ptr),
                          (unsigned long long)(at - (uintptr_t)db[y].ptr));
        }
    }
    free(a);
    free(b);
    return st;
}
