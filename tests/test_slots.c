/*
 * test_slots.c - unit tests of the ring slots (proto/slots.c, tables.c),
 * the submission (SQE) and completion (CQE) entries: every op round-trips with its fields at
 * their edge values; every single-field corruption is refused with
 * KVS_EPROTO; no byte of a slot is ignored by its decoder; and a slot
 * rewritten while it is decoded still decodes to a struct that keeps
 * every promise. Tables (KVS__SQE_TABLE): their slots, entries and
 * results, each refused field by field. Buffers are allocated at their exact sizes so that
 * AddressSanitizer sees any read past them. The socket messages are
 * tested in test_proto.c and test_proto_ctl.c. Tests only proto.h; never
 * a ring or a store.
 */
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/proto.h"
#include "protoutil.h"

/* ---- helpers ------------------------------------------------------------ */

#define STAGING 65536u

static struct kvs__sqe sqe_ok(int op)
{
    struct kvs__sqe s;

    memset(&s, 0, sizeof s);
    s.op = (uint8_t)op;
    s.seq = 77;
    s.key_id = 5;
    switch (op) {
    case KVS__OP_INIT:
    case KVS__OP_PUSH:
        s.dtype = KVS_FLOAT32;
        s.ndim = 2;
        s.shape[0] = 3;
        s.shape[1] = 4;
        s.data_off = 128;
        s.data_len = 48;
        break;
    case KVS__OP_PULL:
        s.dtype = KVS_FLOAT32;
        s.ndim = 2;
        s.shape[0] = 3;
        s.shape[1] = 4;
        s.arg = 9;
        break;
    case KVS__OP_SET_OPTIMIZER:
    case KVS__OP_SAVE_STATES:
    case KVS__OP_LOAD_STATES:
        s.data_off = 0;
        s.data_len = 20;
        break;
    case KVS__OP_REGISTER:
        s.data_off = 64;
        s.data_len = KVS__DEVBUF_HANDLE_BYTES;
        s.arg = 3;
        break;
    default:
        break;
    }
    return s;
}

static void assert_sqe_eq(const struct kvs__sqe *a, const struct kvs__sqe *b)
{
    assert_int_equal(a->op, b->op);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->ndim, b->ndim);
    if (a->op == KVS__OP_INIT || a->op == KVS__OP_PUSH || a->op == KVS__OP_PULL)
        assert_int_equal(a->dtype, b->dtype);
    for (int d = 0; d < a->ndim; d++)
        assert_int_equal(a->shape[d], b->shape[d]);
    assert_int_equal(a->priority, b->priority);
    assert_int_equal(a->seq, b->seq);
    assert_int_equal(a->key_id, b->key_id);
    assert_int_equal(a->key_len, b->key_len);
    assert_memory_equal(a->key_name, b->key_name, a->key_len);
    assert_int_equal(b->key_name[b->key_len], '\0');
    assert_int_equal(a->data_off, b->data_off);
    assert_int_equal(a->data_len, b->data_len);
    assert_int_equal(a->arg, b->arg);
}

static int sqe_rt(const struct kvs__sqe *s, uint64_t staging, struct kvs__sqe *out,
                  struct kvs__err *e)
{
    unsigned char *b = exact(KVS__SQE_BYTES);
    int rc;

    kvs__sqe_encode(s, b);
    rc = kvs__sqe_decode(b, staging, out, e);
    free(b);
    return rc;
}

static void sqe_good(const struct kvs__sqe *s, uint64_t staging)
{
    struct kvs__sqe out;
    struct kvs__err e = { 0 };
    int rc;

    memset(&out, 0x5a, sizeof out);
    rc = sqe_rt(s, staging, &out, &e);
    if (rc != 0)
        fail_msg("op %d: %s", s->op, e.msg);
    assert_sqe_eq(s, &out);
}

