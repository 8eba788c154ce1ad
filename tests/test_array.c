/*
 * test_array.c - unit tests of array.c: dtype sizes and names, the checks
 * of caller arrays, shape text, and the sum, copy and float32 conversion
 * kernels for every dtype on one and several threads. The float16 and
 * bfloat16 conversions of one value and the x86 half kernels are tested
 * in test_half.c, the thread pool in test_pool.c.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kernels/array.h"
#include "device/mem.h"
#include "arrayutil.h"

static const kvs_dtype_t all_dtypes[] = { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16,
                                          KVS_BFLOAT16, KVS_INT32, KVS_INT64, KVS_UINT8 };
#define NDT (sizeof all_dtypes / sizeof all_dtypes[0])

/* ---- dtypes --------------------------------------------------------- */

static void test_dtype_size_name(void **state)
{
    (void)state;
    assert_int_equal(kvs_dtype_size(KVS_FLOAT32), 4);
    assert_int_equal(kvs_dtype_size(KVS_FLOAT64), 8);
    assert_int_equal(kvs_dtype_size(KVS_FLOAT16), 2);
    assert_int_equal(kvs_dtype_size(KVS_BFLOAT16), 2);
    assert_int_equal(kvs_dtype_size(KVS_INT32), 4);
    assert_int_equal(kvs_dtype_size(KVS_INT64), 8);
    assert_int_equal(kvs_dtype_size(KVS_UINT8), 1);
    assert_int_equal(kvs_dtype_size((kvs_dtype_t)7), 0);
    assert_int_equal(kvs_dtype_size((kvs_dtype_t)-1), 0);
    assert_int_equal(kvs_dtype_size((kvs_dtype_t)1000), 0);

    assert_string_equal(kvs_dtype_name(KVS_FLOAT32), "float32");
    assert_string_equal(kvs_dtype_name(KVS_FLOAT64), "float64");
    assert_string_equal(kvs_dtype_name(KVS_FLOAT16), "float16");
    assert_string_equal(kvs_dtype_name(KVS_BFLOAT16), "bfloat16");
    assert_string_equal(kvs_dtype_name(KVS_INT32), "int32");
    assert_string_equal(kvs_dtype_name(KVS_INT64), "int64");
    assert_string_equal(kvs_dtype_name(KVS_UINT8), "uint8");
    assert_string_equal(kvs_dtype_name((kvs_dtype_t)7), "invalid");
    assert_string_equal(kvs_dtype_name((kvs_dtype_t)-1), "invalid");

    assert_true(kvs__dtype_is_float(KVS_FLOAT32));
    assert_true(kvs__dtype_is_float(KVS_FLOAT64));
    assert_true(kvs__dtype_is_float(KVS_FLOAT16));
    assert_true(kvs__dtype_is_float(KVS_BFLOAT16));
    assert_false(kvs__dtype_is_float(KVS_INT32));
    assert_false(kvs__dtype_is_float(KVS_INT64));
    assert_false(kvs__dtype_is_float(KVS_UINT8));
    assert_false(kvs__dtype_is_float((kvs_dtype_t)9));
}

/* ---- array checks --------------------------------------------------- */

static kvs_array_t arr(kvs_dtype_t dt, void *data, int ndim, const int64_t *shape)
{
    kvs_array_t a = { .data = data, .dtype = dt, .ndim = ndim };

    for (int d = 0; d < ndim && d < KVS_MAX_NDIM; d++)
        a.shape[d] = shape[d];
    return a;
}

static void expect_fail(const kvs_array_t *a, const char *what, int code, const char *part)
{
    struct kvs__err e = { .code = 0 };

    int rc = kvs__array_check(a, what, &e);
    if (rc != code || e.code != code || strstr(e.msg, part) == NULL)
        fail_msg("expected %s with \"%s\", got %s (code %d) \"%s\"", kvs_err_name(code), part,
                 kvs_err_name(rc), e.code, e.msg);
    /* A NULL detail is allowed and still gives the code. */
    assert_int_equal(kvs__array_check(a, what, NULL), code);
}

static void expect_ok(const kvs_array_t *a)
{
    struct kvs__err e = { .code = 0, .msg = "" };

    int rc = kvs__array_check(a, "value 0", &e);
    if (rc != 0)
        fail_msg("expected success, got %s \"%s\"", kvs_err_name(rc), e.msg);
    assert_int_equal(e.code, 0);
    assert_string_equal(e.msg, "");
}

