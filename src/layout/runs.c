/* Fragments as lists of contiguous byte runs (overlap and padding checks). */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"

void rs_fragment_runs(const reshard_layout_t *l, const reshard_fragment_t *f, rs_runs_t *r)
{
    size_t es = rs_frag_elem_size(l, f);
    int d = f->box.ndim - 1;
    int64_t inner = 1; /* elements in one run */
    if (f->stride[d] == 1 || f->box.extent[d] == 1) {
        inner = f->box.extent[d];
        d--;
        while (d >= 0 && (f->box.extent[d] == 1 || f->stride[d] == inner)) {
            inner *= f->box.extent[d];
            d--;
        }
    }
    r->nouter = d + 1;
    r->runs = 1;
    for (int q = 0; q <= d; q++) {
        r->ext[q] = f->box.extent[q];
        r->stride[q] = f->stride[q];
        r->runs *= f->box.extent[q];
    }
    r->run_bytes = (uint64_t)inner * es;
}

int64_t rs_fragment_run_list(const reshard_layout_t *l, const reshard_fragment_t *f, int64_t frag,
                             rs_run_t *out)
{
    size_t es = rs_frag_elem_size(l, f);
    rs_runs_t r;
    rs_fragment_runs(l, f, &r);
    int64_t idx[RESHARD_MAX_DIMS] = {0}, pos = f->base;
    for (int64_t q = 0; q < r.runs; q++) {
        out[q] = (rs_run_t){(uint64_t)pos * es, (uint64_t)pos * es + r.run_bytes, frag};
        for (int d = r.nouter - 1; d >= 0; d--) {
            if (++idx[d] < r.ext[d]) {
                pos += r.stride[d];
                break;
            }
            pos -= (r.ext[d] - 1) * r.stride[d];
            idx[d] = 0;
        }
    }
    return r.runs;
}

int rs_run_cmp(const void *pa, const void *pb)
{
    const rs_run_t *a = pa, *b = pb;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    return a->frag < b->frag ? -1 : a->frag > b->frag;
}

/* Merge the sorted a[0..na) and b[0..nb) into out. */
static void merge_runs(const rs_run_t *a, int64_t na, const rs_run_t *b, int64_t nb, rs_run_t *out)
{
    int64_t i = 0, j = 0, k = 0;
    while (i < na && j < nb)
        out[k++] = rs_run_cmp(&b[j], &a[i]) < 0 ? b[j++] : a[i++];
    while (i < na)
        out[k++] = a[i++];
    while (j < nb)
        out[k++] = b[j++];
}

void rs_run_sort(rs_run_t *r, int64_t n)
{
    /* the runs of one fragment mostly ascend: merge the ascending stretches
     * pairwise (natural merge sort), linear when a few fragments interleave */
    if (n < 2)
        return;
    rs_run_t *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) {
        qsort(r, (size_t)n, sizeof *r, rs_run_cmp);
        return;
    }
    rs_run_t *from = r, *to = tmp;
    for (;;) {
        int64_t i = 0, stretches = 0;
        while (i < n) {
            int64_t j = i + 1;
            while (j < n && rs_run_cmp(&from[j - 1], &from[j]) <= 0)
                j++;
            int64_t k = j;
            while (k < n && (k == j || rs_run_cmp(&from[k - 1], &from[k]) <= 0))
                k++;
            merge_runs(from + i, j - i, from + j, k - j, to + i);
            stretches++;
            i = k;
        }
        rs_run_t *x = from;
        from = to;
        to = x;
        if (stretches <= 1)
            break;
    }
    if (from != r)
        memcpy(r, from, (size_t)n * sizeof *r);
    free(tmp);
}
