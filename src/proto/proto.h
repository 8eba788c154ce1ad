/*
 * proto.h - what crosses between a worker and kvsd: the handshake messages
 * on the socket, and the request (SQE) and completion (CQE) slots of the
 * rings in shared memory; and between kvsctl and kvsd: the control request
 * and its reply on the same socket. Encoding writes every field at a fixed
 * little-endian offset; decoding reads the bytes once into a local struct
 * and checks every field before anyone uses it. Decoders are fuzzed
 * (tests/fuzz_proto.c).
 */
#ifndef KVS_PROTO_H
#define KVS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"

#define KVS__PROTO_MAGIC   0x3150534bu  /* "KSP1" little-endian */
#define KVS__PROTO_VERSION 7u
#define KVS__JOB_MAX       64           /* job name bytes, without NUL */
#define KVS__MSG_MAX       200          /* detail message bytes in a CQE, with NUL */

/* 1 when a status read from a message is success, a kvs code or a negated
 * errno; anything else means the sender is broken or hostile. */
int kvs__status_ok(int32_t s);

/* ---- handshake (socket) ---- */

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
};

/* kvsd read the hello's cookie out of the worker's memory: it takes pushes
 * by KVS__SQE_REMOTE from this worker. */
#define KVS__WELCOME_REMOTE 0x01u
/* The job's workers combine the rounds of the keys in the combine area
 * (combine.h), sent as a 4th descriptor. */
#define KVS__WELCOME_COMBINE 0x02u

#define KVS__HELLO_BYTES   128
#define KVS__WELCOME_BYTES 288

/* The first message on a connection to kvsd is a hello (a worker) or a
 * control request (kvsctl); the type byte after the magic tells which.
 * Returns the KVS__MSG_* type of buf when it is at least long enough to
 * hold one and starts with the magic, else 0. Decides nothing else: the
 * type's decoder checks the whole message. */
enum kvs__msg_type {
    KVS__MSG_HELLO = 1, KVS__MSG_WELCOME = 2, KVS__MSG_CTL_REQUEST = 3, KVS__MSG_CTL_REPLY = 4,
};
int kvs__msg_type(const void *buf, size_t len);

/* encode returns the bytes written (KVS__*_BYTES; buf must hold that many).
 * decode: 0, or KVS_EPROTO with a detail (bad magic, version, type, length,
 * field out of range, job name not NUL-terminated or bad characters). */
size_t kvs__hello_encode(const struct kvs__hello *h, void *buf);
int kvs__hello_decode(const void *buf, size_t len, struct kvs__hello *h, struct kvs__err *e);
size_t kvs__welcome_encode(const struct kvs__welcome *w, void *buf);
int kvs__welcome_decode(const void *buf, size_t len, struct kvs__welcome *w,
                        struct kvs__err *e);

/* ---- control (socket): kvsctl -> kvsd, then one reply, then kvsd closes ---- */

enum kvs__ctl_command {
    KVS__CTL_STATUS = 1,    /* the job: mode, workers, keys, optimizer, failure */
    KVS__CTL_KEYS = 2,      /* one line per key */
    KVS__CTL_STATS = 3,     /* kvsd's counters */
    KVS__CTL_STOP = 4,      /* kvsd answers, then exits as on SIGTERM */
    KVS__CTL_SAMPLE = 5,    /* counters for programs (kvsctl top, stats --json), below */
};

