/* Declared buffers: the table a layout keeps per (rank, buffer), its errors,
 * the checks of reshard_plan_create against it, and the shapes model layouts
 * declare (from the Megatron and vLLM rules of FRAMEWORKS.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "reshard/reshard.h"
#include "reshard/reshard_model.h"

typedef struct {
    reshard_tensors_t *ts;
    reshard_layout_t *l;
} fix_t;

static void fix_make(fix_t *x)
{
    int64_t shape[2] = {8, 4};
    assert_int_equal(reshard_tensors_create(&x->ts), RESHARD_OK);
    assert_int_equal(reshard_tensors_add(x->ts, "w", RESHARD_BF16, 2, shape, 0, NULL, NULL),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_create(x->ts, &x->l), RESHARD_OK);
}

static void fix_free(fix_t *x)
{
    reshard_layout_destroy(x->l);
    reshard_tensors_destroy(x->ts);
}

static void test_declare_and_list(void **state)
{
    (void)state;
    fix_t x;
    fix_make(&x);
    int64_t s1[2] = {8, 4}, s2[1] = {16}, s3[3] = {2, 3, 5};
    /* declared out of order: listed by (rank, buffer) */
    assert_int_equal(reshard_layout_declare_buffer(x.l, 3, 1, "b.weight", RESHARD_FP32, 3, s3),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 3, 0, "a.weight", RESHARD_BF16, 2, s1),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 1, 4, "norm.weight", RESHARD_BF16, 1, s2),
                     RESHARD_OK);
    /* the same name on another rank is another parameter */
    assert_int_equal(reshard_layout_declare_buffer(x.l, 1, 0, "a.weight", RESHARD_BF16, 2, s1),
                     RESHARD_OK);
    /* an id declared before the last one in order is still found twice */
    assert_int_equal(reshard_layout_declare_buffer(x.l, 1, 4, "other.weight", RESHARD_BF16, 1, s2),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "rank 1, buffer 4: declared twice"));
    assert_int_equal(reshard_layout_declared_count(x.l, RESHARD_ALL_RANKS), 4);
    assert_int_equal(reshard_layout_declared_count(x.l, 1), 2);
    assert_int_equal(reshard_layout_declared_count(x.l, 2), 0);
    assert_int_equal(reshard_layout_declared_count(x.l, 3), 2);
    assert_int_equal(reshard_layout_declared_count(x.l, INT32_MAX), 0);
    const int32_t want[4][2] = {{1, 0}, {1, 4}, {3, 0}, {3, 1}};
    reshard_buffer_info_t bi;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(reshard_layout_buffer_info(x.l, RESHARD_ALL_RANKS, i, &bi), RESHARD_OK);
        assert_int_equal(bi.rank, want[i][0]);
        assert_int_equal(bi.buffer, want[i][1]);
    }
    assert_int_equal(reshard_layout_buffer_info(x.l, 3, 1, &bi), RESHARD_OK);
    assert_string_equal(bi.name, "b.weight");
    assert_int_equal(bi.dtype, RESHARD_FP32);
    assert_int_equal(bi.ndim, 3);
    assert_int_equal(bi.shape[0], 2);
    assert_int_equal(bi.shape[1], 3);
    assert_int_equal(bi.shape[2], 5);
    assert_int_equal(bi.shape[3], 0);
    assert_int_equal(bi.numel, 30);
    assert_int_equal(bi.bytes, 120);
    assert_int_equal(reshard_layout_buffer_info(x.l, 1, 1, &bi), RESHARD_OK);
    assert_string_equal(bi.name, "norm.weight");
    assert_int_equal(bi.bytes, 32);
    assert_int_equal(reshard_layout_buffer_info(x.l, 1, 2, &bi), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_buffer_info(x.l, 2, 0, &bi), RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_find_buffer(x.l, 1, "norm.weight"), 4);
    assert_int_equal(reshard_layout_find_buffer(x.l, 3, "a.weight"), 0);
    assert_int_equal(reshard_layout_find_buffer(x.l, 3, "norm.weight"), -1);
    assert_int_equal(reshard_layout_find_buffer(x.l, 0, "a.weight"), -1);
    assert_int_equal(reshard_layout_declared_buffer(x.l, 3, 0, &bi), RESHARD_OK);
    assert_string_equal(bi.name, "a.weight");
    assert_int_equal(bi.bytes, 64);
    assert_int_equal(reshard_layout_declared_buffer(x.l, 3, 2, &bi), RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "rank 3, buffer 2"));
    fix_free(&x);
}

