/*
 * bridge.c - what the messages between the hosts of a job do to kvsd's
 * rounds and keys (the links themselves are hosts.c's; collectives.c
 * takes the collectives' messages).
 *
 * Every key has one owner host (owners_key: a hash of the key, so that
 * keys spread evenly and every host agrees without telling); a key above
 * KVS__SPLIT_BYTES is split in parts of at most KVS__PART_BYTES
 * (kvs__wire_part), each host owning an equal block of them in a row from
 * the key's owner on (the rule is src/proto/shard.c's, which kvsctl plan models
 * a job's traffic by), and each part goes as a key of its own would: its
 * sums, its update, its value, its state. Parts stream: a host sends each
 * part's sum as soon as it is made, and an owner applies a part and sends
 * its value as soon as every host's sum of it is in. In a sync
 * round each host sums its own workers' pushes first (rounds.c's
 * round, as on one host) and sends that sum to the owner (PARTIAL), which
 * waits for the sum of every host still in the job, then runs the engine's
 * push once on them all: the optimizer, whose state lives at the owner
 * only, sees the global sum. The new value goes back to every host
 * (VALUE), which writes it into its own arena under the value's seqlock
 * and lets the round's pulls go. A host sends a key's next round only once
 * the value of the last has come back (every part's), so that the owner
 * never holds more than one round of a part; each part counts its own
 * rounds at its owner, since a host may send the next round's sum of one
 * part before the owner has every part of the last. In dist_async a push
 * of a key another host owns goes to the owner (FORWARD, a part to each
 * part's owner) and is answered by the value it made, which every host
 * gets too.
 *
 * A message naming a key this host has not stored yet (its init's DONE is
 * still on its way from host 0, on another link) waits in d->deferred
 * until the key comes. A message that breaks these rules (a round out of
 * turn, a key another host owns) fails the job, naming the host.
 *
 * rounds.c tells this file of its rounds (made, ready, freed) through
 * d->round_ops, and job.c of a failing job through a fail hook, both
 * registered by bridge_init: they sit below it and never call it by name.
 *
 * Serve thread only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bridge.h"
#include "answers.h"
#include "arena.h"
#include "collectives.h"
#include "hosts.h"
#include "job.h"
#include "owners.h"
#include "req.h"
#include "rounds.h"
#include "states.h"

#include "kernels/array.h"
#include "kernels/compress.h"

/* At the owner of a part of a key, the other hosts' sums of its open round. */
struct xround {
    uint64_t done;                     /* rounds of the part applied here */
    int n;                             /* the job's hosts */
    int ngot;
    int32_t priority;                  /* the highest of the sums' */
    uint8_t *got;                      /* [nhosts] */
    struct inmsg **msg;                /* [nhosts]: the message whose payload holds it */
    const void **data;                 /* [nhosts]: the sum, in msg's payload */
    struct kvs__wire_msg key;          /* the key, its dtype and shape (no data) */
};

static void msg_free(struct inmsg *m)
{
    if (m) {
        free(m->pay);
        free(m);
    }
}

/* Where element i of rd's value, or of a push to it, lies. */
static const void *elem(const struct round *rd, const void *data, uint64_t i)
{
    return (const char *)data + i * kvs_dtype_size(rd->dtype);
}

/* The part of a message: 0 for a key in one part. */
static int msg_part(const struct kvs__wire_msg *m)
{
    return m->nparts ? (int)m->part : 0;
}

/* m names part p of rd's key. */
static void set_part(struct kvs__wire_msg *m, const struct round *rd, int p)
{
    m->part = rd->nparts > 1 ? (uint32_t)p : 0;
    m->nparts = rd->nparts > 1 ? (uint32_t)rd->nparts : 0;
}

/* A message's key, dtype and shape from a request's. */
static void key_of_req(struct kvs__wire_msg *m, const struct rargs *s)
{
    memset(m, 0, sizeof *m);
    m->key = req_key(s);
    m->dtype = s->dtype;
    m->ndim = s->ndim;
    memcpy(m->shape, s->shape, sizeof m->shape[0] * (size_t)s->ndim);
}