static void test_check_valid(void **state)
{
    float x[6] = { 0 };
    int64_t s23[] = { 2, 3 }, ones[KVS_MAX_NDIM] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    int64_t s0big[] = { 0, INT64_MAX }, sbig0[] = { INT64_MAX, INT64_MAX, 0 };
    int64_t smax[] = { INT64_MAX };
    kvs_array_t a;

    (void)state;
    a = arr(KVS_FLOAT32, x, 0, NULL);              /* a scalar */
    expect_ok(&a);
    a = arr(KVS_FLOAT32, x, 2, s23);
    expect_ok(&a);
    a = arr(KVS_UINT8, x, KVS_MAX_NDIM, ones);
    expect_ok(&a);
    /* Empty arrays may have NULL data, whatever their other extents. */
    a = arr(KVS_FLOAT64, NULL, 2, s0big);
    expect_ok(&a);
    a = arr(KVS_INT64, NULL, 3, sbig0);
    expect_ok(&a);
    /* INT64_MAX bytes still fit both int64 and size_t (never touched). */
    a = arr(KVS_UINT8, x, 1, smax);
    expect_ok(&a);
    /* Extents past ndim are not looked at. */
    a = arr(KVS_FLOAT32, x, 2, s23);
    a.shape[2] = -7;
    a.shape[7] = -1;
    expect_ok(&a);
    for (size_t i = 0; i < NDT; i++) {
        a = arr(all_dtypes[i], x, 1, (int64_t[]){ 1 });
        expect_ok(&a);
    }
}

static void test_check_errors(void **state)
{
    float x[6] = { 0 };
    int64_t s23[] = { 2, 3 };
    kvs_array_t a;

    (void)state;
    expect_fail(NULL, "value 2", KVS_EBADARG, "value 2: no array");

    a = arr((kvs_dtype_t)7, x, 2, s23);
    expect_fail(&a, "value 2", KVS_EDTYPE, "value 2: dtype 7 ");
    a = arr((kvs_dtype_t)-1, x, 2, s23);
    expect_fail(&a, "value 2", KVS_EDTYPE, "value 2: dtype -1 ");
    /* The dtype is checked first. */
    a = arr((kvs_dtype_t)42, x, 2, s23);
    a.ndim = -4;
    expect_fail(&a, "value 0", KVS_EDTYPE, "dtype 42");

    a = arr(KVS_FLOAT32, x, 2, s23);
    a.ndim = -1;
    expect_fail(&a, "value 2", KVS_EBADARG, "value 2: ndim -1");
    a.ndim = KVS_MAX_NDIM + 1;
    expect_fail(&a, "value 2", KVS_EBADARG, "value 2: ndim 9");

    a = arr(KVS_FLOAT32, x, 2, (int64_t[]){ -1, 3 });
    expect_fail(&a, "value 2", KVS_EBADARG, "value 2: extent -1 in dimension 0");
    a = arr(KVS_FLOAT32, x, 3, (int64_t[]){ 2, 0, -3 });
    expect_fail(&a, "out 1", KVS_EBADARG, "out 1: extent -3 in dimension 2");
    a = arr(KVS_FLOAT32, x, 1, (int64_t[]){ INT64_MIN });
    expect_fail(&a, "value 0", KVS_EBADARG, "extent -9223372036854775808 in dimension 0");

    /* Element count beyond int64. */
    a = arr(KVS_UINT8, x, 2, (int64_t[]){ INT64_MAX, 2 });
    expect_fail(&a, "value 3", KVS_EBADARG, "value 3: shape (9223372036854775807,2) has more");
    a = arr(KVS_UINT8, x, 2, (int64_t[]){ (int64_t)1 << 32, (int64_t)1 << 32 });
    expect_fail(&a, "value 3", KVS_EBADARG, "has more elements");
    /* Count fits, bytes do not. */
    a = arr(KVS_FLOAT32, x, 1, (int64_t[]){ (int64_t)1 << 62 });
    expect_fail(&a, "value 4", KVS_EBADARG, "value 4: shape (4611686018427387904) of float32");
    a = arr(KVS_FLOAT64, x, 1, (int64_t[]){ INT64_MAX / 8 + 1 });
    expect_fail(&a, "value 4", KVS_EBADARG, "more bytes");

    a = arr(KVS_FLOAT32, x, 2, s23);
    a.device = KVS_CUDA(0);
    expect_fail(&a, "value 2", KVS_EDEVICE, "value 2 is on KVS_CUDA(0): ");
    a.device = KVS_CUDA(3);
    expect_fail(&a, "value 2", KVS_EDEVICE, "value 2 is on KVS_CUDA(3): ");
    a.device = -1;
    expect_fail(&a, "value 2", KVS_EDEVICE, "value 2 is on device code -1");

    a = arr(KVS_FLOAT32, NULL, 2, s23);
    expect_fail(&a, "value 5", KVS_EBADARG, "value 5: data is NULL but shape (2,3) has 6");
    a = arr(KVS_INT32, NULL, 0, NULL);             /* a scalar has one element */
    expect_fail(&a, "value 5", KVS_EBADARG, "shape () has 1 elements");

    /* A missing name still gives a readable message. */
    a = arr(KVS_FLOAT32, NULL, 2, s23);
    expect_fail(&a, NULL, KVS_EBADARG, "array: data is NULL");
}

