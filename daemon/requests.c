/*
 * requests.c - what the serve thread does with the workers' requests. It
 * drains each worker's request ring into list calls and checks a whole list
 * against the store before any of it takes effect; it runs pulls and sync
 * pushes through the pending queue (priority high first, then arrival),
 * async pushes at once, and hands inits and barriers to collectives.c (and,
 * across hosts, rounds and async pushes to bridge.c); answers.c posts the
 * completions. It evicts a worker whose ring or request is bad, and fails
 * the job when a worker dies, is evicted, or gives up waiting. A table slot
 * (proto.h) becomes one request per entry, each answered into the table,
 * the table once for all (struct tab).
 *
 * A sync push is answered at once (KVS__CQE_HELD: taken), so that a push
 * never waits for the other workers; it then waits in the pending queue
 * and in its key's open round, which keep the request and not a copy of
 * its data: the data stays lent in the worker's staging area, which the
 * worker leaves alone until kvsd releases it (KVS__CQE_RELEASE) when the
 * round closes. A SPILL, or the worker leaving, makes kvsd copy what it
 * still borrows, so that no worker ever waits on another for staging room
 * and a closed worker's last pushes still count. When every worker still
 * in the job has pushed, the round hands all of them to the engine as one
 * push of the key repeated, and the engine sums them in one pass straight
 * into the stored value (with an optimizer, a chunk at a time right beside
 * the update): (N+1)*S bytes of memory traffic for N workers and S bytes
 * (plus the optimizer's state), not a running sum's 3*N*S or so.
 *
 * Serve thread only. It must never wait on a worker, never use a request
 * slot before proto.c has decoded and checked it, never post to a worker
 * that is no longer LIVE, never unmap a worker's segment while a request
 * of it still waits (its data would be gone from under a round), and never
 * read a socket, accept a connection or answer kvsctl (accept.c and
 * control.c do).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/array.h"
#include "kvsd.h"
#include "shm/shm.h"

/* ---- the open rounds --------------------------------------------------- */

void open_link(struct daemon *d, struct round *rd)
{
    if (rd->pprev)
        return;                        /* linked already */
    rd->next = d->open;
    if (d->open)
        d->open->pprev = &rd->next;
    d->open = rd;
    rd->pprev = &d->open;
}

static void open_unlink(struct round *rd)
{
    if (!rd->pprev)
        return;
    *rd->pprev = rd->next;
    if (rd->next)
        rd->next->pprev = rd->pprev;
    rd->next = NULL;
    rd->pprev = NULL;
}

/* Completes the open round's pushes with status and msg and leaves it
 * empty; a pull of their workers then waits for no round. */
static void round_empty(struct daemon *d, struct round *rd, int status, const char *msg)
{
    open_unlink(rd);
    rd->ready = 0;
    rd->inflight = 0;
    rd->t_open = 0;
    for (int i = 0; i < d->nworkers && rd->ncontrib > 0; i++) {
        struct req *r = rd->contrib[i];

        if (!r)
            continue;
        rd->contrib[i] = NULL;
        rd->last[i] = rd->done;
        rd->ncontrib--;
        finish(d, r, status, msg);
    }
    rd->nlive = 0;
}

/* Copies every push of worker wi whose data is still lent (waiting in
 * pending or in a round), releasing its staging; with remote, those read
 * out of its memory too (it leaves), else they stay (they take no
 * staging). 0, or the first error (-ENOMEM, a read's) with the pushes
 * copied so far released. */
static int spill(struct daemon *d, int wi, int remote)
{
    int rc;

    for (struct req *r = d->pending; r; r = r->next)
        if (r->w == wi && (remote || !req_remote(r)) && (rc = unlend(d, r)) != 0)
            return rc;
    for (struct round *rd = d->open; rd; rd = rd->next) {
        struct req *r = rd->contrib[wi];

        if (r && (remote || !req_remote(r)) && (rc = unlend(d, r)) != 0)
            return rc;
    }
    return 0;
}

/* 1 when kvsd still reads a push of worker wi from wi's staging. */
static int lends(const struct daemon *d, int wi)
{
    for (const struct req *r = d->pending; r; r = r->next)
        if (r->w == wi && r->lent)
            return 1;
    for (const struct round *rd = d->open; rd; rd = rd->next)
        if (rd->contrib[wi] && rd->contrib[wi]->lent)
            return 1;
    return 0;
}

/* ---- workers: arrival, leaving, death --------------------------------- */

int expected(const struct daemon *d)
{
    return d->nworkers - d->left;
}

/* Fails every waiting request: pulls and pushes in pending, pushes in
 * rounds, and those in collectives. */
void fail_waiting(struct daemon *d, int status, const char *msg)
{
    complete_list(d, d->pending, status, msg);
    d->pending = NULL;
    complete_list(d, d->fwd, status, msg);
    d->fwd = NULL;
    states_fail(d, status, msg);
    while (d->open)
        round_empty(d, d->open, status, msg);
    colls_fail(d, status, msg);
}

