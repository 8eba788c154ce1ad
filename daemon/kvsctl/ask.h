/*
 * ask.h - kvsctl's one client of kvsd (ask.c): one question to the kvsd
 * of a job on this host, on the job's control socket, and its checked
 * answer. Every sub-tool that asks kvsd asks through this; it knows none
 * of them.
 */
#ifndef KVSCTL_ASK_H
#define KVSCTL_ASK_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "proto/proto.h"

#define SEC_NS      1000000000ll
#define DEADLINE_NS (5 * SEC_NS)       /* for everything one question waits on */
#define CHECKPOINT_NS (600 * SEC_NS)   /* but checkpoint, which waits for a disk */

enum { ASK_OK = 0, ASK_FAILED = 1, ASK_GONE = 2 };

/* Asks the kvsd of job (checked by kvs__job_name_check) command, within
 * DEADLINE_NS, and decodes its answer into *reply (proto/ctl.c checks every
 * byte). ASK_OK for an answer of status 0; ASK_GONE when no kvsd serves
 * the job, or it closed the connection without an answer; ASK_FAILED for
 * any other failure, an error answer included. Then msg (size bytes) says
 * why, as one line without "kvsctl: ". Not for threads: reply is the
 * caller's, the rest is on the stack. */
int ctl_ask(const char *job, int command, struct kvs__ctl_reply *reply, char *msg, size_t size);

/* Where a question went: the socket, as it was when asked (a kvsd that
 * stops removes it; a new kvsd makes another). */
struct ctl_where {
    char path[PATH_MAX + 80];
    struct stat was;
};

/* ctl_ask, also saying where the question went, in *at. */
int ctl_ask_at(const char *job, int command, struct kvs__ctl_reply *reply,
               struct ctl_where *at, char *msg, size_t size);

/* Waits until the socket at is gone (or replaced), or deadline_ns: 1 when
 * it is gone, 0 when it is still there. */
int ctl_wait_gone(const struct ctl_where *at, int64_t deadline_ns);

#endif
