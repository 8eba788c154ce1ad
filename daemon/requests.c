/*
 * requests.c - what the serve thread does with the workers' requests. It
 * drains each worker's request ring into list calls and checks a whole list
 * against the store before any of it takes effect; it runs pulls and sync
 * pushes through the pending queue (priority high first, then arrival),
 * async pushes at once, and collectives (init of a key, barrier,
 * set_optimizer) once every worker still in the job has arrived; it posts
 * completions, keeping those a full CQ has no room for in a backlog; it
 * evicts a worker whose ring or request is bad, and fails the job when a
 * worker dies, is evicted, or leaves with a push unfinished.
 *
 * A sync push leaves the pending queue for its key's open round, which
 * keeps the request and not a copy of its data: the data stays in the
 * worker's staging area, which a worker leaves alone until its push
 * completes. When every worker still in the job has pushed, the round
 * hands all of them to the engine as one push of the key repeated, and the
 * engine sums them in one pass straight into the stored value (or into its
 * scratch buffer for the optimizer): (N+1)*S bytes of memory traffic for N
 * workers and S bytes, not a running sum's 3*N*S or so.
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
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "kvsd.h"
#include "shm.h"

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
        w->wake = 1;
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

void wake_workers(struct daemon *d)
{
    int nslots = atomic_load(&d->nslots);

    for (int i = 0; i < nslots; i++) {
        struct worker *w = &d->workers[i];

        if (w->wake) {
            w->wake = 0;
            if (w->seg && (w->state == W_LIVE || w->state == W_LEFT))
                kvs__bell_ring(w->bell);
        }
    }
}

void flush_backlog(struct daemon *d, struct worker *w)
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
        w->wake = 1;
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

/* ---- the open rounds --------------------------------------------------- */

static void open_link(struct daemon *d, struct round *rd)
{
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
    for (int i = 0; i < d->nworkers && rd->ncontrib > 0; i++) {
        struct req *r = rd->contrib[i];

        if (!r)
            continue;
        rd->contrib[i] = NULL;
        rd->last[i] = rd->done;
        rd->ncontrib--;
        complete(d, r, status, msg);
    }
}

/* 1 when a push of worker wi waits, in pending or in a round: its data is
 * in wi's staging area. */
static int holds_push(const struct daemon *d, int wi)
{
    for (const struct req *r = d->pending; r; r = r->next)
        if (r->w == wi && r->s.op == KVS__OP_PUSH)
            return 1;
    for (const struct round *rd = d->open; rd; rd = rd->next)
        if (rd->contrib[wi])
            return 1;
    return 0;
}

/* ---- workers: arrival, leaving, death --------------------------------- */

static int expected(const struct daemon *d)
{
    return d->nworkers - d->left;
}

/* Fails every waiting request: pulls and pushes in pending, pushes in
 * rounds, and those in collectives. */
