/*
 * dist_device.c - one worker of a dist job that keeps its arrays on GPUs,
 * as a training program does: it allocates them with cudaMalloc (the
 * runtime KVS_CUDART names, the tests' stand-in), fills and reads them
 * with cudaMemcpy, and hands KVS_CUDA(i) arrays to every call; some of
 * its pushes it writes with cudaMemcpyAsync on the legacy default stream
 * and leaves queued, as a training step's kernels leave its gradients,
 * which libkvs must wait for before kvsd or a copy reads them. Run by
 * tests/test_dist_device.sh:
 *
 *   dist_device SCENARIO TYPE
 *
 * sums      init from a device array; pushes of device arrays, of a key
 *           pushed from two devices and the host in one call, pulls onto
 *           devices and the host, pushpull in place, a row-sparse pull onto
 *           a device, views, sgd (dist_sync, dist_device_sync)
 * async     dist_async: every push of every worker counts
 * compress  2bit compression of device pushes (threshold 0.5, sgd lr=1)
 * refused   a device array the runtime does not know: KVS_EDEVICE, nothing
 *           sent
 * churn     1100 pushes, each from an allocation made for it and freed
 *           after: more buffers than a worker registers with kvsd at a
 *           time, and addresses used again by other allocations; then
 *           rank R writes $KVS_TEST_DIR/ready.R and waits for
 *           $KVS_TEST_DIR/go (the test reads kvsd's counters meanwhile)
 * live      1100 allocations alive at once (more than a worker registers at
 *           a time), pushed from one by one, then all in one call (every
 *           number pinned: the rest through staging); then ready.R and go
 *           as churn (needs 1100 descriptors: the stand-in's memfds)
 * hold      rank R pushes from two device allocations, writes ready.R;
 *           rank 1 then sleeps (the test kills it), rank 0 waits for go
 *           and expects its next barrier to fail with KVS_EPEERDEAD
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distutil.h"

#define N 40                           /* elements of a value: 8 rows of 5 */

static struct {
    int (*set_device)(int device);
    int (*malloc)(void **p, size_t bytes);
    int (*free)(void *p);
    int (*memcpy)(void *dst, const void *src, size_t bytes, int kind);
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, int kind, void *stream);
} cuda;

enum { H2D = 1, D2H = 2 };             /* cudaMemcpyKind */

/* N floats on CUDA device i. */
static void *dev_alloc(int i)
{
    void *p;

    if (cuda.set_device(i) != 0 || cuda.malloc(&p, N * sizeof(float)) != 0)
        die("cudaMalloc failed");
    return p;
}

static void to_dev(void *d, float v)
{
    float h[N];

    fill(h, N, v);
    if (cuda.memcpy(d, h, sizeof h, H2D) != 0)
        die("cudaMemcpy to the device failed");
}

/* to_dev of memory on CUDA device i, queued on that device's legacy
 * default stream (the one libkvs's stream waits for) and not waited for.
 * The source stays put until the copy has run: each call takes the next
 * of QUEUED buffers, and no scenario queues that many without a call of
 * libkvs or a synchronous copy between, which run the queue. */
#define QUEUED 64

static void to_dev_queued(void *d, int i, float v)
{
    static float h[QUEUED][N];
    static int next;
    float *src = h[next++ % QUEUED];

    fill(src, N, v);
    if (cuda.set_device(i) != 0
        || cuda.memcpy_async(d, src, N * sizeof(float), H2D, NULL) != 0)
        die("cudaMemcpyAsync to the device failed");
}

static void expect_dev(const void *d, float v, const char *what)
{
    float h[N];

    if (cuda.memcpy(h, d, sizeof h, D2H) != 0)
        die("cudaMemcpy from the device failed");
    expect(h, N, v, what);
}

static kvs_array_t on(void *data, int device)
{
    kvs_array_t a = f32(data, 8, 5);

    a.device = device;
    return a;
}

