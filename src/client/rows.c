/*
 * rows.c - row-sparse values in the dist types (kvs.h's kvs_row_sparse_t),
 * the worker's side. A push sends one request per key (KVS__SQE_ROWS,
 * slots.h) whose data in staging is the rows' ids, then the rows: the
 * values of a key given several times in one call are concatenated, ids
 * and rows in the same order (kvsd sums repeated rows). Only the rows
 * cross: a push of 10 rows of a table of a million moves 10 rows. A
 * single value whose rows follow its ids in one buffer of kvs_array_alloc
 * is sent as it lies. An init sends the same, op INIT: kvsd makes the
 * rows not given zero, so the staging area need not hold the table.
 *
 * A compact pull puts its sorted unique ids into staging with room for
 * their rows, and kvsd gathers the rows there (KVS__CQE_ROWS): the worker
 * then touches only its staging and its out. Copying them itself out of
 * the read-only arena would fault in every page touched, and the pages
 * around it, which stay resident in this process: a worker pulling Zipf
 * rows of a big table grew toward the whole table, and the faults were
 * most of the sparse step's time (bench/NOTES.md 19). Pulls of more than
 * GATHER_MAX bytes of rows, or that do not fit staging, still copy out of
 * the arena, where the completion says the value and its shape record
 * lie: there every worker copies at once, where kvsd would gather one
 * after another. Either way this process keeps no copy of the table.
 * Keys the workers combine (client/combine.c) never reach kvsd: their
 * rows are pushed into the combine area's round, densified with a mark of
 * the rows given, and pulled out of its published value.
 *
 * It must never trust what the arena or a completion says: a shape
 * record and a value's range are checked before a byte of them is read,
 * a row copied only while kvsd is not rewriting the value (its seqlock).
 * It never touches a ring: call.c posts and waits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "device/mem.h"
#include "store/engine_args.h"
#include "store/key.h"
#include "proto/layout.h"
#include "proto/combine.h"
#include "client/groups.h"
#include "client/link.h"
#include "client/rows.h"
#include "client/combine.h"

/* A value's data as an array of its nnz rows, and its ids as a 1-D array:
 * what the list checks of engine_args.h take. */
static kvs_array_t rows_array(const kvs_row_sparse_t *v)
{
    kvs_array_t a = { .data = v->data, .dtype = v->dtype, .ndim = v->ndim,
                      .device = v->device };

    if (v->ndim >= 1 && v->ndim <= KVS_MAX_NDIM) {
        memcpy(a.shape, v->shape, sizeof a.shape[0] * (size_t)v->ndim);
        a.shape[0] = v->nnz;
    }
    return a;
}

/* The list checks of dense values (engine_args.h: a key given twice with
 * other dtypes or shapes, ...) over the values' rows. */
static int check_list(int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                      struct kvs__err *e)
{
    kvs_array_t *arrs = malloc(sizeof *arrs * (size_t)(n ? n : 1));
    int rc;

    if (!arrs)
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        arrs[i] = rows_array(&values[i]);
    rc = kvs__check_list(NULL, n, keys, arrs, "value", e);
    free(arrs);
    return rc;
}

/* The checks of one value that need no key's stored value: ndim, nnz, the
 * lists' pointers, its row size (*row). kvsd checks the ids and the shape
 * against the key. */
static int check_value(kvs_key_t key, int i, const kvs_row_sparse_t *v, int64_t *row,
                       struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    kvs_array_t a;
    int rc;

    kvs__key_str(ks, sizeof ks, key);
    if (v->ndim < 1 || v->ndim > KVS_MAX_NDIM)
        return kvs__fail(e, KVS_ESHAPE, "key %s: value %d: ndim %d, a row-sparse value "
                         "has 1 to %d", ks, i, v->ndim, KVS_MAX_NDIM);
    if (v->nnz < 0)
        return kvs__fail(e, KVS_EBADARG, "key %s: value %d: nnz %" PRId64, ks, i, v->nnz);
    if (v->nnz > 0 && (!v->indices || !v->data))
        return kvs__fail(e, KVS_EBADARG, "key %s: value %d: NULL %s with nnz %" PRId64, ks,
                         i, v->indices ? "data" : "indices", v->nnz);
    if (v->device != KVS_HOST)
        return kvs__fail(e, KVS_EBADARG, "key %s: value %d: a row-sparse value must be in "
                         "host memory", ks, i);
    a = rows_array(v);
    if ((rc = kvs__array_check(&a, "value", NULL)) != 0) {
        char name[KVS_MAX_KEY_LEN + 40];

        snprintf(name, sizeof name, "key %s: value %d", ks, i);
        return kvs__array_check(&a, name, e);
    }
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] < 0)
            return kvs__fail(e, KVS_ESHAPE, "key %s: value %d: extent %" PRId64 " in "
                             "dimension %d", ks, i, v->shape[d], d);
    if (kvs__row_size(v->dtype, v->ndim, v->shape, row) != KVS__SIZE_OK
        || kvs__rows_bytes(v->nnz, *row) < 0)
        return kvs__fail(e, KVS_ESHAPE, "key %s: value %d: too big", ks, i);
    return 0;
}

