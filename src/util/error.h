/* Per-thread last-error message and the helper that sets it. */
#ifndef RS_UTIL_ERROR_H
#define RS_UTIL_ERROR_H

#include "reshard/reshard.h"

/** Record @p fmt as the calling thread's last error and return @p status. */
reshard_status_t rs_error(reshard_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** Clear the last error (called at the start of every public entry point). */
void rs_error_clear(void);
/** Format @p box as "[o0:o0+e0, o1:o1+e1, ...]" into @p out (at least 256 bytes). */
const char *rs_box_str(const reshard_box_t *box, char *out, size_t out_size);

#endif
