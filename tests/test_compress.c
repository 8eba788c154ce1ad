/*
 * test_compress.c - unit tests of compress.c: the 2bit codec against
 * vectors worked out by hand from MXNet's layout, the residual it carries
 * between pushes, block edges, and the spec parser with each of its errors.
 * Tests only compress.h; never a store.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/compress.h"

/* The bytes of n words in memory order: the wire layout, on any host. */
static void word_bytes(const uint32_t *w, size_t nwords, uint8_t *bytes)
{
    memcpy(bytes, w, nwords * sizeof(uint32_t));
}

/* Exact float equality that also tells which element differs. */
static void assert_floats_exact(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            print_error("element %zu: got %.9g, want %.9g\n", i, (double)got[i],
                        (double)want[i]);
            fail();
        }
    }
}

static void assert_near(float got, float want, float tol)
{
    if (!(fabsf(got - want) <= tol)) {
        print_error("got %.9g, want %.9g (+-%g)\n", (double)got, (double)want, (double)tol);
        fail();
    }
}

/* ---- words ----------------------------------------------------------- */

static void test_words(void **state)
{
    (void)state;
    assert_int_equal(kvs__gc_2bit_words(0), 0);
    assert_int_equal(kvs__gc_2bit_words(1), 1);
    assert_int_equal(kvs__gc_2bit_words(15), 1);
    assert_int_equal(kvs__gc_2bit_words(16), 1);
    assert_int_equal(kvs__gc_2bit_words(17), 2);
    assert_int_equal(kvs__gc_2bit_words(32), 2);
    assert_int_equal(kvs__gc_2bit_words(33), 3);
    /* No wrap-around near the top of size_t. */
    assert_true(kvs__gc_2bit_words(SIZE_MAX) == SIZE_MAX / 16 + 1);
    assert_true(kvs__gc_2bit_words(SIZE_MAX - 15) == SIZE_MAX / 16);
}

/* ---- hand-worked vector ---------------------------------------------- */

/*
 * threshold 0.5, residual 0 before. Each value: residual += grad; >= 0.5
 * gives 11 and residual -= 0.5; <= -0.5 gives 10 and residual += 0.5;
 * otherwise 00. Value j of a word is in byte j/4, highest bits first.
 *
 *   j  grad     code  residual after
 *   0   0.6     11    0.6 - 0.5  (~0.1)
 *   1  -0.7     10   -0.7 + 0.5  (~-0.2)
 *   2   0.2     00    0.2
 *   3   0.0     00    0
 *           byte 0 = 11 10 00 00 = 0xE0
 *   4   1.3     11    1.3 - 0.5  (~0.8: one threshold per push, no more)
 *   5  -0.5     10    0          (equal to -threshold counts)
 *   6   0.5     11    0          (equal to +threshold counts)
 *   7  -0.49    00   -0.49
 *           byte 1 = 11 10 11 00 = 0xEC
 *   8  -1.3     10   -1.3 + 0.5  (~-0.8)
 *   9   0.49    00    0.49
 *  10 100.0     11    99.5
 *  11  -0.0     00    +0 (0 + -0 is +0)
 *           byte 2 = 10 00 11 00 = 0x8C
 *  12   0.25    00    0.25
 *  13  -0.25    00   -0.25
 *  14   0.75    11    0.25
 *  15  -0.6     10   -0.6 + 0.5  (~-0.1)
 *           byte 3 = 00 00 11 10 = 0x0E
 */
static const float vec_grad[16] = {
    0.6f, -0.7f, 0.2f, 0.0f,  1.3f, -0.5f, 0.5f, -0.49f,
    -1.3f, 0.49f, 100.0f, -0.0f,  0.25f, -0.25f, 0.75f, -0.6f,
};
static const uint8_t vec_bytes[4] = { 0xE0, 0xEC, 0x8C, 0x0E };

