/*
 * test_device_rows.c - row-sparse values of keys whose value lives on a
 * GPU, in the in-process stores (local with device arrays, device, nccl),
 * through the public API against the CUDA stand-in (tests/standin/) with
 * two devices and the host build of the kernel module, as test_device.c
 * loads them.
 *
 * Every result is checked against the same calls on a key kept on the
 * host (a second local store), bit for bit: union-sums of repeated and
 * overlapping rows, ASSIGN's zeroed rows, lazy sgd with momentum and adam
 * (float32 and float64) with absent rows and their state untouched,
 * lazy_update=0 as a dense push, an updater's dense input on the GPU,
 * compact pulls of unsorted repeated ids, -ENOSPC, bad ids refused and a
 * lost GPU failing with nothing changed; row-sparse values whose rows and
 * ids are in GPU memory taken as host ones. The stand-in counts the bytes copied between
 * host and device, so the test checks that a call moves the rows it
 * touches (and their optimizer state) and nothing of the rest of the
 * table. Each case has a deadline of its own (an alarm, KVS_TEST_SLOW
 * times longer).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

enum { MEMCPY_DEFAULT = 4 };

static struct {
    int (*malloc)(void **p, size_t bytes);
    int (*free)(void *p);
    int (*memcpy)(void *dst, const void *src, size_t bytes, int kind);
    int (*set_device)(int dev);
    int (*get_device)(int *dev);
    void (*copied)(unsigned long long out[4]);
} cuda;

static int arm(void **state)
{
    const char *slow = getenv("KVS_TEST_SLOW");
    int s = slow ? atoi(slow) : 1;

    (void)state;
    alarm((unsigned)(60 * (s > 0 ? s : 1)));
    return 0;
}

static int disarm(void **state)
{
    (void)state;
    alarm(0);
    return 0;
}

#define CASE(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

#define R 12                           /* rows of the test keys */
#define C 3                            /* elements per row */
#define N (R * C)

/* A key of R x C elements of dt: its device (-1: the host) and its
 * initial value. */
static void init_key(kvs_t *kv, kvs_key_t k, int dev, kvs_dtype_t dt, const void *w)
{
    size_t bytes = (size_t)N * kvs_dtype_size(dt);
    kvs_array_t a = { .data = (void *)w, .dtype = dt, .ndim = 2, .shape = { R, C },
                      .device = dev < 0 ? KVS_HOST : KVS_CUDA(dev) };
    void *p = NULL;
    int old = 0;

    if (dev >= 0) {
        assert_int_equal(cuda.get_device(&old), 0);
        assert_int_equal(cuda.set_device(dev), 0);
        assert_int_equal(cuda.malloc(&p, bytes), 0);
        assert_int_equal(cuda.set_device(old), 0);
        assert_int_equal(cuda.memcpy(p, w, bytes, MEMCPY_DEFAULT), 0);
        a.data = p;
    }
    OK(kvs_init(kv, 1, &k, &a));
    if (p)
        cuda.free(p);                  /* the store keeps its own copy */
}

/* The key's whole value in host memory (bytes of it). */
static void pull_all(kvs_t *kv, kvs_key_t k, kvs_dtype_t dt, void *out)
{
    kvs_array_t a = { .data = out, .dtype = dt, .ndim = 2, .shape = { R, C },
                      .device = KVS_HOST };

    OK(kvs_pull(kv, 1, &k, &a, 0));
}

/* kv's key kd holds bit for bit what ref's key kh holds. */
static void expect_same(kvs_t *kv, kvs_key_t kd, kvs_t *ref, kvs_key_t kh, kvs_dtype_t dt)
{
    size_t bytes = (size_t)N * kvs_dtype_size(dt);
    char *got = malloc(bytes), *want = malloc(bytes);

    assert_non_null(got);
    assert_non_null(want);
    pull_all(kv, kd, dt, got);
    pull_all(ref, kh, dt, want);
    assert_memory_equal(got, want, bytes);
    free(got);
    free(want);
}

static kvs_row_sparse_t rsp(void *data, int64_t *idx, int64_t nnz, kvs_dtype_t dt)
{
    return (kvs_row_sparse_t){ .data = data, .indices = idx, .nnz = nnz, .dtype = dt,
                               .ndim = 2, .shape = { R, C }, .device = KVS_HOST };
}

static void ramp(float *v, size_t n, float base, float step)
{
    for (size_t i = 0; i < n; i++)
        v[i] = base + (float)i * step;
}

static void ramp64(double *v, size_t n, double base, double step)
{
    for (size_t i = 0; i < n; i++)
        v[i] = base + (double)i * step;
}

