/*
 * test_api_pushpull.c - behaviour tests of moving values through the
 * public API (kvs.h) on the in-process "local" store: push (single,
 * repeated, several keys, init on push, every mismatch and bad argument),
 * pull and its broadcast, pushpull, row_sparse_pull, and the options,
 * with the threads option giving sums identical to one thread. After each
 * failing call the store is proved to be exactly as it was, and its values
 * are checked element by element after each call. Creation, dtypes, keys
 * and init are test_api.c's. Uses only kvs.h; knows nothing of the
 * library's insides.
 */
#include <limits.h>
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

/* ---- push ------------------------------------------------------------- */

static void test_push_single_repeated_several(void **state)
{
    kvs_t *kv = *state;
    const float a[6] = { 1, 1, 1, 1, 1, 1 }, b[6] = { 0.5f, 1, 2, 4, 8, 16 };
    const float c[4] = { 1, 2, 3, 4 };
    const int32_t i7[4] = { 5, 6, 7, 8 };
    float out[6];
    int32_t iout[4];
    double dout;
    const double d9 = -1.25;

    /* single */
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(b, KVS_FLOAT32, 2, 2, 3) },
                0));
    PULL_F32(kv, IK(3), out, 2, 2, 3);
    EXPECT_F32(out, b, 6);

    /* repeated key: summed */
    OK(kvs_push(kv, 3, (kvs_key_t[]){ IK(3), IK(3), IK(3) },
                (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3), ARR(b, KVS_FLOAT32, 2, 2, 3),
                                 ARR(a, KVS_FLOAT32, 2, 2, 3) },
                0));
    PULL_F32(kv, IK(3), out, 2, 2, 3);
    EXPECT_F32(out, ((const float[]){ 2.5f, 3, 4, 6, 10, 18 }), 6);

    /* several keys, interleaved repeats, several dtypes */
    OK(kvs_push(kv, 5, (kvs_key_t[]){ IK(5), IK(7), IK(9), IK(5), IK(7) },
                (kvs_array_t[]){ ARR(c, KVS_FLOAT32, 1, 4), ARR(i7, KVS_INT32, 2, 2, 2),
                                 ARR(&d9, KVS_FLOAT64, 0, 0), ARR(c, KVS_FLOAT32, 1, 4),
                                 ARR(i7, KVS_INT32, 2, 2, 2) },
                0));
    PULL_F32(kv, IK(5), out, 1, 4);
    EXPECT_F32(out, ((const float[]){ 2, 4, 6, 8 }), 4);
    memset(iout, SENTINEL, sizeof iout);
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(7) }, (kvs_array_t[]){ ARR(iout, KVS_INT32, 2, 2, 2) },
                0));
    EXPECT_INTS(iout, ((const int32_t[]){ 10, 12, 14, 16 }), 4, KVS_INT32);
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(9) }, (kvs_array_t[]){ ARR(&dout, KVS_FLOAT64, 0, 0) },
                0));
    assert_true(dout == -1.25);
    /* key 3 untouched by the last push */
    PULL_F32(kv, IK(3), out, 2, 2, 3);
    EXPECT_F32(out, ((const float[]){ 2.5f, 3, 4, 6, 10, 18 }), 6);

    /* n = 0 is a no-op, whatever the lists */
    OK(kvs_push(kv, 0, NULL, NULL, 0));
    OK(kvs_pull(kv, 0, NULL, NULL, 0));
    OK(kvs_init(kv, 0, NULL, NULL));
    OK(kvs_reinit(kv, 0, NULL, NULL));
    OK(kvs_pushpull(kv, 0, NULL, NULL, NULL, 0));
    OK(kvs_row_sparse_pull(kv, 0, NULL, NULL, NULL, 0));
    /* priorities are accepted and ignored */
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(5) }, (kvs_array_t[]){ ARR(c, KVS_FLOAT32, 1, 4) },
                -100));
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(5) }, (kvs_array_t[]){ ARR(c, KVS_FLOAT32, 1, 4) },
                INT_MAX));
    memset(out, SENTINEL, sizeof out);
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(5) }, (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 4) },
                INT_MIN));
    EXPECT_F32(out, c, 4);
}

static void test_push_unknown_key(void **state)
{
    kvs_t *kv = *state;
    const float six[6] = { 0 }, four[4] = { 0 };
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(4242) },
                             (kvs_array_t[]){ ARR(four, KVS_FLOAT32, 1, 4) }, 0),
                KVS_ENOKEY, "4242");
    /* first keys fine, last unknown: nothing applied */
    EXPECT_FAIL(kv, kvs_push(kv, 3, (kvs_key_t[]){ IK(3), IK(5), IK(4243) },
                             (kvs_array_t[]){ ARR(six, KVS_FLOAT32, 2, 2, 3),
                                              ARR(four, KVS_FLOAT32, 1, 4),
                                              ARR(four, KVS_FLOAT32, 1, 4) },
                             0),
                KVS_ENOKEY, "4243");
    int64_t v = -1;
    assert_int_equal(kvs_get_option(kv, KVS_OPT_INIT_ON_PUSH, &v), 0);
    assert_int_equal(v, 0);
}

