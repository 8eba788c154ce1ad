/*
 * slots.c - the byte layouts of the slots of the rings a worker shares
 * with kvsd: the request (SQE) a worker posts, and the completion (CQE)
 * kvsd answers with.
 *
 * Every field sits at a fixed offset, little-endian, so the layout does
 * not depend on the compiler's struct padding or the host's byte order.
 * Bytes no field uses must be zero, so every valid slot has exactly one
 * encoding and a later version can give them a meaning.
 *
 * It must never trust a byte twice: a decoder copies the slot (which the
 * other process may be rewriting) into a local buffer once, parses only
 * that copy, and checks every field before its caller sees it. It never
 * reads outside the slot, never allocates, and never reads the staging
 * or the table a slot points at (tables.c reads a table).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "kernels/compress.h"
#include "proto/slots.h"

/* SQE: 512 bytes */
enum {
    S_OP = 0,          /* u8 */
    S_FLAGS = 1,       /* u8 */
    S_DTYPE = 2,       /* u8 */
    S_NDIM = 3,        /* u8 */
    S_KEY_LEN = 4,     /* u16 */
    S_RSV0 = 6,        /* u16, zero */
    S_PRIORITY = 8,    /* i32 */
    S_RSV1 = 12,       /* u32, zero */
    S_SEQ = 16,        /* u64 */
    S_KEY_ID = 24,     /* i64 */
    S_DATA_OFF = 32,   /* u64 */
    S_DATA_LEN = 40,   /* u64 */
    S_ARG = 48,        /* u64 */
    S_SHAPE = 56,      /* KVS_MAX_NDIM i64; zero past ndim */
    S_KEY_NAME = S_SHAPE + 8 * KVS_MAX_NDIM, /* KVS_MAX_KEY_LEN bytes; zero past key_len */
    S_RSV2 = S_KEY_NAME + KVS_MAX_KEY_LEN,   /* zero up to the end */
};

/* CQE: 256 bytes */
enum {
    C_SEQ = 0,         /* u64 */
    C_STATUS = 8,      /* i32 */
    C_FLAGS = 12,      /* u32 */
    C_VALUE_OFF = 16,  /* u64 */
    C_VALUE_LEN = 24,  /* u64 */
    C_ROUND = 32,      /* u64 */
    C_MSG = 40,        /* KVS__MSG_MAX bytes, NUL-terminated, zero after the NUL */
    C_RSV1 = C_MSG + KVS__MSG_MAX,      /* zero up to the end */
};

_Static_assert(S_RSV2 <= KVS__SQE_BYTES, "SQE layout overflows its slot");
_Static_assert(C_RSV1 <= KVS__CQE_BYTES, "CQE layout overflows its slot");
_Static_assert(KVS_MAX_KEY_LEN <= UINT16_MAX, "key_len is a u16");

/* Text carried in the staging area (optimizer spec, state file path). */
#define TEXT_MAX 4095

/* ---- SQE ---------------------------------------------------------------- */

void kvs__sqe_encode(const struct kvs__sqe *s, void *slot)
{
    unsigned char *p = slot;
    size_t klen = s->key_len < KVS_MAX_KEY_LEN ? s->key_len : KVS_MAX_KEY_LEN;
    int ndim = s->ndim < 0 ? 0 : s->ndim > KVS_MAX_NDIM ? KVS_MAX_NDIM : s->ndim;

    memset(p, 0, KVS__SQE_BYTES);
    put_u8(p, S_OP, s->op);
    put_u8(p, S_FLAGS, s->flags);
    put_u8(p, S_DTYPE, (uint8_t)s->dtype);
    put_u8(p, S_NDIM, (uint8_t)s->ndim);
    put_u16(p, S_KEY_LEN, s->key_len);
    put_i32(p, S_PRIORITY, s->priority);
    put_u64(p, S_SEQ, s->seq);
    put_i64(p, S_KEY_ID, s->key_id);
    put_u64(p, S_DATA_OFF, s->data_off);
    put_u64(p, S_DATA_LEN, s->data_len);
    put_u64(p, S_ARG, s->arg);
    for (int d = 0; d < ndim; d++)
        put_i64(p, S_SHAPE + 8 * (size_t)d, s->shape[d]);
    memcpy(p + S_KEY_NAME, s->key_name, klen);
}

