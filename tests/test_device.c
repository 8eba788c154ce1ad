/*
 * test_device.c - device arrays in the local store, through the public
 * API, against the CUDA stand-in (tests/standin/) with two devices and
 * the host build of the kernel module, which libkvs loads as it loads the
 * real one (KVS_CUDA_KERNELS): the test allocates its arrays with the
 * stand-in's cudaMalloc and reads them with cudaMemcpy, as a user's
 * program would with the real runtime. The stand-in's device memory
 * faults when the CPU reads it, and its work runs only when synchronised
 * with: a result libkvs did not wait for is not there.
 *
 * Values live where they were initialised; sums and optimizer updates run
 * there, and give bit for bit what the same calls give on host arrays;
 * optimizer states of device keys save and load;
 * host and device arrays mix in one call; the caller's current device is
 * left alone; the device type places keys on GPUs by bytes; the nccl type
 * reduces values from several GPUs through NCCL; injected failures (an allocation, a lost device) fail the
 * call with the reason and change nothing; arrays whose data is not on the
 * device they claim are refused. Row-sparse values of device keys are
 * test_device_rows.c's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

enum { MEMCPY_DEFAULT = 4 };

static struct {
    int (*malloc)(void **p, size_t bytes);
    int (*free)(void *p);
    int (*memcpy)(void *dst, const void *src, size_t bytes, int kind);
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, int kind, void *stream);
    int (*set_device)(int dev);
    int (*get_device)(int *dev);
} cuda;

/* bytes on CUDA device dev holding src (NULL: zeros). */
static void *dev_alloc(int dev, const void *src, size_t bytes)
{
    void *p = NULL;
    int old;

    assert_int_equal(cuda.get_device(&old), 0);
    assert_int_equal(cuda.set_device(dev), 0);
    assert_int_equal(cuda.malloc(&p, bytes ? bytes : 1), 0);
    assert_int_equal(cuda.set_device(old), 0);
    if (src) {
        assert_int_equal(cuda.memcpy(p, src, bytes, MEMCPY_DEFAULT), 0);
    } else {
        void *zeros = calloc(1, bytes ? bytes : 1);

        assert_non_null(zeros);
        assert_int_equal(cuda.memcpy(p, zeros, bytes, MEMCPY_DEFAULT), 0);
        free(zeros);
    }
    return p;
}

/* bytes of src into dst on CUDA device dev, queued on that device's
 * legacy default stream and not waited for, as a training step's kernels
 * leave their results: libkvs's stream waits for them. src must stay put
 * until a call runs the queue. */
static void dev_write_queued(int dev, void *dst, const void *src, size_t bytes)
{
    int old;

    assert_int_equal(cuda.get_device(&old), 0);
    assert_int_equal(cuda.set_device(dev), 0);
    assert_int_equal(cuda.memcpy_async(dst, src, bytes, MEMCPY_DEFAULT, NULL), 0);
    assert_int_equal(cuda.set_device(old), 0);
}

static void dev_read(void *dst, const void *src, size_t bytes)
{
    assert_int_equal(cuda.memcpy(dst, src, bytes, MEMCPY_DEFAULT), 0);
}

static kvs_array_t on(int dev, void *p, kvs_dtype_t dt, int64_t n)
{
    return (kvs_array_t){ .data = p, .dtype = dt, .ndim = 1, .shape = { n },
                          .device = dev < 0 ? KVS_HOST : KVS_CUDA(dev) };
}

#define N 1000

static void ramp(float *v, size_t n, float base)
{
    for (size_t i = 0; i < n; i++)
        v[i] = base + (float)i * 0.25f;
}

