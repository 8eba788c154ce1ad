/*
 * dist_rows_hosts.c - the row-sparse worker's scenarios across hosts
 * (tests/test_hosts_rows.sh; one program with dist_rows.c, whose main runs
 * them): "hosts", an init from rows, compact pulls, row-sparse pushes in
 * dist_sync and dist_async (no optimizer, and sgd lr=1), and lazy updates
 * against a local store, of a small key and of a key split over the hosts'
 * ranges; and "lazy_chunks" (tests/test_dist_rows.sh), the same lazy
 * updates on one host, of a key whose combined rounds come in chunks.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dist_rows.h"

/* Row-sparse rounds of k across hosts (no optimizer: the value becomes
 * each round's sum, absent rows zero): rank r pushes rows r, rows - 1 - r,
 * one on each side of the middle (where a split key's hosts' ranges meet)
 * and the middle twice; the second round by a pushpull of ids, whose rows
 * come back. Every worker checks the whole value and the rows pulled. */
static void hosts_rows(kvs_key_t k, int64_t rows, int64_t cols, float *w, float *ref,
                       kvs_array_t *ida, const int64_t *want, kvs_row_sparse_t *out)
{
    size_t n = (size_t)(rows * cols);
    int64_t idx[5];
    float d[5 * 64];
    kvs_row_sparse_t v = { .data = d, .indices = idx, .nnz = 5, .dtype = KVS_FLOAT32,
                           .ndim = 2, .shape = { rows, cols } };
    kvs_array_t a = f32(w, rows, cols);

    for (int s = 0; s < 2; s++) {
        memset(ref, 0, n * sizeof *ref);
        for (int r = 0; r <= nw; r++) {
            int me = r == nw;          /* last: this worker's own push */
            int q = me ? rank : r;
            int64_t ids[5] = { q, rows - 1 - q, rows / 2 - 1 + q % 2, rows / 2, rows / 2 };

            for (int j = 0; j < 5; j++) {
                for (int64_t c = 0; c < cols; c++) {
                    float x = (float)((q + s + 1) * (j + 1)) + (float)c;

                    if (me)
                        d[j * cols + c] = x;
                    else
                        ref[ids[j] * cols + c] += x;
                }
                if (me)
                    idx[j] = ids[j];
            }
        }
        if (s == 0) {
            ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse across hosts");
        } else {
            out->nnz = 8;
            ok(kvs_pushpull_row_sparse(kv, 1, &k, &v, ida, out, 0),
               "pushpull_row_sparse across hosts");
            for (int j = 0; j < 5; j++)
                for (int64_t c = 0; c < cols; c++)
                    if (((float *)out->data)[j * cols + c] != ref[want[j] * cols + c])
                        die("key %d: pushpull across hosts: row %" PRId64 " column %" PRId64
                            " is %g, expected %g", (int)k.id, want[j], c,
                            ((float *)out->data)[j * cols + c], ref[want[j] * cols + c]);
        }
        ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
        for (size_t i = 0; i < n; i++)
            if (w[i] != ref[i])
                die("key %d: round %d of row-sparse pushes across hosts: row %zu column %zu "
                    "is %g, expected %g", (int)k.id, s, i / (size_t)cols, i % (size_t)cols,
                    w[i], ref[i]);
    }
}

/* Where hosts_lazy runs, for its messages. */
static const char *where = "across hosts";

/* Lazy updates of a key split over the hosts (spec: an optimizer): each
 * round every worker pushes 3 rows; in the first only rows of the first
 * host's range, so that the other owner gets none and must still count
 * the step (adam's bias correction shows a miscount). Rows no worker
 * pushed stay bit-identical, the others match a local store given every
 * worker's rows in one push; with lazy_update=0 in spec every row matches
 * it (each owner's part comes back dense). In dist_async (async), where
 * pushes apply in the order they reach their owners, the workers push in
 * turns, one between two barriers, and the local store gets each push
 * alone, in the same order. */
