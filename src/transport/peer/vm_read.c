/* One-sided reads from a process of this host with process_vm_readv(2). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#include "layout/layout_internal.h"
#include "transport/peer/peer_read.h"
#include "util/error.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

#define RS_IOV_BATCH 1024 /* IOV_MAX on Linux */

static int ptrace_scope(void)
{
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int v = -1;
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

void rs_peer_cpu_expose(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    if (ptrace_scope() == 1)
        (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

static reshard_status_t read_error(int err, int64_t pid, int32_t me, int32_t peer,
                                   const char *tensor, int64_t buffer, uint64_t got, uint64_t want)
{
    const char *t = tensor ? tensor : "(probe)";
    if (err == 0)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: colocated read of tensor %s from rank %d (pid %lld) source "
                        "buffer %lld: %llu of %llu bytes read (the owner unmapped part of it)",
                        me, t, peer, (long long)pid, (long long)buffer, (unsigned long long)got,
                        (unsigned long long)want);
    if (err == ESRCH)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: colocated read of tensor %s from rank %d: its process (pid "
                        "%lld) is gone",
                        me, t, peer, (long long)pid);
    if (err == EPERM)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: colocated read of tensor %s from rank %d (pid %lld) source "
                        "buffer %lld refused (process_vm_readv: EPERM; kernel.yama.ptrace_scope "
                        "= %d): the ranks need the same user and ptrace access to each other "
                        "(ptrace_scope 0, or 1 where reshard sets PR_SET_PTRACER on the ranks "
                        "read; 2 needs CAP_SYS_PTRACE, 3 forbids it): or plan without colocated "
                        "reads",
                        me, t, peer, (long long)pid, (long long)buffer, ptrace_scope());
    if (err == EFAULT)
        return rs_error(RESHARD_ERR_TRANSPORT,
                        "rank %d: colocated read of tensor %s from rank %d (pid %lld) source "
                        "buffer %lld: the address is not mapped in the owner (freed after it "
                        "was bound?)",
                        me, t, peer, (long long)pid, (long long)buffer);
    if (err == ENOSYS)
        return rs_error(RESHARD_ERR_UNSUPPORTED,
                        "rank %d: colocated reads need process_vm_readv, which this kernel "
                        "lacks: plan without colocated reads",
                        me);
    return rs_error(RESHARD_ERR_TRANSPORT,
                    "rank %d: colocated read of tensor %s from rank %d (pid %lld) source buffer "
                    "%lld: process_vm_readv: %s",
                    me, t, peer, (long long)pid, (long long)buffer, strerror(err));
}

/* One batch of runs: every byte or an error. */
static reshard_status_t readv_all(int64_t pid, struct iovec *l, struct iovec *r, int n, int32_t me,
                                  int32_t peer, const char *tensor, int64_t buffer)
{
    uint64_t want = 0;
    for (int i = 0; i < n; i++)
        want += r[i].iov_len;
    ssize_t got = process_vm_readv((pid_t)pid, l, (unsigned long)n, r, (unsigned long)n, 0);
    if (got < 0)
        return read_error(errno, pid, me, peer, tensor, buffer, 0, want);
    if ((uint64_t)got != want)
        return read_error(0, pid, me, peer, tensor, buffer, (uint64_t)got, want);
    return RESHARD_OK;
}

reshard_status_t rs_peer_cpu_probe(int64_t pid, int32_t me, int32_t peer, int64_t buffer,
                                   uint64_t remote, void *out, uint64_t bytes)
{
    struct iovec l = {out, (size_t)bytes}, r = {(void *)(uintptr_t)remote, (size_t)bytes};
    return readv_all(pid, &l, &r, 1, me, peer, NULL, buffer);
}

reshard_status_t rs_peer_cpu_read_box(int64_t pid, int32_t me, int32_t peer,
                                      const char *tensor_name, int64_t buffer, void *dst,
                                      const reshard_fragment_t *dst_frag, uint64_t remote,
                                      uint64_t remote_bytes, const reshard_fragment_t *src_frag,
                                      const reshard_box_t *box, uint32_t elem_size)
{
    if (rs_box_numel(box) <= 0)
        return RESHARD_OK;
    int last = box->ndim - 1;
    int64_t ds = dst_frag->stride[last], ss = src_frag->stride[last], n = box->extent[last];
    /* a row is one run on both sides when the last dim is dense (or one element) */
    bool rows = n == 1 || (ds == 1 && ss == 1);
    struct iovec l[RS_IOV_BATCH], r[RS_IOV_BATCH];
    int k = 0;
    int64_t idx[RESHARD_MAX_DIMS];
    memcpy(idx, box->offset, sizeof idx);
    do {
        int64_t runs = rows ? 1 : n, len = rows ? n : 1;
        for (int64_t e = 0; e < runs; e++) {
            int64_t sp = rs_frag_pos(src_frag, idx) + e * ss,
                    dp = rs_frag_pos(dst_frag, idx) + e * ds;
            uint64_t so = (uint64_t)sp * elem_size, bytes = (uint64_t)len * elem_size;
            if (sp < 0 || so + bytes > remote_bytes)
                return rs_error(RESHARD_ERR_BUFFER,
                                "rank %d: colocated read of tensor %s from rank %d source buffer "
                                "%lld: bytes [%llu, %llu) lie past its %llu bytes",
                                me, tensor_name, peer, (long long)buffer, (unsigned long long)so,
                                (unsigned long long)(so + bytes), (unsigned long long)remote_bytes);
            uint8_t *o = (uint8_t *)dst + (size_t)dp * elem_size;
            uint8_t *i = (uint8_t *)(uintptr_t)(remote + so);
            /* merge with the previous run when both sides continue it */
            if (k > 0 && (uint8_t *)l[k - 1].iov_base + l[k - 1].iov_len == o &&
                (uint8_t *)r[k - 1].iov_base + r[k - 1].iov_len == i) {
                l[k - 1].iov_len += (size_t)bytes;
                r[k - 1].iov_len += (size_t)bytes;
                continue;
            }
            if (k == RS_IOV_BATCH) {
                reshard_status_t st = readv_all(pid, l, r, k, me, peer, tensor_name, buffer);
                if (st != RESHARD_OK)
                    return st;
                k = 0;
            }
            l[k] = (struct iovec){o, (size_t)bytes};
            r[k] = (struct iovec){i, (size_t)bytes};
            k++;
        }
    } while (rs_box_next_row(box, idx));
    return k ? readv_all(pid, l, r, k, me, peer, tensor_name, buffer) : RESHARD_OK;
}
