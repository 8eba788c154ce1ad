/*
 * collectives.c - kvsd's collective calls, which complete when every worker
 * still in the job has made them: an init of a key (which stores the value
 * of the lowest rank, once all have come, and refuses values of different
 * dtypes or shapes) and the barrier. Waiting collectives are found by a
 * hash of op and key, since a list call may init hundreds of thousands of
 * keys; the inits one list completes are stored in one engine call.
 *
 * Across hosts, host 0 decides: every other host, once its own workers
 * have all come, tells host 0 (ARRIVE); host 0, once every host still in
 * the job has, tells them all (DONE), with an init's value (its lowest
 * rank's: global rank 0's), and each host completes its own workers'
 * calls, storing that value.
 *
 * Serve thread only. Like requests.c, it reads a request's data only from
 * staging of a worker still LIVE, copying an init's value on arrival (the
 * worker may leave before the last one comes). A row-sparse init
 * (KVS__SQE_ROWS) sends only its rows; kvsd keeps its dense form (rows.c),
 * so that from there on it is an init like any other.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives.h"
#include "answers.h"
#include "arena.h"
#include "combined.h"
#include "commits.h"
#include "devbufs.h"
#include "hosts.h"
#include "job.h"
#include "req.h"
#include "rows.h"

#include "kernels/array.h"
#include "device/mem.h"

/* Collectives waiting are found by a hash of their op and key: a list
 * call may init hundreds of thousands of keys, each its own collective. */