static void test_count_same_shape(void **state)
{
    kvs_array_t a = arr(KVS_FLOAT32, NULL, 3, (int64_t[]){ 2, 3, 4 });
    kvs_array_t b = arr(KVS_INT32, NULL, 3, (int64_t[]){ 2, 3, 4 });
    kvs_array_t s = arr(KVS_FLOAT32, NULL, 0, NULL);

    (void)state;
    assert_int_equal(kvs__array_count(&a), 24);
    assert_int_equal(kvs__array_count(&s), 1);
    b.shape[5] = 99;                               /* past ndim: ignored */
    assert_true(kvs__same_shape(&a, &b));
    b.shape[2] = 5;
    assert_false(kvs__same_shape(&a, &b));
    b = arr(KVS_FLOAT32, NULL, 2, (int64_t[]){ 2, 3 });
    assert_false(kvs__same_shape(&a, &b));
    assert_true(kvs__same_shape(&s, &s));
    a = arr(KVS_FLOAT32, NULL, 2, (int64_t[]){ 0, 1000 });
    assert_int_equal(kvs__array_count(&a), 0);
}

static void test_shape_str(void **state)
{
    char buf[256];
    int64_t big[KVS_MAX_NDIM];

    (void)state;
    kvs__shape_str(buf, sizeof buf, 2, (int64_t[]){ 2, 3 });
    assert_string_equal(buf, "(2,3)");
    kvs__shape_str(buf, sizeof buf, 0, NULL);
    assert_string_equal(buf, "()");
    kvs__shape_str(buf, sizeof buf, 1, (int64_t[]){ 5 });
    assert_string_equal(buf, "(5)");
    kvs__shape_str(buf, sizeof buf, 3, (int64_t[]){ 0, 7, 1 });
    assert_string_equal(buf, "(0,7,1)");
    for (int d = 0; d < KVS_MAX_NDIM; d++)
        big[d] = d % 2 ? INT64_MIN : INT64_MAX;
    kvs__shape_str(buf, sizeof buf, KVS_MAX_NDIM, big);
    assert_string_equal(buf, "(9223372036854775807,-9223372036854775808,"
                             "9223372036854775807,-9223372036854775808,"
                             "9223372036854775807,-9223372036854775808,"
                             "9223372036854775807,-9223372036854775808)");
    /* Truncated, always terminated. */
    kvs__shape_str(buf, 4, 2, (int64_t[]){ 12, 34 });
    assert_string_equal(buf, "(12");
    kvs__shape_str(buf, 1, 2, (int64_t[]){ 12, 34 });
    assert_string_equal(buf, "");
    buf[0] = 'x';
    kvs__shape_str(buf, 0, 2, (int64_t[]){ 12, 34 });
    assert_int_equal(buf[0], 'x');
    kvs__shape_str(buf, sizeof buf, KVS_MAX_NDIM + 1, big);
    assert_string_equal(buf, "(?)");
}

/* ---- sum ------------------------------------------------------------ */

