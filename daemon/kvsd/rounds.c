/*
 * rounds.c - one host's sync rounds and the pending queue. Pulls and sync
 * pushes wait in the pending queue (priority high first, then arrival); a
 * sync push joins its key's open round, which keeps the request and not a
 * copy of its data: the data stays lent in the worker's staging area until
 * the round closes (or a SPILL, or the worker leaving, makes kvsd copy it).
 * When every worker still in the job has pushed, the round hands all of
 * them to the engine as one push of the key repeated, and the engine sums
 * them in one pass straight into the stored value (with an optimizer, a
 * chunk at a time right beside the update): (N+1)*S bytes of memory
 * traffic for N workers and S bytes (plus the optimizer's state), not a
 * running sum's 3*N*S or so. The rounds a serve pass fills close together.
 *
 * Across hosts a ready round goes up to xrounds.c, and a key's rounds are
 * made and freed with their state across hosts, through d->round_ops,
 * which bridge.c registers: this file never calls it by name. A failing
 * job empties the open rounds through the hook this file registers.
 *
 * Serve thread only. It must never read a push's data after its round
 * closed, nor decide when a job fails (job.c does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rounds.h"
#include "answers.h"
#include "arena.h"
#include "devbufs.h"
#include "job.h"
#include "owners.h"
#include "remote.h"
#include "req.h"
#include "rows.h"
#include "tracing.h"

void rounds_open_link(struct daemon *d, struct round *rd)
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
        answer_finish(d, r, status, msg);
    }
    rd->nlive = 0;
}

/* The job failed: every open round's pushes end with its failure. */
static void fail_rounds(struct daemon *d, int status, const char *msg)
{
    while (d->open)
        round_empty(d, d->open, status, msg);
}

void rounds_init(struct daemon *d)
{
    static const struct fail_hook hook = { NULL, fail_rounds };

    job_hook(d, &hook);
}

/* Copies every push of worker wi whose data is still lent (waiting in
 * pending or in a round), releasing its staging; with remote, those read
 * out of its memory too (it leaves), else they stay (they take no
 * staging). 0, or the first error (-ENOMEM, a read's) with the pushes
 * copied so far released. */
int rounds_spill(struct daemon *d, int wi, int remote)
{
    int rc;

    for (struct req *r = d->pending; r; r = r->next)
        if (r->w == wi && (remote || !remote_in_worker(r)) && (rc = answer_unlend(d, r)) != 0)
            return rc;
    for (struct round *rd = d->open; rd; rd = rd->next) {
        struct req *r = rd->contrib[wi];

        if (r && (remote || !remote_in_worker(r)) && (rc = answer_unlend(d, r)) != 0)
            return rc;
    }
    return 0;
}

/* The key's rounds, made at its first push or pull. The value's place
 * never changes in kvsd (no reinit, no updater swapping buffers), so the
 * round keeps it: a request that knows its round needs no key lookup. */
struct round *rounds_of(struct daemon *d, const struct kvs__entry_info *info, kvs_key_t key)
{
    struct round *r = *info->front;
    size_t n, np;

    if (r)
        return r;
    /* One allocation: a list of many keys makes a round for each. */
    n = (size_t)d->nworkers;
    np = (size_t)owners_nparts(d, info->bytes);
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
    r->nrows = info->ndim > 0 ? info->shape[0] : 0;
    r->row_bytes = r->nrows > 0 ? info->bytes / (uint64_t)r->nrows : 0;
    r->entry = info->entry;
    r->owner = owners_key(d, key);
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
    r->ops = d->round_ops;
    if (r->ops && r->ops->made(d, r) != 0) {
        free(r);
        return NULL;
    }
    *info->front = r;
    return r;
}

void rounds_free(void *p)
{
    struct round *r = p;

    /* The engine frees a round with its key's entry, only when the engine
     * goes, after job_fail_waiting has emptied every round; the open list
     * stays sound even so. */
    open_unlink(r);
    if (r->ops)
        r->ops->freed(r);
    devcopies_free(r);
    free(r);
}

/* Into the pending queue: after every request of its priority or higher,
 * so that arrival order holds within a priority. Every request before
 * h->p has h->priority or higher, so a request of no higher priority (all
 * of a list, usually) is placed from there: a list of n requests costs one
 * walk of the queue, not n. h is valid only while nothing else changes
 * the queue. */
void rounds_queue(struct daemon *d, struct req *r, struct rounds_place *h)
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
    struct remote_writes *wr = NULL;
    const struct kvs__sink **sinks = NULL;
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
                                            rd->device != KVS_HOST ? dev + n : NULL, NULL,
                                            NULL };
        for (int w = 0; w < d->nworkers; w++) {
            if (rd->contrib[w]) {
                in[n] = req_data(d, rd->contrib[w]);   /* NULL: still in w's memory */
                remote |= remote_in_worker(rd->contrib[w]);
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
        /* Outs they named get each block of the sum as it is made. */
        if ((sinks = malloc(sizeof *sinks * nr))
            && (wr = remote_writes_make(d, rds, nr, sinks)) != NULL)
            for (size_t i = 0; i < nr; i++)
                items[i].sink = sinks[i];
    }
    for (size_t i = 0; i < nr; i++) {
        daemon_keep_value(d, rds[i]);
        arena_seq_begin(rds[i]->value);
    }
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
        arena_seq_end(rds[i]->value);
        rds[i]->stale |= rds[i]->device != KVS_HOST;
    }
    remote_writes_end(d, wr, rc);
    free(sinks);
    free(items);
    free(src);
    return rc;
}

