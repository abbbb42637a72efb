/*
 * The MPI transport's ops, driven directly (no plan): rounds between every
 * pair of ranks with both slots in flight, message splitting, the outcome
 * agreement, abort propagation, and the round and agreement timeouts.
 * Run with 2..8 ranks.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reshard/reshard_mpi.h"
#include "mpi_check.h"
#include "transport/mpi/mpi_internal.h"

static int g_rank, g_size, g_failures;

static reshard_comm_t *new_comm(void)
{
    reshard_comm_t *c = NULL;
    reshard_status_t st = reshard_comm_create_mpi(MPI_COMM_WORLD, &c);
    if (st != RESHARD_OK) {
        fprintf(stderr, "rank %d: reshard_comm_create_mpi: %s\n", g_rank, reshard_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return c;
}

/* Bytes that rank `from` sends to rank `to` in round `r`: varies by pair and
 * round, zero for some. */
static uint64_t msg_bytes(int from, int to, int r)
{
    return (uint64_t)(((from * 7 + to * 13 + r * 5) % 6) * 1531);
}

static unsigned char msg_byte(int from, int to, int r, uint64_t i)
{
    return (unsigned char)(from * 31 + to * 17 + r * 7 + (int)(i % 251));
}

/* Several rounds, two in flight, every pair in both directions. */
static void run_rounds(reshard_comm_t *c)
{
    const reshard_transport_ops_t *ops = c->ops;
    CHECK(reshard_comm_rank(c) == g_rank && reshard_comm_size(c) == g_size, "rank/size");
    enum { ROUNDS = 6, MAXB = 6 * 1531 };
    void *stage[2];
    uint64_t per_slot = (uint64_t)2 * g_size * MAXB;
    for (int s = 0; s < 2; s++)
        CHECK(ops->alloc_staging(c, per_slot, &stage[s]) == RESHARD_OK, "alloc_staging");
    reshard_status_t st = RESHARD_OK;
    for (int r = 0; r < ROUNDS + 1 && st == RESHARD_OK; r++) {
        int slot = r % 2;
        if (r >= 2) { /* complete round r-2 in this slot and check it */
            st = ops->round_wait(c, slot, 10.0);
            CHECK(st == RESHARD_OK, "round_wait %d", r - 2);
            unsigned char *in = stage[slot];
            for (int p = 0; p < g_size; p++) {
                uint64_t n = msg_bytes(p, g_rank, r - 2);
                for (uint64_t i = 0; i < n; i++)
                    if (in[(size_t)p * MAXB + i] != msg_byte(p, g_rank, r - 2, i)) {
                        CHECK(0, "round %d from %d byte %llu", r - 2, p, (unsigned long long)i);
                        break;
                    }
            }
        }
        if (r >= ROUNDS)
            continue;
        unsigned char *in = stage[slot], *out = in + (size_t)g_size * MAXB;
        CHECK(ops->round_begin(c, slot) == RESHARD_OK, "round_begin");
        for (int p = 0; p < g_size; p++) {
            if (p == g_rank)
                continue;
            CHECK(ops->post_recv(c, slot, p, in + (size_t)p * MAXB, msg_bytes(p, g_rank, r)) ==
                      RESHARD_OK,
                  "post_recv");
        }
        for (int p = 0; p < g_size; p++) {
            if (p == g_rank)
                continue;
            uint64_t n = msg_bytes(g_rank, p, r);
            for (uint64_t i = 0; i < n; i++)
                out[(size_t)p * MAXB + i] = msg_byte(g_rank, p, r, i);
            CHECK(ops->post_send(c, slot, p, out + (size_t)p * MAXB, n) == RESHARD_OK, "post_send");
        }
        CHECK(ops->round_end(c, slot) == RESHARD_OK, "round_end");
        /* the receive loop above checked only peers; clear our own row */
        memset(in + (size_t)g_rank * MAXB, 0, MAXB);
        for (uint64_t i = 0; i < msg_bytes(g_rank, g_rank, r); i++)
            in[(size_t)g_rank * MAXB + i] = msg_byte(g_rank, g_rank, r, i);
    }
    /* the last round left in flight */
    st = ops->round_wait(c, (ROUNDS - 1) % 2, 10.0);
    CHECK(st == RESHARD_OK, "last round_wait");
    st = ops->finish(c, RESHARD_OK, NULL, NULL, 10.0);
    CHECK(st == RESHARD_OK, "finish: %s", reshard_status_string(st));
    for (int s = 0; s < 2; s++)
        ops->free_staging(c, stage[s]);
}