static void hosts_lazy(const char *spec, kvs_key_t k, int64_t rows, int64_t cols, int async)
{
    int dense = strstr(spec, "lazy_update=0") != NULL;
    size_t n = (size_t)(rows * cols);
    float *w = malloc(n * sizeof *w), *before = malloc(n * sizeof *before);
    float *lo = malloc(n * sizeof *lo), d[4][3 * 8];
    int64_t idx[4][3];
    kvs_array_t a = f32(w, rows, cols), lout = f32(lo, rows, cols);
    kvs_row_sparse_t lv[4];
    kvs_key_t lk[4];
    kvs_t *local;
    char *touched = calloc((size_t)rows, 1);

    if (!w || !before || !lo || !touched || nw > 4 || cols > 8)
        die("out of memory");
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(i % 7) - 3.0f;
    local = twin(k, &a, spec);
    for (int s = 0; s < 3 * (async ? nw : 1); s++) {
        int turn = async ? s % nw : -1;        /* async: the one worker pushing */

        ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
        memcpy(before, w, n * sizeof *w);
        memset(touched, 0, (size_t)rows);
        if (async)
            ok(kvs_barrier(kv), "barrier");    /* every worker has its before */
        for (int r = 0; r < nw; r++) {
            idx[r][0] = r;
            idx[r][1] = s == 0 ? 10 + r : rows - 1 - r;
            idx[r][2] = s == 0 ? 7 : rows / 2 + s;
            for (int j = 0; j < 3; j++) {
                touched[idx[r][j]] |= !async || r == turn;
                for (int64_t c = 0; c < cols; c++)
                    d[r][j * cols + c] = (float)((r + 1) * (j + 2) - s) * 0.25f + (float)c;
            }
            lv[r] = (kvs_row_sparse_t){ .data = d[r], .indices = idx[r], .nnz = 3,
                                        .dtype = KVS_FLOAT32, .ndim = 2,
                                        .shape = { rows, cols } };
            lk[r] = k;
        }
        if (async) {
            ok(kvs_push_row_sparse(local, 1, &k, &lv[turn], 0), "push_row_sparse local");
            if (rank == turn)
                ok(kvs_push_row_sparse(kv, 1, &k, &lv[rank], 0),
                   "push_row_sparse across hosts");
            ok(kvs_barrier(kv), "barrier");    /* the push is in every host's copy */
        } else {
            ok(kvs_push_row_sparse(local, nw, lk, lv, 0), "push_row_sparse local");
            ok(kvs_push_row_sparse(kv, 1, &k, &lv[rank], 0), "push_row_sparse across hosts");
        }
        ok(kvs_pull(local, 1, &k, &lout, 0), "pull local");
        ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
        for (size_t i = 0; i < n; i++) {
            size_t row = i / (size_t)cols;

            if (!dense && !touched[row] && memcmp(&w[i], &before[i], sizeof w[i]) != 0)
                die("%s %s: absent row %zu changed from %g to %g", spec, where, row,
                    before[i], w[i]);
            if ((dense || touched[row]) && fabsf(w[i] - lo[i]) > 1e-6f * (1 + fabsf(lo[i])))
                die("%s %s (%s %d): row %zu column %zu is %g, the local store's %g", spec,
                    where, async ? "push" : "round", s, row, i % (size_t)cols, w[i], lo[i]);
        }
    }
    kvs_close(local);
    ok(kvs_barrier(kv), "barrier");
    free(w);
    free(before);
    free(lo);
    free(touched);
}

/* dist_async without an optimizer (ASSIGN) across hosts: the workers push
 * in turns, one between two barriers, so that every worker knows the value
 * each push makes: its rows (one of them twice, summed; rows on both
 * sides of the middle, where a split key's hosts' ranges meet), every
 * other row zero, in every host's copy; the second push by a pushpull of
 * ids, whose rows come back; the last push empty, which makes every row
 * zero. */
