/*
 * link.c - a dist handle's link to the job's kvsd: finds the job in
 * the environment, connects and maps the segments kvsd hands over, posts
 * list calls as request slots on the worker's ring and waits for their
 * completions, and keeps track of the staging each call lends kvsd.
 *
 * A list of many int-key inits, pushes or pulls goes as tables (proto.h,
 * KVS__SQE_TABLE) in a range of staging the call takes for them: a slot
 * and a completion per 4,096 requests instead of per request.
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
 * and checked (proto.c), ring indices are checked (ring.c). Every wait has
 * a deadline (KVS_OPT_TIMEOUT_MS), and kvsd's death is noticed within a
 * wait slice. Once a wait fails for a reason that leaves requests in
 * flight (timeout, kvsd gone, a peer dead, a protocol error), the handle is
 * broken: every later call returns the same error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kernels/array.h"
#include "client/link.h"
#include "proto/combine.h"
#include "proto/layout.h"
#include "kernels/optim.h"
#include "shm/shm.h"
#include "base/spec.h"
#include "proto/trace.h"

#define WAIT_SLICE_NS   (100 * 1000000ll)   /* how often a wait checks that kvsd lives */
#define SPIN_NS         (20 * 1000ll)       /* spin before sleeping: half a futex wake-up */
#define CONNECT_WAIT_NS (10 * 1000000000ll) /* handshake deadline */
#define EXPLAIN_MS      1000                /* for kvsd to say what a call timed out on */

/* A list call waiting for its completions: one per slot it posted. */
struct kvs__waiter {
    uint64_t base;                     /* seq of its first slot */
    int n, done;                       /* slots; of them, completed */
    int nreq;                          /* requests: n, or more in tables */
    int tables;                        /* its slots are tables (KVS__SQE_TABLE) of
                                        * KVS__TABLE_MAX requests, the last maybe fewer */
    const uint64_t *res;               /* tables: per table, its results in staging */
    struct kvs__answers *ans;          /* per request */
    unsigned char *got;                /* per slot */
    struct kvs__waiter *next;
};

/* Lists at least this long go in tables: shorter ones, slot by slot. */
#define TABLE_MIN 16
/* Staging one table takes at most: entries of any ndim, and results. */
#define TABLE_BYTES \
    ((uint64_t)KVS__TABLE_MAX * (KVS__TAB_ENTRY_BYTES(KVS_MAX_NDIM) + KVS__TAB_RESULT_BYTES))

/* ---- environment ------------------------------------------------------ */

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

        if ((hr = kvs__env_int(vars[i][0], 0, 1023, &r, e)) < 0)
            return hr;
        if ((hs = kvs__env_int(vars[i][1], 1, 1024, &s, e)) < 0)
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

void kvs__client_free(struct kvs__client *c)
{
    if (!c)
        return;
    if (c->arena)
        kvs__unmap((void *)c->arena, c->arena_size);
    if (c->cb)
        kvs__unmap(c->cb, c->cb_size);
    for (size_t i = 0; i < c->cb_nopt; i++)
        kvs__optim_free(c->cb_opts[i].o);
    free(c->cb_opts);
    pthread_mutex_destroy(&c->cb_lock);
    if (c->seg)
        kvs__unmap(c->seg, c->seg_size);
    if (c->ctl)
        kvs__unmap(c->ctl, c->ctl_size);
    if (c->sock >= 0)
        close(c->sock);
    kvs__bufs_fini(&c->bufs);
    kvs__bufs_fini(&c->xfer);
    while (c->holds) {
        struct kvs__hold *h = c->holds;

        c->holds = h->next;
        free(h->returned);
        free(h);
    }
    kvs__residuals_free(c->residuals);
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
    if (!(w->flags & KVS__WELCOME_COMBINE))
        return 0;
    if (w->combine_size < KVS__CB_MIN || w->combine_size > SIZE_MAX / 2)
        return kvs__fail(e, KVS_EPROTO, "kvsd's combine area of %" PRIu64 " bytes does not fit "
                         "this library's layout", w->combine_size);
    if ((rc = kvs__memfd_check(fds[3], w->combine_size, 1, e)) != 0
        || (rc = kvs__map(fds[3], w->combine_size, 1, &c->cb, e)) != 0)
        return rc;
    c->cb_size = w->combine_size;
    if (((struct kvs__cb_head *)c->cb)->magic != KVS__CB_MAGIC
        || ((struct kvs__cb_head *)c->cb)->size != c->cb_size)
        return kvs__fail(e, KVS_EPROTO, "kvsd's combine area has a bad head");
    return 0;
}

