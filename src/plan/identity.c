/*
 * Plan identity (reshard_plan_set_name): which plan of a rank pairs with which plan of
 * another when a rank holds several live plans made from the same inputs. The
 * fingerprint cannot tell them apart (a policy and a reference model of one
 * architecture, two engines' plans of equal layouts), so every execution's preflight
 * agreement also carries the plan's identity:
 *  - a named plan (reshard_plan_set_name): the hash of its name. No two live, not retired
 *    plans of the same inputs on a rank share a name;
 *  - an unnamed plan: its number, fixed when it is made: the smallest number that no
 *    unnamed, not retired plan of the same inputs its thread then holds (0 for the first,
 *    0 again once the earlier ones were closed). Two live plans never share a number,
 *    and a number never moves when another plan is closed or retired afterwards, on
 *    some ranks only or on all;
 *  - a retired plan (the old plan of reshard_plan_delta_adopt, a plan whose execution
 *    lost its peers: TIMEOUT, TRANSPORT; it no longer takes a number or a name from plans
 *    made after it): an identity of another set (RETIRED_TAG; unnamed: its order among
 *    every plan of its inputs its thread ever made; named: how many plans of its inputs
 *    were ever given its name before it), so that, executed again (a retry), it pairs only with
 *    the same retired plan on its peers. The new plan of reshard_plan_delta_adopt takes
 *    the old plan's name, or its number, where no other plan took it since;
 *  - a RESHARD_ALL_RANKS plan's identity is of another set than a rank's own plans.
 * Known limit: the smallest free number depends on which plans a rank still holds when
 * it makes a new one, so ranks that close (or garbage-collect) one of several live
 * unnamed plans of equal inputs at different moments relative to making the next can
 * number two plans alike; name such plans.
 * Ranks that make, close and execute such plans in one order agree; a rank that
 * executes another of them than its peers fails preflight on every rank (MISMATCH)
 * instead of pairing the two.
 *
 * Plans of other threads (one per engine or model, each on its own comm) are numbered
 * apart: plans of equal inputs made on two threads that share a comm must be named,
 * which nothing here can check.
 *
 * The registry is process-wide (plans of several ranks in one process are told apart by
 * my_rank), one mutex; a plan enters it when created and leaves it when destroyed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h" /* rs_hash_mix */
#include "plan/plan_internal.h"
#include "plan/plan_util.h" /* rs_grow */
#include "util/error.h"

typedef struct {
    const reshard_plan_t *plan;
    uint64_t serial;     /* creation order */
    uint64_t thread;     /* the creating thread's number (thread_number) */
    int32_t index;       /* unnamed: its number, fixed when it was made (rs_identity_add) */
    int32_t ever;        /* its order among every plan of its inputs its thread made */
    int32_t name_gen;    /* named: how many plans of its inputs had its name before it */
    const char *retired; /* why it was retired; NULL: it was not */
} rs_id_entry_t;

/* How many plans of one (thread, inputs, rank) were ever made: never forgotten, so that
 * no two retired plans of a thread carry one identity. */
typedef struct {
    uint64_t thread, fingerprint;
    int32_t rank, made;
} rs_id_count_t;

static pthread_mutex_t id_mu = PTHREAD_MUTEX_INITIALIZER;
static rs_id_entry_t *id_live;
static size_t id_n;
static int64_t id_cap;
static uint64_t id_serial;
static rs_id_count_t *id_counts;
static size_t id_ncounts;
static int64_t id_counts_cap;

/* Set in a retired plan's identity (never in an ordinal; a name's hash has the top bit). */
#define RETIRED_TAG 0x4000000000000000ull
/* Set in a RESHARD_ALL_RANKS plan's identity (never in a number or a retired tag's sum). */
#define ALL_RANKS_TAG 0x2000000000000000ull

static uint64_t id_threads;                /* the last thread number given */
static _Thread_local uint64_t this_thread; /* this thread's number; 0: none yet */

/* A number no other thread of the process has had (pthread_t values are reused once a
 * thread ended, and its plans may outlive it). */
