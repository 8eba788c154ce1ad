/*
 * answers.c - how kvsd answers the workers' requests (serve thread only):
 * by a completion on the worker's CQ, or, in a table, by the request's
 * result in the table and one completion for the whole table. A sync push
 * is answered early (HELD: taken) and its data handed back later (RELEASE)
 * once kvsd reads it no more. Completions a full CQ has no room for wait
 * in the worker's backlog, and every worker that got some is woken once
 * per serve pass. Request records themselves are req.c's.
 *
 * It must never post to a worker that is no longer LIVE, and never decide
 * when a request ends: requests.c, rounds.c, collectives.c and bridge.c do.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answers.h"
#include "arena.h"
#include "devbufs.h"
#include "remote.h"
#include "req.h"
#include "rows.h"
#include "tracing.h"

#include "kernels/array.h"
#include "kernels/compress.h"
#include "device/mem.h"

/* Completions a backlog keeps room for once it is empty again. */
#define BACKLOG_KEEP 4096

/* Keeps c at the end of w's backlog, growing it by doubling. */
static int backlog_add(struct worker *w, const struct kvs__cqe *c)
{
    struct held_cqe *h;

    if (w->backlog_len == w->backlog_cap) {
        size_t cap = w->backlog_cap ? 2 * w->backlog_cap : 64;
        struct held_cqe *b = malloc(sizeof *b * cap);

        if (!b)
            return -1;
        for (size_t i = 0; i < w->backlog_len; i++)
            b[i] = w->backlog[(w->backlog_head + i) & (w->backlog_cap - 1)];
        free(w->backlog);
        w->backlog = b;
        w->backlog_cap = cap;
        w->backlog_head = 0;
    }
    h = &w->backlog[(w->backlog_head + w->backlog_len) & (w->backlog_cap - 1)];
    *h = (struct held_cqe){ .seq = c->seq, .value_off = c->value_off,
                            .value_len = c->value_len, .round = c->round,
                            .status = c->status, .flags = c->flags };
    if (c->msg[0] && !(h->msg = strdup(c->msg)))
        return -1;
    w->backlog_len++;
    return 0;
}

/* Frees what w's backlog holds. */
void answer_backlog_free(struct worker *w)
{
    for (size_t i = 0; i < w->backlog_len; i++)
        free(w->backlog[(w->backlog_head + i) & (w->backlog_cap - 1)].msg);
    free(w->backlog);
    w->backlog = NULL;
    w->backlog_head = w->backlog_len = w->backlog_cap = 0;
}

static void post(struct daemon *d, int wi, const struct kvs__cqe *c)
{
    struct worker *w = &d->workers[wi];
    int err = 0;
    void *slot;

    if (w->state != W_LIVE)
        return;
    if (!w->backlog_len && (slot = kvs__ring_reserve(&w->cq, &err)) != NULL) {
        kvs__cqe_encode(c, slot);
        kvs__ring_commit(&w->cq);
        w->wake = 1;
        return;
    }
    if (backlog_add(w, c) != 0)
        say(d, "out of memory for a completion to rank %d", w->rank);
}

void answer_wake_workers(struct daemon *d)
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

void answer_flush_backlog(struct daemon *d, struct worker *w)
{
    int err = 0, posted = 0;
    void *slot;

    (void)d;
    while (w->backlog_len && (slot = kvs__ring_reserve(&w->cq, &err)) != NULL) {
        struct held_cqe *h = &w->backlog[w->backlog_head];
        struct kvs__cqe c = { .seq = h->seq, .status = h->status, .flags = h->flags,
                              .value_off = h->value_off, .value_len = h->value_len,
                              .round = h->round };

        if (h->msg) {
            snprintf(c.msg, sizeof c.msg, "%s", h->msg);
            free(h->msg);
        }
        kvs__cqe_encode(&c, slot);
        kvs__ring_commit(&w->cq);
        w->backlog_head = (w->backlog_head + 1) & (w->backlog_cap - 1);
        w->backlog_len--;
        posted = 1;
    }
    if (!w->backlog_len && w->backlog_cap > BACKLOG_KEEP)
        answer_backlog_free(w);               /* a long list's completions: not kept for later */
    if (!w->backlog_len)
        w->backlog_head = 0;
    if (posted)
        w->wake = 1;
}

