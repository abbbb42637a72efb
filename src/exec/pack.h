/* CPU implementations of pack, unpack and local box copies. */
#ifndef RS_EXEC_PACK_H
#define RS_EXEC_PACK_H

#include "layout/layout_internal.h" /* RS_DIRECT_MIN_BYTES, rs_box_dense */
#include "exec/comm.h"

/** Copy the elements of @p span from @p buf (laid out per span->frag) to the
 *  contiguous @p out (count * elem_size bytes). */
void rs_pack_cpu(void *out, const void *buf, const reshard_span_t *span);
/** Inverse of rs_pack_cpu. */
void rs_unpack_cpu(void *buf, const void *in, const reshard_span_t *span);
/** Copy @p box from @p src (per src_frag) to @p dst (per dst_frag). */
void rs_copy_box_cpu(void *dst, const reshard_fragment_t *dst_frag, const void *src,
                     const reshard_fragment_t *src_frag, const reshard_box_t *box,
                     uint32_t elem_size);

#endif
