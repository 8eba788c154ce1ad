/*
 * dist_rows.c - a worker of the row-sparse test jobs (tests/test_dist_rows.sh):
 * row-sparse pushes and compact pulls in dist_sync and dist_async, checked
 * by value against a reference each worker computes: every worker's pushes
 * come from a seed (its rank, the step), so each knows them all. Values are
 * small integers, whose sums are exact in any order.
 *
 * Usage: dist_rows SCENARIO [TYPE]; the job's environment as kvsrun sets it
 * (KVS_JOB, KVS_RANK, ...), and KVS_TEST_KVSCTL (the kvsctl to ask for
 * stats) for the scenario "bytes" and under KVS_TEST_COMBINED=1 (which
 * checks that the workers combined the job's rounds). The scenario "hosts"
 * runs across hosts (tests/test_hosts_rows.sh); it and "lazy_chunks" are in
 * dist_rows_hosts.c.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dist_rows.h"

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
    /* A round by a pushpull of unsorted repeated ids: their rows of the sum. */
    memset(ref, 0, sizeof ref);
    {
        int64_t ids[] = { 19, 3, 3, 0 }, want[] = { 0, 3, 19 }, oi[4];
        float od[4 * C];
        kvs_array_t ida = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 4 } };
        kvs_row_sparse_t out = { .data = od, .indices = oi, .nnz = 4 };

        for (int r = 0; r < nw; r++) {
            make_push(r, 90, 0, &p);
            add_push(ref, &p, 1.0f);
        }
        make_push(rank, 90, 0, &p);
        kvs_row_sparse_t v = rs_of(&p);
        ok(kvs_pushpull_row_sparse(kv, 1, &k, &v, &ida, &out, 0), "pushpull_row_sparse");
        if (out.nnz != 3)
            die("pushpull of 3 unique ids gave %" PRId64 " rows", out.nnz);
        for (int j = 0; j < 3; j++)
            for (int c = 0; c < C; c++)
                if (oi[j] != want[j] || od[j * C + c] != ref[want[j] * C + c])
                    die("pushpull: row %" PRId64 " column %d is %g, expected row %" PRId64
                        " %g", oi[j], c, od[j * C + c], want[j], ref[want[j] * C + c]);
    }
    /* A key of one dimension: each element a row. */
    {
        kvs_key_t k1 = KVS_INT_KEY(16);
        float w1[R], r1[R];
        int64_t ids[2] = { rank, 7 };
        float d[2] = { 1.0f, 2.0f };
        kvs_array_t a1 = { .data = w1, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { R } };
        kvs_row_sparse_t v1 = { .data = d, .indices = ids, .nnz = 2, .dtype = KVS_FLOAT32,
                                .ndim = 1, .shape = { R } };

        fill(w1, R, 9.0f);
        ok(kvs_init(kv, 1, &k1, &a1), "init of a 1-D key");
        ok(kvs_push_row_sparse(kv, 1, &k1, &v1, 0), "push_row_sparse of a 1-D key");
        memset(r1, 0, sizeof r1);
        for (int r = 0; r < nw; r++) {
            r1[r] += 1.0f;
            r1[7] += 2.0f;
        }
        ok(kvs_pull(kv, 1, &k1, &a1, 0), "pull of a 1-D key");
        for (int i = 0; i < R; i++)
            if (w1[i] != r1[i])
                die("1-D key: element %d is %g, expected %g", i, w1[i], r1[i]);
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
 * local store does given every worker's rows in one push. With
 * lazy_update=0 in spec, every row matches the local store's. */
static void lazy_one(const char *spec, int key)
{
    int dense = strstr(spec, "lazy_update=0") != NULL;
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
    local = twin(k, &a, spec);
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
            if (!dense && !touched[i / C] && memcmp(&o[i], &before[i], sizeof o[i]) != 0)
                die("%s: absent row %d changed from %g to %g", spec, i / C, before[i], o[i]);
            if ((dense || touched[i / C]) && fabsf(o[i] - lo[i]) > 1e-6f * (1 + fabsf(lo[i])))
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
    lazy_one("adam lr=0.01 wd=0.1 lazy_update=0", 12);
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

/* One call of a small key (combined by the workers, when they combine)
 * given twice and a big one (kvsd's): each key's rows summed, then a
 * compact pull of both in one call. With the small key combined, a bad
 * value of it, the list's third, is refused naming the key, and nothing
 * is pushed. */
static void lists(void)
{
    const int64_t big = 100000;
    kvs_key_t ks[3] = { KVS_INT_KEY(20), KVS_INT_KEY(21), KVS_INT_KEY(20) };
    float *wb = calloc((size_t)(big * C), sizeof *wb), ref[R * C], o[R * C];
    int64_t bi[2] = { big - 1 - rank, 5 }, ids[2] = { 5, big - 1 }, ids_s[2] = { 3, 0 };
    int64_t oi[2][2];
    float bd[2 * C], od[2][2 * C], bigref[2][C];
    struct rpush p[2];
    kvs_row_sparse_t v[3], outs[2];
    kvs_array_t ab = f32(wb, big, C), ida[2];
    int rc;

    if (!wb)
        die("out of memory");
    init_table(ks[0], 1.0f);
    ok(kvs_init(kv, 1, &ks[1], &ab), "init of a big key");
    memset(ref, 0, sizeof ref);
    memset(bigref, 0, sizeof bigref);
    for (int r = 0; r < nw; r++) {
        for (int h = 0; h < 2; h++) {
            make_push(r, 110 + h, 0, &p[h]);
            add_push(ref, &p[h], 1.0f);
        }
        for (int c = 0; c < C; c++) {
            bigref[0][c] += (float)(r + 1 + c);            /* row 5 */
            if (r == 0)
                bigref[1][c] += (float)(10 + c);           /* row big - 1, rank 0's */
        }
    }
    for (int c = 0; c < C; c++) {
        bd[c] = rank == 0 ? (float)(10 + c) : 0.0f;
        bd[C + c] = (float)(rank + 1 + c);
    }
    for (int h = 0; h < 2; h++)
        make_push(rank, 110 + h, 0, &p[h]);
    v[0] = rs_of(&p[0]);
    v[1] = (kvs_row_sparse_t){ .data = bd, .indices = bi, .nnz = 2, .dtype = KVS_FLOAT32,
                               .ndim = 2, .shape = { big, C } };
    v[2] = rs_of(&p[1]);
    /* Checked before anything is pushed when the small key is combined. */
    if (rank == nw - 1 && getenv("KVS_TEST_COMBINED")) {
        int64_t keep = p[1].idx[0];

        p[1].idx[0] = R;
        rc = kvs_push_row_sparse(kv, 3, ks, v, 0);
        if (rc != KVS_ERANGE || !strstr(kvs_last_error(kv), "key 20"))
            die("a bad row id in the third value of a list: %s (%s), expected KVS_ERANGE "
                "naming key 20", kvs_err_name(rc), kvs_last_error(kv));
        p[1].idx[0] = keep;
    }
    ok(kvs_push_row_sparse(kv, 3, ks, v, 0), "push_row_sparse of a list");
    pull_table(ks[0], o);
    expect_table(o, ref, "the small key of a list");
    ida[0] = (kvs_array_t){ .data = ids_s, .dtype = KVS_INT64, .ndim = 1, .shape = { 2 } };
    ida[1] = (kvs_array_t){ .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 2 } };
    for (int i = 0; i < 2; i++)
        outs[i] = (kvs_row_sparse_t){ .data = od[i], .indices = oi[i], .nnz = 2 };
    ok(kvs_pull_rows(kv, 2, &ks[0], ida, outs, 0), "pull_rows of a list");
    for (int c = 0; c < C; c++) {
        if (od[0][c] != ref[0 * C + c] || od[0][C + c] != ref[3 * C + c])
            die("the small key's compact pull: column %d is %g and %g, expected %g and %g", c,
                od[0][c], od[0][C + c], ref[c], ref[3 * C + c]);
        if (od[1][c] != bigref[0][c] || od[1][C + c] != bigref[1][c])
            die("the big key's compact pull: column %d is %g and %g, expected %g and %g", c,
                od[1][c], od[1][C + c], bigref[0][c], bigref[1][c]);
    }
    if (oi[0][0] != 0 || oi[0][1] != 3 || oi[1][0] != 5 || oi[1][1] != big - 1)
        die("compact pulls of a list: indices %" PRId64 " %" PRId64 ", %" PRId64 " %" PRId64,
            oi[0][0], oi[0][1], oi[1][0], oi[1][1]);
    free(wb);
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

/* Key `key`'s rows in kvsctl stats' listing of rows per key: PUSHED,
 * PULLED, SENT, RECEIVED; zeros when it is not listed (no rows counted). */
static void key_rows_of(int64_t key, unsigned long long *v)
{
    const char *ctl = getenv("KVS_TEST_KVSCTL");
    char cmd[512], line[256], first[32];
    int table = 0, n;
    FILE *f;

    if (!ctl || !*ctl)
        die("KVS_TEST_KVSCTL is not set");
    snprintf(cmd, sizeof cmd, "%s -j %s stats", ctl, getenv("KVS_JOB"));
    v[0] = v[1] = v[2] = v[3] = 0;
    if (!(f = popen(cmd, "r")))
        die("popen %s", cmd);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "KEY ", 4) == 0)
            table = strstr(line, " PUSHED ") != NULL;
        else if (table && sscanf(line, "%31s %llu %llu %llu %llu%n", first, &v[0], &v[1], &v[2],
                                 &v[3], &n) == 5 && strtoll(first, NULL, 10) == key)
            break;
        else
            v[0] = v[1] = v[2] = v[3] = 0;
    }
    while (fgets(line, sizeof line, f))
        ;
    if (pclose(f) != 0)
        die("%s failed", cmd);
}

