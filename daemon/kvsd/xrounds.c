/*
 * xrounds.c - sync rounds across the hosts of a job: a key's state across
 * hosts (struct xround, at the owner of a part), each host's sums of a
 * round to the parts' owners (PARTIAL), the owner applying a part once
 * every host still in the job has sent its sum, and the part's value back
 * to every host (VALUE), which ends the round there once it has every
 * part's. bridge.c says why the rounds go so, and hands this file their
 * messages.
 *
 * A round with a row-sparse push goes the same way with rows messages
 * (xrows.c makes and reads them): each owner gets only the rows of its
 * parts, and sends back only the rows its update changed.
 *
 * rounds.c tells it of a key's rounds (made, ready, freed) through
 * d->round_ops, which bridge_init registers. It must never take a message
 * from the links itself, nor touch an async push.
 *
 * Serve thread only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xrounds.h"
#include "answers.h"
#include "hostmsg.h"
#include "hosts.h"
#include "job.h"
#include "owners.h"
#include "req.h"
#include "rounds.h"
#include "xrows.h"

#include "kernels/array.h"

/* At the owner of a part of a key, the other hosts' sums of its open round. */
struct xround {
    uint64_t done;                     /* rounds of the part applied here */
    int n;                             /* the job's hosts */
    int ngot;
    int32_t priority;                  /* the highest of the sums' */
    uint8_t *got;                      /* [nhosts] */
    struct inmsg **msg;                /* [nhosts]: the message whose payload holds it */
    const void **data;                 /* [nhosts]: the sum, in msg's payload (rows: the
                                        * rows) */
    const int64_t **ids;               /* [nhosts]: a rows sum's ids, */
    int64_t *nnz;                      /* and how many (-1: a dense sum) */
    struct kvs__wire_msg key;          /* the key, its dtype and shape (no data) */
};

int xrounds_new(struct daemon *d, struct round *rd)
{
    /* Each part's arrays after the parts, in pointer-aligned blocks. */
    size_t n = (size_t)d->nhosts;
    size_t tail = (n * (3 * sizeof(void *) + sizeof(int64_t) + 1) + 7) & ~(size_t)7;
    int mine = 0;

    for (int p = 0; p < rd->nparts; p++)
        mine |= owners_part(d, rd, p) == d->me;
    if (!d->hx || !mine)
        return 0;
    if (!(rd->x = calloc((size_t)rd->nparts, sizeof *rd->x + tail)))
        return -ENOMEM;
    if (!d->sync && !(rd->fwd = calloc(2 * n, sizeof *rd->fwd)))
        return -ENOMEM;
    for (int p = 0; p < rd->nparts; p++) {
        struct xround *x = &rd->x[p];
        char *at = (char *)(rd->x + rd->nparts) + (size_t)p * tail;

        x->msg = (struct inmsg **)(void *)at;
        x->data = (const void **)(x->msg + n);
        x->ids = (const int64_t **)(x->data + n);
        x->nnz = (int64_t *)(void *)(x->ids + n);
        x->got = (uint8_t *)(x->nnz + n);
        x->n = (int)n;
        x->priority = INT32_MIN;
    }
    return 0;
}

static void xround_clear(struct xround *x)
{
    for (int h = 0; h < x->n; h++) {
        hostmsg_free(x->msg[h]);
        x->msg[h] = NULL;
        x->data[h] = NULL;
        x->ids[h] = NULL;
        x->nnz[h] = -1;
        x->got[h] = 0;
    }
    x->ngot = 0;
    x->priority = INT32_MIN;
}

void xrounds_free(struct round *rd)
{
    for (int p = 0; rd->x && p < rd->nparts; p++)
        xround_clear(&rd->x[p]);
    free(rd->x);
    rd->x = NULL;
    free(rd->fwd);
    rd->fwd = NULL;
    free(rd->xmsg);
    rd->xmsg = NULL;
    xrows_free(rd);
}

/* The open round has every part's value: it ends with the first part's
 * failure, if any. */
static void round_over(struct daemon *d, struct round *rd)
{
    char msg[KVS__MSG_MAX];
    int status = rd->xstatus;

    snprintf(msg, sizeof msg, "%s", rd->xmsg ? rd->xmsg : "");
    free(rd->xmsg);
    rd->xmsg = NULL;
    rd->xstatus = 0;
    memset(rd->pgot, 0, (size_t)rd->nparts);
    rd->inflight = 0;
    xrows_free(rd);                    /* every part of it is applied: its rows are done */
    rounds_finish(d, rd, status, msg);
}

