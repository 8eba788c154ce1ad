/*
 * bench_rows.c - row-sparse steps of an embedding table in dist_sync,
 * against dense pushpulls, with the workers' and kvsd's resident memory:
 * the "rows" step of scripts/bench. Every case runs under adam and checks
 * what it pulls against a reference it computes itself.
 *
 *     kvsrun -n 4 bench_rows sparse [--rows 4000000] [--ids 4096]
 *         Each step each worker pushes the gradient rows of its batch of
 *         --ids Zipf(1.1) ids and pulls the rows of its next batch, in one
 *         kvs_pushpull_row_sparse; then dense kvs_pushpull rounds of an
 *         --ids x --cols array (a dense model's step of the same rows).
 *     kvsrun -n 4 --staging 300M bench_rows full [--rows 1000000]
 *         100% density: every row pushed and pulled row-sparse, then a
 *         dense kvs_pushpull of the same shape.
 *     kvsrun -n 4 --staging 1G bench_rows table [--rows 4000000]
 *         a dense kvs_pushpull of the whole table.
 *     common: [--cols 64] [--warmup W] [--steps S] [--passes P]
 *
 * --staging: a round of every row of `full` moves 256 MiB of rows through
 * staging, and `table`'s dense pushpull the whole table where kvsd cannot
 * read it out of the worker (KVS_REMOTE); `sparse` needs kvsd's default
 * (kvs_init_row_sparse sends only the rows given). A job runs P passes of
 * its cases in turn (sparse: the sparse steps, then the dense ones), each
 * of S timed steps, W warm-up steps before the first pass only.
 *
 * Values, so that every result can be checked: worker k's gradient of
 * column c, for each occurrence of a row, is (k+1)/256 + c/4096: sums of
 * them are exact in float32 in any order. In `sparse`, batch ids are
 * Zipf(1.1) ranks drawn from a generator seeded by (worker, step) and
 * scattered over the table by a fixed permutation, so every worker can
 * draw every other's batches: it keeps the exact adam state of the 128
 * hottest rows and a bitmap of the rows ever pushed, and checks each pull:
 * indices are the sorted unique ids asked for, a tracked row equals its
 * reference, a row never pushed is zero, every other row pushed is
 * negative in every column (adam with positive gradients only lowers a
 * weight). Dense cases and `full` push the same row to every row, so every
 * element of every pulled row is checked against the reference of its
 * column. A wrong value ends the program with status 1.
 *
 * Timing: a kvs_barrier before each step, the step's call alone timed;
 * each worker prints its median of each pass. Memory: VmRSS of
 * /proc/self/status after each sparse step (the largest so far, with its
 * RssShmem: the part in memory shared with kvsd) and VmHWM after a pass's
 * last, and kvsd's (the sibling kvsrun started) at the end of each pass.
 *
 * Output, one line per worker, case and pass:
 *     rows,CASE,PASS,RANK,WORKERS,ROWS,COLS,IDS,STEPS,MEDIAN_S[,RSS_KIB,HWM_KIB,SHMEM_KIB]
 *     rows,kvsd,CASE,PASS,RSS_KIB,HWM_KIB                (rank 0; CASE sparse, full, table)
 * CASE: sparse, small (the dense --ids x --cols array), full-sparse,
 * full-dense, table. Which worker was slowest, the ratios and the goals are
 * scripts/bench's. A benchmark, not a test: it exits 0 whatever the speed.
 * Only the public API in kvs.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                    /* getppid, DIR */
#endif

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "kvs.h"
#include "bench.h"
#include "kvsd_pid.h"

#define ADAM_SPEC   "adam lr=0.001 beta1=0.9 beta2=0.999 epsilon=1e-8"
#define ADAM_LR     0.001
#define ADAM_B1     0.9
#define ADAM_B2     0.999
#define ADAM_EPS    1e-8
#define ZIPF_S      1.1
#define NTRACK      128                /* hottest rows whose adam state is kept */
#define MAX_COLS    1024
#define MAX_STEPS   100000L

static kvs_t *kv;
static int rank, nw;
static long nrows = -1, ncols = 64, nids = 4096, warmup = -1, steps = -1, passes = 1;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "bench_rows rank %d: ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* ---- the gradient and its reference ----------------------------------- */

static float grad(int k, long c)
{
    return (float)(k + 1) / 256.0f + (float)c / 4096.0f;
}

