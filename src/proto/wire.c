/*
 * wire.c - the byte layouts of frames between the kvsd of two hosts (see
 * wire.h): fixed offsets, little-endian, unused bytes zero, every field
 * checked by the decoders before anyone sees it, as proto.c does for the
 * worker's messages.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "base/bytes.h"
#include "kernels/compress.h"
#include "shm/shm.h"
#include "proto/wire.h"

/* frame head: 24 bytes */
enum {
    F_MAGIC = 0,       /* u32 */
    F_TYPE = 4,        /* u8 */
    F_RSV0 = 5,        /* 3 bytes, zero (flags, later) */
    F_VERSION = 8,     /* u32 */
    F_HOST = 12,       /* u32 */
    F_LEN = 16,        /* u64 */
};

/* hello: 112 bytes */
enum {
    HE_NHOSTS = 0,     /* u32 */
    HE_NWORKERS = 4,   /* u32 */
    HE_NONCE = 8,      /* KVS__NONCE_BYTES */
    HE_JOB = HE_NONCE + KVS__NONCE_BYTES,  /* KVS__JOB_MAX + 1, NUL-terminated, zeros after */
    HE_RSV = HE_JOB + KVS__JOB_MAX + 1,    /* zero up to the end */
    HE_BYTES = 112,
};

/* challenge: 64 bytes; proof: 32 bytes */
enum {
    CH_NONCE = 0,
    CH_PROOF = KVS__NONCE_BYTES,
    CH_BYTES = KVS__NONCE_BYTES + KVS__PROOF_BYTES,
    PR_BYTES = KVS__PROOF_BYTES,
};

/* verdict: 208 bytes */
enum {
    VE_STATUS = 0,     /* i32 */
    VE_RSV = 4,        /* u32, zero */
    VE_MSG = 8,        /* KVS__MSG_MAX, NUL-terminated, zeros after */
    VE_BYTES = VE_MSG + KVS__MSG_MAX,
};

/* join: 64 bytes; roster: 8 bytes, then 64 per host */
enum {
    JO_PORT = 0,       /* u16 */
    JO_RSV = 2,        /* 6 bytes, zero */
    JO_ADDR = 8,       /* KVS__ADDR_MAX, NUL-terminated, zeros after */
    JO_BYTES = JO_ADDR + KVS__ADDR_MAX,
    RO_N = 0,          /* u32 */
    RO_RSV = 4,        /* u32, zero */
    RO_HOSTS = 8,
    RP_NWORKERS = 0,   /* u32 */
    RP_PORT = 4,       /* u16 */
    RP_RSV = 6,        /* u16, zero */
    RP_ADDR = 8,
    RP_BYTES = RP_ADDR + KVS__ADDR_MAX,
};

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
};

_Static_assert(HE_RSV <= HE_BYTES, "hello payload overflows its size");

static const char *const frame_names[KVS__FRAME_TYPES] = {
    [KVS__FRAME_HELLO] = "hello", [KVS__FRAME_CHALLENGE] = "challenge",
    [KVS__FRAME_PROOF] = "proof", [KVS__FRAME_VERDICT] = "verdict",
    [KVS__FRAME_JOIN] = "join", [KVS__FRAME_ROSTER] = "roster",
    [KVS__FRAME_PARTIAL] = "partial", [KVS__FRAME_VALUE] = "value",
    [KVS__FRAME_FORWARD] = "forward", [KVS__FRAME_ARRIVE] = "arrive",
    [KVS__FRAME_DONE] = "done", [KVS__FRAME_OPTIMIZER] = "optimizer",
    [KVS__FRAME_LEFT] = "left", [KVS__FRAME_FAIL] = "fail",
    [KVS__FRAME_HEARTBEAT] = "heartbeat", [KVS__FRAME_BYE] = "bye",
    [KVS__FRAME_STATES_ASK] = "states-ask", [KVS__FRAME_STATES] = "states",
};

const char *kvs__frame_name(int type)
{
    return type > 0 && type < KVS__FRAME_TYPES ? frame_names[type] : "unknown";
}

size_t kvs__frame_payload_bytes(int type)
{
    switch (type) {
    case KVS__FRAME_HELLO:     return HE_BYTES;
    case KVS__FRAME_CHALLENGE: return CH_BYTES;
    case KVS__FRAME_PROOF:     return PR_BYTES;
    case KVS__FRAME_VERDICT:   return VE_BYTES;
    case KVS__FRAME_JOIN:      return JO_BYTES;
    default:                   return 0;
    }
}

