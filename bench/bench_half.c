/*
 * bench_half.c - what a round of the `local` store (push four gradients of
 * one key, pull the sum) costs in float16 and bfloat16 against float32 with
 * the same number of elements. Half types are summed in float32 and rounded
 * once, so each element is converted on the way in and out; this shows
 * what that costs.
 *
 * A benchmark, not a test: it prints numbers and exits 0; it aborts only
 * when a pulled value is wrong. Only the public API in kvs.h is used.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L        /* clock_gettime */
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs.h"
#include "bench.h"

#define DEFAULT_MAX ((size_t)16 << 20)           /* float32 bytes of the largest case */
#define MIN_REPS    5
#define MAX_REPS    100000
#define WARMUP_REPS 3
#define NSRC        4
#define NDT         3

static const kvs_dtype_t dtypes[NDT] = { KVS_FLOAT32, KVS_FLOAT16, KVS_BFLOAT16 };

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [--max-size BYTES] [--seconds S] [--help]\n"
            "  --max-size BYTES  largest float32 array, 4K..1G (suffixes K, M, G; default 16M);\n"
            "                    sizes run 4 KiB, 16 KiB, ... in powers of 4, and the half\n"
            "                    types use the same element counts (half the bytes)\n"
            "  --seconds S       measuring time per size and dtype, 0 < S <= 600 (default 0.2)\n"
            "  --help            this text\n",
            prog);
}

/* Inputs are integers below 32, so every sum of four is exact in all three
 * dtypes and the pulled value can be checked bit for bit. */
static uint16_t encode(kvs_dtype_t dt, unsigned v, float *f32)
{
    uint32_t u;
    int e;

    *f32 = (float)v;
    if (dt == KVS_BFLOAT16) {
        memcpy(&u, f32, sizeof u);
        return (uint16_t)(u >> 16);    /* exact: at most 8 significant bits */
    }
    if (v == 0)
        return 0;
    e = 31 - __builtin_clz(v);         /* v = 2^e * 1.m, e <= 10 */
    return (uint16_t)(((unsigned)(e + 15) << 10) | ((v << (10 - e)) & 0x3ffu));
}

static double run_case(kvs_dtype_t dt, size_t n, double seconds)
{
    size_t es = kvs_dtype_size(dt), bytes = n * es;
    void *src[NSRC], *want = xalloc(bytes), *out = xalloc(bytes);
    kvs_array_t vals[NSRC], out_arr;
    kvs_key_t keys[NSRC], key = KVS_INT_KEY(1);
    double *times = alloc_times(MAX_REPS), t_end = 0.0, med;
    long reps = 0;
    kvs_t *kv = NULL;

    for (int s = 0; s < NSRC; s++)
        src[s] = xalloc(bytes);
    for (size_t i = 0; i < n; i++) {
        unsigned sum = 0;
        uint16_t h;
        float f;

        for (int s = 0; s < NSRC; s++) {
            unsigned v = (unsigned)((i * (size_t)(2 * s + 3) + (size_t)s) % 32);

            h = encode(dt, v, &f);
            if (es == 2)
                ((uint16_t *)src[s])[i] = h;
            else
                ((float *)src[s])[i] = f;
            sum += v;
        }
        h = encode(dt, sum, &f);
        if (es == 2)
            ((uint16_t *)want)[i] = h;
        else
            ((float *)want)[i] = f;
    }

    check_kvs(kvs_create("local", &kv), NULL, "kvs_create(\"local\")");
    out_arr = (kvs_array_t){ .data = out, .dtype = dt, .ndim = 1, .shape = { (int64_t)n },
                             .device = KVS_HOST };
    memset(out, 0, bytes);
    check_kvs(kvs_init(kv, 1, &key, &out_arr), kv, "kvs_init");
    for (int s = 0; s < NSRC; s++) {
        keys[s] = key;
        vals[s] = (kvs_array_t){ .data = src[s], .dtype = dt, .ndim = 1,
                                 .shape = { (int64_t)n }, .device = KVS_HOST };
    }
    for (long rep = -WARMUP_REPS;
         bench_more(rep, reps, MIN_REPS, MAX_REPS, seconds, &t_end); rep++) {
        double t;

        memset(out, 0xff, bytes);
        t = bench_push_pull(kv, NSRC, keys, vals, key, &out_arr);
        if (memcmp(out, want, bytes) != 0) {
            fprintf(stderr, "bench_half: WRONG VALUE in a %s round of %zu elements\n",
                    kvs_dtype_name(dt), n);
            abort();
        }
        if (rep >= 0)
            times[reps++] = t;
    }
    med = rh_median(times, reps);
    kvs_close(kv);
    for (int s = 0; s < NSRC; s++)
        free(src[s]);
    free(want);
    free(out);
    free(times);
    return med;
}

int main(int argc, char **argv)
{
    size_t max_size = DEFAULT_MAX;
    double seconds = 0.2;

    bench_who = "bench_half";
    for (int i = 1; i < argc; i++) {
        const char *v;

        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout, argv[0]);
            return 0;
        } else if ((v = opt_value(argc, argv, &i, "--max-size", 1)) != NULL) {
            if (parse_max_size(v, &max_size) != 0) {
                fprintf(stderr, "%s: --max-size '%s': want bytes in 4K..1G\n", argv[0], v);
                return 2;
            }
        } else if ((v = opt_value(argc, argv, &i, "--seconds", 1)) != NULL) {
            if (parse_seconds(v, &seconds) != 0) {
                fprintf(stderr, "%s: --seconds '%s': want a number in (0, 600]\n", argv[0], v);
                return 2;
            }
        } else {
            fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], argv[i]);
            usage(stderr, argv[0]);
            return 2;
        }
    }

    printf("bench_half: kvs 'local' push(4 values of one key) + pull, by dtype\n");
    printf("  library:  %s\n", kvs_version(NULL, NULL, NULL));
    printf("  per case: %d warm-up rounds, then >= %d repetitions over %.3g s; medians\n",
           WARMUP_REPS, MIN_REPS, seconds);
    printf("  x f32:    the dtype's round time over float32's for the same element count\n\n");
    printf("%-10s %10s %10s %10s %8s %8s\n", "elements", "f32_us", "f16_us", "bf16_us",
           "f16 x", "bf16 x");
    fflush(stdout);
    for (size_t bytes = BENCH_MIN_SIZE; bytes <= max_size; bytes *= 4) {
        size_t n = bytes / sizeof(float);
        double us[NDT];
        char label[32];

        for (int d = 0; d < NDT; d++)
            us[d] = run_case(dtypes[d], n, seconds) * 1e6;
        snprintf(label, sizeof label, "%zu", n);
        printf("%-10s %10.2f %10.2f %10.2f %8.2f %8.2f\n", label, us[0], us[1], us[2],
               us[1] / us[0], us[2] / us[0]);
        fflush(stdout);
        if (bytes > SIZE_MAX / 4)
            break;
    }
    return 0;
}