/* adam's update of one row, as kvs applies it (MXNet's rule in float32,
 * the learning rate bias-corrected in double for update count t). */
static void adam_row(float *w, float *m, float *v, const float *g, long n, uint64_t t)
{
    float lr = (float)(ADAM_LR * (sqrt(1.0 - pow(ADAM_B2, (double)t)) /
                                  (1.0 - pow(ADAM_B1, (double)t))));
    float b1 = (float)ADAM_B1, b2 = (float)ADAM_B2, eps = (float)ADAM_EPS;

    for (long c = 0; c < n; c++) {
        float gr = g[c];

        m[c] = b1 * m[c] + (1.0f - b1) * gr;
        v[c] = b2 * v[c] + (1.0f - b2) * gr * gr;
        w[c] = w[c] - lr * m[c] / (sqrtf(v[c]) + eps);
    }
}

static int near(float got, float want)
{
    return fabsf(got - want) <= 1e-6f + 1e-5f * fabsf(want);
}

/* One row's state when every worker pushes the same gradient to every
 * row once per round (the dense cases and `full`). */
struct col_ref {
    float w[MAX_COLS], m[MAX_COLS], v[MAX_COLS], g[MAX_COLS];
    uint64_t t;
};

static void col_ref_init(struct col_ref *r)
{
    memset(r, 0, sizeof *r);
    for (long c = 0; c < ncols; c++)
        for (int k = 0; k < nw; k++)
            r->g[c] += grad(k, c);
}

static void col_ref_step(struct col_ref *r)
{
    adam_row(r->w, r->m, r->v, r->g, ncols, ++r->t);
}

/* Every element of rows x ncols equals its column's reference. */
static void col_ref_check(const struct col_ref *r, const float *a, long rows, const char *what)
{
    for (long i = 0; i < rows; i++)
        for (long c = 0; c < ncols; c++)
            if (!near(a[i * ncols + c], r->w[c]))
                die("%s: row %ld column %ld is %.9g, not %.9g", what, i, c,
                    (double)a[i * ncols + c], (double)r->w[c]);
}

/* ---- memory ------------------------------------------------------------ */

/* VmRSS and VmHWM of /proc/PID/status (pid 0: this process), in KiB;
 * -1 each when unreadable. *shmem (may be NULL): RssShmem, the part of
 * VmRSS in shared memory (the staging area, the values' memfd). */
static void mem_of(pid_t pid, long *rss, long *hwm, long *shmem)
{
    char path[64], line[256];
    FILE *f;

    *rss = *hwm = -1;
    if (shmem)
        *shmem = -1;
    if (pid)
        snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    if (!(f = fopen(path, "r")))
        return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss = atol(line + 6);
        else if (strncmp(line, "VmHWM:", 6) == 0)
            *hwm = atol(line + 6);
        else if (shmem && strncmp(line, "RssShmem:", 9) == 0)
            *shmem = atol(line + 9);
    }
    fclose(f);
}

static void print_kvsd(const char *what, int pass)
{
    long rss, hwm;

    if (rank != 0)
        return;
    mem_of(find_kvsd(), &rss, &hwm, NULL);
    printf("rows,kvsd,%s,%d,%ld,%ld\n", what, pass, rss, hwm);
    fflush(stdout);
}

static void print_case(const char *what, int pass, long rows, long ids, double *t, long rss,
                       long hwm, long shmem)
{
    printf("rows,%s,%d,%d,%d,%ld,%ld,%ld,%ld,%.9f", what, pass, rank, nw, rows, ncols, ids, steps,
           rh_median(t, steps));
    if (rss >= 0)
        printf(",%ld,%ld,%ld", rss, hwm, shmem);
    printf("\n");
    fflush(stdout);
}

/* ---- Zipf ids --------------------------------------------------------- */

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Rejection-inversion sampling of Zipf(s) on 1..n (Hörmann and Derflinger,
 * 1996): constant work per draw, no table. */
struct zipf {
    double s, n, hx1, hn, c;
};

static double z_h(const struct zipf *z, double x) { return pow(x, -z->s); }
static double z_H(const struct zipf *z, double x)
{
    return (pow(x, 1.0 - z->s) - 1.0) / (1.0 - z->s);
}
static double z_Hinv(const struct zipf *z, double y)
{
    return pow(1.0 + y * (1.0 - z->s), 1.0 / (1.0 - z->s));
}

