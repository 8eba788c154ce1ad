/*
 * test_wire.c - the frames between hosts (src/proto/wire_*.c): every message
 * round-trips, and the decoders refuse what a broken or hostile peer
 * could send, with a detail that says what was wrong; the most a message
 * may carry within what a job declared. Their fuzzing is in
 * fuzz_proto.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/wire.h"

static void test_head_round_trip(void **state)
{
    struct kvs__frame_head h = { KVS__FRAME_CHALLENGE, 3, 64 }, out;
    struct kvs__err e = { 0, "" };
    unsigned char buf[KVS__WIRE_HEAD];

    (void)state;
    kvs__frame_head_encode(&h, buf);
    assert_int_equal(kvs__frame_head_decode(buf, sizeof buf, 4, &out, &e), 0);
    assert_int_equal(out.type, KVS__FRAME_CHALLENGE);
    assert_int_equal(out.host, 3);
    assert_int_equal(out.len, 64);
    assert_int_equal(kvs__frame_head_decode(buf, sizeof buf, 0, &out, &e), 0);
}

/* One refusal: KVS_EPROTO, and the detail holds `says`. */
static void refused(const unsigned char *buf, size_t len, uint32_t nhosts, const char *says)
{
    struct kvs__frame_head out = { 0, 77, 77 };
    struct kvs__err e = { 0, "" };

    assert_int_equal(kvs__frame_head_decode(buf, len, nhosts, &out, &e), KVS_EPROTO);
    if (!strstr(e.msg, says))
        fail_msg("detail \"%s\" does not say \"%s\"", e.msg, says);
    assert_int_equal(out.host, 77);    /* left alone */
}

static void test_head_refusals(void **state)
{
    struct kvs__frame_head h = { KVS__FRAME_HELLO, 1, 112 };
    unsigned char good[KVS__WIRE_HEAD], b[KVS__WIRE_HEAD];

    (void)state;
    assert_int_equal(kvs__frame_payload_bytes(KVS__FRAME_HELLO), 112);
    kvs__frame_head_encode(&h, good);
    refused(good, sizeof good - 1, 2, "head of 23 bytes");
    refused(NULL, 0, 2, "head of 0 bytes");
    memcpy(b, good, sizeof b);
    b[0] ^= 1;
    refused(b, sizeof b, 2, "bad magic");
    memcpy(b, good, sizeof b);
    b[8] = 9;
    refused(b, sizeof b, 2, "wire version 9");
    memcpy(b, good, sizeof b);
    b[4] = 99;
    refused(b, sizeof b, 2, "unknown type 99");
    memcpy(b, good, sizeof b);
    b[6] = 1;
    refused(b, sizeof b, 2, "reserved");
    refused(good, sizeof good, 1, "host 1 outside [0, 1)");
    memcpy(b, good, sizeof b);
    b[16] = 113;
    refused(b, sizeof b, 2, "hello of 113 bytes, expected 112");
    memcpy(b, good, sizeof b);
    b[23] = 0x80;                      /* a length near 2^64 */
    refused(b, sizeof b, 2, "expected 112");
}

static void test_hello(void **state)
{
    struct kvs__wire_hello m = { .nhosts = 3, .nworkers = 4 }, out, keep;
    struct kvs__err e = { 0, "" };
    unsigned char buf[112], bad[112];

    (void)state;
    memset(m.nonce, 0x5a, sizeof m.nonce);
    strcpy(m.job, "train-1");
    kvs__wire_hello_encode(&m, buf);
    assert_int_equal(kvs__wire_hello_decode(buf, sizeof buf, &out, &e), 0);
    assert_int_equal(out.nhosts, 3);
    assert_int_equal(out.nworkers, 4);
    assert_memory_equal(out.nonce, m.nonce, sizeof m.nonce);
    assert_string_equal(out.job, "train-1");

    keep = out;
    assert_int_equal(kvs__wire_hello_decode(buf, sizeof buf - 1, &out, &e), KVS_EPROTO);
    memcpy(bad, buf, sizeof bad);
    bad[0] = 0;                        /* no hosts */
    assert_int_equal(kvs__wire_hello_decode(bad, sizeof bad, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "0 hosts"));
    memcpy(bad, buf, sizeof bad);
    bad[5] = 8;                        /* 2052 workers */
    assert_int_equal(kvs__wire_hello_decode(bad, sizeof bad, &out, &e), KVS_EPROTO);
    memcpy(bad, buf, sizeof bad);
    memset(bad + 40, 'a', 65);         /* no NUL in the job field */
    assert_int_equal(kvs__wire_hello_decode(bad, sizeof bad, &out, &e), KVS_EPROTO);
    memcpy(bad, buf, sizeof bad);
    bad[40] = '/';                     /* a job name with a slash */
    assert_int_equal(kvs__wire_hello_decode(bad, sizeof bad, &out, &e), KVS_EPROTO);
    memcpy(bad, buf, sizeof bad);
    bad[111] = 1;
    assert_int_equal(kvs__wire_hello_decode(bad, sizeof bad, &out, &e), KVS_EPROTO);
    assert_memory_equal(&out, &keep, sizeof out);
}

