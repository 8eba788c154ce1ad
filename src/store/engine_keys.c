/*
 * engine_keys.c - what a front asks the engine of its keys without a data
 * call: one key's entry looked up or checked against an array (kvsd does
 * this before it queues a push), every key walked in key order, their
 * count, the front's pointer per key and who frees it, the update rule's
 * spec. Declared in engine.h.
 *
 * It never changes a value, a version or the table: those are engine.c's
 * and table.c's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optim.h"
#include "store/engine.h"
#include "store/engine_model.h"
#include "store/table.h"

static void entry_info(struct entry *ent, struct kvs__entry_info *out)
{
    *out = (struct kvs__entry_info){ .value = ent->value, .device = ent->device,
                                     .bytes = ent->bytes,
                                     .count = ent->count, .dtype = ent->dtype,
                                     .ndim = ent->ndim, .shape = ent->shape,
                                     .version = ent->version, .front = &ent->front,
                                     .entry = ent };
}

int kvs__engine_lookup(struct kvs__engine *eng, kvs_key_t key, struct kvs__entry_info *out,
                       struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct entry *ent = table_get(eng, key);

    if (!ent)
        return kvs__fail(e, KVS_ENOKEY, "key %s: not initialised", KEYSTR(ks, key));
    entry_info(ent, out);
    return 0;
}

/* The stored entry a matches, in *out. */
static int check_entry(struct kvs__engine *eng, kvs_key_t key, const kvs_array_t *a,
                       struct entry **out, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct entry *ent = table_get(eng, key);

    if (eng->kind != KIND_NONE && kind_of(key) != eng->kind)
        return kvs__fail(e, KVS_EKEYKIND, "key %s: %s key among %s keys", KEYSTR(ks, key),
                         kind_name(kind_of(key)), kind_name(eng->kind));
    if (!ent)
        return kvs__fail(e, KVS_ENOKEY, "key %s: not initialised", KEYSTR(ks, key));
    *out = ent;
    return kvs__entry_match(ent, a, e);
}

int kvs__engine_check(struct kvs__engine *eng, kvs_key_t key, const kvs_array_t *a,
                      struct kvs__entry_info *info, struct kvs__err *e)
{
    struct entry *ent;
    int rc = check_entry(eng, key, a, &ent, e);

    if (rc == 0 && info)
        entry_info(ent, info);
    return rc;
}

int kvs__engine_check_push(struct kvs__engine *eng, kvs_key_t key, const kvs_array_t *a,
                           struct kvs__entry_info *info, struct kvs__err *e)
{
    struct entry *ent;
    int rc = check_entry(eng, key, a, &ent, e);

    if (rc == 0 && (rc = kvs__entry_optim_takes(eng, ent, e)) == 0 && info)
        entry_info(ent, info);
    return rc;
}

void kvs__engine_set_front_free(struct kvs__engine *eng, void (*fn)(void *front))
{
    eng->front_free = fn;
}

static int entry_order(const void *a, const void *b)
{
    const struct entry *x = *(const struct entry *const *)a, *y = *(const struct entry *const *)b;

    if (x->key.name && y->key.name)
        return strcmp(x->key.name, y->key.name);
    if (x->key.name || y->key.name)    /* one store holds one kind; order them anyway */
        return x->key.name ? 1 : -1;
    return (x->key.id > y->key.id) - (x->key.id < y->key.id);
}

int kvs__engine_foreach(struct kvs__engine *eng,
                        int (*fn)(void *ctx, kvs_key_t key, const struct kvs__entry_info *info),
                        void *ctx, struct kvs__err *e)
{
    struct entry **list;
    size_t n = 0;
    int rc = 0;

    if (eng->len == 0)
        return 0;
    if (!(list = malloc(sizeof *list * eng->len)))
        return kvs__fail(e, -ENOMEM, "out of memory for a list of %zu keys", eng->len);
    for (size_t i = 0; i < eng->cap; i++)
        if (eng->slots[i].ent)
            list[n++] = eng->slots[i].ent;
    qsort(list, n, sizeof *list, entry_order);
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct kvs__entry_info info;

        entry_info(list[i], &info);
        rc = fn(ctx, list[i]->key, &info);
    }
    free(list);
    return rc;
}

size_t kvs__engine_nkeys(const struct kvs__engine *eng)
{
    return eng->len;
}

const char *kvs__engine_optimizer(const struct kvs__engine *eng)
{
    return eng->optim ? kvs__optim_spec(eng->optim) : NULL;
}
