/*
 * link.h - a dist handle's link to kvsd, which every other file of the
 * worker side builds on: the handle's client state, and the calls of the
 * link's files, grouped by file: connecting (connect.c), list calls
 * posted and answered (call.c), a broken handle and kvsd's death
 * (wait.c), the staging calls lend kvsd (staging.c). The link's own
 * insides (the calls waiting, the tables) are in wait.h and tables.h.
 * Declares nothing of the files above it (dev.c, combine.c, client.c).
 * Nothing here is API.
 */
#ifndef KVS_CLIENT_LINK_H
#define KVS_CLIENT_LINK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/bufs.h"
#include "kernels/compress.h"
#include "base/error.h"
#include "front.h"
#include "proto/layout.h"
#include "proto/proto.h"
#include "client/residual.h"
#include "shm/ring.h"

/* What a completion says of one request, kept per request of a call: a
 * list of 200,000 keys keeps 5 MB of these, not 50 MB of whole slots. */
struct kvs__answer {
    int32_t status;
    uint64_t value_off, value_len;     /* PULL, PUSH with KVS__SQE_VALUE */
    uint64_t round;                    /* a row-sparse PULL: its key's shape record */
    uint32_t flags;                    /* the completion's KVS__CQE_ROWS, _WRITTEN */
};

/* A call's answers: one per request, and the message of the first request
 * (in list order) that failed. */
struct kvs__answers {
    struct kvs__answer *a;
    int failed;                        /* its index, or -1 */
    char msg[KVS__MSG_MAX];
};

/* Makes the request slot of a call's request i (all fields but seq and the
 * end-of-list flag), from ctx: requests are made as they are posted,
 * never all at once. */
typedef void (*kvs__fill_fn)(const void *ctx, int i, struct kvs__sqe *s);

/* Staging lent to kvsd by one list call of pushes or inits: a range of the
 * transient area (len 0: none) and the call's requests, until kvsd has
 * returned the data of each. */
struct kvs__hold {
    uint64_t base;                     /* seq of its first request */
    int n, refs;                       /* requests; of them, not returned yet */
    unsigned char *returned;           /* per request */
    uint64_t off, len;
    int zc;                            /* some data lies in zero-copy buffers */
    uint64_t gen;                      /* the link's generation its call began in:
                                        * what was meant for a kvsd gone is not posted
                                        * to the next */
    struct kvs__hold *next;
};

/* A handle's link to kvsd (kvs_t.client). */
struct kvs__client {
    pthread_mutex_t lock;              /* all below but what connecting set up */
    pthread_mutex_t post;              /* held while one list call is posted */
    int sock;
    char job[KVS__JOB_MAX + 1];
    void *ctl, *seg;
    const unsigned char *arena;
    size_t ctl_size, seg_size, arena_size;
    struct kvs__bell *dbell, *wbell;
    struct kvs__ring sq, cq;
    unsigned char *staging;
    uint64_t staging_size;
    struct kvs__bufs bufs;             /* kvs_array_alloc's, as staging offsets */
    struct kvs__bufs xfer;             /* the transient ranges in use */
    struct kvs__waiter *waiters;       /* calls waiting for completions */
    struct kvs__hold *holds;
    int sync;                          /* dist_sync (views allowed) */
    int remote;                        /* kvsd reads pushpulls' arrays out of this
                                        * process's memory (KVS__SQE_REMOTE) */
    uint64_t remote_min;               /* ... when a call lends this many bytes so
                                        * (KVS_REMOTE_MIN), and may write their outs */
    int outs_lent;                     /* calls in flight whose outs kvsd may write */
    uint8_t cookie[KVS__COOKIE_BYTES]; /* what kvsd read to know it may */
    struct kvs__gc gc;                 /* kvs_set_gradient_compression's */
    struct kvs__residuals *residuals;  /* 2bit: per key, made at the first such push */
    struct kvs__devbufs *devbufs;      /* device buffers kvsd reads (dev.c), made at
                                        * the first device push, freed by the close */
    void *cb;                          /* the combine area (combine.h), or NULL */
    size_t cb_size;
    pthread_mutex_t cb_lock;           /* cb_opts */
    struct kvs__cb_opt {               /* every optimizer parsed from the area, and
                                        * its generation; the last the newest */
        struct kvs__optim *o;
        uint64_t gen;
    } *cb_opts;
    size_t cb_nopt;
    uint64_t next_seq;
    int64_t resume_step;               /* the welcome's step of kvsd's snapshot, then
                                        * each kvs_commit's step (-1: none) */
    uint64_t row_hint[64];             /* rows.c: per key hash, the bytes of a row of
                                        * the key last seen so hashed (0: none) */
    int broken;                        /* 0, or the error every call now returns */
    char broken_msg[KVS__ERR_MSG_MAX];
    kvs_t *kv;                         /* the handle: its rank, type and timeout, to reconnect */
    int recover;                       /* the welcome had KVS__WELCOME_RECOVER: when kvsd
                                        * goes, calls return KVS_ERESTART and the link
                                        * connects to the kvsd that replaces it */
    int closing;                       /* kvs_close runs: kvsd gone is only KVS_ECLOSED */
    uint64_t gen;                      /* the link's generation: one more each time kvsd
                                        * went (wait.c); a call of an older one returns
                                        * KVS_ERESTART */
};

