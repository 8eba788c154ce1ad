/*
 * proto.h - what crosses between a worker and kvsd: the handshake messages
 * on the socket, and the request (SQE) and completion (CQE) slots of the
 * rings in shared memory. Encoding writes every field at a fixed
 * little-endian offset; decoding reads the bytes once into a local struct
 * and checks every field before anyone uses it. Decoders are fuzzed
 * (tests/fuzz_proto.c).
 */
#ifndef KVS_PROTO_H
#define KVS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "error.h"

#define KVS__PROTO_MAGIC   0x3150534bu  /* "KSP1" little-endian */
#define KVS__PROTO_VERSION 1u
#define KVS__JOB_MAX       64           /* job name bytes, without NUL */
#define KVS__MSG_MAX       200          /* detail message bytes in a CQE, with NUL */

/* ---- handshake (socket) ---- */

enum kvs__mode { KVS__MODE_SYNC = 1, KVS__MODE_ASYNC = 2 };

struct kvs__hello {                    /* worker -> kvsd, first message */
    uint32_t version;                  /* KVS__PROTO_VERSION */
    uint8_t mode;                      /* enum kvs__mode */
    int32_t rank;                      /* 0 <= rank < nworkers */
    int32_t nworkers;                  /* 1..1024 */
    char job[KVS__JOB_MAX + 1];        /* NUL-terminated, kvs__job_name_check rules */
};

struct kvs__welcome {                  /* kvsd -> worker, with 3 fds on success:
                                        * control (rw), segment (rw), arena (ro) */
    uint32_t version;
    int32_t status;                    /* 0, or a negative kvs/errno code */
    uint32_t worker;                   /* kvsd's index for this worker */
    uint64_t control_size, seg_size, arena_size;
    uint32_t sq_entries, cq_entries;   /* powers of two */
    uint64_t staging_off, staging_size;/* within the segment */
    char msg[KVS__MSG_MAX];            /* detail when status != 0 */
};

#define KVS__HELLO_BYTES   96
#define KVS__WELCOME_BYTES 288

/* encode returns the bytes written (KVS__*_BYTES; buf must hold that many).
 * decode: 0, or KVS_EPROTO with a detail (bad magic, version, type, length,
 * field out of range, job name not NUL-terminated or bad characters). */
size_t kvs__hello_encode(const struct kvs__hello *h, void *buf);
int kvs__hello_decode(const void *buf, size_t len, struct kvs__hello *h, struct kvs__err *e);
size_t kvs__welcome_encode(const struct kvs__welcome *w, void *buf);
int kvs__welcome_decode(const void *buf, size_t len, struct kvs__welcome *w,
                        struct kvs__err *e);

/* ---- ring slots (shared memory) ---- */

enum kvs__op {
    KVS__OP_INIT = 1,       /* key, dtype, shape, value at data_off/data_len in staging */
    KVS__OP_PUSH = 2,       /* same */
    KVS__OP_PULL = 3,       /* key, dtype, shape; min_round = rounds this worker pushed */
    KVS__OP_BARRIER = 4,
    KVS__OP_SET_OPTIMIZER = 5,  /* spec text at data_off/data_len (no NUL), < 4096 */
    KVS__OP_SAVE_STATES = 6,    /* absolute path at data_off/data_len; arg = dump flag */
    KVS__OP_LOAD_STATES = 7,    /* absolute path at data_off/data_len */
    KVS__OP_CLOSE = 8,          /* this worker leaves the job cleanly */
};

struct kvs__sqe {
    uint8_t op;                        /* enum kvs__op */
    uint8_t flags;                     /* KVS__SQE_* */
    kvs_dtype_t dtype;                 /* valid for INIT/PUSH/PULL */
    int ndim;                          /* 0..KVS_MAX_NDIM */
    int64_t shape[KVS_MAX_NDIM];       /* each >= 0 */
    int32_t priority;
    uint64_t seq;                      /* the worker's request number, echoed in the CQE */
    int64_t key_id;                    /* int key */
    uint16_t key_len;                  /* 0: int key; else 1..KVS_MAX_KEY_LEN name bytes */
    char key_name[KVS_MAX_KEY_LEN + 1];/* NUL-terminated, no NUL inside */
    uint64_t data_off, data_len;       /* a range of the staging area */
    uint64_t arg;                      /* PULL: min_round; SAVE: dump flag */
};
#define KVS__SQE_LAST 0x01             /* the last slot of one list call */

struct kvs__cqe {
    uint64_t seq;                      /* the SQE's seq */
    int32_t status;                    /* 0 or a negative code */
    uint64_t value_off, value_len;     /* PULL: the value's bytes in the arena */
    uint64_t round;                    /* PULL: the round the value belongs to */
    char msg[KVS__MSG_MAX];            /* detail when status != 0 */
};

#define KVS__SQE_BYTES 512             /* slot sizes of the two rings */
#define KVS__CQE_BYTES 256

void kvs__sqe_encode(const struct kvs__sqe *s, void *slot);
/* Checks everything a worker could have put in the slot: op, flags, dtype,
 * ndim, extents (and that their element count times the dtype size equals
 * data_len for INIT/PUSH, without overflow), key length and NUL, data range
 * within staging_size, text lengths. KVS_EPROTO with a detail otherwise. */
int kvs__sqe_decode(const void *slot, uint64_t staging_size, struct kvs__sqe *s,
                    struct kvs__err *e);

void kvs__cqe_encode(const struct kvs__cqe *c, void *slot);
/* Checks status range, message NUL, and value_off + value_len <= arena_size. */
int kvs__cqe_decode(const void *slot, uint64_t arena_size, struct kvs__cqe *c,
                    struct kvs__err *e);

#endif
