/*
 * Without a CUDA device the NCCL build fails cleanly: UNSUPPORTED with a message that says
 * a CUDA device is needed, no crash, nothing created. Runs on machines WITHOUT a GPU
 * (label nccl); with a device it exits 77 (skipped) since the path cannot be reached.
 */
#include <stdio.h>
#include <string.h>

#include "reshard/reshard_nccl.h"

int main(void)
{
    int n = -1, bad = 0;
    reshard_status_t st = reshard_nccl_device_count(&n);
    if (st == RESHARD_OK) {
        printf("SKIPPED: %d CUDA device(s) visible; this test covers the no-device path\n", n);
        return 77;
    }
    printf("reshard_nccl_device_count -> %s: %s\n", reshard_status_string(st),
           reshard_last_error());
    if (st != RESHARD_ERR_UNSUPPORTED || n != 0 ||
        strstr(reshard_last_error(), "needs a CUDA device") == NULL) {
        fprintf(stderr, "FAIL: want UNSUPPORTED, count 0 and a 'needs a CUDA device' message\n");
        bad = 1;
    }
    if (reshard_nccl_unique_id_size() != 128) {
        fprintf(stderr, "FAIL: unique id size %zu\n", reshard_nccl_unique_id_size());
        bad = 1;
    }
    char id[128];
    memset(id, 0, sizeof id);
    reshard_comm_t *c = NULL;
    st = reshard_comm_create_nccl_from_id(id, 0, 1, -1, NULL, &c);
    printf("reshard_comm_create_nccl_from_id -> %s: %s\n", reshard_status_string(st),
           reshard_last_error());
    if (st != RESHARD_ERR_UNSUPPORTED || c != NULL ||
        strstr(reshard_last_error(), "--transport nccl needs a CUDA device") == NULL) {
        fprintf(stderr, "FAIL: want UNSUPPORTED and no endpoint\n");
        bad = 1;
    }
    /* a caller's communicator cannot exist without a device either: refused before use */
    char fake[64];
    st = reshard_comm_create_nccl((struct ncclComm *)(void *)fake, NULL, &c);
    if (st != RESHARD_ERR_UNSUPPORTED || c != NULL) {
        fprintf(stderr, "FAIL: reshard_comm_create_nccl -> %s\n", reshard_status_string(st));
        bad = 1;
    }
    st = reshard_comm_create_nccl_from_id(id, 1, 1, -1, NULL, &c);
    if (st != RESHARD_ERR_INVALID_ARG) {
        fprintf(stderr, "FAIL: rank 1 of 1 -> %s\n", reshard_status_string(st));
        bad = 1;
    }
    void *p = NULL;
    if (reshard_nccl_alloc(NULL, 16, &p) != RESHARD_ERR_INVALID_ARG || p != NULL) {
        fprintf(stderr, "FAIL: reshard_nccl_alloc without an endpoint\n");
        bad = 1;
    }
    printf("%s\n", bad ? "FAILED" : "passed");
    return bad;
}