/* Lets kvsd (the socket's peer) read this process's memory, unless
 * KVS_REMOTE=0: names it the tracer Yama asks for, and puts a random
 * cookie in the hello for kvsd to read back. A failure here only leaves
 * pushes on staging; a bad KVS_REMOTE is the caller's error. */
static int offer_memory(struct kvs__client *c, struct kvs__hello *h, struct kvs__err *e)
{
    struct kvs__err ig = { 0, "" };
    int on = 1, rc;
    uid_t uid;
    pid_t pid;

    if ((rc = kvs__env_int("KVS_REMOTE", 0, 1, &on, e)) < 0)
        return rc;
    if (!on || kvs__sock_peer(c->sock, &uid, &pid, &ig) != 0
        || getrandom(c->cookie, sizeof c->cookie, 0) != (ssize_t)sizeof c->cookie)
        return 0;
    /* EINVAL without Yama: then the uid alone decides, as for ptrace. */
    prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0);
    h->probe = (uint64_t)(uintptr_t)c->cookie;
    memcpy(h->cookie, c->cookie, sizeof h->cookie);
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
    int fds[4], nfds = 0, rc;
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
    if ((rc = offer_memory(c, &h, e)) != 0)
        return rc;
    len = kvs__hello_encode(&h, buf);
    if ((rc = kvs__sock_send(c->sock, buf, len, NULL, 0, deadline, e)) != 0)
        return rc;
    rc = kvs__sock_recv(c->sock, buf, sizeof buf, &len, fds, 4, &nfds, deadline, e);
    if (rc == -ECONNRESET)
        return kvs__fail(e, KVS_ECLOSED, "kvsd of job '%s' closed the connection", c->job);
    if (rc != 0)
        return rc;
    if ((rc = kvs__welcome_decode(buf, len, &w, e)) == 0) {
        if (w.status != 0)
            rc = kvs__fail(e, w.status, "kvsd refused: %s", w.msg);
        else if (nfds != 3 + !!(w.flags & KVS__WELCOME_COMBINE))
            rc = kvs__fail(e, KVS_EPROTO, "kvsd sent %d descriptors, not %d", nfds,
                           3 + !!(w.flags & KVS__WELCOME_COMBINE));
        else if ((w.flags & KVS__WELCOME_REMOTE) && !h.probe)
            rc = kvs__fail(e, KVS_EPROTO, "kvsd reads memory it was not offered");
        else
            rc = client_map(c, &w, fds, e);
        c->remote = rc == 0 && (w.flags & KVS__WELCOME_REMOTE);
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    return rc;
}

int kvs__client_open(kvs_t *kv, struct kvs__err *e)
{
    struct kvs__client *c = calloc(1, sizeof *c);
    int rc;

    if (!c)
        return kvs__fail(e, -ENOMEM, "out of memory");
    c->sock = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->post, NULL);
    pthread_mutex_init(&c->cb_lock, NULL);
    if ((rc = job_env(kv, c->job, e)) != 0 || (rc = client_connect(kv, c, e)) != 0) {
        kvs__client_free(c);
        return rc;
    }
    kv->client = c;
    if (kvs__tr_path()) {
        char name[32];

        snprintf(name, sizeof name, "rank %d", kv->rank);
        kvs__tr_process(kv->rank + 1, name, kv->rank);
        kvs__tr_joined(c->job);
    }
    return 0;
}

/* ---- requests --------------------------------------------------------- */

/* Breaks the handle (c->lock held): every later call returns code. */
int kvs__client_broken(struct kvs__client *c, struct kvs__err *e, int code, const char *fmt, ...)
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
int kvs__client_usable_locked(struct kvs__client *c, struct kvs__err *e)
{
    return c->broken ? kvs__fail(e, c->broken, "%s", c->broken_msg) : 0;
}