static void sqe_bad(const struct kvs__sqe *s, uint64_t staging, const char *detail)
{
    struct kvs__sqe out, before;
    struct kvs__err e = { 0 };

    memset(&out, 0x5a, sizeof out);
    before = out;
    assert_int_equal(sqe_rt(s, staging, &out, &e), KVS_EPROTO);
    assert_int_equal(e.code, KVS_EPROTO);
    if (strstr(e.msg, detail) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", e.msg, detail);
    /* A refused slot leaves the caller's struct alone. */
    assert_memory_equal(&out, &before, sizeof out);
}

static struct kvs__cqe cqe_ok(void)
{
    struct kvs__cqe c;

    memset(&c, 0, sizeof c);
    c.seq = 77;
    c.value_off = 4096;
    c.value_len = 48;
    c.round = 3;
    return c;
}

static void assert_cqe_eq(const struct kvs__cqe *a, const struct kvs__cqe *b)
{
    assert_int_equal(a->seq, b->seq);
    assert_int_equal(a->status, b->status);
    assert_int_equal(a->value_off, b->value_off);
    assert_int_equal(a->value_len, b->value_len);
    assert_int_equal(a->round, b->round);
    assert_string_equal(a->msg, b->msg);
}

static int cqe_rt(const struct kvs__cqe *c, uint64_t arena, struct kvs__cqe *out,
                  struct kvs__err *e)
{
    unsigned char *b = exact(KVS__CQE_BYTES);
    int rc;

    kvs__cqe_encode(c, b);
    rc = kvs__cqe_decode(b, arena, out, e);
    free(b);
    return rc;
}

static void cqe_bad(const struct kvs__cqe *c, uint64_t arena, const char *detail)
{
    struct kvs__cqe out;
    struct kvs__err e = { 0 };

    assert_int_equal(cqe_rt(c, arena, &out, &e), KVS_EPROTO);
    if (strstr(e.msg, detail) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", e.msg, detail);
}

/* ---- SQE ---------------------------------------------------------------- */

static void test_sqe_roundtrip_ops(void **state)
{
    (void)state;
    for (int op = KVS__OP_INIT; op <= KVS__OP_REGISTER; op++) {
        struct kvs__sqe s = sqe_ok(op);

        sqe_good(&s, STAGING);
        s.flags = KVS__SQE_LAST;
        s.priority = -7;
        sqe_good(&s, STAGING);
    }
}

static void test_sqe_roundtrip_edges(void **state)
{
    struct kvs__sqe s;
    static const int64_t shape8[KVS_MAX_NDIM] = { 2, 3, 1, 1, 1, 1, 1, 4 };

    (void)state;
    /* Everything at its limit at once: ndim 8, the longest name, extreme
     * integers, a value ending exactly at the end of staging. */
    s = sqe_ok(KVS__OP_INIT);
    s.flags = KVS__SQE_LAST;
    s.dtype = KVS_FLOAT64;
    s.ndim = KVS_MAX_NDIM;
    memcpy(s.shape, shape8, sizeof shape8);
    s.data_len = 24 * 8;
    s.data_off = STAGING - s.data_len;
    s.priority = INT32_MIN;
    s.seq = UINT64_MAX;
    s.key_id = INT64_MIN;
    s.arg = UINT64_MAX;
    s.key_len = KVS_MAX_KEY_LEN;
    s.flags |= KVS__SQE_STRKEY;
    fill(s.key_name, KVS_MAX_KEY_LEN, 'k');
    s.key_name[0] = '\xff';            /* names are bytes, not text */
    sqe_good(&s, STAGING);
    s.priority = INT32_MAX;
    s.key_id = INT64_MAX;
    sqe_good(&s, STAGING);

    /* A scalar of every dtype. */
    for (int dt = KVS_FLOAT32; dt <= KVS_UINT8; dt++) {
        s = sqe_ok(KVS__OP_PUSH);
        s.dtype = (kvs_dtype_t)dt;
        s.ndim = 0;
        s.data_off = 0;
        s.data_len = kvs_dtype_size(s.dtype);
        sqe_good(&s, STAGING);
    }

    /* Empty values, and the whole staging area. */
    s = sqe_ok(KVS__OP_PUSH);
    s.shape[1] = 0;
    s.data_len = 0;
    s.data_off = STAGING;
    sqe_good(&s, STAGING);
    s = sqe_ok(KVS__OP_INIT);
    s.dtype = KVS_UINT8;
    s.ndim = 1;
    s.shape[0] = STAGING;
    s.shape[1] = 0;
    s.data_off = 0;
    s.data_len = STAGING;
    sqe_good(&s, STAGING);

    /* Empty however big the other extents, as kvs__array_check has it,
     * wherever the zero is. */
    s = sqe_ok(KVS__OP_PUSH);
    s.ndim = 3;
    s.shape[0] = (int64_t)1 << 40;
    s.shape[1] = (int64_t)1 << 40;
    s.shape[2] = 0;
    s.data_len = 0;
    sqe_good(&s, STAGING);
    s.shape[0] = 0;
    s.shape[2] = INT64_MAX;
    sqe_good(&s, STAGING);

    /* A pull of a huge value: no data crosses, so no staging needed. */
    s = sqe_ok(KVS__OP_PULL);
    s.dtype = KVS_UINT8;
    s.ndim = 1;
    s.shape[0] = INT64_MAX;
    s.shape[1] = 0;
    sqe_good(&s, 0);
    s.dtype = KVS_INT64;
    s.shape[0] = INT64_MAX / 8;
    sqe_good(&s, 0);

    /* Text lengths at both ends. */
    for (int op = KVS__OP_SET_OPTIMIZER; op <= KVS__OP_LOAD_STATES; op++) {
        s = sqe_ok(op);
        s.data_len = 1;
        sqe_good(&s, STAGING);
        s.data_len = 4095;
        sqe_good(&s, STAGING);
    }

    /* A string key of one byte; staging as big as it gets. */
    s = sqe_ok(KVS__OP_PULL);
    s.key_len = 1;
    s.flags |= KVS__SQE_STRKEY;
    strcpy(s.key_name, "w");
    sqe_good(&s, UINT64_MAX);
    s = sqe_ok(KVS__OP_PUSH);
    s.data_off = UINT64_MAX - s.data_len;
    sqe_good(&s, UINT64_MAX);
}

/* A PUSH of sqe_ok's 3x4 float32 value, 2bit-compressed (threshold 0.5). */
static struct kvs__sqe sqe_2bit(void)
{
    struct kvs__sqe s = sqe_ok(KVS__OP_PUSH);

    s.flags = KVS__SQE_2BIT;
    s.data_len = 4;
    s.arg = kvs__threshold_arg(0.5f);
    return s;
}

/* A PUSH of sqe_ok's value from device buffer 5, far past staging. */
static struct kvs__sqe sqe_device(void)
{
    struct kvs__sqe s = sqe_ok(KVS__OP_PUSH);

    s.flags = KVS__SQE_DEVICE;
    s.data_off = (uint64_t)1 << 40;
    s.arg = 5;
    return s;
}

static void test_sqe_fields(void **state)
{
    struct kvs__sqe s;

    (void)state;
    s = sqe_ok(KVS__OP_PUSH); s.op = 0;          sqe_bad(&s, STAGING, "unknown op 0");
    s = sqe_ok(KVS__OP_PUSH); s.op = 13;         sqe_bad(&s, STAGING, "unknown op 13");
    s = sqe_ok(KVS__OP_PUSH); s.op = 255;        sqe_bad(&s, STAGING, "unknown op 255");
    s = sqe_ok(KVS__OP_PULL); s.flags = 0x02;    sqe_bad(&s, STAGING, "flags");
    s = sqe_ok(KVS__OP_PUSH); s.flags = 0x40;    sqe_bad(&s, STAGING, "flags");
    s = sqe_ok(KVS__OP_PUSH); s.flags = 0x82;    sqe_bad(&s, STAGING, "flags");
    s = sqe_ok(KVS__OP_BARRIER); s.flags = 0x80; sqe_bad(&s, STAGING, "flags");
    /* Row-sparse: a push's data is exactly its ids and rows; a pull names
     * no array. */
    s = sqe_ok(KVS__OP_PUSH); s.flags = KVS__SQE_ROWS; s.arg = 3;
    sqe_bad(&s, STAGING, "48 data bytes for 3 rows of 16");
    s.arg = 2;
    s.data_len = 2 * (8 + 16);
    { struct kvs__sqe out; struct kvs__err e = { 0, "" };
      unsigned char slot[KVS__SQE_BYTES];
      kvs__sqe_encode(&s, slot);
      assert_int_equal(kvs__sqe_decode(slot, STAGING, &out, &e), 0);
      assert_int_equal(out.arg, 2); }
    s.data_len = 48;
    s.arg = (uint64_t)1 << 62;                  sqe_bad(&s, STAGING, "rows of 16");
    s = sqe_ok(KVS__OP_PULL); s.flags = KVS__SQE_ROWS; sqe_bad(&s, STAGING, "row-sparse pull");
    /* An init from rows is checked as a push; a dense init's size is not
     * taken with the flag. */
    s = sqe_ok(KVS__OP_INIT); s.flags = KVS__SQE_ROWS; s.arg = 3;
    sqe_bad(&s, STAGING, "48 data bytes for 3 rows of 16");
    s.data_len = 3 * (8 + 16);                   sqe_good(&s, STAGING);
    s.ndim = 0; s.shape[0] = s.shape[1] = 0; s.arg = 0; s.data_len = 0;
    sqe_bad(&s, STAGING, "row-sparse init of ndim 0");
    /* A pull's data: none, or its arg ids and room after them, 8-aligned,
     * in staging. */
    s = sqe_ok(KVS__OP_PULL); s.flags = KVS__SQE_ROWS; s.dtype = 0; s.ndim = 0;
    s.shape[0] = s.shape[1] = 0; s.arg = 4;      sqe_good(&s, STAGING);
    s.data_off = 64;                             sqe_bad(&s, STAGING, "row-sparse pull");
    s.data_len = 32;                             sqe_good(&s, STAGING);
    s.data_len = 31;                             sqe_bad(&s, STAGING, "31 data bytes for 4 row ids");
    s.data_len = 32 + 1000; s.data_off = 68;     sqe_bad(&s, STAGING, "row-sparse pull");
    s.data_off = STAGING - 64;                   sqe_bad(&s, STAGING, "outside the staging");
    s.data_off = 64; s.arg = UINT64_MAX;         sqe_bad(&s, STAGING, "row ids");
    s = sqe_ok(KVS__OP_PUSH); s.dtype = (kvs_dtype_t)7;   sqe_bad(&s, STAGING, "dtype 7");
    s = sqe_ok(KVS__OP_PULL); s.dtype = (kvs_dtype_t)255; sqe_bad(&s, STAGING, "dtype 255");
    s = sqe_ok(KVS__OP_INIT); s.ndim = 9;        sqe_bad(&s, STAGING, "ndim 9");
    s = sqe_ok(KVS__OP_BARRIER); s.ndim = 200;   sqe_bad(&s, STAGING, "ndim 200");
    s = sqe_ok(KVS__OP_PUSH); s.shape[1] = -1;   sqe_bad(&s, STAGING, "extent -1");
    s = sqe_ok(KVS__OP_PULL); s.shape[0] = INT64_MIN; sqe_bad(&s, STAGING, "extent");
    s = sqe_ok(KVS__OP_PULL);
    s.shape[0] = (int64_t)1 << 32;
    s.shape[1] = (int64_t)1 << 32;
    sqe_bad(&s, STAGING, "overflows");
    s = sqe_ok(KVS__OP_PULL);                    /* fits in elements, not in bytes */
    s.ndim = 1;
    s.shape[0] = (int64_t)1 << 62;
    s.shape[1] = 0;
    sqe_bad(&s, STAGING, "overflows");
    s = sqe_ok(KVS__OP_PULL);                    /* 2^63 fits a uint64, not an int64 */
    s.dtype = KVS_UINT8;
    s.shape[0] = (int64_t)1 << 31;
    s.shape[1] = (int64_t)1 << 32;
    sqe_bad(&s, STAGING, "overflows");
    s = sqe_ok(KVS__OP_PUSH); s.data_len += 1;   sqe_bad(&s, STAGING, "data bytes");
    s = sqe_ok(KVS__OP_PUSH); s.data_len -= 1;   sqe_bad(&s, STAGING, "data bytes");
    s = sqe_ok(KVS__OP_INIT); s.data_len = 0;    sqe_bad(&s, STAGING, "data bytes");
    s = sqe_ok(KVS__OP_PUSH); s.data_off = STAGING - s.data_len + 1;
    sqe_bad(&s, STAGING, "staging");
    s = sqe_ok(KVS__OP_PUSH); s.data_off = UINT64_MAX - 1;
    sqe_bad(&s, UINT64_MAX, "staging");
    s = sqe_ok(KVS__OP_PULL); s.data_off = STAGING + 1;
    sqe_bad(&s, STAGING, "staging");
    s = sqe_ok(KVS__OP_BARRIER); s.data_len = 1; s.data_off = STAGING;
    sqe_bad(&s, STAGING, "staging");
    s = sqe_ok(KVS__OP_LOAD_STATES); s.data_len = 20;
    sqe_bad(&s, 19, "staging");
    for (int op = KVS__OP_SET_OPTIMIZER; op <= KVS__OP_LOAD_STATES; op++) {
        s = sqe_ok(op); s.data_len = 0;          sqe_bad(&s, STAGING, "text of 0");
        s = sqe_ok(op); s.data_len = 4096;       sqe_bad(&s, STAGING, "text of 4096");
    }
    s = sqe_ok(KVS__OP_PULL);
    s.key_len = KVS_MAX_KEY_LEN + 1;
    s.flags |= KVS__SQE_STRKEY;
    fill(s.key_name, KVS_MAX_KEY_LEN, 'k');
    sqe_bad(&s, STAGING, "key of 256");
    s = sqe_ok(KVS__OP_PULL);
    s.key_len = 5;
    s.flags |= KVS__SQE_STRKEY;
    memcpy(s.key_name, "ab\0cd", 6);
    sqe_bad(&s, STAGING, "NUL");
    s = sqe_ok(KVS__OP_PULL);
    s.key_len = 3;
    s.flags |= KVS__SQE_STRKEY;
    memcpy(s.key_name, "ab\0", 4);             /* a NUL as the last name byte */
    sqe_bad(&s, STAGING, "NUL");
    /* A name is a string key only with the flag, and the flag alone is the
     * empty string key, not int key 0. */
    s = sqe_ok(KVS__OP_PULL);
    s.key_len = 1;
    strcpy(s.key_name, "w");
    sqe_bad(&s, STAGING, "string-key flag");
    s = sqe_ok(KVS__OP_PULL);
    s.flags |= KVS__SQE_STRKEY;
    s.key_id = 0;
    sqe_good(&s, STAGING);
    s = sqe_ok(KVS__OP_BARRIER);
    s.flags |= KVS__SQE_STRKEY;
    sqe_bad(&s, STAGING, "flags");
    /* A 2bit push: 12 float32 values in one word, a threshold above 0. */
    s = sqe_2bit();                              sqe_good(&s, STAGING);
    s = sqe_2bit(); s.data_len = 48;             sqe_bad(&s, STAGING, "data bytes");
    s = sqe_2bit(); s.shape[1] = 8; s.data_len = 8;  sqe_good(&s, STAGING); /* 24: 2 words */
    s = sqe_2bit(); s.arg = kvs__threshold_arg(0.0f);  sqe_bad(&s, STAGING, "threshold");
    s = sqe_2bit(); s.arg = kvs__threshold_arg(-1.0f); sqe_bad(&s, STAGING, "threshold");
    s = sqe_2bit(); s.arg = kvs__threshold_arg(NAN);   sqe_bad(&s, STAGING, "threshold");
    s = sqe_2bit(); s.arg |= (uint64_t)1 << 40;  sqe_bad(&s, STAGING, "threshold");
    s = sqe_2bit(); s.dtype = KVS_FLOAT64;       sqe_bad(&s, STAGING, "dtype");
    s = sqe_2bit(); s.op = KVS__OP_INIT;         sqe_bad(&s, STAGING, "flags");
    s = sqe_2bit(); s.flags |= KVS__SQE_TABLE;   sqe_bad(&s, STAGING, "flags");
    /* A remote push (a pushpull's): its range is an address of the
     * worker's memory, so only its sum must not overflow; it needs VALUE,
     * and no 2bit or device data. A table of them still lies in staging. */
    s = sqe_ok(KVS__OP_PUSH); s.flags = KVS__SQE_VALUE | KVS__SQE_REMOTE;
    s.data_off = (uint64_t)1 << 46;              sqe_good(&s, STAGING);
    s.data_off = UINT64_MAX - 1;                 sqe_bad(&s, STAGING, "staging");
    /* Its out (arg): an address of the worker's memory too, data_len
     * bytes that must not overflow; in a table, arg is the count. */
    s = sqe_ok(KVS__OP_PUSH); s.flags = KVS__SQE_VALUE | KVS__SQE_REMOTE;
    s.arg = (uint64_t)1 << 46;                   sqe_good(&s, STAGING);
    s.arg = UINT64_MAX - 1;                      sqe_bad(&s, STAGING, "out");
    s = sqe_ok(KVS__OP_PUSH); s.flags = KVS__SQE_REMOTE;  sqe_bad(&s, STAGING, "flags");
    s = sqe_2bit(); s.flags |= KVS__SQE_VALUE | KVS__SQE_REMOTE;  sqe_bad(&s, STAGING, "flags");
    s = sqe_device(); s.flags |= KVS__SQE_VALUE | KVS__SQE_REMOTE;  sqe_bad(&s, STAGING, "flags");
    s = sqe_ok(KVS__OP_PULL); s.flags = KVS__SQE_VALUE | KVS__SQE_REMOTE;  sqe_bad(&s, STAGING, "flags");
    /* A device request: its range lies in device buffer arg, not in
     * staging, so only its sum must not overflow; an init, a push or a
     * pull alone, one slot each, the whole value's bytes. */
    s = sqe_device();                            sqe_good(&s, STAGING);
    s = sqe_device(); s.data_off = UINT64_MAX - s.data_len;  sqe_good(&s, STAGING);
    s = sqe_device(); s.data_off = UINT64_MAX - 1;  sqe_bad(&s, STAGING, "staging");
    s = sqe_device(); s.arg = KVS__DEVBUF_MAX;   sqe_bad(&s, STAGING, "device buffer 1024");
    s = sqe_device(); s.data_len = 44;           sqe_bad(&s, STAGING, "data bytes");
    s = sqe_device(); s.op = KVS__OP_INIT;       sqe_good(&s, STAGING);
    s = sqe_device(); s.op = KVS__OP_PULL;       sqe_good(&s, STAGING);
    s = sqe_device(); s.op = KVS__OP_PULL; s.data_len = 0;  sqe_bad(&s, STAGING, "data bytes");
    s = sqe_device(); s.op = KVS__OP_PULL; s.flags |= KVS__SQE_VALUE;  sqe_bad(&s, STAGING, "flags");
    s = sqe_device(); s.op = KVS__OP_BARRIER; s.ndim = 0; s.data_len = 0;
    memset(s.shape, 0, sizeof s.shape);
    sqe_bad(&s, STAGING, "flags");
    s = sqe_device(); s.flags |= KVS__SQE_2BIT;  sqe_bad(&s, STAGING, "flags");
    s = sqe_device(); s.flags |= KVS__SQE_TABLE; sqe_bad(&s, STAGING, "flags");
    s = sqe_device(); s.flags |= KVS__SQE_VALUE; sqe_good(&s, STAGING);
    /* A buffer's registration: one handle, a buffer number in range. */
    s = sqe_ok(KVS__OP_REGISTER); s.arg = KVS__DEVBUF_MAX - 1;  sqe_good(&s, STAGING);
    s = sqe_ok(KVS__OP_REGISTER); s.arg = KVS__DEVBUF_MAX;  sqe_bad(&s, STAGING, "device buffer");
    s = sqe_ok(KVS__OP_REGISTER); s.data_len = 63;  sqe_bad(&s, STAGING, "a handle of 63");
    s = sqe_ok(KVS__OP_REGISTER); s.data_off = STAGING - 63;  sqe_bad(&s, STAGING, "staging");
}

/* Bytes the encoder leaves zero (reserved, unused extents, the rest of the
 * name field) make the slot refused when set. */
static void test_sqe_every_byte(void **state)
{
    struct kvs__sqe s = sqe_ok(KVS__OP_PUSH), out;
    unsigned char *b = exact(KVS__SQE_BYTES);

    (void)state;
    s.key_len = 2;
    s.flags |= KVS__SQE_STRKEY;
    strcpy(s.key_name, "w0");
    for (size_t i = 0; i < KVS__SQE_BYTES; i++) {
        for (unsigned f = 1; f < 256; f <<= 1) {
            kvs__sqe_encode(&s, b);
            b[i] ^= (unsigned char)f;
            if (kvs__sqe_decode(b, STAGING, &out, NULL) != 0)
                continue;
            if (out.op == s.op && out.flags == s.flags && out.dtype == s.dtype &&
                out.ndim == s.ndim && memcmp(out.shape, s.shape, sizeof s.shape) == 0 &&
                out.priority == s.priority && out.seq == s.seq && out.key_id == s.key_id &&
                out.key_len == s.key_len && strcmp(out.key_name, s.key_name) == 0 &&
                out.data_off == s.data_off && out.data_len == s.data_len && out.arg == s.arg)
                fail_msg("byte %zu ^ 0x%02x is ignored", i, f);
        }
    }
    free(b);
}

/* ---- CQE ---------------------------------------------------------------- */

static void test_cqe_roundtrip(void **state)
{
    struct kvs__cqe c = cqe_ok(), out;
    struct kvs__err e = { 0 };
    static const int32_t statuses[] = { 0, -1, -4095, -30000, -30999, KVS_ENOKEY };

    (void)state;
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) {
        c = cqe_ok();
        c.status = statuses[i];
        snprintf(c.msg, sizeof c.msg, "status %d", (int)statuses[i]);
        assert_int_equal(cqe_rt(&c, 1 << 20, &out, &e), 0);
        assert_cqe_eq(&c, &out);
    }
    c = cqe_ok();
    c.seq = UINT64_MAX;
    c.round = UINT64_MAX;
    c.value_off = UINT64_MAX - 10;
    c.value_len = 10;
    fill(c.msg, KVS__MSG_MAX - 1, '!');
    assert_int_equal(cqe_rt(&c, UINT64_MAX, &out, &e), 0);
    assert_cqe_eq(&c, &out);
    c = cqe_ok();
    c.value_off = 0;
    c.value_len = 0;
    assert_int_equal(cqe_rt(&c, 0, &out, &e), 0);
    assert_cqe_eq(&c, &out);
    c.value_off = 4096;                /* the value ends exactly at the arena's end */
    c.value_len = 100;
    assert_int_equal(cqe_rt(&c, 4196, &out, &e), 0);
}

static void test_cqe_fields(void **state)
{
    struct kvs__cqe c, out;
    struct kvs__err e = { 0 };
    unsigned char *b = exact(KVS__CQE_BYTES);
    size_t j;

    (void)state;
    c = cqe_ok(); c.status = 1;             cqe_bad(&c, 1 << 20, "status 1");
    c = cqe_ok(); c.status = -5000;         cqe_bad(&c, 1 << 20, "status -5000");
    c = cqe_ok(); c.status = -4096;         cqe_bad(&c, 1 << 20, "status -4096");
    c = cqe_ok(); c.status = -31000;        cqe_bad(&c, 1 << 20, "status -31000");
    c = cqe_ok(); c.status = INT32_MAX;     cqe_bad(&c, 1 << 20, "status");
    c = cqe_ok();                           cqe_bad(&c, 4096 + 47, "arena");
    c = cqe_ok(); c.value_off = UINT64_MAX; cqe_bad(&c, UINT64_MAX, "arena");
    c = cqe_ok(); c.value_len = UINT64_MAX; cqe_bad(&c, UINT64_MAX, "arena");
    c = cqe_ok(); c.flags = 0x10;           cqe_bad(&c, 1 << 20, "flags");
    /* WRITTEN: a value's answer only, with status 0. */
    c = cqe_ok(); c.flags = KVS__CQE_WRITTEN;
    kvs__cqe_encode(&c, b);
    assert_int_equal(kvs__cqe_decode(b, 1 << 20, &out, &e), 0);
    assert_int_equal(out.flags, KVS__CQE_WRITTEN);
    c = cqe_ok(); c.flags = KVS__CQE_WRITTEN; c.status = KVS_ETIMEDOUT;
    cqe_bad(&c, 1 << 20, "flags");
    c = cqe_ok(); c.flags = KVS__CQE_WRITTEN | KVS__CQE_HELD;
    cqe_bad(&c, 1 << 20, "flags");
    c = cqe_ok(); c.flags = KVS__CQE_WRITTEN | KVS__CQE_RELEASE;
    cqe_bad(&c, 1 << 20, "flags");
    c = cqe_ok(); c.flags = KVS__CQE_WRITTEN | KVS__CQE_ROWS;
    cqe_bad(&c, 1 << 20, "flags");
    c = cqe_ok(); c.flags = KVS__CQE_ROWS | KVS__CQE_HELD;
    cqe_bad(&c, 1 << 20, "flags");
    c = cqe_ok(); c.flags = KVS__CQE_ROWS | KVS__CQE_RELEASE;
    cqe_bad(&c, 1 << 20, "flags");
    c = cqe_ok(); c.flags = KVS__CQE_ROWS; c.status = KVS_ERANGE;
    cqe_bad(&c, 1 << 20, "flags");
    c = cqe_ok(); c.flags = KVS__CQE_HELD | KVS__CQE_RELEASE;
    cqe_bad(&c, 1 << 20, "flags");
    c = cqe_ok(); c.flags = KVS__CQE_HELD; c.status = KVS_ESHAPE;
    cqe_bad(&c, 1 << 20, "flags");

    c = cqe_ok();
    strcpy(c.msg, "boom");
    kvs__cqe_encode(&c, b);
    j = find(b, KVS__CQE_BYTES, "boom");
    memset(b + j, 'q', KVS__MSG_MAX);
    assert_int_equal(kvs__cqe_decode(b, 1 << 20, &out, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "NUL"));
    kvs__cqe_encode(&c, b);
    b[j + 10] = 'x';                   /* junk after the NUL */
    assert_int_equal(kvs__cqe_decode(b, 1 << 20, &out, &e), KVS_EPROTO);
    free(b);
}

static void test_cqe_every_byte(void **state)
{
    struct kvs__cqe c = cqe_ok(), out;
    unsigned char *b = exact(KVS__CQE_BYTES);

    (void)state;
    c.status = KVS_ESHAPE;
    strcpy(c.msg, "shape");
    for (size_t i = 0; i < KVS__CQE_BYTES; i++) {
        for (unsigned f = 1; f < 256; f <<= 1) {
            kvs__cqe_encode(&c, b);
            b[i] ^= (unsigned char)f;
            if (kvs__cqe_decode(b, UINT64_MAX, &out, NULL) == 0 && out.seq == c.seq &&
                out.status == c.status && out.value_off == c.value_off &&
                out.value_len == c.value_len && out.round == c.round &&
                out.flags == c.flags && strcmp(out.msg, c.msg) == 0)
                fail_msg("byte %zu ^ 0x%02x is ignored", i, f);
        }
    }
    free(b);
}

/* ---- tables ------------------------------------------------------------- */

/* A table slot of n requests of op, in bytes of staging at 256. */
static struct kvs__sqe table_ok(int op, uint64_t n, uint64_t bytes)
{
    struct kvs__sqe s;

    memset(&s, 0, sizeof s);
    s.op = (uint8_t)op;
    s.flags = KVS__SQE_TABLE;
    s.seq = 9;
    s.priority = -3;
    s.arg = n;
    s.data_off = 256;
    s.data_len = bytes;
    return s;
}

static void test_table_slot(void **state)
{
    uint64_t min = 3 * (KVS__TAB_ENTRY_BYTES(0) + KVS__TAB_RESULT_BYTES);
    struct kvs__sqe s;

    (void)state;
    s = table_ok(KVS__OP_INIT, 3, min);           sqe_good(&s, STAGING);
    s = table_ok(KVS__OP_PULL, KVS__TABLE_MAX, KVS__TABLE_MAX * 64);
    sqe_good(&s, 1u << 20);
    s = table_ok(KVS__OP_PUSH, 1, 64); s.flags |= KVS__SQE_VALUE | KVS__SQE_LAST;
    sqe_good(&s, STAGING);

    s = table_ok(KVS__OP_BARRIER, 3, min);        sqe_bad(&s, STAGING, "flags");
    s = table_ok(KVS__OP_PUSH, 3, min); s.flags |= KVS__SQE_STRKEY;
    sqe_bad(&s, STAGING, "flags");
    s = table_ok(KVS__OP_PUSH, 3, min); s.key_id = 1;   sqe_bad(&s, STAGING, "a key or an array");
    s = table_ok(KVS__OP_PUSH, 3, min); s.dtype = KVS_FLOAT64;
    sqe_bad(&s, STAGING, "a key or an array");
    s = table_ok(KVS__OP_PUSH, 3, min); s.ndim = 1; s.shape[0] = 1;
    sqe_bad(&s, STAGING, "a key or an array");
    s = table_ok(KVS__OP_PUSH, 0, min);           sqe_bad(&s, STAGING, "a table of 0 requests");
    s = table_ok(KVS__OP_PUSH, KVS__TABLE_MAX + 1, 1u << 20);
    sqe_bad(&s, 1u << 21, "expected 1 to");
    s = table_ok(KVS__OP_PUSH, 3, min - 1);       sqe_bad(&s, STAGING, "requests in");
    s = table_ok(KVS__OP_PUSH, 3, STAGING);       sqe_bad(&s, STAGING, "outside the staging");
}

/* The entry of an array of dtype and shape at data_off, made as the client
 * makes it (kvs__tab_entry_encode), decoded as kvsd decodes it. */
static void test_table_entry_roundtrip(void **state)
{
    static const int ops[] = { KVS__OP_INIT, KVS__OP_PUSH, KVS__OP_PULL };

    (void)state;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        for (int ndim = 0; ndim <= KVS_MAX_NDIM; ndim++) {
            struct kvs__sqe s = { .op = (uint8_t)ops[o], .key_id = INT64_MIN + ndim,
                                  .dtype = KVS_FLOAT16, .ndim = ndim };
            size_t n = KVS__TAB_ENTRY_BYTES(ndim), used = 0;
            unsigned char *b = exact(n);
            struct kvs__tab_entry t;
            struct kvs__err e = { 0 };
            uint64_t bytes = 2;

            for (int d = 0; d < ndim; d++) {
                s.shape[d] = d % 2 + 1;
                bytes *= (uint64_t)(d % 2 + 1);
            }
            s.data_off = ops[o] == KVS__OP_PULL ? 0 : STAGING - bytes;
            assert_int_equal(kvs__tab_entry_encode(&s, b), n);
            if (kvs__tab_entry_decode(b, n, s.op, 0, STAGING, &t, &used, &e) != 0)
                fail_msg("op %d ndim %d: %s", s.op, ndim, e.msg);
            assert_int_equal(used, n);
            assert_int_equal(t.key_id, s.key_id);
            assert_int_equal(t.dtype, KVS_FLOAT16);
            assert_int_equal(t.ndim, ndim);
            assert_memory_equal(t.shape, s.shape, sizeof t.shape[0] * (size_t)ndim);
            assert_int_equal(t.data_off, s.data_off);
            assert_int_equal(t.data_len, ops[o] == KVS__OP_PULL ? 0 : bytes);
            /* One byte short of the entry: refused, never read past. */
            assert_int_equal(kvs__tab_entry_decode(b, n - 1, s.op, 0, STAGING, &t, &used, &e),
                             KVS_EPROTO);
            free(b);
        }
    }
}

