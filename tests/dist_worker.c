/*
 * dist_worker.c - one worker of a multi-process test job, started by
 * test_dist*.sh, test_hosts*.sh, test_kvsrun*.sh, test_kvsctl.sh and
 * test_top.sh. argv[1] names the scenario, argv[2] (optional) the store
 * type; every scenario
 * checks the values it pulls against what the job's workers pushed, and
 * exits 0 when they are right, 1 with a message when not. The scenarios
 * of the job's life (deaths, stops, deadlines, memory bounds, jobs held
 * for kvsctl, top and the timeline) are in dist_worker_jobs.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvs.h>

#include "dist_worker.h"

/* Pushes rank+1 to several keys, a few rounds: every pull is the sum over
 * workers, N(N+1)/2, including for a key repeated in one push (local sum
 * first) and for big arrays. */
static void sums(int64_t rows, int64_t cols, int64_t base)
{
    size_t n = (size_t)(rows * cols);
    float *v = malloc(n * sizeof *v), *o = malloc(n * sizeof *o);
    kvs_key_t keys[3] = { KVS_INT_KEY(base), KVS_INT_KEY(base + 1), KVS_INT_KEY(base + 1) };
    kvs_array_t vals[3], outs[2];
    float total = nw * (nw + 1) / 2.0f;

    if (!v || !o)
        die("out of memory");
    fill(v, n, 0);
    vals[0] = vals[1] = vals[2] = f32(v, rows, cols);
    ok(kvs_init(kv, 2, keys, vals), "init");
    for (int round = 0; round < 3; round++) {
        fill(v, n, (float)(rank + 1));
        ok(kvs_push(kv, 3, keys, vals, 0), "push");
        outs[0] = f32(o, rows, cols);
        ok(kvs_pull(kv, 1, &keys[0], outs, 0), "pull");
        expect(o, n, total, "key 1");
        ok(kvs_pull(kv, 1, &keys[1], outs, 0), "pull");
        expect(o, n, 2 * total, "key 2 (pushed twice per worker)");
    }
    /* pushpull in place: one round. */
    fill(v, n, 1);
    ok(kvs_pushpull(kv, 1, keys, vals, NULL, 0), "pushpull");
    expect(v, n, (float)nw, "pushpull in place");
    free(v);
    free(o);
}

/* init: only rank 0's value is kept; every rank sees it once init returns. */
static void init_rank0(void)
{
    float v[6], o[6];
    kvs_key_t k = KVS_STR_KEY("weights");
    kvs_array_t a = f32(v, 2, 3), out = f32(o, 2, 3);

    fill(v, 6, 10.0f + rank);
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    expect(o, 6, 10.0f, "value after init");
}

/* sgd in kvsd: w -= lr * sum of the workers' gradients, once per round. */
static void optimizer(void)
{
    float w[6], g[6], o[6];
    kvs_key_t k = KVS_INT_KEY(7);
    kvs_array_t a = f32(w, 2, 3), ga = f32(g, 2, 3), out = f32(o, 2, 3);
    float expect_w = 1.0f;

    fill(w, 6, 1.0f);
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_set_optimizer(kv, "sgd lr=0.1"), "set_optimizer");
    for (int round = 0; round < 3; round++) {
        fill(g, 6, (float)(rank + 1));
        ok(kvs_push(kv, 1, &k, &ga, 0), "push");
        ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
        expect_w = expect_w - 0.1f * (nw * (nw + 1) / 2.0f);
        expect(o, 6, expect_w, "weight");
    }
    /* An integer key cannot take the optimizer: a list with one fails
     * whole, before anything of it is applied. */
    {
        int32_t iv[2] = { 0, 0 };
        kvs_key_t ik = KVS_INT_KEY(8), both[2] = { k, ik };
        kvs_array_t ia = { .data = iv, .dtype = KVS_INT32, .ndim = 1, .shape = { 2 } };
        int rc;

        ok(kvs_init(kv, 1, &ik, &ia), "init of an int key");
        if ((rc = kvs_push(kv, 2, both, (kvs_array_t[]){ ga, ia }, 0)) != KVS_EDTYPE
            || !strstr(kvs_last_error(kv), "floating-point"))
            die("push of an int key under sgd: %s (%s), want KVS_EDTYPE", kvs_err_name(rc),
                kvs_last_error(kv));
        ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
        expect(o, 6, expect_w, "weight after a refused list");
    }
    if (kvs_set_updater(kv, NULL, NULL) != KVS_ENOTSUP)
        die("set_updater on a dist store must be KVS_ENOTSUP");
}

/* Barriers: before barrier i each worker leaves a mark (after a staggered
 * sleep); after it, every worker's mark for i must be there. */