/* Init on a device; pulls into the host, the same device and the other. */
static void test_init_pull(void **state)
{
    float v[N], got[N];
    void *d0 = dev_alloc(0, NULL, sizeof v), *d1 = dev_alloc(1, NULL, sizeof v);
    kvs_t *kv = new_store("local");
    kvs_key_t k = IK(3);
    kvs_array_t a;

    (void)state;
    ramp(v, N, 1);
    a = on(0, dev_alloc(0, v, sizeof v), KVS_FLOAT32, N);
    OK(kvs_init(kv, 1, &k, &a));
    ramp(v, N, 99);                    /* the store copied; the caller's array is its own */
    assert_int_equal(cuda.memcpy(a.data, v, sizeof v, MEMCPY_DEFAULT), 0);

    ramp(v, N, 1);
    memset(got, 0, sizeof got);
    a = on(-1, got, KVS_FLOAT32, N);
    OK(kvs_pull(kv, 1, &k, &a, 0));
    assert_memory_equal(got, v, sizeof v);
    a = on(0, d0, KVS_FLOAT32, N);
    OK(kvs_pull(kv, 1, &k, &a, 0));
    dev_read(got, d0, sizeof got);
    assert_memory_equal(got, v, sizeof v);
    a = on(1, d1, KVS_FLOAT32, N);
    OK(kvs_pull(kv, 1, &k, &a, 0));
    dev_read(got, d1, sizeof got);
    assert_memory_equal(got, v, sizeof v);
    kvs_close(kv);
    cuda.free(d0);
    cuda.free(d1);
}

/* A push of host, device 0 and device 1 values to keys on each place:
 * the sum, wherever it runs; device 0's value is written just before,
 * queued on its device's default stream. */
static void test_mixed_push(void **state)
{
    float h[N], a0[N], a1[N], want[N], got[N];
    kvs_key_t keys[3] = { IK(0), IK(0), IK(0) };
    int homes[3] = { -1, 0, 1 };

    (void)state;
    ramp(h, N, 1);
    ramp(a0, N, -3);
    ramp(a1, N, 0.5f);
    for (int i = 0; i < N; i++)
        want[i] = (h[i] + a0[i]) + a1[i];
    for (int t = 0; t < 3; t++) {
        kvs_t *kv = new_store("local");
        void *p0 = dev_alloc(0, NULL, sizeof a0), *p1 = dev_alloc(1, a1, sizeof a1);
        void *home = homes[t] < 0 ? got : dev_alloc(homes[t], NULL, sizeof got);
        kvs_array_t init = on(homes[t], home, KVS_FLOAT32, N);
        kvs_array_t vals[3] = { on(-1, h, KVS_FLOAT32, N), on(0, p0, KVS_FLOAT32, N),
                                on(1, p1, KVS_FLOAT32, N) };
        kvs_array_t out = on(1, p1, KVS_FLOAT32, N);

        memset(got, 0, sizeof got);
        OK(kvs_init(kv, 1, keys, &init));
        dev_write_queued(0, p0, a0, sizeof a0);
        OK(kvs_push(kv, 3, keys, vals, 0));
        OK(kvs_pull(kv, 1, keys, &out, 0));
        dev_read(got, p1, sizeof got);
        assert_memory_equal(got, want, sizeof want);
        kvs_close(kv);
        cuda.free(p0);
        cuda.free(p1);
        if (homes[t] >= 0)
            cuda.free(home);
    }
}

/* The values an optimizer leaves after three pushes of two gradients to
 * a key whose value lives on dev (-1: the host). */
