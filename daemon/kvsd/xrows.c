/*
 * xrows.c - row-sparse pushes across hosts: the rows messages of
 * dist_sync's rounds and of dist_async's pushes. A round in which
 * a worker here pushed rows is summed here once (the union of the
 * workers' rows, a dense push counting as every row), sorted by row, so
 * that each part's rows (a key is split between rows: kvs__wire_part) are
 * one run of the sum: each owner gets its run alone in a rows PARTIAL. An
 * owner applies the hosts' rows of its part as one update
 * (kvs__engine_push_rows_range) and sends back the rows that changed,
 * ids and rows, as a rows VALUE ("the rest is zero" under ASSIGN, where
 * the part's other rows became zero); an updater or lazy_update=0 changes
 * every row of the part, which then goes back dense (xrounds.c).
 *
 * A dist_async push with rows is summed so alone (xrows_sum_push): each
 * part's run goes to its owner as a rows FORWARD, even an empty one, and
 * the owner applies it and sends the changed rows back the same way.
 *
 * xrounds.c decides when a round's pieces go and come, forwards.c when an
 * async push's do; this file only makes and reads them. It must never
 * read a row id from staging twice (the union copies them once) nor
 * answer a request.
 *
 * Serve thread only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xrows.h"
#include "arena.h"
#include "hostmsg.h"
#include "hosts.h"
#include "owners.h"
#include "remote.h"
#include "req.h"
#include "rows.h"

#include "store/engine.h"

struct xrows {
    struct kvs__rows_union u;          /* the workers' rows: u.idx, u.m */
    void *data;                        /* their sums, u.m rows */
    int64_t *all;                      /* every row's id, for dense pushes among them */
};

void xrows_free(struct round *rd)
{
    if (!rd->xr)
        return;
    kvs__rows_union_free(&rd->xr->u);
    free(rd->xr->data);
    free(rd->xr->all);
    free(rd->xr);
    rd->xr = NULL;
}

/* rd->xr: the sum of the k pushes reqs (one at least row-sparse). 1, or
 * <0 with e set. */
static int sum_of(struct daemon *d, struct round *rd, struct req *const *reqs, int k,
                  struct kvs__err *e)
{
    struct kvs__rows_in in[MAX_WORKERS];
    struct xrows *xr;
    int rc;

