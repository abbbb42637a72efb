/* Executing a plan's quantization (plan/quant_wire.c): the scratch buffers,
 * the sender-side steps before the rounds and the receiver-side ones after. */
#ifndef RS_EXEC_QUANT_STEPS_H
#define RS_EXEC_QUANT_STEPS_H

#include "plan/plan_internal.h"
#include "transport/transport.h"

/** The caller's buffers extended by this rank's scratch buffers. */
typedef struct {
    reshard_buffer_t *src, *dst;
    int32_t nsrc, ndst;
    void *mem[3]; /* e4m3 scratch, scale scratch, bf16 scratch */
} rs_qbufs_t;

/** Allocate this rank's scratch (transport staging memory) and extend the
 *  caller's buffer arrays. NOMEM naming the rank. */
reshard_status_t rs_qbufs_setup(const reshard_plan_t *plan, reshard_comm_t *c,
                                const reshard_buffer_t *src, int32_t nsrc,
                                const reshard_buffer_t *dst, int32_t ndst, rs_qbufs_t *out);
void rs_qbufs_free(reshard_comm_t *c, rs_qbufs_t *b);

/** Sender side: quantize the blocks of every e4m3 or scale piece this rank
 *  sends (or copies) at stage 0 (@p rp), into its scratch. */
reshard_status_t rs_quant_pre(const reshard_plan_t *plan, reshard_comm_t *c,
                              const rs_rank_plan_t *rp, const rs_qbufs_t *b);
/** Receiver side: quantize what landed in this rank's bf16 scratch into its
 *  destination and scale buffers. */
reshard_status_t rs_quant_post(const reshard_plan_t *plan, reshard_comm_t *c, const rs_qbufs_t *b);

#endif
