/*
 * test_api.c - behaviour tests of the store basics of the public API (kvs.h)
 * on the in-process "local" store: creation, store types, calls on a NULL
 * handle, kvs_strerror and the version, the seven dtypes, init and reinit,
 * int and string keys, and after each failing call the proof that the
 * store was left exactly as it was. The values of the store are checked
 * element by element after each call. push, pull, pushpull,
 * row_sparse_pull and the options are test_api_pushpull.c's; the update
 * rules (updater, optimizers, gradient compression) are test_api_update.c's
 * and the optimizers' state files test_api_states.c's. Uses only kvs.h;
 * knows nothing of the library's insides.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
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

/* ---- version, errors, dtypes ------------------------------------------ */

static void test_version(void **state)
{
    int ma = -1, mi = -1, pa = -1;
    char want[64];
    const char *s = kvs_version(&ma, &mi, &pa);
    (void)state;
    assert_int_equal(ma, KVS_VERSION_MAJOR);
    assert_int_equal(mi, KVS_VERSION_MINOR);
    assert_int_equal(pa, KVS_VERSION_PATCH);
    snprintf(want, sizeof want, "kvs %d.%d.%d", KVS_VERSION_MAJOR, KVS_VERSION_MINOR,
             KVS_VERSION_PATCH);
    assert_non_null(s);
    assert_string_equal(s, want);
    snprintf(want, sizeof want, "kvs %s", KVS_VERSION_STRING);
    assert_string_equal(s, want);
#ifdef PACKAGE_VERSION
    /* In the build tree: the header's version is configure's (AC_INIT). */
    assert_string_equal(KVS_VERSION_STRING, PACKAGE_VERSION);
#endif
    /* Each out-pointer may be NULL. */
    assert_string_equal(kvs_version(NULL, NULL, NULL), want);
    assert_string_equal(kvs_version(&ma, NULL, NULL), want);
    assert_int_equal(ma, KVS_VERSION_MAJOR);
}

struct err_entry {
    const char *name;
    int value;
    const char *msg;
};

static const struct err_entry ERRS[] = {
#define XX_(name, value, msg) { "KVS_E" #name, value, msg },
    KVS_ERRNO_MAP(XX_)
#undef XX_
};

static void test_strerror_every_kvs_code(void **state)
{
    size_t n = sizeof ERRS / sizeof ERRS[0];
    (void)state;
    assert_true(n >= 18);
    for (size_t i = 0; i < n; i++) {
        const char *m = kvs_strerror(ERRS[i].value);
        const char *nm = kvs_err_name(ERRS[i].value);
        assert_true(ERRS[i].value <= -30000 && ERRS[i].value >= -30999);
        assert_non_null(m);
        assert_non_null(nm);
        if (strcmp(m, ERRS[i].msg) != 0)
            fail_msg("kvs_strerror(%d) = \"%s\", want \"%s\"", ERRS[i].value, m, ERRS[i].msg);
        if (strcmp(nm, ERRS[i].name) != 0)
            fail_msg("kvs_err_name(%d) = \"%s\", want \"%s\"", ERRS[i].value, nm, ERRS[i].name);
    }
    /* The enum constants are the list's values. */
    assert_int_equal(KVS_EBADARG, -30001);
    assert_int_equal(KVS_ESHAPE, -30006);
    assert_int_equal(KVS_ECLOSED, -30018);
    assert_int_equal(KVS_ERESTART, -30019);
    assert_string_equal(kvs_err_name(KVS_ESHAPE), "KVS_ESHAPE");
}

static void test_strerror_errno_and_unknown(void **state)
{
    static const struct { int e; const char *name; } sys[] = {
        { ENOMEM, "ENOMEM" }, { ENOENT, "ENOENT" }, { EIO, "EIO" },
        { EINVAL, "EINVAL" }, { EACCES, "EACCES" }, { ENOSPC, "ENOSPC" },
        { EEXIST, "EEXIST" }, { EINTR, "EINTR" },   { EAGAIN, "EAGAIN" },
    };
    static const int unknown[] = { -29999, 12345, INT_MIN, INT_MAX, -30000, -30020, -30999 };
    const char *unk;
    (void)state;

    unk = kvs_strerror(-29999);
    assert_non_null(unk);
    if (strcasestr(unk, "unknown") == NULL)
        fail_msg("kvs_strerror(-29999) = \"%s\", want an \"unknown error\" message", unk);

    for (size_t i = 0; i < sizeof sys / sizeof sys[0]; i++) {
        const char *m = kvs_strerror(-sys[i].e);
        const char *nm = kvs_err_name(-sys[i].e);
        assert_non_null(m);
        assert_non_null(nm);
        if (m[0] == '\0' || strcmp(m, unk) == 0)
            fail_msg("kvs_strerror(-%s) = \"%s\": want the system's message", sys[i].name, m);
        if (strcmp(nm, sys[i].name) != 0)
            fail_msg("kvs_err_name(-%s) = \"%s\"", sys[i].name, nm);
    }
    assert_string_not_equal(kvs_strerror(-ENOMEM), kvs_strerror(-ENOENT));

    /* 0 is success. */
    assert_non_null(kvs_strerror(0));
    if (strcasestr(kvs_strerror(0), "success") == NULL)
        fail_msg("kvs_strerror(0) = \"%s\"", kvs_strerror(0));
    assert_non_null(kvs_err_name(0));

    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *m = kvs_strerror(unknown[i]);
        const char *nm = kvs_err_name(unknown[i]);
        assert_non_null(m);
        assert_non_null(nm);
        if (strcasestr(m, "unknown") == NULL)
            fail_msg("kvs_strerror(%d) = \"%s\", want \"unknown error\"", unknown[i], m);
        if (strcmp(nm, "UNKNOWN") != 0)
            fail_msg("kvs_err_name(%d) = \"%s\", want \"UNKNOWN\"", unknown[i], nm);
    }
}