static void fill_random(kvs_dtype_t dt, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        /* Values with fractions, so that the order of additions shows. */
        float f = (float)((int64_t)(rnd() % 200001) - 100000) / 1024.0f;

        switch (dt) {
        case KVS_FLOAT32: ((float *)p)[i] = f; break;
        case KVS_FLOAT64: ((double *)p)[i] = (double)f + (double)(rnd() % 1000) * 0x1p-40; break;
        case KVS_FLOAT16: ((uint16_t *)p)[i] = kvs__f32_to_f16(f / 64); break;
        case KVS_BFLOAT16: ((uint16_t *)p)[i] = kvs__f32_to_bf16(f); break;
        case KVS_INT32: ((uint32_t *)p)[i] = (uint32_t)rnd(); break;
        case KVS_INT64: ((uint64_t *)p)[i] = rnd(); break;
        case KVS_UINT8: ((uint8_t *)p)[i] = (uint8_t)rnd(); break;
        }
    }
}

/* The sum as the contract defines it, one element at a time. */
static void ref_sum(kvs_dtype_t dt, void *out, void *const *in, int k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case KVS_FLOAT32: {
            float s = ((float *)in[0])[i];
            for (int j = 1; j < k; j++)
                s += ((float *)in[j])[i];
            ((float *)out)[i] = s;
            break;
        }
        case KVS_FLOAT64: {
            double s = ((double *)in[0])[i];
            for (int j = 1; j < k; j++)
                s += ((double *)in[j])[i];
            ((double *)out)[i] = s;
            break;
        }
        case KVS_FLOAT16:
        case KVS_BFLOAT16: {
            float s = 0;
            for (int j = 0; j < k; j++) {
                uint16_t v = ((uint16_t *)in[j])[i];
                float f = dt == KVS_FLOAT16 ? kvs__f16_to_f32(v) : kvs__bf16_to_f32(v);
                s = j ? s + f : f;
            }
            ((uint16_t *)out)[i] = dt == KVS_FLOAT16 ? kvs__f32_to_f16(s) : kvs__f32_to_bf16(s);
            break;
        }
        case KVS_INT32: {
            uint32_t s = 0;
            for (int j = 0; j < k; j++)
                s += ((uint32_t *)in[j])[i];
            ((uint32_t *)out)[i] = s;
            break;
        }
        case KVS_INT64: {
            uint64_t s = 0;
            for (int j = 0; j < k; j++)
                s += ((uint64_t *)in[j])[i];
            ((uint64_t *)out)[i] = s;
            break;
        }
        case KVS_UINT8: {
            unsigned s = 0;
            for (int j = 0; j < k; j++)
                s += ((uint8_t *)in[j])[i];
            ((uint8_t *)out)[i] = (uint8_t)s;
            break;
        }
        }
    }
}

enum alias { ALIAS_NONE, ALIAS_FIRST, ALIAS_LAST, ALIAS_REPEATED, NALIAS };

/* One sum of k random inputs, with out aliased as asked, against ref_sum. */
static void check_sum(kvs_dtype_t dt, int k, size_t n, enum alias alias, int nthreads)
{
    size_t es = kvs_dtype_size(dt), bytes = n * es;
    void *buf[5], *expect = xmalloc(bytes), *out;
    const void *in[5];

    for (int j = 0; j < k; j++) {
        buf[j] = xmalloc(bytes);
        fill_random(dt, buf[j], n);
        in[j] = buf[j];
    }
    if (alias == ALIAS_REPEATED) {
        /* One buffer passed twice, and also the output. */
        in[3] = in[1];
    }
    ref_sum(dt, expect, (void *const *)in, k, n);
    switch (alias) {
    case ALIAS_FIRST: out = buf[0]; break;
    case ALIAS_LAST: out = buf[k - 1]; break;
    case ALIAS_REPEATED: out = buf[1]; break;
    default: out = xmalloc(bytes); break;
    }
    kvs__sum(dt, out, in, k, n, nthreads);
    if (memcmp(out, expect, bytes) != 0) {
        size_t i = 0;
        while (memcmp((char *)out + i * es, (char *)expect + i * es, es) == 0)
            i++;
        fail_msg("%s k=%d n=%zu alias=%d nthreads=%d: element %zu differs",
                 kvs_dtype_name(dt), k, n, (int)alias, nthreads, i);
    }
    if (alias == ALIAS_NONE)
        free(out);
    for (int j = 0; j < k; j++)
        free(buf[j]);
    free(expect);
}