static void test_challenge_proof_verdict(void **state)
{
    struct kvs__wire_challenge c, c2;
    struct kvs__wire_proof p, p2;
    struct kvs__wire_verdict v = { KVS_EBADARG, "job 'a' has 2 hosts, not 3" }, v2;
    struct kvs__err e = { 0, "" };
    unsigned char buf[256];

    (void)state;
    for (int i = 0; i < KVS__NONCE_BYTES; i++)
        c.nonce[i] = (unsigned char)i;
    memset(c.proof, 0xee, sizeof c.proof);
    kvs__wire_challenge_encode(&c, buf);
    assert_int_equal(kvs__wire_challenge_decode(buf, 64, &c2, &e), 0);
    assert_memory_equal(&c, &c2, sizeof c);
    assert_int_equal(kvs__wire_challenge_decode(buf, 63, &c2, &e), KVS_EPROTO);

    memset(p.proof, 0x11, sizeof p.proof);
    kvs__wire_proof_encode(&p, buf);
    assert_int_equal(kvs__wire_proof_decode(buf, 32, &p2, &e), 0);
    assert_memory_equal(&p, &p2, sizeof p);

    kvs__wire_verdict_encode(&v, buf);
    assert_int_equal(kvs__wire_verdict_decode(buf, 208, &v2, &e), 0);
    assert_int_equal(v2.status, KVS_EBADARG);
    assert_string_equal(v2.msg, v.msg);
    memset(buf, 0, 4);
    buf[0] = 5;                        /* a positive status is no code */
    assert_int_equal(kvs__wire_verdict_decode(buf, 208, &v2, &e), KVS_EPROTO);
}

/* A round's 2bit pieces: two of a 20-value key round-trip with their
 * thresholds and words; a bad threshold, a stray byte, a piece too many
 * or a dtype other than float32 is refused. */
/* A big key's parts: each a 64-byte-aligned range of whole rows; the
 * last takes the rest; a message of a part carries exactly that part's
 * data (its rows' elements), and parts are refused where they make no
 * sense. */