static void sums(void)
{
    kvs_key_t keys[4] = { KVS_INT_KEY(1), KVS_INT_KEY(2), KVS_INT_KEY(2), KVS_INT_KEY(2) };
    void *d0 = dev_alloc(0), *d0b = dev_alloc(0), *d1 = dev_alloc(1), *out0 = dev_alloc(0);
    float h[N], ho[N], total = nw * (nw + 1) / 2.0f;
    kvs_array_t vals[4] = { on(d0, KVS_CUDA(0)), on(d0b, KVS_CUDA(0)), on(d1, KVS_CUDA(1)),
                            on(h, KVS_HOST) };
    kvs_array_t out = on(out0, KVS_CUDA(0)), hout = on(ho, KVS_HOST), view = on(NULL, KVS_HOST);

    to_dev(d0, 5.0f + (float)rank);    /* rank 0's value is the one stored */
    to_dev(d0b, 0.0f);
    ok(kvs_init(kv, 2, keys, vals), "init");
    ok(kvs_pull(kv, 1, &keys[0], &out, 0), "pull after init");
    expect_dev(out0, 5.0f, "key 1 after init");
    for (int round = 0; round < 3; round++) {
        to_dev_queued(d0, 0, (float)(rank + 1));
        to_dev_queued(d0b, 0, 1.0f);
        to_dev_queued(d1, 1, 2.0f);
        fill(h, N, 3.0f);
        ok(kvs_push(kv, 4, keys, vals, 0), "push");
        ok(kvs_pull(kv, 1, &keys[0], &out, 0), "pull onto KVS_CUDA(0)");
        expect_dev(out0, total, "key 1 pulled onto a device");
        ok(kvs_pull(kv, 1, &keys[1], &hout, 0), "pull onto the host");
        expect(ho, N, 6.0f * (float)nw, "key 2 (pushed from 2 devices and the host)");
    }
    /* pushpull in place, on a device */
    to_dev(d1, 1.0f);
    vals[2] = on(d1, KVS_CUDA(1));
    ok(kvs_pushpull(kv, 1, &keys[0], &vals[2], NULL, 0), "pushpull");
    expect_dev(d1, (float)nw, "pushpull in place on KVS_CUDA(1)");
    /* a view of a key pushed from devices is host memory */
    ok(kvs_pull_view(kv, 1, &keys[0], &view, 0), "pull_view");
    if (view.device != KVS_HOST)
        die("a dist view says device %d, not KVS_HOST", view.device);
    expect(view.data, N, (float)nw, "view");
    /* row-sparse pull onto a device: rows 1 and 6, the others zero */
    {
        int64_t ids[2] = { 1, 6 };
        kvs_array_t rows = { .data = ids, .dtype = KVS_INT64, .ndim = 1, .shape = { 2 } };

        to_dev(out0, -1.0f);
        ok(kvs_row_sparse_pull(kv, 1, &keys[0], &out, &rows, 0), "row_sparse_pull");
        if (cuda.memcpy(ho, out0, sizeof ho, D2H) != 0)
            die("cudaMemcpy from the device failed");
        for (int i = 0; i < N; i++)
            if (ho[i] != (i / 5 == 1 || i / 5 == 6 ? (float)nw : 0.0f))
                die("row-sparse pull: element %d is %g", i, ho[i]);
    }
    /* sgd lr=1 on the stored value: w = nw - sum of the ranks' gradients */
    ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer");
    to_dev(d0, 1.0f);
    ok(kvs_pushpull(kv, 1, &keys[0], &vals[0], &out, 0), "pushpull under sgd");
    expect_dev(out0, 0.0f, "key 1 after an sgd step");
    cuda.free(d0);
    cuda.free(d0b);
    cuda.free(d1);
    cuda.free(out0);
}

