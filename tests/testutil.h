/*
 * testutil.h - helpers shared by the tests that use kvs only through its
 * public header (test_api.c, test_api_pushpull.c, test_api_update.c,
 * test_api_states.c, test_mxnet.c, test_mxnet_docs.c, test_threads.c,
 * test_buffers.c): array views, key shorthands, checked return codes,
 * store creation, fills, element checks, the fixture store with known
 * contents, two small updaters and a private scratch directory.
 *
 * It must include nothing but kvs.h, the C library and cmocka:
 * tests/test_install.sh builds test_api.c, test_api_pushpull.c,
 * test_api_update.c, test_api_states.c, test_mxnet.c, test_mxnet_docs.c
 * and test_buffers.c beside a copy of this file, against the installed
 * kvs.h alone. Everything here is static inline, so that a test that does
 * not use a helper does not warn. The checks end the test through cmocka,
 * so they belong on the main thread, as cmocka's own asserts do.
 */
#ifndef KVS_TESTUTIL_H
#define KVS_TESTUTIL_H

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvs.h"

/* A host array over p; the extents follow ndim. */
#define ARR(p, dt, nd, ...)                                                   \
    ((kvs_array_t){ .data = (void *)(p), .dtype = (dt), .ndim = (nd),       \
                    .shape = { __VA_ARGS__ }, .device = KVS_HOST })
#define IK(i) KVS_INT_KEY(i)
#define SK(s) KVS_STR_KEY(s)

/* CASE(f): a test case with a deadline of its own, 60 s (KVS_TEST_SLOW
 * times longer): a case that hangs is killed by SIGALRM, and the file's
 * run reports it, instead of waiting for the whole file's deadline. */
static inline int testutil_arm(void **state)
{
    const char *slow = getenv("KVS_TEST_SLOW");
    int s = slow ? atoi(slow) : 1;

    (void)state;
    alarm((unsigned)(60 * (s > 0 ? s : 1)));
    return 0;
}

static inline int testutil_disarm(void **state)
{
    (void)state;
    alarm(0);
    return 0;
}

#define CASE(f) cmocka_unit_test_setup_teardown(f, testutil_arm, testutil_disarm)

/* rc must be want; the message names the call's line and both codes. */
static inline void expect_rc_at(int rc, int want, const char *what, int line)
{
    if (rc != want)
        fail_msg("line %d: %s returned %d (%s), want %d (%s)", line, what, rc,
                 kvs_err_name(rc), want, kvs_err_name(want));
}
#define EXPECT_RC(call, want) expect_rc_at((call), (want), #call, __LINE__)
#define OK(call) expect_rc_at((call), 0, #call, __LINE__)

/* A new store of the given type, or the test fails. */
static inline kvs_t *new_store(const char *type)
{
    kvs_t *kv = NULL;
    int rc = kvs_create(type, &kv);
    if (rc != 0)
        fail_msg("kvs_create(\"%s\") = %d (%s)", type, rc, kvs_err_name(rc));
    assert_non_null(kv);
    return kv;
}

static inline void fill_f32(float *a, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        a[i] = v;
}

static inline void expect_all_f32_at(const float *a, size_t n, float x, int line)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != x)
            fail_msg("line %d: element %zu is %.9g, want %.9g", line, i, (double)a[i],
                     (double)x);
}
/* Every one of the n elements of a equals x (MXNet's check_diff_to_scalar). */
#define EXPECT_ALL_F32(a, n, x) expect_all_f32_at((a), (n), (x), __LINE__)

/* Outs are filled with this before a call, to show what it did not write. */
#define SENTINEL 0xA5

static inline void expect_last_error_at(const kvs_t *kv, const char *needle, int line)
{
    const char *m = kvs_last_error(kv);
    if (m == NULL)
        fail_msg("line %d: kvs_last_error returned NULL", line);
    if (m[0] == '\0')
        fail_msg("line %d: kvs_last_error is empty after a failed call", line);
    if (needle != NULL && strstr(m, needle) == NULL)
        fail_msg("line %d: kvs_last_error \"%s\" does not mention \"%s\"", line, m, needle);
}
/* The last failure's detail is non-empty and, when needle is not NULL,
 * contains it. */
#define EXPECT_DETAIL(kv, needle) expect_last_error_at((kv), (needle), __LINE__)

