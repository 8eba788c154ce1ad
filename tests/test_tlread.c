/*
 * test_tlread.c - the reader of kvs timeline files (daemon/kvsctl/tlread.c) that
 * kvsctl timeline runs on untrusted input: JSON values decoded right
 * (escapes, surrogate pairs, numbers as text and value), everything that
 * is not JSON refused with where and why (NaN, trailing commas, control
 * characters, lone surrogates, nesting beyond the bound, arenas full),
 * values written back as they came, and files read a line at a time:
 * events with their own text, the otherData at the end, and a bad line,
 * a cut file or another format refused with the file and line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tlread.h"

#define TAIL "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":\"kvs timeline 1\"," \
             "\"dropped_events\":0}}\n"

static struct tl_json j;

static int setup(void **state)
{
    (void)state;
    return tl_json_init(&j, 4096, 1024);
}

static int teardown(void **state)
{
    (void)state;
    tl_json_free(&j);
    return 0;
}

static struct tl_val *parse(const char *text)
{
    struct tl_val *v = NULL;

    if (tl_json_parse(&j, text, strlen(text), &v) != 0)
        return NULL;
    return v;
}

/* Fails with why, at byte at. */
static void refused(const char *text, const char *why, size_t at)
{
    struct tl_val *v;

    assert_int_equal(tl_json_parse(&j, text, strlen(text), &v), -1);
    assert_string_equal(j.err, why);
    assert_int_equal(j.err_at, at);
}

static void test_event(void **state)
{
    const struct tl_val *ev, *args;
    int64_t i;
    double d;

    (void)state;
    ev = parse(" {\"name\":\"waiting for others\",\"cat\":\"kvsd\",\"ph\":\"X\",\"pid\":1,"
               "\"tid\":1000003,\"ts\":1240.000,\"dur\":50012.5,"
               "\"args\":{\"key\":\"fc1.weight\",\"round\":7,\"e\":[1,true,false,null]}} ");
    assert_non_null(ev);
    assert_int_equal(ev->type, TL_OBJ);
    assert_true(tl_is(tl_get(ev, "name"), "waiting for others"));
    assert_false(tl_is(tl_get(ev, "name"), "waiting for"));
    assert_true(tl_is(tl_get(ev, "ph"), "X"));
    assert_null(tl_get(ev, "nope"));
    assert_int_equal(tl_int(tl_get(ev, "tid"), 0, INT32_MAX, &i), 0);
    assert_int_equal(i, 1000003);
    assert_int_equal(tl_num(tl_get(ev, "dur"), &d), 0);
    assert_true(d == 50012.5);
    assert_string_equal(tl_get(ev, "ts")->s, "1240.000");
    /* A whole number is one however it is written; 50012.5 is not. */
    assert_int_equal(tl_int(tl_get(ev, "ts"), 0, 10000, &i), 0);
    assert_int_equal(i, 1240);
    assert_int_equal(tl_int(tl_get(ev, "dur"), 0, INT32_MAX, &i), -1);
    assert_int_equal(tl_int(tl_get(ev, "tid"), 0, 1000, &i), -1);
    assert_int_equal(tl_int(tl_get(ev, "name"), 0, 1000, &i), -1);
    args = tl_get(ev, "args");
    assert_true(tl_is(tl_get(args, "key"), "fc1.weight"));
    assert_int_equal(tl_int(tl_get(args, "round"), 0, 100, &i), 0);
    assert_int_equal(i, 7);
    assert_null(tl_get(tl_get(args, "round"), "x"));       /* not an object */
    assert_int_equal(tl_get(args, "e")->child->next->type, TL_TRUE);
    assert_int_equal(tl_get(args, "e")->child->next->next->next->type, TL_NULL);
    /* Of a key given twice, the first. */
    assert_true(tl_is(tl_get(parse("{\"a\":\"1\",\"a\":\"2\"}"), "a"), "1"));
}