static void train(const char *spec, kvs_dtype_t dt, int dev, void *out, size_t es)
{
    unsigned char w[N * 8], g0[N * 8], g1[N * 8];
    kvs_t *kv = new_store("local");
    kvs_key_t keys[2] = { SK("w"), SK("w") };
    void *dw = dev >= 0 ? dev_alloc(dev, NULL, N * es) : NULL;
    void *dg = dev_alloc(dev >= 0 ? dev : 0, NULL, N * es);
    kvs_array_t a;

    for (size_t i = 0; i < N * es; i++) {
        w[i] = (unsigned char)(i * 7 + 1);
        g0[i] = (unsigned char)(i * 13 + 5);
        g1[i] = (unsigned char)(i * 3 + 11);
    }
    /* Keep the bytes finite numbers: clear each element's exponent's top. */
    for (size_t i = 0; i < N; i++) {
        w[i * es + es - 1] &= 0x3f;
        g0[i * es + es - 1] &= 0x3f;
        g1[i * es + es - 1] &= 0x3f;
    }
    OK(kvs_set_optimizer(kv, spec));
    if (dw)
        assert_int_equal(cuda.memcpy(dw, w, N * es, MEMCPY_DEFAULT), 0);
    a = on(dev, dw ? dw : w, dt, N);
    OK(kvs_init(kv, 1, keys, &a));
    assert_int_equal(cuda.memcpy(dg, g1, N * es, MEMCPY_DEFAULT), 0);
    for (int step = 0; step < 3; step++) {
        kvs_array_t g[2] = { on(-1, g0, dt, N), on(dev >= 0 ? dev : 0, dg, dt, N) };

        OK(kvs_push(kv, 2, keys, g, 0));
    }
    a = on(-1, out, dt, N);
    OK(kvs_pull(kv, 1, keys, &a, 0));
    kvs_close(kv);
    cuda.free(dw);
    cuda.free(dg);
}

/* sgd with momentum and adam, on a device, match the host bit for bit:
 * the device's through the kernel module libkvs loads and launches, the
 * host's through the engine's own path. Here the module is the host build
 * (the same kernels underneath): this checks the launches, their
 * arguments, the state buffers and the stream order, not the .cu kernels,
 * which tests/test_kernels.c checks on a GPU. */
static void test_optimizer_matches_host(void **state)
{
    static const char *specs[] = { "sgd lr=0.1 momentum=0.9 wd=0.01",
                                   "adam lr=0.01 clip_gradient=0.5" };
    static const struct { kvs_dtype_t dt; size_t es; } types[] = {
        { KVS_FLOAT32, 4 }, { KVS_FLOAT64, 8 }, { KVS_FLOAT16, 2 }, { KVS_BFLOAT16, 2 } };
    static unsigned char host[N * 8], dev[N * 8];

    (void)state;
    for (size_t s = 0; s < 2; s++) {
        for (size_t t = 0; t < 4; t++) {
            train(specs[s], types[t].dt, -1, host, types[t].es);
            train(specs[s], types[t].dt, 1, dev, types[t].es);
            if (memcmp(host, dev, N * types[t].es) != 0)
                fail_msg("%s, %s: device and host differ", specs[s],
                         kvs_dtype_name(types[t].dt));
        }
    }
}

/* Adam on a key on dev (-1: the host): two pushes, or one push, a save,
 * a new store loading the states, and the second push there. */
static void adam_twice(int dev, int reload, const char *path, float *out)
{
    float w[N], g[N];
    kvs_key_t k = IK(7);
    kvs_t *kv = new_store("local");
    void *d = dev >= 0 ? dev_alloc(dev, NULL, sizeof w) : NULL;
    kvs_array_t a, h = on(-1, g, KVS_FLOAT32, N);

    ramp(w, N, 1);
    ramp(g, N, -2);
    if (d)
        assert_int_equal(cuda.memcpy(d, w, sizeof w, MEMCPY_DEFAULT), 0);
    a = on(dev, d ? d : w, KVS_FLOAT32, N);
    OK(kvs_set_optimizer(kv, "adam lr=0.1"));
    OK(kvs_init(kv, 1, &k, &a));
    OK(kvs_push(kv, 1, &k, &h, 0));
    if (reload) {
        OK(kvs_save_optimizer_states(kv, path, 0));
        OK(kvs_pull(kv, 1, &k, &a, 0));
        kvs_close(kv);
        kv = new_store("local");
        OK(kvs_set_optimizer(kv, "adam lr=0.1"));
        OK(kvs_init(kv, 1, &k, &a));
        OK(kvs_load_optimizer_states(kv, path));
    }
    OK(kvs_push(kv, 1, &k, &h, 0));
    h.data = out;
    OK(kvs_pull(kv, 1, &k, &h, 0));
    kvs_close(kv);
    cuda.free(d);
}