static void test_push_init_on_push_option(void **state)
{
    kvs_t *kv = *state;
    const float a[2] = { 1, 2 }, b[2] = { 10, 20 }, c[3] = { 0 };
    float out[2];
    int64_t v = -1;
    int calls = 0;

    OK(kvs_set_option(kv, KVS_OPT_INIT_ON_PUSH, 1));
    assert_int_equal(kvs_get_option(kv, KVS_OPT_INIT_ON_PUSH, &v), 0);
    assert_int_equal(v, 1);
    OK(kvs_set_updater(kv, add_f32, &calls));

    /* The first push initialises with the sum; the updater is not called. */
    OK(kvs_push(kv, 2, (kvs_key_t[]){ IK(42), IK(42) },
                (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 2), ARR(b, KVS_FLOAT32, 1, 2) }, 0));
    assert_int_equal(calls, 0);
    PULL_F32(kv, IK(42), out, 1, 2);
    EXPECT_F32(out, ((const float[]){ 11, 22 }), 2);
    /* the next push goes through the updater */
    OK(kvs_push(kv, 1, (kvs_key_t[]){ IK(42) }, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 2) }, 0));
    assert_int_equal(calls, 1);
    PULL_F32(kv, IK(42), out, 1, 2);
    EXPECT_F32(out, ((const float[]){ 12, 24 }), 2);

    /* Values of a new key must agree with each other. */
    EXPECT_FAIL(kv, kvs_push(kv, 2, (kvs_key_t[]){ IK(43), IK(43) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 2),
                                              ARR(c, KVS_FLOAT32, 1, 3) },
                             0),
                KVS_ESHAPE, "43");
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ IK(43) },
                       (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 2) }, 0),
              KVS_ENOKEY);
    assert_int_equal(calls, 1);

    /* A new key in a call that fails on another key is not created. */
    EXPECT_FAIL(kv, kvs_push(kv, 2, (kvs_key_t[]){ IK(45), IK(5) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 2),
                                              ARR(a, KVS_FLOAT32, 1, 2) },
                             0),
                KVS_ESHAPE, "5");
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ IK(45) },
                       (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 2) }, 0),
              KVS_ENOKEY);
    assert_int_equal(calls, 1);

    /* Off again: an unknown key is an error. */
    OK(kvs_set_option(kv, KVS_OPT_INIT_ON_PUSH, 0));
    assert_int_equal(kvs_get_option(kv, KVS_OPT_INIT_ON_PUSH, &v), 0);
    assert_int_equal(v, 0);
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(44) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 2) }, 0),
                KVS_ENOKEY, "44");
    FX_UNCHANGED(kv);
}

static void test_push_shape_mismatch(void **state)
{
    kvs_t *kv = *state;
    const float v[12] = { 0 };
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(3) },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, 3, 2) }, 0),
                KVS_ESHAPE, "3");
    EXPECT_DETAIL(kv, "(3,2)");
    EXPECT_DETAIL(kv, "(2,3)");
    /* same element count, other rank */
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(3) },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 6) }, 0),
                KVS_ESHAPE, "(2,3)");
    /* scalar vs vector */
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(9) },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT64, 1, 1) }, 0),
                KVS_ESHAPE, "9");
    /* fine keys first, a bad shape last */
    EXPECT_FAIL(kv, kvs_push(kv, 3, (kvs_key_t[]){ IK(3), IK(5), IK(5) },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, 2, 3),
                                              ARR(v, KVS_FLOAT32, 1, 4),
                                              ARR(v, KVS_FLOAT32, 1, 5) },
                             0),
                KVS_ESHAPE, "5");
    /* zero extents */
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(5) },
                             (kvs_array_t[]){ ARR(NULL, KVS_FLOAT32, 1, 0) }, 0),
                KVS_ESHAPE, "5");
}

static void test_push_dtype_mismatch(void **state)
{
    kvs_t *kv = *state;
    const double d[6] = { 0 };
    const int32_t i[6] = { 0 };
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(3) },
                             (kvs_array_t[]){ ARR(d, KVS_FLOAT64, 2, 2, 3) }, 0),
                KVS_EDTYPE, "3");
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(7) },
                             (kvs_array_t[]){ ARR(d, KVS_FLOAT32, 2, 2, 2) }, 0),
                KVS_EDTYPE, "7");
    /* two values of one key, second of another dtype */
    EXPECT_FAIL(kv, kvs_push(kv, 2, (kvs_key_t[]){ IK(7), IK(7) },
                             (kvs_array_t[]){ ARR(i, KVS_INT32, 2, 2, 2),
                                              ARR(i, KVS_UINT8, 2, 2, 2) },
                             0),
                KVS_EDTYPE, "7");
    /* a value that is not a dtype at all */
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(3) },
                             (kvs_array_t[]){ ARR(d, (kvs_dtype_t)42, 2, 2, 3) }, 0),
                KVS_EDTYPE, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(50) },
                             (kvs_array_t[]){ ARR(d, (kvs_dtype_t)-1, 1, 1) }),
                KVS_EDTYPE, NULL);
}

static void test_push_device_array(void **state)
{
    kvs_t *kv = *state;
    const float v[6] = { 0 };
    kvs_array_t dev = ARR(v, KVS_FLOAT32, 2, 2, 3);
    float out[6];
    dev.device = KVS_CUDA(0);
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ IK(3) }, &dev, 0), KVS_EDEVICE, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(60) }, &dev), KVS_EDEVICE, NULL);
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ IK(60) },
                       (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 2, 3) }, 0),
              KVS_ENOKEY);
    memset(out, SENTINEL, sizeof out);
    dev = ARR(out, KVS_FLOAT32, 2, 2, 3);
    dev.device = KVS_CUDA(3);
    EXPECT_FAIL(kv, kvs_pull(kv, 1, (kvs_key_t[]){ IK(3) }, &dev, 0), KVS_EDEVICE, NULL);
    EXPECT_UNTOUCHED(out, sizeof out);
}