/* The text of a sample: lines of words split by single spaces, in this
 * order, each kind of line once unless said:
 *   kvs-sample 1                   the format's version
 *   clock NS                       kvsd's CLOCK_MONOTONIC when it wrote it
 *   cpu USER_NS SYSTEM_NS          kvsd's CPU time so far (getrusage)
 *   mode sync|async|unknown
 *   workers EXPECTED LIVE LEFT DEAD   (EXPECTED 0: not known yet)
 *   failed 0|1
 *   counter NAME VALUE             per counter of kvsctl stats; NAME is [a-z_]+
 *   worker RANK PID PUSHES BYTES WAIT_NS   per live worker (its segment's
 *                                  counters, layout.h, as the worker wrote them)
 *   key KEY PATH ROUNDS [B:N ...]  per key, the busiest first: KEY an int key
 *                                  in decimal or a string key in double quotes,
 *                                  escaped as kvs__ctl_text_escape quotes; PATH
 *                                  kvsd or workers (who runs its rounds); then
 *                                  its latency histogram's non-empty buckets
 *                                  (latency.h), B ascending, N > 0
 *   more workers N, more keys N    (maybe) those left out, as the text was full
 *   end
 * Numbers are unsigned decimals of at most 20 digits. A reader must check
 * every line: they come from another process. */

struct kvs__ctl_request {              /* kvsctl -> kvsd, first message */
    uint32_t version;                  /* KVS__PROTO_VERSION */
    uint8_t command;                   /* enum kvs__ctl_command */
    char job[KVS__JOB_MAX + 1];        /* the job kvsctl means; kvsd checks it is its own */
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

/* The command's name ("status", "keys", "stats", "stop", "sample"), or NULL. */
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

/* ---- ring slots (shared memory) ---- */

enum kvs__op {
    KVS__OP_INIT = 1,       /* key, dtype, shape, value at data_off/data_len in staging */
    KVS__OP_PUSH = 2,       /* same */
    KVS__OP_PULL = 3,       /* key, dtype, shape: the value after this worker's pushes */
    KVS__OP_BARRIER = 4,
    KVS__OP_SET_OPTIMIZER = 5,  /* spec text at data_off/data_len (no NUL), < 4096 */
    KVS__OP_SAVE_STATES = 6,    /* absolute path at data_off/data_len; arg = dump flag */
    KVS__OP_LOAD_STATES = 7,    /* absolute path at data_off/data_len */
    KVS__OP_CLOSE = 8,          /* this worker leaves the job cleanly */
    KVS__OP_SPILL = 9,          /* copy every push of this worker whose data kvsd still
                                 * reads from staging, and release it */
    KVS__OP_EXPLAIN = 10,       /* this worker gave up waiting for request arg: say
                                 * what it waits for (in the CQE's message) and fail
                                 * the job with that cause */
    KVS__OP_REGISTER = 11,      /* a device buffer of this worker, as number arg
                                 * (< KVS__DEVBUF_MAX): its allocation's CUDA IPC
                                 * handle, KVS__DEVBUF_HANDLE_BYTES at data_off/
                                 * data_len in staging. Replaces the buffer that had
                                 * that number before; kvsd closes it, and every
                                 * buffer of a worker that leaves or dies. A handle
                                 * of zeros only closes it (the allocation is
                                 * gone). */
};

/* The device buffers one worker may have registered at a time. */
#define KVS__DEVBUF_MAX 1024
#define KVS__DEVBUF_HANDLE_BYTES 64

/* The most requests one list call (up to its LAST slot) may hold: kvsd keeps
 * a whole list in memory until its end, to check all of it before any of
 * it takes effect. Longer calls are sent in parts of at most this many. */
#define KVS__LIST_MAX (1 << 22)

struct kvs__sqe {
    uint8_t op;                        /* enum kvs__op */
    uint8_t flags;                     /* KVS__SQE_* */
    kvs_dtype_t dtype;                 /* valid for INIT/PUSH/PULL */
    int ndim;                          /* 0..KVS_MAX_NDIM */
    int64_t shape[KVS_MAX_NDIM];       /* each >= 0 */
    int32_t priority;
    uint64_t seq;                      /* the worker's request number, echoed in the CQE */
    int64_t key_id;                    /* int key */
    uint16_t key_len;                  /* string keys (KVS__SQE_STRKEY): 0..KVS_MAX_KEY_LEN
                                        * name bytes; int keys: 0 */
    char key_name[KVS_MAX_KEY_LEN + 1];/* NUL-terminated, no NUL inside */
    uint64_t data_off, data_len;       /* a range of the staging area */
    uint64_t arg;                      /* SAVE: dump flag; EXPLAIN: a seq; a PUSH
                                        * with KVS__SQE_2BIT: its threshold's bits */
};
#define KVS__SQE_LAST  0x01            /* the last slot of one list call */
#define KVS__SQE_VALUE 0x02            /* PUSH: complete with the key's value once
                                        * applied, as a PULL would (pushpull) */
#define KVS__SQE_STRKEY 0x04           /* the key is key_name, a string (maybe empty) */
#define KVS__SQE_TABLE 0x08            /* INIT, PUSH, PULL of int keys: the slot stands
                                        * for arg requests, listed in a table (below) */
#define KVS__SQE_2BIT  0x10            /* PUSH of a float32 value (no table): its data
                                        * is the value 2bit-compressed (compress.h),
                                        * kvs__gc_2bit_words(count) 32-bit words, with
                                        * the threshold (finite, > 0) as a float's bits
                                        * in the low half of arg */
#define KVS__SQE_DEVICE 0x20           /* INIT, PUSH, PULL (no table, no 2bit): the
                                        * value is not in staging but at data_off/
                                        * data_len of the worker's device buffer arg
                                        * (KVS__OP_REGISTER), the worker's device work
                                        * on it done. kvsd reads an INIT's or PUSH's
                                        * once, when it takes it; it writes a PULL's
                                        * value there, and answers once it is written */
#define KVS__SQE_REMOTE 0x40           /* PUSH with KVS__SQE_VALUE (no 2bit, no device):
                                        * the value is not in staging but at address
                                        * data_off of the worker's own memory, which
                                        * kvsd reads (process_vm_readv) until it
                                        * returns the data (below); only from a worker
                                        * whose welcome had KVS__WELCOME_REMOTE. In a
                                        * table the slot has it when any entry has
                                        * KVS__TAB_REMOTE, and entries say which */
#define KVS__SQE_FLAGS (KVS__SQE_LAST | KVS__SQE_VALUE | KVS__SQE_STRKEY | KVS__SQE_TABLE \
                        | KVS__SQE_2BIT | KVS__SQE_DEVICE | KVS__SQE_REMOTE)

