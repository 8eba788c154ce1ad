/*
 * dist_rows.c - a worker of the row-sparse test jobs (tests/test_dist_rows.sh):
 * row-sparse pushes and compact pulls in dist_sync and dist_async, checked
 * by value against a reference each worker computes: every worker's pushes
 * come from a seed (its rank, the step), so each knows them all. Values are
 * small integers, whose sums are exact in any order.
 *
 * Usage: dist_rows SCENARIO [TYPE]; the job's environment as kvsrun sets it
 * (KVS_JOB, KVS_RANK, ...), and KVS_TEST_KVSCTL (the kvsctl to ask for
 * stats) for the scenario "bytes". The scenario "hosts" runs across hosts
 * (tests/test_hosts_rows.sh).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distutil.h"

#define R 50                           /* rows of the table */
#define C 3                            /* columns */
#define MAXNNZ 16

/* One worker's push of a step: nnz rows, ids with repeats, integer data. */
struct rpush {
    int64_t nnz;
    int64_t idx[MAXNNZ];
    float data[MAXNNZ * C];
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Worker r's push of step s: empty when empty says so; rows drawn from
 * the first 20 so that the workers' rows overlap, one of them twice. */
static void make_push(int r, int s, int empty, struct rpush *p)
{
    uint64_t h = mix(((uint64_t)r << 32) ^ (uint64_t)s);

    p->nnz = empty ? 0 : 3 + (int64_t)(h % 8);
    for (int64_t j = 0; j < p->nnz; j++) {
        h = mix(h);
        p->idx[j] = (int64_t)(h % 20);
        for (int c = 0; c < C; c++)
            p->data[j * C + c] = (float)((int64_t)((h >> (8 + 4 * c)) % 9) - 4);
    }
    if (p->nnz > 2)
        p->idx[p->nnz - 1] = p->idx[0];         /* a repeated row */
}

static kvs_row_sparse_t rs_of(struct rpush *p)
{
    return (kvs_row_sparse_t){ .data = p->data, .indices = p->idx, .nnz = p->nnz,
                               .dtype = KVS_FLOAT32, .ndim = 2, .shape = { R, C } };
}

/* ref += worker r's push of step s (its rows summed into the dense form). */
static void add_push(float *ref, const struct rpush *p, float scale)
{
    for (int64_t j = 0; j < p->nnz; j++)
        for (int c = 0; c < C; c++)
            ref[p->idx[j] * C + c] += scale * p->data[j * C + c];
}

static void expect_table(const float *got, const float *want, const char *what)
{
    for (int i = 0; i < R * C; i++)
        if (got[i] != want[i])
            die("%s: row %d column %d is %g, expected %g", what, i / C, i % C, got[i],
                want[i]);
}

static void pull_table(kvs_key_t k, float *o)
{
    kvs_array_t out = f32(o, R, C);

    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
}

/* A compact pull of ids (unsorted, repeated) checked against the table tab:
 * sorted unique indices, their rows. */
static void compact(kvs_key_t k, const float *tab, const char *what)
{
    int64_t ids[] = { 7, 3, 7, 49, 0, 3, 19 }, want[] = { 0, 3, 7, 19, 49 };
    int64_t oi[8];
    float od[8 * C];
    kvs_array_t ida = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 7 } };
    kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = 2 };
    int rc;

    /* Too little room: nothing written, nnz says what is needed. */
    memset(oi, 0xff, sizeof oi);
    rc = kvs_pull_rows(kv, 1, &k, &ida, &out, 0);
    if (rc != -ENOSPC || out.nnz != 5 || oi[0] != -1)
        die("%s: a pull into room for 2 rows: %s, nnz %" PRId64 ", expected -ENOSPC and 5",
            what, kvs_err_name(rc), out.nnz);
    out.nnz = 8;
    ok(kvs_pull_rows(kv, 1, &k, &ida, &out, 0), "pull_rows");
    if (out.nnz != 5 || out.ndim != 2 || out.shape[0] != R || out.shape[1] != C
        || out.dtype != KVS_FLOAT32)
        die("%s: compact pull: nnz %" PRId64 " ndim %d shape (%" PRId64 ",%" PRId64 ")",
            what, out.nnz, out.ndim, out.shape[0], out.shape[1]);
    for (int j = 0; j < 5; j++) {
        if (oi[j] != want[j])
            die("%s: compact pull index %d is %" PRId64 ", expected %" PRId64, what, j, oi[j],
                want[j]);
        for (int c = 0; c < C; c++)
            if (od[j * C + c] != tab[want[j] * C + c])
                die("%s: compact pull row %" PRId64 " column %d is %g, expected %g", what,
                    want[j], c, od[j * C + c], tab[want[j] * C + c]);
    }
}

