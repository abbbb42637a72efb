/* A program built against an installed reshard, as a user builds one: load a
 * shipped model by name (from the installed data), build both layouts of a
 * refit, plan it for every rank and print what it moves. Exit 0 on success. */
#include <stdio.h>

#include <reshard/reshard.h>
#include <reshard/reshard_config.h>
#include <reshard/reshard_model.h>
#include <reshard/reshard_transport.h>

int main(void)
{
    reshard_model_options_t opts = {.layers = 2};
    reshard_model_t *model = NULL;
    reshard_model_refit_t refit = {0};
    reshard_plan_t *plan = NULL;
    reshard_train_spec_t train;
    reshard_infer_spec_t infer;
    reshard_status_t st = reshard_model_load("qwen3-0.6b", &opts, &model);
    if (st == RESHARD_OK)
        st = reshard_train_spec_parse("tp=2,pp=2", &train);
    if (st == RESHARD_OK)
        st = reshard_infer_spec_parse("tp=2", &infer);
    if (st == RESHARD_OK)
        st = reshard_model_refit_create(model, &train, &infer, &refit);
    reshard_plan_params_t params = {.world_size = refit.infer_offset + refit.infer_world,
                                    .my_rank = RESHARD_ALL_RANKS};
    if (st == RESHARD_OK)
        st = reshard_plan_create(refit.train, refit.infer, &params, &plan);
    reshard_plan_stats_t stats = {0};
    if (st == RESHARD_OK)
        st = reshard_plan_get_stats(plan, &stats);
    /* the installed transport interface: a table of another version is refused */
    reshard_transport_ops_t ops = {.version = RESHARD_TRANSPORT_VERSION + 1, .name = "mine"};
    reshard_comm_t *comm = NULL;
    if (st == RESHARD_OK &&
        reshard_comm_create_transport(&ops, NULL, 0, 1, &comm) != RESHARD_ERR_INVALID_ARG) {
        fprintf(stderr, "consumer: reshard_comm_create_transport took a version %u table\n",
                (unsigned)ops.version);
        return 1;
    }
    if (st != RESHARD_OK) {
        fprintf(stderr, "consumer: %s: %s\n", reshard_status_string(st), reshard_last_error());
        return 1;
    }
#ifdef RESHARD_HAVE_MPI
    const int mpi = 1;
#else
    const int mpi = 0;
#endif
#ifdef RESHARD_HAVE_NCCL
    const int nccl = 1;
#else
    const int nccl = 0;
#endif
    printf("reshard %s (MPI %d, NCCL %d), data %s: qwen3-0.6b 2 layers, %lld declared "
           "buffers, plan moves %llu bytes in %lld transfers\n",
           RESHARD_VERSION_STRING, mpi, nccl, reshard_data_dir(),
           (long long)reshard_layout_declared_count(refit.infer, RESHARD_ALL_RANKS),
           (unsigned long long)stats.bytes_total, (long long)stats.transfers);
    reshard_plan_destroy(plan);
    reshard_model_refit_destroy(&refit);
    reshard_model_destroy(model);
    return stats.bytes_total > 0 ? 0 : 1;
}
