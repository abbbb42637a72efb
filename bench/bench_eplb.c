/*
 * Replanning after vLLM's expert load balancer (EPLB) moved experts: a
 * rank's own replan beside the full replan, in one run, at the scale of the
 * seed's DeepSeek-V3 case (h100-dsv3 in data/cases: Megatron
 * tp=1,pp=16,ep=16,dp=16,first=3,last=2 -> vLLM tp=32, 8 engines, here with
 * EP inside each engine and 32 redundant experts: 288 physical slots, 9 per
 * rank; NVLink domains of 8).
 *
 * Each round draws a new physical-to-logical map for every MoE layer (every
 * expert once, the redundant slots random experts, the slots shuffled: what
 * the balancer's rearrangement may produce) and measures, for a training rank
 * and an inference rank:
 *   own      this rank's scoped layouts with the new map
 *            (reshard_model_refit_create_scoped) and its own plan: what a rank
 *            does when the map changes;
 *   whole    the whole layouts with the new map (reshard_model_refit_create_at)
 *            and the same rank's own plan from them: a replan that rebuilds
 *            every rank's layouts;
 *   global   (--global) the whole layouts and the global summary plan
 *            (RESHARD_PLAN_PARAM_SUMMARY), as one planner for all ranks would.
 * It prints the median of each over the rounds and the ratio whole / own
 * (and global / own), after checking that both own plans equal the rank's
 * plan from the whole layouts (same fingerprint and pieces count).
 *
 * usage: bench_eplb [--model M] [--train SPEC] [--infer SPEC] [--domain-size N]
 *                   [--rounds K] [--rank R] [--infer-rank K] [--global] [--layers L]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_median.h"
#include "reshard/reshard.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_sim.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* One map per MoE layer: experts 0..E-1 once, P-E random extra copies, shuffled. */
static void draw_maps(int32_t *map, int32_t rows, int32_t E, int32_t P)
{
    for (int32_t r = 0; r < rows; r++) {
        int32_t *m = map + (int64_t)r * P;
        for (int32_t p = 0; p < P; p++)
            m[p] = p < E ? p : (int32_t)(next() % (uint32_t)E);
        for (int32_t p = P - 1; p > 0; p--) {
            int32_t q = (int32_t)(next() % (uint32_t)(p + 1)), t = m[p];
            m[p] = m[q];
            m[q] = t;
        }
    }
}

static void die(const char *what)
{
    fprintf(stderr, "bench_eplb: %s: %s\n", what, reshard_last_error());
    exit(1);
}

/* One rank's own plan from @p f: seconds, and its stats. */
static double own_plan(const reshard_model_refit_t *f, int32_t world, int32_t domain, int32_t rank,
                       reshard_plan_stats_t *st)
{
    reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE,
                                .world_size = world,
                                .my_rank = rank,
                                .domain_size = domain};
    reshard_plan_t *plan;
    double t0 = now();
    if (reshard_plan_create(f->train, f->infer, &pp, &plan) != RESHARD_OK)
        die("own plan");
    double dt = now() - t0;
    reshard_plan_get_stats(plan, st);
    reshard_plan_destroy(plan);
    return dt;
}

