/*
 * bench_keys.c - how long a list call of many small keys takes: one
 * kvs_init of N one-element float32 keys, then one kvs_pushpull of all of
 * them (embedding tables push rows as keys). Rank 0 prints, per store,
 * the median of --reps runs of each call and of both together, against
 * the goal of 0.5 s for 200,000 keys with 2 dist_sync workers.
 *
 *     kvsrun -n 2 bench/bench_keys [--keys 200000] [--reps 5]     dist_sync
 *     bench/bench_keys --local [--keys 200000] [--reps 5]          local
 *
 * A benchmark, not a test: it exits 0 whatever the speed, and 1 only when
 * a call fails or a pulled value is wrong (every out is checked against
 * the sum over workers). Each run inits fresh keys (an init cannot be
 * repeated); a barrier lines the workers up before each timed call, and a
 * call's time is rank 0's. It uses only the public API in kvs.h. Output:
 * a "keysrun,TYPE,WORKERS,KEYS,RUN,TOTAL_S" line per run (the values
 * scripts/bench judges the goal on), one
 * "keys,TYPE,WORKERS,KEYS,INIT_S,PUSHPULL_S,TOTAL_S" line of medians, then
 * the medians in words. Whether the goal is met is scripts/bench's to say.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L        /* clock_gettime, posix_memalign */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs.h"
#include "bench.h"

#define MAX_KEYS  (1L << 24)
#define MAX_REPS  100

int main(int argc, char **argv)
{
    long nkeys = 200000, reps = 5;
    int local = 0, rank, nw;
    const char *type;
    double *t_init, *t_pp, *t_all;
    kvs_key_t *keys;
    kvs_array_t *vals, *outs;
    float *v, *w;
    kvs_t *kv;

    bench_who = "bench_keys";
    for (int i = 1; i < argc; i++) {
        const char *keys_v = NULL, *reps_v = NULL;
        double d;

        if (strcmp(argv[i], "--local") == 0)
            local = 1;
        else if (!(keys_v = opt_value(argc, argv, &i, "--keys", 1))
                 && !(reps_v = opt_value(argc, argv, &i, "--reps", 1))) {
            fprintf(stderr, "usage: bench_keys [--local] [--keys N] [--reps R]\n");
            return 2;
        }
        if (keys_v || reps_v) {
            const char *val = keys_v ? keys_v : reps_v;

            if (parse_double(val, &d) != 0 || d < 1 || d > (keys_v ? MAX_KEYS : MAX_REPS)
                || d != (double)(long)d) {
                fprintf(stderr, "bench_keys: bad %s '%s'\n", keys_v ? "--keys" : "--reps", val);
                return 2;
            }
            *(keys_v ? &nkeys : &reps) = (long)d;
        }
    }
    type = local ? "local" : "dist_sync";
    check_kvs(kvs_create(type, &kv), NULL, "kvs_create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    keys = malloc(sizeof *keys * (size_t)nkeys);
    vals = malloc(sizeof *vals * (size_t)nkeys);
    outs = malloc(sizeof *outs * (size_t)nkeys);
    v = xalloc(sizeof *v * (size_t)nkeys);
    w = xalloc(sizeof *w * (size_t)nkeys);
    t_init = alloc_times(reps);
    t_pp = alloc_times(reps);
    t_all = alloc_times(reps);
    if (!keys || !vals || !outs) {
        fprintf(stderr, "bench_keys: out of memory\n");
        return 1;
    }
    for (long i = 0; i < nkeys; i++) {
        vals[i] = (kvs_array_t){ .data = &v[i], .dtype = KVS_FLOAT32, .ndim = 1,
                                 .shape = { 1 } };
        outs[i] = vals[i];
        outs[i].data = &w[i];
    }
    for (long r = 0; r < reps; r++) {
        double t0;

        for (long i = 0; i < nkeys; i++) {
            keys[i] = KVS_INT_KEY(r * nkeys + i);
            v[i] = 0;
        }
        check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
        t0 = now_s();
        check_kvs(kvs_init(kv, (int)nkeys, keys, vals), kv, "kvs_init");
        t_init[r] = now_s() - t0;
        for (long i = 0; i < nkeys; i++)
            v[i] = (float)(rank + 1);
        check_kvs(kvs_barrier(kv), kv, "kvs_barrier");
        t0 = now_s();
        check_kvs(kvs_pushpull(kv, (int)nkeys, keys, vals, outs, 0), kv, "kvs_pushpull");
        t_pp[r] = now_s() - t0;
        t_all[r] = t_init[r] + t_pp[r];
        for (long i = 0; i < nkeys; i++)
            if (w[i] != nw * (nw + 1) / 2.0f) {
                fprintf(stderr, "bench_keys: key %ld is %g, not %g\n", r * nkeys + i, w[i],
                        nw * (nw + 1) / 2.0);
                return 1;
            }
    }
    if (rank == 0) {
        for (long r = 0; r < reps; r++)         /* before rh_median() sorts them */
            printf("keysrun,%s,%d,%ld,%ld,%.6f\n", type, nw, nkeys, r + 1, t_all[r]);
    }
    if (rank == 0) {
        double mi = rh_median(t_init, reps), mp = rh_median(t_pp, reps),
               ma = rh_median(t_all, reps);

        printf("keys,%s,%d,%ld,%.4f,%.4f,%.4f\n", type, nw, nkeys, mi, mp, ma);
        printf("%s, %d worker%s, %ld keys of one float32: init %.3f s, pushpull %.3f s, "
               "both %.3f s (median of %ld)\n", type, nw, nw == 1 ? "" : "s", nkeys, mi, mp,
               ma, reps);
    }
    kvs_close(kv);
    free(keys), free(vals), free(outs), free(v), free(w), free(t_init), free(t_pp), free(t_all);
    return 0;
}