uint64_t kvs__threshold_arg(float threshold)
{
    uint32_t u;

    memcpy(&u, &threshold, sizeof u);
    return u;
}

float kvs__arg_threshold(uint64_t arg)
{
    uint32_t u = (uint32_t)arg;
    float f;

    memcpy(&f, &u, sizeof f);
    return f;
}

/* The decoding of a slot, in steps over the one copy m of it: each step
 * checks one part of what a worker could have put there and fails with
 * the request's seq and op name. Every slot kvsd reads goes through all of
 * them: static inline, one function once compiled. */

/* The fixed fields of the copy, as they are. */
static inline void sqe_read(const unsigned char *m, struct kvs__sqe *t)
{
    memset(t, 0, sizeof *t);
    t->op = get_u8(m, S_OP);
    t->flags = get_u8(m, S_FLAGS);
    t->dtype = (kvs_dtype_t)get_u8(m, S_DTYPE);
    t->ndim = get_u8(m, S_NDIM);
    t->key_len = get_u16(m, S_KEY_LEN);
    t->priority = get_i32(m, S_PRIORITY);
    t->seq = get_u64(m, S_SEQ);
    t->key_id = get_i64(m, S_KEY_ID);
    t->data_off = get_u64(m, S_DATA_OFF);
    t->data_len = get_u64(m, S_DATA_LEN);
    t->arg = get_u64(m, S_ARG);
}

/* Flags only where the op and the other flags allow them, and reserved
 * bytes zero. */
static inline int sqe_check_flags(const unsigned char *m, const struct kvs__sqe *t,
                                  const char *name, struct kvs__err *e)
{
    uint8_t f = t->flags;

    if ((f & ~KVS__SQE_FLAGS) != 0
        || ((f & KVS__SQE_VALUE) && t->op != KVS__OP_PUSH)
        || ((f & KVS__SQE_STRKEY) && !kvs__op_has_array(t->op))
        || ((f & KVS__SQE_TABLE) && (!kvs__op_has_array(t->op) || (f & KVS__SQE_STRKEY)))
        || ((f & KVS__SQE_2BIT) && (t->op != KVS__OP_PUSH || (f & KVS__SQE_TABLE)))
        || ((f & KVS__SQE_DEVICE)
            && (!kvs__op_has_array(t->op) || (f & (KVS__SQE_TABLE | KVS__SQE_2BIT))))
        || ((f & KVS__SQE_REMOTE)
            && (!(f & KVS__SQE_VALUE) || (f & (KVS__SQE_2BIT | KVS__SQE_DEVICE))))
        || ((f & KVS__SQE_ROWS)
            && ((t->op != KVS__OP_PUSH && t->op != KVS__OP_PULL && t->op != KVS__OP_INIT)
                || (f & (KVS__SQE_VALUE | KVS__SQE_TABLE | KVS__SQE_2BIT | KVS__SQE_DEVICE
                         | KVS__SQE_REMOTE)))))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): unknown flags 0x%02x",
                         t->seq, name, (unsigned)f);
    if (get_u16(m, S_RSV0) != 0 || get_u32(m, S_RSV1) != 0 ||
        !zeros(m, S_RSV2, KVS__SQE_BYTES - S_RSV2))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): reserved bytes are not zero",
                         t->seq, name);
    return 0;
}

/* ndim, and the extents: each >= 0 up to ndim, zero past it. ndim bounds
 * every loop over the shape, whatever the op. */
static inline int sqe_read_shape(const unsigned char *m, struct kvs__sqe *t, const char *name,
                                 struct kvs__err *e)
{
    if (t->ndim > KVS_MAX_NDIM)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): ndim %d, at most %d",
                         t->seq, name, t->ndim, KVS_MAX_NDIM);
    for (int d = 0; d < KVS_MAX_NDIM; d++) {
        int64_t x = get_i64(m, S_SHAPE + 8 * (size_t)d);

        if (d >= t->ndim) {
            if (x != 0)
                return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): extent %d set "
                                 "past ndim %d", t->seq, name, d, t->ndim);
            continue;
        }
        if (x < 0)
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): extent %" PRId64
                             " in dimension %d", t->seq, name, x, d);
        t->shape[d] = x;
    }
    return 0;
}