static void test_dtype_size_and_name(void **state)
{
    static const struct { kvs_dtype_t dt; size_t size; const char *name; } t[] = {
        { KVS_FLOAT32, 4, "float32" },   { KVS_FLOAT64, 8, "float64" },
        { KVS_FLOAT16, 2, "float16" },   { KVS_BFLOAT16, 2, "bfloat16" },
        { KVS_INT32, 4, "int32" },       { KVS_INT64, 8, "int64" },
        { KVS_UINT8, 1, "uint8" },
    };
    (void)state;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        assert_int_equal(kvs_dtype_size(t[i].dt), t[i].size);
        assert_string_equal(kvs_dtype_name(t[i].dt), t[i].name);
    }
    assert_int_equal(kvs_dtype_size((kvs_dtype_t)42), 0);
    assert_int_equal(kvs_dtype_size((kvs_dtype_t)-1), 0);
    assert_string_equal(kvs_dtype_name((kvs_dtype_t)42), "invalid");
    assert_string_equal(kvs_dtype_name((kvs_dtype_t)-1), "invalid");
}

/* ---- creating a store ------------------------------------------------- */

static void test_create_local_types(void **state)
{
    static const char *const types[] = { "local", "local_update_cpu", "local_allreduce_cpu" };
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        /* The name is kept by the store, not borrowed from the caller. */
        char name[64];
        kvs_t *kv;
        snprintf(name, sizeof name, "%s", types[i]);
        kv = new_store(name);
        memset(name, 'x', strlen(name));
        assert_string_equal(kvs_type(kv), types[i]);
        assert_int_equal(kvs_rank(kv), 0);
        assert_int_equal(kvs_num_workers(kv), 1);
        assert_int_equal(kvs_barrier(kv), 0);
        assert_string_equal(kvs_last_error(kv), "");
        kvs_close(kv);
    }
}

static void test_create_unknown_type(void **state)
{
    static const char *const bad[] = { "bogus_store", "", "localx", "dist_sync_typo" };
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvs_t *kv = (kvs_t *)(uintptr_t)0x1;  /* must be set to NULL */
        int rc = kvs_create(bad[i], &kv);
        if (rc != KVS_EBADTYPE)
            fail_msg("kvs_create(\"%s\") = %d (%s), want KVS_EBADTYPE", bad[i], rc,
                     kvs_err_name(rc));
        assert_null(kv);
        assert_non_null(kvs_last_error(NULL));
        assert_true(kvs_last_error(NULL)[0] != '\0');
        if (bad[i][0] != '\0' && strstr(kvs_last_error(NULL), bad[i]) == NULL)
            fail_msg("kvs_last_error(NULL) = \"%s\" does not name \"%s\"",
                     kvs_last_error(NULL), bad[i]);
    }
}

/* A KVS_TIMEOUT that is not a number of seconds is refused, for every
 * type, not silently replaced by the default. */
static void test_create_bad_timeout_env(void **state)
{
    static const char *const bad[] = { "abc", "0", "-5", "30s", "inf", "nan", "0x10", "1e9",
                                       " 5", "" };
    kvs_t *kv;
    int64_t ms;

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("KVS_TIMEOUT", bad[i], 1);
        if (!*bad[i]) {                /* empty: unset, the default */
            assert_int_equal(kvs_create("local", &kv), 0);
            assert_int_equal(kvs_get_option(kv, KVS_OPT_TIMEOUT_MS, &ms), 0);
            assert_int_equal(ms, 120000);
            kvs_close(kv);
            continue;
        }
        kv = (kvs_t *)&kv;
        assert_int_equal(kvs_create("local", &kv), KVS_EBADARG);
        assert_null(kv);
        assert_non_null(strstr(kvs_last_error(NULL), "KVS_TIMEOUT="));
        assert_int_equal(kvs_create("dist_sync", &kv), KVS_EBADARG);
        assert_non_null(strstr(kvs_last_error(NULL), "KVS_TIMEOUT="));
    }
    setenv("KVS_TIMEOUT", "2.5", 1);
    assert_int_equal(kvs_create("local", &kv), 0);
    assert_int_equal(kvs_get_option(kv, KVS_OPT_TIMEOUT_MS, &ms), 0);
    assert_int_equal(ms, 2500);
    kvs_close(kv);
    unsetenv("KVS_TIMEOUT");
}

