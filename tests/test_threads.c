/*
 * test_threads.c - one kvs_t used from several threads at once, as kvs.h
 * allows: calls on a handle are serialised and each is atomic. Counts that
 * must come out exact (an updater adding every push, an optimizer step per
 * push), pulls that must never see half of a push, pushpull that returns
 * its own push, concurrent init of distinct and of the same keys, and
 * kvs_last_error per thread and per handle. Meant to run under
 * -fsanitize=thread as well.
 *
 * cmocka's asserts may only run on the main thread: workers record the
 * first failure, and the main thread asserts after joining them.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvs.h"
#include "testutil.h"

#define NTHREADS 4

/* ---- failures seen on worker threads ---------------------------------- */

static atomic_int failures;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static char first_failure[512];

static void note_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void note_fail(const char *fmt, ...)
{
    if (atomic_fetch_add(&failures, 1) == 0) {
        va_list ap;
        pthread_mutex_lock(&fail_lock);
        va_start(ap, fmt);
        vsnprintf(first_failure, sizeof first_failure, fmt, ap);
        va_end(ap);
        pthread_mutex_unlock(&fail_lock);
    }
}

#define CHECK_RC(call, want)                                                  \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != (want))                                                    \
            note_fail("line %d: %s = %d (%s), want %d", __LINE__, #call, rc_, \
                      kvs_err_name(rc_), (want));                             \
    } while (0)

static void reset_failures(void)
{
    atomic_store(&failures, 0);
    pthread_mutex_lock(&fail_lock);
    first_failure[0] = '\0';
    pthread_mutex_unlock(&fail_lock);
}

static void assert_no_failures(void)
{
    int n = atomic_load(&failures);
    if (n != 0) {
        pthread_mutex_lock(&fail_lock);
        fail_msg("%d failure(s) on worker threads; first: %s", n, first_failure);
    }
}

static void run_threads(int n, void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t t[16];
    assert_true(n <= 16);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&t[i], NULL, fn, (char *)args + (size_t)i * arg_size), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

/* Every element of a equals a[0]. */
static int all_equal(const float *a, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (a[i] != a[0])
            return 0;
    return 1;
}

/* ---- an updater's count is exact --------------------------------------- */

#define PUSHES 2000
#define UPD_N 16

struct upd_ctx {
    long calls;      /* plain: the handle's lock serialises the updater */
    int inside;      /* plain too: detects two updaters at once */
    int overlapped;
    int other_thread;
};

/* Set by a thread around its own kvs_push: the updater, which must run on
 * the calling thread, sees it set. */
static _Thread_local int in_my_push;

static int add_updater(kvs_key_t key, const kvs_array_t *in, kvs_array_t *st, void *ctx)
{
    struct upd_ctx *u = ctx;
    (void)key;
    if (!in_my_push)
        u->other_thread = 1;
    if (u->inside)
        u->overlapped = 1;
    u->inside = 1;
    for (int i = 0; i < UPD_N; i++)
        ((float *)st->data)[i] += ((const float *)in->data)[i];
    u->calls++;
    u->inside = 0;
    return 0;
}

struct push_arg {
    kvs_t *kv;
    int id;
};

static void *pusher(void *p)
{
    struct push_arg *a = p;
    const kvs_key_t key = IK(3);
    float ones[UPD_N], out[UPD_N];
    float last = 0;
    fill_f32(ones, UPD_N, 1);
    for (int i = 0; i < PUSHES; i++) {
        in_my_push = 1;
        CHECK_RC(kvs_push(a->kv, 1, &key, (kvs_array_t[]){ ARR(ones, KVS_FLOAT32, 1, UPD_N) }, 0),
                 0);
        in_my_push = 0;
        if (i % 64 == 0) {
            CHECK_RC(kvs_pull(a->kv, 1, &key, (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, UPD_N) },
                              0),
                     0);
            if (!all_equal(out, UPD_N))
                note_fail("thread %d: a pull saw elements %g and %g", a->id, (double)out[0],
                          (double)out[UPD_N - 1]);
            /* read-your-writes: this thread's own pushes are in */
            if (out[0] < (float)(i + 2) || out[0] < last)
                note_fail("thread %d: pulled %g after %d own pushes (last %g)", a->id,
                          (double)out[0], i + 1, (double)last);
            last = out[0];
        }
    }
    return NULL;
}

