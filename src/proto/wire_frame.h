/*
 * wire_frame.h - the frames between the kvsd of two hosts (wire_frame.c):
 * the 24-byte head every frame starts with, the frame types, and the
 * payload sizes a head may announce. What a payload holds is the business
 * of wire_handshake.h, wire_roster.h and wire_msg.h.
 */
#ifndef KVS_PROTO_WIRE_FRAME_H
#define KVS_PROTO_WIRE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "proto/head.h"

#define KVS__WIRE_MAGIC   0x3148534bu  /* "KSH1" little-endian */
#define KVS__WIRE_VERSION 4u           /* 3: rows messages; keys of 2+ dimensions cut between rows;
                                        * 4: rows FORWARDs (dist_async) */
#define KVS__WIRE_HEAD    24           /* bytes of a frame head */
#define KVS__HOSTS_MAX    4096         /* hosts in one job */
#define KVS__PARTS_MAX    4096         /* parts of one key on the wire */
#define KVS__NONCE_BYTES  32
#define KVS__PROOF_BYTES  32           /* HMAC-SHA256 */
#define KVS__ADDR_MAX     56           /* a numeric address's text, NUL included */
#define KVS__WIRE_TEXT_MAX 4096        /* a message's text: a spec, a reason */
#define KVS__WIRE_PAYLOAD_MAX (1ull << 40) /* a frame's payload at most: 1 TiB, the
                                        * biggest arena, so the biggest value */

enum kvs__frame_type {
    KVS__FRAME_HELLO = 1,
    KVS__FRAME_CHALLENGE = 2,
    KVS__FRAME_PROOF = 3,
    KVS__FRAME_VERDICT = 4,
    KVS__FRAME_JOIN = 5,               /* host r > 0 -> host 0: where it listens */
    KVS__FRAME_ROSTER = 6,             /* host 0 -> host r: every host's place and workers */
    /* messages: a body (struct kvs__wire_msg) and its data */
    KVS__FRAME_PARTIAL = 7,            /* a sync round's sum of one host: to the key's owner */
    KVS__FRAME_VALUE = 8,              /* a key's new value (or its update's failure): from
                                        * the owner; a = the round (sync), b = the token of
                                        * the forwarded push it answers (async), or 0 */
    KVS__FRAME_FORWARD = 9,            /* an async push, to the owner; b = its token */
    KVS__FRAME_ARRIVE = 10,            /* a host's workers all made a collective (op): to host 0 */
    KVS__FRAME_DONE = 11,              /* a collective is complete: from host 0 (an init
                                        * with the value to store) */
    KVS__FRAME_OPTIMIZER = 12,         /* data: the optimizer's spec */
    KVS__FRAME_LEFT = 13,              /* every worker of the sending host has left */
    KVS__FRAME_FAIL = 14,              /* the job failed there: status, data the reason */
    KVS__FRAME_HEARTBEAT = 15,         /* a = the sender's clock (ns) as it sent it; b = the
                                        * clock in the last heartbeat it got here, then 8
                                        * bytes of data: how long it held that one (both 0
                                        * and no data: none yet) */
    KVS__FRAME_BYE = 16,               /* the sender ends cleanly: its closing is no death */
    KVS__FRAME_STATES_ASK = 17,        /* optimizer states: op KVS__OP_SAVE_STATES (send
                                        * yours), or KVS__OP_LOAD_STATES with a state
                                        * file's bytes (take yours from them); b = a token */
    KVS__FRAME_STATES = 18,            /* the answer: op and b echoed; status 0 with (for a
                                        * save) the host's states as a state file's bytes,
                                        * or status and a text */
    KVS__FRAME_TYPES
};

struct kvs__frame_head {
    uint8_t type;                      /* enum kvs__frame_type */
    uint32_t host;                     /* the sender's host rank */
    uint64_t len;                      /* payload bytes after the head */
};

/* The fixed payloads of the handshake's frames and a join, the least of a
 * roster (of one host) and of a message (its body without a shape): the
 * layouts of wire_handshake.c, wire_roster.c and wire_msg.c, which check
 * that they match. */
#define KVS__WIRE_HELLO_BYTES     112
#define KVS__WIRE_CHALLENGE_BYTES (KVS__NONCE_BYTES + KVS__PROOF_BYTES)
#define KVS__WIRE_PROOF_BYTES     KVS__PROOF_BYTES
#define KVS__WIRE_VERDICT_BYTES   (8 + KVS__MSG_MAX)
#define KVS__WIRE_JOIN_STEPS      4    /* the snapshots' steps a join offers, at most */
#define KVS__WIRE_JOIN_BYTES      (8 + KVS__ADDR_MAX + 8 + 8 * KVS__WIRE_JOIN_STEPS)
#define KVS__WIRE_ROSTER_MIN      (16 + 8 + KVS__ADDR_MAX)
#define KVS__WIRE_MSG_MIN         56

/* Writes the head (KVS__WIRE_HEAD bytes). */
void kvs__frame_head_encode(const struct kvs__frame_head *h, void *buf);

/* Reads a head of len bytes (KVS__WIRE_HEAD expected) from a host of a job
 * of nhosts: magic, version, a known type, reserved bytes zero, host <
 * nhosts (any host below KVS__HOSTS_MAX when nhosts is 0, before the
 * job's size is known), and a payload length exactly that of the type's
 * fixed payload, or for a roster and a message one between its least and
 * KVS__WIRE_PAYLOAD_MAX. KVS_EPROTO with a detail otherwise. */
int kvs__frame_head_decode(const void *buf, size_t len, uint32_t nhosts,
                           struct kvs__frame_head *h, struct kvs__err *e);

/* The fixed payload bytes of a handshake frame's type or a join, 0 for
 * another. */
size_t kvs__frame_payload_bytes(int type);

/* The name of a frame type ("partial"), "unknown" for another. */
const char *kvs__frame_name(int type);

/* Copies the payload of a frame of type, len bytes at buf, once into m:
 * KVS_EPROTO unless len is exactly size. For the fixed payloads. */
int kvs__wire_payload(unsigned char *m, size_t size, const void *buf, size_t len, int type,
                      struct kvs__err *e);

#endif
