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

/* The default thread count described above. */
int kvs__pool_default_threads(void);

#endif
