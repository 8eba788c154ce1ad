/*
 * testutil.h - helpers shared by the tests that use kvs only through its
 * public header (test_api.c, test_mxnet.c, test_threads.c): array views,
 * key shorthands, checked return codes, store creation, fills and
 * element checks.
 *
 * It must include nothing but kvs.h, the C library and cmocka:
 * tests/test_install.sh builds test_api.c and test_mxnet.c beside a copy
 * of this file, against the installed kvs.h alone. Everything here is
 * static inline, so that a test that does not use a helper does not warn.
 * The checks end the test through cmocka, so they belong on the main
 * thread, as cmocka's own asserts do.
 */
#ifndef KVS_TESTUTIL_H
#define KVS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kvs.h"

/* A host array over p; the extents follow ndim. */
#define ARR(p, dt, nd, ...)                                                   \
    ((kvs_array_t){ .data = (void *)(p), .dtype = (dt), .ndim = (nd),       \
                    .shape = { __VA_ARGS__ }, .device = KVS_HOST })
#define IK(i) KVS_INT_KEY(i)
#define SK(s) KVS_STR_KEY(s)

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

#endif
