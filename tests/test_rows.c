/*
 * test_rows.c - row-sparse values in the local store (kvs.h's "Row-sparse
 * values"), each result against a plain C reference computed here: sums
 * of overlapping and repeated rows in every dtype, empty pushes, ASSIGN's
 * zeroed rows, lazy sgd (momentum, wd, clip) and adam row for row with
 * absent rows and their state bit-identical to before, lazy_update=0 as a
 * dense push of the dense sum, the updater's dense input, compact pulls,
 * -ENOSPC, bad values refused with nothing changed, init from rows, the
 * state file after lazy updates, pushpull.
 *
 * It reaches the engine under the public calls (front.h) only to read
 * optimizer state; everything else goes through kvs.h. Each case has a
 * deadline of its own (an alarm, KVS_TEST_SLOW times longer). The
 * engine's row calls that kvsd makes and the row kernels are tested in
 * test_rows_engine.c.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvs.h"
#include "front.h"
#include "kernels/array.h"
#include "kernels/optim.h"
#include "kernels/rows.h"
#include "store/engine.h"
#include "rowsutil.h"

/* ---- sums ---------------------------------------------------------------- */

/* Three values of one key in one call, rows overlapping and repeated,
 * unsorted: the stored value is their dense sum (ASSIGN). */
static void test_sum_overlapping_repeated(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], got[N], want[N];
    float d0[4 * C], d1[3 * C], d2[2 * C];
    int64_t i0[] = { 7, 2, 7, 0 }, i1[] = { 2, 9, 3 }, i2[] = { 9, 9 };
    kvs_row_sparse_t v[3] = { rsp(d0, i0, 4, KVS_FLOAT32), rsp(d1, i1, 3, KVS_FLOAT32),
                              rsp(d2, i2, 2, KVS_FLOAT32) };
    kvs_key_t keys[3] = { IK(5), IK(5), IK(5) };

    (void)state;
    fill_w(d0, 4 * C, 0.25f);
    fill_w(d1, 3 * C, -1.5f);
    fill_w(d2, 2 * C, 3.0f);
    fill_w(w, N, 9.0f);
    init_f32(kv, 5, w);
    OK(kvs_push_row_sparse(kv, 3, keys, v, 0));
    pull_f32(kv, 5, got);
    dense_sum(want, v, 3);
    EXPECT_F32(got, want, N);
    /* Stretches of rows that several inputs hold alike sum as one. */
    {
        int64_t a[] = { 2, 3, 4, 8 }, b[] = { 0, 2, 3, 4 }, c[] = { 2, 3, 5 };
        float da[4 * C], db[4 * C], dc[3 * C];
        kvs_row_sparse_t u[3] = { rsp(da, a, 4, KVS_FLOAT32), rsp(db, b, 4, KVS_FLOAT32),
                                  rsp(dc, c, 3, KVS_FLOAT32) };

        fill_w(da, 4 * C, 1.0f);
        fill_w(db, 4 * C, -7.5f);
        fill_w(dc, 3 * C, 0.125f);
        OK(kvs_push_row_sparse(kv, 3, keys, u, 0));
        pull_f32(kv, 5, got);
        dense_sum(want, u, 3);
        EXPECT_F32(got, want, N);
    }
    kvs_close(kv);
}

/* The union-sum kernel in every dtype, against a reference summed as the
 * dense sum is: half types in float32 rounded once, integers wrapping. */
