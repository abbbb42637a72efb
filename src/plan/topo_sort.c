/* Sorting arrays of large records: qsort moves every record O(n log n)
 * times; sorting pointers and then permuting once moves each record twice. */
#include <stdlib.h>
#include <string.h>

#include "plan/topo.h"

/* What is sorted: a record's address and the records' comparator. */
typedef struct {
    const void *rec;
    int (*cmp)(const void *, const void *);
} rs_ref_t;

static int cmp_ref(const void *pa, const void *pb)
{
    const rs_ref_t *a = pa, *b = pb;
    int c = a->cmp(a->rec, b->rec);
    if (c)
        return c;
    /* equal records keep their order: the sort is stable and deterministic */
    return (const char *)a->rec < (const char *)b->rec
               ? -1
               : (const char *)a->rec > (const char *)b->rec;
}

int rs_sort_records(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
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
        r[i] = (rs_ref_t){b + i * size, cmp};
    qsort(r, n, sizeof *r, cmp_ref);
    /* position i takes record src(i); follow each cycle once */
    for (size_t i = 0; i < n; i++)
        from[i] = (size_t)((const unsigned char *)r[i].rec - b) / size;
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
    free(r);
    free(from);
    free(tmp);
    return 0;
}