/* Optimizer states of device keys save and load: the step after a reload
 * is the step without one, on the host as on a device. */
static void test_states_round_trip(void **state)
{
    static float want[N], got[N];
    char path[] = "/tmp/kvs-test-device-XXXXXX";
    int fd = mkstemp(path);

    (void)state;
    assert_true(fd >= 0);
    close(fd);
    adam_twice(-1, 0, path, want);
    adam_twice(0, 1, path, got);
    assert_memory_equal(got, want, sizeof want);
    adam_twice(-1, 1, path, got);
    assert_memory_equal(got, want, sizeof want);
    unlink(path);
}

struct seen {
    int in_device, stored_device;
};

/* An updater that reads and writes device arrays through the runtime:
 * stored = stored * 2 + input. */
static int double_add(kvs_key_t key, const kvs_array_t *in, kvs_array_t *stored, void *ctx)
{
    struct seen *s = ctx;
    float i[4], v[4];

    (void)key;
    s->in_device = in->device;
    s->stored_device = stored->device;
    if (cuda.memcpy(i, in->data, sizeof i, MEMCPY_DEFAULT) != 0
        || cuda.memcpy(v, stored->data, sizeof v, MEMCPY_DEFAULT) != 0)
        return 1;
    for (int j = 0; j < 4; j++)
        v[j] = v[j] * 2 + i[j];
    return cuda.memcpy(stored->data, v, sizeof v, MEMCPY_DEFAULT) != 0;
}

static void test_updater_sees_device(void **state)
{
    float v[4] = { 1, 2, 3, 4 }, g[4] = { 10, 20, 30, 40 }, got[4];
    float want[4] = { 1 * 2 + 20, 2 * 2 + 40, 3 * 2 + 60, 4 * 2 + 80 };
    struct seen seen = { 0, 0 };
    kvs_t *kv = new_store("local");
    kvs_key_t keys[2] = { IK(1), IK(1) };
    void *d = dev_alloc(1, v, sizeof v);
    kvs_array_t a = on(1, d, KVS_FLOAT32, 4), vals[2] = { on(-1, g, KVS_FLOAT32, 4), a };

    (void)state;
    OK(kvs_set_updater(kv, double_add, &seen));
    OK(kvs_init(kv, 1, keys, &a));
    assert_int_equal(cuda.memcpy(d, g, sizeof g, MEMCPY_DEFAULT), 0);
    OK(kvs_push(kv, 2, keys, vals, 0));
    assert_int_equal(seen.in_device, KVS_CUDA(1));
    assert_int_equal(seen.stored_device, KVS_CUDA(1));
    a = on(-1, got, KVS_FLOAT32, 4);
    OK(kvs_pull(kv, 1, keys, &a, 0));
    assert_memory_equal(got, want, sizeof want);
    kvs_close(kv);
    cuda.free(d);
}

/* pushpull in place on a device, a view of a device key, and a
 * row-sparse pull into a device array. */