static void async_assign(kvs_key_t k, int64_t rows, int64_t cols, float *w, float *ref,
                         kvs_array_t *ida, const int64_t *want, kvs_row_sparse_t *out)
{
    size_t n = (size_t)(rows * cols);
    int64_t idx[5];
    float d[5 * 64];
    kvs_row_sparse_t v = { .data = d, .indices = idx, .dtype = KVS_FLOAT32, .ndim = 2,
                           .shape = { rows, cols } };
    kvs_array_t a = f32(w, rows, cols);

    for (int s = 0; s <= nw; s++) {
        int q = s % nw;                /* the worker pushing */
        int64_t ids[5] = { q, rows - 1 - q, rows / 2 - 1 + q % 2, rows / 2, rows / 2 };

        memset(ref, 0, n * sizeof *ref);
        v.nnz = s == nw ? 0 : 5;
        for (int j = 0; j < v.nnz; j++) {
            idx[j] = ids[j];
            for (int64_t c = 0; c < cols; c++) {
                d[j * cols + c] = (float)((q + s + 1) * (j + 1)) + (float)c;
                ref[ids[j] * cols + c] += d[j * cols + c];
            }
        }
        ok(kvs_barrier(kv), "barrier");
        if (rank == q && s == 1) {
            out->nnz = 8;
            ok(kvs_pushpull_row_sparse(kv, 1, &k, &v, ida, out, 0),
               "pushpull_row_sparse across hosts (dist_async)");
            for (int j = 0; j < 5; j++)
                for (int64_t c = 0; c < cols; c++)
                    if (((float *)out->data)[j * cols + c] != ref[want[j] * cols + c])
                        die("key %d: pushpull across hosts (dist_async): row %" PRId64
                            " column %" PRId64 " is %g, expected %g", (int)k.id, want[j], c,
                            ((float *)out->data)[j * cols + c], ref[want[j] * cols + c]);
        } else if (rank == q) {
            ok(kvs_push_row_sparse(kv, 1, &k, &v, 0),
               "push_row_sparse across hosts (dist_async)");
        }
        ok(kvs_barrier(kv), "barrier");    /* the push is in every host's copy */
        ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
        for (size_t i = 0; i < n; i++)
            if (w[i] != ref[i])
                die("key %d: dist_async push %d (rank %d's) across hosts: row %zu column %zu "
                    "is %g, expected %g", (int)k.id, s, q, i / (size_t)cols, i % (size_t)cols,
                    w[i], ref[i]);
    }
}

/* dist_async across hosts with sgd lr=1 (no momentum, no wd), where the
 * value after every push is its start minus all of them, in any order:
 * every worker pushes at once rows that overlap between the workers of
 * both hosts, one row twice, some pushes empty (one step all of them),
 * the last by a pushpull; after a barrier every worker checks the whole
 * value and a compact pull. Values are small integers, exact in any
 * order. */
static void async_sgd(kvs_key_t k, int64_t rows, int64_t cols, float *w, float *ref)
{
    size_t n = (size_t)(rows * cols);
    int64_t idx[5], oi[8];
    int64_t pids[] = { rows - 1, rows / 2, 1, rows / 2, 0 };
    int64_t want[] = { 0, 1, rows / 2, rows - 1 };
    float d[5 * 64], *od = malloc(8 * (size_t)cols * sizeof *od);
    kvs_row_sparse_t v = { .data = d, .indices = idx, .dtype = KVS_FLOAT32, .ndim = 2,
                           .shape = { rows, cols } };
    kvs_row_sparse_t out = { .data = od, .indices = oi };
    kvs_array_t a = f32(w, rows, cols);
    kvs_array_t ida = { .data = pids, .dtype = KVS_INT64, .ndim = 1, .shape = { 5 } };

    if (!od || cols > 64)
        die("out of memory");
    ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
    memcpy(ref, w, n * sizeof *ref);
    ok(kvs_barrier(kv), "barrier");    /* every worker has the start */
    for (int s = 0; s < 5; s++) {
        for (int r = 0; r <= nw; r++) {
            int me = r == nw;          /* last: this worker's own push */
            int q = me ? rank : r;
            int64_t ids[5] = { (q + s) % 4, rows - 1 - q, rows / 2 - 1 + q % 2, rows / 2,
                               (q + s) % 4 };
            int nnz = s == 2 || (s == 1 && q % 2) ? 0 : 5;

            for (int j = 0; j < nnz; j++) {
                for (int64_t c = 0; c < cols; c++) {
                    float x = (float)((q + 2 * s) % 5 - 2 + j) + (float)c;

                    if (me)
                        d[j * cols + c] = x;
                    else
                        ref[ids[j] * cols + c] -= x;
                }
                if (me)
                    idx[j] = ids[j];
            }
            if (me)
                v.nnz = nnz;
        }
        if (s < 4) {
            ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse across hosts");
            continue;
        }
        out.nnz = 8;
        ok(kvs_pushpull_row_sparse(kv, 1, &k, &v, &ida, &out, 0),
           "pushpull_row_sparse across hosts");
        if (out.nnz != 4)
            die("key %d: pushpull across hosts (dist_async): nnz %" PRId64 ", expected 4",
                (int)k.id, out.nnz);
        for (int j = 0; j < 4; j++)
            if (oi[j] != want[j])
                die("key %d: pushpull across hosts (dist_async): index %d is %" PRId64
                    ", expected %" PRId64, (int)k.id, j, oi[j], want[j]);
    }
    ok(kvs_barrier(kv), "barrier");
    ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
    for (size_t i = 0; i < n; i++)
        if (w[i] != ref[i])
            die("key %d: sgd lr=1 after every dist_async push across hosts: row %zu column "
                "%zu is %g, expected %g", (int)k.id, i / (size_t)cols, i % (size_t)cols, w[i],
                ref[i]);
    out.nnz = 8;
    ok(kvs_pull_rows(kv, 1, &k, &ida, &out, 0), "pull_rows across hosts");
    for (int j = 0; j < 4; j++)
        for (int64_t c = 0; c < cols; c++)
            if (oi[j] != want[j] || od[j * cols + c] != ref[want[j] * cols + c])
                die("key %d: compact pull after dist_async pushes: row %" PRId64 " column %"
                    PRId64 " is %g, expected %g", (int)k.id, oi[j], c, od[j * cols + c],
                    ref[want[j] * cols + c]);
    ok(kvs_barrier(kv), "barrier");
    free(od);
}

