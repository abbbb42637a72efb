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

/**
 * An independent check of one rank's buffers (an oracle): called with
 * @p dst = 0 on the source buffers after the fill and with @p dst = 1 on the
 * destination buffers after every execute, before the built-in verify.
 * Returns the number of wrong bytes, with a message in @p msg.
 */
typedef int64_t (*rs_test_check_fn)(void *ctx, int32_t rank, int dst, const reshard_buffer_t *bufs,
                                    int32_t n, char *msg, size_t size);

/** As rs_test_inproc_refit, and @p check (when not NULL) checks every rank's
 *  buffers; a wrong byte is RESHARD_ERR_VERIFY with its message. */
rs_test_refit_t rs_test_inproc_refit_check(const reshard_layout_t *src, const reshard_layout_t *dst,
                                           const reshard_plan_params_t *params, int iters,
                                           int shared_plan, rs_test_check_fn check, void *ctx);

#endif