static void copied(unsigned long long out[4])
{
    cuda.copied(out);
}

/* ---- sums and ASSIGN ------------------------------------------------------ */

/* Without an optimizer a push stores the union-sum of its values: rows
 * repeated within a value and across values summed, every other row
 * zero; keys on both GPUs and on the host in one call, and a float16
 * key, as the host store does them. */
static void test_assign_sums(void **state)
{
    kvs_t *kv = new_store("local"), *ref = new_store("local");
    kvs_key_t keys[4] = { IK(1), IK(2), IK(3), IK(4) };
    float w[N], a[4 * C], b[3 * C];
    uint16_t h[N], ha[4 * C];
    int64_t ia[4] = { 7, 2, 7, 11 }, ib[3] = { 2, 0, 7 };

    (void)state;
    ramp(w, N, 1, 0.5f);
    ramp(a, 4 * C, -2, 0.25f);
    ramp(b, 3 * C, 3, -0.125f);
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)(0x3c00 + i * 5);
    for (int i = 0; i < 4 * C; i++)
        ha[i] = (uint16_t)(0x3800 + i * 9);
    init_key(kv, keys[0], 0, KVS_FLOAT32, w);
    init_key(kv, keys[1], 1, KVS_FLOAT32, w);
    init_key(kv, keys[2], -1, KVS_FLOAT32, w);
    init_key(kv, keys[3], 1, KVS_FLOAT16, h);
    for (int i = 0; i < 3; i++)
        init_key(ref, keys[i], -1, KVS_FLOAT32, w);
    init_key(ref, keys[3], -1, KVS_FLOAT16, h);
    {
        kvs_key_t pk[7] = { IK(1), IK(2), IK(1), IK(3), IK(2), IK(3), IK(4) };
        kvs_row_sparse_t v[7] = { rsp(a, ia, 4, KVS_FLOAT32), rsp(a, ia, 4, KVS_FLOAT32),
                                  rsp(b, ib, 3, KVS_FLOAT32), rsp(a, ia, 4, KVS_FLOAT32),
                                  rsp(b, ib, 3, KVS_FLOAT32), rsp(b, ib, 3, KVS_FLOAT32),
                                  rsp(ha, ia, 4, KVS_FLOAT16) };

        OK(kvs_push_row_sparse(kv, 7, pk, v, 0));
        OK(kvs_push_row_sparse(ref, 7, pk, v, 0));
    }
    for (int i = 0; i < 3; i++)
        expect_same(kv, keys[i], ref, keys[i], KVS_FLOAT32);
    expect_same(kv, keys[3], ref, keys[3], KVS_FLOAT16);
    {
        float got[N];

        pull_all(kv, keys[0], KVS_FLOAT32, got);
        for (int c = 0; c < C; c++) {   /* row 7: a's twice and b's last row */
            assert_true(got[7 * C + c] == (a[0 * C + c] + a[2 * C + c]) + b[2 * C + c]);
            assert_true(got[1 * C + c] == 0 && got[2 * C + c] == a[C + c] + b[c]);
        }
    }
    /* An empty push zeroes every row. */
    {
        kvs_row_sparse_t e = rsp(NULL, NULL, 0, KVS_FLOAT32);
        float got[N];

        OK(kvs_push_row_sparse(kv, 1, &keys[0], &e, 0));
        pull_all(kv, keys[0], KVS_FLOAT32, got);
        EXPECT_ALL_F32(got, N, 0);
    }
    kvs_close(kv);
    kvs_close(ref);
}

/* ---- lazy optimizers ------------------------------------------------------ */

/* Steps of spec over keys on GPU 0 and on the host, float32: each step
 * pushes a few rows (repeated, unsorted, and a step that pushes nothing);
 * after each, the values match bit for bit, absent rows included; then a
 * dense push, whose result shows the state of every row. */