void kvs__frame_head_encode(const struct kvs__frame_head *h, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, KVS__WIRE_HEAD);
    put_u32(p, F_MAGIC, KVS__WIRE_MAGIC);
    put_u8(p, F_TYPE, h->type);
    put_u32(p, F_VERSION, KVS__WIRE_VERSION);
    put_u32(p, F_HOST, h->host);
    put_u64(p, F_LEN, h->len);
}

int kvs__frame_head_decode(const void *buf, size_t len, uint32_t nhosts,
                           struct kvs__frame_head *h, struct kvs__err *e)
{
    unsigned char m[KVS__WIRE_HEAD];
    struct kvs__frame_head t;
    uint32_t magic, version, limit = nhosts ? nhosts : KVS__HOSTS_MAX;
    size_t want;

    if (buf == NULL || len != KVS__WIRE_HEAD)
        return kvs__fail(e, KVS_EPROTO, "frame: a head of %zu bytes, expected %d",
                         buf ? len : 0, KVS__WIRE_HEAD);
    copy_once(m, buf, sizeof m);
    magic = get_u32(m, F_MAGIC);
    if (magic != KVS__WIRE_MAGIC)
        return kvs__fail(e, KVS_EPROTO, "frame: bad magic 0x%08" PRIx32 ", expected 0x%08x "
                         "(not a kvs host)", magic, KVS__WIRE_MAGIC);
    version = get_u32(m, F_VERSION);
    if (version != KVS__WIRE_VERSION)
        return kvs__fail(e, KVS_EPROTO, "frame: wire version %" PRIu32 ", this is version %u",
                         version, KVS__WIRE_VERSION);
    if (!zeros(m, F_RSV0, 3))
        return kvs__fail(e, KVS_EPROTO, "frame: reserved bytes are not zero");
    t.type = get_u8(m, F_TYPE);
    t.host = get_u32(m, F_HOST);
    t.len = get_u64(m, F_LEN);
    if (t.type == 0 || t.type >= KVS__FRAME_TYPES)
        return kvs__fail(e, KVS_EPROTO, "frame: unknown type %u", (unsigned)t.type);
    if (t.host >= limit)
        return kvs__fail(e, KVS_EPROTO, "frame: host %" PRIu32 " outside [0, %" PRIu32 ")",
                         t.host, limit);
    if ((want = kvs__frame_payload_bytes(t.type)) != 0 && t.len != want)
        return kvs__fail(e, KVS_EPROTO, "frame: %s of %" PRIu64 " bytes, expected %zu",
                         frame_names[t.type], t.len, want);
    want = t.type == KVS__FRAME_ROSTER ? kvs__wire_roster_bytes(1) : MS_SHAPE;
    if (!kvs__frame_payload_bytes(t.type) && (t.len < want || t.len > KVS__WIRE_PAYLOAD_MAX))
        return kvs__fail(e, KVS_EPROTO, "frame: %s of %" PRIu64 " bytes, expected %zu to "
                         "%llu", frame_names[t.type], t.len, want, KVS__WIRE_PAYLOAD_MAX);
    *h = t;
    return 0;
}

/* The payload of a frame, copied once into m (size bytes), or KVS_EPROTO. */
static int payload(unsigned char *m, size_t size, const void *buf, size_t len, int type,
                   struct kvs__err *e)
{
    if (buf == NULL || len != size)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, expected %zu", frame_names[type],
                         buf ? len : 0, size);
    copy_once(m, buf, size);
    return 0;
}

void kvs__wire_hello_encode(const struct kvs__wire_hello *m, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, HE_BYTES);
    put_u32(p, HE_NHOSTS, m->nhosts);
    put_u32(p, HE_NWORKERS, m->nworkers);
    memcpy(p + HE_NONCE, m->nonce, KVS__NONCE_BYTES);
    put_text(p, HE_JOB, KVS__JOB_MAX + 1, m->job);
}

int kvs__wire_hello_decode(const void *buf, size_t len, struct kvs__wire_hello *m,
                           struct kvs__err *e)
{
    unsigned char p[HE_BYTES];
    struct kvs__wire_hello t;
    struct kvs__err je;
    int rc;

