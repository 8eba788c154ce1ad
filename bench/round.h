/*
 * round.h - the one harness every case of scripts/bench runs through, so
 * that kvs and its peers are timed alike: the same values, the same
 * warm-up, the same barrier before each timed round, the same check of
 * every round's result, the same median and the same CPU accounting.
 *
 * A case is a set of float32 tensors ("keys": one for the size sweep, the
 * 161 of ResNet-50 for the many-keys step) reduced in place over
 * `nranks` values. A process holds the buffers of one or more of those
 * ranks (a dist_sync worker or an MPI rank holds one; the in-process
 * `local` store holds all of them). The program supplies the collective
 * (`op`) and, for multi-process cases, two job-wide primitives: a barrier
 * and a sum of a small vector of doubles over the processes.
 *
 * A round: fill every buffer (untimed), barrier, time the op, check every
 * value (untimed). With compute_us > 0 (--compute-us N, a training loop's
 * rhythm), every process first works N µs on the CPU after the barrier
 * (rh_compute), and the op's clock starts after that: the op meets peers
 * (and a helper such as kvsd) that had no reason to be awake, as a
 * worker's call does after its backward pass; case names get "-cNms"
 * ("-cNus" when N is not whole milliseconds), e.g. "allreduce-c1ms".
 *
 * Rank r's value of element i of key k in round t is
 * ((i + 7k) % 251) / 4 * (r + 1) + (t % 16), so the sum over R ranks,
 * ((i + 7k) % 251) / 4 * R(R+1)/2 + R * (t % 16), is exact in float32 in
 * any order of summation, and a result left from an earlier round is
 * caught. A wrong value ends the program with status 1.
 *
 * RH_WARMUP untimed rounds, then batches of timed rounds: before each
 * batch rank 0 says how many more fit in the case's seconds (at least
 * min_reps in all), so every process runs the same rounds. A case's time
 * is the median over rounds, the slowest process's median. CPU per round
 * is the CPU time of every process of the job (all its threads) spent
 * inside the op, summed over processes, divided by the rounds; a helper
 * process (kvsd) is charged for the whole timed stretch instead, as it
 * works on its own schedule.
 *
 * Header-only, static inline functions; the includer defines _POSIX_C_SOURCE
 * (or _GNU_SOURCE) first. It needs no kvs or MPI header.
 */
#ifndef KVS_BENCH_ROUND_H
#define KVS_BENCH_ROUND_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RH_WARMUP      3
#define RH_MAX_REPS    100000L
#define RH_MAX_PROCS   64
#define RH_MAX_SIZES   16

struct rh_opts {
    double seconds;                    /* timed stretch per case */
    long min_reps;                     /* at least this many timed rounds */
    long compute_us;                   /* CPU work before each round's op; 0: none */
};

/* The job: this process's rank among the processes, their number, and the
 * two primitives (unused when nproc is 1). */
struct rh_comm {
    int rank, nproc;
    void *ctx;
    void (*barrier)(void *ctx);
    void (*sum)(void *ctx, double *v, int n);   /* in place, over processes */
};

/* Where buffers come from; NULL functions: the heap. */
struct rh_mem {
    void *(*alloc)(void *ctx, size_t bytes);   /* zero-filled, 64-byte aligned */
    void (*release)(void *ctx, void *p);
    void *ctx;
};

/* The tensors of a case, in one allocation per buffer, each tensor at a
 * 64-byte boundary. */
struct rh_bufs {
    int nkeys;
    const long *counts;                /* values per key */
    size_t *offs;                      /* float offset of each key */
    size_t total;                      /* floats per buffer, padding included */
    int nbuf;                          /* buffers in this process */
    float **buf;
    int first_rank;                    /* rank of buf[0]; buf[j] is rank first_rank + j */
    int nranks;                        /* ranks summed over */
    struct rh_mem mem;
    const float **res;                 /* NULL: the op leaves results in place; else
                                        * it points res[j * nkeys + k] at the result
                                        * of key k of buffer j (a zero-copy view) */
};