static void test_create_null_args(void **state)
{
    kvs_t *kv = (kvs_t *)(uintptr_t)0x1;
    (void)state;
    assert_int_equal(kvs_create(NULL, &kv), KVS_EBADARG);
    assert_null(kv);
    assert_true(kvs_last_error(NULL)[0] != '\0');
    assert_int_equal(kvs_create("local", NULL), KVS_EBADARG);
    assert_int_equal(kvs_create(NULL, NULL), KVS_EBADARG);
}

static void test_create_later_types_are_known(void **state)
{
    static const char *const later[] = { "dist_sync", "dist_async", "device", "nccl",
                                         "dist_device_sync" };
    (void)state;
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) {
        kvs_t *kv = (kvs_t *)(uintptr_t)0x1;
        int rc = kvs_create(later[i], &kv);
        if (rc == KVS_EBADTYPE)
            fail_msg("kvs_create(\"%s\") = KVS_EBADTYPE: a known type", later[i]);
        if (rc == 0) {
            assert_non_null(kv);
            assert_string_equal(kvs_type(kv), later[i]);
            kvs_close(kv);
        } else {
            assert_true(rc < 0);
            assert_null(kv);
        }
    }
}

static void test_null_handle_calls(void **state)
{
    kvs_key_t k = IK(1);
    float v = 1;
    kvs_array_t a = ARR(&v, KVS_FLOAT32, 0, 0);
    int64_t opt = -1;
    (void)state;
    kvs_close(NULL);
    assert_int_equal(kvs_rank(NULL), 0);
    assert_int_equal(kvs_num_workers(NULL), 1);
    assert_int_equal(kvs_barrier(NULL), KVS_EBADARG);
    assert_int_equal(kvs_init(NULL, 1, &k, &a), KVS_EBADARG);
    assert_int_equal(kvs_reinit(NULL, 1, &k, &a), KVS_EBADARG);
    assert_int_equal(kvs_push(NULL, 1, &k, &a, 0), KVS_EBADARG);
    assert_int_equal(kvs_pull(NULL, 1, &k, &a, 0), KVS_EBADARG);
    assert_int_equal(kvs_pushpull(NULL, 1, &k, &a, NULL, 0), KVS_EBADARG);
    assert_int_equal(kvs_row_sparse_pull(NULL, 1, &k, &a, &a, 0), KVS_EBADARG);
    assert_int_equal(kvs_set_updater(NULL, NULL, NULL), KVS_EBADARG);
    assert_int_equal(kvs_set_optimizer(NULL, "sgd"), KVS_EBADARG);
    assert_int_equal(kvs_save_optimizer_states(NULL, "/tmp/x", 0), KVS_EBADARG);
    assert_int_equal(kvs_set_option(NULL, KVS_OPT_THREADS, 1), KVS_EBADARG);
    assert_int_equal(kvs_get_option(NULL, KVS_OPT_THREADS, &opt), KVS_EBADARG);
    assert_true(v == 1);
}

/* ---- the seven dtypes ------------------------------------------------- */

static void test_dtype_float32(void **state)
{
    kvs_t *kv = new_store("local");
    const float init[4] = { 0.5f, -1.25f, 3e38f, -0.0f };
    const float a[4] = { 1.5f, 2.25f, -0.75f, 1e-3f };
    const float b[4] = { 2.25f, -0.75f, 1.5f, 2e-3f };
    const float c[4] = { -0.75f, 1.5f, 2.25f, 4e-3f };
    float out[4];
    const float want[3] = { 3, 3, 3 }; /* exact in any order of summation */
    kvs_key_t keys[3] = { IK(1), IK(1), IK(1) };
    kvs_array_t vals[3] = { ARR(a, KVS_FLOAT32, 1, 4), ARR(b, KVS_FLOAT32, 1, 4),
                            ARR(c, KVS_FLOAT32, 1, 4) };
    (void)state;

    OK(kvs_init(kv, 1, keys, (kvs_array_t[]){ ARR(init, KVS_FLOAT32, 1, 4) }));
    PULL_F32(kv, IK(1), out, 1, 4);
    EXPECT_F32(out, init, 4);

    OK(kvs_push(kv, 3, keys, vals, 0));
    PULL_F32(kv, IK(1), out, 1, 4);
    EXPECT_F32(out, want, 3);
    assert_true(fabsf(out[3] - 7e-3f) <= 1e-9f);
    kvs_close(kv);
}

static void test_dtype_float64(void **state)
{
    kvs_t *kv = new_store("local");
    const double init[3] = { 1e300, -2.5, 0.1 };
    const double a[3] = { 0.1, 1e-300, 1.0 };
    const double b[3] = { 0.2, 1e-300, 2.0 };
    double out[3], want[3];
    kvs_key_t keys[2] = { IK(2), IK(2) };
    kvs_array_t vals[2] = { ARR(a, KVS_FLOAT64, 1, 3), ARR(b, KVS_FLOAT64, 1, 3) };
    (void)state;

    OK(kvs_init(kv, 1, keys, (kvs_array_t[]){ ARR(init, KVS_FLOAT64, 1, 3) }));
    EXPECT_PULLED(kv, keys[0], ARR(out, KVS_FLOAT64, 1, 3), init, 3);

    OK(kvs_push(kv, 2, keys, vals, 0));
    /* Summed in double: 0.1 + 0.2 keeps double's rounding, 2e-300 is not
     * flushed to float's zero. */
    want[0] = 0.1 + 0.2;
    want[1] = 2e-300;
    want[2] = 3.0;
    EXPECT_PULLED(kv, keys[0], ARR(out, KVS_FLOAT64, 1, 3), want, 3);
    assert_true(out[0] != 0.3);  /* 0.30000000000000004, not float's sum */
    kvs_close(kv);
}

