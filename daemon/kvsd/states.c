/*
 * states.c - saving and loading optimizer states in a job across hosts
 * (serve thread only). Each key's state lives at its owner host (a big
 * key's, split in parts, in parts at theirs), so one file holds every
 * host's part:
 *
 *   save  the host of the calling worker asks every other host for the
 *         states of the keys it owns (STATES_ASK), each answers with them
 *         as a state file's bytes (STATES), and the asking host writes one
 *         file of its own keys' states and theirs;
 *   load  the asking host reads the file, checks it whole against its
 *         store and takes its own keys' states from it, then sends the
 *         file's bytes to every other host, which does the same with the
 *         keys it owns and answers with its status.
 *
 * The call completes when every host has answered, with the first
 * failure. What another host sends is a state file's bytes, checked as a
 * file read from disk is (statefile.c) before any of it is used.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "states.h"
#include "answers.h"
#include "combined.h"
#include "hosts.h"
#include "job.h"
#include "owners.h"

#include "kernels/optim.h"
#include "store/statefile.h"

/* A save or a load waiting for the other hosts. */
struct stq {
    struct stq *next;
    struct req *r;                     /* the worker's request, completed at the end */
    uint64_t token;
    uint8_t op;                        /* KVS__OP_SAVE_STATES or KVS__OP_LOAD_STATES */
    int waiting;                       /* answers still to come */
    int status;                        /* the first failure, and its message */
    char msg[KVS__MSG_MAX];
    char *path;
    uint8_t *asked;                    /* [nhosts]: 1 asked, 2 answered */
    uint8_t **img;                     /* [nhosts], a save: each host's states */
    size_t *len;                       /* [nhosts] */
};

/* keep for the engine: the keys this host owns, whole or a part of. */
static int owned(void *ctx, kvs_key_t key)
{
    struct daemon *d = ctx;
    struct kvs__entry_info info;
    struct kvs__err e;

    if (owners_key(d, key) == d->me)
        return 1;
    return kvs__engine_lookup(d->eng, key, &info, &e) == 0
           && owners_nparts(d, info.bytes) > 1;
}

/* part for the engine: the elements of a big key's state host h keeps. */
static int part_of(void *ctx, kvs_key_t key, int h, size_t *first, size_t *n)
{
    struct daemon *d = ctx;
    struct kvs__entry_info info;
    struct kvs__err e;
    uint64_t f, c;

    if (kvs__engine_lookup(d->eng, key, &info, &e) != 0
        || !owners_host_range(d, key, info.count, info.dtype,
                              kvs__wire_row(info.ndim, info.shape), h, &f, &c))
        return 0;
    *first = (size_t)f;
    *n = (size_t)c;
    return 1;
}

static void stq_free(struct daemon *d, struct stq *q)
{
    for (int h = 0; h < d->nhosts; h++)
        free(q->img[h]);
    free(q->path);
    free(q);
}

/* Sends host `to` a STATES_ASK or a STATES message; data: len bytes (a
 * state file's) or a text, or none. 0 or -ENOMEM. */
static int send_states(struct daemon *d, int type, uint8_t op, uint64_t token, int status,
                       const void *data, size_t len, int to)
{
    struct kvs__wire_msg m = { .op = op, .b = token, .status = status, .data = data,
                               .len = len };
    struct frame *f = hosts_frame_new(d, type, &m, NULL);

    if (!f)
        return -ENOMEM;
    hosts_post(d, f, to);
    return 0;
}