/* m, naming part p of a key, as a VALUE: the part's value, or (status !=
 * 0) msg, which names no dtype or shape. */
static void value_msg(struct kvs__wire_msg *m, const struct round *rd, int p, int status,
                      const char *msg)
{
    uint64_t first, n;

    set_part(m, rd, p);
    m->pieces = 0;
    m->status = status;
    if (status == 0) {
        owners_part_range(rd, p, &first, &n);
        m->data = elem(rd, rd->value, first);
        m->len = n * kvs_dtype_size(rd->dtype);
        return;
    }
    m->data = msg;
    m->len = strlen(msg);
    m->ndim = 0;
    m->dtype = 0;
}

/* A host broke the rules: the job fails, naming it. */
static void host_broke(struct daemon *d, int h, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void host_broke(struct daemon *d, int h, const char *fmt, ...)
{
    char why[KVS__MSG_MAX - 64];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    job_fail(d, KVS_EPROTO, "%s broke the protocol: %s", hosts_name(d, h), why);
}

/* ---- sync rounds -------------------------------------------------------- */

/* Makes rd's state across hosts (0, or -ENOMEM). */
static int bridge_round_new(struct daemon *d, struct round *rd)
{
    /* Each part's arrays after the parts, in pointer-aligned blocks. */
    size_t n = (size_t)d->nhosts, tail = (n * (2 * sizeof(void *) + 1) + 7) & ~(size_t)7;
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
        x->got = (uint8_t *)(x->data + n);
        x->n = (int)n;
        x->priority = INT32_MIN;
    }
    return 0;
}

static void xround_clear(struct xround *x)
{
    for (int h = 0; h < x->n; h++) {
        msg_free(x->msg[h]);
        x->msg[h] = NULL;
        x->data[h] = NULL;
        x->got[h] = 0;
    }
    x->ngot = 0;
    x->priority = INT32_MIN;
}