static void test_dtype_float16_sum_rounded_once(void **state)
{
    kvs_t *kv = new_store("local");
    /* Raw IEEE half bit patterns. */
    const uint16_t init[4] = { 0x7E00 /* NaN */, 0x8000 /* -0 */, 0x0001 /* min subnormal */,
                               0x3C00 /* 1 */ };
    uint16_t out[8];
    kvs_key_t k = IK(4);
    (void)state;

    OK(kvs_init(kv, 1, &k, (kvs_array_t[]){ ARR(init, KVS_FLOAT16, 1, 4) }));
    EXPECT_PULLED(kv, k, ARR(out, KVS_FLOAT16, 1, 4), init, 4); /* init stores the bits as given */

    /* 2048 + 1 + 1: summed in float32 = 2050 (0x6801); half by half it
     * would stay 2048 (2049 rounds to even).  Element 1: 2048 + 1 = 2049,
     * a tie, to even 2048 (0x6800). Element 2: 2050 + 1 = 2051, a tie, to
     * even 2052 (0x6802). Element 3: subnormals 2^-24 + 2^-24 = 0x0002.
     * Element 4: -1 + -2 + 0 = -3 (0xC200). Element 5: 65504 + 65504
     * overflows to +inf (0x7C00). Element 6: 0.5 + 0.25 + 0.25 = 1 (0x3C00).
     * Element 7: 1 + -1 + 0 = 0. */
    {
        const uint16_t a[8] = { 0x6800, 0x6800, 0x6801, 0x0001, 0xBC00, 0x7BFF, 0x3800, 0x3C00 };
        const uint16_t b[8] = { 0x3C00, 0x3C00, 0x3C00, 0x0001, 0xC000, 0x7BFF, 0x3400, 0xBC00 };
        const uint16_t c[8] = { 0x3C00, 0x0000, 0x0000, 0x0000, 0x0000, 0x0000, 0x3400, 0x0000 };
        const uint16_t want[8] = { 0x6801, 0x6800, 0x6802, 0x0002, 0xC200, 0x7C00, 0x3C00,
                                   0x0000 };
        const uint16_t z[8] = { 0 };
        kvs_key_t keys[3] = { IK(8), IK(8), IK(8) };
        kvs_array_t vals[3] = { ARR(a, KVS_FLOAT16, 1, 8), ARR(b, KVS_FLOAT16, 1, 8),
                                ARR(c, KVS_FLOAT16, 1, 8) };
        OK(kvs_init(kv, 1, keys, (kvs_array_t[]){ ARR(z, KVS_FLOAT16, 1, 8) }));
        OK(kvs_push(kv, 3, keys, vals, 0));
        EXPECT_PULLED(kv, keys[0], ARR(out, KVS_FLOAT16, 1, 8), want, 8);
    }
    kvs_close(kv);
}

static void test_dtype_bfloat16_sum_rounded_once(void **state)
{
    kvs_t *kv = new_store("local");
    /* 256 + 1 + 1 = 258 (0x4381) in float32; bf16 by bf16 it would stay 256.
     * 256 + 1 = 257, a tie, to even 256 (0x4380). 258 + 1 = 259, a tie, to
     * even 260 (0x4382). -1 + -2 = -3 (0xC040). 1.5 + 1.5 = 3 (0x4040).
     * Subnormals 0x0001 + 0x0001 = 0x0002. */
    const uint16_t a[6] = { 0x4380, 0x4380, 0x4381, 0xBF80, 0x3FC0, 0x0001 };
    const uint16_t b[6] = { 0x3F80, 0x3F80, 0x3F80, 0xC000, 0x3FC0, 0x0001 };
    const uint16_t c[6] = { 0x3F80, 0x0000, 0x0000, 0x0000, 0x0000, 0x0000 };
    const uint16_t want[6] = { 0x4381, 0x4380, 0x4382, 0xC040, 0x4040, 0x0002 };
    const uint16_t init[6] = { 0x7FC0, 0x8000, 0x3F80, 0x0001, 0xFF80, 0x1234 };
    uint16_t out[6];
    kvs_key_t keys[3] = { IK(1), IK(1), IK(1) };
    kvs_array_t vals[3] = { ARR(a, KVS_BFLOAT16, 2, 2, 3), ARR(b, KVS_BFLOAT16, 2, 2, 3),
                            ARR(c, KVS_BFLOAT16, 2, 2, 3) };
    (void)state;

    OK(kvs_init(kv, 1, keys, (kvs_array_t[]){ ARR(init, KVS_BFLOAT16, 2, 2, 3) }));
    EXPECT_PULLED(kv, keys[0], ARR(out, KVS_BFLOAT16, 2, 2, 3), init, 6);

    OK(kvs_push(kv, 3, keys, vals, 0));
    EXPECT_PULLED(kv, keys[0], ARR(out, KVS_BFLOAT16, 2, 2, 3), want, 6);
    kvs_close(kv);
}

