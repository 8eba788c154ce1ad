/*
 * dist_mxnet.c - MXNet 1.9's tests/nightly/dist_sync_kvstore.py, ported to
 * kvs: one worker of a dist_sync job (tests/test_dist_mxnet.sh). Each of
 * its checks keeps the Python one's name, keys, shapes and expected values:
 * dense and row-sparse keys in float32 and float16 under MXNet's "test"
 * optimizer (weight += rescale_grad * grad, rate 2), row-sparse pushes of
 * one row per worker, of no rows, and of 30% of a big table's rows, pulled
 * back by random row ids both compactly and into dense outs; inits of
 * many keys; and 2bit gradient compression (residuals, thresholds, random
 * gradients against the codec's reference).
 *
 * Differences, each forced by the API rather than the semantics:
 * - "test" is sgd lr=1 rescale_grad=-2: w - 1 * (-2) * g is w + 2g, and
 *   sgd updates row-sparse sums lazily, as "test" does (rows not pushed
 *   keep their value).
 * - Row ids are 1-D (MXNet's reshape to (n/2, 2) is flattened).
 * - Inits of 100 big keys become 8: the values are the same, the memory is
 *   a hundredth.
 * - MXNet's test optimizer runs in float16 for float16 keys; kvs computes
 *   them in float32, rounding once. Every value here is a small integer,
 *   exact in both.
 *
 * Usage: dist_mxnet dist_sync_kvstore; the job's environment as kvsrun
 * sets it.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distutil.h"

#define RATE 2
#define SR 2                           /* shape = (2, 3) */
#define SC 3
#define BR 1200                        /* big_shape = (1200, 1200) */
#define BC 1200

/* ---- values in either dtype -------------------------------------------- */

/* float32 to float16, round to nearest even (normal and zero values:
 * every value here is a small integer or a threshold) */
static uint16_t to_half(float f)
{
    uint32_t x;
    uint32_t sign, mant;
    int exp;

    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000;
    exp = (int)((x >> 23) & 0xff) - 127 + 15;
    mant = x & 0x7fffff;
    if ((x & 0x7fffffff) == 0)
        return (uint16_t)sign;
    if (exp <= 0 || exp >= 31)
        die("to_half: %g is outside float16's normal range", (double)f);
    {
        uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
        uint32_t rest = mant & 0x1fff;

        if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
            h++;
        return (uint16_t)h;
    }
}

static float from_half(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    uint32_t x;
    float f;

    if (exp == 0 && mant == 0)
        x = sign;
    else if (exp == 0 || exp == 31)
        return NAN;                    /* never made here */
    else
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    memcpy(&f, &x, 4);
    return f;
}

/* A buffer of n elements of dtype t (KVS_FLOAT32 or KVS_FLOAT16). */
struct buf {
    kvs_dtype_t t;
    size_t n;
    void *p;
};

static struct buf buf_new(kvs_dtype_t t, size_t n, float v)
{
    struct buf b = { t, n, malloc(n * (t == KVS_FLOAT16 ? 2 : 4)) };

    if (b.p == NULL)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        if (t == KVS_FLOAT16)
            ((uint16_t *)b.p)[i] = to_half(v);
        else
            ((float *)b.p)[i] = v;
    }
    return b;
}

static float buf_get(const struct buf *b, size_t i)
{
    return b->t == KVS_FLOAT16 ? from_half(((const uint16_t *)b->p)[i]) : ((const float *)b->p)[i];
}

static kvs_array_t arr(const struct buf *b, int64_t rows, int64_t cols)
{
    return (kvs_array_t){ .data = b->p, .dtype = b->t, .ndim = 2, .shape = { rows, cols } };
}

static kvs_array_t ids_arr(int64_t *ids, int64_t n)
{
    return (kvs_array_t){ .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { n } };
}

/* check_diff: every element of got equals want[i] exactly */
static void check_diff(const struct buf *got, const float *want, const char *what)
{
    for (size_t i = 0; i < got->n; i++)
        if (buf_get(got, i) != want[i])
            die("%s: element %zu is %g, expected %g", what, i, (double)buf_get(got, i),
                (double)want[i]);
}

/* The same random numbers on every worker that seeds alike (splitmix64). */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t x = (rng_state += 0x9e3779b97f4a7c15ull);

    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double rng_uniform(void)
{
    return (double)(rng_next() >> 11) * 0x1p-53;
}

