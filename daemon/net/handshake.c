/*
 * handshake.c - both sides of the handshake between hosts (handshake.h):
 * one frame at a time, each read checked whole before the next step.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "handshake.h"
#include "shm/shm.h"
#include "proto/wire.h"

#define FRAME_MAX 256                  /* the biggest handshake payload, and room */

_Static_assert(FRAME_MAX >= 208, "a verdict must fit");

int kvs__frame_write(int fd, int type, uint32_t host, const void *p, size_t len,
                     int64_t deadline_ns, struct kvs__err *e)
{
    unsigned char head[KVS__WIRE_HEAD];
    struct kvs__frame_head h = { (uint8_t)type, host, len };
    int rc;

    kvs__frame_head_encode(&h, head);
    if ((rc = kvs__stream_write(fd, head, sizeof head, deadline_ns, e)) != 0)
        return rc;
    return len ? kvs__stream_write(fd, p, len, deadline_ns, e) : 0;
}

int kvs__frame_read(int fd, uint32_t nhosts, int type, void *p, size_t cap, size_t *len,
                    uint32_t *host, int64_t deadline_ns, struct kvs__err *e)
{
    unsigned char head[KVS__WIRE_HEAD];
    struct kvs__frame_head h;
    int rc;

    if ((rc = kvs__stream_read(fd, head, sizeof head, deadline_ns, e)) != 0 ||
        (rc = kvs__frame_head_decode(head, sizeof head, nhosts, &h, e)) != 0)
        return rc;
    if (h.type != type)
        return kvs__fail(e, KVS_EPROTO, "frame: a %s, expected a %s", kvs__frame_name(h.type),
                         kvs__frame_name(type));
    if (h.len > cap)
        return kvs__fail(e, KVS_EPROTO, "frame: a %s of %llu bytes, at most %zu expected",
                         kvs__frame_name(type), (unsigned long long)h.len, cap);
    *host = h.host;
    *len = (size_t)h.len;
    return kvs__stream_read(fd, p, (size_t)h.len, deadline_ns, e);
}

/* Sends one handshake frame of type with payload p (its type's size). */
static int send_frame(int fd, int type, uint32_t host, const unsigned char *p,
                      int64_t deadline_ns, struct kvs__err *e)
{
    return kvs__frame_write(fd, type, host, p, kvs__frame_payload_bytes(type), deadline_ns, e);
}

/* Reads one handshake frame, which must be of type, into p; the sender's
 * host rank in *host. */
static int recv_frame(int fd, int type, uint32_t nhosts, unsigned char *p, uint32_t *host,
                      int64_t deadline_ns, struct kvs__err *e)
{
    size_t len;

    return kvs__frame_read(fd, nhosts, type, p, FRAME_MAX, &len, host, deadline_ns, e);
}

int kvs__handshake_client(int fd, const struct kvs__secret *s, const struct kvs__host_id *me,
                          uint32_t server, int64_t deadline_ns, struct kvs__err *e)
{
    struct kvs__wire_hello hello = { .nhosts = me->nhosts, .nworkers = me->nworkers };
    struct kvs__wire_challenge ch;
    struct kvs__wire_proof pr;
    struct kvs__wire_verdict v;
    unsigned char p[FRAME_MAX];
    uint32_t from;
    int rc;

    if (strlen(me->job) > KVS__JOB_MAX)
        return kvs__fail(e, KVS_EBADARG, "handshake: job name too long");
    if (kvs__auth_nonce(hello.nonce) != 0)
        return kvs__fail(e, -EIO, "handshake: no random source for a nonce");
    strcpy(hello.job, me->job);
    kvs__wire_hello_encode(&hello, p);
    if ((rc = send_frame(fd, KVS__FRAME_HELLO, me->host, p, deadline_ns, e)) != 0 ||
        (rc = recv_frame(fd, KVS__FRAME_CHALLENGE, me->nhosts, p, &from, deadline_ns, e)) != 0 ||
        (rc = kvs__wire_challenge_decode(p, kvs__frame_payload_bytes(KVS__FRAME_CHALLENGE),
                                         &ch, e)) != 0)
        return rc;
    if (from != server)
        return kvs__fail(e, KVS_EPROTO, "handshake: host %u answered, expected host %u",
                         (unsigned)from, (unsigned)server);
    if ((rc = kvs__auth_check(s, KVS__AUTH_SERVER, hello.nonce, ch.nonce, me->host, server,
                              me->job, ch.proof, e)) != 0)
        return rc;
    kvs__auth_proof(s, KVS__AUTH_CLIENT, hello.nonce, ch.nonce, me->host, server, me->job,
                    pr.proof);
    kvs__wire_proof_encode(&pr, p);
    if ((rc = send_frame(fd, KVS__FRAME_PROOF, me->host, p, deadline_ns, e)) != 0 ||
        (rc = recv_frame(fd, KVS__FRAME_VERDICT, me->nhosts, p, &from, deadline_ns, e)) != 0 ||
        (rc = kvs__wire_verdict_decode(p, kvs__frame_payload_bytes(KVS__FRAME_VERDICT), &v,
                                       e)) != 0)
        return rc;
    if (v.status != 0)
        return kvs__fail(e, v.status, "host %u refused this host: %s", (unsigned)server, v.msg);
    return 0;
}

