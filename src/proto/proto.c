/*
 * proto.c - the byte layouts of what crosses between a worker and kvsd:
 * the hello and welcome messages of the handshake, and the request (SQE)
 * and completion (CQE) slots of the rings in shared memory; and between
 * kvsctl and kvsd: the control request and its reply.
 *
 * Every field sits at a fixed offset, little-endian, written and read a
 * byte at a time, so the layout does not depend on the compiler's struct
 * padding or the host's byte order. Bytes no field uses must be zero, so
 * every valid message has exactly one encoding and a later version can
 * give them a meaning.
 *
 * It must never trust a byte twice: a decoder copies the slot (which the
 * other process may be rewriting) into a local buffer once, parses only
 * that copy, and checks every field before its caller sees it. It never
 * reads outside the slot or message it was given, and never allocates.
 */
#include <endian.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "kernels/compress.h"
#include "proto/proto.h"
#include "shm/shm.h"

/* ---- layouts ------------------------------------------------------------ */

/* Message types (enum kvs__msg_type): the byte after the magic, so that a
 * welcome fed to the hello decoder (or the reverse) is refused by name. */
enum {
    TYPE_HELLO = KVS__MSG_HELLO, TYPE_WELCOME = KVS__MSG_WELCOME,
    TYPE_CTL_REQUEST = KVS__MSG_CTL_REQUEST, TYPE_CTL_REPLY = KVS__MSG_CTL_REPLY,
};

/* hello: 128 bytes */
enum {
    H_MAGIC = 0,       /* u32 */
    H_TYPE = 4,        /* u8 */
    H_MODE = 5,        /* u8 */
    H_RSV0 = 6,        /* u16, zero */
    H_VERSION = 8,     /* u32 */
    H_RANK = 12,       /* i32 */
    H_NWORKERS = 16,   /* i32 */
    H_JOB = 20,        /* KVS__JOB_MAX + 1 bytes, NUL-terminated, zero after the NUL */
    H_RSV1 = H_JOB + KVS__JOB_MAX + 1,  /* zero up to H_PROBE */
    H_PROBE = 88,      /* u64 */
    H_COOKIE = 96,     /* KVS__COOKIE_BYTES */
    H_RSV2 = H_COOKIE + KVS__COOKIE_BYTES,  /* zero up to the end */
};

/* welcome: 288 bytes */
enum {
    W_MAGIC = 0,       /* u32 */
    W_TYPE = 4,        /* u8 */
    W_RSV0 = 5,        /* 3 bytes, zero */
    W_VERSION = 8,     /* u32 */
    W_STATUS = 12,     /* i32 */
    W_WORKER = 16,     /* u32 */
    W_SQ_ENTRIES = 20, /* u32 */
    W_CQ_ENTRIES = 24, /* u32 */
    W_FLAGS = 28,      /* u32, KVS__WELCOME_* */
    W_CONTROL_SIZE = 32,
    W_SEG_SIZE = 40,
    W_ARENA_SIZE = 48,
    W_STAGING_OFF = 56,
    W_STAGING_SIZE = 64, /* the five u64 */
    W_MSG = 72,        /* KVS__MSG_MAX bytes, NUL-terminated, zero after the NUL */
    W_COMBINE_SIZE = W_MSG + KVS__MSG_MAX,  /* u64 */
    W_RSV2 = W_COMBINE_SIZE + 8,        /* zero up to the end */
};

/* control request: 96 bytes */
enum {
    Q_MAGIC = 0,       /* u32 */
    Q_TYPE = 4,        /* u8 */
    Q_COMMAND = 5,     /* u8 */
    Q_RSV0 = 6,        /* u16, zero */
    Q_VERSION = 8,     /* u32 */
    Q_JOB = 12,        /* KVS__JOB_MAX + 1 bytes, NUL-terminated, zero after the NUL */
    Q_RSV1 = Q_JOB + KVS__JOB_MAX + 1,  /* zero up to the end */
};

/* control reply: 24 bytes, then the text (no NUL; its length is in the head
 * and must be the rest of the message exactly) */
enum {
    R_MAGIC = 0,       /* u32 */
    R_TYPE = 4,        /* u8 */
    R_RSV0 = 5,        /* 3 bytes, zero */
    R_VERSION = 8,     /* u32 */
    R_STATUS = 12,     /* i32 */
    R_LEN = 16,        /* u32 */
    R_RSV1 = 20,       /* u32, zero */
    R_TEXT = 24,
};

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

_Static_assert(H_RSV1 <= H_PROBE && H_RSV2 <= KVS__HELLO_BYTES,
               "hello layout overflows its size");