/* Across hosts (tests/test_hosts_rows.sh): compact pulls on every host of
 * a small key (one owner) and of a key split over the hosts' ranges, after
 * dense rounds that every host's workers push (dist_sync; in dist_async
 * the value init gave); then row-sparse pushes of it (hosts_rows, or in
 * dist_async async_assign, and with sgd async_sgd). */
static void hosts_one(kvs_key_t k, int64_t rows, int64_t cols, int async)
{
    size_t n = (size_t)(rows * cols);
    float *w = malloc(n * sizeof *w), *ref = malloc(n * sizeof *ref);
    int64_t ids[] = { rows - 1, 3, 0, rows / 2, 3, rows / 2 + 1, rows - 1 };
    int64_t want[] = { 0, 3, rows / 2, rows / 2 + 1, rows - 1 }, oi[8];
    float *od = malloc(8 * (size_t)cols * sizeof *od);
    kvs_array_t a = f32(w, rows, cols);
    kvs_array_t ida = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 7 } };
    kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = 8 };

    if (!w || !ref || !od || cols > 64)
        die("out of memory");
    for (size_t i = 0; i < n; i++)
        ref[i] = (float)(i % 7);
    memcpy(w, ref, n * sizeof *w);
    ok(kvs_init(kv, 1, &k, &a), "init");
    for (int s = 0; !async && s < 3; s++) {
        /* Rank r adds r + s + 1 to rows r, r + 1 and the last two: rows
         * every worker of both hosts pushes, in both ranges. */
        memset(ref, 0, n * sizeof *ref);
        for (int r = 0; r < nw; r++)
            for (int64_t j = 0; j < rows; j++)
                if (j == r || j == r + 1 || j >= rows - 2 || j == rows / 2)
                    for (int64_t c = 0; c < cols; c++)
                        ref[j * cols + c] += (float)(r + s + 1);
        memset(w, 0, n * sizeof *w);
        for (int64_t j = 0; j < rows; j++)
            if (j == rank || j == rank + 1 || j >= rows - 2 || j == rows / 2)
                for (int64_t c = 0; c < cols; c++)
                    w[j * cols + c] = (float)(rank + s + 1);
        ok(kvs_push(kv, 1, &k, &a, 0), "push");
    }
    out.nnz = 8;
    memset(oi, 0xff, sizeof oi);
    ok(kvs_pull_rows(kv, 1, &k, &ida, &out, 0), "pull_rows across hosts");
    if (out.nnz != 5 || out.shape[0] != rows || out.shape[1] != cols)
        die("key %d: compact pull across hosts: nnz %" PRId64 " shape (%" PRId64 ",%" PRId64
            ")", (int)k.id, out.nnz, out.shape[0], out.shape[1]);
    for (int j = 0; j < 5; j++) {
        if (oi[j] != want[j])
            die("key %d: compact pull index %d is %" PRId64 ", expected %" PRId64, (int)k.id,
                j, oi[j], want[j]);
        for (int64_t c = 0; c < cols; c++)
            if (od[j * cols + c] != ref[want[j] * cols + c])
                die("key %d: row %" PRId64 " column %" PRId64 " is %g, expected %g", (int)k.id,
                    want[j], c, od[j * cols + c], ref[want[j] * cols + c]);
    }
    {
        int64_t ids2[] = { 0, 1, rows / 2 - 1, rows / 2, rows - 1 };
        kvs_array_t ida2 = { .data = ids2, .dtype = KVS_INT64, .ndim = 1, .shape = { 5 } };

        if (async)
            async_assign(k, rows, cols, w, ref, &ida2, ids2, &out);
        else
            hosts_rows(k, rows, cols, w, ref, &ida2, ids2, &out);
    }
    ok(kvs_barrier(kv), "barrier");
    free(w);
    free(ref);
    free(od);
}

