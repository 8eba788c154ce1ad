/*
 * bench_suite.c - the kvs cases of scripts/bench, run through the shared
 * harness in round.h (the peers in bench/peers/ run through the same one).
 *
 *   bench_suite local -n N [--sizes LIST] [--zero-copy] [--seconds S] [--min-reps M]
 *                          [--compute-us N]
 *       the in-process `local` store: one kvs_pushpull of N values of one
 *       key, in place (the key repeated N times: the N values are summed,
 *       then every one of them receives the sum), per size.
 *   kvsrun -n N bench_suite dist [--sizes LIST] [--resnet] [--zero-copy] [--seconds S]
 *                                [--min-reps M] [--compute-us N]
 *       dist_sync: every worker calls kvs_pushpull of one key in place, per
 *       size; with --resnet, one kvs_pushpull list call of the 161 tensors
 *       of ResNet-50 (resnet50_sizes.h).
 *   --zero-copy: the values live in buffers of kvs_array_alloc and the op
 *       is kvs_pushpull_view: no copy in, the results read where the store
 *       keeps them (implementation names get "-zc").
 *   With KVS_TIMELINE set (the timeline on), implementation names get "-tl".
 *   --compute-us N: N µs of busy compute on the CPU after each round's
 *       barrier, before the op's clock starts (round.h); case names get
 *       "-c1ms" (for N = 1000).
 *   kvsrun -n N bench_suite idle [--sleep S]
 *       rank 0 enters kvs_barrier at once, the others sleep S seconds
 *       (default 2) first: prints the CPU seconds rank 0 and kvsd used
 *       while rank 0 waited.
 *
 * LIST is sizes in bytes per worker, e.g. 4K,256K,4M,64M (the default).
 * Rank 0 prints one "row,..." line per case (see rh_print in round.h) and
 * nothing else; errors go to stderr and exit 1. It uses only the public
 * API in kvs.h, and /proc to find the job's kvsd (kvsrun's child) for its
 * CPU time.
 */
#define _GNU_SOURCE                    /* clock_getcpuclockid, dirent */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvs.h"
#include "round.h"
#include "kvsd_pid.h"
#include "resnet50_sizes.h"

#define DEFAULT_SIZES "4K,256K,4M,64M"
#define RESNET_KEY0   1000

static kvs_t *kv;
static char who[48] = "bench_suite";
static pid_t kvsd_pid = -1;

static void check(int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "%s: %s failed: %s (%s): %s\n", who, what, kvs_err_name(rc),
                kvs_strerror(rc), kvs_last_error(kv));
        exit(1);
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_suite local -n N [--sizes LIST] [--zero-copy] [--seconds S]"
            " [--min-reps M] [--compute-us N]\n"
            "       kvsrun -n N bench_suite dist [--sizes LIST] [--resnet] [--zero-copy]"
            " [--seconds S] [--min-reps M] [--compute-us N]\n"
            "       kvsrun -n N bench_suite idle [--sleep S]\n"
            "  LIST: bytes per worker, e.g. %s (the default)\n"
            "  --compute-us N: N microseconds of CPU work after each barrier, before the op\n",
            DEFAULT_SIZES);
}

/* ---- the job's kvsd, for its CPU time -------------------------------- */

static double kvsd_cpu(void)
{
    clockid_t id;
    struct timespec ts;

    if (kvsd_pid < 0 || clock_getcpuclockid(kvsd_pid, &id) != 0
        || clock_gettime(id, &ts) != 0)
        return NAN;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- job primitives over the store ----------------------------------- */

static void job_barrier(void *ctx)
{
    (void)ctx;
    check(kvs_barrier(kv), "kvs_barrier");
}

/* Key 0 holds one float64 per worker: a pushpull sums the vectors. */
static void job_sum(void *ctx, double *v, int n)
{
    kvs_key_t k = KVS_INT_KEY(0);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT64, .ndim = 1, .shape = { n } };

    (void)ctx;
    check(kvs_pushpull(kv, 1, &k, &a, NULL, 0), "kvs_pushpull of key 0");
}