_Static_assert(W_RSV2 <= KVS__WELCOME_BYTES, "welcome layout overflows its size");
_Static_assert(Q_RSV1 <= KVS__CTL_REQUEST_BYTES, "control request layout overflows its size");
_Static_assert(R_TEXT == KVS__CTL_REPLY_HEAD, "control reply head has another size");
_Static_assert(KVS__CTL_TEXT_MAX <= UINT32_MAX, "a reply's length is a u32");
_Static_assert(S_RSV2 <= KVS__SQE_BYTES, "SQE layout overflows its slot");
_Static_assert(C_RSV1 <= KVS__CQE_BYTES, "CQE layout overflows its slot");
_Static_assert(KVS_MAX_KEY_LEN <= UINT16_MAX, "key_len is a u16");

/* The smallest prefix that tells the magic, the type and the version: a
 * message of another version is reported as such, not as a bad length. */
#define HEAD_BYTES 12

/* Text carried in the staging area (optimizer spec, state file path). */
#define TEXT_MAX 4095

/* ---- checks -------------------------------------------------------------- */

int kvs__status_ok(int32_t s)
{
    return s == 0 || (s >= -30999 && s <= -30000) || (s >= -4095 && s <= -1);
}

static int pow2(uint32_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

/* Magic, type and version of a handshake message already copied to m. */
static int check_head(const unsigned char *m, size_t len, size_t want, int type,
                      const char *what, struct kvs__err *e)
{
    uint32_t magic, version;

    if (len < HEAD_BYTES)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, expected %zu", what, len, want);
    magic = get_u32(m, 0);
    if (magic != KVS__PROTO_MAGIC)
        return kvs__fail(e, KVS_EPROTO, "%s: bad magic 0x%08" PRIx32 ", expected 0x%08x",
                         what, magic, KVS__PROTO_MAGIC);
    if (get_u8(m, 4) != type)
        return kvs__fail(e, KVS_EPROTO, "%s: message type %u, expected %d", what,
                         (unsigned)get_u8(m, 4), type);
    version = get_u32(m, 8);
    if (version != KVS__PROTO_VERSION)
        return kvs__fail(e, KVS_EPROTO, "%s: protocol version %" PRIu32 ", this is version %u",
                         what, version, KVS__PROTO_VERSION);
    if (len != want)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, expected %zu", what, len, want);
    return 0;
}

int kvs__msg_type(const void *buf, size_t len)
{
    unsigned char m[5];

    if (buf == NULL || len < sizeof m)
        return 0;
    copy_once(m, buf, sizeof m);
    if (get_u32(m, 0) != KVS__PROTO_MAGIC)
        return 0;
    return get_u8(m, 4);
}

/* ---- hello -------------------------------------------------------------- */

size_t kvs__hello_encode(const struct kvs__hello *h, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, KVS__HELLO_BYTES);
    put_u32(p, H_MAGIC, KVS__PROTO_MAGIC);
    put_u8(p, H_TYPE, TYPE_HELLO);
    put_u8(p, H_MODE, h->mode);
    put_u32(p, H_VERSION, h->version);
    put_i32(p, H_RANK, h->rank);
    put_i32(p, H_NWORKERS, h->nworkers);
    put_text(p, H_JOB, KVS__JOB_MAX + 1, h->job);
    put_u64(p, H_PROBE, h->probe);
    memcpy(p + H_COOKIE, h->cookie, KVS__COOKIE_BYTES);
    return KVS__HELLO_BYTES;
}

int kvs__hello_decode(const void *buf, size_t len, struct kvs__hello *h, struct kvs__err *e)
{
    unsigned char m[KVS__HELLO_BYTES];
    struct kvs__hello t;
    struct kvs__err je;
    int rc;

    if (buf == NULL)
        return kvs__fail(e, KVS_EPROTO, "hello: no message");
    copy_once(m, buf, len < sizeof m ? len : sizeof m);
    if ((rc = check_head(m, len, KVS__HELLO_BYTES, TYPE_HELLO, "hello", e)) != 0)
        return rc;
    if (get_u16(m, H_RSV0) != 0 || !zeros(m, H_RSV1, H_PROBE - H_RSV1)
        || !zeros(m, H_RSV2, KVS__HELLO_BYTES - H_RSV2))
        return kvs__fail(e, KVS_EPROTO, "hello: reserved bytes are not zero");

    memset(&t, 0, sizeof t);
    t.version = get_u32(m, H_VERSION);
    t.mode = get_u8(m, H_MODE);
    t.rank = get_i32(m, H_RANK);
    t.nworkers = get_i32(m, H_NWORKERS);
    t.probe = get_u64(m, H_PROBE);
    memcpy(t.cookie, m + H_COOKIE, KVS__COOKIE_BYTES);
    if (!t.probe && !zeros(m, H_COOKIE, KVS__COOKIE_BYTES))
        return kvs__fail(e, KVS_EPROTO, "hello: a cookie without a probe address");
    if (t.mode != KVS__MODE_SYNC && t.mode != KVS__MODE_ASYNC)
        return kvs__fail(e, KVS_EPROTO, "hello: unknown mode %u", (unsigned)t.mode);
    if (t.nworkers < 1 || t.nworkers > 1024)
        return kvs__fail(e, KVS_EPROTO, "hello: %" PRId32 " workers, expected 1 to 1024",
                         t.nworkers);
    if (t.rank < 0 || t.rank >= t.nworkers)
        return kvs__fail(e, KVS_EPROTO, "hello: rank %" PRId32 " outside [0, %" PRId32 ")",
                         t.rank, t.nworkers);
    if (get_text(m, H_JOB, KVS__JOB_MAX + 1, t.job) < 0)
        return kvs__fail(e, KVS_EPROTO, "hello: job name not NUL-terminated");
    if (kvs__job_name_check(t.job, &je) != 0)
        return kvs__fail(e, KVS_EPROTO, "hello: %s", je.msg);
    *h = t;
    return 0;
}

