/* Executing a plan's quantization (plan/quant_wire.c): the scratch buffers,
 * the sender-side steps before the rounds and the receiver-side ones after. */
#ifndef RS_EXEC_QUANT_STEPS_H
#define RS_EXEC_QUANT_STEPS_H

#include "plan/plan_internal.h"
#include "exec/comm.h"

/** The caller's buffers extended by this rank's scratch buffers. */
typedef struct {
    reshard_buffer_t *src, *dst;
    int32_t nsrc, ndst;
    void *mem[3];  /* e4m3 scratch, scale scratch, bf16 scratch */
    int64_t *mine; /* this rank's pre steps (indices), in scratch order */
    int64_t nmine;
    uint8_t *done;    /* per block of each of mine's regions: quantized already */
    int64_t *done_at; /* per mine: its first block in done */
} rs_qbufs_t;

/** Allocate this rank's scratch (transport staging memory) and extend the
 *  caller's buffer arrays. NOMEM naming the rank. */
reshard_status_t rs_qbufs_setup(const reshard_plan_t *plan, reshard_comm_t *c,
                                const reshard_buffer_t *src, int32_t nsrc,
                                const reshard_buffer_t *dst, int32_t ndst, rs_qbufs_t *out);
void rs_qbufs_free(reshard_comm_t *c, rs_qbufs_t *b);

/** Sender side: when stage-0 piece @p p is e4m3 data or scales this rank
 *  sends (or copies) from its scratch, quantize its blocks there. Called
 *  just before the piece's first bytes are packed, so quantizing overlaps
 *  the transfers of earlier rounds. */
reshard_status_t rs_quant_piece(const reshard_plan_t *plan, reshard_comm_t *c, const rs_qbufs_t *b,
                                const rs_piece_t *p);
/** Receiver side: quantize what landed in this rank's bf16 scratch into its
 *  destination and scale buffers. */
reshard_status_t rs_quant_post(const reshard_plan_t *plan, reshard_comm_t *c, const rs_qbufs_t *b);

#endif