static void test_pushes_with_updater_are_counted_exactly(void **state)
{
    kvs_t *kv = new_store("local");
    struct upd_ctx u = { 0, 0, 0, 0 };
    struct push_arg args[NTHREADS];
    float init[UPD_N], out[UPD_N];
    const kvs_key_t key = IK(3);
    (void)state;
    reset_failures();
    fill_f32(init, UPD_N, 1);
    assert_int_equal(kvs_init(kv, 1, &key, (kvs_array_t[]){ ARR(init, KVS_FLOAT32, 1, UPD_N) }), 0);
    assert_int_equal(kvs_set_updater(kv, add_updater, &u), 0);
    for (int i = 0; i < NTHREADS; i++)
        args[i] = (struct push_arg){ kv, i };
    run_threads(NTHREADS, pusher, args, sizeof args[0]);
    assert_no_failures();
    assert_int_equal(u.calls, NTHREADS * PUSHES);
    assert_int_equal(u.overlapped, 0);
    assert_int_equal(u.other_thread, 0);
    assert_int_equal(kvs_pull(kv, 1, &key, (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, UPD_N) }, 0),
                     0);
    EXPECT_ALL_F32(out, UPD_N, (float)(1 + NTHREADS * PUSHES));
    kvs_close(kv);
}

/* ---- an optimizer's steps are exact ------------------------------------ */

#define OPT_PUSHES 500

static void *opt_pusher(void *p)
{
    struct push_arg *a = p;
    const kvs_key_t key = IK(1);
    const float g[4] = { 1, 1, 1, 1 };
    for (int i = 0; i < OPT_PUSHES; i++)
        CHECK_RC(kvs_push(a->kv, 1, &key, (kvs_array_t[]){ ARR(g, KVS_FLOAT32, 1, 4) }, 0), 0);
    return NULL;
}

static void test_optimizer_steps_are_counted_exactly(void **state)
{
    kvs_t *kv = new_store("local");
    struct push_arg args[NTHREADS];
    const float w0[4] = { 0, 0, 0, 0 };
    float w[4];
    const kvs_key_t key = IK(1);
    (void)state;
    reset_failures();
    assert_int_equal(kvs_init(kv, 1, &key, (kvs_array_t[]){ ARR(w0, KVS_FLOAT32, 1, 4) }), 0);
    /* w -= 1 * g: after every step an exact integer */
    assert_int_equal(kvs_set_optimizer(kv, "sgd lr=1"), 0);
    for (int i = 0; i < NTHREADS; i++)
        args[i] = (struct push_arg){ kv, i };
    run_threads(NTHREADS, opt_pusher, args, sizeof args[0]);
    assert_no_failures();
    assert_int_equal(kvs_pull(kv, 1, &key, (kvs_array_t[]){ ARR(w, KVS_FLOAT32, 1, 4) }, 0), 0);
    EXPECT_ALL_F32(w, 4, (float)(-NTHREADS * OPT_PUSHES));
    kvs_close(kv);
}

/* ---- no torn values ---------------------------------------------------- */

#define TORN_ROWS 64
#define TORN_COLS 64
#define TORN_N (TORN_ROWS * TORN_COLS)
#define BIG_N (1 << 20)
#define WRITES 1000
#define READS 1000
#define BIG_WRITES 20

struct torn_arg {
    kvs_t *kv;
    int id;
    atomic_int *writers_left;
};

/* Key 1 (64,64) and key 2 (2^20): every push makes all elements equal. */
static void *torn_writer(void *p)
{
    struct torn_arg *a = p;
    float *v = malloc(TORN_N * sizeof(float));
    float *big = malloc(BIG_N * sizeof(float));
    if (v == NULL || big == NULL) {
        note_fail("malloc");
        goto out;
    }
    for (int i = 0; i < WRITES; i++) {
        float x = (float)(a->id * 100000 + i);
        const kvs_key_t key = IK(1);
        for (int j = 0; j < TORN_N; j++)
            v[j] = x;
        if (i % 2 == 0) {
            CHECK_RC(kvs_push(a->kv, 1, &key,
                              (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, TORN_ROWS, TORN_COLS) }, 0),
                     0);
        } else {
            /* pushpull in place: atomic, so the pull returns this push */
            CHECK_RC(kvs_pushpull(a->kv, 1, &key,
                                  (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, TORN_ROWS, TORN_COLS) },
                                  NULL, 0),
                     0);
            for (int j = 0; j < TORN_N; j++)
                if (v[j] != x) {
                    note_fail("writer %d: pushpull of %g returned %g at %d", a->id, (double)x,
                              (double)v[j], j);
                    break;
                }
        }
        if (i < BIG_WRITES) {
            const kvs_key_t bkey = IK(2);
            for (int j = 0; j < BIG_N; j++)
                big[j] = x;
            CHECK_RC(kvs_push(a->kv, 1, &bkey, (kvs_array_t[]){ ARR(big, KVS_FLOAT32, 1, BIG_N) },
                              0),
                     0);
        }
    }