static void init_table(kvs_key_t k, float v)
{
    float w[R * C];
    kvs_array_t a = f32(w, R, C);

    fill(w, R * C, v);
    ok(kvs_init(kv, 1, &k, &a), "init");
}

/* dist_sync without an optimizer: each round's value is the row-sparse sum
 * of that round's pushes, absent rows zero; some rounds with empty pushes,
 * one with all empty (then every row is zero). Then sgd lr=1: w -= the sum,
 * only the rows pushed. */
static void sums(void)
{
    kvs_key_t k = KVS_INT_KEY(1);
    float ref[R * C], o[R * C];
    struct rpush p;

    init_table(k, 5.0f);
    for (int s = 0; s < 6; s++) {
        int all_empty = s == 3;

        memset(ref, 0, sizeof ref);
        for (int r = 0; r < nw; r++) {
            make_push(r, s, all_empty || (s == 1 && r == 0), &p);
            add_push(ref, &p, 1.0f);
        }
        make_push(rank, s, all_empty || (s == 1 && rank == 0), &p);
        kvs_row_sparse_t v = rs_of(&p);
        ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse");
        pull_table(k, o);
        expect_table(o, ref, "value after a row-sparse round");
        compact(k, ref, "sums");
    }
    /* A key given twice in one call: both values' rows are summed. */
    memset(ref, 0, sizeof ref);
    {
        struct rpush q[2];
        kvs_row_sparse_t v[2];
        kvs_key_t kk[2] = { k, k };

        for (int r = 0; r < nw; r++)
            for (int h = 0; h < 2; h++) {
                make_push(r, 100 + h, 0, &q[h]);
                add_push(ref, &q[h], 1.0f);
            }
        for (int h = 0; h < 2; h++) {
            make_push(rank, 100 + h, 0, &q[h]);
            v[h] = rs_of(&q[h]);
        }
        ok(kvs_push_row_sparse(kv, 2, kk, v, 0), "push_row_sparse of a key twice");
        pull_table(k, o);
        expect_table(o, ref, "value after a key pushed twice in one call");
    }
    ok(kvs_barrier(kv), "barrier");        /* every round applied before the rule changes */
    ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer");
    ok(kvs_barrier(kv), "barrier");
    for (int s = 10; s < 13; s++) {
        for (int r = 0; r < nw; r++) {
            make_push(r, s, 0, &p);
            add_push(ref, &p, -1.0f);
        }
        make_push(rank, s, 0, &p);
        kvs_row_sparse_t v = rs_of(&p);
        ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse");
    }
    pull_table(k, o);
    expect_table(o, ref, "value after sgd rounds");
    compact(k, ref, "sgd");
    ok(kvs_barrier(kv), "barrier");
}

/* dist_async: each push applied as it comes. sgd lr=1 makes the end value
 * the same in any order: w0 minus every push of every worker. */
static void async_sums(void)
{
    kvs_key_t k = KVS_INT_KEY(1);
    float ref[R * C], o[R * C];
    struct rpush p;

    init_table(k, 2.0f);
    ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer");
    ok(kvs_barrier(kv), "barrier");
    fill(ref, R * C, 2.0f);
    for (int s = 0; s < 8; s++) {
        for (int r = 0; r < nw; r++) {
            make_push(r, s, s == 5, &p);
            add_push(ref, &p, -1.0f);
        }
        make_push(rank, s, s == 5, &p);
        kvs_row_sparse_t v = rs_of(&p);
        ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse");
    }
    ok(kvs_barrier(kv), "barrier");
    pull_table(k, o);
    expect_table(o, ref, "value after every async push");
    compact(k, ref, "async");
    ok(kvs_barrier(kv), "barrier");
}

