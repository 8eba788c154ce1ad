/*
 * test_spec.c - unit tests of spec.c: cutting a spec into its name and
 * key=value tokens, reading numbers whole (finite, nothing left over), and
 * the command-line sizes of kvsd and kvsrun.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "spec.h"

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
        cmocka_unit_test(test_bytes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
