/*
 * bench_local.c - how close a round of the `local` store (push four
 * gradients of one key, pull the sum) comes to plain C doing the same work
 * in the same run: out = a + b + c + d into a stored buffer, then a copy of
 * it to the output.
 *
 * A benchmark, not a test: it prints numbers and whether the speed goal was
 * met, and exits 0 either way; it aborts only when a pulled value is wrong.
 * It uses only the public API in kvs.h and must never reach into the
 * library's internals, so it measures what a user gets.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L        /* clock_gettime, posix_memalign, sysconf */
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvs.h"
#include "bench.h"

#define DEFAULT_MAX   ((size_t)64 << 20)         /* 64 MiB */
#define GOAL_SIZE     ((size_t)1 << 20)          /* the goal applies from 1 MiB up */
#define GOAL_RATIO    0.8
#define MIN_REPS      5
#define MAX_REPS      200000
#define WARMUP_REPS   3
#define NSRC          4

/* Bytes a round must move at the least: read the four inputs, write the
 * sum, read it back and write the output. Both sides are charged the same,
 * so the ratio is the ratio of times. */
#define TRAFFIC_FACTOR 7.0

struct opts {
    size_t max_size;
    double seconds;
    int threads;                       /* -1: leave the library's default */
};

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [--max-size BYTES] [--seconds S] [--threads N] [--help]\n"
            "  --max-size BYTES  largest float32 array, 4K..1G (suffixes K, M, G = KiB, MiB, GiB;\n"
            "                    default 64M); sizes run 4 KiB, 16 KiB, ... in powers of 4\n"
            "  --seconds S       measuring time per size, 0 < S <= 600 (default 0.3);\n"
            "                    at least %d repetitions are taken whatever S is\n"
            "  --threads N       kvs threads (KVS_OPT_THREADS), 0..64, 0 = library default;\n"
            "                    the plain C loop is always single-threaded\n"
            "  --help            this text\n",
            prog, MIN_REPS);
}

static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    long v;

    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static void parse_args(int argc, char **argv, struct opts *o)
{
    o->max_size = DEFAULT_MAX;
    o->seconds = 0.3;
    o->threads = -1;

    for (int i = 1; i < argc; i++) {
        const char *v;

        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout, argv[0]);
            exit(0);
        } else if ((v = opt_value(argc, argv, &i, "--max-size", 1)) != NULL) {
            if (parse_max_size(v, &o->max_size) != 0) {
                fprintf(stderr, "%s: --max-size '%s': want bytes in 4K..1G\n", argv[0], v);
                exit(2);
            }
        } else if ((v = opt_value(argc, argv, &i, "--seconds", 1)) != NULL) {
            if (parse_seconds(v, &o->seconds) != 0) {
                fprintf(stderr, "%s: --seconds '%s': want a number in (0, 600]\n", argv[0], v);
                exit(2);
            }
        } else if ((v = opt_value(argc, argv, &i, "--threads", 1)) != NULL) {
            if (parse_int(v, 0, 64, &o->threads) != 0) {
                fprintf(stderr, "%s: --threads '%s': want an integer in 0..64\n", argv[0], v);
                exit(2);
            }
        } else {
            fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], argv[i]);
            usage(stderr, argv[0]);
            exit(2);
        }
    }
}

/* The plain C side: the same sum and copy a push/pull round does, on one
 * thread, kept out of line so it is timed as one call like the kvs side. */
__attribute__((noinline))
static void plain_round(float *restrict stored, float *restrict out,
                        const float *restrict a, const float *restrict b,
                        const float *restrict c, const float *restrict d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        stored[i] = a[i] + b[i] + c[i] + d[i];
    memcpy(out, stored, n * sizeof(float));
}

/* Out must equal want bit for bit: the inputs are small multiples of 1/4,
 * so their sum is exact in float32 in any order. */
static void verify(const float *out, const float *want, size_t n, const char *who,
                   size_t bytes, long rep)
{
    if (memcmp(out, want, n * sizeof(float)) == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&out[i], &want[i], sizeof(float)) != 0) {
            fprintf(stderr,
                    "bench_local: WRONG VALUE from %s at size %zu bytes, %s %ld: "
                    "element %zu is %.9g, expected %.9g\n",
                    who, bytes, rep < 0 ? "warm-up round" : "repetition",
                    rep < 0 ? rep + WARMUP_REPS + 1 : rep + 1, i, (double)out[i],
                    (double)want[i]);
            abort();
        }
    }
}

struct result {
    size_t bytes;
    long reps;
    double kvs_us, plain_us;
};

static kvs_t *open_store(const struct opts *o, int64_t *threads_used)
{
    kvs_t *kv = NULL;

    check_kvs(kvs_create("local", &kv), NULL, "kvs_create(\"local\")");
    if (o->threads >= 0)
        check_kvs(kvs_set_option(kv, KVS_OPT_THREADS, o->threads), kv,
                  "kvs_set_option(KVS_OPT_THREADS)");
    check_kvs(kvs_get_option(kv, KVS_OPT_THREADS, threads_used), kv,
              "kvs_get_option(KVS_OPT_THREADS)");
    return kv;
}

