/*
 * test_half.c - unit tests of the float16 and bfloat16 conversions of
 * array.c, one value at a time (hand-worked bit patterns, every half
 * pattern, and an independent nearest-value reference for rounding), and
 * of the x86 half kernels (array_x86.c: widening, rounding and sums eight
 * at a time) bit for bit against them. The sums and conversions of whole
 * arrays of every dtype are tested in test_array.c.
 */
#include <float.h>
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
#include "kernels/array_x86.h"
#include "arrayutil.h"
/* ---- float16 -------------------------------------------------------- */

/* Exact value of a finite half, worked out from the format's definition. */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);

    return h & 0x8000 ? -v : v;
}

/* The nearest half to x (ties to the even pattern), by binary search over
 * the ordered positive halves: independent of the code under test. */
static uint16_t ref_to_half(float x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double ax = fabs((double)x);
    unsigned lo = 0, hi = 0x7c00;                  /* half_value(0x7c00) taken as 65536 */

    if (ax >= 65520.0)
        return sign | 0x7c00;
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;

        if (half_value((uint16_t)mid) <= ax)
            lo = mid;
        else
            hi = mid;
    }
    double up = hi == 0x7c00 ? 65536.0 : half_value((uint16_t)hi);
    double dlo = ax - half_value((uint16_t)lo), dhi = up - ax;
    if (dlo < dhi)
        return sign | (uint16_t)lo;
    if (dhi < dlo)
        return sign | (uint16_t)hi;
    return sign | (uint16_t)(lo & 1 ? hi : lo);
}

static void expect_f2h(float f, uint16_t bits)
{
    uint16_t got = kvs__f32_to_f16(f);

    if (got != bits)
        fail_msg("f32_to_f16(%a) = 0x%04x, expected 0x%04x", (double)f, got, bits);
}