static void test_push_bad_args(void **state)
{
    kvs_t *kv = *state;
    const float v[6] = { 0 };
    kvs_key_t k3 = IK(3);
    kvs_array_t good = ARR(v, KVS_FLOAT32, 2, 2, 3);
    kvs_array_t a;

    /* NULL data with elements */
    EXPECT_FAIL(kv, kvs_push(kv, 1, &k3, (kvs_array_t[]){ ARR(NULL, KVS_FLOAT32, 2, 2, 3) }, 0),
                KVS_EBADARG, NULL);
    /* n < 0 */
    EXPECT_FAIL(kv, kvs_push(kv, -1, &k3, &good, 0), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_push(kv, INT_MIN, &k3, &good, 0), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, -1, &k3, &good), KVS_EBADARG, NULL);
    /* NULL lists with n > 0 */
    EXPECT_FAIL(kv, kvs_push(kv, 1, NULL, &good, 0), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_push(kv, 1, &k3, NULL, 0), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, 1, NULL, &good), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(70) }, NULL), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_pull(kv, 1, NULL, &good, 0), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_pull(kv, 1, &k3, NULL, 0), KVS_EBADARG, NULL);
    /* bad ndim */
    a = good;
    a.ndim = 9;
    EXPECT_FAIL(kv, kvs_push(kv, 1, &k3, &a, 0), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(70) }, &a), KVS_EBADARG, NULL);
    a.ndim = -1;
    EXPECT_FAIL(kv, kvs_push(kv, 1, &k3, &a, 0), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(70) }, &a), KVS_EBADARG, NULL);
    /* negative extent */
    a = ARR(v, KVS_FLOAT32, 2, 2, -3);
    EXPECT_FAIL(kv, kvs_push(kv, 1, &k3, &a, 0), KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(70) }, &a), KVS_EBADARG, NULL);
    /* extents whose product overflows */
    a = ARR(v, KVS_FLOAT32, 2, ((int64_t)1 << 62), 4);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(70) }, &a), KVS_EBADARG, NULL);
    a = ARR(v, KVS_FLOAT64, 3, INT64_MAX, INT64_MAX, 2);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(71) }, &a), KVS_EBADARG, NULL);
    a = ARR(v, KVS_UINT8, 2, INT64_MAX, 2);
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(72) }, &a), KVS_EBADARG, NULL);
    /* a bad array last in a list whose first entries are fine */
    a = ARR(v, KVS_FLOAT32, 1, -4);
    EXPECT_FAIL(kv, kvs_push(kv, 3, (kvs_key_t[]){ IK(3), IK(3), IK(5) },
                             (kvs_array_t[]){ good, good, a }, 0),
                KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_init(kv, 2, (kvs_key_t[]){ IK(70), IK(71) },
                             (kvs_array_t[]){ good, ARR(NULL, KVS_FLOAT32, 1, 1) }),
                KVS_EBADARG, NULL);
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ IK(70) },
                       (kvs_array_t[]){ ARR((float[6]){ 0 }, KVS_FLOAT32, 2, 2, 3) }, 0),
              KVS_ENOKEY);
}

static void test_key_kind_mixing(void **state)
{
    kvs_t *kv = *state;
    const float v[4] = { 0 };
    float out[4];
    kvs_t *s;

    /* string keys in an int store, in every call */
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ SK("a") },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4) }),
                KVS_EKEYKIND, NULL);
    EXPECT_FAIL(kv, kvs_push(kv, 1, (kvs_key_t[]){ SK("a") },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4) }, 0),
                KVS_EKEYKIND, NULL);
    memset(out, SENTINEL, sizeof out);
    EXPECT_FAIL(kv, kvs_pull(kv, 1, (kvs_key_t[]){ SK("a") },
                             (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 4) }, 0),
                KVS_EKEYKIND, NULL);
    EXPECT_UNTOUCHED(out, sizeof out);
    /* mixed within one call, the int key first and valid */
    EXPECT_FAIL(kv, kvs_push(kv, 2, (kvs_key_t[]){ IK(5), SK("5") },
                             (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4),
                                              ARR(v, KVS_FLOAT32, 1, 4) },
                             0),
                KVS_EKEYKIND, NULL);

    /* A fresh store: a call mixing kinds fails and fixes no kind. */
    s = new_store("local");
    EXPECT_RC(kvs_init(s, 2, (kvs_key_t[]){ IK(1), SK("b") },
                       (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4), ARR(v, KVS_FLOAT32, 1, 4) }),
              KVS_EKEYKIND);
    EXPECT_DETAIL(s, NULL);
    EXPECT_RC(kvs_pull(s, 1, (kvs_key_t[]){ IK(1) }, (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 4) },
                       0),
              KVS_ENOKEY);
    OK(kvs_init(s, 1, (kvs_key_t[]){ SK("b") }, (kvs_array_t[]){ ARR(FX5, KVS_FLOAT32, 1, 4) }));
    /* now a string store: int keys are refused */
    EXPECT_RC(kvs_init(s, 1, (kvs_key_t[]){ IK(1) }, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4) }),
              KVS_EKEYKIND);
    EXPECT_RC(kvs_push(s, 1, (kvs_key_t[]){ IK(1) }, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4) },
                       0),
              KVS_EKEYKIND);
    EXPECT_RC(kvs_push(s, 2, (kvs_key_t[]){ SK("b"), IK(0) },
                       (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4), ARR(v, KVS_FLOAT32, 1, 4) }, 0),
              KVS_EKEYKIND);
    EXPECT_RC(kvs_reinit(s, 1, (kvs_key_t[]){ IK(2) }, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4) }),
              KVS_EKEYKIND);
    PULL_F32(s, SK("b"), out, 1, 4);
    EXPECT_F32(out, FX5, 4);
    kvs_close(s);
}

/* ---- pull ------------------------------------------------------------- */

