/*
 * test_mxnet_docs.c - MXNet 1.9's KVStore documentation, ported to kvs:
 * the examples of MXNet's KVStore docstrings (init and pull, push and
 * pushpull, row_sparse_pull, set_optimizer), and the key-value store
 * chapter the library reproduces (init 2, push 8, aggregate 4, updater,
 * 6, 3, 11). "Devices" are simply several values of one key in one call.
 * MXNet's own KVStore tests are ported in test_mxnet.c.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvs.h"
#include "testutil.h"

/* ---- MXNet's KVStore docstrings --------------------------------------- */

static void test_docstring_init_pull(void **state)
{
    /* kv.init('3', ones*2); kv.pull('3', out=a) -> 2; a list of keys; pull
     * into several devices; pull a list of keys. */
    kvs_t *kv = new_store("local");
    float twos[6], a[6], b[4][6];
    (void)state;
    fill_f32(twos, 6, 2);
    OK(kvs_init(kv, 1, (kvs_key_t[]){ SK("3") }, (kvs_array_t[]){ ARR(twos, KVS_FLOAT32, 2, 2, 3) }));
    fill_f32(a, 6, 0);
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ SK("3") }, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 2);
    OK(kvs_init(kv, 3, (kvs_key_t[]){ SK("5"), SK("7"), SK("9") },
                (kvs_array_t[]){ ARR(twos, KVS_FLOAT32, 2, 2, 3), ARR(twos, KVS_FLOAT32, 2, 2, 3),
                                 ARR(twos, KVS_FLOAT32, 2, 2, 3) }));
    for (int d = 0; d < 4; d++)
        fill_f32(b[d], 6, 1);
    OK(kvs_pull(kv, 4, (kvs_key_t[]){ SK("3"), SK("3"), SK("3"), SK("3") },
                (kvs_array_t[]){ ARR(b[0], KVS_FLOAT32, 2, 2, 3), ARR(b[1], KVS_FLOAT32, 2, 2, 3),
                                 ARR(b[2], KVS_FLOAT32, 2, 2, 3), ARR(b[3], KVS_FLOAT32, 2, 2, 3) },
                0));
    for (int d = 0; d < 4; d++)
        EXPECT_ALL_F32(b[d], 6, 2);
    for (int d = 0; d < 3; d++)
        fill_f32(b[d], 6, 0);
    OK(kvs_pull(kv, 3, (kvs_key_t[]){ SK("5"), SK("7"), SK("9") },
                (kvs_array_t[]){ ARR(b[0], KVS_FLOAT32, 2, 2, 3), ARR(b[1], KVS_FLOAT32, 2, 2, 3),
                                 ARR(b[2], KVS_FLOAT32, 2, 2, 3) },
                0));
    EXPECT_ALL_F32(b[1], 6, 2);
    kvs_close(kv);
}