static void test_dtype_int32_wraps(void **state)
{
    kvs_t *kv = new_store("local");
    const int32_t z[4] = { 7, 7, 7, 7 };
    const int32_t a[4] = { INT32_MAX, INT32_MIN, -5, 1000000 };
    const int32_t b[4] = { 1, -1, 3, 2000000 };
    const int32_t want[4] = { INT32_MIN, INT32_MAX, -2, 3000000 };
    int32_t out[4];
    kvs_key_t keys[2] = { IK(1), IK(1) };
    kvs_array_t vals[2] = { ARR(a, KVS_INT32, 1, 4), ARR(b, KVS_INT32, 1, 4) };
    (void)state;
    OK(kvs_init(kv, 1, keys, (kvs_array_t[]){ ARR(z, KVS_INT32, 1, 4) }));
    OK(kvs_push(kv, 2, keys, vals, 0));
    EXPECT_PULLED(kv, keys[0], ARR(out, KVS_INT32, 1, 4), want, 4);
    kvs_close(kv);
}

static void test_dtype_int64_wraps(void **state)
{
    kvs_t *kv = new_store("local");
    const int64_t z[3] = { 0, 0, 0 };
    const int64_t a[3] = { INT64_MAX, INT64_MIN, (int64_t)1 << 40 };
    const int64_t b[3] = { 1, -1, (int64_t)1 << 40 };
    const int64_t c[3] = { 0, 0, -1 };
    const int64_t want[3] = { INT64_MIN, INT64_MAX, ((int64_t)1 << 41) - 1 };
    int64_t out[3];
    kvs_key_t keys[3] = { IK(1), IK(1), IK(1) };
    kvs_array_t vals[3] = { ARR(a, KVS_INT64, 1, 3), ARR(b, KVS_INT64, 1, 3),
                            ARR(c, KVS_INT64, 1, 3) };
    (void)state;
    OK(kvs_init(kv, 1, keys, (kvs_array_t[]){ ARR(z, KVS_INT64, 1, 3) }));
    OK(kvs_push(kv, 3, keys, vals, 0));
    EXPECT_PULLED(kv, keys[0], ARR(out, KVS_INT64, 1, 3), want, 3);
    kvs_close(kv);
}

static void test_dtype_uint8_wraps(void **state)
{
    kvs_t *kv = new_store("local");
    const uint8_t z[4] = { 9, 9, 9, 9 };
    const uint8_t a[4] = { 200, 255, 0, 128 };
    const uint8_t b[4] = { 100, 1, 0, 128 };
    const uint8_t want[4] = { 44, 0, 0, 0 };
    uint8_t out[4];
    kvs_key_t keys[2] = { IK(1), IK(1) };
    kvs_array_t vals[2] = { ARR(a, KVS_UINT8, 1, 4), ARR(b, KVS_UINT8, 1, 4) };
    (void)state;
    OK(kvs_init(kv, 1, keys, (kvs_array_t[]){ ARR(z, KVS_UINT8, 1, 4) }));
    EXPECT_PULLED(kv, keys[0], ARR(out, KVS_UINT8, 1, 4), z, 4);
    OK(kvs_push(kv, 2, keys, vals, 0));
    EXPECT_PULLED(kv, keys[0], ARR(out, KVS_UINT8, 1, 4), want, 4);
    kvs_close(kv);
}

static void test_scalar_empty_and_eight_dims(void **state)
{
    kvs_t *kv = new_store("local");
    const float s = 2.5f, s2 = 4.0f;
    float out = 0, big[2] = { 0, 0 };
    const float e8[2] = { 1, 2 };
    kvs_key_t k;
    (void)state;

    /* ndim 0: a scalar of one element. */
    k = IK(1);
    OK(kvs_init(kv, 1, &k, (kvs_array_t[]){ ARR(&s, KVS_FLOAT32, 0, 0) }));
    OK(kvs_push(kv, 2, (kvs_key_t[]){ IK(1), IK(1) },
                (kvs_array_t[]){ ARR(&s, KVS_FLOAT32, 0, 0), ARR(&s2, KVS_FLOAT32, 0, 0) }, 0));
    OK(kvs_pull(kv, 1, &k, (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) }, 0));
    assert_true(out == 6.5f);
    /* A scalar is not a one-element vector. */
    EXPECT_RC(kvs_pull(kv, 1, &k, (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 1, 1) }, 0),
              KVS_ESHAPE);

    /* No elements: data may be NULL. */
    k = IK(2);
    OK(kvs_init(kv, 1, &k, (kvs_array_t[]){ ARR(NULL, KVS_FLOAT32, 2, 0, 3) }));
    OK(kvs_push(kv, 1, &k, (kvs_array_t[]){ ARR(NULL, KVS_FLOAT32, 2, 0, 3) }, 0));
    OK(kvs_pull(kv, 1, &k, (kvs_array_t[]){ ARR(NULL, KVS_FLOAT32, 2, 0, 3) }, 0));
    EXPECT_RC(kvs_pull(kv, 1, &k, (kvs_array_t[]){ ARR(NULL, KVS_FLOAT32, 2, 3, 0) }, 0),
              KVS_ESHAPE);

    /* KVS_MAX_NDIM dimensions. */
    k = IK(3);
    OK(kvs_init(kv, 1, &k,
                (kvs_array_t[]){ ARR(e8, KVS_FLOAT32, 8, 1, 1, 1, 1, 1, 1, 1, 2) }));
    OK(kvs_push(kv, 2, (kvs_key_t[]){ IK(3), IK(3) },
                (kvs_array_t[]){ ARR(e8, KVS_FLOAT32, 8, 1, 1, 1, 1, 1, 1, 1, 2),
                                 ARR(e8, KVS_FLOAT32, 8, 1, 1, 1, 1, 1, 1, 1, 2) },
                0));
    OK(kvs_pull(kv, 1, &k, (kvs_array_t[]){ ARR(big, KVS_FLOAT32, 8, 1, 1, 1, 1, 1, 1, 1, 2) },
                0));
    assert_true(big[0] == 2 && big[1] == 4);
    kvs_close(kv);
}