static void run_lazy(const char *spec)
{
    kvs_t *kv = new_store("local"), *ref = new_store("local");
    kvs_key_t k = IK(5);
    float w[N], g[5 * C];
    int64_t ids[4][5] = { { 3, 1, 3, 9, 4 }, { 11, 0, 5, 5, 6 }, { 4, 3, 2, 1, 0 },
                          { 8, 8, 8, 8, 8 } };
    int64_t nnz[4] = { 5, 5, 5, 0 };

    ramp(w, N, 0.5f, 0.125f);
    init_key(kv, k, 0, KVS_FLOAT32, w);
    init_key(ref, k, -1, KVS_FLOAT32, w);
    OK(kvs_set_optimizer(kv, spec));
    OK(kvs_set_optimizer(ref, spec));
    for (int s = 0; s < 8; s++) {
        kvs_row_sparse_t v;

        ramp(g, 5 * C, (float)s - 3, 0.375f);
        v = rsp(g, ids[s % 4], nnz[s % 4], KVS_FLOAT32);
        OK(kvs_push_row_sparse(kv, 1, &k, &v, 0));
        OK(kvs_push_row_sparse(ref, 1, &k, &v, 0));
        expect_same(kv, k, ref, k, KVS_FLOAT32);
    }
    {
        float d[N];
        kvs_array_t a = ARR(d, KVS_FLOAT32, 2, R, C);

        ramp(d, N, 0.25f, -0.0625f);
        OK(kvs_push(kv, 1, &k, &a, 0));
        OK(kvs_push(ref, 1, &k, &a, 0));
        expect_same(kv, k, ref, k, KVS_FLOAT32);
    }
    kvs_close(kv);
    kvs_close(ref);
}

static void test_lazy_sgd_momentum(void **state)
{
    (void)state;
    run_lazy("sgd lr=0.1 momentum=0.9 wd=0.01");
}

static void test_lazy_adam(void **state)
{
    (void)state;
    run_lazy("adam lr=0.01 wd=0.001");
}

static void test_dense_rule(void **state)
{
    (void)state;
    run_lazy("sgd lr=0.1 momentum=0.9 wd=0.01 lazy_update=0");
    run_lazy("adam lr=0.01 lazy_update=0");
}

/* Lazy adam of a float64 key (float64 state rows) on GPU 1: the rows
 * pushed change and nothing else, as on the host. */
static void test_lazy_adam_f64(void **state)
{
    kvs_t *kv = new_store("local"), *ref = new_store("local");
    kvs_key_t k = SK("emb");
    double w[N], g[3 * C], before[N], got[N];
    int64_t ids[3] = { 10, 4, 10 };
    kvs_row_sparse_t v = { .data = g, .indices = ids, .nnz = 3, .dtype = KVS_FLOAT64,
                           .ndim = 2, .shape = { R, C }, .device = KVS_HOST };

    (void)state;
    ramp64(w, N, -1, 0.0625);
    ramp64(g, 3 * C, 0.5, 0.25);
    init_key(kv, k, 1, KVS_FLOAT64, w);
    init_key(ref, k, -1, KVS_FLOAT64, w);
    OK(kvs_set_optimizer(kv, "adam lr=0.05"));
    OK(kvs_set_optimizer(ref, "adam lr=0.05"));
    pull_all(kv, k, KVS_FLOAT64, before);
    for (int s = 0; s < 3; s++) {
        OK(kvs_push_row_sparse(kv, 1, &k, &v, 0));
        OK(kvs_push_row_sparse(ref, 1, &k, &v, 0));
        expect_same(kv, k, ref, k, KVS_FLOAT64);
    }
    pull_all(kv, k, KVS_FLOAT64, got);
    for (int r = 0; r < R; r++)
        if (r != 4 && r != 10)
            assert_memory_equal(got + r * C, before + r * C, sizeof(double) * C);
        else
            assert_memory_not_equal(got + r * C, before + r * C, sizeof(double) * C);
    kvs_close(kv);
    kvs_close(ref);
}

/* An updater of a key on a GPU gets the dense sum (absent rows zero) on
 * that GPU, as for dense pushes: stored = stored * 2 + input. */
static int double_add(kvs_key_t key, const kvs_array_t *in, kvs_array_t *stored, void *ctx)
{
    int *in_device = ctx;
    float i[N], v[N];

    (void)key;
    *in_device = in->device;
    if (cuda.memcpy(i, in->data, sizeof i, MEMCPY_DEFAULT) != 0
        || cuda.memcpy(v, stored->data, sizeof v, MEMCPY_DEFAULT) != 0)
        return 1;
    for (int j = 0; j < N; j++)
        v[j] = v[j] * 2 + i[j];
    return cuda.memcpy(stored->data, v, sizeof v, MEMCPY_DEFAULT) != 0;
}

static void test_updater(void **state)
{
    kvs_t *kv = new_store("local");
    kvs_key_t k = IK(3);
    float w[N], g[3 * C], got[N];
    int64_t gi[3] = { 6, 2, 6 };
    kvs_row_sparse_t v = rsp(g, gi, 3, KVS_FLOAT32);
    int in_device = KVS_HOST;

    (void)state;
    ramp(w, N, 1, 0.5f);
    ramp(g, 3 * C, 2, 0.25f);
    init_key(kv, k, 1, KVS_FLOAT32, w);
    OK(kvs_set_updater(kv, double_add, &in_device));
    OK(kvs_push_row_sparse(kv, 1, &k, &v, 0));
    assert_int_equal(in_device, KVS_CUDA(1));
    pull_all(kv, k, KVS_FLOAT32, got);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float in = r == 2 ? g[C + c] : r == 6 ? g[c] + g[2 * C + c] : 0;

            assert_true(got[r * C + c] == w[r * C + c] * 2 + in);
        }
    kvs_close(kv);
}

