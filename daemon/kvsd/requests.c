/*
 * requests.c - what the serve thread does with the workers' requests. It
 * drains each worker's request ring into list calls, checks a whole list
 * against the store before any of it takes effect, then dispatches each
 * request: pulls and sync pushes into the pending queue (rounds.c), async
 * pushes at once (across hosts through bridge.c), inits and barriers to
 * collectives.c, saves and loads of states to states.c (or combined.c),
 * a worker's close and its spills, a worker that gave up waiting (the job
 * fails, with what it waited for in words). answers.c posts the
 * completions. A table slot (proto.h) becomes one request per entry, each
 * answered into the table, the table once for all (struct tab).
 *
 * A sync push is answered at once (KVS__CQE_HELD: taken), so that a push
 * never waits for the other workers; its data stays lent in the worker's
 * staging area until its round closes (rounds.c).
 *
 * Serve thread only. It must never wait on a worker, never use a request
 * slot before proto/slots.c has decoded and checked it, and never read a socket,
 * accept a connection or answer kvsctl (accept.c and control.c do). It
 * evicts a worker whose ring or request is bad (job.c).
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

#include "requests.h"
#include "answers.h"
#include "bridge.h"
#include "collectives.h"
#include "combined.h"
#include "devbufs.h"
#include "job.h"
#include "remote.h"
#include "req.h"
#include "rounds.h"
#include "rows.h"
#include "states.h"
#include "tracing.h"
#include "waits.h"

#include "kernels/array.h"
#include "shm/shm.h"

static int set_optimizer(struct daemon *d, const struct req *r, struct kvs__err *e)
{
    const struct worker *w = &d->workers[r->w];
    char spec[4096], who[32];
    int rc;

    memcpy(spec, w->staging + r->s.data_off, r->s.data_len);
    spec[r->s.data_len] = '\0';
    snprintf(who, sizeof who, "rank %d", w->rank);
    rc = states_set_optimizer(d, spec, who, e);
    if (rc == 0 && d->hx)
        bridge_optimizer(d, spec);
    return rc;
}

/* A worker gave up waiting for request arg (its deadline passed): it is
 * told what that request waits for, and the job fails with that cause, so
 * that the others learn why too instead of a bare "rank 0 died" later. */
static void gave_up(struct daemon *d, struct req *r)
{
    const struct worker *w = &d->workers[r->w];
    char why[KVS__MSG_MAX];

    /* From its answer on, kvsd writes nothing into the worker: the call
     * that gave up returns once it has it (remote.c). */
    atomic_store(&d->workers[r->w].nowrite, 1);
    waits_explain(d, r->w, r->s.arg, why, sizeof why);
    if (!why[0])
        snprintf(why, sizeof why, "kvsd holds nothing of it waiting");
    job_fail(d, KVS_ETIMEDOUT, "rank %d gave up waiting (KVS_TIMEOUT): %s", w->rank, why);
    answer_complete(d, r, KVS_ETIMEDOUT, why);
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
    if (d->sync && !d->hx && r->rd->device == KVS_HOST) {
        r->out = r->tab ? 0 : r->s.arg;    /* its out, which kvsd may write */
        return 0;
    }
    if ((rc = remote_copy(d, r)) == -ENOMEM)
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a push");
    if (rc != 0)
        return kvs__fail(e, KVS_EBADARG, "the value could not be read out of the worker's "
                         "memory (%s)", strerror(-rc));
    return 0;
}

/* A row-sparse push or pull (rows.c): a push's row ids copied out of
 * staging and checked with its dtype and shape by the engine, a pull's ids
 * copied and its key looked up; then its key's rounds, and what kvsd does not take refused. */
static int check_rows(struct daemon *d, struct req *r, struct kvs__err *e)
{
    struct kvs__entry_info info;
    kvs_row_sparse_t v;
    int rc;

    if (r->s.op == KVS__OP_PUSH) {
        if ((rc = rows_take_ids(d, r, e)) != 0)
            return rc;
        v = rows_value(d, r);
        rc = kvs__engine_check_rows(d->eng, req_key(&r->s), &v, &info, e);
    } else {
        /* A pull's ids, for rows_gather: taken now, while the worker waits. */
        if (r->s.data_len && (rc = rows_take_ids(d, r, e)) != 0)
            return rc;
        rc = kvs__engine_lookup(d->eng, req_key(&r->s), &info, e);
    }
    if (rc == 0 && !(r->rd = rounds_of(d, &info, req_key(&r->s))))
        rc = kvs__fail(e, -ENOMEM, "kvsd: out of memory for a round");
    return rc != 0 ? rc : rows_check(d, r, &info, e);
}