static uint64_t thread_number(void)
{
    if (!this_thread)
        this_thread = __atomic_add_fetch(&id_threads, 1, __ATOMIC_RELAXED);
    return this_thread;
}

static rs_id_entry_t *entry_of(const reshard_plan_t *plan)
{
    for (size_t i = 0; i < id_n; i++)
        if (id_live[i].plan == plan)
            return &id_live[i];
    return NULL;
}

static bool same_inputs(const reshard_plan_t *a, const reshard_plan_t *b)
{
    return a->fingerprint == b->fingerprint && a->p.my_rank == b->p.my_rank;
}

static uint64_t name_hash(const char *name)
{
    uint64_t h = 0x706c616e6e616d65ULL; /* "planname" */
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = rs_hash_mix(h, *c);
    return h | (uint64_t)1 << 63; /* never an ordinal */
}

/* The count of @p thread's plans of @p plan's inputs (created at 0); NULL: out of memory. */
static rs_id_count_t *count_of(const reshard_plan_t *plan, uint64_t thread)
{
    for (size_t i = 0; i < id_ncounts; i++) {
        rs_id_count_t *c = &id_counts[i];
        if (c->thread == thread && c->fingerprint == plan->fingerprint &&
            c->rank == plan->p.my_rank)
            return c;
    }
    if (rs_grow(&id_counts, &id_counts_cap, (int64_t)id_ncounts, sizeof *id_counts) != 0)
        return NULL;
    id_counts[id_ncounts] = (rs_id_count_t){thread, plan->fingerprint, plan->p.my_rank, 0};
    return &id_counts[id_ncounts++];
}

/* Whether an unnamed, not retired plan of @p plan's inputs that @p thread made holds
 * number @p k. */
static bool number_taken(const reshard_plan_t *plan, uint64_t thread, int32_t k)
{
    for (size_t i = 0; i < id_n; i++) {
        const rs_id_entry_t *o = &id_live[i];
        if (o->index == k && o->thread == thread && same_inputs(o->plan, plan) &&
            !o->plan->id_name[0] && !o->retired)
            return true;
    }
    return false;
}

reshard_status_t rs_identity_add(const reshard_plan_t *plan)
{
    pthread_mutex_lock(&id_mu);
    const uint64_t thread = thread_number();
    rs_id_count_t *c = count_of(plan, thread);
    if (!c || rs_grow(&id_live, &id_cap, (int64_t)id_n, sizeof *id_live) != 0) {
        pthread_mutex_unlock(&id_mu);
        return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory for the plan registry");
    }
    /* its number: the smallest that no unnamed, not retired plan of its inputs its thread
     * holds now (never one a live plan holds) */
    int32_t index = 0;
    while (number_taken(plan, thread, index))
        index++;
    id_live[id_n++] = (rs_id_entry_t){plan, ++id_serial, thread, index, c->made++, 0, NULL};
    pthread_mutex_unlock(&id_mu);
    return RESHARD_OK;
}

void rs_identity_remove(const reshard_plan_t *plan)
{
    pthread_mutex_lock(&id_mu);
    rs_id_entry_t *e = entry_of(plan);
    if (e) {
        memmove(e, e + 1, (size_t)(id_live + id_n - (e + 1)) * sizeof *e);
        id_n--;
    }
    if (!id_n) {
        free(id_live);
        id_live = NULL;
        id_cap = 0;
    }
    pthread_mutex_unlock(&id_mu);
}

void rs_identity_retire(const reshard_plan_t *plan, const char *why)
{
    pthread_mutex_lock(&id_mu);
    rs_id_entry_t *e = entry_of(plan);
    if (e && !e->retired)
        e->retired = why;
    pthread_mutex_unlock(&id_mu);
}

