/*
 * wire.h - what crosses between the kvsd of one host and the kvsd of
 * another: frames, each a 24-byte head and a payload, starting with the
 * handshake that proves both hosts hold the job's secret (daemon/net/auth.c
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
 * Then the roster: each host of rank above 0 tells host 0 where it listens
 * (JOIN), and host 0 tells every host where the others listen and how many
 * workers each runs (ROSTER). After that, every frame is a message (struct
 * kvs__wire_msg): a body that names a key, its dtype and shape, and
 * carries data (a value, or a text), which daemon/kvsd/hosts.c acts on.
 *
 * Decoders copy the bytes once, check every field, and never trust a
 * length beyond what the frame's type allows.
 */
#ifndef KVS_WIRE_H
#define KVS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "proto/proto.h"

#define KVS__WIRE_MAGIC   0x3148534bu  /* "KSH1" little-endian */
#define KVS__WIRE_VERSION 2u
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

/* ---- the roster ------------------------------------------------------- */

struct kvs__wire_join {
    uint16_t port;                     /* where the host listens for the others */
    char addr[KVS__ADDR_MAX];          /* its numeric address; "": the one host 0 sees */
};

struct kvs__wire_place {
    uint32_t nworkers;                 /* 1..1024 */
    uint16_t port;
    char addr[KVS__ADDR_MAX];          /* numeric; host 0's own is "" */
};

void kvs__wire_join_encode(const struct kvs__wire_join *m, void *buf);
int kvs__wire_join_decode(const void *buf, size_t len, struct kvs__wire_join *m,
                          struct kvs__err *e);

/* The bytes of a roster of n hosts. */
size_t kvs__wire_roster_bytes(uint32_t n);
void kvs__wire_roster_encode(const struct kvs__wire_place *hosts, uint32_t n, void *buf);
/* Reads a roster of exactly n hosts (len must be kvs__wire_roster_bytes(n))
 * into hosts[n]: workers 1..1024 each, at most 1024 in all, addresses
 * NUL-terminated with zeros after. */
int kvs__wire_roster_decode(const void *buf, size_t len, uint32_t n,
                            struct kvs__wire_place *hosts, struct kvs__err *e);

/* ---- messages --------------------------------------------------------- */

/* The body of a message frame. Which fields a type uses: PARTIAL, VALUE,
 * FORWARD, ARRIVE and DONE name a key, with its dtype and shape; data is a
 * value of exactly that dtype and shape for PARTIAL, FORWARD (or pieces,
 * below), a VALUE or a DONE of op init with status 0, and a text (no NUL,
 * at most KVS__WIRE_TEXT_MAX bytes) for OPTIMIZER, FAIL and a failed VALUE,
 * DONE or STATES; a STATES_ASK of op load and a STATES of op save with
 * status 0 carry bytes the decoder does not read (a state file's, checked
 * where they are used); other types carry no data. Unused fields are zero. */
struct kvs__wire_msg {
    uint8_t op;                        /* ARRIVE, DONE: KVS__OP_INIT or KVS__OP_BARRIER;
                                        * STATES_ASK, STATES: KVS__OP_SAVE_STATES or
                                        * KVS__OP_LOAD_STATES */
    int32_t status;                    /* VALUE, DONE, FAIL, STATES: 0 or a kvs/errno code */
    kvs_key_t key;                     /* key.name: encode reads it; decode points it
                                        * at name */
    char name[KVS_MAX_KEY_LEN + 1];
    kvs_dtype_t dtype;
    int ndim;
    int64_t shape[KVS_MAX_NDIM];
    uint64_t a, b;                     /* see the frame types */
    int32_t priority;                  /* PARTIAL, VALUE, FORWARD: the highest of their
                                        * pushes' (kvs_push's priority), which orders
                                        * them on the wire */
    uint32_t pieces;                   /* PARTIAL, FORWARD of a float32 key: 0 for a value,
                                        * else data is that many 2bit-compressed values
                                        * (1 to 1024; a FORWARD's 1), each a piece */
    uint32_t part, nparts;             /* PARTIAL, VALUE, FORWARD: nparts 0 for the whole
                                        * key; else (2 to KVS__PARTS_MAX) the data (value
                                        * or pieces) is elements kvs__wire_part of the key's
                                        * only: a big key is split over the hosts */
    const void *data;                  /* decode: points into the decoded buffer */
    uint64_t len;
};

/* Part `part` of a key of count elements of esize bytes split in nparts
 * (>= 1): elements [*first, *first + *n). Parts but the last have the same
 * number of elements, rounded up to 64 bytes' worth, so that each starts
 * on a cache line of the value and (float32) on a 2bit word; trailing
 * parts may be empty. */
void kvs__wire_part(uint64_t count, uint64_t esize, uint32_t nparts, uint32_t part,
                    uint64_t *first, uint64_t *n);

/* A piece: the threshold (a float's bits), 4 zero bytes, then the value's
 * kvs__gc_2bit_words(count) words as compress.c writes them, zeros to the
 * next 8 bytes. kvs__wire_piece_bytes: a piece's bytes for a value of count
 * elements; put writes one at p; get reads piece i of a decoded message m
 * (checked by the decoder): its threshold, and *words where its words lie. */
size_t kvs__wire_piece_bytes(uint64_t count);
void kvs__wire_piece_put(void *p, float threshold, const uint32_t *words, uint64_t count);
float kvs__wire_piece_get(const struct kvs__wire_msg *m, uint64_t count, uint32_t i,
                          const uint32_t **words);

/* The bytes of m's body before its data (the data follows it). */
size_t kvs__wire_msg_bytes(const struct kvs__wire_msg *m);
/* Writes the body of a message of type, not its data, at buf
 * (kvs__wire_msg_bytes(m) bytes). Fields the type does not use must be
 * zero in m (key.name NULL). */
void kvs__wire_msg_encode(int type, const struct kvs__wire_msg *m, void *buf);
/* Reads a whole payload of a message frame of type, len bytes, into *m,
 * checking every field as above; m->data points into buf. */
int kvs__wire_msg_decode(int type, const void *buf, size_t len, struct kvs__wire_msg *m,
                         struct kvs__err *e);

/* A decoded message's text (a reason, a spec) as a string in buf, of
 * KVS__WIRE_TEXT_MAX + 1 bytes (the decoder bounds its length). */
const char *kvs__wire_msg_text(const struct kvs__wire_msg *m, char *buf);

#endif
