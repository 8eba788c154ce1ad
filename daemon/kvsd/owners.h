/*
 * owners.h - which host owns a key or a part of one: src/proto/shard.c's rule
 * for this job's hosts, in kvsd's terms.
 */
#ifndef KVSD_OWNERS_H
#define KVSD_OWNERS_H

#include "daemon.h"

/* The host that owns key (part 0 of a big key). */
int owners_key(const struct daemon *d, kvs_key_t key);
/* The parts a key of bytes is split in across hosts: 1 (one owner), or
 * from the split bound on (kvs__shard_split_bytes) a multiple of the hosts,
 * each part of at most KVS__PART_BYTES where KVS__PARTS_MAX allows. */
int owners_nparts(const struct daemon *d, uint64_t bytes);
/* The host that owns part p of rd's key: each host an equal block of its
 * parts in a row, from the key's owner on. */
int owners_part(const struct daemon *d, const struct round *rd, int p);
/* Elements [*first, *first + *n) of a key of count elements of dtype, in
 * rows of row elements (kvs__wire_row), are those that host h owns: 1, or
 * 0 when the key is not split. */
int owners_host_range(const struct daemon *d, kvs_key_t key, uint64_t count, kvs_dtype_t dtype,
                      uint64_t row, int h, uint64_t *first, uint64_t *n);
/* Elements [*first, *first + *n) are part p of rd's key. */
void owners_part_range(const struct round *rd, int p, uint64_t *first, uint64_t *n);

#endif