static void barrier(void)
{
    const char *dir = getenv("KVS_TEST_DIR");
    char path[512];

    if (!dir)
        die("KVS_TEST_DIR is not set");
    for (int i = 0; i < 5; i++) {
        FILE *f;

        usleep((useconds_t)(((rank * 7 + i * 3) % 5) * 20000));
        snprintf(path, sizeof path, "%s/mark.%d.%d", dir, i, rank);
        if (!(f = fopen(path, "w")))
            die("cannot write %s", path);
        fclose(f);
        ok(kvs_barrier(kv), "barrier");
        for (int r = 0; r < nw; r++) {
            snprintf(path, sizeof path, "%s/mark.%d.%d", dir, i, r);
            if (access(path, F_OK) != 0)
                die("left barrier %d before rank %d reached it", i, r);
        }
    }
}

/* The last rank leaves after one round; the others' later rounds complete
 * with the workers that remain. */
static void uneven(void)
{
    float v[3], o[3];
    kvs_key_t k = KVS_INT_KEY(9);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 3 } }, out = a;

    out.data = o;
    fill(v, 3, 0);
    ok(kvs_init(kv, 1, &k, &a), "init");
    fill(v, 3, 1);
    ok(kvs_pushpull(kv, 1, &k, &a, &out, 0), "pushpull");
    expect(o, 3, (float)nw, "first round");
    if (rank == nw - 1) {
        kvs_close(kv);
        kv = NULL;
        return;
    }
    for (int i = 0; i < 3; i++) {
        ok(kvs_pushpull(kv, 1, &k, &a, &out, 0), "pushpull");
        expect(o, 3, (float)(nw - 1), "round without the last rank");
    }
}

/* dist_async: each push is applied as it comes; with sgd lr=1 every push
 * subtracts its gradient, so the total is minus every worker's pushes. */
static void async_total(void)
{
    float v[4] = { 0, 0, 0, 0 }, o[4];
    kvs_key_t k = KVS_INT_KEY(4);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } }, out = a;

    out.data = o;
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer");
    fill(v, 4, 1);
    for (int i = 0; i < 100; i++)
        ok(kvs_push(kv, 1, &k, &a, 0), "push");
    ok(kvs_barrier(kv), "barrier");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    expect(o, 4, -100.0f * nw, "total");
}

/* The 2bit codec, written again from its definition: what a worker with
 * residual *res sends for gradient g, threshold t. */
static float quantized(float *res, float g, float t)
{
    float r = *res + g;

    *res = r >= t ? r - t : r <= -t ? r + t : r;
    return r >= t ? t : r <= -t ? -t : 0.0f;
}

static float grad_of(int r, int round, size_t i)
{
    return (float)(((r + 1) * 7 + round * 3 + (int)i * 5) % 11 - 5) * 0.15f;
}

#define GC_KEYS 22                     /* a key of 37 values, 21 of 3,
                                        * one pushed twice per list */
#define GC_N(j) ((j) == 0 ? 37 : 3)

/* 2bit compression (threshold 0.5) under sgd lr=1: every worker quantizes
 * its pushes with its own residuals, kvsd decodes and sums them. Each
 * worker runs every rank's quantization through the codec above, so
 * every value it pulls is known exactly (sums of multiples of 0.5). A
 * float32 key of 37 values (no multiple of 16), 22 string keys in one
 * list (no table), a key pushed twice in one list (summed before it is
 * quantized), an int32 key that goes as it is; dist_sync checks each
 * round, dist_async the total after a barrier. */