static void test_unused_extents_ignored(void **state)
{
    kvs_t *kv = new_store("local");
    const float v[6] = { 1, 2, 3, 4, 5, 6 };
    float out[6];
    kvs_key_t k = IK(1);
    kvs_array_t a = ARR(v, KVS_FLOAT32, 2, 2, 3);
    kvs_array_t o = ARR(out, KVS_FLOAT32, 2, 2, 3);
    (void)state;
    for (int d = 2; d < KVS_MAX_NDIM; d++) {
        a.shape[d] = -7; /* beyond ndim: ignored, even when invalid */
        o.shape[d] = 99;
    }
    OK(kvs_init(kv, 1, &k, &a));
    OK(kvs_push(kv, 1, &k, &a, 0));
    memset(out, SENTINEL, sizeof out);
    OK(kvs_pull(kv, 1, &k, &o, 0));
    EXPECT_F32(out, v, 6);
    kvs_close(kv);
}

/* ---- init and reinit -------------------------------------------------- */

static void test_init_copies_source(void **state)
{
    kvs_t *kv = new_store("local");
    float src[6] = { 1, 2, 3, 4, 5, 6 };
    const float keep[6] = { 1, 2, 3, 4, 5, 6 };
    float out[6];
    kvs_key_t k = IK(3);
    (void)state;
    OK(kvs_init(kv, 1, &k, (kvs_array_t[]){ ARR(src, KVS_FLOAT32, 2, 2, 3) }));
    for (int i = 0; i < 6; i++)
        src[i] = -100;
    PULL_F32(kv, k, out, 2, 2, 3);
    EXPECT_F32(out, keep, 6);

    /* push copies too: changing the source after the call changes nothing. */
    for (int i = 0; i < 6; i++)
        src[i] = (float)(i * 10);
    OK(kvs_push(kv, 1, &k, (kvs_array_t[]){ ARR(src, KVS_FLOAT32, 2, 2, 3) }, 0));
    for (int i = 0; i < 6; i++)
        src[i] = 555;
    PULL_F32(kv, k, out, 2, 2, 3);
    EXPECT_F32(out, ((const float[]){ 0, 10, 20, 30, 40, 50 }), 6);
    kvs_close(kv);
}

static void test_init_duplicate_key(void **state)
{
    kvs_t *kv = *state;
    const float other[6] = { 9, 9, 9, 9, 9, 9 };
    const float f4[4] = { 0 };
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(3) },
                             (kvs_array_t[]){ ARR(other, KVS_FLOAT32, 2, 2, 3) }),
                KVS_EKEYEXISTS, "3");
    /* also with another shape and dtype */
    EXPECT_FAIL(kv, kvs_init(kv, 1, (kvs_key_t[]){ IK(7) },
                             (kvs_array_t[]){ ARR(other, KVS_FLOAT32, 1, 6) }),
                KVS_EKEYEXISTS, "7");
    /* a new key before an existing one: the new key is not initialised */
    EXPECT_FAIL(kv, kvs_init(kv, 2, (kvs_key_t[]){ IK(20), IK(5) },
                             (kvs_array_t[]){ ARR(f4, KVS_FLOAT32, 1, 4),
                                              ARR(f4, KVS_FLOAT32, 1, 4) }),
                KVS_EKEYEXISTS, "5");
    EXPECT_FAIL(kv, kvs_pull(kv, 1, (kvs_key_t[]){ IK(20) },
                             (kvs_array_t[]){ ARR((float[4]){ 0 }, KVS_FLOAT32, 1, 4) }, 0),
                KVS_ENOKEY, "20");
}

