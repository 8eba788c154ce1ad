/*
 * test_kernels.c - the kernel module (src/kernels/cuda_kernels.cu, libkvs-cuda.so)
 * against the host kernels it twins, byte for byte: kvs_cuda_sum against
 * kvs__sum for every dtype, and kvs_cuda_update against
 * kvs__optim_update_sum for sgd and adam on every float dtype, over values
 * that take in NaNs (quiet, signalling, with payloads), infinities,
 * overflow and subnormals (at most one input of an element anything but a
 * finite number: see make_wild).
 *
 * It needs a GPU. The CUDA runtime (KVS_CUDART, else the toolkit's
 * libcudart.so.13) and the module (KVS_CUDA_KERNELS, else the build
 * tree's) are loaded and the module's ABI checked first, so that a module
 * that does not load fails on any machine; then, where the runtime finds
 * no device, the program skips as a whole: exit 77, "no CUDA device".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "kernels/array.h"
#include "kernels/cuda_kernels.h"
#include "kernels/optim.h"
#include "store/optim_state.h"

#define BIG_N (((size_t)1 << 20) + 3)
#define MAX_K 40                       /* past the inputs a launch carries by value */
#define STEPS 3

/* The runtime's entry points the test calls, and the module's. */
static struct {
    __typeof__(cudaGetDeviceCount) *device_count;
    __typeof__(cudaMalloc) *alloc;
    __typeof__(cudaFree) *release;
    __typeof__(cudaMemcpy) *copy;
    __typeof__(cudaMemset) *zero;
    __typeof__(cudaStreamCreate) *stream_create;
    __typeof__(cudaStreamSynchronize) *stream_sync;
    __typeof__(cudaStreamDestroy) *stream_destroy;
    __typeof__(cudaGetErrorString) *error_string;
} rt;

static struct {
    __typeof__(kvs_cuda_kernels_abi) *abi;
    __typeof__(kvs_cuda_sum) *sum;
    __typeof__(kvs_cuda_update) *update;
} mod;

static cudaStream_t stream;

static const kvs_dtype_t all_dtypes[] = { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16,
                                          KVS_BFLOAT16, KVS_INT32, KVS_INT64, KVS_UINT8 };

/* ---- Device memory ----------------------------------------------------- */

static void cuda_ok_at(int rc, const char *what, int line)
{
    if (rc != 0)
        fail_msg("line %d: %s: %d (%s)", line, what, rc, rt.error_string((cudaError_t)rc));
}
#define CUDA_OK(call) cuda_ok_at((int)(call), #call, __LINE__)

/* bytes of device memory (one at least, so that every array has an
 * address), a copy of p unless p is NULL. */