int main(int argc, char **argv)
{
    const char *model_name = "deepseek-v3", *train = "tp=1,pp=16,ep=16,dp=16,first=3,last=2",
               *infer = "tp=32,engines=8,ep=on,redundant=32";
    int32_t domain = 8, rounds = 3, ranks[2] = {5, -1}, layers = 0;
    int global = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--global"))
            global = 1;
        else if (!v)
            goto usage;
        else if (!strcmp(argv[i], "--model"))
            model_name = argv[++i];
        else if (!strcmp(argv[i], "--train"))
            train = argv[++i];
        else if (!strcmp(argv[i], "--infer"))
            infer = argv[++i];
        else if (!strcmp(argv[i], "--domain-size"))
            domain = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rank"))
            ranks[0] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--infer-rank"))
            ranks[1] = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers"))
            layers = atoi(argv[++i]);
        else
            goto usage;
    }
    if (rounds < 1 || rounds > MAX_REPS || domain < 1)
        goto usage;
    reshard_model_options_t mo = {.layers = layers};
    reshard_model_t *m;
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    if (reshard_model_load(model_name, &mo, &m) != RESHARD_OK)
        die("model");
    if (reshard_train_spec_parse(train, &ts) != RESHARD_OK ||
        reshard_infer_spec_parse(infer, &is) != RESHARD_OK)
        die("spec");
    reshard_model_info_t info;
    reshard_model_info(m, &info);
    int32_t tw = reshard_train_world(&ts), iw = reshard_infer_world(&is);
    int32_t off = domain > 1 ? reshard_sim_infer_offset(tw, domain) : tw, world = off + iw;
    int32_t E = info.experts, P = E + is.redundant;
    int32_t rows = info.layers + info.mtp_layers - info.first_dense;
    if (ranks[1] < 0)
        ranks[1] = off + 5;
    int32_t *map = malloc((size_t)rows * (size_t)P * sizeof *map);
    if (!map || E < 1)
        return 1;
    is.eplb_map = map;
    is.eplb_map_len = (int64_t)rows * P;
    printf("bench_eplb: %s, train %s (%d ranks) -> infer %s (%d ranks from %d), domains of %d\n"
           "  %d MoE layers x %d physical slots (%d experts), a new map every round, %d rounds\n\n",
           model_name, train, tw, infer, iw, off, domain, rows, P, E, rounds);
    printf("  %-10s %12s %12s %12s %10s %10s\n", "rank", "own s", "whole s",
           global ? "global s" : "", "whole/own", global ? "global/own" : "");
    double t_own[2][MAX_REPS], t_whole[2][MAX_REPS], t_glob[MAX_REPS];
    for (int32_t k = 0; k < rounds; k++) {
        draw_maps(map, rows, E, P);
        double t0 = now();
        reshard_model_refit_t whole;
        if (reshard_model_refit_create_at(m, &ts, &is, off, &whole) != RESHARD_OK)
            die("whole layouts");
        double t_layouts = now() - t0;
        for (int w = 0; w < 2; w++) {
            reshard_plan_stats_t a, b;
            t_whole[w][k] = t_layouts + own_plan(&whole, world, domain, ranks[w], &a);
            t0 = now();
            reshard_model_refit_t part;
            if (reshard_model_refit_create_scoped(m, &ts, &is, off, ranks[w], domain, &part) !=
                RESHARD_OK)
                die("scoped layouts");
            t_own[w][k] = (now() - t0) + own_plan(&part, world, domain, ranks[w], &b);
            reshard_model_refit_destroy(&part);
            if (a.pieces != b.pieces || a.bytes_total != b.bytes_total) {
                fprintf(stderr, "bench_eplb: rank %d: the scoped plan differs from the whole one\n",
                        ranks[w]);
                return 1;
            }
        }
        if (global) {
            reshard_plan_params_t pp = {.field_mask = RESHARD_PLAN_PARAM_DOMAIN_SIZE |
                                                      RESHARD_PLAN_PARAM_SUMMARY,
                                        .world_size = world,
                                        .my_rank = RESHARD_ALL_RANKS,
                                        .domain_size = domain,
                                        .summary = 1};
            reshard_plan_t *plan;
            t0 = now();
            if (reshard_plan_create(whole.train, whole.infer, &pp, &plan) != RESHARD_OK)
                die("global plan");
            t_glob[k] = t_layouts + (now() - t0);
            reshard_plan_destroy(plan);
        }
        reshard_model_refit_destroy(&whole);
    }
    double g = global ? median(t_glob, rounds) : 0;
    for (int w = 0; w < 2; w++) {
        double o = median(t_own[w], rounds), h = median(t_whole[w], rounds);
        char who[32];
        snprintf(who, sizeof who, "%s %d", w ? "infer" : "train", ranks[w]);
        printf("  %-10s %12.4f %12.4f ", who, o, h);
        if (global)
            printf("%12.4f %9.1fx %9.1fx\n", g, h / o, g / o);
        else
            printf("%12s %9.1fx\n", "", h / o);
    }
    printf("\n  own: the rank's scoped layouts + its own plan (what a rank does when the map "
           "changes);\n  whole: every rank's layouts + the same own plan; global: every rank's "
           "layouts + the global summary plan.\n  Median over rounds, wall seconds; the two own "
           "plans equal the ones from the whole layouts.\n");
    free(map);
    reshard_model_destroy(m);
    return 0;
usage:
    fprintf(stderr, "usage: bench_eplb [--model M] [--train SPEC] [--infer SPEC] [--domain-size N] "
                    "[--rounds K] [--rank R] [--infer-rank K] [--global] [--layers L]\n");
    return 2;
}