static void async(void)
{
    kvs_key_t k = KVS_STR_KEY("w");
    void *d = dev_alloc(1), *o = dev_alloc(0);
    kvs_array_t a = on(d, KVS_CUDA(1)), out = on(o, KVS_CUDA(0));

    to_dev(d, 0.0f);
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer");
    to_dev_queued(d, 1, 1.0f);
    for (int i = 0; i < 20; i++)
        ok(kvs_push(kv, 1, &k, &a, 0), "push");
    ok(kvs_barrier(kv), "barrier");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    expect_dev(o, -20.0f * (float)nw, "total of every push");
    cuda.free(d);
    cuda.free(o);
}

/* Every rank pushes 0.75 in each of 4 rounds: 2bit sends the threshold,
 * 0.5, each time (its residual grows by 0.25 a round), so sgd lr=1 takes
 * 4 * 0.5 per rank off the value. */
static void compress(void)
{
    kvs_key_t k = KVS_INT_KEY(3);
    void *d = dev_alloc(0), *o = dev_alloc(1);
    kvs_array_t a = on(d, KVS_CUDA(0)), out = on(o, KVS_CUDA(1));

    to_dev(d, 0.0f);
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer");
    ok(kvs_set_gradient_compression(kv, "2bit threshold=0.5"), "compression");
    to_dev(d, 0.75f);
    for (int round = 0; round < 4; round++)
        ok(kvs_push(kv, 1, &k, &a, 0), "push");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    expect_dev(o, -2.0f * (float)nw, "after 4 compressed rounds");
    cuda.free(d);
    cuda.free(o);
}

static void refused(void)
{
    float h[N];
    kvs_key_t k = KVS_INT_KEY(1);
    kvs_array_t a = on(h, KVS_CUDA(0));
    int rc = kvs_init(kv, 1, &k, &a);

    if (rc != KVS_EDEVICE || !strstr(kvs_last_error(kv), "not device memory"))
        die("a host pointer said to be on KVS_CUDA(0): %s (%s)", kvs_err_name(rc),
            kvs_last_error(kv));
    a.device = KVS_HOST;
    fill(h, N, 2.0f);
    ok(kvs_init(kv, 1, &k, &a), "init of the same key from the host");
    ok(kvs_pull(kv, 1, &k, &a, 0), "pull");
    expect(h, N, 2.0f, "value");
}

static void wait_file(const char *name)
{
    char path[4096];
    double end = now() + 30;

    snprintf(path, sizeof path, "%s/%s", getenv("KVS_TEST_DIR"), name);
    while (access(path, F_OK) != 0) {
        if (now() > end)
            die("%s did not appear within 30 s", path);
        usleep(10000);
    }
}

/* Writes $KVS_TEST_DIR/ready.RANK, for the test to look at kvsd. */
static void say_ready(void)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof path, "%s/ready.%d", getenv("KVS_TEST_DIR"), rank);
    if (!(f = fopen(path, "w")) || fclose(f) != 0)
        die("cannot write %s", path);
}

static void churn(void)
{
    kvs_key_t k = KVS_INT_KEY(4);
    float h[N];
    kvs_array_t out = on(h, KVS_HOST);

    fill(h, N, 0.0f);
    ok(kvs_init(kv, 1, &k, &out), "init");
    for (int i = 0; i < 1100; i++) {
        void *d = dev_alloc(i % 2);
        kvs_array_t a = on(d, KVS_CUDA(i % 2));

        to_dev(d, (float)(i + rank));
        ok(kvs_push(kv, 1, &k, &a, 0), "push");
        cuda.free(d);
        if (i % 100 == 99 || i < 3) {
            ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
            expect(h, N, (float)(nw * i) + nw * (nw - 1) / 2.0f, "the last push's sum");
        }
    }
    say_ready();
    wait_file("go");
}