static void test_f16_bits(void **state)
{
    static const struct {
        uint16_t h;
        float f;
    } exact[] = {
        { 0x3c00, 1.0f },        { 0xbc00, -1.0f },        { 0xc000, -2.0f },
        { 0x3800, 0.5f },        { 0x7bff, 65504.0f },     { 0xfbff, -65504.0f },
        { 0x0400, 0x1p-14f },    { 0x0001, 0x1p-24f },     { 0x03ff, 1023 * 0x1p-24f },
        { 0x8001, -0x1p-24f },   { 0x0000, 0.0f },         { 0x3555, 0x1.554p-2f },
        { 0x7c00, INFINITY },    { 0xfc00, -INFINITY },    { 0x3c01, 1.0f + 0x1p-10f },
        { 0x6800, 2048.0f },     { 0x6801, 2050.0f },      { 0x5640, 100.0f },
    };

    (void)state;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        float f = kvs__f16_to_f32(exact[i].h);

        if (fbits(f) != fbits(exact[i].f))
            fail_msg("f16_to_f32(0x%04x) = %a, expected %a", exact[i].h, (double)f,
                     (double)exact[i].f);
        expect_f2h(exact[i].f, exact[i].h);
    }
    /* Signed zero both ways. */
    assert_true(signbit(kvs__f16_to_f32(0x8000)));
    assert_true(kvs__f16_to_f32(0x8000) == 0.0f);
    expect_f2h(-0.0f, 0x8000);

    /* Overflow: 65520 is halfway to 65536 (which does not exist) and the
     * even neighbour is the infinity side. */
    expect_f2h(65520.0f, 0x7c00);
    expect_f2h(nextafterf(65520.0f, 0.0f), 0x7bff);
    expect_f2h(-65520.0f, 0xfc00);
    expect_f2h(1e6f, 0x7c00);
    expect_f2h(FLT_MAX, 0x7c00);
    expect_f2h(-FLT_MAX, 0xfc00);

    /* Ties to even in the normal range: 1 + 2^-11 lies halfway between
     * 0x3c00 (even) and 0x3c01; 1 + 3*2^-11 between 0x3c01 and 0x3c02 (even). */
    expect_f2h(1.0f + 0x1p-11f, 0x3c00);
    expect_f2h(1.0f + 3 * 0x1p-11f, 0x3c02);
    expect_f2h(1.0f + 0x1p-11f + 0x1p-20f, 0x3c01);   /* above the tie */
    expect_f2h(1.0f + 0x1p-12f, 0x3c00);
    expect_f2h(2049.0f, 0x6800);
    expect_f2h(2051.0f, 0x6802);
    /* A carry out of the mantissa moves to the next binade. */
    expect_f2h(2047.5f, 0x6800);
    expect_f2h(0x1.ffep0f + 0x1p-11f, 0x4000);

    /* Subnormals: 2^-25 is a tie between 0 and 0x0001; 3*2^-25 between
     * 0x0001 and 0x0002; 5*2^-25 between 0x0002 and 0x0003. */
    expect_f2h(0x1p-25f, 0x0000);
    expect_f2h(-0x1p-25f, 0x8000);
    expect_f2h(0x1.000002p-25f, 0x0001);
    expect_f2h(3 * 0x1p-25f, 0x0002);
    expect_f2h(5 * 0x1p-25f, 0x0002);
    expect_f2h(0x1p-26f, 0x0000);
    expect_f2h(0x1p-149f, 0x0000);                  /* a float subnormal */
    expect_f2h(0x1p-14f - 0x1p-25f, 0x0400);        /* tie: 0x03ff or 0x0400 (even) */
    expect_f2h(0x1p-14f - 0x1p-24f, 0x03ff);
    expect_f2h(0x1p-14f + 0x1p-25f, 0x0400);        /* normal tie, even */

    /* NaN stays NaN, quiet, with its sign; infinity is not NaN. */
    uint16_t h = kvs__f32_to_f16(NAN);
    assert_int_equal(h & 0x7c00, 0x7c00);
    assert_int_equal(h & 0x0200, 0x0200);
    assert_true(isnan(kvs__f16_to_f32(h)));
    h = kvs__f32_to_f16(bitsf(0x7f800001));        /* signalling, payload in low bits */
    assert_int_equal(h & 0x7e00, 0x7e00);
    h = kvs__f32_to_f16(bitsf(0xffc00000));
    assert_int_equal(h & 0xfe00, 0xfe00);
    assert_true(isnan(kvs__f16_to_f32(0x7c01)));
    assert_true(isnan(kvs__f16_to_f32(0x7e00)));
    assert_true(isnan(kvs__f16_to_f32(0xffff)));
    assert_true(signbit(kvs__f16_to_f32(0xfe00)));
    assert_true(isinf(kvs__f16_to_f32(0x7c00)));
}

static void test_f16_exhaustive(void **state)
{
    (void)state;
    /* Every half widens to its exact value and narrows back to itself. */
    for (uint32_t i = 0; i < 0x10000; i++) {
        uint16_t h = (uint16_t)i;
        float f = kvs__f16_to_f32(h);

        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(f));
            continue;
        }
        if ((h & 0x7fff) != 0x7c00 && (double)f != half_value(h))
            fail_msg("f16_to_f32(0x%04x) = %a, expected %a", h, (double)f, half_value(h));
        if (kvs__f32_to_f16(f) != h)
            fail_msg("0x%04x does not round-trip (0x%04x)", h, kvs__f32_to_f16(f));
    }
    /* Every midpoint between neighbours and the floats next to it, against
     * the independent reference. */
    for (uint32_t i = 0; i < 0x7c00; i++) {
        double lo = half_value((uint16_t)i);
        double hi = i + 1 == 0x7c00 ? 65536.0 : half_value((uint16_t)(i + 1));
        float mid = (float)((lo + hi) / 2);        /* exact: 12 significant bits */
        float probe[] = { mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY),
                          (float)lo, -mid, -nextafterf(mid, INFINITY) };

        for (size_t j = 0; j < sizeof probe / sizeof probe[0]; j++)
            expect_f2h(probe[j], ref_to_half(probe[j]));
    }
    /* Random floats over the range where halves live, and beyond. */
    for (int i = 0; i < 300000; i++) {
        uint32_t r = (uint32_t)rnd();
        uint32_t exp = 95 + (uint32_t)(rnd() % 55);   /* 2^-32 .. 2^22 */
        float f = bitsf((r & 0x807fffffu) | (exp << 23));

        expect_f2h(f, ref_to_half(f));
    }
}