/* Many buffers on many ranks (the hash indexes grow): every lookup answers. */
static void test_many(void **state)
{
    (void)state;
    fix_t x;
    fix_make(&x);
    int64_t s[1] = {3};
    char nm[64];
    for (int r = 7; r >= 0; r--)
        for (int b = 0; b < 300; b++) {
            snprintf(nm, sizeof nm, "p%d", b * 7 % 300);
            assert_int_equal(reshard_layout_declare_buffer(x.l, r, b, nm, RESHARD_INT8, 1, s),
                             RESHARD_OK);
        }
    assert_int_equal(reshard_layout_declared_count(x.l, RESHARD_ALL_RANKS), 2400);
    reshard_buffer_info_t bi;
    for (int r = 0; r < 8; r++) {
        assert_int_equal(reshard_layout_declared_count(x.l, r), 300);
        for (int b = 0; b < 300; b++) {
            snprintf(nm, sizeof nm, "p%d", b * 7 % 300);
            assert_int_equal(reshard_layout_find_buffer(x.l, r, nm), b);
            assert_int_equal(reshard_layout_buffer_info(x.l, r, b, &bi), RESHARD_OK);
            assert_int_equal(bi.rank, r);
            assert_int_equal(bi.buffer, b);
            assert_string_equal(bi.name, nm);
        }
    }
    fix_free(&x);
}

static void test_declare_errors(void **state)
{
    (void)state;
    fix_t x;
    fix_make(&x);
    int64_t s[2] = {8, 4}, zero[2] = {8, 0}, huge[2] = {INT64_MAX / 2, 4};
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 0, "a", RESHARD_BF16, 2, s), RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 0, "b", RESHARD_BF16, 2, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "rank 0, buffer 0: declared twice"));
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 1, "a", RESHARD_BF16, 2, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_non_null(strstr(reshard_last_error(), "parameter a declared twice"));
    assert_int_equal(reshard_layout_declare_buffer(NULL, 0, 1, "c", RESHARD_BF16, 2, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 1, NULL, RESHARD_BF16, 2, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 1, "", RESHARD_BF16, 2, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_declare_buffer(x.l, -1, 1, "c", RESHARD_BF16, 2, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, -1, "c", RESHARD_BF16, 2, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 1, "c", RESHARD_BF16, 0, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(
        reshard_layout_declare_buffer(x.l, 0, 1, "c", RESHARD_BF16, RESHARD_MAX_DIMS + 1, s),
        RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 1, "c", RESHARD_DTYPE_COUNT, 2, s),
                     RESHARD_ERR_INVALID_ARG);
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 1, "c", RESHARD_BF16, 2, zero),
                     RESHARD_ERR_SHAPE);
    assert_non_null(strstr(reshard_last_error(), "declared buffer c, rank 0, buffer 1"));
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 1, "c", RESHARD_BF16, 2, huge),
                     RESHARD_ERR_OVERFLOW);
    /* nothing of the failed calls was kept */
    assert_int_equal(reshard_layout_declared_count(x.l, RESHARD_ALL_RANKS), 1);
    fix_free(&x);
}

/* reshard_plan_create: a fragment past the declared bytes is BUFFER, a
 * fragment of another dtype DTYPE, both naming tensor, rank, buffer name, box. */