static void compress(int sync)
{
    static char names[GC_KEYS][8];
    kvs_key_t keys[GC_KEYS + 1];
    kvs_array_t vals[GC_KEYS + 1], outs[GC_KEYS];
    float g[GC_KEYS][37], o[GC_KEYS][37], want[GC_KEYS][37];
    float res[64][GC_KEYS][37];        /* every rank's residuals, as it keeps them */
    int32_t iv[4] = { 1, 1, 1, 1 }, io[4];
    kvs_key_t ik = KVS_STR_KEY("ints");
    kvs_array_t ia = { .data = iv, .dtype = KVS_INT32, .ndim = 1, .shape = { 4 } }, iout = ia;
    int rounds = 4;

    if (nw > 64)
        die("at most 64 workers");
    memset(res, 0, sizeof res);
    for (int j = 0; j < GC_KEYS; j++) {
        snprintf(names[j], sizeof names[j], "s%d", j);
        keys[j] = KVS_STR_KEY(names[j]);
        vals[j] = (kvs_array_t){ .data = g[j], .dtype = KVS_FLOAT32, .ndim = 1,
                                 .shape = { GC_N(j) } };
        outs[j] = vals[j];
        outs[j].data = o[j];
        for (int i = 0; i < GC_N(j); i++)
            want[j][i] = g[j][i] = 0;
    }
    keys[GC_KEYS] = keys[1];           /* key s1 twice in each push */
    vals[GC_KEYS] = vals[1];
    ok(kvs_init(kv, GC_KEYS, keys, vals), "init");
    ok(kvs_init(kv, 1, &ik, &ia), "init of the int32 key");
    if (kvs_set_gradient_compression(kv, "3bit") != KVS_ESPEC)
        die("a 3bit spec must be KVS_ESPEC");
    ok(kvs_set_gradient_compression(kv, "2bit threshold=0.5"), "set_gradient_compression");
    if (sync) {                        /* no optimizer yet: the round's sum is the value */
        iout.data = io;
        ok(kvs_push(kv, 1, &ik, &ia, 0), "push of the int32 key");
        ok(kvs_pull(kv, 1, &ik, &iout, 0), "pull of the int32 key");
        for (int i = 0; i < 4; i++)
            if (io[i] != nw)
                die("int32 key, element %d: %d, expected %d", i, (int)io[i], nw);
    }
    /* Every worker's int32 push is in (its round is done): sgd may come. */
    ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer");
    for (int round = 0; round < rounds; round++) {
        for (int j = 0; j < GC_KEYS; j++)
            for (int i = 0; i < GC_N(j); i++) {
                g[j][i] = grad_of(rank, round, (size_t)(j * 37 + i));
                for (int q = 0; q < nw; q++) {
                    float gq = grad_of(q, round, (size_t)(j * 37 + i));

                    want[j][i] -= quantized(&res[q][j][i], j == 1 ? 2 * gq : gq, 0.5f);
                }
            }
        /* A list kvsd refuses (a key never initialised) leaves the
         * residuals as they were: else every value below would be off. */
        {
            kvs_key_t bad[2] = { keys[0], KVS_STR_KEY("nope") };
            int rc = kvs_push(kv, 2, bad, (kvs_array_t[]){ vals[0], vals[0] }, 0);

            if (rc != KVS_ENOKEY)
                die("push of a key never initialised: %s, want KVS_ENOKEY", kvs_err_name(rc));
        }
        ok(kvs_push(kv, GC_KEYS + 1, keys, vals, 0), "push");
        if (!sync)
            continue;
        ok(kvs_pull(kv, GC_KEYS, keys, outs, 0), "pull");
        for (int j = 0; j < GC_KEYS; j++)
            for (int i = 0; i < GC_N(j); i++)
                if (o[j][i] != want[j][i])
                    die("round %d, key %d, element %d: %g, expected %g", round, j, i,
                        o[j][i], want[j][i]);
    }
    ok(kvs_barrier(kv), "barrier");
    ok(kvs_pull(kv, GC_KEYS, keys, outs, 0), "pull");
    for (int j = 0; j < GC_KEYS; j++)
        for (int i = 0; i < GC_N(j); i++)
            if (o[j][i] != want[j][i])
                die("after the barrier, key %d, element %d: %g, expected %g", j, i, o[j][i],
                    want[j][i]);
}

/* Keys above 4 MiB, which across hosts are split in parts (from the
 * split bound on: 4 MiB at 2 hosts, less at more), each applied by its
 * own owner: a float32 and a float64 key of odd sizes and a small key in
 * one list, under adam (its state kept by range, saved
 * and loaded back in one file), each value checked exactly against a
 * local store given the summed gradients; then, under sgd lr=1, a float32 key of 2bit pushes (each
 * part's words go to its owner). dist_async checks the totals after a
 * barrier. Every gradient is a multiple of 0.25 (2bit: of 0.5 once
 * quantized), so sums do not depend on their order. */
#define SPLIT_N1 1100011               /* float32: 4.4 MB */
#define SPLIT_N2 601601                /* float64 (1001, 601): 4.8 MB */
#define SPLIT_N3 100                   /* float32, one owner */
#define SPLIT_N4 1048593               /* float32, just above 4 MiB, 2bit */
static float split_grad(int r, int round, size_t i)
{
    return (float)(((int)(i % 1009) * 7 + r * 13 + round * 5) % 9 - 4) * 0.25f;
}

