/* Text over the agreement (agree_text.h) and reshard_comm_agree_values.
 *
 * The transport's finish reduces RESHARD_AGREE_WORDS int64 words by MIN over all ranks.
 * A word carries 7 bytes (a value below 2^56) from the one rank that gives it while every
 * other rank gives INT64_MAX; a 32-bit hash h is compared as the pair (h, 2^32 - 1 - h),
 * whose minima differ from each other's complement exactly when two ranks' h differ. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "exec/agree_text.h"
#include "exec/delta.h" /* rs_delta_hash: XXH3 of bytes */
#include "util/error.h"

enum { W = RESHARD_AGREE_WORDS, PER_WORD = 7, MAX_KEYS = 64, SHOWN_KEYS = 4, LISTED = 4 };

#define H32_MAX ((int64_t)0xffffffff)
#define SHOWN_VALUE 120 /* bytes of a value a mismatch message shows */

static reshard_status_t reduce(reshard_comm_t *comm, const int64_t *w, int64_t *m, double t)
{
    return comm->ops->finish(comm, RESHARD_OK, w, m, t);
}

static void words_max(int64_t *w)
{
    for (int i = 0; i < W; i++)
        w[i] = INT64_MAX;
}

reshard_status_t rs_agree_text(reshard_comm_t *comm, int32_t root, const char *text, char *out,
                               size_t size, double timeout_s)
{
    const bool mine = comm->rank == root;
    unsigned char buf[RS_AGREE_TEXT_MAX + W * PER_WORD] = {0};
    size_t len = mine && text ? strnlen(text, RS_AGREE_TEXT_MAX) : 0;
    if (mine)
        memcpy(buf, text, len);
    size_t total = 0, at = 0;
    for (int round = 0; round == 0 || at < total; round++) {
        int64_t w[W], m[W];
        words_max(w);
        const int first = round == 0; /* the first word of the first round: the length */
        if (mine) {
            if (first)
                w[0] = (int64_t)len;
            for (int i = first; i < W; i++) {
                int64_t v = 0;
                for (int b = 0; b < PER_WORD; b++)
                    v |= (int64_t)buf[at + (size_t)(i - first) * PER_WORD + (size_t)b] << (8 * b);
                w[i] = v;
            }
        }
        reshard_status_t st = reduce(comm, w, m, timeout_s);
        if (st != RESHARD_OK)
            return st;
        if (first) {
            if (m[0] < 0 || m[0] > RS_AGREE_TEXT_MAX)
                return rs_error(RESHARD_ERR_INVALID_ARG,
                                "rank %d: the text of rank %d came with length %lld: the ranks "
                                "are not in step",
                                comm->rank, root, (long long)m[0]);
            total = (size_t)m[0];
        }
        for (int i = first; i < W; i++)
            for (int b = 0; b < PER_WORD; b++)
                buf[at + (size_t)(i - first) * PER_WORD + (size_t)b] =
                    (unsigned char)((uint64_t)m[i] >> (8 * b));
        at += (size_t)(W - first) * PER_WORD;
    }
    if (size) {
        size_t n = total < size - 1 ? total : size - 1;
        memcpy(out, buf, n);
        out[n] = '\0';
    }
    return RESHARD_OK;
}

static uint32_t h32_of(const char *s)
{
    uint64_t h = rs_delta_hash(s, strlen(s));
    return (uint32_t)(h ^ (h >> 32));
}

/* Which of @p nv hashes differ between ranks (and their least value): one agreement. */
static reshard_status_t differ3(reshard_comm_t *comm, const uint32_t *h, int nv, double t,
                                bool *differ, uint32_t *least)
{
    int64_t w[W], m[W];
    words_max(w);
    for (int k = 0; k < nv; k++) {
        w[2 * k] = h[k];
        w[2 * k + 1] = H32_MAX - h[k];
    }
    reshard_status_t st = reduce(comm, w, m, t);
    for (int k = 0; st == RESHARD_OK && k < nv; k++) {
        differ[k] = m[2 * k] != H32_MAX - m[2 * k + 1];
        least[k] = (uint32_t)m[2 * k];
    }
    return st;
}

/* ", r" for each rank listed, " and more" when the list was cut. */
static size_t list_ranks(char *out, size_t size, const int32_t *r, int n, bool more)
{
    size_t k = (size_t)snprintf(out, size, "rank%s ", n > 1 || more ? "s" : "");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(out + (k < size ? k : size), k < size ? size - k : 0, "%s%d",
                              i ? ", " : "", (int)r[i]);
    if (more)
        k += (size_t)snprintf(out + (k < size ? k : size), k < size ? size - k : 0, " and more");
    return k < size ? k : size;
}

/* One key whose values differ: "key: 'a' on ranks 0, 1, 2; 'b' on rank 3" into @p out. The
 * ranks holding rank 0's value (group A) and the others (group B), up to LISTED of each, and
 * the value of the first rank of each group; "other values" when B's differ among them. */