static void test_parts(void **state)
{
    uint64_t first, n, at = 0;
    float v[48] = { 0 };
    struct kvs__wire_msg m = { .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 100 }, .a = 1,
                               .key = KVS_INT_KEY(5), .part = 1, .nparts = 3 }, got;
    unsigned char buf[512];
    size_t body;
    struct kvs__err e;

    (void)state;
    for (uint32_t p = 0; p < 3; p++) {  /* 100 float32: 48, 48, 4 */
        kvs__wire_part(100, 4, 1, 3, p, &first, &n);
        assert_int_equal(first, at);
        assert_int_equal(n, p < 2 ? 48 : 4);
        at += n;
    }
    kvs__wire_part(5, 8, 1, 4, 3, &first, &n);   /* float64: 8 per part, the last ones empty */
    assert_int_equal(first, 5);
    assert_int_equal(n, 0);
    kvs__wire_part(1000001, 1, 1, 2, 1, &first, &n);
    assert_int_equal(first % 64, 0);
    assert_int_equal(first + n, 1000001);
    /* rows of 10 float32: parts of lcm(16, 10) = 80 elements, 8 rows */
    kvs__wire_part(100, 4, 10, 3, 0, &first, &n);
    assert_int_equal(n, 80);
    kvs__wire_part(100, 4, 10, 3, 1, &first, &n);
    assert_int_equal(first, 80);
    assert_int_equal(n, 20);
    kvs__wire_part(100, 4, 10, 3, 2, &first, &n);
    assert_int_equal(n, 0);
    /* rows of 3 float64 (24 bytes): 24 elements a part, 8 rows each */
    kvs__wire_part(3000, 8, 3, 4, 1, &first, &n);
    assert_int_equal(first % 24, 0);
    assert_int_equal(n % 3, 0);
    assert_int_equal(kvs__wire_row(2, (const int64_t[]){ 10, 7 }), 7);
    assert_int_equal(kvs__wire_row(3, (const int64_t[]){ 4, 3, 5 }), 15);
    assert_int_equal(kvs__wire_row(1, (const int64_t[]){ 10 }), 1);
    assert_int_equal(kvs__wire_row(2, (const int64_t[]){ 0, 7 }), 1);
    /* part 1 of 3 of 100 float32: 48 elements */
    m.data = v;
    m.len = 48 * 4;
    body = kvs__wire_msg_bytes(&m);
    kvs__wire_msg_encode(KVS__FRAME_PARTIAL, &m, buf);
    memcpy(buf + body, v, m.len);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, body + m.len, &got, &e), 0);
    assert_int_equal(got.part, 1);
    assert_int_equal(got.nparts, 3);
    assert_int_equal(got.len, 48 * 4);
    /* the whole key's bytes are not a part's */
    m.len = 100 * 4;
    kvs__wire_msg_encode(KVS__FRAME_PARTIAL, &m, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, body + m.len, &got, &e),
                     KVS_EPROTO);
    /* part 3 of 3, one part, a part of a whole key, too many parts, a part
     * of a DONE */
    {
        const uint32_t bad[][2] = { { 3, 3 }, { 0, 1 }, { 1, 0 }, { 0, KVS__PARTS_MAX + 1 } };

        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            m.part = bad[i][0];
            m.nparts = bad[i][1];
            m.len = 0;
            kvs__wire_msg_encode(KVS__FRAME_VALUE, &m, buf);
            assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_VALUE, buf, body, &got, &e),
                             KVS_EPROTO);
            assert_non_null(strstr(e.msg, "part"));
        }
        m = (struct kvs__wire_msg){ .op = KVS__OP_BARRIER, .part = 0, .nparts = 2 };
        body = kvs__wire_msg_bytes(&m);
        kvs__wire_msg_encode(KVS__FRAME_DONE, &m, buf);
        assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_DONE, buf, body, &got, &e), KVS_EPROTO);
    }
}

static void test_pieces(void **state)
{
    struct kvs__wire_msg m = { .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 20 }, .a = 3,
                               .key = KVS_STR_KEY("w"), .pieces = 2 }, got;
    uint32_t w0[2] = { 0xc0c0c0c0u, 0x0000000fu }, w1[2] = { 0x11111111u, 0x0000000au };
    const uint32_t *words;
    size_t pb = kvs__wire_piece_bytes(20), body;
    unsigned char buf[256];
    struct kvs__err e;

    (void)state;
    assert_int_equal(pb, 16);          /* 8 + two words */
    m.len = 2 * pb;
    body = kvs__wire_msg_bytes(&m);
    kvs__wire_msg_encode(KVS__FRAME_PARTIAL, &m, buf);
    kvs__wire_piece_put(buf + body, 0.5f, w0, 20);
    kvs__wire_piece_put(buf + body + pb, 0.25f, w1, 20);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, body + m.len, &got, &e), 0);
    assert_int_equal(got.pieces, 2);
    assert_true(kvs__wire_piece_get(&got, 20, 0, &words) == 0.5f);
    assert_memory_equal(words, w0, sizeof w0);
    assert_true(kvs__wire_piece_get(&got, 20, 1, &words) == 0.25f);
    assert_memory_equal(words, w1, sizeof w1);
    /* a FORWARD carries one piece */
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_FORWARD, buf, body + m.len, &got, &e),
                     KVS_EPROTO);
    /* no 2bit VALUE */
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_VALUE, buf, body + m.len, &got, &e),
                     KVS_EPROTO);
    /* a threshold of 0, NaN, a negative one */
    {
        const float bad[] = { 0.0f, NAN, -0.5f, INFINITY };

        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            kvs__wire_piece_put(buf + body + pb, bad[i], w1, 20);
            assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, body + m.len, &got,
                                                  &e), KVS_EPROTO);
            assert_non_null(strstr(e.msg, "piece 1"));
        }
        kvs__wire_piece_put(buf + body + pb, 0.25f, w1, 20);
    }
    /* a byte set where the layout has zeros: after the threshold */
    buf[body + 4] = 1;
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, body + m.len, &got, &e),
                     KVS_EPROTO);
    buf[body + 4] = 0;
    /* a piece and a half */
    {
        struct kvs__wire_msg h = m;

        h.len = pb + 8;
        kvs__wire_msg_encode(KVS__FRAME_PARTIAL, &h, buf);
        assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, body + h.len, &got, &e),
                         KVS_EPROTO);
    }
    /* float64 cannot be 2bit */
    m.dtype = KVS_FLOAT64;
    kvs__wire_msg_encode(KVS__FRAME_PARTIAL, &m, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, body + m.len, &got, &e),
                     KVS_EPROTO);
}

