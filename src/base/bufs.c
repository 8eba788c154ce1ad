/*
 * bufs.c - a sorted set of disjoint ranges (see bufs.h). An array kept in
 * order: a handle holds tens to a few thousand buffers, allocated at
 * start-up, and looked up (binary search) on every push.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/bufs.h"

void kvs__bufs_fini(struct kvs__bufs *b)
{
    free(b->r);
    *b = (struct kvs__bufs){ 0 };
}

/* The index of the first range whose off is > off. */
static size_t upper(const struct kvs__bufs *b, uint64_t off)
{
    size_t lo = 0, hi = b->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (b->r[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int kvs__bufs_add(struct kvs__bufs *b, uint64_t off, uint64_t len)
{
    size_t i = upper(b, off);

    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 16;
        struct kvs__range *r = realloc(b->r, cap * sizeof *r);

        if (!r)
            return -ENOMEM;
        b->r = r;
        b->cap = cap;
    }
    memmove(&b->r[i + 1], &b->r[i], (b->n - i) * sizeof *b->r);
    b->r[i] = (struct kvs__range){ off, len };
    b->n++;
    return 0;
}

int kvs__bufs_remove(struct kvs__bufs *b, uint64_t off, uint64_t *len)
{
    size_t i = upper(b, off);

    if (i == 0 || b->r[i - 1].off != off)
        return -ENOENT;
    i--;
    if (len)
        *len = b->r[i].len;
    memmove(&b->r[i], &b->r[i + 1], (b->n - i - 1) * sizeof *b->r);
    b->n--;
    return 0;
}

const struct kvs__range *kvs__bufs_find(const struct kvs__bufs *b, uint64_t off,
                                        uint64_t len)
{
    size_t i = upper(b, off);
    const struct kvs__range *r;

    if (i == 0)
        return NULL;
    r = &b->r[i - 1];
    if (off - r->off >= r->len || (len > 0 && len > r->len - (off - r->off)))
        return NULL;
    return r;
}

int kvs__bufs_fit_top(const struct kvs__bufs *b, uint64_t lo, uint64_t hi, uint64_t len,
                      uint64_t align, uint64_t *off)
{
    /* Gaps from the top down: between range i-1's end and range i's start
     * (or hi after the last). */
    for (size_t i = b->n + 1; i-- > 0;) {
        uint64_t end = i < b->n ? b->r[i].off : hi,
                 start = i > 0 ? b->r[i - 1].off + b->r[i - 1].len : lo, at;

        if (end > hi)
            end = hi;
        if (start < lo)
            start = lo;
        if (end <= start || end - start < len)
            continue;
        at = (end - len) & ~(align - 1);
        if (at >= start) {
            *off = at;
            return 0;
        }
    }
    return -ENOSPC;
}

uint64_t kvs__bufs_low(const struct kvs__bufs *b, uint64_t none)
{
    return b->n ? b->r[0].off : none;
}

uint64_t kvs__bufs_high(const struct kvs__bufs *b, uint64_t none)
{
    return b->n ? b->r[b->n - 1].off + b->r[b->n - 1].len : none;
}
