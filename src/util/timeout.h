/* The one bound every transport deadline is computed with. */
#ifndef RS_UTIL_TIMEOUT_H
#define RS_UTIL_TIMEOUT_H

#include "reshard/reshard.h"

/** Seconds to wait for a peer: @p s clamped to (0, RESHARD_MAX_TIMEOUT_S];
 *  not positive or NaN (an unset bound) gives RESHARD_DEFAULT_TIMEOUT_S, and
 *  +inf or any larger value gives RESHARD_MAX_TIMEOUT_S, so that "now + s"
 *  stays a finite time that fits time_t and a timespec. */
static inline double rs_timeout_s(double s)
{
    if (!(s > 0))
        return RESHARD_DEFAULT_TIMEOUT_S;
    return s < RESHARD_MAX_TIMEOUT_S ? s : RESHARD_MAX_TIMEOUT_S;
}

#endif
