/*
 * wire_msg.c - the byte layouts of the messages between hosts once the
 * roster is made (wire_msg.h): a body naming a key, its dtype and shape,
 * then the data, at fixed little-endian offsets, unused bytes zero; the
 * parts a big key is cut into, and the pieces of 2bit data.
 *
 * The decoder checks every field and every length before anyone sees
 * them, reads each byte once, and never copies the data: it points into
 * the caller's buffer. It never acts on a message (daemon/kvsd/hosts.c
 * does).
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "base/bytes.h"
#include "kernels/compress.h"
#include "proto/slots.h"
#include "proto/wire_msg.h"

/* message body: 56 bytes, then the shape, the key's name, the data */
enum {
    MS_FLAGS = 0,      /* u8: MF_* */
    MS_OP = 1,         /* u8 */
    MS_DTYPE = 2,      /* u8 */
    MS_NDIM = 3,       /* u8 */
    MS_STATUS = 4,     /* i32 */
    MS_KEY_ID = 8,     /* i64 */
    MS_A = 16,         /* u64 */
    MS_B = 24,         /* u64 */
    MS_LEN = 32,       /* u64: data bytes */
    MS_KEY_LEN = 40,   /* u16: a string key's bytes, no NUL */
    MS_RSV = 42,       /* 2 bytes, zero */
    MS_PRIORITY = 44,  /* i32 */
    MS_PART = 48,      /* u32 */
    MS_NPARTS = 52,    /* u32: 0, the whole key */
    MS_SHAPE = 56,     /* i64 per dimension */
    MF_KEY = 1,        /* the message names a key */
    MF_STRKEY = 2,     /* a string key */
    MF_2BIT = 4,       /* data: pieces (kvs__wire_piece_bytes) */
    MF_ROWS = 8,       /* data: rows (kvs__wire_rows_bytes) */
    MF_ZERO = 16,      /* with MF_ROWS in a VALUE: the other rows are zero */
};

_Static_assert(MS_SHAPE == KVS__WIRE_MSG_MIN, "a message's body has another size than its frame's");

/* 1 when a message of type and op names a key (a barrier names none). */
static int names_key(int type, uint8_t op)
{
    return type >= KVS__FRAME_PARTIAL && type <= KVS__FRAME_DONE
           && !(type >= KVS__FRAME_ARRIVE && (op == KVS__OP_BARRIER || op == KVS__OP_COMMIT));
}

/* The data starts 8-aligned: the key's name is padded with zeros. */
static size_t data_off(int ndim, size_t klen)
{
    return (MS_SHAPE + 8 * (size_t)ndim + klen + 7) & ~(size_t)7;
}

size_t kvs__wire_msg_bytes(const struct kvs__wire_msg *m)
{
    return data_off(m->ndim, m->key.name ? strlen(m->key.name) : 0);
}

void kvs__wire_msg_encode(int type, const struct kvs__wire_msg *m, void *buf)
{
    unsigned char *p = buf;
    size_t klen = m->key.name ? strlen(m->key.name) : 0;

    memset(p, 0, data_off(m->ndim, klen));
    if (names_key(type, m->op))
        put_u8(p, MS_FLAGS, (uint8_t)(MF_KEY | (m->key.name ? MF_STRKEY : 0)
                                      | (m->pieces ? MF_2BIT : 0) | (m->rows ? MF_ROWS : 0)
                                      | (m->rows && m->rest_zero ? MF_ZERO : 0)));
    put_u8(p, MS_OP, m->op);
    put_u8(p, MS_DTYPE, (uint8_t)m->dtype);
    put_u8(p, MS_NDIM, (uint8_t)m->ndim);
    put_i32(p, MS_STATUS, m->status);
    put_i64(p, MS_KEY_ID, m->key.name ? 0 : m->key.id);
    put_u64(p, MS_A, m->a);
    put_u64(p, MS_B, m->b);
    put_u64(p, MS_LEN, m->len);
    put_u16(p, MS_KEY_LEN, (uint16_t)klen);
    put_i32(p, MS_PRIORITY, m->priority);
    put_u32(p, MS_PART, m->part);
    put_u32(p, MS_NPARTS, m->nparts);
    for (int i = 0; i < m->ndim; i++)
        put_i64(p, MS_SHAPE + 8 * (size_t)i, m->shape[i]);
    memcpy(p + MS_SHAPE + 8 * (size_t)m->ndim, m->key.name ? m->key.name : "", klen);
}

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;

        a = b;
        b = t;
    }
    return a;
}