/* ---- welcome ------------------------------------------------------------ */

size_t kvs__welcome_encode(const struct kvs__welcome *w, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, KVS__WELCOME_BYTES);
    put_u32(p, W_MAGIC, KVS__PROTO_MAGIC);
    put_u8(p, W_TYPE, TYPE_WELCOME);
    put_u32(p, W_VERSION, w->version);
    put_i32(p, W_STATUS, w->status);
    put_u32(p, W_WORKER, w->worker);
    put_u32(p, W_SQ_ENTRIES, w->sq_entries);
    put_u32(p, W_CQ_ENTRIES, w->cq_entries);
    put_u32(p, W_FLAGS, w->flags);
    put_u64(p, W_CONTROL_SIZE, w->control_size);
    put_u64(p, W_SEG_SIZE, w->seg_size);
    put_u64(p, W_ARENA_SIZE, w->arena_size);
    put_u64(p, W_STAGING_OFF, w->staging_off);
    put_u64(p, W_STAGING_SIZE, w->staging_size);
    put_text(p, W_MSG, KVS__MSG_MAX, w->msg);
    put_u64(p, W_COMBINE_SIZE, w->combine_size);
    return KVS__WELCOME_BYTES;
}

int kvs__welcome_decode(const void *buf, size_t len, struct kvs__welcome *w,
                        struct kvs__err *e)
{
    unsigned char m[KVS__WELCOME_BYTES];
    struct kvs__welcome t;
    uint64_t end;
    int rc;

    if (buf == NULL)
        return kvs__fail(e, KVS_EPROTO, "welcome: no message");
    copy_once(m, buf, len < sizeof m ? len : sizeof m);
    if ((rc = check_head(m, len, KVS__WELCOME_BYTES, TYPE_WELCOME, "welcome", e)) != 0)
        return rc;
    if (!zeros(m, W_RSV0, 3) || (get_u32(m, W_FLAGS) & ~(KVS__WELCOME_REMOTE | KVS__WELCOME_COMBINE)) != 0 ||
        !zeros(m, W_RSV2, KVS__WELCOME_BYTES - W_RSV2))
        return kvs__fail(e, KVS_EPROTO, "welcome: reserved bytes are not zero");

    memset(&t, 0, sizeof t);
    t.version = get_u32(m, W_VERSION);
    t.status = get_i32(m, W_STATUS);
    t.worker = get_u32(m, W_WORKER);
    t.sq_entries = get_u32(m, W_SQ_ENTRIES);
    t.cq_entries = get_u32(m, W_CQ_ENTRIES);
    t.flags = get_u32(m, W_FLAGS);
    t.control_size = get_u64(m, W_CONTROL_SIZE);
    t.seg_size = get_u64(m, W_SEG_SIZE);
    t.arena_size = get_u64(m, W_ARENA_SIZE);
    t.staging_off = get_u64(m, W_STAGING_OFF);
    t.staging_size = get_u64(m, W_STAGING_SIZE);
    t.combine_size = get_u64(m, W_COMBINE_SIZE);
    if (!kvs__status_ok(t.status))
        return kvs__fail(e, KVS_EPROTO, "welcome: status %" PRId32 " is not an error code",
                         t.status);
    if (get_text(m, W_MSG, KVS__MSG_MAX, t.msg) < 0)
        return kvs__fail(e, KVS_EPROTO, "welcome: message not NUL-terminated");
    /* A refusal carries no geometry: the worker maps nothing. */
    if (t.status == 0) {
        if (!pow2(t.sq_entries) || !pow2(t.cq_entries))
            return kvs__fail(e, KVS_EPROTO, "welcome: ring sizes %" PRIu32 "/%" PRIu32
                             " are not powers of two", t.sq_entries, t.cq_entries);
        if (t.control_size == 0 || t.seg_size == 0 || t.arena_size == 0)
            return kvs__fail(e, KVS_EPROTO, "welcome: a segment of size 0");
        if ((t.combine_size != 0) != ((t.flags & KVS__WELCOME_COMBINE) != 0))
            return kvs__fail(e, KVS_EPROTO, "welcome: a combine area of %" PRIu64 " bytes "
                             "with flags 0x%" PRIx32, t.combine_size, t.flags);
        if (__builtin_add_overflow(t.staging_off, t.staging_size, &end) || end > t.seg_size)
            return kvs__fail(e, KVS_EPROTO, "welcome: staging %" PRIu64 "+%" PRIu64
                             " outside the segment of %" PRIu64 " bytes",
                             t.staging_off, t.staging_size, t.seg_size);
    }
    *w = t;
    return 0;
}