static void live(void)
{
    enum { M = 1100 };
    kvs_key_t *keys = malloc(sizeof *keys * M);
    kvs_array_t *a = malloc(sizeof *a * M);
    float h[N];
    kvs_array_t out = on(h, KVS_HOST);

    if (!keys || !a)
        die("out of memory");
    fill(h, N, 0.0f);
    for (int i = 0; i < M; i++) {
        keys[i] = KVS_INT_KEY(100 + i);
        a[i] = out;
    }
    ok(kvs_init(kv, M, keys, a), "init");
    for (int i = 0; i < M; i++) {
        a[i] = on(dev_alloc(i % 2), KVS_CUDA(i % 2));
        to_dev(a[i].data, (float)(rank + 1));
    }
    for (int i = 0; i < M; i++)
        ok(kvs_push(kv, 1, &keys[i], &a[i], 0), "push");
    ok(kvs_push(kv, M, keys, a, 0), "push of every allocation in one call");
    for (int i = 0; i < M; i += M - 1) {
        ok(kvs_pull(kv, 1, &keys[i], &out, 0), "pull");
        expect(h, N, (float)(nw * (nw + 1) / 2), "the last round's sum");
    }
    say_ready();
    wait_file("go");
    for (int i = 0; i < M; i++)
        cuda.free(a[i].data);
    free(keys);
    free(a);
}

static void hold(void)
{
    kvs_key_t keys[2] = { KVS_INT_KEY(5), KVS_INT_KEY(6) };
    void *d[2] = { dev_alloc(0), dev_alloc(1) };
    kvs_array_t a[2] = { on(d[0], KVS_CUDA(0)), on(d[1], KVS_CUDA(1)) };
    int rc;

    to_dev(d[0], 1.0f);
    to_dev(d[1], 2.0f);
    ok(kvs_init(kv, 2, keys, a), "init");
    ok(kvs_push(kv, 2, keys, a, 0), "push");
    ok(kvs_pull(kv, 2, keys, a, 0), "pull");
    expect_dev(d[1], 2.0f * (float)nw, "key 6");
    say_ready();
    if (rank == 1) {
        sleep(60);
        die("rank 1 was not killed");
    }
    wait_file("go");
    rc = kvs_barrier(kv);
    if (rc != KVS_EPEERDEAD)
        die("barrier after rank 1 died: %s (%s)", kvs_err_name(rc), kvs_last_error(kv));
    kvs_close(kv);
    exit(0);
}

int main(int argc, char **argv)
{
    const char *path = getenv("KVS_CUDART");
    void *lib;
    int rc;

    scenario = argc > 1 ? argv[1] : "?";
    if (argc != 3 || !path)
        die("usage: KVS_CUDART=RUNTIME dist_device SCENARIO TYPE");
    if (!(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
        die("%s", dlerror());
    *(void **)&cuda.set_device = dlsym(lib, "cudaSetDevice");
    *(void **)&cuda.malloc = dlsym(lib, "cudaMalloc");
    *(void **)&cuda.free = dlsym(lib, "cudaFree");
    *(void **)&cuda.memcpy = dlsym(lib, "cudaMemcpy");
    *(void **)&cuda.memcpy_async = dlsym(lib, "cudaMemcpyAsync");
    if (!cuda.set_device || !cuda.malloc || !cuda.free || !cuda.memcpy || !cuda.memcpy_async)
        die("%s lacks the CUDA runtime's calls", path);
    if ((rc = kvs_create(argv[2], &kv)) != 0)
        die("kvs_create(%s): %s (%s)", argv[2], kvs_err_name(rc), kvs_last_error(NULL));
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (strcmp(scenario, "sums") == 0)
        sums();
    else if (strcmp(scenario, "async") == 0)
        async();
    else if (strcmp(scenario, "compress") == 0)
        compress();
    else if (strcmp(scenario, "refused") == 0)
        refused();
    else if (strcmp(scenario, "churn") == 0)
        churn();
    else if (strcmp(scenario, "live") == 0)
        live();
    else if (strcmp(scenario, "hold") == 0)
        hold();
    else
        die("unknown scenario");
    ok(kvs_barrier(kv), "last barrier");
    kvs_close(kv);
    dlclose(lib);
    return 0;
}