uint64_t kvs__wire_row(int ndim, const int64_t *shape)
{
    uint64_t row = 1;

    if (ndim < 2 || shape[0] <= 0)
        return 1;
    for (int i = 1; i < ndim; i++)
        if (shape[i] <= 0 || __builtin_mul_overflow(row, (uint64_t)shape[i], &row))
            return 1;
    return row;
}

void kvs__wire_part(uint64_t count, uint64_t esize, uint64_t row, uint32_t nparts,
                    uint32_t part, uint64_t *first, uint64_t *n)
{
    uint64_t align = esize && esize < 64 ? 64 / esize : 1;
    uint64_t per = nparts ? (count + nparts - 1) / nparts : count;

    /* lcm(align, row); a row so long that it overflows is a part alone. */
    if (row > 1 && (__builtin_mul_overflow(align / gcd_u64(align, row), row, &align)))
        align = count ? count : 1;
    per = (per + align - 1) / align * align;
    *first = (uint64_t)part * per < count ? (uint64_t)part * per : count;
    *n = count - *first < per ? count - *first : per;
}

uint64_t kvs__wire_rows_bytes(uint64_t nnz, uint64_t row_bytes)
{
    return 8 + nnz * (8 + row_bytes);
}

void *kvs__wire_rows_put(void *data, uint64_t nnz, const int64_t *ids)
{
    unsigned char *q = data;

    put_u64(q, 0, nnz);
    if (nnz)
        memcpy(q + 8, ids, nnz * 8);
    return q + 8 + nnz * 8;
}

size_t kvs__wire_piece_bytes(uint64_t count)
{
    return 8 + ((4 * kvs__gc_2bit_words((size_t)count) + 7) & ~(size_t)7);
}

void kvs__wire_piece_put(void *p, float threshold, const uint32_t *words, uint64_t count)
{
    unsigned char *q = p;
    size_t nb = 4 * kvs__gc_2bit_words((size_t)count);

    memset(q, 0, kvs__wire_piece_bytes(count));
    put_u32(q, 0, (uint32_t)kvs__threshold_arg(threshold));
    if (nb)
        memcpy(q + 8, words, nb);
}

float kvs__wire_piece_get(const struct kvs__wire_msg *m, uint64_t count, uint32_t i,
                          const uint32_t **words)
{
    const unsigned char *q = (const unsigned char *)m->data + i * kvs__wire_piece_bytes(count);

    *words = (const uint32_t *)(const void *)(q + 8);
    return kvs__arg_threshold(get_u32(q, 0));
}

/* A message's pieces: of a float32 value in a PARTIAL (1 to 1024) or a
 * FORWARD (1), each with a finite threshold above 0 and zeros where the
 * layout has them. */
static int pieces_check(int type, struct kvs__wire_msg *t, uint64_t count, struct kvs__err *e)
{
    const char *what = kvs__frame_name(type);
    size_t pb = kvs__wire_piece_bytes(count), nb = 4 * kvs__gc_2bit_words((size_t)count);
    uint64_t n = t->len / pb;

    if ((type != KVS__FRAME_PARTIAL && type != KVS__FRAME_FORWARD) || t->dtype != KVS_FLOAT32
        || t->len % pb != 0 || n < 1 || n > (type == KVS__FRAME_FORWARD ? 1 : 1024))
        return kvs__fail(e, KVS_EPROTO, "%s: %" PRIu64 " bytes of 2bit data for a %s value "
                         "of %" PRIu64 " elements", what, t->len, kvs_dtype_name(t->dtype),
                         count);
    t->pieces = (uint32_t)n;
    for (uint32_t i = 0; i < t->pieces; i++) {
        const unsigned char *q = (const unsigned char *)t->data + i * pb;
        const uint32_t *words;
        float thr = kvs__wire_piece_get(t, count, i, &words);
        unsigned char pad[8];

        copy_once(pad, q + 4, 4);
        copy_once(pad + 4, q + 8 + nb, pb - 8 - nb);
        if (!isfinite(thr) || !(thr > 0) || !zeros(pad, 0, 4 + (pb - 8 - nb)))
            return kvs__fail(e, KVS_EPROTO, "%s: piece %" PRIu32 " has threshold %g or "
                             "bytes that must be zero", what, i, (double)thr);
    }
    return 0;
}