/* Lazy updates: sgd with momentum and wd, and adam, change only the rows
 * pushed (bit for bit unchanged elsewhere), and change them exactly as a
 * local store does given every worker's rows in one push. */
static void lazy_one(const char *spec, int key)
{
    kvs_key_t k = KVS_INT_KEY(key);
    float w[R * C], before[R * C], o[R * C], lo[R * C];
    kvs_array_t a = f32(w, R, C), lout = f32(lo, R, C);
    struct rpush p[4];
    kvs_row_sparse_t lv[4];
    kvs_key_t lk[4];
    kvs_t *local;
    int touched[R];

    for (int i = 0; i < R * C; i++)
        w[i] = (float)(i % 7) - 3.0f;
    ok(kvs_create("local", &local), "create local");
    ok(kvs_init(local, 1, &k, &a), "init local");
    ok(kvs_set_optimizer(local, spec), "set_optimizer local");
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_set_optimizer(kv, spec), "set_optimizer");
    ok(kvs_barrier(kv), "barrier");
    for (int s = 0; s < 3; s++) {
        pull_table(k, before);
        memset(touched, 0, sizeof touched);
        for (int r = 0; r < nw; r++) {
            make_push(r, 50 + s, 0, &p[r]);
            lv[r] = rs_of(&p[r]);
            lk[r] = k;
            for (int64_t j = 0; j < p[r].nnz; j++)
                touched[p[r].idx[j]] = 1;
        }
        ok(kvs_push_row_sparse(local, nw, lk, lv, 0), "push_row_sparse local");
        ok(kvs_pull(local, 1, &k, &lout, 0), "pull local");
        ok(kvs_push_row_sparse(kv, 1, &k, &lv[rank], 0), "push_row_sparse");
        pull_table(k, o);
        for (int i = 0; i < R * C; i++) {
            if (!touched[i / C] && memcmp(&o[i], &before[i], sizeof o[i]) != 0)
                die("%s: absent row %d changed from %g to %g", spec, i / C, before[i], o[i]);
            if (touched[i / C] && fabsf(o[i] - lo[i]) > 1e-6f * (1 + fabsf(lo[i])))
                die("%s: row %d column %d is %g, the local store's %g", spec, i / C, i % C,
                    o[i], lo[i]);
        }
    }
    kvs_close(local);
    ok(kvs_barrier(kv), "barrier");
}

static void lazy(void)
{
    lazy_one("sgd lr=0.1 momentum=0.9 wd=0.01", 2);
    lazy_one("adam lr=0.01", 3);
}

/* A round where rank 0 pushes dense and the others row-sparse: the dense
 * sum of all of them (the row-sparse ones densified). */
static void mixed(void)
{
    kvs_key_t k = KVS_INT_KEY(4);
    float ref[R * C], o[R * C], g[R * C];
    kvs_array_t ga = f32(g, R, C);
    struct rpush p;

    init_table(k, 1.0f);
    for (int i = 0; i < R * C; i++)
        ref[i] = g[i] = (float)(i % 5);
    for (int r = 1; r < nw; r++) {
        make_push(r, 70, 0, &p);
        add_push(ref, &p, 1.0f);
    }
    if (rank == 0) {
        ok(kvs_push(kv, 1, &k, &ga, 0), "dense push");
    } else {
        make_push(rank, 70, 0, &p);
        kvs_row_sparse_t v = rs_of(&p);
        ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse");
    }
    pull_table(k, o);
    expect_table(o, ref, "a round of dense and row-sparse pushes");
    ok(kvs_barrier(kv), "barrier");
}

/* Bad values from the last rank are refused with a clear error naming the
 * key, and change nothing: its round then completes with its good push. */