/* A compact pull asks kvsd to gather its rows into staging only when it
 * knows a row's bytes beforehand, which a pull's arguments do not say:
 * c->row_hint keeps, per key hash, those of the last push or pull of a
 * key so hashed. A wrong hint costs only speed: kvsd gathers only rows
 * that fit the room given, and the worker checks what it reads against
 * the key's shape record. c->lock held. */
static uint64_t *hint_of(struct kvs__client *c, kvs_key_t key)
{
    return &c->row_hint[kvs__key_hash(key) % (sizeof c->row_hint / sizeof c->row_hint[0])];
}

static void hint_set(struct kvs__client *c, kvs_key_t key, uint64_t row)
{
    *hint_of(c, key) = row;
}

/* ---- push ------------------------------------------------------------- */

/* One push_rows call as it goes: per group (key) its rows, bytes and
 * place in staging. */
struct rows_push {
    uint8_t op;                        /* KVS__OP_PUSH, or KVS__OP_INIT */
    const char *what;
    int priority, start;
    const struct kvs__groups *g;
    const kvs_key_t *keys;
    const kvs_row_sparse_t *values;
    const int *pos;                    /* each value's place in the caller's list */
    uint64_t *nnz, *bytes, *at;
    unsigned char *zc;                 /* per group: sent as it lies in a buffer */
};

static void fill_rows(const void *ctx, int i, struct kvs__sqe *s)
{
    const struct rows_push *p = ctx;
    int j = p->start + i;
    const kvs_row_sparse_t *v = &p->values[p->g->first[j]];

    *s = (struct kvs__sqe){ .op = p->op, .flags = KVS__SQE_ROWS,
                            .priority = p->priority, .dtype = v->dtype, .ndim = v->ndim,
                            .data_off = p->bytes[j] ? p->at[j] : 0, .data_len = p->bytes[j],
                            .arg = p->nnz[j] };
    memcpy(s->shape, v->shape, sizeof s->shape[0] * (size_t)v->ndim);
    kvs__client_sqe_key(s, p->keys[p->g->first[j]]);
}

/* The values of group j, with the same dtype and shape, their rows summed
 * into p->nnz[j] and bytes[j]. */
static int group_sizes(struct rows_push *p, int j, const int64_t *row, struct kvs__err *e)
{
    const struct kvs__groups *g = p->g;
    const kvs_row_sparse_t *f = &p->values[g->first[j]];
    int64_t nnz = 0, bytes;

    for (int m = g->mstart[j]; m < g->mstart[j + 1]; m++) {
        const kvs_row_sparse_t *v = &p->values[g->member[m]];

        if (v->dtype != f->dtype || v->ndim != f->ndim
            || memcmp(v->shape, f->shape, sizeof v->shape[0] * (size_t)v->ndim) != 0) {
            char ks[KVS_MAX_KEY_LEN + 8];

            kvs__key_str(ks, sizeof ks, p->keys[g->member[m]]);
            return kvs__fail(e, v->dtype != f->dtype ? KVS_EDTYPE : KVS_ESHAPE,
                             "key %s: value %d does not match value %d of the same key", ks,
                             p->pos[g->member[m]], p->pos[g->first[j]]);
        }
        if (__builtin_add_overflow(nnz, v->nnz, &nnz))
            return kvs__fail(e, KVS_EBADARG, "too many rows in one call");
    }
    if ((bytes = kvs__rows_bytes(nnz, row[g->first[j]])) < 0)
        return kvs__fail(e, KVS_EBADARG, "too many rows in one call");
    p->nnz[j] = (uint64_t)nnz;
    p->bytes[j] = (uint64_t)bytes;
    return 0;
}

/* Group j as it lies: one value whose rows follow its ids in a buffer of
 * kvs_array_alloc. 1 and at[j] when so; 0; or the error of an array in
 * staging but in no live buffer. c->lock held. */
static int as_it_lies(const struct kvs__client *c, struct rows_push *p, int j,
                      struct kvs__err *e)
{
    const struct kvs__groups *g = p->g;
    const kvs_row_sparse_t *v = &p->values[g->first[j]];

    if (g->mstart[j + 1] - g->mstart[j] != 1 || v->nnz == 0
        || ((uintptr_t)v->indices & 7) != 0
        || (const unsigned char *)v->data != (const unsigned char *)(v->indices + v->nnz))
        return 0;
    return kvs__client_in_buffer(c, v->indices, p->bytes[j], &p->at[j], e);
}

