/* The first agreement of an execution: before any byte moves, every rank
 * learns whether every rank's plan exists, whether all plans were made from
 * the same inputs (their fingerprints), and whether every rank's buffers
 * passed their checks. */
#ifndef RS_EXEC_AGREE_H
#define RS_EXEC_AGREE_H

#include <stdbool.h>

#include "exec/comm.h"

/**
 * Take part in the first agreement with this rank's buffer check result
 * @p local (its message is the last error) and, with a @p plan, its plan
 * fingerprint; without one (NULL), @p local is the status its
 * plan_create returned. Returns OK only when every rank planned, every
 * fingerprint is equal and every rank's buffers are good. Otherwise, in this
 * order: the status of the lowest rank whose plan failed ("rank R could not
 * create its plan"), MISMATCH naming a rank whose fingerprint differs from
 * another's, which parts of the inputs differ (catalogue, layouts, declared
 * buffers, params: a few more agreements, the same on every rank) and the first
 * tensor where they do, this rank's own error, another rank's error — or the
 * transport's TIMEOUT / TRANSPORT when the agreement itself failed.
 */
reshard_status_t rs_agree_preflight(reshard_comm_t *comm, reshard_status_t local,
                                    const reshard_plan_t *plan, double timeout_s);

#endif
