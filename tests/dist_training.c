/*
 * dist_training.c - one worker of a multi-process test job
 * (test_dist_training.sh, test_hosts*.sh) that does what real training
 * code does with a dist store: pushes layer
 * by layer in its own order, from several threads, closes after its last
 * push, inits after rank 0 left, uses the empty string key, sends lists of
 * 100,000 keys, lets one worker set the optimizer, pulls rows by empty row
 * id lists, pushes zero-copy buffers in any order, crowds threads into
 * a small staging area, and sends lists long enough to go in tables (with
 * errors deep in them, and beside others in a staging area they crowd),
 * and keeps a buffer and a view past its close (kvs_mem_hold).
 * argv[1] names the
 * scenario, argv[2] the store type (dist_sync by default); every value
 * pulled is checked. Exit 0 when all is right, 1 with a message when not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvs.h>

#include "distutil.h"

static float tri(int upto)             /* 1 + 2 + ... + upto */
{
    return upto * (upto + 1) / 2.0f;
}

/* Each rank pushes six keys in separate calls, even ranks in ascending
 * order, odd ranks descending, then pulls them: a push never waits for the
 * others. Key 7 is pushed twice before it is pulled: the pull gives the
 * round of this worker's last push (ASSIGN: that round's sum). */
static void push_order(void)
{
    enum { NK = 6 };
    float v[6], o[6];
    kvs_array_t a = f32(v, 2, 3), out = f32(o, 2, 3);
    kvs_key_t k7 = KVS_INT_KEY(7);

    fill(v, 6, 0);
    for (int i = 1; i <= NK + 1; i++) {
        kvs_key_t k = KVS_INT_KEY(i);

        ok(kvs_init(kv, 1, &k, &a), "init");
    }
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < NK; i++) {
            kvs_key_t k = KVS_INT_KEY(rank % 2 ? NK - i : i + 1);

            fill(v, 6, (float)(rank + 1 + step));
            ok(kvs_push(kv, 1, &k, &a, 0), "push");
        }
        fill(v, 6, 1);
        ok(kvs_push(kv, 1, &k7, &a, 0), "first push of key 7");
        fill(v, 6, 10.0f * (rank + 1));
        ok(kvs_push(kv, 1, &k7, &a, 0), "second push of key 7");
        for (int i = 1; i <= NK; i++) {
            kvs_key_t k = KVS_INT_KEY(i);

            ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
            expect(o, 6, tri(nw) + (float)(nw * step), "a key pushed in any order");
        }
        ok(kvs_pull(kv, 1, &k7, &out, 0), "pull key 7");
        expect(o, 6, 10.0f * tri(nw), "key 7 after two pushes");
    }
}

/* Four threads share the handle, each with its own key; thread t pushes
 * and pulls in separate calls when t is even, with pushpull when odd. A
 * thread waiting for its round never holds up its siblings. */
enum { NTHREADS = 4, THREAD_STEPS = 20 };

static void *thread_steps(void *arg)
{
    int t = (int)(intptr_t)arg;
    float v[64], o[64];
    kvs_key_t k = KVS_INT_KEY(100 + t);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 64 } }, out = a;

    out.data = o;
    for (int s = 0; s < THREAD_STEPS; s++) {
        fill(v, 64, (float)(rank + s + t));
        if (t % 2)
            ok(kvs_pushpull(kv, 1, &k, &a, &out, 0), "pushpull");
        else
            (ok(kvs_push(kv, 1, &k, &a, 0), "push"), ok(kvs_pull(kv, 1, &k, &out, 0), "pull"));
        expect(o, 64, tri(nw - 1) + (float)(nw * (s + t)), "a thread's key");
    }
    return NULL;
}