static void test_plan_checks(void **state)
{
    (void)state;
    fix_t x;
    fix_make(&x);
    reshard_layout_t *dst;
    assert_int_equal(reshard_layout_create(x.ts, &dst), RESHARD_OK);
    reshard_fragment_t f = {.tensor = 0, .rank = 0, .box = {2, {0, 0}, {8, 4}}, .stride = {4, 1}};
    assert_int_equal(reshard_layout_add_fragment(x.l, &f), RESHARD_OK);
    f.rank = 1;
    f.base = 1; /* the last element is at position 32: 66 bytes */
    assert_int_equal(reshard_layout_add_fragment(dst, &f), RESHARD_OK);
    int64_t s32[1] = {32}, s33[1] = {33};
    assert_int_equal(reshard_layout_declare_buffer(x.l, 0, 0, "w.src", RESHARD_BF16, 1, s32),
                     RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(dst, 1, 0, "w.dst", RESHARD_BF16, 1, s32),
                     RESHARD_OK);
    reshard_plan_params_t prm = {.world_size = 2, .my_rank = RESHARD_ALL_RANKS};
    reshard_plan_t *plan = NULL;
    assert_int_equal(reshard_plan_create(x.l, dst, &prm, &plan), RESHARD_ERR_BUFFER);
    assert_null(plan);
    const char *m = reshard_last_error();
    assert_non_null(strstr(m, "tensor w, rank 1, box [0:8, 0:4]"));
    assert_non_null(strstr(m, "needs 66 bytes of destination buffer 0 (w.dst), declared 64"));
    /* a rank's own plan checks the same */
    prm.my_rank = 0;
    assert_int_equal(reshard_plan_create(x.l, dst, &prm, &plan), RESHARD_ERR_BUFFER);
    reshard_layout_destroy(dst);

    /* 33 elements fit; an fp16 declaration for a bf16 tensor does not */
    assert_int_equal(reshard_layout_create(x.ts, &dst), RESHARD_OK);
    assert_int_equal(reshard_layout_add_fragment(dst, &f), RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(dst, 1, 0, "w.dst", RESHARD_BF16, 1, s33),
                     RESHARD_OK);
    prm.my_rank = RESHARD_ALL_RANKS;
    assert_int_equal(reshard_plan_create(x.l, dst, &prm, &plan), RESHARD_OK);
    reshard_plan_destroy(plan);
    reshard_layout_destroy(dst);
    assert_int_equal(reshard_layout_create(x.ts, &dst), RESHARD_OK);
    assert_int_equal(reshard_layout_add_fragment(dst, &f), RESHARD_OK);
    assert_int_equal(reshard_layout_declare_buffer(dst, 1, 0, "w.dst", RESHARD_FP16, 1, s33),
                     RESHARD_OK);
    assert_int_equal(reshard_plan_create(x.l, dst, &prm, &plan), RESHARD_ERR_DTYPE);
    assert_non_null(strstr(reshard_last_error(), "tensor w (bf16), rank 1, box [0:8, 0:4]: "
                                                 "destination buffer 0 (w.dst) is declared fp16"));
    reshard_layout_destroy(dst);
    fix_free(&x);
}

/* Expect rank @p rank of @p l to declare @p name with @p dtype and shape. */
static void expect_param(const reshard_layout_t *l, int32_t rank, const char *name,
                         reshard_dtype_t dtype, int ndim, const int64_t *shape)
{
    int32_t b = reshard_layout_find_buffer(l, rank, name);
    if (b < 0)
        fail_msg("rank %d does not declare %s", rank, name);
    reshard_buffer_info_t bi;
    assert_int_equal(reshard_layout_declared_buffer(l, rank, b, &bi), RESHARD_OK);
    assert_string_equal(bi.name, name);
    assert_int_equal(bi.dtype, dtype);
    assert_int_equal(bi.ndim, ndim);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        assert_int_equal(bi.shape[d], shape[d]);
        numel *= (uint64_t)shape[d];
    }
    assert_int_equal(bi.bytes, numel * reshard_dtype_size(dtype));
}

/* Qwen3-0.6B (H 1024, 16 heads, 8 kv heads, head_dim 128, I 3072, vocab
 * 151936, tied), Megatron tp=2 and vLLM tp=2. Shapes from the rules:
 * Megatron linear_qkv rows = (heads + 2 kv) / tp * head_dim, vocabulary
 * padded to 128 * tp and split; vLLM qkv_proj likewise, gate_up_proj
 * 2 I / tp rows, vocabulary padded to 64; norms are [H] vectors. */
