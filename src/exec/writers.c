/* Which plan last wrote which destination memory (exec/writers.h): a sorted array of
 * disjoint address ranges, each with its writer and stamp, and per writer the ranges it
 * stamped last (to forget them at its next stamp or when its plan is destroyed). */
#include "exec/writers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t lo, hi; /**< [lo, hi) */
    const void *plan;
    int32_t rank;
    uint64_t stamp;
} rs_wrange_t;

typedef struct {
    const void *plan;
    int32_t rank;
    int32_t n;
    uint64_t *lo, *hi; /**< the ranges of its last stamp, in buffer order */
} rs_wowner_t;

static pthread_mutex_t w_mu = PTHREAD_MUTEX_INITIALIZER;
static rs_wrange_t *w_map;
static size_t w_n, w_cap;
static rs_wowner_t *w_own;
static size_t w_nown, w_capown;
static uint64_t w_counter;
static bool w_lost; /* out of memory once: nothing is known to be anyone's */

static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* The first range that ends after @p lo. */
static size_t first_after(uint64_t lo)
{
    size_t a = 0, b = w_n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (w_map[m].hi <= lo)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

static bool insert_at(size_t i, rs_wrange_t r)
{
    if (!grow((void **)&w_map, &w_cap, w_n + 1, sizeof *w_map))
        return false;
    memmove(w_map + i + 1, w_map + i, (w_n - i) * sizeof *w_map);
    w_map[i] = r;
    w_n++;
    return true;
}

static bool is_writer(const rs_wrange_t *r, const void *plan, int32_t rank)
{
    return r->plan == plan && r->rank == rank;
}

/* Remove [lo, hi) from the ranges (only from @p plan's @p rank's when @p only); returns
 * where a range [lo, hi) would go, or SIZE_MAX out of memory. */
static size_t carve(uint64_t lo, uint64_t hi, bool only, const void *plan, int32_t rank)
{
    size_t i = first_after(lo), at = i;
    while (i < w_n && w_map[i].lo < hi) {
        rs_wrange_t e = w_map[i];
        if (only && !is_writer(&e, plan, rank)) {
            i++;
            continue;
        }
        if (e.lo < lo && e.hi > hi) { /* split in two */
            w_map[i].hi = lo;
            e.lo = hi;
            if (!insert_at(i + 1, e))
                return SIZE_MAX;
            return i + 1;
        }
        if (e.lo < lo) {
            w_map[i].hi = lo;
            at = ++i;
        } else if (e.hi > hi) {
            w_map[i].lo = hi;
            return i;
        } else {
            memmove(w_map + i, w_map + i + 1, (w_n - i - 1) * sizeof *w_map);
            w_n--;
            at = i;
        }
    }
    return only ? first_after(lo) : at;
}

static rs_wowner_t *owner_of(const void *plan, int32_t rank)
{
    for (size_t i = 0; i < w_nown; i++)
        if (w_own[i].plan == plan && w_own[i].rank == rank)
            return &w_own[i];
    return NULL;
}

/* Forget @p o's ranges and its record. */
static void drop_owner(rs_wowner_t *o)
{
    for (int32_t i = 0; i < o->n; i++)
        if (carve(o->lo[i], o->hi[i], true, o->plan, o->rank) == SIZE_MAX)
            w_lost = true;
    free(o->lo);
    free(o->hi);
    *o = w_own[--w_nown];
}

static bool range_of(const reshard_buffer_t *b, uint64_t *lo, uint64_t *hi)
{
    *lo = (uint64_t)(uintptr_t)b->ptr;
    *hi = *lo + b->bytes;
    return b->ptr && b->bytes && *hi > *lo;
}

uint64_t rs_writers_stamp(const void *plan, int32_t rank, const reshard_buffer_t *b, int32_t n)
{
    pthread_mutex_lock(&w_mu);
    uint64_t stamp = ++w_counter;
    rs_wowner_t *o = owner_of(plan, rank);
    if (!o && grow((void **)&w_own, &w_capown, w_nown + 1, sizeof *w_own)) {
        o = &w_own[w_nown++];
        *o = (rs_wowner_t){plan, rank, 0, NULL, NULL};
    }
    uint64_t *lo = n > 0 ? calloc((size_t)n, sizeof *lo) : NULL;
    uint64_t *hi = n > 0 ? calloc((size_t)n, sizeof *hi) : NULL;
    if (!o || (n > 0 && (!lo || !hi))) {
        w_lost = true;
        free(lo);
        free(hi);
        if (o)
            drop_owner(o);
        pthread_mutex_unlock(&w_mu);
        return stamp;
    }
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++)
        if (range_of(&b[i], &lo[k], &hi[k]))
            k++;
    /* its previous ranges that it does not write again now */
    for (int32_t i = 0; i < o->n; i++)
        if (i >= k || o->lo[i] != lo[i] || o->hi[i] != hi[i])
            if (carve(o->lo[i], o->hi[i], true, plan, rank) == SIZE_MAX)
                w_lost = true;
    for (int32_t i = 0; i < k; i++) {
        size_t at = first_after(lo[i]);
        rs_wrange_t r = {lo[i], hi[i], plan, rank, stamp};
        if (at < w_n && w_map[at].lo == lo[i] && w_map[at].hi == hi[i]) {
            w_map[at] = r; /* the usual case: the same buffer as before */
            continue;
        }
        at = carve(lo[i], hi[i], false, NULL, 0);
        if (at == SIZE_MAX || !insert_at(at, r))
            w_lost = true;
    }
    free(o->lo);
    free(o->hi);
    o->lo = lo;
    o->hi = hi;
    o->n = k;
    pthread_mutex_unlock(&w_mu);
    return stamp;
}

bool rs_writers_mine(const void *plan, int32_t rank, uint64_t stamp, const reshard_buffer_t *b,
                     int32_t n)
{
    pthread_mutex_lock(&w_mu);
    bool mine = !w_lost;
    for (int32_t i = 0; mine && i < n; i++) {
        uint64_t lo, hi;
        if (!range_of(&b[i], &lo, &hi))
            continue;
        size_t at = first_after(lo);
        for (uint64_t cur = lo; mine && cur < hi; at++) {
            const rs_wrange_t *r = at < w_n ? &w_map[at] : NULL;
            mine = r && r->lo <= cur && is_writer(r, plan, rank) && r->stamp == stamp;
            if (mine)
                cur = r->hi;
        }
    }
    pthread_mutex_unlock(&w_mu);
    return mine;
}

void rs_writers_transfer(const void *from, const void *to, int32_t rank)
{
    pthread_mutex_lock(&w_mu);
    rs_wowner_t *o = owner_of(to, rank);
    if (o)
        drop_owner(o);
    o = owner_of(from, rank);
    for (int32_t i = 0; o && i < o->n; i++)
        for (size_t at = first_after(o->lo[i]); at < w_n && w_map[at].lo < o->hi[i]; at++)
            if (is_writer(&w_map[at], from, rank))
                w_map[at].plan = to;
    if (o)
        o->plan = to;
    pthread_mutex_unlock(&w_mu);
}

void rs_writers_forget(const void *plan)
{
    pthread_mutex_lock(&w_mu);
    for (size_t i = 0; i < w_nown;)
        if (w_own[i].plan == plan)
            drop_owner(&w_own[i]); /* moves the last record to i */
        else
            i++;
    pthread_mutex_unlock(&w_mu);
}