static void test_quantize_vector(void **state)
{
    /* The same float operations the codec does, so equality is exact. */
    const float want_res[16] = {
        0.6f - 0.5f, -0.7f + 0.5f, 0.2f, 0.0f,
        1.3f - 0.5f, 0.0f, 0.0f, -0.49f,
        -1.3f + 0.5f, 0.49f, 99.5f, 0.0f,
        0.25f, -0.25f, 0.25f, -0.6f + 0.5f,
    };
    const float approx_res[16] = {
        0.1f, -0.2f, 0.2f, 0.0f,  0.8f, 0.0f, 0.0f, -0.49f,
        -0.8f, 0.49f, 99.5f, 0.0f,  0.25f, -0.25f, 0.25f, -0.1f,
    };
    float res[16] = { 0 };
    uint32_t out[2] = { 0xA5A5A5A5u, 0xDEADBEEFu };
    uint8_t bytes[4];

    (void)state;
    kvs__gc_2bit_quantize(vec_grad, res, out, 16, 0.5f);
    word_bytes(out, 1, bytes);
    assert_memory_equal(bytes, vec_bytes, 4);
    assert_int_equal(out[1], 0xDEADBEEFu);          /* one word for 16 values */
    assert_floats_exact(res, want_res, 16);
    for (int i = 0; i < 16; i++)
        assert_near(res[i], approx_res[i], 1e-6f);
    assert_int_equal(signbit(res[11]), 0);
}

static void test_dequantize_vector(void **state)
{
    const float want[16] = {
        0.5f, -0.5f, 0.0f, 0.0f,  0.5f, -0.5f, 0.5f, 0.0f,
        -0.5f, 0.0f, 0.5f, 0.0f,  0.0f, 0.0f, 0.5f, -0.5f,
    };
    uint32_t in;
    float out[17];

    (void)state;
    memcpy(&in, vec_bytes, 4);
    out[16] = 42.0f;
    kvs__gc_2bit_dequantize(&in, out, 16, 0.5f);
    assert_floats_exact(out, want, 16);
    assert_true(out[16] == 42.0f);
}

/* Every 2-bit code in every position: 11 -> +t, 10 -> -t, 00 and the
 * never-written 01 -> 0 (MXNet's reading). */
static void test_dequantize_codes(void **state)
{
    static const struct { uint8_t byte; float v[4]; } cases[] = {
        { 0xFF, { 0.75f, 0.75f, 0.75f, 0.75f } },
        { 0xAA, { -0.75f, -0.75f, -0.75f, -0.75f } },
        { 0x55, { 0.0f, 0.0f, 0.0f, 0.0f } },
        { 0x00, { 0.0f, 0.0f, 0.0f, 0.0f } },
        { 0xE4, { 0.75f, -0.75f, 0.0f, 0.0f } },    /* 11 10 01 00 */
        { 0x1B, { 0.0f, 0.0f, -0.75f, 0.75f } },    /* 00 01 10 11 */
        { 0x9C, { -0.75f, 0.0f, 0.75f, 0.0f } },    /* 10 01 11 00 */
    };
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t bytes[4] = { 0, cases[c].byte, 0, 0 };
        uint32_t in;
        float out[8];
        memcpy(&in, bytes, 4);
        kvs__gc_2bit_dequantize(&in, out, 8, 0.75f);
        assert_floats_exact(out + 4, cases[c].v, 4);
        for (int i = 0; i < 4; i++) {
            assert_true(out[i] == 0.0f);
            assert_int_equal(signbit(out[i]), 0);
        }
    }
}

/* ---- residual across pushes ------------------------------------------ */

