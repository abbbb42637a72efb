/*
 * Plan identity (reshard_plan_set_name): which plan of a rank pairs with which plan of
 * another when a rank holds several live plans made from the same inputs. The
 * fingerprint cannot tell them apart (a policy and a reference model of one
 * architecture, two engines' plans of equal layouts), so every execution's preflight
 * agreement also carries the plan's identity: the hash of its name where one was given,
 * else its ordinal among the plans of the same inputs that count for it: live, unnamed,
 * not retired, made earlier by the same thread, and either never executed or last
 * executed on the comm this execution uses. Ranks that create such plans in one order
 * and execute them in one order agree; a rank that executes another of them than its
 * peers fails preflight on every rank (MISMATCH) instead of pairing the two.
 *
 * What does not count, and why: plans of other threads (one per engine or model, each
 * with its own comm, have no order to agree on: a name pairs them where they share a
 * comm); plans last executed on another comm (an elastic refit goes on with new plans
 * on a new comm, and a caller may still hold the old ones, e.g. in an exception's
 * traceback); the old plan of reshard_plan_delta_adopt (retired).
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
#include "util/error.h"

typedef struct {
    const reshard_plan_t *plan;
    uint64_t serial;    /* creation order */
    pthread_t thread;   /* the creating thread */
    uint64_t last_comm; /* the serial of the comm it last executed on; 0: none yet */
    bool retired;
} rs_id_entry_t;

static pthread_mutex_t id_mu = PTHREAD_MUTEX_INITIALIZER;
static rs_id_entry_t *id_live;
static size_t id_n, id_cap;
static uint64_t id_serial;

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

reshard_status_t rs_identity_add(const reshard_plan_t *plan)
{
    pthread_mutex_lock(&id_mu);
    if (id_n == id_cap) {
        size_t cap = id_cap ? 2 * id_cap : 16;
        rs_id_entry_t *v = realloc(id_live, cap * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&id_mu);
            return rs_error(RESHARD_ERR_NOMEM, "planning: out of memory for the plan registry");
        }
        id_live = v;
        id_cap = cap;
    }
    id_live[id_n++] = (rs_id_entry_t){plan, ++id_serial, pthread_self(), 0, false};
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

void rs_identity_retire(const reshard_plan_t *plan)
{
    pthread_mutex_lock(&id_mu);
    rs_id_entry_t *e = entry_of(plan);
    if (e)
        e->retired = true;
    pthread_mutex_unlock(&id_mu);
}

uint64_t rs_identity(const reshard_plan_t *plan, uint64_t comm, int32_t *ordinal)
{
    pthread_mutex_lock(&id_mu);
    rs_id_entry_t *me = entry_of(plan);
    int32_t k = 0;
    for (size_t i = 0; me && !plan->id_name[0] && i < id_n; i++) {
        const rs_id_entry_t *o = &id_live[i];
        if (o != me && same_inputs(o->plan, plan) && pthread_equal(o->thread, me->thread) &&
            !o->plan->id_name[0] && !o->retired && o->serial < me->serial &&
            (o->last_comm == 0 || o->last_comm == comm))
            k++;
    }
    if (me)
        me->last_comm = comm;
    pthread_mutex_unlock(&id_mu);
    if (ordinal)
        *ordinal = plan->id_name[0] ? -1 : k;
    return plan->id_name[0] ? name_hash(plan->id_name) : (uint64_t)k;
}

reshard_status_t reshard_plan_set_name(reshard_plan_t *plan, const char *name)
{
    rs_error_clear();
    if (!plan || !name || !name[0] || strlen(name) >= sizeof plan->id_name)
        return rs_error(RESHARD_ERR_INVALID_ARG,
                        "reshard_plan_set_name: a plan and a name of 1 to %zu bytes",
                        sizeof plan->id_name - 1);
    pthread_mutex_lock(&id_mu);
    for (size_t i = 0; i < id_n; i++) {
        const rs_id_entry_t *o = &id_live[i];
        if (o->plan != plan && same_inputs(o->plan, plan) && !o->retired &&
            !strcmp(o->plan->id_name, name)) {
            pthread_mutex_unlock(&id_mu);
            return rs_error(RESHARD_ERR_INVALID_ARG,
                            "reshard_plan_set_name: another live plan of the same inputs on "
                            "this rank is named '%s' already (names tell such plans apart)",
                            name);
        }
    }
    snprintf(plan->id_name, sizeof plan->id_name, "%s", name);
    pthread_mutex_unlock(&id_mu);
    return RESHARD_OK;
}