static void test_strings(void **state)
{
    const struct tl_val *v;

    (void)state;
    v = parse("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\\u0000z\"");
    assert_non_null(v);
    assert_int_equal(v->len, 23);
    assert_memory_equal(v->s, "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\0z", 24);
    /* Bytes above 127 pass as they are. */
    v = parse("\"r\xc3\xa9sum\xc3\xa9\"");
    assert_int_equal(v->len, 8);
    refused("\"a\x01\"", "a control character in a string", 2);
    /* JSON is UTF-8: a stray continuation byte, a character cut short, an
     * overlong '/', a UTF-8 surrogate, and one above U+10FFFF are not. */
    refused("\"ab\x80\"", "a string that is not UTF-8", 3);
    refused("\"\xe2\x82\"", "a string that is not UTF-8", 1);
    refused("\"\xc0\xaf\"", "a string that is not UTF-8", 1);
    refused("\"\xed\xa0\x80\"", "a string that is not UTF-8", 1);
    refused("\"\xf4\x90\x80\x80\"", "a string that is not UTF-8", 1);
    refused("[1,\xc3\xa9]", "expected a value", 3);
    refused("\"\\x41\"", "an unknown escape in a string", 2);
    refused("\"\\ud83d\"", "a high surrogate \\u escape without its low half", 7);
    refused("\"\\ud83d\\u0041\"", "a high surrogate \\u escape without its low half", 13);
    refused("\"\\ude00\"", "a lone low surrogate \\u escape", 7);
    refused("\"\\u12g4\"", "a \\u escape that is not 4 hex digits", 6);
    refused("\"\\u12", "a \\u escape cut short", 3);
    refused("\"abc", "a string not ended", 4);
}

static void test_numbers(void **state)
{
    const struct tl_val *v;
    double d;
    int64_t i;

    (void)state;
    v = parse("[0, -0.5, 1e3, 2E-2, 12345678901234567890, 1e400, -1e400, 9007199254740992]");
    assert_non_null(v);
    v = v->child;
    assert_true(v->num == 0);
    v = v->next;
    assert_true(v->num == -0.5);
    v = v->next;
    assert_int_equal(tl_int(v, 0, 1000, &i), 0);
    assert_int_equal(i, 1000);
    v = v->next;
    assert_true(v->num == 2e-2);
    assert_string_equal(v->s, "2E-2");
    v = v->next;
    assert_int_equal(tl_int(v, 0, (int64_t)1 << 53, &i), -1);   /* out of the range given */
    v = v->next;
    assert_int_equal(tl_num(v, &d), -1);                        /* out of a double's */
    assert_string_equal(v->s, "1e400");
    v = v->next;
    assert_int_equal(tl_num(v, &d), -1);
    v = v->next;
    assert_int_equal(tl_int(v, 0, (int64_t)1 << 53, &i), 0);
    assert_int_equal(i, (int64_t)1 << 53);
    refused("NaN", "expected a value", 0);
    refused("[1, Infinity]", "expected a value", 4);
    refused("[-Infinity]", "a number without digits", 2);
    refused("01", "more after the value", 1);
    refused("1.", "a number without digits", 2);
    refused("1e", "a number without digits", 2);
    refused(".5", "expected a value", 0);
    refused("0x10", "more after the value", 1);
    refused("+1", "expected a value", 0);
}

static void test_refused(void **state)
{
    char deep[2 * TL_DEPTH_MAX + 8];
    struct tl_json small;
    struct tl_val *v;

    (void)state;
    refused("", "a value missing at the end", 0);
    refused("  ", "a value missing at the end", 2);
    refused("{\"a\":1,}", "expected a member's name", 7);
    refused("[1,]", "expected a value", 3);
    refused("[1 2]", "expected ',' or ']'", 3);
    refused("{\"a\" 1}", "expected ':'", 5);
    refused("{\"a\":1", "an object not ended", 6);
    refused("{'a':1}", "expected a member's name", 1);
    refused("{\"a\":tru}", "expected a value", 5);
    refused("{} {}", "more after the value", 3);
    /* Nested to the bound parses; one more does not. */
    memset(deep, '[', TL_DEPTH_MAX);
    memset(deep + TL_DEPTH_MAX, ']', TL_DEPTH_MAX);
    deep[2 * TL_DEPTH_MAX] = 0;
    assert_non_null(parse(deep));
    memset(deep, '[', TL_DEPTH_MAX + 1);
    memset(deep + TL_DEPTH_MAX + 1, ']', TL_DEPTH_MAX + 1);
    deep[2 * TL_DEPTH_MAX + 2] = 0;
    refused(deep, "nested too deep", TL_DEPTH_MAX);
    /* Arenas full: a refusal, not an overrun. */
    assert_int_equal(tl_json_init(&small, 8, 3), 0);
    assert_int_equal(tl_json_parse(&small, "[1,2]", 5, &v), 0);
    assert_int_equal(tl_json_parse(&small, "[1,2,3]", 7, &v), -1);
    assert_string_equal(small.err, "too many values");
    assert_int_equal(tl_json_parse(&small, "\"0123456789\"", 12, &v), -1);
    assert_string_equal(small.err, "too long");
    tl_json_free(&small);
}