/* A part of the open round ended with status: the round keeps the first
 * failure. */
static void note_part(struct round *rd, int status, const char *msg)
{
    if (status != 0 && rd->xstatus == 0) {
        rd->xstatus = status;
        rd->xmsg = strdup(msg ? msg : "");
    }
}

/* Part p of the open round has its value here (status 0), or failed. */
static void part_done(struct daemon *d, struct round *rd, int p, int status, const char *msg)
{
    rd->pgot[p] = 1;
    note_part(rd, status, msg);
    if (--rd->parts_left == 0)
        round_over(d, rd);
}

/* Every part this host owns has applied the round after rd's last (a host
 * is never a round ahead: the others send the next round's sums only once
 * every part's value of this one has come). */
static int own_parts_done(const struct daemon *d, const struct round *rd)
{
    for (int p = 0; p < rd->nparts; p++)
        if (owners_part(d, rd, p) == d->me && rd->x[p].done <= rd->done)
            return 0;
    return 1;
}

/* The optimizer's step that this host's parts of round `round` count as:
 * one more than the key's state had counted when the first of them was
 * applied, so that the parts of a round make one step, as a whole key's
 * update does (a host applies every part of a round before any of the
 * next: the others send the next round's sums only once they have every
 * part's value). */
static uint64_t round_step(struct daemon *d, struct round *rd, uint64_t round)
{
    if (rd->step_round != round) {
        rd->step_round = round;
        rd->step = kvs__engine_steps(d->eng, rd->entry) + 1;
    }
    return rd->step;
}

/* At the owner of part p: 1 while a host still in the job (this one's
 * workers included; local: their sum is in) has not sent its sum of the
 * part's open round. */
static int owner_waits(const struct daemon *d, const struct xround *x, int local)
{
    if (job_expected(d) > 0 && !local)
        return 1;                      /* this host's workers have not all pushed */
    if (!local && x->ngot == 0)
        return 1;                      /* nothing of this round anywhere yet */
    for (int h = 0; h < d->nhosts; h++)
        if (h != d->me && !d->host_out[h] && !x->got[h])
            return 1;
    return 0;
}

/* The sums of part p at its owner, from element lo on, into in[]: in host
 * order, this host's pushes in rank order in its place (the sums group by
 * host, but in the order of the ranks, whoever owns). *first, the first
 * push here; *prio, raised to theirs. Returns how many. */
static int owner_sums(struct daemon *d, struct round *rd, const struct xround *x, int local,
                      uint64_t lo, const void **in, const struct req **first, int32_t *prio)
{
    int k = 0;

    for (int h = 0; h < d->nhosts; h++) {
        if (h == d->me && local) {
            for (int w = 0; w < d->nworkers; w++)
                if (rd->contrib[w]) {
                    *first = *first ? *first : rd->contrib[w];
                    in[k++] = hostmsg_elem(rd, req_data(d, rd->contrib[w]), lo);
                    if (rd->contrib[w]->s.priority > *prio)
                        *prio = rd->contrib[w]->s.priority;
                }
        } else if (h != d->me && x->got[h]) {
            in[k++] = x->data[h];
        }
    }
    return k;
}

/* Part p's new value (status 0), or its failure, to the other hosts: the
 * key named as the first push here has it, else as the sums did. */
static void owner_tells(struct daemon *d, struct round *rd, const struct xround *x, int p,
                        const struct req *first, int32_t prio, int status, const char *msg)
{
    struct kvs__wire_msg m;
    struct frame *f;

    if (first) {
        hostmsg_key_of_req(&m, &first->s);
    } else {
        m = x->key;
        m.key.name = x->key.key.name ? m.name : NULL;
    }
    m.a = x->done;
    m.priority = prio;
    hostmsg_value(&m, rd, p, status, msg);
    if (!(f = hosts_frame_new(d, KVS__FRAME_VALUE, &m, NULL)))
        job_fail(d, -ENOMEM, "kvsd: out of memory sending a value");
    else
        hosts_post(d, f, HOSTS_IN);
}