/* A GPU lost before a lazy push: KVS_EDEVICE naming it, and the value and
 * the state as they were (the next pushes match the host's). */
static void test_lost_device(void **state)
{
    kvs_t *kv = new_store("local"), *ref = new_store("local");
    kvs_key_t k = IK(4);
    float w[N], g[2 * C];
    int64_t gi[2] = { 9, 1 };
    kvs_row_sparse_t v = rsp(g, gi, 2, KVS_FLOAT32);

    (void)state;
    ramp(w, N, 1, 0.5f);
    ramp(g, 2 * C, 2, 0.25f);
    init_key(kv, k, 1, KVS_FLOAT32, w);
    init_key(ref, k, -1, KVS_FLOAT32, w);
    OK(kvs_set_optimizer(kv, "adam lr=0.1"));
    OK(kvs_set_optimizer(ref, "adam lr=0.1"));
    OK(kvs_push_row_sparse(kv, 1, &k, &v, 0));
    OK(kvs_push_row_sparse(ref, 1, &k, &v, 0));
    setenv("KVS_STANDIN_LOST_DEVICE", "1", 1);
    EXPECT_RC(kvs_push_row_sparse(kv, 1, &k, &v, 0), KVS_EDEVICE);
    EXPECT_DETAIL(kv, "KVS_CUDA(1)");
    unsetenv("KVS_STANDIN_LOST_DEVICE");
    expect_same(kv, k, ref, k, KVS_FLOAT32);
    OK(kvs_push_row_sparse(kv, 1, &k, &v, 0));
    OK(kvs_push_row_sparse(ref, 1, &k, &v, 0));
    expect_same(kv, k, ref, k, KVS_FLOAT32);
    kvs_close(kv);
    kvs_close(ref);
}

/* ---- compact pulls --------------------------------------------------------- */

/* A compact pull of unsorted repeated ids from keys on both GPUs and the
 * host: sorted unique ids and their rows; too little room is -ENOSPC with
 * every nnz set to what it needs and nothing else written; pushpull. */
static void test_compact_pulls(void **state)
{
    kvs_t *kv = new_store("local");
    kvs_key_t keys[3] = { IK(1), IK(2), IK(3) };
    float w[N], rows[3][R * C];
    int64_t ids[6] = { 9, 2, 9, 0, 11, 2 }, want_ids[4] = { 0, 2, 9, 11 }, idx[3][R];
    kvs_array_t rid = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 6 },
                        .device = KVS_HOST };
    kvs_array_t rids[3] = { rid, rid, rid };
    kvs_row_sparse_t outs[3];

    (void)state;
    ramp(w, N, 2, 0.75f);
    init_key(kv, keys[0], 0, KVS_FLOAT32, w);
    init_key(kv, keys[1], 1, KVS_FLOAT32, w);
    init_key(kv, keys[2], -1, KVS_FLOAT32, w);
    for (int i = 0; i < 3; i++)
        outs[i] = (kvs_row_sparse_t){ .data = rows[i], .indices = idx[i], .nnz = R,
                                      .device = KVS_HOST };
    OK(kvs_pull_rows(kv, 3, keys, rids, outs, 0));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(outs[i].nnz, 4);
        assert_memory_equal(idx[i], want_ids, sizeof want_ids);
        for (int j = 0; j < 4; j++)
            assert_memory_equal(rows[i] + j * C, w + want_ids[j] * C, sizeof(float) * C);
        assert_int_equal(outs[i].ndim, 2);
        assert_int_equal(outs[i].shape[0], R);
        assert_int_equal(outs[i].dtype, KVS_FLOAT32);
    }
    /* Room for 3 rows in the second out. */
    memset(rows, 0x5a, sizeof rows);
    memset(idx, 0x5a, sizeof idx);
    outs[0].nnz = R;
    outs[1].nnz = 3;
    outs[2].nnz = R;
    EXPECT_RC(kvs_pull_rows(kv, 3, keys, rids, outs, 0), -ENOSPC);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(outs[i].nnz, 4);
        for (size_t b = 0; b < sizeof rows[i]; b++)
            assert_int_equal(((unsigned char *)rows[i])[b], 0x5a);
    }
    /* pushpull: ASSIGN of two rows, then the pull of four. */
    {
        float g[2 * C];
        int64_t gi[2] = { 2, 5 };
        kvs_row_sparse_t v = rsp(g, gi, 2, KVS_FLOAT32);

        ramp(g, 2 * C, 7, 1);
        outs[0].nnz = R;
        OK(kvs_pushpull_row_sparse(kv, 1, keys, &v, rids, outs, 0));
        assert_int_equal(outs[0].nnz, 4);
        EXPECT_ALL_F32(rows[0], C, 0);                  /* row 0: not pushed */
        assert_memory_equal(rows[0] + C, g, sizeof(float) * C);
        EXPECT_ALL_F32(rows[0] + 2 * C, 2 * C, 0);      /* rows 9 and 11 */
    }
    kvs_close(kv);
}