static void test_residual_carried(void **state)
{
    float g = 0.2f, res = 0.0f, r;
    uint32_t w;
    uint8_t b[4];

    (void)state;
    kvs__gc_2bit_quantize(&g, &res, &w, 1, 0.5f);   /* residual 0.2: nothing sent */
    word_bytes(&w, 1, b);
    assert_int_equal(b[0], 0x00);
    assert_true(res == 0.2f);

    kvs__gc_2bit_quantize(&g, &res, &w, 1, 0.5f);   /* 0.4: still nothing */
    word_bytes(&w, 1, b);
    assert_int_equal(b[0], 0x00);
    assert_true(res == 0.2f + 0.2f);

    kvs__gc_2bit_quantize(&g, &res, &w, 1, 0.5f);   /* 0.6: +0.5 sent, 0.1 kept */
    word_bytes(&w, 1, b);
    assert_int_equal(b[0], 0xC0);
    r = 0.2f;
    r += 0.2f;
    r += 0.2f;
    r -= 0.5f;
    assert_true(res == r);
    assert_near(res, 0.1f, 1e-6f);
}

/* The same with values exact in binary: 0.375 per push, threshold 0.5.
 * 0.375 -> 00; 0.75 -> 11 keep 0.25; 0.625 -> 11 keep 0.125. And mirrored. */
static void test_residual_carried_exact(void **state)
{
    float g[2] = { 0.375f, -0.375f }, res[2] = { 0.0f, 0.0f };
    static const uint8_t want_byte[3] = { 0x00, 0xE0, 0xE0 };  /* 11 10 00 00 */
    static const float want_res[3] = { 0.375f, 0.25f, 0.125f };
    uint32_t w;
    uint8_t b[4];

    (void)state;
    for (int push = 0; push < 3; push++) {
        kvs__gc_2bit_quantize(g, res, &w, 2, 0.5f);
        word_bytes(&w, 1, b);
        assert_int_equal(b[0], want_byte[push]);
        assert_int_equal(b[1] | b[2] | b[3], 0);
        assert_true(res[0] == want_res[push]);
        assert_true(res[1] == -want_res[push]);
    }
}

/* What is sent plus what is kept is what there was: dequantize(quantize(g))
 * + residual_after == residual_before + g, exactly for dyadic values. */
static void test_roundtrip_conserves(void **state)
{
    enum { N = 53 };
    float g[N], res[N], before[N], deq[N];
    uint32_t w[4];
    unsigned seed = 12345u;

    (void)state;
    memset(res, 0, sizeof res);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            g[i] = (float)((int)((seed >> 16) % 33u) - 16) / 8.0f;    /* -2 .. 2 */
            before[i] = res[i] + g[i];
        }
        kvs__gc_2bit_quantize(g, res, w, N, 0.5f);
        kvs__gc_2bit_dequantize(w, deq, N, 0.5f);
        for (int i = 0; i < N; i++) {
            assert_true(deq[i] + res[i] == before[i]);
            assert_true(deq[i] == 0.5f || deq[i] == -0.5f || deq[i] == 0.0f);
        }
    }
}

/* ---- block edges ----------------------------------------------------- */

/* Byte that the first k (1..4) values of a byte make when all are code c
 * (3 for 11, 2 for 10), the rest 00. */
static uint8_t partial_byte(unsigned c, size_t k)
{
    uint8_t b = 0;
    for (size_t j = 0; j < k; j++)
        b |= (uint8_t)(c << (6 - 2 * j));
    return b;
}

static void check_block_edges(float value, unsigned code)
{
    static const size_t sizes[] = { 1, 15, 16, 17, 33 };
    static const size_t words[] = { 1, 1, 1, 2, 3 };

    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float g[33], res[33], deq[34];
        uint32_t out[4];
        uint8_t bytes[16], want[16];

        assert_int_equal(kvs__gc_2bit_words(n), words[s]);
        for (size_t i = 0; i < n; i++) {
            g[i] = value;
            res[i] = 0.0f;
        }
        memset(out, 0xA5, sizeof out);   /* stale bits must not survive */
        kvs__gc_2bit_quantize(g, res, out, n, 0.5f);

        memset(want, 0, sizeof want);
        for (size_t i = 0; i < n; i += 4)
            want[i / 4] = partial_byte(code, n - i < 4 ? n - i : 4);
        word_bytes(out, words[s], bytes);
        assert_memory_equal(bytes, want, words[s] * 4);
        /* Words past the end are left alone. */
        for (size_t k = words[s]; k < 4; k++)
            assert_int_equal(out[k], 0xA5A5A5A5u);

        deq[n] = 7.0f;
        kvs__gc_2bit_dequantize(out, deq, n, 0.5f);
        for (size_t i = 0; i < n; i++) {
            assert_true(deq[i] == (code == 3 ? 0.5f : -0.5f));
            assert_true(res[i] == value - (code == 3 ? 0.5f : -0.5f));
        }
        assert_true(deq[n] == 7.0f);
    }
}