/* ---- control ------------------------------------------------------------ */

const char *kvs__ctl_command_name(int command)
{
    switch (command) {
    case KVS__CTL_STATUS: return "status";
    case KVS__CTL_KEYS: return "keys";
    case KVS__CTL_STATS: return "stats";
    case KVS__CTL_STOP: return "stop";
    case KVS__CTL_SAMPLE: return "sample";
    default: return NULL;
    }
}

size_t kvs__ctl_text_char(const void *s, size_t n)
{
    const unsigned char *p = s;
    uint32_t c, min;
    size_t k;

    if (p == NULL || n == 0)
        return 0;
    if (p[0] < 0x80)
        return (p[0] >= 0x20 && p[0] != 0x7f) || p[0] == '\t' || p[0] == '\n';
    /* The length from the lead byte; continuation bytes and the leads of
     * what would be above U+10FFFF (0xf5 and up) are no start. */
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        k = 2, c = p[0] & 0x1fu, min = 0x80;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        k = 3, c = p[0] & 0x0fu, min = 0x800;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        k = 4, c = p[0] & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (p[i] & 0x3fu);
    }
    /* Overlong forms, surrogates, beyond Unicode, and C1 controls. */
    if (c < min || (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff || c <= 0x9f)
        return 0;
    return k;
}

size_t kvs__ctl_text_escape(char *buf, size_t size, const char *s, size_t n, int quote)
{
    size_t o = 0;

    for (size_t i = 0, k; i < n; i += k) {
        char tmp[8];
        size_t m;

        k = kvs__ctl_text_char(s + i, n - i);
        if (k == 0) {
            static const char hex[] = "0123456789abcdef";
            unsigned char c = (unsigned char)s[i];

            memcpy(tmp, "\\x", 2);
            tmp[2] = hex[c >> 4];
            tmp[3] = hex[c & 15];
            m = 4;
            k = 1;
        } else if (quote && k == 1 && (s[i] == '"' || s[i] == '\\' || s[i] == '\t' ||
                                       s[i] == '\n')) {
            tmp[0] = '\\';
            tmp[1] = s[i] == '\t' ? 't' : s[i] == '\n' ? 'n' : s[i];
            m = 2;
        } else {
            memcpy(tmp, s + i, k);
            m = k;
        }
        if (m >= size - o)
            break;
        memcpy(buf + o, tmp, m);
        o += m;
    }
    buf[o] = '\0';
    return o;
}

size_t kvs__ctl_request_encode(const struct kvs__ctl_request *q, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, KVS__CTL_REQUEST_BYTES);
    put_u32(p, Q_MAGIC, KVS__PROTO_MAGIC);
    put_u8(p, Q_TYPE, TYPE_CTL_REQUEST);
    put_u8(p, Q_COMMAND, q->command);
    put_u32(p, Q_VERSION, q->version);
    put_text(p, Q_JOB, KVS__JOB_MAX + 1, q->job);
    return KVS__CTL_REQUEST_BYTES;
}

int kvs__ctl_request_decode(const void *buf, size_t len, struct kvs__ctl_request *q,
                            struct kvs__err *e)
{
    unsigned char m[KVS__CTL_REQUEST_BYTES];
    struct kvs__ctl_request t;
    struct kvs__err je;
    int rc;

    if (buf == NULL)
        return kvs__fail(e, KVS_EPROTO, "control request: no message");
    copy_once(m, buf, len < sizeof m ? len : sizeof m);
    if ((rc = check_head(m, len, KVS__CTL_REQUEST_BYTES, TYPE_CTL_REQUEST, "control request",
                         e)) != 0)
        return rc;
    if (get_u16(m, Q_RSV0) != 0 || !zeros(m, Q_RSV1, KVS__CTL_REQUEST_BYTES - Q_RSV1))
        return kvs__fail(e, KVS_EPROTO, "control request: reserved bytes are not zero");

    memset(&t, 0, sizeof t);
    t.version = get_u32(m, Q_VERSION);
    t.command = get_u8(m, Q_COMMAND);
    if (kvs__ctl_command_name(t.command) == NULL)
        return kvs__fail(e, KVS_EPROTO, "control request: unknown command %u",
                         (unsigned)t.command);
    if (get_text(m, Q_JOB, KVS__JOB_MAX + 1, t.job) < 0)
        return kvs__fail(e, KVS_EPROTO, "control request: job name not NUL-terminated");
    if (kvs__job_name_check(t.job, &je) != 0)
        return kvs__fail(e, KVS_EPROTO, "control request: %s", je.msg);
    *q = t;
    return 0;
}

