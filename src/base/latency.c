/*
 * latency.c - quantiles of round-latency histograms and their figures in
 * words (latency.h). Pure functions: no state, no shared memory; callers
 * copy what they read from another process first.
 */
#include <stdio.h>

#include "base/latency.h"

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    uint64_t s;

    return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

uint64_t kvs__lat_quantile(const uint64_t *h, double q)
{
    uint64_t total = 0, run = 0, want;
    int top = -1;

    for (int b = 0; b < KVS__LAT_BUCKETS; b++) {
        total = sat_add(total, h[b]);
        if (h[b])
            top = b;
    }
    if (total == 0)
        return 0;
    if (!(q < 1))
        return kvs__lat_bound(top);
    /* The rank of the quantile, rounded up and at least the first. */
    want = (uint64_t)((double)total * (q > 0 ? q : 0));
    if ((double)want < (double)total * q)
        want++;
    if (want == 0)
        want = 1;
    for (int b = 0; b < KVS__LAT_BUCKETS; b++) {
        run = sat_add(run, h[b]);
        if (run >= want)
            return kvs__lat_bound(b);
    }
    return kvs__lat_bound(top);
}

void kvs__lat_format(char *buf, size_t size, uint64_t ns)
{
    static const struct { double scale; const char *unit; } units[] = {
        { 1e9, "s" }, { 1e6, "ms" }, { 1e3, "us" },
    };
    double v = (double)ns;

    if (ns == 0) {
        snprintf(buf, size, "-");
        return;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        /* 999.7us reads as 1.00ms, not 1000us. */
        if (v >= units[i].scale * 0.9995) {
            v /= units[i].scale;
            /* Three significant digits; seconds past 999 keep all of theirs. */
            snprintf(buf, size, v >= 100 ? "%.0f%s" : v >= 10 ? "%.1f%s" : "%.2f%s", v,
                     units[i].unit);
            return;
        }
    }
    snprintf(buf, size, "%lluns", (unsigned long long)ns);
}
