/* Status names and the per-thread last-error message. */
#include "util/error.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char rs_last_msg[1024];

reshard_status_t rs_error(reshard_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rs_last_msg, sizeof rs_last_msg, fmt, ap);
    va_end(ap);
    return status;
}

void rs_error_clear(void)
{
    rs_last_msg[0] = '\0';
}

const char *reshard_last_error(void)
{
    return rs_last_msg;
}

const char *reshard_status_string(reshard_status_t status)
{
    switch (status) {
    case RESHARD_OK:
        return "RESHARD_OK";
    case RESHARD_ERR_INVALID_ARG:
        return "RESHARD_ERR_INVALID_ARG";
    case RESHARD_ERR_NOMEM:
        return "RESHARD_ERR_NOMEM";
    case RESHARD_ERR_SHAPE:
        return "RESHARD_ERR_SHAPE";
    case RESHARD_ERR_DTYPE:
        return "RESHARD_ERR_DTYPE";
    case RESHARD_ERR_BOX:
        return "RESHARD_ERR_BOX";
    case RESHARD_ERR_UNCOVERED:
        return "RESHARD_ERR_UNCOVERED";
    case RESHARD_ERR_OVERLAP:
        return "RESHARD_ERR_OVERLAP";
    case RESHARD_ERR_RANK:
        return "RESHARD_ERR_RANK";
    case RESHARD_ERR_OVERFLOW:
        return "RESHARD_ERR_OVERFLOW";
    case RESHARD_ERR_BUFFER:
        return "RESHARD_ERR_BUFFER";
    case RESHARD_ERR_CONFIG:
        return "RESHARD_ERR_CONFIG";
    case RESHARD_ERR_TRANSPORT:
        return "RESHARD_ERR_TRANSPORT";
    case RESHARD_ERR_TIMEOUT:
        return "RESHARD_ERR_TIMEOUT";
    case RESHARD_ERR_UNSUPPORTED:
        return "RESHARD_ERR_UNSUPPORTED";
    case RESHARD_ERR_IO:
        return "RESHARD_ERR_IO";
    case RESHARD_ERR_VERIFY:
        return "RESHARD_ERR_VERIFY";
    case RESHARD_ERR_STAGING:
        return "RESHARD_ERR_STAGING";
    case RESHARD_ERR_MISMATCH:
        return "RESHARD_ERR_MISMATCH";
    }
    return "RESHARD_ERR_UNKNOWN";
}

const char *rs_box_str(const reshard_box_t *box, char *out, size_t out_size)
{
    size_t n = 0;
    n += (size_t)snprintf(out + n, out_size - n, "[");
    for (int d = 0; d < box->ndim && n < out_size; d++) {
        /* The end offset + extent without overflow: in uint64 when both are
         * non-negative (an unchecked box may reach past INT64_MAX), else as a sum. */
        int64_t o = box->offset[d], e = box->extent[d], end;
        const char *sep = d ? ", " : "";
        if (!__builtin_add_overflow(o, e, &end))
            n += (size_t)snprintf(out + n, out_size - n, "%s%" PRId64 ":%" PRId64, sep, o, end);
        else if (o >= 0 && e >= 0)
            n += (size_t)snprintf(out + n, out_size - n, "%s%" PRId64 ":%" PRIu64, sep, o,
                                  (uint64_t)o + (uint64_t)e);
        else
            n += (size_t)snprintf(out + n, out_size - n, "%s%" PRId64 ":%" PRId64 "%+" PRId64, sep,
                                  o, o, e);
    }
    if (n < out_size)
        snprintf(out + n, out_size - n, "]");
    return out;
}
