/*
 * shard.h - which host of a job of several owns which key, or which part
 * of a big key: the one rule kvsd keeps its keys by (daemon/kvsd/owners.c) and
 * kvsctl plan models a job's traffic by, so that the model is of what the
 * daemon does.
 *
 * Every key has one owner host: a hash of the key modulo the hosts, so
 * that keys spread evenly and every host agrees without telling. A key of
 * split_bytes or more (kvsd's: smaller as the hosts are more, below) is
 * split in parts (kvs__wire_part) of at most part_bytes, a multiple of the
 * hosts in number while the wire allows (KVS__PARTS_MAX), each host owning
 * an equal block of them in a row from the key's owner on.
 *
 * Pure functions of their arguments: no state, any thread.
 */
#ifndef KVS_SHARD_H
#define KVS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"

/* kvsd's bounds, functions of the hosts H alone, so that every host of a
 * job computes the same without telling (no field on the wire).
 *
 * A key of split_bytes(H) or more is split over the hosts, as MXNet splits
 * an array at its bound and above. At 2 hosts the bound is
 * KVS__SPLIT_BYTES: about MXNet's default (a million float32), and a
 * link's send window (daemon/kvsd/hosts.c). Split there, a 4 MiB key's
 * round takes 0.82 of its time whole at one owner (bench/NOTES.md §10.4):
 * each host sends and receives half of it, both ways at once, rather than
 * one host all of it one way and then the other.
 *
 * At H hosts the bound is 2 x KVS__SPLIT_BYTES / H, so that a key kept
 * whole stays small beside what each host owns of the job (its bytes /
 * H): a whole key's owner sends and receives (H - 1) x the key, so at 64
 * hosts ResNet-50's 4 MiB keys kept whole would make their owners carry
 * 2.3 x the mean host's bytes, and kvsctl plan models 1.04 x with the
 * bound at 128 KiB. Not below KVS__SPLIT_FLOOR: a split
 * key costs every host about 4 (H - 1) frames a round (a PARTIAL and a
 * VALUE each way per other host), whole it costs its owner 2 (H - 1) x
 * its bytes more than the others. A frame's fixed cost (its head, a
 * send and a receive, the engine call of its part, a wake-up) is a few
 * microseconds, the time of 16-32 KiB on a 100 Gb/s link, so splitting
 * pays only for keys of a few times that: 64 KiB, reached at 128 hosts.
 * Below 2 hosts nothing is split; the bound is that of 2.
 *
 * Parts are of at most KVS__PART_BYTES at any H: each part is summed, sent,
 * applied and sent back on its own, so that the wire carries one part
 * while kvsd sums or applies the next. That overlap is within one host's
 * share of a key (the key / H), which the host count does not change;
 * small enough that a key of a few MiB per host has a few parts each to
 * overlap, big enough that a part's frame and engine call cost little
 * beside its bytes. */
#define KVS__SPLIT_BYTES ((uint64_t)4 << 20)   /* at 2 hosts (and 1) */
#define KVS__SPLIT_FLOOR ((uint64_t)64 << 10)  /* at 128 hosts and more */
#define KVS__PART_BYTES  ((uint64_t)1 << 20)

/* A job's rule: its hosts (>= 1) and the bounds. kvsd's is
 * KVS__SHARD(nhosts) (kvs__shard_of); kvsctl plan may ask what other bounds
 * would do. */
struct kvs__shard {
    int nhosts;
    uint64_t split_bytes;              /* a key of this many bytes or more is split */
    uint64_t part_bytes;               /* in parts of at most this many (> 0) */
};

/* kvsd's split bound at nhosts: 2 x KVS__SPLIT_BYTES / nhosts, from
 * KVS__SPLIT_FLOOR to KVS__SPLIT_BYTES. */
uint64_t kvs__shard_split_bytes(int nhosts);

/* kvsd's rule at nhosts: kvs__shard_split_bytes(nhosts), KVS__PART_BYTES. */
struct kvs__shard kvs__shard_of(int nhosts);
#define KVS__SHARD(h) kvs__shard_of(h)

/* The host that owns key (its part 0 when split): 0 to nhosts - 1. */
int kvs__shard_owner(const struct kvs__shard *s, kvs_key_t key);

/* The parts a key of bytes is split in: 1 (one owner), or from
 * split_bytes on a multiple of the hosts, each part of at most part_bytes
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