static void test_block_edges(void **state)
{
    (void)state;
    check_block_edges(1.0f, 3);
    check_block_edges(-1.0f, 2);
    check_block_edges(0.5f, 3);
    check_block_edges(-0.5f, 2);
}

/* One value set among n = 33: it lands in word i/16, byte (i%16)/4, bits
 * 7-6 down to 1-0, and nowhere else. */
static void test_single_positions(void **state)
{
    static const uint8_t pos[4] = { 0xc0, 0x30, 0x0c, 0x03 };
    static const size_t idx[] = { 0, 1, 2, 3, 4, 7, 12, 15, 16, 17, 20, 31, 32 };

    (void)state;
    for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
        float g[33] = { 0 }, res[33] = { 0 };
        uint32_t out[3];
        uint8_t bytes[12], want[12] = { 0 };
        size_t i = idx[k];

        g[i] = 2.0f;
        kvs__gc_2bit_quantize(g, res, out, 33, 0.5f);
        want[(i / 16) * 4 + (i % 16) / 4] = pos[i % 4];
        word_bytes(out, 3, bytes);
        assert_memory_equal(bytes, want, 12);
        assert_true(res[i] == 1.5f);
    }
}

static void test_zero_length(void **state)
{
    uint32_t out = 0x12345678u;
    float f = 3.0f;

    (void)state;
    kvs__gc_2bit_quantize(NULL, NULL, &out, 0, 0.5f);
    assert_int_equal(out, 0x12345678u);
    kvs__gc_2bit_dequantize(&out, &f, 0, 0.5f);
    assert_true(f == 3.0f);
}

/* ---- threshold edges ------------------------------------------------- */

static void test_threshold_equality(void **state)
{
    const float t = 0.3f;                /* not dyadic: equality on the float itself */
    const float g[8] = {
        t, -t, nextafterf(t, 0.0f), nextafterf(-t, 0.0f),
        nextafterf(t, 1.0f), nextafterf(-t, -1.0f), 0.0f, -0.0f,
    };
    float res[8] = { 0 };
    uint32_t w;
    uint8_t b[4];

    (void)state;
    kvs__gc_2bit_quantize(g, res, &w, 8, t);
    word_bytes(&w, 1, b);
    /* +t: 11, -t: 10, just inside: 00 00  |  just outside: 11 10, zeros: 00 00 */
    assert_int_equal(b[0], 0xE0);
    assert_int_equal(b[1], 0xE0);
    assert_int_equal(b[2] | b[3], 0);
    assert_true(res[0] == 0.0f);
    assert_true(res[1] == 0.0f);
    assert_true(res[2] == nextafterf(t, 0.0f));
    assert_true(res[3] == nextafterf(-t, 0.0f));
    assert_true(res[4] == nextafterf(t, 1.0f) - t);
    assert_true(res[5] == nextafterf(-t, -1.0f) + t);
    assert_true(res[4] > 0.0f && res[5] < 0.0f);
}

/* Exactly +-threshold reached through the residual, dyadic values. */
static void test_threshold_via_residual(void **state)
{
    float g[4] = { 0.25f, -0.25f, 0.125f, -0.125f };
    float res[4] = { 0.25f, -0.25f, 0.25f, -0.25f };
    uint32_t w;
    uint8_t b[4];

    (void)state;
    kvs__gc_2bit_quantize(g, res, &w, 4, 0.5f);
    word_bytes(&w, 1, b);
    assert_int_equal(b[0], 0xE0);          /* 11 10 00 00 */
    assert_true(res[0] == 0.0f && res[1] == 0.0f);
    assert_true(res[2] == 0.375f && res[3] == -0.375f);
}