static void test_docstring_push_pushpull(void **state)
{
    kvs_t *kv = new_store("local");
    float v[4][6], a[6], b[12][6];
    kvs_key_t k3 = SK("3");
    kvs_key_t keys[12];
    kvs_array_t va[12], oa[12];
    const char *names[3] = { "4", "5", "6" };
    (void)state;
    fill_f32(v[0], 6, 0);
    OK(kvs_init(kv, 1, &k3, (kvs_array_t[]){ ARR(v[0], KVS_FLOAT32, 2, 2, 3) }));
    OK(kvs_init(kv, 3, (kvs_key_t[]){ SK("4"), SK("5"), SK("6") },
                (kvs_array_t[]){ ARR(v[0], KVS_FLOAT32, 2, 2, 3), ARR(v[0], KVS_FLOAT32, 2, 2, 3),
                                 ARR(v[0], KVS_FLOAT32, 2, 2, 3) }));
    /* kv.push('3', ones*8) -> 8 */
    fill_f32(v[0], 6, 8);
    OK(kvs_push(kv, 1, &k3, (kvs_array_t[]){ ARR(v[0], KVS_FLOAT32, 2, 2, 3) }, 0));
    OK(kvs_pull(kv, 1, &k3, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 8);
    /* four gpus of ones -> 4 */
    for (int d = 0; d < 4; d++) {
        fill_f32(v[d], 6, 1);
        keys[d] = k3;
        va[d] = ARR(v[d], KVS_FLOAT32, 2, 2, 3);
    }
    OK(kvs_push(kv, 4, keys, va, 0));
    OK(kvs_pull(kv, 1, &k3, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 4);
    /* kv.pushpull('3', ones*8, out=a) -> 8 */
    fill_f32(v[0], 6, 8);
    fill_f32(a, 6, 0);
    OK(kvs_pushpull(kv, 1, &k3, (kvs_array_t[]){ ARR(v[0], KVS_FLOAT32, 2, 2, 3) },
                    (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 8);
    /* kv.pushpull('3', b (4 gpus of ones), out=a) -> 4 */
    fill_f32(v[0], 6, 1);
    OK(kvs_pushpull(kv, 4, keys, va, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3),
                                                      ARR(b[0], KVS_FLOAT32, 2, 2, 3),
                                                      ARR(b[1], KVS_FLOAT32, 2, 2, 3),
                                                      ARR(b[2], KVS_FLOAT32, 2, 2, 3) },
                    0));
    EXPECT_ALL_F32(a, 6, 4);
    EXPECT_ALL_F32(b[2], 6, 4);
    /* a list of keys from one device -> 1 */
    for (int k = 0; k < 3; k++) {
        fill_f32(b[k], 6, 1);
        keys[k] = SK(names[k]);
        va[k] = ARR(b[k], KVS_FLOAT32, 2, 2, 3);
    }
    OK(kvs_push(kv, 3, keys, va, 0));
    for (int k = 0; k < 3; k++) {
        fill_f32(b[k], 6, 0);
        oa[k] = ARR(b[k], KVS_FLOAT32, 2, 2, 3);
    }
    OK(kvs_pull(kv, 3, keys, oa, 0));
    EXPECT_ALL_F32(b[1], 6, 1);
    /* a list of keys from four devices, pushpull in place -> 4 */
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 4; d++) {
            int i = k * 4 + d;
            fill_f32(b[i], 6, 1);
            keys[i] = SK(names[k]);
            va[i] = ARR(b[i], KVS_FLOAT32, 2, 2, 3);
        }
    OK(kvs_pushpull(kv, 12, keys, va, NULL, 0));
    for (int i = 0; i < 12; i++)
        EXPECT_ALL_F32(b[i], 6, 4);
    kvs_close(kv);
}

static void test_docstring_row_sparse_pull(void **state)
{
    /* (3,3) ones; ids [0,2] -> rows 0 and 2; duplicates [2,2] -> row 2;
     * unsorted [1,0] -> rows 0 and 1. */
    static const struct { int64_t ids[2]; int rows[3]; } cases[] = {
        { { 0, 2 }, { 1, 0, 1 } },
        { { 2, 2 }, { 0, 0, 1 } },
        { { 1, 0 }, { 1, 1, 0 } },
    };
    kvs_t *kv = new_store("local");
    float ones[9], a[9];
    (void)state;
    fill_f32(ones, 9, 1);
    OK(kvs_init(kv, 1, (kvs_key_t[]){ SK("3") }, (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 2, 3, 3) }));
    fill_f32(a, 9, 0);
    for (size_t c = 0; c < 3; c++) {
        OK(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ SK("3") },
                               (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 3, 3) },
                               (kvs_array_t[]){ ARR(cases[c].ids, KVS_INT64, 1, 2) }, 0));
        for (int r = 0; r < 3; r++)
            for (int col = 0; col < 3; col++)
                if (a[r * 3 + col] != (float)cases[c].rows[r])
                    fail_msg("case %zu row %d: got %g", c, r, (double)a[r * 3 + col]);
    }
    kvs_close(kv);
}

static void test_docstring_set_optimizer(void **state)
{
    /* weight zeros (2,2) under key 3, default SGD, push ones -> -0.01 */
    kvs_t *kv = new_store("local");
    float w[4] = { 0, 0, 0, 0 }, g[4] = { 1, 1, 1, 1 };
    (void)state;
    OK(kvs_init(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(w, KVS_FLOAT32, 2, 2, 2) }));
    OK(kvs_set_optimizer(kv, "sgd"));
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(g, KVS_FLOAT32, 2, 2, 2) }, 0));
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(w, KVS_FLOAT32, 2, 2, 2) }, 0));
    for (int i = 0; i < 4; i++)
        if (!(fabs(w[i] - -0.01) < 1e-9))
            fail_msg("element %d: got %.9g, want -0.01", i, (double)w[i]);
    kvs_close(kv);
}

/* ---- the chapter ------------------------------------------------------ */

struct chapter_log {
    int n;
    int64_t keys[16];
};

/* def update(key, input, stored): print(key); stored += input * 2 */
static int chapter_update(kvs_key_t key, const kvs_array_t *input, kvs_array_t *stored,
                          void *ctx)
{
    struct chapter_log *log = ctx;
    if (log->n < 16)
        log->keys[log->n] = key.id;
    log->n++;
    for (int i = 0; i < 6; i++)
        ((float *)stored->data)[i] += ((const float *)input->data)[i] * 2;
    return 0;
}