/* ---- bfloat16 ------------------------------------------------------- */

static uint16_t ref_to_bf16(float x)
{
    uint32_t u = fbits(x), lo = u & 0xffff0000u;
    double ax = fabs((double)x);
    double vlo = fabs((double)bitsf(lo));

    if (isinf(x))
        return (uint16_t)(u >> 16);
    /* The pattern above the largest finite one is infinity: 2^128 for the
     * distance. */
    double vhi = (lo & 0x7fffffffu) == 0x7f7f0000u ? ldexp(1.0, 128)
                                                  : fabs((double)bitsf(lo + 0x10000u));
    double dlo = ax - vlo, dhi = vhi - ax;
    uint16_t l = (uint16_t)(lo >> 16);

    if (dlo < dhi)
        return l;
    if (dhi < dlo)
        return (uint16_t)(l + 1);
    return l & 1 ? (uint16_t)(l + 1) : l;
}

static void expect_f2b(float f, uint16_t bits)
{
    uint16_t got = kvs__f32_to_bf16(f);

    if (got != bits)
        fail_msg("f32_to_bf16(%a) = 0x%04x, expected 0x%04x", (double)f, got, bits);
}

static void test_bf16(void **state)
{
    (void)state;
    assert_true(kvs__bf16_to_f32(0x3f80) == 1.0f);
    assert_true(kvs__bf16_to_f32(0xc000) == -2.0f);
    assert_true(kvs__bf16_to_f32(0x4380) == 256.0f);
    assert_true(kvs__bf16_to_f32(0x7f7f) == 0x1.fep127f);
    assert_true(kvs__bf16_to_f32(0x0001) == 0x1p-133f);   /* subnormal */
    assert_true(isinf(kvs__bf16_to_f32(0xff80)) && kvs__bf16_to_f32(0xff80) < 0);
    assert_true(isnan(kvs__bf16_to_f32(0x7fc0)));
    assert_true(isnan(kvs__bf16_to_f32(0x7f81)));
    assert_true(signbit(kvs__bf16_to_f32(0x8000)));

    expect_f2b(1.0f, 0x3f80);
    expect_f2b(-1.0f, 0xbf80);
    expect_f2b(-0.0f, 0x8000);
    expect_f2b(256.0f, 0x4380);
    /* 1 + 2^-8 lies halfway between 0x3f80 (even) and 0x3f81; 1 + 3*2^-8
     * between 0x3f81 and 0x3f82 (even). */
    expect_f2b(1.0f + 0x1p-8f, 0x3f80);
    expect_f2b(1.0f + 3 * 0x1p-8f, 0x3f82);
    expect_f2b(1.0f + 0x1p-8f + 0x1p-23f, 0x3f81);
    expect_f2b(257.0f, 0x4380);
    expect_f2b(259.0f, 0x4382);
    expect_f2b(0x1.ffp0f, 0x4000);                  /* carry into the exponent */
    expect_f2b(FLT_MAX, 0x7f80);                    /* past the largest bf16 */
    expect_f2b(-FLT_MAX, 0xff80);
    expect_f2b(0x1.fep127f, 0x7f7f);
    expect_f2b(INFINITY, 0x7f80);
    expect_f2b(0x1p-149f, 0x0000);                  /* float subnormal, tie to 0 */
    expect_f2b(bitsf(0x00008001), 0x0001);

    uint16_t h = kvs__f32_to_bf16(NAN);
    assert_int_equal(h & 0x7fc0, 0x7fc0);
    h = kvs__f32_to_bf16(bitsf(0x7f800001));        /* payload only in dropped bits */
    assert_int_equal(h & 0x7fc0, 0x7fc0);
    h = kvs__f32_to_bf16(bitsf(0xff812345));
    assert_int_equal(h, 0xffc1);
    assert_true(isnan(kvs__bf16_to_f32(h)));

    for (uint32_t i = 0; i < 0x10000; i++) {
        uint16_t b = (uint16_t)i;
        float f = kvs__bf16_to_f32(b);

        if ((b & 0x7f80) == 0x7f80 && (b & 0x7f))
            continue;
        if (kvs__f32_to_bf16(f) != b)
            fail_msg("bf16 0x%04x does not round-trip", b);
    }
    /* Near every tie of every finite pattern, and random bits. */
    static const uint32_t low[] = { 0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff };
    for (uint32_t hi = 0; hi < 0x7f80; hi++) {
        for (size_t j = 0; j < sizeof low / sizeof low[0]; j++) {
            float f = bitsf(hi << 16 | low[j]);

            expect_f2b(f, ref_to_bf16(f));
            expect_f2b(-f, ref_to_bf16(-f));
        }
    }
    for (int i = 0; i < 200000; i++) {
        float f = bitsf((uint32_t)rnd());

        if (!isnan(f))
            expect_f2b(f, ref_to_bf16(f));
    }
}

