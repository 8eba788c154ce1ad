/*
 * wire_handshake.h - the payloads of the handshake between two hosts'
 * kvsd (wire_handshake.c): hello, challenge, proof and verdict, in the
 * order wire.h tells. daemon/net/auth.c makes and checks the proofs.
 */
#ifndef KVS_PROTO_WIRE_HANDSHAKE_H
#define KVS_PROTO_WIRE_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "proto/wire_frame.h"

struct kvs__wire_hello {
    uint32_t nhosts;                   /* the job's hosts, as the client was told */
    uint32_t nworkers;                 /* the client host's workers */
    unsigned char nonce[KVS__NONCE_BYTES];
    char job[KVS__JOB_MAX + 1];
};

struct kvs__wire_challenge {
    unsigned char nonce[KVS__NONCE_BYTES];
    unsigned char proof[KVS__PROOF_BYTES];
};

struct kvs__wire_proof {
    unsigned char proof[KVS__PROOF_BYTES];
};

struct kvs__wire_verdict {
    int32_t status;                    /* 0, or a negative kvs/errno code */
    char msg[KVS__MSG_MAX];            /* why, when status != 0 */
};

/* Payloads: encode writes kvs__frame_payload_bytes(type) bytes; decode
 * reads exactly that many (the head said so), checks every field (hosts
 * 1..KVS__HOSTS_MAX, workers 1..1024, the job name's rules, the status
 * and a NUL-terminated message with zeros after it) or fails with
 * KVS_EPROTO, and leaves *out alone then. */
void kvs__wire_hello_encode(const struct kvs__wire_hello *m, void *buf);
int kvs__wire_hello_decode(const void *buf, size_t len, struct kvs__wire_hello *m,
                           struct kvs__err *e);
void kvs__wire_challenge_encode(const struct kvs__wire_challenge *m, void *buf);
int kvs__wire_challenge_decode(const void *buf, size_t len, struct kvs__wire_challenge *m,
                               struct kvs__err *e);
void kvs__wire_proof_encode(const struct kvs__wire_proof *m, void *buf);
int kvs__wire_proof_decode(const void *buf, size_t len, struct kvs__wire_proof *m,
                           struct kvs__err *e);
void kvs__wire_verdict_encode(const struct kvs__wire_verdict *m, void *buf);
int kvs__wire_verdict_decode(const void *buf, size_t len, struct kvs__wire_verdict *m,
                             struct kvs__err *e);

#endif
