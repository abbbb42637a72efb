/* Small planning helpers shared by the steps (plan_util.h): growable
 * arrays, sorting large records, box order, box boundaries, pieces. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_util.h"

static int cmp_ref(const void *pa, const void *pb)
{
    const rs_ref_t *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    if (a->key2 != b->key2)
        return a->key2 < b->key2 ? -1 : 1;
    int c = a->cmp(a->rec, b->rec);
    if (c)
        return c;
    /* equal records keep their order: the sort is stable and deterministic */
    return (const char *)a->rec < (const char *)b->rec
               ? -1
               : (const char *)a->rec > (const char *)b->rec;
}

void rs_permute_records(void *base, size_t n, size_t size, size_t *from, void *tmp)
{
    unsigned char *b = base;
    /* position i takes record from[i]; follow each cycle once */
    for (size_t i = 0; i < n; i++) {
        if (from[i] == i || from[i] == (size_t)-1)
            continue;
        memcpy(tmp, b + i * size, size);
        size_t j = i;
        for (;;) {
            size_t k = from[j];
            from[j] = (size_t)-1;
            if (k == i) {
                memcpy(b + j * size, tmp, size);
                break;
            }
            memcpy(b + j * size, b + k * size, size);
            j = k;
        }
    }
}

/* Insertion sort of a short run by cmp_ref. */
static void insertion_sort(rs_ref_t *r, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        rs_ref_t x = r[i];
        size_t j = i;
        for (; j > 0 && cmp_ref(&r[j - 1], &x) > 0; j--)
            r[j] = r[j - 1];
        r[j] = x;
    }
}

/* Runs of equal keys sorted by (cmp, address). */
static void sort_runs(rs_ref_t *r, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && r[j].key == r[i].key && r[j].key2 == r[i].key2)
            j++;
        if (j - i <= 16)
            insertion_sort(r + i, j - i);
        else
            qsort(r + i, j - i, sizeof *r, cmp_ref);
        i = j;
    }
}

static uint64_t key_word(const rs_ref_t *r, int w)
{
    return w ? r->key : r->key2;
}

/* Stable LSD radix sort of @p r by (key, key2), a byte at a time (bytes
 * every ref shares are skipped), through @p tmp (n refs). */
static void radix_by_key(rs_ref_t *r, rs_ref_t *tmp, size_t n)
{
    rs_ref_t *a = r, *b = tmp;
    for (int w = 0; w < 2; w++) { /* key2 first: least significant */
        uint64_t differ = 0;
        for (size_t i = 1; i < n; i++)
            differ |= key_word(&a[i], w) ^ key_word(&a[0], w);
        for (int shift = 0; shift < 64; shift += 8) {
            if (!((differ >> shift) & 0xffu))
                continue;
            size_t cnt[257] = {0};
            for (size_t i = 0; i < n; i++)
                cnt[((key_word(&a[i], w) >> shift) & 0xffu) + 1]++;
            for (int k = 0; k < 256; k++)
                cnt[k + 1] += cnt[k];
            for (size_t i = 0; i < n; i++)
                b[cnt[(key_word(&a[i], w) >> shift) & 0xffu]++] = a[i];
            rs_ref_t *t = a;
            a = b;
            b = t;
        }
    }
    if (a != r)
        memcpy(r, a, n * sizeof *r);
}

void rs_sort_refs(rs_ref_t *r, size_t n)
{
    if (n < 2)
        return;
    rs_ref_t *tmp = n > 32 ? malloc(n * sizeof *tmp) : NULL;
    if (!tmp) { /* short, or no memory for the radix pass: compare all */
        if (n <= 32)
            insertion_sort(r, n);
        else
            qsort(r, n, sizeof *r, cmp_ref);
        return;
    }
    radix_by_key(r, tmp, n);
    free(tmp);
    sort_runs(r, n);
}