static void test_chapter_kvstore(void **state)
{
    kvs_t *kv = new_store("local");
    float a[6], v[12][6];
    kvs_key_t k3 = IK(3), keys[12];
    kvs_array_t va[12], oa[12];
    struct chapter_log log = { 0, { 0 } };
    (void)state;

    /* kv.init(3, np.ones(shape) * 2); pull -> 2 */
    fill_f32(v[0], 6, 2);
    OK(kvs_init(kv, 1, &k3, (kvs_array_t[]){ ARR(v[0], KVS_FLOAT32, 2, 2, 3) }));
    fill_f32(a, 6, 0);
    OK(kvs_pull(kv, 1, &k3, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 2);

    /* kv.push(3, np.ones(shape)*8) -> 8 */
    fill_f32(v[0], 6, 8);
    OK(kvs_push(kv, 1, &k3, (kvs_array_t[]){ ARR(v[0], KVS_FLOAT32, 2, 2, 3) }, 0));
    OK(kvs_pull(kv, 1, &k3, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 8);

    /* ones on four devices, summed -> 4 */
    for (int d = 0; d < 4; d++) {
        fill_f32(v[d], 6, 1);
        keys[d] = k3;
        va[d] = ARR(v[d], KVS_FLOAT32, 2, 2, 3);
    }
    OK(kvs_push(kv, 4, keys, va, 0));
    OK(kvs_pull(kv, 1, &k3, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 4);

    /* kv._set_updater(update): the stored value is unchanged -> 4 */
    OK(kvs_set_updater(kv, chapter_update, &log));
    OK(kvs_pull(kv, 1, &k3, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 4);
    assert_int_equal(log.n, 0);

    /* kv.push(3, np.ones(shape)) -> "update on key: 3", 4 + 2 = 6 */
    fill_f32(v[0], 6, 1);
    OK(kvs_push(kv, 1, &k3, (kvs_array_t[]){ ARR(v[0], KVS_FLOAT32, 2, 2, 3) }, 0));
    assert_int_equal(log.n, 1);
    assert_int_equal(log.keys[0], 3);
    OK(kvs_pull(kv, 1, &k3, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3) }, 0));
    EXPECT_ALL_F32(a, 6, 6);

    /* kv.pull(3, out=b) into four devices' ones -> 6 each */
    for (int d = 0; d < 4; d++) {
        fill_f32(v[d], 6, 1);
        keys[d] = k3;
        oa[d] = ARR(v[d], KVS_FLOAT32, 2, 2, 3);
    }
    OK(kvs_pull(kv, 4, keys, oa, 0));
    for (int d = 0; d < 4; d++)
        EXPECT_ALL_F32(v[d], 6, 6);

    /* keys [5, 7, 9]: init ones, push ones (updater: 1 + 2) -> 3 */
    log.n = 0;
    for (int k = 0; k < 3; k++) {
        fill_f32(v[k], 6, 1);
        keys[k] = IK(5 + 2 * k);
        va[k] = ARR(v[k], KVS_FLOAT32, 2, 2, 3);
    }
    OK(kvs_init(kv, 3, keys, va));
    OK(kvs_push(kv, 3, keys, va, 0));
    assert_int_equal(log.n, 3);
    assert_int_equal(log.keys[0], 5);
    assert_int_equal(log.keys[1], 7);
    assert_int_equal(log.keys[2], 9);
    for (int k = 0; k < 3; k++) {
        fill_f32(v[k], 6, 0);
        oa[k] = ARR(v[k], KVS_FLOAT32, 2, 2, 3);
    }
    OK(kvs_pull(kv, 3, keys, oa, 0));
    EXPECT_ALL_F32(v[1], 6, 3);
    EXPECT_ALL_F32(v[0], 6, 3);
    EXPECT_ALL_F32(v[2], 6, 3);

    /* four devices' ones for each key (12 values), pulled back into them:
     * 3 + 2 * 4 = 11 */
    log.n = 0;
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 4; d++) {
            int i = k * 4 + d;
            fill_f32(v[i], 6, 1);
            keys[i] = IK(5 + 2 * k);
            va[i] = ARR(v[i], KVS_FLOAT32, 2, 2, 3);
        }
    OK(kvs_push(kv, 12, keys, va, 0));
    OK(kvs_pull(kv, 12, keys, va, 0));
    assert_int_equal(log.n, 3);
    for (int i = 0; i < 12; i++)
        EXPECT_ALL_F32(v[i], 6, 11);
    kvs_close(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_docstring_init_pull),
        cmocka_unit_test(test_docstring_push_pushpull),
        cmocka_unit_test(test_docstring_row_sparse_pull),
        cmocka_unit_test(test_docstring_set_optimizer),
        cmocka_unit_test(test_chapter_kvstore),
    };
    return cmocka_run_group_tests_name("mxnet_docs", tests, NULL, NULL);
}