/* Copies the ids, then the rows, of group j's values to dst. */
static void stage_group(const struct rows_push *p, int j, unsigned char *dst, size_t row)
{
    const struct kvs__groups *g = p->g;
    unsigned char *rows = dst + p->nnz[j] * sizeof(int64_t);

    for (int m = g->mstart[j]; m < g->mstart[j + 1]; m++) {
        const kvs_row_sparse_t *v = &p->values[g->member[m]];
        size_t n = (size_t)v->nnz;

        if (n == 0)
            continue;
        memcpy(dst, v->indices, n * sizeof(int64_t));
        memcpy(rows, v->data, n * row);
        dst += n * sizeof(int64_t);
        rows += n * row;
    }
}

/* Sends groups [start, end), which fit total bytes of the transient part,
 * as one list call lending kvsd their staging. */
static int push_batch(kvs_t *kv, struct rows_push *p, const int64_t *row, int start, int end,
                      uint64_t total, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    const struct kvs__groups *g = p->g;
    struct kvs__answer *a = malloc(sizeof *a * (size_t)(end - start));
    struct kvs__answers ans = { .a = a, .failed = -1 };
    struct kvs__hold *h = calloc(1, sizeof *h);
    uint64_t off = 0, pos = 0;
    int rc;

    if (!a || !h || !(h->returned = calloc((size_t)(end - start), 1))) {
        free(h);
        free(a);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    h->gen = kvs__client_gen(c);
    if (total && (rc = kvs__client_xfer_take(kv, total, &off, p->what, e)) != 0) {
        free(h->returned);
        free(h);
        free(a);
        return rc;
    }
    h->off = off;
    h->len = total;
    for (int j = start; j < end; j++) {
        if (p->zc[j]) {
            h->zc = 1;
        } else if (p->bytes[j]) {
            p->at[j] = off + pos;
            pos += (p->bytes[j] + 63) & ~(uint64_t)63;
            /* The range is this call's alone: filled without the lock. */
            stage_group(p, j, c->staging + p->at[j], (size_t)row[g->first[j]]);
        }
    }
    p->start = start;
    rc = kvs__client_run(kv, fill_rows, p, end - start, 0, &ans, h, p->what, e);
    free(a);
    return rc;
}

/* The checked values of keys kvsd keeps: sent to kvsd, as a push (op
 * PUSH) or an init (op INIT: the same requests, each key at most once).
 * row[i]: value i's row bytes; pos[i]: its place in the caller's list. */
static int push_kd(kvs_t *kv, uint8_t op, int n, const kvs_key_t *keys,
                   const kvs_row_sparse_t *values, const int *pos, const int64_t *row,
                   int priority, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct rows_push p = { .op = op, .priority = priority, .keys = keys, .values = values,
                           .pos = pos, .what = op == KVS__OP_INIT ? "kvs_init_row_sparse"
                                                                : "kvs_push_row_sparse" };
    struct kvs__groups g = { 0 };
    uint64_t room, sent = 0;
    size_t ng;
    int rc;

    if ((rc = kvs__groups_make(n, keys, &g, e)) != 0)
        goto out;
    for (int i = 0; op == KVS__OP_INIT && g.ng != n && i < n; i++) {
        if (g.first[g.gid[i]] != i) {
            char ks[KVS_MAX_KEY_LEN + 8];

            kvs__key_str(ks, sizeof ks, keys[i]);
            rc = kvs__fail(e, KVS_EKEYEXISTS, "key %s: appears twice in one init", ks);
            goto out;
        }
    }
    p.g = &g;
    ng = (size_t)(g.ng ? g.ng : 1);
    p.nnz = calloc(ng, sizeof *p.nnz);
    p.bytes = calloc(ng, sizeof *p.bytes);
    p.at = calloc(ng, sizeof *p.at);
    p.zc = calloc(ng, 1);
    if (!p.nnz || !p.bytes || !p.at || !p.zc) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    for (int j = 0; j < g.ng && rc == 0; j++)
        rc = group_sizes(&p, j, row, e);
    pthread_mutex_lock(&c->lock);
    for (int j = 0; j < g.ng && rc == 0; j++)
        hint_set(c, keys[g.first[j]], (uint64_t)row[g.first[j]]);
    room = kvs__client_transient(c);
    for (int j = 0; j < g.ng && rc == 0; j++) {
        int zc = as_it_lies(c, &p, j, e);

        if (zc < 0) {
            rc = zc;
        } else if (!(p.zc[j] = (unsigned char)zc) && p.bytes[j] > room) {
            char ks[KVS_MAX_KEY_LEN + 8];

            kvs__key_str(ks, sizeof ks, keys[g.first[j]]);
            rc = kvs__fail(e, KVS_EBADARG, "key %s: %" PRIu64 " rows (%" PRIu64 " bytes) do "
                           "not fit the %" PRIu64 " bytes below the lowest buffer in the "
                           "%" PRIu64 "-byte staging area (kvsrun --staging sets its size)",
                           ks, p.nnz[j], p.bytes[j], room, c->staging_size);
        }
    }
    pthread_mutex_unlock(&c->lock);
    for (int start = 0, end; rc == 0 && start < g.ng; start = end) {
        uint64_t total = 0;

        for (end = start; end < g.ng && end - start < KVS__LIST_MAX; end++) {
            uint64_t b = p.zc[end] ? 0 : (p.bytes[end] + 63) & ~(uint64_t)63;

            if (total + b > room)
                break;
            total += b;
        }
        rc = push_batch(kv, &p, row, start, end, total, e);
    }
    for (int j = 0; rc == 0 && j < g.ng; j++)
        sent += p.bytes[j];
    if (rc == 0 && op == KVS__OP_PUSH)
        kvs__client_count(c, (uint64_t)n, sent);
out:
    free(p.zc);
    free(p.at);
    free(p.bytes);
    free(p.nnz);
    kvs__groups_free(&g);
    return rc;
}

/* The values of combined keys, read where they lie: none may lie in a
 * freed buffer of staging (KVS_EBADARG), as for a dense push. */
static int check_buffers(struct kvs__client *c, int n, const kvs_row_sparse_t *values,
                         const int64_t *row, struct kvs__err *e)
{
    uint64_t off;
    int rc = 0;

    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < n && rc >= 0; i++) {
        if (values[i].nnz == 0)
            continue;
        if ((rc = kvs__client_in_buffer(c, values[i].indices,
                                        (uint64_t)values[i].nnz * sizeof(int64_t), &off,
                                        e)) >= 0)
            rc = kvs__client_in_buffer(c, values[i].data,
                                       (uint64_t)values[i].nnz * (uint64_t)row[i], &off, e);
    }
    pthread_mutex_unlock(&c->lock);
    return rc < 0 ? rc : 0;
}

