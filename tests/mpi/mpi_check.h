/* CHECK for the MPI test programs: a failed condition prints the rank, the
 * place, the condition, a message and the last reshard error, and counts
 * itself in g_failures. The program defines int g_rank and g_failures. */
#ifndef RS_TEST_MPI_CHECK_H
#define RS_TEST_MPI_CHECK_H

#include <stdio.h>

#include "reshard/reshard.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: ", g_rank, __FILE__, __LINE__,      \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " [last error: %s]\n", reshard_last_error());                          \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

#endif
