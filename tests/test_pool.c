/*
 * test_pool.c - unit tests of pool.c, the thread pool behind the kernels:
 * every item of a job runs exactly once in chunks of at least the grain,
 * small jobs and one-thread jobs stay on the caller, slow jobs reach the
 * workers, several callers at once, a task that calls back into the pool,
 * fork while the pool is busy, and a process that cannot start threads.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <setjmp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernels/array.h"
#include "base/pool.h"

/* Forking a multi-threaded process is not supported under TSan, and no
 * sanitizer runs under an address-space limit. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define NO_THREADS_ARG "--pool-without-threads"

/* Tasks and helper threads record what they saw: cmocka's asserts may only
 * fail on the test's own thread. */
struct cover {
    uint8_t *hits;
    size_t grain, n;
    atomic_size_t calls, items, min_len;
    atomic_int bad_range;
};

static void cover_task(void *ctx, size_t begin, size_t end)
{
    struct cover *c = ctx;
    size_t len = end - begin, cur;

    if (!(begin < end && end <= c->n)) {
        atomic_store(&c->bad_range, 1);
        return;
    }
    for (size_t i = begin; i < end; i++)
        c->hits[i]++;
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_add(&c->items, len);
    cur = atomic_load(&c->min_len);
    while (len < cur && !atomic_compare_exchange_weak(&c->min_len, &cur, len))
        ;
}

/* Runs one job over [0, n) and returns NULL, or what went wrong. */
static const char *cover(size_t n, size_t grain, int nthreads)
{
    struct cover c = { .hits = calloc(n ? n : 1, 1), .grain = grain, .n = n };
    const char *why = NULL;

    if (c.hits == NULL)
        return "out of memory";
    atomic_init(&c.calls, 0);
    atomic_init(&c.items, 0);
    atomic_init(&c.min_len, SIZE_MAX);
    atomic_init(&c.bad_range, 0);
    kvs__parallel_for(n, grain, nthreads, cover_task, &c);
    for (size_t i = 0; i < n && why == NULL; i++)
        if (c.hits[i] != 1)
            why = c.hits[i] ? "an item ran twice" : "an item never ran";
    if (atomic_load(&c.bad_range))
        why = "a task got an empty or out-of-range chunk";
    else if (atomic_load(&c.items) != n)
        why = "items run do not add up to n";
    /* Chunks are never under grain (the whole range may be). */
    else if (n > 0 && atomic_load(&c.calls) > 1 && atomic_load(&c.min_len) < grain)
        why = "a chunk under grain";
    free(c.hits);
    return why;
}

static void run_cover(size_t n, size_t grain, int nthreads)
{
    const char *why = cover(n, grain, nthreads);

    if (why != NULL)
        fail_msg("n=%zu grain=%zu threads=%d: %s", n, grain, nthreads, why);
}

static void test_pool_cover(void **state)
{
    int def = kvs__pool_default_threads();
    long online = sysconf(_SC_NPROCESSORS_ONLN);

    (void)state;
    assert_true(def >= 1 && def <= 8);
    assert_true(online < 1 || def <= online);
    run_cover(0, 10, 0);
    run_cover(1, 0, 0);
    run_cover(1000000, 1000, 0);
    run_cover(1000000, 1000, 1);
    run_cover(1000000, 1000, 3);
    run_cover(1000000, 1000, 64);
    run_cover(1000000, 1000, 1000);                 /* capped */
    run_cover(1000003, 7, 5);
    run_cover(20, 10, 4);                           /* exactly two chunks */
    run_cover(19, 10, 4);                           /* under 2 * grain: one call */
    run_cover(100, SIZE_MAX / 2, 4);                /* huge grain: n / 2 < grain */
}

struct who {
    pthread_t caller;
    atomic_int calls, foreign;
};

static void who_task(void *ctx, size_t begin, size_t end)
{
    struct who *w = ctx;

    (void)begin;
    (void)end;
    atomic_fetch_add(&w->calls, 1);
    if (!pthread_equal(pthread_self(), w->caller))
        atomic_fetch_add(&w->foreign, 1);
    usleep(2000);
}

static void test_pool_threads(void **state)
{
    struct who w = { .caller = pthread_self() };

    (void)state;
    /* Small: one call, on the caller. */
    atomic_init(&w.calls, 0);
    atomic_init(&w.foreign, 0);
    kvs__parallel_for(1999, 1000, 8, who_task, &w);
    assert_int_equal(atomic_load(&w.calls), 1);
    assert_int_equal(atomic_load(&w.foreign), 0);
    /* One thread asked for: all on the caller. */
    atomic_store(&w.calls, 0);
    kvs__parallel_for(64000, 1000, 1, who_task, &w);
    assert_int_equal(atomic_load(&w.calls), 1);
    assert_int_equal(atomic_load(&w.foreign), 0);
    /* Slow chunks on 4 threads: workers wake long before the caller could
     * finish 16 chunks of 2 ms alone. */
    atomic_store(&w.calls, 0);
    kvs__parallel_for(16000, 1000, 4, who_task, &w);
    assert_int_equal(atomic_load(&w.calls), 16);
    assert_true(atomic_load(&w.foreign) > 0);
}

struct caller_arg {
    int id, ok;
};