static void test_pull_broadcast(void **state)
{
    kvs_t *kv = *state;
    float o[4][6];
    int32_t io[2][4];
    memset(o, SENTINEL, sizeof o);
    memset(io, SENTINEL, sizeof io);
    OK(kvs_pull(kv, 6, (kvs_key_t[]){ IK(3), IK(7), IK(3), IK(5), IK(3), IK(7) },
                (kvs_array_t[]){ ARR(o[0], KVS_FLOAT32, 2, 2, 3), ARR(io[0], KVS_INT32, 2, 2, 2),
                                 ARR(o[1], KVS_FLOAT32, 2, 2, 3), ARR(o[2], KVS_FLOAT32, 1, 4),
                                 ARR(o[3], KVS_FLOAT32, 2, 2, 3), ARR(io[1], KVS_INT32, 2, 2, 2) },
                0));
    EXPECT_F32(o[0], FX3, 6);
    EXPECT_F32(o[1], FX3, 6);
    EXPECT_F32(o[3], FX3, 6);
    EXPECT_F32(o[2], FX5, 4);
    EXPECT_UNTOUCHED(&o[2][4], 2 * sizeof(float)); /* nothing past the out's end */
    EXPECT_INTS(io[0], FX7, 4, KVS_INT32);
    EXPECT_INTS(io[1], FX7, 4, KVS_INT32);
    FX_UNCHANGED(kv);
}

static void test_pull_errors_write_no_out(void **state)
{
    kvs_t *kv = *state;
    float a[6], b[6];
    double d[6];

    memset(a, SENTINEL, sizeof a);
    memset(b, SENTINEL, sizeof b);
    memset(d, SENTINEL, sizeof d);
    /* shape */
    EXPECT_FAIL(kv, kvs_pull(kv, 1, (kvs_key_t[]){ IK(3) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 3, 2) }, 0),
                KVS_ESHAPE, "3");
    EXPECT_UNTOUCHED(a, sizeof a);
    /* dtype */
    EXPECT_FAIL(kv, kvs_pull(kv, 1, (kvs_key_t[]){ IK(3) },
                             (kvs_array_t[]){ ARR(d, KVS_FLOAT64, 2, 2, 3) }, 0),
                KVS_EDTYPE, "3");
    EXPECT_UNTOUCHED(d, sizeof d);
    /* the first out is fine, a later one is not: neither is written */
    EXPECT_FAIL(kv, kvs_pull(kv, 2, (kvs_key_t[]){ IK(3), IK(3) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, 2, 3),
                                              ARR(b, KVS_FLOAT32, 1, 6) },
                             0),
                KVS_ESHAPE, NULL);
    EXPECT_UNTOUCHED(a, sizeof a);
    EXPECT_UNTOUCHED(b, sizeof b);
    EXPECT_FAIL(kv, kvs_pull(kv, 2, (kvs_key_t[]){ IK(5), IK(7) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 4),
                                              ARR(b, KVS_FLOAT32, 2, 2, 2) },
                             0),
                KVS_EDTYPE, "7");
    EXPECT_UNTOUCHED(a, sizeof a);
    EXPECT_UNTOUCHED(b, sizeof b);
    /* unknown key last */
    EXPECT_FAIL(kv, kvs_pull(kv, 2, (kvs_key_t[]){ IK(5), IK(77) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 4),
                                              ARR(b, KVS_FLOAT32, 1, 4) },
                             0),
                KVS_ENOKEY, "77");
    EXPECT_UNTOUCHED(a, sizeof a);
    /* bad arrays */
    EXPECT_FAIL(kv, kvs_pull(kv, 2, (kvs_key_t[]){ IK(5), IK(3) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 4),
                                              ARR(NULL, KVS_FLOAT32, 2, 2, 3) },
                             0),
                KVS_EBADARG, NULL);
    EXPECT_UNTOUCHED(a, sizeof a);
    EXPECT_FAIL(kv, kvs_pull(kv, 2, (kvs_key_t[]){ IK(5), IK(3) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 4),
                                              ARR(b, KVS_FLOAT32, 9, 2, 3) },
                             0),
                KVS_EBADARG, NULL);
    EXPECT_UNTOUCHED(a, sizeof a);
    EXPECT_FAIL(kv, kvs_pull(kv, -2, (kvs_key_t[]){ IK(5) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 4) }, 0),
                KVS_EBADARG, NULL);
    EXPECT_UNTOUCHED(a, sizeof a);
}

/* ---- pushpull --------------------------------------------------------- */

