/*
 * calib.c - this machine's memory bandwidth, for the byte-model floor of
 * scripts/bench: a copy (memcpy) and a sum of two float32 arrays into a
 * third (c[i] = a[i] + b[i]), on three buffers far larger than the last
 * level cache, with 1 thread and with every online CPU. Each figure is the
 * median of --runs runs; GB/s counts memory traffic, bytes read plus bytes
 * written (a copy of B bytes moves 2B, a sum 3B).
 *
 *   calib [--mib M] [--runs R]      three buffers of M MiB (default 1024), R runs (5)
 *
 * Prints a readable table, then one line for scripts/bench:
 *   calib,COPY_GBPS,SUM_GBPS,MIB,RUNS
 * with, for each kernel, the better of the two thread counts.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "round.h"

#define MAX_THREADS 64

typedef float v4f __attribute__((vector_size(16)));

enum { COPY, SUM };

struct pool {
    int nthreads, kernel;
    float *a, *b, *c;
    size_t n;                          /* floats per buffer */
    pthread_barrier_t start, done;
    int quit;
};

struct worker {
    struct pool *p;
    int id;
};

static void part(const struct pool *p, int id, size_t *lo, size_t *hi)
{
    size_t per = (p->n / (size_t)p->nthreads) & ~(size_t)1023;   /* 4 KiB chunks */

    *lo = per * (size_t)id;
    *hi = id == p->nthreads - 1 ? p->n : *lo + per;
}

static void sum_range(float *restrict c, const float *restrict a, const float *restrict b,
                      size_t lo, size_t hi)
{
    size_t i = lo;

    for (; i + 16 <= hi; i += 16) {
        v4f x0, x1, x2, x3, y0, y1, y2, y3;

        memcpy(&x0, a + i, 16); memcpy(&x1, a + i + 4, 16);
        memcpy(&x2, a + i + 8, 16); memcpy(&x3, a + i + 12, 16);
        memcpy(&y0, b + i, 16); memcpy(&y1, b + i + 4, 16);
        memcpy(&y2, b + i + 8, 16); memcpy(&y3, b + i + 12, 16);
        x0 += y0; x1 += y1; x2 += y2; x3 += y3;
        memcpy(c + i, &x0, 16); memcpy(c + i + 4, &x1, 16);
        memcpy(c + i + 8, &x2, 16); memcpy(c + i + 12, &x3, 16);
    }
    for (; i < hi; i++)
        c[i] = a[i] + b[i];
}

static void work(struct pool *p, int id)
{
    size_t lo, hi;

    part(p, id, &lo, &hi);
    if (p->kernel == COPY)
        memcpy(p->c + lo, p->a + lo, (hi - lo) * sizeof(float));
    else
        sum_range(p->c, p->a, p->b, lo, hi);
}

static void *thread_main(void *arg)
{
    struct worker *w = arg;

    for (;;) {
        pthread_barrier_wait(&w->p->start);
        if (w->p->quit)
            return NULL;
        work(w->p, w->id);
        pthread_barrier_wait(&w->p->done);
    }
}

/* Seconds of `runs` passes of the kernel over the whole buffers: the
 * median, and the fastest and slowest in lo and hi. */
static double measure(struct pool *p, int kernel, int runs, double *lo, double *hi)
{
    double t[64];

    p->kernel = kernel;
    for (int r = 0; r < runs; r++) {
        double t0 = rh_now();

        if (p->nthreads > 1)
            pthread_barrier_wait(&p->start);
        work(p, 0);
        if (p->nthreads > 1)
            pthread_barrier_wait(&p->done);
        t[r] = rh_now() - t0;
        if (p->c[p->n / 3] != (kernel == COPY ? p->a[p->n / 3]
                                              : p->a[p->n / 3] + p->b[p->n / 3])) {
            fprintf(stderr, "calib: the %s kernel computed a wrong value\n",
                    kernel == COPY ? "copy" : "sum");
            exit(1);
        }
    }
    {
        double m = rh_median(t, runs);   /* sorts t */

        *lo = t[0];
        *hi = t[runs - 1];
        return m;
    }
}

