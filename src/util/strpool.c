/* A pool of distinct strings (strpool.h). */
#include "util/strpool.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

uint64_t rs_str_hash(const char *s)
{
    size_t n = strlen(s);
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    for (size_t i = 0; i < n; i += 8) { /* eight bytes at a time */
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 32;
    }
    return mix64(h);
}

/* Slot of @p s (hash @p h): its own, or the empty one where it would go. */
static int64_t slot_of(const rs_strpool_t *p, const char *s, uint64_t h)
{
    uint64_t mask = (uint64_t)p->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask)
        if (!p->slot[i].s || (p->slot[i].h == h && strcmp(p->slot[i].s, s) == 0))
            return (int64_t)i;
}

const char *rs_strpool_add(rs_strpool_t *p, const char *s, uint64_t h, int64_t *id)
{
    if (2 * (p->n + 1) >= p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 64;
        uint64_t mask = (uint64_t)cap - 1;
        rs_strpool_slot_t *t = calloc((size_t)cap, sizeof *t);
        if (!t)
            return NULL;
        for (int64_t k = 0; k < p->cap; k++) {
            if (!p->slot[k].s)
                continue;
            uint64_t i = p->slot[k].h & mask;
            while (t[i].s)
                i = (i + 1) & mask;
            t[i] = p->slot[k];
        }
        free(p->slot);
        p->slot = t;
        p->cap = cap;
    }
    rs_strpool_slot_t *e = &p->slot[slot_of(p, s, h)];
    if (!e->s) {
        if (!(e->s = strdup(s)))
            return NULL;
        e->h = h;
        e->id = p->n++;
    }
    if (id)
        *id = e->id;
    return e->s;
}

int64_t rs_strpool_find(const rs_strpool_t *p, const char *s, uint64_t h)
{
    if (!p->cap)
        return -1;
    const rs_strpool_slot_t *e = &p->slot[slot_of(p, s, h)];
    return e->s ? e->id : -1;
}

void rs_strpool_free(rs_strpool_t *p)
{
    for (int64_t k = 0; k < p->cap; k++)
        free(p->slot[k].s);
    free(p->slot);
    p->slot = NULL;
    p->n = p->cap = 0;
}