/* A table: a list of many small keys in a few slots instead of a slot per
 * key (a slot of 512 bytes, decoded and answered one by one, cost kvsd
 * more than the key's whole work). A slot with KVS__SQE_TABLE carries the
 * op, flags (but STRKEY), priority and seq of arg requests, 1 to
 * KVS__TABLE_MAX; key, dtype and shape fields are zero. Its data range in
 * staging holds the table: arg entries one after another, each
 * KVS__TAB_ENTRY_BYTES(ndim) bytes (an int key, a dtype, a shape, and for
 * INIT and PUSH where its data lies in staging), then arg results of
 * KVS__TAB_RESULT_BYTES, nothing else. kvsd reads the entries once, when it
 * reads the slot; it writes each request's result (a status, and for a
 * PULL or a PUSH with KVS__SQE_VALUE the value's place in the arena) before
 * it posts the table's one completion, which carries the status and
 * message of the first request of the table that failed. A table of sync
 * pushes without KVS__SQE_VALUE is answered by one KVS__CQE_HELD
 * completion once all are taken, and its data returned by one
 * KVS__CQE_RELEASE once kvsd reads none of it. The worker lends the whole
 * range until the table's completion. */
#define KVS__TABLE_MAX       4096
#define KVS__TAB_ENTRY_BYTES(ndim) (24 + 8 * (size_t)(ndim))
#define KVS__TAB_RESULT_BYTES 16

#define KVS__TAB_REMOTE 0x01           /* an entry's data_off is an address of the
                                        * worker's memory (KVS__SQE_REMOTE) */

struct kvs__tab_entry {
    int64_t key_id;
    kvs_dtype_t dtype;
    int ndim;
    uint8_t flags;                     /* KVS__TAB_* */
    int64_t shape[KVS_MAX_NDIM];
    uint64_t data_off, data_len;       /* data_len: what the shape makes; PULL: 0, 0 */
};