/* A rows message's data: of a PARTIAL, a FORWARD or a VALUE with status
 * 0 (MF_ZERO only in the VALUE), not 2bit; nnz at most the rows of
 * elements [first, first + count), its ids ascending within them, and
 * exactly their bytes. */
static int rows_check(int type, uint8_t flags, struct kvs__wire_msg *t, uint64_t first,
                      uint64_t count, const char *what, struct kvs__err *e)
{
    uint64_t row = kvs__wire_row(t->ndim, t->shape), rb = row * kvs_dtype_size(t->dtype);
    uint64_t lo = first / row, n = count / row, nnz;
    const unsigned char *q = t->data;

    if (!(flags & MF_ROWS) || (flags & MF_2BIT) || t->ndim < 1
        || !(type == KVS__FRAME_PARTIAL || type == KVS__FRAME_FORWARD
             || (type == KVS__FRAME_VALUE && t->status == 0))
        || ((flags & MF_ZERO) && type != KVS__FRAME_VALUE))
        return kvs__fail(e, KVS_EPROTO, "%s: rows out of place", what);
    if (t->len < 8)
        return kvs__fail(e, KVS_EPROTO, "%s: %" PRIu64 " bytes of rows", what, t->len);
    nnz = get_u64(q, 0);
    if (nnz > n || t->len != kvs__wire_rows_bytes(nnz, rb))
        return kvs__fail(e, KVS_EPROTO, "%s: %" PRIu64 " rows in %" PRIu64 " bytes, of %"
                         PRIu64 " rows of %" PRIu64 " bytes", what, nnz, t->len, n, rb);
    t->ids = (const int64_t *)(const void *)(q + 8);
    for (uint64_t j = 0; j < nnz; j++) {
        int64_t id = t->ids[j];

        if (id < (int64_t)lo || id >= (int64_t)(lo + n) || (j > 0 && id <= t->ids[j - 1]))
            return kvs__fail(e, KVS_EPROTO, "%s: row id %" PRId64 " at position %" PRIu64
                             " is not ascending within rows [%" PRIu64 ", %" PRIu64 ")", what,
                             id, j, lo, lo + n);
    }
    t->rows = 1;
    t->rest_zero = (flags & MF_ZERO) != 0;
    t->nnz = nnz;
    t->row_data = q + 8 + nnz * 8;
    return 0;
}

/* What data a message of type with status and op must carry: 1 a value,
 * 2 a text, 3 any bytes, 0 none. */
static int data_kind(int type, int32_t status, uint8_t op)
{
    switch (type) {
    case KVS__FRAME_STATES_ASK:
        return op == KVS__OP_LOAD_STATES ? 3 : 0;
    case KVS__FRAME_STATES:
        return status != 0 ? 2 : op == KVS__OP_SAVE_STATES ? 3 : 0;
    case KVS__FRAME_PARTIAL:
    case KVS__FRAME_FORWARD:
        return 1;
    case KVS__FRAME_VALUE:
        return status == 0 ? 1 : 2;
    case KVS__FRAME_DONE:
        return status != 0 ? 2 : op == KVS__OP_INIT ? 1 : 0;
    case KVS__FRAME_OPTIMIZER:
    case KVS__FRAME_FAIL:
        return 2;
    case KVS__FRAME_HEARTBEAT:
        return 4;
    default:
        return 0;
    }
}

/* The decoding of a message, in steps over its payload b of len bytes:
 * each checks one part and fails naming the frame's type (what). Every
 * message between hosts goes through all of them: static inline, one
 * function once compiled. */

/* The body's fixed fields, copied once into h, as they are. */
static inline void msg_read(unsigned char *h, const unsigned char *b, struct kvs__wire_msg *t,
                            uint8_t *flags, size_t *klen)
{
    copy_once(h, b, MS_SHAPE);
    memset(t, 0, sizeof *t);
    *flags = get_u8(h, MS_FLAGS);
    t->op = get_u8(h, MS_OP);
    t->dtype = (kvs_dtype_t)get_u8(h, MS_DTYPE);
    t->ndim = get_u8(h, MS_NDIM);
    t->status = get_i32(h, MS_STATUS);
    t->key.id = get_i64(h, MS_KEY_ID);
    t->a = get_u64(h, MS_A);
    t->b = get_u64(h, MS_B);
    t->len = get_u64(h, MS_LEN);
    *klen = get_u16(h, MS_KEY_LEN);
    t->priority = get_i32(h, MS_PRIORITY);
    t->part = get_u32(h, MS_PART);
    t->nparts = get_u32(h, MS_NPARTS);
}

