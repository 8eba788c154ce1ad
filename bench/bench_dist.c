/*
 * bench_dist.c - how long a dist_sync round takes: every worker pushes one
 * float32 key and pulls the sum over all workers, for sizes from 4 KiB up
 * (powers of 4), once as one kvs_pushpull call and once as kvs_push then
 * kvs_pull. Rank 0 prints, per size, the median round time and the
 * bandwidth size / time.
 *
 * Run it as every worker of a job, e.g. with two workers:
 *     kvsrun -n 2 bench/bench_dist [--max-size 64M] [--seconds 0.5]
 * or by hand, starting the job's daemon first:
 *     kvsd --job bench -n 2 -q &
 *     KVS_JOB=bench KVS_RANK=0 KVS_NUM_WORKERS=2 bench/bench_dist &
 *     KVS_JOB=bench KVS_RANK=1 KVS_NUM_WORKERS=2 bench/bench_dist; wait
 *
 * A benchmark, not a test: it exits 0 whatever the speed, and 1 only when
 * a call fails or a pulled value is wrong (each round is checked: worker r
 * pushes known values, so the sum over workers is known exactly).
 * Rank 0 decides how many rounds each size gets and tells the others
 * through the store, so every worker runs the same rounds. A barrier before
 * each timed round lines the workers up, so that no worker's time includes
 * waiting for another's checking. A round's time is the slowest worker's
 * median. It uses only the public API in kvs.h.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L        /* clock_gettime, posix_memalign */
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs.h"
#include "bench.h"

#define DEFAULT_MAX ((size_t)64 << 20)          /* 64 MiB */
#define MIN_REPS    5
#define MAX_REPS    100000
#define WARMUP_REPS 3
#define MAX_WORKERS 1024

enum { PUSHPULL, PUSH_PULL, NMODES };
static const char *const mode_name[NMODES] = { "kvs_pushpull", "kvs_push + kvs_pull" };

struct opts {
    size_t max_size;
    double seconds;
};

static kvs_t *kv;
static int rank, nw;
static double slots[MAX_WORKERS];      /* one value per worker, see exchange() */
static char who[32];                   /* "bench_dist rank 3", once the rank is known */

/* Rank 0 speaks for the job before the store exists: printing usage or an
 * argument error once, not once per worker. */
static int is_rank0_env(void)
{
    const char *r = getenv("KVS_RANK");
    return r == NULL || strcmp(r, "0") == 0;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [--max-size BYTES] [--seconds S] [--help]\n"
            "Run as every worker of a dist_sync job: kvsrun -n 2 %s\n"
            "  --max-size BYTES  largest float32 array, 4K..1G (suffixes K, M, G = KiB, MiB, GiB;\n"
            "                    default 64M); sizes run 4 KiB, 16 KiB, ... in powers of 4;\n"
            "                    above 256M, start kvsd with a bigger --staging\n"
            "  --seconds S       time per size and way of calling, 0 < S <= 600 (default 0.5);\n"
            "                    at least %d repetitions are taken whatever S is\n"
            "  --help            this text\n",
            prog, prog, MIN_REPS);
}

static void arg_error(const char *prog, const char *fmt, const char *arg)
{
    if (is_rank0_env()) {
        fprintf(stderr, "%s: ", prog);
        fprintf(stderr, fmt, arg);
        fputc('\n', stderr);
    }
    exit(2);
}

static void parse_args(int argc, char **argv, struct opts *o)
{
    int speak = is_rank0_env();

    o->max_size = DEFAULT_MAX;
    o->seconds = 0.5;

    for (int i = 1; i < argc; i++) {
        const char *v;

        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (speak)
                usage(stdout, argv[0]);
            exit(0);
        } else if ((v = opt_value(argc, argv, &i, "--max-size", speak)) != NULL) {
            if (parse_max_size(v, &o->max_size) != 0)
                arg_error(argv[0], "--max-size '%s': want bytes in 4K..1G", v);
        } else if ((v = opt_value(argc, argv, &i, "--seconds", speak)) != NULL) {
            if (parse_seconds(v, &o->seconds) != 0)
                arg_error(argv[0], "--seconds '%s': want a number in (0, 600]", v);
        } else {
            arg_error(argv[0], "unknown argument '%s' (see --help)", argv[i]);
        }
    }
}