/* Frees rd's state across hosts (what waits there for other hosts). */
static void bridge_round_free(struct round *rd)
{
    for (int p = 0; rd->x && p < rd->nparts; p++)
        xround_clear(&rd->x[p]);
    free(rd->x);
    rd->x = NULL;
    free(rd->fwd);
    rd->fwd = NULL;
    free(rd->xmsg);
    rd->xmsg = NULL;
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

/* At the owner of part p: when every host still in the job has its sum of
 * the part in (this host's being its round's pushes), the engine applies
 * them all as one push to the part, and its value (or the failure) goes to
 * the others. */
static void owner_check(struct daemon *d, struct round *rd, int p)
{
    struct xround *x = &rd->x[p];
    struct kvs__err e = { 0, "" };
    struct kvs__wire_msg m;
    const struct req *first = NULL;
    const void **in;
    uint64_t lo, n;
    int32_t prio = x->priority;
    int local = rd->inflight && rd->done == x->done;   /* this host's sum is in */
    int k = 0, rc;

    if (job_expected(d) > 0 && !local)
        return;                        /* this host's workers have not all pushed */
    if (!local && x->ngot == 0)
        return;                        /* nothing of this round anywhere yet */
    for (int h = 0; h < d->nhosts; h++)
        if (h != d->me && !d->host_out[h] && !x->got[h])
            return;
    if (!(in = malloc(sizeof *in * (size_t)(d->nworkers + d->nhosts)))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory closing a round");
        return;
    }
    owners_part_range(rd, p, &lo, &n);
    /* In host order, this host's pushes in rank order in its place: the
     * sums group by host, but in the order of the ranks, whoever owns. */
    for (int h = 0; h < d->nhosts; h++) {
        if (h == d->me && local) {
            for (int w = 0; w < d->nworkers; w++)
                if (rd->contrib[w]) {
                    first = first ? first : rd->contrib[w];
                    in[k++] = elem(rd, req_data(d, rd->contrib[w]), lo);
                    if (rd->contrib[w]->s.priority > prio)
                        prio = rd->contrib[w]->s.priority;
                }
        } else if (h != d->me && x->got[h]) {
            in[k++] = x->data[h];
        }
    }
    rc = rounds_apply_part(d, rd, rd->nparts > 1 ? p : -1, k, in, NULL, round_step(d, rd, x->done + 1),
                    &e);
    free(in);
    x->done++;
    if (first) {
        key_of_req(&m, &first->s);
    } else {
        m = x->key;
        m.key.name = x->key.key.name ? m.name : NULL;
    }
    m.a = x->done;
    m.priority = prio;
    value_msg(&m, rd, p, rc, e.msg);
    {
        struct frame *f = hosts_frame_new(d, KVS__FRAME_VALUE, &m, NULL);

        if (!f)
            job_fail(d, -ENOMEM, "kvsd: out of memory sending a value");
        else
            hosts_post(d, f, HOSTS_IN);
    }
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
    key_of_req(&m, &first->s);
    set_part(&m, rd, p);
    m.a = rd->done + 1;
    m.priority = prio;
    m.pieces = coded == k ? (uint32_t)k : 0;
    m.len = m.pieces ? m.pieces * kvs__wire_piece_bytes(n) : n * kvs_dtype_size(rd->dtype);
    if (!(f = hosts_frame_new(d, KVS__FRAME_PARTIAL, &m, &sum)))
        return -ENOMEM;
    if (m.pieces) {
        unsigned char *q = sum;

        /* lo is a multiple of 16 float32 (kvs__wire_part): a whole word. */
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
            part[i] = elem(rd, in[i], lo);
        kvs__sum(rd->dtype, sum, part, k, n, d->o.threads);
    }
    hosts_post(d, f, owners_part(d, rd, p));
    return 0;
}

/* A round whose every local push is in, across hosts: its sum goes to the
 * owner (or waits there for the other hosts'). */
static void bridge_round_ready(struct daemon *d, struct round *rd)
{
    const struct req *first = NULL;
    const void *in[MAX_WORKERS];
    int32_t prio = INT32_MIN;
    int k = 0, coded = 0;

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
    /* The other owners' parts go first, one by one, so that the wire
     * carries each while this host sums the next, then applies its own. */
    for (int p = 0; p < rd->nparts; p++) {
        if (owners_part(d, rd, p) == d->me) {
            rd->own_left++;
        } else if (send_part(d, rd, p, in, k, coded, prio, first) != 0) {
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

/* The round of a message's key, its dtype and shape checked against the
 * stored key's (a failed update's value names neither: its key alone is
 * looked up), and its parts against the key's. 0; 1 when the key is not
 * stored here yet; -1 when the job failed (the host named). */
static int msg_round(struct daemon *d, const struct inmsg *im, const struct kvs__wire_msg *m,
                     struct round **out)
{
    kvs_array_t a = { .dtype = m->dtype, .ndim = m->ndim, .device = KVS_HOST };
    struct kvs__entry_info info;
    struct kvs__err e = { 0, "" };
    int rc;

    memcpy(a.shape, m->shape, sizeof a.shape[0] * (size_t)m->ndim);
    if (im->type == KVS__FRAME_VALUE && m->status != 0)
        rc = kvs__engine_lookup(d->eng, m->key, &info, &e);
    else
        rc = kvs__engine_check(d->eng, m->key, &a, &info, &e);
    if (rc == KVS_ENOKEY)
        return 1;
    if (rc != 0) {
        host_broke(d, im->host, "a %s: %s", kvs__frame_name(im->type), e.msg);
        return -1;
    }
    if (!(*out = rounds_of(d, &info, m->key))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory for a round");
        return -1;
    }
    if ((*out)->nparts != (m->nparts ? (int)m->nparts : 1)) {
        host_broke(d, im->host, "a %s in %" PRIu32 " parts of a key of %d",
                   kvs__frame_name(im->type), m->nparts ? m->nparts : 1, (*out)->nparts);
        return -1;
    }
    return 0;
}

/* The sum of a message's 2bit pieces (float32) of n elements, malloc'd;
 * NULL without memory. In the pieces' order, as the host's workers' ranks. */
static float *decode_pieces(const struct kvs__wire_msg *m, uint64_t n)
{
    float *sum;

    if (!(sum = calloc(n ? n : 1, sizeof *sum)))
        return NULL;
    for (uint32_t i = 0; i < m->pieces; i++) {
        const uint32_t *words;
        float thr = kvs__wire_piece_get(m, n, i, &words);

        kvs__gc_2bit_dequantize_add(words, sum, n, thr);
    }
    return sum;
}

/* A message's data as values of its part: its own, or (2bit pieces) their
 * sum in *decoded (malloc'd). 0, or -ENOMEM. */
static int msg_values(const struct round *rd, const struct kvs__wire_msg *m,
                      const void **data, float **decoded)
{
    uint64_t lo, n;

    *decoded = NULL;
    *data = m->data;
    if (!m->pieces)
        return 0;
    owners_part_range(rd, msg_part(m), &lo, &n);
    if (!(*decoded = decode_pieces(m, n)))
        return -ENOMEM;
    *data = *decoded;
    return 0;
}

/* A host's sum of a part of a round, at the part's owner: 1 when kept (im
 * is the round's now, freed with it), 0 when refused. */
static int on_partial(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                      struct round *rd)
{
    int p = msg_part(m);
    struct xround *x = rd->x ? &rd->x[p] : NULL;
    const void *data;
    float *decoded;

    if (!d->sync) {
        host_broke(d, im->host, "a dist_sync round's sum came to a dist_async host");
        return 0;
    }
    if (owners_part(d, rd, p) != d->me || !x || m->a != x->done + 1) {
        host_broke(d, im->host, "a sum of round %" PRIu64 " of part %d of a key that %s owns "
                   "(round %" PRIu64 " is open)", m->a, p, hosts_name(d, owners_part(d, rd, p)),
                   (x ? x->done : rd->done) + 1);
        return 0;
    }
    if (x->got[im->host]) {
        host_broke(d, im->host, "two sums for one round");
        return 0;
    }
    if (msg_values(rd, m, &data, &decoded) != 0) {
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
    }
    x->got[im->host] = 1;
    x->msg[im->host] = im;
    x->data[im->host] = data;
    x->ngot++;
    if (m->priority > x->priority)
        x->priority = m->priority;
    rounds_open_link(d, rd);
    owner_check(d, rd, p);
    return 1;
}

/* The value a message carries, written into its part of the key's own. */
static void write_value(struct round *rd, const struct kvs__wire_msg *m)
{
    uint64_t lo, n;

    owners_part_range(rd, msg_part(m), &lo, &n);
    arena_seq_begin(rd->value);
    memcpy((char *)rd->value + lo * kvs_dtype_size(rd->dtype), m->data, m->len);
    arena_seq_end(rd->value);
}

static void on_async_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                           struct round *rd, const char *text);

static void on_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                     struct round *rd)
{
    char text[KVS__WIRE_TEXT_MAX + 1] = "";
    int p = msg_part(m);

    if (owners_part(d, rd, p) != im->host) {
        host_broke(d, im->host, "a value of part %d of a key that %s owns", p,
                   hosts_name(d, owners_part(d, rd, p)));
        return;
    }
    if (m->status)
        kvs__wire_msg_text(m, text);
    if (!d->sync) {
        on_async_value(d, im, m, rd, text);
        return;
    }
    if (!rd->inflight || m->a != rd->done + 1 || rd->pgot[p]) {
        if (job_expected(d) == 0)
            return;                    /* every worker here has left: nothing waits on it */
        host_broke(d, im->host, "a value of round %" PRIu64 " of part %d (round %" PRIu64
                   " is %s)", m->a, p, rd->done + 1,
                   !rd->inflight ? "not sent yet" : rd->pgot[p] ? "done there" : "open");
        return;
    }
    if (m->status == 0)
        write_value(rd, m);
    part_done(d, rd, p, m->status, text);
}

/* ---- async pushes -------------------------------------------------------- */

/* Part p of a key's value changed at its owner by an async push (status
 * 0), or the push failed: key names the key, its dtype and shape; the value
 * goes to every host, a failure to the push's own host (to: the host whose
 * forwarded push it was, token its token; -1: this host's). */
static void async_value(struct daemon *d, const struct kvs__wire_msg *key, struct round *rd,
                        int p, int status, const char *msg, int to, uint64_t token)
{
    struct kvs__wire_msg m = *key;
    struct frame *f;

    m.a = to >= 0 ? (uint64_t)to + 1 : 0;
    m.b = token;
    value_msg(&m, rd, p, status, msg);
    if (!(f = hosts_frame_new(d, KVS__FRAME_VALUE, &m, NULL))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory sending a value");
        return;
    }
    /* A failure matters to the push's own host only. */
    hosts_post(d, f, status ? to : HOSTS_IN);
}

/* One more of r's parts is done (status, msg): r completes with the first
 * failure once none is left. 1 when it did. */
static int async_part_done(struct daemon *d, struct req *r, int status, const char *msg)
{
    if (status != 0 && r->xstatus == 0) {
        r->xstatus = status;
        r->xmsg = strdup(msg ? msg : "");
    }
    if (--r->nwait > 0)
        return 0;
    answer_complete(d, r, r->xstatus, r->xstatus ? (r->xmsg ? r->xmsg : "") : NULL);
    return 1;
}

void bridge_async_push(struct daemon *d, struct req *r)
{
    struct round *rd = r->rd;
    struct kvs__wire_msg m;
    const void *data = req_data(d, r);
    uint64_t lo, n, step = kvs__engine_steps(d->eng, rd->entry) + 1;   /* its parts' here */

    key_of_req(&m, &r->s);
    m.priority = r->s.priority;
    r->token = ++d->next_token;
    r->nwait = rd->nparts + 1;         /* one for this call, so that r lives to its end */
    for (int p = 0; p < rd->nparts; p++) {
        struct kvs__err e = { 0, "" };
        struct frame *f;
        void *piece;
        int rc;

        owners_part_range(rd, p, &lo, &n);
        set_part(&m, rd, p);
        if (owners_part(d, rd, p) == d->me) {
            const void *in = elem(rd, data, lo);    /* a 2bit push: decoded */

            rc = rounds_apply_part(d, rd, rd->nparts > 1 ? p : -1, 1, &in, NULL, step, &e);
            if (rc == 0)
                async_value(d, &m, rd, p, 0, NULL, -1, 0);
            async_part_done(d, r, rc, e.msg);
            continue;
        }
        m.b = r->token;
        m.pieces = r->coded != NULL;   /* a 2bit push goes as it came */
        m.data = m.pieces ? NULL : elem(rd, data, lo);
        m.len = m.pieces ? kvs__wire_piece_bytes(n) : n * kvs_dtype_size(rd->dtype);
        if (!(f = hosts_frame_new(d, KVS__FRAME_FORWARD, &m, &piece))) {
            async_part_done(d, r, -ENOMEM, "kvsd: out of memory forwarding a push");
            continue;
        }
        if (m.pieces)
            kvs__wire_piece_put(piece, kvs__arg_threshold(r->s.arg),
                                (const uint32_t *)r->coded + lo / 16, n);
        hosts_post(d, f, owners_part(d, rd, p));
    }
    if (r->nwait > 1) {
        r->next = d->fwd;
        d->fwd = r;
    }
    async_part_done(d, r, 0, NULL);
}

static void on_async_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                           struct round *rd, const char *text)
{
    if (m->status == 0)
        write_value(rd, m);
    if (m->a != (uint64_t)d->me + 1)
        return;                        /* another host's push, or this host's own value */
    for (struct req **p = &d->fwd; *p; p = &(*p)->next) {
        struct req *r = *p;

        if (r->token == m->b) {
            if (r->nwait == 1)
                *p = r->next;          /* its last part: it completes */
            async_part_done(d, r, m->status, text);
            return;
        }
    }
    host_broke(d, im->host, "an answer to push %" PRIu64 ", which it never got", m->b);
}

/* The optimizer's step that the parts here of push `token` of host h
 * count as: the parts of one push make one step. A host's parts of one
 * push come in a row unless a push of higher priority passes them; then
 * they count as two steps. */
static uint64_t forward_step(struct daemon *d, struct round *rd, int h, uint64_t token)
{
    uint64_t *tok = &rd->fwd[2 * h], *step = tok + 1;

    if (*tok != token) {               /* tokens start at 1 */
        *tok = token;
        *step = kvs__engine_steps(d->eng, rd->entry) + 1;
    }
    return *step;
}

static void on_forward(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                       struct round *rd)
{
    struct kvs__err e = { 0, "" };
    int p = msg_part(m);
    const void *data;
    float *decoded;
    int rc;

    if (d->sync) {
        host_broke(d, im->host, "a dist_async push came to a dist_sync host");
        return;
    }
    if (owners_part(d, rd, p) != d->me) {
        host_broke(d, im->host, "a push of part %d of a key that %s owns", p,
                   hosts_name(d, owners_part(d, rd, p)));
        return;
    }
    if (msg_values(rd, m, &data, &decoded) != 0)
        rc = kvs__fail(&e, -ENOMEM, "kvsd: out of memory for a 2bit push");
    else
        rc = rounds_apply_part(d, rd, rd->nparts > 1 ? p : -1, 1, &data, NULL,
                        rd->fwd ? forward_step(d, rd, im->host, m->b) : 0, &e);
    free(decoded);
    if (rc == 0) {
        d->st.pushes++;
        d->st.bytes_pushed += m->len;
    }
    async_value(d, m, rd, p, rc, e.msg, im->host, m->b);
}

/* ---- the rest ------------------------------------------------------------ */

/* m, of type, to every other host; without memory for it the job fails
 * (a host waiting for it would wait in vain). */
static void tell_all(struct daemon *d, int type, const struct kvs__wire_msg *m)
{
    struct frame *f = hosts_frame_new(d, type, m, NULL);

    if (f)
        hosts_post(d, f, HOSTS_ALL);
    else
        job_fail(d, -ENOMEM, "kvsd: out of memory for a %s to the other hosts",
                 kvs__frame_name(type));
}

void bridge_optimizer(struct daemon *d, const char *spec)
{
    struct kvs__wire_msg m = { .data = spec, .len = strlen(spec) };

    tell_all(d, KVS__FRAME_OPTIMIZER, &m);
}

void bridge_left(struct daemon *d)
{
    struct kvs__wire_msg m = { 0 };

    tell_all(d, KVS__FRAME_LEFT, &m);
}

/* The job failed here (status, msg): the others fail too, unless the
 * failure came from one of them. */
static void bridge_fail(struct daemon *d, int status, const char *msg)
{
    if (!d->hx || d->fail_remote)
        return;
    struct kvs__wire_msg m = { .status = status, .data = msg, .len = strlen(msg) };

    tell_all(d, KVS__FRAME_FAIL, &m);
}

int bridge_all_left(const struct daemon *d)
{
    for (int h = 0; h < d->nhosts; h++)
        if (h != d->me && !d->host_out[h])
            return 0;
    return 1;
}

void bridge_recheck(struct daemon *d)
{
    for (struct round *rd = d->open, *next; rd; rd = next) {
        next = rd->next;               /* owner_check takes rd, and only rd, off the list */
        for (int p = 0; p < rd->nparts; p++)
            if (owners_part(d, rd, p) == d->me)
                owner_check(d, rd, p);
    }
    colls_check(d);
}

/* Another host's message: 1 when it was kept (deferred, or held in a
 * round), else the caller frees it. */
static int on_msg(struct daemon *d, struct inmsg *im)
{
    struct kvs__wire_msg m;
    struct kvs__err e = { 0, "" };
    struct round *rd = NULL;
    char text[KVS__WIRE_TEXT_MAX + 1];
    int rc;

    if (im->type < 0) {                /* the link ended */
        if (d->host_out[im->host] != HOST_ENDED) {
            d->host_out[im->host] = HOST_ENDED;
            job_fail(d, KVS_EPEERDEAD, "%s", im->why);
        }
        return 0;
    }
    if (kvs__wire_msg_decode(im->type, im->pay, im->len, &m, &e) != 0) {
        host_broke(d, im->host, "%s", e.msg);
        return 0;
    }
    if (d->failed && im->type != KVS__FRAME_BYE)
        return 0;                      /* the job is over: only the ends still matter */
    switch (im->type) {
    case KVS__FRAME_PARTIAL:
    case KVS__FRAME_VALUE:
    case KVS__FRAME_FORWARD:
        rc = msg_round(d, im, &m, &rd);
        if (rc == 1) {
            im->next = d->deferred;
            d->deferred = im;
            return 1;
        }
        if (rc != 0)
            return 0;
        if (im->type == KVS__FRAME_PARTIAL)
            return on_partial(d, im, &m, rd);
        if (im->type == KVS__FRAME_VALUE)
            on_value(d, im, &m, rd);
        else
            on_forward(d, im, &m, rd);
        return 0;
    case KVS__FRAME_ARRIVE:
        colls_remote_arrive(d, im->host, &m);
        return 0;
    case KVS__FRAME_DONE:
        colls_remote_done(d, im->host, &m);
        return 0;
    case KVS__FRAME_OPTIMIZER:
        rc = states_set_optimizer(d, kvs__wire_msg_text(&m, text), hosts_name(d, im->host), &e);
        if (rc != 0)
            job_fail(d, rc, "%s set an optimizer this host refuses: %s",
                     hosts_name(d, im->host), e.msg);
        return 0;
    case KVS__FRAME_LEFT:
        if (d->host_out[im->host] == HOST_IN)
            d->host_out[im->host] = HOST_LEFT;
        bridge_recheck(d);
        return 0;
    case KVS__FRAME_FAIL:
        d->fail_remote = 1;
        job_fail(d, m.status, "on %s: %s", hosts_name(d, im->host),
                 kvs__wire_msg_text(&m, text));
        d->fail_remote = 0;
        return 0;
    case KVS__FRAME_BYE:
        d->host_out[im->host] = HOST_ENDED;
        return 0;
    case KVS__FRAME_STATES_ASK:
        states_on_ask(d, im->host, &m);
        return 0;
    case KVS__FRAME_STATES:
        states_on_answer(d, im->host, &m);
        return 0;
    default:
        host_broke(d, im->host, "a frame of type %d out of place", im->type);
        return 0;
    }
}

int bridge_serve(struct daemon *d)
{
    struct inmsg *list = hosts_take(d);
    int progress = list != NULL;

    /* Messages that waited for their key go first, in the order they came
     * (d->deferred holds them newest first), once the keys have changed. */
    if (d->deferred && kvs__engine_nkeys(d->eng) != d->deferred_nkeys) {
        while (d->deferred) {
            struct inmsg *m = d->deferred;

            d->deferred = m->next;
            m->next = list;
            list = m;
        }
        progress = 1;
    }
    while (list) {
        struct inmsg *im = list;

        list = im->next;
        im->next = NULL;
        if (!on_msg(d, im))
            msg_free(im);
    }
    d->deferred_nkeys = kvs__engine_nkeys(d->eng);
    colls_finish_inits(d);
    return progress;
}

void bridge_free(struct daemon *d)
{
    while (d->deferred) {
        struct inmsg *m = d->deferred;

        d->deferred = m->next;
        msg_free(m);
    }
}

/* The job failed: the async pushes waiting for their owners' answers end
 * with its failure. */
static void fail_forwarded(struct daemon *d, int status, const char *msg)
{
    answer_complete_list(d, d->fwd, status, msg);
    d->fwd = NULL;
}

void bridge_init(struct daemon *d)
{
    static const struct fail_hook hook = { bridge_fail, fail_forwarded };
    static const struct round_ops ops = { bridge_round_new, bridge_round_ready,
                                          bridge_round_free };

    job_hook(d, &hook);
    d->round_ops = &ops;
}
