/* The last writer of destination memory (exec/writers.h): an interval map from address
 * ranges to (writer, paint number), sorted and disjoint, painted a whole execution's
 * buffers at a time by one merge. */
#include "exec/writers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uintptr_t lo, hi;
    rs_writer_t w;
    uint64_t paint;
} rs_wrange_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static rs_wrange_t *map; /* sorted by lo, disjoint */
static size_t nmap;
static uint64_t paints;    /* the last paint's number */
static bool lost;          /* an allocation failed: nothing here may be trusted */
static uint64_t next_plan; /* the last plan id handed out */

uint64_t rs_writer_new_id(void)
{
    return __atomic_add_fetch(&next_plan, 1, __ATOMIC_RELAXED);
}

static int cmp_range(const void *pa, const void *pb)
{
    const rs_wrange_t *a = pa, *b = pb;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* First range of the map whose hi is past @p at. */
static size_t first_after(uintptr_t at)
{
    size_t lo = 0, hi = nmap;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (map[mid].hi <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool same_writer(rs_writer_t a, rs_writer_t b)
{
    return a.plan == b.plan && a.rank == b.rank;
}

bool rs_writers_all_mine(rs_writer_t w, const reshard_buffer_t *b, int32_t n, uint64_t since)
{
    pthread_mutex_lock(&lock);
    bool mine = !lost && since > 0;
    for (int32_t i = 0; mine && i < n; i++) {
        if (!b[i].ptr || !b[i].bytes)
            continue;
        uintptr_t at = (uintptr_t)b[i].ptr, end = at + b[i].bytes;
        for (size_t k = first_after(at); mine && at < end; k++) {
            mine = k < nmap && map[k].lo <= at && same_writer(map[k].w, w) && map[k].paint >= since;
            at = mine ? map[k].hi : at;
        }
    }
    pthread_mutex_unlock(&lock);
    return mine;
}

uint64_t rs_writers_paint(rs_writer_t w, const reshard_buffer_t *b, int32_t n)
{
    pthread_mutex_lock(&lock);
    uint64_t paint = ++paints;
    /* the new ranges, sorted and merged */
    rs_wrange_t *add = malloc(((size_t)(n > 0 ? n : 0) + 1) * sizeof *add);
    size_t nadd = 0;
    for (int32_t i = 0; add && i < n; i++)
        if (b[i].ptr && b[i].bytes)
            add[nadd++] =
                (rs_wrange_t){(uintptr_t)b[i].ptr, (uintptr_t)b[i].ptr + b[i].bytes, w, paint};
    qsort(add, nadd, sizeof *add, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < nadd; i++) {
        if (m && add[i].lo <= add[m - 1].hi) {
            if (add[i].hi > add[m - 1].hi)
                add[m - 1].hi = add[i].hi;
        } else {
            add[m++] = add[i];
        }
    }
    nadd = m;
    /* the old ranges less the new ones (each old range is cut in at most two by each new
     * range it meets, so the result holds at most nmap + 2 * nadd + nadd ranges) */
    size_t cap = nmap + 3 * nadd + 1;
    rs_wrange_t *out = add ? malloc(cap * sizeof *out) : NULL;
    if (!out) {
        free(add);
        lost = true;
        pthread_mutex_unlock(&lock);
        return 0;
    }
    size_t no = 0, j = 0;
    for (size_t k = 0; k < nmap; k++) {
        rs_wrange_t r = map[k];
        while (j < nadd && add[j].hi <= r.lo)
            j++;
        for (size_t q = j; q < nadd && add[q].lo < r.hi && r.lo < r.hi; q++) {
            if (add[q].lo > r.lo) {
                out[no] = r;
                out[no++].hi = add[q].lo;
            }
            r.lo = add[q].hi < r.hi ? add[q].hi : r.hi;
        }
        if (r.lo < r.hi)
            out[no++] = r;
    }
    memcpy(out + no, add, nadd * sizeof *add);
    no += nadd;
    qsort(out, no, sizeof *out, cmp_range);
    free(add);
    free(map);
    map = out;
    nmap = no;
    pthread_mutex_unlock(&lock);
    return paint;
}
