/* The first agreement of an execution (see agree.h) and reshard_plan_fail.
 *
 * The transport reduces RESHARD_AGREE_WORDS words by MIN over all ranks:
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
#include <string.h>

#include "exec/agree.h"
#include "exec/agree_text.h"
#include "layout/layout_internal.h" /* rs_hash_mix */
#include "plan/plan_internal.h"
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
    int64_t w[RESHARD_AGREE_WORDS];
    for (int i = 0; i < RESHARD_AGREE_WORDS; i++)
        w[i] = m[i] = INT64_MAX;
    if (!planned)
        w[W_PLAN_FAILED] = (int64_t)me * 64 - (int64_t)local;
    if (local != RESHARD_OK)
        w[W_FAILED] = me;
    if (planned)
        fp_words(w, fingerprint, me);
    return comm->ops->finish(comm, local, w, m, timeout_s);
}

/* ---- what differs, once the fingerprints do ------------------------------------------- */

static uint32_t h32(uint64_t h)
{
    return (uint32_t)(h ^ (h >> 32));
}

/* One agreement comparing up to 3 values across all ranks: differ[k] when two ranks'
 * v[k] differ. Every rank calls it with the same nv. */
static reshard_status_t compare(reshard_comm_t *comm, const uint64_t *v, int nv, double timeout_s,
                                bool *differ)
{
    int64_t w[RESHARD_AGREE_WORDS], m[RESHARD_AGREE_WORDS], max = 0xffffffff;
    for (int i = 0; i < RESHARD_AGREE_WORDS; i++)
        w[i] = m[i] = INT64_MAX;
    for (int k = 0; k < nv; k++) {
        w[2 * k] = (int64_t)h32(v[k]);
        w[2 * k + 1] = max - (int64_t)h32(v[k]);
    }
    reshard_status_t st = comm->ops->finish(comm, RESHARD_OK, w, m, timeout_s);
    for (int k = 0; st == RESHARD_OK && k < nv; k++)
        differ[k] = m[2 * k] != max - m[2 * k + 1];
    return st;
}

/* Hash of the first @p k tensors' entries (rs_fingerprint_tensors). */
static uint64_t tensors_prefix(const reshard_plan_t *plan, int32_t k)
{
    uint64_t h = 0x7072656669780aULL;
    for (int32_t i = 0; i < k && i < plan->fp_ntensors; i++)
        h = rs_hash_mix(h, plan->fp_tensor[i]);
    return h;
}

/* The plan parameters fingerprint.c hashes, grouped as the caller names them. */
static const char *const param_names[6] = {
    "world_size/domain_size", "staging_bytes",       "relay_bytes", "timeout_s",
    "host/device/colocated",  "delta/delta_checksum"};

static void param_values(const reshard_plan_params_t *p, uint64_t v[6])
{
    bool placed = (p->field_mask & RESHARD_PLAN_PARAM_PLACEMENT) && p->host;
    v[0] = ((uint64_t)(uint32_t)p->world_size << 32) | (uint32_t)p->domain_size;
    v[1] = p->staging_bytes;
    v[2] = p->relay_bytes;
    memcpy(&v[3], &p->timeout_s, sizeof v[3]);
    uint64_t h = ((uint64_t)placed << 1) | (uint64_t)(p->colocated != 0);
    for (int32_t r = 0; placed && r < p->world_size; r++)
        h = rs_hash_mix(h, ((uint64_t)(uint32_t)p->host[r] << 32) |
                               (uint32_t)(p->device ? p->device[r] : -1));
    v[4] = h;
    v[5] = ((uint64_t)(p->delta != 0) << 1) | (uint64_t)(p->delta_checksum != 0);
}

/* The params that differ between ranks, as ": a, b" into @p out (its length; 0 when an
 * agreement failed or none was found). Two agreements, on every rank. */
static size_t param_detail(reshard_comm_t *comm, const reshard_plan_t *plan, double timeout_s,
                           char *out, size_t size)
{
    uint64_t v[6];
    bool d[6] = {false};
    param_values(&plan->p, v);
    if (compare(comm, v, 3, timeout_s, d) != RESHARD_OK ||
        compare(comm, v + 3, 3, timeout_s, d + 3) != RESHARD_OK)
        return 0;
    size_t n = 0;
    for (int k = 0, listed = 0; k < 6; k++)
        if (d[k])
            n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s%s", listed++ ? ", " : ": ",
                                  param_names[k]);
    return n < size ? n : size ? size - 1 : 0;
}

/* Every rank, its plan's fingerprint differing from another's: a few more agreements
 * find which parts of the inputs differ and the first tensor where they do; written
 * into @p out ("" when an agreement failed). */