/* Every host has answered q: the save writes the file; the call ends. */
static void finish_states(struct daemon *d, struct stq *q)
{
    struct kvs__err e = { 0, "" };
    int rc = q->status;

    for (struct stq **p = &d->stq; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    if (rc == 0 && q->op == KVS__OP_SAVE_STATES) {
        const uint8_t **img = malloc(sizeof *img * (size_t)d->nhosts);
        size_t *len = malloc(sizeof *len * (size_t)d->nhosts);
        int *who = malloc(sizeof *who * (size_t)d->nhosts), n = 0;
        struct kvs__states_split split = { d->me, who, part_of, d };

        if (!img || !len || !who) {
            rc = kvs__fail(&e, -ENOMEM, "kvsd: out of memory saving states");
        } else {
            for (int h = 0; h < d->nhosts; h++)
                if (q->img[h]) {
                    img[n] = q->img[h];
                    who[n] = h;
                    len[n++] = q->len[h];
                }
            rc = kvs__engine_save_states_with(d->eng, q->path, (int)q->r->s.arg != 0, owned,
                                              d, img, len, n, &split, &e);
        }
        free(img);
        free(len);
        free(who);
        snprintf(q->msg, sizeof q->msg, "%s", e.msg);
    }
    answer_complete(d, q->r, rc, q->msg);
    stq_free(d, q);
}

int states_start(struct daemon *d, struct req *r, const char *path, struct kvs__err *e)
{
    size_t n = (size_t)d->nhosts;
    uint8_t *file = NULL;
    size_t flen = 0;
    struct stq *q;
    int rc;

    if (r->s.op == KVS__OP_LOAD_STATES) {
        /* Checked whole here first: a file this host refuses goes nowhere. */
        if ((rc = kvs__optim_read(path, &file, &flen, e)) != 0
            || (rc = kvs__engine_load_image(d->eng, file, flen, path, owned, d, e)) != 0) {
            free(file);
            return rc;
        }
    }
    if (!(q = calloc(1, sizeof *q + n * (1 + sizeof *q->img + sizeof *q->len)))
        || !(q->path = strdup(path))) {
        free(q);
        free(file);
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a states call");
    }
    q->img = (uint8_t **)(q + 1);
    q->len = (size_t *)(q->img + n);
    q->asked = (uint8_t *)(q->len + n);
    q->r = r;
    q->op = r->s.op;
    q->token = ++d->next_token;
    for (int h = 0; h < d->nhosts; h++) {
        if (h == d->me || d->host_out[h] == HOST_ENDED)
            continue;
        if (send_states(d, KVS__FRAME_STATES_ASK, q->op, q->token, 0, file, flen, h) != 0) {
            free(file);
            stq_free(d, q);
            job_fail(d, -ENOMEM, "kvsd: out of memory asking for states");
            return kvs__fail(e, -ENOMEM, "kvsd: out of memory asking for states");
        }
        q->asked[h] = 1;
        q->waiting++;
    }
    free(file);
    q->next = d->stq;
    d->stq = q;
    if (q->waiting == 0)
        finish_states(d, q);
    return 1;
}

void states_on_ask(struct daemon *d, int h, const struct kvs__wire_msg *m)
{
    struct kvs__err e = { 0, "" };
    uint8_t *img = NULL;
    size_t len = 0;
    char what[96];
    int rc;

    if (m->op == KVS__OP_SAVE_STATES) {
        rc = kvs__engine_encode_states(d->eng, owned, d, &img, &len, &e);
    } else {
        snprintf(what, sizeof what, "the states %s sent", hosts_name(d, h));
        rc = kvs__engine_load_image(d->eng, m->data, m->len, what, owned, d, &e);
    }
    if (rc != 0)
        rc = send_states(d, KVS__FRAME_STATES, m->op, m->b, rc, e.msg, strlen(e.msg), h);
    else
        rc = send_states(d, KVS__FRAME_STATES, m->op, m->b, 0, img, len, h);
    free(img);
    if (rc != 0)
        job_fail(d, -ENOMEM, "kvsd: out of memory answering %s for states", hosts_name(d, h));
}

void states_on_answer(struct daemon *d, int h, const struct kvs__wire_msg *m)
{
    char text[KVS__WIRE_TEXT_MAX + 1];
    struct stq *q;

    for (q = d->stq; q; q = q->next)
        if (q->token == m->b)
            break;
    if (!q || q->op != m->op || q->asked[h] != 1) {
        job_fail(d, KVS_EPROTO, "%s broke the protocol: an answer about states it was not "
                 "asked for", hosts_name(d, h));
        return;
    }
    q->asked[h] = 2;
    if (m->status != 0 && q->status == 0) {
        q->status = m->status;
        snprintf(q->msg, sizeof q->msg, "on %s: %s", hosts_name(d, h),
                 kvs__wire_msg_text(m, text));
    } else if (m->status == 0 && m->op == KVS__OP_SAVE_STATES) {
        if (!(q->img[h] = malloc(m->len ? m->len : 1))) {
            job_fail(d, -ENOMEM, "kvsd: out of memory for the states of %s", hosts_name(d, h));
            return;
        }
        memcpy(q->img[h], m->data, m->len);
        q->len[h] = m->len;
    }
    if (--q->waiting == 0)
        finish_states(d, q);
}

void states_explain(const struct daemon *d, int wi, uint64_t seq, char *buf, size_t size)
{
    for (const struct stq *q = d->stq; q; q = q->next) {
        size_t o;

        if (q->r->w != wi || q->r->s.seq != seq)
            continue;
        o = (size_t)snprintf(buf, size, "%s: the answer of", q->op == KVS__OP_SAVE_STATES
                                                             ? "kvs_save_optimizer_states"
                                                             : "kvs_load_optimizer_states");
        for (int h = 0; h < d->nhosts && o < size; h++)
            if (q->asked[h] == 1)
                o += (size_t)snprintf(buf + o, size - o, " %s", hosts_name(d, h));
        return;
    }
}

/* Any worker may set the optimizer, at any time (as MXNet lets any worker
 * send it to the servers): it replaces the one before and drops its state.
 * The same spec again is a no-op that keeps the state, so that every
 * worker may make the same call at start-up whenever it gets there.
 * Across hosts every host sets it: the owners of the keys run it. */
int states_set_optimizer(struct daemon *d, const char *spec, const char *who, struct kvs__err *e)
{
    const char *cur = kvs__engine_optimizer(d->eng);
    char *was = NULL;
    int rc;

    if (cur && strcmp(cur, spec) == 0)
        return 0;
    /* The same optimizer written otherwise (a restarted worker setting the
     * one a snapshot restored) keeps its states too. */
    if (cur) {
        struct kvs__optim *o = NULL;
        int same = kvs__optim_parse(spec, &o, e) == 0 && strcmp(kvs__optim_spec(o), cur) == 0;

        kvs__optim_free(o);
        e->code = 0;
        e->msg[0] = '\0';
        if (same)
            return 0;
    }
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

/* The job failed: every save and load waiting for the hosts ends with its
 * failure. */
static void states_fail(struct daemon *d, int status, const char *msg)
{
    while (d->stq) {
        struct stq *q = d->stq;

        d->stq = q->next;
        answer_complete(d, q->r, status, msg);
        stq_free(d, q);
    }
}

void states_init(struct daemon *d)
{
    static const struct fail_hook hook = { NULL, states_fail };

    job_hook(d, &hook);
}