static void test_sum_dtypes(void **state)
{
    const kvs_dtype_t dts[] = { KVS_FLOAT16, KVS_BFLOAT16, KVS_INT32, KVS_INT64, KVS_UINT8,
                                KVS_FLOAT64, KVS_FLOAT32 };

    (void)state;
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
        kvs_dtype_t dt = dts[t];
        size_t es = kvs_dtype_size(dt);
        kvs_t *kv = new_store("local");
        uint8_t zero[N * 8] = { 0 }, got[N * 8], want[N * 8], d[3][4 * C * 8];
        int64_t idx[3][4] = { { 4, 1, 4, 8 }, { 1, 0, 8, 8 }, { 8, 2, 4, 1 } };
        kvs_row_sparse_t v[3];
        kvs_key_t keys[3] = { IK(1), IK(1), IK(1) };
        kvs_array_t a = ARR(zero, dt, 2, R, C);
        double acc[N];
        uint64_t iacc[N];

        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < 4 * C; j++) {
                double x = (double)((i + 1) * 37 + j * 11 % 23) * 0.173 - 1.9;

                switch (dt) {
                case KVS_FLOAT16: ((uint16_t *)d[i])[j] = kvs__f32_to_f16((float)x); break;
                case KVS_BFLOAT16: ((uint16_t *)d[i])[j] = kvs__f32_to_bf16((float)x); break;
                case KVS_FLOAT32: ((float *)d[i])[j] = (float)x; break;
                case KVS_FLOAT64: ((double *)d[i])[j] = x; break;
                case KVS_INT32:   /* near the top: the sums wrap */
                    ((uint32_t *)d[i])[j] = (uint32_t)INT32_MAX - 3u + (uint32_t)(j + i);
                    break;
                case KVS_INT64:
                    ((uint64_t *)d[i])[j] = (uint64_t)INT64_MAX - 2u + (uint64_t)(j * i);
                    break;
                default: ((uint8_t *)d[i])[j] = (uint8_t)(250 + j + 3 * i); break;
                }
            }
            v[i] = rsp(d[i], idx[i], 4, dt);
        }
        OK(kvs_init(kv, 1, &keys[0], &a));
        OK(kvs_push_row_sparse(kv, 3, keys, v, 0));
        a.data = got;
        OK(kvs_pull(kv, 1, &keys[0], &a, 0));
        /* Reference: every row's elements added in list and position order. */
        for (int x = 0; x < N; x++) {
            acc[x] = 0;
            iacc[x] = 0;
        }
        int seen[R] = { 0 };
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                seen[idx[i][j]] = 1;
                for (int c = 0; c < C; c++) {
                    int x = (int)idx[i][j] * C + c, y = j * C + c;

                    switch (dt) {
                    case KVS_FLOAT16:
                        acc[x] = (float)acc[x] + kvs__f16_to_f32(((uint16_t *)d[i])[y]);
                        break;
                    case KVS_BFLOAT16:
                        acc[x] = (float)acc[x] + kvs__bf16_to_f32(((uint16_t *)d[i])[y]);
                        break;
                    case KVS_FLOAT32: acc[x] = (float)((float)acc[x] + ((float *)d[i])[y]); break;
                    case KVS_FLOAT64: acc[x] += ((double *)d[i])[y]; break;
                    case KVS_INT32: iacc[x] += (uint32_t)((int32_t *)d[i])[y]; break;
                    case KVS_INT64: iacc[x] += (uint64_t)((int64_t *)d[i])[y]; break;
                    default: iacc[x] += ((uint8_t *)d[i])[y]; break;
                    }
                }
            }
        for (int x = 0; x < N; x++) {
            switch (dt) {
            case KVS_FLOAT16: ((uint16_t *)want)[x] = kvs__f32_to_f16((float)acc[x]); break;
            case KVS_BFLOAT16: ((uint16_t *)want)[x] = kvs__f32_to_bf16((float)acc[x]); break;
            case KVS_FLOAT32: ((float *)want)[x] = (float)acc[x]; break;
            case KVS_FLOAT64: ((double *)want)[x] = acc[x]; break;
            case KVS_INT32: ((uint32_t *)want)[x] = (uint32_t)iacc[x]; break;
            case KVS_INT64: ((uint64_t *)want)[x] = iacc[x]; break;
            default: ((uint8_t *)want)[x] = (uint8_t)iacc[x]; break;
            }
            if (!seen[x / C])
                memset(want + (size_t)x * es, 0, es);
        }
        if (memcmp(got, want, N * es) != 0)
            fail_msg("dtype %s: the row-sparse sum differs from the reference",
                     kvs_dtype_name(dt));
        kvs_close(kv);
    }
}

/* An empty push: ASSIGN makes the value zero; a lazy optimizer changes no
 * element (but counts the step). */
static void test_empty_push(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], got[N], zero[N] = { 0 };
    kvs_row_sparse_t v = rsp(NULL, NULL, 0, KVS_FLOAT32);
    kvs_key_t key = IK(2);

    (void)state;
    fill_w(w, N, 1.0f);
    init_f32(kv, 2, w);
    OK(kvs_push_row_sparse(kv, 1, &key, &v, 0));
    pull_f32(kv, 2, got);
    EXPECT_F32(got, zero, N);

    OK(kvs_reinit(kv, 1, &key, &ARR(w, KVS_FLOAT32, 2, R, C)));
    OK(kvs_set_optimizer(kv, "adam lr=0.1 wd=0.5"));
    OK(kvs_push_row_sparse(kv, 1, &key, &v, 0));
    pull_f32(kv, 2, got);
    assert_memory_equal(got, w, sizeof w);
    assert_non_null(state_of(kv, 2));
    assert_int_equal(state_of(kv, 2)->t, 1);
    kvs_close(kv);
}

