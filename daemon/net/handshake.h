/*
 * handshake.h - the handshake that opens every connection between the
 * kvsd of two hosts of a job (the frames of wire.h, the proofs of auth.h),
 * on a connected byte stream, each side within a deadline. The server
 * side keeps nothing but its stack until the client's proof checks, so a
 * connection that sends garbage, stays idle or holds the wrong secret
 * costs a bounded wait and is dropped.
 */
#ifndef KVS_HANDSHAKE_H
#define KVS_HANDSHAKE_H

#include <stdint.h>

#include "auth.h"
#include "base/error.h"

/* What each side knows of the job and itself. */
struct kvs__host_id {
    const char *job;                   /* the job's name (kvs__job_name_check rules) */
    uint32_t host;                     /* this host's rank in [0, nhosts) */
    uint32_t nhosts;                   /* the job's hosts */
    uint32_t nworkers;                 /* this host's workers (the client's are sent) */
};

/* The client's side on fd: hello, check the server's proof (the server
 * must be host `server`), send its own, read the verdict. Returns 0 when
 * the server accepted; KVS_EPROTO (a malformed frame, or a wrong proof:
 * the server does not hold the secret), -ETIMEDOUT, -ECONNRESET, -errno,
 * or the server's refusal (its status, its reason in the detail). */
int kvs__handshake_client(int fd, const struct kvs__secret *s, const struct kvs__host_id *me,
                          uint32_t server, int64_t deadline_ns, struct kvs__err *e);

/* The server's side on fd: read the hello, answer with a challenge and
 * its proof, check the client's proof, send the verdict. A client of
 * another job or job size, or claiming this host's rank, is refused with a
 * verdict that says why (KVS_EBADARG); a wrong proof with KVS_EPROTO. On
 * success the client's host rank and worker count are stored. */
int kvs__handshake_server(int fd, const struct kvs__secret *s, const struct kvs__host_id *me,
                          int64_t deadline_ns, uint32_t *client, uint32_t *client_workers,
                          struct kvs__err *e);

/* One frame on a blocking stream: head and payload p of len bytes. */
int kvs__frame_write(int fd, int type, uint32_t host, const void *p, size_t len,
                     int64_t deadline_ns, struct kvs__err *e);

/* Reads one frame, which must be of type and at most cap bytes of payload,
 * into p: its length in *len, the sender's host rank in *host. */
int kvs__frame_read(int fd, uint32_t nhosts, int type, void *p, size_t cap, size_t *len,
                    uint32_t *host, int64_t deadline_ns, struct kvs__err *e);

#endif