/* A push or a pull of a list, checked against the store before any
 * request of the list takes effect: its key's rounds found (made), and its
 * data taken where it must be now (a 2bit push decoded, a device push
 * copied onto its key's device, a remote push read or kept for its
 * round). 0, or the error (in e) that fails the whole list. */
static int check_one(struct daemon *d, struct req *r, struct kvs__err *e)
{
    kvs_array_t a = req_array(&r->s, NULL);
    struct kvs__entry_info info;
    int dev, rc;

    if (r->s.flags & KVS__SQE_ROWS)
        return check_rows(d, r, e);
    rc = r->s.op == KVS__OP_PUSH
             ? kvs__engine_check_push(d->eng, req_key(&r->s), &a, &info, e)
             : kvs__engine_check(d->eng, req_key(&r->s), &a, &info, e);
    if (rc == 0 && !(r->rd = rounds_of(d, &info, req_key(&r->s))))
        rc = kvs__fail(e, -ENOMEM, "kvsd: out of memory for a round");
    if (rc == 0 && r->rd->cb)
        rc = kvs__fail(e, KVS_EPROTO, "the workers combine this key's rounds "
                       "(KVS_COMBINE): kvsd takes no push or pull of it");
    if (rc == 0 && (r->s.flags & KVS__SQE_2BIT))
        rc = req_decode_2bit(d, r, e);
    if (rc == 0 && (r->s.flags & KVS__SQE_DEVICE) && r->s.op == KVS__OP_PULL)
        rc = devbuf_device(d, r, &dev, e);
    if (rc == 0 && (r->s.flags & KVS__SQE_REMOTE))
        rc = remote_take(d, r, e);
    if (rc == 0 && (r->s.flags & KVS__SQE_DEVICE) && r->s.op == KVS__OP_PUSH) {
        if ((rc = devcopy_new(r->rd, &r->copy, e)) == 0) {
            r->copy_dev = r->rd->device;
            rc = devbuf_read(d, r, r->copy, r->copy_dev, e);
        }
        d->st.device_pushes += rc == 0;
    }
    return rc;
}

/* A push: applied at once (dist_async; across hosts through the owners),
 * or (dist_sync) answered as taken and queued in its key's round, its
 * data still lent. */
static void start_push(struct daemon *d, struct req *r, struct rounds_place *at,
                       struct kvs__err *e)
{
    const void *in;
    int dev, rc;

    if (!d->sync) {
        if (d->hx) {
            bridge_async_push(d, r);
            return;
        }
        if (r->s.flags & KVS__SQE_ROWS) {
            rc = rows_apply(d, r->rd, &r, 1, e);
        } else {
            in = req_data(d, r);
            dev = req_device(r);
            rc = rounds_apply_part(d, r->rd, -1, 1, &in, &dev, 0, e);
        }
        answer_complete(d, r, rc, e->msg);
        return;
    }
    /* Queued in its key's round until it joins one. */
    r->rd->queued[r->w]++;
    r->lent = 1;
    if (r->tab)
        r->tab->lent++;
    rounds_queue(d, r, at);
    if (!(r->s.flags & KVS__SQE_VALUE))
        answer_ack(d, r);
    if (r->copy)                       /* a 2bit or device push: copied already */
        answer_lending_ends(d, r, 1);
}

/* The worker's CLOSE (r): it leaves the job. */
static void close_worker(struct daemon *d, struct req *r)
{
    int wi = r->w;
    struct worker *w = &d->workers[wi];

    atomic_store(&w->nowrite, 1);      /* its outs are copied, if it reads them at all */
    /* Its pushes still waiting count in their rounds, as they would have
     * had it stayed: kvsd keeps copies, since the worker's segment goes. */
    if (rounds_spill(d, wi, 1) != 0)
        job_fail(d, KVS_EPEERDEAD, "rank %d (pid %d) left, and kvsd could not keep its last "
                 "pushes (no memory, or its memory unreadable)", w->rank, (int)w->pid);
    answer_complete(d, r, 0, NULL);    /* frees r */
    atomic_store(&w->state, W_LEFT);
    d->left++;
    say(d, "rank %d left the job", w->rank);
    trace_worker(w, KVS__TR_LEFT, NULL);
    bridge_worker_left(d, wi);
}

