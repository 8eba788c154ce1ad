/*
 * key.c - keys as every layer above sees them: the hash (the same on every
 * host: the key table's, the shard rule's, the residuals'), and a list of
 * keys grouped by key.
 *
 * Owns no state and knows no store: it must never look at a key table or
 * a value, only at the keys it is handed.
 */
#include <errno.h>
#include <stdlib.h>

#include "store/key.h"

uint64_t kvs__key_hash(kvs_key_t k)
{
    uint64_t h;

    if (k.name) {                      /* FNV-1a */
        h = 0xcbf29ce484222325ull;
        for (const unsigned char *p = (const unsigned char *)k.name; *p; p++)
            h = (h ^ *p) * 0x100000001b3ull;
        return h;
    }
    h = (uint64_t)k.id + 0x9e3779b97f4a7c15ull;   /* splitmix64 finaliser */
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

size_t kvs__group_slots(int n)
{
    size_t cap = 16;

    while (cap < 2 * (size_t)n)
        cap *= 2;
    return cap;
}

/* Open addressing over the keys' hashes; groups are numbered in order of
 * first appearance. */
int kvs__group_keys_in(int n, const kvs_key_t *keys, int *gid, int *first, int *slot)
{
    size_t cap = kvs__group_slots(n);
    int ngroups = 0;

    for (size_t i = 0; i < cap; i++)
        slot[i] = -1;
    for (int i = 0; i < n; i++) {
        size_t h = kvs__key_hash(keys[i]) & (cap - 1);

        while (slot[h] >= 0 && !kvs__key_eq(keys[first[slot[h]]], keys[i]))
            h = (h + 1) & (cap - 1);
        if (slot[h] < 0) {
            slot[h] = ngroups;
            first[ngroups++] = i;
        }
        gid[i] = slot[h];
    }
    return ngroups;
}

int kvs__group_keys(int n, const kvs_key_t *keys, int *gid, int *first, struct kvs__err *e)
{
    int *slot = malloc(sizeof *slot * kvs__group_slots(n)), rc;

    if (!slot)
        return kvs__fail(e, -ENOMEM, "out of memory grouping %d keys", n);
    rc = kvs__group_keys_in(n, keys, gid, first, slot);
    free(slot);
    return rc;
}

int kvs__find_repeat(int n, const kvs_key_t *keys, struct kvs__err *e)
{
    size_t cap = kvs__group_slots(n);
    int *gid = malloc(sizeof(int) * (2 * (size_t)n + cap)), *first, i = 0;

    if (!gid)
        return kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
    first = gid + n;
    kvs__group_keys_in(n, keys, gid, first, first + n);
    while (i < n && first[gid[i]] == i)
        i++;
    free(gid);
    return i;
}