/* ASSIGN: rows absent from the sum become zero, as MXNet copies the merge. */
static void test_assign_zeroes_absent_rows(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], got[N], want[N], d[2 * C];
    int64_t idx[] = { 6, 3 };
    kvs_row_sparse_t v = rsp(d, idx, 2, KVS_FLOAT32);

    (void)state;
    fill_w(w, N, 4.0f);
    fill_w(d, 2 * C, -2.0f);
    init_f32(kv, 3, w);
    OK(kvs_push_row_sparse(kv, 1, &IK(3), &v, 0));
    pull_f32(kv, 3, got);
    memset(want, 0, sizeof want);
    memcpy(want + 6 * C, d, sizeof(float) * C);
    memcpy(want + 3 * C, d + C, sizeof(float) * C);
    EXPECT_F32(got, want, N);
    kvs_close(kv);
}

/* ---- lazy optimizers --------------------------------------------------- */

/* Two pushes of different rows (one row in both): the rows in a sum and
 * their momentum follow sgd; every other row and its momentum are
 * bit-identical to before. */
static void test_lazy_sgd(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], mom[N] = { 0 }, got[N], st[N], d[3 * C], g[N];
    int64_t pushes[2][3] = { { 8, 1, 8 }, { 4, 1, 5 } };
    kvs_key_t key = IK(4);

    (void)state;
    fill_w(w, N, -3.0f);
    init_f32(kv, 4, w);
    OK(kvs_set_optimizer(kv, "sgd lr=0.1 momentum=0.9 wd=0.01 clip_gradient=0.8"));
    for (int p = 0; p < 2; p++) {
        kvs_row_sparse_t v = rsp(d, pushes[p], 3, KVS_FLOAT32);
        int in[R] = { 0 };

        fill_w(d, 3 * C, 0.1f + (float)p);
        OK(kvs_push_row_sparse(kv, 1, &key, &v, 0));
        dense_sum(g, &v, 1);
        for (int j = 0; j < 3; j++)
            in[pushes[p][j]] = 1;
        for (int x = 0; x < N; x++)
            if (in[x / C])
                ref_sgd(&w[x], &mom[x], g[x], 0.1f, 0.9f, 0.01f, 1.0f, 0.8f);
        pull_f32(kv, 4, got);
        state_buf(kv, 4, 0, st);
        assert_memory_equal(got, w, sizeof w);
        assert_memory_equal(st, mom, sizeof mom);
    }
    kvs_close(kv);
}

/* Adam lazily: the rows in each sum, their mean and var; one step of the
 * key per push (bias correction by the key's count). */
static void test_lazy_adam(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], mean[N] = { 0 }, var[N] = { 0 }, got[N], s0[N], s1[N], d[2 * C], g[N];
    int64_t pushes[3][2] = { { 2, 9 }, { 9, 0 }, { 5, 5 } };
    kvs_key_t key = IK(6);

    (void)state;
    fill_w(w, N, 0.5f);
    init_f32(kv, 6, w);
    OK(kvs_set_optimizer(kv, "adam lr=0.01 beta1=0.8 beta2=0.95 wd=0.02 clip_gradient=2"));
    for (int p = 0; p < 3; p++) {
        kvs_row_sparse_t v = rsp(d, pushes[p], 2, KVS_FLOAT32);
        int in[R] = { 0 };

        fill_w(d, 2 * C, 1.0f - (float)p);
        OK(kvs_push_row_sparse(kv, 1, &key, &v, 0));
        dense_sum(g, &v, 1);
        for (int j = 0; j < 2; j++)
            in[pushes[p][j]] = 1;
        for (int x = 0; x < N; x++)
            if (in[x / C])
                ref_adam(&w[x], &mean[x], &var[x], g[x], 0.01, p + 1, 0.8, 0.95, 1e-8f,
                         0.02f, 1.0f, 2.0f);
        pull_f32(kv, 6, got);
        state_buf(kv, 6, 0, s0);
        state_buf(kv, 6, 1, s1);
        assert_memory_equal(got, w, sizeof w);
        assert_memory_equal(s0, mean, sizeof mean);
        assert_memory_equal(s1, var, sizeof var);
        assert_int_equal(state_of(kv, 6)->t, p + 1);
    }
    kvs_close(kv);
}

