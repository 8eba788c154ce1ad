/*
 * call.c - a dist handle's list calls to kvsd: posts a call's requests
 * as slots on the worker's ring (or as tables, tables.c), waits for their
 * completions (wait.c), and takes the staging each call lends kvsd.
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
 * Every wait has a deadline (KVS_OPT_TIMEOUT_MS); past the handle's, the
 * call asks kvsd what it waited for and breaks the handle with that. It
 * never reads a completion itself (wait.c does, and checks it), and never
 * connects (connect.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/spec.h"
#include "client/link.h"
#include "client/tables.h"
#include "client/wait.h"
#include "proto/trace.h"
#include "shm/shm.h"

#define EXPLAIN_MS      1000                /* for kvsd to say what a call timed out on */

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
    h->gen = kvs__client_gen(c);
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
 * cause so that the other workers learn it too. kvsd writes nothing into
 * this process once it has answered: while a call lends kvsd an out
 * (outs), the answer is waited for as long as the handle's deadline
 * (kvsd's death ends the wait at once), so that no out is written after
 * its call returned. */
static void explain(kvs_t *kv, uint64_t seq, int outs, char *why, size_t size)
{
    struct kvs__sqe req = { .op = KVS__OP_EXPLAIN, .arg = seq };
    struct kvs__err e = { 0, "" };
    KVS__ONE_ANSWER(ans);
    struct kvs__opts o;

    kvs__opts_get(kv, &o);
    if (kvs__client_run_batch(kv, kvs__client_fill_from, &req, 1, 0, &ans, NULL,
                              outs && o.timeout_ms > EXPLAIN_MS ? o.timeout_ms : EXPLAIN_MS,
                              "asking kvsd", &e) == 0
        && ans.failed == 0 && ans.msg[0])
        snprintf(why, size, "%s", ans.msg);
    else
        snprintf(why, size, "kvsd did not say what it waits for");
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
    int quiet, woke;                   /* kvs__client_sleep's; kvs__client_reap's */
    uint64_t gen;                      /* the link's generation it was posted in */
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

    k->gen = c->gen;
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
            else if (kvs__client_table_make(c, k->fill, k->ctx, k->n, sent,
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
        if ((rc = kvs__client_reap(c, &k->w, &k->woke, e)) == 0)
            rc = kvs__client_sleep(c, k->gen, seen, k->deadline, &k->quiet, k->what, e);
    }
    return rc;
}

/* Past the handle's deadline: asks kvsd what the first unanswered slot
 * waits for, and breaks the handle with that. c->lock held. */
static int call_give_up(struct call *k, struct kvs__err *e)
{
    struct kvs__client *c = k->c;
    char why[KVS__MSG_MAX], secs[32];
    int i = 0, outs = c->outs_lent > 0;

    while (k->w.got[i])
        i++;
    pthread_mutex_unlock(&c->lock);
    explain(k->kv, k->w.base + (uint64_t)i, outs, why, sizeof why);
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

        if ((rc = kvs__client_reap(c, &k->w, &k->woke, e)) != 0 || k->w.done == k->w.n)
            return rc;
        if (!k->own_timeout && kvs__now_ns() >= k->deadline)
            return call_give_up(k, e);
        if ((rc = kvs__client_sleep(c, k->gen, seen, k->deadline, &k->quiet, k->what, e)) != 0)
            return rc;
    }
}

/* Posts the n requests fill makes as one list call (the last flagged as
 * its end) and waits for their completions, kept in ans in order (its
 * array has room for n). h: the staging the call lends kvsd, tracked
 * until returned (the call's requests' seqs are filled in here).
 * timeout_ms: 0 for the handle's deadline, after which kvsd is asked what
 * the call waited for; else this one, without asking. Returns 0 when
 * every request got a completion (each with its own status), else the
 * error that broke the handle, or KVS_ERESTART: kvsd went meanwhile, or
 * before h's call began, and the link connected to the next one. */
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
    /* A hold whose range was taken before kvsd went has its bytes in the
     * staging of the kvsd gone: the call began before the roll back. */
    if ((rc = kvs__client_usable_locked(c, e)) != 0
        || (h && (rc = kvs__client_stale(c, h->gen, e)) != 0)) {
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
    /* kvsd is done with the tables once every slot is answered, or gone
     * (the link is at a later generation); a handle that broke keeps them
     * lent. */
    if ((rc == 0 || (!c->broken && c->gen != k.gen)) && k.w.tables)
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

/* Takes a range of bytes (> 0) in the transient part of staging for one
 * call. When none is free it has kvsd copy what it still reads from
 * staging (a spill), then waits for ranges being filled by sibling threads
 * to be posted and returned: nothing here waits for another worker. */
int kvs__client_xfer_take(kvs_t *kv, uint64_t bytes, uint64_t *off, const char *what,
                          struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__opts o;
    int64_t deadline;
    int rc, quiet = 0, spilled = 0;
    uint64_t g;

    kvs__opts_get(kv, &o);
    deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    pthread_mutex_lock(&c->lock);
    g = c->gen;
    for (;;) {
        uint64_t room = kvs__client_transient(c);
        uint32_t seen = kvs__bell_seq(c->wbell);
        int woke = 0;

        if ((rc = kvs__client_usable_locked(c, e)) != 0
            || (rc = kvs__client_stale(c, g, e)) != 0)
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
        if ((rc = kvs__client_reap(c, NULL, &woke, e)) != 0
            || (rc = kvs__client_sleep(c, g, seen, deadline, &quiet, what, e)) != 0)
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