static void test_init_duplicate_in_list(void **state)
{
    kvs_t *kv = *state;
    const float a[4] = { 1, 1, 1, 1 }, b[4] = { 2, 2, 2, 2 };
    float out[4];
    EXPECT_FAIL(kv, kvs_init(kv, 3, (kvs_key_t[]){ IK(21), IK(22), IK(21) },
                             (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 4),
                                              ARR(b, KVS_FLOAT32, 1, 4),
                                              ARR(b, KVS_FLOAT32, 1, 4) }),
                KVS_EKEYEXISTS, "21");
    for (int k = 21; k <= 22; k++) {
        memset(out, SENTINEL, sizeof out);
        EXPECT_FAIL(kv, kvs_pull(kv, 1, (kvs_key_t[]){ IK(k) },
                                 (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 4) }, 0),
                    KVS_ENOKEY, NULL);
        EXPECT_UNTOUCHED(out, sizeof out);
    }
    /* both can then be initialised */
    OK(kvs_init(kv, 2, (kvs_key_t[]){ IK(21), IK(22) },
                (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 1, 4), ARR(b, KVS_FLOAT32, 1, 4) }));
    PULL_F32(kv, IK(21), out, 1, 4);
    EXPECT_F32(out, a, 4);
    PULL_F32(kv, IK(22), out, 1, 4);
    EXPECT_F32(out, b, 4);
    FX_UNCHANGED(kv);
}

static void test_init_string_keys_by_content(void **state)
{
    kvs_t *kv = new_store("local");
    char name[16], other[16];
    const float v[2] = { 1, 2 }, p[2] = { 10, 20 };
    float out[2];
    (void)state;
    snprintf(name, sizeof name, "w0");
    OK(kvs_init(kv, 1, (kvs_key_t[]){ SK(name) }, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 2) }));
    /* The store keeps its own copy of the name. */
    snprintf(name, sizeof name, "zz");
    snprintf(other, sizeof other, "w0");
    OK(kvs_push(kv, 1, (kvs_key_t[]){ SK(other) }, (kvs_array_t[]){ ARR(p, KVS_FLOAT32, 1, 2) },
                0));
    PULL_F32(kv, SK("w0"), out, 1, 2);
    EXPECT_F32(out, p, 2);
    memset(out, SENTINEL, sizeof out);
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ SK("zz") },
                       (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 2) }, 0),
              KVS_ENOKEY);
    EXPECT_DETAIL(kv, "zz");
    EXPECT_UNTOUCHED(out, sizeof out);
    /* Names differing only after a common prefix are different keys. */
    OK(kvs_init(kv, 2, (kvs_key_t[]){ SK("w"), SK("w00") },
                (kvs_array_t[]){ ARR(p, KVS_FLOAT32, 1, 2), ARR(v, KVS_FLOAT32, 1, 2) }));
    PULL_F32(kv, SK("w"), out, 1, 2);
    EXPECT_F32(out, p, 2);
    PULL_F32(kv, SK("w00"), out, 1, 2);
    EXPECT_F32(out, v, 2);
    PULL_F32(kv, SK("w0"), out, 1, 2);
    EXPECT_F32(out, p, 2);
    /* The empty string is a key like any other. */
    OK(kvs_init(kv, 1, (kvs_key_t[]){ SK("") }, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 2) }));
    PULL_F32(kv, SK(""), out, 1, 2);
    EXPECT_F32(out, v, 2);
    kvs_close(kv);
}

static void test_int_key_full_range(void **state)
{
    kvs_t *kv = new_store("local");
    const int64_t ids[6] = { 0, -1, 1, (int64_t)1 << 40, INT64_MAX, INT64_MIN };
    float vals[6], out;
    kvs_key_t keys[6];
    kvs_array_t arrs[6];
    (void)state;
    for (int i = 0; i < 6; i++) {
        vals[i] = (float)(i + 1);
        keys[i] = IK(ids[i]);
        arrs[i] = ARR(&vals[i], KVS_FLOAT32, 0, 0);
    }
    OK(kvs_init(kv, 6, keys, arrs));
    for (int i = 0; i < 6; i++) {
        out = -1;
        OK(kvs_pull(kv, 1, &keys[i], (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) }, 0));
        if (out != vals[i])
            fail_msg("key %lld: got %g want %g", (long long)ids[i], (double)out,
                     (double)vals[i]);
    }
    /* ids differing in high bits are distinct keys */
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ IK(((int64_t)1 << 40) + 1) },
                       (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) }, 0),
              KVS_ENOKEY);
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ IK(((int64_t)1 << 32)) },
                       (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) }, 0),
              KVS_ENOKEY);
    kvs_close(kv);
}