static void *to_device(const void *p, size_t bytes)
{
    void *d = NULL;

    CUDA_OK(rt.alloc(&d, bytes ? bytes : 1));
    if (p && bytes)
        CUDA_OK(rt.copy(d, p, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void from_device(void *p, const void *d, size_t bytes)
{
    CUDA_OK(rt.stream_sync(stream));
    if (bytes)
        CUDA_OK(rt.copy(p, d, bytes, cudaMemcpyDeviceToHost));
}

/* ---- Values ------------------------------------------------------------ */

static uint64_t rng = 0x243f6a8885a308d3u;

static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* The bit layout of a float dtype: its size, mantissa bits, exponent bias,
 * and the values a kernel must carry through unharmed. */
struct layout {
    size_t size;
    int mant;
    unsigned bias;
    const uint64_t *edge;
    size_t nedge;
};

/* NaNs quiet and signalling, with and without payload and sign; the
 * infinities; signed zeros; the least and greatest subnormals; the least
 * normal; the greatest finite, whose sum with itself overflows. */
static const uint64_t edge_f32[] = {
    0x7fc00000, 0xffc00000, 0x7f800001, 0xffa12345, 0x7fc0beef, 0x7f800000, 0xff800000,
    0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff,
};
static const uint64_t edge_f64[] = {
    0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0xfff4000012345678,
    0x7ff0000000000000, 0xfff0000000000000, 0x0000000000000000, 0x8000000000000000,
    0x0000000000000001, 0x800fffffffffffff, 0x0010000000000000, 0x7fefffffffffffff,
    0xffefffffffffffff,
};
static const uint64_t edge_f16[] = {
    0x7e00, 0xfe00, 0x7c01, 0xfd23, 0x7e5a, 0x7c00, 0xfc00, 0x0000, 0x8000,
    0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x7800,
};
static const uint64_t edge_bf16[] = {
    0x7fc0, 0xffc0, 0x7f81, 0xffa1, 0x7fd3, 0x7f80, 0xff80, 0x0000, 0x8000,
    0x0001, 0x807f, 0x0080, 0x7f7f, 0xff7f,
};

#define EDGES(a) a, sizeof a / sizeof a[0]
static const struct layout layouts[] = {
    [KVS_FLOAT32]  = { 4, 23, 127, EDGES(edge_f32) },
    [KVS_FLOAT64]  = { 8, 52, 1023, EDGES(edge_f64) },
    [KVS_FLOAT16]  = { 2, 10, 15, EDGES(edge_f16) },
    [KVS_BFLOAT16] = { 2, 7, 127, EDGES(edge_bf16) },
    [KVS_INT32]    = { 4, 0, 0, NULL, 0 },
    [KVS_INT64]    = { 8, 0, 0, NULL, 0 },
    [KVS_UINT8]    = { 1, 0, 0, NULL, 0 },
};

/* Whether a float element's exponent is all ones: NaN or infinity. */
static int nonfinite(const struct layout *l, uint64_t v)
{
    uint64_t ones = ((uint64_t)1 << (l->size * 8 - 1 - (size_t)l->mant)) - 1;

    return ((v >> l->mant) & ones) == ones;
}

/* An edge value of a float dtype, finite or not as asked. */
static uint64_t edge(const struct layout *l, int finite)
{
    for (;;) {
        uint64_t v = l->edge[rnd() % l->nedge];

        if (nonfinite(l, v) != finite)
            return v;
    }
}

/* A number of a float dtype between 2^-span and 2^span in magnitude, with
 * a full mantissa, so that sums round. */
static uint64_t number(const struct layout *l, int span)
{
    uint64_t r = rnd();
    uint64_t sign = (r >> 63) << (l->size * 8 - 1);
    uint64_t e = l->bias - (unsigned)span + (r >> 8) % (2 * (unsigned)span + 1);

    return sign | e << l->mant | (rnd() & (((uint64_t)1 << l->mant) - 1));
}

/* n elements of dtype: any bits for integers; numbers for floats, one in
 * sixteen a finite edge value (zero, subnormal, the greatest finite) unless
 * tame (weights). */
static void *fill(kvs_dtype_t dt, size_t n, int span, int tame)
{
    const struct layout *l = &layouts[dt];
    unsigned char *p = malloc(n * l->size + 1);

    assert_non_null(p);
    for (size_t j = 0; j < n; j++) {
        uint64_t v = l->mant == 0 ? rnd()
                     : !tame && rnd() % 16 == 0 ? edge(l, 1) : number(l, span);

        memcpy(p + j * l->size, &v, l->size);     /* little-endian: the low bytes */
    }
    return p;
}

/* Makes element j of one input of p[0..k) anything: random bits (NaN
 * payloads included) or a NaN or an infinity. One input at most: where two
 * different NaNs meet (a NaN input and another, or one made of infinities),
 * which of them an x86 host keeps depends on the operands its compiler
 * put first, so no kernel could be held to it. */
static void make_wild(kvs_dtype_t dt, void *const *p, int k, size_t j)
{
    const struct layout *l = &layouts[dt];
    uint64_t v = rnd() % 2 ? rnd() : edge(l, 0);

    memcpy((unsigned char *)p[rnd() % (unsigned)k] + j * l->size, &v, l->size);
}

/* want and got agree byte for byte, or the test fails naming the first
 * element that does not. */
static void expect_same(const void *want, const void *got, size_t n, size_t es,
                        const char *what)
{
    const unsigned char *w = want, *g = got;

    if (n == 0 || memcmp(want, got, n * es) == 0)
        return;
    for (size_t j = 0; j < n; j++) {
        uint64_t a = 0, b = 0;

        if (memcmp(w + j * es, g + j * es, es) == 0)
            continue;
        memcpy(&a, w + j * es, es);
        memcpy(&b, g + j * es, es);
        fail_msg("%s: element %zu of %zu is 0x%0*llx on the GPU, 0x%0*llx on the host", what, j,
                 n, (int)(2 * es), (unsigned long long)b, (int)(2 * es), (unsigned long long)a);
    }
}

/* ---- Sum --------------------------------------------------------------- */

/* k inputs of n elements, on the host and on the device. */
struct inputs {
    int k;
    size_t n;
    void *host[MAX_K];
    void *dev[MAX_K];
};

static void inputs_make(struct inputs *in, kvs_dtype_t dt, int k, size_t n, int span)
{
    in->k = k;
    in->n = n;
    for (int i = 0; i < k; i++)
        in->host[i] = fill(dt, n, span, 0);
    for (size_t j = 0; layouts[dt].mant && j < n; j++) {
        if (rnd() % 8 == 0)
            make_wild(dt, in->host, k, j);
    }
    for (int i = 0; i < k; i++)
        in->dev[i] = to_device(in->host[i], n * kvs_dtype_size(dt));
}

static void inputs_free(struct inputs *in)
{
    for (int i = 0; i < in->k; i++) {
        free(in->host[i]);
        CUDA_OK(rt.release(in->dev[i]));
    }
}

/* kvs_cuda_sum of the first k inputs against kvs__sum of them. */
static void check_sum(kvs_dtype_t dt, const struct inputs *in, int k, size_t n)
{
    size_t bytes = n * kvs_dtype_size(dt);
    void *want = malloc(bytes + 1), *got = malloc(bytes + 1), *d_out = to_device(NULL, bytes);
    char what[96];

    assert_true(want && got);
    kvs__sum(dt, want, (const void *const *)in->host, k, n, 0);
    CUDA_OK(mod.sum((int)dt, d_out, (const void *const *)in->dev, k, n, stream));
    from_device(got, d_out, bytes);
    snprintf(what, sizeof what, "sum of %d %s arrays of %zu", k, kvs_dtype_name(dt), n);
    expect_same(want, got, n, kvs_dtype_size(dt), what);
    CUDA_OK(rt.release(d_out));
    free(want);
    free(got);
}

/* Every k of 1, 2, 3, 5 and 40 (past what a launch carries by value),
 * every size of 0, 1, 1000 and 2^20 + 3. */
static void test_sum(void **state)
{
    static const int ks[] = { 1, 2, 3, 5, MAX_K };
    static const size_t ns[] = { 0, 1, 1000, BIG_N };
    kvs_dtype_t dt = *(const kvs_dtype_t *)*state;
    struct inputs in;

    inputs_make(&in, dt, MAX_K, BIG_N, 6);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
            check_sum(dt, &in, ks[b], ns[a]);
    inputs_free(&in);
}

/* The output is one of the inputs: the first, a later one, and one read
 * from the pointer table of a sum of 40; over more than one host chunk. */
static void test_sum_aliased(void **state)
{
    static const struct { int k, out; } cases[] = { { 3, 0 }, { 3, 2 }, { MAX_K, 35 } };
    const size_t n = 4099;

    (void)state;
    for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++) {
        kvs_dtype_t dt = all_dtypes[d];
        size_t es = kvs_dtype_size(dt);
        void *got = malloc(n * es);

        assert_non_null(got);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            struct inputs in;
            int out = cases[c].out;
            char what[96];

            inputs_make(&in, dt, cases[c].k, n, 6);
            kvs__sum(dt, in.host[out], (const void *const *)in.host, in.k, n, 0);
            CUDA_OK(mod.sum((int)dt, in.dev[out], (const void *const *)in.dev, in.k, n, stream));
            from_device(got, in.dev[out], n * es);
            snprintf(what, sizeof what, "%s sum of %d into input %d", kvs_dtype_name(dt), in.k,
                     out);
            expect_same(in.host[out], got, n, es, what);
            inputs_free(&in);
        }
        free(got);
    }
}

/* ---- Update ------------------------------------------------------------ */

static const char *const specs[] = {
    "sgd lr=0.1",
    "sgd lr=0.1 wd=0.01 rescale_grad=0.5",
    "sgd lr=0.05 wd=0.001 clip_gradient=0.25",
    "sgd lr=0.1 momentum=0.9 wd=0.01",
    "sgd lr=0.05 momentum=0.9 wd=0.001 rescale_grad=2 clip_gradient=0.3",
    "adam lr=0.01",
    "adam lr=0.001 beta1=0.8 beta2=0.95 wd=0.01 rescale_grad=0.5 clip_gradient=0.5",
    "adam lr=0.01 epsilon=0",          /* 0/0 where mean and variance are 0 */
};

static struct kvs__optim_state *new_state(const struct kvs__optim *o, kvs_dtype_t dt, size_t n)
{
    struct kvs__optim_state *s = NULL;
    struct kvs__err e = { 0 };

    if (kvs__optim_state_new(o, dt, n, KVS_HOST, &s, &e) != 0)
        fail_msg("state_new: %s", e.msg);
    return s;
}

/* STEPS updates of n weights by the sum of k gradients under spec, on the
 * host and on the device, from the same weights and zeroed states: the
 * weights and the state buffers must agree after each run. The device's
 * constants come from kvs__optim_prepare on a state of its own, which
 * counts the steps as the host's does. */
static void check_update(const char *spec, kvs_dtype_t dt, int k, size_t n)
{
    struct kvs__optim *o = NULL;
    struct kvs__optim_state *hs, *ds;
    struct kvs__err e = { 0 };
    size_t es = kvs_dtype_size(dt), ses = dt == KVS_FLOAT64 ? 8 : 4;
    void *w = fill(dt, n, 3, 1), *got = malloc(n * (es > ses ? es : ses) + 1);
    void *d_w = to_device(w, n * es), *d_buf[2] = { NULL, NULL };
    struct inputs in;
    char what[160];

    assert_non_null(got);
    if (kvs__optim_parse(spec, &o, &e) != 0)
        fail_msg("parse \"%s\": %s", spec, e.msg);
    hs = new_state(o, dt, n);
    ds = new_state(o, dt, n);
    for (int i = 0; i < hs->nbuf; i++) {
        d_buf[i] = to_device(NULL, n * ses);
        CUDA_OK(rt.zero(d_buf[i], 0, n * ses));
    }
    inputs_make(&in, dt, k, n, 4);
    for (int step = 0; step < STEPS; step++) {
        struct kvs_cuda_step st;

        kvs__optim_update_sum(o, hs, dt, w, (const void *const *)in.host, k, n, 0);
        assert_int_equal(kvs__optim_prepare(o, ds, dt, 0, n, k, 0, &st), 0);
        CUDA_OK(mod.update(&st, (int)dt, d_w, (const void *const *)in.dev, k, d_buf[0],
                           d_buf[1], n, stream));
    }
    from_device(got, d_w, n * es);
    snprintf(what, sizeof what, "\"%s\", %s, %d inputs of %zu: weight", spec,
             kvs_dtype_name(dt), k, n);
    expect_same(w, got, n, es, what);
    for (int i = 0; i < hs->nbuf; i++) {
        from_device(got, d_buf[i], n * ses);
        snprintf(what, sizeof what, "\"%s\", %s, %d inputs of %zu: state %d", spec,
                 kvs_dtype_name(dt), k, n, i);
        expect_same(hs->buf[i], got, n, ses, what);
        CUDA_OK(rt.release(d_buf[i]));
    }
    inputs_free(&in);
    CUDA_OK(rt.release(d_w));
    kvs__optim_state_free(ds);
    kvs__optim_state_free(hs);
    kvs__optim_free(o);
    free(got);
    free(w);
}

static void test_update(void **state)
{
    static const int ks[] = { 1, 3, MAX_K };
    kvs_dtype_t dt = *(const kvs_dtype_t *)*state;

    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
            check_update(specs[s], dt, ks[b], 1000);
        check_update(specs[s], dt, 3, BIG_N);
    }
}