void fail_waiting(struct daemon *d, int status, const char *msg)
{
    complete_list(d, d->pending, status, msg);
    d->pending = NULL;
    while (d->open)
        round_empty(d, d->open, status, msg);
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
void fail_job(struct daemon *d, const char *fmt, ...)
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

void worker_release(struct daemon *d, struct worker *w)
{
    int wi = (int)(w - d->workers);

    complete_list(d, w->batch, KVS_EPEERDEAD, "worker gone");
    w->batch = NULL;
    /* A round must not keep data from a segment that is about to go, and a
     * round without this worker's push cannot close honestly: the job
     * fails. (A dead or evicted worker's job has failed already; one that
     * left cleanly had nothing waiting.) */
    if (holds_push(d, wi))
        fail_job(d, "rank %d (pid %d) left the job with a push unfinished", w->rank,
                 (int)w->pid);
    for (struct req **p = &d->pending; *p;) {
        struct req *r = *p;

        if (r->w == wi) {
            *p = r->next;
            complete(d, r, KVS_EPEERDEAD, "worker gone");
        } else {
            p = &r->next;
        }
    }
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
    r->contrib = calloc((size_t)d->nworkers, sizeof *r->contrib);
    r->last = calloc((size_t)d->nworkers, sizeof *r->last);
    if (!r->contrib || !r->last) {
        free(r->contrib);
        free(r->last);
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
    free(r->contrib);
    free(r->last);
    free(r);
}

/* Into the pending queue: after every request of its priority or higher,
 * so that arrival order holds within a priority. */
static void insert_pending(struct daemon *d, struct req *r)
{
    struct req **p = &d->pending;

    while (*p && (*p)->s.priority >= r->s.priority)
        p = &(*p)->next;
    r->next = *p;
    *p = r;
}

/* Pushes n values of one key (keys[] repeats it) through the engine,
 * under the stored value's seqlock: the engine sums them in one pass
 * straight into the value, or into its scratch buffer for the optimizer. */
static int apply(struct daemon *d, int n, const kvs_key_t *keys, const kvs_array_t *vals,
                 struct kvs__err *e)
{
    struct kvs__entry_info info;
    int rc;

    if ((rc = kvs__engine_lookup(d->eng, keys[0], &info, e)) != 0)
        return rc;
    seq_begin(info.value);
    rc = kvs__engine_push(d->eng, n, keys, vals, e);
    seq_end(info.value);
    return rc;
}

/* Applies the pushes of the rounds listed through ready_next, each read
 * from its worker's staging area, as one engine push of every key (each
 * repeated once per worker, in rank order: the sum does not depend on who
 * came first), under each value's seqlock: the engine sums them as one job
 * over its threads, straight into the values (into its scratch for the
 * optimizer). All or nothing, as every engine call. */
static int apply_rounds(struct daemon *d, struct round *list, struct kvs__err *e)
{
    struct kvs__entry_info info;
    kvs_key_t *keys;
    kvs_array_t *vals;
    void **values;
    int total = 0, nr = 0, n = 0, rc = 0;

    for (struct round *rd = list; rd; rd = rd->ready_next, nr++)
        total += rd->ncontrib;
    keys = malloc(sizeof *keys * (size_t)total);
    vals = malloc(sizeof *vals * (size_t)total);
    values = malloc(sizeof *values * (size_t)nr);
    if (!keys || !vals || !values)
        rc = kvs__fail(e, -ENOMEM, "kvsd: out of memory closing a round");
    nr = 0;
    for (struct round *rd = list; rd && rc == 0; rd = rd->ready_next) {
        for (int i = 0; i < d->nworkers; i++) {
            const struct req *r = rd->contrib[i];

            if (!r)
                continue;
            keys[n] = sqe_key(&r->s);
            vals[n++] = sqe_array(&r->s, d->workers[r->w].staging + r->s.data_off);
        }
        if ((rc = kvs__engine_lookup(d->eng, keys[n - 1], &info, e)) == 0)
            values[nr++] = info.value;
    }
    if (rc == 0) {
        for (int i = 0; i < nr; i++)
            seq_begin(values[i]);
        rc = kvs__engine_push(d->eng, n, keys, vals, e);
        for (int i = 0; i < nr; i++)
            seq_end(values[i]);
    }
    free(keys);
    free(vals);
    free(values);
    return rc;
}

static void finish_round(struct daemon *d, struct round *rd, int status, const char *msg)
{
    rd->ready_next = NULL;
    rd->done++;
    d->st.rounds++;
    round_empty(d, rd, status, msg);
}

/* Closes the rounds listed through ready_next, whose every push is in:
 * together, so that the sums of many keys share kvsd's threads. If that
 * fails (an optimizer refusing an integer key, memory), the engine has
 * changed nothing: each round is then tried alone and gets its own status,
 * so that one key's error is not another's. */
static void close_ready(struct daemon *d, struct round *list)
{
    struct kvs__err e = { 0, "" };
    int status = apply_rounds(d, list, &e), alone = status != 0 && list->ready_next;

    for (struct round *rd = list, *next; rd; rd = next) {
        next = rd->ready_next;
        if (alone) {
            struct kvs__err one = { 0, "" };

            rd->ready_next = NULL;
            finish_round(d, rd, apply_rounds(d, rd, &one), one.msg);
        } else {
            finish_round(d, rd, status, e.msg);
        }
    }
}

/* Closes a key's open round when every worker still in the job has pushed
 * to it. 1 when closed. */
static int close_round(struct daemon *d, struct round *rd)
{
    if (rd->ncontrib == 0 || rd->ncontrib < expected(d))
        return 0;
    rd->ready_next = NULL;
    close_ready(d, rd);
    return 1;
}

/* One pass over pending requests; returns 1 when something completed or
 * a push joined a round. */
int serve_pending(struct daemon *d)
{
    struct kvs__err e = { 0, "" };
    struct round *ready = NULL;
    int progress = 0;

    for (struct req **p = &d->pending; *p;) {
        struct req *r = *p;
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
        if (r->s.op != KVS__OP_PUSH) {
            p = &r->next;
            continue;
        }
        /* A sync push: into its key's open round, unless it is already in. */
        if (!(rd = round_of(d, &info))) {
            *p = r->next;
            complete(d, r, -ENOMEM, "kvsd: out of memory for a round");
            progress = 1;
            continue;
        }
        if (rd->contrib[r->w]) {       /* already in the open round: wait for the next */
            p = &r->next;
            continue;
        }
        *p = r->next;
        r->next = NULL;
        if (rd->ncontrib++ == 0)
            open_link(d, rd);
        rd->contrib[r->w] = r;
        rd->last[r->w] = rd->done + 1;
        progress = 1;
        if (!rd->ready && rd->ncontrib >= expected(d)) {
            rd->ready = 1;
            rd->ready_next = ready;
            ready = rd;
        }
    }
    /* The rounds this pass filled close together (a list call of many keys
     * arrives in one pass); what waited on them goes in the next pass,
     * which starts from the top again, in priority order. */
    if (ready)
        close_ready(d, ready);
    return progress;
}

/* Every sync round whose missing workers have all left can close now. */
static void close_rounds_after_leave(struct daemon *d)
{
    for (struct round *rd = d->open, *next; rd; rd = next) {
        next = rd->next;               /* closing takes rd, and only rd, off the list */
        close_round(d, rd);
    }
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

            rc = r->s.op == KVS__OP_PUSH ? kvs__engine_check_push(d->eng, sqe_key(&r->s), &a, &e)
                                         : kvs__engine_check(d->eng, sqe_key(&r->s), &a, &e);
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
        /* After the list's CLOSE, or a failure of the job it caused,
         * nothing more of it runs. */
        if (w->state != W_LIVE) {
            complete(d, r, KVS_EPROTO, "a request after the worker's close");
            continue;
        }
        if (d->failed && r->s.op != KVS__OP_CLOSE) {
            complete(d, r, KVS_EPEERDEAD, d->fail_msg);
            continue;
        }
        switch (r->s.op) {
        case KVS__OP_PUSH:
            if (d->sync) {
                insert_pending(d, r);
            } else {
                kvs_key_t key = sqe_key(&r->s);
                kvs_array_t a = sqe_array(&r->s, w->staging + r->s.data_off);

                rc = apply(d, 1, &key, &a, &e);
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
            /* A worker's calls return before it closes, so a push of it
             * still waiting is a worker that does not keep the protocol:
             * the round it is in cannot complete honestly. */
            if (holds_push(d, r->w))
                fail_job(d, "rank %d (pid %d) closed with a push unfinished", w->rank,
                         (int)w->pid);
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
    /* The job fails first, with this message: releasing would fail it
     * with a vaguer one, for the pushes the worker leaves behind. */
    fail_job(d, "rank %d (pid %d) was evicted: %s", w->rank, (int)w->pid, why);
    worker_release(d, w);
}

/* Reads every request a worker has posted. Returns 1 on progress. */
int drain(struct daemon *d, int wi)
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
    /* Room in its request ring matters only to a worker still posting a
     * list call: one whose list ended waits for completions instead. */
    if (progress && w->state == W_LIVE && w->batch)
        w->wake = 1;
    return progress;
}