out:
    atomic_fetch_sub(a->writers_left, 1);
    free(v);
    free(big);
    return NULL;
}

static void *torn_reader(void *p)
{
    struct torn_arg *a = p;
    float *v = malloc(TORN_N * sizeof(float));
    float *big = malloc(BIG_N * sizeof(float));
    int64_t rows[TORN_ROWS];
    if (v == NULL || big == NULL) {
        note_fail("malloc");
        goto out;
    }
    for (int r = 0; r < TORN_ROWS; r++)
        rows[r] = TORN_ROWS - 1 - r;
    for (int i = 0; i < READS || atomic_load(a->writers_left) > 0; i++) {
        const kvs_key_t key = IK(1);
        if (i % 2 == 0)
            CHECK_RC(kvs_pull(a->kv, 1, &key,
                              (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, TORN_ROWS, TORN_COLS) }, 0),
                     0);
        else
            CHECK_RC(kvs_row_sparse_pull(
                         a->kv, 1, &key,
                         (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 2, TORN_ROWS, TORN_COLS) },
                         (kvs_array_t[]){ ARR(rows, KVS_INT64, 1, TORN_ROWS) }, 0),
                     0);
        if (!all_equal(v, TORN_N)) {
            note_fail("reader %d: torn pull of key 1 (%g ... %g)", a->id, (double)v[0],
                      (double)v[TORN_N - 1]);
            break;
        }
        if (i % 50 == 0) {
            const kvs_key_t bkey = IK(2);
            CHECK_RC(kvs_pull(a->kv, 1, &bkey, (kvs_array_t[]){ ARR(big, KVS_FLOAT32, 1, BIG_N) },
                              0),
                     0);
            if (!all_equal(big, BIG_N)) {
                note_fail("reader %d: torn pull of the big key", a->id);
                break;
            }
        }
        if (i > 100000)
            break;
    }
out:
    free(v);
    free(big);
    return NULL;
}

static void *torn_dispatch(void *p)
{
    struct torn_arg *a = p;
    return a->id < 2 ? torn_writer(p) : torn_reader(p);
}

static void test_pulls_never_see_a_torn_value(void **state)
{
    kvs_t *kv = new_store("local");
    struct torn_arg args[NTHREADS];
    atomic_int writers_left = 2;
    float *z = calloc(BIG_N, sizeof(float));
    (void)state;
    reset_failures();
    assert_non_null(z);
    assert_int_equal(kvs_init(kv, 2, (kvs_key_t[]){ IK(1), IK(2) },
                              (kvs_array_t[]){ ARR(z, KVS_FLOAT32, 2, TORN_ROWS, TORN_COLS),
                                               ARR(z, KVS_FLOAT32, 1, BIG_N) }),
                     0);
    free(z);
    for (int i = 0; i < NTHREADS; i++)
        args[i] = (struct torn_arg){ kv, i, &writers_left };
    run_threads(NTHREADS, torn_dispatch, args, sizeof args[0]);
    assert_no_failures();
    kvs_close(kv);
}

/* ---- concurrent init --------------------------------------------------- */

#define INIT_KEYS 250
#define SAME_ROUNDS 50

struct init_arg {
    kvs_t *kv;
    int id;
    pthread_barrier_t *barrier;
    int wins;
    int exists;
};

