/*
 * pull.c - the values kvsd answers a pull with: copied out of the
 * read-only arena (retried while kvsd rewrites the block), handed out as
 * pointers into it (views, dist_sync only), or written by kvsd itself
 * into a device out it can reach (dev.c), the key's other outs copied
 * from that one.
 *
 * Owns nothing past a call. It must never trust a range a completion
 * names: each is checked against the arena and the size expected before
 * a byte is read; a bad one breaks the handle (wait.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "device/mem.h"
#include "proto/layout.h"
#include "proto/trace.h"
#include "client/groups.h"
#include "client/link.h"
#include "client/dev.h"
#include "client/pull.h"

/* The block of a value a completion points to, once its range is checked
 * against the arena and the size the caller expects. */
static int value_block(struct kvs__client *c, const struct kvs__answer *q, size_t bytes,
                       const struct kvs__block_head **bh, struct kvs__err *e)
{
    if (q->value_len != bytes || q->value_off < KVS__ARENA_DATA_OFF + sizeof **bh
        || (q->value_off & 63) != 0) {
        pthread_mutex_lock(&c->lock);
        kvs__client_broken(c, e, KVS_EPROTO, "kvsd answered a pull with a bad arena range");
        pthread_mutex_unlock(&c->lock);
        return KVS_EPROTO;
    }
    *bh = (const struct kvs__block_head *)(c->arena + q->value_off - sizeof **bh);
    return 0;
}

/* Copies a value out of the arena into dst on device, retrying while kvsd
 * rewrites it (kvs__mem_write_out says how). */
static int copy_value(kvs_t *kv, const struct kvs__answer *q, void *dst, int device,
                      size_t bytes, const int64_t *rows, int64_t nrows, size_t row_bytes,
                      struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    const struct kvs__block_head *bh;
    struct kvs__opts o;
    int64_t deadline;
    int rc;

    kvs__opts_get(kv, &o);
    deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    if ((rc = value_block(c, q, bytes, &bh, e)) != 0)
        return rc;
    for (;;) {
        uint64_t s1 = atomic_load_explicit(&bh->seq, memory_order_acquire), s2;

        if ((s1 & 1) == 0) {
            if ((rc = kvs__mem_write_out(dst, device, c->arena + q->value_off, bytes, rows,
                                         nrows, row_bytes, (int)o.threads, e)) != 0)
                return rc;
            atomic_thread_fence(memory_order_acquire);
            s2 = atomic_load_explicit(&bh->seq, memory_order_relaxed);
            if (s1 == s2)
                return 0;
        }
        if (kvs__now_ns() >= deadline) {
            pthread_mutex_lock(&c->lock);
            rc = kvs__client_broken(c, e, KVS_ETIMEDOUT, "a value stayed busy in kvsd past the "
                                    "deadline");
            pthread_mutex_unlock(&c->lock);
            return rc;
        }
    }
}

