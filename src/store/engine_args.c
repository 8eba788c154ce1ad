/*
 * engine_args.c - what every data call does with its arguments before the
 * engine touches its table: the checks of a list of keys and arrays
 * against the store, row ids of a row-sparse pull. Reads the engine's
 * table never, changes nothing; keys themselves are key.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "device/mem.h"
#include "store/engine_model.h"
#include "store/engine_args.h"

/* ---- argument checks -------------------------------------------------- */

/* Checks a list call's count, lists, keys (length, one kind, the store's
 * kind) and arrays. what names the arrays ("value", "out"). */
int kvs__check_list(const struct kvs__engine *eng, int n, const kvs_key_t *keys,
                    const kvs_array_t *arrs, const char *what, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], name[KVS_MAX_KEY_LEN + 40];
    enum key_kind kind = eng ? eng->kind : KIND_NONE;

    if (n < 0)
        return kvs__fail(e, KVS_EBADARG, "negative count %d", n);
    if (n > 0 && (!keys || !arrs))
        return kvs__fail(e, KVS_EBADARG, "%s list is NULL with count %d",
                         keys ? what : "key", n);
    for (int i = 0; i < n; i++) {
        if (keys[i].name && strnlen(keys[i].name, KVS_MAX_KEY_LEN + 1) > KVS_MAX_KEY_LEN)
            return kvs__fail(e, KVS_EBADARG, "key %d: string longer than %d bytes",
                             i, KVS_MAX_KEY_LEN);
        if (kind == KIND_NONE)
            kind = kind_of(keys[i]);
        if (kind_of(keys[i]) != kind)
            return kvs__fail(e, KVS_EKEYKIND, "key %s: %s key among %s keys",
                             KEYSTR(ks, keys[i]), kind_name(kind_of(keys[i])),
                             kind_name(kind));
        /* The check is pure: on failure it runs again to name the array,
         * so that the common path formats nothing. */
        if (kvs__array_check(&arrs[i], what, NULL) != 0) {
            snprintf(name, sizeof name, "key %s: %s %d", KEYSTR(ks, keys[i]), what, i);
            return kvs__array_check(&arrs[i], name, e);
        }
    }
    return 0;
}

/* ---- row ids ---------------------------------------------------------- */

int kvs__check_row_ids(kvs_key_t key, int i, const kvs_array_t *ids, int ndim, int64_t rows,
                       struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], name[KVS_MAX_KEY_LEN + 40];
    const int64_t *id;
    int rc;

    KEYSTR(ks, key);
    snprintf(name, sizeof name, "key %s: row_ids %d", ks, i);
    if ((rc = kvs__array_check(ids, name, e)) != 0)
        return rc;
    if (ids->device != KVS_HOST)
        return kvs__fail(e, KVS_EDEVICE, "%s: row ids must be host memory", name);
    if (ids->dtype != KVS_INT64)
        return kvs__fail(e, KVS_EDTYPE, "%s: dtype %s, row ids must be int64", name,
                         kvs_dtype_name(ids->dtype));
    if (ids->ndim != 1)
        return kvs__fail(e, KVS_ESHAPE, "%s: %d dimensions, row ids must be 1-D", name,
                         ids->ndim);
    if (ndim < 1)
        return kvs__fail(e, KVS_ESHAPE, "key %s: a scalar has no rows", ks);
    id = ids->data;
    for (int64_t j = 0; j < ids->shape[0]; j++)
        if (id[j] < 0 || id[j] >= rows)
            return kvs__fail(e, KVS_ERANGE, "key %s: row id %lld out of range [0, %lld)", ks,
                             (long long)id[j], (long long)rows);
    return 0;
}
