/* Domains and (destination domain, tensor) groups: the units every planning
 * decision is made in, the rules that size and order a group's choices, and
 * the groups a plan computes (its scope). Below the steps of planning and the
 * plan itself: it knows the params and the layouts only. */
#ifndef RS_PLAN_SCOPE_H
#define RS_PLAN_SCOPE_H

#include "layout/layout_internal.h"

/** Domain of a rank under the plan's params. */
static inline int32_t rs_domain_of(const reshard_plan_params_t *p, int32_t rank)
{
    return p->domain_size > 1 ? rank / p->domain_size : rank;
}

/** Number of domains of @p world ranks under the plan's params. */
static inline int32_t rs_domain_count(const reshard_plan_params_t *p)
{
    return p->domain_size > 1 ? (p->world_size + p->domain_size - 1) / p->domain_size
                              : p->world_size;
}

/** Ranks in domain @p domain (the last domain may be short). */
static inline int32_t rs_domain_ranks(const reshard_plan_params_t *p, int32_t domain)
{
    if (p->domain_size <= 1)
        return 1;
    int64_t lo = (int64_t)domain * p->domain_size, hi = lo + p->domain_size;
    if (hi > p->world_size)
        hi = p->world_size;
    return hi > lo ? (int32_t)(hi - lo) : 0;
}

/** Start of the tie-break rotation of the group (@p domain, @p tensor) over
 *  @p n candidates: consecutive domains continue where the previous one's
 *  @p per_group choices ended, and tensors are staggered, so equal choices
 *  spread over replicas without any load shared between groups. */
static inline int32_t rs_group_rotation(int32_t domain, int32_t tensor, int64_t per_group,
                                        int32_t n)
{
    if (n <= 1)
        return 0;
    uint64_t k = (uint64_t)domain * (uint64_t)(per_group > 0 ? per_group : 1) + (uint64_t)tensor;
    return (int32_t)(k % (uint64_t)n);
}

/* Smallest unit worth striping, and the stripe size relative to a group's
 * per-rank share of its unique bytes. */
#define RS_STRIPE_MIN_BYTES ((uint64_t)64 << 10)
#define RS_STRIPE_PER_SHARE 64

/** Stripe size of a (domain, tensor) group of @p total unique network bytes
 *  over a domain of @p R ranks: units above it are striped, and a rank
 *  relays while it lands more than the group's share plus a quarter of it. */
static inline uint64_t rs_group_stripe_bytes(uint64_t total, int32_t R)
{
    uint64_t thr = total / (uint64_t)(R > 0 ? R : 1) / RS_STRIPE_PER_SHARE;
    return thr < RS_STRIPE_MIN_BYTES ? RS_STRIPE_MIN_BYTES : thr;
}

/** Most bytes a rank of such a group lands before it relays some to a domain
 *  peer: the group's per-rank share plus a quarter of its stripe size. */
static inline uint64_t rs_group_relay_limit(uint64_t total, int32_t R)
{
    uint64_t r = (uint64_t)(R > 0 ? R : 1);
    return (total + r - 1) / r + rs_group_stripe_bytes(total, R) / 4;
}

/** True when no two of the fragments l->f[idx[0..n)] (one tensor's) share
 *  an element: a sweep along dim 0 compares only fragments whose dim-0
 *  ranges meet. -1 when out of memory. */
int rs_frags_disjoint(const reshard_layout_t *l, const int64_t *idx, int64_t n);

/** End of the run of destination fragments dst->f[df[a..)] on ranks of one
 *  domain (*@p domain): a tensor's fragments come a domain at a time. */
static inline int64_t rs_domain_run(const reshard_plan_params_t *p, const reshard_layout_t *dst,
                                    const int64_t *df, int64_t n, int64_t a, int32_t *domain)
{
    int32_t d = rs_domain_of(p, dst->f[df[a]].rank);
    int64_t b = a + 1;
    while (b < n && rs_domain_of(p, dst->f[df[b]].rank) == d)
        b++;
    *domain = d;
    return b;
}