static void test_pushpull(void **state)
{
    kvs_t *kv = *state;
    const float ones[6] = { 1, 1, 1, 1, 1, 1 };
    float out[3][6], inplace[2][6], o5[12];
    int calls = 0;

    /* with outs; a repeated key sums and every out receives the result */
    memset(out, SENTINEL, sizeof out);
    OK(kvs_pushpull(kv, 3, (kvs_key_t[]){ IK(3), IK(5), IK(3) },
                    (kvs_array_t[]){ ARR(FX3, KVS_FLOAT32, 2, 2, 3), ARR(FX5, KVS_FLOAT32, 1, 4),
                                     ARR(ones, KVS_FLOAT32, 2, 2, 3) },
                    (kvs_array_t[]){ ARR(out[0], KVS_FLOAT32, 2, 2, 3),
                                     ARR(out[1], KVS_FLOAT32, 1, 4),
                                     ARR(out[2], KVS_FLOAT32, 2, 2, 3) },
                    0));
    EXPECT_F32(out[0], ((const float[]){ 2, 3, 4, 5, 6, 7 }), 6);
    EXPECT_F32(out[2], ((const float[]){ 2, 3, 4, 5, 6, 7 }), 6);
    EXPECT_F32(out[1], FX5, 4);
    PULL_F32(kv, IK(3), out[0], 2, 2, 3);
    EXPECT_F32(out[0], ((const float[]){ 2, 3, 4, 5, 6, 7 }), 6);

    /* outs NULL: in place, into every value of the key */
    for (int i = 0; i < 6; i++) {
        inplace[0][i] = 1;
        inplace[1][i] = (float)i;
    }
    OK(kvs_pushpull(kv, 2, (kvs_key_t[]){ IK(3), IK(3) },
                    (kvs_array_t[]){ ARR(inplace[0], KVS_FLOAT32, 2, 2, 3),
                                     ARR(inplace[1], KVS_FLOAT32, 2, 2, 3) },
                    NULL, 0));
    EXPECT_F32(inplace[0], ((const float[]){ 1, 2, 3, 4, 5, 6 }), 6);
    EXPECT_F32(inplace[1], ((const float[]){ 1, 2, 3, 4, 5, 6 }), 6);

    /* outs aliasing the values */
    {
        kvs_array_t same[1] = { ARR(inplace[0], KVS_FLOAT32, 2, 2, 3) };
        OK(kvs_pushpull(kv, 1, (kvs_key_t[]){ IK(3) }, same, same, 0));
        EXPECT_F32(inplace[0], ((const float[]){ 1, 2, 3, 4, 5, 6 }), 6);
    }

    /* with an updater: stored += sum, pulled after the update */
    OK(kvs_set_updater(kv, add_f32, &calls));
    memset(out, SENTINEL, sizeof out);
    OK(kvs_pushpull(kv, 2, (kvs_key_t[]){ IK(3), IK(3) },
                    (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 2, 2, 3),
                                     ARR(ones, KVS_FLOAT32, 2, 2, 3) },
                    (kvs_array_t[]){ ARR(out[0], KVS_FLOAT32, 2, 2, 3),
                                     ARR(out[1], KVS_FLOAT32, 2, 2, 3) },
                    0));
    assert_int_equal(calls, 1);
    EXPECT_F32(out[0], ((const float[]){ 3, 4, 5, 6, 7, 8 }), 6);
    EXPECT_F32(out[1], ((const float[]){ 3, 4, 5, 6, 7, 8 }), 6);
    OK(kvs_set_updater(kv, NULL, NULL));

    /* A bad out fails the whole call: the push is not applied either. */
    OK(kvs_reinit(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(FX3, KVS_FLOAT32, 2, 2, 3) }));
    memset(out, SENTINEL, sizeof out);
    memset(o5, SENTINEL, sizeof o5);
    EXPECT_FAIL(kv, kvs_pushpull(kv, 2, (kvs_key_t[]){ IK(3), IK(5) },
                                 (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 2, 2, 3),
                                                  ARR(ones, KVS_FLOAT32, 1, 4) },
                                 (kvs_array_t[]){ ARR(out[0], KVS_FLOAT32, 2, 2, 3),
                                                  ARR(o5, KVS_FLOAT32, 1, 5) },
                                 0),
                KVS_ESHAPE, "5");
    EXPECT_UNTOUCHED(out[0], sizeof out[0]);
    EXPECT_UNTOUCHED(o5, sizeof o5);
    EXPECT_FAIL(kv, kvs_pushpull(kv, 1, (kvs_key_t[]){ IK(3) },
                                 (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 2, 2, 3) },
                                 (kvs_array_t[]){ ARR(o5, KVS_FLOAT64, 2, 2, 3) }, 0),
                KVS_EDTYPE, "3");
    EXPECT_FAIL(kv, kvs_pushpull(kv, 1, (kvs_key_t[]){ IK(88) },
                                 (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 2, 2, 3) }, NULL, 0),
                KVS_ENOKEY, "88");
    EXPECT_FAIL(kv, kvs_pushpull(kv, 1, (kvs_key_t[]){ IK(3) },
                                 (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 1, 6) }, NULL, 0),
                KVS_ESHAPE, "3");
}

/* ---- row_sparse_pull -------------------------------------------------- */

/* key 1: float32 (5,3), row r = { 10r+1, 10r+2, 10r+3 } */
static kvs_t *rsp_store(void)
{
    kvs_t *kv = new_store("local");
    float v[15];
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 3; c++)
            v[r * 3 + c] = (float)(10 * r + c + 1);
    OK(kvs_init(kv, 1, (kvs_key_t[]){ IK(1) }, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, 5, 3) }));
    return kv;
}

/* out holds exactly the rows of `rows` (a mask of 5) and zeros elsewhere */
static void expect_rows_at(const float *out, const int *rows, int line)
{
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 3; c++) {
            float want = rows[r] ? (float)(10 * r + c + 1) : 0.0f;
            if (out[r * 3 + c] != want)
                fail_msg("line %d: row %d col %d: got %g, want %g", line, r, c,
                         (double)out[r * 3 + c], (double)want);
        }
}
#define EXPECT_ROWS(out, ...) expect_rows_at((out), (const int[5]){ __VA_ARGS__ }, __LINE__)

static void rsp_unchanged_at(kvs_t *kv, int line)
{
    float all[15];
    pull_f32_at(kv, IK(1), all, 2, (const int64_t[]){ 5, 3 }, line);
    expect_rows_at(all, (const int[5]){ 1, 1, 1, 1, 1 }, line);
}

/* No row ids, their data NULL or not: every byte of the out is zero, for
 * every dtype (the dist types get the same case in tests/dist_training). */
static void test_row_sparse_pull_no_ids_every_dtype(void **state)
{
    static const kvs_dtype_t dts[] = { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16, KVS_BFLOAT16,
                                       KVS_INT32, KVS_INT64, KVS_UINT8 };
    kvs_t *kv = new_store("local");
    unsigned char v[4 * 3 * 8], out[sizeof v];
    int64_t some[1] = { 0 };
    (void)state;
    memset(v, 0x3c, sizeof v);
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        size_t bytes = 12 * kvs_dtype_size(dts[d]);

        OK(kvs_init(kv, 1, (kvs_key_t[]){ IK((int64_t)d) },
                    (kvs_array_t[]){ ARR(v, dts[d], 2, 4, 3) }));
        for (int null = 0; null < 2; null++) {
            memset(out, SENTINEL, sizeof out);
            OK(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK((int64_t)d) },
                                   (kvs_array_t[]){ ARR(out, dts[d], 2, 4, 3) },
                                   (kvs_array_t[]){ ARR(null ? NULL : some, KVS_INT64, 1, 0) },
                                   0));
            for (size_t i = 0; i < bytes; i++)
                if (out[i] != 0)
                    fail_msg("%s, ids %s: byte %zu is 0x%02x", kvs_dtype_name(dts[d]),
                             null ? "NULL" : "not NULL", i, out[i]);
        }
    }
    kvs_close(kv);
}

