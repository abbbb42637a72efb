/* Colocated refit: one-sided reads of the pieces between ranks of one host
 * (rs_piece_is_peer_read), the buffer tables they need, and the rule that a
 * rank's read buffers stay bound for the plan's life. */
#ifndef RS_EXEC_PEER_H
#define RS_EXEC_PEER_H

#include "exec/comm.h"
#include "plan/plan_internal.h"

/** The tables a rank received from the ranks it reads (rs_peer_exchange). */
typedef struct rs_peer_tables rs_peer_tables_t;

/**
 * Before the first agreement, on every rank of a colocated plan: the source
 * buffers rank @p rank's peers read must be the ones bound at the plan's first
 * execution (recorded then, with how readers reach them: process_vm_readv, a
 * shared allocation of reshard_alloc_shared, or a CUDA IPC handle of a device
 * allocation and the offset in it). BUFFER naming the rank, buffer id and name
 * and both addresses otherwise, or when the same address now lies in another
 * allocation (freed and allocated again), or a device buffer that is not
 * cudaMalloc memory; UNSUPPORTED for device memory on another endpoint than
 * cuda-ipc, or a piece of this rank over the network on it; NOMEM. OK at once
 * for other plans.
 */
reshard_status_t rs_peer_check_binding(const reshard_plan_t *plan, const reshard_comm_t *comm,
                                       const reshard_buffer_t *src_bufs, int32_t n_src);

/**
 * After the first agreement: every rank sends each rank that reads from it the
 * table of the buffers read (its pid, their addresses and sizes), in one round
 * in slot 0 before the data rounds; every reader receives its tables, proves each
 * owner's identity before anything of it is mapped, opened or read
 * (rs_peer_prove_owner: boot id, PID namespace, the token read back) and probes each
 * buffer once. With @p send_only (this rank failed locally) it still sends and
 * receives, but proves and probes nothing. A colocated plan's every rank calls it
 * (for other plans it returns OK and *@p out NULL). Errors: the transport's
 * (TIMEOUT, TRANSPORT: the execution ends), a proof's or a probe's (UNSUPPORTED: the
 * pid is not the owner's process here; TRANSPORT; *@p out is set: the rank notes the
 * failure and keeps to the schedule), NOMEM.
 */
reshard_status_t rs_peer_exchange(const reshard_plan_t *plan, reshard_comm_t *comm,
                                  const rs_rank_plan_t *rp, const reshard_buffer_t *src_bufs,
                                  bool send_only, rs_peer_tables_t **out);

/** Read every piece rank rp->rank reads from its peers' buffers into its
 *  destination buffers @p dst_bufs; *@p bytes gets the bytes read. Host memory:
 *  process_vm_readv, or memcpy from a mapped shared allocation; device memory:
 *  the endpoint's local_copy kernel from the opened IPC allocation (asynchronous on
 *  its stream: the endpoint's finish waits for it). Errors: rs_peer_cpu_read_box's,
 *  BUFFER (a box past the owner's buffer), the local copy's. */
reshard_status_t rs_peer_read_all(const reshard_plan_t *plan, reshard_comm_t *comm,
                                  const rs_rank_plan_t *rp, const rs_peer_tables_t *t,
                                  const reshard_buffer_t *dst_bufs, uint64_t *bytes);

void rs_peer_tables_free(rs_peer_tables_t *t);

/** A colocated plan's state (reshard_plan_t.peer_maps): the exports recorded by
 *  rs_peer_check_binding and the readers' mappings and opened CUDA IPC handles,
 *  unmapped and closed here (reshard_plan_destroy). NULL is a no-op. */
struct rs_peer_maps;
void rs_peer_maps_free(struct rs_peer_maps *m);

#endif