/* ---- the op: one kvs_pushpull, in place, or kvs_pushpull_view --------- */

struct pp {
    int n;
    kvs_key_t *keys;
    kvs_array_t *vals;
    kvs_array_t *views;                /* zero-copy: the results */
    struct rh_bufs *b;
};

static void op_pushpull(void *ctx)
{
    struct pp *p = ctx;

    check(kvs_pushpull(kv, p->n, p->keys, p->vals, NULL, 0), "kvs_pushpull");
}

/* Entry i of the list is key i % nkeys of buffer i / nkeys: res[i]. */
static void op_pushpull_view(void *ctx)
{
    struct pp *p = ctx;

    check(kvs_pushpull_view(kv, p->n, p->keys, p->vals, p->views, 0), "kvs_pushpull_view");
    for (int i = 0; i < p->n; i++)
        p->b->res[i] = p->views[i].data;
}

static void *store_mem_alloc(void *ctx, size_t bytes)
{
    int64_t n = (int64_t)bytes;
    kvs_array_t a;

    (void)ctx;
    check(kvs_array_alloc(kv, KVS_UINT8, 1, &n, &a), "kvs_array_alloc");
    return a.data;
}

static void store_mem_release(void *ctx, void *p)
{
    kvs_array_t a = { .data = p };

    (void)ctx;
    check(kvs_array_free(kv, &a), "kvs_array_free");
}

static const struct rh_mem store_mem = { store_mem_alloc, store_mem_release, NULL };

/* n list entries over the keys of b: entry i is key first_key + i % nkeys
 * on buffer i / nkeys. */
static void pp_init(struct pp *p, const struct rh_bufs *b, int64_t first_key)
{
    p->n = b->nkeys * b->nbuf;
    p->keys = rh_alloc(sizeof *p->keys * (size_t)p->n);
    p->vals = rh_alloc(sizeof *p->vals * (size_t)p->n);
    for (int i = 0; i < p->n; i++) {
        int j = i / b->nkeys, k = i % b->nkeys;

        p->keys[i] = KVS_INT_KEY(first_key + k);
        p->vals[i] = (kvs_array_t){ .data = b->buf[j] + b->offs[k], .dtype = KVS_FLOAT32,
                                    .ndim = 1, .shape = { b->counts[k] }, .device = KVS_HOST };
    }
    p->views = rh_alloc(sizeof *p->views * (size_t)p->n);
    memcpy(p->views, p->vals, sizeof *p->views * (size_t)p->n);
    p->b = (struct rh_bufs *)b;
}

static void pp_free(struct pp *p)
{
    free(p->keys);
    free(p->vals);
    free(p->views);
}

/* Lays out the case's buffers (in kvs's memory for zero-copy),
 * initialises the keys from buffer 0 (zeros), runs the case, prints. */
static void run_case(const struct rh_comm *c, int nkeys, const long *counts, int nbuf,
                     int64_t first_key, const char *cas, const char *impl, int zero_copy,
                     int nworkers, double bytes, const struct rh_opts *o)
{
    char name[64];
    struct pp p, init;
    struct rh_result r;
    struct rh_bufs b, one;

    rh_bufs_init(&b, nkeys, counts, nbuf, nbuf > 1 ? 0 : c->rank, nworkers,
                 zero_copy ? &store_mem : NULL);
    one = b;
    one.nbuf = 1;
    pp_init(&init, &one, first_key);
    check(kvs_init(kv, init.n, init.keys, init.vals), "kvs_init");
    pp_free(&init);
    pp_init(&p, &b, first_key);
    if (zero_copy)
        b.res = rh_alloc(sizeof *b.res * (size_t)p.n);
    snprintf(name, sizeof name, "%s%s%s", impl, zero_copy ? "-zc" : "",
             getenv("KVS_TIMELINE") ? "-tl" : "");
    rh_run(c, &b, name, zero_copy ? op_pushpull_view : op_pushpull, &p,
           c->nproc > 1 ? kvsd_cpu : NULL, o, &r);
    if (c->rank == 0)
        rh_print(cas, name, nworkers, bytes, &r);
    pp_free(&p);
    free(b.res);
    rh_bufs_free(&b);
}