/* Reserved bits, a priority, a part, a status: each only where the type
 * has it. */
static inline int msg_check_fields(int type, const unsigned char *h, uint8_t flags,
                                   const struct kvs__wire_msg *t, const char *what,
                                   struct kvs__err *e)
{
    int ordered = type == KVS__FRAME_PARTIAL || type == KVS__FRAME_VALUE
                  || type == KVS__FRAME_FORWARD;

    if (!zeros(h, MS_RSV, MS_PRIORITY - MS_RSV)
        || (flags & ~(MF_KEY | MF_STRKEY | MF_2BIT | MF_ROWS | MF_ZERO))
        || (t->priority != 0 && !ordered))
        return kvs__fail(e, KVS_EPROTO, "%s: reserved bits are not zero", what);
    if (t->nparts == 0 ? t->part != 0
        : !ordered || t->nparts < 2 || t->nparts > KVS__PARTS_MAX || t->part >= t->nparts)
        return kvs__fail(e, KVS_EPROTO, "%s: part %" PRIu32 " of %" PRIu32 " out of place",
                         what, t->part, t->nparts);
    if (!kvs__status_ok(t->status) || (t->status && type != KVS__FRAME_VALUE
                                       && type != KVS__FRAME_DONE && type != KVS__FRAME_FAIL
                                       && type != KVS__FRAME_STATES))
        return kvs__fail(e, KVS_EPROTO, "%s: status %" PRId32 " out of place", what,
                         t->status);
    if (type == KVS__FRAME_FAIL && t->status == 0)
        return kvs__fail(e, KVS_EPROTO, "fail: no status");
    return 0;
}

/* The op the type allows (a collective's, a save's or a load's, else
 * none), a known dtype, and ndim within bounds. */
static inline int msg_check_op(int type, const struct kvs__wire_msg *t, const char *what,
                               struct kvs__err *e)
{
    if (type == KVS__FRAME_ARRIVE || type == KVS__FRAME_DONE) {
        if (t->op != KVS__OP_INIT && t->op != KVS__OP_BARRIER && t->op != KVS__OP_COMMIT)
            return kvs__fail(e, KVS_EPROTO, "%s: op %u is no collective", what,
                             (unsigned)t->op);
    } else if (type == KVS__FRAME_STATES_ASK || type == KVS__FRAME_STATES) {
        if (t->op != KVS__OP_SAVE_STATES && t->op != KVS__OP_LOAD_STATES)
            return kvs__fail(e, KVS_EPROTO, "%s: op %u is no save or load", what,
                             (unsigned)t->op);
    } else if (t->op != 0) {
        return kvs__fail(e, KVS_EPROTO, "%s: op %u out of place", what, (unsigned)t->op);
    }
    if (t->ndim > KVS_MAX_NDIM || (unsigned)t->dtype > KVS_UINT8)
        return kvs__fail(e, KVS_EPROTO, "%s: dtype %d, ndim %d", what, (int)t->dtype,
                         t->ndim);
    return 0;
}

/* The lengths: the body's and the data's make len exactly, the padding
 * after the key's name is zero; then the shape, copied once into h after
 * the fixed fields, each extent >= 0 and their product (*count, from 1)
 * bounded. */
