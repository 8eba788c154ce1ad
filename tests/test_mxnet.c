/*
 * test_mxnet.c - MXNet 1.9's KVStore tests, ported to kvs: the cases of
 * tests/python/unittest/test_kvstore.py (each C test is named after the
 * Python one) and the CPU cases of tests/nightly/test_kvstore.py. The
 * examples of MXNet's KVStore docstrings and the key-value store chapter
 * the library reproduces are tested in test_mxnet_docs.c.
 *
 * What cannot be ported is said where it would be; "devices" are simply
 * several values of one key in one call. MXNet's row_sparse values are
 * given densely here (rows of zeros, row_sparse_pull into dense outs);
 * kvs's own row-sparse values are tested in test_rows.c, and the row-sparse
 * cases of the nightly dist_sync_kvstore.py in dist_mxnet.c.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvs.h"
#include "testutil.h"

/* ---- helpers ---------------------------------------------------------- */

/* A small deterministic generator (xorshift64*), so that failures repeat. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* uniform in [0, 1) */
static double rng_uniform(void)
{
    return (double)(rng_next() >> 11) * 0x1p-53;
}

static int rng_int(int n)
{
    return (int)(rng_next() % (uint64_t)n);
}

/* ---- the module's fixtures -------------------------------------------- */

/* shape = (4, 4); keys = [5, 7, 11]; str_keys = ['b', 'c', 'd'] */
#define R 4
#define C 4
#define N (R * C)
static const int64_t KEYS[3] = { 5, 7, 11 };
static const char *const STR_KEYS[3] = { "b", "c", "d" };
static const float ZEROS[N];

/* A key of the int or the string store, by position: 0 is the single key
 * (3 or 'a'), 1..3 the list. */
static kvs_key_t key_at(int str, int i)
{
    if (i == 0)
        return str ? SK("a") : IK(3);
    return str ? SK(STR_KEYS[i - 1]) : IK(KEYS[i - 1]);
}

/* init_kv / init_kv_with_str: the single key and the list, zeros (4,4). */
static kvs_t *init_kv_any(int str)
{
    kvs_t *kv = new_store("local");
    kvs_key_t single = key_at(str, 0);
    kvs_key_t list[3] = { key_at(str, 1), key_at(str, 2), key_at(str, 3) };
    OK(kvs_init(kv, 1, &single, (kvs_array_t[]){ ARR(ZEROS, KVS_FLOAT32, 2, R, C) }));
    OK(kvs_init(kv, 3, list,
                (kvs_array_t[]){ ARR(ZEROS, KVS_FLOAT32, 2, R, C), ARR(ZEROS, KVS_FLOAT32, 2, R, C),
                                 ARR(ZEROS, KVS_FLOAT32, 2, R, C) }));
    return kv;
}

static kvs_t *init_kv(void)
{
    return init_kv_any(0);
}

static kvs_t *init_kv_with_str(void)
{
    return init_kv_any(1);
}

/* ---- tests/python/unittest/test_kvstore.py ----------------------------- */

static void check_single_kv_pair(kvs_t *kv, kvs_key_t key)
{
    float ones[N], val[N];
    fill_f32(ones, N, 1);
    OK(kvs_push(kv, 1, &key, (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 2, R, C) }, 0));
    fill_f32(val, N, NAN); /* mx.nd.empty */
    OK(kvs_pull(kv, 1, &key, (kvs_array_t[]){ ARR(val, KVS_FLOAT32, 2, R, C) }, 0));
    EXPECT_ALL_F32(val, N, 1);
}

static void test_single_kv_pair(void **state)
{
    kvs_t *kv;
    (void)state;
    kv = init_kv();
    check_single_kv_pair(kv, IK(3));
    kvs_close(kv);
    kv = init_kv_with_str();
    check_single_kv_pair(kv, SK("a"));
    kvs_close(kv);
}