/* Tells the client why it is refused (best effort: it may be gone), and
 * returns status with the same reason. */
static int refuse(int fd, const struct kvs__host_id *me, int status, int64_t deadline_ns,
                  struct kvs__err *e, const char *why)
{
    struct kvs__wire_verdict v = { .status = status };
    unsigned char p[FRAME_MAX];
    struct kvs__err ignored;

    snprintf(v.msg, sizeof v.msg, "%s", why);
    kvs__wire_verdict_encode(&v, p);
    send_frame(fd, KVS__FRAME_VERDICT, me->host, p, deadline_ns, &ignored);
    return kvs__fail(e, status, "%s", why);
}

int kvs__handshake_server(int fd, const struct kvs__secret *s, const struct kvs__host_id *me,
                          int64_t deadline_ns, uint32_t *client, uint32_t *client_workers,
                          struct kvs__err *e)
{
    struct kvs__wire_hello hello;
    struct kvs__wire_challenge ch;
    struct kvs__wire_proof pr;
    struct kvs__wire_verdict ok = { .status = 0 };
    unsigned char p[FRAME_MAX];
    char why[KVS__MSG_MAX];
    uint32_t from, again;
    int rc;

    if ((rc = recv_frame(fd, KVS__FRAME_HELLO, me->nhosts, p, &from, deadline_ns, e)) != 0 ||
        (rc = kvs__wire_hello_decode(p, kvs__frame_payload_bytes(KVS__FRAME_HELLO), &hello,
                                     e)) != 0)
        return rc;
    /* The proofs come first, for the job the client names: what it says of
     * the job is believed only from a host that holds the secret, and then
     * a client of another job hears why it is refused. */
    if (kvs__auth_nonce(ch.nonce) != 0)
        return kvs__fail(e, -EIO, "handshake: no random source for a nonce");
    kvs__auth_proof(s, KVS__AUTH_SERVER, hello.nonce, ch.nonce, from, me->host, hello.job,
                    ch.proof);
    kvs__wire_challenge_encode(&ch, p);
    if ((rc = send_frame(fd, KVS__FRAME_CHALLENGE, me->host, p, deadline_ns, e)) != 0 ||
        (rc = recv_frame(fd, KVS__FRAME_PROOF, me->nhosts, p, &again, deadline_ns, e)) != 0 ||
        (rc = kvs__wire_proof_decode(p, kvs__frame_payload_bytes(KVS__FRAME_PROOF), &pr,
                                     e)) != 0)
        return rc;
    if (again != from)
        return kvs__fail(e, KVS_EPROTO, "handshake: host %u sent the proof of host %u",
                         (unsigned)again, (unsigned)from);
    if ((rc = kvs__auth_check(s, KVS__AUTH_CLIENT, hello.nonce, ch.nonce, from, me->host,
                              hello.job, pr.proof, e)) != 0)
        return refuse(fd, me, KVS_EPROTO, deadline_ns, e,
                      "wrong proof: the host does not hold this job's secret");
    if (strcmp(hello.job, me->job) != 0) {
        snprintf(why, sizeof why, "host %u is of job '%s', this host serves job '%s'",
                 (unsigned)from, hello.job, me->job);
        return refuse(fd, me, KVS_EBADARG, deadline_ns, e, why);
    }
    if (hello.nhosts != me->nhosts || from == me->host) {
        snprintf(why, sizeof why, "host %u says the job has %u hosts; it has %u, and this is "
                 "host %u", (unsigned)from, (unsigned)hello.nhosts, (unsigned)me->nhosts,
                 (unsigned)me->host);
        return refuse(fd, me, KVS_EBADARG, deadline_ns, e, why);
    }
    kvs__wire_verdict_encode(&ok, p);
    if ((rc = send_frame(fd, KVS__FRAME_VERDICT, me->host, p, deadline_ns, e)) != 0)
        return rc;
    *client = from;
    *client_workers = hello.nworkers;
    return 0;
}
