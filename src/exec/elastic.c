/*
 * Elastic refit on any transport (reshard_elastic.h): the view comm that maps
 * plan ranks to the ranks of a membership's communicator, the lost peers a
 * rank found, the agreement of the survivors on who is gone, and the
 * in-process shrink.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/delta_dev_ops.h"
#include "exec/elastic.h"
#include "util/error.h"
#include "util/timeout.h"

/* ---- the view ------------------------------------------------------------ */

typedef struct {
    reshard_comm_t *inner;
    int32_t *to_inner; /* plan world: inner rank or -1 */
    int32_t *to_plan;  /* inner size: plan rank */
    reshard_transport_ops_t ops;
    rs_delta_dev_ops_t dops; /* the inner's delta codec through the view (when it has one) */
} rs_view_t;

static rs_view_t *vw(const reshard_comm_t *c)
{
    return (rs_view_t *)c->impl;
}

static reshard_status_t peer_of(reshard_comm_t *c, int32_t peer, int32_t *inner)
{
    rs_view_t *v = vw(c);
    if (peer < 0 || peer >= c->size || v->to_inner[peer] < 0)
        return rs_error(RESHARD_ERR_RANK,
                        "rank %d: the plan moves bytes to or from rank %d, which is not a member "
                        "of this comm (replan with reshard_membership_layouts)",
                        c->rank, peer);
    *inner = v->to_inner[peer];
    return RESHARD_OK;
}

static reshard_status_t v_alloc(reshard_comm_t *c, uint64_t bytes, void **out)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->alloc_staging(in, bytes, out);
}

static void v_free(reshard_comm_t *c, void *p)
{
    reshard_comm_t *in = vw(c)->inner;
    in->ops->free_staging(in, p);
}

static reshard_status_t v_begin(reshard_comm_t *c, int slot)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->round_begin(in, slot);
}

static reshard_status_t v_send(reshard_comm_t *c, int slot, int32_t peer, const void *buf,
                               uint64_t bytes)
{
    reshard_comm_t *in = vw(c)->inner;
    int32_t p = -1;
    reshard_status_t st = peer_of(c, peer, &p);
    return st != RESHARD_OK ? st : in->ops->post_send(in, slot, p, buf, bytes);
}

static reshard_status_t v_recv(reshard_comm_t *c, int slot, int32_t peer, void *buf, uint64_t bytes)
{
    reshard_comm_t *in = vw(c)->inner;
    int32_t p = -1;
    reshard_status_t st = peer_of(c, peer, &p);
    return st != RESHARD_OK ? st : in->ops->post_recv(in, slot, p, buf, bytes);
}

static reshard_status_t v_end(reshard_comm_t *c, int slot)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->round_end(in, slot);
}

static reshard_status_t v_wait(reshard_comm_t *c, int slot, double timeout_s)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->round_wait(in, slot, timeout_s);
}

static reshard_status_t v_pack(reshard_comm_t *c, void *out, const void *buf,
                               const reshard_span_t *s)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->pack(in, out, buf, s);
}

static reshard_status_t v_unpack(reshard_comm_t *c, void *buf, const void *inb,
                                 const reshard_span_t *s)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->unpack(in, buf, inb, s);
}

static reshard_status_t v_copy(reshard_comm_t *c, void *dst, const reshard_fragment_t *df,
                               const void *src, const reshard_fragment_t *sf,
                               const reshard_box_t *box, uint32_t elem_size)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->local_copy(in, dst, df, src, sf, box, elem_size);
}

static reshard_status_t v_quantize(reshard_comm_t *c, const struct reshard_quant_rule *q, void *dst,
                                   const reshard_fragment_t *df, void *scale,
                                   const reshard_fragment_t *scf, const void *src,
                                   const reshard_fragment_t *sf, const reshard_box_t *box)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->quantize(in, q, dst, df, scale, scf, src, sf, box);
}

static reshard_status_t v_finish(reshard_comm_t *c, reshard_status_t local, const int64_t *words,
                                 int64_t *min_words, double timeout_s)
{
    reshard_comm_t *in = vw(c)->inner;
    return in->ops->finish(in, local, words, min_words, timeout_s);
}

static void v_unresponsive(const reshard_comm_t *c, unsigned char *flags)
{
    const rs_view_t *v = vw(c);
    for (int32_t p = 0; p < c->size; p++)
        if (v->to_inner[p] < 0)
            flags[p] = 1;
    if (!v->inner->ops->unresponsive)
        return;
    unsigned char *f = calloc((size_t)v->inner->size, 1);
    if (!f)
        return;
    v->inner->ops->unresponsive(v->inner, f);
    for (int32_t q = 0; q < v->inner->size; q++)
        if (f[q])
            flags[v->to_plan[q]] = 1;
    free(f);
}

