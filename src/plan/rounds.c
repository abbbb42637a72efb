/* The stage-0 round schedule (rounds.h). */
#include "plan/rounds.h"

/* Rounds of a whole chunk at the start: while two chunks or more are left,
 * or every round without a taper. */
static int64_t uniform_rounds(const rs_rounds_t *s)
{
    if (!s->taper)
        return (int64_t)((s->bytes + s->chunk - 1) / s->chunk);
    return s->bytes >= 2 * s->chunk ? (int64_t)((s->bytes - 2 * s->chunk) / s->chunk) + 1 : 0;
}

uint64_t rs_rounds_len(const rs_rounds_t *s, uint64_t start)
{
    uint64_t left = s->bytes - start;
    if (!s->taper || left >= 2 * s->chunk)
        return left < s->chunk ? left : s->chunk;
    uint64_t low = s->chunk / 16 > RS_TAPER_MIN_BYTES ? s->chunk / 16 : RS_TAPER_MIN_BYTES;
    if (left > 2 * low)
        return (left / 2) & ~(uint64_t)7; /* > low: never 0, and < chunk */
    return left < s->chunk ? left : s->chunk;
}

uint64_t rs_rounds_start(const rs_rounds_t *s, int64_t k)
{
    int64_t u = uniform_rounds(s);
    uint64_t at = (uint64_t)(k < u ? k : u) * s->chunk;
    if (at >= s->bytes)
        return s->bytes;
    for (int64_t i = u; i < k && at < s->bytes; i++)
        at += rs_rounds_len(s, at);
    return at;
}

int64_t rs_rounds_of(const rs_rounds_t *s, uint64_t y)
{
    int64_t u = uniform_rounds(s);
    if (y < (uint64_t)u * s->chunk)
        return (int64_t)(y / s->chunk);
    int64_t k = u;
    for (uint64_t at = (uint64_t)u * s->chunk;; k++) {
        at += rs_rounds_len(s, at);
        if (y < at)
            return k;
    }
}

int64_t rs_rounds_count(const rs_rounds_t *s)
{
    return s->bytes ? rs_rounds_of(s, s->bytes - 1) + 1 : 0;
}