/* The job cannot go on: every waiting request and every later one fails
 * with the first failure's status and message. */
void fail_job(struct daemon *d, int status, const char *fmt, ...)
{
    va_list ap;

    if (!d->failed) {
        va_start(ap, fmt);
        vsnprintf(d->fail_msg, sizeof d->fail_msg, fmt, ap);
        va_end(ap);
        d->failed = status;
        say(d, "%s", d->fail_msg);
        kvs__tr_instant(KVS__TR_JOB_FAILED, NULL, status, d->fail_msg);
        if (d->hx && !d->fail_remote)
            bridge_fail(d, status, d->fail_msg);
        cb_fail(d, status, d->fail_msg);
    }
    fail_waiting(d, d->failed, d->fail_msg);
}

void worker_release(struct daemon *d, struct worker *w)
{
    int wi = (int)(w - d->workers);

    complete_list(d, w->batch, KVS_EPEERDEAD, "worker gone");
    w->batch = NULL;
    /* A round must not keep data from a segment that is about to go: the
     * job fails. (A dead or evicted worker's job has failed already; one
     * that left cleanly had its pushes copied when it left.) */
    if (lends(d, wi))
        fail_job(d, KVS_EPEERDEAD, "rank %d (pid %d) left the job with a push unfinished",
                 w->rank, (int)w->pid);
    /* Pushes of a worker that left were copied: they still count. */
    for (struct req **p = &d->pending; *p;) {
        struct req *r = *p;

        if (r->w == wi && !r->copy) {
            *p = r->next;
            finish(d, r, KVS_EPEERDEAD, "worker gone");
        } else {
            p = &r->next;
        }
    }
    backlog_free(w);
    devbufs_close(d, w);
    remote_close(w);
    if (w->seg)
        kvs__unmap(w->seg, w->seg_size);
    w->seg = NULL;
    if (w->sock >= 0)
        close(w->sock);
    w->sock = -1;
}

/* ---- requests --------------------------------------------------------- */

/* The key's rounds, made at its first push or pull. The value's place
 * never changes in kvsd (no reinit, no updater swapping buffers), so the
 * round keeps it: a request that knows its round needs no key lookup. */
struct round *round_of(struct daemon *d, const struct kvs__entry_info *info, kvs_key_t key)
{
    struct round *r = *info->front;
    size_t n, np;

    if (r)
        return r;
    /* One allocation: a list of many keys makes a round for each. */
    n = (size_t)d->nworkers;
    np = (size_t)key_parts(d, info->bytes);
    r = calloc(1, sizeof *r + n * (sizeof *r->contrib + sizeof *r->last + sizeof *r->queued)
                  + KVS__LAT_BUCKETS * sizeof *r->lat + np);
    if (!r)
        return NULL;
    r->contrib = (struct req **)(r + 1);
    r->last = (uint64_t *)(r->contrib + n);
    r->queued = (int *)(r->last + n);
    r->lat = (uint32_t *)(r->queued + n);
    r->pgot = (uint8_t *)(r->lat + KVS__LAT_BUCKETS);
    r->value = r->dvalue = info->value;
    r->device = info->device;
    r->bytes = info->bytes;
    r->dtype = info->dtype;
    r->entry = info->entry;
    r->owner = key_owner(d, key);
    r->nparts = (int)np;
    /* A value kept on a GPU gets its copy in the arena for host pulls,
     * made when one first comes. */
    if (r->device != KVS_HOST) {
        r->stale = 1;
        if (!(r->value = arena_alloc(d, r->bytes))) {
            free(r);
            return NULL;
        }
    }
    if (bridge_round_new(d, r) != 0) {
        free(r);
        return NULL;
    }
    *info->front = r;
    return r;
}

void round_free(void *p)
{
    struct round *r = p;

    /* The engine frees a round with its key's entry, only when the engine
     * goes, after fail_waiting has emptied every round; the open list
     * stays sound even so. */
    open_unlink(r);
    bridge_round_free(r);
    devcopies_free(r);
    free(r);
}

/* Where the previous request of a list went into the pending queue. */
struct place {
    struct req **p;                    /* NULL: nowhere yet */
    int32_t priority;
};

/* Into the pending queue: after every request of its priority or higher,
 * so that arrival order holds within a priority. Every request before
 * h->p has h->priority or higher, so a request of no higher priority (all
 * of a list, usually) is placed from there: a list of n requests costs one
 * walk of the queue, not n. h is valid only while nothing else changes
 * the queue. */
static void insert_pending(struct daemon *d, struct req *r, struct place *h)
{
    struct req **p = h->p && r->s.priority <= h->priority ? h->p : &d->pending;

    while (*p && (*p)->s.priority >= r->s.priority)
        p = &(*p)->next;
    r->next = *p;
    *p = r;
    h->p = &r->next;
    h->priority = r->s.priority;
}

