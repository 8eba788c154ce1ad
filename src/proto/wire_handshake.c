/*
 * wire_handshake.c - the byte layouts of the handshake between two hosts'
 * kvsd: hello, challenge, proof and verdict (wire_handshake.h). Fixed
 * little-endian offsets, unused bytes zero, every field checked before
 * anyone sees it. It neither makes nor checks a proof (daemon/net/auth.c
 * does), and never allocates: a server spends nothing on a client before
 * its proof checks.
 */
#include <inttypes.h>
#include <string.h>

#include "base/bytes.h"
#include "proto/wire_handshake.h"
#include "shm/shm.h"

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
_Static_assert(HE_BYTES == KVS__WIRE_HELLO_BYTES && CH_BYTES == KVS__WIRE_CHALLENGE_BYTES
               && PR_BYTES == KVS__WIRE_PROOF_BYTES && VE_BYTES == KVS__WIRE_VERDICT_BYTES,
               "a handshake payload has another size than its frame's");

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

    if ((rc = kvs__wire_payload(p, sizeof p, buf, len, KVS__FRAME_HELLO, e)) != 0)
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

    if ((rc = kvs__wire_payload(p, sizeof p, buf, len, KVS__FRAME_CHALLENGE, e)) != 0)
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

    if ((rc = kvs__wire_payload(p, sizeof p, buf, len, KVS__FRAME_PROOF, e)) != 0)
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

    if ((rc = kvs__wire_payload(p, sizeof p, buf, len, KVS__FRAME_VERDICT, e)) != 0)
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
