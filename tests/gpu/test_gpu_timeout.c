/*
 * A stalled transfer ends with an error in bounded time, never a hang (exit 77 = skipped
 * without a CUDA device).
 *
 * A receive from this rank itself with no matching send can never complete. round_wait
 * must give up after its timeout, abort the NCCL communicator and return TIMEOUT (or
 * TRANSPORT if NCCL reports the mismatch itself); afterwards every operation fails fast
 * with TRANSPORT, finish reports the failure, and destroying the endpoint returns.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "reshard/reshard_nccl.h"
#include "transport/nccl/nccl_internal.h"
#include "util/timeout.h"

#define SKIP 77

int main(void)
{
    int ndev = 0;
    if (reshard_nccl_device_count(&ndev) != RESHARD_OK) {
        printf("SKIPPED: %s\n", reshard_last_error());
        return SKIP;
    }
    char id[128];
    reshard_comm_t *c = NULL;
    if (reshard_nccl_get_unique_id(id) != RESHARD_OK ||
        reshard_comm_create_nccl_from_id(id, 0, 1, 0, NULL, &c) != RESHARD_OK) {
        fprintf(stderr, "FAIL: NCCL endpoint: %s\n", reshard_last_error());
        return 1;
    }
    const reshard_transport_ops_t *ops = c->ops;
    void *buf = NULL;
    int bad = 0;
    if (ops->alloc_staging(c, 1 << 20, &buf) != RESHARD_OK) {
        fprintf(stderr, "FAIL: staging: %s\n", reshard_last_error());
        return 1;
    }
    const double timeout = 3.0;
    /* the executor's preflight agreement comes first and hands the plan's timeout over */
    reshard_status_t st = ops->finish(c, RESHARD_OK, NULL, NULL, timeout);
    if (st != RESHARD_OK) {
        fprintf(stderr, "FAIL: preflight finish: %s\n", reshard_last_error());
        return 1;
    }
    const double t0 = rs_now_s();
    st = ops->round_begin(c, 0);
    if (st == RESHARD_OK)
        st = ops->post_recv(c, 0, 0, buf, 1 << 20); /* no matching send, ever */
    if (st == RESHARD_OK)
        st = ops->round_end(c, 0);
    if (st == RESHARD_OK)
        st = ops->round_wait(c, 0, timeout);
    const double waited = rs_now_s() - t0;
    printf("stalled round -> %s after %.2f s: %s\n", reshard_status_string(st), waited,
           reshard_last_error());
    if (st != RESHARD_ERR_TIMEOUT && st != RESHARD_ERR_TRANSPORT) {
        fprintf(stderr, "FAIL: want TIMEOUT or TRANSPORT\n");
        bad = 1;
    }
    if (waited > timeout + 20.0) {
        fprintf(stderr, "FAIL: took %.1f s for a %.1f s timeout\n", waited, timeout);
        bad = 1;
    }
    st = ops->round_begin(c, 1);
    if (st != RESHARD_ERR_TRANSPORT || strstr(reshard_last_error(), "aborted") == NULL) {
        fprintf(stderr, "FAIL: round_begin after the abort -> %s: %s\n", reshard_status_string(st),
                reshard_last_error());
        bad = 1;
    }
    st = ops->finish(c, RESHARD_OK, NULL, NULL, timeout);
    if (st == RESHARD_OK) {
        fprintf(stderr, "FAIL: finish after the abort succeeded\n");
        bad = 1;
    }
    ops->free_staging(c, buf);
    const double t1 = rs_now_s();
    reshard_comm_destroy(c);
    printf("destroy after abort: %.2f s\n", rs_now_s() - t1);
    printf("%s\n", bad ? "FAILED" : "passed");
    return bad;
}