/* Each of count outs gets random row ids (num_rows of them, with repeats):
 * named rows hold the stored ones, the others zero. MXNet passes the ids as
 * a (2, 2) array; kvs takes 1-D ids only, so the same ids go flat. */
static void check_row_sparse_pull(kvs_t *kv, int count)
{
    float vals[4][N];
    int64_t row_ids[4][R];
    kvs_key_t keys[4];
    kvs_array_t outs[4], ids[4];
    for (int i = 0; i < count; i++) {
        fill_f32(vals[i], N, 7); /* not zeros: excluded rows must be cleared */
        for (int r = 0; r < R; r++)
            row_ids[i][r] = rng_int(R);
        keys[i] = SK("e");
        outs[i] = ARR(vals[i], KVS_FLOAT32, 2, R, C);
        ids[i] = ARR(row_ids[i], KVS_INT64, 1, R);
    }
    OK(kvs_row_sparse_pull(kv, count, keys, outs, ids, 0));
    for (int i = 0; i < count; i++)
        for (int row = 0; row < R; row++) {
            int named = 0;
            for (int r = 0; r < R; r++)
                named |= row_ids[i][r] == row;
            for (int c = 0; c < C; c++)
                if (vals[i][row * C + c] != (named ? 1.0f : 0.0f))
                    fail_msg("out %d row %d col %d: got %g, want %d", i, row, c,
                             (double)vals[i][row * C + c], named);
        }
}

static void test_row_sparse_pull(void **state)
{
    kvs_t *kv = init_kv_with_str();
    float ones[N];
    (void)state;
    fill_f32(ones, N, 1);
    OK(kvs_init(kv, 1, (kvs_key_t[]){ SK("e") }, (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 2, R, C) }));
    for (int rep = 0; rep < 8; rep++) {
        check_row_sparse_pull(kv, 1);
        check_row_sparse_pull(kv, 4);
    }
    kvs_close(kv);
}

static void check_init(kvs_t *kv, kvs_key_t key)
{
    float fours[N], a[N];
    fill_f32(fours, N, 4);
    fill_f32(a, N, 0);
    OK(kvs_init(kv, 1, &key, (kvs_array_t[]){ ARR(fours, KVS_FLOAT32, 2, R, C) }));
    OK(kvs_pull(kv, 1, &key, (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, R, C) }, 0));
    EXPECT_ALL_F32(a, N, 4);
}

static void test_init(void **state)
{
    kvs_t *kv;
    (void)state;
    kv = new_store("local");
    check_init(kv, IK(3));
    kvs_close(kv);
    kv = new_store("local");
    check_init(kv, SK("a"));
    kvs_close(kv);
}

static void check_pull(kvs_t *kv)
{
    float a[N], b[N];
    kvs_key_t k1 = SK("1"), k2 = SK("2");
    fill_f32(a, N, 1);
    fill_f32(b, N, 0);
    OK(kvs_init(kv, 1, &k1, (kvs_array_t[]){ ARR(ZEROS, KVS_FLOAT32, 2, R, C) }));
    OK(kvs_push(kv, 4, (kvs_key_t[]){ k1, k1, k1, k1 },
                (kvs_array_t[]){ ARR(a, KVS_FLOAT32, 2, R, C), ARR(a, KVS_FLOAT32, 2, R, C),
                                 ARR(a, KVS_FLOAT32, 2, R, C), ARR(a, KVS_FLOAT32, 2, R, C) },
                0));
    OK(kvs_pull(kv, 1, &k1, (kvs_array_t[]){ ARR(b, KVS_FLOAT32, 2, R, C) }, 0));
    EXPECT_ALL_F32(b, N, 4);
    OK(kvs_init(kv, 1, &k2, (kvs_array_t[]){ ARR(ZEROS, KVS_FLOAT32, 2, R, C) }));
    OK(kvs_pull(kv, 1, &k2, (kvs_array_t[]){ ARR(b, KVS_FLOAT32, 2, R, C) }, 0));
    EXPECT_ALL_F32(b, N, 0);
}

