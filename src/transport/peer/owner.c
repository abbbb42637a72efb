/* Colocated reads: proof that the pid in an owner's table names the owner here (its
 * kernel, its PID namespace, and a random token read back from its memory). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "transport/peer/peer_read.h"
#include "util/error.h"

static unsigned char token[RS_PEER_TOKEN_BYTES];
static pthread_once_t token_once = PTHREAD_ONCE_INIT;

static void token_draw(void)
{
    size_t got = 0;
    for (int tries = 0; got < sizeof token && tries < 8; tries++) {
        ssize_t n = getrandom(token + got, sizeof token - got, 0);
        if (n > 0)
            got += (size_t)n;
    }
    if (got < sizeof token) { /* no getrandom: still distinct per process and start */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t v[2] = {(uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32),
                         (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&ts};
        memcpy(token, v, sizeof token);
    }
}

/* A forked child is another process: it draws its own token at once, so that a pid that
 * names the child of an owner does not pass for the owner. */
static void token_init(void)
{
    token_draw();
    (void)pthread_atfork(NULL, NULL, token_draw);
}

static void boot_id(char out[40])
{
    memset(out, 0, 40);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return;
    if (!fgets(out, 40, f))
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static void pid_ns(uint64_t *dev, uint64_t *ino)
{
    struct stat s;
    if (stat("/proc/self/ns/pid", &s) != 0) {
        *dev = *ino = 0;
        return;
    }
    *dev = (uint64_t)s.st_dev;
    *ino = (uint64_t)s.st_ino;
}

void rs_peer_identity(rs_peer_hdr_t *h)
{
    pthread_once(&token_once, token_init);
    h->pid = (int64_t)getpid();
    h->token_addr = (uint64_t)(uintptr_t)token;
    memcpy(h->token, token, sizeof h->token);
    boot_id(h->boot_id);
    pid_ns(&h->pidns_dev, &h->pidns_ino);
}

reshard_status_t rs_peer_prove_owner(const rs_peer_hdr_t *h, bool by_pid, bool by_vm, int32_t me,
                                     int32_t peer)
{
    rs_peer_hdr_t mine;
    memset(&mine, 0, sizeof mine);
    rs_peer_identity(&mine);
    char theirs[41];
    memcpy(theirs, h->boot_id, 40);
    theirs[40] = '\0';
    if (strcmp(theirs, mine.boot_id) != 0)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "rank %d: cannot read rank %d's buffers one-sided: rank %d runs on "
                        "another kernel (boot id %s, this rank's %s), so it is not on this "
                        "host: fix the placement (RESHARD_HOST, hosts=) or plan without "
                        "colocated reads; nothing was read from it",
                        me, peer, peer, theirs[0] ? theirs : "unknown",
                        mine.boot_id[0] ? mine.boot_id : "unknown");
    if (by_pid && (h->pidns_dev != mine.pidns_dev || h->pidns_ino != mine.pidns_ino))
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "rank %d: cannot read rank %d's buffers one-sided: rank %d is in "
                        "another PID namespace (pid:[%llu], this rank's pid:[%llu]; one "
                        "container or pod per rank?), so its pid %lld names another process "
                        "here: run the ranks of a host in one PID namespace (docker --pid=host, "
                        "a pod's shareProcessNamespace) or plan without colocated reads; "
                        "nothing was read from it",
                        me, peer, peer, (unsigned long long)h->pidns_ino,
                        (unsigned long long)mine.pidns_ino, (long long)h->pid);
    if (!by_vm)
        return RESHARD_OK;
    unsigned char got[RS_PEER_TOKEN_BYTES];
    struct iovec l = {got, sizeof got}, r = {(void *)(uintptr_t)h->token_addr, sizeof got};
    ssize_t n = process_vm_readv((pid_t)h->pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno != EFAULT) /* gone, refused, no such call: the probe names it */
        return rs_peer_cpu_probe(h->pid, me, peer, -1, h->token_addr, got, sizeof got);
    if (n != (ssize_t)sizeof got || memcmp(got, h->token, sizeof got) != 0)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "rank %d: cannot read rank %d's buffers one-sided: pid %lld here is not "
                        "rank %d's process (the identity token rank %d wrote at 0x%llx %s in "
                        "that pid): the ranks see pids differently (PID namespaces?); plan "
                        "without colocated reads; nothing was read from it",
                        me, peer, (long long)h->pid, peer, peer, (unsigned long long)h->token_addr,
                        n < 0 ? "is not mapped" : "reads back different");
    return RESHARD_OK;
}