/* A list's keys that the workers combine (client/combine.h), moved after
 * kvsd's: n_cb of them, with their slots; *keys and *values point at the
 * reordered copies (kept[3]: what to free), row reordered in place, pos[i]
 * the place in the caller's list of what is now at i. 0 with *n_cb 0 when
 * none is (nothing moved). */
static int split_rows(kvs_t *kv, int n, const kvs_key_t **keys,
                      const kvs_row_sparse_t **values, int64_t *row, int *pos, int *n_cb,
                      struct kvs__cb_slot ***slots, void *kept[3], struct kvs__err *e)
{
    struct kvs__cb_slot **found = NULL;
    kvs_key_t *k2;
    kvs_row_sparse_t *v2;
    int64_t *r2;
    int a = 0, b, m = 0;

    *n_cb = 0;
    if (!kv->client->cb || n == 0)
        return 0;
    if (!(found = malloc(sizeof *found * (size_t)n)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        m += (found[i] = kvs__client_cb_find(kv->client, (*keys)[i])) != NULL;
    if (m == 0) {
        free(found);
        return 0;
    }
    k2 = malloc(sizeof *k2 * (size_t)n);
    v2 = malloc(sizeof *v2 * (size_t)n);
    r2 = malloc(sizeof *r2 * (size_t)n);
    *slots = malloc(sizeof **slots * (size_t)m);
    if (!k2 || !v2 || !r2 || !*slots) {
        free(k2);
        free(v2);
        free(r2);
        free(*slots);
        free(found);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    b = n - m;
    for (int i = 0; i < n; i++) {
        int at = found[i] ? b++ : a++;

        if (found[i])
            (*slots)[at - (n - m)] = found[i];
        k2[at] = (*keys)[i];
        v2[at] = (*values)[i];
        r2[at] = row[i];
        pos[at] = i;
    }
    memcpy(row, r2, sizeof *row * (size_t)n);
    free(r2);
    free(found);
    *keys = k2;
    *values = v2;
    kept[0] = k2;
    kept[1] = v2;
    kept[2] = *slots;
    *n_cb = m;
    return 0;
}

int kvs__client_push_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                          const kvs_row_sparse_t *values, int priority, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__cb_slot **slots = NULL;
    void *kept[3] = { NULL, NULL, NULL };
    int64_t *row = NULL;
    int *pos = NULL, rc, ncb = 0;

    if ((rc = kvs__client_usable(c, e)) != 0)
        return rc;
    if (n < 0 || (n > 0 && (!keys || !values)))
        return kvs__fail(e, KVS_EBADARG, "bad list: count %d, keys %p, values %p", n,
                         (const void *)keys, (const void *)values);
    pthread_mutex_lock(&c->lock);
    rc = c->gc.type == KVS__GC_2BIT;
    pthread_mutex_unlock(&c->lock);
    if (rc)
        return kvs__fail(e, KVS_ENOTSUP, "2bit gradient compression does not take row-sparse "
                         "pushes (as MXNet's); set compression \"none\" first, or push dense");
    if (!(row = malloc(sizeof *row * (size_t)(n ? n : 1)))
        || !(pos = malloc(sizeof *pos * (size_t)(n ? n : 1)))) {
        free(row);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++)
        pos[i] = i;
    for (int i = 0; i < n && rc == 0; i++)
        rc = check_value(keys[i], i, &values[i], &row[i], e);
    if (rc == 0)
        rc = check_list(n, keys, values, e);
    /* The combined keys' values are checked before kvsd gets any. */
    if (rc == 0
        && (rc = split_rows(kv, n, &keys, &values, row, pos, &ncb, &slots, kept, e)) == 0
        && ncb > 0 && (rc = kvs__client_cb_check_rows(ncb, keys + n - ncb, slots,
                                                      values + n - ncb, pos + n - ncb, e)) == 0)
        rc = check_buffers(c, ncb, values + n - ncb, row + n - ncb, e);
    if (rc == 0 && n - ncb > 0)
        rc = push_kd(kv, KVS__OP_PUSH, n - ncb, keys, values, pos, row, priority, e);
    if (rc == 0 && ncb > 0)
        rc = kvs__client_cb_push_rows(kv, ncb, keys + n - ncb, slots, values + n - ncb,
                                      "kvs_push_row_sparse", e);
    for (int k = 0; k < 3; k++)
        free(kept[k]);
    free(pos);
    free(row);
    return rc;
}

/* ---- compact pull ----------------------------------------------------- */

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The sorted unique ids of ids (n of them), malloc'd in *out, their number
 * in *m. */
static int unique_ids(const int64_t *ids, int64_t n, int64_t **out, int64_t *m,
                      struct kvs__err *e)
{
    int64_t *u = malloc(sizeof *u * (size_t)(n ? n : 1)), k = 0;

    if (!u)
        return kvs__fail(e, -ENOMEM, "out of memory");
    if (n > 0)
        memcpy(u, ids, sizeof *u * (size_t)n);
    qsort(u, (size_t)n, sizeof *u, cmp_id);
    for (int64_t i = 0; i < n; i++)
        if (k == 0 || u[i] != u[k - 1])
            u[k++] = u[i];
    *out = u;
    *m = k;
    return 0;
}

/* Above this many bytes of rows in one out, the worker copies them out of
 * the arena itself, as a dense pull does: four workers then copy at once,
 * where kvsd's one serve thread would gather each out in turn and the
 * worker copy it a second time (bench/NOTES.md 19). */
#define GATHER_MAX ((uint64_t)16 << 20)

/* One pull_rows call: per out the rows it gets, and where its ids and the
 * room for its rows lie in staging (len 0: none, the arena's rows are
 * read). */
struct rows_pull {
    int priority;
    const kvs_key_t *keys;
    int64_t *cnt;
    uint64_t *off, *len;
};

static void fill_pull_rows(const void *ctx, int i, struct kvs__sqe *s)
{
    const struct rows_pull *p = ctx;

    *s = (struct kvs__sqe){ .op = KVS__OP_PULL, .flags = KVS__SQE_ROWS,
                            .priority = p->priority, .arg = (uint64_t)p->cnt[i],
                            .data_off = p->len[i] ? p->off[i] : 0, .data_len = p->len[i] };
    kvs__client_sqe_key(s, p->keys[i]);
}

/* Breaks the handle for a completion that names a bad value or record. */
static int bad_answer(struct kvs__client *c, struct kvs__err *e, const char *what)
{
    int rc;

    pthread_mutex_lock(&c->lock);
    rc = kvs__client_broken(c, e, KVS_EPROTO, "kvsd answered a row-sparse pull with %s", what);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* The shape record and value a completion names, checked against the
 * arena and each other: copied once into *m. */
static int read_meta(struct kvs__client *c, const struct kvs__answer *q,
                     struct kvs__key_meta *m, struct kvs__err *e)
{
    uint64_t end;
    int64_t bytes;

    if (q->round < KVS__ARENA_DATA_OFF + sizeof(struct kvs__block_head) || (q->round & 63)
        || __builtin_add_overflow(q->round, sizeof *m, &end) || end > c->arena_size)
        return bad_answer(c, e, "a bad shape record");
    memcpy(m, c->arena + q->round, sizeof *m);
    if (m->magic != KVS__KEY_META_MAGIC || m->ndim < 1 || m->ndim > KVS_MAX_NDIM)
        return bad_answer(c, e, "a bad shape record");
    for (uint32_t d = 0; d < m->ndim; d++)
        if (m->shape[d] < 0)
            return bad_answer(c, e, "a bad shape record");
    if (kvs__value_size((kvs_dtype_t)m->dtype, (int)m->ndim, m->shape, &bytes) != KVS__SIZE_OK
        || (uint64_t)bytes != q->value_len)
        return bad_answer(c, e, "a shape record that does not fit its value");
    if (q->value_off < KVS__ARENA_DATA_OFF + sizeof(struct kvs__block_head)
        || (q->value_off & 63) != 0)
        return bad_answer(c, e, "a bad arena range");
    return 0;
}

/* Copies the rows ids[0..m) of the value q names into dst, while kvsd
 * does not rewrite it (its seqlock), retrying until the deadline. Every
 * page it reads becomes resident in this process (and counts in its
 * VmRSS): the path of pulls too big for kvsd to gather. */
static int copy_rows(kvs_t *kv, const struct kvs__answer *q, const int64_t *ids, int64_t m,
                     size_t row, unsigned char *dst, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    const struct kvs__block_head *bh =
        (const struct kvs__block_head *)(c->arena + q->value_off) - 1;
    const unsigned char *v = c->arena + q->value_off;
    struct kvs__opts o;
    int64_t deadline;

    kvs__opts_get(kv, &o);
    deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    for (;;) {
        uint64_t s1 = atomic_load_explicit(&bh->seq, memory_order_acquire);

        if ((s1 & 1) == 0) {
            for (int64_t j = 0; j < m; j++)
                memcpy(dst + (size_t)j * row, v + (size_t)ids[j] * row, row);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&bh->seq, memory_order_relaxed) == s1)
                return 0;
        }
        if (kvs__now_ns() >= deadline) {
            int rc;

            pthread_mutex_lock(&c->lock);
            rc = kvs__client_broken(c, e, KVS_ETIMEDOUT, "a value stayed busy in kvsd past "
                                    "the deadline");
            pthread_mutex_unlock(&c->lock);
            return rc;
        }
    }
}

/* Lends staging for the outs whose rows kvsd may gather: per out its ids,
 * then room for their rows of the hinted size, at most GATHER_MAX bytes;
 * none when they do not fit what staging has free (the arena's rows are
 * read then). *base and *total: the range taken (total 0: none). */
static int pull_staging(kvs_t *kv, int n, struct rows_pull *p, int64_t *const *ids,
                        uint64_t *base, uint64_t *total, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    uint64_t sum = 0, pos = 0;
    int rc;

    *total = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < n; i++) {
        uint64_t row = *hint_of(c, p->keys[i]), k = (uint64_t)p->cnt[i];

        p->len[i] = 0;
        if (k > 0 && row > 0 && row <= GATHER_MAX / k)
            p->len[i] = k * (sizeof(int64_t) + row);
        sum += (p->len[i] + 63) & ~(uint64_t)63;
    }
    if (sum > kvs__client_transient(c))
        sum = 0;
    pthread_mutex_unlock(&c->lock);
    if (sum == 0) {
        memset(p->len, 0, sizeof *p->len * (size_t)n);
        return 0;
    }
    if ((rc = kvs__client_xfer_take(kv, sum, base, "kvs_pull_rows", e)) != 0) {
        memset(p->len, 0, sizeof *p->len * (size_t)n);
        return rc == -ENOSPC ? 0 : rc;  /* taken by buffers meanwhile: the arena's rows */
    }
    for (int i = 0; i < n; i++) {
        if (!p->len[i])
            continue;
        p->off[i] = *base + pos;
        memcpy(c->staging + p->off[i], ids[i], sizeof *ids[i] * (size_t)p->cnt[i]);
        pos += (p->len[i] + 63) & ~(uint64_t)63;
    }
    *total = sum;
    return 0;
}