static void test_pull(void **state)
{
    kvs_t *kv = NULL;
    (void)state;
    /* MXNet runs it on 'device' too (here, without a GPU, the values
     * stay on the host). */
    {
        int rc = kvs_create("device", &kv);
        if (rc == 0) {
            check_pull(kv);
            kvs_close(kv);
        } else {
            assert_int_equal(rc, KVS_ENOTSUP);
            assert_null(kv);
        }
    }
    kv = new_store("local");
    check_pull(kv);
    kvs_close(kv);
}

static void check_list_kv_pair(kvs_t *kv, int str)
{
    float fours[N], val[3][N];
    kvs_key_t keys[3] = { key_at(str, 1), key_at(str, 2), key_at(str, 3) };
    fill_f32(fours, N, 4);
    OK(kvs_push(kv, 3, keys,
                (kvs_array_t[]){ ARR(fours, KVS_FLOAT32, 2, R, C), ARR(fours, KVS_FLOAT32, 2, R, C),
                                 ARR(fours, KVS_FLOAT32, 2, R, C) },
                0));
    for (int i = 0; i < 3; i++)
        fill_f32(val[i], N, NAN);
    OK(kvs_pull(kv, 3, keys,
                (kvs_array_t[]){ ARR(val[0], KVS_FLOAT32, 2, R, C),
                                 ARR(val[1], KVS_FLOAT32, 2, R, C),
                                 ARR(val[2], KVS_FLOAT32, 2, R, C) },
                0));
    for (int i = 0; i < 3; i++)
        EXPECT_ALL_F32(val[i], N, 4);
}

static void test_list_kv_pair(void **state)
{
    kvs_t *kv;
    (void)state;
    kv = init_kv();
    check_list_kv_pair(kv, 0);
    kvs_close(kv);
    kv = init_kv_with_str();
    check_list_kv_pair(kv, 1);
    kvs_close(kv);
}

#define NUM_DEVS 4

/* What every "device" pushes and pulls in one call: for each key, one
 * value and one out per device, key by key. */
struct devs {
    int n;                             /* entries used: keys * NUM_DEVS */
    float vals[3 * NUM_DEVS][N], outs[3 * NUM_DEVS][N];
    kvs_key_t keys[3 * NUM_DEVS];
    kvs_array_t va[3 * NUM_DEVS], oa[3 * NUM_DEVS];
};

/* nkeys keys from key_at(str, first) on, each on every device with
 * values v and outs of NaN (mx.nd.empty). */
static void devs_fill(struct devs *dv, int str, int first, int nkeys, float v)
{
    dv->n = nkeys * NUM_DEVS;
    for (int k = 0; k < nkeys; k++)
        for (int d = 0; d < NUM_DEVS; d++) {
            int i = k * NUM_DEVS + d;
            fill_f32(dv->vals[i], N, v);
            fill_f32(dv->outs[i], N, NAN);
            dv->keys[i] = key_at(str, first + k);
            dv->va[i] = ARR(dv->vals[i], KVS_FLOAT32, 2, R, C);
            dv->oa[i] = ARR(dv->outs[i], KVS_FLOAT32, 2, R, C);
        }
}

/* Pushes every device's values pushes times, pulls to every device, and
 * checks that every out holds want. */
static void devs_push_pull_at(kvs_t *kv, struct devs *dv, int pushes, float want, int line)
{
    for (int p = 0; p < pushes; p++)
        expect_rc_at(kvs_push(kv, dv->n, dv->keys, dv->va, 0), 0, "kvs_push", line);
    expect_rc_at(kvs_pull(kv, dv->n, dv->keys, dv->oa, 0), 0, "kvs_pull", line);
    for (int i = 0; i < dv->n; i++)
        expect_all_f32_at(dv->outs[i], N, want, line);
}
#define DEVS_PUSH_PULL(kv, dv, pushes, want)                                  \
    devs_push_pull_at((kv), (dv), (pushes), (want), __LINE__)

