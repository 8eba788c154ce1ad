/*
 * bench.h - what the benchmarks in bench/ share: the clock, the parsing of
 * --max-size and --seconds, medians (round.h's rh_median), size labels,
 * and the allocations and kvs calls that end the program when they fail.
 *
 * Each benchmark is one file that includes this once, after defining
 * _POSIX_C_SOURCE (clock_gettime, posix_memalign). The functions are static
 * inline, so a program that does not use a helper gets no warning and no
 * copy. Like the benchmarks, it uses only the public API in kvs.h and must
 * never reach into the library's internals; and it prints nothing but the
 * message of an error it exits on.
 */
#ifndef KVS_BENCH_H
#define KVS_BENCH_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvs.h"
#include "round.h"                   /* rh_median */

/* --max-size: what the usage texts promise as "4K..1G". Sizes start at
 * BENCH_MIN_SIZE and go up in powers of 4. */
#define BENCH_MIN_SIZE   ((size_t)4 << 10)          /* 4 KiB */
#define BENCH_LIMIT_MAX  ((size_t)1 << 30)          /* refuse more than 1 GiB per buffer */
#define BENCH_MAX_SECONDS 600.0                     /* --seconds: (0, 600] */

/* How a fatal message begins ("bench_local", "bench_dist rank 3"); the
 * program sets it before its first call that can fail. */
static const char *bench_who = "bench";

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "64M", "1048576", "16KiB": a whole number of bytes with an optional
 * binary suffix. Returns 0, or -1 for anything else or an overflow. */
static inline int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    if (s == NULL || *s < '0' || *s > '9')
        return -1;                     /* strtoull would accept "-1" and " 1" */
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s)
        return -1;
    if (*end != '\0') {
        switch (*end++) {
        case 'K': case 'k': shift = 10; break;
        case 'M': case 'm': shift = 20; break;
        case 'G': case 'g': shift = 30; break;
        default: return -1;
        }
        if (strcmp(end, "") != 0 && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
            return -1;
    }
    if (v > (unsigned long long)SIZE_MAX >> shift)
        return -1;
    *out = (size_t)v << shift;
    return 0;
}

/* A finite number, the whole string. Returns 0, or -1. */
static inline int parse_double(const char *s, double *out)
{
    char *end;
    double v;

    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* The value of --max-size: parse_size, within BENCH_MIN_SIZE..BENCH_LIMIT_MAX. */
static inline int parse_max_size(const char *s, size_t *out)
{
    size_t v;

    if (parse_size(s, &v) != 0 || v < BENCH_MIN_SIZE || v > BENCH_LIMIT_MAX)
        return -1;
    *out = v;
    return 0;
}

/* The value of --seconds: parse_double, within (0, BENCH_MAX_SECONDS]. */
static inline int parse_seconds(const char *s, double *out)
{
    double v;

    if (parse_double(s, &v) != 0 || !(v > 0.0) || v > BENCH_MAX_SECONDS)
        return -1;
    *out = v;
    return 0;
}

/* Accepts "--name value" and "--name=value". Returns the value, or NULL
 * when argv[*i] is not this option; *i moves past a separate value. A
 * missing value exits with status 2, saying so only when `speak` is set
 * (in a job, one worker speaks for all). */
static inline const char *opt_value(int argc, char **argv, int *i, const char *name,
                                    int speak)
{
    size_t len = strlen(name);
    const char *arg = argv[*i];

    if (strncmp(arg, name, len) != 0 || (arg[len] != '=' && arg[len] != '\0'))
        return NULL;
    if (arg[len] == '=')
        return arg + len + 1;
    if (*i + 1 >= argc) {
        if (speak)
            fprintf(stderr, "%s: %s needs a value\n", argv[0], name);
        exit(2);
    }
    return argv[++*i];
}

/* Exits with status 1 when rc is an error, naming what failed and kv's
 * detail message (kv may be NULL before the store exists). */
static inline void check_kvs(int rc, const kvs_t *kv, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "%s: %s failed: %s (%s): %s\n", bench_who, what, kvs_err_name(rc),
                kvs_strerror(rc), kvs_last_error(kv));
        exit(1);
    }
}

/* A buffer of `bytes` aligned to 64 bytes, as kvs itself aligns stored
 * values; exits with status 1 when there is none. Free it with free(). */
static inline void *xalloc(size_t bytes)
{
    void *p = NULL;

    if (posix_memalign(&p, 64, bytes) != 0) {
        fprintf(stderr, "%s: cannot allocate %zu bytes\n", bench_who, bytes);
        exit(1);
    }
    return p;
}

/* Room for n timings; exits with status 1 when there is none. */
static inline double *alloc_times(long n)
{
    double *t = malloc((size_t)n * sizeof *t);

    if (t == NULL) {
        fprintf(stderr, "%s: out of memory\n", bench_who);
        exit(1);
    }
    return t;
}

/* The test of a measuring loop `for (rep = -warm-up rounds; ; rep++)`
 * that has taken `reps` timed rounds (those with rep >= 0): 0 once there
 * are at least min of them and either max or `seconds` have passed since
 * the first; else 1. Keeps the deadline in *t_end. */
static inline int bench_more(long rep, long reps, long min, long max, double seconds,
                             double *t_end)
{
    if (rep >= 0 && reps >= min && (reps >= max || now_s() >= *t_end))
        return 0;
    if (rep == 0)
        *t_end = now_s() + seconds;
    return 1;
}

/* One timed round of a single-process store: push the n values, then
 * pull key into *out. Returns the seconds it took; exits with status 1
 * when either call fails. */
static inline double bench_push_pull(kvs_t *kv, int n, const kvs_key_t *keys,
                                     const kvs_array_t *vals, kvs_key_t key, kvs_array_t *out)
{
    double t0 = now_s(), t1;
    int rc = kvs_push(kv, n, keys, vals, 0);

    if (rc == 0)
        rc = kvs_pull(kv, 1, &key, out, 0);
    t1 = now_s();
    check_kvs(rc, kv, "kvs_push/kvs_pull");
    return t1 - t0;
}

/* "16 KiB", "4 MiB", "1 GiB": in GiB or MiB when bytes is a whole number
 * of them, else in KiB. */
static inline void size_label(char *buf, size_t len, size_t bytes)
{
    if (bytes >= ((size_t)1 << 30) && bytes % ((size_t)1 << 30) == 0)
        snprintf(buf, len, "%zu GiB", bytes >> 30);
    else if (bytes >= ((size_t)1 << 20) && bytes % ((size_t)1 << 20) == 0)
        snprintf(buf, len, "%zu MiB", bytes >> 20);
    else
        snprintf(buf, len, "%zu KiB", bytes >> 10);
}

#endif /* KVS_BENCH_H */