/* Key 0 holds one float64 per worker. Each worker fills its own slot,
 * zeroes the others and pushes; the sum pulled back is every worker's
 * slot: a gather, or a broadcast from rank 0 when only slot 0 is read. */
static void exchange(void)
{
    kvs_key_t k = KVS_INT_KEY(0);
    kvs_array_t a = { .data = slots, .dtype = KVS_FLOAT64, .ndim = 1, .shape = { nw } };

    check_kvs(kvs_pushpull(kv, 1, &k, &a, NULL, 0), kv, "exchange (kvs_pushpull of key 0)");
}

static double broadcast(double v)
{
    memset(slots, 0, sizeof slots);
    slots[0] = rank == 0 ? v : 0.0;
    exchange();
    return slots[0];
}

static double max_over_workers(double v)
{
    double m = v;

    memset(slots, 0, sizeof slots);
    slots[rank] = v;
    exchange();
    for (int r = 0; r < nw; r++)
        m = fmax(m, slots[r]);
    return m;
}

/* Round `round` of a size: worker r pushes (i % 251) / 4 * (r+1) + c with c
 * changing every round, so the sum over workers is (i % 251) / 4 * N(N+1)/2
 * + N*c, and a pull of an earlier round's value is caught. Every term is a
 * small multiple of 1/4: exact in float32, in any order of summation. */
static float round_offset(long round)
{
    return (float)(round % 16);
}

static void fill(float *v, size_t n, long round)
{
    float scale = 0.25f * (float)(rank + 1), c = round_offset(round);

    for (size_t i = 0; i < n; i++)
        v[i] = (float)(i % 251) * scale + c;
}

static void verify(const float *out, size_t n, long round, size_t bytes, int mode)
{
    float scale = 0.25f * (float)nw * (float)(nw + 1) / 2, c = (float)nw * round_offset(round);

    for (size_t i = 0; i < n; i++) {
        float want = (float)(i % 251) * scale + c;

        if (memcmp(&out[i], &want, sizeof want) != 0) {
            fprintf(stderr, "bench_dist rank %d: WRONG VALUE from %s at size %zu bytes, "
                    "round %ld: element %zu is %.9g, expected %.9g\n", rank, mode_name[mode],
                    bytes, round, i, (double)out[i], (double)want);
            exit(1);
        }
    }
}

struct result {
    long reps[NMODES];
    double us[NMODES];                 /* median round, the slowest worker's */
};

/* How many more rounds to run after `done` of them in `spent` seconds:
 * at least MIN_REPS in all, at most MAX_REPS, none once `seconds` are up. */
static long more_rounds(long done, double spent, double seconds)
{
    double left = seconds - spent;

    if (done < MIN_REPS)
        return MIN_REPS - done;
    if (left <= 0 || done >= MAX_REPS)
        return 0;
    return (long)fmin(MAX_REPS - done, fmax(1, ceil(left / (spent / done))));
}

/* One round: barrier, then the timed call(s); fill before and check after
 * are not timed. Returns the round's time in seconds. */
static double one_round(kvs_key_t key, float *val, float *out, size_t n, size_t bytes,
                        int mode, long round)
{
    kvs_array_t va = { .data = val, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { (int64_t)n } };
    kvs_array_t oa = va;
    double t0, t1;
    int rc;

    oa.data = out;
    fill(val, n, round);
    memset(out, 0xff, bytes);          /* NaN: a round that writes nothing fails */
    check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
    t0 = now_s();
    if (mode == PUSHPULL) {
        rc = kvs_pushpull(kv, 1, &key, &va, &oa, 0);
    } else {
        rc = kvs_push(kv, 1, &key, &va, 0);
        if (rc == 0)
            rc = kvs_pull(kv, 1, &key, &oa, 0);
    }
    t1 = now_s();
    check_kvs(rc, kv, mode_name[mode]);
    verify(out, n, round, bytes, mode);
    return t1 - t0;
}