static void run_size(const struct opts *o, size_t bytes, struct result *r)
{
    size_t n = bytes / sizeof(float);
    float *src[NSRC], *want, *stored, *plain_out, *kvs_out;
    kvs_array_t vals[NSRC], out_arr, init_arr;
    kvs_key_t keys[NSRC];
    kvs_key_t key = KVS_INT_KEY(1);
    double *kt, *pt;
    int64_t threads_used;
    kvs_t *kv;
    long reps = 0;
    double t_end = 0.0;

    for (int s = 0; s < NSRC; s++)
        src[s] = xalloc(bytes);
    want = xalloc(bytes);
    stored = xalloc(bytes);
    plain_out = xalloc(bytes);
    kvs_out = xalloc(bytes);
    kt = alloc_times(MAX_REPS);
    pt = alloc_times(MAX_REPS);

    for (size_t i = 0; i < n; i++) {
        src[0][i] = (float)(i % 97);
        src[1][i] = (float)(i % 89) * 0.5f;
        src[2][i] = -(float)(i % 83);
        src[3][i] = (float)(i % 7) * 0.25f;
        want[i] = src[0][i] + src[1][i] + src[2][i] + src[3][i];
        stored[i] = 0.0f;
    }

    /* A fresh store per size, so that earlier keys do not hold memory. */
    kv = open_store(o, &threads_used);
    init_arr = (kvs_array_t){ .data = kvs_out, .dtype = KVS_FLOAT32, .ndim = 1,
                              .shape = { (int64_t)n }, .device = KVS_HOST };
    memset(kvs_out, 0, bytes);
    check_kvs(kvs_init(kv, 1, &key, &init_arr), kv, "kvs_init");
    for (int s = 0; s < NSRC; s++) {
        keys[s] = key;
        vals[s] = (kvs_array_t){ .data = src[s], .dtype = KVS_FLOAT32, .ndim = 1,
                                 .shape = { (int64_t)n }, .device = KVS_HOST };
    }
    out_arr = init_arr;

    /* Repetitions alternate kvs and plain so that clock or thermal drift
     * during the run hits both alike. The outputs are poisoned with NaN
     * before each round (untimed), so a round that writes nothing fails. */
    for (long rep = -WARMUP_REPS;
         bench_more(rep, reps, MIN_REPS, MAX_REPS, o->seconds, &t_end); rep++) {
        double t0, t1, t;

        memset(kvs_out, 0xff, bytes);
        t = bench_push_pull(kv, NSRC, keys, vals, key, &out_arr);
        verify(kvs_out, want, n, "kvs", bytes, rep);
        if (rep >= 0)
            kt[reps] = t;

        memset(plain_out, 0xff, bytes);
        t0 = now_s();
        plain_round(stored, plain_out, src[0], src[1], src[2], src[3], n);
        t1 = now_s();
        verify(plain_out, want, n, "plain C", bytes, rep);
        if (rep >= 0)
            pt[reps++] = t1 - t0;
    }

    r->bytes = bytes;
    r->reps = reps;
    r->kvs_us = rh_median(kt, reps) * 1e6;
    r->plain_us = rh_median(pt, reps) * 1e6;

    kvs_close(kv);
    for (int s = 0; s < NSRC; s++)
        free(src[s]);
    free(want);
    free(stored);
    free(plain_out);
    free(kvs_out);
    free(kt);
    free(pt);
}

int main(int argc, char **argv)
{
    struct opts o;
    struct result res[16];
    int nres = 0, goal_sizes = 0, goal_met = 0;
    int64_t threads_used;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    kvs_t *probe;

    bench_who = "bench_local";
    parse_args(argc, argv, &o);

    probe = open_store(&o, &threads_used);
    kvs_close(probe);

    printf("bench_local: kvs 'local' push(4 values of one key) + pull, against plain C\n");
    printf("  library:  %s\n", kvs_version(NULL, NULL, NULL));
    if (threads_used == 0)
        printf("  threads:  kvs 0 = library default (online CPUs, at most 8; %ld online);"
               " plain C 1\n", online);
    else
        printf("  threads:  kvs %lld; plain C 1\n", (long long)threads_used);
    printf("  per size: %d warm-up rounds, then >= %d repetitions over %.3g s; medians\n",
           WARMUP_REPS, MIN_REPS, o.seconds);
    printf("  GB/s:     %.0f x size per round (read 4 inputs, write sum, read it, write out)"
           " / median time\n\n", TRAFFIC_FACTOR);
    printf("%-9s %8s %12s %12s %9s %10s %7s  %s\n", "size", "reps", "kvs_us", "plain_us",
           "kvs_GB/s", "plain_GB/s", "ratio", "goal");
    fflush(stdout);

    for (size_t bytes = BENCH_MIN_SIZE; bytes <= o.max_size && nres < 16; bytes *= 4) {
        struct result *r = &res[nres++];
        char label[32];
        double kvs_gbs, plain_gbs, ratio;
        const char *mark = "-";

        run_size(&o, bytes, r);
        kvs_gbs = TRAFFIC_FACTOR * (double)bytes / (r->kvs_us * 1e-6) / 1e9;
        plain_gbs = TRAFFIC_FACTOR * (double)bytes / (r->plain_us * 1e-6) / 1e9;
        ratio = r->plain_us / r->kvs_us;      /* kvs throughput / plain throughput */
        if (bytes >= GOAL_SIZE) {
            goal_sizes++;
            if (ratio >= GOAL_RATIO) {
                goal_met++;
                mark = "met";
            } else {
                mark = "MISSED";
            }
        }
        size_label(label, sizeof label, bytes);
        printf("%-9s %8ld %12.2f %12.2f %9.2f %10.2f %7.3f  %s\n", label, r->reps,
               r->kvs_us, r->plain_us, kvs_gbs, plain_gbs, ratio, mark);
        fflush(stdout);
        if (bytes > SIZE_MAX / 4)
            break;
    }

    printf("\ngoal: kvs/plain throughput ratio >= %.2f at every size >= 1 MiB: ", GOAL_RATIO);
    if (goal_sizes == 0)
        printf("not measured (no size >= 1 MiB; raise --max-size)\n");
    else if (goal_met == goal_sizes)
        printf("met at all %d sizes\n", goal_sizes);
    else
        printf("NOT met: %d of %d sizes below it\n", goal_sizes - goal_met, goal_sizes);
    return 0;
}
