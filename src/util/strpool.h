/* A pool of distinct strings: each is stored once, however often it is
 * added, and pooled strings are equal when their addresses are. Used for
 * parameter names, which every rank of a model declares alike. */
#ifndef RS_UTIL_STRPOOL_H
#define RS_UTIL_STRPOOL_H

#include <stdint.h>

typedef struct {
    uint64_t h;
    char *s;    /**< NULL: empty */
    int64_t id; /**< 0, 1, ... in order of first addition */
} rs_strpool_slot_t;

typedef struct {
    rs_strpool_slot_t *slot; /**< cap slots, open addressing */
    int64_t n, cap;          /**< cap: power of two, > 2n (0 when empty) */
} rs_strpool_t;

/** Hash of @p s (eight bytes at a time, mixed); what the pool is keyed by. */
uint64_t rs_str_hash(const char *s);

/** The pooled copy of @p s (hash @p h, rs_str_hash), added when new; NULL
 *  when out of memory. Its id (0, 1, ... in order of first addition) goes
 *  to *@p id when @p id is not NULL. */
const char *rs_strpool_add(rs_strpool_t *p, const char *s, uint64_t h, int64_t *id);

/** The id of @p s (hash @p h), or -1 when it was never added. */
int64_t rs_strpool_find(const rs_strpool_t *p, const char *s, uint64_t h);

/** Free every pooled string; the pool is left empty. */
void rs_strpool_free(rs_strpool_t *p);

#endif
