/*
 * engine_model.h - the engine's state model: the engine itself, its key
 * table's slots and entries, the kinds of key. For the files of the store
 * that work on that state (table.c, engine_args.c, engine.c,
 * engine_keys.c, engine_states.c); a front never includes it, and sees the
 * engine through engine.h only.
 *
 * It declares no module's calls and includes nothing above the hooks
 * (engine_hooks.h) and keys (key.h): each file's calls have their own
 * header (table.h, engine_args.h, engine.h), which stand on this one.
 */
#ifndef KVS_ENGINE_MODEL_H
#define KVS_ENGINE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kvs.h"
#include "base/error.h"
#include "store/engine_hooks.h"
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

/* "key 7" / "key \"w\"" for messages. */
#define KEYSTR(buf, k) (kvs__key_str((buf), sizeof(buf), (k)), (buf))

#endif