static void test_rounds(uint64_t max_message)
{
    rs_mpi_max_message_bytes = max_message;
    reshard_comm_t *c = new_comm();
    run_rounds(c);
    run_rounds(c); /* the comm is reusable */
    reshard_comm_destroy(c);
    rs_mpi_max_message_bytes = (uint64_t)1 << 30;
}

/* A rank fails before any transfer (as a rejected buffer): all agree on its
 * status, nothing is in flight, and the comm stays usable; its late abort
 * notices are dropped by the next execution. */
static void test_clean_failure(void)
{
    reshard_comm_t *c = new_comm();
    int bad = g_size / 2;
    reshard_status_t st =
        c->ops->finish(c, g_rank == bad ? RESHARD_ERR_BUFFER : RESHARD_OK, NULL, NULL, 10.0);
    CHECK(st == RESHARD_ERR_BUFFER, "finish returned %s", reshard_status_string(st));
    char want[32];
    snprintf(want, sizeof want, "rank %d", bad);
    CHECK(strstr(reshard_last_error(), want) != NULL, "message names rank %d: %s", bad,
          reshard_last_error());
    run_rounds(c);
    st = c->ops->finish(c, RESHARD_OK, NULL, NULL, 10.0);
    CHECK(st == RESHARD_OK, "finish after a clean failure: %s", reshard_status_string(st));
    reshard_comm_destroy(c);
}

/* The last rank fails before posting anything; the others are blocked in a
 * round wait on it and must stop early with its status, then all agree. */
static void test_abort_propagation(void)
{
    reshard_comm_t *c = new_comm();
    const reshard_transport_ops_t *ops = c->ops;
    int bad = g_size - 1;
    static char buf[64];
    reshard_status_t st;
    double t0 = MPI_Wtime();
    if (g_rank == bad) {
        st = ops->finish(c, RESHARD_ERR_BUFFER, NULL, NULL, 20.0);
    } else {
        CHECK(ops->round_begin(c, 0) == RESHARD_OK, "round_begin");
        CHECK(ops->post_recv(c, 0, bad, buf, sizeof buf) == RESHARD_OK, "post_recv");
        CHECK(ops->round_end(c, 0) == RESHARD_OK, "round_end");
        st = ops->round_wait(c, 0, 20.0);
        CHECK(st == RESHARD_ERR_BUFFER, "round_wait returned %s", reshard_status_string(st));
        st = ops->finish(c, st, NULL, NULL, 20.0);
    }
    double dt = MPI_Wtime() - t0;
    CHECK(st == RESHARD_ERR_BUFFER, "finish returned %s", reshard_status_string(st));
    CHECK(strstr(reshard_last_error(), "rank") != NULL, "message names the rank");
    CHECK(dt < 10.0, "abort took %.1f s", dt);
    /* a failed comm refuses further work */
    st = ops->round_begin(c, 1);
    CHECK(st == RESHARD_ERR_TRANSPORT, "round_begin after failure: %s", reshard_status_string(st));
    /* satisfy the receives left in flight so MPI finalizes cleanly */
    if (g_rank == bad)
        for (int p = 0; p < g_size - 1; p++)
            MPI_Send(buf, sizeof buf, MPI_BYTE, p, RS_MPI_TAG_SLOT0, reshard_comm_mpi_comm(c));
    MPI_Barrier(MPI_COMM_WORLD);
    reshard_comm_destroy(c);
}

/* Rank 1 never sends: rank 0's round wait times out in time; rank 0's
 * failure then reaches every rank through the agreement. */
