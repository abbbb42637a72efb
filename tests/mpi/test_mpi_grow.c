/*
 * Growing back over MPI (reshard_comm_grow_mpi / reshard_comm_join_mpi):
 *
 *   mpirun -np 3 test_mpi_grow CONFIG
 *
 * Train tp=2 (plan ranks 0-1) -> infer tp=1, dp=2 (plan ranks 2-3) of the model CONFIG.
 * The three processes hold plan ranks 0-2: a view of their endpoint with plan rank 3
 * missing. They spawn one process of this program (MPI_Comm_spawn over
 * reshard_comm_mpi_comm of the view), then:
 *   1. a grow that names plan rank 1 (a member) is refused with INVALID_ARG on every
 *      member and on the new process, and no comm is made;
 *   2. a grow that names plan rank 3 succeeds: the new process's comm has plan rank 3 of
 *      4, every member keeps its plan rank;
 *   3. the original layouts are refit on the grown comm with fresh buffers: plan rank 3
 *      must verify exactly the bytes of its destination fragments (every element).
 * The lowest member prints "GROW OK" when all of it held on every process.
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rank_bytes.h"
#include "refit_once.h"
#include "reshard/reshard.h"
#include "reshard/reshard_elastic.h"
#include "reshard/reshard_model.h"
#include "reshard/reshard_mpi.h"

#define WORLD 4
#define NEW 3

static int check(int ok, const char *who, const char *what)
{
    if (!ok)
        fprintf(stderr, "%s: FAILED: %s (%s)\n", who, what, reshard_last_error());
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm parent;
    MPI_Comm_get_parent(&parent);
    bool is_new = parent != MPI_COMM_NULL;
    int wrank = 0, wsize = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (argc != 2 || (!is_new && wsize != 3)) {
        fprintf(stderr, "usage: mpirun -np 3 %s CONFIG\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *who = is_new ? "new process" : "member";
    reshard_model_t *model = NULL;
    reshard_model_refit_t r = {0};
    reshard_status_t st = rs_test_model_refit(argv[1], "tp=2", "tp=1,dp=2", &model, &r);
    if (!check(st == RESHARD_OK, who, "model"))
        MPI_Abort(MPI_COMM_WORLD, 2);

    int ok = 1;
    MPI_Comm inter = parent;
    reshard_comm_t *part = NULL, *grown = NULL, *refused = NULL;
    if (!is_new) {
        reshard_comm_t *all = NULL;
        const int32_t map[WORLD] = {0, 1, 2, -1};
        st = reshard_comm_create_mpi(MPI_COMM_WORLD, &all);
        if (st == RESHARD_OK)
            st = reshard_comm_create_view(all, WORLD, map, &part);
        if (!check(st == RESHARD_OK, who, "view of plan ranks 0-2"))
            MPI_Abort(MPI_COMM_WORLD, 2);
        ok &= check(reshard_comm_grow_mpi(part, MPI_COMM_WORLD, (int32_t[]){NEW}, 1, &refused) ==
                        RESHARD_ERR_INVALID_ARG,
                    who, "an intracommunicator is refused before any collective");
        int err = MPI_SUCCESS;
        if (MPI_Comm_spawn(argv[0], &argv[1], 1, MPI_INFO_NULL, 0, reshard_comm_mpi_comm(part),
                           &inter, &err) != MPI_SUCCESS ||
            err != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 2);
        /* 1: plan rank 1 is a member: refused on every side */
        st = reshard_comm_grow_mpi(part, inter, (int32_t[]){1}, 1, &refused);
        ok &= check(st == RESHARD_ERR_INVALID_ARG && !refused &&
                        strstr(reshard_last_error(), "already a member"),
                    who, "joining a member is INVALID_ARG naming it");
        /* 2: plan rank 3 joins */
        st = reshard_comm_grow_mpi(part, inter, (int32_t[]){NEW}, 1, &grown);
    } else {
        st = reshard_comm_join_mpi(parent, &refused);
        ok &= check(st == RESHARD_ERR_INVALID_ARG && !refused, who, "the refusal reaches it");
        st = reshard_comm_join_mpi(parent, &grown);
    }
    if (!check(st == RESHARD_OK, who, "grow"))
        MPI_Abort(inter, 2);
    int32_t me = is_new ? NEW : wrank;
    ok &= check(reshard_comm_rank(grown) == me && reshard_comm_size(grown) == WORLD, who,
                "the grown comm keeps the plan ranks");

    /* 3: the original layouts, fresh buffers */
    reshard_plan_params_t pp = {.field_mask =
                                    RESHARD_PLAN_PARAM_STAGING_BYTES | RESHARD_PLAN_PARAM_TIMEOUT,
                                .world_size = WORLD,
                                .my_rank = me,
                                .staging_bytes = 64 << 10,
                                .timeout_s = 20};
    uint64_t verified = 0;
    st = rs_test_refit_once(r.train, r.infer, &pp, grown, me, &verified, NULL);
    ok &= check(st == RESHARD_OK, who, "refit on the grown comm");
    if (me == NEW)
        ok &= check(verified > 0 && verified == layout_rank_bytes(r.infer, r.tensors, NEW), who,
                    "the new rank verified every byte of its destination buffers");

    MPI_Comm team;
    MPI_Intercomm_merge(inter, is_new, &team);
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, team);
    int trank;
    MPI_Comm_rank(team, &trank);
    if (trank == 0)
        printf("%s\n", all_ok ? "GROW OK: refusal on both sides, plan rank 3 joined and was refit "
                                "completely"
                              : "GROW FAILED");
    MPI_Comm_free(&team);
    reshard_comm_destroy(grown);
    reshard_comm_destroy(part);
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(model);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