struct rh_result {
    long reps;
    double median_s;                   /* slowest process's median op time */
    double cpu_s;                      /* CPU in the op per round, all processes */
    double aux_cpu_s;                  /* the helper's CPU per round; NAN when none */
    long compute_us;                   /* the rounds' compute (rh_opts); names the case */
};

static const char *rh_who = "bench";
static volatile double rh_sink;        /* where rh_compute's result goes */

static inline double rh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of this process, all its threads. */
static inline double rh_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void *rh_alloc(size_t bytes)
{
    void *p = NULL;

    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        fprintf(stderr, "%s: cannot allocate %zu bytes\n", rh_who, bytes);
        exit(1);
    }
    return p;
}

/* Lays out nkeys tensors of counts[] values, nbuf buffers of them, from
 * mem (NULL: the heap); results in place. */
static inline void rh_bufs_init(struct rh_bufs *b, int nkeys, const long *counts, int nbuf,
                                int first_rank, int nranks, const struct rh_mem *mem)
{
    size_t off = 0;

    b->nkeys = nkeys;
    b->counts = counts;
    b->offs = rh_alloc(sizeof(size_t) * (size_t)nkeys);
    for (int k = 0; k < nkeys; k++) {
        b->offs[k] = off;
        off += ((size_t)counts[k] + 15) & ~(size_t)15;
    }
    b->total = off;
    b->nbuf = nbuf;
    b->buf = rh_alloc(sizeof(float *) * (size_t)nbuf);
    for (int j = 0; j < nbuf; j++) {
        b->buf[j] = mem && mem->alloc ? mem->alloc(mem->ctx, off * sizeof(float))
                                      : rh_alloc(off * sizeof(float));
        memset(b->buf[j], 0, off * sizeof(float));   /* touch every page now */
    }
    b->first_rank = first_rank;
    b->nranks = nranks;
    b->mem = mem ? *mem : (struct rh_mem){ 0 };
    b->res = NULL;
}

static inline void rh_bufs_free(struct rh_bufs *b)
{
    for (int j = 0; j < b->nbuf; j++) {
        if (b->mem.release)
            b->mem.release(b->mem.ctx, b->buf[j]);
        else
            free(b->buf[j]);
    }
    free(b->buf);
    free(b->offs);
}

static inline void rh_fill(struct rh_bufs *b, long round)
{
    float c = (float)(round % 16);

    for (int j = 0; j < b->nbuf; j++) {
        float scale = 0.25f * (float)(b->first_rank + j + 1);

        for (int k = 0; k < b->nkeys; k++) {
            float *v = b->buf[j] + b->offs[k];
            long n = b->counts[k], p = (7L * k) % 251;

            for (long i = 0; i < n; i++) {
                v[i] = (float)p * scale + c;
                if (++p == 251)
                    p = 0;
            }
        }
    }
}

static inline void rh_verify(const struct rh_bufs *b, long round, const char *impl)
{
    float R = (float)b->nranks;
    float scale = 0.25f * R * (R + 1.0f) / 2.0f, c = R * (float)(round % 16);

    for (int j = 0; j < b->nbuf; j++) {
        for (int k = 0; k < b->nkeys; k++) {
            const float *v = b->res ? b->res[j * b->nkeys + k] : b->buf[j] + b->offs[k];
            long n = b->counts[k], p = (7L * k) % 251;

            for (long i = 0; i < n; i++) {
                float want = (float)p * scale + c;

                if (!(v[i] == want)) {
                    fprintf(stderr, "%s: WRONG VALUE from %s, round %ld, buffer %d, key %d, "
                            "element %ld: %.9g, expected %.9g\n", rh_who, impl, round, j, k,
                            i, (double)v[i], (double)want);
                    exit(1);
                }
                if (++p == 251)
                    p = 0;
            }
        }
    }
}

static inline int rh_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Sorts v[0..n). */
static inline double rh_median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, rh_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Rank 0's v, on every process. */
static inline double rh_bcast(const struct rh_comm *c, double v)
{
    double s[RH_MAX_PROCS] = { 0 };

    if (c->nproc == 1)
        return v;
    s[0] = c->rank == 0 ? v : 0.0;
    c->sum(c->ctx, s, c->nproc);
    return s[0];
}