/* Optimizer states between hosts: an ask to load carries a file's bytes,
 * an answer a status and a text, or (a save) bytes; each names a save or
 * a load and nothing else, and no key. */
static void test_states(void **state)
{
    struct kvs__wire_msg m = { .op = KVS__OP_LOAD_STATES, .b = 9, .data = "KVSOPTST...",
                               .len = 11 }, got;
    unsigned char buf[256];
    size_t body;
    struct kvs__err e;

    (void)state;
    body = kvs__wire_msg_bytes(&m);
    kvs__wire_msg_encode(KVS__FRAME_STATES_ASK, &m, buf);
    memcpy(buf + body, m.data, m.len);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_STATES_ASK, buf, body + m.len, &got, &e),
                     0);
    assert_int_equal(got.op, KVS__OP_LOAD_STATES);
    assert_int_equal(got.b, 9);
    assert_memory_equal(got.data, "KVSOPTST...", 11);
    /* an ask to save carries nothing */
    m.op = KVS__OP_SAVE_STATES;
    kvs__wire_msg_encode(KVS__FRAME_STATES_ASK, &m, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_STATES_ASK, buf, body + m.len, &got, &e),
                     KVS_EPROTO);
    /* an answer with a failure: a text */
    m = (struct kvs__wire_msg){ .op = KVS__OP_LOAD_STATES, .b = 9, .status = KVS_ENOKEY,
                                .data = "key 3", .len = 5 };
    kvs__wire_msg_encode(KVS__FRAME_STATES, &m, buf);
    memcpy(buf + body, m.data, m.len);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_STATES, buf, body + m.len, &got, &e), 0);
    assert_int_equal(got.status, KVS_ENOKEY);
    /* an op other than a save or a load, here and elsewhere */
    m.op = KVS__OP_PULL;
    kvs__wire_msg_encode(KVS__FRAME_STATES, &m, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_STATES, buf, body + m.len, &got, &e),
                     KVS_EPROTO);
    m = (struct kvs__wire_msg){ .op = KVS__OP_SAVE_STATES };
    kvs__wire_msg_encode(KVS__FRAME_HEARTBEAT, &m, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_HEARTBEAT, buf, kvs__wire_msg_bytes(&m),
                                          &got, &e), KVS_EPROTO);
}

/* Encodes m (a rows message of nnz rows of 3 float32 at ids, values
 * from 0.5 on) as type into buf; returns its payload's bytes. */
static size_t rows_msg(int type, struct kvs__wire_msg *m, uint64_t nnz, const int64_t *ids,
                       unsigned char *buf)
{
    size_t body = kvs__wire_msg_bytes(m);
    float *rows;

    m->rows = 1;
    m->len = kvs__wire_rows_bytes(nnz, 3 * 4);
    kvs__wire_msg_encode(type, m, buf);
    rows = kvs__wire_rows_put(buf + body, nnz, ids);
    for (uint64_t i = 0; i < 3 * nnz; i++)
        rows[i] = 0.5f + (float)i;
    return body + m->len;
}

/* Rows messages: a PARTIAL's, a FORWARD's and a VALUE's rows (with "the
 * rest is zero") round-trip, of a whole key and of a part, whose rows are
 * the part's; ids out of order, repeated or out of range, a count past
 * the rows, a length that is not theirs, 2bit rows and a PARTIAL or a
 * FORWARD saying the rest is zero are refused. */