static void test_row_sparse_pull_basic(void **state)
{
    kvs_t *kv = rsp_store();
    const int64_t ids[3] = { 3, 0, 3 };
    float out[15];
    (void)state;
    memset(out, SENTINEL, sizeof out); /* rows not named must be zeroed */
    OK(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(1) },
                           (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 5, 3) },
                           (kvs_array_t[]){ ARR(ids, KVS_INT64, 1, 3) }, 0));
    EXPECT_ROWS(out, 1, 0, 0, 1, 0);
    /* all rows, reversed */
    OK(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(1) },
                           (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 5, 3) },
                           (kvs_array_t[]){ ARR(((const int64_t[]){ 4, 3, 2, 1, 0 }), KVS_INT64, 1,
                                                5) },
                           0));
    EXPECT_ROWS(out, 1, 1, 1, 1, 1);
    /* no row ids: all zero */
    memset(out, SENTINEL, sizeof out);
    OK(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(1) },
                           (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 5, 3) },
                           (kvs_array_t[]){ ARR(NULL, KVS_INT64, 1, 0) }, 0));
    EXPECT_ROWS(out, 0, 0, 0, 0, 0);
    rsp_unchanged_at(kv, __LINE__);
    kvs_close(kv);
}

static void test_row_sparse_pull_errors(void **state)
{
    kvs_t *kv = rsp_store();
    float out[15], out2[15];
    const float sc = 1;
    const int64_t ok_ids[1] = { 2 };
    (void)state;

    struct {
        kvs_array_t ids;
        int want;
    } bad[] = {
        { ARR(((const int64_t[]){ 0, 5 }), KVS_INT64, 1, 2), KVS_ERANGE },
        { ARR(((const int64_t[]){ -1 }), KVS_INT64, 1, 1), KVS_ERANGE },
        { ARR(((const int64_t[]){ INT64_MIN, 1 }), KVS_INT64, 1, 2), KVS_ERANGE },
        { ARR(((const int64_t[]){ 1, INT64_MAX }), KVS_INT64, 1, 2), KVS_ERANGE },
        { ARR(((const float[]){ 0, 1 }), KVS_FLOAT32, 1, 2), KVS_EDTYPE },
        { ARR(((const int32_t[]){ 0, 1 }), KVS_INT32, 1, 2), KVS_EDTYPE },
        { ARR(((const int64_t[]){ 0, 1, 2, 3 }), KVS_INT64, 2, 2, 2), KVS_ESHAPE },
        { ARR(((const int64_t[]){ 1 }), KVS_INT64, 0, 0), KVS_ESHAPE },
        { ARR(NULL, KVS_INT64, 1, 2), KVS_EBADARG },
        { ARR(((const int64_t[]){ 1 }), KVS_INT64, 1, -1), KVS_EBADARG },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        memset(out, SENTINEL, sizeof out);
        rc = kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(1) },
                                 (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 5, 3) }, &bad[i].ids,
                                 0);
        if (rc != bad[i].want)
            fail_msg("case %zu: got %d (%s), want %s", i, rc, kvs_err_name(rc),
                     kvs_err_name(bad[i].want));
        EXPECT_DETAIL(kv, NULL);
        EXPECT_UNTOUCHED(out, sizeof out);
        rsp_unchanged_at(kv, __LINE__);
    }
    /* out of range in the second of two outs: the first is not written */
    memset(out, SENTINEL, sizeof out);
    memset(out2, SENTINEL, sizeof out2);
    EXPECT_RC(kvs_row_sparse_pull(kv, 2, (kvs_key_t[]){ IK(1), IK(1) },
                                  (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 5, 3),
                                                   ARR(out2, KVS_FLOAT32, 2, 5, 3) },
                                  (kvs_array_t[]){ ARR(ok_ids, KVS_INT64, 1, 1),
                                                   ARR(((const int64_t[]){ 5 }), KVS_INT64, 1,
                                                       1) },
                                  0),
              KVS_ERANGE);
    EXPECT_UNTOUCHED(out, sizeof out);
    EXPECT_UNTOUCHED(out2, sizeof out2);
    /* out shape and dtype, unknown key, NULL row_ids list */
    EXPECT_RC(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(1) },
                                  (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 3, 5) },
                                  (kvs_array_t[]){ ARR(ok_ids, KVS_INT64, 1, 1) }, 0),
              KVS_ESHAPE);
    EXPECT_RC(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(1) },
                                  (kvs_array_t[]){ ARR(out, KVS_INT32, 2, 5, 3) },
                                  (kvs_array_t[]){ ARR(ok_ids, KVS_INT64, 1, 1) }, 0),
              KVS_EDTYPE);
    EXPECT_RC(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(2) },
                                  (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 5, 3) },
                                  (kvs_array_t[]){ ARR(ok_ids, KVS_INT64, 1, 1) }, 0),
              KVS_ENOKEY);
    EXPECT_DETAIL(kv, "2");
    EXPECT_RC(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(1) },
                                  (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, 5, 3) }, NULL, 0),
              KVS_EBADARG);
    EXPECT_UNTOUCHED(out, sizeof out);
    /* a scalar key has no rows */
    OK(kvs_init(kv, 1, (kvs_key_t[]){ IK(2) }, (kvs_array_t[]){ ARR(&sc, KVS_FLOAT32, 0, 0) }));
    EXPECT_RC(kvs_row_sparse_pull(kv, 1, (kvs_key_t[]){ IK(2) },
                                  (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 0, 0) },
                                  (kvs_array_t[]){ ARR(((const int64_t[]){ 0 }), KVS_INT64, 1, 1) },
                                  0),
              KVS_ESHAPE);
    EXPECT_UNTOUCHED(out, sizeof out);
    rsp_unchanged_at(kv, __LINE__);
    kvs_close(kv);
}

