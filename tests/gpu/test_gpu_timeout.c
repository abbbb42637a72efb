/*
 * A stalled transfer ends with an error in bounded time, never a hang (exit 77 = skipped
 * without a CUDA device). Runs on a GPU (gpu_timeout) and on the fake CUDA/NCCL
 * (fake_nccl_timeout).
 *
 * 1. Stall: a kernel spinning on a flag in pinned host memory holds the endpoint's stream;
 *    a round of a send to and a receive from this rank itself (a valid pair) queues behind
 *    it, so its transfers cannot run. round_wait must reach its deadline (not fail earlier
 *    for another reason), revoke/abort the communicator and return TIMEOUT within the bound;
 *    then the flag is released, every later operation fails fast with TRANSPORT, finish
 *    reports the failure, and destroying the endpoint returns.
 * 2. A receive from this rank itself with no matching send is refused at group end
 *    (NCCL's p2p check): round_end returns TRANSPORT at once, with no wait.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "reshard/reshard_nccl.h"
#include "spin_kernel.h"
#include "transport/nccl/nccl_internal.h"
#include "util/timeout.h"

#define SKIP 77
#define TIMEOUT_S 3.0
#define MARGIN_S 5.0 /* polling, the revoke and NCCL's own latency on top of the timeout */

static int check(int ok, const char *what)
{
    if (!ok)
        fprintf(stderr, "FAIL: %s: %s\n", what, reshard_last_error());
    return ok ? 0 : 1;
}

/* An endpoint of a one-rank communicator on device 0 and stream @p s (NULL: its own), with
 * @p bytes of staging in *buf, past the executor's preflight agreement (which hands the
 * timeout over); NULL after saying why. */
static reshard_comm_t *ready_endpoint(cudaStream_t s, uint64_t bytes, void **buf)
{
    char id[128];
    reshard_comm_t *c = NULL;
    if (reshard_nccl_get_unique_id(id) != RESHARD_OK ||
        reshard_comm_create_nccl_from_id(id, 0, 1, 0, s, &c) != RESHARD_OK) {
        fprintf(stderr, "FAIL: NCCL endpoint: %s\n", reshard_last_error());
        return NULL;
    }
    if (check(c->ops->alloc_staging(c, bytes, buf) == RESHARD_OK, "staging") ||
        check(c->ops->finish(c, RESHARD_OK, NULL, NULL, TIMEOUT_S) == RESHARD_OK,
              "preflight finish")) {
        reshard_comm_destroy(c);
        return NULL;
    }
    return c;
}

static int stalled_round(void)
{
    cudaStream_t s = NULL;
    int *flag = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMallocHost((void **)&flag, sizeof *flag) != cudaSuccess) {
        fprintf(stderr, "FAIL: stream or pinned flag\n");
        return 1;
    }
    *(volatile int *)flag = 0;
    void *buf = NULL;
    reshard_comm_t *c = ready_endpoint(s, 2 << 20, &buf);
    if (c == NULL)
        return 1;
    const reshard_transport_ops_t *ops = c->ops;
    int bad = 0;
    const double t0 = rs_now_s();
    reshard_status_t st = ops->round_begin(c, 0);
    if (st == RESHARD_OK && rs_test_spin_launch(flag, s) != cudaSuccess) {
        fprintf(stderr, "FAIL: spin kernel launch\n");
        return 1;
    }
    if (st == RESHARD_OK)
        st = ops->post_send(c, 0, 0, buf, 1 << 20);
    if (st == RESHARD_OK)
        st = ops->post_recv(c, 0, 0, (char *)buf + (1 << 20), 1 << 20);
    if (st == RESHARD_OK)
        st = ops->round_end(c, 0);
    if (st == RESHARD_OK)
        st = ops->round_wait(c, 0, TIMEOUT_S);
    const double waited = rs_now_s() - t0;
    printf("stalled round -> %s after %.2f s: %s\n", reshard_status_string(st), waited,
           reshard_last_error());
    if (st != RESHARD_ERR_TIMEOUT) {
        fprintf(stderr, "FAIL: want TIMEOUT (the stream was stalled, nothing else wrong)\n");
        bad = 1;
    }
    if (waited < TIMEOUT_S * 0.9 || waited > TIMEOUT_S + MARGIN_S) {
        fprintf(stderr, "FAIL: took %.2f s for a %.1f s timeout\n", waited, TIMEOUT_S);
        bad = 1;
    }
    *(volatile int *)flag = 1; /* release the stream: the queued NCCL work can end */
    st = ops->round_begin(c, 1);
    if (st != RESHARD_ERR_TRANSPORT || strstr(reshard_last_error(), "aborted") == NULL) {
        fprintf(stderr, "FAIL: round_begin after the abort -> %s: %s\n", reshard_status_string(st),
                reshard_last_error());
        bad = 1;
    }
    if (ops->finish(c, RESHARD_OK, NULL, NULL, TIMEOUT_S) == RESHARD_OK) {
        fprintf(stderr, "FAIL: finish after the abort succeeded\n");
        bad = 1;
    }
    ops->free_staging(c, buf);
    const double t1 = rs_now_s();
    reshard_comm_destroy(c);
    const double dt = rs_now_s() - t1;
    printf("destroy after the abort: %.2f s\n", dt);
    if (dt > MARGIN_S + TIMEOUT_S) {
        fprintf(stderr, "FAIL: destroy took %.2f s\n", dt);
        bad = 1;
    }
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    cudaFreeHost(flag);
    return bad;
}

static int unmatched_self_receive(void)
{
    void *buf = NULL;
    reshard_comm_t *c = ready_endpoint(NULL, 1 << 20, &buf);
    if (c == NULL)
        return 1;
    const reshard_transport_ops_t *ops = c->ops;
    int bad = 0;
    const double t0 = rs_now_s();
    reshard_status_t st = ops->round_begin(c, 0);
    if (st == RESHARD_OK)
        st = ops->post_recv(c, 0, 0, buf, 1 << 20); /* no matching send, ever */
    if (st == RESHARD_OK)
        st = ops->round_end(c, 0);
    if (st == RESHARD_OK)
        st = ops->round_wait(c, 0, TIMEOUT_S);
    const double waited = rs_now_s() - t0;
    printf("unmatched self-receive -> %s after %.2f s: %s\n", reshard_status_string(st), waited,
           reshard_last_error());
    if (st != RESHARD_ERR_TRANSPORT || waited > TIMEOUT_S * 0.5) {
        fprintf(stderr, "FAIL: want TRANSPORT from the group's check, well before the timeout\n");
        bad = 1;
    }
    ops->free_staging(c, buf);
    reshard_comm_destroy(c);
    return bad;
}

int main(void)
{
    int ndev = 0;
    if (reshard_nccl_device_count(&ndev) != RESHARD_OK) {
        printf("SKIPPED: %s\n", reshard_last_error());
        return SKIP;
    }
    int bad = stalled_round();
    bad |= unmatched_self_receive();
    printf("%s\n", bad ? "FAILED" : "passed");
    return bad;
}
