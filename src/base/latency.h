/*
 * latency.h - histograms of round latencies, as kvsd keeps them per key
 * and as the workers keep them in the combine area for the keys they
 * combine; and what kvsctl reads out of them: quantiles and the figures
 * it prints.
 *
 * A histogram is KVS__LAT_BUCKETS counters with power-of-two bounds:
 * bucket i counts the latencies in [2^i, 2^(i+1)) nanoseconds (bucket 0
 * also counts 0 ns, the last bucket everything from 2^(KVS__LAT_BUCKETS-1)
 * on: about 9 minutes). So a quantile is known to a factor of two only, and
 * is reported as the upper bound of the bucket it falls in: never less than
 * the true figure.
 */
#ifndef KVS_LATENCY_H
#define KVS_LATENCY_H

#include <stddef.h>
#include <stdint.h>

#define KVS__LAT_BUCKETS 40

/* The bucket of a latency of ns nanoseconds (negative counts as 0). */
static inline int kvs__lat_bucket(int64_t ns)
{
    int b;

    if (ns < 2)
        return 0;
    b = 63 - __builtin_clzll((uint64_t)ns);
    return b < KVS__LAT_BUCKETS ? b : KVS__LAT_BUCKETS - 1;
}

/* The upper bound of bucket b, in nanoseconds: 2^(b+1). */
static inline uint64_t kvs__lat_bound(int b)
{
    return (uint64_t)2 << b;
}

/* The upper bound of the bucket that holds the q-th quantile (0 < q <= 1)
 * of the histogram h (KVS__LAT_BUCKETS counts): the bucket where the
 * running count first reaches q times the total. q of 1 gives the highest
 * bucket that is not empty, the maximum. 0 when h is empty. The counts may
 * be any values: a sum past UINT64_MAX saturates. */
uint64_t kvs__lat_quantile(const uint64_t *h, double q);

/* A duration of ns nanoseconds in at most 7 characters, three significant
 * digits and a unit: "512ns", "32.8us", "1.05ms", "2.15s"; "-" for 0.
 * Writes into buf (size > 0), NUL-terminated, truncated to fit. */
void kvs__lat_format(char *buf, size_t size, uint64_t ns);

#endif