/* NaN fails both comparisons (00, residual NaN); infinities pass them
 * (11 / 10) and stay infinite, as in MXNet's float kernel. */
static void test_special_values(void **state)
{
    float g[4] = { NAN, 1.0f, INFINITY, -INFINITY }, res[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    float deq[4];
    uint32_t w;
    uint8_t b[4];

    (void)state;
    kvs__gc_2bit_quantize(g, res, &w, 4, 0.5f);
    word_bytes(&w, 1, b);
    assert_int_equal(b[0], 0x3E);          /* 00 11 11 10 */
    assert_true(isnan(res[0]));
    assert_true(res[1] == 0.5f);
    assert_true(isinf(res[2]) && res[2] > 0.0f);
    assert_true(isinf(res[3]) && res[3] < 0.0f);
    kvs__gc_2bit_dequantize(&w, deq, 4, 0.5f);
    assert_true(deq[0] == 0.0f && deq[1] == 0.5f && deq[2] == 0.5f && deq[3] == -0.5f);
}

/* ---- spec ------------------------------------------------------------ */

static void test_parse_ok(void **state)
{
    static const struct { const char *spec; enum kvs__gc_type type; float t; } ok[] = {
        { "none", KVS__GC_NONE, 0.0f },
        { "  none  ", KVS__GC_NONE, 0.0f },
        { "2bit", KVS__GC_2BIT, 0.5f },
        { "2bit threshold=0.5", KVS__GC_2BIT, 0.5f },
        { "2bit threshold=0.25", KVS__GC_2BIT, 0.25f },
        { "\t2bit \n threshold=1e-3 ", KVS__GC_2BIT, 1e-3f },
        { "2bit threshold=2", KVS__GC_2BIT, 2.0f },
        { "2bit threshold=+0.1", KVS__GC_2BIT, 0.1f },
        { "2bit threshold=0.3", KVS__GC_2BIT, 0.3f },
    };
    (void)state;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct kvs__gc gc = { .type = KVS__GC_NONE, .threshold = -1.0f };
        struct kvs__err e = { 0 };
        int rc = kvs__gc_parse(ok[i].spec, &gc, &e);
        if (rc != 0)
            print_error("spec \"%s\": %d %s\n", ok[i].spec, rc, e.msg);
        assert_int_equal(rc, 0);
        assert_int_equal(gc.type, ok[i].type);
        assert_true(gc.threshold == ok[i].t);   /* the float nearest the decimal */
    }
    /* A NULL error record is allowed. */
    {
        struct kvs__gc gc;
        assert_int_equal(kvs__gc_parse("2bit", &gc, NULL), 0);
        assert_int_equal(kvs__gc_parse("3bit", &gc, NULL), KVS_ESPEC);
    }
}

