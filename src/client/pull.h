/*
 * pull.h - the values kvsd answers a pull with, out to the caller's
 * arrays (pull.c). Nothing here is API.
 */
#ifndef KVS_CLIENT_PULL_H
#define KVS_CLIENT_PULL_H

#include "kvs.h"
#include "base/error.h"
#include "client/link.h"

/* Hands out the value of a completion: a view of it in the arena (dist_sync
 * only: kvsd rewrites it in the next round, which needs this worker's push),
 * else a copy into out's data. */
int kvs__client_deliver(kvs_t *kv, const struct kvs__answer *q, kvs_array_t *out, int view,
                        struct kvs__err *e);

/* kvsd's part of a pull (a kvs__split_fn, combine.h): pulls every
 * key's value; outs of a key all receive it. rows (may be
 * NULL): per out, the row ids to copy, others zeroed. view: outs get
 * pointers to the values (rows NULL). Otherwise kvsd writes a group's
 * first out itself where it lies on a device kvsd can reach
 * (kvs__client_share_device); the group's other outs are copied from it. */
int kvs__client_pull_kd(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                        kvs_array_t *outs, const kvs_array_t *rows, int view, int priority,
                        const char *what, struct kvs__err *e);

#endif