int rs_sort_records(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *),
                    uint64_t (*key)(const void *), uint64_t (*key2)(const void *))
{
    if (n < 2)
        return 0;
    rs_ref_t *r = malloc(n * sizeof *r);
    size_t *from = malloc(n * sizeof *from);
    unsigned char *tmp = malloc(size);
    if (!r || !from || !tmp) {
        free(r);
        free(from);
        free(tmp);
        return -1;
    }
    unsigned char *b = base;
    for (size_t i = 0; i < n; i++)
        r[i] = (rs_ref_t){key ? key(b + i * size) : 0, key2 ? key2(b + i * size) : 0, b + i * size,
                          cmp};
    rs_sort_refs(r, n);
    for (size_t i = 0; i < n; i++)
        from[i] = (size_t)((const unsigned char *)r[i].rec - b) / size;
    rs_permute_records(base, n, size, from, tmp);
    free(r);
    free(from);
    free(tmp);
    return 0;
}

int rs_box_cmp(const reshard_box_t *a, const reshard_box_t *b)
{
    for (int d = 0; d < a->ndim; d++)
        if (a->offset[d] != b->offset[d])
            return a->offset[d] < b->offset[d] ? -1 : 1;
    for (int d = 0; d < a->ndim; d++)
        if (a->extent[d] != b->extent[d])
            return a->extent[d] < b->extent[d] ? -1 : 1;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

bool rs_grid_next(int nd, int64_t *k, const int64_t *lo, const int64_t *hi)
{
    for (int d = nd - 1; d >= 0; d--) {
        if (++k[d] < hi[d])
            return true;
        k[d] = lo[d];
    }
    return false;
}

int64_t rs_lower_bound(const int64_t *pts, int64_t n, int64_t x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pts[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int64_t *rs_box_cuts(const reshard_box_t *first, size_t stride, int64_t n, int d, int64_t *np)
{
    int64_t *pts = malloc((size_t)(2 * n + 1) * sizeof *pts);
    if (!pts)
        return NULL;
    const char *at = (const char *)first;
    for (int64_t i = 0; i < n; i++) {
        const reshard_box_t *b = (const reshard_box_t *)(const void *)(at + (size_t)i * stride);
        pts[2 * i] = b->offset[d];
        pts[2 * i + 1] = b->offset[d] + b->extent[d];
    }
    qsort(pts, (size_t)(2 * n), sizeof *pts, cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < 2 * n; i++)
        if (u == 0 || pts[i] != pts[u - 1])
            pts[u++] = pts[i];
    *np = u;
    return pts;
}

rs_piece_t rs_direct_piece(const reshard_plan_t *plan, const reshard_box_t *box, int32_t tensor,
                           int32_t from_frag, int32_t to_frag, int32_t receiver, uint64_t bytes)
{
    rs_piece_t p;
    memset(&p, 0, sizeof p);
    p.box = *box;
    p.tensor = tensor;
    p.from_frag = from_frag;
    p.to_frag = to_frag;
    p.sender = plan->src->f[from_frag].rank;
    p.receiver = receiver;
    p.stage = RS_STAGE_DIRECT;
    p.elem_size = (uint32_t)reshard_dtype_size(plan->dst->tensors->t[tensor].dtype);
    p.bytes = bytes;
    return p;
}

int rs_grow(void *v, int64_t *cap, int64_t n, size_t size)
{
    if (n < *cap)
        return 0;
    int64_t c = *cap ? 2 * *cap : 64;
    void *old;
    memcpy(&old, v, sizeof old);
    void *p = realloc(old, (size_t)c * size);
    if (!p)
        return -1;
    memcpy(v, &p, sizeof p);
    *cap = c;
    return 0;
}

int rs_piece_vec_push(const reshard_plan_t *plan, rs_piece_vec_t *v, const rs_piece_t *piece)
{
    if (!rs_scope_keeps(plan, piece->stage, piece->sender, piece->receiver))
        return 0;
    if (rs_grow(&v->p, &v->cap, v->n, sizeof *v->p) != 0)
        return -1;
    v->p[v->n++] = *piece;
    return 0;
}