static void run_size(const struct opts *o, int index, size_t bytes, struct result *r)
{
    size_t n = bytes / sizeof(float);
    kvs_key_t key = KVS_INT_KEY(1 + index);           /* a key per size */
    float *val = xalloc(bytes), *out = xalloc(bytes);
    kvs_array_t init = { .data = val, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { (int64_t)n } };
    double *t = alloc_times(MAX_REPS);
    long round = 0;

    memset(val, 0, bytes);
    check_kvs(kvs_init(kv, 1, &key, &init), kv, "kvs_init");
    for (int mode = 0; mode < NMODES; mode++) {
        long reps = 0, more;
        double start;

        for (int w = 0; w < WARMUP_REPS; w++)
            one_round(key, val, out, n, bytes, mode, round++);
        /* Rounds go in batches; before each, rank 0 says how many more fit
         * in o->seconds at the pace so far (barrier, fill and check
         * included), and 0 when the time is up. */
        start = now_s();
        while ((more = (long)broadcast((double)more_rounds(reps, now_s() - start,
                                                           o->seconds))) > 0) {
            for (long end = reps + more; reps < end; reps++)
                t[reps] = one_round(key, val, out, n, bytes, mode, round++);
        }
        r->reps[mode] = reps;
        r->us[mode] = max_over_workers(rh_median(t, reps)) * 1e6;
    }
    free(t);
    free(val);
    free(out);
}

int main(int argc, char **argv)
{
    struct opts o;
    kvs_key_t k0 = KVS_INT_KEY(0);
    kvs_array_t a0;

    bench_who = "bench_dist rank 0";    /* until the store says otherwise */
    parse_args(argc, argv, &o);
    check_kvs(kvs_create("dist_sync", &kv), kv, "kvs_create(\"dist_sync\")");
    rank = kvs_rank(kv);
    snprintf(who, sizeof who, "bench_dist rank %d", rank);
    bench_who = who;
    nw = kvs_num_workers(kv);
    if (nw > MAX_WORKERS) {
        fprintf(stderr, "bench_dist: %d workers; at most %d\n", nw, MAX_WORKERS);
        return 1;
    }
    memset(slots, 0, sizeof slots);
    a0 = (kvs_array_t){ .data = slots, .dtype = KVS_FLOAT64, .ndim = 1, .shape = { nw } };
    check_kvs(kvs_init(kv, 1, &k0, &a0), kv, "kvs_init of key 0");
    /* Every worker runs rank 0's sizes, whatever its own arguments. */
    o.max_size = (size_t)broadcast((double)o.max_size);

    if (rank == 0) {
        printf("bench_dist: dist_sync, %d workers, one float32 key; %s\n", nw,
               kvs_version(NULL, NULL, NULL));
        printf("  per size and call: %d warm-up rounds, then >= %d rounds over about %.3g s\n",
               WARMUP_REPS, MIN_REPS, o.seconds);
        printf("  us: median round (a barrier before each), the slowest worker's;"
               " GB/s: size / us\n\n");
        printf("%-8s | %23s | %23s\n", "", mode_name[PUSHPULL], mode_name[PUSH_PULL]);
        printf("%-8s | %6s %9s %6s | %6s %9s %6s\n", "size", "reps", "us", "GB/s", "reps",
               "us", "GB/s");
        fflush(stdout);
    }

    for (size_t bytes = BENCH_MIN_SIZE, i = 0; bytes <= o.max_size; bytes *= 4, i++) {
        struct result r;
        char label[32];

        run_size(&o, (int)i, bytes, &r);
        check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
        if (rank == 0) {
            size_label(label, sizeof label, bytes);
            printf("%-8s", label);
            for (int m = 0; m < NMODES; m++)
                printf(" | %6ld %9.1f %6.2f", r.reps[m], r.us[m],
                       (double)bytes / (r.us[m] * 1e-6) / 1e9);
            printf("\n");
            fflush(stdout);
        }
    }
    kvs_close(kv);
    return 0;
}