int rounds_apply_part(struct daemon *d, struct round *rd, int p, int k, const void **in, const int *dev,
               uint64_t step, struct kvs__err *e)
{
    struct kvs__push_item it = { rd->entry, k, in, rd->device != KVS_HOST ? dev : NULL, NULL,
                                  NULL };
    int64_t t = kvs__tr_begin();
    int rc;

    daemon_keep_value(d, rd);
    arena_seq_begin(rd->value);
    if (p < 0) {
        rc = kvs__engine_push_entries(d->eng, 1, &it, e);
    } else {
        uint64_t first, n;

        owners_part_range(rd, p, &first, &n);
        rc = kvs__engine_push_range(d->eng, &it, (size_t)first, (size_t)n, step, e);
    }
    arena_seq_end(rd->value);
    rd->stale |= rd->device != KVS_HOST;
    if (t) {
        rd->t_sum0 = t;
        rd->t_sum1 = kvs__tr_now();
    }
    return rc;
}

/* A round's pushes were answered when taken: a failed update reaches the
 * workers through their pulls of the key, which wait for this round. */
void rounds_finish(struct daemon *d, struct round *rd, int status, const char *msg)
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

/* Closes rd alone when a push in it is row-sparse (rows.c): 1 when it
 * did. */
static int close_rows(struct daemon *d, struct round *rd)
{
    struct req *reqs[rd->ncontrib > 0 ? rd->ncontrib : 1];
    struct kvs__err e = { 0, "" };
    int k = 0, rc;

    for (int w = 0; w < d->nworkers && k < rd->ncontrib; w++)
        if (rd->contrib[w])
            reqs[k++] = rd->contrib[w];
    if (!rows_any(reqs, k))
        return 0;
    rc = rows_apply(d, rd, reqs, k, &e);
    rounds_finish(d, rd, rc, e.msg);
    return 1;
}

/* Closes the nr rounds rds[], whose every push is in: together, so that
 * the sums of many keys share kvsd's threads. If that fails (an optimizer
 * refusing an integer key, memory), the engine has changed nothing: each
 * round is then tried alone and gets its own status, so that one key's
 * error is not another's. A round with a row-sparse push closes alone,
 * first (close_rows); rds[] keeps the others, in another order. */
static void close_ready(struct daemon *d, struct round **rds, size_t nr)
{
    struct kvs__err e = { 0, "" };
    int64_t t = kvs__tr_begin();
    int status, lost = 0;

    for (size_t i = 0; t && i < nr; i++)
        rds[i]->t_ready = t;
    if (d->hx) {                       /* across hosts: through the keys' owners */
        for (size_t i = 0; i < nr; i++)
            d->round_ops->ready(d, rds[i]);
        return;
    }
    for (size_t i = 0; i < nr;)
        if (close_rows(d, rds[i]))
            rds[i] = rds[--nr];
        else
            i++;
    status = apply_rounds(d, rds, nr, &e);
    for (size_t i = 0; i < nr; i++) {
        /* A push that could not be read out of its worker's memory failed
         * the job (its key's value is lost): nothing is tried again. */
        if (job_remote_check(d) != 0 || lost) {
            lost = 1;
            rounds_finish(d, rds[i], d->failed, d->fail_msg);
        } else if (status != 0 && nr > 1) {
            struct kvs__err one = { 0, "" };

            rounds_finish(d, rds[i], apply_rounds(d, &rds[i], 1, &one), one.msg);
        } else {
            rounds_finish(d, rds[i], status, e.msg);
        }
    }
    job_remote_check(d);                   /* the last round tried alone */
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
    if (rd->ncontrib == 0 || rd->inflight || rd->nlive < job_expected(d))
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

void rounds_cache_free(struct daemon *d)
{
    free(d->ready);
    d->ready = NULL;
    d->nready = d->ready_cap = 0;
}

/* One pass over pending requests; returns 1 when something completed or
 * a push joined a round. */
int rounds_serve_pending(struct daemon *d)
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
                answer_complete(d, r, rd->fail_status, rd->fail_msg);
            } else {
                answer_req(d, r, 0, NULL, rd);
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
            rounds_open_link(d, rd);
            rd->t_open = kvs__now_ns();
        }
        rd->contrib[r->w] = r;
        rd->last[r->w] = rd->done + 1;
        rd->queued[r->w]--;
        rd->nlive += d->workers[r->w].state == W_LIVE;
        progress = 1;
        if (!rd->ready && rd->nlive >= job_expected(d))
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
void rounds_after_leave(struct daemon *d, int wi)
{
    for (struct round *rd = d->open; rd; rd = rd->next)
        if (rd->contrib[wi])
            rd->nlive--;
    for (struct round *rd = d->open, *next; rd; rd = next) {
        next = rd->next;               /* closing takes rd, and only rd, off the list */
        close_round(d, rd);
    }
}
