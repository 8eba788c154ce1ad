/*
 * shard.c - the rule of which host owns which key or part of a key
 * (shard.h). It owns the arithmetic only: it never looks at a daemon, a
 * round or a value, so that kvsd and kvsctl plan run the same code.
 */
#include "store/key.h"
#include "proto/shard.h"
#include "proto/wire.h"

uint64_t kvs__shard_split_bytes(int nhosts)
{
    uint64_t b = nhosts > 2 ? 2 * KVS__SPLIT_BYTES / (uint64_t)nhosts : KVS__SPLIT_BYTES;

    return b > KVS__SPLIT_FLOOR ? b : KVS__SPLIT_FLOOR;
}

struct kvs__shard kvs__shard_of(int nhosts)
{
    return (struct kvs__shard){ nhosts, kvs__shard_split_bytes(nhosts), KVS__PART_BYTES };
}

int kvs__shard_owner(const struct kvs__shard *s, kvs_key_t key)
{
    return s->nhosts <= 1 ? 0 : (int)(kvs__key_hash(key) % (uint64_t)s->nhosts);
}

int kvs__shard_parts(const struct kvs__shard *s, uint64_t bytes)
{
    uint64_t h = (uint64_t)s->nhosts, per;

    if (h <= 1 || bytes < s->split_bytes)
        return 1;
    per = (bytes + h * s->part_bytes - 1) / (h * s->part_bytes);
    if (per > KVS__PARTS_MAX / h)
        per = KVS__PARTS_MAX / h;
    return (int)(h * per);
}

int kvs__shard_per_host(const struct kvs__shard *s, int nparts)
{
    return nparts >= s->nhosts ? nparts / s->nhosts : 1;
}

int kvs__shard_part_owner(const struct kvs__shard *s, int owner, int nparts, int p)
{
    return (owner + p / kvs__shard_per_host(s, nparts)) % (s->nhosts > 0 ? s->nhosts : 1);
}

int kvs__shard_host_range(const struct kvs__shard *s, kvs_key_t key, uint64_t count,
                          size_t esize, uint64_t row, int h, uint64_t *first, uint64_t *n)
{
    int np = kvs__shard_parts(s, count * esize), per = kvs__shard_per_host(s, np);
    int lo = (h - kvs__shard_owner(s, key) + s->nhosts) % s->nhosts * per;
    uint64_t f, c;

    if (np <= 1)
        return 0;
    kvs__wire_part(count, esize, row, (uint32_t)np, (uint32_t)lo, first, &c);
    kvs__wire_part(count, esize, row, (uint32_t)np, (uint32_t)(lo + per - 1), &f, &c);
    *n = f + c - *first;
    return 1;
}