    xrows_free(rd);
    if (!(xr = calloc(1, sizeof *xr)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a round's rows");
    rd->xr = xr;
    for (int i = 0; i < k; i++) {
        struct req *r = reqs[i];

        if (r->s.flags & KVS__SQE_ROWS) {
            in[i] = (struct kvs__rows_in){ (const unsigned char *)req_data(d, r)
                                           + r->s.arg * sizeof(int64_t), r->ridx,
                                           (int64_t)r->s.arg };
            continue;
        }
        if (remote_in_worker(r) && (rc = remote_copy(d, r)) != 0)
            return kvs__fail(e, rc == -ENOMEM ? -ENOMEM : KVS_EBADARG, "a push could not be "
                             "read out of its worker's memory");
        if (!xr->all) {
            if (!(xr->all = malloc(sizeof *xr->all * (size_t)(rd->nrows ? rd->nrows : 1))))
                return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a round's rows");
            for (int64_t j = 0; j < rd->nrows; j++)
                xr->all[j] = j;
        }
        in[i] = (struct kvs__rows_in){ req_data(d, r), xr->all, rd->nrows };
    }
    if ((rc = kvs__rows_union_make(&xr->u, k, in, rd->row_bytes, rd->nrows, e)) != 0)
        return rc;
    if (!(xr->data = malloc(xr->u.m ? xr->u.m * rd->row_bytes : 1)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a round's rows");
    if (xr->u.m)
        kvs__rows_union_sum(&xr->u, rd->dtype, xr->data,
                            rd->row_bytes / kvs_dtype_size(rd->dtype), d->o.threads);
    return 1;
}

int xrows_sum(struct daemon *d, struct round *rd, struct kvs__err *e)
{
    struct req *reqs[MAX_WORKERS];
    int k = 0;

    xrows_free(rd);
    for (int w = 0; w < d->nworkers; w++)
        if (rd->contrib[w])
            reqs[k++] = rd->contrib[w];
    return rows_any(reqs, k) ? sum_of(d, rd, reqs, k, e) : 0;
}

int xrows_sum_push(struct daemon *d, struct round *rd, struct req *r, struct kvs__err *e)
{
    return sum_of(d, rd, &r, 1, e);
}

void xrows_part_rows(const struct round *rd, int p, int64_t *lo, int64_t *n)
{
    uint64_t first, count, row = rd->row_bytes / kvs_dtype_size(rd->dtype);

    owners_part_range(rd, p, &first, &count);
    row = row ? row : 1;
    *lo = (int64_t)(first / row);
    *n = (int64_t)(count / row);
}

struct kvs__rows_in xrows_slice(const struct round *rd, int p)
{
    const struct xrows *xr = rd->xr;
    int64_t lo, n;
    size_t a = 0, b;

    xrows_part_rows(rd, p, &lo, &n);
    while (a < xr->u.m && xr->u.idx[a] < lo)
        a++;
    for (b = a; b < xr->u.m && xr->u.idx[b] < lo + n; b++)
        ;
    return (struct kvs__rows_in){ (const char *)xr->data + a * rd->row_bytes, xr->u.idx + a,
                                  (int64_t)(b - a) };
}

int xrows_send(struct daemon *d, struct round *rd, int p, int type, struct kvs__wire_msg *m)
{
    struct kvs__rows_in s = xrows_slice(rd, p);
    struct frame *f;
    void *data, *rows;

    hostmsg_set_part(m, rd, p);
    if (type == KVS__FRAME_PARTIAL)
        m->a = rd->done + 1;
    m->pieces = 0;
    m->rows = 1;
    m->rest_zero = 0;
    m->len = kvs__wire_rows_bytes((uint64_t)s.nnz, rd->row_bytes);
    if (!(f = hosts_frame_new(d, type, m, &data)))
        return -ENOMEM;
    rows = kvs__wire_rows_put(data, (uint64_t)s.nnz, s.idx);
    if (s.nnz)
        memcpy(rows, s.data, (size_t)s.nnz * rd->row_bytes);
    rd->rows_sent += (uint64_t)s.nnz * (uint64_t)hosts_post(d, f, owners_part(d, rd, p));
    return 0;
}

int xrows_apply(struct daemon *d, struct round *rd, int p, int k, const struct kvs__rows_in *in,
                uint64_t step, struct kvs__rows_union *u, struct kvs__err *e)
{
    int64_t lo, n;
    int rc;

    memset(u, 0, sizeof *u);
    xrows_part_rows(rd, p, &lo, &n);
    /* The rows that change, before the update reads its inputs: the
     * hosts' messages and this host's sum are kvsd's own memory. */
    if (kvs__engine_rows_rule(d->eng) != KVS__ROWS_DENSE
        && (rc = kvs__rows_union_make(u, k, in, rd->row_bytes, rd->nrows, e)) != 0)
        return rc;
    arena_seq_begin(rd->value);
    rc = kvs__engine_push_rows_range(d->eng, rd->entry, k, in, lo, n, step, e);
    arena_seq_end(rd->value);
    return rc;
}

int xrows_tell(struct daemon *d, struct round *rd, int p, struct kvs__wire_msg *m,
               const struct kvs__rows_union *u)
{
    struct frame *f;
    void *data;
    char *rows;

    hostmsg_set_part(m, rd, p);
    m->pieces = 0;
    m->status = 0;
    m->rows = 1;
    m->rest_zero = kvs__engine_rows_rule(d->eng) == KVS__ROWS_ASSIGN;
    m->len = kvs__wire_rows_bytes(u->m, rd->row_bytes);
    if (!(f = hosts_frame_new(d, KVS__FRAME_VALUE, m, &data)))
        return -ENOMEM;
    rows = kvs__wire_rows_put(data, u->m, u->idx);
    for (size_t j = 0; j < u->m; j++)
        memcpy(rows + j * rd->row_bytes,
               (const char *)rd->value + (size_t)u->idx[j] * rd->row_bytes, rd->row_bytes);
    rd->rows_sent += u->m * (uint64_t)hosts_post(d, f, HOSTS_IN);
    return 0;
}

void xrows_write(struct round *rd, const struct kvs__wire_msg *m)
{
    char *v = rd->value;
    const char *rows = m->row_data;
    int64_t lo, n, at;

    xrows_part_rows(rd, hostmsg_part(m), &lo, &n);
    arena_seq_begin(rd->value);
    at = lo;
    for (uint64_t j = 0; j <= m->nnz; j++) {
        int64_t next = j < m->nnz ? m->ids[j] : lo + n;

        if (m->rest_zero && next > at)
            kvs__rows_zero_gaps(v + (size_t)at * rd->row_bytes, next - at, rd->row_bytes,
                                NULL, 0);
        if (j < m->nnz)
            memcpy(v + (size_t)next * rd->row_bytes, rows + j * rd->row_bytes, rd->row_bytes);
        at = next + 1;
    }
    arena_seq_end(rd->value);
}