size_t kvs__ctl_reply_encode(const struct kvs__ctl_reply *r, void *buf)
{
    unsigned char *p = buf;

    if (r->len > KVS__CTL_TEXT_MAX)
        return 0;
    memset(p, 0, R_TEXT);
    put_u32(p, R_MAGIC, KVS__PROTO_MAGIC);
    put_u8(p, R_TYPE, TYPE_CTL_REPLY);
    put_u32(p, R_VERSION, r->version);
    put_i32(p, R_STATUS, r->status);
    put_u32(p, R_LEN, r->len);
    memcpy(p + R_TEXT, r->text, r->len);
    return R_TEXT + (size_t)r->len;
}

int kvs__ctl_reply_decode(const void *buf, size_t len, struct kvs__ctl_reply *r,
                          struct kvs__err *e)
{
    /* Only the text is big: it is copied once, straight into the local
     * struct, and checked there. */
    static const size_t head = R_TEXT;
    unsigned char m[R_TEXT];
    struct kvs__ctl_reply t;
    uint32_t tlen;
    int rc;

    if (buf == NULL)
        return kvs__fail(e, KVS_EPROTO, "control reply: no message");
    copy_once(m, buf, len < head ? len : head);
    /* The length is the text's business, checked below; the head's checks
     * need only the head. */
    if ((rc = check_head(m, len, len < head ? head : len, TYPE_CTL_REPLY, "control reply",
                         e)) != 0)
        return rc;
    if (!zeros(m, R_RSV0, 3) || get_u32(m, R_RSV1) != 0)
        return kvs__fail(e, KVS_EPROTO, "control reply: reserved bytes are not zero");
    tlen = get_u32(m, R_LEN);
    if (tlen > KVS__CTL_TEXT_MAX)
        return kvs__fail(e, KVS_EPROTO, "control reply: text of %" PRIu32 " bytes, at most %d",
                         tlen, KVS__CTL_TEXT_MAX);
    if (len - head != tlen)
        return kvs__fail(e, KVS_EPROTO, "control reply: %zu bytes, expected %zu", len,
                         head + tlen);

    t.version = get_u32(m, R_VERSION);
    t.status = get_i32(m, R_STATUS);
    t.len = tlen;
    if (!kvs__status_ok(t.status))
        return kvs__fail(e, KVS_EPROTO, "control reply: status %" PRId32
                         " is not an error code", t.status);
    copy_once(t.text, (const unsigned char *)buf + head, tlen);
    t.text[tlen] = '\0';
    for (size_t i = 0, k; i < tlen; i += k)
        if ((k = kvs__ctl_text_char(t.text + i, tlen - i)) == 0)
            return kvs__fail(e, KVS_EPROTO, "control reply: byte %zu of the text (0x%02x) is "
                             "not printable UTF-8", i, (unsigned)(unsigned char)t.text[i]);
    /* Only what the text holds is copied out: the struct is big. */
    r->version = t.version;
    r->status = t.status;
    r->len = t.len;
    memcpy(r->text, t.text, (size_t)tlen + 1);
    return 0;
}

/* ---- SQE ---------------------------------------------------------------- */

/* Why a dtype and shape make no value: */
enum { SIZE_OK, SIZE_DTYPE, SIZE_SHAPE, SIZE_BYTES };

/* The bytes of a value of dtype and shape (ndim extents, each >= 0) in
 * *bytes, by the rule of kvs__array_check, which the engine applies: an
 * empty array is empty however big its other extents, and a size must
 * fit an int64. SIZE_OK, or why not. */
static int value_size(kvs_dtype_t dtype, int ndim, const int64_t *shape, int64_t *bytes)
{
    int64_t es = (int64_t)kvs_dtype_size(dtype), count = 1;

    if (es == 0)
        return SIZE_DTYPE;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0)
            count = 0;
    for (int d = 0; d < ndim && count; d++)
        if (__builtin_mul_overflow(count, shape[d], &count))
            return SIZE_SHAPE;
    return __builtin_mul_overflow(count, es, bytes) ? SIZE_BYTES : SIZE_OK;
}

/* The error of value_size's why, for what ("request 5 (PUSH)"). */
static int size_fail(struct kvs__err *e, int why, const char *what, int dtype)
{
    if (why == SIZE_DTYPE)
        return kvs__fail(e, KVS_EPROTO, "%s: unknown dtype %d", what, dtype);
    return kvs__fail(e, KVS_EPROTO, "%s: %s overflows 64 bits", what,
                     why == SIZE_SHAPE ? "shape" : "byte size");
}

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

static int op_has_array(int op)
{
    return op == KVS__OP_INIT || op == KVS__OP_PUSH || op == KVS__OP_PULL;
}