int main(int argc, char **argv)
{
    struct rh_opts o = { .seconds = 1.0, .min_reps = 10 };
    struct rh_comm c = { .rank = 0, .nproc = 1, .barrier = job_barrier, .sum = job_sum };
    const char *mode, *sizes_arg = NULL;
    size_t sizes[RH_MAX_SIZES];
    int nsizes, nlocal = 0, resnet = 0, zero_copy = 0;
    double sleep_s = 2.0;

    rh_who = who;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    mode = argv[1];
    if (strcmp(mode, "local") != 0 && strcmp(mode, "dist") != 0 && strcmp(mode, "idle") != 0) {
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--resnet") == 0 || strcmp(a, "--zero-copy") == 0) {
            *(strcmp(a, "--resnet") == 0 ? &resnet : &zero_copy) = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_suite: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "-n") == 0)
            nlocal = atoi(v);
        else if (rh_opt(&o, &sizes_arg, a, v))
            continue;
        else if (strcmp(a, "--sleep") == 0)
            sleep_s = atof(v);
        else {
            fprintf(stderr, "bench_suite: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    nsizes = rh_parse_sizes(sizes_arg ? sizes_arg : resnet ? "" : DEFAULT_SIZES, sizes,
                            RH_MAX_SIZES);
    if (nsizes < 0 || !rh_opts_ok(&o) || !(sleep_s >= 0 && sleep_s <= 600)
        || (strcmp(mode, "local") == 0 && (nlocal < 1 || nlocal > 64))) {
        fprintf(stderr, "bench_suite: bad arguments (see --help)\n");
        return 2;
    }

    if (strcmp(mode, "local") == 0) {
        check(kvs_create("local", &kv), "kvs_create(\"local\")");
        for (int s = 0; s < nsizes; s++) {
            long count = (long)(sizes[s] / sizeof(float));

            run_case(&c, 1, &count, nlocal, 1 + s, "allreduce", "kvs-local", zero_copy,
                     nlocal, (double)sizes[s], &o);
        }
        kvs_close(kv);
        return 0;
    }

    check(kvs_create("dist_sync", &kv), "kvs_create(\"dist_sync\")");
    c.rank = kvs_rank(kv);
    c.nproc = kvs_num_workers(kv);
    snprintf(who, sizeof who, "bench_suite rank %d", c.rank);
    if (c.nproc > RH_MAX_PROCS) {
        fprintf(stderr, "%s: at most %d workers\n", who, RH_MAX_PROCS);
        return 1;
    }
    {
        double zero[RH_MAX_PROCS] = { 0 };
        kvs_key_t k0 = KVS_INT_KEY(0);
        kvs_array_t a0 = { .data = zero, .dtype = KVS_FLOAT64, .ndim = 1,
                           .shape = { c.nproc } };

        check(kvs_init(kv, 1, &k0, &a0), "kvs_init of key 0");
    }
    if (c.rank == 0)
        kvsd_pid = find_kvsd();

    if (strcmp(mode, "idle") == 0) {
        rh_idle(&c, "kvs-dist", sleep_s, kvsd_cpu);
        kvs_close(kv);
        return 0;
    }

    for (int s = 0; s < nsizes; s++) {
        long count = (long)(sizes[s] / sizeof(float));

        run_case(&c, 1, &count, 1, 1 + s, "allreduce", "kvs-dist", zero_copy, c.nproc,
                 (double)sizes[s], &o);
    }
    if (resnet)
        run_case(&c, RESNET50_NTENSORS, resnet50_sizes, 1, RESNET_KEY0, "resnet50", "kvs-dist",
                 zero_copy, c.nproc, (double)RESNET50_NVALUES * sizeof(float), &o);
    job_barrier(NULL);
    kvs_close(kv);
    return 0;
}