static void threads(void)
{
    float z[64] = { 0 };
    kvs_key_t k[NTHREADS];
    kvs_array_t a[NTHREADS];
    pthread_t th[NTHREADS];

    for (int t = 0; t < NTHREADS; t++) {
        k[t] = KVS_INT_KEY(100 + t);
        a[t] = (kvs_array_t){ .data = z, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 64 } };
    }
    ok(kvs_init(kv, NTHREADS, k, a), "init");
    for (int t = 0; t < NTHREADS; t++)
        if (pthread_create(&th[t], NULL, thread_steps, (void *)(intptr_t)t) != 0)
            die("pthread_create");
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
}

/* The last rank pushes and closes without pulling: its push counts in the
 * round, and the next round is the others' alone. */
static void push_close(void)
{
    float v[4], o[4];
    kvs_key_t k = KVS_INT_KEY(1);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } }, out = a;

    out.data = o;
    fill(v, 4, 0);
    ok(kvs_init(kv, 1, &k, &a), "init");
    fill(v, 4, (float)(rank + 1));
    ok(kvs_push(kv, 1, &k, &a, 0), "push");
    if (rank == nw - 1)
        return;                        /* main closes the handle */
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    expect(o, 4, tri(nw), "the round of the rank that closed");
    ok(kvs_push(kv, 1, &k, &a, 0), "push without it");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull without it");
    expect(o, 4, tri(nw - 1), "a round without the rank that closed");
}

/* Rank 0 leaves; an init then keeps the value of the lowest rank left.
 * Values of different shapes fail the init for everyone, storing nothing. */
static void init_after_leave(void)
{
    float v[9], o[6];
    kvs_key_t k1 = KVS_INT_KEY(1), k2 = KVS_INT_KEY(2), k3 = KVS_INT_KEY(3);
    kvs_array_t a = f32(v, 2, 3), out = f32(o, 2, 3), odd = f32(v, 3, 3);
    int rc;

    fill(v, 9, 0);
    ok(kvs_init(kv, 1, &k1, &a), "init 1");
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0)
        return;
    fill(v, 6, (float)(rank + 1));
    ok(kvs_init(kv, 1, &k2, &a), "init 2 after rank 0 left");
    ok(kvs_pull(kv, 1, &k2, &out, 0), "pull 2");
    expect(o, 6, 2, "the value of rank 1, the lowest left");
    rc = kvs_init(kv, 1, &k3, rank == 1 ? &a : &odd);
    if (rc != KVS_ESHAPE || !strstr(kvs_last_error(kv), "nothing stored"))
        die("init of different shapes: %s (%s), want KVS_ESHAPE", kvs_err_name(rc),
            kvs_last_error(kv));
    if ((rc = kvs_pull(kv, 1, &k3, &out, 0)) != KVS_ENOKEY)
        die("pull of a key whose init failed: %s, want KVS_ENOKEY", kvs_err_name(rc));
}

/* The empty string is a string key like any other. (Also: dist types
 * refuse KVS_OPT_INIT_ON_PUSH, which they do not implement, and keep the
 * option as it was.) */
static void empty_key(void)
{
    float v[2] = { 3, 4 }, w[2] = { 5, 6 }, o[2];
    kvs_key_t keys[2] = { KVS_STR_KEY(""), KVS_STR_KEY("a") }, zero = KVS_INT_KEY(0);
    kvs_array_t vals[2] = { { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 2 } },
                            { .data = w, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 2 } } };
    kvs_array_t out = vals[0];
    int rc;

    out.data = o;
    if ((rc = kvs_set_option(kv, KVS_OPT_INIT_ON_PUSH, 1)) != KVS_ENOTSUP
        || !strstr(kvs_last_error(kv), "KVS_OPT_INIT_ON_PUSH"))
        die("KVS_OPT_INIT_ON_PUSH: %s (%s), want KVS_ENOTSUP", kvs_err_name(rc),
            kvs_last_error(kv));
    {
        int64_t on = -1;

        ok(kvs_get_option(kv, KVS_OPT_INIT_ON_PUSH, &on), "get_option");
        if (on != 0)
            die("KVS_OPT_INIT_ON_PUSH reads %lld after it was refused", (long long)on);
    }
    ok(kvs_init(kv, 2, keys, vals), "init \"\" and \"a\"");
    ok(kvs_pull(kv, 1, &keys[0], &out, 0), "pull \"\"");
    if (o[0] != 3 || o[1] != 4)
        die("key \"\": %g %g", o[0], o[1]);
    ok(kvs_pull(kv, 1, &keys[1], &out, 0), "pull \"a\"");
    if (o[0] != 5 || o[1] != 6)
        die("key \"a\": %g %g", o[0], o[1]);
    if ((rc = kvs_pull(kv, 1, &zero, &out, 0)) != KVS_EKEYKIND)
        die("int key 0 in a string-key store: %s, want KVS_EKEYKIND", kvs_err_name(rc));
}