static inline void expect_f32_at(const float *got, const float *want, size_t n, int line)
{
    for (size_t i = 0; i < n; i++)
        if (!(got[i] == want[i]) && memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("line %d: element %zu: got %.9g, want %.9g", line, i, (double)got[i],
                     (double)want[i]);
}
#define EXPECT_F32(got, want, n) expect_f32_at((got), (want), (n), __LINE__)

static inline void expect_f64_at(const double *got, const double *want, size_t n, int line)
{
    for (size_t i = 0; i < n; i++)
        if (!(got[i] == want[i]))
            fail_msg("line %d: element %zu: got %.17g, want %.17g", line, i, got[i], want[i]);
}
#define EXPECT_F64(got, want, n) expect_f64_at((got), (want), (n), __LINE__)

static inline void expect_i64_at(const void *got, const void *want, size_t n, kvs_dtype_t dt,
                                 int line)
{
    for (size_t i = 0; i < n; i++) {
        long long g = 0, w = 0;
        switch (dt) {
        case KVS_INT32:
            g = ((const int32_t *)got)[i];
            w = ((const int32_t *)want)[i];
            break;
        case KVS_INT64:
            g = ((const int64_t *)got)[i];
            w = ((const int64_t *)want)[i];
            break;
        case KVS_UINT8:
            g = ((const uint8_t *)got)[i];
            w = ((const uint8_t *)want)[i];
            break;
        case KVS_FLOAT16:
        case KVS_BFLOAT16:
            g = ((const uint16_t *)got)[i];
            w = ((const uint16_t *)want)[i];
            break;
        default:
            fail_msg("line %d: bad dtype in test", line);
        }
        if (g != w)
            fail_msg("line %d: element %zu: got %lld (0x%llx), want %lld (0x%llx)", line, i, g,
                     (unsigned long long)g, w, (unsigned long long)w);
    }
}
/* Integer and raw half-precision elements, compared one by one. */
#define EXPECT_INTS(got, want, n, dt) expect_i64_at((got), (want), (n), (dt), __LINE__)

static inline void expect_bytes_at(const void *p, int byte, size_t n, int line)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)byte)
            fail_msg("line %d: byte %zu of an out was written (0x%02x) by a failed call", line,
                     i, b[i]);
}
/* The buffer still holds the sentinel: nothing wrote to it. */
#define EXPECT_UNTOUCHED(p, n) expect_bytes_at((p), SENTINEL, (n), __LINE__)

static inline void expect_pulled_at(kvs_t *kv, kvs_key_t key, kvs_array_t out,
                                    const void *want, size_t n, int line)
{
    char what[64];
    size_t count = 1;

    for (int d = 0; d < out.ndim; d++)
        count *= (size_t)out.shape[d];
    memset(out.data, SENTINEL, count * kvs_dtype_size(out.dtype));
    if (key.name != NULL)
        snprintf(what, sizeof what, "pull of key \"%s\"", key.name);
    else
        snprintf(what, sizeof what, "pull of key %lld", (long long)key.id);
    expect_rc_at(kvs_pull(kv, 1, &key, &out, 0), 0, what, line);
    switch (out.dtype) {
    case KVS_FLOAT32:
        expect_f32_at(out.data, want, n, line);
        break;
    case KVS_FLOAT64:
        expect_f64_at(out.data, want, n, line);
        break;
    default:
        expect_i64_at(out.data, want, n, out.dtype, line);
        break;
    }
}
/* Pulls key into the host array out, filled with SENTINEL first, and
 * checks its first n elements against want, compared as EXPECT_F32,
 * EXPECT_F64 or EXPECT_INTS would for out's dtype. */
#define EXPECT_PULLED(kv, key, out, want, n)                                  \
    expect_pulled_at((kv), (key), (out), (want), (n), __LINE__)

/* ---- a store with known contents ------------------------------------- */
/*
 * Keys of the fixture store: 3 float32 (2,3), 5 float32 (4), 7 int32 (2,2),
 * 9 float64 scalar. Error-path tests check after every failing call that
 * each of them still holds exactly this.
 */
static const float FX3[6] = { 1, 2, 3, 4, 5, 6 };
static const float FX5[4] = { 10, 20, 30, 40 };
static const int32_t FX7[4] = { -1, -2, -3, -4 };
static const double FX9[1] = { 3.5 };