static void entry_bad(const struct kvs__sqe *s, const unsigned char *patch, size_t at,
                      const char *detail)
{
    size_t n = KVS__TAB_ENTRY_BYTES(s->ndim), used = 0;
    unsigned char *b = exact(n);
    struct kvs__tab_entry t;
    struct kvs__err e = { 0 };

    kvs__tab_entry_encode(s, b);
    if (patch)
        b[at] = *patch;
    assert_int_equal(kvs__tab_entry_decode(b, n, s->op, 0, STAGING, &t, &used, &e), KVS_EPROTO);
    if (strstr(e.msg, detail) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", e.msg, detail);
    free(b);
}

static void test_table_entry_fields(void **state)
{
    const struct kvs__sqe ok = { .op = KVS__OP_PUSH, .key_id = 4, .dtype = KVS_FLOAT32,
                                 .ndim = 2, .shape = { 3, 4 }, .data_off = 64 };
    const unsigned char nine = 9, seven = 7, one = 1, ff = 0xff;
    struct kvs__sqe s;

    (void)state;
    entry_bad(&ok, &seven, 8, "unknown dtype 7");
    entry_bad(&ok, &one, 10, "flags 0x01");          /* remote, in a table that is not */
    entry_bad(&ok, &one, 11, "reserved");
    entry_bad(&ok, &one, 15, "reserved");
    entry_bad(&ok, &ff, 31, "extent");                 /* shape[0] < 0 */
    s = ok; s.ndim = 1;
    entry_bad(&s, &nine, 9, "ndim 9");
    s = ok; s.shape[0] = INT64_MAX; s.shape[1] = 2;     entry_bad(&s, NULL, 0, "overflows");
    s = ok; s.data_off = STAGING - 47;                 entry_bad(&s, NULL, 0, "outside the staging");
    s = ok; s.data_off = UINT64_MAX - 8;               entry_bad(&s, NULL, 0, "outside the staging");
    s = ok; s.op = KVS__OP_PULL;                       entry_bad(&s, NULL, 0, "data at 64");
    s = ok; s.op = KVS__OP_BARRIER;                    entry_bad(&s, NULL, 0, "a table of op");
}

/* A remote entry's data_off is an address of the worker's memory: past
 * staging is fine, past the address space is not; only in a table whose
 * slot says remote, and only with known flags. */
static void test_table_entry_remote(void **state)
{
    struct kvs__sqe s = { .op = KVS__OP_PUSH, .flags = KVS__SQE_REMOTE, .key_id = 4,
                          .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 },
                          .data_off = 0x7f0000001000 };
    size_t n = KVS__TAB_ENTRY_BYTES(1), used = 0;
    unsigned char *b = exact(n);
    struct kvs__tab_entry t;
    struct kvs__err e = { 0 };

    (void)state;
    assert_int_equal(kvs__tab_entry_encode(&s, b), n);
    assert_int_equal(kvs__tab_entry_decode(b, n, s.op, KVS__SQE_VALUE | KVS__SQE_REMOTE, STAGING,
                                           &t, &used, &e), 0);
    assert_int_equal(t.flags, KVS__TAB_REMOTE);
    assert_int_equal(t.data_off, s.data_off);
    assert_int_equal(t.data_len, 16);
    assert_int_equal(kvs__tab_entry_decode(b, n, s.op, KVS__SQE_VALUE, STAGING, &t, &used, &e),
                     KVS_EPROTO);
    assert_non_null(strstr(e.msg, "flags"));
    b[10] = 3;                         /* an unknown flag */
    assert_int_equal(kvs__tab_entry_decode(b, n, s.op, KVS__SQE_VALUE | KVS__SQE_REMOTE, STAGING,
                                           &t, &used, &e), KVS_EPROTO);
    s.data_off = UINT64_MAX - 8;
    kvs__tab_entry_encode(&s, b);
    assert_int_equal(kvs__tab_entry_decode(b, n, s.op, KVS__SQE_VALUE | KVS__SQE_REMOTE, STAGING,
                                           &t, &used, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "outside"));
    free(b);
}

