/*
 * owners.c - which host owns a key or a part of one. Every key has one
 * owner host (a hash of the key, so that keys spread evenly and every host
 * agrees without telling); a key of the split bound or more (8 MiB / H,
 * from 64 KiB to 4 MiB: kvs__shard_split_bytes) is split in parts of about
 * KVS__PART_BYTES, cut between rows (kvs__wire_part), each host
 * owning an equal block of them in a row from the key's owner on. The rule is
 * src/proto/shard.c's, which kvsctl plan models a job's traffic by: this file
 * only puts it in kvsd's terms, and must never decide anything of its own.
 */

#include "owners.h"

#include "kernels/array.h"

/* The job's rule (src/proto/shard.c): kvsctl plan models the same. */
static struct kvs__shard rule(const struct daemon *d)
{
    return KVS__SHARD(d->nhosts);
}

int owners_key(const struct daemon *d, kvs_key_t key)
{
    struct kvs__shard s = rule(d);

    return kvs__shard_owner(&s, key);
}

int owners_nparts(const struct daemon *d, uint64_t bytes)
{
    struct kvs__shard s = rule(d);

    return kvs__shard_parts(&s, bytes);
}

int owners_part(const struct daemon *d, const struct round *rd, int p)
{
    struct kvs__shard s = rule(d);

    return kvs__shard_part_owner(&s, rd->owner, rd->nparts, p);
}

int owners_host_range(const struct daemon *d, kvs_key_t key, uint64_t count, kvs_dtype_t dtype,
                      uint64_t row, int h, uint64_t *first, uint64_t *n)
{
    struct kvs__shard s = rule(d);

    return kvs__shard_host_range(&s, key, count, kvs_dtype_size(dtype), row, h, first, n);
}

void owners_part_range(const struct round *rd, int p, uint64_t *first, uint64_t *n)
{
    size_t es = kvs_dtype_size(rd->dtype);

    /* Whole rows (kvs__wire_row): a 1-D value's row is one element. */
    uint64_t row = rd->nrows > 0 ? rd->row_bytes / es : 1;

    kvs__wire_part(rd->bytes / es, es, row ? row : 1, (uint32_t)rd->nparts, (uint32_t)p, first,
                   n);
}