static inline double rh_max(const struct rh_comm *c, double v)
{
    double s[RH_MAX_PROCS] = { 0 }, m = v;

    if (c->nproc == 1)
        return v;
    s[c->rank] = v;
    c->sum(c->ctx, s, c->nproc);
    for (int i = 0; i < c->nproc; i++)
        m = fmax(m, s[i]);
    return m;
}

static inline double rh_total(const struct rh_comm *c, double v)
{
    double s[RH_MAX_PROCS] = { 0 }, t = 0.0;

    if (c->nproc == 1)
        return v;
    s[c->rank] = v;
    c->sum(c->ctx, s, c->nproc);
    for (int i = 0; i < c->nproc; i++)
        t += s[i];
    return t;
}

/* Busy work on the CPU for us microseconds, as a training step's compute
 * between two rounds: multiply-adds over a small array (in L1) that the
 * compiler cannot drop (the result goes to a volatile), the monotonic
 * clock read after every pass over it (well under a microsecond each).
 * Not a sleep: the process stays on its core, as a training process does. */
static inline void rh_compute(long us)
{
    double a[256], end = rh_now() + (double)us * 1e-6, s = 0.0;

    if (us <= 0)
        return;
    for (int i = 0; i < 256; i++)
        a[i] = (double)i * 0.001;
    do {
        for (int i = 0; i < 256; i++)
            a[i] = a[i] * 0.999 + 0.001;
    } while (rh_now() < end);
    for (int i = 0; i < 256; i++)
        s += a[i];
    rh_sink = s;
}

/* Rounds still to run after `done` of them took `spent` seconds. */
static inline long rh_more(const struct rh_opts *o, long done, double spent)
{
    double left = o->seconds - spent;

    if (done < o->min_reps)
        return o->min_reps - done;
    if (left <= 0 || done >= RH_MAX_REPS)
        return 0;
    return (long)fmin((double)(RH_MAX_REPS - done),
                      fmax(1.0, ceil(left / (spent / (double)done))));
}

/* Runs a case. aux_cpu (may be NULL): the helper's CPU seconds so far, read
 * on rank 0 only; NAN when unknown. */
static inline void rh_run(const struct rh_comm *c, struct rh_bufs *b, const char *impl,
                   void (*op)(void *ctx), void *octx, double (*aux_cpu)(void),
                   const struct rh_opts *o, struct rh_result *r)
{
    double *t = rh_alloc(sizeof(double) * RH_MAX_REPS);
    double cpu = 0.0, start, aux0 = NAN, aux1 = NAN;
    long round = 0, reps = 0, more;

    for (int w = 0; w < RH_WARMUP; w++, round++) {
        rh_fill(b, round);
        if (c->nproc > 1)
            c->barrier(c->ctx);
        rh_compute(o->compute_us);
        op(octx);
        rh_verify(b, round, impl);
    }
    if (c->rank == 0 && aux_cpu)
        aux0 = aux_cpu();
    start = rh_now();
    while ((more = (long)rh_bcast(c, (double)rh_more(o, reps, rh_now() - start))) > 0) {
        for (long end = reps + more; reps < end; reps++, round++) {
            double c0, c1, t0, t1;

            rh_fill(b, round);
            if (c->nproc > 1)
                c->barrier(c->ctx);
            rh_compute(o->compute_us);
            c0 = rh_cpu();
            t0 = rh_now();
            op(octx);
            t1 = rh_now();
            c1 = rh_cpu();
            rh_verify(b, round, impl);
            t[reps] = t1 - t0;
            cpu += c1 - c0;
        }
    }
    if (c->rank == 0 && aux_cpu)
        aux1 = aux_cpu();
    r->reps = reps;
    r->median_s = rh_max(c, rh_median(t, reps));
    r->cpu_s = rh_total(c, cpu) / (double)reps;
    r->aux_cpu_s = (aux1 - aux0) / (double)reps;
    r->compute_us = o->compute_us;
    free(t);
}