/* lazy_update=0: a row-sparse push is a dense push of its dense sum, bit
 * for bit, value and state, for sgd and adam. */
static void test_lazy_off_is_dense(void **state)
{
    const char *specs[] = { "sgd lr=0.2 momentum=0.5 wd=0.1 lazy_update=0",
                            "adam lr=0.05 wd=0.01 lazy_update=0" };

    (void)state;
    for (int s = 0; s < 2; s++) {
        kvs_t *a = new_store("local"), *b = new_store("local");
        float w[N], wa[N], wb[N], d[3 * C], g[N];
        int64_t idx[] = { 3, 7, 3 };
        kvs_row_sparse_t v = rsp(d, idx, 3, KVS_FLOAT32);
        kvs_array_t dense = ARR(g, KVS_FLOAT32, 2, R, C);

        fill_w(w, N, 2.0f);
        fill_w(d, 3 * C, -0.7f);
        init_f32(a, 1, w);
        init_f32(b, 1, w);
        OK(kvs_set_optimizer(a, specs[s]));
        OK(kvs_set_optimizer(b, specs[s]));
        for (int p = 0; p < 2; p++) {
            OK(kvs_push_row_sparse(a, 1, &IK(1), &v, 0));
            dense_sum(g, &v, 1);
            OK(kvs_push(b, 1, &IK(1), &dense, 0));
        }
        pull_f32(a, 1, wa);
        pull_f32(b, 1, wb);
        assert_memory_equal(wa, wb, sizeof wa);
        assert_memory_not_equal(wa + 0, w + 0, sizeof(float) * C);   /* wd reached row 0 */
        expect_same_state(a, b, 1);
        kvs_close(a);
        kvs_close(b);
    }
}

/* ---- updater ------------------------------------------------------------- */

/* The updater is called once with the dense sum (absent rows zero). */
static void test_updater_gets_dense_sum(void **state)
{
    kvs_t *kv = new_store("local");
    struct seen s = { 0 };
    float w[N], got[N], want[N], d0[2 * C], d1[2 * C], g[N];
    int64_t i0[] = { 1, 6 }, i1[] = { 6, 6 };
    kvs_row_sparse_t v[2] = { rsp(d0, i0, 2, KVS_FLOAT32), rsp(d1, i1, 2, KVS_FLOAT32) };
    kvs_key_t keys[2] = { IK(9), IK(9) };

    (void)state;
    fill_w(w, N, 1.0f);
    fill_w(d0, 2 * C, 0.5f);
    fill_w(d1, 2 * C, -4.0f);
    init_f32(kv, 9, w);
    OK(kvs_set_updater(kv, record, &s));
    OK(kvs_push_row_sparse(kv, 2, keys, v, 0));
    dense_sum(g, v, 2);
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.ndim, 2);
    assert_int_equal(s.shape[0], R);
    assert_int_equal(s.shape[1], C);
    EXPECT_F32(s.in, g, N);
    for (int x = 0; x < N; x++)
        want[x] = w[x] + 2 * g[x];
    pull_f32(kv, 9, got);
    EXPECT_F32(got, want, N);
    kvs_close(kv);
}

/* ---- compact pulls -------------------------------------------------------- */

static void test_pull_rows(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], data[R * C];
    int64_t ids[] = { 7, 2, 7, 9, 0, 2 }, idx[R];
    kvs_array_t row_ids = ARR(ids, KVS_INT64, 1, 6);
    kvs_row_sparse_t out = { .data = data, .indices = idx, .nnz = R, .device = KVS_HOST };
    const int64_t want[] = { 0, 2, 7, 9 };

    (void)state;
    fill_w(w, N, 5.0f);
    init_f32(kv, 1, w);
    memset(data, SENTINEL, sizeof data);
    OK(kvs_pull_rows(kv, 1, &IK(1), &row_ids, &out, 0));
    assert_int_equal(out.nnz, 4);
    assert_int_equal(out.dtype, KVS_FLOAT32);
    assert_int_equal(out.ndim, 2);
    assert_int_equal(out.shape[0], R);
    assert_int_equal(out.shape[1], C);
    assert_memory_equal(idx, want, sizeof want);
    for (int j = 0; j < 4; j++)
        assert_memory_equal(data + j * C, w + want[j] * C, sizeof(float) * C);
    EXPECT_UNTOUCHED(data + 4 * C, sizeof(float) * (R - 4) * C);
    /* No ids: nothing to pull. */
    row_ids.shape[0] = 0;
    out.nnz = 0;
    OK(kvs_pull_rows(kv, 1, &IK(1), &row_ids, &out, 0));
    assert_int_equal(out.nnz, 0);
    kvs_close(kv);
}