static void *initer(void *p)
{
    struct init_arg *a = p;
    for (int i = 0; i < INIT_KEYS; i++) {
        int64_t id = a->id * 1000 + i;
        int64_t v[8];
        const kvs_key_t key = IK(id);
        for (int j = 0; j < 8; j++)
            v[j] = id * 10 + j;
        CHECK_RC(kvs_init(a->kv, 1, &key, (kvs_array_t[]){ ARR(v, KVS_INT64, 1, 8) }), 0);
    }
    /* the same key from every thread at once: one wins */
    for (int r = 0; r < SAME_ROUNDS; r++) {
        const kvs_key_t key = IK(100000 + r);
        int64_t v[8];
        int rc;
        for (int j = 0; j < 8; j++)
            v[j] = a->id;
        pthread_barrier_wait(a->barrier);
        rc = kvs_init(a->kv, 1, &key, (kvs_array_t[]){ ARR(v, KVS_INT64, 1, 8) });
        if (rc == 0)
            a->wins++;
        else if (rc == KVS_EKEYEXISTS)
            a->exists++;
        else
            note_fail("thread %d: init of a shared key = %d (%s)", a->id, rc, kvs_err_name(rc));
    }
    return NULL;
}

static void test_concurrent_init(void **state)
{
    kvs_t *kv = new_store("local");
    struct init_arg args[NTHREADS];
    pthread_barrier_t barrier;
    int wins = 0, exists = 0;
    (void)state;
    reset_failures();
    assert_int_equal(pthread_barrier_init(&barrier, NULL, NTHREADS), 0);
    for (int i = 0; i < NTHREADS; i++)
        args[i] = (struct init_arg){ kv, i, &barrier, 0, 0 };
    run_threads(NTHREADS, initer, args, sizeof args[0]);
    pthread_barrier_destroy(&barrier);
    assert_no_failures();

    for (int t = 0; t < NTHREADS; t++) {
        wins += args[t].wins;
        exists += args[t].exists;
        for (int i = 0; i < INIT_KEYS; i++) {
            int64_t id = t * 1000 + i, out[8];
            const kvs_key_t key = IK(id);
            memset(out, 0xA5, sizeof out);
            assert_int_equal(kvs_pull(kv, 1, &key, (kvs_array_t[]){ ARR(out, KVS_INT64, 1, 8) }, 0),
                             0);
            for (int j = 0; j < 8; j++)
                if (out[j] != id * 10 + j)
                    fail_msg("key %lld element %d: %lld, want %lld", (long long)id, j,
                             (long long)out[j], (long long)(id * 10 + j));
        }
    }
    assert_int_equal(wins, SAME_ROUNDS);
    assert_int_equal(exists, SAME_ROUNDS * (NTHREADS - 1));
    for (int r = 0; r < SAME_ROUNDS; r++) {
        int64_t out[8];
        const kvs_key_t key = IK(100000 + r);
        assert_int_equal(kvs_pull(kv, 1, &key, (kvs_array_t[]){ ARR(out, KVS_INT64, 1, 8) }, 0), 0);
        assert_in_range(out[0], 0, NTHREADS - 1);
        for (int j = 1; j < 8; j++)
            assert_int_equal(out[j], out[0]); /* one whole init, not a blend */
    }
    kvs_close(kv);
}

/* ---- kvs_last_error ---------------------------------------------------- */

#define ERR_ROUNDS 300

struct err_arg {
    kvs_t *kv;
    int id;
    pthread_barrier_t *barrier;
};

/* Failed creates: kvs_last_error(NULL) is this thread's own. */
static void *create_failer(void *p)
{
    struct err_arg *a = p;
    char type[32], other[32];
    snprintf(type, sizeof type, "no_such_type_%d", a->id);
    snprintf(other, sizeof other, "no_such_type_%d", 1 - a->id);
    for (int r = 0; r < ERR_ROUNDS; r++) {
        kvs_t *kv = NULL;
        const char *m;
        CHECK_RC(kvs_create(type, &kv), KVS_EBADTYPE);
        /* both threads have failed before either reads */
        pthread_barrier_wait(a->barrier);
        m = kvs_last_error(NULL);
        if (m == NULL || strstr(m, type) == NULL || strstr(m, other) != NULL)
            note_fail("thread %d: kvs_last_error(NULL) = \"%s\", want its own \"%s\"", a->id,
                      m ? m : "(null)", type);
        pthread_barrier_wait(a->barrier);
    }
    return NULL;
}

