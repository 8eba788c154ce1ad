/*
 * wire.c - the byte layouts of frames between the kvsd of two hosts (see
 * wire.h): fixed offsets, little-endian, unused bytes zero, every field
 * checked by the decoders before anyone sees it, as proto.c does for the
 * worker's messages.
 */
#include <inttypes.h>
#include <string.h>

#include "bytes.h"
#include "shm.h"
#include "wire.h"

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

_Static_assert(HE_RSV <= HE_BYTES, "hello payload overflows its size");

static const char *const frame_names[] = {
    [KVS__FRAME_HELLO] = "hello", [KVS__FRAME_CHALLENGE] = "challenge",
    [KVS__FRAME_PROOF] = "proof", [KVS__FRAME_VERDICT] = "verdict",
};

size_t kvs__frame_payload_bytes(int type)
{
    switch (type) {
    case KVS__FRAME_HELLO:     return HE_BYTES;
    case KVS__FRAME_CHALLENGE: return CH_BYTES;
    case KVS__FRAME_PROOF:     return PR_BYTES;
    case KVS__FRAME_VERDICT:   return VE_BYTES;
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
    if ((want = kvs__frame_payload_bytes(t.type)) == 0)
        return kvs__fail(e, KVS_EPROTO, "frame: unknown type %u", (unsigned)t.type);
    if (t.host >= limit)
        return kvs__fail(e, KVS_EPROTO, "frame: host %" PRIu32 " outside [0, %" PRIu32 ")",
                         t.host, limit);
    if (t.len != want)
        return kvs__fail(e, KVS_EPROTO, "frame: %s of %" PRIu64 " bytes, expected %zu",
                         frame_names[t.type], t.len, want);
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