/* One init and one pushpull of 100,000 keys (KVS_TEST_KEYS, when set),
 * more than a ring holds many times over; then one pull of them all. */
static void many_keys(void)
{
    const char *env = getenv("KVS_TEST_KEYS");
    int nk = env ? atoi(env) : 100000;
    kvs_key_t *k;
    kvs_array_t *a, *o;
    float *v, *w;
    double t0;

    if (nk <= 0)
        die("KVS_TEST_KEYS=%s is not a count of keys", env);
    k = malloc(sizeof *k * (size_t)nk);
    a = malloc(sizeof *a * (size_t)nk);
    o = malloc(sizeof *o * (size_t)nk);
    v = malloc(sizeof *v * (size_t)nk);
    w = malloc(sizeof *w * (size_t)nk);
    if (!k || !a || !o || !v || !w)
        die("out of memory");
    for (int i = 0; i < nk; i++) {
        k[i] = KVS_INT_KEY(i);
        v[i] = (float)i;
        a[i] = (kvs_array_t){ .data = &v[i], .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 1 } };
        o[i] = a[i];
        o[i].data = &w[i];
    }
    t0 = now();
    ok(kvs_init(kv, nk, k, a), "init");
    fprintf(stderr, "many_keys rank %d: init of %d keys %.3f s\n", rank, nk, now() - t0);
    for (int i = 0; i < nk; i++)
        v[i] = (float)(rank + 1);
    t0 = now();
    ok(kvs_pushpull(kv, nk, k, a, o, 0), "pushpull");
    fprintf(stderr, "many_keys rank %d: pushpull %.3f s\n", rank, now() - t0);
    expect(w, nk, tri(nw), "pushpull of many keys");
    memset(w, 0, sizeof *w * (size_t)nk);
    ok(kvs_pull(kv, nk, k, o, 0), "pull");
    expect(w, nk, tri(nw), "pull of many keys");
    free(k), free(a), free(o), free(v), free(w);
}

/* Only rank 0 sets the optimizer; later the same spec from rank 1 is a
 * no-op that keeps the state (momentum here), another spec replaces it. */
static void lone_optimizer(void)
{
    float v[1] = { 1 }, o[1];
    kvs_key_t k = KVS_INT_KEY(1);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 1 } }, out = a;
    float mom;

    out.data = o;
    ok(kvs_init(kv, 1, &k, &a), "init");
    ok(kvs_barrier(kv), "barrier");
    if (rank == 0)
        ok(kvs_set_optimizer(kv, "sgd lr=0.5 momentum=0.5"), "set_optimizer on rank 0");
    ok(kvs_barrier(kv), "barrier after set_optimizer");
    /* step 1: mom = -0.5 * N, w = 1 - 0.5 N */
    ok(kvs_push(kv, 1, &k, &a, 0), "push");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    mom = -0.5f * (float)nw;
    expect(o, 1, 1 + mom, "after one step of the lone optimizer");
    ok(kvs_barrier(kv), "barrier");
    if (rank == nw - 1)
        ok(kvs_set_optimizer(kv, "sgd momentum=0.5 lr=0.5"), "the same spec again");
    ok(kvs_barrier(kv), "barrier");
    ok(kvs_push(kv, 1, &k, &a, 0), "push");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    /* step 2 with the state kept: mom = 0.5 mom - 0.5 N */
    expect(o, 1, 1 + mom + (0.5f * mom - 0.5f * (float)nw), "the state kept");
    ok(kvs_barrier(kv), "barrier");
    if (rank == nw - 1)
        ok(kvs_set_optimizer(kv, "sgd lr=1"), "another spec");
    ok(kvs_barrier(kv), "barrier");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    mom = o[0];
    ok(kvs_push(kv, 1, &k, &a, 0), "push");
    ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
    expect(o, 1, mom - (float)nw, "the replacing optimizer, without momentum");
}