/* One key pushed from every "device", pulled to every device; then the
 * list, each key from every device. */
static void check_aggregator(kvs_t *kv, int str)
{
    struct devs dv;

    /* single */
    devs_fill(&dv, str, 0, 1, 1);
    DEVS_PUSH_PULL(kv, &dv, 1, NUM_DEVS);

    /* list: [[ones*2 per device]] * len(keys), key by key */
    devs_fill(&dv, str, 1, 3, 2.0f);
    DEVS_PUSH_PULL(kv, &dv, 1, NUM_DEVS * 2.0f);
}

static void test_aggregator(void **state)
{
    kvs_t *kv;
    (void)state;
    kv = init_kv();
    check_aggregator(kv, 0);
    kvs_close(kv);
    kv = init_kv_with_str();
    check_aggregator(kv, 1);
    kvs_close(kv);
}

/* rand_ndarray(shape, 'row_sparse'), densely: some rows zero, the others
 * uniform in [0, 1). */
static void rand_rows(float *a)
{
    for (int r = 0; r < R; r++) {
        int keep = rng_int(2);
        for (int c = 0; c < C; c++)
            a[r * C + c] = keep ? (float)rng_uniform() : 0.0f;
    }
}

static void almost_equal_at(const double *got, const double *want, size_t n, int line)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 1e-5 + 1e-5 * fabs(want[i])))
            fail_msg("line %d: element %zu: got %.9g, want %.9g", line, i, got[i], want[i]);
}

/* The values pushed from every device are pulled back (by pull or by a
 * row_sparse_pull of every row) into the same arrays: their sum is
 * num_devs times the sum pushed. */
static void check_sparse_aggregator(int sparse_pull)
{
    kvs_t *kv = init_kv_with_str();
    float vals[3 * NUM_DEVS][N];
    kvs_key_t keys[3 * NUM_DEVS];
    kvs_array_t va[3 * NUM_DEVS], ids[3 * NUM_DEVS];
    const int64_t all_rows[R] = { 0, 1, 2, 3 };
    double expected_sum[N], result_sum[N];

    /* single */
    memset(expected_sum, 0, sizeof expected_sum);
    for (int d = 0; d < NUM_DEVS; d++) {
        rand_rows(vals[d]);
        for (int i = 0; i < N; i++)
            expected_sum[i] += vals[d][i];
        keys[d] = SK("a");
        va[d] = ARR(vals[d], KVS_FLOAT32, 2, R, C);
        ids[d] = ARR(all_rows, KVS_INT64, 1, R);
    }
    OK(kvs_push(kv, NUM_DEVS, keys, va, 0));
    if (sparse_pull)
        OK(kvs_row_sparse_pull(kv, NUM_DEVS, keys, va, ids, 0));
    else
        OK(kvs_pull(kv, NUM_DEVS, keys, va, 0));
    memset(result_sum, 0, sizeof result_sum);
    for (int d = 0; d < NUM_DEVS; d++)
        for (int i = 0; i < N; i++)
            result_sum[i] += vals[d][i];
    for (int i = 0; i < N; i++)
        expected_sum[i] *= NUM_DEVS;
    almost_equal_at(result_sum, expected_sum, N, __LINE__);

    /* list: the same device values for every key */
    memset(expected_sum, 0, sizeof expected_sum);
    for (int d = 0; d < NUM_DEVS; d++) {
        rand_rows(vals[d]);
        for (int i = 0; i < N; i++)
            expected_sum[i] += vals[d][i];
    }
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < NUM_DEVS; d++) {
            int j = k * NUM_DEVS + d;
            if (k > 0)
                memcpy(vals[j], vals[d], sizeof vals[d]);
            keys[j] = SK(STR_KEYS[k]);
            va[j] = ARR(vals[j], KVS_FLOAT32, 2, R, C);
            ids[j] = ARR(all_rows, KVS_INT64, 1, R);
        }
    OK(kvs_push(kv, 3 * NUM_DEVS, keys, va, 0));
    if (sparse_pull)
        OK(kvs_row_sparse_pull(kv, 3 * NUM_DEVS, keys, va, ids, 0));
    else
        OK(kvs_pull(kv, 3 * NUM_DEVS, keys, va, 0));
    for (int i = 0; i < N; i++)
        expected_sum[i] *= NUM_DEVS;
    for (int k = 0; k < 3; k++) {
        memset(result_sum, 0, sizeof result_sum);
        for (int d = 0; d < NUM_DEVS; d++)
            for (int i = 0; i < N; i++)
                result_sum[i] += vals[k * NUM_DEVS + d][i];
        almost_equal_at(result_sum, expected_sum, N, __LINE__);
    }
    kvs_close(kv);
}