static void test_sum_all_dtypes(void **state)
{
    /* Under one kernel chunk, exactly two, and two plus a tail. */
    static const size_t sizes[] = { 1, 7, 4096, 5003 };

    (void)state;
    for (size_t d = 0; d < NDT; d++)
        for (int k = 1; k <= 5; k++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int a = 0; a < NALIAS; a++) {
                    if (a == ALIAS_REPEATED && k < 4)
                        continue;
                    check_sum(all_dtypes[d], k, sizes[s], (enum alias)a, 0);
                }
}

static void test_sum_wraps(void **state)
{
    int32_t a32[] = { INT32_MAX, INT32_MIN, 2000000000, -5 };
    int32_t b32[] = { 1, -1, 2000000000, 5 };
    int32_t c32[] = { 0, 0, 2000000000, 0 };
    int32_t o32[4];
    const void *in32[] = { a32, b32, c32 };
    int64_t a64[] = { INT64_MAX, INT64_MIN }, b64[] = { 1, -1 }, o64[2];
    const void *in64[] = { a64, b64 };
    uint8_t a8[] = { 200, 255, 0 }, b8[] = { 100, 255, 1 }, o8[3];
    const void *in8[] = { a8, b8, a8, a8, a8 };

    (void)state;
    kvs__sum(KVS_INT32, o32, in32, 3, 4, 0);
    assert_int_equal(o32[0], INT32_MIN);
    assert_int_equal(o32[1], INT32_MAX);
    assert_int_equal(o32[2], (int32_t)(6000000000 - 4294967296));   /* 1705032704 */
    assert_int_equal(o32[3], 0);
    kvs__sum(KVS_INT32, a32, in32, 2, 4, 0);        /* in place */
    assert_int_equal(a32[0], INT32_MIN);
    assert_int_equal(a32[1], INT32_MAX);

    kvs__sum(KVS_INT64, o64, in64, 2, 2, 0);
    assert_true(o64[0] == INT64_MIN);
    assert_true(o64[1] == INT64_MAX);

    kvs__sum(KVS_UINT8, o8, in8, 2, 3, 0);
    assert_int_equal(o8[0], 44);                    /* 300 mod 256 */
    assert_int_equal(o8[1], 254);                   /* 510 mod 256 */
    assert_int_equal(o8[2], 1);
    kvs__sum(KVS_UINT8, o8, in8, 5, 3, 0);
    assert_int_equal(o8[0], (200 * 4 + 100) % 256);
    assert_int_equal(o8[1], (255 * 5) % 256);
}

static void test_sum_half_rounds_once(void **state)
{
    uint16_t a[] = { 0x6800, 0x6800, 0x6800 };      /* 2048 */
    uint16_t b[] = { 0x3c00, 0x3c00, 0x3c00 };      /* 1 */
    uint16_t c[] = { 0x3c00, 0x0000, 0x4000 };      /* 1, 0, 2 */
    uint16_t out[3];
    const void *in[] = { a, b, c };
    uint16_t ba[] = { 0x4380 }, bb[] = { 0x3f80 }, bo[1];   /* bf16 256, 1 */
    const void *bin[] = { ba, bb, bb };

    (void)state;
    /* Rounding after each add would give 2048 + 1 -> 2048 (tie, even), twice. */
    assert_int_equal(kvs__f32_to_f16(kvs__f16_to_f32(0x6800) + 1.0f), 0x6800);
    kvs__sum(KVS_FLOAT16, out, in, 3, 3, 0);
    assert_int_equal(out[0], 0x6801);               /* 2050 exactly */
    assert_int_equal(out[1], 0x6800);               /* 2049: tie, to even 2048 */
    assert_int_equal(out[2], 0x6802);               /* 2051: tie, to even 2052 */
    kvs__sum(KVS_FLOAT16, a, in, 3, 3, 0);          /* in place gives the same */
    assert_int_equal(a[0], 0x6801);
    assert_int_equal(a[1], 0x6800);
    assert_int_equal(a[2], 0x6802);

    kvs__sum(KVS_BFLOAT16, bo, bin, 3, 1, 0);
    assert_int_equal(bo[0], 0x4381);                /* 258; pairwise would give 256 */
    kvs__sum(KVS_BFLOAT16, bo, bin, 2, 1, 0);
    assert_int_equal(bo[0], 0x4380);                /* 257: tie, to even 256 */

    /* Overflow in half gives infinity; float32 accumulation does not
     * overflow on the way. */
    uint16_t big[] = { 0x7bff }, nbig[] = { 0xfbff };
    const void *in3[] = { big, big, nbig };
    kvs__sum(KVS_FLOAT16, out, in3, 3, 1, 0);
    assert_int_equal(out[0], 0x7bff);
    kvs__sum(KVS_FLOAT16, out, in3, 2, 1, 0);
    assert_int_equal(out[0], 0x7c00);
}