/* ---- the keys ------------------------------------------------------------ */

/* keys_shape, keys_big_shape, rsp_keys_shape, rsp_keys_big_shape; the fp16
 * ones are the next key of each. */
static const char *const KEYS_SHAPE[2][3] = { { "3", "5", "7" }, { "4", "6", "8" } };
static const char *const KEYS_BIG[2] = { "99", "100" };
static const char *const RSP_KEYS_SHAPE[2][3] = { { "9", "11", "13" }, { "10", "12", "14" } };
static const char *const RSP_KEYS_BIG[2] = { "97", "98" };

static kvs_key_t K(const char *s)
{
    return KVS_STR_KEY(s);
}

static kvs_dtype_t dtype_of(int fp16)
{
    return fp16 ? KVS_FLOAT16 : KVS_FLOAT32;
}

/* A row-sparse value holding every row of b (MXNet's tostype('row_sparse')
 * of a value without zero rows). */
static kvs_row_sparse_t all_rows(const struct buf *b, int64_t rows, int64_t cols, int64_t *ids)
{
    for (int64_t r = 0; r < rows; r++)
        ids[r] = r;
    return (kvs_row_sparse_t){ .data = b->p, .indices = ids, .nnz = rows, .dtype = b->t,
                               .ndim = 2, .shape = { rows, cols } };
}

/* init_kv: dense and row-sparse keys, ones, in both dtypes. */
static void init_kv(void)
{
    for (int h = 0; h < 2; h++) {
        struct buf one = buf_new(dtype_of(h), SR * SC, 1), big = buf_new(dtype_of(h), BR * BC, 1);
        int64_t ids[BR];

        for (int k = 0; k < 3; k++) {
            kvs_key_t key = K(KEYS_SHAPE[h][k]), rkey = K(RSP_KEYS_SHAPE[h][k]);
            kvs_row_sparse_t v = all_rows(&one, SR, SC, ids);

            ok(kvs_init(kv, 1, &key, (kvs_array_t[]){ arr(&one, SR, SC) }), "init dense");
            ok(kvs_init_row_sparse(kv, 1, &rkey, &v), "init row_sparse");
        }
        {
            kvs_key_t key = K(KEYS_BIG[h]), rkey = K(RSP_KEYS_BIG[h]);
            kvs_row_sparse_t v = all_rows(&big, BR, BC, ids);

            ok(kvs_init(kv, 1, &key, (kvs_array_t[]){ arr(&big, BR, BC) }), "init big dense");
            ok(kvs_init_row_sparse(kv, 1, &rkey, &v), "init big row_sparse");
        }
        free(one.p);
        free(big.p);
    }
}

/* ---- test_sync_push_pull --------------------------------------------------- */

static void check_default_keys(int fp16, int nrepeat)
{
    for (int k = 0; k < 4; k++) {
        const char *name = k < 3 ? KEYS_SHAPE[fp16][k] : KEYS_BIG[fp16];
        int64_t rows = k < 3 ? SR : BR, cols = k < 3 ? SC : BC;
        kvs_key_t key = K(name);
        struct buf v = buf_new(dtype_of(fp16), (size_t)(rows * cols), (float)(rank + 1));
        struct buf val = buf_new(dtype_of(fp16), v.n, 0);
        float *want = malloc(v.n * sizeof *want);

        for (int i = 0; i < nrepeat; i++) {
            float num = (float)((nw + 1) * nw * RATE / 2 * (i + 1) + 1);

            ok(kvs_push(kv, 1, &key, (kvs_array_t[]){ arr(&v, rows, cols) }, 0), "push");
            ok(kvs_pull(kv, 1, &key, (kvs_array_t[]){ arr(&val, rows, cols) }, 0), "pull");
            for (size_t j = 0; j < v.n; j++)
                want[j] = num;
            check_diff(&val, want, "check_default_keys");
        }
        free(want);
        free(v.p);
        free(val.p);
    }
}

/* Pulls the rows ids[0..n) of key both ways (MXNet's dense
 * row_sparse_pull result and kvs's compact one) and checks them against
 * updated (rows x cols): named rows hold their updated value, the others
 * zero in the dense out; the compact out holds the sorted unique ids. */
