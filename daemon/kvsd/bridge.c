/*
 * bridge.c - the messages between the hosts of a job, each handed to the
 * module that acts on it: a round's sums and values to xrounds.c (sync) or
 * forwards.c (async), the collectives' to collectives.c, the states' to
 * states.c; the job's own (an optimizer set, a host's workers all left, a
 * failure, the end) it takes itself. The links are hosts.c's. This head
 * says how keys go across hosts, for all of them.
 *
 * Every key has one owner host (owners_key: a hash of the key, so that
 * keys spread evenly and every host agrees without telling); a key of
 * the split bound or more (8 MiB / H, from 64 KiB to 4 MiB) is split in
 * parts of at most KVS__PART_BYTES (kvs__wire_part), each host owning an
 * equal block of them in a row from the key's owner on (the rule is
 * src/proto/shard.c's, which kvsctl plan models a job's traffic by), and
 * each part goes as a key of its own would: its
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
 * rounds.c tells xrounds.c of its rounds (made, ready, freed) through
 * d->round_ops, and job.c tells this file and forwards.c of a failing job
 * through a fail hook, both registered by bridge_init: they sit below and
 * never call them by name. It must never act on a round's message itself.
 *
 * Serve thread only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bridge.h"
#include "collectives.h"
#include "combined.h"
#include "forwards.h"
#include "hostmsg.h"
#include "hosts.h"
#include "job.h"
#include "owners.h"
#include "rounds.h"
#include "states.h"
#include "xrounds.h"

/* The bytes of the whole key a message's dtype and shape describe (the
 * decoder bounded their product). */
static uint64_t msg_key_bytes(const struct kvs__wire_msg *m)
{
    uint64_t n = kvs_dtype_size(m->dtype);

    for (int i = 0; i < m->ndim; i++)
        n *= (uint64_t)m->shape[i];
    return n;
}

/* A message of a key not stored here: it may wait for the key only while
 * this host's init of it waits for its end (then its dtype and shape make
 * the init's bytes), or once every worker here has left (keys inited
 * without them). 1 when it waits; -1 when the job failed (the host named):
 * a key the job never declared here is no key to keep bytes for. */
static int msg_unknown_key(struct daemon *d, const struct inmsg *im,
                           const struct kvs__wire_msg *m)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    uint64_t bytes;

    if (job_expected(d) == 0)
        return 1;
    kvs__key_str(ks, sizeof ks, m->key);
    if (!colls_init_waiting(d, m->key, &bytes)) {
        hostmsg_broke(d, im->host, "a %s of %" PRIu64 " bytes for key %s, which this job has "
                      "not declared here", kvs__frame_name(im->type), m->len, ks);
        return -1;
    }
    if (!(im->type == KVS__FRAME_VALUE && m->status != 0) && msg_key_bytes(m) != bytes) {
        hostmsg_broke(d, im->host, "a %s of %" PRIu64 " bytes for key %s as %" PRIu64
                      " bytes, whose init here is %" PRIu64 " bytes", kvs__frame_name(im->type),
                      m->len, ks, msg_key_bytes(m), bytes);
        return -1;
    }
    return 1;
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
    char ks[KVS_MAX_KEY_LEN + 8];
    int rc;

    memcpy(a.shape, m->shape, sizeof a.shape[0] * (size_t)m->ndim);
    for (int again = 1;; again = 0) {
        if (im->type == KVS__FRAME_VALUE && m->status != 0)
            rc = kvs__engine_lookup(d->eng, m->key, &info, &e);
        else
            rc = kvs__engine_check(d->eng, m->key, &a, &info, &e);
        /* An init whose end came earlier in this pass is not stored yet. */
        if (rc != KVS_ENOKEY || !again || !d->inits)
            break;
        colls_finish_inits(d);
    }
    if (rc == KVS_ENOKEY)
        return msg_unknown_key(d, im, m);
    if (rc != 0) {
        struct kvs__err le = { 0, "" };

        kvs__key_str(ks, sizeof ks, m->key);
        if (kvs__engine_lookup(d->eng, m->key, &info, &le) == 0)
            hostmsg_broke(d, im->host, "a %s of %" PRIu64 " bytes for key %s of %zu bytes: "
                          "%s", kvs__frame_name(im->type), m->len, ks, info.bytes, e.msg);
        else
            hostmsg_broke(d, im->host, "a %s: %s", kvs__frame_name(im->type), e.msg);
        return -1;
    }
    if (!(*out = rounds_of(d, &info, m->key))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory for a round");
        return -1;
    }
    if ((*out)->nparts != (m->nparts ? (int)m->nparts : 1)) {
        hostmsg_broke(d, im->host, "a %s in %" PRIu32 " parts of a key of %d",
                      kvs__frame_name(im->type), m->nparts ? m->nparts : 1, (*out)->nparts);
        return -1;
    }
    return 0;
}

/* A part's value from its owner: to the sync round, or to the async push
 * that made it. */