/* A row_sparse_pull whose row ids are empty gives an all-zero out, whether
 * the ids' data is NULL or not, for every dtype. */
static void row_sparse_empty(void)
{
    static const kvs_dtype_t dts[] = { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16, KVS_BFLOAT16,
                                       KVS_INT32, KVS_INT64, KVS_UINT8 };
    unsigned char v[4 * 3 * 8], o[sizeof v];
    int64_t some[1] = { 0 };

    memset(v, 0x3c, sizeof v);
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        kvs_key_t k = KVS_INT_KEY((int64_t)d);
        kvs_array_t a = { .data = v, .dtype = dts[d], .ndim = 2, .shape = { 4, 3 } }, out = a;
        size_t bytes = 12 * kvs_dtype_size(dts[d]);

        out.data = o;
        ok(kvs_init(kv, 1, &k, &a), "init");
        for (int null = 0; null < 2; null++) {
            kvs_array_t ids = { .data = null ? NULL : some, .dtype = KVS_INT64, .ndim = 1,
                                .shape = { 0 } };

            memset(o, 0xa5, sizeof o);
            ok(kvs_row_sparse_pull(kv, 1, &k, &out, &ids, 0), "row_sparse_pull");
            for (size_t i = 0; i < bytes; i++)
                if (o[i] != 0)
                    die("%s, row ids %s: byte %zu of the out is 0x%02x, not 0",
                        kvs_dtype_name(dts[d]), null ? "NULL" : "not NULL", i, o[i]);
        }
    }
}

/* Zero-copy buffers pushed in rank-dependent orders, then pulled: a pushed
 * buffer is written again only after a pull of its key returned. */
static void buffers_order(void)
{
    enum { NK = 4 };
    int64_t n = 256;
    kvs_array_t b[NK], out;
    float o[256];

    for (int i = 0; i < NK; i++) {
        kvs_key_t k = KVS_INT_KEY(i);

        ok(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &b[i]), "alloc");
        ok(kvs_init(kv, 1, &k, &b[i]), "init");
    }
    out = b[0];
    out.data = o;
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < NK; i++) {
            int j = rank % 2 ? NK - 1 - i : i;
            kvs_key_t k = KVS_INT_KEY(j);

            fill(b[j].data, 256, (float)(rank + 1 + step + j));
            ok(kvs_push(kv, 1, &k, &b[j], 0), "push a buffer");
        }
        for (int j = 0; j < NK; j++) {
            kvs_key_t k = KVS_INT_KEY(j);

            ok(kvs_pull(kv, 1, &k, &out, 0), "pull");
            expect(o, 256, tri(nw) + (float)(nw * (step + j)), "a buffer's key");
        }
    }
    for (int i = 0; i < NK; i++)
        ok(kvs_array_free(kv, &b[i]), "free");
}

/* Three threads share a staging area too small for all they push (the
 * job's kvsd runs with --staging 20K): each step, every rank's thread t
 * pushes, pushpulls or pushes then pulls the same keys of its own (in
 * rank-dependent orders, in one list or separate calls, the same choices
 * on every rank), so a thread short of room has kvsd copy what its
 * siblings lent, pushpulls still waiting included, and every value is
 * still the sum of the ranks' pushes. */
enum { CROWD_THREADS = 3, CROWD_KEYS = 4, CROWD_STEPS = 100, CROWD_LEN = 1000 };