static void split(int sync)
{
    const int64_t n[3] = { SPLIT_N1, SPLIT_N2, SPLIT_N3 };
    kvs_key_t k[3] = { KVS_INT_KEY(41), KVS_INT_KEY(42), KVS_INT_KEY(43) }, k4 = KVS_INT_KEY(44);
    kvs_array_t w[3], g[3], o[3], ref[3], w4, o4;
    float *q4 = calloc(SPLIT_N4, sizeof *q4), *res = calloc((size_t)nw * SPLIT_N4, sizeof *res);
    kvs_t *local;
    int rounds = sync ? 5 : 3;
    char saved[256], mine[256];
    const char *dir = getenv("KVS_TEST_DIR") ? getenv("KVS_TEST_DIR") : "/tmp";

    if (!q4 || !res)
        die("out of memory");
    for (int j = 0; j < 3; j++) {
        kvs_dtype_t dt = j == 1 ? KVS_FLOAT64 : KVS_FLOAT32;
        size_t es = kvs_dtype_size(dt);

        w[j] = (kvs_array_t){ .dtype = dt, .ndim = 1, .shape = { n[j] } };
        if (j == 1) {
            w[j].ndim = 2;
            w[j].shape[0] = 1001;
            w[j].shape[1] = 601;
        }
        g[j] = o[j] = ref[j] = w[j];
        if (!(w[j].data = malloc(n[j] * es)) || !(g[j].data = malloc(n[j] * es))
            || !(o[j].data = malloc(n[j] * es)) || !(ref[j].data = malloc(n[j] * es)))
            die("out of memory");
        for (int64_t i = 0; i < n[j]; i++)
            elem_set(&w[j], i, (double)((i * 3) % 17 - 8) * 0.25);
    }
    w4 = (kvs_array_t){ .data = q4, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { SPLIT_N4 } };
    o4 = w4;
    ok(kvs_create("local", &local), "create local");
    ok(kvs_init(kv, 3, k, w), "init");
    ok(kvs_init(kv, 1, &k4, &w4), "init of the 2bit key");
    ok(kvs_init(local, 3, k, w), "init local");
    ok(kvs_set_optimizer(kv, sync ? "adam lr=0.01" : "sgd lr=1"), "set_optimizer");
    ok(kvs_set_optimizer(local, sync ? "adam lr=0.01" : "sgd lr=1"), "set_optimizer local");
    snprintf(saved, sizeof saved, "%s/split-states.bin", dir);
    snprintf(mine, sizeof mine, "%s/split-states.%d.bin", dir, rank);
    for (int round = 0; round < rounds; round++) {
        /* sync: adam's states saved after round 2 and loaded back after
         * round 3, which round 4 then undoes; the local store does the
         * same with its own. Every part of each key's state must come
         * back where it was. */
        if (sync && (round == 3 || round == 4)) {
            ok(kvs_barrier(kv), "barrier");
            if (rank == 0 && round == 3)
                ok(kvs_save_optimizer_states(kv, saved, 0), "save");
            if (rank == 0 && round == 4)
                ok(kvs_load_optimizer_states(kv, saved), "load");
            ok((round == 3 ? kvs_save_optimizer_states(local, mine, 0)
                           : kvs_load_optimizer_states(local, mine)), "save or load local");
            ok(kvs_barrier(kv), "barrier");
        }
        /* the local store gets every rank's gradient, the job this rank's */
        for (int q = 0; q < nw; q++) {
            int sum = sync && q > 0;   /* sync: the sum of the ranks' */

            for (int j = 0; j < 3; j++)
                for (int64_t i = 0; i < n[j]; i++)
                    elem_set(&g[j], i, (sum ? elem_get(&g[j], i) : 0)
                                       + split_grad(q, round, (size_t)i));
            if (!sync)                 /* each push applied alone */
                ok(kvs_push(local, 3, k, g, 0), "push local");
        }
        if (sync)
            ok(kvs_push(local, 3, k, g, 0), "push local");
        for (int j = 0; j < 3; j++)
            for (int64_t i = 0; i < n[j]; i++)
                elem_set(&g[j], i, split_grad(rank, round, (size_t)i));
        ok(kvs_push(kv, 3, k, g, 0), "push");
        if (sync || round == rounds - 1) {
            if (!sync)
                ok(kvs_barrier(kv), "barrier");
            ok(kvs_pull(kv, 3, k, o, 0), "pull");
            ok(kvs_pull(local, 3, k, ref, 0), "pull local");
            for (int j = 0; j < 3; j++)
                if (memcmp(o[j].data, ref[j].data, (size_t)n[j] * kvs_dtype_size(o[j].dtype)))
                    for (int64_t i = 0; i < n[j]; i++)
                        if (elem_get(&o[j], i) != elem_get(&ref[j], i))
                            die("round %d, key %d, element %lld: %.17g, expected %.17g", round,
                                41 + j, (long long)i, elem_get(&o[j], i), elem_get(&ref[j], i));
        }
    }
    /* 2bit, under sgd lr=1: w4 = minus every rank's quantized gradients. */
    ok(kvs_barrier(kv), "barrier");
    ok(kvs_set_optimizer(kv, "sgd lr=1"), "set_optimizer sgd");
    ok(kvs_set_gradient_compression(kv, "2bit threshold=0.5"), "set_gradient_compression");
    o4.data = malloc(SPLIT_N4 * sizeof *q4);
    if (!o4.data)
        die("out of memory");
    memset(q4, 0, SPLIT_N4 * sizeof *q4);
    for (int round = 0; round < rounds; round++) {
        float *gv = o4.data;

        for (size_t i = 0; i < SPLIT_N4; i++) {
            gv[i] = grad_of(rank, round, i);
            for (int q = 0; q < nw; q++)
                q4[i] -= quantized(&res[(size_t)q * SPLIT_N4 + i], grad_of(q, round, i), 0.5f);
        }
        w4.data = gv;
        ok(kvs_push(kv, 1, &k4, &w4, 0), "push of the 2bit key");
    }
    if (!sync)
        ok(kvs_barrier(kv), "barrier");
    ok(kvs_pull(kv, 1, &k4, &o4, 0), "pull of the 2bit key");
    for (size_t i = 0; i < SPLIT_N4; i++)
        if (((float *)o4.data)[i] != q4[i])
            die("2bit key, element %zu: %g, expected %g", i, ((float *)o4.data)[i], q4[i]);
    kvs_close(local);
    for (int j = 0; j < 3; j++)
        free(w[j].data), free(g[j].data), free(o[j].data), free(ref[j].data);
    free(o4.data);
    free(q4);
    free(res);
}