/* ---- Arguments --------------------------------------------------------- */

/* What the module refuses, it refuses before queueing anything:
 * cudaErrorInvalidValue. An empty array is no work. */
static void test_refusals(void **state)
{
    struct kvs_cuda_step sgd = { .kind = 0, .lr = 0.1 }, mom = sgd, adam = { .kind = 1 };
    float x = 1;
    void *d = to_device(&x, sizeof x);
    const void *in[1] = { d };

    (void)state;
    mom.mom = 1;
    assert_int_equal(mod.sum(7, d, in, 1, 1, stream), cudaErrorInvalidValue);
    assert_int_equal(mod.sum(-1, d, in, 1, 1, stream), cudaErrorInvalidValue);
    assert_int_equal(mod.update(&sgd, KVS_INT32, d, in, 1, NULL, NULL, 1, stream),
                     cudaErrorInvalidValue);
    assert_int_equal(mod.update(&sgd, KVS_FLOAT32, d, in, 0, NULL, NULL, 1, stream),
                     cudaErrorInvalidValue);
    assert_int_equal(mod.update(&mom, KVS_FLOAT32, d, in, 1, NULL, NULL, 1, stream),
                     cudaErrorInvalidValue);
    assert_int_equal(mod.update(&adam, KVS_FLOAT32, d, in, 1, d, NULL, 1, stream),
                     cudaErrorInvalidValue);
    assert_int_equal(mod.update(NULL, KVS_FLOAT32, d, in, 1, NULL, NULL, 1, stream),
                     cudaErrorInvalidValue);
    assert_int_equal(mod.sum(KVS_FLOAT32, NULL, in, 1, 0, stream), 0);
    assert_int_equal(mod.update(&sgd, KVS_FLOAT32, NULL, in, 1, NULL, NULL, 0, stream), 0);
    /* Nothing above touched the element. */
    from_device(&x, d, sizeof x);
    assert_true(x == 1);
    CUDA_OK(rt.release(d));
}