static void test_table_result(void **state)
{
    unsigned char *b = exact(KVS__TAB_RESULT_BYTES);
    struct kvs__err e = { 0 };
    uint64_t off = 1;
    int32_t st = 1;

    (void)state;
    kvs__tab_result_encode(b, 0, 4096);
    assert_int_equal(kvs__tab_result_decode(b, 8192, 4096, &st, &off, &e), 0);
    assert_int_equal(st, 0);
    assert_int_equal(off, 4096);
    assert_int_equal(kvs__tab_result_decode(b, 8192, 4097, &st, &off, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "outside the arena"));
    kvs__tab_result_encode(b, 0, UINT64_MAX);
    assert_int_equal(kvs__tab_result_decode(b, 8192, 1, &st, &off, &e), KVS_EPROTO);
    /* A failure hands over no value: its offset is not looked at. */
    kvs__tab_result_encode(b, KVS_ESHAPE, UINT64_MAX);
    assert_int_equal(kvs__tab_result_decode(b, 8192, 4, &st, &off, &e), 0);
    assert_int_equal(st, KVS_ESHAPE);
    kvs__tab_result_encode(b, 12345, 0);
    assert_int_equal(kvs__tab_result_decode(b, 8192, 0, &st, &off, &e), KVS_EPROTO);
    assert_non_null(strstr(e.msg, "status 12345"));
    kvs__tab_result_encode(b, 0, 0);
    b[5] = 1;
    assert_int_equal(kvs__tab_result_decode(b, 8192, 0, &st, &off, &e), KVS_EPROTO);
    free(b);
}