/* ---- refusals ---------------------------------------------------------------- */

/* A row id out of range in a push (after a good value of another key on
 * a GPU) or a pull is KVS_ERANGE naming key and position, and nothing
 * changes; row-sparse values in device memory are refused. */
static void test_bad_refused(void **state)
{
    kvs_t *kv = new_store("local");
    kvs_key_t keys[2] = { IK(1), IK(2) };
    float w[N], g[2 * C], before[2][N], got[N];
    int64_t good[2] = { 1, 3 }, bad[2] = { 4, R }, outidx[R];
    float rows[N];
    kvs_row_sparse_t v[2] = { rsp(g, good, 2, KVS_FLOAT32), rsp(g, bad, 2, KVS_FLOAT32) };
    kvs_row_sparse_t out = { .data = rows, .indices = outidx, .nnz = R, .device = KVS_HOST };
    kvs_array_t rid = { .data = bad, .dtype = KVS_INT64, .ndim = 1, .shape = { 2 },
                        .device = KVS_HOST };

    (void)state;
    ramp(w, N, 1, 1);
    ramp(g, 2 * C, 5, 1);
    init_key(kv, keys[0], 0, KVS_FLOAT32, w);
    init_key(kv, keys[1], 1, KVS_FLOAT32, w);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            OK(kvs_set_optimizer(kv, "adam lr=0.1"));
        for (int i = 0; i < 2; i++)
            pull_all(kv, keys[i], KVS_FLOAT32, before[i]);
        EXPECT_RC(kvs_push_row_sparse(kv, 2, keys, v, 0), KVS_ERANGE);
        EXPECT_DETAIL(kv, "key 2");
        for (int i = 0; i < 2; i++) {
            pull_all(kv, keys[i], KVS_FLOAT32, got);
            assert_memory_equal(got, before[i], sizeof got);
        }
    }
    EXPECT_RC(kvs_pull_rows(kv, 1, &keys[0], &rid, &out, 0), KVS_ERANGE);
    EXPECT_DETAIL(kv, "key 1");
    {                                  /* in GPU memory: an id out of range, rows elsewhere */
        void *d = NULL, *di = NULL;
        kvs_row_sparse_t dv = rsp(NULL, NULL, 2, KVS_FLOAT32);

        assert_int_equal(cuda.malloc(&d, sizeof g), 0);
        assert_int_equal(cuda.malloc(&di, sizeof bad), 0);
        assert_int_equal(cuda.memcpy(d, g, sizeof g, MEMCPY_DEFAULT), 0);
        assert_int_equal(cuda.memcpy(di, bad, sizeof bad, MEMCPY_DEFAULT), 0);
        dv.data = d;
        dv.indices = di;
        dv.device = KVS_CUDA(0);
        EXPECT_RC(kvs_push_row_sparse(kv, 1, keys, &dv, 0), KVS_ERANGE);
        EXPECT_DETAIL(kv, "key 1");
        dv.device = KVS_CUDA(1);
        EXPECT_RC(kvs_push_row_sparse(kv, 1, keys, &dv, 0), KVS_EDEVICE);
        EXPECT_DETAIL(kv, "key 1: value 0");
        dv.device = KVS_CUDA(0);
        dv.nnz = -1;
        EXPECT_RC(kvs_push_row_sparse(kv, 1, keys, &dv, 0), KVS_EBADARG);
        cuda.free(d);
        cuda.free(di);
    }
    pull_all(kv, keys[0], KVS_FLOAT32, got);
    assert_memory_equal(got, before[0], sizeof got);
    kvs_close(kv);
}

/* Values whose rows and ids are in GPU memory (either GPU) push, init and
 * pushpull as the same values in host memory do, to keys on a GPU and on
 * the host; only their rows and ids are copied to the host. */