    if ((rc = payload(p, sizeof p, buf, len, KVS__FRAME_HELLO, e)) != 0)
        return rc;
    if (!zeros(p, HE_RSV, HE_BYTES - HE_RSV))
        return kvs__fail(e, KVS_EPROTO, "hello: reserved bytes are not zero");
    t.nhosts = get_u32(p, HE_NHOSTS);
    t.nworkers = get_u32(p, HE_NWORKERS);
    if (t.nhosts < 1 || t.nhosts > KVS__HOSTS_MAX)
        return kvs__fail(e, KVS_EPROTO, "hello: %" PRIu32 " hosts, expected 1 to %d", t.nhosts,
                         KVS__HOSTS_MAX);
    if (t.nworkers < 1 || t.nworkers > 1024)
        return kvs__fail(e, KVS_EPROTO, "hello: %" PRIu32 " workers, expected 1 to 1024",
                         t.nworkers);
    memcpy(t.nonce, p + HE_NONCE, KVS__NONCE_BYTES);
    if (get_text(p, HE_JOB, KVS__JOB_MAX + 1, t.job) < 0)
        return kvs__fail(e, KVS_EPROTO, "hello: job name not NUL-terminated");
    if (kvs__job_name_check(t.job, &je) != 0)
        return kvs__fail(e, KVS_EPROTO, "hello: %s", je.msg);
    *m = t;
    return 0;
}

void kvs__wire_challenge_encode(const struct kvs__wire_challenge *m, void *buf)
{
    unsigned char *p = buf;

    memcpy(p + CH_NONCE, m->nonce, KVS__NONCE_BYTES);
    memcpy(p + CH_PROOF, m->proof, KVS__PROOF_BYTES);
}

int kvs__wire_challenge_decode(const void *buf, size_t len, struct kvs__wire_challenge *m,
                               struct kvs__err *e)
{
    unsigned char p[CH_BYTES];
    int rc;

    if ((rc = payload(p, sizeof p, buf, len, KVS__FRAME_CHALLENGE, e)) != 0)
        return rc;
    memcpy(m->nonce, p + CH_NONCE, KVS__NONCE_BYTES);
    memcpy(m->proof, p + CH_PROOF, KVS__PROOF_BYTES);
    return 0;
}

void kvs__wire_proof_encode(const struct kvs__wire_proof *m, void *buf)
{
    memcpy(buf, m->proof, KVS__PROOF_BYTES);
}

int kvs__wire_proof_decode(const void *buf, size_t len, struct kvs__wire_proof *m,
                           struct kvs__err *e)
{
    unsigned char p[PR_BYTES];
    int rc;

    if ((rc = payload(p, sizeof p, buf, len, KVS__FRAME_PROOF, e)) != 0)
        return rc;
    memcpy(m->proof, p, KVS__PROOF_BYTES);
    return 0;
}

void kvs__wire_verdict_encode(const struct kvs__wire_verdict *m, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, VE_BYTES);
    put_i32(p, VE_STATUS, m->status);
    put_text(p, VE_MSG, KVS__MSG_MAX, m->msg);
}

int kvs__wire_verdict_decode(const void *buf, size_t len, struct kvs__wire_verdict *m,
                             struct kvs__err *e)
{
    unsigned char p[VE_BYTES];
    struct kvs__wire_verdict t;
    int rc;

    if ((rc = payload(p, sizeof p, buf, len, KVS__FRAME_VERDICT, e)) != 0)
        return rc;
    t.status = get_i32(p, VE_STATUS);
    if (!kvs__status_ok(t.status))
        return kvs__fail(e, KVS_EPROTO, "verdict: status %" PRId32 " is no error code",
                         t.status);
    if (get_u32(p, VE_RSV) != 0)
        return kvs__fail(e, KVS_EPROTO, "verdict: reserved bytes are not zero");
    if (get_text(p, VE_MSG, KVS__MSG_MAX, t.msg) < 0)
        return kvs__fail(e, KVS_EPROTO, "verdict: message not NUL-terminated");
    *m = t;
    return 0;
}

/* ---- the roster ------------------------------------------------------- */