/* Too little room in one out: every out's nnz is set to its need, nothing
 * else written, -ENOSPC with the key in the detail. */
static void test_pull_rows_enospc(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], d0[R * C], d1[R * C];
    int64_t a[] = { 1, 1, 4 }, b[] = { 3, 0, 8, 3, 5 }, x0[R], x1[R];
    kvs_array_t ids[2] = { ARR(a, KVS_INT64, 1, 3), ARR(b, KVS_INT64, 1, 5) };
    kvs_row_sparse_t outs[2] = {
        { .data = d0, .indices = x0, .nnz = 2, .device = KVS_HOST },
        { .data = d1, .indices = x1, .nnz = 3, .device = KVS_HOST } };
    kvs_key_t keys[2] = { IK(1), IK(2) };

    (void)state;
    fill_w(w, N, 1.0f);
    init_f32(kv, 1, w);
    init_f32(kv, 2, w);
    memset(d0, SENTINEL, sizeof d0);
    memset(d1, SENTINEL, sizeof d1);
    memset(x0, SENTINEL, sizeof x0);
    memset(x1, SENTINEL, sizeof x1);
    EXPECT_RC(kvs_pull_rows(kv, 2, keys, ids, outs, 0), -ENOSPC);
    EXPECT_DETAIL(kv, "key 2");
    assert_int_equal(outs[0].nnz, 2);
    assert_int_equal(outs[1].nnz, 4);
    EXPECT_UNTOUCHED(d0, sizeof d0);
    EXPECT_UNTOUCHED(d1, sizeof d1);
    EXPECT_UNTOUCHED(x0, sizeof x0);
    EXPECT_UNTOUCHED(x1, sizeof x1);
    /* With the room it said, the pull goes through. */
    OK(kvs_pull_rows(kv, 2, keys, ids, outs, 0));
    assert_int_equal(x1[3], 8);
    kvs_close(kv);
}

/* ---- refusals -------------------------------------------------------------- */

/* Bad values are refused with a detail naming the key (and the index),
 * and change nothing: value, state, step count; also when another key of
 * the list was good. */
static void test_bad_values_change_nothing(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], d[2 * C];
    int64_t good[] = { 1, 2 }, bad[] = { 3, 10 }, neg[] = { -1, 0 };
    kvs_row_sparse_t v, two[2];
    kvs_key_t key = IK(7), keys[2] = { IK(7), IK(8) };
    struct snap before, before8;

    (void)state;
    fill_w(w, N, 1.0f);
    fill_w(d, 2 * C, 0.3f);
    init_f32(kv, 7, w);
    init_f32(kv, 8, w);
    OK(kvs_set_optimizer(kv, "adam lr=0.1"));
    v = rsp(d, good, 2, KVS_FLOAT32);
    OK(kvs_push_row_sparse(kv, 1, &key, &v, 0));
    take(kv, 7, &before);
    take(kv, 8, &before8);

    v = rsp(d, bad, 2, KVS_FLOAT32);
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_ERANGE);
    EXPECT_DETAIL(kv, "key 7");
    EXPECT_DETAIL(kv, "index 10 at position 1");
    v = rsp(d, neg, 2, KVS_FLOAT32);
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_ERANGE);
    EXPECT_DETAIL(kv, "index -1 at position 0");
    v = rsp(d, good, 2, KVS_FLOAT64);
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_EDTYPE);
    EXPECT_DETAIL(kv, "key 7");
    v = rsp(d, good, 2, KVS_FLOAT32);
    v.shape[1] = C + 1;
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_ESHAPE);
    v.shape[1] = C;
    v.ndim = 0;
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_ESHAPE);
    v.ndim = 2;
    v.nnz = -1;
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_EBADARG);
    v.nnz = 2;
    v.data = NULL;
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_EBADARG);
    v.data = d;
    v.indices = NULL;
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_EBADARG);
    v.indices = good;
    v.device = KVS_CUDA(0);            /* no CUDA here: as a dense device array */
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &key, &v, 0), KVS_EDEVICE);
    v.device = KVS_HOST;
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &IK(99), &v, 0), KVS_ENOKEY);
    /* A list whose second key's value is bad: the first is not pushed. */
    two[0] = rsp(d, good, 2, KVS_FLOAT32);
    two[1] = rsp(d, bad, 2, KVS_FLOAT32);
    EXPECT_RC(kvs_push_row_sparse(kv, 2, keys, two, 0), KVS_ERANGE);
    EXPECT_DETAIL(kv, "key 8");
    expect_same(kv, 7, &before);
    expect_same(kv, 8, &before8);
    kvs_close(kv);
}