static void test_rows_msgs(void **state)
{
    struct kvs__wire_msg m = { .dtype = KVS_FLOAT32, .ndim = 2, .shape = { 10, 3 }, .a = 2,
                               .key = KVS_INT_KEY(9) }, got;
    unsigned char buf[4096];
    int64_t ids[] = { 1, 4, 9 };
    struct kvs__err e;
    size_t len;

    (void)state;
    len = rows_msg(KVS__FRAME_PARTIAL, &m, 3, ids, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, len, &got, &e), 0);
    assert_int_equal(got.rows, 1);
    assert_int_equal(got.rest_zero, 0);
    assert_int_equal(got.nnz, 3);
    assert_int_equal(got.ids[2], 9);
    assert_true(((const float *)got.row_data)[8] == 8.5f);
    m.rest_zero = 1;
    len = rows_msg(KVS__FRAME_VALUE, &m, 0, ids, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_VALUE, buf, len, &got, &e), 0);
    assert_int_equal(got.rest_zero, 1);
    assert_int_equal(got.nnz, 0);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, len, &got, &e), KVS_EPROTO);
    m.rest_zero = 0;
    /* part 1 of 3 of (100, 3) float32: 100 elements a part rounded up to
     * lcm(16, 3) = 48: 144, rows [48, 96) */
    m.shape[0] = 100;
    m.part = 1;
    m.nparts = 3;
    {
        int64_t in[] = { 48, 95 }, low[] = { 47, 60 }, high[] = { 60, 96 };

        len = rows_msg(KVS__FRAME_VALUE, &m, 2, in, buf);
        assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_VALUE, buf, len, &got, &e), 0);
        len = rows_msg(KVS__FRAME_VALUE, &m, 2, low, buf);
        assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_VALUE, buf, len, &got, &e),
                         KVS_EPROTO);
        assert_non_null(strstr(e.msg, "row id 47"));
        len = rows_msg(KVS__FRAME_VALUE, &m, 2, high, buf);
        assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_VALUE, buf, len, &got, &e),
                         KVS_EPROTO);
    }
    m.shape[0] = 10;
    m.part = m.nparts = 0;
    {
        const int64_t bad[][3] = { { 4, 1, 9 }, { 1, 1, 9 }, { -1, 4, 9 }, { 1, 4, 10 } };

        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            len = rows_msg(KVS__FRAME_PARTIAL, &m, 3, bad[i], buf);
            assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, len, &got, &e),
                             KVS_EPROTO);
            assert_non_null(strstr(e.msg, "row id"));
        }
    }
    /* 11 rows of a key of 10; a byte short */
    {
        int64_t many[11];

        for (int i = 0; i < 11; i++)
            many[i] = i;
        len = rows_msg(KVS__FRAME_PARTIAL, &m, 11, many, buf);
        assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, len, &got, &e),
                         KVS_EPROTO);
    }
    len = rows_msg(KVS__FRAME_PARTIAL, &m, 3, ids, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, len - 1, &got, &e),
                     KVS_EPROTO);
    /* a FORWARD's rows (a dist_async push), checked as a PARTIAL's; "the
     * rest is zero" is a VALUE's only */
    m.b = 7;
    len = rows_msg(KVS__FRAME_FORWARD, &m, 3, ids, buf);
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_FORWARD, buf, len, &got, &e), 0);
    assert_int_equal(got.rows, 1);
    assert_int_equal(got.nnz, 3);
    assert_int_equal(got.b, 7);
    assert_true(((const float *)got.row_data)[8] == 8.5f);
    buf[0] |= 16;                      /* MF_ZERO */
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_FORWARD, buf, len, &got, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "rows out of place"));
    {
        const int64_t bad[] = { 4, 1, 9 };

        len = rows_msg(KVS__FRAME_FORWARD, &m, 3, bad, buf);
        assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_FORWARD, buf, len, &got, &e),
                         KVS_EPROTO);
        assert_non_null(strstr(e.msg, "row id 1"));
        len = rows_msg(KVS__FRAME_FORWARD, &m, 3, ids, buf);
        assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_FORWARD, buf, len - 1, &got, &e),
                         KVS_EPROTO);
    }
    m.b = 0;
    /* 2bit rows */
    len = rows_msg(KVS__FRAME_PARTIAL, &m, 3, ids, buf);
    buf[0] |= 4;                       /* MF_2BIT */
    assert_int_equal(kvs__wire_msg_decode(KVS__FRAME_PARTIAL, buf, len, &got, &e), KVS_EPROTO);
}

/* The most a message may carry within what a job declared: room for the
 * longest body, and the data each type carries; saturated at the head's
 * limit. */
/* A join with the steps a host holds, and a roster with the step agreed,
 * go and come back whole; steps out of bounds are refused. */