static void test_device_values(void **state)
{
    kvs_t *kv = new_store("local"), *ref = new_store("local");
    kvs_key_t keys[3] = { IK(1), IK(2), IK(3) }, nk = IK(4);
    float w[N], g[3 * C];
    int64_t gi[3] = { 8, 2, 8 }, ids[2] = { 2, 8 }, outidx[R];
    float rows[N];
    void *d[2], *di[2];
    kvs_row_sparse_t hv[3], dv[3], out = { .data = rows, .indices = outidx, .nnz = R,
                                           .device = KVS_HOST };
    kvs_array_t rid = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 2 },
                        .device = KVS_HOST };
    unsigned long long c0[4], c1[4];

    (void)state;
    ramp(w, N, 1, 0.5f);
    ramp(g, 3 * C, -2, 0.25f);
    for (int dev = 0; dev < 2; dev++) {
        assert_int_equal(cuda.set_device(dev), 0);
        assert_int_equal(cuda.malloc(&d[dev], sizeof g), 0);
        assert_int_equal(cuda.malloc(&di[dev], sizeof gi), 0);
        assert_int_equal(cuda.memcpy(d[dev], g, sizeof g, MEMCPY_DEFAULT), 0);
        assert_int_equal(cuda.memcpy(di[dev], gi, sizeof gi, MEMCPY_DEFAULT), 0);
    }
    assert_int_equal(cuda.set_device(0), 0);
    for (int i = 0; i < 3; i++) {
        hv[i] = rsp(g, gi, 3, KVS_FLOAT32);
        dv[i] = rsp(d[i % 2], di[i % 2], 3, KVS_FLOAT32);
        dv[i].device = KVS_CUDA(i % 2);
    }
    init_key(kv, keys[0], 0, KVS_FLOAT32, w);
    init_key(kv, keys[1], 1, KVS_FLOAT32, w);
    init_key(kv, keys[2], -1, KVS_FLOAT32, w);
    for (int i = 0; i < 3; i++)
        init_key(ref, keys[i], -1, KVS_FLOAT32, w);
    OK(kvs_set_optimizer(kv, "adam lr=0.1"));
    OK(kvs_set_optimizer(ref, "adam lr=0.1"));
    OK(kvs_push_row_sparse(kv, 3, keys, dv, 0));
    OK(kvs_push_row_sparse(ref, 3, keys, hv, 0));
    for (int i = 0; i < 3; i++)
        expect_same(kv, keys[i], ref, keys[i], KVS_FLOAT32);
    copied(c0);                        /* a key on the host: the value's rows and ids alone */
    OK(kvs_push_row_sparse(kv, 1, &keys[2], &dv[0], 0));
    copied(c1);
    OK(kvs_push_row_sparse(ref, 1, &keys[2], &hv[0], 0));
    assert_int_equal(c1[1] - c0[1], sizeof g + sizeof gi);
    assert_int_equal(c1[0] - c0[0], 0);
    expect_same(kv, keys[2], ref, keys[2], KVS_FLOAT32);
    OK(kvs_pushpull_row_sparse(kv, 1, keys, dv, &rid, &out, 0));
    OK(kvs_pushpull_row_sparse(ref, 1, keys, hv, &rid, &out, 0));
    expect_same(kv, keys[0], ref, keys[0], KVS_FLOAT32);
    OK(kvs_init_row_sparse(kv, 1, &nk, &dv[1]));
    OK(kvs_init_row_sparse(ref, 1, &nk, &hv[1]));
    expect_same(kv, nk, ref, nk, KVS_FLOAT32);
    for (int dev = 0; dev < 2; dev++) {
        cuda.free(d[dev]);
        cuda.free(di[dev]);
    }
    kvs_close(kv);
    kvs_close(ref);
}

/* ---- bytes moved ------------------------------------------------------------- */

#define BR 4096                        /* rows of the big table */
#define BC 16                          /* elements per row */

/* A table of BR x BC float32 on GPU 0: an init from 3 rows, a push of 3
 * rows (one repeated) and a compact pull of 5 move those rows (and, for adam, their two
 * state rows each way) and no other byte between host and device, in one
 * batched copy per buffer and way, or a copy per run of rows where the
 * runtime takes no batch. */
