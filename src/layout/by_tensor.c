/* A layout's fragments grouped by tensor: lists kept as fragments are
 * added, so that a plan that needs a few tensors' fragments does not pass
 * over every fragment to find them. */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"

/* Grow @p *v (of *@p cap int64 entries) to at least @p need, new entries
 * set to @p fill. -1 when out of memory. */
static int grow(int64_t **v, int64_t *cap, int64_t need, int64_t fill)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    int64_t *p = realloc(*v, (size_t)c * sizeof *p);
    if (!p)
        return -1;
    for (int64_t i = *cap; i < c; i++)
        p[i] = fill;
    *v = p;
    *cap = c;
    return 0;
}

void rs_tensor_lists_add(reshard_layout_t *l)
{
    rs_tensor_lists_t *k = &l->lists;
    int64_t i = l->n - 1, t = l->f[i].tensor;
    if (k->n != i)
        goto lost; /* the fragments changed another way */
    int64_t tc = k->tcap;
    if (grow(&k->next, &k->ncap, l->n, -1) != 0 || grow(&k->head, &tc, t + 1, -1) != 0)
        goto lost;
    tc = k->tcap;
    if (grow(&k->tail, &tc, t + 1, -1) != 0)
        goto lost;
    tc = k->tcap;
    if (grow(&k->count, &tc, t + 1, 0) != 0)
        goto lost;
    k->tcap = tc;
    if (k->tail[t] >= 0)
        k->next[k->tail[t]] = i;
    else
        k->head[t] = i;
    k->tail[t] = i;
    k->count[t]++;
    k->n++;
    return;
lost:
    rs_tensor_lists_free(k);
    k->n = -1; /* never kept again */
}

void rs_tensor_lists_free(rs_tensor_lists_t *k)
{
    free(k->next);
    free(k->head);
    free(k->tail);
    free(k->count);
    memset(k, 0, sizeof *k);
}

int64_t *rs_layout_by_tensor(const reshard_layout_t *l, const uint8_t *want, int64_t **start_out)
{
    int32_t nt = l->tensors->n;
    const rs_tensor_lists_t *k = &l->lists;
    bool kept = k->n == l->n && l->n > 0;
    int64_t *start = calloc((size_t)nt + 1, sizeof *start);
    if (!start)
        return NULL;
    for (int32_t t = 0; kept && t < nt; t++)
        start[t + 1] = start[t] + (want && !want[t] ? 0 : t < k->tcap ? k->count[t] : 0);
    for (int64_t i = 0; !kept && i < l->n; i++)
        start[l->f[i].tensor + 1] += !want || want[l->f[i].tensor];
    for (int32_t t = 0; !kept && t < nt; t++)
        start[t + 1] += start[t];
    int64_t *idx = malloc((size_t)(start[nt] ? start[nt] : 1) * sizeof *idx);
    if (!idx) {
        free(start);
        return NULL;
    }
    if (kept) {
        for (int32_t t = 0; t < nt && t < k->tcap; t++) {
            int64_t q = start[t];
            for (int64_t i = start[t + 1] > q ? k->head[t] : -1; i >= 0; i = k->next[i])
                idx[q++] = i;
        }
    } else {
        int64_t *fill = malloc(((size_t)nt + 1) * sizeof *fill);
        if (!fill) {
            free(start);
            free(idx);
            return NULL;
        }
        memcpy(fill, start, (size_t)nt * sizeof *fill);
        for (int64_t i = 0; i < l->n; i++)
            if (!want || want[l->f[i].tensor])
                idx[fill[l->f[i].tensor]++] = i;
        free(fill);
    }
    *start_out = start;
    return idx;
}