static void bad(void)
{
    kvs_key_t k = KVS_INT_KEY(5);
    float ref[R * C], o[R * C], od[C];
    double dd[C];
    int64_t oi[1], badid[1] = { R }, neg[1] = { -1 };
    struct rpush p;
    int rc;

    init_table(k, 3.0f);
    memset(ref, 0, sizeof ref);
    for (int r = 0; r < nw; r++) {
        make_push(r, 80, 0, &p);
        add_push(ref, &p, 1.0f);
    }
    if (rank == nw - 1) {
        kvs_row_sparse_t v = { .data = od, .indices = badid, .nnz = 1, .dtype = KVS_FLOAT32,
                               .ndim = 2, .shape = { R, C } };

        fill(od, C, 1.0f);
        rc = kvs_push_row_sparse(kv, 1, &k, &v, 0);
        if (rc != KVS_ERANGE || !strstr(kvs_last_error(kv), "key 5"))
            die("a row id past the table: %s (%s), expected KVS_ERANGE naming key 5",
                kvs_err_name(rc), kvs_last_error(kv));
        v.indices = neg;
        if ((rc = kvs_push_row_sparse(kv, 1, &k, &v, 0)) != KVS_ERANGE)
            die("a negative row id: %s (%s), expected KVS_ERANGE", kvs_err_name(rc),
                kvs_last_error(kv));
        v.indices = oi;
        oi[0] = 1;
        v.data = dd;
        v.dtype = KVS_FLOAT64;
        if ((rc = kvs_push_row_sparse(kv, 1, &k, &v, 0)) != KVS_EDTYPE)
            die("a float64 value of a float32 key: %s (%s), expected KVS_EDTYPE",
                kvs_err_name(rc), kvs_last_error(kv));
        v.dtype = KVS_FLOAT32;
        v.data = od;
        v.shape[0] = R + 1;
        if ((rc = kvs_push_row_sparse(kv, 1, &k, &v, 0)) != KVS_ESHAPE)
            die("a value of another shape: %s (%s), expected KVS_ESHAPE", kvs_err_name(rc),
                kvs_last_error(kv));
        /* Nothing changed: the table is as init left it. */
        pull_table(k, o);
        expect(o, R * C, 3.0f, "the table after refused pushes");
    }
    make_push(rank, 80, 0, &p);
    kvs_row_sparse_t v = rs_of(&p);
    ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse");
    pull_table(k, o);
    expect_table(o, ref, "the round after refused pushes");
    /* A compact pull of a row past the table: refused, nothing written. */
    {
        kvs_array_t ida = { .data = badid, .dtype = KVS_INT64, .ndim = 1, .shape = { 1 } };
        kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = 1 };

        oi[0] = 77;
        rc = kvs_pull_rows(kv, 1, &k, &ida, &out, 0);
        if (rc != KVS_ERANGE || oi[0] != 77)
            die("a compact pull of row %d of %d: %s (%s), expected KVS_ERANGE", R, R,
                kvs_err_name(rc), kvs_last_error(kv));
    }
    /* 2bit compression does not take row-sparse pushes. */
    ok(kvs_set_gradient_compression(kv, "2bit threshold=0.5"), "set compression");
    if ((rc = kvs_push_row_sparse(kv, 1, &k, &v, 0)) != KVS_ENOTSUP)
        die("a row-sparse push under 2bit compression: %s, expected KVS_ENOTSUP",
            kvs_err_name(rc));
    ok(kvs_set_gradient_compression(kv, "none"), "compression none");
    ok(kvs_barrier(kv), "barrier");
}

/* kvsctl stats' counter NAME: value, or die. */
static unsigned long long stat_of(const char *name)
{
    const char *ctl = getenv("KVS_TEST_KVSCTL");
    char cmd[512], line[256];
    unsigned long long v = 0;
    size_t len = strlen(name);
    int found = 0;
    FILE *f;

    if (!ctl || !*ctl)
        die("KVS_TEST_KVSCTL is not set");
    snprintf(cmd, sizeof cmd, "%s -j %s stats", ctl, getenv("KVS_JOB"));
    if (!(f = popen(cmd, "r")))
        die("popen %s", cmd);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, name, len) == 0 && line[len] == ':')
            found = sscanf(line + len + 1, "%llu", &v) == 1;
    if (pclose(f) != 0 || !found)
        die("kvsctl stats has no \"%s\"", name);
    return v;
}