static void *crowd_steps(void *arg)
{
    int t = (int)(intptr_t)arg;
    unsigned seed = 1234u + (unsigned)t;   /* the same on every rank */
    float *v = malloc(sizeof *v * CROWD_LEN * CROWD_KEYS), *o = malloc(sizeof *o * CROWD_LEN);

    if (!v || !o)
        die("out of memory");
    for (int s = 0; s < CROWD_STEPS; s++) {
        int mode = rand_r(&seed) % 3, nk = 1 + rand_r(&seed) % CROWD_KEYS;
        kvs_key_t k[CROWD_KEYS];
        kvs_array_t a[CROWD_KEYS], out = { .data = o, .dtype = KVS_FLOAT32, .ndim = 1,
                                           .shape = { CROWD_LEN } };

        for (int j = 0; j < nk; j++) {
            int key = t * CROWD_KEYS + (j + (rank % 2 ? s : 0)) % nk;

            k[j] = KVS_INT_KEY(key);
            fill(v + j * CROWD_LEN, CROWD_LEN, (float)(rank + s + key));
            a[j] = (kvs_array_t){ .data = v + j * CROWD_LEN, .dtype = KVS_FLOAT32, .ndim = 1,
                                  .shape = { CROWD_LEN } };
        }
        if (mode == 0) {
            ok(kvs_pushpull(kv, nk, k, a, NULL, 0), "pushpull");
            for (int j = 0; j < nk; j++)
                expect(v + j * CROWD_LEN, CROWD_LEN,
                       tri(nw - 1) + (float)(nw * (s + (int)k[j].id)), "pushpull in a crowd");
            continue;
        }
        if (mode == 1)
            ok(kvs_push(kv, nk, k, a, 0), "push of a list");
        for (int j = 0; mode == 2 && j < nk; j++)
            ok(kvs_push(kv, 1, &k[j], &a[j], 0), "push");
        for (int j = 0; j < nk; j++) {
            ok(kvs_pull(kv, 1, &k[j], &out, 0), "pull");
            expect(o, CROWD_LEN, tri(nw - 1) + (float)(nw * (s + (int)k[j].id)),
                   "pull in a crowd");
        }
    }
    free(v);
    free(o);
    return NULL;
}

static void crowded(void)
{
    float *z = calloc(CROWD_LEN, sizeof *z);
    pthread_t th[CROWD_THREADS];

    if (!z)
        die("out of memory");
    for (int i = 0; i < CROWD_THREADS * CROWD_KEYS; i++) {
        kvs_key_t k = KVS_INT_KEY(i);
        kvs_array_t a = { .data = z, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { CROWD_LEN } };

        ok(kvs_init(kv, 1, &k, &a), "init");
    }
    for (int t = 0; t < CROWD_THREADS; t++)
        if (pthread_create(&th[t], NULL, crowd_steps, (void *)(intptr_t)t) != 0)
            die("pthread_create");
    for (int t = 0; t < CROWD_THREADS; t++)
        pthread_join(th[t], NULL);
    free(z);
}

/* Lists long enough to go to kvsd in tables (several of them): keys of
 * mixed dtypes and ndims in one init, a push (taken at once) then a pull,
 * a pushpull; then lists with one bad key deep in a later table, which
 * fail whole, naming that key, and change nothing. */