static void mismatch_detail(reshard_comm_t *comm, const reshard_plan_t *plan, double timeout_s,
                            char *out, size_t size)
{
    static const char *names[RS_FP_PARTS] = {"the catalogue", "the layouts", "the declared buffers",
                                             "the params"};
    bool d[RS_FP_PARTS + 1] = {false};
    out[0] = '\0';
    if (compare(comm, plan->fp_part, 3, timeout_s, d) != RESHARD_OK)
        return;
    /* the params, and the tensor count as [n, -n] (min and max) */
    int64_t w[RESHARD_AGREE_WORDS], m[RESHARD_AGREE_WORDS];
    for (int i = 0; i < RESHARD_AGREE_WORDS; i++)
        w[i] = m[i] = INT64_MAX;
    w[0] = (int64_t)h32(plan->fp_part[RS_FP_PARAMS]);
    w[1] = 0xffffffff - w[0];
    w[2] = plan->fp_ntensors;
    w[3] = -(int64_t)plan->fp_ntensors;
    if (comm->ops->finish(comm, RESHARD_OK, w, m, timeout_s) != RESHARD_OK)
        return;
    d[RS_FP_PARAMS] = m[0] != 0xffffffff - m[1];
    int32_t n_min = (int32_t)m[2];
    bool n_differ = m[2] != -m[3];
    size_t n = (size_t)snprintf(out, size, " (");
    int listed = 0;
    for (int k = 0; k < RS_FP_PARTS; k++)
        if (d[k])
            n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s%s", listed++ ? ", " : "",
                                  names[k]);
    if (!listed) {
        out[0] = '\0';
        return;
    }
    n += (size_t)snprintf(out + n, n < size ? size - n : 0, " differ");
    if (d[RS_FP_PARAMS]) /* which of them: two more agreements, the same on every rank */
        n += param_detail(comm, plan, timeout_s, out + n, n < size ? size - n : 0);
    int32_t first = -1;
    if (d[RS_FP_CATALOGUE] || d[RS_FP_LAYOUTS]) {
        /* the shortest prefix of the catalogue whose tensors differ: a binary search,
         * one agreement a step, the same steps on every rank */
        uint64_t v = tensors_prefix(plan, n_min);
        bool dv = false;
        if (compare(comm, &v, 1, timeout_s, &dv) != RESHARD_OK)
            return;
        int32_t lo = 0, hi = n_min;
        if (dv) {
            while (hi - lo > 1) {
                int32_t mid = lo + (hi - lo) / 2;
                v = tensors_prefix(plan, mid);
                if (compare(comm, &v, 1, timeout_s, &dv) != RESHARD_OK)
                    return;
                *(dv ? &hi : &lo) = mid;
            }
            first = hi - 1;
        } else if (n_differ) {
            first = n_min; /* the first tensor some rank has and another has not */
        }
    }
    if (first >= 0) {
        const reshard_tensors_t *ts = plan->src->tensors;
        n += (size_t)snprintf(out + n, n < size ? size - n : 0,
                              "; the first tensor where they do: %d ('%s' on this rank)",
                              (int)first, first < ts->n ? ts->t[first].name : "none");
    }
    snprintf(out + n, n < size ? size - n : 0, ")");
}

/* Every rank's plan was made from the same inputs, but ranks @p lo and @p hi execute
 * different plans of them (plan/identity.c): the error, naming this rank's plan. */
static reshard_status_t identity_mismatch(const reshard_plan_t *plan, int32_t me, int32_t lo,
                                          int32_t hi, int32_t ordinal)
{
    char mine[320];
    const char *retired = rs_identity_retired(plan);
    if (ordinal < 0)
        snprintf(mine, sizeof mine, "the plan named '%s'", plan->id_name);
    else
        snprintf(mine, sizeof mine,
                 "its thread's unnamed plan number %d of these inputs (the smallest "
                 "number no other unnamed, not retired plan of them held when it was made)",
                 (int)ordinal);
    if (retired)
        snprintf(mine + strlen(mine), sizeof mine - strlen(mine),
                 ", retired (%s: it pairs only with the same retired plan)", retired);
    return rs_error(RESHARD_ERR_MISMATCH,
                    "rank %d: ranks %d and %d execute different plans made from the same inputs; "
                    "nothing was sent (plans of equal inputs pair by name, "
                    "reshard_plan_set_name / Plan(name=...), else by the order a thread of "
                    "each rank created them: these ranks created or executed them in another "
                    "order, or one of them retired it and the others did not; name them, "
                    "and close plans not executed again, Plan.close(); this rank executes "
                    "%s)",
                    me, lo, hi, mine);
}

/* The first problem of rank @p who (its message @p msg there, up to RS_AGREE_TEXT_MAX
 * bytes, "..." where cut) into @p out on every rank: every rank calls it when the
 * agreement named @p who. "" when that failed (bounded by @p timeout_s). */