static void test_parse_errors(void **state)
{
    static const struct { const char *spec; int code; const char *detail; } bad[] = {
        { "", KVS_ESPEC, "empty" },
        { "   \t ", KVS_ESPEC, "empty" },
        { "3bit", KVS_ESPEC, "'3bit'" },
        { "2BIT", KVS_ESPEC, "'2BIT'" },
        { "1bit threshold=0.5", KVS_ESPEC, "'1bit'" },
        { "threshold=0.5", KVS_ESPEC, "'threshold=0.5'" },
        { "2bit foo=1", KVS_ESPEC, "'foo'" },
        { "2bit threshold=0.5 beta=0.9", KVS_ESPEC, "'beta'" },
        { "2bit =0.5", KVS_ESPEC, "''" },
        { "none threshold=0.5", KVS_ESPEC, "'threshold'" },
        { "2bit threshold=0.5 threshold=0.5", KVS_ESPEC, "twice" },
        { "2bit threshold", KVS_ESPEC, "'threshold' has no '=value'" },
        { "2bit threshold =0.5", KVS_ESPEC, "'threshold' has no '=value'" },
        { "2bit threshold=", KVS_ESPEC, "not a finite number" },
        { "2bit threshold=abc", KVS_ESPEC, "'abc'" },
        { "2bit threshold=0.5x", KVS_ESPEC, "'0.5x'" },
        { "2bit threshold=0.5,", KVS_ESPEC, "'0.5,'" },
        { "2bit threshold=nan", KVS_ESPEC, "not a finite number" },
        { "2bit threshold=inf", KVS_ESPEC, "not a finite number" },
        { "2bit threshold=1e39", KVS_ESPEC, "not a finite number" },  /* beyond float */
        { "2bit threshold=0", KVS_ESPEC, "greater than 0" },
        { "2bit threshold=-0.5", KVS_ESPEC, "greater than 0" },
        { "2bit threshold=-0", KVS_ESPEC, "greater than 0" },
        { "2bit threshold=1e-60", KVS_ESPEC, "greater than 0" },      /* rounds to 0 */
    };
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kvs__gc gc = { .type = KVS__GC_2BIT, .threshold = 7.0f };
        struct kvs__err e = { 0 };
        int rc = kvs__gc_parse(bad[i].spec, &gc, &e);
        if (rc != bad[i].code || strstr(e.msg, bad[i].detail) == NULL)
            print_error("spec \"%s\": rc %d, detail \"%s\", want %d with \"%s\"\n",
                        bad[i].spec, rc, e.msg, bad[i].code, bad[i].detail);
        assert_int_equal(rc, bad[i].code);
        assert_int_equal(e.code, bad[i].code);
        assert_non_null(strstr(e.msg, bad[i].detail));
        /* A failed parse leaves the output as it was. */
        assert_int_equal(gc.type, KVS__GC_2BIT);
        assert_true(gc.threshold == 7.0f);
    }
}

static void test_parse_long_token(void **state)
{
    char spec[300];
    struct kvs__gc gc;
    struct kvs__err e = { 0 };

    (void)state;
    /* A huge unknown token: the detail quotes only its start. */
    memset(spec, 'x', sizeof spec - 1);
    spec[sizeof spec - 1] = '\0';
    assert_int_equal(kvs__gc_parse(spec, &gc, &e), KVS_ESPEC);
    assert_non_null(strstr(e.msg, "unknown type"));

    /* A long but valid number is read whole, not cut to a buffer. */
    snprintf(spec, sizeof spec, "2bit threshold=0.25%0200d ", 0);
    assert_int_equal(kvs__gc_parse(spec, &gc, &e), 0);
    assert_true(gc.threshold == 0.25f);
}

static void test_parse_null(void **state)
{
    struct kvs__gc gc = { .type = KVS__GC_2BIT, .threshold = 7.0f };
    struct kvs__err e = { 0 };

    (void)state;
    assert_int_equal(kvs__gc_parse(NULL, &gc, &e), KVS_EBADARG);
    assert_int_equal(e.code, KVS_EBADARG);
    assert_true(gc.threshold == 7.0f);
    assert_int_equal(kvs__gc_parse("2bit", NULL, &e), KVS_EBADARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_words),
        cmocka_unit_test(test_quantize_vector),
        cmocka_unit_test(test_dequantize_vector),
        cmocka_unit_test(test_dequantize_codes),
        cmocka_unit_test(test_residual_carried),
        cmocka_unit_test(test_residual_carried_exact),
        cmocka_unit_test(test_roundtrip_conserves),
        cmocka_unit_test(test_block_edges),
        cmocka_unit_test(test_single_positions),
        cmocka_unit_test(test_zero_length),
        cmocka_unit_test(test_threshold_equality),
        cmocka_unit_test(test_threshold_via_residual),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_long_token),
        cmocka_unit_test(test_parse_null),
    };
    return cmocka_run_group_tests_name("compress", tests, NULL, NULL);
}
