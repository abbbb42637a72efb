/* Test helper: one rank's refit on host memory, planned, executed and verified. */
#include "refit_once.h"
#include "util/timeout.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static reshard_buffer_t *host_bufs(const reshard_layout_t *l, int32_t rank, int32_t *n, int fill)
{
    *n = reshard_layout_buffer_count(l, rank);
    reshard_buffer_t *b = calloc((size_t)*n + 1, sizeof *b);
    for (int32_t i = 0; b && i < *n; i++) {
        b[i].bytes = reshard_layout_buffer_bytes(l, rank, i);
        b[i].ptr = malloc(b[i].bytes ? (size_t)b[i].bytes : 1);
        if (b[i].ptr)
            memset(b[i].ptr, fill, (size_t)b[i].bytes);
    }
    return b;
}

static void host_free(reshard_buffer_t *b, int32_t n)
{
    for (int32_t i = 0; b && i < n; i++)
        free(b[i].ptr);
    free(b);
}

reshard_status_t rs_test_refit_once(const reshard_layout_t *src, const reshard_layout_t *dst,
                                    const reshard_plan_params_t *params, reshard_comm_t *comm,
                                    int32_t rank, uint64_t *verified, double *plan_s)
{
    reshard_plan_params_t p = *params;
    p.my_rank = rank;
    reshard_plan_t *plan = NULL;
    double t0 = rs_now_s();
    reshard_status_t st = reshard_plan_create(src, dst, &p, &plan);
    if (plan_s)
        *plan_s = rs_now_s() - t0;
    int32_t ns = 0, nd = 0;
    reshard_buffer_t *sb = host_bufs(src, rank, &ns, 0);
    reshard_buffer_t *db = host_bufs(dst, rank, &nd, RESHARD_SENTINEL_BYTE);
    if (st == RESHARD_OK && (!sb || !db))
        st = RESHARD_ERR_NOMEM;
    if (st == RESHARD_OK && ns)
        st = reshard_fill_pattern(src, rank, sb, ns);
    if (st == RESHARD_OK)
        st = reshard_plan_execute(plan, comm, sb, ns, db, nd, NULL);
    *verified = 0;
    if (st == RESHARD_OK)
        st = reshard_verify_pattern(dst, rank, db, nd, verified);
    host_free(sb, ns);
    host_free(db, nd);
    reshard_plan_destroy(plan);
    return st;
}

reshard_status_t rs_test_model_refit(const char *config, const char *train, const char *infer,
                                     reshard_model_t **model, reshard_model_refit_t *r)
{
    reshard_train_spec_t ts;
    reshard_infer_spec_t is;
    reshard_status_t st = reshard_model_load(config, NULL, model);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse(train, &ts);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse(infer, &is);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(*model, &ts, &is, r);
    return st;
}