static reshard_status_t v_exchange(reshard_comm_t *c, int round, const int32_t *peers, int32_t n,
                                   int32_t n_need, const void *msg, uint64_t bytes, void *recv,
                                   unsigned char *got, double deadline)
{
    reshard_comm_t *in = vw(c)->inner;
    int32_t *q = malloc((size_t)(n ? n : 1) * sizeof *q);
    if (!q)
        return rs_error(RESHARD_ERR_NOMEM, "rank %d: out of memory in the agreement", c->rank);
    reshard_status_t st = RESHARD_OK;
    for (int32_t i = 0; i < n && st == RESHARD_OK; i++)
        st = peer_of(c, peers[i], &q[i]);
    if (st == RESHARD_OK)
        st = in->ops->agree_exchange(in, round, q, n, n_need, msg, bytes, recv, got, deadline);
    free(q);
    return st;
}

/* The inner endpoint's delta codec on device memory (exec/delta_dev_ops.h), through the
 * view: every operation runs on the inner endpoint (its stream, its kernel scratch). */
static const rs_delta_dev_ops_t *vd(const reshard_comm_t *c)
{
    return vw(c)->inner->delta_dev;
}

static reshard_status_t vd_alloc(reshard_comm_t *c, uint64_t bytes, void **out)
{
    return vd(c)->alloc(vw(c)->inner, bytes, out);
}

static reshard_status_t vd_copy(reshard_comm_t *c, void *dst, const void *src, uint64_t bytes,
                                rs_dd_dir_t dir)
{
    return vd(c)->copy(vw(c)->inner, dst, src, bytes, dir);
}

static reshard_status_t vd_zero(reshard_comm_t *c, void *dst, uint64_t bytes)
{
    return vd(c)->zero(vw(c)->inner, dst, bytes);
}

static reshard_status_t vd_encode(reshard_comm_t *c, const void *cur, void *prev, uint64_t len,
                                  uint32_t word, void *out, void *changed)
{
    return vd(c)->encode(vw(c)->inner, cur, prev, len, word, out, changed);
}

static reshard_status_t vd_hash_msg(reshard_comm_t *c, const void *chunk, uint64_t len,
                                    const void *header, void *out)
{
    return vd(c)->hash_msg(vw(c)->inner, chunk, len, header, out);
}

static reshard_status_t vd_apply(reshard_comm_t *c, const void *in, const rs_delta_header_t *h,
                                 void *chunk, uint64_t len, bool hash, void *rec)
{
    return vd(c)->apply(vw(c)->inner, in, h, chunk, len, hash, rec);
}

static void v_destroy(reshard_comm_t *c)
{
    rs_view_t *v = vw(c);
    if (!v)
        return;
    reshard_comm_destroy(v->inner);
    free(v->to_inner);
    free(v->to_plan);
    free(v);
    c->impl = NULL;
}

bool rs_comm_is_view(const reshard_comm_t *c)
{
    return c && c->ops && c->ops->destroy == v_destroy;
}

const reshard_comm_t *rs_view_inner(const reshard_comm_t *c)
{
    return rs_comm_is_view(c) ? vw(c)->inner : NULL;
}

reshard_comm_t *rs_comm_inner(reshard_comm_t *c, const int32_t **to_inner)
{
    if (rs_comm_is_view(c)) {
        *to_inner = vw(c)->to_inner;
        return vw(c)->inner;
    }
    *to_inner = NULL;
    return c;
}