/* 1 when part p's open round at its owner has rows: this host's sum, or
 * a host's message. */
static int owner_rows(const struct daemon *d, const struct round *rd, const struct xround *x,
                      int local)
{
    if (local && rd->xr)
        return 1;
    for (int h = 0; h < d->nhosts; h++)
        if (h != d->me && x->got[h] && x->nnz[h] >= 0)
            return 1;
    return 0;
}

/* The rows inputs of part p at its owner, in host order as owner_sums: a
 * rows sum as it came, a dense one (or a dense push here) as every row of
 * the part (all: their ids). Returns how many. */
static int owner_rows_in(struct daemon *d, struct round *rd, const struct xround *x, int p,
                         int local, const int64_t *all, struct kvs__rows_in *in,
                         const struct req **first, int32_t *prio)
{
    int64_t lo, n;
    uint64_t elo, en;
    int k = 0;

    xrows_part_rows(rd, p, &lo, &n);
    owners_part_range(rd, p, &elo, &en);
    for (int h = 0; h < d->nhosts; h++) {
        if (h == d->me && local) {
            for (int w = 0; w < d->nworkers; w++)
                if (rd->contrib[w]) {
                    *first = *first ? *first : rd->contrib[w];
                    if (!rd->xr)
                        in[k++] = (struct kvs__rows_in){
                            hostmsg_elem(rd, req_data(d, rd->contrib[w]), elo), all, n };
                    if (rd->contrib[w]->s.priority > *prio)
                        *prio = rd->contrib[w]->s.priority;
                }
            if (rd->xr)
                in[k++] = xrows_slice(rd, p);
        } else if (h != d->me && x->got[h]) {
            in[k++] = x->nnz[h] >= 0 ? (struct kvs__rows_in){ x->data[h], x->ids[h], x->nnz[h] }
                                     : (struct kvs__rows_in){ x->data[h], all, n };
        }
    }
    return k;
}

/* owner_check's update of a part with rows: the rows that changed go back
 * (rows messages), or under the dense rule the part's value. */
static int owner_apply_rows(struct daemon *d, struct round *rd, struct xround *x, int p,
                            int local, int32_t prio, struct kvs__err *e)
{
    const struct req *first = NULL;
    struct kvs__rows_in *in = malloc(sizeof *in * (size_t)(d->nworkers + d->nhosts));
    struct kvs__rows_union u = { 0 };
    struct kvs__wire_msg m;
    int64_t lo, n, *all;
    int k, rc;

    xrows_part_rows(rd, p, &lo, &n);
    if (!in || !(all = malloc(sizeof *all * (size_t)(n ? n : 1)))) {
        free(in);
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory closing a round");
    }
    for (int64_t j = 0; j < n; j++)
        all[j] = lo + j;
    k = owner_rows_in(d, rd, x, p, local, all, in, &first, &prio);
    rc = xrows_apply(d, rd, p, k, in, round_step(d, rd, x->done + 1), &u, e);
    x->done++;
    if (rc == 0 && kvs__engine_rows_rule(d->eng) != KVS__ROWS_DENSE) {
        if (first) {
            hostmsg_key_of_req(&m, &first->s);
        } else {
            m = x->key;
            m.key.name = x->key.key.name ? m.name : NULL;
        }
        m.a = x->done;
        m.priority = prio;
        if (xrows_tell(d, rd, p, &m, &u) != 0)
            job_fail(d, -ENOMEM, "kvsd: out of memory sending a value");
    } else {
        owner_tells(d, rd, x, p, first, prio, rc, e->msg);
    }
    kvs__rows_union_free(&u);
    free(all);
    free(in);
    return rc;
}

/* At the owner of part p: when every host still in the job has its sum of
 * the part in (this host's being its round's pushes), the engine applies
 * them all as one push to the part, and its value (or the failure) goes to
 * the others. */