/* Bytes moved follow the rows, not the table: a table of 1,000,000 rows,
 * each worker pushes 10 rows and pulls 10; kvsd counts 10 rows and their
 * bytes a worker each way, and the worker's resident memory does not grow
 * by the table. Then each worker pushes 3 rows of a second key, one id
 * twice, and pulls rows of it: kvsctl stats counts each key's rows on its
 * own (PUSHED: the ids as pushed, repeats too; PULLED: the rows the pulls
 * got), and none sent or received (one host); stats --json too. */
static void bytes(void)
{
    const int64_t rows = 1000000, cols = 2, m = 10;
    kvs_key_t k = KVS_INT_KEY(6);
    int64_t idx[10], oi[10];
    float d[10 * 2], od[10 * 2];
    kvs_row_sparse_t z = { .nnz = 0, .dtype = KVS_FLOAT32, .ndim = 2, .shape = { rows, cols } };
    kvs_array_t ida = { .data = idx, .dtype = KVS_INT64, .ndim = 1, .shape = { m } };
    unsigned long long p0 = 0, b0 = 0, q0 = 0, c0 = 0, kr[4];

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
        key_rows_of(6, kr);
        if (kr[0] != want_rows || kr[1] != dq || kr[2] || kr[3])
            die("key 6's rows: %llu pushed, %llu pulled, %llu sent, %llu received; expected "
                "%llu, %llu, 0, 0", kr[0], kr[1], kr[2], kr[3], want_rows, dq);
        p0 = stat_of("rows pushed");
        q0 = stat_of("rows pulled");
    }
    ok(kvs_barrier(kv), "barrier");
    {
        kvs_key_t k2 = KVS_INT_KEY(16);
        int64_t i2[3] = { 1, 4, 1 }, p2[3] = { 4, 2, 4 }, o2[3];
        float d2[3 * 2] = { 1, 2, 3, 4, 5, 6 }, od2[3 * 2];
        kvs_row_sparse_t z2 = { .nnz = 0, .dtype = KVS_FLOAT32, .ndim = 2, .shape = { 8, 2 } };
        kvs_row_sparse_t v2 = { .data = d2, .indices = i2, .nnz = 3, .dtype = KVS_FLOAT32,
                                .ndim = 2, .shape = { 8, 2 } };
        kvs_row_sparse_t out2 = { .data = od2, .indices = o2, .nnz = 3 };
        kvs_array_t ida2 = { .data = p2, .dtype = KVS_INT64, .ndim = 1, .shape = { 3 } };

        ok(kvs_init_row_sparse(kv, 1, &k2, &z2), "init_row_sparse");
        ok(kvs_push_row_sparse(kv, 1, &k2, &v2, 0), "push_row_sparse");
        ok(kvs_pull_rows(kv, 1, &k2, &ida2, &out2, 0), "pull_rows");
        if (out2.nnz != 2 || o2[0] != 2 || o2[1] != 4)
            die("a compact pull of ids 4, 2, 4 gave %" PRId64 " rows", out2.nnz);
    }
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0) {
        unsigned long long dp = stat_of("rows pushed") - p0, dq = stat_of("rows pulled") - q0;
        unsigned long long k6[4];

        key_rows_of(6, k6);
        key_rows_of(16, kr);
        if (dp != 3ull * (unsigned long long)nw || kr[0] != dp || kr[1] != dq || kr[2] || kr[3])
            die("key 16's rows: %llu pushed, %llu pulled, %llu sent, %llu received; expected "
                "%d (3 a worker), %llu, 0, 0", kr[0], kr[1], kr[2], kr[3], 3 * nw, dq);
        if (dq != 2ull * (unsigned long long)nw)
            die("a pull of ids 4, 2, 4 a worker: kvsd counted %llu rows, expected 2 a worker",
                dq);
        if (k6[0] != (unsigned long long)(m * nw))
            die("key 6's rows pushed changed to %llu with key 16's", k6[0]);
        for (int i = 0; i < 2; i++) {
            const unsigned long long *c = i ? kr : k6;
            char want[160];

            snprintf(want, sizeof want, "{\"key\": %d, \"pushed\": %llu, \"pulled\": %llu, "
                     "\"sent\": 0, \"received\": 0}", i ? 16 : 6, c[0], c[1]);
            if (!kvsctl_json_has(want))
                die("kvsctl stats --json has no %s", want);
        }
    }
    ok(kvs_barrier(kv), "barrier");
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

/* The job's state (distutil.h), shared with dist_rows_hosts.c. */
kvs_t *kv;
int rank, nw;
const char *scenario;

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
    else if (strcmp(scenario, "lazy_chunks") == 0)
        lazy_chunks();
    else if (strcmp(scenario, "lists") == 0)
        lists();
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
    /* KVS_TEST_COMBINED=1: the job's small keys were combined by the
     * workers, so that the scenario ran through the combine area. */
    if (getenv("KVS_TEST_COMBINED") && rank == 0) {
        if (stat_of("combined rounds") == 0)
            die("%s: no round was combined by the workers", scenario);
    }
    kvs_close(kv);
    return 0;
}