/* Whether a live, not retired plan of @p plan's inputs other than it is named @p name. */
static bool name_taken(const reshard_plan_t *plan, const char *name)
{
    for (size_t i = 0; i < id_n; i++) {
        const rs_id_entry_t *o = &id_live[i];
        if (o->plan != plan && !o->retired && same_inputs(o->plan, plan) &&
            !strcmp(o->plan->id_name, name))
            return true;
    }
    return false;
}

/* Name @p plan (entry @p me) @p name, its generation counted (how many plans of its inputs
 * had the name before: a count never forgotten, kept under the name's hash in place of a
 * thread number, which a hash with its top bit never is); false: out of memory. */
static bool give_name(reshard_plan_t *plan, rs_id_entry_t *me, const char *name)
{
    rs_id_count_t *c = count_of(plan, name_hash(name));
    if (!c)
        return false;
    snprintf(plan->id_name, sizeof plan->id_name, "%s", name);
    if (me)
        me->name_gen = c->made++;
    return true;
}

void rs_identity_replace(reshard_plan_t *plan, const reshard_plan_t *from, const char *why)
{
    pthread_mutex_lock(&id_mu);
    rs_id_entry_t *me = entry_of(plan), *old = entry_of(from);
    if (old && !old->retired)
        old->retired = why;
    /* it takes the old plan's name, or number, where no other plan took it since */
    if (me && old && same_inputs(plan, from) && !plan->id_name[0]) {
        if (from->id_name[0]) {
            if (!name_taken(plan, from->id_name))
                give_name(plan, me, from->id_name);
        } else if (!number_taken(plan, me->thread, old->index) && old->thread == me->thread) {
            me->index = old->index;
        }
    }
    pthread_mutex_unlock(&id_mu);
}

const char *rs_identity_retired(const reshard_plan_t *plan)
{
    pthread_mutex_lock(&id_mu);
    const rs_id_entry_t *e = entry_of(plan);
    const char *why = e ? e->retired : NULL;
    pthread_mutex_unlock(&id_mu);
    return why;
}

uint64_t rs_identity(const reshard_plan_t *plan, int32_t *ordinal)
{
    pthread_mutex_lock(&id_mu);
    const rs_id_entry_t *me = entry_of(plan);
    const bool named = plan->id_name[0] != '\0', retired = me && me->retired;
    const int32_t k = !me ? 0 : named ? me->name_gen : retired ? me->ever : me->index;
    pthread_mutex_unlock(&id_mu);
    if (ordinal)
        *ordinal = named ? -1 : k;
    uint64_t id;
    if (named) /* live: the name alone; retired: of another set, one per plan of the name */
        id = retired ? (name_hash(plan->id_name) ^ RETIRED_TAG) + (uint64_t)k
                     : name_hash(plan->id_name);
    else /* a retired plan's identity is of another set than any plan that is not */
        id = retired ? RETIRED_TAG + (uint64_t)k : (uint64_t)k;
    /* a RESHARD_ALL_RANKS plan is numbered and named apart from a rank's own plans of the
     * same fingerprint (which leaves the rank out): its identity is of another set too */
    return plan->p.my_rank == RESHARD_ALL_RANKS ? id ^ ALL_RANKS_TAG : id;
}

reshard_status_t reshard_plan_set_name(reshard_plan_t *plan, const char *name)
{
    rs_error_clear();
    if (!plan || !name || !name[0] || strlen(name) >= sizeof plan->id_name)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_set_name: a plan and a name of 1 to %zu bytes",
                        sizeof plan->id_name - 1);
    pthread_mutex_lock(&id_mu);
    if (name_taken(plan, name)) {
        pthread_mutex_unlock(&id_mu);
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_set_name: another live plan of the same inputs on this "
                        "rank is named '%s' already: a name tells plans of equal inputs apart, "
                        "so two of them cannot share it (destroy the other first, "
                        "Plan.close())",
                        name);
    }
    const bool ok = give_name(plan, entry_of(plan), name);
    pthread_mutex_unlock(&id_mu);
    return ok ? RESHARD_OK
              : rs_error(RESHARD_ERR_NOMEM,
                         "reshard_plan_set_name: out of memory for the plan registry");
}
