/*
 * client.c - the worker side of the dist store types: connects to the job's
 * kvsd, maps the segments it hands over, and turns each API call into
 * request slots on the worker's ring, then waits for their completions.
 * Pulls copy values straight out of the read-only arena, or hand out
 * pointers to them (views). Zero-copy buffers live at the top of the
 * staging area; pushes of them are sent by offset, without a copy.
 *
 * Threads: calls of several threads run at once. A short lock covers the
 * rings, the staging allocations and the table of calls waiting; one list
 * call is posted at a time (kvsd reads a list as consecutive slots); any
 * waiting thread reaps the completion ring for all of them and rings this
 * worker's own doorbell to wake the siblings it found completions for. A
 * thread waiting for a round therefore never holds up another's call.
 *
 * Staging: the copies of a call go in a range of the staging area below
 * the lowest zero-copy buffer. A dist_sync push returns once kvsd has
 * taken it, but kvsd reads its data from staging until the round closes:
 * the range comes back when kvsd returns every request's data (proto.h,
 * KVS__CQE_HELD). When no range is free, the client asks kvsd to copy what
 * it still reads (a SPILL), which depends on kvsd alone, never on another
 * worker: so pushes in any order never wait for each other.
 *
 * It never trusts what it reads from shared memory: completions are decoded
 * and checked (proto.c), ring indices are checked (ring.c), arena ranges
 * are checked against the arena's size. Every wait has a deadline
 * (KVS_OPT_TIMEOUT_MS), and kvsd's death is noticed within a wait slice.
 * Once a wait fails for a reason that leaves requests in flight (timeout,
 * kvsd gone, a peer dead, a protocol error), the handle is broken: every
 * later call returns the same error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "array.h"
#include "bufs.h"
#include "compress.h"
#include "front.h"
#include "layout.h"
#include "optim.h"
#include "proto.h"
#include "ring.h"
#include "shm.h"

#define WAIT_SLICE_NS   (100 * 1000000ll)   /* how often a wait checks that kvsd lives */
#define SPIN_NS         (20 * 1000ll)       /* spin before sleeping: half a futex wake-up */
#define CONNECT_WAIT_NS (10 * 1000000000ll) /* handshake deadline */
#define EXPLAIN_MS      1000                /* for kvsd to say what a call timed out on */
#define CLOSE_MS        2000                /* for kvsd to take a CLOSE: it may be gone */

/* What a completion says of one request, kept per request of a call: a
 * list of 200,000 keys keeps 5 MB of these, not 50 MB of whole slots. */
struct answer {
    int32_t status;
    uint64_t value_off, value_len;     /* PULL, PUSH with KVS__SQE_VALUE */
};

/* A call's answers: one per request, and the message of the first request
 * (in list order) that failed. */
struct answers {
    struct answer *a;
    int failed;                        /* its index, or -1 */
    char msg[KVS__MSG_MAX];
};

/* Makes the request slot of a call's request i (all fields but seq and the
 * end-of-list flag), from ctx: requests are made as they are posted,
 * never all at once. */
typedef void (*req_fill_fn)(const void *ctx, int i, struct kvs__sqe *s);

/* A list call waiting for its completions. */
struct waiter {
    uint64_t base;                     /* seq of its first request */
    int n, done;
    struct answers *ans;
    unsigned char *got;
    struct waiter *next;
};

/* Staging lent to kvsd by one list call of pushes or inits: a range of the
 * transient area (len 0: none) and the call's requests, until kvsd has
 * returned the data of each. */
struct hold {
    uint64_t base;                     /* seq of its first request */
    int n, refs;                       /* requests; of them, not returned yet */
    unsigned char *returned;           /* per request */
    uint64_t off, len;
    int zc;                            /* some data lies in zero-copy buffers */
    struct hold *next;
};

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
    struct waiter *waiters;
    struct hold *holds;
    int sync;                          /* dist_sync (views allowed) */
    uint64_t next_seq;
    int broken;                        /* 0, or the error every call now returns */
    char broken_msg[KVS__ERR_MSG_MAX];
};

/* ---- environment ------------------------------------------------------ */

/* 1 and *out when the variable is set to an integer in [lo, hi], 0 when
 * unset, KVS_EBADARG when set to anything else. */
static int env_int(const char *name, long lo, long hi, int *out, struct kvs__err *e)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (!s || !*s)
        return 0;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return kvs__fail(e, KVS_EBADARG, "%s=%s is not an integer in [%ld, %ld]", name, s,
                         lo, hi);
    *out = (int)v;
    return 1;
}

/* Rank and size from kvsrun's variables, else Open MPI's, PMI's, Slurm's. */
static int job_env(kvs_t *kv, char *job, struct kvs__err *e)
{
    static const char *const vars[][2] = {
        { "KVS_RANK", "KVS_NUM_WORKERS" },
        { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
        { "PMI_RANK", "PMI_SIZE" },
        { "SLURM_PROCID", "SLURM_NTASKS" },
    };
    const char *j = getenv("KVS_JOB");
    int rank = 0, size = 1, rc;

    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int r = 0, s = 1, hr, hs;

        if ((hr = env_int(vars[i][0], 0, 1023, &r, e)) < 0)
            return hr;
        if ((hs = env_int(vars[i][1], 1, 1024, &s, e)) < 0)
            return hs;
        if (!hr && !hs)
            continue;
        if (!hr || !hs)
            return kvs__fail(e, KVS_EBADARG, "%s and %s must be set together", vars[i][0],
                             vars[i][1]);
        rank = r;
        size = s;
        break;
    }
    if (rank >= size)
        return kvs__fail(e, KVS_EBADARG, "rank %d is not below the number of workers %d",
                         rank, size);
    if (!j || !*j)
        j = "default";
    if ((rc = kvs__job_name_check(j, e)) != 0)
        return rc;
    snprintf(job, KVS__JOB_MAX + 1, "%s", j);
    kv->rank = rank;
    kv->nworkers = size;
    return 0;
}

/* ---- connecting ------------------------------------------------------- */

static int check_head(const void *seg, size_t size, uint32_t kind, const char *what,
                      struct kvs__err *e)
{
    struct kvs__seg_head h;

    memcpy(&h, seg, sizeof h);
    if (h.magic != KVS__SEG_MAGIC || h.layout != KVS__SEG_LAYOUT || h.kind != kind
        || h.size != size)
        return kvs__fail(e, KVS_EPROTO, "%s segment: magic, layout %u, kind %u or size %llu "
                         "is not this library's (layout %u)", what, h.layout, h.kind,
                         (unsigned long long)h.size, KVS__SEG_LAYOUT);
    return 0;
}