reshard_status_t reshard_comm_create_view(reshard_comm_t *inner, int32_t world_size,
                                          const int32_t *rank_map, reshard_comm_t **out)
{
    rs_error_clear();
    if (!inner || !rank_map || !out || world_size < 1) {
        reshard_comm_destroy(inner);
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_create_view: bad argument");
    }
    *out = NULL;
    reshard_comm_t *c = calloc(1, sizeof *c);
    rs_view_t *v = calloc(1, sizeof *v);
    if (v) {
        v->to_inner = malloc((size_t)world_size * sizeof *v->to_inner);
        v->to_plan = malloc((size_t)inner->size * sizeof *v->to_plan);
    }
    if (!c || !v || !v->to_inner || !v->to_plan) {
        if (v) {
            free(v->to_inner);
            free(v->to_plan);
        }
        free(v);
        free(c);
        reshard_comm_destroy(inner);
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_create_view: out of memory");
    }
    for (int32_t q = 0; q < inner->size; q++)
        v->to_plan[q] = -1;
    reshard_status_t st = RESHARD_OK;
    for (int32_t p = 0; p < world_size && st == RESHARD_OK; p++) {
        int32_t q = rank_map[p];
        v->to_inner[p] = q;
        if (q < -1 || q >= inner->size || (q >= 0 && v->to_plan[q] >= 0))
            st = rs_error(RESHARD_ERR_INVALID_ARG,
                          "reshard_comm_create_view: plan rank %d maps to inner rank %d (outside "
                          "[-1, %d) or taken twice)",
                          p, q, inner->size);
        else if (q >= 0)
            v->to_plan[q] = p;
    }
    for (int32_t q = 0; q < inner->size && st == RESHARD_OK; q++)
        if (v->to_plan[q] < 0)
            st = rs_error(RESHARD_ERR_INVALID_ARG,
                          "reshard_comm_create_view: inner rank %d has no plan rank", q);
    if (st != RESHARD_OK) {
        c->impl = v;
        v->inner = inner;
        c->ops = &v->ops;
        v->ops.destroy = v_destroy;
        reshard_comm_destroy(c);
        return st;
    }
    const reshard_transport_ops_t *io = inner->ops;
    v->inner = inner;
    v->ops = (reshard_transport_ops_t){
        .version = RESHARD_TRANSPORT_VERSION,
        .name = io->name,
        .device_memory = io->device_memory,
        .alloc_staging = v_alloc,
        .free_staging = v_free,
        .round_begin = v_begin,
        .post_send = v_send,
        .post_recv = v_recv,
        .round_end = v_end,
        .round_wait = v_wait,
        .pack = io->pack ? v_pack : NULL,
        .unpack = io->unpack ? v_unpack : NULL,
        .local_copy = io->local_copy ? v_copy : NULL,
        .quantize = io->quantize ? v_quantize : NULL,
        .finish = v_finish,
        .unresponsive = v_unresponsive,
        .agree_exchange = io->agree_exchange ? v_exchange : NULL,
        .destroy = v_destroy,
    };
    const rs_delta_dev_ops_t *id = inner->delta_dev;
    if (id) { /* the host-side operations and the record size as the inner's */
        v->dops = (rs_delta_dev_ops_t){
            .alloc = vd_alloc,
            .free = id->free,
            .copy = vd_copy,
            .zero = vd_zero,
            .encode = vd_encode,
            .hash_msg = vd_hash_msg,
            .apply = vd_apply,
            .apply_record_bytes = id->apply_record_bytes,
            .applied = id->applied,
        };
        c->delta_dev = &v->dops;
    }
    c->ops = &v->ops;
    c->impl = v;
    c->rank = v->to_plan[inner->rank];
    c->size = world_size;
    *out = c;
    return RESHARD_OK;
}

/* ---- who is gone --------------------------------------------------------- */

reshard_status_t reshard_comm_unresponsive(const reshard_comm_t *comm, int32_t *ranks, int32_t max,
                                           int32_t *n_out)
{
    rs_error_clear();
    if (!comm || !n_out || max < 0 || (max > 0 && !ranks))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_unresponsive: bad argument");
    unsigned char *f = calloc((size_t)comm->size, 1);
    if (!f)
        return rs_error(RESHARD_ERR_NOMEM, "reshard_comm_unresponsive: out of memory");
    if (comm->ops->unresponsive)
        comm->ops->unresponsive(comm, f);
    int32_t n = 0;
    for (int32_t p = 0; p < comm->size; p++)
        if (f[p] && p != comm->rank) {
            if (n < max)
                ranks[n] = p;
            n++;
        }
    free(f);
    *n_out = n;
    return RESHARD_OK;
}

/* The agreement (rule and limits in reshard_elastic.h). Sets are n bytes, set[p] = 1 when
 * plan rank p is counted lost. */
typedef struct {
    reshard_comm_t *c;
    int32_t n, members;         /* plan world; members of the comm (not in prior) */
    unsigned char *prior, *set; /* the comm's lost ranks; the set of round 1 */
    unsigned char *recv, *got;  /* n messages of n bytes; arrived */
    int32_t *peers;
    bool excluded; /* a member's set counts this rank lost; set holds it */
} ag_t;

/* Round 0: this rank's prior set to every other member; a member whose round-0 message
 * did not arrive by @p deadline is counted lost, and the prior sets received are
 * united (they agree when the earlier agreement did). */