/* One round of states_part: each rank pushes its gradients (g), the local
 * store their sum (o, before the pull); the values must be the same. */
static void states_round(kvs_t *local, int nk, const kvs_key_t *k, const int64_t *n,
                         kvs_array_t *g, kvs_array_t *o, kvs_array_t *ref, int round)
{
    for (int j = 0; j < nk; j++)
        for (int64_t i = 0; i < n[j]; i++) {
            double sum = 0;

            for (int q = 0; q < nw; q++)
                sum += split_grad(q, round, (size_t)i);
            elem_set(&o[j], i, sum);
            elem_set(&g[j], i, split_grad(rank, round, (size_t)i));
        }
    ok(kvs_push(local, nk, k, o, 0), "push local");
    if (round < 2) {
        ok(kvs_push(kv, nk, k, g, 0), "push");
        ok(kvs_pull(kv, nk, k, o, 0), "pull");
    } else {
        ok(kvs_pushpull(kv, nk, k, g, o, 0), "pushpull");
    }
    ok(kvs_pull(local, nk, k, ref, 0), "pull local");
    for (int j = 0; j < nk; j++)
        if (memcmp(o[j].data, ref[j].data, (size_t)n[j] * kvs_dtype_size(o[j].dtype)) != 0)
            die("round %d, key %lld: not the local store's value", round, (long long)k[j].id);
}

/* states under the optimizer spec, keys base to base + NSK - 1: round 0,
 * its states saved (rank 0), the last key initialised, round 1; the saved
 * states loaded (rank 0, the last key's dropped so), saved again at once
 * (the last rank) and that loaded (rank 0); rounds 2 and 3 as pushpulls.
 * Keys 0 and 7 take several of a combined round's chunks. */
