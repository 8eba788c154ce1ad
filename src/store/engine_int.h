/*
 * engine_int.h - the engine's own: its key table and entries, for the
 * files of the engine (table.c: the table and its entries; engine.c: the
 * store's calls; engine_states.c: the optimizer states' save and load),
 * and the calls they make of each other, grouped by file. Nothing else
 * includes it.
 */
#ifndef KVS_ENGINE_INT_H
#define KVS_ENGINE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "store/engine.h"
#include "store/key.h"

enum key_kind { KIND_NONE, KIND_INT, KIND_STR };

struct entry {
    kvs_key_t key;                     /* name owned for string keys */
    kvs_dtype_t dtype;
    int ndim;
    int64_t shape[KVS_MAX_NDIM];
    size_t count, bytes;
    int device;                        /* where value and the buffers below live (mem.h) */
    void *value;                       /* from eng->mem on the host, else mem.h's */
    void *scratch;                     /* merged sum for updater pushes */
    void *shadow;                      /* an updater's working copy of value */
    void *stage;                       /* nstage copies of inputs from other devices */
    int nstage;
    struct kvs__optim_state *ostate;
    uint64_t version;                  /* bumped by every init and push */
    void *front;                       /* the front's state for this key */
};

/* A slot keeps its key's hash beside the entry, so that a probe reads an
 * entry (a cache miss in a big table) only when the hashes match. */
struct slot {
    uint64_t hash;
    struct entry *ent;
};

struct kvs__engine {
    struct kvs__mem mem;
    struct slot *slots;                /* open addressing, linear probing */
    size_t cap, len;                   /* cap a power of two, len <= cap / 2 */
    enum key_kind kind;                /* set by the first key stored */
    int nthreads;
    bool init_on_push;
    kvs_updater_t updater;
    void *updater_ctx;
    struct kvs__optim *optim;
    void (*front_free)(void *front);
    int (*place)(void *ctx, const kvs_array_t *like, size_t bytes);
    void *place_ctx;
    int (*reduce)(void *ctx, const struct kvs__reduce_item *items, int m, struct kvs__err *e);
    void *reduce_ctx;
};

static inline enum key_kind kind_of(kvs_key_t k)
{
    return k.name ? KIND_STR : KIND_INT;
}

static inline const char *kind_name(enum key_kind k)
{
    return k == KIND_STR ? "string" : "int";
}

static inline struct slot *table_slot(struct slot *slots, size_t cap, kvs_key_t key,
                                       uint64_t hash)
{
    size_t i = hash & (cap - 1);

    while (slots[i].ent && (slots[i].hash != hash || !kvs__key_eq(slots[i].ent->key, key)))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static inline struct entry *table_get(const struct kvs__engine *eng, kvs_key_t key)
{
    return eng->cap ? table_slot(eng->slots, eng->cap, key, kvs__key_hash(key))->ent : NULL;
}

/* "key 7" / "key \"w\"" for messages. */
#define KEYSTR(buf, k) (kvs__key_str((buf), sizeof(buf), (k)), (buf))

/* ---- table.c ---- */

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

/* ---- engine.c ---- */

/* Frees every key's optimizer state. */
void kvs__engine_drop_states(struct kvs__engine *eng);

#endif