static reshard_status_t ag_round0(ag_t *a, double deadline)
{
    int32_t np = 0;
    for (int32_t p = 0; p < a->n; p++)
        if (!a->prior[p] && p != a->c->rank)
            a->peers[np++] = p;
    memset(a->got, 0, (size_t)a->n);
    reshard_status_t st = a->c->ops->agree_exchange(a->c, 0, a->peers, np, np, a->prior,
                                                    (uint64_t)a->n, a->recv, a->got, deadline);
    memcpy(a->set, a->prior, (size_t)a->n);
    for (int32_t i = 0; st == RESHARD_OK && i < np; i++) {
        a->set[a->peers[i]] |= !a->got[i];
        for (int32_t p = 0; a->got[i] && p < a->n; p++)
            a->set[p] |= a->recv[(size_t)i * (size_t)a->n + (size_t)p];
    }
    return st;
}

/* Round 1: the round-0 set to every member, the ones counted lost included (so that a
 * live one learns it); waits for the members left; checks them (see the header). */
static reshard_status_t ag_round1(ag_t *a, double deadline)
{
    int32_t me = a->c->rank, need = 0, np = 0, left = 0, lowest = -1;
    for (int32_t p = 0; p < a->n; p++)
        if (!a->set[p] && p != me)
            a->peers[need++] = p;
    np = need;
    for (int32_t p = 0; p < a->n; p++)
        if (a->set[p] && !a->prior[p] && p != me)
            a->peers[np++] = p; /* counted lost here: told, not waited for */
    for (int32_t p = 0; p < a->n; p++)
        if (!a->set[p]) {
            lowest = lowest < 0 ? p : lowest;
            left++;
        }
    memset(a->got, 0, (size_t)a->n);
    reshard_status_t st = a->c->ops->agree_exchange(a->c, 1, a->peers, np, need, a->set,
                                                    (uint64_t)a->n, a->recv, a->got, deadline);
    for (int32_t i = 0; st == RESHARD_OK && i < np; i++)
        if (a->got[i] && a->recv[(size_t)i * (size_t)a->n + (size_t)me]) {
            memcpy(a->set, a->recv + (size_t)i * (size_t)a->n, (size_t)a->n);
            a->excluded = true;
            return rs_error(RESHARD_ERR_TRANSPORT,
                            "rank %d: rank %d counts this rank as lost (it did not answer within "
                            "the agreement's timeout); this rank must leave and rejoin",
                            me, a->peers[i]);
        }
    for (int32_t i = 0; st == RESHARD_OK && i < need; i++) {
        if (!a->got[i])
            return rs_error(RESHARD_ERR_TIMEOUT,
                            "rank %d: rank %d answered the first round of the agreement but did "
                            "not confirm the lost set in time; no agreement",
                            me, a->peers[i]);
        if (memcmp(a->recv + (size_t)i * (size_t)a->n, a->set, (size_t)a->n) != 0)
            return rs_error(RESHARD_ERR_TIMEOUT,
                            "rank %d: rank %d counts other ranks lost than this rank does (a rank "
                            "answered some members in time and others not); no agreement",
                            me, a->peers[i]);
    }
    /* a quorum of the members: two groups that both pass it share a rank, whose one set
     * both confirmed, so they are the same group */
    int32_t lowest_member = -1;
    for (int32_t p = 0; p < a->n && lowest_member < 0; p++)
        lowest_member = a->prior[p] ? -1 : p;
    if (st == RESHARD_OK &&
        !(2 * left > a->members || (2 * left == a->members && lowest == lowest_member)))
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: only %d of the %d members answered the agreement, not a "
                        "majority (nor half with rank %d): the others may go on without this "
                        "rank, which must leave and rejoin",
                        me, left, a->members, lowest_member);
    return st;
}