static void test_round_timeout(void)
{
    reshard_comm_t *c = new_comm();
    const reshard_transport_ops_t *ops = c->ops;
    static char buf[64];
    reshard_status_t st;
    double t0 = MPI_Wtime();
    if (g_rank == 0) {
        CHECK(ops->round_begin(c, 0) == RESHARD_OK, "round_begin");
        CHECK(ops->post_recv(c, 0, 1, buf, sizeof buf) == RESHARD_OK, "post_recv");
        st = ops->round_wait(c, 0, 0.5);
        double dt = MPI_Wtime() - t0;
        CHECK(st == RESHARD_ERR_TIMEOUT, "round_wait returned %s", reshard_status_string(st));
        CHECK(strstr(reshard_last_error(), "rank(s) 1") != NULL, "message names rank 1: %s",
              reshard_last_error());
        CHECK(dt >= 0.45 && dt < 5.0, "timeout after %.2f s", dt);
        st = ops->finish(c, st, NULL, NULL, 20.0);
    } else {
        st = ops->finish(c, RESHARD_OK, NULL, NULL, 20.0);
    }
    CHECK(st == RESHARD_ERR_TIMEOUT, "finish returned %s", reshard_status_string(st));
    if (g_rank == 1)
        MPI_Send(buf, sizeof buf, MPI_BYTE, 0, RS_MPI_TAG_SLOT0, reshard_comm_mpi_comm(c));
    MPI_Barrier(MPI_COMM_WORLD);
    reshard_comm_destroy(c);
}

/* The last rank stalls before the agreement: every other rank returns
 * TIMEOUT within about the timeout. */
static void test_agreement_timeout(void)
{
    reshard_comm_t *c = new_comm();
    const reshard_transport_ops_t *ops = c->ops;
    int slow = g_size - 1;
    reshard_status_t st;
    if (g_rank == slow) {
        struct timespec ts = {1, 500000000L};
        nanosleep(&ts, NULL);
        st = ops->finish(c, RESHARD_OK, NULL, NULL, 20.0); /* completes: everyone contributed */
        (void)st;
    } else {
        double t0 = MPI_Wtime();
        st = ops->finish(c, RESHARD_OK, NULL, NULL, 0.5);
        double dt = MPI_Wtime() - t0;
        CHECK(st == RESHARD_ERR_TIMEOUT, "finish returned %s", reshard_status_string(st));
        CHECK(dt >= 0.45 && dt < 1.4, "agreement timeout after %.2f s", dt);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    reshard_comm_destroy(c);
}

static void test_bad_args(void)
{
    reshard_comm_t *c = NULL;
    CHECK(reshard_comm_create_mpi(MPI_COMM_NULL, &c) == RESHARD_ERR_INVALID_ARG, "COMM_NULL");
    CHECK(c == NULL, "no comm on error");
    CHECK(reshard_comm_create_mpi(MPI_COMM_WORLD, NULL) == RESHARD_ERR_INVALID_ARG, "out NULL");
    CHECK(reshard_comm_mpi_comm(NULL) == MPI_COMM_NULL, "mpi_comm(NULL)");
    c = new_comm();
    CHECK(c->ops->round_begin(c, 2) == RESHARD_ERR_INVALID_ARG, "slot 2");
    CHECK(c->ops->post_send(c, 0, g_size, "x", 1) == RESHARD_ERR_RANK, "peer out of range");
    CHECK(c->ops->finish(c, RESHARD_OK, NULL, NULL, 10.0) == RESHARD_OK, "finish");
    reshard_comm_destroy(c);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (g_size < 2) {
        fprintf(stderr, "run with at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    test_bad_args();
    test_rounds((uint64_t)1 << 30);
    test_rounds(1000); /* every message split into pieces */
    test_clean_failure();
    test_abort_propagation();
    test_round_timeout();
    test_agreement_timeout();
    int total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("test_mpi_transport: %d ranks, %s (%d failed checks)\n", g_size,
               total ? "FAILED" : "passed", total);
    MPI_Finalize();
    return total ? 1 : 0;
}