static void pull_and_check(kvs_key_t key, int fp16, int64_t rows, int64_t cols, int64_t *ids,
                           int64_t n, const float *updated, const char *what)
{
    size_t len = (size_t)(rows * cols);
    struct buf dense = buf_new(dtype_of(fp16), len, 7), rows_out = buf_new(dtype_of(fp16), len, 7);
    float *want = calloc(len, sizeof *want);
    char *named = calloc((size_t)rows, 1);
    int64_t *got_ids = malloc((size_t)rows * sizeof *got_ids);
    kvs_array_t ida = ids_arr(ids, n);
    kvs_row_sparse_t out = { .data = rows_out.p, .indices = got_ids, .nnz = rows };
    int64_t m = 0;

    if (want == NULL || named == NULL || got_ids == NULL)
        die("out of memory");
    ok(kvs_row_sparse_pull(kv, 1, &key, (kvs_array_t[]){ arr(&dense, rows, cols) }, &ida, 0),
       "row_sparse_pull");
    for (int64_t j = 0; j < n; j++)
        named[ids[j]] = 1;
    for (int64_t r = 0; r < rows; r++)
        if (named[r])
            memcpy(want + r * cols, updated + r * cols, (size_t)cols * sizeof *want);
    check_diff(&dense, want, what);

    ok(kvs_pull_rows(kv, 1, &key, &ida, &out, 0), "pull_rows");
    for (int64_t r = 0; r < rows; r++)
        if (named[r]) {
            if (m >= out.nnz || got_ids[m] != r)
                die("%s: compact pull: row %" PRId64 " missing or out of order", what, r);
            for (int64_t c = 0; c < cols; c++)
                if (buf_get(&rows_out, (size_t)(m * cols + c)) != updated[r * cols + c])
                    die("%s: compact pull: row %" PRId64 " column %" PRId64 " is %g, expected %g",
                        what, r, c, (double)buf_get(&rows_out, (size_t)(m * cols + c)),
                        (double)updated[r * cols + c]);
            m++;
        }
    if (out.nnz != m || out.dtype != dtype_of(fp16) || out.shape[0] != rows || out.shape[1] != cols)
        die("%s: compact pull: %" PRId64 " rows of %s (%" PRId64 ", %" PRId64 "), expected %" PRId64,
            what, out.nnz, kvs_dtype_name(out.dtype), out.shape[0], out.shape[1], m);
    free(dense.p);
    free(rows_out.p);
    free(want);
    free(named);
    free(got_ids);
}

static void check_row_sparse_keys(int fp16, int nrepeat)
{
    kvs_key_t key = K(RSP_KEYS_SHAPE[fp16][0]);
    int64_t my_row = rank % SR, ids[SR];
    struct buf row = buf_new(dtype_of(fp16), SC, (float)(rank + 1));
    kvs_row_sparse_t v = { .data = row.p, .indices = &my_row, .nnz = 1, .dtype = row.t,
                           .ndim = 2, .shape = { SR, SC } };
    float updated[SR * SC];

    rng_state = 1000u + (unsigned)rank;
    for (int i = 0; i < nrepeat; i++) {
        ok(kvs_push_row_sparse(kv, 1, &key, &v, 0), "push row_sparse");
        for (int r = 0; r < SR; r++)
            ids[r] = (int64_t)(rng_next() % SR);
        for (int j = 0; j < SR * SC; j++)
            updated[j] = 1;
        for (int r = 0; r < nw; r++)
            for (int c = 0; c < SC; c++)
                updated[(r % SR) * SC + c] += (float)((r + 1) * RATE * (i + 1));
        pull_and_check(key, fp16, SR, SC, ids, SR, updated, "check_row_sparse_keys");
    }
    free(row.p);
}