static void test_pushpull_view_rows(void **state)
{
    float v[6] = { 1, 2, 3, 4, 5, 6 }, g[6] = { 1, 1, 1, 1, 1, 1 }, got[6];
    float rows[6] = { 0, 0, 3, 4, 0, 0 };
    int64_t ids[2] = { 1, 1 };
    kvs_t *kv = new_store("local");
    kvs_key_t k = IK(2), k5 = IK(5);
    void *d = dev_alloc(0, v, sizeof v), *r = dev_alloc(1, NULL, sizeof v);
    kvs_array_t a = { .data = d, .dtype = KVS_FLOAT32, .ndim = 2, .shape = { 3, 2 },
                      .device = KVS_CUDA(0) };
    kvs_array_t view = a, out = a, id = on(-1, ids, KVS_INT64, 2);

    (void)state;
    OK(kvs_init(kv, 1, &k, &a));
    assert_int_equal(cuda.memcpy(d, g, sizeof g, MEMCPY_DEFAULT), 0);
    OK(kvs_pushpull(kv, 1, &k, &a, NULL, 0));
    dev_read(got, d, sizeof got);
    assert_memory_equal(got, g, sizeof g);     /* ASSIGN: the pushed value */

    view.data = NULL;
    view.device = KVS_HOST;
    OK(kvs_pull_view(kv, 1, &k, &view, 0));
    assert_int_equal(view.device, KVS_CUDA(0));
    dev_read(got, view.data, sizeof got);
    assert_memory_equal(got, g, sizeof g);

    OK(kvs_init(kv, 1, &k5, &(kvs_array_t){ .data = v, .dtype = KVS_FLOAT32,
                                                             .ndim = 2, .shape = { 3, 2 } }));
    out.data = r;
    out.device = KVS_CUDA(1);
    OK(kvs_row_sparse_pull(kv, 1, &k5, &out, &id, 0));
    dev_read(got, r, sizeof got);
    assert_memory_equal(got, rows, sizeof rows);
    id.device = KVS_CUDA(0);
    id.data = d;
    EXPECT_RC(kvs_row_sparse_pull(kv, 1, &k5, &out, &id, 0), KVS_EDEVICE);
    assert_non_null(strstr(kvs_last_error(kv), "row ids must be host memory"));
    kvs_close(kv);
    cuda.free(d);
    cuda.free(r);
}

/* The device type puts each key on the GPU with the fewest bytes so far,
 * wherever its first array was; pushes from anywhere sum there, pulls
 * reach every device. */
static void test_device_type(void **state)
{
    static const int sizes[4] = { 300, 100, 100, 50 };
    static const int homes[4] = { 0, 1, 1, 1 };   /* 300 | 100, 200, 250 */
    float v[300], g[300], want[300], got[300];
    kvs_t *kv = new_store("device");
    void *d = dev_alloc(1, NULL, sizeof g);

    (void)state;
    assert_string_equal(kvs_type(kv), "device");
    ramp(v, 300, 2);
    ramp(g, 300, -1);
    for (int i = 0; i < 300; i++)
        want[i] = (g[i] + g[i]) + g[i];
    assert_int_equal(cuda.memcpy(d, g, sizeof g, MEMCPY_DEFAULT), 0);
    for (int i = 0; i < 4; i++) {
        kvs_key_t k[3] = { IK(i), IK(i), IK(i) };
        kvs_array_t a = on(-1, v, KVS_FLOAT32, sizes[i]), view = a;
        kvs_array_t vals[3] = { on(-1, g, KVS_FLOAT32, sizes[i]),
                                on(1, d, KVS_FLOAT32, sizes[i]),
                                on(-1, g, KVS_FLOAT32, sizes[i]) };

        OK(kvs_init(kv, 1, k, &a));
        OK(kvs_pull_view(kv, 1, k, &view, 0));
        assert_int_equal(view.device, KVS_CUDA(homes[i]));
        OK(kvs_push(kv, 3, k, vals, 0));
        a.data = got;
        OK(kvs_pull(kv, 1, k, &a, 0));
        assert_memory_equal(got, want, sizeof(float) * (size_t)sizes[i]);
    }
    kvs_close(kv);
    cuda.free(d);
}

/* The nccl type reduces a key's values from both devices with NCCL (the
 * stand-in's sums, in rank order, are the host's), several keys in one
 * group; values from the host are copied over instead. */