/* Bytes moved follow the rows, not the table: a table of 1,000,000 rows,
 * each worker pushes 10 rows and pulls 10; kvsd counts 10 rows and their
 * bytes a worker each way, and the worker's resident memory does not grow
 * by the table. */
static void bytes(void)
{
    const int64_t rows = 1000000, cols = 2, m = 10;
    kvs_key_t k = KVS_INT_KEY(6);
    int64_t idx[10], oi[10];
    float d[10 * 2], od[10 * 2];
    kvs_row_sparse_t z = { .nnz = 0, .dtype = KVS_FLOAT32, .ndim = 2, .shape = { rows, cols } };
    kvs_array_t ida = { .data = idx, .dtype = KVS_INT64, .ndim = 1, .shape = { m } };
    unsigned long long p0 = 0, b0 = 0, q0 = 0, c0 = 0;

    ok(kvs_init_row_sparse(kv, 1, &k, &z), "init_row_sparse");
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0) {
        p0 = stat_of("rows pushed");
        b0 = stat_of("bytes pushed");
        q0 = stat_of("rows pulled");
        c0 = stat_of("bytes pulled");
    }
    ok(kvs_barrier(kv), "barrier");
    for (int64_t j = 0; j < m; j++) {
        idx[j] = (int64_t)(mix((uint64_t)(rank * 100 + j)) % (uint64_t)rows);
        d[2 * j] = d[2 * j + 1] = (float)(j + 1);
    }
    idx[m - 1] = idx[0] + (idx[0] + 1 < rows ? 1 : -1);   /* all 10 distinct */
    kvs_row_sparse_t v = { .data = d, .indices = idx, .nnz = m, .dtype = KVS_FLOAT32,
                           .ndim = 2, .shape = { rows, cols } };
    ok(kvs_push_row_sparse(kv, 1, &k, &v, 0), "push_row_sparse");
    kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = m };
    ok(kvs_pull_rows(kv, 1, &k, &ida, &out, 0), "pull_rows");
    if (out.nnz > m)
        die("compact pull of 10 ids gave %" PRId64 " rows", out.nnz);
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0) {
        unsigned long long dp = stat_of("rows pushed") - p0, db = stat_of("bytes pushed") - b0,
                           dq = stat_of("rows pulled") - q0, dc = stat_of("bytes pulled") - c0;
        unsigned long long want_rows = (unsigned long long)(m * nw);

        if (dp != want_rows || db != want_rows * (8 + 8))
            die("a push of 10 rows a worker: kvsd counted %llu rows, %llu bytes; expected "
                "%llu rows, %llu bytes (ids and rows, not the table's %lld bytes)", dp, db,
                want_rows, want_rows * 16, (long long)(rows * cols * 4));
        if (dq > want_rows || dc != dq * 8 || dq < (unsigned long long)m)
            die("a pull of 10 rows a worker: kvsd counted %llu rows, %llu bytes", dq, dc);
    }
    ok(kvs_barrier(kv), "barrier");
}

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

/* Lazy updates of a key split over the hosts (spec: an optimizer): each
 * round every worker pushes 3 rows; in the first only rows of the first
 * host's range, so that the other owner gets none and must still count
 * the step (adam's bias correction shows a miscount). Rows no worker
 * pushed stay bit-identical, the others match a local store given every
 * worker's rows in one push; with lazy_update=0 in spec every row matches
 * it (each owner's part comes back dense). */
