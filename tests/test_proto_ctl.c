/*
 * test_proto_ctl.c - unit tests of the control messages (proto/head.c,
 * ctl.c) that kvsctl and kvsrun exchange with kvsd: the control request
 * and reply, the reply's text (printable UTF-8 only, and the escape that
 * makes any key name or message such a text), and the first message's
 * type, by which kvsd tells a control request from a hello. Every message
 * round-trips with its fields at their edge values; every single-field
 * corruption is refused with KVS_EPROTO; no byte of an encoding is
 * ignored by its decoder. Buffers are allocated at their exact sizes so
 * that AddressSanitizer sees any read past them. The handshake (hello,
 * welcome) is tested in test_proto.c. Tests only proto.h; never a socket
 * or a store.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/proto.h"
#include "protoutil.h"

/* ---- control request ---------------------------------------------------- */

static struct kvs__ctl_request ctlq_ok(int command)
{
    struct kvs__ctl_request q;

    memset(&q, 0, sizeof q);
    q.version = KVS__PROTO_VERSION;
    q.command = (uint8_t)command;
    strcpy(q.job, "train-1");
    return q;
}

static int ctlq_rt(const struct kvs__ctl_request *q, struct kvs__ctl_request *out,
                   struct kvs__err *e)
{
    unsigned char *b = exact(KVS__CTL_REQUEST_BYTES);
    int rc;

    assert_int_equal(kvs__ctl_request_encode(q, b), KVS__CTL_REQUEST_BYTES);
    rc = kvs__ctl_request_decode(b, KVS__CTL_REQUEST_BYTES, out, e);
    free(b);
    return rc;
}

static void ctlq_good(const struct kvs__ctl_request *q)
{
    struct kvs__ctl_request out;
    struct kvs__err e = { 0 };

    memset(&out, 0x5a, sizeof out);
    if (ctlq_rt(q, &out, &e) != 0)
        fail_msg("command %d, job \"%s\": %s", q->command, q->job, e.msg);
    assert_int_equal(out.version, q->version);
    assert_int_equal(out.command, q->command);
    assert_string_equal(out.job, q->job);
}

