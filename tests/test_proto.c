/*
 * test_proto.c - unit tests of the handshake's socket messages
 * (proto/head.c, hello.c): the hello a worker sends and the welcome kvsd
 * answers. Every message round-trips with its fields at their edge
 * values; every single-field corruption is refused with KVS_EPROTO; no
 * byte of an encoding is ignored by its decoder. Buffers are allocated
 * at their exact sizes so that AddressSanitizer sees any read past them.
 * The control messages and the first message's type are tested in
 * test_proto_ctl.c, the ring slots (SQE, CQE) in test_slots.c. Tests only
 * proto.h; never a socket or a store.
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

/* ---- helpers ------------------------------------------------------------ */

static void assert_hello_eq(const struct kvs__hello *a, const struct kvs__hello *b)
{
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->mode, b->mode);
    assert_int_equal(a->rank, b->rank);
    assert_int_equal(a->nworkers, b->nworkers);
    assert_string_equal(a->job, b->job);
    assert_int_equal(a->probe, b->probe);
    assert_memory_equal(a->cookie, b->cookie, sizeof a->cookie);
}

static int hello_rt(const struct kvs__hello *h, struct kvs__hello *out, struct kvs__err *e)
{
    unsigned char *b = exact(KVS__HELLO_BYTES);
    int rc;

    assert_int_equal(kvs__hello_encode(h, b), KVS__HELLO_BYTES);
    rc = kvs__hello_decode(b, KVS__HELLO_BYTES, out, e);
    free(b);
    return rc;
}

