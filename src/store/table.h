/*
 * table.h - table.c's calls: the engine's key table (probes, room, puts)
 * and its entries (made, freed, their buffers, matched against an array).
 * For the files of the store that work on the table; it stands on the
 * state model (engine_model.h) and never on the engine's face (engine.h),
 * which is above it.
 */
#ifndef KVS_TABLE_H
#define KVS_TABLE_H

#include <stddef.h>

#include "kvs.h"
#include "base/error.h"
#include "store/key.h"
#include "store/engine_model.h"

/* The slot of key (its hash given): where its entry is, or the empty slot
 * where it would go. */
static inline struct slot *table_slot(struct slot *slots, size_t cap, kvs_key_t key,
                                       uint64_t hash)
{
    size_t i = hash & (cap - 1);

    while (slots[i].ent && (slots[i].hash != hash || !kvs__key_eq(slots[i].ent->key, key)))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

/* key's entry, or NULL when it is not stored. */
static inline struct entry *table_get(const struct kvs__engine *eng, kvs_key_t key)
{
    return eng->cap ? table_slot(eng->slots, eng->cap, key, kvs__key_hash(key))->ent : NULL;
}

/* Makes room so that `extra` more keys can be put without failing. */
int kvs__table_reserve(struct kvs__engine *eng, size_t extra, struct kvs__err *e);

/* Puts ent in the table (room reserved), replacing and freeing an entry of
 * the same key. */
void kvs__table_put(struct kvs__engine *eng, struct entry *ent);

/* A new entry for key, shaped like like, its value allocated (unfilled)
 * where the placement hook puts it; not in the table yet. Errors:
 * -ENOMEM, the memory provider's. */
int kvs__entry_new(struct kvs__engine *eng, kvs_key_t key, const kvs_array_t *like,
                   struct entry **out, struct kvs__err *e);

void kvs__entry_free(struct kvs__engine *eng, struct entry *ent);   /* NULL is a no-op */

/* A buffer of n times an entry's size where its value lives, kept for
 * reuse across calls. */
int kvs__entry_buffer(const struct entry *ent, void **buf, size_t n, struct kvs__err *e);

/* An array of the entry's dtype, shape and device over data. */
kvs_array_t kvs__entry_array(const struct entry *ent, void *data);

/* 0 when arr has the entry's dtype and shape, else the error naming both. */
int kvs__entry_match(const struct entry *ent, const kvs_array_t *arr, struct kvs__err *e);

/* 0 when the update rule can update the entry: an optimizer needs a
 * floating-point key. */
int kvs__entry_optim_takes(const struct kvs__engine *eng, const struct entry *ent,
                           struct kvs__err *e);

#endif