/* An integer key under an optimizer: refused, as for dense pushes. */
static void test_int_key_under_optimizer(void **state)
{
    kvs_t *kv = new_store("local");
    int32_t w[N] = { 0 }, d[C] = { 1, 2, 3 }, got[N];
    int64_t idx[] = { 2 };
    kvs_array_t a = ARR(w, KVS_INT32, 2, R, C);
    kvs_row_sparse_t v = rsp(d, idx, 1, KVS_INT32);

    (void)state;
    OK(kvs_init(kv, 1, &IK(1), &a));
    OK(kvs_set_optimizer(kv, "sgd"));
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &IK(1), &v, 0), KVS_EDTYPE);
    a.data = got;
    OK(kvs_pull(kv, 1, &IK(1), &a, 0));
    assert_memory_equal(got, w, sizeof w);
    kvs_close(kv);
}

/* ---- init ----------------------------------------------------------------- */

static void test_init_row_sparse(void **state)
{
    kvs_t *kv = new_store("local");
    float d[3 * C], got[N], want[N];
    int64_t idx[] = { 4, 0, 4 }, bad[] = { 0, 10, 1 };
    kvs_row_sparse_t v = rsp(d, idx, 3, KVS_FLOAT32);
    kvs_key_t key = IK(3);

    (void)state;
    fill_w(d, 3 * C, 1.25f);
    OK(kvs_init_row_sparse(kv, 1, &key, &v));
    pull_f32(kv, 3, got);
    dense_sum(want, &v, 1);
    EXPECT_F32(got, want, N);
    EXPECT_RC(kvs_init_row_sparse(kv, 1, &key, &v), KVS_EKEYEXISTS);
    v.indices = bad;
    EXPECT_RC(kvs_init_row_sparse(kv, 1, &IK(4), &v), KVS_ERANGE);
    EXPECT_DETAIL(kv, "key 4");
    EXPECT_RC(kvs_pull(kv, 1, &IK(4), &ARR(got, KVS_FLOAT32, 2, R, C), 0),
              KVS_ENOKEY);
    /* An empty value: all zeros. */
    v = rsp(NULL, NULL, 0, KVS_FLOAT32);
    OK(kvs_init_row_sparse(kv, 1, &IK(5), &v));
    pull_f32(kv, 5, got);
    memset(want, 0, sizeof want);
    EXPECT_F32(got, want, N);
    kvs_close(kv);
}

/* ---- the state file --------------------------------------------------- */

/* Saved after lazy updates and loaded into a store holding the same
 * value: the states are the same bit for bit, step count included, and
 * the next lazy step gives both the same value and state. */
static void test_statefile_after_lazy_updates(void **state)
{
    kvs_t *a = new_store("local"), *b = new_store("local");
    char *dir = make_tmpdir(), path[4096];
    float w[N], d[2 * C], wa[N], wb[N];
    int64_t idx[] = { 8, 3 };
    kvs_row_sparse_t v = rsp(d, idx, 2, KVS_FLOAT32);
    kvs_key_t key = IK(1);

    (void)state;
    snprintf(path, sizeof path, "%s/states", dir);
    fill_w(w, N, 0.1f);
    fill_w(d, 2 * C, -0.4f);
    init_f32(a, 1, w);
    OK(kvs_set_optimizer(a, "adam lr=0.03 wd=0.01"));
    OK(kvs_push_row_sparse(a, 1, &key, &v, 0));
    idx[0] = 4;
    OK(kvs_push_row_sparse(a, 1, &key, &v, 0));
    OK(kvs_save_optimizer_states(a, path, 1));
    pull_f32(a, 1, wa);
    init_f32(b, 1, wa);
    OK(kvs_load_optimizer_states(b, path));
    remove_tmpdir(dir);
    assert_int_equal(state_of(b, 1)->t, 2);
    idx[1] = 0;
    OK(kvs_push_row_sparse(a, 1, &key, &v, 0));
    OK(kvs_push_row_sparse(b, 1, &key, &v, 0));
    pull_f32(a, 1, wa);
    pull_f32(b, 1, wb);
    assert_memory_equal(wa, wb, sizeof wa);
    expect_same_state(a, b, 1);
    assert_int_equal(state_of(b, 1)->t, 3);
    kvs_close(a);
    kvs_close(b);
}

