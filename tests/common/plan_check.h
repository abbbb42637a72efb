/* Test helper: a rank's own plan against the global plan. */
#ifndef RS_TEST_PLAN_CHECK_H
#define RS_TEST_PLAN_CHECK_H

#include "reshard/reshard.h"

/**
 * Build rank @p rank's own plan (params with my_rank = rank) and check that
 * it has the global plan's fingerprint and that
 * what it executes is exactly what the global plan @p all gives that rank:
 * the same local copies and, per stage, the same streams (peer, chunk size,
 * bytes) carrying the same pieces in the same order, and that the stage-0
 * streams landing in its domain (which time its forwards) match too. Returns
 * 0, or -1 with a description in @p why.
 */
int rs_test_check_rank_plan(const reshard_layout_t *src, const reshard_layout_t *dst,
                            const reshard_plan_params_t *params, const reshard_plan_t *all,
                            int32_t rank, char *why, size_t why_size);

#endif