static void test_sparse_aggregator(void **state)
{
    (void)state;
    check_sparse_aggregator(0);
    check_sparse_aggregator(1);
}

/* updater: local += recv, asserting the key's kind as MXNet's updater and
 * str_updater do. */
struct upd_ctx {
    int want_str;
    int wrong_kind;
    int calls;
};

static int updater(kvs_key_t key, const kvs_array_t *recv, kvs_array_t *local, void *ctx)
{
    struct upd_ctx *u = ctx;
    if ((key.name != NULL) != u->want_str)
        u->wrong_kind++;
    for (int i = 0; i < N; i++)
        ((float *)local->data)[i] += ((const float *)recv->data)[i];
    u->calls++;
    return 0;
}

static void check_updater(kvs_t *kv, int str)
{
    struct devs dv;
    const int num_push = 4;

    /* single */
    devs_fill(&dv, str, 0, 1, 1);
    DEVS_PUSH_PULL(kv, &dv, 1, NUM_DEVS);

    /* list */
    devs_fill(&dv, str, 1, 3, 1);
    DEVS_PUSH_PULL(kv, &dv, num_push, (float)(NUM_DEVS * num_push));
}

static void test_updater(void **state)
{
    struct upd_ctx u = { 0, 0, 0 }, su = { 1, 0, 0 };
    kvs_t *kv;
    (void)state;
    kv = init_kv();
    OK(kvs_set_updater(kv, updater, &u));
    check_updater(kv, 0);
    assert_int_equal(u.wrong_kind, 0);
    assert_int_equal(u.calls, 1 + 4 * 3); /* once per key per push */
    kvs_close(kv);

    kv = init_kv_with_str();
    OK(kvs_set_updater(kv, updater, &su));
    check_updater(kv, 1);
    assert_int_equal(su.wrong_kind, 0);
    assert_int_equal(su.calls, 1 + 4 * 3);
    kvs_close(kv);
}

static void test_get_type(void **state)
{
    const char *kvtype = "local_allreduce_cpu";
    kvs_t *kv = new_store(kvtype);
    (void)state;
    assert_string_equal(kvs_type(kv), kvtype);
    kvs_close(kv);
}

/* test_invalid_pull. Its first case (a pull into row_sparse outs is
 * ignored) has no dense counterpart. A row_sparse_pull whose row ids are
 * mx.nd.array([1]), float32, is refused; keys of the other kind are
 * refused by init, push, pull and row_sparse_pull; and, as in every MXNet
 * store, a key never initialised cannot be pulled. */
