/* The colocated CPU read (process_vm_readv) from a forked child, which a parent may
 * always read (Yama ptrace_scope 1 allows descendants; 0 allows any process of the
 * same user): a strided box read element by element against an oracle, bytes outside
 * the box untouched; a position past the remote buffer refused before reading; an
 * unmapped address and a process that is gone each a named TRANSPORT error; and the
 * proof of an owner's identity (a forked child's pid, a forged boot id or namespace). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/peer/peer_read.h"

enum { ROWS = 37, COLS = 29 };

static uint32_t oracle(int i, int j)
{
    return 0x9e37u * (uint32_t)i + 0x85ebu * (uint32_t)j + 1u;
}

typedef struct {
    pid_t pid;
    uint64_t addr, unmapped;
} child_t;

/* A child holding [ROWS, COLS] uint32 column-major after a 5-element gap, and the
 * address of a page it unmapped; it waits until killed. */
static child_t spawn(void)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint32_t *m = malloc((5 + ROWS * COLS) * sizeof *m);
        for (int i = 0; i < ROWS; i++)
            for (int j = 0; j < COLS; j++)
                m[5 + i + ROWS * j] = oracle(i, j);
        void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(page, 4096);
        uint64_t msg[2] = {(uint64_t)(uintptr_t)m, (uint64_t)(uintptr_t)page};
        if (write(fd[1], msg, sizeof msg) != (ssize_t)sizeof msg)
            _exit(1);
        for (;;)
            pause();
    }
    uint64_t msg[2];
    assert_int_equal(read(fd[0], msg, sizeof msg), (ssize_t)sizeof msg);
    close(fd[0]);
    close(fd[1]);
    return (child_t){pid, msg[0], msg[1]};
}

static void frags(reshard_fragment_t *src, reshard_fragment_t *dst, reshard_box_t *box)
{
    memset(src, 0, sizeof *src);
    memset(dst, 0, sizeof *dst);
    *box = (reshard_box_t){.ndim = 2, .offset = {3, 4}, .extent = {30, 20}};
    src->box = (reshard_box_t){.ndim = 2, .offset = {0, 0}, .extent = {ROWS, COLS}};
    src->base = 5;
    src->stride[0] = 1;
    src->stride[1] = ROWS;
    dst->box = *box; /* row-major, one spare element per row */
    dst->stride[0] = 21;
    dst->stride[1] = 1;
}

static void strided_box_read(void **state)
{
    (void)state;
    child_t c = spawn();
    reshard_fragment_t sf, df;
    reshard_box_t box;
    frags(&sf, &df, &box);
    uint32_t out[30 * 21];
    memset(out, 0xA5, sizeof out);
    uint64_t remote_bytes = (5 + ROWS * COLS) * 4;
    assert_int_equal(
        rs_peer_cpu_read_box(c.pid, 0, 1, "T", 0, out, &df, c.addr, remote_bytes, &sf, &box, 4),
        RESHARD_OK);
    long wrong = 0;
    for (int i = 0; i < 30; i++) {
        for (int j = 0; j < 20; j++)
            wrong += out[21 * i + j] != oracle(3 + i, 4 + j);
        wrong += out[21 * i + 20] != 0xA5A5A5A5u; /* the spare element stays */
    }
    assert_int_equal(wrong, 0);
    /* a remote buffer too small for the box: refused before reading */
    assert_int_equal(
        rs_peer_cpu_read_box(c.pid, 0, 1, "T", 0, out, &df, c.addr, 1000, &sf, &box, 4),
        RESHARD_ERR_BUFFER);
    assert_non_null(strstr(reshard_last_error(), "past its 1000 bytes"));
    /* an unmapped address (freed by the owner) */
    uint32_t probe;
    assert_int_equal(rs_peer_cpu_probe(c.pid, 0, 1, 7, c.unmapped, &probe, 4),
                     RESHARD_ERR_TRANSPORT);
    assert_non_null(strstr(reshard_last_error(), "not mapped"));
    /* a process that is gone */
    kill(c.pid, SIGKILL);
    waitpid(c.pid, NULL, 0);
    assert_int_equal(
        rs_peer_cpu_read_box(c.pid, 0, 1, "T", 0, out, &df, c.addr, remote_bytes, &sf, &box, 4),
        RESHARD_ERR_TRANSPORT);
    assert_non_null(strstr(reshard_last_error(), "is gone"));
}

/* The proof of an owner's identity (rs_peer_prove_owner): this process's own table
 * passes; the same table with the pid of a child forked after the token was drawn (the
 * token's page is mapped at the same address there) is refused, the token reading back
 * different; a forged boot id or PID namespace is refused naming the reason, before
 * anything is read; a pid that is gone is the read's TRANSPORT. */
static void owner_identity(void **state)
{
    (void)state;
    rs_peer_hdr_t h;
    memset(&h, 0, sizeof h);
    rs_peer_identity(&h);
    assert_int_equal(h.pid, (int64_t)getpid());
    assert_true(h.token_addr != 0);
    assert_int_equal(rs_peer_prove_owner(&h, true, true, 1, 0), RESHARD_OK);
    child_t c = spawn(); /* forked after the token was drawn */
    rs_peer_hdr_t t = h;
    t.pid = c.pid;
    assert_int_equal(rs_peer_prove_owner(&t, true, true, 1, 0), RESHARD_ERR_UNSUPPORTED);
    assert_non_null(strstr(reshard_last_error(), "is not rank 0's process"));
    assert_non_null(strstr(reshard_last_error(), "reads back different"));
    assert_non_null(strstr(reshard_last_error(), "rank 1"));
    /* another kernel: refused for every kind of buffer */
    t = h;
    memcpy(t.boot_id, "00000000-0000-0000-0000-000000000000", 37);
    assert_int_equal(rs_peer_prove_owner(&t, false, false, 1, 0), RESHARD_ERR_UNSUPPORTED);
    assert_non_null(strstr(reshard_last_error(), "another kernel"));
    /* another PID namespace: refused where a buffer is reached through the pid */
    t = h;
    t.pidns_ino ^= 1;
    assert_int_equal(rs_peer_prove_owner(&t, false, false, 1, 0), RESHARD_OK);
    assert_int_equal(rs_peer_prove_owner(&t, true, false, 1, 0), RESHARD_ERR_UNSUPPORTED);
    assert_non_null(strstr(reshard_last_error(), "another PID namespace"));
    /* a process that is gone */
    kill(c.pid, SIGKILL);
    waitpid(c.pid, NULL, 0);
    t = h;
    t.pid = c.pid;
    assert_int_equal(rs_peer_prove_owner(&t, true, true, 1, 0), RESHARD_ERR_TRANSPORT);
    assert_non_null(strstr(reshard_last_error(), "is gone"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(strided_box_read),
                                       cmocka_unit_test(owner_identity)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
