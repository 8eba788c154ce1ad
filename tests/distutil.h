/*
 * distutil.h - what the worker programs of multi-process test jobs share
 * (tests/dist_*.c and hosts_bytes.c): the job's handle, rank and size, and
 * checks that end the worker with a message naming the scenario and
 * rank. A program of one file has the job's state to itself (static);
 * a program of several files (tests/dist_rows.c and dist_rows_hosts.c,
 * tests/dist_worker.c and dist_worker_jobs.c) defines DISTUTIL_SHARED before
 * including this in each of them, and defines the state in its main file.
 */
#ifndef KVS_TESTS_DISTUTIL_H
#define KVS_TESTS_DISTUTIL_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvs.h>

#ifdef DISTUTIL_SHARED
extern kvs_t *kv;
extern int rank, nw;
extern const char *scenario;
#else
static kvs_t *kv;
static int rank, nw;
static const char *scenario;
#endif

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s %s rank %d: ", program_invocation_short_name, scenario, rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    /* At once, without exit handlers: a failed scenario leaves its buffers
     * behind, which a leak checker would otherwise report over the failure. */
    fflush(stderr);
    _exit(1);
}

static void ok(int rc, const char *what)
{
    if (rc != 0)
        die("%s: %s (%s)", what, kvs_err_name(rc), kvs_last_error(kv));
}

static inline kvs_array_t f32(float *data, int64_t rows, int64_t cols)
{
    return (kvs_array_t){ .data = data, .dtype = KVS_FLOAT32, .ndim = 2,
                          .shape = { rows, cols } };
}

static inline void fill(float *a, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        a[i] = v;
}

static inline void expect(const float *a, size_t n, float v, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (fabsf(a[i] - v) > 1e-5f * (1 + fabsf(v)))
            die("%s: element %zu is %g, expected %g", what, i, a[i], v);
}

/* 1 when `kvsctl stats --json` of this job (the kvsctl KVS_TEST_KVSCTL
 * names) holds want, as kvsctl writes it. */
static inline int kvsctl_json_has(const char *want)
{
    char cmd[512], *buf = NULL;
    size_t len = 0;
    int found;
    FILE *f, *o;

    snprintf(cmd, sizeof cmd, "%s -j %s stats --json", getenv("KVS_TEST_KVSCTL"),
             getenv("KVS_JOB"));
    if (!(o = open_memstream(&buf, &len)) || !(f = popen(cmd, "r")))
        die("popen %s", cmd);
    for (int ch; (ch = fgetc(f)) != EOF;)
        fputc(ch, o);
    if (pclose(f) != 0 || fclose(o) != 0)
        die("%s failed", cmd);
    found = strstr(buf, want) != NULL;
    free(buf);
    return found;
}

/* Element i of a float32 or float64 array, as a double; and set to v. */
static inline double elem_get(const kvs_array_t *a, int64_t i)
{
    return a->dtype == KVS_FLOAT64 ? ((const double *)a->data)[i]
                                   : ((const float *)a->data)[i];
}

static inline void elem_set(kvs_array_t *a, int64_t i, double v)
{
    if (a->dtype == KVS_FLOAT64)
        ((double *)a->data)[i] = v;
    else
        ((float *)a->data)[i] = (float)v;
}

static inline double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

#endif
