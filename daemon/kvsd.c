/*
 * kvsd - the host daemon of a dist_sync / dist_async job: it keeps the
 * job's store (the engine, values in a shared arena that workers map
 * read-only) and serves the workers' rings.
 *
 * Two threads. The socket thread accepts workers, runs the handshake
 * (peer uid checked before anything is sent), and watches every worker's
 * socket: a socket that closes without a CLOSE request is a death. The
 * serve thread drains the workers' request rings, runs rounds, barriers and
 * the engine, and posts completions; it sleeps on the daemon's doorbell,
 * which workers and the socket thread ring.
 *
 * kvsctl connects to the same socket and sends a control request instead
 * of a hello. The socket thread checks it and queues the connection; the
 * serve thread, which alone owns the engine and the job's state, writes
 * the answer, sends it with a short deadline and closes the connection.
 * The socket thread never looks at the engine, the rounds or the counters.
 *
 * kvsd trusts nothing a worker wrote: every request slot is decoded and
 * checked (proto.c), ring indices are checked (ring.c); a worker whose ring
 * or request is bad is evicted, and the others go on. Nothing here waits
 * without a deadline.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include "array.h"
#include "engine.h"
#include "layout.h"
#include "proto.h"
#include "ring.h"
#include "shm.h"

#define MAX_WORKERS     1024
#define HANDSHAKE_NS    (2 * 1000000000ll)
#define SERVE_SLICE_NS  (100 * 1000000ll)
#define SPIN_NS         (20 * 1000ll)
#define CTL_QUEUE_MAX   16             /* control connections waiting for the serve thread */
#define CTL_SEND_NS     (50 * 1000000ll)   /* the serve thread's wait to send one answer */
#define CTL_TAIL_ROOM   80             /* room kept in a listing for "... N more" */

/* ---- options ---------------------------------------------------------- */

struct options {
    char job[KVS__JOB_MAX + 1];
    int nworkers;                      /* 0: from the first worker's hello */
    uint64_t staging, arena;
    uint32_t sq_entries, cq_entries;
    int threads;
    int quiet;
};

/* ---- state ------------------------------------------------------------ */

enum wstate { W_FREE, W_LIVE, W_LEFT, W_DEAD };

struct req {
    struct kvs__sqe s;
    int w;                             /* worker index */
    uint64_t order;                    /* arrival, to keep order within a priority */
    struct req *next;
};

struct done {                          /* a completion waiting for room in a CQ */
    struct kvs__cqe c;
    struct done *next;
};

struct worker {
    _Atomic int state;                 /* enum wstate; written by the serve thread,
                                        * but FREE -> LIVE by the socket thread */
    int rank;
    pid_t pid;
    int sock;
    _Atomic int hup;                   /* set by the socket thread */
    void *seg;
    size_t seg_size;
    struct kvs__ring sq, cq;
    struct kvs__bell *bell;
    unsigned char *staging;
    uint64_t staging_size;
    struct req *batch, **batch_tail;   /* requests of a list call not yet ended */
    struct done *backlog, **backlog_tail;
    int batch_len;
};

/* Per key, the sync rounds (the engine entry's front pointer). */
struct round {
    uint64_t done;                     /* rounds applied */
    int ncontrib;
    unsigned char *contrib;            /* per worker: pushed to the open round */
    uint64_t *last;                    /* per worker: the round its last push is in */
    void *accum;                       /* the open round's sum */
};

/* A collective (init of a key, barrier, set_optimizer): completes when
 * every worker still in the job has arrived. */
struct coll {
    uint8_t op;
    kvs_key_t key;                     /* INIT: name owned */
    unsigned char *arrived;
    int narrived;
    struct req *reqs;                  /* waiting, completed together */
    int status;
    char msg[KVS__MSG_MAX];
    char *spec;                        /* SET_OPTIMIZER: rank 0's (or the first) spec */
    int spec_rank;
    struct coll *next;
};

/* A control connection, checked by the socket thread, waiting for its
 * answer from the serve thread. */
struct ctl_conn {
    int fd;
    uint8_t command;                   /* enum kvs__ctl_command */
    pid_t pid;                         /* kvsctl's, for messages */
};

/* What kvsd has done, for kvsctl stats. Serve thread only. */
struct stats {
    uint64_t rounds;                   /* sync rounds closed, over every key */
    uint64_t pushes, pulls;            /* push and pull requests that succeeded */
    uint64_t bytes_pushed;             /* their data: each request's, as the worker sent it */
    uint64_t bytes_pulled;             /* the values the pulls were answered with */
    uint64_t collectives;              /* inits of a key, barriers, set_optimizer: finished */
    uint64_t waits;                    /* sleeps of the serve loop on its doorbell */
    uint64_t failed;                   /* requests completed with an error */
};

struct daemon {
    struct options o;
    char dir[PATH_MAX], sock_path[PATH_MAX + 80], lock_path[PATH_MAX + 80];
    int lock_fd, listen_fd;
    int sync;                          /* 1 dist_sync, 0 dist_async, -1 unknown yet */
    int ctl_fd, arena_fd, arena_ro_fd;
    void *ctl;
    unsigned char *arena;
    uint64_t arena_next;               /* bump pointer */
    struct kvs__bell *bell;
    struct kvs__engine *eng;
    struct kvs__worker_layout wl;      /* every worker segment's layout */

    pthread_mutex_t lock;              /* workers[] slots and states vs the socket thread */
    struct worker workers[MAX_WORKERS];
    int nworkers;                      /* the job's size, once known */
    _Atomic int connected;             /* workers ever connected */
    int left;                          /* workers that left cleanly */
    int failed;                        /* a worker died: every round now fails */
    char fail_msg[KVS__MSG_MAX];

    struct req *pending;               /* sorted: priority high first, then arrival */
    struct coll *colls;
    uint64_t order;
    struct stats st;

    pthread_mutex_t ctl_lock;          /* ctlq between the socket and serve threads */
    struct ctl_conn ctlq[CTL_QUEUE_MAX];
    int nctl;
    struct kvs__ctl_reply reply;       /* the serve thread's answer being written */
};

static volatile sig_atomic_t stop_signal;