int kvs__client_usable(struct kvs__client *c, struct kvs__err *e)
{
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = kvs__client_usable_locked(c, e);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int kvs__client_daemon_gone(struct kvs__client *c)
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
    for (struct kvs__hold **p = &c->holds, *h; (h = *p) != NULL; p = &h->next) {
        uint64_t i = seq - h->base;

        if (seq < h->base || i >= (uint64_t)h->n)
            continue;
        if (!h->returned[i]) {
            h->returned[i] = 1;
            if (--h->refs == 0) {
                *p = h->next;
                kvs__client_hold_free(c, h);
            }
        }
        return;
    }
}

/* The answers of table t of w, whose completion q came: taken (a HELD
 * completion), or each request's result as kvsd wrote it in the table,
 * checked. Each answer's value_len was set when the table was made: the
 * size of the value it expects, or 0. */
static int table_answers(struct kvs__client *c, struct kvs__waiter *w, int t,
                         const struct kvs__cqe *q, struct kvs__err *e)
{
    int begin = t * KVS__TABLE_MAX, end = begin + KVS__TABLE_MAX < w->nreq
                                              ? begin + KVS__TABLE_MAX : w->nreq;
    const unsigned char *res = c->staging + w->res[t];

    for (int i = begin; i < end; i++, res += KVS__TAB_RESULT_BYTES) {
        struct kvs__answer *a = &w->ans->a[i];
        int32_t status = 0;
        uint64_t off = 0;
        int rc;

        if (!(q->flags & KVS__CQE_HELD)
            && (rc = kvs__tab_result_decode(res, c->arena_size, a->value_len, &status, &off,
                                            e)) != 0)
            return rc;
        a->status = status;
        a->value_off = off;
        if (status != 0 && (w->ans->failed < 0 || i < w->ans->failed)) {
            w->ans->failed = i;
            memcpy(w->ans->msg, q->msg, sizeof w->ans->msg);
        }
    }
    return 0;
}

/* Reaps the completion ring for every waiting call (c->lock held). *woke:
 * set when a call of another thread got completions. */
static int reap(struct kvs__client *c, const struct kvs__waiter *self, int *woke,
                struct kvs__err *e)
{
    struct kvs__err de = { 0, "" };
    const void *slot;
    int err = 0, consumed = 0;

    while ((slot = kvs__ring_peek(&c->cq, &err)) != NULL) {
        struct kvs__cqe q;
        struct kvs__waiter *w;
        int i;

        if (kvs__cqe_decode(slot, c->arena_size, &q, &de) != 0)
            return kvs__client_broken(c, e, KVS_EPROTO, "bad completion from kvsd: %s", de.msg);
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
            return kvs__client_broken(c, e, KVS_EPROTO, "kvsd completed request %llu, never "
                                      "made or completed twice", (unsigned long long)q.seq);
        i = (int)(q.seq - w->base);
        w->got[i] = 1;
        if (w->tables) {
            if (table_answers(c, w, i, &q, &de) != 0)
                return kvs__client_broken(c, e, KVS_EPROTO, "bad completion from kvsd: %s",
                                          de.msg);
        } else {
            w->ans->a[i] = (struct kvs__answer){ q.status, q.value_off, q.value_len };
            if (q.status != 0 && (w->ans->failed < 0 || i < w->ans->failed)) {
                w->ans->failed = i;
                memcpy(w->ans->msg, q.msg, sizeof w->ans->msg);
            }
        }
        w->done++;
        if (w != self)
            *woke = 1;
        if (!(q.flags & KVS__CQE_HELD))
            hold_return(c, q.seq);
    }
    if (err)
        return kvs__client_broken(c, e, KVS_EPROTO, "a ring shared with kvsd is corrupt (%s)",
                                  kvs_strerror(err));
    /* Room for completions kvsd may be holding back, for a call still
     * waiting; once none waits, kvsd owes nothing urgent, and a ring would
     * only wake it for nothing (a futex wake-up of another core costs the
     * ringer some 10 us here). */
    if (consumed)
        for (const struct kvs__waiter *w = c->waiters; w; w = w->next)
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
        return kvs__client_broken(c, e, KVS_ETIMEDOUT, "%s: no answer within the deadline "
                                  "(KVS_TIMEOUT, KVS_OPT_TIMEOUT_MS)", what);
    if (*quiet && kvs__client_daemon_gone(c))
        return kvs__client_broken(c, e, KVS_ECLOSED, "%s: kvsd of job '%s' is gone", what, c->job);
    pthread_mutex_unlock(&c->lock);
    *quiet = kvs__bell_wait(c->wbell, seen, slice < deadline ? slice : deadline, SPIN_NS) != 0;
    pthread_mutex_lock(&c->lock);
    return kvs__client_usable_locked(c, e);
}

