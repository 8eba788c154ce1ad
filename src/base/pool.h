/*
 * pool.h - a process-wide pool of worker threads for splitting one big
 * element-wise job into chunks. Started on first use, stopped at exit.
 * It never blocks forever on a caller: the caller works on chunks too, and
 * only waits for chunks that pool threads have already taken.
 */
#ifndef KVS_POOL_H
#define KVS_POOL_H

#include <stddef.h>

/* Runs fn(ctx, begin, end) over [0, n) in chunks of at least grain items,
 * on at most nthreads threads including the caller (0: the pool's default,
 * the number of online CPUs, at most 8). Returns when every chunk is done.
 * When n < 2 * grain, or threads cannot be started, everything runs on the
 * caller. Safe to call from several threads at once. */
void kvs__parallel_for(size_t n, size_t grain, int nthreads,
                       void (*fn)(void *ctx, size_t begin, size_t end), void *ctx);

/* For a job of m items laid end to end (item i is [start[i], start[i+1]),
 * start sorted): the first item that ends after pos, m when none does.
 * A chunk [begin, end) of kvs__parallel_for starts at the item of begin. */
static inline int kvs__span_first(const size_t *start, int m, size_t pos)
{
    int lo = 0, hi = m;

    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;

        if (start[mid + 1] <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The default thread count described above. */
int kvs__pool_default_threads(void);

#endif