/* ---- a slot rewritten while it is decoded ------------------------------- */

struct scribbler {
    unsigned char *slot;
    size_t size;
    atomic_int started, stop;
};

/* Rewrites random bytes of the slot, byte by byte, as a misbehaving worker
 * could, favouring the fields whose checks depend on each other: lengths,
 * names, ranges. */
static void *scribble(void *arg)
{
    struct scribbler *s = arg;
    uint64_t x = 0x9e3779b97f4a7c15u;

    atomic_store(&s->started, 1);
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
        size_t i;
        unsigned char v;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i = (size_t)(x % s->size);
        v = (unsigned char)(x >> 32);
        if ((x >> 40) % 4 == 0)
            v = 0;
        if ((x >> 44) % 4 == 0)
            i = (x >> 48) % 64;        /* the head, where the lengths are */
        __atomic_store_n(&s->slot[i], v, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void test_sqe_concurrent(void **state)
{
    struct scribbler sc = { .size = KVS__SQE_BYTES };
    struct kvs__sqe s = sqe_ok(KVS__OP_PUSH), out;
    pthread_t t;
    long ok = 0;

    (void)state;
    sc.slot = exact(KVS__SQE_BYTES);
    s.key_len = 100;
    s.flags |= KVS__SQE_STRKEY;
    fill(s.key_name, 100, 'n');
    kvs__sqe_encode(&s, sc.slot);
    atomic_init(&sc.stop, 0);
    atomic_init(&sc.started, 0);
    assert_int_equal(pthread_create(&t, NULL, scribble, &sc), 0);
    while (!atomic_load(&sc.started))  /* decode while it writes, not before */
        sched_yield();
    for (int iter = 0; iter < 200000; iter++) {
        if (iter % 64 == 0)            /* back to a valid slot now and then */
            kvs__sqe_encode(&s, sc.slot);
        if (kvs__sqe_decode(sc.slot, STAGING, &out, NULL) != 0)
            continue;
        ok++;
        /* Whatever the decoder saw, what it returns keeps its promises. */
        assert_true(out.op >= KVS__OP_INIT && out.op <= KVS__OP_CLOSE);
        assert_true((out.flags & ~KVS__SQE_FLAGS) == 0);
        assert_true(out.ndim >= 0 && out.ndim <= KVS_MAX_NDIM);
        assert_true(out.key_len <= KVS_MAX_KEY_LEN);
        assert_int_equal(strlen(out.key_name), out.key_len);
        assert_true(out.data_off <= STAGING && out.data_len <= STAGING - out.data_off);
        if (out.op == KVS__OP_INIT || out.op == KVS__OP_PUSH) {
            uint64_t n = kvs_dtype_size(out.dtype);

            assert_true(n != 0);
            for (int d = 0; d < out.ndim; d++) {
                assert_true(out.shape[d] >= 0);
                n *= (uint64_t)out.shape[d];   /* bounded: data_len <= STAGING */
            }
            if (n != out.data_len) {
                /* Only possible if the product wrapped, which it cannot
                 * have: the decoder refuses overflow. */
                fail_msg("data_len %llu for %llu bytes", (unsigned long long)out.data_len,
                         (unsigned long long)n);
            }
        }
    }
    atomic_store(&sc.stop, 1);
    pthread_join(t, NULL);
    assert_true(ok > 0);
    free(sc.slot);
}

static void test_cqe_concurrent(void **state)
{
    struct scribbler sc = { .size = KVS__CQE_BYTES };
    struct kvs__cqe c = cqe_ok(), out;
    pthread_t t;
    long ok = 0;

    (void)state;
    sc.slot = exact(KVS__CQE_BYTES);
    strcpy(c.msg, "a message of some length");
    kvs__cqe_encode(&c, sc.slot);
    atomic_init(&sc.stop, 0);
    atomic_init(&sc.started, 0);
    assert_int_equal(pthread_create(&t, NULL, scribble, &sc), 0);
    while (!atomic_load(&sc.started))  /* decode while it writes, not before */
        sched_yield();
    for (int iter = 0; iter < 200000; iter++) {
        if (iter % 64 == 0)
            kvs__cqe_encode(&c, sc.slot);
        if (kvs__cqe_decode(sc.slot, 1 << 20, &out, NULL) != 0)
            continue;
        ok++;
        assert_true(strlen(out.msg) < KVS__MSG_MAX);
        assert_true(out.value_off <= (1 << 20) && out.value_len <= (1 << 20) - out.value_off);
        assert_true(out.status == 0 || (out.status >= -30999 && out.status <= -30000) ||
                    (out.status >= -4095 && out.status <= -1));
    }
    atomic_store(&sc.stop, 1);
    pthread_join(t, NULL);
    assert_true(ok > 0);
    free(sc.slot);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sqe_roundtrip_ops),
        cmocka_unit_test(test_sqe_roundtrip_edges),
        cmocka_unit_test(test_sqe_fields),
        cmocka_unit_test(test_sqe_every_byte),
        cmocka_unit_test(test_cqe_roundtrip),
        cmocka_unit_test(test_cqe_fields),
        cmocka_unit_test(test_cqe_every_byte),
        cmocka_unit_test(test_table_slot),
        cmocka_unit_test(test_table_entry_roundtrip),
        cmocka_unit_test(test_table_entry_fields),
        cmocka_unit_test(test_table_entry_remote),
        cmocka_unit_test(test_table_result),
        cmocka_unit_test(test_sqe_concurrent),
        cmocka_unit_test(test_cqe_concurrent),
    };
    return cmocka_run_group_tests_name("slots", tests, NULL, NULL);
}