#define NSK 8
static void states_part(kvs_t *local, const char *spec, int base)
{
    static const int64_t n[NSK] = { 30000, 200, 4, 50, 7, 1, 33, 17000 };
    const char *dir = getenv("KVS_TEST_DIR") ? getenv("KVS_TEST_DIR") : "/tmp";
    kvs_array_t a[4][NSK], *w = a[0], *g = a[1], *o = a[2], *ref = a[3];
    char saved[2][256], mine[2][256];
    kvs_key_t k[NSK];

    for (int j = 0; j < NSK; j++) {
        size_t es = j == 1 ? sizeof(double) : sizeof(float);
        char *m = malloc(4 * (size_t)n[j] * es);

        if (!m)
            die("out of memory");
        k[j] = KVS_INT_KEY(base + j);
        for (int b = 0; b < 4; b++) {   /* one allocation: w[j].data holds it */
            a[b][j] = j == 1 ? (kvs_array_t){ .dtype = KVS_FLOAT64, .ndim = 2, .shape = { 20, 10 } }
                             : (kvs_array_t){ .dtype = KVS_FLOAT32, .ndim = 1, .shape = { n[j] } };
            a[b][j].data = m + (size_t)b * (size_t)n[j] * es;
        }
        for (int64_t i = 0; i < n[j]; i++)
            elem_set(&w[j], i, (double)((i * 3) % 17 - 8) * 0.25);
    }
    for (int f = 0; f < 2; f++) {
        snprintf(saved[f], sizeof saved[f], "%s/states.%d.%d.bin", dir, base, f);
        snprintf(mine[f], sizeof mine[f], "%s/states.%d.%d.%d.bin", dir, base, f, rank);
    }
    ok(kvs_barrier(kv), "barrier");
    ok(kvs_init(kv, NSK - 1, k, w), "init");
    ok(kvs_init(local, NSK - 1, k, w), "init local");
    ok(kvs_set_optimizer(kv, spec), "set_optimizer");
    ok(kvs_set_optimizer(local, spec), "set_optimizer local");
    for (int round = 0; round < 4; round++) {
        if (round == 1) {
            ok(kvs_barrier(kv), "barrier");
            if (rank == 0)
                ok(kvs_save_optimizer_states(kv, saved[0], 0), "save");
            ok(kvs_save_optimizer_states(local, mine[0], 0), "save local");
            ok(kvs_barrier(kv), "barrier");
            ok(kvs_init(kv, 1, &k[NSK - 1], &w[NSK - 1]), "init of the last key");
            ok(kvs_init(local, 1, &k[NSK - 1], &w[NSK - 1]), "init local of the last key");
        }
        for (int f = 0; round == 2 && f < 2; f++) {
            ok(kvs_barrier(kv), "barrier");
            if (rank == 0)
                ok(kvs_load_optimizer_states(kv, saved[f]), "load");
            ok(kvs_load_optimizer_states(local, mine[f]), "load local");
            ok(kvs_barrier(kv), "barrier");
            if (rank == nw - 1 && f == 0)
                ok(kvs_save_optimizer_states(kv, saved[1], 0), "save right after the load");
            ok(f == 0 ? kvs_save_optimizer_states(local, mine[1], 0) : 0, "save local");
        }
        states_round(local, round == 0 ? NSK - 1 : NSK, k, n, g, o, ref, round);
    }
    for (int j = 0; j < NSK; j++)
        free(w[j].data);
}

/* Optimizer states saved by one rank load back in kvsd, under sgd with
 * momentum, then adam: 8 keys each (across hosts, owners on every host)
 * of float32 and float64, against a local store that takes the summed
 * gradients and the same saves and loads (each rank its own files), whose
 * values they must be exactly. KVS_COMBINE=1 with KVS_TEST_KVSCTL: rank 0
 * checks that the workers combine every key, all its rounds. */
static void states(void)
{
    const char *ctl = getenv("KVS_TEST_KVSCTL");
    unsigned long long rounds = 0;
    size_t keys = 0;
    kvs_t *local;

    ok(kvs_create("local", &local), "create local");
    states_part(local, "sgd lr=0.1 momentum=0.9", 1);
    states_part(local, "adam lr=0.01", 11);
    if (ctl && *ctl && getenv("KVS_TEST_COMBINED") && rank == 0) {
        char cmd[512], line[256];
        FILE *f;

        snprintf(cmd, sizeof cmd, "%s -j %s stats", ctl, getenv("KVS_JOB"));
        if (!(f = popen(cmd, "r")))
            die("popen %s", cmd);
        while (fgets(line, sizeof line, f))
            sscanf(line, "combined rounds: %llu (keys the workers combine: %zu)", &rounds, &keys);
        /* per part: 7 keys of 4 rounds, the last key of 3 */
        if (pclose(f) != 0 || rounds != 2 * ((NSK - 1) * 4 + 3) || keys != 2 * NSK)
            die("kvsctl stats: %llu combined rounds of %zu keys, expected %d of %d", rounds,
                keys, 2 * ((NSK - 1) * 4 + 3), 2 * NSK);
    }
    ok(kvs_barrier(kv), "barrier");
    kvs_close(local);
}

/* Zero-copy buffers and views: pushes from buffers (alone, with a key
 * repeated, beside ordinary arrays) make the same sums; a view is the
 * round's value in kvsd's memory, unchanged while others run ahead, and
 * the next round shows through it; buffers use up the staging area, and
 * ordinary calls fail cleanly when they leave no room. */