static void check_invalid_rsp_pull(kvs_t *kv, int str, int list)
{
    const float f_ids[1] = { 1 };
    float dns[3][N];
    kvs_key_t keys[3];
    kvs_array_t outs[3], ids[3];
    int n = list ? 3 : 1;
    for (int i = 0; i < n; i++) {
        fill_f32(dns[i], N, 2);
        keys[i] = key_at(str, list ? 1 + i : 0);
        outs[i] = ARR(dns[i], KVS_FLOAT32, 2, R, C);
        ids[i] = ARR(f_ids, KVS_FLOAT32, 1, 1);
    }
    EXPECT_RC(kvs_row_sparse_pull(kv, n, keys, outs, ids, 0), KVS_EDTYPE);
    for (int i = 0; i < n; i++)
        EXPECT_ALL_F32(dns[i], N, 2);
}

static void check_invalid_key_types(kvs_t *kv, int other_str, int list)
{
    const int64_t id1[1] = { 1 };
    float dns[3][N];
    kvs_key_t keys[3];
    kvs_array_t vals[3], ids[3];
    int n = list ? 3 : 1;
    for (int i = 0; i < n; i++) {
        fill_f32(dns[i], N, 2);
        keys[i] = key_at(other_str, list ? 1 + i : 0);
        vals[i] = ARR(dns[i], KVS_FLOAT32, 2, R, C);
        ids[i] = ARR(id1, KVS_INT64, 1, 1);
    }
    EXPECT_RC(kvs_init(kv, n, keys, vals), KVS_EKEYKIND);
    EXPECT_RC(kvs_push(kv, n, keys, vals, 0), KVS_EKEYKIND);
    EXPECT_RC(kvs_pull(kv, n, keys, vals, 0), KVS_EKEYKIND);
    EXPECT_RC(kvs_row_sparse_pull(kv, n, keys, vals, ids, 0), KVS_EKEYKIND);
    for (int i = 0; i < n; i++)
        EXPECT_ALL_F32(dns[i], N, 2);
}

static void check_uninitialised_pull(kvs_t *kv, int str)
{
    float out[N];
    kvs_key_t key = str ? SK("never") : IK(12345);
    fill_f32(out, N, 2);
    EXPECT_RC(kvs_pull(kv, 1, &key, (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 2, R, C) }, 0),
              KVS_ENOKEY);
    EXPECT_ALL_F32(out, N, 2);
}

static void test_invalid_pull(void **state)
{
    kvs_t *kvs[2];
    (void)state;
    kvs[0] = init_kv();
    kvs[1] = init_kv_with_str();
    for (int i = 0; i < 2; i++) {
        float v[N];
        check_invalid_rsp_pull(kvs[i], i, 0);
        check_invalid_rsp_pull(kvs[i], i, 1);
        check_invalid_key_types(kvs[i], 1 - i, 0);
        check_invalid_key_types(kvs[i], 1 - i, 1);
        check_uninitialised_pull(kvs[i], i);
        /* the store's own keys still hold zeros */
        for (int k = 0; k < 4; k++) {
            kvs_key_t key = key_at(i, k);
            fill_f32(v, N, NAN);
            OK(kvs_pull(kvs[i], 1, &key, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, R, C) }, 0));
            EXPECT_ALL_F32(v, N, 0);
        }
    }
    kvs_close(kvs[0]);
    kvs_close(kvs[1]);
}

/* ---- tests/nightly/test_kvstore.py (the CPU store types) -------------- */
/*
 * keys 3, 5, 7 of shapes (4,4), (100,100), (2000,2000) (the last beyond
 * MXNet's big-array bound, so split over threads); nworker values per key
 * per push; the 'test' optimizer (weight += rescale_grad * grad, with
 * rescale_grad = lr) as an updater. After each round every out holds the
 * running sum * lr, with a relative error below 1e-6. (MXNet repeats 10
 * rounds; 3 keep the test quick and every path runs in each.)
 */
#define NW 4
#define NREPEAT 3
static const int64_t NK[3] = { 3, 5, 7 };
static const int64_t NSHAPE[3][2] = { { 4, 4 }, { 100, 100 }, { 2000, 2000 } };
static const float LR = 0.1f;