int kvs__client_pull_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *row_ids,
                          kvs_row_sparse_t *outs, int priority, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct rows_pull p = { .priority = priority, .keys = keys }, kp;
    struct kvs__answers ans = { .a = NULL, .failed = -1 };
    struct kvs__key_meta *meta = NULL;
    int64_t **ids = NULL, *kd_cnt = NULL, **kd_ids = NULL;
    struct kvs__cb_slot **slot = NULL;
    kvs_key_t *kd_keys = NULL;
    uint64_t bytes = 0, base = 0, lent = 0, gen = 0, *off = NULL, *len = NULL;
    size_t nn = (size_t)(n > 0 ? n : 1);
    int rc, short_of = 0, *kd = NULL, nkd = 0;

    if ((rc = kvs__client_usable(c, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, row_ids, "row_ids", e)) != 0)
        return rc;
    gen = kvs__client_gen(c);
    if (n > 0 && !outs)
        return kvs__fail(e, KVS_EBADARG, "out list is NULL with count %d", n);
    for (int i = 0; i < n; i++)
        if ((rc = kvs__check_row_ids(keys[i], i, &row_ids[i], 1, INT64_MAX, e)) != 0)
            return rc;
    if (!(ids = calloc(nn, sizeof *ids)) || !(p.cnt = calloc(nn, sizeof *p.cnt))
        || !(meta = calloc(nn, sizeof *meta)) || !(ans.a = calloc(nn, sizeof *ans.a))
        || !(slot = calloc(nn, sizeof *slot)) || !(kd = calloc(nn, sizeof *kd))
        || !(kd_keys = calloc(nn, sizeof *kd_keys))
        || !(kd_cnt = calloc(nn, sizeof *kd_cnt)) || !(kd_ids = calloc(nn, sizeof *kd_ids))
        || !(off = calloc(nn, sizeof *off)) || !(len = calloc(nn, sizeof *len))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t k = row_ids[i].ndim ? row_ids[i].shape[0] : 1;

        rc = unique_ids(row_ids[i].data, k, &ids[i], &p.cnt[i], e);
        short_of |= outs[i].nnz < p.cnt[i];
    }
    if (rc != 0)
        goto out;
    if (short_of) {
        for (int i = 0; i < n; i++)
            outs[i].nnz = p.cnt[i];
        rc = kvs__fail(e, -ENOSPC, "an out has room for fewer rows than its row ids name: "
                       "each out's nnz now says how many it needs");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (p.cnt[i] > 0 && (!outs[i].indices || !outs[i].data)) {
            char ks[KVS_MAX_KEY_LEN + 8];

            kvs__key_str(ks, sizeof ks, keys[i]);
            rc = kvs__fail(e, KVS_EBADARG, "key %s: out %d: NULL %s", ks, i,
                           outs[i].indices ? "data" : "indices");
            goto out;
        }
    }
    /* Keys the workers combine are read out of the combine area; kvsd
     * gets the others, kd[0..nkd) of them. */
    for (int i = 0; i < n; i++) {
        if ((slot[i] = kvs__client_cb_find(c, keys[i])) == NULL) {
            kd_keys[nkd] = keys[i];
            kd_cnt[nkd] = p.cnt[i];
            kd_ids[nkd] = ids[i];
            kd[nkd++] = i;
        } else if (slot[i]->ndim < 1) {
            char ks[KVS_MAX_KEY_LEN + 8];

            kvs__key_str(ks, sizeof ks, keys[i]);
            rc = kvs__fail(e, KVS_ESHAPE, "key %s: a scalar has no rows to pull", ks);
            goto out;
        } else if ((rc = kvs__check_row_ids(keys[i], i, &row_ids[i], 1, slot[i]->shape[0],
                                            e)) != 0) {
            goto out;
        }
    }
    kp = (struct rows_pull){ .priority = priority, .keys = kd_keys, .cnt = kd_cnt, .off = off,
                             .len = len };
    if (nkd > 0 && (rc = pull_staging(kv, nkd, &kp, kd_ids, &base, &lent, e)) != 0)
        goto out;
    for (int start = 0; start < nkd && rc == 0; start += KVS__LIST_MAX) {
        int k = nkd - start < KVS__LIST_MAX ? nkd - start : KVS__LIST_MAX;
        struct kvs__answers part = { .a = ans.a + start, .failed = -1 };
        struct rows_pull sub = kp;

        sub.keys = kd_keys + start;
        sub.cnt = kd_cnt + start;
        sub.off = off + start;
        sub.len = len + start;
        /* The ids it lends kvsd went into the staging of a kvsd gone. */
        if ((rc = kvs__client_since(c, gen, e)) == 0)
            rc = kvs__client_run(kv, fill_pull_rows, &sub, k, 0, &part, NULL,
                                 "kvs_pull_rows", e);
    }
    /* Every out is checked before any is written. */
    for (int j = 0; j < nkd && rc == 0; j++) {
        int i = kd[j];

        if ((rc = read_meta(c, &ans.a[j], &meta[i], e)) == 0)
            rc = kvs__check_row_ids(keys[i], i, &row_ids[i], 1, meta[i].shape[0], e);
    }
    for (int i = 0, j = 0; i < n && rc == 0; i++) {
        kvs_row_sparse_t *o = &outs[i];
        int64_t row = 0;

        if (slot[i]) {
            const struct kvs__cb_slot *sl = slot[i];

            meta[i] = (struct kvs__key_meta){ .dtype = (uint32_t)sl->dtype,
                                              .ndim = (uint32_t)sl->ndim };
            memcpy(meta[i].shape, sl->shape, sizeof sl->shape[0] * (size_t)sl->ndim);
            kvs__row_size(sl->dtype, sl->ndim, sl->shape, &row);
            rc = kvs__client_cb_pull_rows(kv, slot[i], keys[i], ids[i], p.cnt[i], o->data,
                                          "kvs_pull_rows", e);
        } else if (ans.a[j].flags & KVS__CQE_ROWS) {
            /* kvsd gathered them after the ids: the room given must hold them. */
            kvs__row_size((kvs_dtype_t)meta[i].dtype, (int)meta[i].ndim, meta[i].shape, &row);
            if (!len[j] || (uint64_t)row > len[j] / (uint64_t)p.cnt[i] - sizeof(int64_t)) {
                rc = bad_answer(c, e, "rows gathered past their room");
                break;
            }
            memcpy(o->data, c->staging + off[j] + (uint64_t)p.cnt[i] * sizeof(int64_t),
                   (size_t)p.cnt[i] * (size_t)row);
            j++;
        } else {
            kvs__row_size((kvs_dtype_t)meta[i].dtype, (int)meta[i].ndim, meta[i].shape, &row);
            rc = copy_rows(kv, &ans.a[j++], ids[i], p.cnt[i], (size_t)row, o->data, e);
        }
        if (rc != 0)
            break;
        if (p.cnt[i] > 0)
            memcpy(o->indices, ids[i], sizeof *ids[i] * (size_t)p.cnt[i]);
        o->nnz = p.cnt[i];
        o->dtype = (kvs_dtype_t)meta[i].dtype;
        o->ndim = (int)meta[i].ndim;
        memset(o->shape, 0, sizeof o->shape);
        memcpy(o->shape, meta[i].shape, sizeof o->shape[0] * meta[i].ndim);
        o->device = KVS_HOST;
        if (!slot[i]) {
            bytes += (uint64_t)p.cnt[i] * ((uint64_t)row + sizeof(int64_t));
            pthread_mutex_lock(&c->lock);
            hint_set(c, keys[i], (uint64_t)row);
            pthread_mutex_unlock(&c->lock);
        }
    }
    if (rc == 0)                       /* what was read may be the next kvsd's */
        rc = kvs__client_since(c, gen, e);
    if (rc == 0)
        kvs__client_count(c, 0, bytes);
