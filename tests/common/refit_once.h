/* Test helper: one rank's refit on host memory, planned, executed and verified. */
#ifndef RS_TEST_REFIT_ONCE_H
#define RS_TEST_REFIT_ONCE_H

#include "reshard/reshard.h"
#include "reshard/reshard_model.h"

/**
 * Plan @p src -> @p dst for @p rank (@p params with my_rank = rank), fill this rank's
 * source buffers with the pattern, set its destination buffers to the sentinel, execute
 * once on @p comm and verify every destination element and padding byte. Buffers are
 * fresh host memory of reshard_layout_buffer_bytes each, freed before returning.
 * @p verified receives the bytes verified (0 unless OK); @p plan_s (optional) the
 * seconds reshard_plan_create took. Returns the first failing status.
 */
reshard_status_t rs_test_refit_once(const reshard_layout_t *src, const reshard_layout_t *dst,
                                    const reshard_plan_params_t *params, reshard_comm_t *comm,
                                    int32_t rank, uint64_t *verified, double *plan_s);

/**
 * Load the model config at @p config and make its refit from the training spec @p train
 * to the inference spec @p infer (reshard_model_refit_create) into @p r; @p *model
 * receives the model (destroy both). Returns the first failing status.
 */
reshard_status_t rs_test_model_refit(const char *config, const char *train, const char *infer,
                                     reshard_model_t **model, reshard_model_refit_t *r);

#endif
