/*
 * bench_gpu.c - nccl-tests-style bandwidth of one all-reduce over the GPUs
 * of this machine: each GPU pushes a float32 gradient of one key and pulls
 * the sum back (kvs_pushpull), through the `device` and `nccl` store types,
 * against NCCL's own ncclAllReduce in the same run. For each size it
 * prints the median time, the algorithm bandwidth (bytes / time) and the
 * bus bandwidth (algorithm bandwidth * 2(n-1)/n, as nccl-tests reports
 * all-reduce).
 *
 * With --dist, run as the workers of a job (kvsrun -n N bench_gpu --dist),
 * each worker pushes its gradient from GPU rank % GPUs through dist_sync
 * and pulls the sum back onto it; rank 0 prints the same columns, for N
 * workers, to hold against the single-process lines of a plain run.
 *
 * A benchmark, not a test: without a CUDA device it says why and exits 0;
 * it aborts only when a pulled value is wrong. It loads the CUDA runtime
 * and NCCL itself (KVS_CUDART, KVS_NCCL, as libkvs does) and uses only the
 * public API of kvs.h. Under the tests' stand-in runtime it runs, and its
 * numbers mean nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs.h"
#include "bench.h"

#define MAX_DEV 16
#define MEMCPY_DEFAULT 4
#define NCCL_FLOAT32 7
#define NCCL_SUM 0

static struct {
    int (*count)(int *n);
    int (*set_device)(int dev);
    int (*malloc)(void **p, size_t bytes);
    int (*free)(void *p);
    int (*memcpy)(void *dst, const void *src, size_t bytes, int kind);
    int (*stream_create)(void **s);
    int (*stream_sync)(void *s);
    int (*stream_destroy)(void *s);
    const char *(*error)(int err);
} rt;

static struct {
    int (*init_all)(void **comms, int n, const int *devs);
    int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, void *comm,
                      void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*comm_destroy)(void *comm);
} nccl;

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);

    if (!p) {
        printf("%s: skipped: the CUDA library has no %s\n", bench_who, name);
        exit(0);
    }
    return p;
}

/* The number of devices, or 0 after saying why there are none. */
static int load_cuda(void)
{
    const char *path = getenv("KVS_CUDART");
    void *lib = dlopen(path && *path ? path : "libcudart.so.13", RTLD_NOW);
    int n = 0, rc;

    if (!lib) {
        printf("%s: skipped: no CUDA runtime (%s)\n", bench_who, dlerror());
        return 0;
    }
    *(void **)&rt.count = sym(lib, "cudaGetDeviceCount");
    *(void **)&rt.set_device = sym(lib, "cudaSetDevice");
    *(void **)&rt.malloc = sym(lib, "cudaMalloc");
    *(void **)&rt.free = sym(lib, "cudaFree");
    *(void **)&rt.memcpy = sym(lib, "cudaMemcpy");
    *(void **)&rt.stream_create = sym(lib, "cudaStreamCreate");
    *(void **)&rt.stream_sync = sym(lib, "cudaStreamSynchronize");
    *(void **)&rt.stream_destroy = sym(lib, "cudaStreamDestroy");
    *(void **)&rt.error = sym(lib, "cudaGetErrorString");
    if ((rc = rt.count(&n)) != 0 || n <= 0) {
        printf("%s: skipped: no CUDA device (%s)\n", bench_who,
               rc ? rt.error(rc) : "none found");
        return 0;
    }
    return n;
}

static int load_nccl(void)
{
    const char *path = getenv("KVS_NCCL");
    void *lib = dlopen(path && *path ? path : "libnccl.so.2", RTLD_NOW);

    if (!lib) {
        printf("%s: NCCL not measured: %s\n", bench_who, dlerror());
        return 0;
    }
    *(void **)&nccl.init_all = sym(lib, "ncclCommInitAll");
    *(void **)&nccl.all_reduce = sym(lib, "ncclAllReduce");
    *(void **)&nccl.group_start = sym(lib, "ncclGroupStart");
    *(void **)&nccl.group_end = sym(lib, "ncclGroupEnd");
    *(void **)&nccl.comm_destroy = sym(lib, "ncclCommDestroy");
    return 1;
}

static void check_cuda(int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "%s: %s: %s\n", bench_who, what, rt.error(rc));
        exit(1);
    }
}

struct bufs {
    int n;
    void *in[MAX_DEV], *out[MAX_DEV], *stream[MAX_DEV];
    kvs_array_t vin[MAX_DEV], vout[MAX_DEV];
    kvs_key_t keys[MAX_DEV];
};