static void test_nccl_type(void **state)
{
    uint16_t h0[N], h1[N], want[N], got[N];
    kvs_t *kv = new_store("nccl"), *ref = new_store("local");
    kvs_key_t keys[4] = { IK(0), IK(1), IK(0), IK(1) }, three[3] = { IK(0), IK(0), IK(0) };
    void *d0 = dev_alloc(0, NULL, sizeof h0), *d1 = dev_alloc(1, NULL, sizeof h1);
    kvs_array_t a;

    (void)state;
    for (int i = 0; i < N; i++) {
        h0[i] = (uint16_t)(0x3c00 + i * 7);     /* float16 values around 1 */
        h1[i] = (uint16_t)(0x3800 + i * 3);
    }
    assert_int_equal(cuda.memcpy(d0, h0, sizeof h0, MEMCPY_DEFAULT), 0);
    assert_int_equal(cuda.memcpy(d1, h1, sizeof h1, MEMCPY_DEFAULT), 0);
    a = on(-1, h0, KVS_FLOAT16, N);
    for (int i = 0; i < 2; i++) {
        OK(kvs_init(kv, 1, &keys[i], &a));
        OK(kvs_init(ref, 1, &keys[i], &a));
    }
    {
        kvs_array_t dv[4] = { on(0, d0, KVS_FLOAT16, N), on(0, d0, KVS_FLOAT16, N),
                              on(1, d1, KVS_FLOAT16, N), on(1, d1, KVS_FLOAT16, N) };
        kvs_array_t hv[4] = { on(-1, h0, KVS_FLOAT16, N), on(-1, h0, KVS_FLOAT16, N),
                              on(-1, h1, KVS_FLOAT16, N), on(-1, h1, KVS_FLOAT16, N) };

        OK(kvs_push(kv, 4, keys, dv, 0));
        OK(kvs_push(ref, 4, keys, hv, 0));
    }
    for (int i = 0; i < 2; i++) {
        a = on(-1, want, KVS_FLOAT16, N);
        OK(kvs_pull(ref, 1, &keys[i], &a, 0));
        a.data = got;
        OK(kvs_pull(kv, 1, &keys[i], &a, 0));
        assert_memory_equal(got, want, sizeof want);
    }
    {
        kvs_array_t mixed[3] = { on(0, d0, KVS_FLOAT16, N), on(-1, h1, KVS_FLOAT16, N),
                                 on(1, d1, KVS_FLOAT16, N) };
        kvs_array_t hv[3] = { on(-1, h0, KVS_FLOAT16, N), on(-1, h1, KVS_FLOAT16, N),
                              on(-1, h1, KVS_FLOAT16, N) };

        OK(kvs_push(kv, 3, three, mixed, 0));
        OK(kvs_push(ref, 3, three, hv, 0));
        a = on(-1, want, KVS_FLOAT16, N);
        OK(kvs_pull(ref, 1, three, &a, 0));
        a = on(1, d1, KVS_FLOAT16, N);
        OK(kvs_pull(kv, 1, three, &a, 0));
        dev_read(got, d1, sizeof got);
        assert_memory_equal(got, want, sizeof want);
    }
    kvs_close(kv);
    kvs_close(ref);
    cuda.free(d0);
    cuda.free(d1);
}

/* The caller's current device is the same after every call. */
static void test_current_device_kept(void **state)
{
    float v[4] = { 1, 2, 3, 4 };
    kvs_t *kv = new_store("local");
    kvs_key_t k = IK(1);
    void *d = dev_alloc(0, v, sizeof v);
    kvs_array_t a = on(0, d, KVS_FLOAT32, 4);
    int cur = -1;

    (void)state;
    assert_int_equal(cuda.set_device(1), 0);
    OK(kvs_init(kv, 1, &k, &a));
    OK(kvs_push(kv, 1, &k, &a, 0));
    OK(kvs_pull(kv, 1, &k, &a, 0));
    assert_int_equal(cuda.get_device(&cur), 0);
    assert_int_equal(cur, 1);
    assert_int_equal(cuda.set_device(0), 0);
    kvs_close(kv);
    cuda.free(d);
}

/* Arrays whose data is not on the device they name, and devices that do
 * not exist, are refused and store nothing. */