/* ---- the x86 half kernels ----------------------------------------- */
/* array_x86.c's kernels against the portable one-value conversions, bit
 * for bit, on every input; skipped where the CPU or build has none (the
 * portable loops, tested in test_array.c, are then what runs). */

#define MAXK 6
#define MAXN 70

struct half_type {
    kvs_dtype_t dtype;
    float (*to_f32)(uint16_t);
    uint16_t (*from_f32)(float);
};

static const struct half_type half_types[] = {
    { KVS_FLOAT16, kvs__f16_to_f32, kvs__f32_to_f16 },
    { KVS_BFLOAT16, kvs__bf16_to_f32, kvs__f32_to_bf16 },
};

static const struct kvs__half_kernels *kernels_or_skip(kvs_dtype_t dtype)
{
    const struct kvs__half_kernels *k = kvs__half_x86(dtype);

    if (!k) {
        print_message("no AVX2+F16C kernels on this CPU or build\n");
        skip();
    }
    return k;
}

/* Every one of the 65536 patterns, NaNs included, in runs of every length
 * from 1 to 17 so that each tail length is seen. */
static void test_half_widen_every_pattern(void **state)
{
    enum { N = 0x10000 };
    uint16_t *h;
    float *f;

    (void)state;
    /* Skip before allocating: one CPU check decides both types' kernels,
     * so the skips in the loop below cannot come after this one passed. */
    kernels_or_skip(KVS_FLOAT16);
    h = xmalloc(N * sizeof *h);
    f = xmalloc(N * sizeof *f);
    for (size_t t = 0; t < 2; t++) {
        const struct kvs__half_kernels *k = kernels_or_skip(half_types[t].dtype);

        for (uint32_t i = 0; i < N; i++)
            h[i] = (uint16_t)i;
        for (size_t i = 0, len = 1; i < N; i += len, len = len % 17 + 1)
            k->widen(f + i, h + i, len < N - i ? len : N - i);
        for (uint32_t i = 0; i < N; i++)
            if (fbits(f[i]) != fbits(half_types[t].to_f32((uint16_t)i)))
                fail_msg("%s: widen(0x%04x) = 0x%08x, portable 0x%08x",
                         kvs_dtype_name(half_types[t].dtype), i, fbits(f[i]),
                         fbits(half_types[t].to_f32((uint16_t)i)));
    }
    free(h);
    free(f);
}

/* Floats around every half value and every rounding midpoint (one ulp
 * either side and on it), the specials, and a sweep of all 2^32 patterns
 * with a stride, each rounded by the kernel and by the portable code. */