static void buffers(void)
{
    int64_t n = 1000;
    float o[1000], total = nw * (nw + 1) / 2.0f;
    kvs_key_t k1 = KVS_INT_KEY(1), k2[2] = { KVS_INT_KEY(2), KVS_INT_KEY(2) };
    kvs_array_t g, h, stale, fillers[256], view = f32(NULL, 1, 1000), plain = f32(o, 1, 1000);
    int nfill = 0, rc;

    ok(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &g), "alloc g");
    ok(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &h), "alloc h");
    g.ndim = h.ndim = 2;               /* the shape f32() uses: (1, 1000) */
    g.shape[0] = h.shape[0] = 1;
    g.shape[1] = h.shape[1] = 1000;
    ok(kvs_init(kv, 1, &k1, &g), "init 1");
    ok(kvs_init(kv, 1, k2, &g), "init 2");
    for (int round = 1; round <= 3; round++) {
        fill(g.data, 1000, (float)(rank + round));
        ok(kvs_pushpull_view(kv, 1, &k1, &g, &view, 0), "pushpull_view");
        expect(view.data, 1000, total + (float)(nw * (round - 1)), "view after pushpull");
        expect(g.data, 1000, (float)(rank + round), "buffer pushed");
        fill(h.data, 1000, (float)(rank + 1));
        fill(o, 1000, (float)(rank + 1));
        ok(kvs_push(kv, 2, k2, (kvs_array_t[]){ h, plain }, 0), "push buffer + array");
        ok(kvs_pull(kv, 1, k2, &h, 0), "pull into a buffer");
        expect(h.data, 1000, 2 * total, "key 2 pulled into a buffer");
    }
    /* Rank 0's view of key 1 holds while the others wait at the barrier;
     * the next round, which needs rank 0's push, shows through it. */
    ok(kvs_pull_view(kv, 1, &k1, &view, 0), "pull_view");
    ok(kvs_barrier(kv), "barrier");
    expect(view.data, 1000, total + 2.0f * nw, "view across a barrier");
    fill(g.data, 1000, 1);
    ok(kvs_push(kv, 1, &k1, &g, 0), "push");
    ok(kvs_pull_view(kv, 1, &k1, &view, 0), "pull_view after the push");
    expect(view.data, 1000, (float)nw, "view after the next round");

    /* A freed buffer is no longer one. */
    stale = g;
    ok(kvs_array_free(kv, &g), "free");
    if (kvs_array_free(kv, &stale) != KVS_EBADARG)
        die("a second free must be KVS_EBADARG");
    if ((rc = kvs_push(kv, 1, &k1, &stale, 0)) != KVS_EBADARG)
        die("a push from a freed buffer: %s, want KVS_EBADARG", kvs_err_name(rc));
    /* Fill the staging area with buffers, big ones then ever smaller:
     * ordinary calls then have no room. */
    for (int s = 0; s < 5; s++) {
        int64_t count = (int64_t[]){ 16 << 20, 1 << 18, 1 << 12, 64, 1 }[s];

        while (nfill < 256 && (rc = kvs_array_alloc(kv, KVS_FLOAT32, 1, &count,
                                                    &fillers[nfill])) == 0)
            nfill++;
        if (rc != -ENOSPC || !strstr(kvs_last_error(kv), "staging"))
            die("allocating past the staging area: %s (%s), want -ENOSPC",
                kvs_err_name(rc), kvs_last_error(kv));
    }
    /* Keys the workers combine (KVS_COMBINE=1) take no staging: such a
     * push does not run out of room. */
    if (!getenv("KVS_TEST_COMBINED") && (rc = kvs_push(kv, 1, &k1, &plain, 0)) != KVS_EBADARG)
        die("a copy with no room left: %s, want KVS_EBADARG", kvs_err_name(rc));
    if ((rc = kvs_set_optimizer(kv, "sgd lr=1")) != -ENOSPC)
        die("a spec with no room left: %s, want -ENOSPC", kvs_err_name(rc));
    /* Copies go below the lowest buffer: free the small (lowest) ones. */
    while (nfill > 1)
        ok(kvs_array_free(kv, &fillers[--nfill]), "free a filler");
    fill(o, 1000, 2);
    ok(kvs_pushpull(kv, 1, &k1, &plain, NULL, 0), "pushpull with room again");
    expect(o, 1000, 2.0f * nw, "pushpull with room again");
}

/* Views need dist_sync: in dist_async other pushes land at any time. */
static void async_view(void)
{
    float v[4] = { 0 };
    kvs_key_t k = KVS_INT_KEY(9);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } }, view = a;

    ok(kvs_init(kv, 1, &k, &a), "init");
    if (kvs_pull_view(kv, 1, &k, &view, 0) != KVS_ENOTSUP || view.data != v)
        die("pull_view in dist_async must be KVS_ENOTSUP and leave the view");
    if (kvs_pushpull_view(kv, 1, &k, &a, &view, 0) != KVS_ENOTSUP)
        die("pushpull_view in dist_async must be KVS_ENOTSUP");
}

