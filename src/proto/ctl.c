/*
 * ctl.c - the byte layouts of what kvsctl and kvsd say on kvsd's socket:
 * the control request, and the reply with its text; and the rule for
 * that text, which a terminal prints: printable UTF-8, nothing that could
 * move its cursor or change its state.
 *
 * Fields sit at fixed little-endian offsets, unused bytes zero, as
 * hello.c's. A decoder copies the message once and checks every field
 * and every byte of the text before its caller sees it; it never reads
 * outside the message, and never allocates.
 */
#include <inttypes.h>
#include <string.h>

#include "base/bytes.h"
#include "proto/ctl.h"
#include "shm/shm.h"

/* control request: 96 bytes */
enum {
    Q_MAGIC = 0,       /* u32 */
    Q_TYPE = 4,        /* u8 */
    Q_COMMAND = 5,     /* u8 */
    Q_RSV0 = 6,        /* u16, zero */
    Q_VERSION = 8,     /* u32 */
    Q_JOB = 12,        /* KVS__JOB_MAX + 1 bytes, NUL-terminated, zero after the NUL */
    Q_PAD = Q_JOB + KVS__JOB_MAX + 1,   /* zero up to Q_RANK */
    Q_RANK = 80,       /* i32, gone's; zero for the other commands */
    Q_CODE = 84,       /* i32, gone's; zero for the other commands */
    Q_RSV1 = 88,       /* zero up to the end */
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

_Static_assert(Q_PAD <= Q_RANK, "control request: the job name runs into the rank");
_Static_assert(Q_RSV1 <= KVS__CTL_REQUEST_BYTES, "control request layout overflows its size");
_Static_assert(R_TEXT == KVS__CTL_REPLY_HEAD, "control reply head has another size");
_Static_assert(KVS__CTL_TEXT_MAX <= UINT32_MAX, "a reply's length is a u32");

const char *kvs__ctl_command_name(int command)
{
    switch (command) {
    case KVS__CTL_STATUS: return "status";
    case KVS__CTL_KEYS: return "keys";
    case KVS__CTL_STATS: return "stats";
    case KVS__CTL_STOP: return "stop";
    case KVS__CTL_SAMPLE: return "sample";
    case KVS__CTL_STATS_SHORT: return "stats-short";
    case KVS__CTL_CHECKPOINT: return "checkpoint";
    case KVS__CTL_GONE: return "gone";
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
    put_u8(p, Q_TYPE, KVS__MSG_CTL_REQUEST);
    put_u8(p, Q_COMMAND, q->command);
    put_u32(p, Q_VERSION, q->version);
    put_text(p, Q_JOB, KVS__JOB_MAX + 1, q->job);
    put_i32(p, Q_RANK, q->rank);
    put_i32(p, Q_CODE, q->code);
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
    if ((rc = kvs__msg_head_check(m, len, KVS__CTL_REQUEST_BYTES, KVS__MSG_CTL_REQUEST, "control request",
                         e)) != 0)
        return rc;
    if (get_u16(m, Q_RSV0) != 0 || !zeros(m, Q_PAD, Q_RANK - Q_PAD)
        || !zeros(m, Q_RSV1, KVS__CTL_REQUEST_BYTES - Q_RSV1))
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
    t.rank = get_i32(m, Q_RANK);
    t.code = get_i32(m, Q_CODE);
    if (t.command != KVS__CTL_GONE && (t.rank != 0 || t.code != 0))
        return kvs__fail(e, KVS_EPROTO, "control request: reserved bytes are not zero");
    if (t.command == KVS__CTL_GONE && (t.rank < 0 || t.code < 0 || t.code > 255))
        return kvs__fail(e, KVS_EPROTO, "control request: gone of rank %" PRId32 " with exit "
                         "code %" PRId32 " (a rank >= 0 and a code 0..255)", t.rank, t.code);
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
    put_u8(p, R_TYPE, KVS__MSG_CTL_REPLY);
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
    if ((rc = kvs__msg_head_check(m, len, len < head ? head : len, KVS__MSG_CTL_REPLY, "control reply",
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