/* The line scripts/bench collects, printed by rank 0:
 * row,CASE,IMPL,N,BYTES,REPS,MEDIAN_S,CPU_S,AUX_CPU_S
 * CASE is cas, with "-c1ms" (say) when the rounds had compute before them. */
static inline void rh_print(const char *cas, const char *impl, int n, double bytes,
                     const struct rh_result *r)
{
    char suffix[32] = "";

    if (r->compute_us > 0)
        snprintf(suffix, sizeof suffix, r->compute_us % 1000 ? "-c%ldus" : "-c%ldms",
                 r->compute_us % 1000 ? r->compute_us : r->compute_us / 1000);
    printf("row,%s%s,%s,%d,%.0f,%ld,%.9g,%.9g,%.9g\n", cas, suffix, impl, n, bytes, r->reps,
           r->median_s, r->cpu_s, r->aux_cpu_s);
    fflush(stdout);
}

/* One of the options every program of the harness takes: --sizes LIST
 * (into *sizes), --seconds S, --min-reps M, --compute-us N. Returns 1 when
 * a is one of them, with its value v; 0 otherwise. */
static inline int rh_opt(struct rh_opts *o, const char **sizes, const char *a, const char *v)
{
    if (strcmp(a, "--sizes") == 0)
        *sizes = v;
    else if (strcmp(a, "--seconds") == 0)
        o->seconds = atof(v);
    else if (strcmp(a, "--min-reps") == 0)
        o->min_reps = atol(v);
    else if (strcmp(a, "--compute-us") == 0)
        o->compute_us = atol(v);
    else
        return 0;
    return 1;
}

/* 1 when o's seconds, rounds and compute are within the harness's bounds
 * (compute: 0 to 10 s a round). */
static inline int rh_opts_ok(const struct rh_opts *o)
{
    return o->seconds > 0 && o->seconds <= 600 && o->min_reps >= 1
           && o->min_reps <= RH_MAX_REPS && o->compute_us >= 0 && o->compute_us <= 10000000;
}

/* The idle case: rank 0 enters a barrier at once, the others sleep
 * sleep_s seconds first; rank 0 prints the CPU seconds it (and the
 * helper, aux_cpu, as in rh_run; may be NULL) used meanwhile. */
static inline void rh_idle(const struct rh_comm *c, const char *impl, double sleep_s,
                           double (*aux_cpu)(void))
{
    struct rh_result r = { .reps = 1, .aux_cpu_s = NAN };

    c->barrier(c->ctx);
    if (c->rank == 0) {
        double c0 = rh_cpu(), k0 = aux_cpu ? aux_cpu() : NAN, t0 = rh_now();

        c->barrier(c->ctx);
        r.median_s = rh_now() - t0;
        r.cpu_s = rh_cpu() - c0;
        if (aux_cpu)
            r.aux_cpu_s = aux_cpu() - k0;
        rh_print("idle", impl, c->nproc, 0, &r);
    } else {
        struct timespec ts = { (time_t)sleep_s,
                               (long)((sleep_s - (double)(time_t)sleep_s) * 1e9) };

        nanosleep(&ts, NULL);
        c->barrier(c->ctx);
    }
}

/* "4K,256K,4M,64M": sizes in bytes, multiples of 64. Returns their
 * number, or -1. */
static inline int rh_parse_sizes(const char *s, size_t *out, int max)
{
    int n = 0;

    while (*s) {
        char *end;
        unsigned long long v;

        if (*s < '0' || *s > '9' || n == max)
            return -1;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
            return -1;
        switch (*end) {
        case 'K': case 'k': v <<= 10; end++; break;
        case 'M': case 'm': v <<= 20; end++; break;
        case 'G': case 'g': v <<= 30; end++; break;
        default: break;
        }
        if (v == 0 || v % 64 != 0 || v > (1ull << 30))
            return -1;
        out[n++] = (size_t)v;
        if (*end == ',')
            end++;
        else if (*end != '\0')
            return -1;
        s = end;
    }
    return n;
}

#endif /* KVS_BENCH_ROUND_H */