static const char *op_name(int op)
{
    switch (op) {
    case KVS__OP_INIT: return "INIT";
    case KVS__OP_PUSH: return "PUSH";
    case KVS__OP_PULL: return "PULL";
    case KVS__OP_BARRIER: return "BARRIER";
    case KVS__OP_SET_OPTIMIZER: return "SET_OPTIMIZER";
    case KVS__OP_SAVE_STATES: return "SAVE_STATES";
    case KVS__OP_LOAD_STATES: return "LOAD_STATES";
    case KVS__OP_CLOSE: return "CLOSE";
    case KVS__OP_SPILL: return "SPILL";
    case KVS__OP_EXPLAIN: return "EXPLAIN";
    case KVS__OP_REGISTER: return "REGISTER";
    default: return NULL;
    }
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

int kvs__sqe_decode(const void *slot, uint64_t staging_size, struct kvs__sqe *s,
                    struct kvs__err *e)
{
    /* The worker can rewrite its slot while we read it: one copy, and
     * from here on only the copy. */
    unsigned char m[KVS__SQE_BYTES];
    struct kvs__sqe t;
    const char *name;
    uint64_t end;

    copy_once(m, slot, sizeof m);
    memset(&t, 0, sizeof t);
    t.op = get_u8(m, S_OP);
    t.flags = get_u8(m, S_FLAGS);
    t.dtype = (kvs_dtype_t)get_u8(m, S_DTYPE);
    t.ndim = get_u8(m, S_NDIM);
    t.key_len = get_u16(m, S_KEY_LEN);
    t.priority = get_i32(m, S_PRIORITY);
    t.seq = get_u64(m, S_SEQ);
    t.key_id = get_i64(m, S_KEY_ID);
    t.data_off = get_u64(m, S_DATA_OFF);
    t.data_len = get_u64(m, S_DATA_LEN);
    t.arg = get_u64(m, S_ARG);

    if ((name = op_name(t.op)) == NULL)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 ": unknown op %u", t.seq,
                         (unsigned)t.op);
    if ((t.flags & ~KVS__SQE_FLAGS) != 0
        || ((t.flags & KVS__SQE_VALUE) && t.op != KVS__OP_PUSH)
        || ((t.flags & KVS__SQE_STRKEY) && !op_has_array(t.op))
        || ((t.flags & KVS__SQE_TABLE) && (!op_has_array(t.op) || (t.flags & KVS__SQE_STRKEY)))
        || ((t.flags & KVS__SQE_2BIT) && (t.op != KVS__OP_PUSH || (t.flags & KVS__SQE_TABLE)))
        || ((t.flags & KVS__SQE_DEVICE)
            && (!op_has_array(t.op) || (t.flags & (KVS__SQE_TABLE | KVS__SQE_2BIT))))
        || ((t.flags & KVS__SQE_REMOTE)
            && (!(t.flags & KVS__SQE_VALUE) || (t.flags & (KVS__SQE_2BIT | KVS__SQE_DEVICE)))))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): unknown flags 0x%02x",
                         t.seq, name, (unsigned)t.flags);
    if (get_u16(m, S_RSV0) != 0 || get_u32(m, S_RSV1) != 0 ||
        !zeros(m, S_RSV2, KVS__SQE_BYTES - S_RSV2))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): reserved bytes are not zero",
                         t.seq, name);

    /* ndim bounds every loop over the shape, whatever the op. */
    if (t.ndim > KVS_MAX_NDIM)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): ndim %d, at most %d",
                         t.seq, name, t.ndim, KVS_MAX_NDIM);
    for (int d = 0; d < KVS_MAX_NDIM; d++) {
        int64_t x = get_i64(m, S_SHAPE + 8 * (size_t)d);

        if (d >= t.ndim) {
            if (x != 0)
                return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): extent %d set "
                                 "past ndim %d", t.seq, name, d, t.ndim);
            continue;
        }
        if (x < 0)
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): extent %" PRId64
                             " in dimension %d", t.seq, name, x, d);
        t.shape[d] = x;
    }

    if (t.flags & KVS__SQE_TABLE) {
        if (t.dtype != 0 || t.ndim != 0 || t.key_id != 0 || t.key_len != 0)
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a table's slot with "
                             "a key or an array", t.seq, name);
        if (t.arg < 1 || t.arg > KVS__TABLE_MAX)
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a table of %" PRIu64
                             " requests, expected 1 to %d", t.seq, name, t.arg, KVS__TABLE_MAX);
        if (t.data_len < t.arg * (KVS__TAB_ENTRY_BYTES(0) + KVS__TAB_RESULT_BYTES))
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a table of %" PRIu64
                             " requests in %" PRIu64 " bytes", t.seq, name, t.arg, t.data_len);
    } else if (op_has_array(t.op)) {
        int64_t bytes;
        int rc = value_size(t.dtype, t.ndim, t.shape, &bytes);

        if (rc != 0) {
            char what[64];

            snprintf(what, sizeof what, "request %" PRIu64 " (%s)", t.seq, name);
            return size_fail(e, rc, what, (int)t.dtype);
        }
        if (t.flags & KVS__SQE_2BIT) {
            float thr = kvs__arg_threshold(t.arg);

            if (t.dtype != KVS_FLOAT32 || (t.arg >> 32) != 0 || !isfinite(thr) || !(thr > 0))
                return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a 2bit push of "
                                 "dtype %d with threshold bits 0x%" PRIx64, t.seq, name,
                                 (int)t.dtype, t.arg);
            bytes = (int64_t)(4 * kvs__gc_2bit_words((size_t)bytes / 4));
        }
        if ((t.op != KVS__OP_PULL || (t.flags & KVS__SQE_DEVICE)) && t.data_len != (uint64_t)bytes)
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): %" PRIu64
                             " data bytes for a value of %" PRId64, t.seq, name,
                             t.data_len, bytes);
    }
    if (t.op == KVS__OP_SET_OPTIMIZER || t.op == KVS__OP_SAVE_STATES ||
        t.op == KVS__OP_LOAD_STATES) {
        if (t.data_len < 1 || t.data_len > TEXT_MAX)
            return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): text of %" PRIu64
                             " bytes, expected 1 to %d", t.seq, name, t.data_len, TEXT_MAX);
    }
    if (t.op == KVS__OP_REGISTER && t.data_len != KVS__DEVBUF_HANDLE_BYTES)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a handle of %" PRIu64
                         " bytes, expected %d", t.seq, name, t.data_len,
                         KVS__DEVBUF_HANDLE_BYTES);
    if ((t.op == KVS__OP_REGISTER || (t.flags & KVS__SQE_DEVICE)) && t.arg >= KVS__DEVBUF_MAX)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): device buffer %" PRIu64
                         ", at most %d", t.seq, name, t.arg, KVS__DEVBUF_MAX - 1);
    /* Checked for every op: a range is harmless when unused and fatal
     * when used unchecked. A device request's lies in its buffer instead,
     * a remote one's in the worker's memory (the kernel checks that). */
    if (__builtin_add_overflow(t.data_off, t.data_len, &end)
        || (!(t.flags & KVS__SQE_DEVICE)
            && (!(t.flags & KVS__SQE_REMOTE) || (t.flags & KVS__SQE_TABLE))
            && end > staging_size))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): data %" PRIu64 "+%" PRIu64
                         " outside the staging area of %" PRIu64 " bytes", t.seq, name,
                         t.data_off, t.data_len, staging_size);

    if (t.key_len > KVS_MAX_KEY_LEN)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): key of %u bytes, at most %d",
                         t.seq, name, (unsigned)t.key_len, KVS_MAX_KEY_LEN);
    if (t.key_len > 0 && !(t.flags & KVS__SQE_STRKEY))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): a key name without the "
                         "string-key flag", t.seq, name);
    if (memchr(m + S_KEY_NAME, 0, t.key_len) != NULL)
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): NUL inside the key name",
                         t.seq, name);
    if (!zeros(m, S_KEY_NAME + (size_t)t.key_len, KVS_MAX_KEY_LEN - (size_t)t.key_len))
        return kvs__fail(e, KVS_EPROTO, "request %" PRIu64 " (%s): bytes past the key name",
                         t.seq, name);
    memcpy(t.key_name, m + S_KEY_NAME, t.key_len);
    t.key_name[t.key_len] = '\0';

    *s = t;
    return 0;
}