/* Across hosts, an init from rows: each rank gives its own rows, global
 * rank 0's value is stored on every host (zero but for its rows, row 5
 * given twice and summed), for a small key and one split over the hosts;
 * every worker checks it with a compact pull on its own host. */
static void hosts_init(kvs_key_t k, int64_t rows)
{
    int64_t idx[4] = { 5, rows - 1 - rank, 5, rows / 2 + rank }, oi[4];
    int64_t ids[4] = { rows - 1, 5, rows / 2, 0 }, want[4] = { 0, 5, rows / 2, rows - 1 };
    float d[4 * 4], od[4 * 4], ref[4 * 4] = { 0 };
    kvs_row_sparse_t v = { .data = d, .indices = idx, .nnz = 4, .dtype = KVS_FLOAT32,
                           .ndim = 2, .shape = { rows, 4 } };
    kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = 4 };
    kvs_array_t ida = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 4 } };

    for (int j = 0; j < 4; j++)
        for (int c = 0; c < 4; c++)
            d[j * 4 + c] = (float)((rank + 1) * 10 + j + c);
    /* rank 0's rows: 5 (j 0 and 2, summed), rows - 1 (j 1), rows / 2 (j 3) */
    for (int c = 0; c < 4; c++) {
        ref[1 * 4 + c] = (float)(10 + 0 + c) + (float)(10 + 2 + c);
        ref[2 * 4 + c] = (float)(10 + 3 + c);
        ref[3 * 4 + c] = (float)(10 + 1 + c);
    }
    ok(kvs_init_row_sparse(kv, 1, &k, &v), "init_row_sparse across hosts");
    ok(kvs_pull_rows(kv, 1, &k, &ida, &out, 0), "pull_rows across hosts");
    for (int j = 0; j < 4; j++) {
        if (oi[j] != want[j])
            die("key %d: pull after an init from rows: index %d is %" PRId64 ", expected %"
                PRId64, (int)k.id, j, oi[j], want[j]);
        for (int c = 0; c < 4; c++)
            if (od[j * 4 + c] != ref[j * 4 + c])
                die("key %d: init from rows across hosts: row %" PRId64 " column %d is %g, "
                    "expected %g", (int)k.id, want[j], c, od[j * 4 + c], ref[j * 4 + c]);
    }
    ok(kvs_barrier(kv), "barrier");
}

void hosts(const char *type)
{
    int async = strcmp(type, "dist_async") == 0;

    hosts_init(KVS_INT_KEY(14), R);
    hosts_init(KVS_INT_KEY(15), 300000);

    hosts_one(KVS_INT_KEY(7), R, C, async);
    /* 4.8 MB: split over the hosts, each owning a range of rows. */
    hosts_one(KVS_INT_KEY(8), 300000, 4, async);
    if (async) {
        size_t n = 300000 * 4;
        float *w = malloc(n * sizeof *w), *ref = malloc(n * sizeof *ref);

        if (!w || !ref)
            die("out of memory");
        ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer");
        async_sgd(KVS_INT_KEY(7), R, C, w, ref);
        async_sgd(KVS_INT_KEY(8), 300000, 4, w, ref);
        free(w);
        free(ref);
    }
    hosts_lazy("adam lr=0.01 wd=0.01", KVS_INT_KEY(9), 300000, 4, async);
    hosts_lazy("sgd lr=0.1 momentum=0.9 wd=0.01", KVS_INT_KEY(10), 300000, 4, async);
    hosts_lazy("adam lr=0.01 wd=0.1 lazy_update=0", KVS_INT_KEY(11), 300000, 4, async);
}

/* Lazy updates of a key of 2338 rows of 7 (16366 elements): its rounds,
 * when the workers combine them, are made in chunks of 8192 elements,
 * and row 1170 (pushed in the second round) lies across the first two. */
void lazy_chunks(void)
{
    where = "over chunks";
    hosts_lazy("adam lr=0.01 wd=0.01", KVS_INT_KEY(13), 2338, 7, 0);
    hosts_lazy("sgd lr=0.1 momentum=0.9 wd=0.01", KVS_INT_KEY(14), 2338, 7, 0);
    hosts_lazy("adam lr=0.01 wd=0.1 lazy_update=0", KVS_INT_KEY(15), 2338, 7, 0);
}