static void test_write(void **state)
{
    static const char text[] = "{\"a\":[1.50,-2e3,true,false,null],"
                               "\"b\\n\":\"q\\\"\\\\\\u0001\xc3\xa9\",\"c\":{}}";
    char *out = NULL;
    size_t len = 0;
    FILE *f;

    (void)state;
    assert_non_null(f = open_memstream(&out, &len));
    tl_json_write(f, parse(text));
    fclose(f);
    assert_string_equal(out, text);
    free(out);
}

/* A file of text in a fresh temporary name, returned (free it). */
static char *file_of(const char *text)
{
    char *path = strdup("/tmp/test_tlread.XXXXXX");
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_file(void **state)
{
    struct tl_file t;
    struct tl_val *ev;
    const char *text;
    size_t len;
    char *path = file_of("{\"traceEvents\":[\r\n"
                         "{\"name\":\"a\",\"ph\":\"M\"},\r\n"
                         "\n"
                         "  {\"ph\":\"X\",\"name\":\"b\"} ,\n"
                         "{\"name\":\"c\"}\n" TAIL);
    int64_t n;

    (void)state;
    assert_int_equal(tl_open(&t, path), 0);
    assert_int_equal(tl_next(&t, &ev, &text, &len), 1);
    assert_true(tl_is(tl_get(ev, "name"), "a"));
    assert_int_equal(len, strlen("{\"name\":\"a\",\"ph\":\"M\"}"));
    assert_memory_equal(text, "{\"name\":\"a\",\"ph\":\"M\"}", len);
    assert_int_equal(tl_next(&t, &ev, &text, &len), 1);
    assert_true(tl_is(tl_get(ev, "ph"), "X"));
    assert_memory_equal(text, "{\"ph\":\"X\",\"name\":\"b\"}", len);
    assert_int_equal(t.line, 4);
    assert_int_equal(tl_next(&t, &ev, NULL, NULL), 1);
    assert_true(tl_is(tl_get(ev, "name"), "c"));
    assert_int_equal(tl_next(&t, &ev, NULL, NULL), 0);
    assert_true(tl_is(tl_get(t.other, "format"), TL_FORMAT));
    assert_int_equal(tl_int(tl_get(t.other, "dropped_events"), 0, 10, &n), 0);
    assert_int_equal(tl_next(&t, &ev, NULL, NULL), 0);
    tl_close(&t);
    unlink(path);
    free(path);
}

static void test_file_refused(void **state)
{
    static const struct { const char *text, *want; } bad[] = {
        { "", "empty, not a kvs timeline" },
        { "[]\n", ":1: not a kvs timeline" },
        { "{\"traceEvents\":[\n{\"name\":\"a\"},\nxyz\n" TAIL, ":3: neither an event" },
        { "{\"traceEvents\":[\n{\"name\":\"a\"},\n{\"name\":NaN}\n" TAIL,
          ":3: not a JSON event (at its byte 9): expected a value" },
        { "{\"traceEvents\":[\n{\"name\":\"a\"},\n{\"name\":\"b", ":3: cut short inside an event" },
        { "{\"traceEvents\":[\n{\"name\":\"a\"},\n", "cut short after line 2" },
        { "{\"traceEvents\":[\n]\n", "cut short after the event list (line 2)" },
        { "{\"traceEvents\":[\n],\"otherData\":{\"format\":\"kvs time",
          "cut short in its otherData" },
        { "{\"traceEvents\":[\n]}\n", "no otherData after the event list" },
        { "{\"traceEvents\":[\n],\"otherData\":[]}\n", "no otherData object" },
        { "{\"traceEvents\":[\n],\"otherData\":{\"format\":\"x\\u0001y\"}}\n",
          "otherData.format is \"x?y\", not \"kvs timeline 1\"" },
        { "{\"traceEvents\":[\n],\"otherData\":{}}\n", "otherData.format is missing" },
        { "{\"traceEvents\":[\n],\"otherData\":{\"format\":\"kvs timeline 1\"}} x\n",
          "not JSON: more after the value" },
    };

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *path = file_of(bad[i].text);
        struct tl_file t;
        struct tl_val *ev;
        int rc = tl_open(&t, path);

        while (rc >= 0 && (rc = tl_next(&t, &ev, NULL, NULL)) > 0)
            ;
        if (rc != -1 || !strstr(t.err, bad[i].want))
            fail_msg("case %zu: rc %d, '%s', not '%s'", i, rc, t.err, bad[i].want);
        tl_close(&t);
        unlink(path);
        free(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_event),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_write),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_file_refused),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