/* One list call of more requests than the rings hold (1024 slots each):
 * the worker waits for room mid-list and kvsd holds completions back
 * until there is room; every value still comes out right. */
static void long_list(void)
{
    enum { NK = 3000 };
    static float v[NK][2], o[NK][2];
    static kvs_key_t keys[NK];
    static kvs_array_t vals[NK], outs[NK];

    for (int i = 0; i < NK; i++) {
        keys[i] = KVS_INT_KEY(100 + i);
        vals[i] = f32(v[i], 1, 2);
        outs[i] = f32(o[i], 1, 2);
        fill(v[i], 2, 0);
    }
    ok(kvs_init(kv, NK, keys, vals), "init of a long list");
    for (int round = 1; round <= 2; round++) {
        for (int i = 0; i < NK; i++)
            fill(v[i], 2, (float)(i % 7 + rank + round));
        ok(kvs_pushpull(kv, NK, keys, vals, outs, 0), "pushpull of a long list");
        for (int i = 0; i < NK; i++)
            expect(o[i], 2, (float)nw * (float)(i % 7 + round) + nw * (nw - 1) / 2.0f,
                   "long list");
    }
}

/* Errors in a dist store are the local store's: unknown key, shape. */
static void errors(void)
{
    float v[6] = { 0 }, o[4];
    kvs_key_t k = KVS_INT_KEY(1), unknown = KVS_INT_KEY(99);
    kvs_array_t a = f32(v, 2, 3), bad = { .data = o, .dtype = KVS_FLOAT32, .ndim = 1,
                                          .shape = { 4 } };

    ok(kvs_init(kv, 1, &k, &a), "init");
    if (kvs_pull(kv, 1, &unknown, &a, 0) != KVS_ENOKEY)
        die("pull of an unknown key must be KVS_ENOKEY");
    if (kvs_push(kv, 1, &k, &bad, 0) != KVS_ESHAPE)
        die("push of a wrong shape must be KVS_ESHAPE");
    if (!strstr(kvs_last_error(kv), "(2,3)"))
        die("shape error names the stored shape: '%s'", kvs_last_error(kv));
    ok(kvs_barrier(kv), "barrier after errors");
}

/* The job's state (distutil.h), shared with dist_worker_jobs.c. */
kvs_t *kv;
int rank, nw;
const char *scenario;

int main(int argc, char **argv)
{
    const char *type = "dist_sync";

    scenario = argc > 1 ? argv[1] : "sums";
    if (strcmp(scenario, "async") == 0)
        type = "dist_async";
    if (argc > 2)
        type = argv[2];
    ok(kvs_create(type, &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    if (strcmp(scenario, "sums") == 0)
        sums(2, 3, 1);
    else if (strcmp(scenario, "big") == 0)
        (sums(1200, 1200, 1), sums(1211, 1211, 3), sums(300, 200, 5));
    else if (strcmp(scenario, "init") == 0)
        init_rank0();
    else if (strcmp(scenario, "optimizer") == 0)
        optimizer();
    else if (strcmp(scenario, "states") == 0)
        states();
    else if (strcmp(scenario, "barrier") == 0)
        barrier();
    else if (strcmp(scenario, "uneven") == 0)
        uneven();
    else if (strcmp(scenario, "async") == 0)
        (async_total(), async_view());
    else if (strcmp(scenario, "buffers") == 0)
        buffers();
    else if (strcmp(scenario, "long_list") == 0)
        long_list();
    else if (strcmp(scenario, "errors") == 0)
        errors();
    else if (strcmp(scenario, "peer_dies") == 0)
        peer_dies();
    else if (strcmp(scenario, "daemon_dies") == 0)
        daemon_dies();
    else if (strcmp(scenario, "host_dies") == 0)
        host_dies();
    else if (strcmp(scenario, "hold") == 0)
        hold();
    else if (strcmp(scenario, "busy") == 0)
        busy();
    else if (strcmp(scenario, "stop_waits") == 0)
        stop_waits();
    else if (strcmp(scenario, "timeout_says") == 0)
        timeout_says();
    else if (strcmp(scenario, "spill") == 0)
        spill();
    else if (strcmp(scenario, "arena_big") == 0)
        arena_big();
    else if (strcmp(scenario, "arena_full") == 0)
        arena_full();
    else if (strcmp(scenario, "compress") == 0)
        compress(strcmp(type, "dist_async") != 0);
    else if (strcmp(scenario, "straggler") == 0)
        straggler();
    else if (strcmp(scenario, "split") == 0)
        split(strcmp(type, "dist_async") != 0);
    else
        die("unknown scenario");
    kvs_close(kv);
    return 0;
}