/* A table's slot: no key or array, 1 to KVS__TABLE_MAX requests, room
 * for their least entries and results. */
static inline int sqe_check_table(const struct kvs__sqe *t, const char *name,
                                  struct kvs__err *e)
{
    if (t->dtype != 0 || t->ndim != 0 || t->key_id != 0 || t->key_len != 0)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a table's slot with "
                         "a key or an array", t->seq, name);
    if (t->arg < 1 || t->arg > KVS__TABLE_MAX)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a table of %" PRIu64
                         " requests, expected 1 to %d", t->seq, name, t->arg, KVS__TABLE_MAX);
    if (t->data_len < t->arg * (KVS__TAB_ENTRY_BYTES(0) + KVS__TAB_RESULT_BYTES))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a table of %" PRIu64
                         " requests in %" PRIu64 " bytes", t->seq, name, t->arg, t->data_len);
    return 0;
}

/* A row-sparse request (KVS__SQE_ROWS): a PUSH's nnz rows of the full
 * value's dtype and shape, their ids and rows exactly its data; a PULL
 * names no array and no data. The ids themselves are kvsd's to check,
 * once it has its own copy of them. */
static inline int sqe_check_rows(const struct kvs__sqe *t, const char *name,
                                 struct kvs__err *e)
{
    int64_t bytes, row, total;
    int rc;

    if (t->op == KVS__OP_PULL) {
        /* Its data: none, or its arg ids and room after them. */
        if (t->dtype != 0 || t->ndim != 0
            || (t->data_len == 0 && t->data_off != 0)
            || (t->data_len != 0 && (t->arg > t->data_len / sizeof(int64_t)
                                     || (t->data_off & 7) != 0)))
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a row-sparse pull "
                             "with an array, or with %" PRIu64 " data bytes for %" PRIu64
                             " row ids", t->seq, name, t->data_len, t->arg);
        return 0;
    }
    if (t->ndim < 1)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a row-sparse %s of "
                         "ndim %d", t->seq, name, t->op == KVS__OP_INIT ? "init" : "push",
                         t->ndim);
    if ((rc = kvs__value_size(t->dtype, t->ndim, t->shape, &bytes)) != 0
        || (rc = kvs__row_size(t->dtype, t->ndim, t->shape, &row)) != 0) {
        char what[64];

        snprintf(what, sizeof what, "request %" PRIu64 " (%s)", t->seq, name);
        return kvs__size_fail(e, rc, what, (int)t->dtype);
    }
    if (t->arg > (uint64_t)INT64_MAX || (total = kvs__rows_bytes((int64_t)t->arg, row)) < 0
        || t->data_len != (uint64_t)total)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): %" PRIu64 " data bytes "
                         "for %" PRIu64 " rows of %" PRId64, t->seq, name, t->data_len, t->arg,
                         row);
    return 0;
}

/* An array's value: its dtype and shape make a size, which the data is
 * (an INIT's or PUSH's, a device PULL's), 2bit-compressed for a 2bit push
 * with a finite threshold above 0. */
static inline int sqe_check_value(const struct kvs__sqe *t, const char *name,
                                  struct kvs__err *e)
{
    int64_t bytes;
    int rc = kvs__value_size(t->dtype, t->ndim, t->shape, &bytes);

    if (rc != 0) {
        char what[64];

        snprintf(what, sizeof what, "request %" PRIu64 " (%s)", t->seq, name);
        return kvs__size_fail(e, rc, what, (int)t->dtype);
    }
    if (t->flags & KVS__SQE_2BIT) {
        float thr = kvs__arg_threshold(t->arg);

        if (t->dtype != KVS_FLOAT32 || (t->arg >> 32) != 0 || !isfinite(thr) || !(thr > 0))
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a 2bit push of "
                             "dtype %d with threshold bits 0x%" PRIx64, t->seq, name,
                             (int)t->dtype, t->arg);
        bytes = (int64_t)(4 * kvs__gc_2bit_words((size_t)bytes / 4));
    }
    if ((t->op != KVS__OP_PULL || (t->flags & KVS__SQE_DEVICE))
        && t->data_len != (uint64_t)bytes)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): %" PRIu64
                         " data bytes for a value of %" PRId64, t->seq, name,
                         t->data_len, bytes);
    return 0;
}