static void hosts_lazy(const char *spec, kvs_key_t k, int64_t rows, int64_t cols)
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
    ok(kvs_create("local", &local), "create local");
    ok(kvs_init(local, 1, &k, &a), "init local");
    ok(kvs_set_optimizer(local, spec), "set_optimizer local");
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_set_optimizer(kv, spec), "set_optimizer");
    ok(kvs_barrier(kv), "barrier");
    for (int s = 0; s < 3; s++) {
        ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
        memcpy(before, w, n * sizeof *w);
        memset(touched, 0, (size_t)rows);
        for (int r = 0; r < nw; r++) {
            idx[r][0] = r;
            idx[r][1] = s == 0 ? 10 + r : rows - 1 - r;
            idx[r][2] = s == 0 ? 7 : rows / 2 + s;
            for (int j = 0; j < 3; j++) {
                touched[idx[r][j]] = 1;
                for (int64_t c = 0; c < cols; c++)
                    d[r][j * cols + c] = (float)((r + 1) * (j + 2) - s) * 0.25f + (float)c;
            }
            lv[r] = (kvs_row_sparse_t){ .data = d[r], .indices = idx[r], .nnz = 3,
                                        .dtype = KVS_FLOAT32, .ndim = 2,
                                        .shape = { rows, cols } };
            lk[r] = k;
        }
        ok(kvs_push_row_sparse(local, nw, lk, lv, 0), "push_row_sparse local");
        ok(kvs_pull(local, 1, &k, &lout, 0), "pull local");
        ok(kvs_push_row_sparse(kv, 1, &k, &lv[rank], 0), "push_row_sparse across hosts");
        ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
        for (size_t i = 0; i < n; i++) {
            size_t row = i / (size_t)cols;

            if (!dense && !touched[row] && memcmp(&w[i], &before[i], sizeof w[i]) != 0)
                die("%s across hosts: absent row %zu changed from %g to %g", spec, row,
                    before[i], w[i]);
            if ((dense || touched[row]) && fabsf(w[i] - lo[i]) > 1e-6f * (1 + fabsf(lo[i])))
                die("%s across hosts (round %d): row %zu column %zu is %g, the local "
                    "store's %g", spec, s, row, i % (size_t)cols, w[i], lo[i]);
        }
    }
    kvs_close(local);
    ok(kvs_barrier(kv), "barrier");
    free(w);
    free(before);
    free(lo);
    free(touched);
}

/* Across hosts (tests/test_hosts_rows.sh): compact pulls on every host of
 * a small key (one owner) and of a key split over the hosts' ranges, after
 * dense rounds that every host's workers push; then row-sparse rounds of
 * it (hosts_rows). In dist_async only what every host knows is checked:
 * the value init gave; a row-sparse push and a row-sparse pushpull are
 * refused there with KVS_ENOTSUP and change nothing. */