static void test_sum_big(void **state)
{
    const size_t n = 5000000;
    float *a = xmalloc(n * sizeof *a), *b = xmalloc(n * sizeof *b);
    float *c = xmalloc(n * sizeof *c), *out = xmalloc(n * sizeof *out);
    const void *in[] = { a, b, c };
    static const int threads[] = { 1, 0, 3, 8 };

    (void)state;
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i % 1000) * 0.001f;
        b[i] = (float)(rnd() % 100000) / 7.0f;
        c[i] = -(float)(i % 977) / 3.0f;
    }
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        memset(out, 0xff, n * sizeof *out);
        kvs__sum(KVS_FLOAT32, out, in, 3, n, threads[t]);
        for (size_t i = 0; i < n; i++)
            if (fbits(out[i]) != fbits((a[i] + b[i]) + c[i]))
                fail_msg("nthreads %d: element %zu is %a, expected %a", threads[t], i,
                         (double)out[i], (double)((a[i] + b[i]) + c[i]));
    }
    /* In place, on several threads. */
    memcpy(out, a, n * sizeof *a);
    in[0] = out;
    kvs__sum(KVS_FLOAT32, out, in, 3, n, 0);
    for (size_t i = 0; i < n; i++)
        if (fbits(out[i]) != fbits((a[i] + b[i]) + c[i]))
            fail_msg("in place: element %zu differs", i);
    free(a);
    free(b);
    free(c);
    free(out);

    /* The other kernels through the pool too. */
    check_sum(KVS_FLOAT16, 3, 3000001, ALIAS_NONE, 0);
    check_sum(KVS_BFLOAT16, 2, 1000003, ALIAS_LAST, 0);
    check_sum(KVS_FLOAT64, 4, 1000001, ALIAS_REPEATED, 4);
    check_sum(KVS_UINT8, 5, 4000000, ALIAS_FIRST, 0);
    check_sum(KVS_INT32, 2, 1000000, ALIAS_NONE, 2);
}

static void test_sum_degenerate(void **state)
{
    float a[3] = { 1, 2, 3 }, out[3] = { 7, 7, 7 };
    const void *in[] = { a };

    (void)state;
    kvs__sum(KVS_FLOAT32, out, in, 1, 0, 0);        /* n 0: nothing written */
    assert_true(out[0] == 7.0f);
    kvs__sum(KVS_FLOAT32, out, in, 1, 3, 0);        /* k 1: a copy */
    assert_memory_equal(out, a, sizeof a);
    kvs__sum(KVS_FLOAT32, a, in, 1, 3, 0);          /* k 1 onto itself */
    assert_true(a[2] == 3.0f);
    kvs__sum(KVS_FLOAT32, out, in, 0, 3, 0);        /* the empty sum */
    assert_true(out[0] == 0.0f && out[2] == 0.0f);
    kvs__sum((kvs_dtype_t)9, out, in, 1, 3, 0);     /* unknown dtype: untouched */
    assert_true(out[0] == 0.0f);
}

/* ---- copy and conversion -------------------------------------------- */