static void say(const struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void say(const struct daemon *d, const char *fmt, ...)
{
    va_list ap;

    if (d->o.quiet)
        return;
    fprintf(stderr, "kvsd[%s]: ", d->o.job);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- the arena: where the engine keeps values ------------------------- */

/* Values are allocated from the shared arena, each after a block head that
 * holds its seqlock. Freed blocks are not reused: values are made by init
 * and live as long as the job. */
static void *arena_alloc(void *ctx, size_t bytes)
{
    struct daemon *d = ctx;
    uint64_t need = sizeof(struct kvs__block_head) + ((bytes + 63) & ~(uint64_t)63);
    struct kvs__block_head *bh;

    if (bytes > d->o.arena || d->arena_next + need > d->o.arena)
        return NULL;
    bh = (struct kvs__block_head *)(d->arena + d->arena_next);
    atomic_store_explicit(&bh->seq, 0, memory_order_relaxed);
    bh->bytes = bytes;
    d->arena_next += need;
    return bh + 1;
}

static void arena_free(void *ctx, void *p, size_t bytes)
{
    (void)ctx;
    (void)p;
    (void)bytes;
}

static struct kvs__block_head *block_of(void *value)
{
    return (struct kvs__block_head *)value - 1;
}

static void seq_begin(void *value)
{
    atomic_fetch_add_explicit(&block_of(value)->seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void seq_end(void *value)
{
    atomic_fetch_add_explicit(&block_of(value)->seq, 1, memory_order_release);
}

/* ---- completions ------------------------------------------------------ */

static void post(struct daemon *d, int wi, const struct kvs__cqe *c)
{
    struct worker *w = &d->workers[wi];
    struct done *dn;
    int err = 0;
    void *slot;

    if (w->state != W_LIVE)
        return;
    if (!w->backlog && (slot = kvs__ring_reserve(&w->cq, &err)) != NULL) {
        kvs__cqe_encode(c, slot);
        kvs__ring_commit(&w->cq);
        kvs__bell_ring(w->bell);
        return;
    }
    dn = malloc(sizeof *dn);
    if (!dn) {
        say(d, "out of memory for a completion to rank %d", w->rank);
        return;
    }
    dn->c = *c;
    dn->next = NULL;
    *w->backlog_tail = dn;
    w->backlog_tail = &dn->next;
}

static void flush_backlog(struct daemon *d, struct worker *w)
{
    int err = 0, posted = 0;
    void *slot;

    (void)d;
    while (w->backlog && (slot = kvs__ring_reserve(&w->cq, &err)) != NULL) {
        struct done *dn = w->backlog;

        kvs__cqe_encode(&dn->c, slot);
        kvs__ring_commit(&w->cq);
        w->backlog = dn->next;
        if (!w->backlog)
            w->backlog_tail = &w->backlog;
        free(dn);
        posted = 1;
    }
    if (posted)
        kvs__bell_ring(w->bell);
}

static kvs_key_t sqe_key(const struct kvs__sqe *s)
{
    return s->key_len ? KVS_STR_KEY(s->key_name) : KVS_INT_KEY(s->key_id);
}

static kvs_array_t sqe_array(const struct kvs__sqe *s, void *data)
{
    kvs_array_t a = { .data = data, .dtype = s->dtype, .ndim = s->ndim, .device = KVS_HOST };

    memcpy(a.shape, s->shape, sizeof a.shape[0] * (size_t)s->ndim);
    return a;
}

/* A completion that hands the worker the key's value in the arena. */
static void value_cqe(struct daemon *d, const struct kvs__entry_info *info,
                      struct kvs__cqe *c)
{
    const struct round *rd = *info->front;

    c->value_off = (uint64_t)((unsigned char *)info->value - d->arena);
    c->value_len = info->bytes;
    c->round = rd ? rd->done : 0;
    d->st.pulls++;
    d->st.bytes_pulled += info->bytes;
}

static void complete(struct daemon *d, struct req *r, int status, const char *msg)
{
    struct kvs__cqe c = { .seq = r->s.seq, .status = status };
    struct kvs__entry_info info;

    if (status != 0) {
        d->st.failed++;
    } else if (r->s.op == KVS__OP_PUSH) {
        d->st.pushes++;
        d->st.bytes_pushed += r->s.data_len;
        /* pushpull: the value the push made, without a pull's round trip */
        if ((r->s.flags & KVS__SQE_VALUE)
            && kvs__engine_lookup(d->eng, sqe_key(&r->s), &info, NULL) == 0)
            value_cqe(d, &info, &c);
    }
    if (status && msg)
        snprintf(c.msg, sizeof c.msg, "%s", msg);
    post(d, r->w, &c);
    free(r);
}

static void complete_list(struct daemon *d, struct req *r, int status, const char *msg)
{
    while (r) {
        struct req *next = r->next;

        complete(d, r, status, msg);
        r = next;
    }
}

/* ---- workers: arrival, leaving, death --------------------------------- */

static int expected(const struct daemon *d)
{
    return d->nworkers - d->left;
}

static void fail_job(struct daemon *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Fails every waiting request: those in rounds and pulls, and those in
 * collectives. */
static void fail_waiting(struct daemon *d, int status, const char *msg)
{
    complete_list(d, d->pending, status, msg);
    d->pending = NULL;
    while (d->colls) {
        struct coll *c = d->colls;

        d->colls = c->next;
        complete_list(d, c->reqs, status, msg);
        free(c->arrived);
        free((char *)c->key.name);
        free(c->spec);
        free(c);
    }
}

/* A worker died: every waiting request and every later one fails. */
static void fail_job(struct daemon *d, const char *fmt, ...)
{
    va_list ap;

    if (!d->failed) {
        va_start(ap, fmt);
        vsnprintf(d->fail_msg, sizeof d->fail_msg, fmt, ap);
        va_end(ap);
        d->failed = 1;
        say(d, "%s", d->fail_msg);
    }
    fail_waiting(d, KVS_EPEERDEAD, d->fail_msg);
}

static void worker_release(struct daemon *d, struct worker *w)
{
    complete_list(d, w->batch, KVS_EPEERDEAD, "worker gone");
    w->batch = NULL;
    while (w->backlog) {
        struct done *dn = w->backlog;

        w->backlog = dn->next;
        free(dn);
    }
    if (w->seg)
        kvs__unmap(w->seg, w->seg_size);
    w->seg = NULL;
    if (w->sock >= 0)
        close(w->sock);
    w->sock = -1;
}

/* ---- requests --------------------------------------------------------- */

static struct round *round_of(struct daemon *d, const struct kvs__entry_info *info)
{
    struct round *r = *info->front;

    if (r)
        return r;
    r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->contrib = calloc((size_t)d->nworkers, 1);
    r->last = calloc((size_t)d->nworkers, sizeof *r->last);
    r->accum = malloc(info->bytes ? info->bytes : 1);
    if (!r->contrib || !r->last || !r->accum) {
        free(r->contrib);
        free(r->last);
        free(r->accum);
        free(r);
        return NULL;
    }
    *info->front = r;
    return r;
}

static void round_free(void *p)
{
    struct round *r = p;

    free(r->contrib);
    free(r->last);
    free(r->accum);
    free(r);
}

static void insert_pending(struct daemon *d, struct req *r)
{
    struct req **p = &d->pending;

    while (*p && (*p)->s.priority >= r->s.priority)
        p = &(*p)->next;
    r->next = *p;
    *p = r;
}

/* Applies a round's sum through the engine, under the value's seqlock. */
static int apply(struct daemon *d, const struct kvs__sqe *s, void *data, struct kvs__err *e)
{
    struct kvs__entry_info info;
    kvs_key_t key = sqe_key(s);
    kvs_array_t a = sqe_array(s, data);
    int rc;

    if ((rc = kvs__engine_lookup(d->eng, key, &info, e)) != 0)
        return rc;
    seq_begin(info.value);
    rc = kvs__engine_push(d->eng, 1, &key, &a, e);
    seq_end(info.value);
    return rc;
}

/* Closes a key's open round when every worker still in the job pushed to
 * it: applies the sum and completes the round's pushes. 1 when closed. */
static int close_round(struct daemon *d, const struct kvs__sqe *s, struct round *rd)
{
    struct kvs__err e = { 0, "" };
    int status;

    if (rd->ncontrib == 0 || rd->ncontrib < expected(d))
        return 0;
    status = apply(d, s, rd->accum, &e);
    rd->done++;
    d->st.rounds++;
    rd->ncontrib = 0;
    memset(rd->contrib, 0, (size_t)d->nworkers);
    /* The pushes of this round wait in pending: finish them now. */
    for (struct req **p = &d->pending; *p;) {
        struct req *r = *p;

        if (r->s.op == KVS__OP_PUSH && r->s.arg == 1 && r->s.data_off == rd->done
            && r->s.key_len == s->key_len && r->s.key_id == s->key_id
            && strcmp(r->s.key_name, s->key_name) == 0) {
            *p = r->next;
            complete(d, r, status, e.msg);
        } else {
            p = &r->next;
        }
    }
    return 1;
}

/* One pass over pending requests; returns 1 when something completed. */
static int serve_pending(struct daemon *d)
{
    struct kvs__err e = { 0, "" };
    int progress = 0;

    for (struct req **p = &d->pending; *p;) {
        struct req *r = *p;
        struct worker *w = &d->workers[r->w];
        struct kvs__entry_info info;
        struct round *rd;
        int rc;

        if ((rc = kvs__engine_lookup(d->eng, sqe_key(&r->s), &info, &e)) != 0) {
            *p = r->next;
            complete(d, r, rc, e.msg);
            progress = 1;
            continue;
        }
        if (r->s.op == KVS__OP_PULL) {
            rd = *info.front;
            if (d->sync && rd && rd->done < rd->last[r->w]) {
                p = &r->next;
                continue;
            }
            *p = r->next;
            {
                struct kvs__cqe c = { .seq = r->s.seq };

                value_cqe(d, &info, &c);
                post(d, r->w, &c);
                free(r);
            }
            progress = 1;
            continue;
        }
        /* A sync push: s.arg 0 = not yet in a round, 1 = its data is in the
         * round numbered s.data_off (reused once the staging was copied). */
        if (r->s.op == KVS__OP_PUSH && r->s.arg == 0) {
            if (!(rd = round_of(d, &info))) {
                *p = r->next;
                complete(d, r, -ENOMEM, "kvsd: out of memory for a round");
                progress = 1;
                continue;
            }
            if (rd->contrib[r->w]) {   /* already in the open round: wait for the next */
                p = &r->next;
                continue;
            }
            if (rd->ncontrib == 0) {
                kvs__copy(rd->accum, w->staging + r->s.data_off, info.bytes, d->o.threads);
            } else {
                const void *in[2] = { rd->accum, w->staging + r->s.data_off };

                kvs__sum(info.dtype, rd->accum, in, 2, info.count, d->o.threads);
            }
            rd->contrib[r->w] = 1;
            rd->ncontrib++;
            rd->last[r->w] = rd->done + 1;
            r->s.arg = 1;
            r->s.data_off = rd->done + 1;
            progress = 1;
            {
                struct kvs__sqe s = r->s;

                close_round(d, &s, rd);
            }
            return progress;           /* the list changed under us: start over */
        }
        p = &r->next;
    }
    return progress;
}

/* Every sync round whose missing workers have all left can close now. */
static void close_rounds_after_leave(struct daemon *d)
{
    int closed;

    do {
        closed = 0;
        for (struct req *r = d->pending; r; r = r->next) {
            struct kvs__entry_info info;

            if (r->s.op == KVS__OP_PUSH && r->s.arg == 1
                && kvs__engine_lookup(d->eng, sqe_key(&r->s), &info, NULL) == 0
                && *info.front) {
                struct kvs__sqe s = r->s;

                /* Closing frees r and other pending requests: start over. */
                if ((closed = close_round(d, &s, *info.front)))
                    break;
            }
        }
    } while (closed);
}

/* ---- collectives ------------------------------------------------------ */

static struct coll *coll_find(struct daemon *d, const struct kvs__sqe *s)
{
    for (struct coll *c = d->colls; c; c = c->next) {
        if (c->op != s->op)
            continue;
        if (s->op != KVS__OP_INIT)
            return c;
        if ((c->key.name == NULL) == (s->key_len == 0)
            && (c->key.name ? strcmp(c->key.name, s->key_name) == 0 : c->key.id == s->key_id))
            return c;
    }
    return NULL;
}

static void coll_finish(struct daemon *d, struct coll *c)
{
    struct coll **p = &d->colls;
    struct kvs__err e = { 0, "" };

    if (c->op == KVS__OP_SET_OPTIMIZER && c->status == 0 && c->spec) {
        c->status = kvs__engine_set_optimizer(d->eng, c->spec, &e);
        snprintf(c->msg, sizeof c->msg, "%s", e.msg);
    }
    while (*p != c)
        p = &(*p)->next;
    *p = c->next;
    d->st.collectives++;
    complete_list(d, c->reqs, c->status, c->msg);
    free(c->arrived);
    free((char *)c->key.name);
    free(c->spec);
    free(c);
}

static void colls_check(struct daemon *d)
{
    for (struct coll *c = d->colls, *next; c; c = next) {
        next = c->next;
        if (c->narrived >= expected(d))
            coll_finish(d, c);
    }
}

static void coll_arrive(struct daemon *d, struct req *r)
{
    struct worker *w = &d->workers[r->w];
    struct coll *c = coll_find(d, &r->s);
    struct kvs__err e = { 0, "" };

    if (c && c->arrived[r->w]) {
        complete(d, r, KVS_EBADARG, "this worker already waits in the same collective");
        return;
    }
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c || !(c->arrived = calloc((size_t)d->nworkers, 1))
            || (r->s.key_len && !(c->key.name = strdup(r->s.key_name)))) {
            if (c)
                free(c->arrived);
            free(c);
            complete(d, r, -ENOMEM, "kvsd: out of memory");
            return;
        }
        c->op = r->s.op;
        c->key.id = r->s.key_id;
        c->spec_rank = INT_MAX;
        c->next = d->colls;
        d->colls = c;
    }
    if (r->s.op == KVS__OP_INIT && w->rank == 0) {
        kvs_key_t key = sqe_key(&r->s);
        kvs_array_t a = sqe_array(&r->s, w->staging + r->s.data_off);

        c->status = kvs__engine_init(d->eng, 1, &key, &a, 0, &e);
        snprintf(c->msg, sizeof c->msg, "%s", e.msg);
    }
    if (r->s.op == KVS__OP_SET_OPTIMIZER && w->rank < c->spec_rank) {
        char *spec = strndup((char *)w->staging + r->s.data_off, r->s.data_len);

        if (spec) {
            free(c->spec);
            c->spec = spec;
            c->spec_rank = w->rank;
        }
    }
    c->arrived[r->w] = 1;
    c->narrived++;
    r->next = c->reqs;
    c->reqs = r;
    if (c->narrived >= expected(d))
        coll_finish(d, c);
}

/* ---- a worker's requests ---------------------------------------------- */

static int text_op(struct daemon *d, struct req *r, struct kvs__err *e)
{
    struct worker *w = &d->workers[r->w];
    char path[4096];

    memcpy(path, w->staging + r->s.data_off, r->s.data_len);
    path[r->s.data_len] = '\0';
    if (strlen(path) != r->s.data_len || path[0] != '/')
        return kvs__fail(e, KVS_EBADARG, "path must be absolute, without NUL");
    if (r->s.op == KVS__OP_SAVE_STATES)
        return kvs__engine_save_states(d->eng, path, r->s.arg != 0, e);
    return kvs__engine_load_states(d->eng, path, e);
}

/* A whole list call has arrived: check every request against the store
 * before any of them takes effect, then start them. */
static void run_list(struct daemon *d, struct req *list)
{
    struct kvs__err e = { 0, "" };
    int rc = 0;

    if (d->failed && list->s.op != KVS__OP_CLOSE) {
        complete_list(d, list, KVS_EPEERDEAD, d->fail_msg);
        return;
    }
    for (struct req *r = list; r && rc == 0; r = r->next) {
        if (r->s.op == KVS__OP_PUSH || r->s.op == KVS__OP_PULL) {
            kvs_array_t a = sqe_array(&r->s, NULL);

            rc = kvs__engine_check(d->eng, sqe_key(&r->s), &a, &e);
        }
    }
    if (rc != 0) {
        complete_list(d, list, rc, e.msg);
        return;
    }
    while (list) {
        struct req *r = list;
        struct worker *w = &d->workers[r->w];

        list = r->next;
        r->next = NULL;
        switch (r->s.op) {
        case KVS__OP_PUSH:
            if (d->sync) {
                r->s.arg = 0;
                insert_pending(d, r);
            } else {
                rc = apply(d, &r->s, w->staging + r->s.data_off, &e);
                complete(d, r, rc, e.msg);
            }
            break;
        case KVS__OP_PULL:
            insert_pending(d, r);
            break;
        case KVS__OP_INIT:
        case KVS__OP_BARRIER:
        case KVS__OP_SET_OPTIMIZER:
            coll_arrive(d, r);
            break;
        case KVS__OP_SAVE_STATES:
        case KVS__OP_LOAD_STATES:
            rc = text_op(d, r, &e);
            complete(d, r, rc, e.msg);
            break;
        case KVS__OP_CLOSE:
            complete(d, r, 0, NULL);
            atomic_store(&w->state, W_LEFT);
            d->left++;
            say(d, "rank %d left the job", w->rank);
            close_rounds_after_leave(d);
            colls_check(d);
            break;
        default:
            complete(d, r, KVS_EPROTO, "unknown request");
        }
    }
}

static void evict(struct daemon *d, struct worker *w, const char *why)
{
    say(d, "evicting rank %d (pid %d): %s", w->rank, (int)w->pid, why);
    atomic_store(&w->state, W_DEAD);
    worker_release(d, w);
    fail_job(d, "rank %d (pid %d) was evicted: %s", w->rank, (int)w->pid, why);
}

/* Reads every request a worker has posted. Returns 1 on progress. */
static int drain(struct daemon *d, int wi)
{
    struct worker *w = &d->workers[wi];
    struct kvs__err e = { 0, "" };
    int err = 0, progress = 0;
    const void *slot;

    while (w->state == W_LIVE && (slot = kvs__ring_peek(&w->sq, &err)) != NULL) {
        struct req *r = calloc(1, sizeof *r);

        if (!r) {
            say(d, "out of memory reading rank %d's requests", w->rank);
            break;
        }
        if (kvs__sqe_decode(slot, w->staging_size, &r->s, &e) != 0) {
            free(r);
            evict(d, w, e.msg);
            return 1;
        }
        kvs__ring_pop(&w->sq);
        progress = 1;
        r->w = wi;
        r->order = d->order++;
        *w->batch_tail = r;
        w->batch_tail = &r->next;
        if (++w->batch_len > (int)w->sq.entries * 64) {
            evict(d, w, "a list call without end");
            return 1;
        }
        if (r->s.flags & KVS__SQE_LAST) {
            struct req *list = w->batch;

            w->batch = NULL;
            w->batch_tail = &w->batch;
            w->batch_len = 0;
            run_list(d, list);
        }
    }
    if (err)
        evict(d, w, "its request ring is corrupt");
    if (progress && w->state == W_LIVE)
        kvs__bell_ring(w->bell);       /* room in its request ring */
    return progress;
}

/* ---- control: kvsctl's requests --------------------------------------- */

/* An answer being written into a reply's text. A piece that does not fit
 * is left out whole and marks the text full: an answer is cut between
 * lines, never inside one. */
struct text {
    char *buf;
    size_t len, cap;
    int full;
};

static void text_raw(struct text *t, const char *s, size_t n)
{
    if (t->full || n > t->cap - t->len) {
        t->full = 1;
        return;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
}

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_add(struct text *t, const char *fmt, ...)
{
    char line[1024], safe[4 * sizeof line];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    text_raw(t, safe,
             kvs__ctl_text_escape(safe, sizeof safe, line, strnlen(line, sizeof line), 0));
}

/* 7, or "name" quoted and escaped. */
static void key_text(char *buf, size_t size, kvs_key_t key)
{
    size_t n;

    if (!key.name) {
        snprintf(buf, size, "%" PRId64, key.id);
        return;
    }
    buf[0] = '"';
    n = 1 + kvs__ctl_text_escape(buf + 1, size - 2, key.name, strlen(key.name), 1);
    buf[n++] = '"';
    buf[n] = '\0';
}

/* As Python writes a shape: (), (4,), (2,3). */
static void shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, size, "(");

    for (int i = 0; i < ndim && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, i ? "," : "", shape[i]);
    if (o < size)
        snprintf(buf + o, size - o, "%s)", ndim == 1 ? "," : "");
}

static void ctl_status(struct daemon *d, struct text *t)
{
    const char *spec = kvs__engine_optimizer(d->eng);
    int nworkers, sync, live = 0, dead = 0;

    /* The socket thread sets both from the first hello. */
    pthread_mutex_lock(&d->lock);
    nworkers = d->nworkers;
    sync = d->sync;
    pthread_mutex_unlock(&d->lock);
    for (int i = 0; i < MAX_WORKERS; i++) {
        int st = atomic_load(&d->workers[i].state);

        live += st == W_LIVE;
        dead += st == W_DEAD;
    }
    text_add(t, "job: %s\n", d->o.job);
    text_add(t, "kvsd pid: %ld\n", (long)getpid());
    text_add(t, "mode: %s\n", sync < 0 ? "unknown yet" : sync ? "sync" : "async");
    if (nworkers > 0)
        text_add(t, "workers: %d expected, %d connected, %d left, %d dead\n", nworkers, live,
                 d->left, dead);
    else
        text_add(t, "workers: unknown yet, %d connected, %d left, %d dead\n", live, d->left,
                 dead);
    text_add(t, "keys: %zu\n", kvs__engine_nkeys(d->eng));
    text_add(t, "optimizer: %s\n", spec ? spec : "none");
    if (d->failed)
        text_add(t, "failed: yes: %s\n", d->fail_msg);
    else
        text_add(t, "failed: no\n");
}

static void ctl_stats(struct daemon *d, struct text *t)
{
    const struct stats *s = &d->st;

    text_add(t, "rounds: %" PRIu64 "\n", s->rounds);
    text_add(t, "pushes: %" PRIu64 "\n", s->pushes);
    text_add(t, "pulls: %" PRIu64 "\n", s->pulls);
    text_add(t, "bytes pushed: %" PRIu64 "\n", s->bytes_pushed);
    text_add(t, "bytes pulled: %" PRIu64 "\n", s->bytes_pulled);
    text_add(t, "collectives: %" PRIu64 "\n", s->collectives);
    text_add(t, "waits: %" PRIu64 "\n", s->waits);
    text_add(t, "requests failed: %" PRIu64 "\n", s->failed);
}

/* The keys listing takes two walks: one for the columns' widths, one for
 * the lines, as many as fit. */
struct listing {
    struct text *t;
    int pass;
    int wkey, wdtype, wshape, wversion;
    size_t shown;
};

#define KEY_TEXT_MAX   (4 * KVS_MAX_KEY_LEN + 3)
#define SHAPE_TEXT_MAX (KVS_MAX_NDIM * 21 + 4)
#define WIDTH_MAX      40                  /* a longer key only shifts its own line */

static int width(int w, size_t n)
{
    return n > (size_t)w ? (n > WIDTH_MAX ? WIDTH_MAX : (int)n) : w;
}

/* Columns a terminal gives the text: one per character, not per byte (a
 * name may hold UTF-8; what it shows wider is not worth a table). */
static size_t columns(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static int list_key(void *ctx, kvs_key_t key, const struct kvs__entry_info *info)
{
    struct listing *l = ctx;
    char ks[KEY_TEXT_MAX + 1], shape[SHAPE_TEXT_MAX], version[24];
    char line[KEY_TEXT_MAX + SHAPE_TEXT_MAX + 128];
    const struct round *rd = *info->front;
    size_t kcols;
    int n;

    key_text(ks, sizeof ks, key);
    kcols = columns(ks);
    shape_text(shape, sizeof shape, info->ndim, info->shape);
    snprintf(version, sizeof version, "%" PRIu64, info->version);
    if (l->pass == 0) {
        l->wkey = width(l->wkey, kcols);
        l->wdtype = width(l->wdtype, strlen(kvs_dtype_name(info->dtype)));
        l->wshape = width(l->wshape, strlen(shape));
        l->wversion = width(l->wversion, strlen(version));
        return 0;
    }
    /* The key is padded by columns, the other fields are ASCII. */
    n = snprintf(line, sizeof line, "%s%*s  %-*s  %-*s  %-*s  %" PRIu64 "\n", ks,
                 kcols < (size_t)l->wkey ? l->wkey - (int)kcols : 0, "", l->wdtype,
                 kvs_dtype_name(info->dtype), l->wshape, shape, l->wversion, version,
                 rd ? rd->done : 0);
    if (n < 0 || (size_t)n >= sizeof line || l->t->len + (size_t)n + CTL_TAIL_ROOM > l->t->cap)
        return 1;                      /* full: the rest is counted, not shown */
    text_raw(l->t, line, (size_t)n);
    l->shown++;
    return 0;
}

static int ctl_keys(struct daemon *d, struct text *t, struct kvs__err *e)
{
    struct listing l = { .t = t, .wkey = 3, .wdtype = 5, .wshape = 5, .wversion = 7 };
    size_t total = kvs__engine_nkeys(d->eng);
    int rc;

    if ((rc = kvs__engine_foreach(d->eng, list_key, &l, e)) < 0)
        return rc;
    text_add(t, "%-*s  %-*s  %-*s  %-*s  %s\n", l.wkey, "KEY", l.wdtype, "DTYPE", l.wshape,
             "SHAPE", l.wversion, "VERSION", "ROUNDS");
    l.pass = 1;
    if ((rc = kvs__engine_foreach(d->eng, list_key, &l, e)) < 0)
        return rc;
    if (l.shown < total)
        text_add(t, "... and %zu more keys, not shown\n", total - l.shown);
    return 0;
}

/* Sends one reply and waits at most until deadline_ns; the connection is
 * the caller's to close. Errors only cost kvsctl its answer. */
static void ctl_send(int fd, const struct kvs__ctl_reply *r, int64_t deadline_ns)
{
    unsigned char *msg = malloc(KVS__CTL_REPLY_HEAD + (size_t)r->len);
    size_t len;

    if (!msg)
        return;
    if ((len = kvs__ctl_reply_encode(r, msg)) != 0)
        kvs__sock_send(fd, msg, len, NULL, 0, deadline_ns, NULL);
    free(msg);
}

/* Answers the control requests the socket thread queued (serve thread).
 * Returns 1 when one of them was stop. */
static int ctl_serve(struct daemon *d)
{
    struct ctl_conn q[CTL_QUEUE_MAX];
    int n, stop = 0;

    pthread_mutex_lock(&d->ctl_lock);
    n = d->nctl;
    memcpy(q, d->ctlq, sizeof q[0] * (size_t)n);
    d->nctl = 0;
    pthread_mutex_unlock(&d->ctl_lock);
    for (int i = 0; i < n; i++) {
        struct kvs__ctl_reply *r = &d->reply;
        struct text t = { r->text, 0, KVS__CTL_TEXT_MAX, 0 };
        struct kvs__err e = { 0, "" };
        int rc = 0;

        switch (q[i].command) {
        case KVS__CTL_STATUS:
            ctl_status(d, &t);
            break;
        case KVS__CTL_KEYS:
            rc = ctl_keys(d, &t, &e);
            break;
        case KVS__CTL_STATS:
            ctl_stats(d, &t);
            break;
        case KVS__CTL_STOP:
            text_add(&t, "stopping\n");
            stop = 1;
            say(d, "told to stop by kvsctl (pid %d)", (int)q[i].pid);
            break;
        default:                       /* the decoder let no other through */
            rc = kvs__fail(&e, KVS_EPROTO, "unknown command");
        }
        if (rc != 0) {
            t.len = 0;
            t.full = 0;
            text_add(&t, "%s\n", e.msg);
        }
        r->version = KVS__PROTO_VERSION;
        r->status = rc;
        r->len = (uint32_t)t.len;
        ctl_send(q[i].fd, r, kvs__now_ns() + CTL_SEND_NS);
        close(q[i].fd);
    }
    return stop;
}

static void ctl_refuse(int fd, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* An answer from the socket thread: a request it will not queue. */
static void ctl_refuse(int fd, int status, const char *fmt, ...)
{
    struct kvs__ctl_reply *r = malloc(sizeof *r);
    char msg[KVS__ERR_MSG_MAX];
    va_list ap;

    if (!r)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->version = KVS__PROTO_VERSION;
    r->status = status;
    r->len = (uint32_t)kvs__ctl_text_escape(r->text, KVS__CTL_TEXT_MAX + 1, msg, strlen(msg),
                                            0);
    ctl_send(fd, r, kvs__now_ns() + HANDSHAKE_NS);
    free(r);
}

/* A connection whose first message is a control request (socket thread):
 * checked, then queued for the serve thread, which answers and closes it.
 * Takes fd. */
static void ctl_accept(struct daemon *d, int fd, const void *msg, size_t len, pid_t pid)
{
    struct kvs__err e = { 0, "" };
    struct kvs__ctl_request q;
    int queued = 0;

    if (kvs__ctl_request_decode(msg, len, &q, &e) != 0) {
        ctl_refuse(fd, KVS_EPROTO, "%s", e.msg);
    } else if (strcmp(q.job, d->o.job) != 0) {
        ctl_refuse(fd, KVS_EBADARG, "this kvsd serves job '%s', not '%s'", d->o.job, q.job);
    } else {
        pthread_mutex_lock(&d->ctl_lock);
        if (d->nctl < CTL_QUEUE_MAX) {
            d->ctlq[d->nctl++] = (struct ctl_conn){ .fd = fd, .command = q.command, .pid = pid };
            queued = 1;
        }
        pthread_mutex_unlock(&d->ctl_lock);
        if (queued) {
            kvs__bell_ring(d->bell);
            return;
        }
        ctl_refuse(fd, -EBUSY, "kvsd has %d control requests waiting; try again",
                   CTL_QUEUE_MAX);
    }
    close(fd);
}

/* ---- the handshake (socket thread) ------------------------------------ */

static int refuse(int fd, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(int fd, int status, const char *fmt, ...)
{
    struct kvs__welcome w = { .version = KVS__PROTO_VERSION, .status = status };
    unsigned char buf[KVS__WELCOME_BYTES];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(w.msg, sizeof w.msg, fmt, ap);
    va_end(ap);
    kvs__sock_send(fd, buf, kvs__welcome_encode(&w, buf), NULL, 0,
                   kvs__now_ns() + HANDSHAKE_NS, NULL);
    return status;
}

static void head_init(void *seg, uint32_t kind, uint64_t size)
{
    struct kvs__seg_head h = { .magic = KVS__SEG_MAGIC, .layout = KVS__SEG_LAYOUT,
                               .kind = kind, .size = size };

    memcpy(seg, &h, sizeof h);
}

static void handshake(struct daemon *d, int fd)
{
    unsigned char buf[KVS__WELCOME_BYTES + KVS__HELLO_BYTES];   /* either message */
    struct kvs__err e = { 0, "" };
    struct kvs__hello h;
    struct kvs__welcome wel = { .version = KVS__PROTO_VERSION };
    const struct kvs__worker_layout l = d->wl;
    struct worker *w = NULL;
    uid_t uid;
    pid_t pid;
    size_t len;
    int seg_fd = -1, nfds, wi = -1, fds[3];

    if (kvs__sock_peer(fd, &uid, &pid, &e) != 0 || uid != geteuid()) {
        say(d, "refused a client of uid %d", (int)uid);
        goto drop;                     /* nothing is sent to another user */
    }
    if (kvs__sock_recv(fd, buf, sizeof buf, &len, NULL, 0, &nfds, kvs__now_ns() + HANDSHAKE_NS,
                       &e) != 0)
        goto drop;
    if (kvs__msg_type(buf, len) == KVS__MSG_CTL_REQUEST) {
        ctl_accept(d, fd, buf, len, pid);
        return;
    }
    if (kvs__hello_decode(buf, len, &h, &e) != 0) {
        refuse(fd, KVS_EPROTO, "%s", e.msg);
        goto drop;
    }
    if (strcmp(h.job, d->o.job) != 0) {
        refuse(fd, KVS_EBADARG, "this kvsd serves job '%s', not '%s'", d->o.job, h.job);
        goto drop;
    }
    pthread_mutex_lock(&d->lock);
    if (d->nworkers == 0)
        d->nworkers = h.nworkers;
    if (d->sync < 0)
        d->sync = h.mode == KVS__MODE_SYNC;
    if (h.nworkers != d->nworkers || d->sync != (h.mode == KVS__MODE_SYNC)) {
        pthread_mutex_unlock(&d->lock);
        refuse(fd, KVS_EBADARG, "the job has %d workers in %s mode; this worker says %d, %s",
               d->nworkers, d->sync ? "sync" : "async", h.nworkers,
               h.mode == KVS__MODE_SYNC ? "sync" : "async");
        goto drop;
    }
    if (atomic_load(&d->workers[h.rank].state) != W_FREE) {
        pthread_mutex_unlock(&d->lock);
        refuse(fd, KVS_EBADARG, "rank %d has already joined the job", h.rank);
        goto drop;
    }
    wi = h.rank;                       /* one slot per rank */
    pthread_mutex_unlock(&d->lock);

    /* The slot is FREE, so the serve thread does not look inside it until
     * the state turns LIVE below (a release store). */
    w = &d->workers[wi];
    w->sock = -1;
    w->hup = 0;
    w->batch = NULL;
    w->backlog = NULL;
    w->batch_len = 0;
    if (kvs__memfd_new("kvs-worker", l.size, 0, &seg_fd, &e) != 0
        || kvs__map(seg_fd, l.size, 1, &w->seg, &e) != 0) {
        refuse(fd, e.code, "%s", e.msg);
        goto drop;
    }
    w->seg_size = l.size;
    head_init(w->seg, KVS__SEG_WORKER, l.size);
    w->bell = (struct kvs__bell *)((char *)w->seg + KVS__WORKER_BELL_OFF);
    /* setup() checked this geometry through kvs__worker_layout. */
    if (kvs__ring_attach(&w->sq, (char *)w->seg + l.sq_off, d->o.sq_entries,
                         KVS__SQE_BYTES, 1) != 0
        || kvs__ring_attach(&w->cq, (char *)w->seg + l.cq_off, d->o.cq_entries,
                            KVS__CQE_BYTES, 1) != 0) {
        kvs__unmap(w->seg, w->seg_size);
        w->seg = NULL;
        refuse(fd, KVS_EPROTO, "kvsd: bad ring geometry");
        goto drop;
    }
    w->staging = (unsigned char *)w->seg + l.staging_off;
    w->staging_size = l.staging_size;
    w->batch_tail = &w->batch;
    w->backlog_tail = &w->backlog;
    w->rank = h.rank;
    w->pid = pid;

    wel.worker = (uint32_t)wi;
    wel.control_size = KVS__CONTROL_SIZE;
    wel.seg_size = l.size;
    wel.arena_size = d->o.arena;
    wel.sq_entries = d->o.sq_entries;
    wel.cq_entries = d->o.cq_entries;
    wel.staging_off = l.staging_off;
    wel.staging_size = l.staging_size;
    fds[0] = d->ctl_fd;
    fds[1] = seg_fd;
    fds[2] = d->arena_ro_fd;
    len = kvs__welcome_encode(&wel, buf);
    if (kvs__sock_send(fd, buf, len, fds, 3, kvs__now_ns() + HANDSHAKE_NS, &e) != 0) {
        kvs__unmap(w->seg, w->seg_size);
        w->seg = NULL;
        goto drop;
    }
    close(seg_fd);
    w->sock = fd;
    atomic_store(&w->state, W_LIVE);
    atomic_fetch_add(&d->connected, 1);
    say(d, "rank %d (pid %d) joined", w->rank, (int)pid);
    kvs__bell_ring(d->bell);
    return;

drop:
    if (seg_fd >= 0)
        close(seg_fd);
    close(fd);
}

/* Accepts workers and watches their sockets until told to stop. */
static void *socket_thread(void *arg)
{
    struct daemon *d = arg;
    struct pollfd p[MAX_WORKERS + 1];
    int who[MAX_WORKERS + 1];

    while (!stop_signal) {
        int n = 0, fd;

        p[n++] = (struct pollfd){ .fd = d->listen_fd, .events = POLLIN };
        for (int i = 0; i < MAX_WORKERS; i++) {
            if (atomic_load(&d->workers[i].state) == W_LIVE && !d->workers[i].hup) {
                who[n] = i;
                p[n++] = (struct pollfd){ .fd = d->workers[i].sock, .events = POLLIN };
            }
        }
        if (poll(p, (nfds_t)n, 100) <= 0)
            continue;
        for (int i = 1; i < n; i++) {
            char b;

            if (p[i].revents && recv(p[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) {
                d->workers[who[i]].hup = 1;
                kvs__bell_ring(d->bell);
            }
        }
        if ((p[0].revents & POLLIN) && kvs__sock_accept(d->listen_fd, 0, &fd, NULL) == 0)
            handshake(d, fd);
    }
    return NULL;
}

/* ---- set-up and the serve loop ---------------------------------------- */

static int setup(struct daemon *d, struct kvs__err *e)
{
    struct kvs__mem mem = { arena_alloc, arena_free, d };
    int rc;

    if (kvs__worker_layout(d->o.sq_entries, d->o.cq_entries, d->o.staging, &d->wl) != 0)
        return kvs__fail(e, KVS_EBADARG, "staging of %llu bytes is too big",
                         (unsigned long long)d->o.staging);
    if ((rc = kvs__runtime_dir(d->dir, sizeof d->dir, e)) != 0)
        return rc;
    snprintf(d->lock_path, sizeof d->lock_path, "%s/%s.lock", d->dir, d->o.job);
    snprintf(d->sock_path, sizeof d->sock_path, "%s/%s.sock", d->dir, d->o.job);
    d->lock_fd = open(d->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (d->lock_fd < 0)
        return kvs__fail(e, -errno, "%s: %s", d->lock_path, strerror(errno));
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        /* Not ours: teardown must not remove the running kvsd's lock. */
        close(d->lock_fd);
        d->lock_fd = -1;
        return kvs__fail(e, -EBUSY, "another kvsd serves job '%s' (%s is locked)", d->o.job,
                         d->lock_path);
    }
    /* We hold the job's lock: a socket left at the path is a dead kvsd's. */
    unlink(d->sock_path);
    if ((rc = kvs__sock_listen(d->sock_path, &d->listen_fd, e)) != 0)
        return rc;
    if ((rc = kvs__memfd_new("kvs-control", KVS__CONTROL_SIZE, 1, &d->ctl_fd, e)) != 0
        || (rc = kvs__map(d->ctl_fd, KVS__CONTROL_SIZE, 1, &d->ctl, e)) != 0)
        return rc;
    head_init(d->ctl, KVS__SEG_CONTROL, KVS__CONTROL_SIZE);
    d->bell = (struct kvs__bell *)((char *)d->ctl + KVS__CONTROL_BELL_OFF);
    if ((rc = kvs__memfd_new("kvs-arena", d->o.arena, 1, &d->arena_fd, e)) != 0
        || (rc = kvs__map(d->arena_fd, d->o.arena, 1, (void **)&d->arena, e)) != 0
        || (rc = kvs__memfd_reopen_ro(d->arena_fd, &d->arena_ro_fd, e)) != 0)
        return rc;
    head_init(d->arena, KVS__SEG_ARENA, d->o.arena);
    d->arena_next = KVS__ARENA_DATA_OFF;
    if ((rc = kvs__engine_new(&mem, &d->eng, e)) != 0)
        return rc;
    kvs__engine_set_threads(d->eng, d->o.threads);
    kvs__engine_set_front_free(d->eng, round_free);
    return 0;
}

static void teardown(struct daemon *d)
{
    /* Control connections queued after the serve loop ended get no answer. */
    pthread_mutex_lock(&d->ctl_lock);
    for (int i = 0; i < d->nctl; i++)
        close(d->ctlq[i].fd);
    d->nctl = 0;
    pthread_mutex_unlock(&d->ctl_lock);
    /* Waiting requests are answered while their workers' rings are still
     * mapped; releasing a worker unmaps them. */
    fail_waiting(d, KVS_ECLOSED, "kvsd stopped");
    for (int i = 0; i < MAX_WORKERS; i++)
        if (d->workers[i].state != W_FREE)
            worker_release(d, &d->workers[i]);
    kvs__engine_free(d->eng);
    if (d->listen_fd >= 0) {
        close(d->listen_fd);
        unlink(d->sock_path);
    }
    if (d->lock_fd >= 0) {
        unlink(d->lock_path);
        close(d->lock_fd);
    }
}

static void serve(struct daemon *d)
{
    while (!stop_signal) {
        uint32_t seen = kvs__bell_seq(d->bell);
        int progress = 0, live = 0;

        if (ctl_serve(d))
            return;
        for (int i = 0; i < MAX_WORKERS; i++) {
            struct worker *w = &d->workers[i];

            if (w->state == W_LIVE && w->hup) {
                /* Requests it posted before dying still count: drain first. */
                drain(d, i);
                if (w->state == W_LIVE) {
                    atomic_store(&w->state, W_DEAD);
                    worker_release(d, w);
                    fail_job(d, "rank %d (pid %d) died", w->rank, (int)w->pid);
                }
            }
            if (w->state == W_LEFT && w->seg && !w->backlog)
                worker_release(d, w);  /* its CLOSE is answered: reclaim */
            live += w->state == W_LIVE;
        }
        for (int i = 0; i < MAX_WORKERS; i++) {
            if (d->workers[i].state == W_LIVE) {
                progress |= drain(d, i);
                flush_backlog(d, &d->workers[i]);
            }
        }
        while (serve_pending(d))
            progress = 1;
        if (d->nworkers > 0 && d->connected >= d->nworkers && live == 0) {
            say(d, "every worker has left: exiting");
            return;
        }
        if (!progress) {
            d->st.waits++;
            kvs__bell_wait(d->bell, seen, kvs__now_ns() + SERVE_SLICE_NS, SPIN_NS);
        }
    }
}

/* ---- main ------------------------------------------------------------- */

static void on_signal(int sig)
{
    (void)sig;
    stop_signal = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvsd --job NAME [options]\n"
            "Serves the store of one dist_sync/dist_async job to its workers.\n"
            "  -j, --job NAME       the job (as KVS_JOB in the workers)\n"
            "  -n, --workers N      the job's number of workers (default: from the first)\n"
            "      --staging BYTES  staging area per worker (default 256M)\n"
            "      --arena BYTES    room for stored values (default 4G, sparse)\n"
            "      --threads N      threads for big sums (default: online CPUs, at most 8)\n"
            "  -q, --quiet          no messages on stderr\n"
            "  -h, --help           this text\n"
            "      --version        the version\n"
            "kvsd exits when every worker has left, on SIGINT/SIGTERM, or on kvsctl stop.\n");
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mul = 1;

    switch (*end) {
    case 'K': case 'k': mul = 1024.0; end++; break;
    case 'M': case 'm': mul = 1048576.0; end++; break;
    case 'G': case 'g': mul = 1073741824.0; end++; break;
    default: break;
    }
    if (*end != '\0' || !(v > 0) || v * mul > (double)((uint64_t)1 << 40))
        return -1;
    *out = ((uint64_t)(v * mul) + 4095) & ~(uint64_t)4095;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        { "job", required_argument, NULL, 'j' },
        { "workers", required_argument, NULL, 'n' },
        { "staging", required_argument, NULL, 's' },
        { "arena", required_argument, NULL, 'a' },
        { "threads", required_argument, NULL, 't' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    static struct daemon d;
    struct kvs__err e = { 0, "" };
    struct sigaction sa = { .sa_handler = on_signal };
    pthread_t th;
    int c, rc;

    d.o.staging = 256ull << 20;
    d.o.arena = 4ull << 30;
    d.o.sq_entries = 1024;
    d.o.cq_entries = 1024;
    d.sync = -1;
    d.lock_fd = d.listen_fd = d.ctl_fd = d.arena_fd = d.arena_ro_fd = -1;
    while ((c = getopt_long(argc, argv, "j:n:qh", longs, NULL)) != -1) {
        char *end;
        long v;

        switch (c) {
        case 'j':
            if (kvs__job_name_check(optarg, &e) != 0) {
                fprintf(stderr, "kvsd: %s\n", e.msg);
                return 2;
            }
            snprintf(d.o.job, sizeof d.o.job, "%s", optarg);
            break;
        case 'n':
        case 't':
            v = strtol(optarg, &end, 10);
            if (*end || v < (c == 'n' ? 1 : 0) || v > (c == 'n' ? MAX_WORKERS : 64)) {
                fprintf(stderr, "kvsd: bad --%s '%s'\n", c == 'n' ? "workers" : "threads",
                        optarg);
                return 2;
            }
            if (c == 'n')
                d.o.nworkers = (int)v;
            else
                d.o.threads = (int)v;
            break;
        case 's':
        case 'a':
            if (parse_size(optarg, c == 's' ? &d.o.staging : &d.o.arena) != 0) {
                fprintf(stderr, "kvsd: bad size '%s'\n", optarg);
                return 2;
            }
            break;
        case 'q':
            d.o.quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("kvsd (%s)\n", kvs_version(NULL, NULL, NULL));
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!d.o.job[0] || optind != argc) {
        usage(stderr);
        return 2;
    }
    d.nworkers = d.o.nworkers;
    for (int i = 0; i < MAX_WORKERS; i++)
        d.workers[i].sock = -1;
    pthread_mutex_init(&d.lock, NULL);
    pthread_mutex_init(&d.ctl_lock, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if ((rc = setup(&d, &e)) != 0) {
        fprintf(stderr, "kvsd: %s\n", e.msg);
        teardown(&d);
        return rc == -EBUSY ? 3 : 1;
    }
    say(&d, "serving on %s", d.sock_path);
    if ((rc = pthread_create(&th, NULL, socket_thread, &d)) != 0) {
        fprintf(stderr, "kvsd: cannot start a thread: %s\n", strerror(rc));
        teardown(&d);
        return 1;
    }
    serve(&d);
    stop_signal = 1;
    pthread_join(th, NULL);
    teardown(&d);
    return 0;
}
