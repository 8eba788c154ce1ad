/*
 * pool.c - the process-wide worker threads behind kvs__parallel_for: one
 * job at a time is posted, its chunks are handed out by an atomic counter
 * to the caller and to the workers that join, and the caller returns when
 * every chunk is done.
 *
 * It must never make a caller wait for another caller's job (a busy pool
 * means the second job runs on its own caller), never let a worker touch a
 * job after its caller returned, never spin instead of sleeping, and never
 * leave a forked child with locks or threads that do not exist there
 * (a task itself must not fork: its job would wait for workers the child
 * does not have).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/pool.h"

#define MAX_THREADS 64                 /* the caller and 63 workers */
#define DEFAULT_CAP 8
/* Chunks per thread: more than one so that the caller, which starts at
 * once, takes the share of a worker that wakes late. */
#define CHUNKS_PER_THREAD 4

typedef void task_fn(void *ctx, size_t begin, size_t end);

static struct {
    /* Held by the one caller whose job is posted, for the whole job. */
    pthread_mutex_t job_lock;
    /* Guards everything below except next. Held only for bookkeeping,
     * never while a task runs. */
    pthread_mutex_t lock;
    pthread_cond_t work;               /* workers sleep here */
    pthread_cond_t idle;               /* the job's caller sleeps here */
    pthread_t threads[MAX_THREADS - 1];
    int nthreads;                      /* workers running */
    int stopping;                      /* process exit: no more jobs ever */

    uint64_t gen;                      /* bumped for every job posted */
    int open;                          /* the job may still be joined */
    int want;                          /* workers the job can use */
    int joined;                        /* workers that joined it */
    int active;                        /* joined workers not yet back */
    size_t done;                       /* chunks finished, all threads */
    task_fn *fn;
    void *ctx;
    size_t n, chunk, nchunks;
    atomic_size_t next;                /* the next chunk to hand out */
} pool = {
    .job_lock = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .work = PTHREAD_COND_INITIALIZER,
    .idle = PTHREAD_COND_INITIALIZER,
};

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static int default_threads = 1;

/* Runs chunks until none is left; returns how many this thread ran. */
static size_t run_chunks(task_fn *fn, void *ctx, size_t n, size_t chunk, size_t nchunks)
{
    size_t mine = 0;

    for (;;) {
        /* Relaxed: the job's fields were published under pool.lock, and the
         * chunk's results are published by pool.lock when they are counted. */
        size_t c = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed);
        size_t begin, end;

        if (c >= nchunks)
            break;
        begin = c * chunk;
        end = c + 1 == nchunks ? n : begin + chunk;
        fn(ctx, begin, end);
        mine++;
    }
    return mine;
}

static void *worker_main(void *arg)
{
    /* Generations start at 1, so a new worker may join the job in flight. */
    uint64_t seen = 0;

    (void)arg;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        task_fn *fn;
        void *ctx;
        size_t n, chunk, nchunks, mine;

        while (!pool.stopping && !(pool.open && pool.gen != seen && pool.joined < pool.want))
            pthread_cond_wait(&pool.work, &pool.lock);
        if (pool.stopping)
            break;
        seen = pool.gen;
        pool.joined++;
        pool.active++;
        fn = pool.fn;
        ctx = pool.ctx;
        n = pool.n;
        chunk = pool.chunk;
        nchunks = pool.nchunks;
        pthread_mutex_unlock(&pool.lock);

        mine = run_chunks(fn, ctx, n, chunk, nchunks);

        pthread_mutex_lock(&pool.lock);
        pool.done += mine;
        pool.active--;
        if (pool.active == 0 && pool.done == pool.nchunks)
            pthread_cond_signal(&pool.idle);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* Starts workers until there are want of them; called with pool.lock held.
 * A failure leaves fewer workers, and the jobs run on fewer threads. */
static void grow(int want)
{
    sigset_t all, old;

    if (want > MAX_THREADS - 1)
        want = MAX_THREADS - 1;
    if (pool.nthreads >= want)
        return;
    /* Signals meant for the application must go to its own threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (pool.nthreads < want) {
        if (pthread_create(&pool.threads[pool.nthreads], NULL, worker_main, NULL) != 0)
            break;
        pthread_setname_np(pool.threads[pool.nthreads], "kvs-pool");
        pool.nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* At exit (or when the library is unloaded): let every worker finish the
 * chunks it holds, then join it, so that no thread runs code that is gone. */
static void pool_stop(void)
{
    pthread_t threads[MAX_THREADS - 1];
    pthread_t self = pthread_self();
    int n;

    pthread_mutex_lock(&pool.lock);
    pool.stopping = 1;
    n = pool.nthreads;
    for (int i = 0; i < n; i++)
        threads[i] = pool.threads[i];
    pool.nthreads = 0;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < n; i++) {
        /* exit() called from a task on a worker: that worker cannot wait
         * for itself. */
        if (pthread_equal(threads[i], self))
            pthread_detach(threads[i]);
        else
            pthread_join(threads[i], NULL);
    }
}

static void before_fork(void)
{
    pthread_mutex_lock(&pool.lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&pool.lock);
}

/* The child has only the forking thread: the workers, and any other
 * caller holding job_lock, are gone, and the condition variables may
 * count waiters that no longer exist. Start over with fresh objects; new
 * workers are started by the next job. */
static void after_fork_child(void)
{
    pthread_mutex_init(&pool.job_lock, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.idle, NULL);
    pool.nthreads = 0;
    pool.open = 0;
    pool.want = 0;
    pool.joined = 0;
    pool.active = 0;
    pool.done = 0;
}

static int count_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;

    /* A container or taskset may allow fewer CPUs than are online. */
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 &&
        CPU_COUNT(&set) < n)
        n = CPU_COUNT(&set);
    if (n < 1)
        n = 1;
    if (n > DEFAULT_CAP)
        n = DEFAULT_CAP;
    return (int)n;
}