/* ---- Loading ----------------------------------------------------------- */

/* dlsym into *slot, or the program ends: a library without the entry
 * point is not what it should be. */
static void resolve(void *lib, const char *path, const char *name, void *slot)
{
    void *fn = dlsym(lib, name);

    if (!fn) {
        fprintf(stderr, "%s has no %s\n", path, name);
        exit(1);
    }
    memcpy(slot, &fn, sizeof fn);
}

/* 0 with rt and mod filled and a device present; 77 where there is no
 * device (or no runtime) to run on; exits on a runtime or module that is
 * broken. The runtime is loaded first: the module needs it, by soname. */
static int load(void)
{
    const char *rt_path = getenv("KVS_CUDART"), *mod_path = getenv("KVS_CUDA_KERNELS");
    void *lib, *kernels;
    int n = 0, rc;

    if (!rt_path || !*rt_path)
        rt_path = CUDA_LIB_DIR "/libcudart.so.13";
    if (!mod_path || !*mod_path)
        mod_path = KERNELS_PATH;
    if (!(lib = dlopen(rt_path, RTLD_NOW | RTLD_LOCAL))) {
        printf("no CUDA device: no CUDA runtime (%s)\n", dlerror());
        return 77;
    }
    resolve(lib, rt_path, "cudaGetDeviceCount", &rt.device_count);
    resolve(lib, rt_path, "cudaMalloc", &rt.alloc);
    resolve(lib, rt_path, "cudaFree", &rt.release);
    resolve(lib, rt_path, "cudaMemcpy", &rt.copy);
    resolve(lib, rt_path, "cudaMemset", &rt.zero);
    resolve(lib, rt_path, "cudaStreamCreate", &rt.stream_create);
    resolve(lib, rt_path, "cudaStreamSynchronize", &rt.stream_sync);
    resolve(lib, rt_path, "cudaStreamDestroy", &rt.stream_destroy);
    resolve(lib, rt_path, "cudaGetErrorString", &rt.error_string);

    if (!(kernels = dlopen(mod_path, RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "the kernel module cannot be loaded: %s\n", dlerror());
        exit(1);
    }
    resolve(kernels, mod_path, "kvs_cuda_kernels_abi", &mod.abi);
    resolve(kernels, mod_path, "kvs_cuda_sum", &mod.sum);
    resolve(kernels, mod_path, "kvs_cuda_update", &mod.update);
    if (mod.abi() != KVS_CUDA_KERNELS_ABI) {
        fprintf(stderr, "%s is of ABI %d, not %d\n", mod_path, mod.abi(), KVS_CUDA_KERNELS_ABI);
        exit(1);
    }

    rc = rt.device_count(&n);
    if (rc != 0 || n <= 0) {
        printf("no CUDA device (%s: %s)\n", rt_path,
               rc ? rt.error_string(rc) : "cudaGetDeviceCount found none");
        return 77;
    }
    rc = rt.stream_create(&stream);
    if (rc != 0) {
        fprintf(stderr, "cudaStreamCreate: %s\n", rt.error_string(rc));
        exit(1);
    }
    return 0;
}

#define FOR_DTYPE(test, i) cmocka_unit_test_prestate(test, (void *)&all_dtypes[i])

int main(void)
{
    const struct CMUnitTest tests[] = {
        FOR_DTYPE(test_sum, 0), FOR_DTYPE(test_sum, 1), FOR_DTYPE(test_sum, 2),
        FOR_DTYPE(test_sum, 3), FOR_DTYPE(test_sum, 4), FOR_DTYPE(test_sum, 5),
        FOR_DTYPE(test_sum, 6),
        cmocka_unit_test(test_sum_aliased),
        /* The float dtypes, the first four. */
        FOR_DTYPE(test_update, 0), FOR_DTYPE(test_update, 1), FOR_DTYPE(test_update, 2),
        FOR_DTYPE(test_update, 3),
        cmocka_unit_test(test_refusals),
    };
    int rc = load();

    if (rc != 0)
        return rc;
    rc = cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
    rt.stream_destroy(stream);
    return rc;
}