static void culprit_text(reshard_comm_t *comm, int32_t who, const char *msg, char *out, size_t size,
                         double timeout_s)
{
    char cut[RS_AGREE_TEXT_MAX + 1];
    size_t n = strlen(msg);
    if (n > RS_AGREE_TEXT_MAX)
        snprintf(cut, sizeof cut, "%.*s...", RS_AGREE_TEXT_MAX - 3, msg);
    else
        snprintf(cut, sizeof cut, "%s", msg);
    if (rs_agree_text(comm, who, cut, out, size, timeout_s) != RESHARD_OK)
        out[0] = '\0';
}

reshard_status_t rs_agree_preflight(reshard_comm_t *comm, reshard_status_t local,
                                    const reshard_plan_t *plan, double timeout_s)
{
    int32_t me = comm->rank;
    bool planned = plan != NULL;
    /* the inputs, and which of the rank's plans of those inputs it is (plan/identity.c) */
    int32_t ordinal = -1;
    uint64_t fingerprint =
        planned ? rs_hash_mix(plan->fingerprint, rs_identity(plan, &ordinal)) : 0;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", reshard_last_error());
    int64_t m[RESHARD_AGREE_WORDS];
    reshard_status_t agreed = agree(comm, local, planned, fingerprint, timeout_s, m);
    if (m[W_FAILED] == INT64_MAX && agreed != RESHARD_OK) /* the agreement itself failed */
        return local != RESHARD_OK ? rs_error(local, "%s", msg) : agreed;
    if (m[W_PLAN_FAILED] != INT64_MAX) {
        int32_t who = (int32_t)(m[W_PLAN_FAILED] / 64);
        reshard_status_t st = (reshard_status_t)(-(m[W_PLAN_FAILED] % 64));
        char first[RS_AGREE_TEXT_MAX + 1];
        culprit_text(comm, who, msg, first, sizeof first, timeout_s);
        if (who == me)
            return rs_error(st, "%s", msg);
        return rs_error(st,
                        "rank %d: rank %d could not create its plan or bind its buffers (%s%s%s); "
                        "nothing was sent",
                        me, who, reshard_status_string(st), first[0] ? ": " : "", first);
    }
    int32_t a, b;
    if (fp_differ(m, &a, &b)) {
        int32_t lo = a < b ? a : b, hi = a < b ? b : a;
        bool inputs_differ = true;
        uint64_t inputs = plan->fingerprint;
        if (compare(comm, &inputs, 1, timeout_s, &inputs_differ) == RESHARD_OK && !inputs_differ)
            return identity_mismatch(plan, me, lo, hi, ordinal);
        char what[512];
        mismatch_detail(comm, plan, timeout_s, what, sizeof what);
        return rs_error(RESHARD_ERR_MISMATCH,
                        "rank %d: ranks %d and %d planned from different inputs%s; nothing was "
                        "sent%s%s",
                        me, lo, hi,
                        what[0] ? what
                                : " (their plan fingerprints differ: catalogue, layouts, "
                                  "declared buffers or params; either may be the odd one)",
                        local != RESHARD_OK ? "; this rank also: " : "",
                        local != RESHARD_OK ? msg : "");
    }
    char first[RS_AGREE_TEXT_MAX + 1] = "";
    if (m[W_FAILED] != INT64_MAX)
        culprit_text(comm, (int32_t)m[W_FAILED], msg, first, sizeof first, timeout_s);
    if (local != RESHARD_OK)
        return rs_error(local, "%s", msg);
    if (agreed != RESHARD_OK) {
        int32_t who = m[W_FAILED] == INT64_MAX ? -1 : (int32_t)m[W_FAILED];
        return rs_error(agreed, "rank %d: rank %d rejected its buffers (%s%s%s); nothing was sent",
                        me, who, reshard_status_string(agreed), first[0] ? ": " : "", first);
    }
    return RESHARD_OK;
}

reshard_status_t reshard_plan_fail(reshard_comm_t *comm, reshard_status_t status, double timeout_s)
{
    return reshard_plan_fail_reason(comm, status, NULL, timeout_s);
}

reshard_status_t reshard_plan_fail_reason(reshard_comm_t *comm, reshard_status_t status,
                                          const char *reason, double timeout_s)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", reason ? reason : reshard_last_error());
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
    int64_t m[RESHARD_AGREE_WORDS];
    reshard_status_t agreed = agree(comm, status, false, 0, timeout_s, m);
    if (m[W_PLAN_FAILED] != INT64_MAX) { /* the first problem of the rank the peers name */
        char first[RS_AGREE_TEXT_MAX + 1];
        culprit_text(comm, (int32_t)(m[W_PLAN_FAILED] / 64), msg, first, sizeof first, timeout_s);
    }
    rs_comm_leave(comm);
    if (m[W_PLAN_FAILED] == INT64_MAX)
        return agreed; /* the agreement itself failed */
    rs_error_clear();  /* every peer was told */
    return RESHARD_OK;
}
