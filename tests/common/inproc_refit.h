/* Test helper: run a refit in-process, one thread per rank, and verify it. */
#ifndef RS_TEST_INPROC_REFIT_H
#define RS_TEST_INPROC_REFIT_H

#include "reshard/reshard.h"

typedef struct {
    reshard_status_t status; /**< first non-OK status of any rank (plan, execute or verify) */
    char message[1024];      /**< its message */
    uint64_t verified_bytes; /**< summed over ranks */
    uint64_t recv_bytes;     /**< summed over ranks (measured) */
    uint64_t local_bytes;    /**< summed over ranks (measured) */
} rs_test_refit_t;

/**
 * Plan (each rank its own plan, or one shared RESHARD_ALL_RANKS plan when
 * @p shared_plan), fill sources with the pattern, set destinations to the
 * sentinel, execute @p iters times (rebinding fresh destination buffers each
 * time) and verify every destination element and padding byte.
 */
rs_test_refit_t rs_test_inproc_refit(const reshard_layout_t *src, const reshard_layout_t *dst,
                                     const reshard_plan_params_t *params, int iters,
                                     int shared_plan);

#endif
