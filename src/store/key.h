/*
 * key.h - a key's hash and equality, and a list of keys grouped by key
 * (key.c): what the engine's table, the shard rule, the combine area and
 * the client's residuals agree on. Nothing here is API.
 */
#ifndef KVS_KEY_H
#define KVS_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvs.h"
#include "base/error.h"

static inline bool kvs__key_eq(kvs_key_t a, kvs_key_t b)
{
    if (a.name || b.name)
        return a.name && b.name && strcmp(a.name, b.name) == 0;
    return a.id == b.id;
}

/* Groups a list by key: gid[i] is the group of keys[i], groups numbered in
 * order of first appearance, first[g] the index where group g first
 * appears. Returns the number of groups, or -ENOMEM. */
int kvs__group_keys(int n, const kvs_key_t *keys, int *gid, int *first, struct kvs__err *e);

/* The hash the key table uses (FNV-1a of a name, splitmix64 of an id):
 * the same on every host, so hosts agree on a key's owner without asking. */
uint64_t kvs__key_hash(kvs_key_t key);

/* Slots of the hash table kvs__group_keys_in uses for a list of n keys:
 * a power of two, at least twice n. */
size_t kvs__group_slots(int n);

/* kvs__group_keys with the caller's scratch: slot has
 * kvs__group_slots(n) entries. Cannot fail. */
int kvs__group_keys_in(int n, const kvs_key_t *keys, int *gid, int *first, int *slot);

/* The index of the first key that repeats an earlier one, n when none
 * does, or -ENOMEM. */
int kvs__find_repeat(int n, const kvs_key_t *keys, struct kvs__err *e);

#endif