static void client_free(struct kvs__client *c)
{
    if (!c)
        return;
    if (c->arena)
        kvs__unmap((void *)c->arena, c->arena_size);
    if (c->seg)
        kvs__unmap(c->seg, c->seg_size);
    if (c->ctl)
        kvs__unmap(c->ctl, c->ctl_size);
    if (c->sock >= 0)
        close(c->sock);
    kvs__bufs_fini(&c->bufs);
    kvs__bufs_fini(&c->xfer);
    while (c->holds) {
        struct hold *h = c->holds;

        c->holds = h->next;
        free(h->returned);
        free(h);
    }
    pthread_mutex_destroy(&c->post);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Maps what the welcome describes; fds are closed by the caller. */
static int client_map(struct kvs__client *c, const struct kvs__welcome *w, const int *fds,
                      struct kvs__err *e)
{
    struct kvs__worker_layout l;
    int rc;

    if (w->control_size != KVS__CONTROL_SIZE
        || kvs__worker_layout(w->sq_entries, w->cq_entries, w->staging_size, &l) != 0
        || l.size != w->seg_size || l.staging_off != w->staging_off
        || w->arena_size <= KVS__ARENA_DATA_OFF || w->arena_size > SIZE_MAX / 2)
        return kvs__fail(e, KVS_EPROTO, "kvsd's segment sizes do not fit this library's layout");
    /* Sealed against resizing, all three: a segment cut short under a
     * mapping would fault this process at its next access. */
    if ((rc = kvs__memfd_check(fds[0], w->control_size, 1, e)) != 0
        || (rc = kvs__memfd_check(fds[1], w->seg_size, 1, e)) != 0
        || (rc = kvs__memfd_check(fds[2], w->arena_size, 1, e)) != 0)
        return rc;
    if ((rc = kvs__map(fds[0], w->control_size, 1, &c->ctl, e)) != 0)
        return rc;
    c->ctl_size = w->control_size;
    if ((rc = kvs__map(fds[1], w->seg_size, 1, &c->seg, e)) != 0)
        return rc;
    c->seg_size = w->seg_size;
    if ((rc = kvs__map(fds[2], w->arena_size, 0, (void **)&c->arena, e)) != 0)
        return rc;
    c->arena_size = w->arena_size;
    if ((rc = check_head(c->ctl, c->ctl_size, KVS__SEG_CONTROL, "control", e)) != 0
        || (rc = check_head(c->seg, c->seg_size, KVS__SEG_WORKER, "worker", e)) != 0
        || (rc = check_head(c->arena, c->arena_size, KVS__SEG_ARENA, "arena", e)) != 0)
        return rc;
    c->dbell = (struct kvs__bell *)((char *)c->ctl + KVS__CONTROL_BELL_OFF);
    c->wbell = (struct kvs__bell *)((char *)c->seg + KVS__WORKER_BELL_OFF);
    if (kvs__ring_attach(&c->sq, (char *)c->seg + l.sq_off, w->sq_entries, KVS__SQE_BYTES, 0)
        || kvs__ring_attach(&c->cq, (char *)c->seg + l.cq_off, w->cq_entries, KVS__CQE_BYTES, 0))
        return kvs__fail(e, KVS_EPROTO, "kvsd's ring geometry is invalid");
    c->staging = (unsigned char *)c->seg + l.staging_off;
    c->staging_size = l.staging_size;
    return 0;
}

static int client_connect(kvs_t *kv, struct kvs__client *c, struct kvs__err *e)
{
    char dir[PATH_MAX], path[PATH_MAX + 80];
    unsigned char buf[KVS__WELCOME_BYTES + 1];
    struct kvs__hello h = { .version = KVS__PROTO_VERSION, .rank = kv->rank,
                            .nworkers = kv->nworkers };
    struct kvs__welcome w;
    int64_t deadline = kvs__now_ns() + CONNECT_WAIT_NS;
    int fds[3], nfds = 0, rc;
    size_t len;

    c->sync = strcmp(kv->type, "dist_async") != 0;
    h.mode = c->sync ? KVS__MODE_SYNC : KVS__MODE_ASYNC;
    snprintf(h.job, sizeof h.job, "%s", c->job);
    if ((rc = kvs__runtime_dir(dir, sizeof dir, e)) != 0)
        return rc;
    snprintf(path, sizeof path, "%s/%s.sock", dir, c->job);
    if ((rc = kvs__sock_connect(path, &c->sock, e)) != 0) {
        if (rc == -ENOENT || rc == -ECONNREFUSED)
            return kvs__fail(e, KVS_ECLOSED, "no kvsd serves job '%s' (%s): start workers "
                             "with kvsrun -n N PROGRAM, or set KVS_JOB to a running job's "
                             "name", c->job, path);
        return rc;
    }
    len = kvs__hello_encode(&h, buf);
    if ((rc = kvs__sock_send(c->sock, buf, len, NULL, 0, deadline, e)) != 0)
        return rc;
    rc = kvs__sock_recv(c->sock, buf, sizeof buf, &len, fds, 3, &nfds, deadline, e);
    if (rc == -ECONNRESET)
        return kvs__fail(e, KVS_ECLOSED, "kvsd of job '%s' closed the connection", c->job);
    if (rc != 0)
        return rc;
    if ((rc = kvs__welcome_decode(buf, len, &w, e)) == 0) {
        if (w.status != 0)
            rc = kvs__fail(e, w.status, "kvsd refused: %s", w.msg);
        else if (nfds != 3)
            rc = kvs__fail(e, KVS_EPROTO, "kvsd sent %d descriptors, not 3", nfds);
        else
            rc = client_map(c, &w, fds, e);
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    return rc;
}

static int dist_open(kvs_t *kv, struct kvs__err *e)
{
    struct kvs__client *c = calloc(1, sizeof *c);
    int rc;

    if (!c)
        return kvs__fail(e, -ENOMEM, "out of memory");
    c->sock = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->post, NULL);
    if ((rc = job_env(kv, c->job, e)) != 0 || (rc = client_connect(kv, c, e)) != 0) {
        client_free(c);
        return rc;
    }
    kv->client = c;
    return 0;
}

/* ---- requests --------------------------------------------------------- */

/* Breaks the handle (c->lock held): every later call returns code. */
static int broken(struct kvs__client *c, struct kvs__err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int broken(struct kvs__client *c, struct kvs__err *e, int code, const char *fmt, ...)
{
    va_list ap;

    if (!c->broken) {
        c->broken = code;
        va_start(ap, fmt);
        vsnprintf(c->broken_msg, sizeof c->broken_msg, fmt, ap);
        va_end(ap);
    }
    return kvs__fail(e, c->broken, "%s", c->broken_msg);
}

/* 0, or the error of a broken handle (c->lock held). */
static int usable_locked(struct kvs__client *c, struct kvs__err *e)
{
    return c->broken ? kvs__fail(e, c->broken, "%s", c->broken_msg) : 0;
}

static int usable(struct kvs__client *c, struct kvs__err *e)
{
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = usable_locked(c, e);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* 1 when kvsd has closed our socket (it died, or stopped). */
static int daemon_gone(struct kvs__client *c)
{
    struct pollfd p = { .fd = c->sock, .events = POLLIN };
    char b;

    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLHUP | POLLERR))
        return 1;
    return recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* kvsd has returned the data of request seq, if a hold lent it. */
static void hold_return(struct kvs__client *c, uint64_t seq)
{
    for (struct hold **p = &c->holds, *h; (h = *p) != NULL; p = &h->next) {
        uint64_t i = seq - h->base;

        if (seq < h->base || i >= (uint64_t)h->n)
            continue;
        if (!h->returned[i]) {
            h->returned[i] = 1;
            if (--h->refs == 0) {
                *p = h->next;
                if (h->len)
                    kvs__bufs_remove(&c->xfer, h->off, NULL);
                free(h->returned);
                free(h);
            }
        }
        return;
    }
}

/* Reaps the completion ring for every waiting call (c->lock held). *woke:
 * set when a call of another thread got completions. */
static int reap(struct kvs__client *c, const struct waiter *self, int *woke, struct kvs__err *e)
{
    struct kvs__err de = { 0, "" };
    const void *slot;
    int err = 0, consumed = 0;

    while ((slot = kvs__ring_peek(&c->cq, &err)) != NULL) {
        struct kvs__cqe q;
        struct waiter *w;
        int i;

        if (kvs__cqe_decode(slot, c->arena_size, &q, &de) != 0)
            return broken(c, e, KVS_EPROTO, "bad completion from kvsd: %s", de.msg);
        kvs__ring_pop(&c->cq);
        consumed = 1;
        if (q.flags & KVS__CQE_RELEASE) {
            hold_return(c, q.seq);
            continue;
        }
        for (w = c->waiters; w; w = w->next)
            if (q.seq >= w->base && q.seq - w->base < (uint64_t)w->n)
                break;
        if (!w || w->got[q.seq - w->base])
            return broken(c, e, KVS_EPROTO, "kvsd completed request %llu, never made or "
                          "completed twice", (unsigned long long)q.seq);
        i = (int)(q.seq - w->base);
        w->got[i] = 1;
        w->ans->a[i] = (struct answer){ q.status, q.value_off, q.value_len };
        if (q.status != 0 && (w->ans->failed < 0 || i < w->ans->failed)) {
            w->ans->failed = i;
            memcpy(w->ans->msg, q.msg, sizeof w->ans->msg);
        }
        w->done++;
        if (w != self)
            *woke = 1;
        if (!(q.flags & KVS__CQE_HELD))
            hold_return(c, q.seq);
    }
    if (err)
        return broken(c, e, KVS_EPROTO, "a ring shared with kvsd is corrupt (%s)",
                      kvs_strerror(err));
    /* Room for completions kvsd may be holding back, for a call still
     * waiting; once none waits, kvsd owes nothing urgent, and a ring would
     * only wake it for nothing (a futex wake-up of another core costs the
     * ringer some 10 us here). */
    if (consumed)
        for (const struct waiter *w = c->waiters; w; w = w->next)
            if (w->done < w->n) {
                kvs__bell_ring(c->dbell);
                break;
            }
    return 0;
}

/* Sleeps until this worker's doorbell rings, a wait slice passes or the
 * deadline does (c->lock held, released while asleep). *quiet tells
 * whether the last sleep ended without a ring: only then is kvsd's socket
 * checked, since a dead kvsd rings no more and the check costs a system
 * call or two. */
static int sleep_bell(struct kvs__client *c, uint32_t seen, int64_t deadline, int *quiet,
                      const char *what, struct kvs__err *e)
{
    int64_t now = kvs__now_ns(), slice = now + WAIT_SLICE_NS;

    if (now >= deadline)
        return broken(c, e, KVS_ETIMEDOUT, "%s: no answer within the deadline "
                      "(KVS_TIMEOUT, KVS_OPT_TIMEOUT_MS)", what);
    if (*quiet && daemon_gone(c))
        return broken(c, e, KVS_ECLOSED, "%s: kvsd of job '%s' is gone", what, c->job);
    pthread_mutex_unlock(&c->lock);
    *quiet = kvs__bell_wait(c->wbell, seen, slice < deadline ? slice : deadline, SPIN_NS) != 0;
    pthread_mutex_lock(&c->lock);
    return usable_locked(c, e);
}

static int run_batch(kvs_t *kv, req_fill_fn fill, const void *ctx, int n, struct answers *ans,
                     struct hold *h, int64_t timeout_ms, const char *what, struct kvs__err *e);

/* A fill for calls whose few requests are made beforehand: ctx is the
 * array of them. */
static void fill_from(const void *ctx, int i, struct kvs__sqe *s)
{
    *s = ((const struct kvs__sqe *)ctx)[i];
}

/* One request's answers, for calls of one request. */
#define ONE_ANSWER(name)                                                     \
    struct answer name##_a;                                                  \
    struct answers name = { .a = &name##_a, .failed = -1 }

/* This worker gives up waiting for request seq: kvsd says what it waits
 * for (which ranks have not come), into why, and fails the job with that
 * cause so that the other workers learn it too. */
static void explain(kvs_t *kv, uint64_t seq, char *why, size_t size)
{
    struct kvs__sqe req = { .op = KVS__OP_EXPLAIN, .arg = seq };
    struct kvs__err e = { 0, "" };
    ONE_ANSWER(ans);

    if (run_batch(kv, fill_from, &req, 1, &ans, NULL, EXPLAIN_MS, "asking kvsd", &e) == 0
        && ans.failed == 0 && ans.msg[0])
        snprintf(why, size, "%s", ans.msg);
    else
        snprintf(why, size, "kvsd did not say what it waits for");
}

/* Posts the n requests fill makes as one list call (the last flagged as
 * its end) and waits for their completions, kept in ans in order (its
 * array has room for n). h: the staging
 * the call lends kvsd, tracked until returned (the call's requests' seqs
 * are filled in here). timeout_ms: 0 for the handle's deadline, after
 * which kvsd is asked what the call waited for; else this one, without
 * asking. Returns 0 when every request got a completion (each with its own
 * status), else the error that broke the handle. */
static int run_batch(kvs_t *kv, req_fill_fn fill, const void *ctx, int n, struct answers *ans,
                     struct hold *h, int64_t timeout_ms, const char *what, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__opts o;
    struct waiter w = { .n = n, .ans = ans };
    int64_t deadline;
    int sent = 0, rc = 0, quiet = 0, woke = 0;

    kvs__opts_get(kv, &o);
    if (timeout_ms)
        o.timeout_ms = timeout_ms;
    deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    if (!(w.got = calloc((size_t)(n ? n : 1), 1))) {
        if (h) {
            free(h->returned);
            free(h);
        }
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&c->post);
    pthread_mutex_lock(&c->lock);
    if ((rc = usable_locked(c, e)) != 0) {
        if (h) {
            if (h->len)
                kvs__bufs_remove(&c->xfer, h->off, NULL);
            free(h->returned);
            free(h);
        }
        pthread_mutex_unlock(&c->post);
        goto out;
    }
    w.base = c->next_seq;
    c->next_seq += (uint64_t)n;
    ans->failed = -1;
    w.next = c->waiters;
    c->waiters = &w;
    if (h) {
        h->base = w.base;
        h->n = h->refs = n;
        h->next = c->holds;
        c->holds = h;
    }
    while (sent < n && rc == 0) {
        int err = 0;
        void *s = kvs__ring_reserve(&c->sq, &err);
        uint32_t seen;

        if (s) {
            struct kvs__sqe q;

            fill(ctx, sent, &q);
            q.seq = w.base + (uint64_t)sent;
            q.flags = (uint8_t)((q.flags & ~KVS__SQE_LAST) | (sent == n - 1 ? KVS__SQE_LAST : 0));
            kvs__sqe_encode(&q, s);
            kvs__ring_commit(&c->sq);
            sent++;
            continue;
        }
        if (err) {
            rc = broken(c, e, KVS_EPROTO, "a ring shared with kvsd is corrupt (%s)",
                        kvs_strerror(err));
            break;
        }
        /* The ring is full: kvsd drains it on its own, whoever waits. */
        kvs__bell_ring(c->dbell);
        seen = kvs__bell_seq(c->wbell);
        if ((rc = reap(c, &w, &woke, e)) == 0)
            rc = sleep_bell(c, seen, deadline, &quiet, what, e);
    }
    pthread_mutex_unlock(&c->post);
    if (rc == 0)
        kvs__bell_ring(c->dbell);
    while (rc == 0) {
        uint32_t seen = kvs__bell_seq(c->wbell);

        if ((rc = reap(c, &w, &woke, e)) != 0 || w.done == n)
            break;
        if (!timeout_ms && kvs__now_ns() >= deadline) {
            char why[KVS__MSG_MAX];
            int i = 0;

            while (w.got[i])
                i++;
            pthread_mutex_unlock(&c->lock);
            explain(kv, w.base + (uint64_t)i, why, sizeof why);
            pthread_mutex_lock(&c->lock);
            /* Over what asking may have said: this is why the handle broke. */
            c->broken = KVS_ETIMEDOUT;
            snprintf(c->broken_msg, sizeof c->broken_msg, "%s: gave up after %.3g s "
                     "(KVS_TIMEOUT): %s", what, (double)o.timeout_ms / 1000, why);
            rc = kvs__fail(e, c->broken, "%s", c->broken_msg);
            break;
        }
        rc = sleep_bell(c, seen, deadline, &quiet, what, e);
    }
    for (struct waiter **p = &c->waiters; *p; p = &(*p)->next)
        if (*p == &w) {
            *p = w.next;
            break;
        }
out:
    pthread_mutex_unlock(&c->lock);
    /* Siblings whose completions this thread reaped sleep on the same bell. */
    if (woke)
        kvs__bell_ring(c->wbell);
    free(w.got);
    return rc;
}

/* The first failed completion of a batch, as the call's error. */
static int batch_status(struct kvs__client *c, const struct answers *ans, struct kvs__err *e)
{
    int status;

    if (ans->failed < 0)
        return 0;
    status = ans->a[ans->failed].status;
    if (status == KVS_EPEERDEAD || status == KVS_ETIMEDOUT) {
        pthread_mutex_lock(&c->lock);
        broken(c, e, status, "%s", ans->msg);
        pthread_mutex_unlock(&c->lock);
    }
    return kvs__fail(e, status, "%s", ans->msg);
}

/* Runs a batch and returns the first error of its completions. */
static int run(kvs_t *kv, req_fill_fn fill, const void *ctx, int n, struct answers *ans,
               struct hold *h, const char *what, struct kvs__err *e)
{
    int rc = run_batch(kv, fill, ctx, n, ans, h, 0, what, e);

    return rc ? rc : batch_status(kv->client, ans, e);
}

/* Asks kvsd to copy every push whose data it still reads from staging,
 * and waits until it has returned them: kvsd alone, no other worker. */
static int spill(kvs_t *kv, struct kvs__err *e)
{
    struct kvs__sqe req = { .op = KVS__OP_SPILL };
    ONE_ANSWER(ans);

    return run(kv, fill_from, &req, 1, &ans, NULL, "making room in staging", e);
}

static void sqe_key(struct kvs__sqe *s, kvs_key_t key)
{
    if (key.name) {
        s->flags |= KVS__SQE_STRKEY;
        s->key_len = (uint16_t)strlen(key.name);
        memcpy(s->key_name, key.name, s->key_len + 1u);
    } else {
        s->key_id = key.id;
    }
}

static void sqe_array(struct kvs__sqe *s, const kvs_array_t *a)
{
    s->dtype = a->dtype;
    s->ndim = a->ndim;
    memcpy(s->shape, a->shape, sizeof s->shape[0] * (size_t)a->ndim);
}

/* ---- staging ------------------------------------------------------------ */

/* Bytes at the bottom of staging for the copies of calls: those below the
 * lowest buffer (c->lock held). */
static uint64_t transient_size(const struct kvs__client *c)
{
    return kvs__bufs_low(&c->bufs, c->staging_size) & ~(uint64_t)63;
}

/* 1 when some staging lent to kvsd is not returned yet; zc: only counting
 * holds with data in buffers (c->lock held). */
static int lending(const struct kvs__client *c, int zc)
{
    for (const struct hold *h = c->holds; h; h = h->next)
        if (!zc || h->zc)
            return 1;
    return 0;
}

/* Takes a range of bytes (> 0) in the transient part of staging for one
 * call. When none is free it has kvsd copy what it still reads from
 * staging (a spill), then waits for ranges being filled by sibling threads
 * to be posted and returned: nothing here waits for another worker. */
static int xfer_take(kvs_t *kv, uint64_t bytes, uint64_t *off, const char *what,
                     struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__opts o;
    int64_t deadline;
    int rc, quiet = 0, spilled = 0;

    kvs__opts_get(kv, &o);
    deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        uint64_t room = transient_size(c);
        uint32_t seen = kvs__bell_seq(c->wbell);
        int woke = 0;

        if ((rc = usable_locked(c, e)) != 0)
            break;
        if (bytes > room) {
            rc = kvs__fail(e, -ENOSPC, "%s: %llu bytes do not fit the %llu bytes below the "
                           "lowest buffer in the %llu-byte staging area (kvsrun --staging "
                           "sets its size)", what, (unsigned long long)bytes,
                           (unsigned long long)room, (unsigned long long)c->staging_size);
            break;
        }
        if (kvs__bufs_fit_top(&c->xfer, 0, room, bytes, 64, off) == 0) {
            if (kvs__bufs_add(&c->xfer, *off, bytes) != 0)
                rc = kvs__fail(e, -ENOMEM, "out of memory");
            break;
        }
        /* One spill, then a wait for a ring, before the next spill: what
         * lends staging then is new, and a spill cannot turn into a loop. */
        if (!spilled && lending(c, 0)) {
            pthread_mutex_unlock(&c->lock);
            if ((rc = spill(kv, e)) != 0)
                return rc;
            pthread_mutex_lock(&c->lock);
            spilled = 1;
            continue;
        }
        spilled = 0;
        if ((rc = reap(c, NULL, &woke, e)) != 0
            || (rc = sleep_bell(c, seen, deadline, &quiet, what, e)) != 0)
            break;
        if (woke) {
            pthread_mutex_unlock(&c->lock);
            kvs__bell_ring(c->wbell);
            pthread_mutex_lock(&c->lock);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* ---- data calls ------------------------------------------------------- */

/* A grouped list: per group its first index and its members; per index its
 * group. */
struct groups {
    int n, ng;
    int *gid, *first;
    int *member, *mstart;              /* group g's indices: member[mstart[g]..mstart[g+1]) */
};

static void groups_free(struct groups *g)
{
    free(g->gid);
    free(g->member);
}

static int group(int n, const kvs_key_t *keys, struct groups *g, struct kvs__err *e)
{
    g->n = n;
    g->member = NULL;
    g->gid = malloc(sizeof(int) * 2 * (size_t)(n ? n : 1));
    if (!g->gid)
        return kvs__fail(e, -ENOMEM, "out of memory");
    g->first = g->gid + n;
    g->ng = kvs__group_keys(n, keys, g->gid, g->first, e);
    if (g->ng < 0) {
        free(g->gid);
        return g->ng;
    }
    /* Members by group, in list order (a counting sort): linear, where a
     * search per group would cost the square of the list's length. */
    g->member = malloc(sizeof(int) * ((size_t)n + (size_t)g->ng + 1));
    if (!g->member) {
        free(g->gid);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    g->mstart = g->member + n;
    memset(g->mstart, 0, sizeof(int) * ((size_t)g->ng + 1));
    for (int i = 0; i < n; i++)
        g->mstart[g->gid[i] + 1]++;
    for (int j = 0; j < g->ng; j++)
        g->mstart[j + 1] += g->mstart[j];
    {
        int *fill = g->gid + n;        /* reuse first[] as cursors, then restore it */

        for (int j = 0; j < g->ng; j++)
            fill[j] = g->mstart[j];
        for (int i = 0; i < n; i++)
            g->member[fill[g->gid[i]]++] = i;
        for (int j = 0; j < g->ng; j++)
            fill[j] = g->member[g->mstart[j]];
    }
    return 0;
}

/* Arrays of one key must agree with the key's first array. */
static int group_match(const struct groups *g, const kvs_key_t *keys, const kvs_array_t *arrs,
                       const char *what, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    for (int i = 0; i < g->n; i++) {
        const kvs_array_t *f = &arrs[g->first[g->gid[i]]];

        if (arrs[i].dtype != f->dtype || !kvs__same_shape(&arrs[i], f)) {
            kvs__key_str(ks, sizeof ks, keys[i]);
            return kvs__fail(e, arrs[i].dtype != f->dtype ? KVS_EDTYPE : KVS_ESHAPE,
                             "key %s: %s %d differs in dtype or shape from %s %d of the "
                             "same key", ks, what, i, what, g->first[g->gid[i]]);
        }
    }
    return 0;
}

/* Where a value already lies in staging: 1 and *off when it lies wholly in
 * one buffer, 0 when it lies outside staging, KVS_EBADARG when it lies in
 * staging but not in a live buffer (freed, or straddling two). c->lock held. */
static int in_buffer(const struct kvs__client *c, const void *data, uint64_t bytes,
                     uint64_t *off, struct kvs__err *e)
{
    uintptr_t p = (uintptr_t)data, s = (uintptr_t)c->staging;

    if (p < s || p - s >= c->staging_size)
        return 0;
    if (!kvs__bufs_find(&c->bufs, p - s, bytes))
        return kvs__fail(e, KVS_EBADARG, "an array at %p lies in kvs's staging area "
                         "but not in a live buffer of kvs_array_alloc", data);
    *off = p - s;
    return 1;
}

static size_t array_bytes(const kvs_array_t *a)
{
    return kvs__array_count(a) * kvs_dtype_size(a->dtype);
}

/* What the requests of send_groups are made from. */
struct groups_src {
    uint8_t op, flags;
    int priority, start;               /* start: the batch's first group */
    const struct groups *g;
    const kvs_key_t *keys;
    const kvs_array_t *arrs;
    const uint64_t *at;                /* per group: its data's staging offset */
};

static void fill_group(const void *ctx, int i, struct kvs__sqe *s)
{
    const struct groups_src *src = ctx;
    int j = src->start + i;
    const kvs_array_t *a = &src->arrs[src->g->first[j]];

    *s = (struct kvs__sqe){ .op = src->op, .flags = src->flags, .priority = src->priority,
                            .data_off = src->at[j], .data_len = array_bytes(a) };
    sqe_key(s, src->keys[src->g->first[j]]);
    sqe_array(s, a);
}

/* Sends one request per group, each with its data in staging: a buffer's
 * as it lies, else what kvs__sum makes of the group's arrays (summing
 * repeated keys here, as MXNet's workers merge their devices before
 * sending) in a transient range. Groups go in batches that fit the
 * transient part and KVS__LIST_MAX; each batch is all-or-nothing in kvsd.
 * out: the answers, per group (may be NULL; its array has room for
 * every group). */
static int send_groups(kvs_t *kv, uint8_t op, uint8_t flags, const struct groups *g,
                       const kvs_key_t *keys, const kvs_array_t *arrs, int priority,
                       struct answers *out, const char *what, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    size_t ng = (size_t)(g->ng ? g->ng : 1);
    struct answer *own = out ? NULL : malloc(ng * sizeof *own);
    struct answers ans = { .a = out ? out->a : own, .failed = -1 };
    uint64_t *at = malloc(ng * sizeof *at);     /* per group: staging offset; ~0: to place */
    const void **in = malloc(sizeof *in * (size_t)(g->n ? g->n : 1));
    struct kvs__sum_item *items = malloc(ng * sizeof *items);
    struct groups_src src = { .op = op, .flags = flags, .priority = priority, .g = g,
                              .keys = keys, .arrs = arrs, .at = at };
    struct kvs__opts o;
    uint64_t room;
    int rc = 0, start = 0;

    kvs__opts_get(kv, &o);
    if (!ans.a || !at || !in || !items) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < g->n; i++)
        in[i] = arrs[g->member[i]].data;
    pthread_mutex_lock(&c->lock);
    room = transient_size(c);
    for (int j = 0; j < g->ng && rc == 0; j++) {
        const kvs_array_t *a = &arrs[g->first[j]];
        uint64_t bytes = array_bytes(a);
        int zc = 0;

        at[j] = ~(uint64_t)0;
        if (g->mstart[j + 1] - g->mstart[j] == 1 && (zc = in_buffer(c, a->data, bytes,
                                                                     &at[j], e)) < 0)
            rc = zc;
        else if (!zc && bytes > room) {
            char ks[KVS_MAX_KEY_LEN + 8];

            kvs__key_str(ks, sizeof ks, keys[g->first[j]]);
            rc = kvs__fail(e, KVS_EBADARG, "key %s: %llu bytes do not fit the %llu bytes "
                           "below the lowest buffer in the %llu-byte staging area "
                           "(kvsrun --staging sets its size)", ks, (unsigned long long)bytes,
                           (unsigned long long)room, (unsigned long long)c->staging_size);
        }
    }
    pthread_mutex_unlock(&c->lock);
    while (rc == 0 && start < g->ng) {
        uint64_t total = 0, off = 0, pos = 0;
        struct answers part = { .a = ans.a + start, .failed = -1 };
        struct hold *h;
        int end = start, m = 0, zc = 0;

        for (; end < g->ng && end - start < KVS__LIST_MAX; end++) {
            uint64_t bytes = at[end] == ~(uint64_t)0 ? (array_bytes(&arrs[g->first[end]]) + 63)
                                                            & ~(uint64_t)63 : 0;

            if (total + bytes > room)
                break;
            total += bytes;
        }
        if (!(h = calloc(1, sizeof *h)) || !(h->returned = calloc((size_t)(end - start), 1))) {
            free(h);
            rc = kvs__fail(e, -ENOMEM, "out of memory");
            break;
        }
        if (total && (rc = xfer_take(kv, total, &off, what, e)) != 0) {
            free(h->returned);
            free(h);
            break;
        }
        h->off = off;
        h->len = total;
        for (int j = start; j < end; j++) {
            const kvs_array_t *a = &arrs[g->first[j]];

            if (at[j] != ~(uint64_t)0) {
                zc = 1;
                continue;
            }
            at[j] = off + pos;
            items[m++] = (struct kvs__sum_item){
                .dtype = a->dtype, .out = c->staging + at[j],
                .in = in + g->mstart[j], .k = g->mstart[j + 1] - g->mstart[j],
                .n = kvs__array_count(a) };
            pos += (array_bytes(a) + 63) & ~(uint64_t)63;
        }
        h->zc = zc;
        /* The range is this call's alone: filled without the lock. */
        kvs__sum_many(items, m, (int)o.threads);
        src.start = start;
        if ((rc = run(kv, fill_group, &src, end - start, &part, h, what, e)) != 0)
            break;
        start = end;
    }
out:
    free(items);
    free(in);
    free(at);
    free(own);
    return rc;
}

static int dist_init(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int replace, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct groups g;
    int rc;

    if ((rc = usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0)
        return rc;
    if (replace)
        return kvs__fail(e, KVS_ENOTSUP, "kvs_reinit is not supported by %s yet", kv->type);
    if ((rc = group(n, keys, &g, e)) != 0)
        return rc;
    if (g.ng != n) {
        for (int i = 0; i < n; i++) {
            if (g.first[g.gid[i]] != i) {
                kvs__key_str(ks, sizeof ks, keys[i]);
                rc = kvs__fail(e, KVS_EKEYEXISTS, "key %s: appears twice in one init", ks);
                break;
            }
        }
    } else {
        rc = send_groups(kv, KVS__OP_INIT, 0, &g, keys, values, 0, NULL, "kvs_init", e);
    }
    groups_free(&g);
    return rc;
}

static int dist_push(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int priority, struct kvs__err *e)
{
    struct groups g;
    int rc;

    if ((rc = usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0)
        return rc;
    if ((rc = group(n, keys, &g, e)) != 0)
        return rc;
    if ((rc = group_match(&g, keys, values, "value", e)) == 0)
        rc = send_groups(kv, KVS__OP_PUSH, 0, &g, keys, values, priority, NULL, "kvs_push", e);
    groups_free(&g);
    return rc;
}

/* The block of a value a completion points to, once its range is checked
 * against the arena and the size the caller expects. */
static int value_block(struct kvs__client *c, const struct answer *q, size_t bytes,
                       const struct kvs__block_head **bh, struct kvs__err *e)
{
    if (q->value_len != bytes || q->value_off < KVS__ARENA_DATA_OFF + sizeof **bh
        || (q->value_off & 63) != 0) {
        pthread_mutex_lock(&c->lock);
        broken(c, e, KVS_EPROTO, "kvsd answered a pull with a bad arena range");
        pthread_mutex_unlock(&c->lock);
        return KVS_EPROTO;
    }
    *bh = (const struct kvs__block_head *)(c->arena + q->value_off - sizeof **bh);
    return 0;
}

/* Copies a value out of the arena, retrying while kvsd rewrites it. rows
 * non-NULL: only those nrows rows (of row_bytes), every other row zero. */
static int copy_value(kvs_t *kv, const struct answer *q, void *dst, size_t bytes,
                      const int64_t *rows, int64_t nrows, size_t row_bytes,
                      struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    const struct kvs__block_head *bh;
    struct kvs__opts o;
    int64_t deadline;
    int rc;

    kvs__opts_get(kv, &o);
    deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    if ((rc = value_block(c, q, bytes, &bh, e)) != 0)
        return rc;
    for (;;) {
        uint64_t s1 = atomic_load_explicit(&bh->seq, memory_order_acquire), s2;

        if ((s1 & 1) == 0) {
            const unsigned char *src = c->arena + q->value_off;

            if (!rows) {
                kvs__copy(dst, src, bytes, (int)o.threads);
            } else {
                memset(dst, 0, bytes);
                for (int64_t j = 0; j < nrows; j++)
                    memcpy((char *)dst + (size_t)rows[j] * row_bytes,
                           src + (size_t)rows[j] * row_bytes, row_bytes);
            }
            atomic_thread_fence(memory_order_acquire);
            s2 = atomic_load_explicit(&bh->seq, memory_order_relaxed);
            if (s1 == s2)
                return 0;
        }
        if (kvs__now_ns() >= deadline) {
            pthread_mutex_lock(&c->lock);
            rc = broken(c, e, KVS_ETIMEDOUT, "a value stayed busy in kvsd past the deadline");
            pthread_mutex_unlock(&c->lock);
            return rc;
        }
    }
}

/* Hands out the value of a completion: a view of it in the arena (dist_sync
 * only: kvsd rewrites it in the next round, which needs this worker's push),
 * else a copy into out's data. */
static int deliver(kvs_t *kv, const struct answer *q, kvs_array_t *out, int view,
                   struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    size_t bytes = array_bytes(out);
    const struct kvs__block_head *bh;
    int rc;

    if (!view)
        return copy_value(kv, q, out->data, bytes, NULL, 0, 0, e);
    if ((rc = value_block(c, q, bytes, &bh, e)) != 0)
        return rc;
    if (atomic_load_explicit(&bh->seq, memory_order_acquire) & 1) {
        pthread_mutex_lock(&c->lock);
        rc = broken(c, e, KVS_EPROTO, "kvsd answered a pull with a value it is still writing");
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    out->data = (void *)(c->arena + q->value_off);
    return 0;
}

/* What the requests of pull_groups are made from. */
struct pull_src {
    int priority, start;
    const struct groups *g;
    const kvs_key_t *keys;
    const kvs_array_t *outs;
};

static void fill_pull(const void *ctx, int i, struct kvs__sqe *s)
{
    const struct pull_src *src = ctx;
    int j = src->start + i;

    *s = (struct kvs__sqe){ .op = KVS__OP_PULL, .priority = src->priority };
    sqe_key(s, src->keys[src->g->first[j]]);
    sqe_array(s, &src->outs[src->g->first[j]]);
}

/* Pulls every group's value; outs of a key all receive it. rows (may be
 * NULL): per out, the row ids to copy, others zeroed. view: outs get
 * pointers to the values (rows NULL). */
static int pull_groups(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                       const kvs_array_t *rows, int view, int priority, const char *what,
                       struct kvs__err *e)
{
    struct pull_src src = { .priority = priority, .keys = keys, .outs = outs };
    struct answer *a = NULL;
    struct groups g;
    int rc;

    if ((rc = group(n, keys, &g, e)) != 0)
        return rc;
    src.g = &g;
    if ((rc = group_match(&g, keys, outs, view ? "view" : "out", e)) != 0)
        goto out;
    if (!(a = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *a))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    for (int start = 0; start < g.ng && rc == 0; start += KVS__LIST_MAX) {
        int len = g.ng - start < KVS__LIST_MAX ? g.ng - start : KVS__LIST_MAX;
        struct answers part = { .a = a + start, .failed = -1 };

        src.start = start;
        rc = run(kv, fill_pull, &src, len, &part, NULL, what, e);
    }
    for (int i = 0; i < n && rc == 0; i++) {
        size_t bytes = array_bytes(&outs[i]);

        if (!rows)
            rc = deliver(kv, &a[g.gid[i]], &outs[i], view, e);
        else    /* the ids' data may be NULL when there are none: then no row */
            rc = copy_value(kv, &a[g.gid[i]], outs[i].data, bytes,
                            rows[i].data ? rows[i].data : (const int64_t *)"", rows[i].shape[0],
                            outs[i].shape[0] ? bytes / (size_t)outs[i].shape[0] : 0, e);
    }
out:
    free(a);
    groups_free(&g);
    return rc;
}

static int dist_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs, int priority,
                     struct kvs__err *e)
{
    int rc;

    if ((rc = usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, outs, "out", e)) != 0)
        return rc;
    return pull_groups(kv, n, keys, outs, NULL, 0, priority, "kvs_pull", e);
}

/* One request per key: the push's completion carries the value it made.
 * view: outs get pointers to the values. */
static int pushpull_groups(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                           kvs_array_t *outs, int view, int priority, struct kvs__err *e)
{
    kvs_array_t *dst = outs ? outs : (kvs_array_t *)values;
    const char *what = view ? "view" : "out";
    struct answers ans = { .a = NULL, .failed = -1 };
    struct groups g;
    int rc;

    if ((rc = usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0
        || (outs && (rc = kvs__check_list(NULL, n, keys, outs, what, e)) != 0))
        return rc;
    for (int i = 0; outs && i < n; i++)
        if (outs[i].dtype != values[i].dtype || !kvs__same_shape(&outs[i], &values[i]))
            return kvs__fail(e, outs[i].dtype != values[i].dtype ? KVS_EDTYPE : KVS_ESHAPE,
                             "%s %d does not match value %d", what, i, i);
    if ((rc = group(n, keys, &g, e)) != 0)
        return rc;
    if ((rc = group_match(&g, keys, values, "value", e)) != 0)
        goto out;
    if (!(ans.a = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *ans.a))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = send_groups(kv, KVS__OP_PUSH, KVS__SQE_VALUE, &g, keys, values, priority, &ans,
                          view ? "kvs_pushpull_view" : "kvs_pushpull", e)) != 0)
        goto out;
    for (int i = 0; i < n && rc == 0; i++)
        rc = deliver(kv, &ans.a[g.gid[i]], &dst[i], view, e);
out:
    free(ans.a);
    groups_free(&g);
    return rc;
}

static int dist_pushpull(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                         kvs_array_t *outs, int priority, struct kvs__err *e)
{
    return pushpull_groups(kv, n, keys, values, outs, 0, priority, e);
}

static int dist_view(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     kvs_array_t *views, int priority, struct kvs__err *e)
{
    int rc;

    if (!kv->client->sync)
        return kvs__fail(e, KVS_ENOTSUP, "views are not supported by %s: other "
                         "workers' pushes rewrite a value at any time; use kvs_pull",
                         kv->type);
    if (values)
        return pushpull_groups(kv, n, keys, values, views, 1, priority, e);
    if ((rc = usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, views, "view", e)) != 0)
        return rc;
    return pull_groups(kv, n, keys, views, NULL, 1, priority, "kvs_pull_view", e);
}

static int dist_row_sparse_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                                const kvs_array_t *row_ids, int priority, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], name[KVS_MAX_KEY_LEN + 40];
    int rc;

    if ((rc = usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, outs, "out", e)) != 0)
        return rc;
    if (n > 0 && !row_ids)
        return kvs__fail(e, KVS_EBADARG, "row_ids list is NULL with count %d", n);
    /* An out has the stored shape (kvsd checks it), so its rows bound the ids. */
    for (int i = 0; i < n; i++) {
        const kvs_array_t *ids = &row_ids[i];
        const int64_t *id;

        kvs__key_str(ks, sizeof ks, keys[i]);
        snprintf(name, sizeof name, "key %s: row_ids %d", ks, i);
        if ((rc = kvs__array_check(ids, name, e)) != 0)
            return rc;
        if (ids->dtype != KVS_INT64)
            return kvs__fail(e, KVS_EDTYPE, "%s: dtype %s, row ids must be int64",
                             name, kvs_dtype_name(ids->dtype));
        if (ids->ndim != 1)
            return kvs__fail(e, KVS_ESHAPE, "%s: %d dimensions, row ids must be 1-D",
                             name, ids->ndim);
        if (outs[i].ndim < 1)
            return kvs__fail(e, KVS_ESHAPE, "key %s: a scalar has no rows", ks);
        id = ids->data;
        for (int64_t j = 0; j < ids->shape[0]; j++)
            if (id[j] < 0 || id[j] >= outs[i].shape[0])
                return kvs__fail(e, KVS_ERANGE, "key %s: row id %lld out of range "
                                 "[0, %lld)", ks, (long long)id[j],
                                 (long long)outs[i].shape[0]);
    }
    return pull_groups(kv, n, keys, outs, row_ids, 0, priority, "kvs_row_sparse_pull", e);
}

/* ---- update rules and the rest ---------------------------------------- */

static int dist_set_updater(kvs_t *kv, kvs_updater_t fn, void *ctx, struct kvs__err *e)
{
    (void)fn;
    (void)ctx;
    return kvs__fail(e, KVS_ENOTSUP, "custom updaters are not supported by %s: "
                     "updates run in kvsd, use kvs_set_optimizer", kv->type);
}

/* Sends a text argument (a spec, a path) through staging. */
static int send_text(kvs_t *kv, uint8_t op, const char *text, uint64_t arg, const char *what,
                     struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__sqe req = { .op = op, .arg = arg };
    size_t len = strlen(text);
    ONE_ANSWER(ans);
    struct hold *h;
    uint64_t off;
    int rc;

    if ((rc = usable(c, e)) != 0)
        return rc;
    if (len == 0 || len > 4095)
        return kvs__fail(e, KVS_EBADARG, "%s: text of %zu bytes: must be 1..4095", what, len);
    if (!(h = calloc(1, sizeof *h)) || !(h->returned = calloc(1, 1))) {
        free(h);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    if ((rc = xfer_take(kv, len, &off, what, e)) != 0) {
        free(h->returned);
        free(h);
        return rc;
    }
    memcpy(c->staging + off, text, len);
    h->off = off;
    h->len = len;
    req.data_off = off;
    req.data_len = len;
    return run(kv, fill_from, &req, 1, &ans, h, what, e);
}

static int dist_set_optimizer(kvs_t *kv, const char *spec, struct kvs__err *e)
{
    struct kvs__optim *o;
    int rc;

    if (!spec)
        return kvs__fail(e, KVS_EBADARG, "optimizer spec is NULL");
    /* Refuse a bad spec here, with the parser's own message. */
    if ((rc = kvs__optim_parse(spec, &o, e)) != 0)
        return rc;
    rc = send_text(kv, KVS__OP_SET_OPTIMIZER, kvs__optim_spec(o), 0, "kvs_set_optimizer", e);
    kvs__optim_free(o);
    return rc;
}

static int dist_set_gradient_compression(kvs_t *kv, const char *spec, struct kvs__err *e)
{
    struct kvs__gc gc;
    int rc;

    if ((rc = kvs__gc_parse(spec, &gc, e)) != 0)
        return rc;
    if (gc.type == KVS__GC_NONE)
        return 0;
    return kvs__fail(e, KVS_ENOTSUP, "2bit compression for %s is not implemented yet",
                     kv->type);
}

/* kvsd runs in another directory: relative paths are made absolute here. */
static int path_op(kvs_t *kv, uint8_t op, const char *path, uint64_t arg, const char *what,
                   struct kvs__err *e)
{
    char abs[PATH_MAX];

    if (!path || !*path)
        return kvs__fail(e, KVS_EBADARG, "path is NULL or empty");
    if (path[0] == '/') {
        snprintf(abs, sizeof abs, "%s", path);
    } else {
        if (!getcwd(abs, sizeof abs))
            return kvs__fail(e, -errno, "getcwd: %s", strerror(errno));
        if (strlen(abs) + 1 + strlen(path) >= sizeof abs)
            return kvs__fail(e, -ENAMETOOLONG, "path %s is too long", path);
        strcat(abs, "/");
        strcat(abs, path);
    }
    return send_text(kv, op, abs, arg, what, e);
}

static int dist_save_states(kvs_t *kv, const char *path, int dump_optimizer,
                            struct kvs__err *e)
{
    return path_op(kv, KVS__OP_SAVE_STATES, path, dump_optimizer != 0,
                   "kvs_save_optimizer_states", e);
}

static int dist_load_states(kvs_t *kv, const char *path, struct kvs__err *e)
{
    return path_op(kv, KVS__OP_LOAD_STATES, path, 0, "kvs_load_optimizer_states", e);
}

static int dist_barrier(kvs_t *kv, struct kvs__err *e)
{
    struct kvs__sqe req = { .op = KVS__OP_BARRIER };
    ONE_ANSWER(ans);

    return run(kv, fill_from, &req, 1, &ans, NULL, "kvs_barrier", e);
}

/* Buffers take the highest free range of staging, above every transient
 * range in use: ordinary calls copy into the bottom part, below every
 * buffer. */
static int dist_array_alloc(kvs_t *kv, size_t bytes, void **p, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    uint64_t size = ((uint64_t)bytes + 63) & ~(uint64_t)63, off;
    int rc;

    pthread_mutex_lock(&c->lock);
    if ((rc = usable_locked(c, e)) != 0)
        goto out;
    if (size < bytes || kvs__bufs_fit_top(&c->bufs, kvs__bufs_high(&c->xfer, 0),
                                          c->staging_size, size, 64, &off) != 0) {
        rc = kvs__fail(e, -ENOSPC, "no room for a %zu-byte buffer in the %llu-byte staging "
                       "area, where %zu buffers live (kvsrun --staging sets its size)",
                       bytes, (unsigned long long)c->staging_size, c->bufs.n);
        goto out;
    }
    if (kvs__bufs_add(&c->bufs, off, size) != 0) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    memset(c->staging + off, 0, size);
    *p = c->staging + off;
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* A buffer kvsd may still read (a push of it whose round is open) is
 * copied by kvsd first, so that its memory can be handed out again. */
static int dist_array_free(kvs_t *kv, void *p, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    uintptr_t a = (uintptr_t)p, s = (uintptr_t)c->staging;
    int rc, lent;

    if (a < s || a - s >= c->staging_size)
        return -ENOENT;
    pthread_mutex_lock(&c->lock);
    lent = !c->broken && lending(c, 1) && kvs__bufs_find(&c->bufs, a - s, 0);
    pthread_mutex_unlock(&c->lock);
    if (lent && (rc = spill(kv, e)) != 0)
        return rc;
    pthread_mutex_lock(&c->lock);
    rc = kvs__bufs_remove(&c->bufs, a - s, NULL);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int dist_apply_options(kvs_t *kv, struct kvs__err *e)
{
    /* Read from the handle at each call, but for this one. */
    if (kv->opt_init_on_push)
        return kvs__fail(e, KVS_ENOTSUP, "KVS_OPT_INIT_ON_PUSH is not supported by %s: "
                         "init every key with kvs_init", kv->type);
    return 0;
}

static void dist_close(kvs_t *kv)
{
    struct kvs__client *c = kv->client;
    struct kvs__sqe req = { .op = KVS__OP_CLOSE };
    struct kvs__err e = { 0, "" };
    ONE_ANSWER(ans);

    if (!c)
        return;
    /* Leave the job cleanly, so that later rounds complete without us (kvsd
     * keeps copies of our pushes still in open rounds). A short deadline:
     * kvsd may be gone. */
    if (!c->broken)
        run_batch(kv, fill_from, &req, 1, &ans, NULL, CLOSE_MS, "kvs_close", &e);
    client_free(c);
    kv->client = NULL;
}

const struct kvs__store_ops kvs__dist_ops = {
    .concurrent = 1,
    .open = dist_open,
    .init = dist_init,
    .push = dist_push,
    .pull = dist_pull,
    .pushpull = dist_pushpull,
    .row_sparse_pull = dist_row_sparse_pull,
    .view = dist_view,
    .array_alloc = dist_array_alloc,
    .array_free = dist_array_free,
    .set_updater = dist_set_updater,
    .set_optimizer = dist_set_optimizer,
    .set_gradient_compression = dist_set_gradient_compression,
    .save_states = dist_save_states,
    .load_states = dist_load_states,
    .barrier = dist_barrier,
    .apply_options = dist_apply_options,
    .close = dist_close,
};