static void zipf_init(struct zipf *z, double s, long n)
{
    z->s = s;
    z->n = (double)n;
    z->hx1 = z_H(z, 1.5) - 1.0;
    z->hn = z_H(z, z->n + 0.5);
    z->c = 2.0 - z_Hinv(z, z_H(z, 2.5) - z_h(z, 2.0));
}

static long zipf_draw(const struct zipf *z, uint64_t *st)
{
    for (;;) {
        double u01 = (double)(mix(st) >> 11) * 0x1p-53;
        double u = z->hn + u01 * (z->hx1 - z->hn), x = z_Hinv(z, u);
        double k = floor(x + 0.5);

        if (k < 1)
            k = 1;
        if (k > z->n)
            k = z->n;
        if (k - x <= z->c || u >= z_H(z, k + 0.5) - z_h(z, k))
            return (long)k;
    }
}

static long perm_mul;                  /* rank r (1-based) is row (r-1)*perm_mul % nrows */

static long gcd(long a, long b) { return b ? gcd(b, a % b) : a; }

static long scatter(long r) { return (long)((unsigned __int128)(r - 1) * perm_mul % nrows); }

/* Worker k's batch of step t. */
static void batch(const struct zipf *z, int k, long t, int64_t *ids)
{
    uint64_t st = ((uint64_t)(unsigned)k << 40) ^ (uint64_t)t ^ 0x5eed0f0e0d5ULL;

    for (long i = 0; i < nids; i++)
        ids[i] = scatter(zipf_draw(z, &st));
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts ids[0..n) and drops repeats; returns how many are left. */
static long sort_unique(int64_t *ids, long n)
{
    long u = 0;

    qsort(ids, (size_t)n, sizeof *ids, cmp_i64);
    for (long i = 0; i < n; i++)
        if (u == 0 || ids[u - 1] != ids[i])
            ids[u++] = ids[i];
    return u;
}

/* ---- the dense pushpulls beside -------------------------------------- */

/* Every row of the nrows x ncols gradient g: this worker's gradient. */
static void fill_grad(float *g)
{
    for (long r = 0; r < nrows; r++)
        for (long c = 0; c < ncols; c++)
            g[r * ncols + c] = grad(rank, c);
}

/* One pass of dense pushpulls of the whole table d (key k) in place, each
 * timed from a barrier and checked against ref; printed as case what. */
static void dense_pass(kvs_key_t k, kvs_array_t *d, struct col_ref *ref, int pass, double *t,
                       const char *what)
{
    float *g = d->data;

    for (long i = 0, w = pass == 1 ? warmup : 0; i < w + steps; i++) {
        double t0;

        fill_grad(g);
        check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
        t0 = now_s();
        check_kvs(kvs_pushpull(kv, 1, &k, d, NULL, 0), kv, "kvs_pushpull");
        if (i >= w)
            t[i - w] = now_s() - t0;
        col_ref_step(ref);
        col_ref_check(ref, g, nrows, what);
    }
    print_case(what, pass, nrows, nrows, t, -1, -1, -1);
}

/* ---- sparse: Zipf batches of a big table, and the dense step beside ---- */

static void run_sparse(void)
{
    kvs_key_t tk = KVS_INT_KEY(1), sk = KVS_INT_KEY(2);
    struct zipf z;
    size_t idb = sizeof(int64_t) * (size_t)nids;
    int64_t *ids = xalloc(idb), *next = xalloc(idb), *want = xalloc(idb), *other = xalloc(idb);
    int64_t *out_ids = xalloc(sizeof *out_ids * (size_t)nids);
    float *gdata = xalloc(sizeof *gdata * (size_t)(nids * ncols));
    float *odata = xalloc(sizeof *odata * (size_t)(nids * ncols));
    float *small = xalloc(sizeof *small * (size_t)(nids * ncols));
    uint64_t *seen = calloc((size_t)nrows / 64 + 1, sizeof *seen);
    int64_t track[NTRACK];
    /* the tracked rows' weights, adam's mean and variance, this step's gradient */
    float (*tw)[MAX_COLS] = calloc(NTRACK, sizeof *tw);
    float (*tm)[MAX_COLS] = calloc(NTRACK, sizeof *tm);
    float (*tv)[MAX_COLS] = calloc(NTRACK, sizeof *tv);
    float (*tg)[MAX_COLS] = calloc(NTRACK, sizeof *tg);
    int tpresent[NTRACK];
    double *t = alloc_times(steps);
    long rss_max = 0, rss, hwm, shm, shm_max = -1, step = 0;
    struct col_ref *ref = malloc(sizeof *ref);
    kvs_row_sparse_t init = { .nnz = 0, .dtype = KVS_FLOAT32, .ndim = 2,
                              .shape = { nrows, ncols } };
    kvs_array_t sinit = { .data = small, .dtype = KVS_FLOAT32, .ndim = 2,
                          .shape = { nids, ncols } };

    if (!seen || !tw || !tm || !tv || !tg || !ref)
        die("out of memory");
    zipf_init(&z, ZIPF_S, nrows);
    for (long i = 0; i < NTRACK; i++)
        track[i] = scatter(i + 1);
    qsort(track, NTRACK, sizeof track[0], cmp_i64);
    memset(small, 0, sizeof *small * (size_t)(nids * ncols));
    check_kvs(kvs_init_row_sparse(kv, 1, &tk, &init), kv, "kvs_init_row_sparse of the table");
    check_kvs(kvs_init(kv, 1, &sk, &sinit), kv, "kvs_init of the dense array");
    check_kvs(kvs_set_optimizer(kv, ADAM_SPEC), kv, "kvs_set_optimizer");
    for (long i = 0; i < nids; i++)
        for (long c = 0; c < ncols; c++)
            gdata[i * ncols + c] = grad(rank, c);

    batch(&z, rank, 0, ids);
    col_ref_init(ref);
    for (int pass = 1; pass <= passes; pass++) {
        for (long i = 0, w = pass == 1 ? warmup : 0; i < w + steps; i++) {
            kvs_row_sparse_t v = { .data = gdata, .indices = ids, .nnz = nids, .dtype = KVS_FLOAT32,
                                   .ndim = 2, .shape = { nrows, ncols } };
            kvs_row_sparse_t o = { .data = odata, .indices = out_ids, .nnz = nids };
            kvs_array_t rid = { .data = next, .dtype = KVS_INT64, .ndim = 1, .shape = { nids } };
            double t0;
            long nu;

            batch(&z, rank, step + 1, next);
            check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
            t0 = now_s();
            check_kvs(kvs_pushpull_row_sparse(kv, 1, &tk, &v, &rid, &o, 0), kv,
                      "kvs_pushpull_row_sparse");
            if (i >= w)
                t[i - w] = now_s() - t0;
            mem_of(0, &rss, &hwm, &shm);
            if (rss > rss_max)
                rss_max = rss, shm_max = shm;

            /* The reference: every worker's batch of this step. */
            memset(tpresent, 0, sizeof tpresent);
            for (long j = 0; j < NTRACK; j++)
                memset(tg[j], 0, sizeof tg[j]);
            for (int k = 0; k < nw; k++) {
                const int64_t *b = ids;

                if (k != rank) {
                    batch(&z, k, step, other);
                    b = other;
                }
                for (long j = 0; j < nids; j++) {
                    int64_t *hit = bsearch(&b[j], track, NTRACK, sizeof track[0], cmp_i64);

                    seen[b[j] / 64] |= 1ULL << (b[j] % 64);
                    if (hit) {
                        long ti = hit - track;

                        tpresent[ti] = 1;
                        for (long c = 0; c < ncols; c++)
                            tg[ti][c] += grad(k, c);
                    }
                }
            }
            for (long j = 0; j < NTRACK; j++)
                if (tpresent[j])
                    adam_row(tw[j], tm[j], tv[j], tg[j], ncols, (uint64_t)step + 1);

            /* The pull: the next batch's rows, after this step's update. */
            memcpy(want, next, sizeof *want * (size_t)nids);
            nu = sort_unique(want, nids);
            if (o.nnz != nu)
                die("sparse: step %ld pulled %" PRId64 " rows, not %ld", step, o.nnz, nu);
            for (long j = 0; j < nu; j++) {
                int64_t r = out_ids[j];
                const float *row = odata + j * ncols;
                int64_t *hit = bsearch(&r, track, NTRACK, sizeof track[0], cmp_i64);

                if (r != want[j])
                    die("sparse: step %ld: index %ld of the pull is wrong", step, j);
                for (long c = 0; c < ncols; c++) {
                    float ok;

                    if (hit)
                        ok = near(row[c], tw[hit - track][c]);
                    else if (!(seen[r / 64] >> (r % 64) & 1))
                        ok = row[c] == 0.0f;
                    else
                        ok = row[c] < 0.0f;
                    if (!ok)
                        die("sparse: step %ld: row %" PRId64 " column %ld is %.9g "
                            "(reference %.9g)", step, r, c, (double)row[c],
                            hit ? (double)tw[hit - track][c] : 0.0);
                }
            }
            memcpy(ids, next, sizeof *ids * (size_t)nids);
            step++;
        }
        mem_of(0, &rss, &hwm, &shm);
        print_case("sparse", pass, nrows, nids, t, rss_max, hwm, shm_max);
        print_kvsd("sparse", pass);

        /* The dense step of the same rows: a --ids x --cols array. */
        for (long i = 0, w = pass == 1 ? warmup : 0; i < w + steps; i++) {
            double t0;

            for (long r = 0; r < nids; r++)
                for (long c = 0; c < ncols; c++)
                    small[r * ncols + c] = grad(rank, c);
            check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
            t0 = now_s();
            check_kvs(kvs_pushpull(kv, 1, &sk, &sinit, NULL, 0), kv, "kvs_pushpull");
            if (i >= w)
                t[i - w] = now_s() - t0;
            col_ref_step(ref);
            col_ref_check(ref, small, nids, "small");
        }
        print_case("small", pass, nids, nids, t, -1, -1, -1);
    }
    free(ids), free(next), free(want), free(other), free(out_ids), free(gdata), free(odata);
    free(small), free(seen), free(tw), free(tm), free(tv), free(tg), free(t), free(ref);
}

/* ---- full: every row, row-sparse and dense ------------------------------ */

static void run_full(void)
{
    kvs_key_t ak = KVS_INT_KEY(1), dk = KVS_INT_KEY(2);
    size_t elems = (size_t)nrows * (size_t)ncols;
    float *g = xalloc(sizeof *g * elems), *o = xalloc(sizeof *o * elems);
    int64_t *all = xalloc(sizeof *all * (size_t)nrows), *oid = xalloc(sizeof *oid * (size_t)nrows);
    double *t = alloc_times(steps);
    struct col_ref *ref = malloc(sizeof *ref), *dref = malloc(sizeof *dref);
    kvs_row_sparse_t init = { .nnz = 0, .dtype = KVS_FLOAT32, .ndim = 2,
                              .shape = { nrows, ncols } };
    kvs_array_t d = { .data = g, .dtype = KVS_FLOAT32, .ndim = 2, .shape = { nrows, ncols } };
    kvs_array_t rid = { .data = all, .dtype = KVS_INT64, .ndim = 1, .shape = { nrows } };

    if (!ref || !dref)
        die("out of memory");
    for (long i = 0; i < nrows; i++)
        all[i] = i;
    check_kvs(kvs_init_row_sparse(kv, 1, &ak, &init), kv, "kvs_init_row_sparse");
    memset(g, 0, sizeof *g * elems);
    check_kvs(kvs_init(kv, 1, &dk, &d), kv, "kvs_init");
    check_kvs(kvs_set_optimizer(kv, ADAM_SPEC), kv, "kvs_set_optimizer");
    for (long i = 0; i < nrows; i++)
        for (long c = 0; c < ncols; c++)
            g[i * ncols + c] = grad(rank, c);

    col_ref_init(ref);
    col_ref_init(dref);
    for (int pass = 1; pass <= passes; pass++) {
        for (long i = 0, w = pass == 1 ? warmup : 0; i < w + steps; i++) {
            kvs_row_sparse_t v = { .data = g, .indices = all, .nnz = nrows, .dtype = KVS_FLOAT32,
                                   .ndim = 2, .shape = { nrows, ncols } };
            kvs_row_sparse_t out = { .data = o, .indices = oid, .nnz = nrows };
            double t0;

            check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
            t0 = now_s();
            check_kvs(kvs_pushpull_row_sparse(kv, 1, &ak, &v, &rid, &out, 0), kv,
                      "kvs_pushpull_row_sparse");
            if (i >= w)
                t[i - w] = now_s() - t0;
            col_ref_step(ref);
            if (out.nnz != nrows)
                die("full-sparse: pulled %" PRId64 " rows, not %ld", out.nnz, nrows);
            for (long r = 0; r < nrows; r++)
                if (oid[r] != r)
                    die("full-sparse: index %ld of the pull is %" PRId64, r, oid[r]);
            col_ref_check(ref, o, nrows, "full-sparse");
        }
        print_case("full-sparse", pass, nrows, nrows, t, -1, -1, -1);

        dense_pass(dk, &d, dref, pass, t, "full-dense");
        print_kvsd("full", pass);
        /* the next pass's row-sparse rounds push the gradient again */
        fill_grad(g);
    }
    free(g), free(o), free(all), free(oid), free(t), free(ref), free(dref);
}

/* ---- table: a dense pushpull of the whole table ------------------------ */

static void run_table(void)
{
    kvs_key_t k = KVS_INT_KEY(1);
    size_t elems = (size_t)nrows * (size_t)ncols;
    float *g = xalloc(sizeof *g * elems);
    double *t = alloc_times(steps);
    struct col_ref *ref = malloc(sizeof *ref);
    kvs_array_t d = { .data = g, .dtype = KVS_FLOAT32, .ndim = 2, .shape = { nrows, ncols } };

    if (!ref)
        die("out of memory");
    memset(g, 0, sizeof *g * elems);
    check_kvs(kvs_init(kv, 1, &k, &d), kv, "kvs_init");
    check_kvs(kvs_set_optimizer(kv, ADAM_SPEC), kv, "kvs_set_optimizer");
    col_ref_init(ref);
    for (int pass = 1; pass <= passes; pass++) {
        dense_pass(k, &d, ref, pass, t, "table");
        print_kvsd("table", pass);
    }
    free(g), free(t), free(ref);
}

/* ---- main --------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: kvsrun -n N bench_rows sparse|full|table [--rows R] [--cols C] [--ids I]"
               " [--warmup W] [--steps S] [--passes P]\n");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    long *dest;
    const char *v;

    bench_who = "bench_rows";
    if (strcmp(mode, "sparse") != 0 && strcmp(mode, "full") != 0 && strcmp(mode, "table") != 0) {
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        double d;

        dest = NULL;
        if ((v = opt_value(argc, argv, &i, "--rows", 1)))
            dest = &nrows;
        else if ((v = opt_value(argc, argv, &i, "--cols", 1)))
            dest = &ncols;
        else if ((v = opt_value(argc, argv, &i, "--ids", 1)))
            dest = &nids;
        else if ((v = opt_value(argc, argv, &i, "--warmup", 1)))
            dest = &warmup;
        else if ((v = opt_value(argc, argv, &i, "--steps", 1)))
            dest = &steps;
        else if ((v = opt_value(argc, argv, &i, "--passes", 1)))
            dest = &passes;
        if (!dest) {
            usage(stderr);
            return 2;
        }
        if (parse_double(v, &d) != 0 || d < (dest == &warmup ? 0 : 1) || d > 1e9
            || d != (double)(long)d || (dest == &ncols && d > MAX_COLS)
            || ((dest == &steps || dest == &passes) && d > MAX_STEPS)) {
            fprintf(stderr, "bench_rows: bad value '%s'\n", v);
            return 2;
        }
        *dest = (long)d;
    }
    if (nrows < 0)
        nrows = strcmp(mode, "full") == 0 ? 1000000 : 4000000;
    if (warmup < 0)
        warmup = strcmp(mode, "table") == 0 ? 1 : 3;
    if (steps < 0)
        steps = strcmp(mode, "table") == 0 ? 3 : 30;
    if (strcmp(mode, "sparse") == 0 && nrows < NTRACK) {
        fprintf(stderr, "bench_rows: sparse needs --rows of at least %d\n", NTRACK);
        return 2;
    }
    for (perm_mul = 2654435761L % nrows; perm_mul < 1 || gcd(perm_mul, nrows) != 1; perm_mul++)
        ;
    check_kvs(kvs_create("dist_sync", &kv), NULL, "kvs_create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (strcmp(mode, "sparse") == 0)
        run_sparse();
    else if (strcmp(mode, "full") == 0)
        run_full();
    else
        run_table();
    check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
    kvs_close(kv);
    return 0;
}