static void ctlq_bad(const struct kvs__ctl_request *q, const char *detail)
{
    struct kvs__ctl_request out, before;
    struct kvs__err e = { 0 };

    memset(&out, 0x5a, sizeof out);
    before = out;
    assert_int_equal(ctlq_rt(q, &out, &e), KVS_EPROTO);
    assert_int_equal(e.code, KVS_EPROTO);
    if (strstr(e.msg, detail) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", e.msg, detail);
    assert_memory_equal(&out, &before, sizeof out);
}

static void test_ctl_request_roundtrip(void **state)
{
    struct kvs__ctl_request q;

    (void)state;
    for (int c = KVS__CTL_STATUS; c <= KVS__CTL_CHECKPOINT; c++) {
        q = ctlq_ok(c);
        ctlq_good(&q);
        assert_non_null(kvs__ctl_command_name(c));
    }
    assert_string_equal(kvs__ctl_command_name(KVS__CTL_STATUS), "status");
    assert_string_equal(kvs__ctl_command_name(KVS__CTL_KEYS), "keys");
    assert_string_equal(kvs__ctl_command_name(KVS__CTL_STATS), "stats");
    assert_string_equal(kvs__ctl_command_name(KVS__CTL_STOP), "stop");
    assert_string_equal(kvs__ctl_command_name(KVS__CTL_SAMPLE), "sample");
    assert_string_equal(kvs__ctl_command_name(KVS__CTL_STATS_SHORT), "stats-short");
    assert_string_equal(kvs__ctl_command_name(KVS__CTL_CHECKPOINT), "checkpoint");
    assert_null(kvs__ctl_command_name(0));
    assert_null(kvs__ctl_command_name(KVS__CTL_GONE + 1));

    /* gone carries a rank and an exit code; no other command does. */
    assert_string_equal(kvs__ctl_command_name(KVS__CTL_GONE), "gone");
    {
        struct kvs__ctl_request out;
        struct kvs__err e = { 0 };

        q = ctlq_ok(KVS__CTL_GONE);
        q.rank = 1023;
        q.code = 137;
        assert_int_equal(ctlq_rt(&q, &out, &e), 0);
        assert_int_equal(out.command, KVS__CTL_GONE);
        assert_int_equal(out.rank, 1023);
        assert_int_equal(out.code, 137);
        q.rank = -1;
        ctlq_bad(&q, "gone of rank -1");
        q.rank = 0;
        q.code = 256;
        ctlq_bad(&q, "a code 0..255");
        q = ctlq_ok(KVS__CTL_STATUS);
        q.rank = 2;
        ctlq_bad(&q, "reserved bytes");
        q = ctlq_ok(KVS__CTL_STATUS);
        q.code = 1;
        ctlq_bad(&q, "reserved bytes");
    }

    /* Job names at their edges. */
    q = ctlq_ok(KVS__CTL_KEYS);
    fill(q.job, KVS__JOB_MAX, 'z');
    memcpy(q.job, "A9_-.", 5);
    ctlq_good(&q);
    strcpy(q.job, "a");
    ctlq_good(&q);
}

static void test_ctl_request_fields(void **state)
{
    struct kvs__ctl_request q;

    (void)state;
    q = ctlq_ok(KVS__CTL_STATUS); q.version = NEXT;     ctlq_bad(&q, NEXT_TEXT);
    q = ctlq_ok(KVS__CTL_STATUS); q.version = 0;        ctlq_bad(&q, "version 0");
    q = ctlq_ok(0);                                     ctlq_bad(&q, "command 0");
    q = ctlq_ok(KVS__CTL_GONE + 1);                     ctlq_bad(&q, "command 9");
    q = ctlq_ok(255);                                   ctlq_bad(&q, "command 255");
    q = ctlq_ok(KVS__CTL_STATUS); strcpy(q.job, "");    ctlq_bad(&q, "job");
    q = ctlq_ok(KVS__CTL_STATUS); strcpy(q.job, ".x");  ctlq_bad(&q, "job");
    q = ctlq_ok(KVS__CTL_STATUS); strcpy(q.job, "a/b"); ctlq_bad(&q, "job");
    q = ctlq_ok(KVS__CTL_STATUS); strcpy(q.job, "a\xc3\xa9"); ctlq_bad(&q, "job");
}

static void test_ctl_request_bytes(void **state)
{
    struct kvs__ctl_request q = ctlq_ok(KVS__CTL_STATS), out, before;
    struct kvs__hello h;
    struct kvs__err e = { 0 };
    unsigned char *b = exact(KVS__CTL_REQUEST_BYTES), *big = exact(KVS__CTL_REQUEST_BYTES + 1);
    size_t j;

    (void)state;
    kvs__ctl_request_encode(&q, b);
    memset(&out, 0x5a, sizeof out);
    before = out;

    /* Lengths: one short, one long, a head only, empty, none. */
    assert_int_equal(kvs__ctl_request_decode(b, KVS__CTL_REQUEST_BYTES - 1, &out, &e),
                     KVS_EPROTO);
    assert_non_null(strstr(e.msg, "bytes"));
    memcpy(big, b, KVS__CTL_REQUEST_BYTES);
    assert_int_equal(kvs__ctl_request_decode(big, KVS__CTL_REQUEST_BYTES + 1, &out, &e),
                     KVS_EPROTO);
    assert_int_equal(kvs__ctl_request_decode(b, 12, &out, &e), KVS_EPROTO);
    assert_int_equal(kvs__ctl_request_decode(b, 0, &out, &e), KVS_EPROTO);
    assert_int_equal(kvs__ctl_request_decode(NULL, 0, &out, &e), KVS_EPROTO);
    assert_memory_equal(&out, &before, sizeof out);

    /* Magic; and the type tells a control request from a hello both ways
     * (their lengths are not what tells them apart). */
    b[1] ^= 0x10;
    assert_int_equal(kvs__ctl_request_decode(b, KVS__CTL_REQUEST_BYTES, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "magic"));
    kvs__ctl_request_encode(&q, b);
    assert_int_equal(kvs__hello_decode(b, KVS__CTL_REQUEST_BYTES, &h, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "type"));
    h = hello_ok();
    {
        unsigned char *hb = exact(KVS__HELLO_BYTES);

        kvs__hello_encode(&h, hb);
        assert_int_equal(kvs__ctl_request_decode(hb, KVS__CTL_REQUEST_BYTES, &out, &e),
                         KVS_EPROTO);
        assert_non_null(strstr(e.msg, "type"));
        free(hb);
    }

    /* A job name that fills its field with no NUL, then junk after it. */
    kvs__ctl_request_encode(&q, b);
    j = find(b, KVS__CTL_REQUEST_BYTES, q.job);
    memset(b + j, 'a', KVS__JOB_MAX + 1);
    assert_int_equal(kvs__ctl_request_decode(b, KVS__CTL_REQUEST_BYTES, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "NUL"));
    kvs__ctl_request_encode(&q, b);
    b[j + KVS__JOB_MAX] = 'x';
    assert_int_equal(kvs__ctl_request_decode(b, KVS__CTL_REQUEST_BYTES, &out, &e), KVS_EPROTO);

    /* The last byte is reserved. */
    kvs__ctl_request_encode(&q, b);
    b[KVS__CTL_REQUEST_BYTES - 1] = 1;
    assert_int_equal(kvs__ctl_request_decode(b, KVS__CTL_REQUEST_BYTES, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "reserved"));
    assert_memory_equal(&out, &before, sizeof out);
    free(big);
    free(b);
}

static void test_ctl_request_every_byte(void **state)
{
    struct kvs__ctl_request q = ctlq_ok(KVS__CTL_KEYS), out;
    unsigned char *b = exact(KVS__CTL_REQUEST_BYTES);

    (void)state;
    for (size_t i = 0; i < KVS__CTL_REQUEST_BYTES; i++) {
        for (unsigned f = 1; f < 256; f <<= 1) {
            kvs__ctl_request_encode(&q, b);
            b[i] ^= (unsigned char)f;
            if (kvs__ctl_request_decode(b, KVS__CTL_REQUEST_BYTES, &out, NULL) == 0 &&
                out.version == q.version && out.command == q.command &&
                strcmp(out.job, q.job) == 0)
                fail_msg("byte %zu ^ 0x%02x is ignored", i, f);
        }
    }
    free(b);
}

/* The first message's type, as kvsd reads it to choose a decoder. */
static void test_msg_type(void **state)
{
    unsigned char *b = exact(KVS__WELCOME_BYTES);
    struct kvs__hello h = hello_ok();
    struct kvs__welcome w = welcome_ok();
    struct kvs__ctl_request q = ctlq_ok(KVS__CTL_STOP);
    struct kvs__ctl_reply *r = calloc(1, sizeof *r);

    (void)state;
    assert_non_null(r);
    kvs__hello_encode(&h, b);
    assert_int_equal(kvs__msg_type(b, KVS__HELLO_BYTES), KVS__MSG_HELLO);
    kvs__welcome_encode(&w, b);
    assert_int_equal(kvs__msg_type(b, KVS__WELCOME_BYTES), KVS__MSG_WELCOME);
    kvs__ctl_request_encode(&q, b);
    assert_int_equal(kvs__msg_type(b, KVS__CTL_REQUEST_BYTES), KVS__MSG_CTL_REQUEST);
    /* Five bytes are enough to tell; four are not. */
    assert_int_equal(kvs__msg_type(b, 5), KVS__MSG_CTL_REQUEST);
    assert_int_equal(kvs__msg_type(b, 4), 0);
    assert_int_equal(kvs__msg_type(NULL, 96), 0);
    b[0] ^= 1;
    assert_int_equal(kvs__msg_type(b, KVS__CTL_REQUEST_BYTES), 0);
    r->version = KVS__PROTO_VERSION;
    assert_int_equal(kvs__ctl_reply_encode(r, b), KVS__CTL_REPLY_HEAD);
    assert_int_equal(kvs__msg_type(b, KVS__CTL_REPLY_HEAD), KVS__MSG_CTL_REPLY);
    free(r);
    free(b);
}

/* ---- control reply ------------------------------------------------------ */

/* Encodes r into an exact buffer, decodes it into a fresh struct. */
static int ctlr_rt(const struct kvs__ctl_reply *r, struct kvs__ctl_reply *out,
                   struct kvs__err *e)
{
    size_t n = KVS__CTL_REPLY_HEAD + (size_t)r->len;
    unsigned char *b = exact(n);
    int rc;

    assert_int_equal(kvs__ctl_reply_encode(r, b), n);
    rc = kvs__ctl_reply_decode(b, n, out, e);
    free(b);
    return rc;
}

static struct kvs__ctl_reply *ctlr_new(int32_t status, const char *text)
{
    struct kvs__ctl_reply *r = calloc(1, sizeof *r);

    assert_non_null(r);
    r->version = KVS__PROTO_VERSION;
    r->status = status;
    r->len = (uint32_t)strlen(text);
    memcpy(r->text, text, r->len);
    return r;
}

static void ctlr_good(const struct kvs__ctl_reply *r)
{
    struct kvs__ctl_reply *out = malloc(sizeof *out);
    struct kvs__err e = { 0 };

    assert_non_null(out);
    memset(out, 0x5a, sizeof *out);
    if (ctlr_rt(r, out, &e) != 0)
        fail_msg("reply of %u bytes: %s", (unsigned)r->len, e.msg);
    assert_int_equal(out->version, r->version);
    assert_int_equal(out->status, r->status);
    assert_int_equal(out->len, r->len);
    assert_memory_equal(out->text, r->text, r->len);
    assert_int_equal(out->text[r->len], '\0');
    free(out);
}

/* Decodes the n bytes of b and expects a refusal naming detail, with the
 * output struct untouched. */
static void ctlr_bytes_bad(const unsigned char *b, size_t n, const char *detail)
{
    struct kvs__ctl_reply *out = malloc(sizeof *out), *before = malloc(sizeof *before);
    unsigned char *m = exact(n ? n : 1);
    struct kvs__err e = { 0 };

    assert_non_null(out);
    assert_non_null(before);
    memcpy(m, b, n);
    memset(out, 0x5a, sizeof *out);
    memcpy(before, out, sizeof *out);
    assert_int_equal(kvs__ctl_reply_decode(m, n, out, &e), KVS_EPROTO);
    assert_int_equal(e.code, KVS_EPROTO);
    if (strstr(e.msg, detail) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", e.msg, detail);
    assert_memory_equal(out, before, sizeof *out);
    free(m);
    free(before);
    free(out);
}

static void ctlr_text_bad(const char *text, size_t n, const char *why)
{
    struct kvs__ctl_reply *r = ctlr_new(0, "");
    unsigned char *b = exact(KVS__CTL_REPLY_HEAD + n);

    memcpy(r->text, text, n);
    r->len = (uint32_t)n;
    assert_int_equal(kvs__ctl_reply_encode(r, b), KVS__CTL_REPLY_HEAD + n);
    if (kvs__ctl_reply_decode(b, KVS__CTL_REPLY_HEAD + n, r, NULL) == 0)
        fail_msg("a text with %s is accepted", why);
    ctlr_bytes_bad(b, KVS__CTL_REPLY_HEAD + n, "not printable UTF-8");
    free(b);
    free(r);
}

static void test_ctl_reply_roundtrip(void **state)
{
    static const int32_t refusals[] = { -1, -4095, -30000, -30999, KVS_EBADARG };
    struct kvs__ctl_reply *r;

    (void)state;
    r = ctlr_new(0, "job: train-1\nmode: sync\n\tworkers: 2\n");
    ctlr_good(r);
    free(r);
    /* Empty; every length of multi-byte UTF-8, the first above the C1
     * controls and the last of Unicode. */
    r = ctlr_new(0, "");
    ctlr_good(r);
    free(r);
    r = ctlr_new(0, "\xc2\xa0 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf ~");
    ctlr_good(r);
    free(r);
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        r = ctlr_new(refusals[i], "this kvsd serves job 'a', not 'b'");
        ctlr_good(r);
        free(r);
    }

    /* The longest text, ending in a 4-byte character. */
    r = ctlr_new(0, "");
    memset(r->text, 'x', KVS__CTL_TEXT_MAX);
    memcpy(r->text + KVS__CTL_TEXT_MAX - 4, "\xf0\x9f\x98\x80", 4);
    r->len = KVS__CTL_TEXT_MAX;
    ctlr_good(r);

    /* One byte more is not encoded at all. */
    {
        unsigned char *b = exact(KVS__CTL_REPLY_MAX + 1);

        r->len = KVS__CTL_TEXT_MAX + 1;
        assert_int_equal(kvs__ctl_reply_encode(r, b), 0);
        free(b);
    }
    free(r);
}

static void test_ctl_reply_fields(void **state)
{
    struct kvs__ctl_reply *r = ctlr_new(0, "hello");
    size_t n = KVS__CTL_REPLY_HEAD + 5;
    unsigned char *b = exact(KVS__CTL_REPLY_MAX + 8), *m = exact(KVS__CTL_REPLY_MAX + 8);
    static const int32_t bad_status[] = { 1, -4096, -5000, -29999, -31000, INT32_MIN,
                                          INT32_MAX };

    (void)state;
    assert_int_equal(kvs__ctl_reply_encode(r, b), n);

    /* Lengths: shorter or longer than the head says, no text, a head cut. */
    ctlr_bytes_bad(b, n - 1, "expected 29");
    memcpy(m, b, n);
    m[n] = 'x';
    ctlr_bytes_bad(m, n + 1, "expected 29");
    ctlr_bytes_bad(b, KVS__CTL_REPLY_HEAD, "expected 29");
    ctlr_bytes_bad(b, KVS__CTL_REPLY_HEAD - 1, "bytes");
    ctlr_bytes_bad(b, 11, "bytes");
    ctlr_bytes_bad(b, 0, "bytes");
    {
        struct kvs__ctl_reply *out = malloc(sizeof *out);
        struct kvs__err e = { 0 };

        assert_non_null(out);
        assert_int_equal(kvs__ctl_reply_decode(NULL, 0, out, &e), KVS_EPROTO);
        free(out);
    }

    /* A text longer than any reply may hold, even with the bytes there. */
    r->len = KVS__CTL_TEXT_MAX;
    memset(r->text, 'y', KVS__CTL_TEXT_MAX);
    assert_int_equal(kvs__ctl_reply_encode(r, m), KVS__CTL_REPLY_MAX);
    m[16] = (unsigned char)((KVS__CTL_TEXT_MAX + 1) & 0xff);
    m[17] = (unsigned char)((KVS__CTL_TEXT_MAX + 1) >> 8);
    m[KVS__CTL_REPLY_MAX] = 'y';
    ctlr_bytes_bad(m, KVS__CTL_REPLY_MAX + 1, "at most 60000");
    m[19] = 0x80;                      /* a length near 2^32: no overflow of head + len */
    ctlr_bytes_bad(m, KVS__CTL_REPLY_MAX + 1, "at most 60000");
    free(r);

    /* Status, version, magic, type, reserved bytes. */
    for (size_t i = 0; i < sizeof bad_status / sizeof bad_status[0]; i++) {
        char want[32];

        r = ctlr_new(bad_status[i], "x");
        kvs__ctl_reply_encode(r, m);
        snprintf(want, sizeof want, "status %d", (int)bad_status[i]);
        ctlr_bytes_bad(m, KVS__CTL_REPLY_HEAD + 1, want);
        free(r);
    }
    r = ctlr_new(0, "x");
    r->version = NEXT;
    kvs__ctl_reply_encode(r, m);
    ctlr_bytes_bad(m, KVS__CTL_REPLY_HEAD + 1, NEXT_TEXT);
    r->version = KVS__PROTO_VERSION;
    kvs__ctl_reply_encode(r, m);
    m[2] ^= 4;
    ctlr_bytes_bad(m, KVS__CTL_REPLY_HEAD + 1, "magic");
    kvs__ctl_reply_encode(r, m);
    m[4] = KVS__MSG_WELCOME;
    ctlr_bytes_bad(m, KVS__CTL_REPLY_HEAD + 1, "type");
    for (size_t off = 5; off < 8; off++) {
        kvs__ctl_reply_encode(r, m);
        m[off] = 0x20;
        ctlr_bytes_bad(m, KVS__CTL_REPLY_HEAD + 1, "reserved");
    }
    for (size_t off = 20; off < 24; off++) {
        kvs__ctl_reply_encode(r, m);
        m[off] = 1;
        ctlr_bytes_bad(m, KVS__CTL_REPLY_HEAD + 1, "reserved");
    }
    /* A welcome is not a reply. */
    {
        struct kvs__welcome w = welcome_ok();

        kvs__welcome_encode(&w, m);
        ctlr_bytes_bad(m, KVS__WELCOME_BYTES, "type");
    }
    free(r);
    free(m);
    free(b);
}

/* What the text may hold: printable UTF-8, tab and newline, and nothing a
 * terminal would take for a command. */
static void test_ctl_reply_text(void **state)
{
    static const struct {
        const char *s;
        size_t n;
        const char *why;
    } bad[] = {
        { "a\0b", 3, "NUL" },
        { "\x01", 1, "C0 control" },
        { "\x1b[2J", 4, "escape (C0)" },
        { "\r\n", 2, "carriage return" },
        { "\x7f", 1, "DEL" },
        { "\xc2\x80", 2, "C1 control U+0080" },
        { "\xc2\x9b", 2, "C1 CSI U+009B" },
        { "\xc2\x9f", 2, "C1 control U+009F" },
        { "\x80", 1, "lone continuation byte" },
        { "\xbf", 1, "lone continuation byte" },
        { "\xc0\xaf", 2, "overlong '/'" },
        { "\xc1\xbf", 2, "overlong" },
        { "\xe0\x80\xaf", 3, "overlong 3-byte" },
        { "\xe0\x9f\xbf", 3, "overlong 3-byte" },
        { "\xf0\x8f\xbf\xbf", 4, "overlong 4-byte" },
        { "\xed\xa0\x80", 3, "surrogate U+D800" },
        { "\xed\xbf\xbf", 3, "surrogate U+DFFF" },
        { "\xf4\x90\x80\x80", 4, "above U+10FFFF" },
        { "\xf5\x80\x80\x80", 4, "lead 0xf5" },
        { "\xff", 1, "0xff" },
        { "ok \xc3", 4, "cut at the end" },
        { "\xe2\x82", 2, "cut 3-byte" },
        { "\xf0\x9f\x98", 3, "cut 4-byte" },
        { "\xe2\x28\xac", 3, "bad continuation" },
    };

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ctlr_text_bad(bad[i].s, bad[i].n, bad[i].why);

    /* kvs__ctl_text_char itself: lengths, and n that cuts a character. */
    assert_int_equal(kvs__ctl_text_char("a", 1), 1);
    assert_int_equal(kvs__ctl_text_char("\t", 1), 1);
    assert_int_equal(kvs__ctl_text_char("\n", 1), 1);
    assert_int_equal(kvs__ctl_text_char(" ", 1), 1);
    assert_int_equal(kvs__ctl_text_char("~", 1), 1);
    assert_int_equal(kvs__ctl_text_char("\xc2\xa0", 2), 2);
    assert_int_equal(kvs__ctl_text_char("\xdf\xbf", 2), 2);
    assert_int_equal(kvs__ctl_text_char("\xe0\xa0\x80", 3), 3);
    assert_int_equal(kvs__ctl_text_char("\xee\x80\x80", 3), 3);
    assert_int_equal(kvs__ctl_text_char("\xf0\x90\x80\x80", 4), 4);
    assert_int_equal(kvs__ctl_text_char("\xf0\x90\x80\x80", 3), 0);
    assert_int_equal(kvs__ctl_text_char("\xc3\xa9", 1), 0);
    assert_int_equal(kvs__ctl_text_char("a", 0), 0);
    assert_int_equal(kvs__ctl_text_char(NULL, 4), 0);
}

/* What kvsd writes a key name or a message with: whatever goes in, what
 * comes out is a text a reply may hold. */
static void test_ctl_text_escape(void **state)
{
    static const struct {
        const char *in;
        size_t n;
        int quote;
        const char *out;
    } cases[] = {
        { "status: ok\n", 11, 0, "status: ok\n" },
        { "\x1b[1mbold", 8, 0, "\\x1b[1mbold" },
        { "a\0b", 3, 0, "a\\x00b" },
        { "caf\xc3\xa9 \xff\xc2\x9b", 9, 0, "caf\xc3\xa9 \\xff\\xc2\\x9b" },
        { "a\"b\\c\td\ne", 9, 1, "a\\\"b\\\\c\\td\\ne" },
        { "a\"b\\c\td\ne", 9, 0, "a\"b\\c\td\ne" },
        { "\xed\xa0\x80", 3, 1, "\\xed\\xa0\\x80" },
    };
    char buf[64];

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = kvs__ctl_text_escape(buf, sizeof buf, cases[i].in, cases[i].n, cases[i].quote);

        assert_string_equal(buf, cases[i].out);
        assert_int_equal(n, strlen(cases[i].out));
        for (size_t j = 0, k; j < n; j += k)
            assert_int_not_equal(k = kvs__ctl_text_char(buf + j, n - j), 0);
    }
    /* A character that does not fit whole is left out, with what follows. */
    assert_int_equal(kvs__ctl_text_escape(buf, 4, "abcdef", 6, 0), 3);
    assert_string_equal(buf, "abc");
    assert_int_equal(kvs__ctl_text_escape(buf, 3, "a\xc3\xa9", 3, 0), 1);
    assert_string_equal(buf, "a");
    assert_int_equal(kvs__ctl_text_escape(buf, 4, "\x01", 1, 0), 0);
    assert_string_equal(buf, "");
    assert_int_equal(kvs__ctl_text_escape(buf, 1, "abc", 3, 0), 0);
    assert_string_equal(buf, "");
}

