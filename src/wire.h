/*
 * wire.h - what crosses between the kvsd of one host and the kvsd of
 * another: frames, each a 24-byte head and a payload, starting with the
 * handshake that proves both hosts hold the job's secret (daemon/auth.c
 * makes and checks the proofs).
 *
 * The handshake, initiated by the host of higher rank (the client):
 *   client -> server  HELLO      its host rank, the job, a nonce
 *   server -> client  CHALLENGE  the server's nonce, and its proof
 *   client -> server  PROOF      the client's proof
 *   server -> client  VERDICT    0, or why the job refuses the client
 * Each proof is an HMAC of both nonces, the job, both ranks and the side
 * it comes from, so that no message can be replayed or reflected. A server
 * allocates nothing for a connection before the PROOF checks.
 *
 * Decoders copy the bytes once, check every field, and never trust a
 * length beyond what the frame's type allows. Not used by kvsd yet: jobs
 * across hosts are being built on it.
 */
#ifndef KVS_WIRE_H
#define KVS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "proto.h"

#define KVS__WIRE_MAGIC   0x3148534bu  /* "KSH1" little-endian */
#define KVS__WIRE_VERSION 1u
#define KVS__WIRE_HEAD    24           /* bytes of a frame head */
#define KVS__HOSTS_MAX    4096         /* hosts in one job */
#define KVS__NONCE_BYTES  32
#define KVS__PROOF_BYTES  32           /* HMAC-SHA256 */

enum kvs__frame_type {
    KVS__FRAME_HELLO = 1,
    KVS__FRAME_CHALLENGE = 2,
    KVS__FRAME_PROOF = 3,
    KVS__FRAME_VERDICT = 4,
};

struct kvs__frame_head {
    uint8_t type;                      /* enum kvs__frame_type */
    uint32_t host;                     /* the sender's host rank */
    uint64_t len;                      /* payload bytes after the head */
};

/* Writes the head (KVS__WIRE_HEAD bytes). */
void kvs__frame_head_encode(const struct kvs__frame_head *h, void *buf);

/* Reads a head of len bytes (KVS__WIRE_HEAD expected) from a host of a job
 * of nhosts: magic, version, a known type, reserved bytes zero, host <
 * nhosts (any host below KVS__HOSTS_MAX when nhosts is 0, before the
 * job's size is known), and a payload length exactly that of the type's
 * fixed payload. KVS_EPROTO with a detail otherwise. */
int kvs__frame_head_decode(const void *buf, size_t len, uint32_t nhosts,
                           struct kvs__frame_head *h, struct kvs__err *e);

/* The fixed payload bytes of a handshake frame's type, 0 for another. */
size_t kvs__frame_payload_bytes(int type);

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
