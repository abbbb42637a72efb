/* vLLM's expert-parallel load balancer (EPLB) on the inference side: the
 * physical expert slots of each MoE layer, the logical expert each holds
 * (the caller's physical_to_logical map, or vLLM's initial one), and the
 * checks of a map before any layout is built.
 *
 * vLLM facts (vllm-project/vllm 50feac9):
 *   vllm/distributed/eplb/eplb_state.py  EplbState.physical_to_logical_map
 *     [num_moe_layers, num_physical_experts], num_physical = logical +
 *     num_redundant_experts; build_initial_global_physical_to_logical_map:
 *     list(range(E)) + [i % E for i in range(num_redundant)].
 *   vllm/model_executor/layers/fused_moe/layer.py  with EPLB,
 *     global_num_experts % ep_size == 0 ("EPLB currently only supports even
 *     distribution of experts across ranks"); redundant experts only with
 *     EPLB; the default linear placement gives EP rank r the contiguous
 *     slots [r*P/ep, (r+1)*P/ep), stacked in w13_weight / w2_weight. */
#include <stdio.h>
#include <stdlib.h>

#include "layout/layout_internal.h"
#include "model/model_internal.h"
#include "util/error.h"

bool rs_eplb_on(const reshard_infer_spec_t *s)
{
    return s->redundant > 0 || s->eplb_map != NULL;
}

int32_t rs_eplb_moe_layers(const reshard_model_t *m)
{
    int32_t n = 0;
    for (int32_t i = 0; i < m->L + m->nmtp; i++)
        n += m->moe[i];
    return n;
}

int32_t rs_eplb_slot(const reshard_model_t *m, const reshard_infer_spec_t *s, int32_t engine,
                     int32_t row, int64_t slot)
{
    int64_t P = (int64_t)m->E + s->redundant;
    if (!s->eplb_map)
        return (int32_t)(slot % m->E);
    if (s->eplb_map_len == P) /* one row: every layer of every engine */
        return s->eplb_map[slot];
    int64_t r = (int64_t)(rs_engines(s) > 1 ? engine : 0) * rs_eplb_moe_layers(m) + row;
    return s->eplb_map[r * P + slot];
}

int32_t rs_eplb_row(const reshard_model_t *m, int32_t layer)
{
    int32_t n = 0;
    for (int32_t i = 0; i < layer; i++)
        n += m->moe[i];
    return n;
}

/* "engine K," for row @p r of a per-engine map (more rows than MoE layers), else "". */
typedef struct {
    char s[32];
} rs_engine_text_t;

static rs_engine_text_t engine_of(int32_t nrows, int32_t rows, int32_t r)
{
    rs_engine_text_t t = {""};
    if (nrows > rows)
        snprintf(t.s, sizeof t.s, "engine %d, ", r / rows);
    return t;
}

reshard_status_t rs_eplb_check(const reshard_model_t *m, const reshard_infer_spec_t *s)
{
    if (!rs_eplb_on(s))
        return RESHARD_OK;
    RULE(s->redundant >= 0, "infer: redundant=%d must be >= 0", s->redundant);
    RULE(s->ep,
         "infer: EPLB (redundant=%d%s) needs ep=on: vLLM's expert load balancer moves "
         "whole experts between expert-parallel ranks",
         s->redundant, s->eplb_map ? ", an EPLB map" : "");
    int64_t P = (int64_t)m->E + s->redundant, eps = (int64_t)s->tp * s->dp;
    RULE(P % eps == 0,
         "infer: EPLB: the EP size tp*dp=%lld does not divide the %lld physical experts (%d "
         "experts + redundant=%d; vLLM fused_moe/layer.py: EPLB only supports an even "
         "distribution of experts across ranks)",
         (long long)eps, (long long)P, m->E, s->redundant);
    if (!s->eplb_map)
        return RESHARD_OK;
    int32_t rows = rs_eplb_moe_layers(m), engines = rs_engines(s);
    /* each engine keeps its own EplbState (eplb_state.py): with several engines a map
     * has a row per MoE layer per engine (engine-major); a single row is every layer of
     * every engine; one row per layer for all engines is refused: engines rearrange
     * apart, and engines x P entries would read as per-layer rows when the counts meet */
    if (engines > 1)
        RULE(s->eplb_map_len == P || s->eplb_map_len == (int64_t)engines * rows * P,
             "infer: EPLB map has %lld entries; with engines=%d each engine has its own map "
             "(vLLM's EplbState per engine): %lld entries (%d engines x %d MoE layers x %lld "
             "physical slots, engine-major), or %lld (one row for every layer of every "
             "engine)",
             (long long)s->eplb_map_len, engines, (long long)engines * rows * P, engines, rows,
             (long long)P, (long long)P);
    else
        RULE(s->eplb_map_len == P || s->eplb_map_len == (int64_t)rows * P,
             "infer: EPLB map has %lld entries; it must have one per physical expert slot, "
             "%lld (%d experts + redundant=%d) for every MoE layer, or %lld (%d MoE layers x "
             "%lld)",
             (long long)s->eplb_map_len, (long long)P, m->E, s->redundant, (long long)rows * P,
             rows, (long long)P);
    int32_t nrows = (int32_t)(s->eplb_map_len / P);
    uint8_t *seen = malloc((size_t)m->E);
    if (!seen)
        return rs_error(RESHARD_ERR_NOMEM, "infer: EPLB map check: out of memory");
    reshard_status_t st = RESHARD_OK;
    for (int32_t r = 0; r < nrows && st == RESHARD_OK; r++) {
        for (int32_t e = 0; e < m->E; e++)
            seen[e] = 0;
        const int32_t *row = s->eplb_map + (int64_t)r * P;
        for (int64_t p = 0; p < P && st == RESHARD_OK; p++) {
            if (row[p] < 0 || row[p] >= m->E)
                st = rs_error(RESHARD_ERR_CONFIG,
                              "infer: EPLB map %sMoE layer %d: physical slot %lld holds "
                              "logical expert %d, outside [0, %d)",
                              engine_of(nrows, rows, r).s, r % rows, (long long)p, row[p], m->E);
            else
                seen[row[p]] = 1;
        }
        for (int32_t e = 0; e < m->E && st == RESHARD_OK; e++)
            if (!seen[e])
                st = rs_error(RESHARD_ERR_CONFIG,
                              "infer: EPLB map %sMoE layer %d: logical expert %d has no "
                              "physical slot (every expert must be held at least once)",
                              engine_of(nrows, rows, r).s, r % rows, e);
    }
    free(seen);
    return st;
}

uint64_t rs_eplb_hash(const reshard_model_t *m, const reshard_infer_spec_t *s, uint64_t h)
{
    if (!s->eplb_map)
        return h;
    (void)m;
    h = rs_hash_mix(h, 0x65706c62ULL ^ (uint64_t)s->eplb_map_len);
    for (int64_t i = 0; i < s->eplb_map_len; i++)
        h = rs_hash_mix(h, (uint64_t)(uint32_t)s->eplb_map[i]);
    return h ? h : 1;
}