/* One answer, for calls of one request. */
#define KVS__ONE_ANSWER(name)                                                \
    struct kvs__answer name##_a;                                             \
    struct kvs__answers name = { .a = &name##_a, .failed = -1 }

/* ---- connect.c ---- */

/* Connects kv to its job's kvsd (rank, size and job from the environment)
 * and sets kv->client; kvs__client_free undoes it. */
int kvs__client_open(kvs_t *kv, struct kvs__err *e);
void kvs__client_free(struct kvs__client *c);

/* Connects again to the job's socket after kvsd went (c->lock held, for
 * as long as it takes), retrying until the handle's timeout passes, and
 * maps the new kvsd's segments at the old addresses, keeping the bytes of
 * kvs_array_alloc's buffers; resets every piece of state kept for the
 * kvsd gone (rings, seqs, calls waiting, holds, residuals, row hints).
 * 0, or the error (KVS_ECLOSED with why) the caller breaks the handle
 * with. */
int kvs__client_reconnect(struct kvs__client *c, struct kvs__err *e);

/* ---- call.c ---- */

/* Posts the n requests fill makes as one list call and waits for their
 * completions, kept in ans in order (its array has room for n). tables:
 * the requests may go in tables (proto.h: one op of int keys, no 2bit
 * push), which a long list then does. h: the staging the call lends kvsd
 * (owned from here on, tracked until kvsd has returned it), or NULL.
 * timeout_ms: 0 for the handle's deadline, after which kvsd is asked what
 * the call waited for; else this one, without asking. Returns 0 when every
 * request got a completion (each with its own status), else the error that
 * broke the handle, or KVS_ERESTART (kvsd went: kvs__client_gone; h's call
 * began before). kvs__client_run: the same with the handle's deadline,
 * and the first failed completion as the call's error. */
int kvs__client_run_batch(kvs_t *kv, kvs__fill_fn fill, const void *ctx, int n, int tables,
                          struct kvs__answers *ans, struct kvs__hold *h, int64_t timeout_ms,
                          const char *what, struct kvs__err *e);
int kvs__client_run(kvs_t *kv, kvs__fill_fn fill, const void *ctx, int n, int tables,
                    struct kvs__answers *ans, struct kvs__hold *h, const char *what,
                    struct kvs__err *e);

/* A fill for calls whose few requests are made beforehand: ctx is the
 * array of them. */
void kvs__client_fill_from(const void *ctx, int i, struct kvs__sqe *s);

/* One request op with arg, its data the len (> 0) bytes at data copied
 * into staging, as a call of its own. */
int kvs__client_send(kvs_t *kv, uint8_t op, const void *data, size_t len, uint64_t arg,
                     const char *what, struct kvs__err *e);

/* Has kvsd copy every push whose data it still reads from staging, and
 * waits until it has returned them: kvsd alone, no other worker. */
int kvs__client_spill(kvs_t *kv, struct kvs__err *e);

/* Takes bytes (> 0) of the transient part of staging for one call, in
 * *off, spilling and waiting for siblings as needed (never for another
 * worker); the range is the call's hold's from then on. */
int kvs__client_xfer_take(kvs_t *kv, uint64_t bytes, uint64_t *off, const char *what,
                          struct kvs__err *e);

/* ---- wait.c ---- */

/* 1 when kvsd has closed this worker's socket (it died, or stopped). */
int kvs__client_daemon_gone(struct kvs__client *c);

/* kvsd's socket hung up (c->lock held): without KVS__WELCOME_RECOVER,
 * breaks the handle with KVS_ECLOSED. With it, starts the link's next
 * generation (every call of the older one returns KVS_ERESTART) and
 * reconnects (kvs__client_reconnect): KVS_ERESTART when it did, else
 * the handle breaks with KVS_ECLOSED. */
int kvs__client_gone(struct kvs__client *c, const char *what, struct kvs__err *e);

/* The error a call of the link's generation gen returns when the link is
 * at another: KVS_ERESTART, else 0 (c->lock held). */
int kvs__client_stale(struct kvs__client *c, uint64_t gen, struct kvs__err *e);

/* The link's generation now; KVS_ERESTART when it is no longer gen, else
 * 0: what a call read out of staging or the arena since it began may be
 * the next kvsd's, or it posted what it wrote into the old one's. Both
 * take c->lock. */
uint64_t kvs__client_gen(struct kvs__client *c);
int kvs__client_since(struct kvs__client *c, uint64_t gen, struct kvs__err *e);

/* 0, or the error of a broken handle; _locked: c->lock held. */
int kvs__client_usable(struct kvs__client *c, struct kvs__err *e);
int kvs__client_usable_locked(struct kvs__client *c, struct kvs__err *e);

/* Breaks the handle (c->lock held): every later call returns code; the
 * first reason is kept. Returns code, recorded in e. */
int kvs__client_broken(struct kvs__client *c, struct kvs__err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- staging.c ---- */

/* Where a value already lies in staging: 1 and *off when it lies wholly in
 * one buffer of kvs_array_alloc, 0 when it lies outside staging,
 * KVS_EBADARG when it lies in staging but not in a live buffer (freed, or
 * straddling two). c->lock held. */
int kvs__client_in_buffer(const struct kvs__client *c, const void *data, uint64_t bytes,
                          uint64_t *off, struct kvs__err *e);

/* Frees a hold that no request was sent for, and gives back its range
 * (NULL is a no-op). c->lock held. */
void kvs__client_hold_free(struct kvs__client *c, struct kvs__hold *h);

/* Bytes of staging below the lowest buffer; 1 when some staging (with zc:
 * of buffers) is lent to kvsd. c->lock held. */
uint64_t kvs__client_transient(const struct kvs__client *c);
int kvs__client_lending(const struct kvs__client *c, int zc);

/* ---- counters (inline) ---- */

/* This worker's counters in its segment's head (layout.h), which kvsctl
 * top shows: kvs__client_count adds a call's values pushed and bytes
 * pushed and pulled; kvs__client_waited a wait for the store that began
 * at since_ns (kvs__now_ns) and ends now. Any thread. */
static inline void kvs__client_count(struct kvs__client *c, uint64_t pushes, uint64_t bytes)
{
    struct kvs__seg_stats *s = &((struct kvs__seg_head *)c->seg)->stats;

    atomic_fetch_add_explicit(&s->pushes, pushes, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->bytes, bytes, memory_order_relaxed);
}

static inline int64_t kvs__client_waited(struct kvs__client *c, int64_t since_ns)
{
    struct kvs__seg_stats *s = &((struct kvs__seg_head *)c->seg)->stats;
    int64_t now = kvs__now_ns(), ns = now - since_ns;

    atomic_fetch_add_explicit(&s->wait_ns, ns > 0 ? (uint64_t)ns : 0, memory_order_relaxed);
    return now;
}

#endif