static void test_ctl_reply_every_byte(void **state)
{
    struct kvs__ctl_reply *r = ctlr_new(KVS_ENOKEY, "key 7: caf\xc3\xa9\n");
    struct kvs__ctl_reply *out = malloc(sizeof *out);
    size_t n = KVS__CTL_REPLY_HEAD + r->len;
    unsigned char *b = exact(n);

    (void)state;
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        for (unsigned f = 1; f < 256; f <<= 1) {
            kvs__ctl_reply_encode(r, b);
            b[i] ^= (unsigned char)f;
            if (kvs__ctl_reply_decode(b, n, out, NULL) == 0 && out->version == r->version &&
                out->status == r->status && out->len == r->len &&
                memcmp(out->text, r->text, r->len) == 0)
                fail_msg("byte %zu ^ 0x%02x is ignored", i, f);
        }
    }
    free(b);
    free(out);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctl_request_roundtrip),
        cmocka_unit_test(test_ctl_request_fields),
        cmocka_unit_test(test_ctl_request_bytes),
        cmocka_unit_test(test_ctl_request_every_byte),
        cmocka_unit_test(test_msg_type),
        cmocka_unit_test(test_ctl_reply_roundtrip),
        cmocka_unit_test(test_ctl_reply_fields),
        cmocka_unit_test(test_ctl_reply_text),
        cmocka_unit_test(test_ctl_text_escape),
        cmocka_unit_test(test_ctl_reply_every_byte),
    };
    return cmocka_run_group_tests_name("proto_ctl", tests, NULL, NULL);
}