static void hosts_one(kvs_key_t k, int64_t rows, int64_t cols, int async)
{
    size_t n = (size_t)(rows * cols);
    float *w = malloc(n * sizeof *w), *ref = malloc(n * sizeof *ref);
    int64_t ids[] = { rows - 1, 3, 0, rows / 2, 3, rows / 2 + 1, rows - 1 };
    int64_t want[] = { 0, 3, rows / 2, rows / 2 + 1, rows - 1 }, oi[8], one[1] = { 1 };
    float *od = malloc(8 * (size_t)cols * sizeof *od), row[64];
    kvs_array_t a = f32(w, rows, cols);
    kvs_array_t ida = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 7 } };
    kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = 8 };
    kvs_row_sparse_t v = { .data = row, .indices = one, .nnz = 1, .dtype = KVS_FLOAT32,
                           .ndim = 2, .shape = { rows, cols } };
    int rc;

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
    for (int pass = 0; pass < 2; pass++) {
        out.nnz = 8;
        memset(oi, 0xff, sizeof oi);
        ok(kvs_pull_rows(kv, 1, &k, &ida, &out, 0), "pull_rows across hosts");
        if (out.nnz != 5 || out.shape[0] != rows || out.shape[1] != cols)
            die("key %d: compact pull across hosts: nnz %" PRId64 " shape (%" PRId64 ",%"
                PRId64 ")", (int)k.id, out.nnz, out.shape[0], out.shape[1]);
        for (int j = 0; j < 5; j++) {
            if (oi[j] != want[j])
                die("key %d: compact pull index %d is %" PRId64 ", expected %" PRId64,
                    (int)k.id, j, oi[j], want[j]);
            for (int64_t c = 0; c < cols; c++)
                if (od[j * cols + c] != ref[want[j] * cols + c])
                    die("key %d (pass %d): row %" PRId64 " column %" PRId64 " is %g, expected "
                        "%g", (int)k.id, pass, want[j], c, od[j * cols + c],
                        ref[want[j] * cols + c]);
        }
        if (pass || !async)
            break;
        fill(row, (size_t)cols, 1.0f);
        rc = kvs_push_row_sparse(kv, 1, &k, &v, 0);
        if (rc != KVS_ENOTSUP || !strstr(kvs_last_error(kv), "dist_async"))
            die("a row-sparse push across hosts in dist_async: %s (%s), expected "
                "KVS_ENOTSUP saying so", kvs_err_name(rc), kvs_last_error(kv));
        out.nnz = 8;
        rc = kvs_pushpull_row_sparse(kv, 1, &k, &v, &ida, &out, 0);
        if (rc != KVS_ENOTSUP || !strstr(kvs_last_error(kv), "dist_async"))
            die("a row-sparse pushpull across hosts in dist_async: %s (%s), expected "
                "KVS_ENOTSUP saying so", kvs_err_name(rc), kvs_last_error(kv));
        ok(kvs_barrier(kv), "barrier");
    }
    if (!async) {
        int64_t ids2[] = { 0, 1, rows / 2 - 1, rows / 2, rows - 1 };
        kvs_array_t ida2 = { .data = ids2, .dtype = KVS_INT64, .ndim = 1, .shape = { 5 } };

        hosts_rows(k, rows, cols, w, ref, &ida2, ids2, &out);
    }
    ok(kvs_barrier(kv), "barrier");
    free(w);
    free(ref);
    free(od);
}

/* Init from rows of a table bigger than the job's staging (the test runs
 * kvsd with --staging 1M, the table is 4 MiB): only the rows given cross.
 * Every rank gives other rows, rank 0's are stored: row j of rank r's
 * value is (r + 1) * (j + 1) in every column, row 7 given twice (summed),
 * the rest zero. Compact pulls check every row: in chunks that kvsd
 * gathers into staging, and all at once (4 MiB, more than staging holds,
 * so the worker reads them out of the arena). Then a bad id: KVS_ERANGE
 * naming the key and the id, nothing stored. */