int kvs__client_deliver(kvs_t *kv, const struct kvs__answer *q, kvs_array_t *out, int view,
                        struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    size_t bytes = kvs__client_array_bytes(out);
    const struct kvs__block_head *bh;
    int rc;

    if (!view)
        return copy_value(kv, q, out->data, out->device, bytes, NULL, 0, 0, e);
    if ((rc = value_block(c, q, bytes, &bh, e)) != 0)
        return rc;
    if (atomic_load_explicit(&bh->seq, memory_order_acquire) & 1) {
        pthread_mutex_lock(&c->lock);
        rc = kvs__client_broken(c, e, KVS_EPROTO, "kvsd answered a pull with a value it is "
                                "still writing");
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    out->data = (void *)(c->arena + q->value_off);
    return 0;
}

/* What the requests of pull_groups are made from. */
struct pull_src {
    int priority, start;
    const struct kvs__groups *g;
    const kvs_key_t *keys;
    const kvs_array_t *outs;
    const int *dev;                    /* per group: kvsd writes its first out, at at[],
                                        * in this device buffer (kvs__client_share_device), or -1 */
    const uint64_t *at;
};

static void fill_pull(const void *ctx, int i, struct kvs__sqe *s)
{
    const struct pull_src *src = ctx;
    int j = src->start + i;
    const kvs_array_t *a = &src->outs[src->g->first[j]];

    *s = (struct kvs__sqe){ .op = KVS__OP_PULL, .priority = src->priority };
    if (src->dev[j] >= 0) {
        s->flags |= KVS__SQE_DEVICE;
        s->arg = (uint64_t)src->dev[j];
        s->data_off = src->at[j];
        s->data_len = kvs__client_array_bytes(a);
    }
    kvs__client_sqe_key(s, src->keys[src->g->first[j]]);
    kvs__client_sqe_array(s, a);
}

/* Out i of a device pull's group (kvsd wrote the group's first out): a
 * copy of the first, unless it is the first. Queued onto a device. */
static int deliver_copy(const struct kvs__groups *g, kvs_array_t *outs, int i,
                        struct kvs__err *e)
{
    const kvs_array_t *f = &outs[g->first[g->gid[i]]];

    if (f == &outs[i])
        return 0;
    return kvs__mem_copy(outs[i].data, outs[i].device, f->data, f->device,
                         kvs__client_array_bytes(f), 1, e);
}

int kvs__client_pull_kd(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                        kvs_array_t *outs, const kvs_array_t *rows, int view, int priority,
                        const char *what, struct kvs__err *e)
{
    struct pull_src src = { .priority = priority, .keys = keys, .outs = outs };
    (void)values;
    struct kvs__answer *a = NULL;
    uint64_t *at = NULL;
    int *dev = NULL, copied = 0;
    struct kvs__groups g;
    uint64_t gen = kvs__client_gen(kv->client);
    int64_t t;
    int rc;

    if ((rc = kvs__groups_make(n, keys, &g, e)) != 0)
        return rc;
    src.g = &g;
    if ((rc = kvs__groups_match(&g, keys, outs, view ? "view" : "out", e)) != 0)
        goto out;
    if (!(a = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *a))
        || !(dev = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *dev))
        || !(at = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *at))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    for (int j = 0; j < g.ng; j++)
        dev[j] = -1;
    if (!view && !rows && (rc = kvs__client_share_device(kv, &g, outs, 1, NULL, at, dev, e)) != 0)
        goto out;
    src.dev = dev;
    src.at = at;
    for (int start = 0; start < g.ng && rc == 0; start += KVS__LIST_MAX) {
        int len = g.ng - start < KVS__LIST_MAX ? g.ng - start : KVS__LIST_MAX;
        struct kvs__answers part = { .a = a + start, .failed = -1 };

        src.start = start;
        rc = kvs__client_run(kv, fill_pull, &src, len,
                             kvs__groups_tabular(&g, keys, NULL, dev, start, start + len), &part,
                             NULL, what, e);
    }
    t = kvs__tr_begin();
    for (int i = 0; i < n && rc == 0; i++) {
        size_t bytes = kvs__client_array_bytes(&outs[i]);

        if (dev[g.gid[i]] >= 0) {
            rc = deliver_copy(&g, outs, i, e);
            copied = 1;
        } else if (!rows) {
            rc = kvs__client_deliver(kv, &a[g.gid[i]], &outs[i], view, e);
        } else {    /* the ids' data may be NULL when there are none: then no row */
            rc = copy_value(kv, &a[g.gid[i]], outs[i].data, outs[i].device, bytes,
                            rows[i].data ? rows[i].data : (const int64_t *)"", rows[i].shape[0],
                            outs[i].shape[0] ? bytes / (size_t)outs[i].shape[0] : 0, e);
        }
    }
    if (copied && rc == 0)
        rc = kvs__mem_finish(e);
    else if (copied)
        kvs__mem_finish(NULL);
    /* kvsd went meanwhile: what was read may be the next one's. */
    if (rc == 0)
        rc = kvs__client_since(kv->client, gen, e);
    if (!view)
        kvs__tr_list(KVS__TR_COPY_OUT, t, n, keys, outs);
out:
    for (int j = 0; dev && j < g.ng; j++)
        if (dev[j] >= 0)
            kvs__client_devbuf_unpin(kv->client, dev[j]);
    free(at);
    free(dev);
    free(a);
    kvs__groups_free(&g);
    return rc;
}
