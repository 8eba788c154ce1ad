/*
 * wait.c - how the calls of a dist handle wait for kvsd: any waiting
 * thread reaps the completion ring for all of them (answers, tables'
 * results, the staging kvsd returns) and rings this worker's own doorbell
 * to wake the siblings it found completions for, so that a thread waiting
 * for a round never holds up another's call; it sleeps on the doorbell in
 * slices, and notices kvsd's death within one. A wait that fails for a
 * reason that leaves requests in flight (timeout, kvsd gone, a protocol
 * error) breaks the handle: every later call returns the same error.
 * When kvsd of a job that recovers goes (its socket hangs up), the link
 * starts a new generation and connects to the kvsd that replaces it
 * (connect.c): every call of the older generation returns KVS_ERESTART,
 * once; a ring kvsd stops answering is a timeout as ever, never that.
 *
 * It never posts a request (call.c does), and trusts nothing it reads
 * from shared memory: completions are decoded and checked
 * (proto/slots.c), ring indices are checked (ring.c).
 */
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "client/link.h"
#include "client/tables.h"
#include "client/wait.h"
#include "shm/shm.h"

#define WAIT_SLICE_NS   (100 * 1000000ll)   /* how often a wait checks that kvsd lives */
#define SPIN_NS         (20 * 1000ll)       /* spin before sleeping: half a futex wake-up */

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

int kvs__client_stale(struct kvs__client *c, uint64_t gen, struct kvs__err *e)
{
    if (c->gen == gen)
        return 0;
    return kvs__fail(e, KVS_ERESTART, "kvsd of job '%s' went away: the job rolls back to "
                     "its last commit", c->job);
}

uint64_t kvs__client_gen(struct kvs__client *c)
{
    uint64_t gen;

    pthread_mutex_lock(&c->lock);
    gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    return gen;
}

int kvs__client_since(struct kvs__client *c, uint64_t gen, struct kvs__err *e)
{
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = kvs__client_stale(c, gen, e);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* The reconnection happens here, once, under c->lock: the calls of other
 * threads wake (this worker's bell), wait for the lock, and find their
 * generation gone. */
int kvs__client_gone(struct kvs__client *c, const char *what, struct kvs__err *e)
{
    struct kvs__err re = { 0, "" };

    if (!c->recover || c->closing || c->broken)
        return kvs__client_broken(c, e, KVS_ECLOSED, "%s: kvsd of job '%s' is gone", what,
                                  c->job);
    c->gen++;
    kvs__bell_ring(c->wbell);
    if (kvs__client_reconnect(c, &re) != 0)
        return kvs__client_broken(c, e, re.code, "%s", re.msg);
    return kvs__client_stale(c, c->gen - 1, e);
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

int kvs__client_reap(struct kvs__client *c, const struct kvs__waiter *self, int *woke,
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
            if (kvs__client_table_answers(c, w->ans, w->nreq, i, w->res[i], &q, &de) != 0)
                return kvs__client_broken(c, e, KVS_EPROTO, "bad completion from kvsd: %s",
                                          de.msg);
        } else {
            w->ans->a[i] = (struct kvs__answer){ q.status, q.value_off, q.value_len, q.round,
                                                 q.flags & (KVS__CQE_ROWS
                                                            | KVS__CQE_WRITTEN) };
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
int kvs__client_sleep(struct kvs__client *c, uint64_t gen, uint32_t seen, int64_t deadline,
                      int *quiet, const char *what, struct kvs__err *e)
{
    int64_t now = kvs__now_ns(), slice = now + WAIT_SLICE_NS;
    int rc;

    if ((rc = kvs__client_usable_locked(c, e)) != 0 || (rc = kvs__client_stale(c, gen, e)) != 0)
        return rc;
    if (now >= deadline)
        return kvs__client_broken(c, e, KVS_ETIMEDOUT, "%s: no answer within the deadline "
                                  "(KVS_TIMEOUT, KVS_OPT_TIMEOUT_MS)", what);
    if (*quiet && kvs__client_daemon_gone(c))
        return kvs__client_gone(c, what, e);
    pthread_mutex_unlock(&c->lock);
    *quiet = kvs__bell_wait(c->wbell, seen, slice < deadline ? slice : deadline, SPIN_NS) != 0;
    pthread_mutex_lock(&c->lock);
    if ((rc = kvs__client_usable_locked(c, e)) != 0)
        return rc;
    return kvs__client_stale(c, gen, e);
}