/* A numeric address's text at off of p: NUL-terminated, zeros after. */
static int get_addr(const unsigned char *p, size_t off, char *out, const char *what,
                    struct kvs__err *e)
{
    if (get_text(p, off, KVS__ADDR_MAX, out) < 0)
        return kvs__fail(e, KVS_EPROTO, "%s: address not NUL-terminated", what);
    for (const char *c = out; *c; c++)
        if (!strchr("0123456789abcdefABCDEF.:", *c))
            return kvs__fail(e, KVS_EPROTO, "%s: address '%s' is not numeric", what, out);
    return 0;
}

void kvs__wire_join_encode(const struct kvs__wire_join *m, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, JO_BYTES);
    put_u16(p, JO_PORT, m->port);
    put_text(p, JO_ADDR, KVS__ADDR_MAX, m->addr);
}

int kvs__wire_join_decode(const void *buf, size_t len, struct kvs__wire_join *m,
                          struct kvs__err *e)
{
    unsigned char p[JO_BYTES];
    struct kvs__wire_join t;
    int rc;

    if ((rc = payload(p, sizeof p, buf, len, KVS__FRAME_JOIN, e)) != 0)
        return rc;
    if (!zeros(p, JO_RSV, JO_ADDR - JO_RSV))
        return kvs__fail(e, KVS_EPROTO, "join: reserved bytes are not zero");
    t.port = get_u16(p, JO_PORT);
    if (t.port == 0)
        return kvs__fail(e, KVS_EPROTO, "join: port 0");
    if ((rc = get_addr(p, JO_ADDR, t.addr, "join", e)) != 0)
        return rc;
    *m = t;
    return 0;
}

size_t kvs__wire_roster_bytes(uint32_t n)
{
    return RO_HOSTS + (size_t)n * RP_BYTES;
}

void kvs__wire_roster_encode(const struct kvs__wire_place *hosts, uint32_t n, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, kvs__wire_roster_bytes(n));
    put_u32(p, RO_N, n);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char *q = p + RO_HOSTS + (size_t)i * RP_BYTES;

        put_u32(q, RP_NWORKERS, hosts[i].nworkers);
        put_u16(q, RP_PORT, hosts[i].port);
        put_text(q, RP_ADDR, KVS__ADDR_MAX, hosts[i].addr);
    }
}

int kvs__wire_roster_decode(const void *buf, size_t len, uint32_t n,
                            struct kvs__wire_place *hosts, struct kvs__err *e)
{
    const unsigned char *b = buf;
    unsigned char head[RO_HOSTS], q[RP_BYTES];
    uint32_t total = 0;

    if (!buf || n == 0 || n > KVS__HOSTS_MAX || len != kvs__wire_roster_bytes(n))
        return kvs__fail(e, KVS_EPROTO, "roster: %zu bytes, expected %zu for %" PRIu32
                         " hosts", buf ? len : 0, kvs__wire_roster_bytes(n), n);
    copy_once(head, b, sizeof head);
    if (get_u32(head, RO_N) != n || get_u32(head, RO_RSV) != 0)
        return kvs__fail(e, KVS_EPROTO, "roster: of %" PRIu32 " hosts, expected %" PRIu32,
                         get_u32(head, RO_N), n);
    for (uint32_t i = 0; i < n; i++) {
        struct kvs__wire_place t;
        int rc;

        copy_once(q, b + RO_HOSTS + (size_t)i * RP_BYTES, sizeof q);
        t.nworkers = get_u32(q, RP_NWORKERS);
        t.port = get_u16(q, RP_PORT);
        if (get_u16(q, RP_RSV) != 0)
            return kvs__fail(e, KVS_EPROTO, "roster: reserved bytes are not zero");
        if (t.nworkers < 1 || t.nworkers > 1024 || (total += t.nworkers) > 1024)
            return kvs__fail(e, KVS_EPROTO, "roster: host %" PRIu32 " has %" PRIu32
                             " workers; the job at most 1024 in all", i, t.nworkers);
        if ((rc = get_addr(q, RP_ADDR, t.addr, "roster", e)) != 0)
            return rc;
        if (i > 0 && (t.port == 0 || !t.addr[0]))
            return kvs__fail(e, KVS_EPROTO, "roster: host %" PRIu32 " has no address", i);
        hosts[i] = t;
    }
    return 0;
}

/* ---- messages --------------------------------------------------------- */