/* Applies the pushes of the nr rounds rds[], each read from its worker's
 * staging area, as one engine push of every key's entry (each key's
 * inputs in rank order: the sum does not depend on who came first), under
 * each value's seqlock: the engine sums them as one job over its threads,
 * straight into the values (or beside the optimizer's update), without
 * looking a key up again. All or nothing, as every engine call. The rounds
 * are an array, not a list: a list call closes hundreds of thousands of
 * them, and walking them as a list is a chain of cache misses. */
static int apply_rounds(struct daemon *d, struct round *const *rds, size_t nr,
                        struct kvs__err *e)
{
    struct kvs__push_item *items;
    struct kvs__source *src = NULL;
    const void **in;
    int *dev, remote = 0;
    size_t total = 0, n = 0;
    int64_t t;
    int rc;

    if (nr == 0)
        return 0;
    if (nr > INT_MAX)
        return kvs__fail(e, -ENOMEM, "kvsd: %zu rounds closing at once", nr);
    for (size_t i = 0; i < nr; i++)
        total += (size_t)rds[i]->ncontrib;
    /* One allocation: the items, then every input and its device (zeroed:
     * GCC cannot tell that the loop below fills every item). */
    if (!(items = calloc(1, sizeof *items * nr + (sizeof *in + sizeof *dev) * total)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory closing a round");
    in = (const void **)(items + nr);
    dev = (int *)(in + total);
    for (size_t i = 0; i < nr; i++) {
        const struct round *rd = rds[i];

        /* A host key's inputs are all on the host (devcopy_new copies a
         * device push onto its key's device): no devices to say, and the
         * engine's host path stays as it was. */
        items[i] = (struct kvs__push_item){ rd->entry, rd->ncontrib, in + n,
                                            rd->device != KVS_HOST ? dev + n : NULL, NULL };
        for (int w = 0; w < d->nworkers; w++) {
            if (rd->contrib[w]) {
                in[n] = req_data(d, rd->contrib[w]);   /* NULL: still in w's memory */
                remote |= req_remote(rd->contrib[w]);
                dev[n++] = req_device(rd->contrib[w]);
            }
        }
    }
    /* Pushes still in their workers' memory are read beside the sum:
     * sources (and their contexts) only for closes that have such. */
    if (remote) {
        size_t cs = remote_ctx_size();

        if (!(src = calloc(total, sizeof *src + cs))) {
            free(items);
            return kvs__fail(e, -ENOMEM, "kvsd: out of memory closing a round");
        }
        for (size_t i = 0, at = 0; i < nr; at += (size_t)rds[i]->ncontrib, i++)
            if (remote_sources(d, rds[i], src + at, (char *)(src + total) + cs * at) > 0)
                items[i].src = src + at;
    }
    for (size_t i = 0; i < nr; i++)
        seq_begin(rds[i]->value);
    t = kvs__tr_begin();
    rc = kvs__engine_push_entries(d->eng, (int)nr, items, e);
    if (t) {
        int64_t end = kvs__tr_now();

        for (size_t i = 0; i < nr; i++) {
            rds[i]->t_sum0 = t;
            rds[i]->t_sum1 = end;
        }
    }
    for (size_t i = 0; i < nr; i++) {
        seq_end(rds[i]->value);
        rds[i]->stale |= rds[i]->device != KVS_HOST;
    }
    free(items);
    free(src);
    return rc;
}

int apply_part(struct daemon *d, struct round *rd, int p, int k, const void **in, const int *dev,
               uint64_t step, struct kvs__err *e)
{
    struct kvs__push_item it = { rd->entry, k, in, rd->device != KVS_HOST ? dev : NULL, NULL };
    int64_t t = kvs__tr_begin();
    int rc;

    seq_begin(rd->value);
    if (p < 0) {
        rc = kvs__engine_push_entries(d->eng, 1, &it, e);
    } else {
        uint64_t first, n;

        part_range(rd, p, &first, &n);
        rc = kvs__engine_push_range(d->eng, &it, (size_t)first, (size_t)n, step, e);
    }
    seq_end(rd->value);
    rd->stale |= rd->device != KVS_HOST;
    if (t) {
        rd->t_sum0 = t;
        rd->t_sum1 = kvs__tr_now();
    }
    return rc;
}

/* A round's pushes were answered when taken: a failed update reaches the
 * workers through their pulls of the key, which wait for this round. */
void finish_round(struct daemon *d, struct round *rd, int status, const char *msg)
{
    rd->done++;
    d->st.rounds++;
    if (rd->t_open) {
        uint32_t *b = &rd->lat[kvs__lat_bucket(kvs__now_ns() - rd->t_open)];

        *b += *b < UINT32_MAX;
    }
    if (kvs__tr_begin())
        trace_round(d, rd);
    if (status != 0) {
        rd->failed_round = rd->done;
        rd->fail_status = status;
        snprintf(rd->fail_msg, sizeof rd->fail_msg, "%s", msg ? msg : "");
    }
    round_empty(d, rd, status, msg);
}

/* Closes the nr rounds rds[], whose every push is in: together, so that
 * the sums of many keys share kvsd's threads. If that fails (an optimizer
 * refusing an integer key, memory), the engine has changed nothing: each
 * round is then tried alone and gets its own status, so that one key's
 * error is not another's. */
static void close_ready(struct daemon *d, struct round *const *rds, size_t nr)
{
    struct kvs__err e = { 0, "" };
    int64_t t = kvs__tr_begin();
    int status, lost = 0;

    for (size_t i = 0; t && i < nr; i++)
        rds[i]->t_ready = t;
    if (d->hx) {                       /* across hosts: through the keys' owners */
        for (size_t i = 0; i < nr; i++)
            bridge_round_ready(d, rds[i]);
        return;
    }
    status = apply_rounds(d, rds, nr, &e);
    for (size_t i = 0; i < nr; i++) {
        /* A push that could not be read out of its worker's memory failed
         * the job (its key's value is lost): nothing is tried again. */
        if (remote_check(d) != 0 || lost) {
            lost = 1;
            finish_round(d, rds[i], d->failed, d->fail_msg);
        } else if (status != 0 && nr > 1) {
            struct kvs__err one = { 0, "" };

            finish_round(d, rds[i], apply_rounds(d, &rds[i], 1, &one), one.msg);
        } else {
            finish_round(d, rds[i], status, e.msg);
        }
    }
    remote_check(d);                   /* the last round tried alone */
    if (t && nr > 0) {
        struct kvs__tr_args a = KVS__TR_ARGS;

        a.nkeys = (int32_t)(nr < INT32_MAX ? nr : INT32_MAX);
        kvs__tr_put(KVS__TR_CLOSE, t, 0, &a, 0, NULL);
    }
}

/* Closes a key's open round when every worker still in the job has pushed
 * to it. 1 when closed. */
static int close_round(struct daemon *d, struct round *rd)
{
    if (rd->ncontrib == 0 || rd->inflight || rd->nlive < expected(d))
        return 0;
    close_ready(d, &rd, 1);
    return 1;
}

/* Keeps rd among the rounds this pass closes; without memory to keep
 * it, closes it at once. */
static void ready_add(struct daemon *d, struct round *rd)
{
    if (d->nready == d->ready_cap) {
        size_t cap = d->ready_cap ? 2 * d->ready_cap : 1024;
        struct round **r = realloc(d->ready, sizeof *r * cap);

        if (!r) {
            close_ready(d, &rd, 1);
            return;
        }
        d->ready = r;
        d->ready_cap = cap;
    }
    rd->ready = 1;
    d->ready[d->nready++] = rd;
}

/* One pass over pending requests; returns 1 when something completed or
 * a push joined a round. */
int serve_pending(struct daemon *d)
{
    int progress = 0;

    for (struct req **p = &d->pending; *p;) {
        struct req *r = *p;
        struct round *rd = r->rd;      /* pending requests are pushes and pulls */

        if (r->s.op == KVS__OP_PULL) {
            if (d->sync && (rd->done < rd->last[r->w] || rd->queued[r->w] > 0)) {
                p = &r->next;
                continue;
            }
            *p = r->next;
            if (d->sync && rd->last[r->w] != 0 && rd->failed_round == rd->last[r->w]) {
                complete(d, r, rd->fail_status, rd->fail_msg);
            } else {
                answer(d, r, 0, NULL, rd);
                req_free(d, r);
            }
            progress = 1;
            continue;
        }
        if (r->s.op != KVS__OP_PUSH) {
            p = &r->next;
            continue;
        }
        /* A sync push: into its key's open round, unless it is already in,
         * or the round waits for the other hosts. */
        if (rd->contrib[r->w] || rd->inflight) {
            p = &r->next;
            continue;
        }
        *p = r->next;
        r->next = NULL;
        if (r->t_in)
            r->t_join = kvs__tr_now();
        if (rd->ncontrib++ == 0) {
            open_link(d, rd);
            rd->t_open = kvs__now_ns();
        }
        rd->contrib[r->w] = r;
        rd->last[r->w] = rd->done + 1;
        rd->queued[r->w]--;
        rd->nlive += d->workers[r->w].state == W_LIVE;
        progress = 1;
        if (!rd->ready && rd->nlive >= expected(d))
            ready_add(d, rd);
    }
    /* The rounds this pass filled close together (a list call of many keys
     * arrives in one pass); what waited on them goes in the next pass,
     * which starts from the top again, in priority order. */
    close_ready(d, d->ready, d->nready);
    d->nready = 0;
    return progress;
}

/* Worker wi has left: its pushes in open rounds still count, but the rounds
 * no longer wait for it, and those whose missing workers have all left
 * close now. */
static void close_rounds_after_leave(struct daemon *d, int wi)
{
    for (struct round *rd = d->open; rd; rd = rd->next)
        if (rd->contrib[wi])
            rd->nlive--;
    for (struct round *rd = d->open, *next; rd; rd = next) {
        next = rd->next;               /* closing takes rd, and only rd, off the list */
        close_round(d, rd);
    }
}

/* Any worker may set the optimizer, at any time (as MXNet lets any worker
 * send it to the servers): it replaces the one before and drops its state.
 * The same spec again is a no-op that keeps the state, so that every
 * worker may make the same call at start-up whenever it gets there.
 * Across hosts every host sets it: the owners of the keys run it. */
int optimizer_set(struct daemon *d, const char *spec, const char *who, struct kvs__err *e)
{
    const char *cur = kvs__engine_optimizer(d->eng);
    char *was = NULL;
    int rc;

    if (cur && strcmp(cur, spec) == 0)
        return 0;
    if (cur && !(was = strdup(cur)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory");
    if ((rc = kvs__engine_set_optimizer(d->eng, spec, e)) == 0) {
        say(d, "%s set the optimizer to '%s'%s%s%s", who, spec, was ? " (was '" : "",
            was ? was : "", was ? "': its state is dropped)" : "");
        cb_optimizer(d);
    }
    free(was);
    return rc;
}

static int set_optimizer(struct daemon *d, const struct req *r, struct kvs__err *e)
{
    const struct worker *w = &d->workers[r->w];
    char spec[4096], who[32];
    int rc;

    memcpy(spec, w->staging + r->s.data_off, r->s.data_len);
    spec[r->s.data_len] = '\0';
    snprintf(who, sizeof who, "rank %d", w->rank);
    rc = optimizer_set(d, spec, who, e);
    if (rc == 0 && d->hx)
        bridge_optimizer(d, spec);
    return rc;
}

/* ---- what waits ------------------------------------------------------- */

/* The ranks still in the job (connected or not yet) that have not joined
 * the round rd or the collective c, as "1, 3". */
static void missing_ranks(const struct daemon *d, const struct round *rd, const struct coll *c,
                          char *buf, size_t size)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < d->nworkers && o + 16 < size; i++) {
        int st = d->workers[i].state;

        if (st == W_LEFT || st == W_DEAD || (rd ? rd->contrib[i] != NULL : c->arrived[i]))
            continue;
        o += (size_t)snprintf(buf + o, size - o, "%s%d", o ? ", " : "", d->rank0 + i);
    }
}

static void round_text(const struct daemon *d, const struct round *rd, const char *call,
                       kvs_key_t key, char *buf, size_t size)
{
    char ks[KVS_MAX_KEY_LEN + 8], who[160];

    kvs__key_str(ks, sizeof ks, key);
    if (rd->inflight) {                /* across hosts: every worker here has pushed */
        snprintf(buf, size, "%s%skey %s round %llu: this host's workers pushed, waiting for "
                 "the other hosts' (the key's owner is %s)", call, *call ? " of " : "", ks,
                 (unsigned long long)rd->done + 1, host_name(d, rd->owner));
        return;
    }
    missing_ranks(d, rd, NULL, who, sizeof who);
    snprintf(buf, size, "%s%skey %s round %llu: %d of %d workers pushed, waiting for rank%s "
             "%s", call, *call ? " of " : "", ks, (unsigned long long)rd->done + 1,
             rd->nlive, expected(d), strchr(who, ',') ? "s" : "", who);
}

static void coll_text(const struct daemon *d, const struct coll *c, char *buf, size_t size)
{
    char ks[KVS_MAX_KEY_LEN + 8], who[160];

    missing_ranks(d, NULL, c, who, sizeof who);
    if (c->op == KVS__OP_INIT) {
        kvs__key_str(ks, sizeof ks, c->key);
        snprintf(buf, size, "kvs_init of key %s: %d of %d workers called it, waiting for "
                 "rank%s %s", ks, c->narrived, expected(d), strchr(who, ',') ? "s" : "", who);
    } else {
        snprintf(buf, size, "kvs_barrier: %d of %d workers arrived, waiting for rank%s %s",
                 c->narrived, expected(d), strchr(who, ',') ? "s" : "", who);
    }
}

void explain_wait(const struct daemon *d, int wi, uint64_t seq, char *buf, size_t size)
{
    buf[0] = '\0';
    for (const struct req *r = d->pending; r; r = r->next) {
        if (r->w != wi || r->s.seq != seq)
            continue;
        round_text(d, r->rd, r->s.op == KVS__OP_PULL ? "kvs_pull" : "kvs_pushpull",
                   req_key(&r->s), buf, size);
        return;
    }
    for (const struct round *rd = d->open; rd; rd = rd->next)
        if (rd->contrib[wi] && rd->contrib[wi]->s.seq == seq) {
            round_text(d, rd, "kvs_pushpull", req_key(&rd->contrib[wi]->s), buf, size);
            return;
        }
    for (const struct coll *c = d->colls; c; c = c->next)
        for (const struct req *r = c->reqs; r; r = r->next)
            if (r->w == wi && r->s.seq == seq) {
                coll_text(d, c, buf, size);
                return;
            }
    states_explain(d, wi, seq, buf, size);
}

void list_waits(const struct daemon *d, void (*line)(void *ctx, const char *text), void *ctx)
{
    char buf[KVS_MAX_KEY_LEN + 320];

    for (const struct round *rd = d->open; rd; rd = rd->next) {
        for (int i = 0; i < d->nworkers; i++) {
            if (rd->contrib[i]) {
                round_text(d, rd, "", req_key(&rd->contrib[i]->s), buf, sizeof buf);
                line(ctx, buf);
                break;
            }
        }
    }
    /* The open rounds of keys the workers combine: from the area, which
     * is only shown here, never acted on. */
    for (size_t i = 0; i < d->cb_n; i++)
        if (cb_round_text(d, i, buf, sizeof buf))
            line(ctx, buf);
    for (const struct coll *c = d->colls; c; c = c->next) {
        coll_text(d, c, buf, sizeof buf);
        line(ctx, buf);
    }
}

/* A worker gave up waiting for request arg (its deadline passed): it is
 * told what that request waits for, and the job fails with that cause, so
 * that the others learn why too instead of a bare "rank 0 died" later. */
static void gave_up(struct daemon *d, struct req *r)
{
    const struct worker *w = &d->workers[r->w];
    char why[KVS__MSG_MAX];

    explain_wait(d, r->w, r->s.arg, why, sizeof why);
    if (!why[0])
        snprintf(why, sizeof why, "kvsd holds nothing of it waiting");
    fail_job(d, KVS_ETIMEDOUT, "rank %d gave up waiting (KVS_TIMEOUT): %s", w->rank, why);
    complete(d, r, KVS_ETIMEDOUT, why);
}

/* ---- a worker's requests ---------------------------------------------- */

/* A save or a load of optimizer states: 0 or the error of a call done
 * here, 1 when it waits for the other hosts (states.c). */
static int text_op(struct daemon *d, struct req *r, struct kvs__err *e)
{
    struct worker *w = &d->workers[r->w];
    char path[4096];

    memcpy(path, w->staging + r->s.data_off, r->s.data_len);
    path[r->s.data_len] = '\0';
    if (strlen(path) != r->s.data_len || path[0] != '/')
        return kvs__fail(e, KVS_EBADARG, "path must be absolute, without NUL");
    if (d->hx)
        return states_start(d, r, path, e);
    if (r->s.op == KVS__OP_SAVE_STATES)
        return cb_save_states(d, path, r->s.arg != 0, e);
    return cb_load_states(d, path, e);
}

/* A remote push (KVS__SQE_REMOTE) on arrival: refused from a worker kvsd
 * cannot read; read at once where its data goes elsewhere than a host
 * round's sum (an async push, other hosts, a key on a GPU); else left in
 * the worker's memory until its round closes. */
static int remote_take(struct daemon *d, struct req *r, struct kvs__err *e)
{
    int rc;

    if (d->workers[r->w].pidfd < 0)
        return kvs__fail(e, KVS_EPROTO, "a push from the worker's memory, which kvsd was "
                         "not given to read");
    if (d->sync && !d->hx && r->rd->device == KVS_HOST)
        return 0;
    if ((rc = remote_copy(d, r)) == -ENOMEM)
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a push");
    if (rc != 0)
        return kvs__fail(e, KVS_EBADARG, "the value could not be read out of the worker's "
                         "memory (%s)", strerror(-rc));
    return 0;
}

/* A whole list call has arrived: check every request against the store
 * before any of them takes effect, then start them. */
static void run_list(struct daemon *d, struct req *list)
{
    struct kvs__err e = { 0, "" };
    struct place at = { NULL, 0 };
    const void *in;
    int dev, rc = 0;

    if (d->failed && list->s.op != KVS__OP_CLOSE && list->s.op != KVS__OP_EXPLAIN) {
        complete_list(d, list, d->failed, d->fail_msg);
        return;
    }
    for (struct req *r = list; r && rc == 0; r = r->next) {
        if (r->s.op == KVS__OP_PUSH || r->s.op == KVS__OP_PULL) {
            kvs_array_t a = req_array(&r->s, NULL);
            struct kvs__entry_info info;

            rc = r->s.op == KVS__OP_PUSH
                     ? kvs__engine_check_push(d->eng, req_key(&r->s), &a, &info, &e)
                     : kvs__engine_check(d->eng, req_key(&r->s), &a, &info, &e);
            if (rc == 0 && !(r->rd = round_of(d, &info, req_key(&r->s))))
                rc = kvs__fail(&e, -ENOMEM, "kvsd: out of memory for a round");
            if (rc == 0 && r->rd->cb)
                rc = kvs__fail(&e, KVS_EPROTO, "the workers combine this key's rounds "
                               "(KVS_COMBINE): kvsd takes no push or pull of it");
            if (rc == 0 && (r->s.flags & KVS__SQE_2BIT))
                rc = decode_2bit(d, r, &e);
            if (rc == 0 && (r->s.flags & KVS__SQE_DEVICE) && r->s.op == KVS__OP_PULL)
                rc = devbuf_device(d, r, &dev, &e);
            if (rc == 0 && (r->s.flags & KVS__SQE_REMOTE))
                rc = remote_take(d, r, &e);
            if (rc == 0 && (r->s.flags & KVS__SQE_DEVICE) && r->s.op == KVS__OP_PUSH) {
                if ((rc = devcopy_new(r->rd, &r->copy, &e)) == 0) {
                    r->copy_dev = r->rd->device;
                    rc = devbuf_read(d, r, r->copy, r->copy_dev, &e);
                }
                d->st.device_pushes += rc == 0;
            }
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
        /* Only pushes and pulls go into the queue: anything else may
         * change it, and with it the place of the last insertion. */
        if (r->s.op != KVS__OP_PUSH && r->s.op != KVS__OP_PULL)
            at.p = NULL;
        /* After the list's CLOSE, or a failure of the job it caused,
         * nothing more of it runs. */
        if (w->state != W_LIVE) {
            complete(d, r, KVS_EPROTO, "a request after the worker's close");
            continue;
        }
        if (d->failed && r->s.op != KVS__OP_CLOSE && r->s.op != KVS__OP_EXPLAIN) {
            complete(d, r, d->failed, d->fail_msg);
            continue;
        }
        switch (r->s.op) {
        case KVS__OP_PUSH:
            if (!d->sync) {
                if (d->hx) {
                    bridge_async_push(d, r);
                    break;
                }
                in = req_data(d, r);
                dev = req_device(r);
                rc = apply_part(d, r->rd, -1, 1, &in, &dev, 0, &e);
                complete(d, r, rc, e.msg);
                break;
            }
            /* Queued in its key's round until it joins one. */
            r->rd->queued[r->w]++;
            r->lent = 1;
            if (r->tab)
                r->tab->lent++;
            insert_pending(d, r, &at);
            if (!(r->s.flags & KVS__SQE_VALUE))
                ack(d, r);
            if (r->copy)               /* a 2bit or device push: copied already */
                lending_ends(d, r, 1);
            break;
        case KVS__OP_PULL:
            insert_pending(d, r, &at);
            break;
        case KVS__OP_INIT:
        case KVS__OP_BARRIER:
            coll_arrive(d, r);
            break;
        case KVS__OP_SET_OPTIMIZER:
            rc = set_optimizer(d, r, &e);
            complete(d, r, rc, e.msg);
            break;
        case KVS__OP_EXPLAIN:
            gave_up(d, r);
            break;
        case KVS__OP_REGISTER:
            rc = devbuf_register(d, r, &e);
            complete(d, r, rc, e.msg);
            break;
        case KVS__OP_SPILL:
            rc = spill(d, r->w, 0);
            complete(d, r, rc, rc ? "kvsd: out of memory copying pushes out of staging" : NULL);
            break;
        case KVS__OP_SAVE_STATES:
        case KVS__OP_LOAD_STATES:
            if ((rc = text_op(d, r, &e)) != 1)     /* 1: it waits for the other hosts */
                complete(d, r, rc, e.msg);
            break;
        case KVS__OP_CLOSE:
            /* Its pushes still waiting count in their rounds, as they
             * would have had it stayed: kvsd keeps copies, since the
             * worker's segment goes. */
            if (spill(d, r->w, 1) != 0)
                fail_job(d, KVS_EPEERDEAD, "rank %d (pid %d) left, and kvsd could not keep "
                         "its last pushes (no memory, or its memory unreadable)", w->rank,
                         (int)w->pid);
            complete(d, r, 0, NULL);   /* frees r */
            atomic_store(&w->state, W_LEFT);
            d->left++;
            say(d, "rank %d left the job", w->rank);
            trace_worker(w, KVS__TR_LEFT, NULL);
            cb_leave(d, r->w);
            close_rounds_after_leave(d, (int)(w - d->workers));
            colls_check(d);
            if (d->hx && d->left == d->nworkers && !d->left_told) {
                d->left_told = 1;
                bridge_left(d);
                bridge_recheck(d);
            }
            break;
        default:
            complete(d, r, KVS_EPROTO, "unknown request");
        }
    }
    finish_inits(d);
}

void evict(struct daemon *d, struct worker *w, const char *why)
{
    say(d, "evicting rank %d (pid %d): %s", w->rank, (int)w->pid, why);
    trace_worker(w, KVS__TR_EVICTED, why);
    atomic_store(&w->state, W_DEAD);
    /* The job fails first, with this message: releasing would fail it
     * with a vaguer one, for the pushes the worker leaves behind. */
    fail_job(d, KVS_EPEERDEAD, "rank %d (pid %d) was evicted: %s", w->rank, (int)w->pid, why);
    worker_release(d, w);
}

/* What kvsd keeps of a checked slot: its name copied only for a string key. */
static int req_args(struct rargs *a, const struct kvs__sqe *q, struct kvs__err *e)
{
    a->op = q->op;
    a->flags = q->flags;
    a->dtype = q->dtype;
    a->ndim = q->ndim;
    a->priority = q->priority;
    a->seq = q->seq;
    a->key_id = q->key_id;
    a->data_off = q->data_off;
    a->data_len = q->data_len;
    a->arg = q->arg;
    memcpy(a->shape, q->shape, sizeof a->shape[0] * (size_t)q->ndim);
    a->key_name = NULL;
    if ((q->flags & KVS__SQE_STRKEY) && !(a->key_name = strdup(q->key_name)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a key name");
    return 0;
}

/* Appends r to w's list call not yet ended. */
static void batch_add(struct worker *w, struct req *r)
{
    *w->batch_tail = r;
    w->batch_tail = &r->next;
    w->batch_len++;
}

/* Frees a list of requests that never ran (no answers). */
static void reqs_drop(struct daemon *d, struct req *r)
{
    while (r) {
        struct req *next = r->next;

        req_free(d, r);
        r = next;
    }
}

/* The requests of a table slot q of worker wi, read from its staging and
 * checked (proto.c), appended to its list call: all of them, or none. 0;
 * -ENOMEM; KVS_EPROTO when the table is bad (the worker is then evicted). */
static int read_table(struct daemon *d, int wi, const struct kvs__sqe *q, struct kvs__err *e)
{
    struct worker *w = &d->workers[wi];
    uint64_t res = q->arg * KVS__TAB_RESULT_BYTES;
    const unsigned char *p = w->staging + q->data_off;
    size_t left = (size_t)(q->data_len - res), used;
    struct req *head = NULL, **tail = &head;
    struct tab *t = malloc(sizeof *t);
    int rc = 0;

    if (!t)
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a table");
    *t = (struct tab){ .seq = q->seq, .res_off = q->data_off + q->data_len - res, .w = wi,
                       .n = (uint32_t)q->arg, .fail_idx = -1 };
    for (uint32_t i = 0; i < t->n && rc == 0; i++) {
        struct kvs__tab_entry te;
        struct req *r;

        if ((rc = kvs__tab_entry_decode(p, left, q->op, q->flags, w->staging_size, &te, &used,
                                        e)) != 0)
            break;
        if (!(r = req_new(d, wi))) {
            rc = kvs__fail(e, -ENOMEM, "kvsd: out of memory for a request");
            break;
        }
        p += used;
        left -= used;
        r->s = (struct rargs){ .op = q->op,
                               .flags = (uint8_t)((q->flags & KVS__SQE_VALUE)
                                                  | (te.flags & KVS__TAB_REMOTE
                                                         ? KVS__SQE_REMOTE : 0)),
                               .dtype = te.dtype, .ndim = te.ndim, .priority = q->priority,
                               .seq = q->seq, .key_id = te.key_id, .data_off = te.data_off,
                               .data_len = te.data_len };
        memcpy(r->s.shape, te.shape, sizeof te.shape[0] * (size_t)te.ndim);
        r->tab = t;
        r->idx = i;
        t->live++;
        *tail = r;
        tail = &r->next;
    }
    if (rc == 0 && left != 0)
        rc = kvs__fail(e, KVS_EPROTO, "request %" PRIu64 ": %zu bytes past its table's "
                       "entries", q->seq, left);
    if (rc != 0) {
        if (!head)
            free(t);
        reqs_drop(d, head);            /* the last one frees t */
        return rc;
    }
    *w->batch_tail = head;
    w->batch_tail = tail;
    w->batch_len += (int)t->n;
    return 0;
}

/* Reads every request a worker has posted. Returns 1 on progress. */
int drain(struct daemon *d, int wi)
{
    struct worker *w = &d->workers[wi];
    struct kvs__err e = { 0, "" };
    int err = 0, progress = 0;
    const void *slot;
    struct kvs__sqe q;

    while (w->state == W_LIVE && (slot = kvs__ring_peek(&w->sq, &err)) != NULL) {
        int rc;

        if (kvs__sqe_decode(slot, w->staging_size, &q, &e) != 0) {
            evict(d, w, e.msg);
            return 1;
        }
        if (q.flags & KVS__SQE_TABLE) {
            rc = read_table(d, wi, &q, &e);
        } else {
            struct req *r = req_new(d, wi);

            if (!r)
                rc = -ENOMEM;
            else if ((rc = req_args(&r->s, &q, &e)) != 0)
                req_free(d, r);
            else
                batch_add(w, r);
        }
        if (rc == KVS_EPROTO) {
            evict(d, w, e.msg);
            return 1;
        }
        if (rc != 0) {
            say(d, "out of memory reading rank %d's requests", w->rank);
            break;
        }
        kvs__ring_pop(&w->sq);
        progress = 1;
        if (w->batch_len > KVS__LIST_MAX) {
            evict(d, w, "a list call of more than KVS__LIST_MAX requests");
            return 1;
        }
        if (q.flags & KVS__SQE_LAST) {
            struct req *list = w->batch;

            w->batch = NULL;
            w->batch_tail = &w->batch;
            w->batch_len = 0;
            run_list(d, list);
        }
    }
    if (err)
        evict(d, w, "its request ring is corrupt");
    /* Room in its request ring matters only to a worker still posting a
     * list call: one whose list ended waits for completions instead. */
    if (progress && w->state == W_LIVE && w->batch)
        w->wake = 1;
    return progress;
}