/* The arena's copy of a value kept on a GPU, brought up to date. */
static int host_copy(struct daemon *d, struct round *rd, struct kvs__err *e)
{
    int rc;

    if (!rd->stale)
        return 0;
    arena_seq_begin(rd->value);
    if ((rc = kvs__mem_copy(rd->value, KVS_HOST, rd->dvalue, rd->device, rd->bytes,
                            d->o.threads, e)) != 0
        || (rc = kvs__mem_finish(e)) != 0)
        kvs__mem_finish(NULL);
    arena_seq_end(rd->value);
    rd->stale = rc != 0;
    return rc;
}

/* Hands r's worker the key's value: its offset in the arena in c, or for
 * a device pull (KVS__SQE_DEVICE) the value written into its buffer. */
static int value_cqe(struct daemon *d, struct round *rd, const struct req *r,
                     struct kvs__cqe *c, struct kvs__err *e)
{
    int rc;

    if (r->s.op == KVS__OP_PULL && (r->s.flags & KVS__SQE_DEVICE)) {
        if ((rc = devbuf_write(d, r, rd->dvalue, rd->device, e)) != 0)
            return rc;
        d->st.device_pulls++;
    } else {
        if ((rc = host_copy(d, rd, e)) != 0)
            return rc;
        c->value_off = (uint64_t)((unsigned char *)rd->value - d->arena);
        c->value_len = rd->bytes;
        if (r->written)                /* its out holds it already (remote.c) */
            c->flags |= KVS__CQE_WRITTEN;
    }
    c->round = rd->done;
    d->st.pulls++;
    if (r->s.op == KVS__OP_PULL && (r->s.flags & KVS__SQE_ROWS)) {
        /* Only the rows asked for count: gathered into the worker's
         * staging here, or copied by the worker out of the arena. */
        uint64_t rows = r->s.arg < (uint64_t)rd->nrows ? r->s.arg : (uint64_t)rd->nrows;

        c->round = rd->meta_off;
        rows_gather(d, rd, r, &c->flags);
        d->st.rows_pulled += rows;
        rd->rows_pulled += rows;
        d->st.bytes_pulled += rows * rd->row_bytes;
        return 0;
    }
    d->st.bytes_pulled += rd->bytes;
    return 0;
}

/* A request of a table is answered: its result goes into the table in
 * staging (while the worker is there to read it), and once every request
 * of the table is, the table's one completion, with the first failure's
 * status and message. */
static void tab_answer(struct daemon *d, struct req *r, const struct kvs__cqe *c,
                       const char *msg)
{
    struct tab *t = r->tab;
    struct worker *w = &d->workers[t->w];

    if (w->state == W_LIVE && w->seg)
        kvs__tab_result_encode(w->staging + t->res_off + (uint64_t)r->idx * KVS__TAB_RESULT_BYTES,
                               c->status, c->value_off);
    if (c->status != 0 && (t->fail_idx < 0 || (int32_t)r->idx < t->fail_idx)) {
        t->fail_idx = (int32_t)r->idx;
        t->fail_status = c->status;
        snprintf(t->fail_msg, sizeof t->fail_msg, "%s", msg ? msg : "");
    }
    if (++t->answered == t->n) {
        struct kvs__cqe done = { .seq = t->seq, .status = t->fail_idx < 0 ? 0 : t->fail_status };

        if (t->fail_idx >= 0)
            snprintf(done.msg, sizeof done.msg, "%s", t->fail_msg);
        post(d, t->w, &done);
    }
}

/* kvsd no longer reads r's data from staging: the worker gets it back now
 * by a release (release non-zero), or later with r's completion. A table's
 * data goes back once none of its requests' is read any more. */
void answer_lending_ends(struct daemon *d, struct req *r, int release)
{
    struct kvs__cqe c = { .flags = KVS__CQE_RELEASE };

    if (!r->lent)
        return;
    r->lent = 0;
    if (r->tab) {
        if (--r->tab->lent > 0 || !release)
            return;
        c.seq = r->tab->seq;
    } else {
        if (!release)
            return;
        c.seq = r->s.seq;
    }
    post(d, r->w, &c);
}