static void test_row_sparse_pull_several_outs(void **state)
{
    kvs_t *kv = rsp_store();
    float o[3][15];
    double d3[24];
    double v3[24];
    (void)state;
    memset(o, SENTINEL, sizeof o);
    OK(kvs_row_sparse_pull(kv, 3, (kvs_key_t[]){ IK(1), IK(1), IK(1) },
                           (kvs_array_t[]){ ARR(o[0], KVS_FLOAT32, 2, 5, 3),
                                            ARR(o[1], KVS_FLOAT32, 2, 5, 3),
                                            ARR(o[2], KVS_FLOAT32, 2, 5, 3) },
                           (kvs_array_t[]){ ARR(((const int64_t[]){ 4 }), KVS_INT64, 1, 1),
                                            ARR(((const int64_t[]){ 1, 2, 1, 2 }), KVS_INT64, 1,
                                                4),
                                            ARR(((const int64_t[]){ 0, 3 }), KVS_INT64, 1, 2) },
                           0));
    EXPECT_ROWS(o[0], 0, 0, 0, 0, 1);
    EXPECT_ROWS(o[1], 0, 1, 1, 0, 0);
    EXPECT_ROWS(o[2], 1, 0, 0, 1, 0);

    /* two keys, one of them 3-D float64 (4,2,3): a row is 6 elements */
    for (int i = 0; i < 24; i++)
        v3[i] = i + 0.5;
    OK(kvs_init(kv, 1, (kvs_key_t[]){ IK(2) }, (kvs_array_t[]){ ARR(v3, KVS_FLOAT64, 3, 4, 2, 3) }));
    memset(o, SENTINEL, sizeof o);
    memset(d3, SENTINEL, sizeof d3);
    OK(kvs_row_sparse_pull(kv, 2, (kvs_key_t[]){ IK(2), IK(1) },
                           (kvs_array_t[]){ ARR(d3, KVS_FLOAT64, 3, 4, 2, 3),
                                            ARR(o[0], KVS_FLOAT32, 2, 5, 3) },
                           (kvs_array_t[]){ ARR(((const int64_t[]){ 3, 1 }), KVS_INT64, 1, 2),
                                            ARR(((const int64_t[]){ 2 }), KVS_INT64, 1, 1) },
                           0));
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 6; j++) {
            double want = (r == 1 || r == 3) ? v3[r * 6 + j] : 0.0;
            if (d3[r * 6 + j] != want)
                fail_msg("row %d elem %d: got %g want %g", r, j, d3[r * 6 + j], want);
        }
    EXPECT_ROWS(o[0], 0, 0, 1, 0, 0);
    rsp_unchanged_at(kv, __LINE__);
    kvs_close(kv);
}

/* ---- options ---------------------------------------------------------- */