static void *caller_main(void *p)
{
    struct caller_arg *arg = p;
    const size_t n = 300000;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *o = malloc(n * sizeof *o);
    const void *in[] = { a, b };

    arg->ok = a && b && o;
    for (int round = 0; arg->ok && round < 30; round++) {
        for (size_t i = 0; i < n; i++) {
            a[i] = (float)(arg->id * 1000 + round);
            b[i] = (float)(i % 4096);
        }
        kvs__sum(KVS_FLOAT32, o, in, 2, n, 0);
        for (size_t i = 0; i < n; i++)
            if (o[i] != a[i] + b[i])
                arg->ok = 0;
        if (cover(200000, 500, 1 + round % 4) != NULL)
            arg->ok = 0;
    }
    free(a);
    free(b);
    free(o);
    return NULL;
}

static void test_pool_concurrent(void **state)
{
    pthread_t th[4];
    struct caller_arg args[4];

    (void)state;
    for (int i = 0; i < 4; i++) {
        args[i] = (struct caller_arg){ .id = i };
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_true(args[i].ok);
    }
}

struct nest {
    uint8_t *hits;
    size_t inner;
};

static void nest_inner(void *ctx, size_t begin, size_t end)
{
    uint8_t *hits = ctx;

    for (size_t i = begin; i < end; i++)
        hits[i]++;
}

static void nest_outer(void *ctx, size_t begin, size_t end)
{
    struct nest *nt = ctx;

    /* A task that calls back into the pool runs its inner job alone. */
    for (size_t r = begin; r < end; r++)
        kvs__parallel_for(nt->inner, 100, 0, nest_inner, nt->hits + r * nt->inner);
}

static void test_pool_nested(void **state)
{
    struct nest nt = { .inner = 10000 };
    const size_t rows = 64;

    (void)state;
    nt.hits = calloc(rows * nt.inner, 1);
    assert_non_null(nt.hits);
    kvs__parallel_for(rows, 4, 4, nest_outer, &nt);
    for (size_t i = 0; i < rows * nt.inner; i++)
        assert_int_equal(nt.hits[i], 1);
    free(nt.hits);
}

static atomic_int busy_stop, busy_bad;

static void *busy_main(void *p)
{
    (void)p;
    while (!atomic_load(&busy_stop))
        if (cover(400000, 1000, 0) != NULL)
            atomic_store(&busy_bad, 1);
    return NULL;
}

static void test_pool_fork(void **state)
{
    pthread_t busy;

    (void)state;
    if (UNDER_TSAN)
        skip();
    run_cover(1000000, 1000, 4);                    /* workers exist */
    atomic_store(&busy_stop, 0);
    assert_int_equal(pthread_create(&busy, NULL, busy_main, NULL), 0);
    /* Fork while another thread keeps the pool busy, so that locks may be
     * held at the moment of the fork. */
    for (int i = 0; i < 8; i++) {
        pid_t pid = fork();
        int status;

        assert_true(pid >= 0);
        if (pid == 0) {
            const size_t n = 2000000;
            float *a = malloc(n * sizeof *a), *o = malloc(n * sizeof *o);
            const void *in[] = { a, a };
            int ok = a && o;

            alarm(30);                              /* a deadlock fails, never hangs */
            for (size_t j = 0; ok && j < n; j++)
                a[j] = (float)j;
            if (ok)
                kvs__sum(KVS_FLOAT32, o, in, 2, n, 4);
            for (size_t j = 0; ok && j < n; j++)
                ok = o[j] == 2.0f * (float)j;
            _exit(ok ? 0 : 1);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    atomic_store(&busy_stop, 1);
    assert_int_equal(pthread_join(busy, NULL), 0);
    assert_int_equal(atomic_load(&busy_bad), 0);
}

/* Run in a fresh process (exec'd, so that no thread stacks are cached):
 * with the address space capped below one thread stack, the pool cannot
 * start a thread and every job must run whole on the caller. */
static int pool_without_threads(void)
{
    pthread_attr_t attr;
    size_t stack = 0;
    long pages;
    FILE *f;
    struct rlimit rl;
    struct who w = { .caller = pthread_self() };

    if (pthread_getattr_default_np(&attr) != 0 || pthread_attr_getstacksize(&attr, &stack) != 0)
        return 77;
    pthread_attr_destroy(&attr);
    f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%ld", &pages) != 1 || stack < ((size_t)1 << 20))
        return 77;
    fclose(f);
    rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + stack / 2;
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        return 77;
    atomic_init(&w.calls, 0);
    atomic_init(&w.foreign, 0);
    kvs__parallel_for(16000, 1000, 4, who_task, &w);
    if (atomic_load(&w.calls) != 1 || atomic_load(&w.foreign) != 0)
        return 1;
    return cover(100000, 1000, 8) == NULL ? 0 : 2;
}

static void test_pool_no_threads(void **state)
{
    pid_t pid;
    int status;

    (void)state;
    if (UNDER_TSAN || UNDER_ASAN)
        skip();
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *argv[] = { "test_pool", NO_THREADS_ARG, NULL };

        alarm(30);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        skip();
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_cover),
        cmocka_unit_test(test_pool_threads),
        cmocka_unit_test(test_pool_concurrent),
        cmocka_unit_test(test_pool_nested),
        cmocka_unit_test(test_pool_fork),
        cmocka_unit_test(test_pool_no_threads),
    };

    if (argc == 2 && strcmp(argv[1], NO_THREADS_ARG) == 0)
        return pool_without_threads();
    return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}
