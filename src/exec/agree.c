/* The first agreement of an execution (see agree.h) and reshard_plan_fail.
 *
 * The transport reduces RS_AGREE_WORDS words by MIN over all ranks:
 *   [0] rank * 64 - status of a rank whose plan failed (lowest such rank)
 *   [1] rank of a rank whose local check failed (lowest)
 *   [2] [3] the high 32 bits of the fingerprint, least and greatest, each
 *           with the lowest rank holding it: (v << 31 | rank) and
 *           ((2^32 - 1 - v) << 31 | rank)
 *   [4] [5] the same for the low 32 bits
 * A rank without a word to give gives INT64_MAX. Two fingerprints differ
 * exactly when one of their halves differs, and then the least and greatest
 * of that half differ too, each naming a rank that holds it. */
#include <stdio.h>

#include "exec/agree.h"
#include "util/error.h"

enum { W_PLAN_FAILED, W_FAILED, W_HI_MIN, W_HI_MAX, W_LO_MIN, W_LO_MAX };

#define RS_RANK_MASK ((int64_t)0x7fffffff)

static void fp_words(int64_t *w, uint64_t fp, int32_t rank)
{
    int64_t hi = (int64_t)(fp >> 32), lo = (int64_t)(fp & 0xffffffffu), max = 0xffffffff;
    w[W_HI_MIN] = hi << 31 | rank;
    w[W_HI_MAX] = (max - hi) << 31 | rank;
    w[W_LO_MIN] = lo << 31 | rank;
    w[W_LO_MAX] = (max - lo) << 31 | rank;
}

/* When the fingerprints differ: two ranks whose fingerprints differ. */
static bool fp_differ(const int64_t *m, int32_t *a, int32_t *b)
{
    for (int k = W_HI_MIN; k <= W_LO_MIN; k += 2) {
        if (m[k] == INT64_MAX)
            return false; /* no rank planned */
        int64_t least = m[k] >> 31, most = 0xffffffff - (m[k + 1] >> 31);
        if (least != most) {
            *a = (int32_t)(m[k] & RS_RANK_MASK);
            *b = (int32_t)(m[k + 1] & RS_RANK_MASK);
            return true;
        }
    }
    return false;
}

/* This rank's words, the transport's agreement, the minima in @p m. */
static reshard_status_t agree(reshard_comm_t *comm, reshard_status_t local, bool planned,
                              uint64_t fingerprint, double timeout_s, int64_t *m)
{
    int32_t me = comm->rank;
    int64_t w[RS_AGREE_WORDS];
    for (int i = 0; i < RS_AGREE_WORDS; i++)
        w[i] = m[i] = INT64_MAX;
    if (!planned)
        w[W_PLAN_FAILED] = (int64_t)me * 64 - (int64_t)local;
    if (local != RESHARD_OK)
        w[W_FAILED] = me;
    if (planned)
        fp_words(w, fingerprint, me);
    return comm->ops->finish(comm, local, w, m, timeout_s);
}

reshard_status_t rs_agree_preflight(reshard_comm_t *comm, reshard_status_t local, bool planned,
                                    uint64_t fingerprint, double timeout_s)
{
    int32_t me = comm->rank;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", reshard_last_error());
    int64_t m[RS_AGREE_WORDS];
    reshard_status_t agreed = agree(comm, local, planned, fingerprint, timeout_s, m);
    if (m[W_FAILED] == INT64_MAX && agreed != RESHARD_OK) /* the agreement itself failed */
        return local != RESHARD_OK ? rs_error(local, "%s", msg) : agreed;
    if (m[W_PLAN_FAILED] != INT64_MAX) {
        int32_t who = (int32_t)(m[W_PLAN_FAILED] / 64);
        reshard_status_t st = (reshard_status_t)(-(m[W_PLAN_FAILED] % 64));
        if (who == me)
            return rs_error(st, "%s", msg);
        return rs_error(
            st,
            "rank %d: rank %d could not create its plan or bind its buffers (%s); nothing was sent",
            me, who, reshard_status_string(st));
    }
    int32_t a, b;
    if (fp_differ(m, &a, &b)) {
        int32_t lo = a < b ? a : b, hi = a < b ? b : a;
        return rs_error(RESHARD_ERR_MISMATCH,
                        "rank %d: ranks %d and %d planned from different inputs (their plan "
                        "fingerprints differ: catalogue, layouts, declared buffers or params; "
                        "either may be the odd one); nothing was sent%s%s",
                        me, lo, hi, local != RESHARD_OK ? "; this rank also: " : "",
                        local != RESHARD_OK ? msg : "");
    }
    if (local != RESHARD_OK)
        return rs_error(local, "%s", msg);
    if (agreed != RESHARD_OK) {
        int32_t who = m[W_FAILED] == INT64_MAX ? -1 : (int32_t)m[W_FAILED];
        return rs_error(agreed, "rank %d: rank %d rejected its buffers (%s); nothing was sent", me,
                        who, reshard_status_string(agreed));
    }
    return RESHARD_OK;
}

reshard_status_t reshard_plan_fail(reshard_comm_t *comm, reshard_status_t status, double timeout_s)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", reshard_last_error());
    rs_error_clear();
    if (!comm || status >= RESHARD_OK || status <= -64)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_fail: needs a comm and a failed status (got %d)",
                        (int)status);
    if (comm->broken)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "reshard_plan_fail: rank %d: this comm ended an earlier execution with a "
                        "timeout or a transport error; destroy it (or shrink it)",
                        comm->rank);
    if (!(timeout_s > 0))
        timeout_s = RESHARD_DEFAULT_TIMEOUT_S;
    if (rs_comm_enter(comm, "reshard_plan_fail") != RESHARD_OK)
        return RESHARD_ERR_INVALID_ARG;
    rs_error(status, "%s", msg); /* the transport keeps it as this rank's reason */
    int64_t m[RS_AGREE_WORDS];
    reshard_status_t agreed = agree(comm, status, false, 0, timeout_s, m);
    rs_comm_leave(comm);
    if (m[W_PLAN_FAILED] == INT64_MAX)
        return agreed; /* the agreement itself failed */
    rs_error_clear();  /* every peer was told */
    return RESHARD_OK;
}