static int test_optimizer(kvs_key_t key, const kvs_array_t *grad, kvs_array_t *weight,
                          void *ctx)
{
    size_t n = (size_t)weight->shape[0] * (size_t)weight->shape[1];
    (void)key;
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        ((float *)weight->data)[i] += ((const float *)grad->data)[i] * LR;
    return 0;
}

static size_t nsize(int j)
{
    return (size_t)(NSHAPE[j][0] * NSHAPE[j][1]);
}

struct nightly {
    float *data[3][NW]; /* this round's values */
    float *out[3][NW];
    double *res[3];
};

static void nightly_alloc(struct nightly *t)
{
    for (int j = 0; j < 3; j++) {
        t->res[j] = calloc(nsize(j), sizeof(double));
        assert_non_null(t->res[j]);
        for (int g = 0; g < NW; g++) {
            t->data[j][g] = malloc(nsize(j) * sizeof(float));
            t->out[j][g] = malloc(nsize(j) * sizeof(float));
            assert_non_null(t->data[j][g]);
            assert_non_null(t->out[j][g]);
        }
    }
}

static void nightly_free(struct nightly *t)
{
    for (int j = 0; j < 3; j++) {
        free(t->res[j]);
        for (int g = 0; g < NW; g++) {
            free(t->data[j][g]);
            free(t->out[j][g]);
        }
    }
}

/* np.random.random(s)*2-1 for each worker; res += lr * sum */
static void nightly_round(struct nightly *t)
{
    for (int j = 0; j < 3; j++) {
        size_t n = nsize(j);
        for (int g = 0; g < NW; g++)
            for (size_t i = 0; i < n; i++)
                t->data[j][g][i] = (float)(rng_uniform() * 2 - 1);
        for (size_t i = 0; i < n; i++) {
            double s = 0;
            for (int g = 0; g < NW; g++)
                s += t->data[j][g][i];
            t->res[j][i] += s * LR;
        }
    }
}

static void nightly_check(struct nightly *t, int j)
{
    double err = 0, norm = 0;
    size_t n = nsize(j);
    for (size_t i = 0; i < n; i++)
        norm += fabs(t->res[j][i]);
    for (int g = 0; g < NW; g++)
        for (size_t i = 0; i < n; i++)
            err += fabs(t->out[j][g][i] - t->res[j][i]);
    err /= norm;
    if (!(err < 1e-6))
        fail_msg("key %lld shape (%lld,%lld): relative error %g", (long long)NK[j],
                 (long long)NSHAPE[j][0], (long long)NSHAPE[j][1], err);
}

static kvs_array_t nightly_arr(float *p, int j)
{
    return ARR(p, KVS_FLOAT32, 2, NSHAPE[j][0], NSHAPE[j][1]);
}

/* test_kvstore: the individual key interface */
static void nightly_kvstore(const char *kv_type)
{
    kvs_t *kv = new_store(kv_type);
    struct nightly t;
    OK(kvs_set_updater(kv, test_optimizer, NULL));
    nightly_alloc(&t);
    for (int j = 0; j < 3; j++) {
        float *z = calloc(nsize(j), sizeof(float));
        assert_non_null(z);
        OK(kvs_init(kv, 1, (kvs_key_t[]){ IK(NK[j]) }, (kvs_array_t[]){ nightly_arr(z, j) }));
        free(z);
    }
    for (int i = 0; i < NREPEAT; i++) {
        nightly_round(&t);
        for (int j = 0; j < 3; j++) {
            kvs_key_t keys[NW];
            kvs_array_t vals[NW];
            for (int g = 0; g < NW; g++) {
                keys[g] = IK(NK[j]);
                vals[g] = nightly_arr(t.data[j][g], j);
            }
            OK(kvs_push(kv, NW, keys, vals, 0));
        }
        for (int j = 0; j < 3; j++) {
            kvs_key_t keys[NW];
            kvs_array_t outs[NW];
            for (int g = 0; g < NW; g++) {
                keys[g] = IK(NK[j]);
                memset(t.out[j][g], 0, nsize(j) * sizeof(float));
                outs[g] = nightly_arr(t.out[j][g], j);
            }
            OK(kvs_pull(kv, NW, keys, outs, 0));
            nightly_check(&t, j);
        }
    }
    nightly_free(&t);
    kvs_close(kv);
}