/* The first and last of count floats on device d must be 1 + 2 + ... + n. */
static void verify_out(const void *out, size_t count, int n, int d, const char *who)
{
    float want = (float)(n * (n + 1) / 2), got[2];

    check_cuda(rt.memcpy(&got[0], out, sizeof(float), MEMCPY_DEFAULT), "cudaMemcpy");
    check_cuda(rt.memcpy(&got[1], (const float *)out + count - 1, sizeof(float),
                         MEMCPY_DEFAULT), "cudaMemcpy");
    if (got[0] != want || got[1] != want) {
        fprintf(stderr, "%s: %s: GPU %d pulled %g, %g; want %g\n", bench_who, who, d,
                got[0], got[1], (double)want);
        exit(1);
    }
}

/* Every out must hold 1 + 2 + ... + n in each element. */
static void verify(const struct bufs *b, size_t count, const char *who)
{
    for (int d = 0; d < b->n; d++)
        verify_out(b->out[d], count, b->n, d, who);
}

static double median_free(double *t, int n)
{
    double m = rh_median(t, n);

    free(t);
    return m;
}

static void report(const char *who, size_t bytes, int n, double t)
{
    char label[32];
    double alg = (double)bytes / t / 1e9;

    size_label(label, sizeof label, bytes);
    printf("%-8s %-6s %12.1f %10.2f %10.2f\n", label, who, t * 1e6, alg,
           alg * 2.0 * (n - 1) / n);
}

/* The median time of a kvs_pushpull of every GPU's gradient of one key. */
static double time_store(const char *type, struct bufs *b, size_t count, int iters)
{
    double *t = alloc_times(iters);
    kvs_t *kv;

    check_kvs(kvs_create(type, &kv), NULL, "kvs_create");
    check_kvs(kvs_init(kv, 1, b->keys, &b->vin[0]), kv, "kvs_init");
    for (int i = -1; i < iters; i++) {                 /* -1: a warm-up */
        double t0 = now_s();

        check_kvs(kvs_pushpull(kv, b->n, b->keys, b->vin, b->vout, 0), kv, "kvs_pushpull");
        if (i >= 0)
            t[i] = now_s() - t0;
    }
    verify(b, count, type);
    kvs_close(kv);
    return median_free(t, iters);
}

static double time_nccl(void **comms, struct bufs *b, size_t count, int iters)
{
    double *t = alloc_times(iters);

    for (int i = -1; i < iters; i++) {
        double t0 = now_s();

        nccl.group_start();
        for (int d = 0; d < b->n; d++)
            if (nccl.all_reduce(b->in[d], b->out[d], count, NCCL_FLOAT32, NCCL_SUM, comms[d],
                                b->stream[d]) != 0)
                exit((fprintf(stderr, "%s: ncclAllReduce failed\n", bench_who), 1));
        if (nccl.group_end() != 0)
            exit((fprintf(stderr, "%s: ncclGroupEnd failed\n", bench_who), 1));
        for (int d = 0; d < b->n; d++)
            check_cuda(rt.stream_sync(b->stream[d]), "cudaStreamSynchronize");
        if (i >= 0)
            t[i] = now_s() - t0;
    }
    verify(b, count, "NCCL");
    return median_free(t, iters);
}

/* Device d's count floats, each v. */
static void *dev_filled(int d, size_t count, float v)
{
    float *h = xalloc(count * sizeof *h);
    void *p;

    for (size_t j = 0; j < count; j++)
        h[j] = v;
    check_cuda(rt.set_device(d), "cudaSetDevice");
    check_cuda(rt.malloc(&p, count * sizeof *h), "cudaMalloc");
    check_cuda(rt.memcpy(p, h, count * sizeof *h, MEMCPY_DEFAULT), "cudaMemcpy");
    free(h);
    return p;
}