static void test_last_error_of_create_is_per_thread(void **state)
{
    struct err_arg args[2];
    pthread_barrier_t barrier;
    (void)state;
    reset_failures();
    assert_int_equal(pthread_barrier_init(&barrier, NULL, 2), 0);
    for (int i = 0; i < 2; i++)
        args[i] = (struct err_arg){ NULL, i, &barrier };
    run_threads(2, create_failer, args, sizeof args[0]);
    pthread_barrier_destroy(&barrier);
    assert_no_failures();
}

/* Two threads fail on one handle with their own keys and read the
 * handle's detail: always one whole message, of either thread. */
static void *handle_failer(void *p)
{
    struct err_arg *a = p;
    const kvs_key_t key = IK(a->id == 0 ? 1111111 : 2222222);
    float out[4];
    for (int r = 0; r < ERR_ROUNDS * 10; r++) {
        const char *m;
        int mine, theirs;
        CHECK_RC(kvs_pull(a->kv, 1, &key, (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 4) }, 0),
                 KVS_ENOKEY);
        m = kvs_last_error(a->kv);
        if (m == NULL) {
            note_fail("kvs_last_error returned NULL");
            break;
        }
        mine = strstr(m, a->id == 0 ? "1111111" : "2222222") != NULL;
        theirs = strstr(m, a->id == 0 ? "2222222" : "1111111") != NULL;
        if (mine == theirs) {
            note_fail("thread %d: kvs_last_error = \"%s\"", a->id, m);
            break;
        }
    }
    return NULL;
}

static void *one_failure(void *p)
{
    struct err_arg *a = p;
    const kvs_key_t key = IK(4444444);
    float out[4];
    CHECK_RC(kvs_pull(a->kv, 1, &key, (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 4) }, 0),
             KVS_ENOKEY);
    return NULL;
}

static void test_last_error_of_a_handle_from_two_threads(void **state)
{
    kvs_t *kv = new_store("local");
    struct err_arg args[2];
    const float v[4] = { 1, 2, 3, 4 };
    const char *m;
    (void)state;
    reset_failures();
    assert_int_equal(kvs_init(kv, 1, (kvs_key_t[]){ IK(1) }, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 4) }),
                     0);
    assert_string_equal(kvs_last_error(kv), "");
    for (int i = 0; i < 2; i++)
        args[i] = (struct err_arg){ kv, i, NULL };
    run_threads(2, handle_failer, args, sizeof args[0]);
    assert_no_failures();

    /* a failure on another thread is this handle's last failure here too */
    run_threads(1, one_failure, args, sizeof args[0]);
    assert_no_failures();
    m = kvs_last_error(kv);
    assert_non_null(m);
    if (strstr(m, "4444444") == NULL)
        fail_msg("kvs_last_error after another thread's failure: \"%s\"", m);
    kvs_close(kv);
}

/* ---- stores made and closed on several threads ------------------------ */

#define STORES 100

static void *store_cycler(void *p)
{
    struct push_arg *a = p;
    for (int s = 0; s < STORES; s++) {
        kvs_t *kv = NULL;
        const kvs_key_t key = IK(s);
        float v[8], out[8];
        int rc = kvs_create(s % 2 ? "local" : "local_update_cpu", &kv);
        if (rc != 0) {
            note_fail("thread %d: kvs_create = %d", a->id, rc);
            return NULL;
        }
        for (int j = 0; j < 8; j++)
            v[j] = (float)(a->id * 1000 + s + j);
        CHECK_RC(kvs_init(kv, 1, &key, (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 8) }), 0);
        CHECK_RC(kvs_push(kv, 2, (kvs_key_t[]){ key, key },
                          (kvs_array_t[]){ ARR(v, KVS_FLOAT32, 1, 8), ARR(v, KVS_FLOAT32, 1, 8) },
                          0),
                 0);
        CHECK_RC(kvs_pull(kv, 1, &key, (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, 8) }, 0), 0);
        for (int j = 0; j < 8; j++)
            if (out[j] != 2 * v[j]) {
                note_fail("thread %d store %d element %d: %g want %g", a->id, s, j,
                          (double)out[j], (double)(2 * v[j]));
                break;
            }
        kvs_close(kv);
    }
    return NULL;
}