static inline void fx_fill(kvs_t *kv)
{
    kvs_key_t keys[4] = { IK(3), IK(5), IK(7), IK(9) };
    kvs_array_t vals[4] = {
        ARR(FX3, KVS_FLOAT32, 2, 2, 3),
        ARR(FX5, KVS_FLOAT32, 1, 4),
        ARR(FX7, KVS_INT32, 2, 2, 2),
        ARR(FX9, KVS_FLOAT64, 0, 0),
    };
    OK(kvs_init(kv, 4, keys, vals));
}

static inline int fx_setup(void **state)
{
    kvs_t *kv = NULL;
    if (kvs_create("local", &kv) != 0)
        return -1;
    *state = kv;
    fx_fill(kv);
    return 0;
}

static inline int fx_teardown(void **state)
{
    kvs_close(*state);
    return 0;
}

static inline void fx_unchanged_at(kvs_t *kv, int line)
{
    float k3[6], k5[4];
    int32_t k7[4];
    double k9[1];

    expect_pulled_at(kv, IK(3), ARR(k3, KVS_FLOAT32, 2, 2, 3), FX3, 6, line);
    expect_pulled_at(kv, IK(5), ARR(k5, KVS_FLOAT32, 1, 4), FX5, 4, line);
    expect_pulled_at(kv, IK(7), ARR(k7, KVS_INT32, 2, 2, 2), FX7, 4, line);
    expect_pulled_at(kv, IK(9), ARR(k9, KVS_FLOAT64, 0, 0), FX9, 1, line);
}
/* Every key of the fixture holds its initial value. */
#define FX_UNCHANGED(kv) fx_unchanged_at((kv), __LINE__)

/* A test run on a fresh fixture store, passed in *state. */
#define FX(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

/* A failing call: its code, a detail naming needle (NULL: any), and the
 * fixture store untouched. */
#define EXPECT_FAIL(kv, call, want, needle)                                   \
    do {                                                                      \
        expect_rc_at((call), (want), #call, __LINE__);                        \
        expect_last_error_at((kv), (needle), __LINE__);                       \
        fx_unchanged_at((kv), __LINE__);                                      \
    } while (0)

/* Pulls one float32 key of n elements (any shape given by out's caller). */
static inline void pull_f32_at(kvs_t *kv, kvs_key_t key, float *buf, int ndim,
                               const int64_t *shape, int line)
{
    kvs_array_t out = { .data = buf, .dtype = KVS_FLOAT32, .ndim = ndim, .device = KVS_HOST };
    for (int d = 0; d < ndim; d++)
        out.shape[d] = shape[d];
    expect_rc_at(kvs_pull(kv, 1, &key, &out, 0), 0, "kvs_pull", line);
}
#define PULL_F32(kv, key, buf, ndim, ...)                                     \
    pull_f32_at((kv), (key), (buf), (ndim), (const int64_t[]){ __VA_ARGS__ }, __LINE__)

/* Updaters: count_calls only counts in *(int *)ctx; add_f32 adds a float32
 * input to the stored value and counts in ctx when it is not NULL. */
static inline int count_calls(kvs_key_t key, const kvs_array_t *in, kvs_array_t *st, void *ctx)
{
    (void)key;
    (void)in;
    (void)st;
    ++*(int *)ctx;
    return 0;
}

static inline int add_f32(kvs_key_t key, const kvs_array_t *in, kvs_array_t *st, void *ctx)
{
    size_t n = 1;
    (void)key;
    for (int d = 0; d < st->ndim; d++)
        n *= (size_t)st->shape[d];
    for (size_t i = 0; i < n; i++)
        ((float *)st->data)[i] += ((const float *)in->data)[i];
    if (ctx != NULL)
        ++*(int *)ctx;
    return 0;
}

/* ---- a scratch directory --------------------------------------------- */

/* A private scratch directory under $TMPDIR (/tmp when unset), for the
 * files a test writes; remove_tmpdir removes it with what it holds. */
static inline char *make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char *d;

    if (!base || !*base)
        base = "/tmp";
    d = malloc(strlen(base) + sizeof "/kvs_test_XXXXXX");
    assert_non_null(d);
    strcpy(d, base);
    strcat(d, "/kvs_test_XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static inline void remove_tmpdir(char *d)
{
    DIR *dir = opendir(d);
    if (dir != NULL) {
        struct dirent *ent;
        while ((ent = readdir(dir)) != NULL) {
            char p[4096];
            if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s", d, ent->d_name);
            unlink(p);
        }
        closedir(dir);
    }
    rmdir(d);
    free(d);
}

#endif
