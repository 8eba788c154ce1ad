/*
 * bridge.c - what the messages between the hosts of a job do to kvsd's
 * rounds and keys (the links themselves are hosts.c's; collectives.c
 * takes the collectives' messages).
 *
 * Every key has one owner host (key_owner: a hash of the key, so that
 * keys spread evenly and every host agrees without telling). In a sync
 * round each host sums its own workers' pushes first (requests.c's
 * round, as on one host) and sends that sum to the owner (PARTIAL), which
 * waits for the sum of every host still in the job, then runs the engine's
 * push once on them all: the optimizer, whose state lives at the owner
 * only, sees the global sum. The new value goes back to every host
 * (VALUE), which writes it into its own arena under the value's seqlock
 * and lets the round's pulls go. A host sends a key's next round only once
 * the value of the last has come back, so that the owner never holds more
 * than one round of a key. In dist_async a push of a key another host owns
 * goes to the owner (FORWARD) and is answered by the value it made, which
 * every host gets too.
 *
 * A message naming a key this host has not stored yet (its init's DONE is
 * still on its way from host 0, on another link) waits in d->deferred
 * until the key comes. A message that breaks these rules (a round out of
 * turn, a key another host owns) fails the job, naming the host.
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

#include "array.h"
#include "compress.h"
#include "kvsd.h"

/* At the owner, the other hosts' sums of a key's open round. */
struct xround {
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

int key_owner(const struct daemon *d, kvs_key_t key)
{
    return d->nhosts <= 1 ? 0 : (int)(kvs__key_hash(key) % (uint64_t)d->nhosts);
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

/* m, naming a key, as a VALUE: the key's value, or (status != 0) msg,
 * which names no dtype or shape. */
static void value_msg(struct kvs__wire_msg *m, const struct round *rd, int status,
                      const char *msg)
{
    m->status = status;
    if (status == 0) {
        m->data = rd->value;
        m->len = rd->bytes;
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
    fail_job(d, KVS_EPROTO, "%s broke the protocol: %s", host_name(d, h), why);
}

/* ---- sync rounds -------------------------------------------------------- */

static struct xround *xround_get(struct daemon *d, struct round *rd,
                                 const struct kvs__wire_msg *key)
{
    struct xround *x = rd->x;
    size_t n = (size_t)d->nhosts;

    if (x)
        return x;
    if (!(x = calloc(1, sizeof *x + n * (1 + sizeof *x->msg + sizeof *x->data))))
        return NULL;
    x->msg = (struct inmsg **)(x + 1);
    x->data = (const void **)(x->msg + n);
    x->got = (uint8_t *)(x->data + n);
    x->n = (int)n;
    x->key = *key;
    if (key->key.name)
        x->key.key.name = x->key.name;
    x->key.data = NULL;
    x->key.len = 0;
    x->key.pieces = 0;
    x->key.priority = 0;
    x->priority = INT32_MIN;
    rd->x = x;
    return x;
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

void xround_free(struct round *rd)
{
    if (rd->x) {
        xround_clear(rd->x);
        free(rd->x);
        rd->x = NULL;
    }
}

/* At the owner: when every host still in the job has its sum in (this
 * host's being its round's pushes), the engine applies them all as one
 * push, and the value (or the failure) goes to the others. */
static void owner_check(struct daemon *d, struct round *rd)
{
    struct xround *x = rd->x;
    struct kvs__err e = { 0, "" };
    const void **in;
    int32_t prio = x ? x->priority : INT32_MIN;
    int k = 0, rc;

    if (expected(d) > 0 && !rd->inflight)
        return;                        /* this host's workers have not all pushed */
    if (!rd->inflight && (!x || x->ngot == 0))
        return;                        /* nothing of this round anywhere yet */
    for (int h = 0; h < d->nhosts; h++)
        if (h != d->me && !d->host_out[h] && !(x && x->got[h]))
            return;
    if (!(in = malloc(sizeof *in * (size_t)(d->nworkers + d->nhosts)))) {
        fail_job(d, -ENOMEM, "kvsd: out of memory closing a round");
        return;
    }
    /* In host order, this host's pushes in rank order in its place: the
     * sums group by host, but in the order of the ranks, whoever owns. */
    for (int h = 0; h < d->nhosts; h++) {
        if (h == d->me && rd->inflight) {
            for (int w = 0; w < d->nworkers; w++)
                if (rd->contrib[w]) {
                    in[k++] = req_data(d, rd->contrib[w]);
                    if (rd->contrib[w]->s.priority > prio)
                        prio = rd->contrib[w]->s.priority;
                }
        } else if (h != d->me && x && x->got[h]) {
            in[k++] = x->data[h];
        }
    }
    {
        struct kvs__push_item it = { rd->entry, k, in };

        seq_begin(rd->value);
        rc = kvs__engine_push_entries(d->eng, 1, &it, &e);
        seq_end(rd->value);
    }
    free(in);
    rd->inflight = 0;
    finish_round(d, rd, rc, e.msg);
    if (x) {
        struct kvs__wire_msg m = x->key;
        struct frame *f;

        m.key.name = x->key.key.name ? x->key.name : NULL;
        m.a = rd->done;
        m.priority = prio;
        value_msg(&m, rd, rc, e.msg);
        if (!(f = frame_new(d, KVS__FRAME_VALUE, &m, NULL)))
            fail_job(d, -ENOMEM, "kvsd: out of memory sending a value");
        else
            hosts_post(d, f, HOSTS_IN);
        xround_clear(x);
    }
}

void bridge_round_ready(struct daemon *d, struct round *rd)
{
    struct kvs__wire_msg m;
    const struct req *first = NULL;
    const void **in;
    struct frame *f;
    void *sum;
    uint64_t count;
    int32_t prio = INT32_MIN;
    int k = 0, coded = 0;

    rd->ready = 0;
    rd->inflight = 1;
    if (rd->owner == d->me) {
        owner_check(d, rd);
        return;
    }
    if (!(in = malloc(sizeof *in * (size_t)d->nworkers))) {
        fail_job(d, -ENOMEM, "kvsd: out of memory closing a round");
        return;
    }
    for (int w = 0; w < d->nworkers; w++)
        if (rd->contrib[w]) {
            first = first ? first : rd->contrib[w];
            in[k++] = req_data(d, rd->contrib[w]);
            coded += rd->contrib[w]->coded != NULL;
            if (rd->contrib[w]->s.priority > prio)
                prio = rd->contrib[w]->s.priority;
        }
    key_of_req(&m, &first->s);
    m.a = rd->done + 1;
    m.priority = prio;
    count = rd->bytes / kvs_dtype_size(first->s.dtype);
    /* Pushes all 2bit go as they came, for the owner to decode and sum:
     * else the sum of the decoded values. */
    m.pieces = coded == k ? (uint32_t)k : 0;
    m.len = m.pieces ? m.pieces * kvs__wire_piece_bytes(count) : rd->bytes;
    if (!(f = frame_new(d, KVS__FRAME_PARTIAL, &m, &sum))) {
        free(in);
        fail_job(d, -ENOMEM, "kvsd: out of memory for a round's sum");
        return;
    }
    if (m.pieces) {
        unsigned char *p = sum;

        for (int w = 0; w < d->nworkers; w++)
            if (rd->contrib[w]) {
                kvs__wire_piece_put(p, kvs__arg_threshold(rd->contrib[w]->s.arg),
                                    rd->contrib[w]->coded, count);
                p += kvs__wire_piece_bytes(count);
            }
    } else {
        kvs__sum(first->s.dtype, sum, in, k, count, d->o.threads);
    }
    free(in);
    hosts_post(d, f, rd->owner);
    /* The sum is made: the workers get their staging back now. */
    for (int w = 0; w < d->nworkers; w++)
        if (rd->contrib[w])
            lending_ends(d, rd->contrib[w], 1);
}

/* The round of a message's key, its dtype and shape checked against the
 * stored key's (a failed update's value names neither: its key alone is
 * looked up). 0; 1 when the key is not stored here yet; -1 when the job
 * failed (the host named). */
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
    if (!(*out = round_of(d, &info, m->key))) {
        fail_job(d, -ENOMEM, "kvsd: out of memory for a round");
        return -1;
    }
    return 0;
}

/* The sum of a message's 2bit pieces (float32), malloc'd; NULL without
 * memory. In the pieces' order, as the host's workers' ranks. */
static float *decode_pieces(const struct kvs__wire_msg *m)
{
    uint64_t count = 1;
    float *sum;

    for (int i = 0; i < m->ndim; i++)
        count *= (uint64_t)m->shape[i];
    if (!(sum = calloc(count ? count : 1, sizeof *sum)))
        return NULL;
    for (uint32_t i = 0; i < m->pieces; i++) {
        const uint32_t *words;
        float thr = kvs__wire_piece_get(m, count, i, &words);

        kvs__gc_2bit_dequantize_add(words, sum, count, thr);
    }
    return sum;
}

/* A host's sum of a round, at the key's owner: 1 when kept (im is the
 * round's now, freed with it), 0 when refused. */
static int on_partial(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                      struct round *rd)
{
    struct xround *x;
    void *data = NULL;

    if (!d->sync) {
        host_broke(d, im->host, "a dist_sync round's sum came to a dist_async host");
        return 0;
    }
    if (rd->owner != d->me || m->a != rd->done + 1) {
        host_broke(d, im->host, "a sum of round %" PRIu64 " of a key that %s owns (round "
                   "%" PRIu64 " is open)", m->a, host_name(d, rd->owner), rd->done + 1);
        return 0;
    }
    if (!(x = xround_get(d, rd, m))) {
        fail_job(d, -ENOMEM, "kvsd: out of memory for a round");
        return 0;
    }
    if (x->got[im->host]) {
        host_broke(d, im->host, "two sums for one round");
        return 0;
    }
    if (m->pieces && !(data = decode_pieces(m))) {
        fail_job(d, -ENOMEM, "kvsd: out of memory for a round");
        return 0;
    }
    if (data) {                        /* the sum replaces the pieces */
        free(im->pay);
        im->pay = data;
    }
    x->got[im->host] = 1;
    x->msg[im->host] = im;
    x->data[im->host] = data ? data : m->data;
    x->ngot++;
    if (m->priority > x->priority)
        x->priority = m->priority;
    open_link(d, rd);
    owner_check(d, rd);
    return 1;
}

/* The value a message carries, written into the key's own. */
static void write_value(struct round *rd, const struct kvs__wire_msg *m)
{
    seq_begin(rd->value);
    memcpy(rd->value, m->data, rd->bytes);
    seq_end(rd->value);
}

static void on_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                     struct round *rd)
{
    char text[KVS__WIRE_TEXT_MAX + 1] = "";

    if (rd->owner != im->host) {
        host_broke(d, im->host, "a value of a key that %s owns", host_name(d, rd->owner));
        return;
    }
    if (m->status)
        kvs__wire_msg_text(m, text);
    if (!d->sync) {
        if (m->status == 0)
            write_value(rd, m);
        if (m->a == (uint64_t)d->me + 1) {
            for (struct req **p = &d->fwd; *p; p = &(*p)->next) {
                struct req *r = *p;

                if (r->token == m->b) {
                    *p = r->next;
                    complete(d, r, m->status, text);
                    return;
                }
            }
            host_broke(d, im->host, "an answer to push %" PRIu64 ", which it never got", m->b);
        }
        return;
    }
    if (!rd->inflight || m->a != rd->done + 1) {
        if (expected(d) == 0)
            return;                    /* every worker here has left: nothing waits on it */
        host_broke(d, im->host, "a value of round %" PRIu64 " (round %" PRIu64 " is %s)",
                   m->a, rd->done + 1, rd->inflight ? "open" : "not sent yet");
        return;
    }
    if (m->status == 0)
        write_value(rd, m);
    rd->inflight = 0;
    finish_round(d, rd, m->status, text);
}

/* ---- async pushes -------------------------------------------------------- */

void bridge_forward(struct daemon *d, struct req *r)
{
    struct kvs__wire_msg m;
    struct frame *f;
    uint64_t count;
    void *piece;

    key_of_req(&m, &r->s);
    m.priority = r->s.priority;
    m.b = r->token = ++d->next_token;
    count = r->rd->bytes / kvs_dtype_size(r->s.dtype);
    m.pieces = r->coded != NULL;       /* a 2bit push goes as it came */
    m.data = m.pieces ? NULL : req_data(d, r);
    m.len = m.pieces ? kvs__wire_piece_bytes(count) : r->rd->bytes;
    if (!(f = frame_new(d, KVS__FRAME_FORWARD, &m, &piece))) {
        complete(d, r, -ENOMEM, "kvsd: out of memory forwarding a push");
        return;
    }
    if (m.pieces)
        kvs__wire_piece_put(piece, kvs__arg_threshold(r->s.arg), r->coded, count);
    hosts_post(d, f, r->rd->owner);
    r->next = d->fwd;
    d->fwd = r;
}

void bridge_async_value(struct daemon *d, const struct kvs__wire_msg *key, struct round *rd,
                        int status, const char *msg, int to, uint64_t token)
{
    struct kvs__wire_msg m = *key;
    struct frame *f;

    m.pieces = 0;
    m.a = to >= 0 ? (uint64_t)to + 1 : 0;
    m.b = token;
    value_msg(&m, rd, status, msg);
    if (!(f = frame_new(d, KVS__FRAME_VALUE, &m, NULL))) {
        fail_job(d, -ENOMEM, "kvsd: out of memory sending a value");
        return;
    }
    /* A failure matters to the push's own host only. */
    hosts_post(d, f, status ? to : HOSTS_IN);
}

void bridge_pushed(struct daemon *d, const struct req *r)
{
    struct kvs__wire_msg m;

    key_of_req(&m, &r->s);
    m.priority = r->s.priority;
    bridge_async_value(d, &m, r->rd, 0, NULL, -1, 0);
}

static void on_forward(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                       struct round *rd)
{
    struct kvs__err e = { 0, "" };
    float *decoded = NULL;
    int rc;

    if (d->sync) {
        host_broke(d, im->host, "a dist_async push came to a dist_sync host");
        return;
    }
    if (rd->owner != d->me) {
        host_broke(d, im->host, "a push of a key that %s owns", host_name(d, rd->owner));
        return;
    }
    if (m->pieces && !(decoded = decode_pieces(m)))
        rc = kvs__fail(&e, -ENOMEM, "kvsd: out of memory for a 2bit push");
    else
        rc = apply_one(d, rd, decoded ? decoded : m->data, &e);
    free(decoded);
    if (rc == 0) {
        d->st.pushes++;
        d->st.bytes_pushed += m->len;
    }
    bridge_async_value(d, m, rd, rc, e.msg, im->host, m->b);
}

/* ---- the rest ------------------------------------------------------------ */

/* m, of type, to every other host; without memory for it the job fails
 * (a host waiting for it would wait in vain). */
static void tell_all(struct daemon *d, int type, const struct kvs__wire_msg *m)
{
    struct frame *f = frame_new(d, type, m, NULL);

    if (f)
        hosts_post(d, f, HOSTS_ALL);
    else
        fail_job(d, -ENOMEM, "kvsd: out of memory for a %s to the other hosts",
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

void bridge_fail(struct daemon *d, int status, const char *msg)
{
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
        if (rd->owner == d->me)
            owner_check(d, rd);
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
            fail_job(d, KVS_EPEERDEAD, "%s", im->why);
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
        coll_remote_arrive(d, im->host, &m);
        return 0;
    case KVS__FRAME_DONE:
        coll_remote_done(d, im->host, &m);
        return 0;
    case KVS__FRAME_OPTIMIZER:
        rc = optimizer_set(d, kvs__wire_msg_text(&m, text), host_name(d, im->host), &e);
        if (rc != 0)
            fail_job(d, rc, "%s set an optimizer this host refuses: %s",
                     host_name(d, im->host), e.msg);
        return 0;
    case KVS__FRAME_LEFT:
        if (d->host_out[im->host] == HOST_IN)
            d->host_out[im->host] = HOST_LEFT;
        bridge_recheck(d);
        return 0;
    case KVS__FRAME_FAIL:
        d->fail_remote = 1;
        fail_job(d, m.status, "on %s: %s", host_name(d, im->host),
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
    finish_inits(d);
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
