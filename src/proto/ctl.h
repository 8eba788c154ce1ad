/*
 * ctl.h - what kvsctl and kvsd say on kvsd's socket: one control request,
 * one reply, then kvsd closes (ctl.c); and the text a reply may carry.
 */
#ifndef KVS_PROTO_CTL_H
#define KVS_PROTO_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "proto/head.h"

/* ---- control (socket): kvsctl -> kvsd, then one reply, then kvsd closes ---- */

enum kvs__ctl_command {
    KVS__CTL_STATUS = 1,    /* the job: mode, workers, keys, optimizer, failure */
    KVS__CTL_KEYS = 2,      /* one line per key */
    KVS__CTL_STATS = 3,     /* kvsd's counters */
    KVS__CTL_STOP = 4,      /* kvsd answers, then exits as on SIGTERM */
    KVS__CTL_SAMPLE = 5,    /* counters for programs (kvsctl top, stats --json), below */
    KVS__CTL_STATS_SHORT = 6,  /* stats without its listings per key (kvsctl stats
                                * --short); a kvsd older than it refuses it as unknown */
    KVS__CTL_CHECKPOINT = 7,   /* the last commit's snapshot written into kvsd's
                                * --checkpoint DIR now; answered once it is on disk.
                                * A kvsd older than it refuses it as unknown */
    KVS__CTL_GONE = 8,      /* kvsrun: rank `rank` of this host has ended (`code`: its exit
                             * code as a shell gives it, 0 a success); one that never
                             * connected counts as left (0) or failed (else) at once, one
                             * that did is left to its socket */
};

/* The text of a sample: lines of words split by single spaces, in this
 * order, each kind of line once unless said:
 *   kvs-sample 2                   the format's version (1: without the link,
 *                                  rows and more rows lines)
 *   clock NS                       kvsd's CLOCK_MONOTONIC when it wrote it
 *   cpu USER_NS SYSTEM_NS          kvsd's CPU time so far (getrusage)
 *   mode sync|async|unknown
 *   workers EXPECTED LIVE LEFT DEAD   (EXPECTED 0: not known yet)
 *   failed 0|1
 *   counter NAME VALUE             per counter of kvsctl stats; NAME is [a-z_]+
 *   link HOST FRAMES_OUT BYTES_OUT FRAMES_IN BYTES_IN   (2) per link to another
 *                                  host, HOST its rank, ascending: as kvsctl stats
 *   worker RANK PID PUSHES BYTES WAIT_NS   per live worker (its segment's
 *                                  counters, layout.h, as the worker wrote them)
 *   rows KEY PUSHED PULLED SENT RECEIVED   (2) per key with rows counted, the
 *                                  most first, KEY as below: as kvsctl stats
 *   key KEY PATH ROUNDS [B:N ...]  per key, the busiest first: KEY an int key
 *                                  in decimal or a string key in double quotes,
 *                                  escaped as kvs__ctl_text_escape quotes; PATH
 *                                  kvsd or workers (who runs its rounds); then
 *                                  its latency histogram's non-empty buckets
 *                                  (latency.h), B ascending, N > 0
 *   more workers N, more rows N, more keys N   (maybe) those left out, as the
 *                                  text was full; each after the lines it counts
 *   end
 * Numbers are unsigned decimals of at most 20 digits. A reader must check
 * every line: they come from another process. */

struct kvs__ctl_request {              /* kvsctl -> kvsd, first message */
    uint32_t version;                  /* KVS__PROTO_VERSION */
    uint8_t command;                   /* enum kvs__ctl_command */
    char job[KVS__JOB_MAX + 1];        /* the job kvsctl means; kvsd checks it is its own */
    int32_t rank, code;                /* KVS__CTL_GONE's: a global rank >= 0 and an exit
                                        * code 0..255; zero for every other command */
};

/* Text of a reply: at most KVS__CTL_TEXT_MAX bytes of UTF-8 without NUL,
 * C0 controls other than tab and newline, DEL or C1 controls, so that
 * printing it to a terminal can do nothing but print. */
#define KVS__CTL_TEXT_MAX 60000

struct kvs__ctl_reply {                /* kvsd -> kvsctl */
    uint32_t version;
    int32_t status;                    /* 0, or a negative kvs/errno code; text says why */
    uint32_t len;                      /* bytes of text */
    char text[KVS__CTL_TEXT_MAX + 1];  /* NUL-terminated after decoding */
};

#define KVS__CTL_REQUEST_BYTES 96
#define KVS__CTL_REPLY_HEAD    24      /* a reply is this head, then len bytes of text */
#define KVS__CTL_REPLY_MAX     (KVS__CTL_REPLY_HEAD + KVS__CTL_TEXT_MAX)

/* The command's name ("status", "keys", "stats", "stop", "sample",
 * "stats-short", "checkpoint", "gone"), or NULL. */
const char *kvs__ctl_command_name(int command);

/* The bytes (1 to 4) of the character at s, of the n bytes there, when a
 * reply's text may hold it; 0 when not (see KVS__CTL_TEXT_MAX). */
size_t kvs__ctl_text_char(const void *s, size_t n);

/* Writes s[0..n) into buf (size > 0 bytes, always NUL-terminated) as a
 * reply's text may hold it: what kvs__ctl_text_char refuses becomes \xNN;
 * with quote non-zero, '"', '\\', tab and newline become \", \\, \t and
 * \n too, so that a key name reads as one quoted word. Stops before a
 * character that would not fit whole. Returns the bytes written. */
size_t kvs__ctl_text_escape(char *buf, size_t size, const char *s, size_t n, int quote);

/* request: encode returns KVS__CTL_REQUEST_BYTES; decode as hello's (unknown
 * command, job name). reply: encode writes KVS__CTL_REPLY_HEAD + r->len bytes
 * (buf must hold that many; r->len at most KVS__CTL_TEXT_MAX) and returns
 * that count, or 0 when r->len is too big; decode checks that len is exactly
 * the head plus the text's length, the status, and every byte of the text.
 * A decode that fails leaves *out alone. */
size_t kvs__ctl_request_encode(const struct kvs__ctl_request *q, void *buf);
int kvs__ctl_request_decode(const void *buf, size_t len, struct kvs__ctl_request *q,
                            struct kvs__err *e);
size_t kvs__ctl_reply_encode(const struct kvs__ctl_reply *r, void *buf);
int kvs__ctl_reply_decode(const void *buf, size_t len, struct kvs__ctl_reply *r,
                          struct kvs__err *e);

#endif