static inline int msg_read_shape(unsigned char *h, const unsigned char *b, size_t len,
                                 size_t klen, struct kvs__wire_msg *t, uint64_t *count,
                                 const char *what, struct kvs__err *e)
{
    size_t body = MS_SHAPE + 8 * (size_t)t->ndim, doff = data_off(t->ndim, klen);
    unsigned char pad[8];
    size_t npad;

    if (len < doff || t->len != len - doff)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, but its fields say %zu and %" PRIu64
                         " more", what, len, doff, t->len);
    npad = doff - body - klen;
    copy_once(pad, b + body + klen, npad);
    if (!zeros(pad, 0, npad))
        return kvs__fail(e, KVS_EPROTO, "%s: padding is not zero", what);
    copy_once(h + MS_SHAPE, b + MS_SHAPE, body - MS_SHAPE);
    for (int i = 0; i < t->ndim; i++) {
        t->shape[i] = get_i64(h, MS_SHAPE + 8 * (size_t)i);
        if (t->shape[i] < 0
            || (t->shape[i] > 0 && *count > KVS__WIRE_PAYLOAD_MAX / (uint64_t)t->shape[i]))
            return kvs__fail(e, KVS_EPROTO, "%s: extent %" PRId64 " out of range", what,
                             t->shape[i]);
        *count *= (uint64_t)t->shape[i];
    }
    return 0;
}

/* A key exactly where the type names one (a barrier names none): a
 * string key's name (copied once into t->name) or an int key's id; no
 * key, dtype or shape elsewhere. */
static inline int msg_read_key(int type, const unsigned char *b, uint8_t flags, size_t klen,
                               struct kvs__wire_msg *t, const char *what, struct kvs__err *e)
{
    if (!names_key(type, t->op)) {
        if (flags || klen || t->key.id || t->ndim || t->dtype)
            return kvs__fail(e, KVS_EPROTO, "%s: fields a %s does not use are not zero", what,
                             what);
        return 0;
    }
    if (!(flags & MF_KEY))
        return kvs__fail(e, KVS_EPROTO, "%s: no key", what);
    if (flags & MF_STRKEY) {
        if (klen == 0 || klen > KVS_MAX_KEY_LEN || t->key.id != 0)
            return kvs__fail(e, KVS_EPROTO, "%s: a string key of %zu bytes", what, klen);
        copy_once(t->name, b + MS_SHAPE + 8 * (size_t)t->ndim, klen);
        t->name[klen] = '\0';
        if (strlen(t->name) != klen)
            return kvs__fail(e, KVS_EPROTO, "%s: a NUL inside the key", what);
        t->key.name = t->name;
    } else if (klen != 0) {
        return kvs__fail(e, KVS_EPROTO, "%s: an int key with a name", what);
    }
    return 0;
}

/* The data (at b + its offset, pointed at, never copied): what the type
 * carries (data_kind), a value of the shape (of the part's elements when
 * the key is cut in parts) or its pieces, a text, or nothing. */
static inline int msg_check_data(int type, const unsigned char *b, uint8_t flags, size_t klen,
                                 struct kvs__wire_msg *t, uint64_t count, const char *what,
                                 struct kvs__err *e)
{
    int kind = data_kind(type, t->status, t->op), rc;
    uint64_t esize = kvs_dtype_size(t->dtype);

    uint64_t first = 0;

    if (t->nparts) {                   /* the data is the part's range */
        kvs__wire_part(count, esize, kvs__wire_row(t->ndim, t->shape), t->nparts, t->part,
                       &first, &count);
    }
    t->data = b + data_off(t->ndim, klen);
    if (flags & (MF_ROWS | MF_ZERO))
        return rows_check(type, flags, t, first, count, what, e);
    if (flags & MF_2BIT) {
        if ((rc = pieces_check(type, t, count, e)) != 0)
            return rc;
    } else if (kind == 1 && t->len != count * esize)
        return kvs__fail(e, KVS_EPROTO, "%s: %" PRIu64 " bytes of data, its %s shape takes %"
                         PRIu64, what, t->len, kvs_dtype_name(t->dtype), count * esize);
    if (kind == 2 && (t->len > KVS__WIRE_TEXT_MAX || memchr(t->data, 0, t->len)))
        return kvs__fail(e, KVS_EPROTO, "%s: a text of %" PRIu64 " bytes, or with a NUL", what,
                         t->len);
    if ((kind == 0 && t->len != 0) || (kind == 4 && t->len != 0 && t->len != 8))
        return kvs__fail(e, KVS_EPROTO, "%s: %" PRIu64 " bytes of data where %s goes", what,
                         t->len, kind == 4 ? "none or 8" : "none");
    return 0;
}