/* A push's data (in staging) is lent to kvsd from its request until it is
 * returned: by a KVS__CQE_RELEASE entry with the push's seq once kvsd no
 * longer reads it (the round closed, or kvsd copied it on a SPILL or when
 * the worker left), or by the push's completion when it comes without
 * KVS__CQE_HELD. A completion with KVS__CQE_HELD (a dist_sync push taken
 * into its key's round, which closes later) returns nothing. Whichever
 * comes first returns the data; the worker counts each request once and
 * may reuse that staging only then. */
#define KVS__CQE_HELD    0x01
#define KVS__CQE_RELEASE 0x02          /* not a completion: seq's data is returned */
#define KVS__CQE_FLAGS   (KVS__CQE_HELD | KVS__CQE_RELEASE)

struct kvs__cqe {
    uint64_t seq;                      /* the SQE's seq */
    int32_t status;                    /* 0 or a negative code */
    uint32_t flags;                    /* KVS__CQE_* */
    uint64_t value_off, value_len;     /* PULL: the value's bytes in the arena */
    uint64_t round;                    /* PULL: the round the value belongs to */
    char msg[KVS__MSG_MAX];            /* detail when status != 0 */
};

#define KVS__SQE_BYTES 512             /* slot sizes of the two rings */
#define KVS__CQE_BYTES 256

/* A 2bit push's threshold in a slot's arg, and back. */
uint64_t kvs__threshold_arg(float threshold);
float kvs__arg_threshold(uint64_t arg);

void kvs__sqe_encode(const struct kvs__sqe *s, void *slot);
/* Checks everything a worker could have put in the slot: op, flags, dtype,
 * ndim, extents (and that their element count times the dtype size equals
 * data_len for INIT/PUSH, or its 2bit words' bytes for a 2bit push, without
 * overflow), key length and NUL, data range within staging_size (a device
 * push's: without overflow, kvsd checks it against the buffer; a remote
 * push's: without overflow, the kernel checks it), text
 * lengths, a device buffer's number. KVS_EPROTO with a detail otherwise. */
int kvs__sqe_decode(const void *slot, uint64_t staging_size, struct kvs__sqe *s,
                    struct kvs__err *e);

/* A table's entry, made from the request s would be (key_id, dtype, ndim,
 * shape, data_off, KVS__SQE_REMOTE as KVS__TAB_REMOTE): writes KVS__TAB_ENTRY_BYTES(s->ndim) bytes at p and
 * returns that count. */
size_t kvs__tab_entry_encode(const struct kvs__sqe *s, void *p);
/* Reads the entry at p, of the avail bytes left of a table of requests of
 * op and slot flags, into *t and its size into *used: checks what
 * kvs__sqe_decode checks of a slot's key, dtype, shape, data range and
 * flags. KVS_EPROTO otherwise. */
int kvs__tab_entry_decode(const void *p, size_t avail, uint8_t op, uint8_t flags,
                          uint64_t staging_size,
                          struct kvs__tab_entry *t, size_t *used, struct kvs__err *e);
/* A table's result: status (0 or a negative code) and, when it hands over
 * a value, its offset in the arena. decode checks the status, the
 * reserved bytes, and that value_off + value_len (the size the worker
 * expects, 0 when no value) lies in the arena. */
void kvs__tab_result_encode(void *p, int32_t status, uint64_t value_off);
int kvs__tab_result_decode(const void *p, uint64_t arena_size, uint64_t value_len,
                           int32_t *status, uint64_t *value_off, struct kvs__err *e);

void kvs__cqe_encode(const struct kvs__cqe *c, void *slot);
/* Checks status range, message NUL, and value_off + value_len <= arena_size. */
int kvs__cqe_decode(const void *slot, uint64_t arena_size, struct kvs__cqe *c,
                    struct kvs__err *e);

#endif