static void test_stores_created_and_closed_on_threads(void **state)
{
    struct push_arg args[NTHREADS];
    (void)state;
    reset_failures();
    for (int i = 0; i < NTHREADS; i++)
        args[i] = (struct push_arg){ NULL, i };
    run_threads(NTHREADS, store_cycler, args, sizeof args[0]);
    assert_no_failures();
}

/* ---- big sums on several callers while the thread option changes ------ */

#define SUM_N (1 << 19)
#define SUM_ROUNDS 12

struct sum_arg {
    kvs_t *kv;
    int id;
};

/* Threads 0-2 pushpull their own key (3 values: 1, 2, id) and check the
 * sum; thread 3 keeps changing KVS_OPT_THREADS. */
static void *summer(void *p)
{
    struct sum_arg *a = p;
    if (a->id == NTHREADS - 1) {
        for (int r = 0; r < SUM_ROUNDS * 20; r++) {
            int64_t v = -1;
            CHECK_RC(kvs_set_option(a->kv, KVS_OPT_THREADS, 1 + r % 8), 0);
            CHECK_RC(kvs_get_option(a->kv, KVS_OPT_THREADS, &v), 0);
            if (v < 1 || v > 8)
                note_fail("KVS_OPT_THREADS read back %lld", (long long)v);
        }
        return NULL;
    }
    {
        float *x = malloc(SUM_N * sizeof(float)), *y = malloc(SUM_N * sizeof(float));
        float *z = malloc(SUM_N * sizeof(float)), *out = malloc(SUM_N * sizeof(float));
        const kvs_key_t key = IK(a->id);
        if (!x || !y || !z || !out) {
            note_fail("malloc");
            goto done;
        }
        for (int r = 0; r < SUM_ROUNDS; r++) {
            for (int j = 0; j < SUM_N; j++) {
                x[j] = (float)(j % 1000);
                y[j] = (float)r;
                z[j] = (float)a->id;
            }
            CHECK_RC(kvs_pushpull(a->kv, 3, (kvs_key_t[]){ key, key, key },
                                  (kvs_array_t[]){ ARR(x, KVS_FLOAT32, 1, SUM_N),
                                                   ARR(y, KVS_FLOAT32, 1, SUM_N),
                                                   ARR(z, KVS_FLOAT32, 1, SUM_N) },
                                  (kvs_array_t[]){ ARR(out, KVS_FLOAT32, 1, SUM_N),
                                                   ARR(out, KVS_FLOAT32, 1, SUM_N),
                                                   ARR(out, KVS_FLOAT32, 1, SUM_N) },
                                  0),
                     0);
            for (int j = 0; j < SUM_N; j++)
                if (out[j] != (float)(j % 1000 + r + a->id)) {
                    note_fail("thread %d round %d element %d: %g", a->id, r, j, (double)out[j]);
                    goto done;
                }
        }
    done:
        free(x);
        free(y);
        free(z);
        free(out);
    }
    return NULL;
}

static void test_big_sums_while_options_change(void **state)
{
    kvs_t *kv = new_store("local");
    struct sum_arg args[NTHREADS];
    float *z = calloc(SUM_N, sizeof(float));
    (void)state;
    reset_failures();
    assert_non_null(z);
    for (int k = 0; k < NTHREADS - 1; k++)
        assert_int_equal(kvs_init(kv, 1, (kvs_key_t[]){ IK(k) },
                                  (kvs_array_t[]){ ARR(z, KVS_FLOAT32, 1, SUM_N) }),
                         0);
    free(z);
    for (int i = 0; i < NTHREADS; i++)
        args[i] = (struct sum_arg){ kv, i };
    run_threads(NTHREADS, summer, args, sizeof args[0]);
    assert_no_failures();
    kvs_close(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pushes_with_updater_are_counted_exactly),
        cmocka_unit_test(test_optimizer_steps_are_counted_exactly),
        cmocka_unit_test(test_pulls_never_see_a_torn_value),
        cmocka_unit_test(test_concurrent_init),
        cmocka_unit_test(test_last_error_of_create_is_per_thread),
        cmocka_unit_test(test_last_error_of_a_handle_from_two_threads),
        cmocka_unit_test(test_stores_created_and_closed_on_threads),
        cmocka_unit_test(test_big_sums_while_options_change),
    };
    return cmocka_run_group_tests_name("threads", tests, NULL, NULL);
}