static uint64_t coll_hash(uint8_t op, int str, int64_t id, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull ^ op ^ ((uint64_t)str << 8);

    if (str) {
        for (const unsigned char *p = (const unsigned char *)name; *p; p++)
            h = (h ^ *p) * 0x100000001b3ull;
    } else {
        h = (h ^ (uint64_t)id) * 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static size_t coll_bucket(const struct daemon *d, const struct coll *c)
{
    return coll_hash(c->op, c->key.name != NULL, c->key.id, c->key.name) & (d->coll_cap - 1);
}

/* The collective of op and key (ignored for a barrier) waiting, or NULL. */
static struct coll *coll_find(struct daemon *d, uint8_t op, kvs_key_t key)
{
    int str = op == KVS__OP_INIT && key.name != NULL;
    int64_t id = op == KVS__OP_INIT && !str ? key.id : 0;
    const char *name = str ? key.name : "";
    uint8_t s_op = op;

    if (d->coll_cap == 0)
        return NULL;
    for (struct coll *c = d->coll_tab[coll_hash(s_op, str, id, name) & (d->coll_cap - 1)]; c;
         c = c->hnext)
        if (c->op == s_op && (c->key.name != NULL) == str
            && (str ? strcmp(c->key.name, name) == 0 : c->key.id == id))
            return c;
    return NULL;
}

/* Links a new collective into the list and the table (grown to keep
 * chains short). 0 or -ENOMEM. */
static int coll_link(struct daemon *d, struct coll *c)
{
    if (2 * (d->ncolls + 1) > d->coll_cap) {
        size_t cap = d->coll_cap ? 2 * d->coll_cap : 64;
        struct coll **tab = calloc(cap, sizeof *tab);

        if (!tab)
            return -ENOMEM;
        free(d->coll_tab);
        d->coll_tab = tab;
        d->coll_cap = cap;
        for (struct coll *o = d->colls; o; o = o->next) {
            size_t b = coll_bucket(d, o);

            o->hnext = tab[b];
            tab[b] = o;
        }
    }
    {
        size_t b = coll_bucket(d, c);

        c->hnext = d->coll_tab[b];
        d->coll_tab[b] = c;
    }
    c->next = d->colls;
    if (d->colls)
        d->colls->pprev = &c->next;
    c->pprev = &d->colls;
    d->colls = c;
    d->ncolls++;
    return 0;
}

static void coll_unlink(struct daemon *d, struct coll *c)
{
    struct coll **p = &d->coll_tab[coll_bucket(d, c)];

    while (*p != c)
        p = &(*p)->hnext;
    *p = c->hnext;
    *c->pprev = c->next;
    if (c->next)
        c->next->pprev = c->pprev;
    d->ncolls--;
}

static void coll_free(struct coll *c)
{
    free(c->why);
    free((char *)c->key.name);
    kvs__mem_free(c->value_dev, c->value);
    free(c);
}

/* A new collective of op and key, linked. NULL without memory. */
static struct coll *coll_new(struct daemon *d, uint8_t op, kvs_key_t key)
{
    int str = op == KVS__OP_INIT && key.name != NULL;
    size_t nw = (size_t)d->nworkers, nh = d->hx ? (size_t)d->nhosts : 0;
    struct coll *c = calloc(1, sizeof *c + nw + 3 * nh);

    if (!c || (str && !(c->key.name = strdup(key.name)))) {
        free(c);
        return NULL;
    }
    c->op = op;
    c->key.id = op == KVS__OP_INIT && !str ? key.id : 0;
    c->harrived = c->arrived + nw;
    c->hmark = c->harrived + nh;
    c->hack = c->hmark + nh;
    c->step = KVS__COMMIT_ANY;
    c->value_rank = INT_MAX;
    if (coll_link(d, c) != 0) {
        coll_free(c);
        return NULL;
    }
    return c;
}

/* An init stores the value of the lowest rank that called it (rank 0,
 * unless rank 0 has left the job), once every worker has: values of
 * another dtype or shape than that one fail the init for everyone, so
 * that no worker trains on a value it did not expect. 0 and that value's
 * request in *first, or the error. */
static int init_value(const struct daemon *d, const struct coll *c, const struct req **first,
                      struct kvs__err *e)
{
    const struct req *f = NULL;
    char ks[KVS_MAX_KEY_LEN + 8], s1[96], s2[96];

    for (const struct req *r = c->reqs; r; r = r->next)
        if (!f || d->workers[r->w].rank < d->workers[f->w].rank)
            f = r;
    for (const struct req *r = c->reqs; r; r = r->next) {
        if (r->s.dtype == f->s.dtype && r->s.ndim == f->s.ndim
            && memcmp(r->s.shape, f->s.shape, sizeof r->s.shape[0] * (size_t)r->s.ndim) == 0)
            continue;
        kvs__key_str(ks, sizeof ks, req_key(&f->s));
        kvs__shape_str(s1, sizeof s1, r->s.ndim, r->s.shape);
        kvs__shape_str(s2, sizeof s2, f->s.ndim, f->s.shape);
        return kvs__fail(e, r->s.dtype != f->s.dtype ? KVS_EDTYPE : KVS_ESHAPE,
                         "key %s: rank %d's init value is %s %s, rank %d's %s %s: nothing "
                         "stored", ks, d->workers[r->w].rank, kvs_dtype_name(r->s.dtype), s1,
                         d->workers[f->w].rank, kvs_dtype_name(f->s.dtype), s2);
    }
    *first = f;
    return 0;
}

/* The value an init stores: first's array, with the bytes kvsd kept. */
static kvs_array_t init_array(const struct coll *c, const struct req *first)
{
    kvs_array_t a = req_array(&first->s, c->value);

    a.device = c->value_dev;
    return a;
}

/* Stores one init's value; a full arena is said as such. */
static int init_one(struct daemon *d, const struct coll *c, const struct req *first,
                    struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    kvs_key_t key = req_key(&first->s);
    kvs_array_t a = init_array(c, first);
    uint64_t need = sizeof(struct kvs__block_head) + c->value_len;
    int rc = kvs__engine_init(d->eng, 1, &key, &a, 0, e);

    if (rc == -ENOMEM && arena_room(d) < need) {
        kvs__key_str(ks, sizeof ks, key);
        rc = kvs__fail(e, -ENOMEM, "key %s: kvsd's arena is full: %llu of its %llu bytes are "
                       "used, %llu more needed (kvsrun --arena, kvsd --arena set its size)",
                       ks, (unsigned long long)(d->o.arena - arena_room(d)),
                       (unsigned long long)d->o.arena, (unsigned long long)need);
    }
    return rc;
}

/* Stores the values of the inits whose workers have all come (d->inits),
 * in one engine call: a list of many keys is many inits, and one call per
 * key costs more than the copying. If that call fails (it then changed
 * nothing), each init is stored alone and gets its own status. */
void colls_finish_inits(struct daemon *d)
{
    struct coll *list = d->inits;
    struct kvs__err e = { 0, "" };
    kvs_key_t *keys;
    kvs_array_t *vals;
    const struct req **first;
    int n = 0, nok = 0, rc;

    if (!list)
        return;
    d->inits = NULL;
    for (struct coll *c = list; c; c = c->next)
        n++;
    keys = malloc(sizeof *keys * (size_t)n);
    vals = malloc(sizeof *vals * (size_t)n);
    first = calloc((size_t)n, sizeof *first);
    if (keys && vals && first) {
        int i = 0;

        for (struct coll *c = list; c; c = c->next, i++) {
            if (init_value(d, c, &first[i], &e) != 0)
                continue;              /* stored alone below, with its error */
            keys[nok] = req_key(&first[i]->s);
            vals[nok++] = init_array(c, first[i]);
        }
    }
    rc = nok > 0 && nok == n ? kvs__engine_init(d->eng, n, keys, vals, 0, &e) : -1;
    if (rc == 0) {
        int m = 0;

        /* A key initialised from row-sparse values stays kvsd's: its
         * row-sparse pushes and pulls go through kvsd (rows.c). */
        for (int i = 0; i < n; i++)
            if (!(first[i]->s.flags & KVS__SQE_ROWS))
                keys[m++] = keys[i];
        cb_add_keys(d, m, keys);
    }
    for (struct coll *c = list, *next; c; c = next) {
        struct kvs__err one = { 0, "" };
        const struct req *f;
        int status = 0;

        next = c->next;
        if (rc != 0)
            status = init_value(d, c, &f, &one) ? one.code : init_one(d, c, f, &one);
        answer_complete_list(d, c->reqs, status, one.msg);
        coll_free(c);
    }
    free(keys);
    free(vals);
    free(first);
}

/* Every worker has come: a barrier completes now, an init joins the
 * others of this pass (colls_finish_inits). */
static void coll_finish(struct daemon *d, struct coll *c)
{
    coll_unlink(d, c);
    d->st.collectives++;
    if (c->op == KVS__OP_INIT) {
        c->next = d->inits;
        d->inits = c;
        return;
    }
    answer_complete_list(d, c->reqs, 0, NULL);
    coll_free(c);
}

/* 1 when a push kvsd took is not applied yet: in a round not closed, or
 * waiting for one (dist_sync; dist_async applies each on arrival). */
static int pushes_unapplied(const struct daemon *d)
{
    if (!d->sync)
        return 0;
    if (d->open)
        return 1;
    for (const struct req *r = d->pending; r; r = r->next)
        if (r->s.op == KVS__OP_PUSH)
            return 1;
    return 0;
}

/* ---- a commit across hosts ----------------------------------------------
 *
 * Through host 0, as the other collectives, in three steps, so that no
 * host's snapshot holds a round another host's does not and no worker
 * goes on before every host has its snapshot:
 *   arrive:   a host whose workers have all come with one step, their pushes
 *             applied, tells host 0 (ARRIVE, a = the step, b = 0; a = -1:
 *             its workers' steps differ);
 *   capture:  host 0, once every host has, tells them all (DONE, b = 0; a
 *             failure: status, and every worker gets it); each host then
 *             tells every other one (ARRIVE, b = 2: a mark), and captures its
 *             snapshot once it has the marks of all (every frame they sent
 *             before, a round's value too, is in: links keep their order;
 *             host 0's DONE is its mark) and tells host 0 (ARRIVE, b = 1;
 *             b = 3: its capture failed);
 *   answer:   host 0, once every host has captured, tells them all (DONE,
 *             b = 1), and each answers its workers.
 * A host that dies meanwhile rolls the job back everywhere, to the newest
 * commit every host holds (xcommits.c). */
enum { XC_ARRIVE = 0, XC_CAPTURED = 1, XC_MARK = 2, XC_FAILED = 3 };

static void xcommit_tell(struct daemon *d, int type, int64_t step, uint64_t phase, int status,
                         const char *why, int to)
{
    struct kvs__wire_msg m = { .op = KVS__OP_COMMIT, .a = (uint64_t)step, .b = phase,
                               .status = status };
    struct frame *f;

    if (status) {
        m.data = why;
        m.len = strlen(why);
    }
    if (!(f = hosts_frame_new(d, type, &m, NULL))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory for a commit");
        return;
    }
    hosts_post(d, f, to);
}

/* c ends here: its workers answered with status (why). */
static void xcommit_end(struct daemon *d, struct coll *c, int status, const char *why)
{
    coll_unlink(d, c);
    if (status == 0)
        d->st.collectives++;
    answer_complete_list(d, c->reqs, status, status ? why : NULL);
    coll_free(c);
}

static void xcommit_note(struct coll *c, int status, const char *why)
{
    if (c->status == 0) {
        c->status = status;
        c->why = strdup(why);
    }
}

/* Host 0: a host's arrival with step (KVS__COMMIT_ANY: it has no worker
 * in it), kept or found to differ. */
static void xcommit_step(struct daemon *d, struct coll *c, int h, int64_t step)
{
    char why[KVS__MSG_MAX];

    if (step == KVS__COMMIT_ANY || c->status)
        return;
    if (step < 0) {
        snprintf(why, sizeof why, "kvs_commit: the workers of %s committed different steps: "
                 "the workers must commit the same step; nothing committed",
                 h == 0 ? "host 0" : hosts_name(d, h));
        xcommit_note(c, KVS_EBADARG, why);
    } else if (c->step == KVS__COMMIT_ANY) {
        c->step = step;
    } else if (c->step != step) {
        snprintf(why, sizeof why, "kvs_commit: %s committed step %lld, another host step "
                 "%lld: the workers must commit the same step; nothing committed",
                 h == 0 ? "host 0" : hosts_name(d, h), (long long)step, (long long)c->step);
        xcommit_note(c, KVS_EBADARG, why);
    }
}

/* 1 when every other host (but host 0, whose DONE marks) has marked, or
 * left. */
static int xcommit_marked(const struct daemon *d, const struct coll *c)
{
    for (int h = 1; h < d->nhosts; h++)
        if (h != d->me && !c->hmark[h] && !d->host_out[h])
            return 0;
    return 1;
}

static void xcommit_progress(struct daemon *d, struct coll *c);
static void commit_check(struct daemon *d, struct coll *c);

/* Once decided and marked: this host's snapshot, and host 0 told. */
static void xcommit_capture(struct daemon *d, struct coll *c)
{
    struct kvs__err e = { 0, "" };

    if (c->phase != 1 || !xcommit_marked(d, c))
        return;
    c->phase = 2;
    if (commits_make(d, c->step, &e) != 0)
        xcommit_note(c, e.code, e.msg);
    if (d->me != 0)
        xcommit_tell(d, KVS__FRAME_ARRIVE, c->step, c->status ? XC_FAILED : XC_CAPTURED,
                     0, NULL, 0);
    else
        xcommit_progress(d, c);
}

/* Host 0: what c waits for next, and the DONEs once it has it. */
static void xcommit_progress(struct daemon *d, struct coll *c)
{
    for (int h = 1; h < d->nhosts; h++)
        if (!d->host_out[h] && !(c->phase == 0 ? c->harrived[h] : c->hack[h]))
            return;
    if (c->phase == 0 && !c->sent)
        return;
    if (c->phase == 0) {
        if (c->status) {
            xcommit_tell(d, KVS__FRAME_DONE, c->step, XC_ARRIVE, c->status, c->why, HOSTS_IN);
            xcommit_end(d, c, c->status, c->why);
            return;
        }
        if (c->step == KVS__COMMIT_ANY) {   /* no worker anywhere: nothing to commit */
            xcommit_end(d, c, 0, NULL);
            return;
        }
        xcommit_tell(d, KVS__FRAME_DONE, c->step, XC_ARRIVE, 0, NULL, HOSTS_IN);
        c->phase = 1;
        xcommit_capture(d, c);
        return;
    }
    if (c->phase == 2) {
        xcommit_tell(d, KVS__FRAME_DONE, c->step, XC_CAPTURED, c->status, c->why ? c->why : "",
                     HOSTS_IN);
        xcommit_end(d, c, c->status, c->why);
    }
}

/* This host's workers have all come with step (-1: steps that differ,
 * said in e; KVS__COMMIT_ANY: none here), their pushes applied. */
static void xcommit_arrived(struct daemon *d, struct coll *c, int64_t step,
                            const struct kvs__err *e)
{
    c->sent = 1;
    if (d->me != 0) {
        c->step = step;
        if (step == -1)
            xcommit_note(c, KVS_EBADARG, e->msg);
        xcommit_tell(d, KVS__FRAME_ARRIVE, step, XC_ARRIVE, 0, NULL, 0);
        return;
    }
    if (step == -1)
        xcommit_note(c, KVS_EBADARG, e->msg);
    else
        xcommit_step(d, c, 0, step);
    xcommit_progress(d, c);
}

/* Another host's ARRIVE of a commit: at host 0 an arrival or a capture,
 * anywhere a mark. */
static void xcommit_remote_arrive(struct daemon *d, int h, const struct kvs__wire_msg *m)
{
    kvs_key_t none = { 0 };
    struct coll *c = coll_find(d, KVS__OP_COMMIT, none);

    if (m->b == XC_MARK) {
        if (c)
            c->hmark[h] = 1;
        if (c)
            xcommit_capture(d, c);
        return;
    }
    if (d->me != 0 || m->b > XC_FAILED || (m->b != XC_ARRIVE && (!c || c->phase == 0))
        || (m->b == XC_ARRIVE && c && c->harrived[h])) {
        job_fail(d, KVS_EPROTO, "%s broke the protocol: a commit's message out of place",
                 hosts_name(d, h));
        return;
    }
    if (!c && !(c = coll_new(d, KVS__OP_COMMIT, none))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory for a collective");
        return;
    }
    if (m->b == XC_ARRIVE) {
        c->harrived[h] = 1;
        xcommit_step(d, c, h, (int64_t)m->a);
        /* Host 0's own workers may all have left: it arrives for none. */
        if (!c->sent && c->narrived >= job_expected(d)) {
            commit_check(d, c);
            return;
        }
    } else {
        c->hack[h] = 1;
        if (m->b == XC_FAILED)
            xcommit_note(c, -EIO, "kvs_commit: another host could not capture its "
                         "snapshot: nothing committed there (see its kvsd's log)");
    }
    xcommit_progress(d, c);
}

/* Host 0's DONE of a commit: capture (b = 0), or answer (b = 1). */
static void xcommit_remote_done(struct daemon *d, const struct kvs__wire_msg *m)
{
    kvs_key_t none = { 0 };
    struct coll *c = coll_find(d, KVS__OP_COMMIT, none);
    char text[KVS__WIRE_TEXT_MAX + 1];

    if (!c || !c->sent || (m->b == XC_CAPTURED ? c->phase != 2 : c->phase != 0)) {
        if (job_expected(d) == 0)
            return;                    /* every worker here has left */
        job_fail(d, KVS_EPROTO, "host 0 broke the protocol: a commit's end out of place");
        return;
    }
    if (m->status != 0) {
        xcommit_end(d, c, m->status, kvs__wire_msg_text(m, text));
        return;
    }
    if (m->b == XC_CAPTURED) {
        xcommit_end(d, c, c->status, c->why);
        return;
    }
    c->step = (int64_t)m->a;
    c->phase = 1;
    xcommit_tell(d, KVS__FRAME_ARRIVE, c->step, XC_MARK, 0, NULL, HOSTS_IN);
    xcommit_capture(d, c);
}

/* A commit whose workers have all come: steps that differ fail it for
 * all; else, once every push taken before it is applied, the snapshot is
 * made (commits.c) and every worker answered. */
static void commit_check(struct daemon *d, struct coll *c)
{
    struct kvs__err e = { 0, "" };
    const struct req *f = c->reqs;
    int rc;

    for (const struct req *r = c->reqs; r; r = r->next)   /* the lowest rank's, to name */
        if (d->workers[r->w].rank < d->workers[f->w].rank)
            f = r;
    for (const struct req *r = c->reqs; r; r = r->next)
        if (r->s.arg != f->s.arg) {
            kvs__fail(&e, KVS_EBADARG, "kvs_commit: rank %d committed step %lld, rank %d "
                      "step %lld: the workers must commit the same step; nothing committed",
                      d->workers[f->w].rank, (long long)f->s.arg, d->workers[r->w].rank,
                      (long long)r->s.arg);
            break;
        }
    if (c->sent)                       /* across hosts: this host's part is done */
        return;
    if (e.code == 0 && f && pushes_unapplied(d)) {
        d->commit_waits = 1;           /* colls_commit_check, each serve pass */
        return;
    }
    d->commit_waits = 0;
    if (d->hx) {
        xcommit_arrived(d, c, e.code ? -1 : f ? (int64_t)f->s.arg : KVS__COMMIT_ANY, &e);
        return;
    }
    coll_unlink(d, c);
    if (e.code == 0 && f)
        rc = commits_make(d, (int64_t)f->s.arg, &e);
    else
        rc = e.code;
    if (rc == 0)
        d->st.collectives++;
    answer_complete_list(d, c->reqs, rc, rc ? e.msg : NULL);
    coll_free(c);
}

void colls_commit_check(struct daemon *d)
{
    kvs_key_t none = { 0 };
    struct coll *c = coll_find(d, KVS__OP_COMMIT, none);

    if (c && c->narrived >= job_expected(d))
        commit_check(d, c);
    else
        d->commit_waits = 0;
}

/* An init of a key restored from a snapshot (--restore): the restored
 * value stays, and the init answers at once, with no collective (a
 * restarted worker may init what the others, reconnected, do not). Of
 * another dtype or shape, it fails as an init of an existing key would.
 * 1 when r was such an init (answered), else 0. */
static int init_restored(struct daemon *d, struct req *r)
{
    struct kvs__entry_info info;
    struct kvs__err e = { 0, "" };
    char ks[KVS_MAX_KEY_LEN + 8], s1[96], s2[96];
    const struct round *rd;

    if (!d->o.restore || kvs__engine_lookup(d->eng, req_key(&r->s), &info, &e) != 0)
        return 0;
    if (!(rd = *info.front) || !rd->restored)
        return 0;
    if (r->s.dtype == info.dtype && r->s.ndim == info.ndim
        && memcmp(r->s.shape, info.shape, sizeof r->s.shape[0] * (size_t)r->s.ndim) == 0) {
        answer_complete(d, r, 0, NULL);
        return 1;
    }
    kvs__key_str(ks, sizeof ks, req_key(&r->s));
    kvs__shape_str(s1, sizeof s1, r->s.ndim, r->s.shape);
    kvs__shape_str(s2, sizeof s2, info.ndim, info.shape);
    kvs__fail(&e, r->s.dtype != info.dtype ? KVS_EDTYPE : KVS_ESHAPE,
              "key %s: rank %d's init value is %s %s, but the store was restored from the "
              "snapshot of step %lld, where the key is %s %s: nothing stored", ks,
              d->workers[r->w].rank, kvs_dtype_name(r->s.dtype), s1,
              (long long)d->resume_step, kvs_dtype_name(info.dtype), s2);
    answer_complete(d, r, e.code, e.msg);
    return 1;
}

/* Host 0 tells the others that c is complete: an init with its value (or
 * why it fails), checked here first as colls_finish_inits will check it. */
static void tell_done(struct daemon *d, const struct coll *c)
{
    struct kvs__wire_msg m = { .op = c->op };
    struct kvs__err e = { 0, "" };
    const struct req *f = NULL;
    struct frame *fr;

    if (c->op == KVS__OP_INIT) {
        m.key = c->key;
        if (!c->reqs || c->value_rank == INT_MAX)
            kvs__fail(&e, KVS_EPEERDEAD, "no worker of host 0 is left to give the value");
        else
            init_value(d, c, &f, &e);
        if (e.code == 0) {
            m.dtype = f->s.dtype;
            m.ndim = f->s.ndim;
            memcpy(m.shape, f->s.shape, sizeof m.shape[0] * (size_t)f->s.ndim);
            m.data = c->value;
            m.len = c->value_len;
        } else {
            m.status = e.code;
            m.data = e.msg;
            m.len = strlen(e.msg);
        }
    }
    if (!(fr = hosts_frame_new(d, KVS__FRAME_DONE, &m, NULL))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory for a collective's end");
        return;
    }
    hosts_post(d, fr, HOSTS_IN);
}

/* c once this host's workers have all come: on one host, or at host 0 once
 * every other host still in the job has too, it completes; another host
 * tells host 0 and waits for its DONE. */
static void coll_check(struct daemon *d, struct coll *c)
{
    if (c->narrived < job_expected(d))
        return;
    if (c->op == KVS__OP_COMMIT) {
        commit_check(d, c);
        return;
    }
    if (d->hx && d->me != 0) {
        struct kvs__wire_msg m = { .op = c->op };
        struct frame *f;

        if (c->sent)
            return;
        if (c->op == KVS__OP_INIT)
            m.key = c->key;
        if (!(f = hosts_frame_new(d, KVS__FRAME_ARRIVE, &m, NULL))) {
            job_fail(d, -ENOMEM, "kvsd: out of memory for a collective");
            return;
        }
        hosts_post(d, f, 0);
        c->sent = 1;
        return;
    }
    if (d->hx) {
        for (int h = 1; h < d->nhosts; h++)
            if (!c->harrived[h] && !d->host_out[h])
                return;
        tell_done(d, c);
        if (!c->reqs) {                /* none of this host's workers is in it */
            coll_unlink(d, c);
            d->st.collectives++;
            coll_free(c);
            return;
        }
    }
    coll_finish(d, c);
}

void colls_check(struct daemon *d)
{
    for (struct coll *c = d->colls, *next; c; c = next) {
        next = c->next;
        coll_check(d, c);
    }
}

/* Keeps r's init value as the one to store: a copy of its bytes, on the
 * GPU they came from when it is a device init (KVS__SQE_DEVICE) on one
 * host, and there the key's value will live; else on the host. */
static int init_take(struct daemon *d, struct coll *c, const struct req *r, struct kvs__err *e)
{
    int dev = KVS_HOST, rc;
    void *v;

    if (r->s.flags & KVS__SQE_DEVICE) {
        if ((!d->hx && (rc = devbuf_device(d, r, &dev, e)) != 0)
            || (rc = kvs__mem_alloc(dev, r->s.data_len ? r->s.data_len : 1, 0, &v, e)) != 0)
            return rc;
        if ((rc = devbuf_read(d, r, v, dev, e)) != 0) {
            kvs__mem_free(dev, v);
            return rc;
        }
    } else if (r->s.flags & KVS__SQE_ROWS) {
        uint64_t len;

        if ((rc = rows_init_value(d, r, &v, &len, e)) != 0)
            return rc;
    } else {
        if ((rc = kvs__mem_alloc(KVS_HOST, r->s.data_len ? r->s.data_len : 1, 0, &v, e)) != 0)
            return rc;
        memcpy(v, d->workers[r->w].staging + r->s.data_off, r->s.data_len);
    }
    kvs__mem_free(c->value_dev, c->value);
    c->value = v;
    c->value_dev = dev;
    c->value_rank = d->workers[r->w].rank;
    return 0;
}

void colls_arrive(struct daemon *d, struct req *r)
{
    struct coll *c;

    if (r->s.op == KVS__OP_INIT && init_restored(d, r))
        return;
    c = coll_find(d, r->s.op, req_key(&r->s));

    if (c && c->arrived[r->w]) {
        answer_complete(d, r, KVS_EBADARG, "this worker already waits in the same collective");
        return;
    }
    if (!c && !(c = coll_new(d, r->s.op, req_key(&r->s)))) {
        answer_complete(d, r, -ENOMEM, "kvsd: out of memory");
        return;
    }
    /* An init's value is needed when the last worker arrives, and a worker
     * may leave before that: kvsd keeps a copy of the lowest rank's so far
     * (a row-sparse init's in its dense form: rows.c), the only one stored,
     * of the first arrival's size. A value of another
     * size fails the init (init_value), and then no value is stored. */
    if (r->s.op == KVS__OP_INIT && !c->narrived && !c->value) {
        c->value_len = rows_init_len(r);
        /* before any host may send a value of it, or rows */
        hosts_expect(d, c->value_len, r->s.ndim > 0 ? (uint64_t)r->s.shape[0] : 0);
    }
    if (r->s.op == KVS__OP_INIT && rows_init_len(r) == c->value_len
        && d->workers[r->w].rank < c->value_rank) {
        struct kvs__err e = { 0, "" };
        int rc = init_take(d, c, r, &e);

        if (rc != 0) {
            answer_complete(d, r, rc, e.msg);
            return;
        }
    }
    c->arrived[r->w] = 1;
    c->narrived++;
    r->next = c->reqs;
    c->reqs = r;
    coll_check(d, c);
}

void colls_remote_arrive(struct daemon *d, int h, const struct kvs__wire_msg *m)
{
    struct coll *c;

    if (m->op == KVS__OP_COMMIT) {
        xcommit_remote_arrive(d, h, m);
        return;
    }
    c = coll_find(d, m->op, m->key);

    if (d->me != 0 || (c && c->harrived[h])) {
        job_fail(d, KVS_EPROTO, "%s broke the protocol: %s", hosts_name(d, h),
                 d->me ? "a collective's arrival came to a host other than 0"
                       : "it arrived twice in one collective");
        return;
    }
    if (!c && !(c = coll_new(d, m->op, m->key))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory for a collective");
        return;
    }
    c->harrived[h] = 1;
    coll_check(d, c);
}

void colls_remote_done(struct daemon *d, int h, const struct kvs__wire_msg *m)
{
    struct coll *c = coll_find(d, m->op, m->key);
    char ks[KVS_MAX_KEY_LEN + 8], s1[96], s2[96], text[KVS__WIRE_TEXT_MAX + 1];
    const struct req *f = NULL;
    struct kvs__err e = { 0, "" };

    if (m->op == KVS__OP_COMMIT && h == 0) {
        xcommit_remote_done(d, m);
        return;
    }
    if (h != 0 || !c || !c->sent) {
        if (job_expected(d) == 0)
            return;                    /* every worker here has left: nothing waits on it */
        job_fail(d, KVS_EPROTO, "%s broke the protocol: the end of a collective this host "
                 "did not arrive in", hosts_name(d, h));
        return;
    }
    if (m->status != 0) {
        kvs__fail(&e, m->status, "%s", kvs__wire_msg_text(m, text));
    } else if (c->op == KVS__OP_INIT && init_value(d, c, &f, &e) == 0
               && (f->s.dtype != m->dtype || f->s.ndim != m->ndim
                   || memcmp(f->s.shape, m->shape, sizeof m->shape[0] * (size_t)m->ndim))) {
        kvs__key_str(ks, sizeof ks, c->key);
        kvs__shape_str(s1, sizeof s1, f->s.ndim, f->s.shape);
        kvs__shape_str(s2, sizeof s2, m->ndim, m->shape);
        kvs__fail(&e, f->s.dtype != m->dtype ? KVS_EDTYPE : KVS_ESHAPE,
                  "key %s: rank %d's init value is %s %s, rank 0's %s %s: nothing stored", ks,
                  d->workers[f->w].rank, kvs_dtype_name(f->s.dtype), s1,
                  kvs_dtype_name(m->dtype), s2);
    }
    if (e.code != 0) {
        coll_unlink(d, c);
        answer_complete_list(d, c->reqs, e.code, e.msg);
        coll_free(c);
        return;
    }
    if (c->op == KVS__OP_INIT)
        memcpy(c->value, m->data, m->len);  /* the same size: the same dtype and shape */
    coll_finish(d, c);
}

int colls_init_waiting(struct daemon *d, kvs_key_t key, uint64_t *bytes)
{
    struct coll *c = coll_find(d, KVS__OP_INIT, key);

    if (!c || !c->sent)
        return 0;
    *bytes = c->value_len;
    return 1;
}

/* The job failed: every collective waiting ends with its failure. */
static void colls_fail(struct daemon *d, int status, const char *msg)
{
    while (d->colls) {
        struct coll *c = d->colls;

        coll_unlink(d, c);
        answer_complete_list(d, c->reqs, status, msg);
        coll_free(c);
    }
}

void colls_init(struct daemon *d)
{
    static const struct fail_hook hook = { NULL, colls_fail };

    job_hook(d, &hook);
}