/* Answers r (not freeing it): with its completion, or its result in its
 * table. value: the round whose value the answer hands over, or NULL. */
void answer_req(struct daemon *d, struct req *r, int status, const char *msg, struct round *value)
{
    struct kvs__cqe c = { .seq = r->s.seq, .status = status };
    struct kvs__err e = { 0, "" };

    if (value && status == 0 && (status = value_cqe(d, value, r, &c, &e)) != 0) {
        c.status = status;
        msg = e.msg;
        d->st.failed++;
    }
    if (r->tab) {
        answer_lending_ends(d, r, 0);         /* the table's completion returns it */
        tab_answer(d, r, &c, msg);
        return;
    }
    if (status && msg)
        snprintf(c.msg, sizeof c.msg, "%s", msg);
    post(d, r->w, &c);
}

/* A row-sparse push that succeeded counts its rows, as pushed: the
 * job's and its key's. */
static void count_rows_pushed(struct daemon *d, const struct req *r)
{
    if (!(r->s.flags & KVS__SQE_ROWS))
        return;
    d->st.rows_pushed += r->s.arg;
    if (r->rd)
        r->rd->rows_pushed += r->s.arg;
}

void answer_complete(struct daemon *d, struct req *r, int status, const char *msg)
{
    struct round *value = NULL;

    if (status != 0) {
        d->st.failed++;
        if (r->t_in)
            trace_error(d, r, status, msg);
    } else if (r->s.op == KVS__OP_PUSH) {
        d->st.pushes++;
        d->st.bytes_pushed += r->s.data_len;
        count_rows_pushed(d, r);
        /* pushpull: the value the push made, without a pull's round trip */
        if (r->s.flags & KVS__SQE_VALUE)
            value = r->rd;
    }
    answer_req(d, r, status, msg, value);
    req_free(d, r);
}

/* Answers a sync push as soon as it is taken: its call returns while the
 * data stays lent until the round closes (KVS__CQE_HELD). A table is
 * answered so once all of its requests are taken. */
void answer_ack(struct daemon *d, struct req *r)
{
    struct kvs__cqe c = { .seq = r->s.seq, .flags = KVS__CQE_HELD };

    r->acked = 1;
    d->st.pushes++;
    d->st.bytes_pushed += r->s.data_len;
    count_rows_pushed(d, r);
    if (r->tab && ++r->tab->acked < r->tab->n)
        return;
    if (r->tab)
        r->tab->held = 1;
    post(d, r->w, &c);
}

/* Ends a request: one answered early gets its data released, if kvsd
 * still borrowed it, and nothing else (its call has returned); any other
 * gets its completion. A request of a table not answered as a whole yet
 * (some of it was taken, some failed first) is answered like any other:
 * the table's completion comes once every request has ended. */
void answer_finish(struct daemon *d, struct req *r, int status, const char *msg)
{
    if (!r->acked) {
        answer_complete(d, r, status, msg);
        return;
    }
    if (r->tab && !r->tab->held) {     /* its table was not answered yet */
        answer_req(d, r, status, msg, NULL);
    } else {
        if (status != 0)
            d->st.failed++;
        answer_lending_ends(d, r, 1);
    }
    req_free(d, r);
}

/* Copies a lent push's data out of its worker's staging and releases it
 * there at once, whether its call has returned or still waits (a pushpull):
 * its completion, later, returns nothing more (the worker counts each
 * request's data back once). */
int answer_unlend(struct daemon *d, struct req *r)
{
    int rc;

    if (!r->lent)
        return 0;
    if (remote_in_worker(r)) {
        if ((rc = remote_copy(d, r)) != 0)
            return rc;
    } else {
        if (!(r->copy = malloc(r->s.data_len ? r->s.data_len : 1)))
            return -ENOMEM;
        memcpy(r->copy, d->workers[r->w].staging + r->s.data_off, r->s.data_len);
    }
    answer_lending_ends(d, r, 1);
    return 0;
}

void answer_complete_list(struct daemon *d, struct req *r, int status, const char *msg)
{
    while (r) {
        struct req *next = r->next;

        answer_finish(d, r, status, msg);
        r = next;
    }
}
