/*
 * rows.c - row-sparse requests (KVS__SQE_ROWS) in kvsd. A row-sparse push
 * carries in staging its nnz row ids, then its nnz rows: the ids are copied
 * once into kvsd's memory and checked there by the engine
 * (kvs__engine_check_rows: every id in range, the key's dtype and shape),
 * so that a worker rewriting its staging cannot steer a write; its rows
 * stay lent in staging until its round closes, as a dense push's data
 * does. A row-sparse init carries the same ids and rows; kvsd keeps its
 * dense form, zero but for those rows (rows_init_value), and from there on
 * it is an init like any other (collectives.c). A row-sparse pull waits
 * as a pull does; its completion names the value and the key's shape
 * record. When the pull gave its ids and room in staging, kvsd gathers
 * the rows there first (rows_gather): kvsd has the arena faulted in
 * already, where the worker copying out of its own read-only mapping
 * would fault in every page it touches (and the pages around it), keep
 * them resident, and spend the sparse step in page faults (bench/NOTES.md
 * 19). Otherwise the worker copies the rows out of the arena itself.
 *
 * Across hosts, dist_sync rounds with rows go through xrows.c (each owner
 * gets its rows of each host's sum), and dist_async pushes with rows
 * through forwards.c (each owner gets its rows of the push). What is not
 * taken, with KVS_ENOTSUP: pushes to a key kept on a GPU, and any
 * row-sparse request of a key the workers combine (KVS_COMBINE): its
 * workers push and pull its rows in the combine area themselves
 * (client/combine.c), so only a worker that breaks that sends one here.
 * Compact pulls across hosts are taken: every host holds
 * the whole value of each key it serves, which the owners' values keep
 * current, so a pull reads its own host's arena as on one host.
 *
 * Serve thread only (so no value changes while rows are gathered). It
 * must never read a row id from staging twice, nor answer a request
 * (answers.c does) or decide when a round closes (rounds.c does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "rows.h"
#include "arena.h"
#include "remote.h"
#include "req.h"

#include "kernels/array.h"
#include "device/mem.h"
#include "store/engine_args.h"
#include "proto/layout.h"
#include "proto/trace.h"

int rows_take_ids(struct daemon *d, struct req *r, struct kvs__err *e)
{
    size_t bytes = (size_t)r->s.arg * sizeof *r->ridx;

    /* The slot's check bounds arg: its ids and rows lie in staging. */
    if (!(r->ridx = malloc(bytes ? bytes : 1)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a row-sparse push's row ids");
    memcpy(r->ridx, d->workers[r->w].staging + r->s.data_off, bytes);
    return 0;
}

uint64_t rows_init_len(const struct req *r)
{
    int64_t bytes = 0;

    if (!(r->s.flags & KVS__SQE_ROWS))
        return r->s.data_len;
    kvs__value_size(r->s.dtype, r->s.ndim, r->s.shape, &bytes);
    return (uint64_t)bytes;
}

int rows_init_value(struct daemon *d, const struct req *r, void **out, uint64_t *len,
                    struct kvs__err *e)
{
    const unsigned char *data = d->workers[r->w].staging + r->s.data_off;
    int64_t nnz = (int64_t)r->s.arg, row = 0, *ids;
    uint64_t bytes = rows_init_len(r);
    kvs_array_t a = { .dtype = KVS_INT64, .ndim = 1, .shape = { nnz }, .device = KVS_HOST };
    size_t elems;
    unsigned char *v;
    int rc;

    kvs__row_size(r->s.dtype, r->s.ndim, r->s.shape, &row);
    if (!(ids = malloc((size_t)nnz * sizeof *ids + 1)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a row-sparse init's row ids");
    memcpy(ids, data, (size_t)nnz * sizeof *ids);
    a.data = ids;
    if ((rc = kvs__check_row_ids(req_key(&r->s), 0, &a, r->s.ndim, r->s.shape[0], e)) != 0
        || (rc = 0, !(v = calloc(1, bytes ? (size_t)bytes : 1)))) {
        free(ids);
        return rc ? rc : kvs__fail(e, -ENOMEM, "kvsd: out of memory for a %" PRIu64 "-byte "
                                   "init value", bytes);
    }
    /* calloc, not kvs__mem_alloc's memset: the rows not given stay pages
     * never touched (kvs__mem_free frees host memory with free). Rows are
     * summed as the engine's init from rows sums them, read from staging
     * once each, and only ever written to kvsd's copy. */
    elems = row > 0 ? (size_t)row / kvs_dtype_size(r->s.dtype) : 0;
    data += (size_t)nnz * sizeof *ids;
    for (int64_t j = 0; j < nnz && elems > 0; j++) {
        unsigned char *dst = v + (size_t)ids[j] * (size_t)row;
        const void *in[2] = { dst, data + (size_t)j * (size_t)row };

        kvs__sum(r->s.dtype, dst, in, 2, elems, 1);
    }
    free(ids);
    *out = v;
    *len = bytes;
    return 0;
}

void rows_gather(struct daemon *d, const struct round *rd, const struct req *r,
                 uint32_t *flags)
{
    const struct worker *w = &d->workers[r->w];
    uint64_t n = r->s.arg, room;
    const unsigned char *src = rd->value;
    unsigned char *dst;

    if (r->s.data_len == 0 || !r->ridx || w->state != W_LIVE || !w->seg
        || rd->row_bytes == 0)
        return;
    /* The slot's check bounds the ids by data_len, so this cannot wrap. */
    room = r->s.data_len - n * sizeof(int64_t);
    if (n > room / rd->row_bytes)
        return;
    for (uint64_t j = 0; j < n; j++)
        if (r->ridx[j] < 0 || r->ridx[j] >= rd->nrows)
            return;                    /* the worker names the bad id itself */
    dst = w->staging + r->s.data_off + n * sizeof(int64_t);
    for (uint64_t j = 0; j < n; j++)
        memcpy(dst + j * rd->row_bytes, src + (uint64_t)r->ridx[j] * rd->row_bytes,
               rd->row_bytes);
    *flags |= KVS__CQE_ROWS;
}

kvs_row_sparse_t rows_value(const struct daemon *d, const struct req *r)
{
    const unsigned char *data = req_data(d, r);
    kvs_row_sparse_t v = { .indices = r->ridx, .nnz = (int64_t)r->s.arg, .dtype = r->s.dtype,
                           .ndim = r->s.ndim, .device = KVS_HOST };

    v.data = data ? (void *)(data + r->s.arg * sizeof(int64_t)) : NULL;
    memcpy(v.shape, r->s.shape, sizeof v.shape[0] * (size_t)r->s.ndim);
    return v;
}

/* The key's shape record in the arena, made once. */
static int key_meta(struct daemon *d, struct round *rd, const struct kvs__entry_info *info,
                    struct kvs__err *e)
{
    struct kvs__key_meta *m;

    if (rd->meta_off)
        return 0;
    if (!(m = arena_alloc(d, sizeof *m)))
        return kvs__fail(e, -ENOMEM, "kvsd: no room in the arena for a key's shape record "
                         "(kvsrun --arena sets its size)");
    memset(m, 0, sizeof *m);
    m->magic = KVS__KEY_META_MAGIC;
    m->dtype = (uint32_t)info->dtype;
    m->ndim = (uint32_t)info->ndim;
    memcpy(m->shape, info->shape, sizeof m->shape[0] * (size_t)info->ndim);
    rd->meta_off = (uint64_t)((unsigned char *)m - d->arena);
    return 0;
}

int rows_check(struct daemon *d, struct req *r, const struct kvs__entry_info *info,
               struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    kvs__key_str(ks, sizeof ks, req_key(&r->s));
    if (r->rd->cb)
        return kvs__fail(e, KVS_ENOTSUP, "key %s: the workers combine this key "
                         "(KVS_COMBINE): its rows are pushed and pulled in the combine area, "
                         "not through kvsd", ks);
    if (r->s.op == KVS__OP_PUSH && r->rd->device != KVS_HOST)
        return kvs__fail(e, KVS_ENOTSUP, "key %s: row-sparse pushes to a key kept on a GPU "
                         "are not supported", ks);
    if (r->s.op == KVS__OP_PULL) {
        if (info->ndim < 1)
            return kvs__fail(e, KVS_ESHAPE, "key %s: a scalar has no rows to pull", ks);
        return key_meta(d, r->rd, info, e);
    }
    return 0;
}

int rows_any(struct req *const *reqs, int k)
{
    for (int i = 0; i < k; i++)
        if (reqs[i]->s.flags & KVS__SQE_ROWS)
            return 1;
    return 0;
}

int rows_apply(struct daemon *d, struct round *rd, struct req *const *reqs, int k,
               struct kvs__err *e)
{
    struct kvs__rows_in *in = calloc((size_t)(k ? k : 1), sizeof *in);
    int64_t *all = NULL;
    int rc = 0;

    if (!in)
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory closing a round");
    for (int i = 0; i < k && rc == 0; i++) {
        struct req *r = reqs[i];
        const unsigned char *data;

        if (r->s.flags & KVS__SQE_ROWS) {
            data = req_data(d, r);
            in[i] = (struct kvs__rows_in){ data + r->s.arg * sizeof(int64_t), r->ridx,
                                           (int64_t)r->s.arg };
            continue;
        }
        /* A dense push among row-sparse ones: every row of the key. */
        if (remote_in_worker(r) && (rc = remote_copy(d, r)) != 0) {
            rc = kvs__fail(e, rc == -ENOMEM ? -ENOMEM : KVS_EBADARG, "a push could not be "
                           "read out of its worker's memory");
            break;
        }
        if (!all) {
            if (!(all = malloc((size_t)(rd->nrows ? rd->nrows : 1) * sizeof *all))) {
                rc = kvs__fail(e, -ENOMEM, "kvsd: out of memory closing a round");
                break;
            }
            for (int64_t j = 0; j < rd->nrows; j++)
                all[j] = j;
        }
        in[i] = (struct kvs__rows_in){ req_data(d, r), all, rd->nrows };
    }
    if (rc == 0) {
        int64_t t = kvs__tr_begin();

        daemon_keep_value(d, rd);
        arena_seq_begin(rd->value);
        rc = kvs__engine_push_rows(d->eng, rd->entry, k, in, e);
        arena_seq_end(rd->value);
        if (t) {
            rd->t_sum0 = t;
            rd->t_sum1 = kvs__tr_now();
        }
    }
    free(all);
    free(in);
    return rc;
}
