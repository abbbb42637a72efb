/* Test helper: see mesh_pair.h. */
#include "mesh_pair.h"

#include <stdio.h>
#include <stdlib.h>

static void must(reshard_status_t st, const char *what)
{
    if (st != RESHARD_OK) {
        fprintf(stderr, "mesh pair: %s: %s\n", what, reshard_last_error());
        abort();
    }
}

static void side(reshard_layout_t *l, int32_t a, int32_t b)
{
    const int32_t ranks[2] = {a, b};
    const reshard_mesh_t mesh = {.ndim = 1, .shape = {2}, .ranks = ranks};
    const reshard_placement_t shard0 = {.kind = RESHARD_SHARD, .dim = 0};
    must(reshard_layout_add_dtensor(l, 0, &mesh, &shard0, 0, 0), "add_dtensor");
    const int64_t local[2] = {RS_MESH_PAIR_ROWS / 2, RS_MESH_PAIR_COLS};
    for (int i = 0; i < 2; i++)
        must(reshard_layout_declare_buffer(l, ranks[i], 0, "w", RESHARD_FP32, 2, local),
             "declare_buffer");
}

void rs_mesh_pair_make(rs_mesh_pair_t *p, int swapped)
{
    const int64_t shape[2] = {RS_MESH_PAIR_ROWS, RS_MESH_PAIR_COLS};
    must(reshard_tensors_create(&p->ts), "tensors_create");
    must(reshard_tensors_add(p->ts, "w", RESHARD_FP32, 2, shape, 0, NULL, NULL), "tensors_add");
    must(reshard_layout_create(p->ts, &p->src), "layout_create");
    must(reshard_layout_create(p->ts, &p->dst), "layout_create");
    side(p->src, 0, 1);
    side(p->dst, swapped ? 3 : 2, swapped ? 2 : 3);
}

void rs_mesh_pair_free(rs_mesh_pair_t *p)
{
    reshard_layout_destroy(p->src);
    reshard_layout_destroy(p->dst);
    reshard_tensors_destroy(p->ts);
}