static void test_bytes_moved(void **state)
{
    static float w[BR * BC];
    kvs_t *kv = new_store("local");
    kvs_key_t k = IK(9);
    const size_t row = sizeof(float) * BC;
    float g[4 * BC], rows[8 * BC], want[5 * BC];
    int64_t gi[4] = { 100, 7, 100, 4095 }, pi[6] = { 3, 4000, 3, 5, 6, 7 }, outidx[8];
    kvs_row_sparse_t v = { .data = g, .indices = gi, .nnz = 4, .dtype = KVS_FLOAT32,
                           .ndim = 2, .shape = { BR, BC }, .device = KVS_HOST };
    kvs_row_sparse_t out = { .data = rows, .indices = outidx, .nnz = 8, .device = KVS_HOST };
    kvs_array_t rid = { .data = pi, .dtype = KVS_INT64, .ndim = 1, .shape = { 6 },
                        .device = KVS_HOST };
    kvs_array_t a = { .data = NULL, .dtype = KVS_FLOAT32, .ndim = 2, .shape = { BR, BC },
                      .device = KVS_CUDA(0) };
    unsigned long long c0[4], c1[4];
    void *d = NULL;

    (void)state;
    ramp(w, BR * BC, 0, 0.001f);
    ramp(g, 4 * BC, 1, 0.5f);
    assert_int_equal(cuda.malloc(&d, sizeof w), 0);
    assert_int_equal(cuda.memcpy(d, w, sizeof w, MEMCPY_DEFAULT), 0);
    a.data = d;
    OK(kvs_init(kv, 1, &k, &a));
    cuda.free(d);

    copied(c0);                        /* ASSIGN: the 3 rows go over, once, in one batch */
    OK(kvs_push_row_sparse(kv, 1, &k, &v, 0));
    copied(c1);
    assert_int_equal(c1[0] - c0[0], 3 * row);
    assert_int_equal(c1[1] - c0[1], 0);
    assert_int_equal(c1[2] - c0[2], 1);

    OK(kvs_set_optimizer(kv, "adam lr=0.1"));
    for (int s = 0; s < 2; s++) {      /* their rows and 2 state rows, each way */
        copied(c0);
        OK(kvs_push_row_sparse(kv, 1, &k, &v, 0));
        copied(c1);
        assert_int_equal(c1[0] - c0[0], 3 * 3 * row);
        assert_int_equal(c1[1] - c0[1], s == 0 ? 3 * row : 3 * 3 * row);   /* a new state is zero */
        assert_int_equal(c1[2] - c0[2], 3);             /* one batch per buffer */
        assert_int_equal(c1[3] - c0[3], s == 0 ? 1 : 3);
    }

    OK(kvs_set_optimizer(kv, "sgd lr=0.1 lazy_update=0"));
    copied(c0);                        /* the dense rule: the rows into a gradient on the GPU */
    OK(kvs_push_row_sparse(kv, 1, &k, &v, 0));
    copied(c1);
    assert_int_equal(c1[0] - c0[0], 3 * row);
    assert_int_equal(c1[1] - c0[1], 0);

    /* 5 rows in 3 runs (3, 5..7, 4000): one batch of 3 copies, or 3 copies
     * where the runtime takes no batch; the same rows either way. */
    for (int batch = 1; batch >= 0; batch--) {
        int64_t rows_of[5] = { 3, 5, 6, 7, 4000 };

        if (!batch)
            setenv("KVS_STANDIN_NO_BATCH", "1", 1);
        memset(rows, 0, sizeof rows);
        out.nnz = 8;
        copied(c0);
        OK(kvs_pull_rows(kv, 1, &k, &rid, &out, 0));
        copied(c1);
        unsetenv("KVS_STANDIN_NO_BATCH");
        assert_int_equal(out.nnz, 5);
        assert_int_equal(c1[1] - c0[1], 5 * row);
        assert_int_equal(c1[0] - c0[0], 0);
        assert_int_equal(c1[3] - c0[3], batch ? 1 : 3);
        assert_memory_equal(outidx, rows_of, sizeof rows_of);
        if (batch)
            memcpy(want, rows, sizeof want);
        else
            assert_memory_equal(rows, want, sizeof want);
    }
    kvs_close(kv);

    /* An init from rows in the device type: the rows alone go over. */
    kv = new_store("device");
    copied(c0);
    OK(kvs_init_row_sparse(kv, 1, &k, &v));
    copied(c1);
    assert_int_equal(c1[0] - c0[0], 3 * row);
    assert_int_equal(c1[1] - c0[1], 0);
    out.nnz = 8;
    OK(kvs_pull_rows(kv, 1, &k, &rid, &out, 0));
    assert_int_equal(out.nnz, 5);
    EXPECT_ALL_F32(rows, 3 * BC, 0);   /* rows 3, 5, 6 and 4000: zero; 7: g's second row */
    assert_memory_equal(rows + 3 * BC, g + BC, row);
    EXPECT_ALL_F32(rows + 4 * BC, BC, 0);
    kvs_close(kv);
}