/* The data range: a text's or a handle's length, a device buffer's
 * number, and the range within staging. Checked for every op: a range is
 * harmless when unused and fatal when used unchecked. A device request's
 * lies in its buffer instead, a remote one's in the worker's memory (the
 * kernel checks that). */
static inline int sqe_check_range(const struct kvs__sqe *t, const char *name,
                                  uint64_t staging_size, struct kvs__err *e)
{
    uint64_t end;

    if (t->op == KVS__OP_SET_OPTIMIZER || t->op == KVS__OP_SAVE_STATES ||
        t->op == KVS__OP_LOAD_STATES) {
        if (t->data_len < 1 || t->data_len > TEXT_MAX)
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): text of %" PRIu64
                             " bytes, expected 1 to %d", t->seq, name, t->data_len, TEXT_MAX);
    }
    if (t->op == KVS__OP_REGISTER && t->data_len != KVS__DEVBUF_HANDLE_BYTES)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a handle of %" PRIu64
                         " bytes, expected %d", t->seq, name, t->data_len,
                         KVS__DEVBUF_HANDLE_BYTES);
    if ((t->op == KVS__OP_REGISTER || (t->flags & KVS__SQE_DEVICE))
        && t->arg >= KVS__DEVBUF_MAX)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): device buffer %" PRIu64
                         ", at most %d", t->seq, name, t->arg, KVS__DEVBUF_MAX - 1);
    if ((t->flags & KVS__SQE_REMOTE) && !(t->flags & KVS__SQE_TABLE)
        && __builtin_add_overflow(t->arg, t->data_len, &end))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): out %" PRIu64 "+%" PRIu64
                         " overflows", t->seq, name, t->arg, t->data_len);
    if (__builtin_add_overflow(t->data_off, t->data_len, &end)
        || (!(t->flags & KVS__SQE_DEVICE)
            && (!(t->flags & KVS__SQE_REMOTE) || (t->flags & KVS__SQE_TABLE))
            && end > staging_size))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): data %" PRIu64 "+%" PRIu64
                         " outside the staging area of %" PRIu64 " bytes", t->seq, name,
                         t->data_off, t->data_len, staging_size);
    return 0;
}

/* The key's name: at most KVS_MAX_KEY_LEN bytes, only with the string-key
 * flag, no NUL inside, zeros after. */
static inline int sqe_read_key(const unsigned char *m, struct kvs__sqe *t, const char *name,
                               struct kvs__err *e)
{
    if (t->key_len > KVS_MAX_KEY_LEN)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): key of %u bytes, at most %d",
                         t->seq, name, (unsigned)t->key_len, KVS_MAX_KEY_LEN);
    if (t->key_len > 0 && !(t->flags & KVS__SQE_STRKEY))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a key name without the "
                         "string-key flag", t->seq, name);
    if (memchr(m + S_KEY_NAME, 0, t->key_len) != NULL)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): NUL inside the key name",
                         t->seq, name);
    if (!zeros(m, S_KEY_NAME + (size_t)t->key_len, KVS_MAX_KEY_LEN - (size_t)t->key_len))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): bytes past the key name",
                         t->seq, name);
    memcpy(t->key_name, m + S_KEY_NAME, t->key_len);
    t->key_name[t->key_len] = '\0';
    return 0;
}

int kvs__sqe_decode(const void *slot, uint64_t staging_size, struct kvs__sqe *s,
                    struct kvs__err *e)
{
    /* The worker can rewrite its slot while we read it: one copy, and
     * from here on only the copy. */
    unsigned char m[KVS__SQE_BYTES];
    struct kvs__sqe t;
    const char *name;
    int rc;