/* GB/s of both kernels with nthreads threads: gbps[kernel][0] the median
 * run, [1] the slowest, [2] the fastest. */
static void bench(float *a, float *b, float *c, size_t n, int nthreads, int runs,
                  double gbps[2][3])
{
    struct pool p = { .nthreads = nthreads, .a = a, .b = b, .c = c, .n = n };
    struct worker w[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    double bytes = (double)n * sizeof(float);

    pthread_barrier_init(&p.start, NULL, (unsigned)nthreads);
    pthread_barrier_init(&p.done, NULL, (unsigned)nthreads);
    for (int i = 1; i < nthreads; i++) {
        w[i] = (struct worker){ &p, i };
        if (pthread_create(&th[i], NULL, thread_main, &w[i]) != 0) {
            fprintf(stderr, "calib: pthread_create failed\n");
            exit(1);
        }
    }
    for (int k = COPY; k <= SUM; k++) {
        double traffic = (k == COPY ? 2.0 : 3.0) * bytes, lo, hi, m;

        measure(&p, k, 1, &lo, &hi);   /* warm-up */
        m = measure(&p, k, runs, &lo, &hi);
        gbps[k][0] = traffic / m / 1e9;
        gbps[k][1] = traffic / hi / 1e9;
        gbps[k][2] = traffic / lo / 1e9;
    }
    p.quit = 1;
    if (nthreads > 1)
        pthread_barrier_wait(&p.start);
    for (int i = 1; i < nthreads; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&p.start);
    pthread_barrier_destroy(&p.done);
}

int main(int argc, char **argv)
{
    long mib = 1024, runs = 5, online = sysconf(_SC_NPROCESSORS_ONLN);
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    int counts[2] = { 1, (int)(online < 1 ? 1 : online > MAX_THREADS ? MAX_THREADS : online) };
    double best_copy = 0, best_sum = 0;
    size_t n;
    float *a, *b, *c;

    rh_who = "calib";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = atol(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: calib [--mib M] [--runs R]\n");
            return 2;
        }
    }
    if (mib < 16 || mib > 16384 || runs < 1 || runs > 64) {
        fprintf(stderr, "calib: --mib 16..16384, --runs 1..64\n");
        return 2;
    }
    n = (size_t)mib << 18;             /* floats in mib MiB */
    a = rh_alloc(n * sizeof(float));
    b = rh_alloc(n * sizeof(float));
    c = rh_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {   /* touch every page before timing */
        a[i] = (float)(i & 1023);
        b[i] = 0.5f * (float)(i & 511);
    }
    memset(c, 0, n * sizeof(float));

    printf("calib: 3 buffers of %ld MiB", mib);
    if (llc > 0)
        printf(" (last level cache as reported: %ld MiB)", llc >> 20);
    printf(", median of %ld runs; GB/s = (bytes read + bytes written) / s\n", runs);
    printf("  %-8s %24s %24s\n", "threads", "copy GB/s (min..max)", "sum GB/s (min..max)");
    for (int k = 0; k < (counts[1] > 1 ? 2 : 1); k++) {
        double g[2][3];

        bench(a, b, c, n, counts[k], (int)runs, g);
        printf("  %-8d %8.2f (%5.1f..%5.1f)  %8.2f (%5.1f..%5.1f)\n", counts[k], g[COPY][0],
               g[COPY][1], g[COPY][2], g[SUM][0], g[SUM][1], g[SUM][2]);
        if (g[COPY][0] > best_copy)
            best_copy = g[COPY][0];
        if (g[SUM][0] > best_sum)
            best_sum = g[SUM][0];
    }
    printf("calib,%.3f,%.3f,%ld,%ld\n", best_copy, best_sum, mib, runs);
    free(a);
    free(b);
    free(c);
    return 0;
}