static void init_big(void)
{
    const int64_t rows = 65536, cols = 16, chunk = 4096;
    kvs_key_t k = KVS_INT_KEY(12), k2 = KVS_INT_KEY(13);
    int64_t idx[6], *ids = malloc((size_t)rows * sizeof *ids),
            *oi = malloc((size_t)rows * sizeof *oi);
    float d[6 * 16], *od = malloc((size_t)(rows * cols) * sizeof *od), *ref;
    kvs_row_sparse_t v = { .data = d, .indices = idx, .nnz = 6, .dtype = KVS_FLOAT32,
                           .ndim = 2, .shape = { rows, cols } };
    int rc;

    ref = calloc((size_t)(rows * cols), sizeof *ref);
    if (!ids || !oi || !od || !ref)
        die("out of memory");
    /* rank r: rows r, 7, 7, 1000 + r, rows - 1 - r, rows / 2 */
    idx[0] = rank, idx[1] = 7, idx[2] = 7, idx[3] = 1000 + rank, idx[4] = rows - 1 - rank;
    idx[5] = rows / 2;
    for (int j = 0; j < 6; j++)
        for (int64_t c = 0; c < cols; c++)
            d[j * cols + c] = (float)((rank + 1) * (j + 1)) + (float)c / 16.0f;
    {                                   /* rank 0's value, as kvsd stores it */
        const int64_t r0[6] = { 0, 7, 7, 1000, rows - 1, rows / 2 };

        for (int j = 0; j < 6; j++)
            for (int64_t c = 0; c < cols; c++)
                ref[r0[j] * cols + c] += (float)(j + 1) + (float)c / 16.0f;
    }
    ok(kvs_init_row_sparse(kv, 1, &k, &v), "init_row_sparse of a table bigger than staging");
    for (int64_t j = 0; j < rows; j++)
        ids[j] = rows - 1 - j;          /* unsorted: the pull sorts them */
    for (int pass = 0; pass < 2; pass++) {
        int64_t step = pass == 0 ? chunk : rows;

        for (int64_t at = 0; at < rows; at += step) {
            kvs_array_t ida = { .data = ids + at, .dtype = KVS_INT64, .ndim = 1,
                                .shape = { step } };
            kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = step };
            int64_t first = rows - at - step;   /* the chunk's rows, sorted */

            ok(kvs_pull_rows(kv, 1, &k, &ida, &out, 0), "pull_rows");
            if (out.nnz != step || out.shape[0] != rows || out.shape[1] != cols)
                die("compact pull of %" PRId64 " rows: nnz %" PRId64 " shape (%" PRId64 ",%"
                    PRId64 ")", step, out.nnz, out.shape[0], out.shape[1]);
            for (int64_t j = 0; j < step; j++) {
                if (oi[j] != first + j)
                    die("compact pull index %" PRId64 " is %" PRId64 ", expected %" PRId64,
                        j, oi[j], first + j);
                for (int64_t c = 0; c < cols; c++)
                    if (od[j * cols + c] != ref[(first + j) * cols + c])
                        die("init from rows (pull of %" PRId64 "): row %" PRId64 " column %"
                            PRId64 " is %g, expected %g", step, first + j, c,
                            od[j * cols + c], ref[(first + j) * cols + c]);
            }
        }
    }
    idx[2] = rows;
    rc = kvs_init_row_sparse(kv, 1, &k2, &v);
    if (rc != KVS_ERANGE || !strstr(kvs_last_error(kv), "key 13")
        || !strstr(kvs_last_error(kv), "65536"))
        die("an init with a row id past the table: %s (%s), expected KVS_ERANGE naming key "
            "13 and the id", kvs_err_name(rc), kvs_last_error(kv));
    {
        kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = 1 };
        kvs_array_t ida = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 1 } };

        if ((rc = kvs_pull_rows(kv, 1, &k2, &ida, &out, 0)) != KVS_ENOKEY)
            die("a failed init stored its key: a pull gives %s, expected KVS_ENOKEY",
                kvs_err_name(rc));
    }
    ok(kvs_barrier(kv), "barrier");
    free(ids);
    free(oi);
    free(od);
    free(ref);
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

static void hosts(const char *type)
{
    int async = strcmp(type, "dist_async") == 0;

    hosts_init(KVS_INT_KEY(14), R);
    hosts_init(KVS_INT_KEY(15), 300000);

    hosts_one(KVS_INT_KEY(7), R, C, async);
    /* 4.8 MB: split over the hosts, each owning a range of rows. */
    hosts_one(KVS_INT_KEY(8), 300000, 4, async);
    if (!async) {
        hosts_lazy("adam lr=0.01 wd=0.01", KVS_INT_KEY(9), 300000, 4);
        hosts_lazy("sgd lr=0.1 momentum=0.9 wd=0.01", KVS_INT_KEY(10), 300000, 4);
        hosts_lazy("adam lr=0.01 wd=0.1 lazy_update=0", KVS_INT_KEY(11), 300000, 4);
    }
}

int main(int argc, char **argv)
{
    const char *type = "dist_sync";

    scenario = argc > 1 ? argv[1] : "sums";
    if (argc > 2)
        type = argv[2];
    ok(kvs_create(type, &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (strcmp(scenario, "sums") == 0)
        strcmp(type, "dist_async") == 0 ? async_sums() : sums();
    else if (strcmp(scenario, "lazy") == 0)
        lazy();
    else if (strcmp(scenario, "mixed") == 0)
        mixed();
    else if (strcmp(scenario, "bad") == 0)
        bad();
    else if (strcmp(scenario, "bytes") == 0)
        bytes();
    else if (strcmp(scenario, "init") == 0)
        init_big();
    else if (strcmp(scenario, "hosts") == 0)
        hosts(type);
    else
        die("unknown scenario");
    kvs_close(kv);
    return 0;
}
