/*
 * staging.c - what a dist handle knows of its staging area: the part
 * below the lowest buffer of kvs_array_alloc, where the copies of calls
 * go; whether some staging is still lent to kvsd; whether an array lies in
 * a live buffer; and freeing a hold, which gives its range back.
 *
 * It never waits and never talks to kvsd: taking a range, which may have
 * to, is call.c's (kvs__client_xfer_take).
 */
#include <stdint.h>
#include <stdlib.h>

#include "client/link.h"

/* Bytes at the bottom of staging for the copies of calls: those below the
 * lowest buffer (c->lock held). */
uint64_t kvs__client_transient(const struct kvs__client *c)
{
    return kvs__bufs_low(&c->bufs, c->staging_size) & ~(uint64_t)63;
}

/* 1 when some staging lent to kvsd is not returned yet; zc: only counting
 * holds with data in buffers (c->lock held). */
int kvs__client_lending(const struct kvs__client *c, int zc)
{
    for (const struct kvs__hold *h = c->holds; h; h = h->next)
        if (!zc || h->zc)
            return 1;
    return 0;
}

int kvs__client_in_buffer(const struct kvs__client *c, const void *data, uint64_t bytes,
                          uint64_t *off, struct kvs__err *e)
{
    uintptr_t p = (uintptr_t)data, s = (uintptr_t)c->staging;

    if (p < s || p - s >= c->staging_size)
        return 0;
    if (!kvs__bufs_find(&c->bufs, p - s, bytes))
        return kvs__fail(e, KVS_EBADARG, "an array at %p lies in kvs's staging area "
                         "but not in a live buffer of kvs_array_alloc", data);
    *off = p - s;
    return 1;
}

/* Frees a hold that no request was sent for, or whose data kvsd has all
 * returned, and gives back its range (c->lock held). */
void kvs__client_hold_free(struct kvs__client *c, struct kvs__hold *h)
{
    if (!h)
        return;
    if (h->len)
        kvs__bufs_remove(&c->xfer, h->off, NULL);
    free(h->returned);
    free(h);
}
