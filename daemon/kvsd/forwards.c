/*
 * forwards.c - async pushes across the hosts of a job (dist_async): a push
 * is applied here to the parts this host owns and forwarded to the owners
 * of the rest (FORWARD); each owner applies its part at once and sends the
 * value it made to every host (VALUE), which answers the push at its own
 * host. A push completes when every part's owner has answered; until then
 * it waits in d->fwd, tokened. bridge.c hands this file the messages.
 *
 * A row-sparse push goes the same way in rows messages (xrows.c makes and
 * reads them): its rows summed once here, each part's run of them (none
 * too) to the part's owner, and from the owner the rows its update changed
 * (the part whole under the dense rule) back to every host.
 *
 * It must never hold a part for a round: an async push is applied as it
 * comes (xrounds.c runs the sync rounds).
 *
 * Serve thread only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forwards.h"
#include "answers.h"
#include "hostmsg.h"
#include "hosts.h"
#include "job.h"
#include "owners.h"
#include "req.h"
#include "rounds.h"
#include "xrows.h"

#include "kernels/compress.h"

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
    m.rows = 0;                        /* key may be a rows FORWARD */
    m.rest_zero = 0;
    hostmsg_value(&m, rd, p, status, msg);
    if (!(f = hosts_frame_new(d, KVS__FRAME_VALUE, &m, NULL))) {
        job_fail(d, -ENOMEM, "kvsd: out of memory sending a value");
        return;
    }
    /* A failure matters to the push's own host only. */
    hosts_post(d, f, status ? to : HOSTS_IN);
}

/* Part p's rows u changed at its owner by a row-sparse async push: the
 * rows to every host as a rows VALUE (to, token: as async_value's); under
 * the dense rule (lazy_update=0) the whole part changed, and goes as a
 * value. */
static void async_rows_value(struct daemon *d, const struct kvs__wire_msg *key,
                             struct round *rd, int p, const struct kvs__rows_union *u, int to,
                             uint64_t token)
{
    struct kvs__wire_msg m = *key;

    if (kvs__engine_rows_rule(d->eng) == KVS__ROWS_DENSE) {
        async_value(d, key, rd, p, 0, NULL, to, token);
        return;
    }
    m.a = to >= 0 ? (uint64_t)to + 1 : 0;
    m.b = token;
    m.data = NULL;                     /* the rows are read from the value */
    if (xrows_tell(d, rd, p, &m, u) != 0)
        job_fail(d, -ENOMEM, "kvsd: out of memory sending a value");
}

/* At the owner of part p: a row-sparse push's rows of it (in: sorted
 * unique, in the part) applied as one update of step `step`, and the
 * rows it changed sent as async_rows_value says; a failure as
 * async_value's. Returns the update's status. */
