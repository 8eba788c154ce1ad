/*
 * table.c - the engine's key table and its entries: room made before a
 * call commits, an entry made for a new key and freed, the buffers an
 * entry keeps for reuse, an array matched against its entry or the
 * update rule. Its calls are in table.h; what a front asks of single
 * keys is engine_keys.c's.
 *
 * It must never change a value or run a rule: merging and updating are
 * engine.c's. Room is reserved in a call's prepare phase so that putting
 * an entry at commit cannot fail.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "kernels/optim.h"
#include "device/mem.h"
#include "store/optim_state.h"
#include "store/engine_model.h"
#include "store/table.h"

/* Makes room so that `extra` more keys can be put without failing. */
int kvs__table_reserve(struct kvs__engine *eng, size_t extra, struct kvs__err *e)
{
    size_t need = eng->len + extra, cap = eng->cap ? eng->cap : 16;
    struct slot *slots;

    while (cap / 2 < need) {
        if (cap > SIZE_MAX / 4 / sizeof *slots)
            return kvs__fail(e, -ENOMEM, "key table: too many keys");
        cap *= 2;
    }
    if (cap == eng->cap)
        return 0;
    slots = calloc(cap, sizeof *slots);
    if (!slots)
        return kvs__fail(e, -ENOMEM, "key table: out of memory for %zu slots", cap);
    for (size_t i = 0; i < eng->cap; i++)
        if (eng->slots[i].ent)
            *table_slot(slots, cap, eng->slots[i].ent->key, eng->slots[i].hash) = eng->slots[i];
    free(eng->slots);
    eng->slots = slots;
    eng->cap = cap;
    return 0;
}

/* Puts ent in the table (room reserved), replacing and freeing an entry of
 * the same key. */
void kvs__table_put(struct kvs__engine *eng, struct entry *ent)
{
    uint64_t hash = kvs__key_hash(ent->key);
    struct slot *slot = table_slot(eng->slots, eng->cap, ent->key, hash);

    if (slot->ent)
        kvs__entry_free(eng, slot->ent);
    else
        eng->len++;
    *slot = (struct slot){ hash, ent };
    eng->kind = kind_of(ent->key);
}

/* ---- entries ---------------------------------------------------------- */

int kvs__entry_new(struct kvs__engine *eng, kvs_key_t key, const kvs_array_t *like,
                   struct entry **out, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct entry *ent = calloc(1, sizeof *ent);
    struct kvs__err why;
    int rc;

    if (!ent)
        goto nomem;
    ent->key = key;
    if (key.name && !(ent->key.name = strdup(key.name)))
        goto nomem_ent;
    ent->dtype = like->dtype;
    ent->ndim = like->ndim;
    memcpy(ent->shape, like->shape, sizeof ent->shape[0] * (size_t)like->ndim);
    ent->count = kvs__array_count(like);
    ent->bytes = ent->count * kvs_dtype_size(like->dtype);   /* checked by kvs__array_check */
    ent->device = eng->place ? eng->place(eng->place_ctx, like, ent->bytes) : like->device;
    if (ent->device == KVS_HOST) {
        if (!(ent->value = eng->mem.alloc(eng->mem.ctx, ent->bytes)))
            goto nomem_name;
    } else if ((rc = kvs__mem_alloc(ent->device, ent->bytes ? ent->bytes : 64, 0, &ent->value,
                                    &why)) != 0) {
        free((char *)ent->key.name);
        free(ent);
        return kvs__fail(e, rc, "key %s: %s", KEYSTR(ks, key), why.msg);
    }
    *out = ent;
    return 0;

nomem_name:
    free((char *)ent->key.name);
nomem_ent:
    free(ent);
nomem:
    return kvs__fail(e, -ENOMEM, "key %s: out of memory", KEYSTR(ks, key));
}

void kvs__entry_free(struct kvs__engine *eng, struct entry *ent)
{
    if (!ent)
        return;
    if (ent->front && eng->front_free)
        eng->front_free(ent->front);
    kvs__optim_state_free(ent->ostate);
    kvs__mem_free(ent->device, ent->shadow);
    kvs__mem_free(ent->device, ent->scratch);
    kvs__mem_free(ent->device, ent->stage);
    if (ent->device == KVS_HOST)
        eng->mem.free(eng->mem.ctx, ent->value, ent->bytes);
    else
        kvs__mem_free(ent->device, ent->value);
    free((char *)ent->key.name);
    free(ent);
}

/* A buffer of n times an entry's size where its value lives, kept for
 * reuse across calls. */
int kvs__entry_buffer(const struct entry *ent, void **buf, size_t n, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct kvs__err why;
    size_t bytes;
    int rc;

    if (*buf)
        return 0;
    if (__builtin_mul_overflow(ent->bytes, n, &bytes))
        return kvs__fail(e, -ENOMEM, "key %s: %zu buffers of %zu bytes are too many",
                         KEYSTR(ks, ent->key), n, ent->bytes);
    if ((rc = kvs__mem_alloc(ent->device, bytes ? bytes : 64, 0, buf, &why)) != 0)
        return kvs__fail(e, rc, "key %s: a %zu-byte buffer: %s", KEYSTR(ks, ent->key), bytes,
                         why.msg);
    return 0;
}

kvs_array_t kvs__entry_array(const struct entry *ent, void *data)
{
    kvs_array_t a = { .data = data, .dtype = ent->dtype, .ndim = ent->ndim,
                      .device = ent->device };

    memcpy(a.shape, ent->shape, sizeof a.shape[0] * (size_t)ent->ndim);
    return a;
}

/* 0 when arr has the entry's dtype and shape, else the error naming both. */
int kvs__entry_match(const struct entry *ent, const kvs_array_t *arr, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], s1[200], s2[200];

    if (arr->dtype != ent->dtype)
        return kvs__fail(e, KVS_EDTYPE, "key %s: dtype %s does not match stored %s",
                         KEYSTR(ks, ent->key), kvs_dtype_name(arr->dtype),
                         kvs_dtype_name(ent->dtype));
    if (arr->ndim != ent->ndim
        || memcmp(arr->shape, ent->shape, sizeof arr->shape[0] * (size_t)arr->ndim) != 0) {
        kvs__shape_str(s1, sizeof s1, arr->ndim, arr->shape);
        kvs__shape_str(s2, sizeof s2, ent->ndim, ent->shape);
        return kvs__fail(e, KVS_ESHAPE, "key %s: shape %s does not match stored %s",
                         KEYSTR(ks, ent->key), s1, s2);
    }
    return 0;
}

/* 0 when the update rule can update the entry: an optimizer needs a
 * floating-point key. */
int kvs__entry_optim_takes(const struct kvs__engine *eng, const struct entry *ent,
                           struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    if (eng->optim && !kvs__dtype_is_float(ent->dtype))
        return kvs__fail(e, KVS_EDTYPE, "key %s: optimizer %s needs a floating-point key, "
                         "not %s", KEYSTR(ks, ent->key), kvs__optim_name(eng->optim),
                         kvs_dtype_name(ent->dtype));
    return 0;
}
