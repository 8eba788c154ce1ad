/*
 * test_spec.c - unit tests of spec.c: cutting a spec into its name and
 * key=value tokens, reading numbers whole (finite, nothing left over),
 * writing them in the fewest digits that read back, and the command-line
 * sizes of kvsd and kvsrun.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/spec.h"

static void test_tokens(void **state)
{
    struct kvs__spec sp;
    struct kvs__spec_param p;
    const char *name;
    size_t len;

    (void)state;
    len = kvs__spec_begin(&sp, "  sgd\tlr=0.5  flag =x", &name);
    assert_int_equal(len, 3);
    assert_true(kvs__spec_is(name, len, "sgd"));
    assert_false(kvs__spec_is(name, len, "sg"));
    assert_int_equal(kvs__spec_next_param(&sp, &p), 1);
    assert_int_equal(p.key_len, 2);
    assert_memory_equal(p.key, "lr", 2);
    assert_int_equal(p.value_len, 3);
    assert_memory_equal(p.value, "0.5", 3);
    assert_int_equal(kvs__spec_next_param(&sp, &p), 1);
    assert_int_equal(p.key_len, 4);                    /* "flag": no '=' in it */
    assert_null(p.value);
    assert_int_equal(kvs__spec_next_param(&sp, &p), 1);
    assert_int_equal(p.key_len, 0);                    /* "=x" */
    assert_int_equal(p.value_len, 1);
    assert_int_equal(kvs__spec_next_param(&sp, &p), 0);
    assert_int_equal(kvs__spec_begin(&sp, " \n ", &name), 0);
}

static void test_numbers(void **state)
{
    double d = 7;
    float f = 7;

    (void)state;
    assert_int_equal(kvs__spec_double("0.25", 4, &d), 0);
    assert_true(d == 0.25);
    assert_int_equal(kvs__spec_double("1e-3 rest", 4, &d), 0);
    assert_true(d == 1e-3);
    assert_int_equal(kvs__spec_float("0.1", 3, &f), 0);
    assert_true(f == 0.1f);
    d = 7;
    assert_int_equal(kvs__spec_double("", 0, &d), -1);
    assert_int_equal(kvs__spec_double("1x", 2, &d), -1);
    assert_int_equal(kvs__spec_double("nan", 3, &d), -1);
    assert_int_equal(kvs__spec_double("inf", 3, &d), -1);
    assert_int_equal(kvs__spec_double("1e999", 5, &d), -1);
    assert_true(d == 7);                               /* unchanged on failure */
}

/* Numbers people read back: no float noise ("0.1", not %.17g's
 * "0.10000000000000001"), yet every digit a value needs to read back. */
static void test_format(void **state)
{
    static const struct { double v; const char *text; } cases[] = {
        { 0.1, "0.1" },
        { 0.9, "0.9" },
        { 1e-8, "1e-08" },
        { 1000, "1000" },                             /* not %g's 1e+03 */
        { 1.5e10, "15000000000" },
        { 1e15, "1000000000000000" },
        { 1e16, "1e+16" },
        { 1e20, "1e+20" },
        { 123.5, "123.5" },
        { 0.0001, "0.0001" },
        { 0.00001, "1e-05" },
        { 1.0625, "1.0625" },
        { 0.25, "0.25" },
        { 1.0 / 3, "0.3333333333333333" },
        { 0.1 + 0.2, "0.30000000000000004" },         /* not 0.3: it does not read back */
        { 1e-300, "1e-300" },
        { 5e-324, "5e-324" },                         /* the smallest subnormal */
        { -2.5, "-2.5" },
        { 0, "0" },
        { 31536000, "31536000" },
    };
    char buf[32];
    double back;

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(kvs__spec_format_double(buf, sizeof buf, cases[i].v),
                         (int)strlen(cases[i].text));
        assert_string_equal(buf, cases[i].text);
        assert_int_equal(kvs__spec_double(buf, strlen(buf), &back), 0);
        assert_true(back == cases[i].v);
    }
    /* Cut short: a count of at least the size, the buffer still a string. */
    assert_true(kvs__spec_format_double(buf, 4, 1.0 / 3) >= 4);
    assert_string_equal(buf, "0.3");
    assert_int_equal(kvs__spec_format_double(buf, sizeof buf, NAN), 3);
    assert_string_equal(buf, "nan");
}

static void test_bytes(void **state)
{
    uint64_t b = 7;

    (void)state;
    assert_int_equal(kvs__parse_bytes("256M", &b), 0);
    assert_int_equal(b, 256ull << 20);
    assert_int_equal(kvs__parse_bytes("64k", &b), 0);
    assert_int_equal(b, 64ull << 10);
    assert_int_equal(kvs__parse_bytes("1.5G", &b), 0);
    assert_int_equal(b, 3ull << 29);
    assert_int_equal(kvs__parse_bytes("1", &b), 0);
    assert_int_equal(b, 4096);                         /* rounded up to a page */
    assert_int_equal(kvs__parse_bytes("1024G", &b), 0);
    assert_int_equal(b, 1ull << 40);
    b = 7;
    assert_int_equal(kvs__parse_bytes("1025G", &b), -1);
    assert_int_equal(kvs__parse_bytes("0", &b), -1);
    assert_int_equal(kvs__parse_bytes("-4K", &b), -1);
    assert_int_equal(kvs__parse_bytes("", &b), -1);
    assert_int_equal(kvs__parse_bytes("M", &b), -1);
    assert_int_equal(kvs__parse_bytes("12X", &b), -1);
    assert_int_equal(kvs__parse_bytes("4 K", &b), -1);
    assert_int_equal(kvs__parse_bytes("nanM", &b), -1);
    assert_int_equal(kvs__parse_bytes("1e300", &b), -1);
    assert_int_equal(kvs__parse_bytes("11111111111111111111111111111111111111111111111111"
                                      "11111111111111", &b), -1);     /* 64 bytes long */
    assert_int_equal(b, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_bytes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