static void test_copy(void **state)
{
    const size_t big = 12 * 1024 * 1024 + 13;
    uint8_t *src = xmalloc(big), *dst = xmalloc(big);
    static const int threads[] = { 0, 1, 5 };
    char small[100], sdst[100];

    (void)state;
    for (size_t i = 0; i < big; i++)
        src[i] = (uint8_t)(i * 31 + (i >> 12));
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        memset(dst, 0, big);
        kvs__copy(dst, src, big, threads[t]);
        assert_memory_equal(dst, src, big);
        /* An odd offset and length. */
        memset(dst, 0, big);
        kvs__copy(dst + 3, src + 5, big - 8, threads[t]);
        assert_memory_equal(dst + 3, src + 5, big - 8);
        assert_int_equal(dst[0], 0);
        assert_int_equal(dst[big - 2], 0);
    }
    for (size_t i = 0; i < sizeof small; i++)
        small[i] = (char)i;
    memset(sdst, 0, sizeof sdst);
    kvs__copy(sdst, small, sizeof small, 0);
    assert_memory_equal(sdst, small, sizeof small);
    kvs__copy(sdst, small, 0, 0);                   /* nothing, pointers unused */
    kvs__copy(NULL, NULL, 0, 0);
    kvs__copy(small, small, sizeof small, 0);       /* onto itself */
    assert_memory_equal(sdst, small, sizeof small);
    free(src);
    free(dst);
}

static void test_f32_round_trip(void **state)
{
    enum { N = 0x10000 };
    float *f = xmalloc(N * sizeof *f), *back = xmalloc(N * sizeof *back);
    uint16_t *h = xmalloc(N * sizeof *h), *h2 = xmalloc(N * sizeof *h2);
    double *d = xmalloc(N * sizeof *d);

    (void)state;
    for (int i = 0; i < N; i++)
        f[i] = (float)(rnd() % 2000001) / 1000.0f - 1000.0f;
    kvs__to_f32(KVS_FLOAT32, back, f, N);
    assert_memory_equal(back, f, N * sizeof *f);
    kvs__from_f32(KVS_FLOAT32, back, f, N);
    assert_memory_equal(back, f, N * sizeof *f);

    kvs__from_f32(KVS_FLOAT64, d, f, N);
    for (int i = 0; i < N; i++)
        assert_true(d[i] == (double)f[i]);
    kvs__to_f32(KVS_FLOAT64, back, d, N);
    assert_memory_equal(back, f, N * sizeof *f);
    d[0] = 0.1;
    d[1] = 1e300;
    kvs__to_f32(KVS_FLOAT64, back, d, 2);
    assert_true(back[0] == 0.1f);
    assert_true(isinf(back[1]));

    /* Every non-NaN half and bfloat16 through float32 and back. */
    for (int dt = 0; dt < 2; dt++) {
        kvs_dtype_t t = dt ? KVS_BFLOAT16 : KVS_FLOAT16;
        size_t m = 0;

        for (uint32_t i = 0; i < N; i++) {
            int nan = dt ? ((i & 0x7f80) == 0x7f80 && (i & 0x7f))
                         : ((i & 0x7c00) == 0x7c00 && (i & 0x3ff));
            if (!nan)
                h[m++] = (uint16_t)i;
        }
        kvs__to_f32(t, back, h, m);
        for (size_t i = 0; i < m; i++) {
            float want = dt ? kvs__bf16_to_f32(h[i]) : kvs__f16_to_f32(h[i]);
            assert_int_equal(fbits(back[i]), fbits(want));
        }
        kvs__from_f32(t, h2, back, m);
        assert_memory_equal(h2, h, m * sizeof *h);
    }
    /* Rounds to nearest even on the way back. */
    f[0] = 1.0f + 0x1p-11f;
    f[1] = 1.0f + 3 * 0x1p-11f;
    kvs__from_f32(KVS_FLOAT16, h, f, 2);
    assert_int_equal(h[0], 0x3c00);
    assert_int_equal(h[1], 0x3c02);

    /* Not a float dtype: nothing is written. */
    back[0] = 5.0f;
    kvs__to_f32(KVS_INT32, back, h, 1);
    assert_true(back[0] == 5.0f);
    free(f);
    free(back);
    free(h);
    free(h2);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_size_name),
        cmocka_unit_test(test_check_valid),
        cmocka_unit_test(test_check_errors),
        cmocka_unit_test(test_count_same_shape),
        cmocka_unit_test(test_shape_str),
        cmocka_unit_test(test_sum_all_dtypes),
        cmocka_unit_test(test_sum_wraps),
        cmocka_unit_test(test_sum_half_rounds_once),
        cmocka_unit_test(test_sum_big),
        cmocka_unit_test(test_sum_degenerate),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_f32_round_trip),
    };

    return cmocka_run_group_tests_name("array", tests, NULL, NULL);
}