static void pool_setup(void)
{
    default_threads = count_cpus();
    /* Without these hooks the pool still works in the parent; a child
     * would risk inheriting a held lock, so forking is the only loss. */
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    atexit(pool_stop);
}

int kvs__pool_default_threads(void)
{
    pthread_once(&setup_once, pool_setup);
    return default_threads;
}

void kvs__parallel_for(size_t n, size_t grain, int nthreads, task_fn *fn, void *ctx)
{
    size_t chunk, nchunks, per, mine;
    int t;

    if (n == 0)
        return;
    if (grain == 0)
        grain = 1;
    if (n / 2 < grain)
        goto inline_run;
    t = nthreads > 0 ? nthreads : kvs__pool_default_threads();
    if (t > MAX_THREADS)
        t = MAX_THREADS;
    if (t <= 1)
        goto inline_run;
    per = n / ((size_t)t * CHUNKS_PER_THREAD);
    chunk = per > grain ? per : grain;
    /* The last chunk takes the remainder, so no chunk is under grain. */
    nchunks = n / chunk;
    if (nchunks < 2)
        goto inline_run;
    if ((size_t)t > nchunks)
        t = (int)nchunks;

    /* Another caller's job is posted (or this is a task calling back in):
     * working alone beats waiting for it. */
    if (pthread_mutex_trylock(&pool.job_lock) != 0)
        goto inline_run;
    pthread_once(&setup_once, pool_setup);
    pthread_mutex_lock(&pool.lock);
    if (pool.stopping)
        goto inline_unlock;
    grow(t - 1);
    pool.want = t - 1 < pool.nthreads ? t - 1 : pool.nthreads;
    if (pool.want == 0)
        goto inline_unlock;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.chunk = chunk;
    pool.nchunks = nchunks;
    pool.done = 0;
    pool.joined = 0;
    atomic_store_explicit(&pool.next, 0, memory_order_relaxed);
    pool.gen++;
    pool.open = 1;
    if (pool.want >= pool.nthreads) {
        pthread_cond_broadcast(&pool.work);
    } else {
        for (int i = 0; i < pool.want; i++)
            pthread_cond_signal(&pool.work);
    }
    pthread_mutex_unlock(&pool.lock);

    mine = run_chunks(fn, ctx, n, chunk, nchunks);

    pthread_mutex_lock(&pool.lock);
    pool.open = 0;
    pool.done += mine;
    /* Waits only for chunks workers hold, and for late joiners to see
     * that nothing is left: after this no worker refers to the job. */
    while (pool.done < pool.nchunks || pool.active > 0)
        pthread_cond_wait(&pool.idle, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.job_lock);
    return;

inline_unlock:
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.job_lock);
inline_run:
    fn(ctx, 0, n);
}