static void check_row_sparse_keys_with_zeros(int fp16, int nrepeat)
{
    kvs_key_t keys[2] = { K(RSP_KEYS_SHAPE[fp16][1]), K(RSP_KEYS_BIG[fp16]) };
    kvs_row_sparse_t empty[2] = {
        { .nnz = 0, .dtype = dtype_of(fp16), .ndim = 2, .shape = { SR, SC } },
        { .nnz = 0, .dtype = dtype_of(fp16), .ndim = 2, .shape = { BR, BC } },
    };
    float *ones = malloc((size_t)BR * BC * sizeof *ones);
    int64_t *all = malloc(BR * sizeof *all);

    if (ones == NULL || all == NULL)
        die("out of memory");
    for (size_t j = 0; j < (size_t)BR * BC; j++)
        ones[j] = 1;
    for (int64_t r = 0; r < BR; r++)
        all[r] = r;
    for (int i = 0; i < nrepeat; i++) {
        ok(kvs_push_row_sparse(kv, 1, &keys[0], &empty[0], 0), "push empty");
        ok(kvs_push_row_sparse(kv, 1, &keys[1], &empty[1], 0), "push big empty");
        pull_and_check(keys[0], fp16, SR, SC, all, SR, ones, "check_row_sparse_keys_with_zeros");
        pull_and_check(keys[1], fp16, BR, BC, all, BR, ones, "check_row_sparse_keys_with_zeros big");
        /* pull empty weights */
        for (int k = 0; k < 2; k++) {
            kvs_row_sparse_t out = { .nnz = 0 };
            kvs_array_t none = ids_arr(all, 0);

            ok(kvs_pull_rows(kv, 1, &keys[k], &none, &out, 0), "pull no rows");
            if (out.nnz != 0)
                die("a pull of no rows gave %" PRId64, out.nnz);
        }
    }
    free(ones);
    free(all);
}

static void check_big_row_sparse_keys(int fp16, int nrepeat)
{
    kvs_key_t key = K(RSP_KEYS_BIG[fp16]);
    int64_t indices[BR], n_idx = 0, mine[BR], n_mine = 0, ids[BR];
    float *updated = malloc((size_t)BR * BC * sizeof *updated);
    struct buf data;
    kvs_row_sparse_t v;

    if (updated == NULL)
        die("out of memory");
    rng_state = 123;                   /* the same rows on every worker */
    for (int64_t r = 0; r < BR; r++)
        if (rng_uniform() < 0.3)
            indices[n_idx++] = r;
    /* each worker updates every ((rank + 1) * 2)-th of them */
    for (int64_t i = 0; i < n_idx; i += (rank + 1) * 2)
        mine[n_mine++] = indices[i];
    data = buf_new(dtype_of(fp16), (size_t)(n_mine * BC), (float)(rank + 1));
    v = (kvs_row_sparse_t){ .data = data.p, .indices = mine, .nnz = n_mine, .dtype = data.t,
                            .ndim = 2, .shape = { BR, BC } };
    for (int i = 0; i < nrepeat; i++) {
        ok(kvs_push_row_sparse(kv, 1, &key, &v, 0), "push big row_sparse");
        rng_state = 5000u + (unsigned)rank;
        for (int64_t r = 0; r < BR; r++)
            ids[r] = (int64_t)(rng_next() % BR);
        for (size_t j = 0; j < (size_t)BR * BC; j++)
            updated[j] = 1;
        for (int r = 0; r < nw; r++)
            for (int64_t j = 0; j < n_idx; j += (r + 1) * 2)
                for (int64_t c = 0; c < BC; c++)
                    updated[indices[j] * BC + c] += (float)((r + 1) * RATE * (i + 1));
        pull_and_check(key, fp16, BR, BC, ids, BR, updated, "check_big_row_sparse_keys");
    }
    free(data.p);
    free(updated);
}

static void test_sync_push_pull(int nrepeat)
{
    for (int fp16 = 1; fp16 >= 0; fp16--) {
        check_default_keys(fp16, nrepeat);
        check_row_sparse_keys(fp16, nrepeat);
        check_row_sparse_keys_with_zeros(fp16, nrepeat);
        check_big_row_sparse_keys(fp16, nrepeat);
    }
}

/* ---- test_sync_init ---------------------------------------------------------- */

/* Keys first..first+count: key i is inited to i and pulled back; the first
 * half float32, the rest float16. */
static void check_init(int first, int count, int64_t rows, int64_t cols)
{
    for (int i = 0; i < count; i++) {
        char name[16];
        kvs_key_t key;
        int fp16 = i >= count / 2;
        struct buf v = buf_new(dtype_of(fp16), (size_t)(rows * cols), (float)i);
        struct buf val = buf_new(dtype_of(fp16), v.n, -1);
        float *want = malloc(v.n * sizeof *want);

        snprintf(name, sizeof name, "%d", first + i);
        key = K(name);
        ok(kvs_init(kv, 1, &key, (kvs_array_t[]){ arr(&v, rows, cols) }), "init");
        ok(kvs_pull(kv, 1, &key, (kvs_array_t[]){ arr(&val, rows, cols) }, 0), "pull");
        for (size_t j = 0; j < v.n; j++)
            want[j] = (float)i;
        check_diff(&val, want, "check_init");
        free(want);
        free(v.p);
        free(val.p);
    }
}