static reshard_status_t describe_key(reshard_comm_t *comm, const char *key, const char *value,
                                     double t, char *out, size_t size)
{
    const int32_t me = comm->rank;
    const uint32_t h = h32_of(value);
    int64_t w[W], m[W];
    words_max(w);
    if (me == 0)
        w[0] = h; /* rank 0's value names group A */
    reshard_status_t st = reduce(comm, w, m, t);
    if (st != RESHARD_OK)
        return st;
    const bool in_a = (int64_t)h == m[0];
    /* do B's values differ among them? */
    words_max(w);
    if (!in_a) {
        w[0] = h;
        w[1] = H32_MAX - h;
    }
    if ((st = reduce(comm, w, m, t)) != RESHARD_OK)
        return st;
    const bool b_mixed = m[0] != INT64_MAX && m[0] != H32_MAX - m[1];
    int32_t a[LISTED], b[LISTED];
    int na = 0, nb = 0;
    bool a_more = false, b_more = false;
    int32_t last_a = -1, last_b = -1;
    for (int round = 0; round <= LISTED; round++) { /* the next member of each group */
        words_max(w);
        if (in_a && me > last_a)
            w[0] = me;
        if (!in_a && me > last_b)
            w[1] = me;
        if ((st = reduce(comm, w, m, t)) != RESHARD_OK)
            return st;
        if (m[0] != INT64_MAX) {
            if (na < LISTED)
                a[na++] = last_a = (int32_t)m[0];
            else
                a_more = true;
        }
        if (m[1] != INT64_MAX) {
            if (nb < LISTED)
                b[nb++] = last_b = (int32_t)m[1];
            else
                b_more = true;
        }
        if ((m[0] == INT64_MAX || a_more) && (m[1] == INT64_MAX || b_more))
            break;
    }
    char va[SHOWN_VALUE + 1] = "", vb[SHOWN_VALUE + 1] = "";
    char shown[SHOWN_VALUE + 1];
    snprintf(shown, sizeof shown, "%s", value);
    if (na && (st = rs_agree_text(comm, a[0], shown, va, sizeof va, t)) != RESHARD_OK)
        return st;
    if (nb && (st = rs_agree_text(comm, b[0], shown, vb, sizeof vb, t)) != RESHARD_OK)
        return st;
    char ra[128], rb[128];
    list_ranks(ra, sizeof ra, a, na, a_more);
    list_ranks(rb, sizeof rb, b, nb, b_more);
    if (b_mixed) /* whose value is shown */
        snprintf(out, size, "%s: '%s' on %s; other values on %s (rank %d: '%s')", key, va, ra, rb,
                 (int)b[0], vb);
    else
        snprintf(out, size, "%s: '%s' on %s; '%s' on %s", key, va, ra, vb, rb);
    return RESHARD_OK;
}

reshard_status_t reshard_comm_agree_values(reshard_comm_t *comm, int32_t n, const char *const *keys,
                                           const char *const *values, double timeout_s)
{
    rs_error_clear();
    if (!comm || n < 0 || n > MAX_KEYS || (n && (!keys || !values)))
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_agree_values: needs a comm and 0..%d keys with values (got "
                        "%d)",
                        MAX_KEYS, (int)n);
    for (int32_t k = 0; k < n; k++)
        if (!keys[k] || !values[k])
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "reshard_comm_agree_values: rank %d: key %d or its value is NULL",
                            comm->rank, (int)k);
    if (comm->broken)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "reshard_comm_agree_values: rank %d: this comm ended an earlier execution "
                        "with a timeout or a transport error; destroy it (or shrink it)",
                        comm->rank);
    if (!(timeout_s > 0))
        timeout_s = RESHARD_DEFAULT_TIMEOUT_S;
    if (rs_comm_enter(comm, "reshard_comm_agree_values") != RESHARD_OK)
        return RESHARD_ERR_INVALID_ARG;
    /* everything at once: the hash of all keys and values (64 bits as two halves), n */
    uint64_t all = 0x6167726565ULL;
    for (int32_t k = 0; k < n; k++)
        all = all * 0x100000001b3ULL ^ rs_delta_hash(keys[k], strlen(keys[k])) ^
              (rs_delta_hash(values[k], strlen(values[k])) << 1);
    uint32_t h[3] = {(uint32_t)(all >> 32), (uint32_t)all, (uint32_t)n};
    bool d[3] = {false};
    uint32_t least[3];
    reshard_status_t st = differ3(comm, h, 3, timeout_s, d, least);
    if (st == RESHARD_OK && d[2])
        st = rs_error(RESHARD_ERR_MISMATCH,
                      "rank %d: the ranks gave different numbers of values (this rank %d): they "
                      "run different versions of the caller",
                      comm->rank, (int)n);
    else if (st == RESHARD_OK && (d[0] || d[1])) {
        char msg[1536];
        size_t at = (size_t)snprintf(msg, sizeof msg,
                                     "rank %d: the ranks were given different inputs (nothing was "
                                     "planned): ",
                                     comm->rank);
        int shown = 0, differing = 0;
        for (int32_t k0 = 0; st == RESHARD_OK && k0 < n; k0 += 3) {
            int nv = n - k0 < 3 ? (int)(n - k0) : 3;
            uint32_t hv[3];
            bool dv[3] = {false};
            for (int i = 0; i < nv; i++)
                hv[i] = h32_of(values[k0 + i]);
            st = differ3(comm, hv, nv, timeout_s, dv, least);
            for (int i = 0; st == RESHARD_OK && i < nv; i++) {
                if (!dv[i])
                    continue;
                differing++;
                if (shown == SHOWN_KEYS)
                    continue;
                char one[512];
                st = describe_key(comm, keys[k0 + i], values[k0 + i], timeout_s, one, sizeof one);
                if (st == RESHARD_OK && at < sizeof msg)
                    at +=
                        (size_t)snprintf(msg + at, sizeof msg - at, "%s%s", shown ? "; " : "", one);
                shown++;
            }
        }
        if (st == RESHARD_OK && differing > shown && at < sizeof msg)
            snprintf(msg + at, sizeof msg - at, "; and %d more", differing - shown);
        else if (st == RESHARD_OK && !differing && at < sizeof msg)
            snprintf(msg + at, sizeof msg - at, "the keys' order or names differ");
        if (st == RESHARD_OK)
            st = rs_error(RESHARD_ERR_MISMATCH, "%s", msg);
    }
    rs_comm_leave(comm);
    return st;
}
