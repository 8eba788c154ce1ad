/*
 * head.h - what every message between a worker (or kvsctl) and kvsd
 * shares: the protocol's magic and version, the bounds of the names and
 * messages it carries, the rule for a status read from a message, and the
 * head a socket message starts with (magic, type, version), which head.c
 * reads. Nothing here knows any one message's layout.
 */
#ifndef KVS_PROTO_HEAD_H
#define KVS_PROTO_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"

#define KVS__PROTO_MAGIC   0x3150534bu  /* "KSP1" little-endian */
#define KVS__PROTO_VERSION 12u          /* 12: a remote push's out (arg), KVS__CQE_WRITTEN;
                                         * 11: COMMIT, the welcome's resume step and RECOVER;
                                         * 10: row-sparse INITs carry rows, PULLs their ids;
                                         * 9: combine inputs carry row marks; 8: row-sparse slots */
#define KVS__JOB_MAX       64           /* job name bytes, without NUL */
#define KVS__MSG_MAX       200          /* detail message bytes in a CQE, with NUL */

/* 1 when a status read from a message is success, a kvs code or a negated
 * errno; anything else means the sender is broken or hostile. */
int kvs__status_ok(int32_t s);

/* The first message on a connection to kvsd is a hello (a worker) or a
 * control request (kvsctl); the type byte after the magic tells which.
 * Returns the KVS__MSG_* type of buf when it is at least long enough to
 * hold one and starts with the magic, else 0. Decides nothing else: the
 * type's decoder checks the whole message. */
enum kvs__msg_type {
    KVS__MSG_HELLO = 1, KVS__MSG_WELCOME = 2, KVS__MSG_CTL_REQUEST = 3, KVS__MSG_CTL_REPLY = 4,
};
int kvs__msg_type(const void *buf, size_t len);

/* Every socket message starts with the magic (u32 at 0), its type (u8 at
 * 4) and the protocol's version (u32 at 8). Checks them in m, the first
 * min(len, want) bytes of a message of len bytes already copied once, and
 * then that len is want: a message of another version is reported as
 * such, not as a bad length. what names the message in the detail. 0, or
 * KVS_EPROTO. */
int kvs__msg_head_check(const unsigned char *m, size_t len, size_t want, int type,
                        const char *what, struct kvs__err *e);

#endif