static void hello_bad(const struct kvs__hello *h, const char *detail)
{
    struct kvs__hello out;
    struct kvs__err e = { 0 };

    assert_int_equal(hello_rt(h, &out, &e), KVS_EPROTO);
    assert_int_equal(e.code, KVS_EPROTO);
    if (strstr(e.msg, detail) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", e.msg, detail);
}

static void assert_welcome_eq(const struct kvs__welcome *a, const struct kvs__welcome *b)
{
    assert_int_equal(a->version, b->version);
    assert_int_equal(a->status, b->status);
    assert_int_equal(a->worker, b->worker);
    assert_int_equal(a->control_size, b->control_size);
    assert_int_equal(a->seg_size, b->seg_size);
    assert_int_equal(a->arena_size, b->arena_size);
    assert_int_equal(a->sq_entries, b->sq_entries);
    assert_int_equal(a->cq_entries, b->cq_entries);
    assert_int_equal(a->staging_off, b->staging_off);
    assert_int_equal(a->staging_size, b->staging_size);
    assert_true(a->combine_size == b->combine_size);
    assert_true(a->resume_step == b->resume_step);
    assert_int_equal(a->flags, b->flags);
    assert_string_equal(a->msg, b->msg);
}

static int welcome_rt(const struct kvs__welcome *w, struct kvs__welcome *out,
                      struct kvs__err *e)
{
    unsigned char *b = exact(KVS__WELCOME_BYTES);
    int rc;

    assert_int_equal(kvs__welcome_encode(w, b), KVS__WELCOME_BYTES);
    rc = kvs__welcome_decode(b, KVS__WELCOME_BYTES, out, e);
    free(b);
    return rc;
}

static void welcome_bad(const struct kvs__welcome *w, const char *detail)
{
    struct kvs__welcome out;
    struct kvs__err e = { 0 };

    assert_int_equal(welcome_rt(w, &out, &e), KVS_EPROTO);
    if (strstr(e.msg, detail) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", e.msg, detail);
}

/* ---- hello -------------------------------------------------------------- */

static void test_hello_roundtrip(void **state)
{
    struct kvs__hello h = hello_ok(), out;
    struct kvs__err e = { 0 };

    (void)state;
    assert_int_equal(hello_rt(&h, &out, &e), 0);
    assert_hello_eq(&h, &out);

    /* Every field at its edges. */
    h.mode = KVS__MODE_ASYNC;
    h.nworkers = 1024;
    h.rank = 1023;
    fill(h.job, KVS__JOB_MAX, 'z');
    h.job[0] = 'A';
    h.job[1] = '9';
    h.job[2] = '_';
    h.job[3] = '-';
    h.job[4] = '.';
    assert_int_equal(hello_rt(&h, &out, &e), 0);
    assert_hello_eq(&h, &out);
    assert_int_equal(strlen(out.job), KVS__JOB_MAX);

    h.mode = KVS__MODE_SYNC;
    h.nworkers = 1;
    h.rank = 0;
    strcpy(h.job, "a");
    assert_int_equal(hello_rt(&h, &out, &e), 0);
    assert_hello_eq(&h, &out);

    /* A worker that offers kvsd its memory: where the cookie is. */
    h.probe = UINT64_MAX;
    memset(h.cookie, 0x7f, sizeof h.cookie);
    assert_int_equal(hello_rt(&h, &out, &e), 0);
    assert_hello_eq(&h, &out);
    h.probe = 0;                       /* a cookie without its place */
    hello_bad(&h, "cookie");
}

static void test_hello_fields(void **state)
{
    struct kvs__hello h;

    (void)state;
    h = hello_ok(); h.version = NEXT;       hello_bad(&h, NEXT_TEXT);
    h = hello_ok(); h.version = 0;          hello_bad(&h, "version 0");
    h = hello_ok(); h.mode = 0;             hello_bad(&h, "mode 0");
    h = hello_ok(); h.mode = 3;             hello_bad(&h, "mode 3");
    h = hello_ok(); h.rank = 4;             hello_bad(&h, "rank 4");
    h = hello_ok(); h.rank = 5;             hello_bad(&h, "rank 5");
    h = hello_ok(); h.rank = -1;            hello_bad(&h, "rank -1");
    h = hello_ok(); h.rank = INT32_MIN;     hello_bad(&h, "rank");
    h = hello_ok(); h.nworkers = 0; h.rank = 0;     hello_bad(&h, "0 workers");
    h = hello_ok(); h.nworkers = 1025; h.rank = 0;  hello_bad(&h, "1025 workers");
    h = hello_ok(); h.nworkers = -4; h.rank = 0;    hello_bad(&h, "-4 workers");
    h = hello_ok(); strcpy(h.job, "");      hello_bad(&h, "job");
    h = hello_ok(); strcpy(h.job, ".x");    hello_bad(&h, "job");
    h = hello_ok(); strcpy(h.job, "a/b");   hello_bad(&h, "job");
    h = hello_ok(); strcpy(h.job, "a b");   hello_bad(&h, "job");
    h = hello_ok(); strcpy(h.job, "a\xc3\xa9"); hello_bad(&h, "job");
}

static void test_hello_bytes(void **state)
{
    struct kvs__hello h = hello_ok(), out, before;
    struct kvs__err e = { 0 };
    unsigned char *b = exact(KVS__HELLO_BYTES), *big = exact(KVS__HELLO_BYTES + 1);
    size_t j;

    (void)state;
    kvs__hello_encode(&h, b);
    memset(&out, 0x5a, sizeof out);
    before = out;

    /* Lengths: one short, one long, empty. */
    assert_int_equal(kvs__hello_decode(b, KVS__HELLO_BYTES - 1, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "bytes"));
    memcpy(big, b, KVS__HELLO_BYTES);
    assert_int_equal(kvs__hello_decode(big, KVS__HELLO_BYTES + 1, &out, &e), KVS_EPROTO);
    assert_int_equal(kvs__hello_decode(b, 0, &out, &e), KVS_EPROTO);
    assert_int_equal(kvs__hello_decode(NULL, 0, &out, &e), KVS_EPROTO);
    assert_memory_equal(&out, &before, sizeof out);

    /* Magic and type: the head of the message. */
    b[0] ^= 1;
    assert_int_equal(kvs__hello_decode(b, KVS__HELLO_BYTES, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "magic"));
    b[0] ^= 1;
    b[4] = 2;
    assert_int_equal(kvs__hello_decode(b, KVS__HELLO_BYTES, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "type"));
    kvs__hello_encode(&h, b);

    /* A job name that fills its field with no NUL. */
    j = find(b, KVS__HELLO_BYTES, h.job);
    memset(b + j, 'a', KVS__JOB_MAX + 1);
    assert_int_equal(kvs__hello_decode(b, KVS__HELLO_BYTES, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "NUL"));
    /* Junk after the NUL. */
    kvs__hello_encode(&h, b);
    b[j + KVS__JOB_MAX] = 'x';
    assert_int_equal(kvs__hello_decode(b, KVS__HELLO_BYTES, &out, &e), KVS_EPROTO);
    assert_memory_equal(&out, &before, sizeof out);

    /* A welcome is not a hello. */
    {
        struct kvs__welcome w = welcome_ok();
        unsigned char *wb = exact(KVS__WELCOME_BYTES);

        kvs__welcome_encode(&w, wb);
        assert_int_equal(kvs__hello_decode(wb, KVS__HELLO_BYTES, &out, &e), KVS_EPROTO);
        assert_non_null(strstr(e.msg, "type"));
        free(wb);
    }
    free(big);
    free(b);
}

/* Every byte of a valid encoding matters: changing any one either gets the
 * message refused or changes the decoded struct. A decoder that skipped a
 * byte would let two encodings mean one thing. */
static void test_hello_every_byte(void **state)
{
    struct kvs__hello h = hello_ok(), out;
    unsigned char *b = exact(KVS__HELLO_BYTES);
    static const unsigned char flips[] = { 0x01, 0x80, 0xff };

    (void)state;
    for (size_t i = 0; i < KVS__HELLO_BYTES; i++) {
        for (size_t f = 0; f < sizeof flips; f++) {
            kvs__hello_encode(&h, b);
            b[i] ^= flips[f];
            if (kvs__hello_decode(b, KVS__HELLO_BYTES, &out, NULL) == 0 &&
                out.version == h.version && out.mode == h.mode && out.rank == h.rank &&
                out.nworkers == h.nworkers && strcmp(out.job, h.job) == 0 &&
                out.probe == h.probe && memcmp(out.cookie, h.cookie, sizeof h.cookie) == 0)
                fail_msg("byte %zu ^ 0x%02x is ignored", i, flips[f]);
        }
    }
    free(b);
}

/* ---- welcome ------------------------------------------------------------ */

static void test_welcome_roundtrip(void **state)
{
    struct kvs__welcome w = welcome_ok(), out;
    struct kvs__err e = { 0 };
    static const int32_t refusals[] = { -1, -4095, -30000, -30999, KVS_EPROTO };

    (void)state;
    assert_int_equal(welcome_rt(&w, &out, &e), 0);
    assert_welcome_eq(&w, &out);

    w.worker = UINT32_MAX;
    w.control_size = UINT64_MAX;
    w.seg_size = UINT64_MAX;
    w.arena_size = UINT64_MAX;
    w.staging_off = UINT64_MAX - 5;
    w.staging_size = 5;
    w.sq_entries = 1u << 31;
    w.cq_entries = 1;
    fill(w.msg, KVS__MSG_MAX - 1, 'm');
    assert_int_equal(welcome_rt(&w, &out, &e), 0);
    assert_welcome_eq(&w, &out);

    w = welcome_ok();
    w.flags = KVS__WELCOME_REMOTE;
    assert_int_equal(welcome_rt(&w, &out, &e), 0);
    assert_int_equal(out.flags, KVS__WELCOME_REMOTE);
    w.flags = KVS__WELCOME_COMBINE;    /* a combine area, of some size */
    w.combine_size = (uint64_t)1 << 40;
    assert_int_equal(welcome_rt(&w, &out, &e), 0);
    assert_int_equal(out.flags, KVS__WELCOME_COMBINE);
    assert_true(out.combine_size == (uint64_t)1 << 40);
    w.combine_size = 0;                /* the flag without a size */
    assert_int_equal(welcome_rt(&w, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "combine area"));
    w.flags = 0;                       /* a size without the flag */
    w.combine_size = 4096;
    assert_int_equal(welcome_rt(&w, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "combine area"));
    w.combine_size = 0;
    w.flags = 8;                       /* unknown */
    assert_int_equal(welcome_rt(&w, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "reserved"));
    w = welcome_ok();                  /* a job that recovers, with a snapshot */
    w.flags = KVS__WELCOME_RECOVER;
    w.resume_step = INT64_MAX;
    assert_int_equal(welcome_rt(&w, &out, &e), 0);
    assert_welcome_eq(&w, &out);
    w.resume_step = -2;
    assert_int_equal(welcome_rt(&w, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "resume step"));

    w = welcome_ok();
    w.staging_off = 0;
    w.staging_size = w.seg_size;
    assert_int_equal(welcome_rt(&w, &out, &e), 0);
    assert_welcome_eq(&w, &out);

    /* Refusals carry a message and no geometry. */
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        memset(&w, 0, sizeof w);
        w.version = KVS__PROTO_VERSION;
        w.status = refusals[i];
        strcpy(w.msg, "job \"x\" has 4 workers, not 8");
        assert_int_equal(welcome_rt(&w, &out, &e), 0);
        assert_welcome_eq(&w, &out);
    }
}

static void test_welcome_fields(void **state)
{
    struct kvs__welcome w;
    struct kvs__welcome out;
    struct kvs__err e = { 0 };
    unsigned char *b = exact(KVS__WELCOME_BYTES);
    size_t j;

    (void)state;
    w = welcome_ok(); w.version = NEXT;         welcome_bad(&w, NEXT_TEXT);
    w = welcome_ok(); w.status = 1;             welcome_bad(&w, "status 1");
    w = welcome_ok(); w.status = -5000;         welcome_bad(&w, "status -5000");
    w = welcome_ok(); w.status = -4096;         welcome_bad(&w, "status -4096");
    w = welcome_ok(); w.status = -29999;        welcome_bad(&w, "status -29999");
    w = welcome_ok(); w.status = -31000;        welcome_bad(&w, "status -31000");
    w = welcome_ok(); w.status = INT32_MIN;     welcome_bad(&w, "status");
    w = welcome_ok(); w.sq_entries = 3;         welcome_bad(&w, "powers of two");
    w = welcome_ok(); w.cq_entries = 0;         welcome_bad(&w, "powers of two");
    w = welcome_ok(); w.arena_size = 0;         welcome_bad(&w, "size 0");
    w = welcome_ok(); w.staging_size += 1;      welcome_bad(&w, "staging");
    w = welcome_ok(); w.staging_off = UINT64_MAX; w.staging_size = 1;
    welcome_bad(&w, "staging");

    /* Message without its NUL, lengths, magic. */
    w = welcome_ok();
    strcpy(w.msg, "hi");
    kvs__welcome_encode(&w, b);
    j = find(b, KVS__WELCOME_BYTES, "hi");
    memset(b + j, 'q', KVS__MSG_MAX);
    assert_int_equal(kvs__welcome_decode(b, KVS__WELCOME_BYTES, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "NUL"));
    kvs__welcome_encode(&w, b);
    assert_int_equal(kvs__welcome_decode(b, KVS__WELCOME_BYTES - 1, &out, &e), KVS_EPROTO);
    assert_int_equal(kvs__welcome_decode(b, 11, &out, &e), KVS_EPROTO);
    b[3] ^= 0x40;
    assert_int_equal(kvs__welcome_decode(b, KVS__WELCOME_BYTES, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "magic"));
    free(b);
    b = exact(KVS__WELCOME_BYTES + 1);
    kvs__welcome_encode(&w, b);
    assert_int_equal(kvs__welcome_decode(b, KVS__WELCOME_BYTES + 1, &out, &e), KVS_EPROTO);
    free(b);
}

static void test_welcome_every_byte(void **state)
{
    struct kvs__welcome w = welcome_ok(), out;
    unsigned char *b = exact(KVS__WELCOME_BYTES);
    struct kvs__err e;

    (void)state;
    strcpy(w.msg, "ok");
    for (size_t i = 0; i < KVS__WELCOME_BYTES; i++) {
        for (unsigned f = 1; f < 256; f <<= 1) {
            kvs__welcome_encode(&w, b);
            b[i] ^= (unsigned char)f;
            if (kvs__welcome_decode(b, KVS__WELCOME_BYTES, &out, &e) == 0 &&
                memcmp(&out.status, &w.status, sizeof w.status) == 0 &&
                out.worker == w.worker && out.control_size == w.control_size &&
                out.seg_size == w.seg_size && out.arena_size == w.arena_size &&
                out.sq_entries == w.sq_entries && out.cq_entries == w.cq_entries &&
                out.staging_off == w.staging_off && out.staging_size == w.staging_size &&
                out.flags == w.flags && out.resume_step == w.resume_step &&
                strcmp(out.msg, w.msg) == 0)
                fail_msg("byte %zu ^ 0x%02x is ignored", i, f);
        }
    }
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_roundtrip),
        cmocka_unit_test(test_hello_fields),
        cmocka_unit_test(test_hello_bytes),
        cmocka_unit_test(test_hello_every_byte),
        cmocka_unit_test(test_welcome_roundtrip),
        cmocka_unit_test(test_welcome_fields),
        cmocka_unit_test(test_welcome_every_byte),
    };
    return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