    copy_once(m, slot, sizeof m);
    sqe_read(m, &t);
    if ((name = kvs__op_name(t.op)) == NULL)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 ": unknown op %u", t.seq,
                         (unsigned)t.op);
    if ((rc = sqe_check_flags(m, &t, name, e)) != 0
        || (rc = sqe_read_shape(m, &t, name, e)) != 0)
        return rc;
    if (t.flags & KVS__SQE_TABLE)
        rc = sqe_check_table(&t, name, e);
    else if (t.flags & KVS__SQE_ROWS)
        rc = sqe_check_rows(&t, name, e);
    else if (kvs__op_has_array(t.op))
        rc = sqe_check_value(&t, name, e);
    if (rc != 0
        || (rc = sqe_check_range(&t, name, staging_size, e)) != 0
        || (rc = sqe_read_key(m, &t, name, e)) != 0)
        return rc;
    *s = t;
    return 0;
}

/* ---- CQE ---------------------------------------------------------------- */

void kvs__cqe_encode(const struct kvs__cqe *c, void *slot)
{
    unsigned char *p = slot;

    memset(p, 0, KVS__CQE_BYTES);
    put_u64(p, C_SEQ, c->seq);
    put_i32(p, C_STATUS, c->status);
    put_u32(p, C_FLAGS, c->flags);
    put_u64(p, C_VALUE_OFF, c->value_off);
    put_u64(p, C_VALUE_LEN, c->value_len);
    put_u64(p, C_ROUND, c->round);
    put_text(p, C_MSG, KVS__MSG_MAX, c->msg);
}

int kvs__cqe_decode(const void *slot, uint64_t arena_size, struct kvs__cqe *c,
                    struct kvs__err *e)
{
    unsigned char m[KVS__CQE_BYTES];
    struct kvs__cqe t;
    uint64_t end;

    copy_once(m, slot, sizeof m);
    memset(&t, 0, sizeof t);
    t.seq = get_u64(m, C_SEQ);
    t.status = get_i32(m, C_STATUS);
    t.flags = get_u32(m, C_FLAGS);
    t.value_off = get_u64(m, C_VALUE_OFF);
    t.value_len = get_u64(m, C_VALUE_LEN);
    t.round = get_u64(m, C_ROUND);

    if (!zeros(m, C_RSV1, KVS__CQE_BYTES - C_RSV1))
        return kvs__fail(e, KVS_EPROTO, "completion %" PRIu64 ": reserved bytes are not zero",
                         t.seq);
    if ((t.flags & ~(uint32_t)KVS__CQE_FLAGS) != 0
        || (t.flags & (KVS__CQE_HELD | KVS__CQE_RELEASE)) == (KVS__CQE_HELD | KVS__CQE_RELEASE)
        || ((t.flags & KVS__CQE_ROWS) && (t.flags & (KVS__CQE_HELD | KVS__CQE_RELEASE)))
        || ((t.flags & KVS__CQE_WRITTEN)
            && (t.flags & (KVS__CQE_HELD | KVS__CQE_RELEASE | KVS__CQE_ROWS)))
        || ((t.flags & (KVS__CQE_HELD | KVS__CQE_ROWS | KVS__CQE_WRITTEN)) && t.status != 0))
        return kvs__fail(e, KVS_EPROTO, "completion %" PRIu64 ": flags 0x%x", t.seq,
                         (unsigned)t.flags);
    if (!kvs__status_ok(t.status))
        return kvs__fail(e, KVS_EPROTO, "completion %" PRIu64 ": status %" PRId32
                         " is not an error code", t.seq, t.status);
    if (get_text(m, C_MSG, KVS__MSG_MAX, t.msg) < 0)
        return kvs__fail(e, KVS_EPROTO, "completion %" PRIu64 ": message not NUL-terminated",
                         t.seq);
    if (__builtin_add_overflow(t.value_off, t.value_len, &end) || end > arena_size)
        return kvs__fail(e, KVS_EPROTO, "completion %" PRIu64 ": value %" PRIu64 "+%" PRIu64
                         " outside the arena of %" PRIu64 " bytes", t.seq, t.value_off,
                         t.value_len, arena_size);
    *c = t;
    return 0;
}