static int apply_rows(struct daemon *d, const struct kvs__wire_msg *key, struct round *rd,
                      int p, const struct kvs__rows_in *in, uint64_t step, int to,
                      uint64_t token, struct kvs__err *e)
{
    struct kvs__rows_union u;
    int rc = xrows_apply(d, rd, p, 1, in, step, &u, e);

    if (rc == 0)
        async_rows_value(d, key, rd, p, &u, to, token);
    else if (to >= 0)
        async_value(d, key, rd, p, rc, e->msg, to, token);
    kvs__rows_union_free(&u);
    return rc;
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

/* r waits in d->fwd for its owners' answers unless none is left; then
 * this call's own count ends. */
static void push_sent(struct daemon *d, struct req *r)
{
    if (r->nwait > 1) {
        r->next = d->fwd;
        d->fwd = r;
    }
    async_part_done(d, r, 0, NULL);
}

/* forwards_push of a row-sparse push: its rows summed once (repeats
 * added, sorted by row), each part's run of them to the part's owner as a
 * rows FORWARD, none at all included (the owner counts the step, and
 * under ASSIGN the part becomes zero), the parts here applied at once. */
static void push_rows(struct daemon *d, struct req *r)
{
    struct round *rd = r->rd;
    struct kvs__wire_msg m;
    struct kvs__err e = { 0, "" };
    uint64_t step = kvs__engine_steps(d->eng, rd->entry) + 1;   /* its parts' here */
    int rc;

    hostmsg_key_of_req(&m, &r->s);
    m.priority = r->s.priority;
    r->token = ++d->next_token;
    r->nwait = rd->nparts + 1;         /* one for this call, so that r lives to its end */
    if ((rc = xrows_sum_push(d, rd, r, &e)) < 0) {
        xrows_free(rd);
        r->nwait = 1;
        async_part_done(d, r, rc, e.msg);
        return;
    }
    for (int p = 0; p < rd->nparts; p++) {
        if (owners_part(d, rd, p) == d->me) {
            struct kvs__rows_in in = xrows_slice(rd, p);

            e = (struct kvs__err){ 0, "" };
            rc = apply_rows(d, &m, rd, p, &in, step, -1, 0, &e);
            async_part_done(d, r, rc, e.msg);
            continue;
        }
        m.b = r->token;
        if (xrows_send(d, rd, p, KVS__FRAME_FORWARD, &m) != 0)
            async_part_done(d, r, -ENOMEM, "kvsd: out of memory forwarding a push");
    }
    xrows_free(rd);                    /* the frames hold their rows now */
    push_sent(d, r);
}

void forwards_push(struct daemon *d, struct req *r)
{
    struct round *rd = r->rd;
    struct kvs__wire_msg m;
    const void *data = req_data(d, r);
    uint64_t lo, n, step = kvs__engine_steps(d->eng, rd->entry) + 1;   /* its parts' here */

    if (r->s.flags & KVS__SQE_ROWS) {
        push_rows(d, r);
        return;
    }
    hostmsg_key_of_req(&m, &r->s);
    m.priority = r->s.priority;
    r->token = ++d->next_token;
    r->nwait = rd->nparts + 1;         /* one for this call, so that r lives to its end */
    for (int p = 0; p < rd->nparts; p++) {
        struct kvs__err e = { 0, "" };
        struct frame *f;
        void *piece;
        int rc;

        owners_part_range(rd, p, &lo, &n);
        hostmsg_set_part(&m, rd, p);
        if (owners_part(d, rd, p) == d->me) {
            const void *in = hostmsg_elem(rd, data, lo);    /* a 2bit push: decoded */

            rc = rounds_apply_part(d, rd, rd->nparts > 1 ? p : -1, 1, &in, NULL, step, &e);
            if (rc == 0)
                async_value(d, &m, rd, p, 0, NULL, -1, 0);
            async_part_done(d, r, rc, e.msg);
            continue;
        }
        m.b = r->token;
        m.pieces = r->coded != NULL;   /* a 2bit push goes as it came */
        m.data = m.pieces ? NULL : hostmsg_elem(rd, data, lo);
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
    push_sent(d, r);
}

void forwards_on_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                       struct round *rd, const char *text)
{
    /* A value held by the snapshot being written is copied aside first. */
    if (m->status == 0)
        daemon_keep_value(d, rd);
    if (m->status == 0 && m->rows)
        xrows_write(rd, m);
    else if (m->status == 0)
        hostmsg_write_value(rd, m);
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
    hostmsg_broke(d, im->host, "an answer to push %" PRIu64 ", which it never got", m->b);
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

void forwards_on_forward(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                         struct round *rd)
{
    struct kvs__err e = { 0, "" };
    int p = hostmsg_part(m);
    const void *data;
    float *decoded;
    int rc;

    if (d->sync) {
        hostmsg_broke(d, im->host, "a dist_async push came to a dist_sync host");
        return;
    }
    if (owners_part(d, rd, p) != d->me) {
        hostmsg_broke(d, im->host, "a push of part %d of a key that %s owns", p,
                      hosts_name(d, owners_part(d, rd, p)));
        return;
    }
    if (m->rows) {
        struct kvs__rows_in in = { m->row_data, m->ids, (int64_t)m->nnz };

        rc = apply_rows(d, m, rd, p, &in, rd->fwd ? forward_step(d, rd, im->host, m->b) : 0,
                        im->host, m->b, &e);
        if (rc == 0) {
            d->st.pushes++;
            d->st.bytes_pushed += m->len;
        }
        return;
    }
    if (hostmsg_values(rd, m, &data, &decoded) != 0)
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

void forwards_fail(struct daemon *d, int status, const char *msg)
{
    answer_complete_list(d, d->fwd, status, msg);
    d->fwd = NULL;
}