static void owner_check(struct daemon *d, struct round *rd, int p)
{
    struct xround *x = &rd->x[p];
    struct kvs__err e = { 0, "" };
    const struct req *first = NULL;
    const void **in;
    uint64_t lo, n;
    int32_t prio = x->priority;
    int local = rd->inflight && rd->done == x->done;   /* this host's sum is in */
    int k, rc;

    if (owner_waits(d, x, local))
        return;
    if (owner_rows(d, rd, x, local)) {
        rc = owner_apply_rows(d, rd, x, p, local, prio, &e);
        goto told;
    }
    if (!(in = malloc(sizeof *in * (size_t)(d->nworkers + d->nhosts)))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory closing a round");
        return;
    }
    owners_part_range(rd, p, &lo, &n);
    k = owner_sums(d, rd, x, local, lo, in, &first, &prio);
    rc = rounds_apply_part(d, rd, rd->nparts > 1 ? p : -1, k, in, NULL,
                           round_step(d, rd, x->done + 1), &e);
    free(in);
    x->done++;
    owner_tells(d, rd, x, p, first, prio, rc, e.msg);
told:
    xround_clear(x);
    if (!local) {                      /* no worker here: its parts are the round */
        note_part(rd, rc, e.msg);
        if (own_parts_done(d, rd))
            round_over(d, rd);
        return;
    }
    /* This host's parts are all applied: the workers get their staging
     * back now. */
    if (--rd->own_left == 0)
        for (int w = 0; w < d->nworkers; w++)
            if (rd->contrib[w])
                answer_lending_ends(d, rd->contrib[w], 1);
    part_done(d, rd, p, rc, e.msg);
}

/* The sums of part p of a round's pushes, to the part's owner: the
 * pushes' words as they came when all are 2bit (for the owner to decode
 * and sum), else the sum of their values. */
static int send_part(struct daemon *d, struct round *rd, int p, const void **in, int k,
                     int coded, int32_t prio, const struct req *first)
{
    struct kvs__wire_msg m;
    struct frame *f;
    uint64_t lo, n;
    void *sum;

    owners_part_range(rd, p, &lo, &n);
    hostmsg_key_of_req(&m, &first->s);
    hostmsg_set_part(&m, rd, p);
    m.a = rd->done + 1;
    m.priority = prio;
    m.pieces = coded == k ? (uint32_t)k : 0;
    m.len = m.pieces ? m.pieces * kvs__wire_piece_bytes(n) : n * kvs_dtype_size(rd->dtype);
    if (!(f = hosts_frame_new(d, KVS__FRAME_PARTIAL, &m, &sum)))
        return -ENOMEM;
    if (m.pieces) {
        unsigned char *q = sum;

        /* lo is a multiple of 16 float32 (kvs__wire_part, rows or not): a
         * whole word. */
        for (int w = 0; w < d->nworkers; w++)
            if (rd->contrib[w]) {
                const uint32_t *words = rd->contrib[w]->coded;

                kvs__wire_piece_put(q, kvs__arg_threshold(rd->contrib[w]->s.arg),
                                    words + lo / 16, n);
                q += kvs__wire_piece_bytes(n);
            }
    } else {
        const void *part[MAX_WORKERS];

        for (int i = 0; i < k; i++)
            part[i] = hostmsg_elem(rd, in[i], lo);
        kvs__sum(rd->dtype, sum, part, k, n, d->o.threads);
    }
    hosts_post(d, f, owners_part(d, rd, p));
    return 0;
}

void xrounds_ready(struct daemon *d, struct round *rd)
{
    const struct req *first = NULL;
    const void *in[MAX_WORKERS];
    struct kvs__err e = { 0, "" };
    int32_t prio = INT32_MIN;
    int k = 0, coded = 0, rows;

    rd->ready = 0;
    rd->inflight = 1;
    rd->parts_left = rd->nparts;
    rd->own_left = 0;
    for (int w = 0; w < d->nworkers; w++)
        if (rd->contrib[w]) {
            first = first ? first : rd->contrib[w];
            in[k++] = req_data(d, rd->contrib[w]);
            coded += rd->contrib[w]->coded != NULL;
            if (rd->contrib[w]->s.priority > prio)
                prio = rd->contrib[w]->s.priority;
        }
    if ((rows = xrows_sum(d, rd, &e)) < 0) {
        job_fail(d, rows, "%s", e.msg);
        return;
    }
    /* The other owners' parts go first, one by one, so that the wire
     * carries each while this host sums the next, then applies its own. */
    for (int p = 0; p < rd->nparts; p++) {
        struct kvs__wire_msg m;

        if (rows) {
            hostmsg_key_of_req(&m, &first->s);
            m.priority = prio;
        }
        if (owners_part(d, rd, p) == d->me) {
            rd->own_left++;
        } else if (rows ? xrows_send(d, rd, p, KVS__FRAME_PARTIAL, &m) != 0
                        : send_part(d, rd, p, in, k, coded, prio, first) != 0) {
            job_fail(d, -ENOMEM, "kvsd: out of memory for a round's sum");
            return;
        }
    }
    if (rd->own_left == 0) {
        /* The sums are made: the workers get their staging back now. */
        for (int w = 0; w < d->nworkers; w++)
            if (rd->contrib[w])
                answer_lending_ends(d, rd->contrib[w], 1);
        return;
    }
    /* The round may end at the last of them; its parts are in a row, so
     * no later p is this host's. */
    for (int p = 0; p < rd->nparts; p++)
        if (owners_part(d, rd, p) == d->me)
            owner_check(d, rd, p);
}

