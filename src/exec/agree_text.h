/* Text over the agreement: one rank's short text to every rank (a failed rank's first
 * problem, a value), and the named values every rank gives compared by name
 * (reshard_comm_agree_values). Built on the transport's finish alone (a MIN reduction of
 * RESHARD_AGREE_WORDS words), so it works on every transport. */
#ifndef RS_EXEC_AGREE_TEXT_H
#define RS_EXEC_AGREE_TEXT_H

#include <stddef.h>

#include "exec/comm.h"

/** The longest text rs_agree_text carries (bytes); a longer one is cut there. */
#define RS_AGREE_TEXT_MAX 240

/**
 * Every rank of @p comm calls it with the same @p root: rank @p root's @p text (its
 * first RS_AGREE_TEXT_MAX bytes; NULL on the other ranks) lands in @p out (@p size
 * bytes, NUL-terminated, cut to fit) on every rank. One agreement per 41 bytes (the
 * length first). Errors: the transport's TIMEOUT / TRANSPORT, INVALID_ARG (a length out
 * of range: the ranks were not in step).
 */
reshard_status_t rs_agree_text(reshard_comm_t *comm, int32_t root, const char *text, char *out,
                               size_t size, double timeout_s);

#endif