static void tables(void)
{
    enum { NK = 10000 };
    kvs_key_t *k = malloc(sizeof *k * NK);
    kvs_array_t *a = malloc(sizeof *a * NK), *o = malloc(sizeof *o * NK);
    double *v = malloc(sizeof *v * NK * 8), *w = malloc(sizeof *w * NK * 8);
    const char *msg;
    int rc;

    if (!k || !a || !o || !v || !w)
        die("out of memory");
    for (int i = 0; i < NK; i++) {
        int ndim = i % 4;

        k[i] = KVS_INT_KEY(3 * i);
        a[i] = (kvs_array_t){ .data = &v[8 * i], .dtype = i % 2 ? KVS_FLOAT64 : KVS_FLOAT32,
                              .ndim = ndim, .shape = { 2, 2, 2 } };
        o[i] = a[i];
        o[i].data = &w[8 * i];
    }
    /* Every value is 8 elements or fewer: fill all 8 of each with x. */
#define FILL(buf, x)                                                          \
    for (int i = 0; i < NK; i++)                                              \
        for (int j = 0; j < 8; j++) {                                         \
            if (a[i].dtype == KVS_FLOAT32)                                    \
                ((float *)&(buf)[8 * i])[j] = (float)(x);                     \
            else                                                              \
                (buf)[8 * i + j] = (x);                                       \
        }
#define CHECK_ALL(buf, x, what)                                               \
    for (int i = 0; i < NK; i++) {                                            \
        size_t n = (size_t)1 << (i % 4);                                      \
        for (size_t j = 0; j < n; j++) {                                      \
            double got = a[i].dtype == KVS_FLOAT32 ? ((float *)&(buf)[8 * i])[j] \
                                                   : (buf)[8 * i + j];       \
            if (got != (x))                                                   \
                die("%s: key %d element %zu is %g, want %g", what, 3 * i, j,  \
                    got, (double)(x));                                        \
        }                                                                     \
    }
    FILL(v, 1);
    ok(kvs_init(kv, NK, k, a), "init of a table's keys");
    FILL(v, rank + 1);
    ok(kvs_push(kv, NK, k, a, 0), "push of tables");
    FILL(w, -1);
    ok(kvs_pull(kv, NK, k, o, 0), "pull of tables");
    CHECK_ALL(w, tri(nw), "pull after a push");
    FILL(v, 2 * (rank + 1));
    FILL(w, -1);
    ok(kvs_pushpull(kv, NK, k, a, o, 0), "pushpull of tables");
    CHECK_ALL(w, 2 * tri(nw), "pushpull");

    /* Key 1 was never initialised: at index 9000, in the third table. */
    k[9000] = KVS_INT_KEY(1);
    rc = kvs_pull(kv, NK, k, o, 0);
    msg = kvs_last_error(kv);
    if (rc != KVS_ENOKEY || !strstr(msg, "key 1"))
        die("pull with an unknown key: %s (%s), want KVS_ENOKEY naming key 1",
            kvs_err_name(rc), msg);
    k[9000] = KVS_INT_KEY(27000);
    /* A shape of another size at index 5001 (a float64 key): the whole
     * pushpull fails, and no key is pushed. */
    a[5001].shape[0] = o[5001].shape[0] = 3;
    rc = kvs_pushpull(kv, NK, k, a, o, 0);
    msg = kvs_last_error(kv);
    if (rc != KVS_ESHAPE || !strstr(msg, "15003"))
        die("pushpull with a bad shape: %s (%s), want KVS_ESHAPE naming key 15003",
            kvs_err_name(rc), msg);
    a[5001].shape[0] = o[5001].shape[0] = 2;
    FILL(w, -1);
    ok(kvs_pull(kv, NK, k, o, 0), "pull after the failures");
    CHECK_ALL(w, 2 * tri(nw), "values after failed lists");
#undef FILL
#undef CHECK_ALL
    free(k), free(a), free(o), free(v), free(w);
}

/* Three pushes of 32 keys of 8 KB each, in tables, in a staging area of
 * 1 MB (the job's kvsd runs with --staging 1M): the third does not fit
 * beside the first two, which wait in their rounds for the other workers,
 * so kvsd copies them out and returns their tables' data; then every
 * value is pulled. */