static void on_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                     struct round *rd)
{
    char text[KVS__WIRE_TEXT_MAX + 1] = "";
    int p = hostmsg_part(m);

    if (owners_part(d, rd, p) != im->host) {
        hostmsg_broke(d, im->host, "a value of part %d of a key that %s owns", p,
                      hosts_name(d, owners_part(d, rd, p)));
        return;
    }
    if (m->status)
        kvs__wire_msg_text(m, text);
    if (!d->sync)
        forwards_on_value(d, im, m, rd, text);
    else
        xrounds_on_value(d, im, m, rd, text);
}

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

    /* Keys inited from now on leave this host out of their init, yet
     * their values may come before the others hear of this LEFT. */
    hosts_expect_any(d);
    tell_all(d, KVS__FRAME_LEFT, &m);
}

void bridge_worker_left(struct daemon *d, int wi)
{
    cb_leave(d, wi);
    rounds_after_leave(d, wi);
    colls_check(d);
    if (d->hx && d->left == d->nworkers && !d->left_told) {
        d->left_told = 1;
        bridge_left(d);
        bridge_recheck(d);
    }
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
    xrounds_recheck(d);
    colls_check(d);
}

/* A link ended: its host is gone (or broke the protocol: a frame this host
 * refused), and the job fails, once for it. */
static void on_link_end(struct daemon *d, const struct inmsg *im)
{
    if (d->host_out[im->host] != HOST_ENDED) {
        d->host_out[im->host] = HOST_ENDED;
        d->rollback_host = im->type != LINK_BAD;
        job_fail(d, im->type == LINK_BAD ? KVS_EPROTO : KVS_EPEERDEAD, "%s", im->why);
    }
}

/* A round's message (PARTIAL, VALUE, FORWARD), to its key's round; one
 * of a key not stored here yet waits for it. 1 when it was kept. */
static int on_round_msg(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m)
{
    struct round *rd = NULL;
    int rc = msg_round(d, im, m, &rd);

    if (rc == 1) {
        im->next = d->deferred;
        d->deferred = im;
        return 1;
    }
    if (rc != 0)
        return 0;
    if (m->rows)                       /* for kvsctl stats, whoever takes it */
        rd->rows_received += m->nnz;
    if (im->type == KVS__FRAME_PARTIAL)
        return xrounds_on_partial(d, im, m, rd);
    if (im->type == KVS__FRAME_VALUE)
        on_value(d, im, m, rd);
    else
        forwards_on_forward(d, im, m, rd);
    return 0;
}

/* Any other message: of the collectives, the states, or the job itself. */
static void on_job_msg(struct daemon *d, const struct inmsg *im, struct kvs__wire_msg *m)
{
    struct kvs__err e = { 0, "" };
    char text[KVS__WIRE_TEXT_MAX + 1];
    int rc;

    switch (im->type) {
    case KVS__FRAME_ARRIVE:
        colls_remote_arrive(d, im->host, m);
        return;
    case KVS__FRAME_DONE:
        colls_remote_done(d, im->host, m);
        return;
    case KVS__FRAME_OPTIMIZER:
        rc = states_set_optimizer(d, kvs__wire_msg_text(m, text), hosts_name(d, im->host), &e);
        if (rc != 0)
            job_fail(d, rc, "%s set an optimizer this host refuses: %s",
                     hosts_name(d, im->host), e.msg);
        return;
    case KVS__FRAME_LEFT:
        if (d->host_out[im->host] == HOST_IN)
            d->host_out[im->host] = HOST_LEFT;
        bridge_recheck(d);
        return;
    case KVS__FRAME_FAIL:
        d->fail_remote = 1;
        job_fail(d, m->status, "on %s: %s", hosts_name(d, im->host),
                 kvs__wire_msg_text(m, text));
        d->fail_remote = 0;
        return;
    case KVS__FRAME_BYE:
        d->host_out[im->host] = HOST_ENDED;
        return;
    case KVS__FRAME_STATES_ASK:
        states_on_ask(d, im->host, m);
        return;
    case KVS__FRAME_STATES:
        states_on_answer(d, im->host, m);
        return;
    default:
        hostmsg_broke(d, im->host, "a frame of type %d out of place", im->type);
        return;
    }
}

/* Another host's message: 1 when it was kept (deferred, or held in a
 * round), else the caller frees it. */
static int on_msg(struct daemon *d, struct inmsg *im)
{
    struct kvs__wire_msg m;
    struct kvs__err e = { 0, "" };

    if (im->type < 0) {                /* the link ended */
        on_link_end(d, im);
        return 0;
    }
    if (kvs__wire_msg_decode(im->type, im->pay, im->len, &m, &e) != 0) {
        hostmsg_broke(d, im->host, "%s", e.msg);
        return 0;
    }
    if (d->failed && im->type != KVS__FRAME_BYE)
        return 0;                      /* the job is over: only the ends still matter */
    if (im->type == KVS__FRAME_PARTIAL || im->type == KVS__FRAME_VALUE
        || im->type == KVS__FRAME_FORWARD)
        return on_round_msg(d, im, &m);
    on_job_msg(d, im, &m);
    return 0;
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
            hostmsg_free(im);
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
        hostmsg_free(m);
    }
}

void bridge_async_push(struct daemon *d, struct req *r)
{
    forwards_push(d, r);
}

void bridge_init(struct daemon *d)
{
    static const struct fail_hook hook = { bridge_fail, forwards_fail };
    static const struct round_ops ops = { xrounds_new, xrounds_ready, xrounds_free,
                                          xrounds_restored };

    job_hook(d, &hook);
    d->round_ops = &ops;
}
