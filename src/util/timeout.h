/* The one clock and the one bound every transport deadline is computed with. */
#ifndef RS_UTIL_TIMEOUT_H
#define RS_UTIL_TIMEOUT_H

#include <time.h>

#include "reshard/reshard.h"

/** Seconds of CLOCK_MONOTONIC: the clock of every deadline and measured
 *  duration in the library. */
static inline double rs_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/** Seconds to wait for a peer: @p s clamped to [RESHARD_MIN_TIMEOUT_S, RESHARD_MAX_TIMEOUT_S];
 *  not positive or NaN (an unset bound) gives RESHARD_DEFAULT_TIMEOUT_S, and
 *  +inf or any larger value gives RESHARD_MAX_TIMEOUT_S, so that "now + s"
 *  stays a finite time that fits time_t and a timespec. */
static inline double rs_timeout_s(double s)
{
    if (!(s > 0))
        return RESHARD_DEFAULT_TIMEOUT_S;
    if (s < RESHARD_MIN_TIMEOUT_S)
        return RESHARD_MIN_TIMEOUT_S;
    return s < RESHARD_MAX_TIMEOUT_S ? s : RESHARD_MAX_TIMEOUT_S;
}

#endif