int kvs__wire_msg_decode(int type, const void *buf, size_t len, struct kvs__wire_msg *m,
                         struct kvs__err *e)
{
    const unsigned char *b = buf;
    unsigned char h[MS_SHAPE + 8 * KVS_MAX_NDIM];
    const char *what = kvs__frame_name(type);
    struct kvs__wire_msg t;
    uint8_t flags;
    size_t klen;
    uint64_t count = 1;
    int rc;

    if (type < KVS__FRAME_PARTIAL || type >= KVS__FRAME_TYPES)
        return kvs__fail(e, KVS_EPROTO, "frame: type %d is no message", type);
    if (!buf || len < MS_SHAPE)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, below a message's %d", what,
                         buf ? len : 0, MS_SHAPE);
    msg_read(h, b, &t, &flags, &klen);
    if ((rc = msg_check_fields(type, h, flags, &t, what, e)) != 0
        || (rc = msg_check_op(type, &t, what, e)) != 0
        || (rc = msg_read_shape(h, b, len, klen, &t, &count, what, e)) != 0
        || (rc = msg_read_key(type, b, flags, klen, &t, what, e)) != 0
        || (rc = msg_check_data(type, b, flags, klen, &t, count, what, e)) != 0)
        return rc;
    *m = t;
    if (t.key.name)
        m->key.name = m->name;
    return 0;
}

/* a + b, at most KVS__WIRE_PAYLOAD_MAX */
static uint64_t cap_add(uint64_t a, uint64_t b)
{
    return a > KVS__WIRE_PAYLOAD_MAX || b > KVS__WIRE_PAYLOAD_MAX - a ? KVS__WIRE_PAYLOAD_MAX
                                                                      : a + b;
}

/* The bytes of n pieces of a float32 value of at most value bytes: a
 * piece of a part is no longer than a piece of the whole. */
static uint64_t pieces_max(uint64_t value, uint64_t n)
{
    uint64_t one = kvs__wire_piece_bytes(value / 4);

    return n && one > KVS__WIRE_PAYLOAD_MAX / n ? KVS__WIRE_PAYLOAD_MAX : one * n;
}

uint64_t kvs__wire_msg_max(int type, const struct kvs__wire_bounds *b)
{
    uint64_t body = data_off(KVS_MAX_NDIM, KVS_MAX_KEY_LEN), data, value = b->value;

    if (value > KVS__WIRE_PAYLOAD_MAX)
        value = KVS__WIRE_PAYLOAD_MAX;
    switch (type) {
    case KVS__FRAME_PARTIAL:
        data = pieces_max(value, b->pieces ? b->pieces : 1);
        data = data > value ? data : value;
        break;
    case KVS__FRAME_FORWARD:
        data = pieces_max(value, 1);
        data = data > value ? data : value;
        break;
    case KVS__FRAME_VALUE:
    case KVS__FRAME_DONE:
        data = value > KVS__WIRE_TEXT_MAX ? value : KVS__WIRE_TEXT_MAX;
        break;
    case KVS__FRAME_STATES_ASK:
        data = b->states;
        break;
    case KVS__FRAME_STATES:
        data = b->states > KVS__WIRE_TEXT_MAX ? b->states : KVS__WIRE_TEXT_MAX;
        break;
    case KVS__FRAME_ARRIVE:
    case KVS__FRAME_LEFT:
    case KVS__FRAME_BYE:
        data = 0;
        break;
    case KVS__FRAME_OPTIMIZER:
    case KVS__FRAME_FAIL:
        data = KVS__WIRE_TEXT_MAX;
        break;
    case KVS__FRAME_HEARTBEAT:
        data = 8;
        break;
    default:
        return 0;
    }
    /* Rows: their ids (8 bytes a row, and the count) beside the value's
     * bytes they are a part of. */
    if (b->rows && (type == KVS__FRAME_PARTIAL || type == KVS__FRAME_VALUE
                    || type == KVS__FRAME_FORWARD)) {
        uint64_t rows = b->rows > KVS__WIRE_PAYLOAD_MAX / 8 ? KVS__WIRE_PAYLOAD_MAX / 8 : b->rows;
        uint64_t r = cap_add(value, 8 + 8 * rows);

        data = data > r ? data : r;
    }
    return cap_add(body, data);
}

const char *kvs__wire_msg_text(const struct kvs__wire_msg *m, char *buf)
{
    memcpy(buf, m->data, m->len);
    buf[m->len] = '\0';
    return buf;
}
