/* Test helper shared by the multi-rank tests over the fake NCCL: the ranks of one scenario
 * as threads of this process, each given the scenario, its rank and the communicator's
 * unique id, each reporting ok or its failure message. */
#ifndef RS_TEST_FAKE_RANKS_H
#define RS_TEST_FAKE_RANKS_H

#include <pthread.h>
#include <stdio.h>

#include "reshard/reshard_nccl.h"

#define FAKE_MAX_RANKS 8

typedef struct {
    const void *sc; /* the test's scenario */
    int rank;
    const char *id; /* the unique id (reshard_nccl_get_unique_id) */
    int ok;         /* set by the rank when it passed */
    char msg[512];  /* else why not */
} rank_job_t;

/* Run @p nranks (<= FAKE_MAX_RANKS) threads of @p rank_main on a fresh unique id; print
 * "FAIL <name>: rank R: <msg>" for each rank that failed. Returns 0 when every rank passed. */
static inline int run_fake_ranks(const char *name, const void *sc, int nranks,
                                 void *(*rank_main)(void *))
{
    char id[128];
    if (nranks > FAKE_MAX_RANKS || reshard_nccl_get_unique_id(id) != RESHARD_OK) {
        printf("FAIL %s: unique id: %s\n", name, reshard_last_error());
        return 1;
    }
    rank_job_t jobs[FAKE_MAX_RANKS];
    pthread_t th[FAKE_MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        jobs[r] = (rank_job_t){.sc = sc, .rank = r, .id = id, .ok = 0, .msg = ""};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    int bad = 0;
    for (int r = 0; r < nranks; r++) {
        pthread_join(th[r], NULL);
        if (!jobs[r].ok) {
            printf("FAIL %s: rank %d: %s\n", name, r, jobs[r].msg);
            bad = 1;
        }
    }
    return bad;
}

#endif
