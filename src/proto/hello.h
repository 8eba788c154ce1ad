/*
 * hello.h - the handshake of a worker with kvsd on the socket: the hello
 * the worker sends first, and the welcome kvsd answers with (hello.c).
 */
#ifndef KVS_PROTO_HELLO_H
#define KVS_PROTO_HELLO_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "proto/head.h"

enum kvs__mode { KVS__MODE_SYNC = 1, KVS__MODE_ASYNC = 2 };

#define KVS__COOKIE_BYTES 16

struct kvs__hello {                    /* worker -> kvsd, first message */
    uint32_t version;                  /* KVS__PROTO_VERSION */
    uint8_t mode;                      /* enum kvs__mode */
    int32_t rank;                      /* 0 <= rank < nworkers */
    int32_t nworkers;                  /* 1..1024 */
    char job[KVS__JOB_MAX + 1];        /* NUL-terminated, kvs__job_name_check rules */
    uint64_t probe;                    /* 0, or where in the worker's memory kvsd may
                                        * read the cookie: the worker lets kvsd read
                                        * its memory (pushes by KVS__SQE_REMOTE) */
    uint8_t cookie[KVS__COOKIE_BYTES]; /* random; zero when probe is 0 */
};

struct kvs__welcome {                  /* kvsd -> worker, with 3 fds on success:
                                        * control (rw), segment (rw), arena (ro);
                                        * with KVS__WELCOME_COMBINE a 4th, the
                                        * combine area (rw, combine.h) */
    uint32_t version;
    int32_t status;                    /* 0, or a negative kvs/errno code */
    uint32_t worker;                   /* kvsd's index for this worker */
    uint64_t control_size, seg_size, arena_size;
    uint32_t sq_entries, cq_entries;   /* powers of two */
    uint32_t flags;                    /* KVS__WELCOME_* */
    uint64_t staging_off, staging_size;/* within the segment */
    char msg[KVS__MSG_MAX];            /* detail when status != 0 */
    uint64_t combine_size;             /* the combine area's bytes; 0 without one */
    int64_t resume_step;               /* the step of the snapshot kvsd holds, -1: none */
};

/* kvsd read the hello's cookie out of the worker's memory: it takes pushes
 * by KVS__SQE_REMOTE from this worker. */
#define KVS__WELCOME_REMOTE 0x01u
/* The job's workers combine the rounds of the keys in the combine area
 * (combine.h), sent as a 4th descriptor. */
#define KVS__WELCOME_COMBINE 0x02u
/* The job recovers from faults (kvsrun --restarts or --checkpoint): when
 * kvsd goes, the worker's calls return KVS_ERESTART and its handle connects
 * to the kvsd that replaces it. */
#define KVS__WELCOME_RECOVER 0x04u

/* kvsd --recover's exit status when a worker died: kvsrun restarts it from
 * the last commit (and the worker, while its rank has restarts left). */
#define KVS__KVSD_EXIT_ROLLBACK 75
/* Its exit status when another host's kvsd went (the job across hosts rolls
 * back everywhere): kvsrun restarts it from the last commit every host
 * holds, without counting it against --restarts. */
#define KVS__KVSD_EXIT_HOSTS 76

#define KVS__HELLO_BYTES   128
#define KVS__WELCOME_BYTES 288

/* encode returns the bytes written (KVS__*_BYTES; buf must hold that many).
 * decode: 0, or KVS_EPROTO with a detail (bad magic, version, type, length,
 * field out of range, job name not NUL-terminated or bad characters). */
size_t kvs__hello_encode(const struct kvs__hello *h, void *buf);
int kvs__hello_decode(const void *buf, size_t len, struct kvs__hello *h, struct kvs__err *e);
size_t kvs__welcome_encode(const struct kvs__welcome *w, void *buf);
int kvs__welcome_decode(const void *buf, size_t len, struct kvs__welcome *w,
                        struct kvs__err *e);

#endif