static void test_half_narrow_matches(void **state)
{
    enum { PER = 7 };
    size_t cap = 0x10000 * PER + 70000, n = 0;
    float *f;
    uint16_t *h;

    (void)state;
    kernels_or_skip(KVS_FLOAT16);      /* before allocating, as above */
    f = xmalloc(cap * sizeof *f);
    h = xmalloc(cap * sizeof *h);
    for (size_t t = 0; t < 2; t++) {
        const struct kvs__half_kernels *k = kernels_or_skip(half_types[t].dtype);

        n = 0;
        for (uint32_t i = 0; i < 0x10000; i++) {
            uint32_t lo = fbits(half_types[t].to_f32((uint16_t)i)),
                     hi = fbits(half_types[t].to_f32((uint16_t)(i + 1))),
                     mid = lo + (hi - lo) / 2;

            f[n++] = bitsf(lo);
            f[n++] = bitsf(lo + 1);
            f[n++] = bitsf(lo - 1);
            f[n++] = bitsf(mid);
            f[n++] = bitsf(mid + 1);
            f[n++] = bitsf(mid - 1);
            f[n++] = bitsf((uint32_t)rnd());
        }
        for (uint64_t u = 0; u <= 0xffffffffu; u += 65537)
            f[n++] = bitsf((uint32_t)u);
        f[n++] = bitsf(0x7f800001);     /* a signalling NaN */
        f[n++] = bitsf(0xffc00000);
        f[n++] = 65519.99f;
        f[n++] = 65520.0f;
        f[n++] = 0x1p-25f;
        f[n++] = 3.0f * 0x1p-26f;
        assert_true(n <= cap);
        for (size_t i = 0, len = 1; i < n; i += len, len = len % 17 + 1)
            k->narrow(h + i, f + i, len < n - i ? len : n - i);
        for (size_t i = 0; i < n; i++)
            if (h[i] != half_types[t].from_f32(f[i]))
                fail_msg("%s: narrow(0x%08x) = 0x%04x, portable 0x%04x",
                         kvs_dtype_name(half_types[t].dtype), fbits(f[i]), h[i],
                         half_types[t].from_f32(f[i]));
    }
    free(f);
    free(h);
}

/* Random patterns (NaNs, infinities and subnormals among them) summed over
 * k = 2..6 inputs at every length up to MAXN and from an offset, into a
 * separate output and into the first and the last input. */
static void test_half_sum_matches(void **state)
{
    uint16_t buf[MAXK][MAXN], want[MAXN], out[MAXN];
    const void *in[MAXK];

    (void)state;
    for (size_t t = 0; t < 2; t++) {
        const struct kvs__half_kernels *k = kernels_or_skip(half_types[t].dtype);

        for (int nk = 2; nk <= MAXK; nk++)
            for (size_t n = 0; n <= MAXN; n++)
                for (int alias = 0; alias < 3; alias++) {
                    size_t begin = n % 5 < n ? n % 5 : 0;
                    uint16_t *o = alias == 0 ? out : alias == 1 ? buf[0] : buf[nk - 1];

                    for (int j = 0; j < nk; j++) {
                        for (size_t i = 0; i < n; i++)
                            /* Mostly ordinary values, so that sums round. */
                            buf[j][i] = (uint16_t)(rnd() % 8 ? 0x3000 + rnd() % 0x1800
                                                             : rnd() & 0xffff);
                        in[j] = buf[j];
                    }
                    for (size_t i = 0; i < n; i++) {
                        float s = half_types[t].to_f32(buf[0][i]);

                        for (int j = 1; j < nk; j++)
                            s += half_types[t].to_f32(buf[j][i]);
                        want[i] = half_types[t].from_f32(s);
                    }
                    memset(out, 0xa5, sizeof out);
                    k->sum(o, in, nk, begin, n);
                    for (size_t i = begin; i < n; i++)
                        if (o[i] != want[i])
                            fail_msg("%s k=%d n=%zu alias=%d: element %zu is 0x%04x, want "
                                     "0x%04x",
                                     kvs_dtype_name(half_types[t].dtype), nk, n, alias, i, o[i],
                                     want[i]);
                    if (alias == 0)
                        for (size_t i = 0; i < MAXN; i++)
                            if (i < begin || i >= n)
                                assert_int_equal(out[i], 0xa5a5);   /* nothing outside */
                }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_bits),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_half_widen_every_pattern),
        cmocka_unit_test(test_half_narrow_matches),
        cmocka_unit_test(test_half_sum_matches),
    };

    return cmocka_run_group_tests_name("half", tests, NULL, NULL);
}