out:
    /* kvsd writes the range no more once every request sent is answered,
     * which a call that returns on a handle not broken has seen; a handle
     * that broke keeps it lent. */
    if (lent) {
        pthread_mutex_lock(&c->lock);
        if (!c->broken)
            kvs__bufs_remove(&c->xfer, base, NULL);
        pthread_mutex_unlock(&c->lock);
        kvs__bell_ring(c->wbell);
    }
    for (int i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    free(p.cnt);
    free(meta);
    free(ans.a);
    free(slot);
    free(kd);
    free(kd_keys);
    free(kd_cnt);
    free(kd_ids);
    free(off);
    free(len);
    return rc;
}

/* ---- init ------------------------------------------------------------- */

int kvs__client_init_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                          const kvs_row_sparse_t *values, struct kvs__err *e)
{
    int64_t *row = NULL;
    int *pos = NULL, rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0)
        return rc;
    if (n < 0 || (n > 0 && (!keys || !values)))
        return kvs__fail(e, KVS_EBADARG, "bad list: count %d, keys %p, values %p", n,
                         (const void *)keys, (const void *)values);
    if (!(row = malloc(sizeof *row * (size_t)(n ? n : 1)))
        || !(pos = malloc(sizeof *pos * (size_t)(n ? n : 1)))) {
        free(row);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    /* The ids are checked here, against the value's own shape, so that a
     * bad one fails this worker's call before the others wait on it. */
    for (int i = 0; i < n && rc == 0; i++) {
        kvs_array_t ids = { .data = values[i].indices, .dtype = KVS_INT64, .ndim = 1,
                            .shape = { values[i].nnz }, .device = KVS_HOST };

        pos[i] = i;
        if ((rc = check_value(keys[i], i, &values[i], &row[i], e)) == 0)
            rc = kvs__check_row_ids(keys[i], i, &ids, values[i].ndim, values[i].shape[0], e);
    }
    if (rc == 0)
        rc = check_list(n, keys, values, e);
    if (rc == 0)
        rc = push_kd(kv, KVS__OP_INIT, n, keys, values, pos, row, 0, e);
    free(pos);
    free(row);
    return rc;
}