/* 1 when a message of type and op names a key (a barrier names none). */
static int names_key(int type, uint8_t op)
{
    return type >= KVS__FRAME_PARTIAL && type <= KVS__FRAME_DONE
           && !(type >= KVS__FRAME_ARRIVE && op == KVS__OP_BARRIER);
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
                                      | (m->pieces ? MF_2BIT : 0)));
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

void kvs__wire_part(uint64_t count, uint64_t esize, uint32_t nparts, uint32_t part,
                    uint64_t *first, uint64_t *n)
{
    uint64_t align = esize && esize < 64 ? 64 / esize : 1;
    uint64_t per = nparts ? (count + nparts - 1) / nparts : count;

    per = (per + align - 1) / align * align;
    *first = (uint64_t)part * per < count ? (uint64_t)part * per : count;
    *n = count - *first < per ? count - *first : per;
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

int kvs__wire_msg_decode(int type, const void *buf, size_t len, struct kvs__wire_msg *m,
                         struct kvs__err *e)
{
    const unsigned char *b = buf;
    unsigned char h[MS_SHAPE + 8 * KVS_MAX_NDIM];
    const char *what = kvs__frame_name(type);
    struct kvs__wire_msg t;
    uint8_t flags;
    size_t klen, body;
    uint64_t count = 1, esize;
    int kind, rc;

    if (type < KVS__FRAME_PARTIAL || type >= KVS__FRAME_TYPES)
        return kvs__fail(e, KVS_EPROTO, "frame: type %d is no message", type);
    if (!buf || len < MS_SHAPE)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, below a message's %d", what,
                         buf ? len : 0, MS_SHAPE);
    copy_once(h, b, MS_SHAPE);
    memset(&t, 0, sizeof t);
    flags = get_u8(h, MS_FLAGS);
    t.op = get_u8(h, MS_OP);
    t.dtype = (kvs_dtype_t)get_u8(h, MS_DTYPE);
    t.ndim = get_u8(h, MS_NDIM);
    t.status = get_i32(h, MS_STATUS);
    t.key.id = get_i64(h, MS_KEY_ID);
    t.a = get_u64(h, MS_A);
    t.b = get_u64(h, MS_B);
    t.len = get_u64(h, MS_LEN);
    klen = get_u16(h, MS_KEY_LEN);
    t.priority = get_i32(h, MS_PRIORITY);
    t.part = get_u32(h, MS_PART);
    t.nparts = get_u32(h, MS_NPARTS);
    if (!zeros(h, MS_RSV, MS_PRIORITY - MS_RSV) || (flags & ~(MF_KEY | MF_STRKEY | MF_2BIT))
        || (t.priority != 0 && type != KVS__FRAME_PARTIAL && type != KVS__FRAME_VALUE
            && type != KVS__FRAME_FORWARD))
        return kvs__fail(e, KVS_EPROTO, "%s: reserved bits are not zero", what);
    if (t.nparts == 0 ? t.part != 0
        : (type != KVS__FRAME_PARTIAL && type != KVS__FRAME_VALUE && type != KVS__FRAME_FORWARD)
          || t.nparts < 2 || t.nparts > KVS__PARTS_MAX || t.part >= t.nparts)
        return kvs__fail(e, KVS_EPROTO, "%s: part %" PRIu32 " of %" PRIu32 " out of place",
                         what, t.part, t.nparts);
    if (!kvs__status_ok(t.status) || (t.status && type != KVS__FRAME_VALUE
                                      && type != KVS__FRAME_DONE && type != KVS__FRAME_FAIL
                                      && type != KVS__FRAME_STATES))
        return kvs__fail(e, KVS_EPROTO, "%s: status %" PRId32 " out of place", what, t.status);
    if (type == KVS__FRAME_FAIL && t.status == 0)
        return kvs__fail(e, KVS_EPROTO, "fail: no status");
    if (type == KVS__FRAME_ARRIVE || type == KVS__FRAME_DONE) {
        if (t.op != KVS__OP_INIT && t.op != KVS__OP_BARRIER)
            return kvs__fail(e, KVS_EPROTO, "%s: op %u is no collective", what,
                             (unsigned)t.op);
    } else if (type == KVS__FRAME_STATES_ASK || type == KVS__FRAME_STATES) {
        if (t.op != KVS__OP_SAVE_STATES && t.op != KVS__OP_LOAD_STATES)
            return kvs__fail(e, KVS_EPROTO, "%s: op %u is no save or load", what,
                             (unsigned)t.op);
    } else if (t.op != 0) {
        return kvs__fail(e, KVS_EPROTO, "%s: op %u out of place", what, (unsigned)t.op);
    }
    if (t.ndim > KVS_MAX_NDIM || (unsigned)t.dtype > KVS_UINT8)
        return kvs__fail(e, KVS_EPROTO, "%s: dtype %d, ndim %d", what, (int)t.dtype, t.ndim);
    body = MS_SHAPE + 8 * (size_t)t.ndim;
    if (len < data_off(t.ndim, klen) || t.len != len - data_off(t.ndim, klen))
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, but its fields say %zu and %" PRIu64
                         " more", what, len, data_off(t.ndim, klen), t.len);
    {
        unsigned char pad[8];
        size_t npad = data_off(t.ndim, klen) - body - klen;

        copy_once(pad, b + body + klen, npad);
        if (!zeros(pad, 0, npad))
            return kvs__fail(e, KVS_EPROTO, "%s: padding is not zero", what);
    }
    copy_once(h + MS_SHAPE, b + MS_SHAPE, body - MS_SHAPE);
    for (int i = 0; i < t.ndim; i++) {
        t.shape[i] = get_i64(h, MS_SHAPE + 8 * (size_t)i);
        if (t.shape[i] < 0
            || (t.shape[i] > 0 && count > KVS__WIRE_PAYLOAD_MAX / (uint64_t)t.shape[i]))
            return kvs__fail(e, KVS_EPROTO, "%s: extent %" PRId64 " out of range", what,
                             t.shape[i]);
        count *= (uint64_t)t.shape[i];
    }
    /* A key exactly where the type names one (a barrier names none). */
    if (names_key(type, t.op)) {
        if (!(flags & MF_KEY))
            return kvs__fail(e, KVS_EPROTO, "%s: no key", what);
        if (flags & MF_STRKEY) {
            if (klen == 0 || klen > KVS_MAX_KEY_LEN || t.key.id != 0)
                return kvs__fail(e, KVS_EPROTO, "%s: a string key of %zu bytes", what, klen);
            copy_once(t.name, b + body, klen);
            t.name[klen] = '\0';
            if (strlen(t.name) != klen)
                return kvs__fail(e, KVS_EPROTO, "%s: a NUL inside the key", what);
            t.key.name = t.name;
        } else if (klen != 0) {
            return kvs__fail(e, KVS_EPROTO, "%s: an int key with a name", what);
        }
    } else if (flags || klen || t.key.id || t.ndim || t.dtype) {
        return kvs__fail(e, KVS_EPROTO, "%s: fields a %s does not use are not zero", what,
                         what);
    }
    kind = data_kind(type, t.status, t.op);
    esize = kvs_dtype_size(t.dtype);
    if (t.nparts) {                    /* the data is the part's range */
        uint64_t first;

        kvs__wire_part(count, esize, t.nparts, t.part, &first, &count);
    }
    t.data = b + data_off(t.ndim, klen);
    if (flags & MF_2BIT) {
        if ((rc = pieces_check(type, &t, count, e)) != 0)
            return rc;
    } else if (kind == 1 && t.len != count * esize)
        return kvs__fail(e, KVS_EPROTO, "%s: %" PRIu64 " bytes of data, its %s shape takes %"
                         PRIu64, what, t.len, kvs_dtype_name(t.dtype), count * esize);
    if (kind == 2 && (t.len > KVS__WIRE_TEXT_MAX || memchr(b + data_off(t.ndim, klen), 0, t.len)))
        return kvs__fail(e, KVS_EPROTO, "%s: a text of %" PRIu64 " bytes, or with a NUL", what,
                         t.len);
    if ((kind == 0 && t.len != 0) || (kind == 4 && t.len != 0 && t.len != 8))
        return kvs__fail(e, KVS_EPROTO, "%s: %" PRIu64 " bytes of data where %s goes", what,
                         t.len, kind == 4 ? "none or 8" : "none");
    *m = t;
    if (t.key.name)
        m->key.name = m->name;
    return 0;
}

const char *kvs__wire_msg_text(const struct kvs__wire_msg *m, char *buf)
{
    memcpy(buf, m->data, m->len);
    buf[m->len] = '\0';
    return buf;
}