reshard_status_t reshard_comm_agree_gone(reshard_comm_t *comm, double timeout_s, int32_t *gone,
                                         int32_t max, int32_t *n_gone)
{
    rs_error_clear();
    if (!comm || !n_gone || max < 0 || (max > 0 && !gone) || !(timeout_s > 0) || !(timeout_s < 1e9))
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_agree_gone: bad argument (comm %s, n_gone %s, max %d, gone "
                        "%s, timeout_s %g: needs 0 < timeout_s < 1e9)",
                        comm ? "given" : "NULL", n_gone ? "given" : "NULL", (int)max,
                        gone ? "given" : "NULL", timeout_s);
    if (!comm->ops->agree_exchange)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "reshard_comm_agree_gone: the %s transport has no agreement channel",
                        comm->ops->name);
    int32_t n = comm->size;
    ag_t a = {.c = comm, .n = n};
    a.prior = calloc((size_t)n, 1);
    a.set = calloc((size_t)n, 1);
    a.got = calloc((size_t)n, 1);
    a.recv = calloc((size_t)n * (size_t)n, 1);
    a.peers = calloc((size_t)n, sizeof *a.peers);
    reshard_status_t st = RESHARD_OK;
    if (!a.prior || !a.set || !a.got || !a.recv || !a.peers)
        st = rs_error(RESHARD_ERR_NOMEM, "reshard_comm_agree_gone: out of memory");
    for (int32_t p = 0; st == RESHARD_OK && p < n; p++) {
        a.prior[p] = rs_comm_is_view(comm) && vw(comm)->to_inner[p] < 0;
        a.members += !a.prior[p];
    }
    double t0 = rs_now_s();
    if (st == RESHARD_OK)
        st = ag_round0(&a, t0 + 2.0 * timeout_s);
    if (st == RESHARD_OK)
        st = ag_round1(&a, t0 + 4.0 * timeout_s);
    int32_t k = 0;
    bool report = st == RESHARD_OK || a.excluded; /* the accepted set, or the one excluding us */
    for (int32_t p = 0; report && p < n; p++)
        if (a.set[p]) {
            if (k < max)
                gone[k] = p;
            k++;
        }
    if (st == RESHARD_OK && k > max)
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "reshard_comm_agree_gone: %d lost ranks, room for %d", k, max);
    *n_gone = report && st != RESHARD_ERR_INVALID_ARG ? (k < max ? k : max) : 0;
    free(a.prior);
    free(a.set);
    free(a.got);
    free(a.recv);
    free(a.peers);
    return st;
}

/* ---- in-process shrink --------------------------------------------------- */

reshard_status_t rs_survivor_map(const reshard_comm_t *comm, const int32_t *gone, int32_t n_gone,
                                 int32_t **map_out, int32_t *n_members)
{
    const int32_t *to_inner = rs_comm_is_view(comm) ? vw(comm)->to_inner : NULL;
    int32_t n = comm->size;
    int32_t *map = malloc((size_t)n * sizeof *map);
    if (!map)
        return rs_error(RESHARD_ERR_NOMEM, "shrink: out of memory");
    /* members keep their plan-rank order; inner ranks follow it */
    int32_t k = 0;
    for (int32_t p = 0; p < n; p++) {
        bool out = to_inner && to_inner[p] < 0;
        for (int32_t i = 0; i < n_gone && !out; i++)
            out = gone[i] == p;
        map[p] = out ? -1 : k++;
    }
    if (map[comm->rank] < 0) {
        free(map);
        return rs_error(RESHARD_ERR_INVALID_ARG, "shrink: rank %d is in the gone set", comm->rank);
    }
    *map_out = map;
    *n_members = k;
    return RESHARD_OK;
}

reshard_status_t reshard_comm_shrink_inproc(reshard_comm_t *comm, const int32_t *gone,
                                            int32_t n_gone, reshard_inproc_group_t *survivors,
                                            reshard_comm_t **out)
{
    rs_error_clear();
    if (!comm || !survivors || !out || n_gone < 0 || (n_gone > 0 && !gone))
        return rs_error(RESHARD_ERR_INVALID_ARG, "reshard_comm_shrink_inproc: bad argument");
    *out = NULL;
    const int32_t *to_inner;
    const reshard_comm_t *in = rs_comm_inner(comm, &to_inner);
    (void)to_inner;
    if (strcmp(in->ops->name, "inproc") != 0)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_comm_shrink_inproc: a %s comm is not in-process", in->ops->name);
    int32_t *map = NULL, k = 0;
    reshard_status_t st = rs_survivor_map(comm, gone, n_gone, &map, &k);
    if (st != RESHARD_OK)
        return st;
    reshard_comm_t *inner = NULL;
    st = reshard_comm_create_inproc(survivors, map[comm->rank], &inner);
    if (st == RESHARD_OK && reshard_comm_size(inner) != k) {
        st = rs_error(RESHARD_ERR_INVALID_ARG,
                      "reshard_comm_shrink_inproc: the survivors' group has %d ranks, %d survive",
                      reshard_comm_size(inner), k);
        reshard_comm_destroy(inner);
    }
    if (st == RESHARD_OK)
        st = reshard_comm_create_view(inner, comm->size, map, out);
    free(map);
    return st;
}