/* --dist: this worker's part of a dist_sync all-reduce, a key per size. */
static void run_dist(int ndev, size_t max, int iters)
{
    kvs_t *kv;
    int rank, nw, d, key = 0;

    check_kvs(kvs_create("dist_sync", &kv), NULL, "kvs_create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    d = rank % ndev;
    if (rank == 0) {
        printf("dist_sync, %d workers on %d GPU%s; %d pushpulls per size, medians\n", nw,
               ndev < nw ? ndev : nw, ndev == 1 || nw == 1 ? "" : "s", iters);
        printf("%-8s %-6s %12s %10s %10s\n", "size", "what", "time us", "algbw GB/s",
               "busbw GB/s");
    }
    for (size_t bytes = BENCH_MIN_SIZE; bytes <= max; bytes *= 4, key++) {
        size_t count = bytes / sizeof(float);
        double *t = alloc_times(iters), m;
        kvs_key_t k = KVS_INT_KEY(key);
        kvs_array_t in = { .data = dev_filled(d, count, (float)(rank + 1)),
                           .dtype = KVS_FLOAT32, .ndim = 1, .shape = { (int64_t)count },
                           .device = KVS_CUDA(d) }, out = in;

        out.data = dev_filled(d, count, 0);
        check_kvs(kvs_init(kv, 1, &k, &in), kv, "kvs_init");
        for (int i = -1; i < iters; i++) {             /* -1: a warm-up */
            double t0 = now_s();

            check_kvs(kvs_pushpull(kv, 1, &k, &in, &out, 0), kv, "kvs_pushpull");
            if (i >= 0)
                t[i] = now_s() - t0;
        }
        verify_out(out.data, count, nw, d, "dist");
        check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
        m = median_free(t, iters);
        if (rank == 0)
            report("dist", bytes, nw, m);
        rt.free(in.data);
        rt.free(out.data);
    }
    kvs_close(kv);
}

int main(int argc, char **argv)
{
    size_t max = (size_t)1 << 30;
    int iters = 20, ndev, have_nccl, dist = 0, devs[MAX_DEV];
    void *comms[MAX_DEV];
    struct bufs b = { 0 };

    bench_who = "bench_gpu";
    for (int i = 1; i < argc; i++) {
        const char *v;

        if ((v = opt_value(argc, argv, &i, "--max-size", 1))) {
            if (parse_max_size(v, &max) != 0)
                return 2;
        } else if ((v = opt_value(argc, argv, &i, "--iters", 1))) {
            iters = atoi(v);
            if (iters < 1 || iters > 100000)
                return (fprintf(stderr, "--iters: 1..100000\n"), 2);
        } else if (strcmp(argv[i], "--dist") == 0) {
            dist = 1;
        } else {
            fprintf(stderr, "usage: %s [--max-size BYTES (4K..1G, default 1G)] "
                    "[--iters N (default 20)] [--dist (as kvsrun's workers)]\n", argv[0]);
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if ((ndev = load_cuda()) == 0)
        return 0;
    if (dist) {
        run_dist(ndev, max, iters);
        return 0;
    }
    b.n = ndev < MAX_DEV ? ndev : MAX_DEV;
    have_nccl = load_nccl();
    for (int d = 0; d < b.n; d++)
        devs[d] = d;
    if (have_nccl && nccl.init_all(comms, b.n, devs) != 0) {
        printf("%s: NCCL not measured: ncclCommInitAll failed\n", bench_who);
        have_nccl = 0;
    }
    printf("%d GPU%s; %d pushpulls per size, medians\n", b.n, b.n == 1 ? "" : "s", iters);
    printf("dist_sync with device arrays: run kvsrun -n N %s --dist\n", argv[0]);
    printf("%-8s %-6s %12s %10s %10s\n", "size", "what", "time us", "algbw GB/s",
           "busbw GB/s");
    for (size_t bytes = BENCH_MIN_SIZE; bytes <= max; bytes *= 4) {
        size_t count = bytes / sizeof(float);
        float *ones = xalloc(bytes);

        for (int d = 0; d < b.n; d++) {
            for (size_t j = 0; j < count; j++)
                ones[j] = (float)(d + 1);
            check_cuda(rt.set_device(d), "cudaSetDevice");
            check_cuda(rt.malloc(&b.in[d], bytes), "cudaMalloc");
            check_cuda(rt.malloc(&b.out[d], bytes), "cudaMalloc");
            if (!b.stream[d])
                check_cuda(rt.stream_create(&b.stream[d]), "cudaStreamCreate");
            check_cuda(rt.memcpy(b.in[d], ones, bytes, MEMCPY_DEFAULT), "cudaMemcpy");
            b.keys[d] = KVS_INT_KEY(0);
            b.vin[d] = (kvs_array_t){ .data = b.in[d], .dtype = KVS_FLOAT32, .ndim = 1,
                                      .shape = { (int64_t)count }, .device = KVS_CUDA(d) };
            b.vout[d] = b.vin[d];
            b.vout[d].data = b.out[d];
        }
        free(ones);
        report("device", bytes, b.n, time_store("device", &b, count, iters));
        report("nccl", bytes, b.n, time_store("nccl", &b, count, iters));
        if (have_nccl)
            report("NCCL", bytes, b.n, time_nccl(comms, &b, count, iters));
        for (int d = 0; d < b.n; d++) {
            rt.free(b.in[d]);
            rt.free(b.out[d]);
        }
    }
    for (int d = 0; d < b.n; d++) {
        if (have_nccl)
            nccl.comm_destroy(comms[d]);
        if (b.stream[d])
            rt.stream_destroy(b.stream[d]);
    }
    return 0;
}