static void test_sync_init(void)
{
    check_init(200, 100, SR, SC);
    check_init(300, 8, BR, BC);
}

/* ---- test_sync_2bit_compression ------------------------------------------------ */

#define THRESHOLD 0.5f

static const char *const COMPR_KEYS[3] = { "1000", "1200", "1300" };
static const char *const COMPR_INIT_KEYS[3] = { "1001", "1201", "1301" };
static const char *const COMPR_RANDOM_KEYS[3] = { "1002", "1202", "1302" };
static const int64_t COMPR_SHAPE[3][2] = { { SR, SC }, { 1211, 1211 }, { BR, BC } };

static size_t compr_len(int k)
{
    return (size_t)(COMPR_SHAPE[k][0] * COMPR_SHAPE[k][1]);
}

static void compr_pull(int k, const char *name, struct buf *val)
{
    kvs_key_t key = K(name);

    ok(kvs_pull(kv, 1, &key, (kvs_array_t[]){ arr(val, COMPR_SHAPE[k][0], COMPR_SHAPE[k][1]) }, 0),
       "pull");
}

static void compr_push(int k, const char *name, float v)
{
    kvs_key_t key = K(name);
    struct buf g = buf_new(KVS_FLOAT32, compr_len(k), v);

    ok(kvs_push(kv, 1, &key, (kvs_array_t[]){ arr(&g, COMPR_SHAPE[k][0], COMPR_SHAPE[k][1]) }, 0),
       "push");
    free(g.p);
}

/* Pushes v to every compression key and checks the pull gives want. */
static void compr_step(float v, float want, const char *what)
{
    for (int k = 0; k < 3; k++) {
        struct buf val = buf_new(KVS_FLOAT32, compr_len(k), -1);

        compr_push(k, COMPR_KEYS[k], v);
        compr_pull(k, COMPR_KEYS[k], &val);
        expect(val.p, val.n, want, what);
        free(val.p);
    }
}

/* compute_expected_2bit_quantization: the codec's reference, element by
 * element, with the worker's residual; returns the decoded value. */
static float quantize(float g, float *residual)
{
    *residual += g;
    if (*residual >= THRESHOLD) {
        *residual -= THRESHOLD;
        return THRESHOLD;
    }
    if (*residual <= -THRESHOLD) {
        *residual += THRESHOLD;
        return -THRESHOLD;
    }
    return 0;
}

static void check_compr_random(int nrepeat)
{
    for (int k = 0; k < 3; k++) {
        kvs_key_t key = K(COMPR_RANDOM_KEYS[k]);
        size_t len = compr_len(k);
        struct buf zero = buf_new(KVS_FLOAT32, len, 0), before = buf_new(KVS_FLOAT32, len, 0);
        struct buf after = buf_new(KVS_FLOAT32, len, 0), g = buf_new(KVS_FLOAT32, len, 0);
        float *residual = calloc(len, sizeof *residual);

        if (residual == NULL)
            die("out of memory");
        ok(kvs_init(kv, 1, &key, (kvs_array_t[]){ arr(&zero, COMPR_SHAPE[k][0], COMPR_SHAPE[k][1]) }),
           "init");
        rng_state = 123;               /* every worker pushes the same gradients */
        for (int l = 0; l < nrepeat; l++) {
            compr_pull(k, COMPR_RANDOM_KEYS[k], &before);
            for (size_t j = 0; j < len; j++)
                ((float *)g.p)[j] = (float)rng_uniform();
            ok(kvs_push(kv, 1, &key,
                        (kvs_array_t[]){ arr(&g, COMPR_SHAPE[k][0], COMPR_SHAPE[k][1]) }, 0),
               "push");
            compr_pull(k, COMPR_RANDOM_KEYS[k], &after);
            for (size_t j = 0; j < len; j++) {
                float want = quantize(((float *)g.p)[j], &residual[j]) * (float)(nw * RATE);

                if (fabsf(((float *)after.p)[j] - ((float *)before.p)[j] - want) > 1e-5f)
                    die("check_compr_random: key %s element %zu moved %g, expected %g",
                        COMPR_RANDOM_KEYS[k], j,
                        (double)(((float *)after.p)[j] - ((float *)before.p)[j]), (double)want);
            }
        }
        free(residual);
        free(zero.p);
        free(before.p);
        free(after.p);
        free(g.p);
    }
}