static void test_model_declares(void **state)
{
    (void)state;
    reshard_model_options_t mo = {.layers = 2};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("qwen3-0.6b", &mo, &m), RESHARD_OK);
    reshard_train_spec_t ts = {.tp = 2, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 1};
    reshard_infer_spec_t is = {.tp = 2, .dp = 1};
    reshard_model_refit_t r;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &r), RESHARD_OK);
    for (int32_t rank = 0; rank < 2; rank++) {
        expect_param(r.train, rank, "decoder.layers.1.self_attention.linear_qkv.weight",
                     RESHARD_BF16, 2, (int64_t[]){(16 + 2 * 8) / 2 * 128, 1024});
        expect_param(r.train, rank, "decoder.layers.0.self_attention.linear_proj.weight",
                     RESHARD_BF16, 2, (int64_t[]){1024, 16 * 128 / 2});
        expect_param(r.train, rank, "decoder.layers.0.mlp.linear_fc1.weight", RESHARD_BF16, 2,
                     (int64_t[]){2 * 3072 / 2, 1024});
        expect_param(r.train, rank, "embedding.word_embeddings.weight", RESHARD_BF16, 2,
                     (int64_t[]){152064 / 2, 1024});
        expect_param(r.train, rank, "decoder.final_layernorm.weight", RESHARD_BF16, 1,
                     (int64_t[]){1024});
        int32_t vr = 2 + rank;
        expect_param(r.infer, vr, "model.layers.0.self_attn.qkv_proj.weight", RESHARD_BF16, 2,
                     (int64_t[]){(16 + 2 * 8) / 2 * 128, 1024});
        expect_param(r.infer, vr, "model.layers.1.mlp.gate_up_proj.weight", RESHARD_BF16, 2,
                     (int64_t[]){2 * 3072 / 2, 1024});
        expect_param(r.infer, vr, "model.layers.1.input_layernorm.weight", RESHARD_BF16, 1,
                     (int64_t[]){1024});
        expect_param(r.infer, vr, "model.embed_tokens.weight", RESHARD_BF16, 2,
                     (int64_t[]){151936 / 2, 1024});
        /* every buffer a fragment uses is declared, with the model table's size */
        for (int side = 0; side < 2; side++) {
            const reshard_layout_t *l = side ? r.infer : r.train;
            const reshard_model_buffers_t *mb = side ? r.infer_buffers : r.train_buffers;
            int32_t rk = side ? vr : rank;
            int32_t nb = reshard_layout_buffer_count(l, rk);
            assert_true(nb > 0);
            assert_int_equal(reshard_layout_declared_count(l, rk), nb);
            for (int32_t b = 0; b < nb; b++) {
                reshard_buffer_info_t bi;
                assert_int_equal(reshard_layout_declared_buffer(l, rk, b, &bi), RESHARD_OK);
                assert_int_equal(bi.bytes, reshard_model_buffer_bytes(mb, rk, b));
                assert_true(reshard_layout_buffer_bytes(l, rk, b) <= bi.bytes);
            }
        }
    }
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(m);
}

/* FP8: the scale buffer beside a weight is fp32 [ceil(rows/128), ceil(cols/128)]. */
static void test_model_declares_fp8(void **state)
{
    (void)state;
    reshard_model_options_t mo = {.layers = 1, .dtype = RESHARD_FP8_E4M3};
    reshard_model_t *m;
    assert_int_equal(reshard_model_load("qwen3-0.6b", &mo, &m), RESHARD_OK);
    reshard_train_spec_t ts = {.tp = 1, .pp = 1, .dp = 1, .cp = 1, .ep = 1, .etp = 1};
    reshard_infer_spec_t is = {.tp = 1, .dp = 1};
    reshard_model_refit_t r;
    assert_int_equal(reshard_model_refit_create(m, &ts, &is, &r), RESHARD_OK);
    expect_param(r.infer, 1, "model.layers.0.self_attn.qkv_proj.weight", RESHARD_FP8_E4M3, 2,
                 (int64_t[]){(16 + 2 * 8) * 128, 1024});
    expect_param(r.infer, 1, "model.layers.0.self_attn.qkv_proj.weight_scale_inv", RESHARD_FP32, 2,
                 (int64_t[]){(16 + 2 * 8) * 128 / 128, 1024 / 128});
    expect_param(r.infer, 1, "model.layers.0.mlp.down_proj.weight_scale_inv", RESHARD_FP32, 2,
                 (int64_t[]){1024 / 128, 3072 / 128});
    reshard_model_refit_destroy(&r);
    reshard_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declare_and_list), cmocka_unit_test(test_many),
        cmocka_unit_test(test_declare_errors),   cmocka_unit_test(test_plan_checks),
        cmocka_unit_test(test_model_declares),   cmocka_unit_test(test_model_declares_fp8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