/* ---- tables ------------------------------------------------------------- */

/* A table's entry: KVS__TAB_ENTRY_BYTES(ndim) bytes */
enum {
    T_KEY_ID = 0,      /* i64 */
    T_DTYPE = 8,       /* u8 */
    T_NDIM = 9,        /* u8 */
    T_FLAGS = 10,      /* u8, KVS__TAB_* */
    T_RSV0 = 11,       /* 5 bytes, zero */
    T_DATA_OFF = 16,   /* u64; PULL: zero */
    T_SHAPE = 24,      /* ndim i64 */
};

/* A table's result: KVS__TAB_RESULT_BYTES */
enum {
    U_STATUS = 0,      /* i32 */
    U_RSV0 = 4,        /* u32, zero */
    U_VALUE_OFF = 8,   /* u64 */
};

_Static_assert(T_SHAPE == KVS__TAB_ENTRY_BYTES(0), "a table entry's head has another size");
_Static_assert(U_VALUE_OFF + 8 == KVS__TAB_RESULT_BYTES, "a table result has another size");

size_t kvs__tab_entry_encode(const struct kvs__sqe *s, void *p)
{
    unsigned char *m = p;
    int ndim = s->ndim < 0 ? 0 : s->ndim > KVS_MAX_NDIM ? KVS_MAX_NDIM : s->ndim;

    memset(m, 0, T_SHAPE);
    put_i64(m, T_KEY_ID, s->key_id);
    put_u8(m, T_DTYPE, (uint8_t)s->dtype);
    put_u8(m, T_NDIM, (uint8_t)ndim);
    put_u8(m, T_FLAGS, s->flags & KVS__SQE_REMOTE ? KVS__TAB_REMOTE : 0);
    put_u64(m, T_DATA_OFF, s->data_off);
    for (int d = 0; d < ndim; d++)
        put_i64(m, T_SHAPE + 8 * (size_t)d, s->shape[d]);
    return KVS__TAB_ENTRY_BYTES(ndim);
}