static void test_wrong_device_refused(void **state)
{
    float v[4] = { 1, 2, 3, 4 };
    kvs_t *kv = new_store("local");
    kvs_key_t k = IK(1);
    void *d = dev_alloc(0, v, sizeof v);
    kvs_array_t a = on(1, d, KVS_FLOAT32, 4);

    (void)state;
    EXPECT_RC(kvs_init(kv, 1, &k, &a), KVS_EDEVICE);
    assert_non_null(strstr(kvs_last_error(kv), "says KVS_CUDA(1), but its data is on "
                                               "KVS_CUDA(0)"));
    a = on(0, v, KVS_FLOAT32, 4);
    EXPECT_RC(kvs_init(kv, 1, &k, &a), KVS_EDEVICE);
    assert_non_null(strstr(kvs_last_error(kv), "its data is not device memory"));
    a = on(2, d, KVS_FLOAT32, 4);
    EXPECT_RC(kvs_init(kv, 1, &k, &a), KVS_EDEVICE);
    assert_non_null(strstr(kvs_last_error(kv), "no CUDA device 2 (2 devices)"));
    a = on(-1, v, KVS_FLOAT32, 4);
    EXPECT_RC(kvs_pull(kv, 1, &k, &a, 0), KVS_ENOKEY);
    kvs_close(kv);
    cuda.free(d);
}

/* An allocation that fails, and a device that is lost, fail the call with
 * the runtime's reason; the store keeps what it had. */
static void test_injected_failures(void **state)
{
    float v[4] = { 1, 2, 3, 4 }, w[4] = { 5, 6, 7, 8 }, got[4];
    kvs_t *kv = new_store("local");
    kvs_key_t k = IK(1), k2 = IK(2);
    void *d = dev_alloc(1, v, sizeof v);
    kvs_array_t a = on(1, d, KVS_FLOAT32, 4), h = on(-1, got, KVS_FLOAT32, 4);

    (void)state;
    setenv("KVS_STANDIN_FAIL_MALLOC", "1", 1);
    EXPECT_RC(kvs_init(kv, 1, &k, &a), -ENOMEM);
    assert_non_null(strstr(kvs_last_error(kv), "KVS_CUDA(1): out of memory"));
    unsetenv("KVS_STANDIN_FAIL_MALLOC");
    EXPECT_RC(kvs_pull(kv, 1, &k, &h, 0), KVS_ENOKEY);

    OK(kvs_init(kv, 1, &k, &a));
    assert_int_equal(cuda.memcpy(d, w, sizeof w, MEMCPY_DEFAULT), 0);
    setenv("KVS_STANDIN_LOST_DEVICE", "1", 1);
    EXPECT_RC(kvs_init(kv, 1, &k2, &a), KVS_EDEVICE);
    EXPECT_RC(kvs_push(kv, 1, &k, &h, 0), KVS_EDEVICE);
    assert_non_null(strstr(kvs_last_error(kv), "KVS_CUDA(1)"));
    unsetenv("KVS_STANDIN_LOST_DEVICE");
    OK(kvs_pull(kv, 1, &k, &h, 0));
    assert_memory_equal(got, v, sizeof v);
    EXPECT_RC(kvs_pull(kv, 1, &k2, &h, 0), KVS_ENOKEY);
    kvs_close(kv);
    cuda.free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_pull),
        cmocka_unit_test(test_mixed_push),
        cmocka_unit_test(test_optimizer_matches_host),
        cmocka_unit_test(test_updater_sees_device),
        cmocka_unit_test(test_states_round_trip),
        cmocka_unit_test(test_pushpull_view_rows),
        cmocka_unit_test(test_device_type),
        cmocka_unit_test(test_nccl_type),
        cmocka_unit_test(test_current_device_kept),
        cmocka_unit_test(test_wrong_device_refused),
        cmocka_unit_test(test_injected_failures),
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
    *(void **)&cuda.memcpy_async = dlsym(lib, "cudaMemcpyAsync");
    *(void **)&cuda.set_device = dlsym(lib, "cudaSetDevice");
    *(void **)&cuda.get_device = dlsym(lib, "cudaGetDevice");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