/* A fill for calls whose few requests are made beforehand: ctx is the
 * array of them. */
void kvs__client_fill_from(const void *ctx, int i, struct kvs__sqe *s)
{
    *s = ((const struct kvs__sqe *)ctx)[i];
}

int kvs__client_send(kvs_t *kv, uint8_t op, const void *data, size_t len, uint64_t arg,
                     const char *what, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__sqe req = { .op = op, .arg = arg, .data_len = len };
    KVS__ONE_ANSWER(ans);
    struct kvs__hold *h;
    int rc;

    if ((rc = kvs__client_usable(c, e)) != 0)
        return rc;
    if (!(h = calloc(1, sizeof *h)) || !(h->returned = calloc(1, 1))) {
        free(h);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    if ((rc = kvs__client_xfer_take(kv, len, &req.data_off, what, e)) != 0) {
        free(h->returned);
        free(h);
        return rc;
    }
    memcpy(c->staging + req.data_off, data, len);
    h->off = req.data_off;
    h->len = len;
    return kvs__client_run(kv, kvs__client_fill_from, &req, 1, 0, &ans, h, what, e);
}

/* This worker gives up waiting for request seq: kvsd says what it waits
 * for (which ranks have not come), into why, and fails the job with that
 * cause so that the other workers learn it too. */
static void explain(kvs_t *kv, uint64_t seq, char *why, size_t size)
{
    struct kvs__sqe req = { .op = KVS__OP_EXPLAIN, .arg = seq };
    struct kvs__err e = { 0, "" };
    KVS__ONE_ANSWER(ans);

    if (kvs__client_run_batch(kv, kvs__client_fill_from, &req, 1, 0, &ans, NULL, EXPLAIN_MS,
                              "asking kvsd", &e) == 0
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
/* Writes table t of a list call of n requests (fill, ctx) at staging
 * offset off, setting each answer's value_len to the size of the value
 * it will hand over (0: none), and makes its slot in *q (all but seq and
 * the end-of-list flag). *res: where its results go. 0, or KVS_EPROTO
 * when the list is not one op of int keys (a caller's mistake). */
static int table_make(struct kvs__client *c, kvs__fill_fn fill, const void *ctx, int n, int t,
                      uint64_t off, struct kvs__answers *ans, struct kvs__sqe *q,
                      uint64_t *res)
{
    int begin = t * KVS__TABLE_MAX, end = begin + KVS__TABLE_MAX < n ? begin + KVS__TABLE_MAX : n;
    unsigned char *p = c->staging + off;

    for (int i = begin; i < end; i++) {
        struct kvs__sqe s;

        fill(ctx, i, &s);
        /* Entries say which lie in this process's memory; the slot, that
         * some do. */
        if (i == begin)
            *q = (struct kvs__sqe){ .op = s.op, .flags = s.flags | KVS__SQE_TABLE,
                                    .priority = s.priority, .arg = (uint64_t)(end - begin) };
        else if (s.op != q->op
                 || ((s.flags ^ q->flags) & ~(KVS__SQE_TABLE | KVS__SQE_REMOTE)) != 0
                 || s.priority != q->priority)
            return KVS_EPROTO;
        q->flags |= s.flags & KVS__SQE_REMOTE;
        if ((s.flags & KVS__SQE_STRKEY)
            || (s.op != KVS__OP_INIT && s.op != KVS__OP_PUSH && s.op != KVS__OP_PULL))
            return KVS_EPROTO;
        ans->a[i].value_len = 0;
        if (s.op == KVS__OP_PULL || (s.flags & KVS__SQE_VALUE)) {
            kvs_array_t a = { .dtype = s.dtype, .ndim = s.ndim };

            memcpy(a.shape, s.shape, sizeof a.shape[0] * (size_t)s.ndim);
            ans->a[i].value_len = kvs__array_count(&a) * kvs_dtype_size(s.dtype);
        }
        p += kvs__tab_entry_encode(&s, p);
    }
    *res = (uint64_t)(p - c->staging);
    q->data_off = off;
    q->data_len = *res - off + (uint64_t)(end - begin) * KVS__TAB_RESULT_BYTES;
    return 0;
}

/* One list call as kvs__client_run_batch posts it and waits for it. */
struct call {
    kvs_t *kv;
    struct kvs__client *c;
    struct kvs__waiter w;
    kvs__fill_fn fill;
    const void *ctx;
    int n;                             /* requests */
    struct kvs__answers *ans;
    uint64_t *res, toff;               /* tables: per table its results; their range */
    int64_t timeout_ms, deadline;
    int own_timeout;                   /* the caller's, not the handle's: no asking */
    int quiet, woke;                   /* sleep_bell's; reap's */
    const char *what;
};

/* A long list goes in tables, in a range of staging of its own, when one
 * fits; else slot by slot (k left as it is). Fails only for another
 * reason than no room. */
static int call_tables(struct call *k, struct kvs__err *e)
{
    int nt = (k->n + KVS__TABLE_MAX - 1) / KVS__TABLE_MAX;
    struct kvs__err te = { 0, "" };

    if ((k->res = malloc(sizeof *k->res * (size_t)nt)) != NULL
        && kvs__client_xfer_take(k->kv, (uint64_t)nt * TABLE_BYTES, &k->toff, k->what,
                                 &te) == 0) {
        k->w.tables = 1;
        k->w.n = nt;
        k->w.res = k->res;
        return 0;
    }
    free(k->res);
    k->res = NULL;
    if (te.code != 0 && te.code != -ENOSPC)
        return kvs__fail(e, te.code, "%s", te.msg);
    return 0;
}

/* Gives back what a call that posted nothing took: its hold h, its
 * tables' range. c->lock held. */
static void call_drop(struct call *k, struct kvs__hold *h)
{
    kvs__client_hold_free(k->c, h);
    if (k->w.tables)
        kvs__bufs_remove(&k->c->xfer, k->toff, NULL);
}

/* Numbers the call's slots and lists it among the calls waiting, with
 * its hold h (or NULL). c->lock held. */
static void call_enlist(struct call *k, struct kvs__hold *h)
{
    struct kvs__client *c = k->c;

    k->w.base = c->next_seq;
    c->next_seq += (uint64_t)k->w.n;
    k->ans->failed = -1;
    k->w.next = c->waiters;
    c->waiters = &k->w;
    if (h) {
        h->base = k->w.base;
        h->n = h->refs = k->w.n;
        h->next = c->holds;
        c->holds = h;
    }
}

static void call_unlist(struct call *k)
{
    for (struct kvs__waiter **p = &k->c->waiters; *p; p = &(*p)->next)
        if (*p == &k->w) {
            *p = k->w.next;
            break;
        }
}

/* Posts the call's slots on the worker's ring, made as they go (c->lock
 * and c->post held). A full ring is kvsd's to drain, whoever waits: the
 * poster meanwhile reaps and sleeps as a wait does. */
static int call_post(struct call *k, struct kvs__err *e)
{
    struct kvs__client *c = k->c;
    int sent = 0, rc = 0;

    while (sent < k->w.n && rc == 0) {
        int err = 0;
        void *s = kvs__ring_reserve(&c->sq, &err);
        uint32_t seen;

        if (s) {
            struct kvs__sqe q;

            if (!k->w.tables)
                k->fill(k->ctx, sent, &q);
            else if (table_make(c, k->fill, k->ctx, k->n, sent,
                                k->toff + (uint64_t)sent * TABLE_BYTES, k->ans, &q,
                                &k->res[sent]) != 0)
                return kvs__client_broken(c, e, KVS_EPROTO, "%s: a list of mixed requests",
                                          k->what);
            q.seq = k->w.base + (uint64_t)sent;
            q.flags = (uint8_t)((q.flags & ~KVS__SQE_LAST)
                                | (sent == k->w.n - 1 ? KVS__SQE_LAST : 0));
            kvs__sqe_encode(&q, s);
            kvs__ring_commit(&c->sq);
            sent++;
            continue;
        }
        if (err)
            return kvs__client_broken(c, e, KVS_EPROTO, "a ring shared with kvsd is corrupt "
                                      "(%s)", kvs_strerror(err));
        /* The ring is full: kvsd drains it on its own, whoever waits. */
        kvs__bell_ring(c->dbell);
        seen = kvs__bell_seq(c->wbell);
        if ((rc = reap(c, &k->w, &k->woke, e)) == 0)
            rc = sleep_bell(c, seen, k->deadline, &k->quiet, k->what, e);
    }
    return rc;
}

/* Past the handle's deadline: asks kvsd what the first unanswered slot
 * waits for, and breaks the handle with that. c->lock held. */
static int call_give_up(struct call *k, struct kvs__err *e)
{
    struct kvs__client *c = k->c;
    char why[KVS__MSG_MAX], secs[32];
    int i = 0;

    while (k->w.got[i])
        i++;
    pthread_mutex_unlock(&c->lock);
    explain(k->kv, k->w.base + (uint64_t)i, why, sizeof why);
    pthread_mutex_lock(&c->lock);
    /* Over what asking may have said: this is why the handle broke. */
    c->broken = KVS_ETIMEDOUT;
    kvs__spec_format_double(secs, sizeof secs, (double)k->timeout_ms / 1000);
    snprintf(c->broken_msg, sizeof c->broken_msg, "%.20s: gave up after %.24s s "
             "(KVS_TIMEOUT): %.160s", k->what, secs, why);
    return kvs__fail(e, c->broken, "%s", c->broken_msg);
}

/* Waits until every slot of the call is answered (c->lock held). */
static int call_wait(struct call *k, struct kvs__err *e)
{
    struct kvs__client *c = k->c;
    int rc;

    for (;;) {
        uint32_t seen = kvs__bell_seq(c->wbell);

        if ((rc = reap(c, &k->w, &k->woke, e)) != 0 || k->w.done == k->w.n)
            return rc;
        if (!k->own_timeout && kvs__now_ns() >= k->deadline)
            return call_give_up(k, e);
        if ((rc = sleep_bell(c, seen, k->deadline, &k->quiet, k->what, e)) != 0)
            return rc;
    }
}

int kvs__client_run_batch(kvs_t *kv, kvs__fill_fn fill, const void *ctx, int n, int tables,
                          struct kvs__answers *ans, struct kvs__hold *h, int64_t timeout_ms,
                          const char *what, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct call k = { .kv = kv, .c = c, .w = { .n = n, .nreq = n, .ans = ans }, .fill = fill,
                      .ctx = ctx, .n = n, .ans = ans, .own_timeout = timeout_ms != 0,
                      .what = what };
    struct kvs__opts o;
    int64_t waiting;
    int rc = 0;

    kvs__opts_get(kv, &o);
    k.timeout_ms = timeout_ms ? timeout_ms : o.timeout_ms;
    k.deadline = kvs__now_ns() + k.timeout_ms * 1000000ll;
    if (tables && n >= TABLE_MIN)
        rc = call_tables(&k, e);
    if (rc != 0 || !(k.w.got = calloc((size_t)(k.w.n ? k.w.n : 1), 1))) {
        pthread_mutex_lock(&c->lock);
        call_drop(&k, h);
        pthread_mutex_unlock(&c->lock);
        free(k.res);
        return rc ? rc : kvs__fail(e, -ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&c->post);
    pthread_mutex_lock(&c->lock);
    if ((rc = kvs__client_usable_locked(c, e)) != 0) {
        call_drop(&k, h);
        pthread_mutex_unlock(&c->post);
        goto out;
    }
    call_enlist(&k, h);
    rc = call_post(&k, e);
    pthread_mutex_unlock(&c->post);
    if (rc == 0)
        kvs__bell_ring(c->dbell);
    waiting = kvs__now_ns();
    if (rc == 0)
        rc = call_wait(&k, e);
    kvs__client_waited(c, waiting);
    if (kvs__tr_is_on()) {
        struct kvs__tr_args ta = KVS__TR_ARGS;

        ta.nkeys = n;
        kvs__tr_put(KVS__TR_WAIT_KVSD, waiting, 0, &ta, 0, NULL);
    }
    call_unlist(&k);
    /* kvsd is done with the tables once every slot is answered; a handle
     * that broke keeps them lent. */
    if (rc == 0 && k.w.tables)
        kvs__bufs_remove(&c->xfer, k.toff, NULL);
out:
    pthread_mutex_unlock(&c->lock);
    /* Siblings whose completions this thread reaped sleep on the same bell. */
    if (k.woke)
        kvs__bell_ring(c->wbell);
    free(k.w.got);
    free(k.res);
    return rc;
}

/* The first failed completion of a batch, as the call's error. */
static int batch_status(struct kvs__client *c, const struct kvs__answers *ans, struct kvs__err *e)
{
    int status;

    if (ans->failed < 0)
        return 0;
    status = ans->a[ans->failed].status;
    if (status == KVS_EPEERDEAD || status == KVS_ETIMEDOUT) {
        pthread_mutex_lock(&c->lock);
        kvs__client_broken(c, e, status, "%s", ans->msg);
        pthread_mutex_unlock(&c->lock);
    }
    return kvs__fail(e, status, "%s", ans->msg);
}

/* Runs a batch and returns the first error of its completions. */
int kvs__client_run(kvs_t *kv, kvs__fill_fn fill, const void *ctx, int n, int tables,
                    struct kvs__answers *ans, struct kvs__hold *h, const char *what,
                    struct kvs__err *e)
{
    int rc = kvs__client_run_batch(kv, fill, ctx, n, tables, ans, h, 0, what, e);

    return rc ? rc : batch_status(kv->client, ans, e);
}

/* Asks kvsd to copy every push whose data it still reads from staging,
 * and waits until it has returned them: kvsd alone, no other worker. */
int kvs__client_spill(kvs_t *kv, struct kvs__err *e)
{
    struct kvs__sqe req = { .op = KVS__OP_SPILL };
    KVS__ONE_ANSWER(ans);

    return kvs__client_run(kv, kvs__client_fill_from, &req, 1, 0, &ans, NULL,
                           "making room in staging", e);
}

/* ---- staging ------------------------------------------------------------ */

/* Bytes at the bottom of staging for the copies of calls: those below the
 * lowest buffer (c->lock held). */
uint64_t kvs__client_transient(const struct kvs__client *c)
{
    return kvs__bufs_low(&c->bufs, c->staging_size) & ~(uint64_t)63;
}

/* 1 when some staging lent to kvsd is not returned yet; zc: only counting
 * holds with data in buffers (c->lock held). */
int kvs__client_lending(const struct kvs__client *c, int zc)
{
    for (const struct kvs__hold *h = c->holds; h; h = h->next)
        if (!zc || h->zc)
            return 1;
    return 0;
}

int kvs__client_in_buffer(const struct kvs__client *c, const void *data, uint64_t bytes,
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

/* Takes a range of bytes (> 0) in the transient part of staging for one
 * call. When none is free it has kvsd copy what it still reads from
 * staging (a spill), then waits for ranges being filled by sibling threads
 * to be posted and returned: nothing here waits for another worker. */
void kvs__client_hold_free(struct kvs__client *c, struct kvs__hold *h)
{
    if (!h)
        return;
    if (h->len)
        kvs__bufs_remove(&c->xfer, h->off, NULL);
    free(h->returned);
    free(h);
}

int kvs__client_xfer_take(kvs_t *kv, uint64_t bytes, uint64_t *off, const char *what,
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
        uint64_t room = kvs__client_transient(c);
        uint32_t seen = kvs__bell_seq(c->wbell);
        int woke = 0;

        if ((rc = kvs__client_usable_locked(c, e)) != 0)
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
        if (!spilled && kvs__client_lending(c, 0)) {
            pthread_mutex_unlock(&c->lock);
            if ((rc = kvs__client_spill(kv, e)) != 0)
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