static void test_options(void **state)
{
    kvs_t *kv = *state;
    int64_t v = -5;
    assert_int_equal(kvs_get_option(kv, KVS_OPT_THREADS, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(kvs_get_option(kv, KVS_OPT_INIT_ON_PUSH, &v), 0);
    assert_int_equal(v, 0);
    EXPECT_RC(kvs_get_option(kv, KVS_OPT_THREADS, NULL), KVS_EBADARG);
    EXPECT_RC(kvs_set_option(kv, (kvs_option_t)99, 1), KVS_EBADARG);
    EXPECT_DETAIL(kv, NULL);
    EXPECT_RC(kvs_set_option(kv, (kvs_option_t)0, 1), KVS_EBADARG);
    EXPECT_RC(kvs_get_option(kv, (kvs_option_t)99, &v), KVS_EBADARG);
    EXPECT_RC(kvs_set_option(kv, KVS_OPT_THREADS, -1), KVS_EBADARG);
    EXPECT_RC(kvs_set_option(kv, KVS_OPT_THREADS, 65), KVS_EBADARG);
    EXPECT_RC(kvs_set_option(kv, KVS_OPT_THREADS, INT64_MAX), KVS_EBADARG);
    EXPECT_RC(kvs_set_option(kv, KVS_OPT_INIT_ON_PUSH, -1), KVS_EBADARG);
    EXPECT_RC(kvs_set_option(kv, KVS_OPT_INIT_ON_PUSH, 2), KVS_EBADARG);
    /* the failures left the values alone */
    assert_int_equal(kvs_get_option(kv, KVS_OPT_THREADS, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(kvs_get_option(kv, KVS_OPT_INIT_ON_PUSH, &v), 0);
    assert_int_equal(v, 0);
    for (int t = 1; t <= 64; t += 63) {
        OK(kvs_set_option(kv, KVS_OPT_THREADS, t));
        assert_int_equal(kvs_get_option(kv, KVS_OPT_THREADS, &v), 0);
        assert_int_equal(v, t);
    }
    OK(kvs_set_option(kv, KVS_OPT_THREADS, 0));
    FX_UNCHANGED(kv);
}

/* Half bits of a small non-negative integer (< 2048). */
static uint16_t half_of_int(unsigned n)
{
    int e = 0;
    if (n == 0)
        return 0;
    while ((1u << (e + 1)) <= n)
        e++;
    return (uint16_t)(((unsigned)(e + 15) << 10) | ((n - (1u << e)) << (10 - e)));
}

static void big_push(int threads, float *outf, uint16_t *outh, uint8_t *outu, size_t n)
{
    kvs_t *kv = new_store("local");
    float *f[3];
    uint16_t *h[3];
    uint8_t *u[3], *hv[3];
    uint16_t halves[22];
    uint32_t x = 12345;
    for (unsigned v = 0; v < 22; v++)
        halves[v] = half_of_int(v);
    OK(kvs_set_option(kv, KVS_OPT_THREADS, threads));
    for (int k = 0; k < 3; k++) {
        f[k] = malloc(n * sizeof(float));
        h[k] = malloc(n * sizeof(uint16_t));
        u[k] = malloc(n);
        hv[k] = malloc(n);
        assert_true(f[k] && h[k] && u[k] && hv[k]);
        for (size_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            /* multiples of 2^-20 in (-4, 4): sums of three are exact */
            f[k][i] = (float)((int32_t)x / 512) * 0x1p-20f;
            hv[k][i] = (uint8_t)((x >> 4) % 8);
            h[k][i] = halves[hv[k][i]];
            u[k][i] = (uint8_t)(x >> 20);
        }
    }
    OK(kvs_init(kv, 3, (kvs_key_t[]){ IK(1), IK(2), IK(3) },
                (kvs_array_t[]){ ARR(f[0], KVS_FLOAT32, 1, (int64_t)n),
                                 ARR(h[0], KVS_FLOAT16, 1, (int64_t)n),
                                 ARR(u[0], KVS_UINT8, 1, (int64_t)n) }));
    OK(kvs_push(kv, 9, (kvs_key_t[]){ IK(1), IK(2), IK(3), IK(1), IK(2), IK(3), IK(1), IK(2),
                                      IK(3) },
                (kvs_array_t[]){ ARR(f[0], KVS_FLOAT32, 1, (int64_t)n),
                                 ARR(h[0], KVS_FLOAT16, 1, (int64_t)n),
                                 ARR(u[0], KVS_UINT8, 1, (int64_t)n),
                                 ARR(f[1], KVS_FLOAT32, 1, (int64_t)n),
                                 ARR(h[1], KVS_FLOAT16, 1, (int64_t)n),
                                 ARR(u[1], KVS_UINT8, 1, (int64_t)n),
                                 ARR(f[2], KVS_FLOAT32, 1, (int64_t)n),
                                 ARR(h[2], KVS_FLOAT16, 1, (int64_t)n),
                                 ARR(u[2], KVS_UINT8, 1, (int64_t)n) },
                0));
    OK(kvs_pull(kv, 3, (kvs_key_t[]){ IK(1), IK(2), IK(3) },
                (kvs_array_t[]){ ARR(outf, KVS_FLOAT32, 1, (int64_t)n),
                                 ARR(outh, KVS_FLOAT16, 1, (int64_t)n),
                                 ARR(outu, KVS_UINT8, 1, (int64_t)n) },
                0));
    /* Every element: float32 sums are exact in any order, halves are small
     * integers, bytes wrap. */
    for (size_t i = 0; i < n; i++) {
        float wf = f[0][i] + f[1][i] + f[2][i];
        uint16_t wh = halves[hv[0][i] + hv[1][i] + hv[2][i]];
        uint8_t wu = (uint8_t)(u[0][i] + u[1][i] + u[2][i]);
        if (outf[i] != wf)
            fail_msg("threads %d: float32 element %zu: got %.9g want %.9g", threads, i,
                     (double)outf[i], (double)wf);
        if (outh[i] != wh)
            fail_msg("threads %d: float16 element %zu: got 0x%04x want 0x%04x", threads, i,
                     outh[i], wh);
        if (outu[i] != wu)
            fail_msg("threads %d: uint8 element %zu: got %u want %u", threads, i, outu[i], wu);
    }
    for (int k = 0; k < 3; k++) {
        free(f[k]);
        free(h[k]);
        free(u[k]);
        free(hv[k]);
    }
    kvs_close(kv);
}

static void test_threads_option_identical_sums(void **state)
{
    const size_t n = 3000001; /* not a multiple of any chunk size */
    float *f1 = malloc(n * sizeof(float)), *f4 = malloc(n * sizeof(float));
    uint16_t *h1 = malloc(n * 2), *h4 = malloc(n * 2);
    uint8_t *u1 = malloc(n), *u4 = malloc(n);
    (void)state;
    assert_true(f1 && f4 && h1 && h4 && u1 && u4);
    big_push(1, f1, h1, u1, n);
    big_push(4, f4, h4, u4, n);
    assert_memory_equal(f1, f4, n * sizeof(float));
    assert_memory_equal(h1, h4, n * 2);
    assert_memory_equal(u1, u4, n);
    free(f1);
    free(f4);
    free(h1);
    free(h4);
    free(u1);
    free(u4);
}

/* ---- main ------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        FX(test_push_single_repeated_several),
        FX(test_push_unknown_key),
        FX(test_push_init_on_push_option),
        FX(test_push_shape_mismatch),
        FX(test_push_dtype_mismatch),
        FX(test_push_device_array),
        FX(test_push_bad_args),
        FX(test_key_kind_mixing),
        FX(test_pull_broadcast),
        FX(test_pull_errors_write_no_out),
        FX(test_pushpull),
        cmocka_unit_test(test_row_sparse_pull_basic),
        cmocka_unit_test(test_row_sparse_pull_errors),
        cmocka_unit_test(test_row_sparse_pull_no_ids_every_dtype),
        cmocka_unit_test(test_row_sparse_pull_several_outs),
        FX(test_options),
        cmocka_unit_test(test_threads_option_identical_sums),
    };
    return cmocka_run_group_tests_name("api_pushpull", tests, NULL, NULL);
}
