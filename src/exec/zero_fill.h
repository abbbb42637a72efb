/*
 * Destination buffers declared zero-filled (reshard_layout_zero_buffer): every
 * execution writes them with zeros on their rank, after the first agreement.
 */
#ifndef RS_EXEC_ZERO_FILL_H
#define RS_EXEC_ZERO_FILL_H

#include "plan/plan_internal.h"

/** Before the first agreement: UNSUPPORTED naming @p rank and the transport when this
 *  rank has a zero-filled destination buffer in device memory and the transport has no
 *  device operations to write it; RESHARD_OK otherwise. */
reshard_status_t rs_zero_fill_check(const reshard_plan_t *plan, const reshard_comm_t *comm,
                                    int32_t rank);

/** After the agreement: write zeros into every zero-filled destination buffer of
 *  @p rank (@p bufs: its destination buffers, checked present by
 *  rs_layout_check_buffers). Errors: the device operations' (NOMEM, TRANSPORT). */
reshard_status_t rs_zero_fill(const reshard_plan_t *plan, reshard_comm_t *comm, int32_t rank,
                              const reshard_buffer_t *bufs);

#endif