/* Starts request r of a checked list, its worker still in the job; at:
 * where the list's last push or pull went into the pending queue. */
static void start(struct daemon *d, struct req *r, struct rounds_place *at, struct kvs__err *e)
{
    int rc;

    switch (r->s.op) {
    case KVS__OP_PUSH:
        start_push(d, r, at, e);
        break;
    case KVS__OP_PULL:
        rounds_queue(d, r, at);
        break;
    case KVS__OP_INIT:
    case KVS__OP_BARRIER:
    case KVS__OP_COMMIT:
        colls_arrive(d, r);
        break;
    case KVS__OP_SET_OPTIMIZER:
        rc = set_optimizer(d, r, e);
        answer_complete(d, r, rc, e->msg);
        break;
    case KVS__OP_EXPLAIN:
        gave_up(d, r);
        break;
    case KVS__OP_REGISTER:
        rc = devbuf_register(d, r, e);
        answer_complete(d, r, rc, e->msg);
        break;
    case KVS__OP_SPILL:
        rc = rounds_spill(d, r->w, 0);
        answer_complete(d, r, rc, rc ? "kvsd: out of memory copying pushes out of staging" : NULL);
        break;
    case KVS__OP_SAVE_STATES:
    case KVS__OP_LOAD_STATES:
        if ((rc = text_op(d, r, e)) != 1)  /* 1: it waits for the other hosts */
            answer_complete(d, r, rc, e->msg);
        break;
    case KVS__OP_CLOSE:
        close_worker(d, r);
        break;
    default:
        answer_complete(d, r, KVS_EPROTO, "unknown request");
    }
}

/* A whole list call has arrived: check every request against the store
 * before any of them takes effect, then start them. */
static void run_list(struct daemon *d, struct req *list)
{
    struct kvs__err e = { 0, "" };
    struct rounds_place at = { NULL, 0 };
    int rc = 0;

    if (d->failed && list->s.op != KVS__OP_CLOSE && list->s.op != KVS__OP_EXPLAIN) {
        answer_complete_list(d, list, d->failed, d->fail_msg);
        return;
    }
    for (struct req *r = list; r && rc == 0; r = r->next)
        if (r->s.op == KVS__OP_PUSH || r->s.op == KVS__OP_PULL)
            rc = check_one(d, r, &e);
    if (rc != 0) {
        answer_complete_list(d, list, rc, e.msg);
        return;
    }
    while (list) {
        struct req *r = list;

        list = r->next;
        r->next = NULL;
        /* Only pushes and pulls go into the queue: anything else may
         * change it, and with it the place of the last insertion. */
        if (r->s.op != KVS__OP_PUSH && r->s.op != KVS__OP_PULL)
            at.p = NULL;
        /* After the list's CLOSE, or a failure of the job it caused,
         * nothing more of it runs. */
        if (d->workers[r->w].state != W_LIVE)
            answer_complete(d, r, KVS_EPROTO, "a request after the worker's close");
        else if (d->failed && r->s.op != KVS__OP_CLOSE && r->s.op != KVS__OP_EXPLAIN)
            answer_complete(d, r, d->failed, d->fail_msg);
        else
            start(d, r, &at, &e);
    }
    colls_finish_inits(d);
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
 * checked (proto/slots.c), appended to its list call: all of them, or none. 0;
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
int requests_drain(struct daemon *d, int wi)
{
    struct worker *w = &d->workers[wi];
    struct kvs__err e = { 0, "" };
    int err = 0, progress = 0;
    const void *slot;
    struct kvs__sqe q;

    while (w->state == W_LIVE && (slot = kvs__ring_peek(&w->sq, &err)) != NULL) {
        int rc;

        if (kvs__sqe_decode(slot, w->staging_size, &q, &e) != 0) {
            job_evict(d, w, e.msg);
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
            job_evict(d, w, e.msg);
            return 1;
        }
        if (rc != 0) {
            say(d, "out of memory reading rank %d's requests", w->rank);
            break;
        }
        kvs__ring_pop(&w->sq);
        progress = 1;
        if (w->batch_len > KVS__LIST_MAX) {
            job_evict(d, w, "a list call of more than KVS__LIST_MAX requests");
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
        job_evict(d, w, "its request ring is corrupt");
    /* Room in its request ring matters only to a worker still posting a
     * list call: one whose list ended waits for completions instead. */
    if (progress && w->state == W_LIVE && w->batch)
        w->wake = 1;
    return progress;
}
