/*
 * bufs.h - the zero-copy buffers a handle has handed out (kvs_array_alloc):
 * a sorted set of disjoint byte ranges, and a first-fit search for a free
 * range in a span. The dist client places buffers in its staging area
 * (ranges are staging offsets, taken from the top, so that the bottom stays
 * free for the copies of ordinary calls); the local store mallocs them
 * (ranges are addresses). Knows nothing of memory itself: it never reads or
 * writes a buffer. Not thread-safe: its owner's lock covers it.
 */
#ifndef KVS_BUFS_H
#define KVS_BUFS_H

#include <stddef.h>
#include <stdint.h>

struct kvs__range {
    uint64_t off, len;                 /* len > 0 */
};

struct kvs__bufs {                     /* zero-initialised: empty */
    struct kvs__range *r;              /* sorted by off, disjoint */
    size_t n, cap;
};

void kvs__bufs_fini(struct kvs__bufs *b);

/* Adds [off, off + len), which must not overlap a range of b and must not
 * wrap. 0 or -ENOMEM (b unchanged). */
int kvs__bufs_add(struct kvs__bufs *b, uint64_t off, uint64_t len);

/* Removes the range that starts at off, storing its length in *len (may be
 * NULL). 0, or -ENOENT when no range starts there. */
int kvs__bufs_remove(struct kvs__bufs *b, uint64_t off, uint64_t *len);

/* The range that holds all of [off, off + len) (len 0: the byte at off),
 * or NULL. */
const struct kvs__range *kvs__bufs_find(const struct kvs__bufs *b, uint64_t off,
                                        uint64_t len);

/* The highest offset, a multiple of align (a power of two), where len bytes
 * fit in [lo, hi) without touching a range of b: *off and 0, or -ENOSPC. */
int kvs__bufs_fit_top(const struct kvs__bufs *b, uint64_t lo, uint64_t hi, uint64_t len,
                      uint64_t align, uint64_t *off);

/* The lowest offset of any range, or none when b is empty. */
uint64_t kvs__bufs_low(const struct kvs__bufs *b, uint64_t none);

/* The end of the highest range, or none when b is empty. */
uint64_t kvs__bufs_high(const struct kvs__bufs *b, uint64_t none);

#endif