int kvs__tab_entry_decode(const void *p, size_t avail, uint8_t op, uint8_t flags,
                          uint64_t staging_size, struct kvs__tab_entry *t, size_t *used,
                          struct kvs__err *e)
{
    unsigned char m[KVS__TAB_ENTRY_BYTES(KVS_MAX_NDIM)];
    const char *name = op_name(op);
    int64_t bytes;
    uint64_t end;
    size_t n;
    int rc;

    if (!name || !op_has_array(op))
        return kvs__fail(e, KVS_EPROTO, "a table of op %u", (unsigned)op);
    if (avail < T_SHAPE)
        return kvs__fail(e, KVS_EPROTO, "table (%s): an entry in %zu bytes", name, avail);
    copy_once(m, p, T_SHAPE);
    t->ndim = get_u8(m, T_NDIM);
    if (t->ndim > KVS_MAX_NDIM)
        return kvs__fail(e, KVS_EPROTO, "table (%s): ndim %d, at most %d", name, t->ndim,
                         KVS_MAX_NDIM);
    n = KVS__TAB_ENTRY_BYTES(t->ndim);
    if (avail < n)
        return kvs__fail(e, KVS_EPROTO, "table (%s): an entry of %zu bytes in %zu", name, n,
                         avail);
    /* The shape follows the head: read once too, never the head again. */
    copy_once(m + T_SHAPE, (const unsigned char *)p + T_SHAPE, n - T_SHAPE);
    t->key_id = get_i64(m, T_KEY_ID);
    t->dtype = (kvs_dtype_t)get_u8(m, T_DTYPE);
    t->data_off = get_u64(m, T_DATA_OFF);
    t->flags = get_u8(m, T_FLAGS);
    if (!zeros(m, T_RSV0, T_DATA_OFF - T_RSV0))
        return kvs__fail(e, KVS_EPROTO, "table (%s): reserved bytes are not zero", name);
    if ((t->flags & ~KVS__TAB_REMOTE) != 0
        || ((t->flags & KVS__TAB_REMOTE) && !(flags & KVS__SQE_REMOTE)))
        return kvs__fail(e, KVS_EPROTO, "table (%s): an entry's flags 0x%02x", name,
                         (unsigned)t->flags);
    for (int d = 0; d < t->ndim; d++) {
        t->shape[d] = get_i64(m, T_SHAPE + 8 * (size_t)d);
        if (t->shape[d] < 0)
            return kvs__fail(e, KVS_EPROTO, "table (%s): extent %" PRId64 " in dimension %d",
                             name, t->shape[d], d);
    }
    if ((rc = value_size(t->dtype, t->ndim, t->shape, &bytes)) != 0) {
        char what[32];

        snprintf(what, sizeof what, "table (%s)", name);
        return size_fail(e, rc, what, (int)t->dtype);
    }
    t->data_len = op == KVS__OP_PULL ? 0 : (uint64_t)bytes;
    if (op == KVS__OP_PULL && t->data_off != 0)
        return kvs__fail(e, KVS_EPROTO, "table (PULL): data at %" PRIu64, t->data_off);
    if (__builtin_add_overflow(t->data_off, t->data_len, &end)
        || (!(t->flags & KVS__TAB_REMOTE) && end > staging_size))
        return kvs__fail(e, KVS_EPROTO, "table (%s): data %" PRIu64 "+%" PRIu64 " outside the "
                         "staging area of %" PRIu64 " bytes", name, t->data_off, t->data_len,
                         staging_size);
    *used = n;
    return 0;
}

void kvs__tab_result_encode(void *p, int32_t status, uint64_t value_off)
{
    unsigned char *m = p;

    put_i32(m, U_STATUS, status);
    put_u32(m, U_RSV0, 0);
    put_u64(m, U_VALUE_OFF, value_off);
}

int kvs__tab_result_decode(const void *p, uint64_t arena_size, uint64_t value_len,
                           int32_t *status, uint64_t *value_off, struct kvs__err *e)
{
    unsigned char m[KVS__TAB_RESULT_BYTES];
    int32_t s;
    uint64_t off;

    copy_once(m, p, sizeof m);
    s = get_i32(m, U_STATUS);
    off = get_u64(m, U_VALUE_OFF);
    if (!kvs__status_ok(s) || get_u32(m, U_RSV0) != 0)
        return kvs__fail(e, KVS_EPROTO, "a table's result: status %" PRId32 " or reserved "
                         "bytes", s);
    if (s == 0 && value_len && (off > arena_size || value_len > arena_size - off))
        return kvs__fail(e, KVS_EPROTO, "a table's result: value %" PRIu64 "+%" PRIu64
                         " outside the arena of %" PRIu64 " bytes", off, value_len, arena_size);
    *status = s;
    *value_off = off;
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
    if ((t.flags & ~(uint32_t)KVS__CQE_FLAGS) != 0 || t.flags == KVS__CQE_FLAGS
        || ((t.flags & KVS__CQE_HELD) && t.status != 0))
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