/* ---- pushpull ------------------------------------------------------------- */

static void test_pushpull_row_sparse(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], d[2 * C], got[N], data[R * C], ref[N], mom[N] = { 0 }, g[N];
    int64_t idx[] = { 5, 2 }, ids[] = { 5, 9, 5 }, outidx[R];
    kvs_row_sparse_t v = rsp(d, idx, 2, KVS_FLOAT32);
    kvs_array_t row_ids = ARR(ids, KVS_INT64, 1, 3);
    kvs_row_sparse_t out = { .data = data, .indices = outidx, .nnz = 1, .device = KVS_HOST };
    kvs_key_t key = IK(2);

    (void)state;
    fill_w(w, N, 2.0f);
    fill_w(d, 2 * C, 0.9f);
    init_f32(kv, 2, w);
    OK(kvs_set_optimizer(kv, "sgd lr=0.5 momentum=0.5"));
    /* Too little room: refused before the push. */
    EXPECT_RC(kvs_pushpull_row_sparse(kv, 1, &key, &v, &row_ids, &out, 0), -ENOSPC);
    assert_int_equal(out.nnz, 2);
    pull_f32(kv, 2, got);
    assert_memory_equal(got, w, sizeof w);
    assert_null(state_of(kv, 2));
    OK(kvs_pushpull_row_sparse(kv, 1, &key, &v, &row_ids, &out, 0));
    memcpy(ref, w, sizeof ref);
    dense_sum(g, &v, 1);
    for (int x = 0; x < N; x++)
        if (x / C == 5 || x / C == 2)
            ref_sgd(&ref[x], &mom[x], g[x], 0.5f, 0.5f, 0.0f, 1.0f, -1.0f);
    assert_int_equal(out.nnz, 2);
    assert_int_equal(outidx[0], 5);
    assert_int_equal(outidx[1], 9);
    assert_memory_equal(data, ref + 5 * C, sizeof(float) * C);
    assert_memory_equal(data + C, ref + 9 * C, sizeof(float) * C);
    pull_f32(kv, 2, got);
    assert_memory_equal(got, ref, sizeof ref);
    kvs_close(kv);
}

/* ---- the device type -------------------------------------------------- */

/* The device type takes row-sparse values for keys it keeps on the host
 * (no GPU seen here; keys on a GPU are test_device_rows.c's). */
static void test_device_type(void **state)
{
    kvs_t *kv = new_store("device");
    float w[N], got[N], d[C] = { 1, 2, 3 };
    int64_t idx[] = { 4 };
    kvs_row_sparse_t v = rsp(d, idx, 1, KVS_FLOAT32);

    (void)state;
    fill_w(w, N, 0.0f);
    init_f32(kv, 1, w);
    OK(kvs_push_row_sparse(kv, 1, &IK(1), &v, 0));
    pull_f32(kv, 1, got);
    assert_memory_equal(got + 4 * C, d, sizeof d);
    kvs_close(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_sum_overlapping_repeated),
        CASE(test_sum_dtypes),
        CASE(test_empty_push),
        CASE(test_assign_zeroes_absent_rows),
        CASE(test_lazy_sgd),
        CASE(test_lazy_adam),
        CASE(test_lazy_off_is_dense),
        CASE(test_updater_gets_dense_sum),
        CASE(test_pull_rows),
        CASE(test_pull_rows_enospc),
        CASE(test_bad_values_change_nothing),
        CASE(test_int_key_under_optimizer),
        CASE(test_init_row_sparse),
        CASE(test_statefile_after_lazy_updates),
        CASE(test_pushpull_row_sparse),
        CASE(test_device_type),
    };
    return cmocka_run_group_tests_name("rows", tests, NULL, NULL);
}
