/*
 * shard.h - which host of a job of several owns which key, or which part
 * of a big key: the one rule kvsd keeps its keys by (daemon/kvsd/owners.c) and
 * kvsctl plan models a job's traffic by, so that the model is of what the
 * daemon does.
 *
 * Every key has one owner host: a hash of the key modulo the hosts, so
 * that keys spread evenly and every host agrees without telling. A key of
 * more than split_bytes is split in parts (kvs__wire_part) of at most
 * part_bytes, a multiple of the hosts in number while the wire allows
 * (KVS__PARTS_MAX), each host owning an equal block of them in a row from
 * the key's owner on.
 *
 * Pure functions of their arguments: no state, any thread.
 */
#ifndef KVS_SHARD_H
#define KVS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"

/* kvsd's bounds. A key above KVS__SPLIT_BYTES is split over the hosts:
 * MXNet's default bound (a million float32), and a link's send window
 * (daemon/kvsd/hosts.c). Its parts are of at most KVS__PART_BYTES: each part
 * is summed, sent, applied and sent back on its own, so that the wire
 * carries one part while kvsd sums or applies the next. Small enough that
 * a round of a key just above the bound has a few parts per host to
 * overlap, big enough that a part's frame and engine call cost little
 * beside its bytes. */
#define KVS__SPLIT_BYTES ((uint64_t)4 << 20)
#define KVS__PART_BYTES  ((uint64_t)1 << 20)

/* A job's rule: its hosts (>= 1) and the bounds. kvsd's is
 * KVS__SHARD(nhosts); kvsctl plan may ask what other bounds would do. */
struct kvs__shard {
    int nhosts;
    uint64_t split_bytes;              /* a key of more bytes is split */
    uint64_t part_bytes;               /* in parts of at most this many (> 0) */
};
#define KVS__SHARD(h) ((struct kvs__shard){ (h), KVS__SPLIT_BYTES, KVS__PART_BYTES })

/* The host that owns key (its part 0 when split): 0 to nhosts - 1. */
int kvs__shard_owner(const struct kvs__shard *s, kvs_key_t key);

/* The parts a key of bytes is split in: 1 (one owner), or above
 * split_bytes a multiple of the hosts, each part of at most part_bytes
 * where KVS__PARTS_MAX allows. */
int kvs__shard_parts(const struct kvs__shard *s, uint64_t bytes);

/* The parts each host owns of a key of nparts (1 when nparts < nhosts). */
int kvs__shard_per_host(const struct kvs__shard *s, int nparts);

/* The host that owns part p of a key of nparts whose owner is owner: each
 * host an equal block of its parts in a row, from the owner on. */
int kvs__shard_part_owner(const struct kvs__shard *s, int owner, int nparts, int p);

/* Elements [*first, *first + *n) of key, of count elements of esize
 * bytes in rows of row elements (kvs__wire_row), are those that host h
 * owns: 1; or 0 (and *first, *n untouched) when the key is not split. */
int kvs__shard_host_range(const struct kvs__shard *s, kvs_key_t key, uint64_t count,
                          size_t esize, uint64_t row, int h, uint64_t *first, uint64_t *n);

#endif