static void test_reinit(void **state)
{
    kvs_t *kv = *state;
    const int64_t nv[3] = { 100, 200, 300 };
    const double d[2] = { 0.25, 0.5 };
    int64_t out[3];
    double dout[2];
    float f[6];

    /* key 3 was float32 (2,3): it becomes int64 (3) */
    OK(kvs_reinit(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(nv, KVS_INT64, 1, 3) }));
    EXPECT_PULLED(kv, IK(3), ARR(out, KVS_INT64, 1, 3), nv, 3);
    memset(f, SENTINEL, sizeof f);
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ IK(3) },
                       (kvs_array_t[]){ ARR(f, KVS_FLOAT32, 2, 2, 3) }, 0),
              KVS_EDTYPE);
    EXPECT_UNTOUCHED(f, sizeof f);
    /* pushes now follow the new dtype and shape */
    OK(kvs_push(kv, 2, (kvs_key_t[]){ IK(3), IK(3) },
                (kvs_array_t[]){ ARR(nv, KVS_INT64, 1, 3), ARR(nv, KVS_INT64, 1, 3) }, 0));
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(out, KVS_INT64, 1, 3) }, 0));
    EXPECT_INTS(out, ((const int64_t[]){ 200, 400, 600 }), 3, KVS_INT64);

    /* reinit of a key not yet there initialises it; with an existing one */
    OK(kvs_reinit(kv, 2, (kvs_key_t[]){ IK(30), IK(3) },
                  (kvs_array_t[]){ ARR(d, KVS_FLOAT64, 2, 1, 2),
                                   ARR(FX3, KVS_FLOAT32, 2, 2, 3) }));
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ IK(30) }, (kvs_array_t[]){ ARR(dout, KVS_FLOAT64, 2, 1, 2) },
                0));
    EXPECT_F64(dout, d, 2);
    FX_UNCHANGED(kv);

    /* a key twice in the list: KVS_EKEYEXISTS, nothing replaced or made */
    EXPECT_FAIL(kv, kvs_reinit(kv, 3, (kvs_key_t[]){ IK(31), IK(5), IK(5) },
                               (kvs_array_t[]){ ARR(d, KVS_FLOAT64, 1, 2),
                                                ARR(d, KVS_FLOAT64, 1, 2),
                                                ARR(d, KVS_FLOAT64, 1, 2) }),
                KVS_EKEYEXISTS, "5");
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ IK(31) },
                       (kvs_array_t[]){ ARR(dout, KVS_FLOAT64, 1, 2) }, 0),
              KVS_ENOKEY);
    /* reinit validates arrays like init */
    EXPECT_FAIL(kv, kvs_reinit(kv, 1, (kvs_key_t[]){ IK(5) },
                               (kvs_array_t[]){ ARR(NULL, KVS_FLOAT32, 1, 4) }),
                KVS_EBADARG, NULL);
    EXPECT_FAIL(kv, kvs_reinit(kv, 1, (kvs_key_t[]){ SK("s") },
                               (kvs_array_t[]){ ARR(d, KVS_FLOAT64, 1, 2) }),
                KVS_EKEYKIND, NULL);
}

static void test_string_key_length_limit(void **state)
{
    kvs_t *kv = new_store("local");
    char max[KVS_MAX_KEY_LEN + 1], over[KVS_MAX_KEY_LEN + 2];
    const float v = 1.5f;
    float out = 0;
    (void)state;
    memset(max, 'k', KVS_MAX_KEY_LEN);
    max[KVS_MAX_KEY_LEN] = '\0';
    memset(over, 'k', KVS_MAX_KEY_LEN + 1);
    over[KVS_MAX_KEY_LEN + 1] = '\0';

    OK(kvs_init(kv, 1, (kvs_key_t[]){ SK(max) }, (kvs_array_t[]){ ARR(&v, KVS_FLOAT32, 0, 0) }));
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ SK(max) }, (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) },
                0));
    assert_true(out == 1.5f);

    EXPECT_RC(kvs_init(kv, 1, (kvs_key_t[]){ SK(over) },
                       (kvs_array_t[]){ ARR(&v, KVS_FLOAT32, 0, 0) }),
              KVS_EBADARG);
    EXPECT_DETAIL(kv, NULL);
    EXPECT_RC(kvs_push(kv, 1, (kvs_key_t[]){ SK(over) },
                       (kvs_array_t[]){ ARR(&v, KVS_FLOAT32, 0, 0) }, 0),
              KVS_EBADARG);
    out = 0;
    EXPECT_RC(kvs_pull(kv, 1, (kvs_key_t[]){ SK(over) },
                       (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) }, 0),
              KVS_EBADARG);
    assert_true(out == 0);
    /* the too-long key was not stored under a truncated name either */
    OK(kvs_pull(kv, 1, (kvs_key_t[]){ SK(max) }, (kvs_array_t[]){ ARR(&out, KVS_FLOAT32, 0, 0) },
                0));
    assert_true(out == 1.5f);
    kvs_close(kv);
}

/* ---- main ------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_strerror_every_kvs_code),
        cmocka_unit_test(test_strerror_errno_and_unknown),
        cmocka_unit_test(test_dtype_size_and_name),
        cmocka_unit_test(test_create_local_types),
        cmocka_unit_test(test_create_unknown_type),
        cmocka_unit_test(test_create_null_args),
        cmocka_unit_test(test_create_bad_timeout_env),
        cmocka_unit_test(test_create_later_types_are_known),
        cmocka_unit_test(test_null_handle_calls),
        cmocka_unit_test(test_dtype_float32),
        cmocka_unit_test(test_dtype_float64),
        cmocka_unit_test(test_dtype_float16_sum_rounded_once),
        cmocka_unit_test(test_dtype_bfloat16_sum_rounded_once),
        cmocka_unit_test(test_dtype_int32_wraps),
        cmocka_unit_test(test_dtype_int64_wraps),
        cmocka_unit_test(test_dtype_uint8_wraps),
        cmocka_unit_test(test_scalar_empty_and_eight_dims),
        cmocka_unit_test(test_unused_extents_ignored),
        cmocka_unit_test(test_init_copies_source),
        FX(test_init_duplicate_key),
        FX(test_init_duplicate_in_list),
        cmocka_unit_test(test_init_string_keys_by_content),
        cmocka_unit_test(test_int_key_full_range),
        FX(test_reinit),
        cmocka_unit_test(test_string_key_length_limit),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