/* ---- the device and nccl types ------------------------------------------------ */

/* The device and nccl types place every key on a GPU, row-sparse inits
 * included: init from rows, lazy sgd pushes and compact pulls there give
 * the host store's values. */
static void test_device_types(void **state)
{
    const char *types[2] = { "device", "nccl" };

    (void)state;
    for (int t = 0; t < 2; t++) {
        kvs_t *kv = new_store(types[t]), *ref = new_store("local");
        kvs_key_t keys[2] = { IK(1), IK(2) };
        float w[3 * C], g[3 * C], rows[2][R * C];
        int64_t wi[3] = { 5, 1, 5 }, gi[3] = { 8, 1, 0 }, ids[3] = { 8, 5, 8 }, idx[2][R];
        kvs_row_sparse_t iv[2] = { rsp(w, wi, 3, KVS_FLOAT32), rsp(w, wi, 3, KVS_FLOAT32) };
        kvs_row_sparse_t gv[2] = { rsp(g, gi, 3, KVS_FLOAT32), rsp(g, gi, 3, KVS_FLOAT32) };
        kvs_array_t rid = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 3 },
                            .device = KVS_HOST };
        kvs_array_t rids[2] = { rid, rid }, view;
        kvs_row_sparse_t outs[2];
        float want[N];

        ramp(w, 3 * C, 1, 0.5f);
        ramp(g, 3 * C, -1, 0.25f);
        OK(kvs_init_row_sparse(kv, 2, keys, iv));
        OK(kvs_init_row_sparse(ref, 2, keys, iv));
        for (int i = 0; i < 2; i++) {
            view = (kvs_array_t){ .dtype = KVS_FLOAT32, .ndim = 2, .shape = { R, C },
                                  .device = KVS_HOST };
            OK(kvs_pull_view(kv, 1, &keys[i], &view, 0));
            assert_int_not_equal(view.device, KVS_HOST);
        }
        OK(kvs_set_optimizer(kv, "sgd lr=0.2 momentum=0.5"));
        OK(kvs_set_optimizer(ref, "sgd lr=0.2 momentum=0.5"));
        for (int s = 0; s < 3; s++) {
            OK(kvs_push_row_sparse(kv, 2, keys, gv, 0));
            OK(kvs_push_row_sparse(ref, 2, keys, gv, 0));
        }
        for (int i = 0; i < 2; i++) {
            expect_same(kv, keys[i], ref, keys[i], KVS_FLOAT32);
            outs[i] = (kvs_row_sparse_t){ .data = rows[i], .indices = idx[i], .nnz = R,
                                          .device = KVS_HOST };
        }
        OK(kvs_pull_rows(kv, 2, keys, rids, outs, 0));
        pull_all(ref, keys[1], KVS_FLOAT32, want);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(outs[i].nnz, 2);
            assert_true(idx[i][0] == 5 && idx[i][1] == 8);
            assert_memory_equal(rows[i], want + 5 * C, sizeof(float) * C);
            assert_memory_equal(rows[i] + C, want + 8 * C, sizeof(float) * C);
        }
        kvs_close(kv);
        kvs_close(ref);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_assign_sums),
        CASE(test_lazy_sgd_momentum),
        CASE(test_lazy_adam),
        CASE(test_lazy_adam_f64),
        CASE(test_dense_rule),
        CASE(test_updater),
        CASE(test_lost_device),
        CASE(test_compact_pulls),
        CASE(test_bad_refused),
        CASE(test_device_values),
        CASE(test_bytes_moved),
        CASE(test_device_types),
    };
    void *lib;

    /* Before libkvs's first use: it loads the runtime once. */
    setenv("KVS_CUDART", STANDIN_PATH, 1);
    setenv("KVS_STANDIN_DEVICES", "2", 1);
    setenv("KVS_NCCL", STANDIN_PATH, 1);
    setenv("KVS_CUDA_KERNELS", STANDIN_KERNELS, 1);
    if (!(lib = dlopen(STANDIN_PATH, RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    *(void **)&cuda.malloc = dlsym(lib, "cudaMalloc");
    *(void **)&cuda.free = dlsym(lib, "cudaFree");
    *(void **)&cuda.memcpy = dlsym(lib, "cudaMemcpy");
    *(void **)&cuda.set_device = dlsym(lib, "cudaSetDevice");
    *(void **)&cuda.get_device = dlsym(lib, "cudaGetDevice");
    *(void **)&cuda.copied = dlsym(lib, "kvs_standin_copied");
    if (!cuda.copied) {
        fprintf(stderr, "the stand-in has no kvs_standin_copied\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