/* test_group_kvstore: every key in one call */
static void nightly_group_kvstore(const char *kv_type)
{
    kvs_t *kv = new_store(kv_type);
    struct nightly t;
    float *z[3];
    kvs_key_t keys[3 * NW];
    kvs_array_t vals[3 * NW], outs[3 * NW];
    OK(kvs_set_updater(kv, test_optimizer, NULL));
    nightly_alloc(&t);
    for (int j = 0; j < 3; j++) {
        z[j] = calloc(nsize(j), sizeof(float));
        assert_non_null(z[j]);
    }
    OK(kvs_init(kv, 3, (kvs_key_t[]){ IK(NK[0]), IK(NK[1]), IK(NK[2]) },
                (kvs_array_t[]){ nightly_arr(z[0], 0), nightly_arr(z[1], 1),
                                 nightly_arr(z[2], 2) }));
    for (int j = 0; j < 3; j++)
        free(z[j]);
    for (int j = 0; j < 3; j++)
        for (int g = 0; g < NW; g++) {
            keys[j * NW + g] = IK(NK[j]);
            vals[j * NW + g] = nightly_arr(t.data[j][g], j);
            outs[j * NW + g] = nightly_arr(t.out[j][g], j);
        }
    for (int i = 0; i < NREPEAT; i++) {
        nightly_round(&t);
        OK(kvs_push(kv, 3 * NW, keys, vals, 0));
        OK(kvs_pull(kv, 3 * NW, keys, outs, 0));
        for (int j = 0; j < 3; j++)
            nightly_check(&t, j);
    }
    nightly_free(&t);
    kvs_close(kv);
}

static void test_kvstore_local_update_cpu(void **state)
{
    (void)state;
    nightly_kvstore("local_update_cpu");
}

static void test_kvstore_local_allreduce_cpu(void **state)
{
    (void)state;
    nightly_kvstore("local_allreduce_cpu");
}

static void test_group_kvstore_local_update_cpu(void **state)
{
    (void)state;
    nightly_group_kvstore("local_update_cpu");
}

static void test_group_kvstore_local_allreduce_cpu(void **state)
{
    (void)state;
    nightly_group_kvstore("local_allreduce_cpu");
}

/* test_compress_kvstore runs on 'local_allreduce_device' only (GPU);
 * a local store refuses compression, as MXNet's 'local' does. */
static void test_compress_kvstore_local(void **state)
{
    kvs_t *kv = new_store("local");
    (void)state;
    EXPECT_RC(kvs_set_gradient_compression(kv, "2bit threshold=0.5"), KVS_ENOTSUP);
    kvs_close(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_kv_pair),
        cmocka_unit_test(test_row_sparse_pull),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_pull),
        cmocka_unit_test(test_list_kv_pair),
        cmocka_unit_test(test_aggregator),
        cmocka_unit_test(test_sparse_aggregator),
        cmocka_unit_test(test_updater),
        cmocka_unit_test(test_get_type),
        cmocka_unit_test(test_invalid_pull),
        cmocka_unit_test(test_kvstore_local_update_cpu),
        cmocka_unit_test(test_kvstore_local_allreduce_cpu),
        cmocka_unit_test(test_group_kvstore_local_update_cpu),
        cmocka_unit_test(test_group_kvstore_local_allreduce_cpu),
        cmocka_unit_test(test_compress_kvstore_local),
    };
    return cmocka_run_group_tests_name("mxnet", tests, NULL, NULL);
}