static void test_join_roster(void **state)
{
    struct kvs__wire_join jn = { .port = 4747, .generation = 3, .nsteps = 2,
                                 .steps = { 30, 20 } }, back;
    struct kvs__wire_place places[2] = { { 2, 4747, "" }, { 3, 4848, "10.0.0.2" } }, got[2];
    unsigned char p[KVS__WIRE_JOIN_BYTES], r[256];
    struct kvs__err e = { 0, "" };
    int64_t step = 0;

    (void)state;
    snprintf(jn.addr, sizeof jn.addr, "10.0.0.2");
    kvs__wire_join_encode(&jn, p);
    assert_int_equal(kvs__wire_join_decode(p, sizeof p, &back, &e), 0);
    assert_int_equal(back.port, 4747);
    assert_int_equal(back.generation, 3);
    assert_int_equal(back.nsteps, 2);
    assert_true(back.steps[0] == 30 && back.steps[1] == 20 && back.steps[2] == 0);
    assert_string_equal(back.addr, "10.0.0.2");
    jn.steps[1] = -5;                  /* a negative step */
    kvs__wire_join_encode(&jn, p);
    assert_int_equal(kvs__wire_join_decode(p, sizeof p, &back, &e), KVS_EPROTO);
    jn.steps[1] = 20;
    jn.nsteps = KVS__WIRE_JOIN_STEPS + 1;   /* more steps than a join holds */
    kvs__wire_join_encode(&jn, p);
    assert_int_equal(kvs__wire_join_decode(p, sizeof p, &back, &e), KVS_EPROTO);

    assert_true(kvs__wire_roster_bytes(2) <= sizeof r);
    kvs__wire_roster_encode(places, 2, 20, r);
    assert_int_equal(kvs__wire_roster_decode(r, kvs__wire_roster_bytes(2), 2, got, &step, &e),
                     0);
    assert_true(step == 20 && got[1].nworkers == 3 && got[1].port == 4848);
    kvs__wire_roster_encode(places, 2, -1, r);
    assert_int_equal(kvs__wire_roster_decode(r, kvs__wire_roster_bytes(2), 2, got, &step, &e),
                     0);
    assert_true(step == -1);
    kvs__wire_roster_encode(places, 2, -2, r);
    assert_int_equal(kvs__wire_roster_decode(r, kvs__wire_roster_bytes(2), 2, got, &step, &e),
                     KVS_EPROTO);
}

static void test_bounds(void **state)
{
    struct kvs__wire_bounds b = { .value = 4096, .pieces = 2, .states = 100 };
    struct kvs__wire_msg m = { .dtype = KVS_FLOAT32, .ndim = KVS_MAX_NDIM };
    char name[KVS_MAX_KEY_LEN + 1];
    uint64_t body;

    (void)state;
    memset(name, 'k', KVS_MAX_KEY_LEN);
    name[KVS_MAX_KEY_LEN] = '\0';
    m.key.name = name;
    for (int i = 0; i < KVS_MAX_NDIM; i++)
        m.shape[i] = i ? 1 : 1024;
    body = kvs__wire_msg_bytes(&m);    /* the longest body there is */
    /* a value of the largest key, or as many pieces of it as workers */
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_PARTIAL, &b), body + 4096);
    b.pieces = 1024;
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_PARTIAL, &b),
                     body + 1024 * kvs__wire_piece_bytes(1024));
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_FORWARD, &b), body + 4096);
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_VALUE, &b), body + 4096);
    /* rows of a key of 64 rows: the value and 8 bytes an id, and the count */
    b.rows = 64;
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_VALUE, &b), body + 4096 + 8 + 8 * 64);
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_FORWARD, &b), body + 4096 + 8 + 8 * 64);
    b.rows = 0;
    /* a text, a state file, nothing */
    b.value = 16;
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_DONE, &b), body + KVS__WIRE_TEXT_MAX);
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_FAIL, &b), body + KVS__WIRE_TEXT_MAX);
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_STATES_ASK, &b), body + 100);
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_STATES, &b), body + KVS__WIRE_TEXT_MAX);
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_ARRIVE, &b), body);
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_HEARTBEAT, &b), body + 8);
    /* no message; no key declared yet; more than the head allows */
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_JOIN, &b), 0);
    b.value = 0;
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_PARTIAL, &b), body + kvs__wire_piece_bytes(0)
                                                                * 1024);
    b = (struct kvs__wire_bounds){ .value = UINT64_MAX, .pieces = 1024,
                                   .states = UINT64_MAX };
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_PARTIAL, &b), KVS__WIRE_PAYLOAD_MAX);
    assert_int_equal(kvs__wire_msg_max(KVS__FRAME_STATES, &b), KVS__WIRE_PAYLOAD_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_round_trip),
        cmocka_unit_test(test_head_refusals),
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_challenge_proof_verdict),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_pieces),
        cmocka_unit_test(test_states),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_rows_msgs),
        cmocka_unit_test(test_join_roster),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