static void tables_spill(void)
{
    enum { NL = 3, NK = 32, N = 2048 };
    static float v[NL][NK][N], w[NK][N];
    kvs_key_t k[NL][NK];
    kvs_array_t a[NL][NK], o[NK];

    for (int l = 0; l < NL; l++)
        for (int i = 0; i < NK; i++) {
            k[l][i] = KVS_INT_KEY(100 * l + i);
            a[l][i] = (kvs_array_t){ .data = v[l][i], .dtype = KVS_FLOAT32, .ndim = 1,
                                     .shape = { N } };
            fill(v[l][i], N, 0);
        }
    for (int l = 0; l < NL; l++)
        ok(kvs_init(kv, NK, k[l], a[l]), "init");
    /* The last rank comes late, so that the others' rounds wait for it
     * (which only makes the spill likely: any order gives the same sums). */
    if (rank == nw - 1)
        usleep(300 * 1000);
    for (int l = 0; l < NL; l++) {
        for (int i = 0; i < NK; i++)
            fill(v[l][i], N, (float)(rank + 1 + l));
        ok(kvs_push(kv, NK, k[l], a[l], 0), "push of a list in tables");
    }
    for (int l = 0; l < NL; l++) {
        for (int i = 0; i < NK; i++)
            o[i] = (kvs_array_t){ .data = w[i], .dtype = KVS_FLOAT32, .ndim = 1, .shape = { N } };
        ok(kvs_pull(kv, NK, k[l], o, 0), "pull");
        for (int i = 0; i < NK; i++)
            expect(w[i], N, tri(nw) + (float)(nw * l), "a list pushed beside others");
    }
}

/* The mappings of kvsd's segments in this process (memfd:kvs-...). */
static int kvs_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;

    if (!f)
        die("cannot read /proc/self/maps");
    while (fgets(line, sizeof line, f))
        n += strstr(line, "/memfd:kvs-") != NULL;
    fclose(f);
    return n;
}

/* A hold keeps a buffer and a view past kvs_close (with KVS_COMBINE=1 the
 * view lies in the combine area): both read their last values, the
 * buffer takes writes, and the last release unmaps every segment. */
static void held_close(void)
{
    int64_t n = 1000;
    kvs_array_t b, view;
    kvs_key_t k = KVS_INT_KEY(5);
    kvs_mem_t *mem;

    ok(kvs_mem_hold(kv, &mem), "hold");
    ok(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &b), "alloc");
    ok(kvs_init(kv, 1, &k, &b), "init");
    view = b;
    fill(b.data, 1000, (float)(rank + 1));
    ok(kvs_pushpull_view(kv, 1, &k, &b, &view, 0), "pushpull_view");
    expect(view.data, 1000, tri(nw), "the view");
    ok(kvs_barrier(kv), "barrier");
    kvs_close(kv);
    kv = NULL;
    if (kvs_maps() < 2)
        die("the segments went with kvs_close under a hold");
    expect(view.data, 1000, tri(nw), "the view after kvs_close");
    expect(b.data, 1000, (float)(rank + 1), "the buffer after kvs_close");
    fill(b.data, 1000, 9);
    expect(b.data, 1000, 9, "the buffer written after kvs_close");
    if (kvs_mem_release(mem) != 1)
        die("the last release did not free the memory");
    if (kvs_maps() != 0)
        die("%d mappings of kvsd's segments are left after the last release", kvs_maps());
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*run)(void);
    } scenarios[] = {
        { "push_order", push_order }, { "threads", threads }, { "push_close", push_close },
        { "init_after_leave", init_after_leave }, { "empty_key", empty_key },
        { "many_keys", many_keys }, { "lone_optimizer", lone_optimizer },
        { "row_sparse_empty", row_sparse_empty }, { "buffers_order", buffers_order },
        { "crowded", crowded }, { "tables", tables }, { "tables_spill", tables_spill },
        { "held_close", held_close },
    };
    const char *type = argc > 2 ? argv[2] : "dist_sync";
    size_t i;

    scenario = argc > 1 ? argv[1] : "push_order";
    for (i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(scenario, scenarios[i].name) == 0)
            break;
    if (i == sizeof scenarios / sizeof scenarios[0])
        die("unknown scenario");
    ok(kvs_create(type, &kv), "create");
    rank = kvs_rank(kv);
    nw = kvs_num_workers(kv);
    scenarios[i].run();
    kvs_close(kv);
    return 0;
}