/** True when the destination fragments dst->f[df[0..n)] (one domain's, of
 *  one tensor) are pairwise disjoint and none of the domain's ranks gets
 *  more than the group's relay limit (rs_group_relay_limit): the group's
 *  topology step then lands each cell on its one needer, relaying and
 *  striping nothing. @p load is scratch of the domain's rank count, zeroed
 *  (and left so). */
bool rs_group_lands_whole(const reshard_plan_params_t *p, const reshard_layout_t *dst,
                          int32_t domain, const int64_t *df, int64_t n, uint64_t *load);

/** Which (destination domain, tensor) groups a plan computes. Every decision
 *  of planning is made inside one group from that group's fragments alone,
 *  so a rank's own plan needs only the groups it takes part in: its own
 *  domain's (it receives, forwards or relays there) and, for every tensor it
 *  holds as a source, that tensor's groups in every domain (it may send
 *  there). Of the latter, a group whose choices cannot reach the rank's
 *  pieces except through the cells the rank holds is computed on those
 *  cells alone (RS_SCOPE_SENDS, see rs_scope_build). */
enum { RS_SCOPE_OUT = 0, RS_SCOPE_ALL = 1, RS_SCOPE_SENDS = 2 };

typedef struct {
    int32_t rank; /**< RESHARD_ALL_RANKS: every group */
    int32_t ndomains, ntensors;
    uint8_t *in;   /**< ndomains x ntensors RS_SCOPE_*; NULL for every group, whole */
    uint8_t *sole; /**< per tensor, for RS_SCOPE_SENDS groups: 1 when no two source
                        fragments of it share an element (NULL: none known) */
    uint8_t *any;  /**< per tensor: 1 when some computed group of it has a
                        destination fragment (NULL: every tensor) */
} rs_scope_t;

/** The groups a plan of @p p (p->my_rank's, or all) computes from the
 *  layouts @p src and @p dst: fills @p s.
 *  A group (D, t) of a rank R's own plan is RS_SCOPE_SENDS when R is outside
 *  D and only sends there, and the group's choices for R's cells are fixed
 *  by R's cells alone: no rank of D holds elements of t (every cell crosses
 *  the network); the fragments of t in D are disjoint (each cell is a unit
 *  that lands on its one needer: nothing is striped or forwarded); no rank
 *  of D lands more than rs_group_relay_limit of the group's bytes (nothing
 *  is relayed); and no two source fragments of t share an element (every
 *  cell has one holder, hence its sender: with replicas, senders are chosen
 *  over all of a tensor's groups, and every group of it is computed). */
reshard_status_t rs_scope_build(const reshard_plan_params_t *p, const reshard_layout_t *src,
                                const reshard_layout_t *dst, rs_scope_t *s);
void rs_scope_free(rs_scope_t *s);

/** True when the group (@p domain, @p tensor) is computed. */
static inline bool rs_scope_has(const rs_scope_t *s, int32_t domain, int32_t tensor)
{
    return !s->in || s->in[(int64_t)domain * s->ntensors + tensor] != RS_SCOPE_OUT;
}

/** False when no computed group of @p tensor has a destination fragment:
 *  planning the tensor makes no cell (a rank's own plan, a tensor it does
 *  not hold and its domain does not need), so it is skipped whole. */
static inline bool rs_scope_tensor(const rs_scope_t *s, int32_t tensor)
{
    return !s->any || s->any[tensor];
}

/** True when the group (@p domain, @p tensor) is computed on the cells
 *  s->rank holds only (RS_SCOPE_SENDS). */
static inline bool rs_scope_sends_only(const rs_scope_t *s, int32_t domain, int32_t tensor)
{
    return s->in && s->in[(int64_t)domain * s->ntensors + tensor] == RS_SCOPE_SENDS;
}

#endif