void xrounds_restored(struct round *rd)
{
    for (int p = 0; rd->x && p < rd->nparts; p++)
        rd->x[p].done = rd->done;
}

int xrounds_on_partial(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                       struct round *rd)
{
    int p = hostmsg_part(m);
    struct xround *x = rd->x ? &rd->x[p] : NULL;
    const void *data;
    float *decoded;

    if (!d->sync) {
        hostmsg_broke(d, im->host, "a dist_sync round's sum came to a dist_async host");
        return 0;
    }
    if (owners_part(d, rd, p) != d->me || !x || m->a != x->done + 1) {
        hostmsg_broke(d, im->host, "a sum of round %" PRIu64 " of part %d of a key that %s owns "
                      "(round %" PRIu64 " is open)", m->a, p, hosts_name(d, owners_part(d, rd, p)),
                      (x ? x->done : rd->done) + 1);
        return 0;
    }
    if (x->got[im->host]) {
        hostmsg_broke(d, im->host, "two sums for one round");
        return 0;
    }
    if (m->rows) {
        data = m->row_data;
        decoded = NULL;
    } else if (hostmsg_values(rd, m, &data, &decoded) != 0) {
        job_fail(d, -ENOMEM, "kvsd: out of memory for a round");
        return 0;
    }
    if (decoded) {                     /* the sum replaces the pieces */
        free(im->pay);
        im->pay = (unsigned char *)decoded;
    }
    if (x->ngot == 0) {
        x->key = *m;
        x->key.key.name = m->key.name ? x->key.name : NULL;
        x->key.data = NULL;
        x->key.len = 0;
        x->key.pieces = 0;
        x->key.rows = 0;
        x->key.rest_zero = 0;
        x->key.nnz = 0;
        x->key.ids = NULL;
        x->key.row_data = NULL;
    }
    x->got[im->host] = 1;
    x->msg[im->host] = im;
    x->data[im->host] = data;
    x->ids[im->host] = m->rows ? m->ids : NULL;
    x->nnz[im->host] = m->rows ? (int64_t)m->nnz : -1;
    x->ngot++;
    if (m->priority > x->priority)
        x->priority = m->priority;
    rounds_open_link(d, rd);
    owner_check(d, rd, p);
    return 1;
}

void xrounds_on_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                      struct round *rd, const char *text)
{
    int p = hostmsg_part(m);

    if (!rd->inflight || m->a != rd->done + 1 || rd->pgot[p]) {
        if (job_expected(d) == 0)
            return;                    /* every worker here has left: nothing waits on it */
        hostmsg_broke(d, im->host, "a value of round %" PRIu64 " of part %d (round %" PRIu64
                      " is %s)", m->a, p, rd->done + 1,
                      !rd->inflight ? "not sent yet" : rd->pgot[p] ? "done there" : "open");
        return;
    }
    /* A value held by the snapshot being written is copied aside first. */
    if (m->status == 0)
        daemon_keep_value(d, rd);
    if (m->status == 0 && m->rows)
        xrows_write(rd, m);
    else if (m->status == 0)
        hostmsg_write_value(rd, m);
    part_done(d, rd, p, m->status, text);
}

void xrounds_recheck(struct daemon *d)
{
    for (struct round *rd = d->open, *next; rd; rd = next) {
        next = rd->next;               /* owner_check takes rd, and only rd, off the list */
        for (int p = 0; p < rd->nparts; p++)
            if (owners_part(d, rd, p) == d->me)
                owner_check(d, rd, p);
    }
}