static void test_sync_2bit_compression(int nrepeat)
{
    char spec[64];
    float curval;

    /* init_kv_compressed */
    snprintf(spec, sizeof spec, "2bit threshold=%g", (double)THRESHOLD);
    ok(kvs_set_gradient_compression(kv, spec), "set_gradient_compression");
    for (int k = 0; k < 3; k++) {
        struct buf z = buf_new(KVS_FLOAT32, compr_len(k), 0), o = buf_new(KVS_FLOAT32, compr_len(k), 1);
        kvs_key_t a = K(COMPR_KEYS[k]), b = K(COMPR_INIT_KEYS[k]);

        ok(kvs_init(kv, 1, &a, (kvs_array_t[]){ arr(&z, COMPR_SHAPE[k][0], COMPR_SHAPE[k][1]) }),
           "init");
        ok(kvs_init(kv, 1, &b, (kvs_array_t[]){ arr(&o, COMPR_SHAPE[k][0], COMPR_SHAPE[k][1]) }),
           "init");
        free(z.p);
        free(o.p);
    }
    /* check_compr_pull_before_push: init is not compressed */
    for (int k = 0; k < 3; k++) {
        struct buf val = buf_new(KVS_FLOAT32, compr_len(k), 1);

        compr_pull(k, COMPR_KEYS[k], &val);
        expect(val.p, val.n, 0, "check_compr_pull_before_push");
        compr_pull(k, COMPR_INIT_KEYS[k], &val);
        expect(val.p, val.n, 1, "check_compr_pull_before_push (init)");
        free(val.p);
    }
    /* check_compr_zero */
    compr_step(0, 0, "check_compr_zero");
    /* check_compr_residual */
    compr_step(0.4f, 0, "check_compr_residual: below the threshold");
    curval = THRESHOLD * RATE * (float)nw;
    compr_step(THRESHOLD - 0.4f, curval, "check_compr_residual: the residual meets it");
    compr_step(0.2f, curval, "check_compr_residual: below again");
    curval += THRESHOLD * RATE * (float)nw;
    compr_step(THRESHOLD - 0.2f, curval, "check_compr_residual: exceeds again");
    /* check_compr_ones */
    curval += RATE * (float)nw * THRESHOLD;
    compr_step(THRESHOLD, curval, "check_compr_ones");
    check_compr_random(nrepeat);
    /* MXNet refuses compression of row-sparse pushes; so does kvs, changing
     * nothing. */
    {
        kvs_key_t key = K(RSP_KEYS_SHAPE[0][2]);
        int64_t row = 0;
        float data[SC] = { 5, 5, 5 };
        kvs_row_sparse_t v = { .data = data, .indices = &row, .nnz = 1, .dtype = KVS_FLOAT32,
                               .ndim = 2, .shape = { SR, SC } };
        int rc = kvs_push_row_sparse(kv, 1, &key, &v, 0);
        float ones[SR * SC] = { 1, 1, 1, 1, 1, 1 };
        int64_t all[SR] = { 0, 1 };

        if (rc != KVS_ENOTSUP)
            die("a compressed row-sparse push returned %s, expected KVS_ENOTSUP", kvs_err_name(rc));
        pull_and_check(key, 0, SR, SC, all, SR, ones, "the refused push changed nothing");
    }
}

int main(int argc, char **argv)
{
    const int nrepeat = 3;

    scenario = argc > 1 ? argv[1] : "dist_sync_kvstore";
    if (strcmp(scenario, "dist_sync_kvstore") != 0)
        die("unknown scenario");
    ok(kvs_create("dist_sync", &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    init_kv();
    ok(kvs_set_optimizer(kv, "sgd lr=1 rescale_grad=-2"), "set_optimizer"); /* "test", rate 2 */
    test_sync_init();
    test_sync_push_pull(nrepeat);
    test_sync_2bit_compression(nrepeat);
    ok(kvs_barrier(kv), "barrier");
    kvs_close(kv);
    return 0;
}
