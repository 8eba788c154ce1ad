/*
 * engine_args.c - what every data call does with its arguments before the
 * engine touches its table: the checks of a list of keys and arrays
 * against the store, row-sparse values and outs, row ids of a row-sparse
 * pull. Reads the engine's table never, changes nothing; keys themselves
 * are key.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "kernels/rows.h"
#include "device/mem.h"
#include "store/engine_model.h"
#include "store/engine_args.h"

/* ---- argument checks -------------------------------------------------- */

/* One key of a list (index i): its length, and one kind of key (*kind
 * the list's so far, KIND_NONE before the first). */
static int check_key(enum key_kind *kind, const kvs_key_t *key, int i, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    if (key->name && strnlen(key->name, KVS_MAX_KEY_LEN + 1) > KVS_MAX_KEY_LEN)
        return kvs__fail(e, KVS_EBADARG, "key %d: string longer than %d bytes", i,
                         KVS_MAX_KEY_LEN);
    if (*kind == KIND_NONE)
        *kind = kind_of(*key);
    if (kind_of(*key) != *kind)
        return kvs__fail(e, KVS_EKEYKIND, "key %s: %s key among %s keys", KEYSTR(ks, *key),
                         kind_name(kind_of(*key)), kind_name(*kind));
    return 0;
}

/* Checks a list call's count, lists, keys (length, one kind, the store's
 * kind) and arrays. what names the arrays ("value", "out"). */
int kvs__check_list(const struct kvs__engine *eng, int n, const kvs_key_t *keys,
                    const kvs_array_t *arrs, const char *what, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], name[KVS_MAX_KEY_LEN + 40];
    enum key_kind kind = eng ? eng->kind : KIND_NONE;
    int rc;

    if (n < 0)
        return kvs__fail(e, KVS_EBADARG, "negative count %d", n);
    if (n > 0 && (!keys || !arrs))
        return kvs__fail(e, KVS_EBADARG, "%s list is NULL with count %d",
                         keys ? what : "key", n);
    for (int i = 0; i < n; i++) {
        if ((rc = check_key(&kind, &keys[i], i, e)) != 0)
            return rc;
        /* The check is pure: on failure it runs again to name the array,
         * so that the common path formats nothing. */
        if (kvs__array_check(&arrs[i], what, NULL) != 0) {
            snprintf(name, sizeof name, "key %s: %s %d", KEYSTR(ks, keys[i]), what, i);
            return kvs__array_check(&arrs[i], name, e);
        }
    }
    return 0;
}

/* ---- row-sparse values ------------------------------------------------ */

kvs_array_t kvs__row_sparse_full(const kvs_row_sparse_t *a, void *data)
{
    kvs_array_t full = { .data = data, .dtype = a->dtype, .ndim = a->ndim,
                         .device = KVS_HOST };

    if (a->ndim > 0 && a->ndim <= KVS_MAX_NDIM)
        memcpy(full.shape, a->shape, sizeof full.shape[0] * (size_t)a->ndim);
    return full;
}

size_t kvs__row_sparse_row_bytes(const kvs_row_sparse_t *a)
{
    size_t elems = kvs_dtype_size(a->dtype);

    for (int d = 1; d < a->ndim && d < KVS_MAX_NDIM; d++)
        elems *= (size_t)a->shape[d];
    return elems;
}

int kvs__check_row_sparse_form(const kvs_row_sparse_t *a, int any_device, const char *what,
                               struct kvs__err *e)
{
    static char placeholder;
    kvs_array_t full;
    size_t bytes;
    int64_t nnz;
    int rc;

    if (!a)
        return kvs__fail(e, KVS_EBADARG, "%s: no value (NULL)", what);
    if (a->ndim < 1)
        return kvs__fail(e, KVS_ESHAPE, "%s: a row-sparse value needs ndim >= 1, not %d", what,
                         a->ndim);
    full = kvs__row_sparse_full(a, &placeholder);
    if ((rc = kvs__array_check(&full, what, e)) != 0)
        return rc;
    if (a->device != KVS_HOST && !any_device)
        return kvs__fail(e, KVS_EBADARG, "%s: row-sparse values must be host memory", what);
    nnz = a->nnz;
    if (nnz < 0)
        return kvs__fail(e, KVS_EBADARG, "%s: nnz %lld is negative", what, (long long)nnz);
    if (nnz > 0 && (!a->indices || !a->data))
        return kvs__fail(e, KVS_EBADARG, "%s: %s is NULL with nnz %lld", what,
                         a->indices ? "data" : "indices", (long long)nnz);
    if (__builtin_mul_overflow((size_t)nnz, kvs__row_sparse_row_bytes(a), &bytes)
        || (size_t)nnz > SIZE_MAX / sizeof(int64_t))
        return kvs__fail(e, KVS_EBADARG, "%s: %lld rows are more bytes than fit in memory",
                         what, (long long)nnz);
    return 0;
}

int kvs__check_row_sparse(kvs_key_t key, int i, const kvs_row_sparse_t *a, const char *what,
                          struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], name[KVS_MAX_KEY_LEN + 40];
    int rc;

    KEYSTR(ks, key);
    snprintf(name, sizeof name, "key %s: %s %d", ks, what, i);
    if ((rc = kvs__check_row_sparse_form(a, 0, name, e)) != 0)
        return rc;
    for (int64_t j = 0; j < a->nnz; j++)
        if (a->indices[j] < 0 || a->indices[j] >= a->shape[0])
            return kvs__fail(e, KVS_ERANGE, "key %s: %s %d: index %lld at position %lld is "
                             "out of range [0, %lld)", ks, what, i, (long long)a->indices[j],
                             (long long)j, (long long)a->shape[0]);
    return 0;
}

int kvs__check_rows_out(kvs_key_t key, int i, const kvs_row_sparse_t *out, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], name[KVS_MAX_KEY_LEN + 40];

    if (!out)
        return kvs__fail(e, KVS_EBADARG, "key %s: out %d is NULL", KEYSTR(ks, key), i);
    snprintf(name, sizeof name, "key %s: out %d", KEYSTR(ks, key), i);
    if (out->nnz < 0)
        return kvs__fail(e, KVS_EBADARG, "%s: room of %lld rows is negative", name,
                         (long long)out->nnz);
    if (out->nnz > 0 && (!out->indices || !out->data))
        return kvs__fail(e, KVS_EBADARG, "%s: %s is NULL with room for %lld rows", name,
                         out->indices ? "data" : "indices", (long long)out->nnz);
    if (out->device != KVS_HOST)
        return kvs__fail(e, KVS_EBADARG, "%s: row-sparse outs must be host memory", name);
    return 0;
}

/* The count and lists of a row-sparse call, its keys, then check(i) of
 * each element. */
static int check_rows_keys(const struct kvs__engine *eng, int n, const kvs_key_t *keys,
                           const void *list, const char *what, struct kvs__err *e)
{
    enum key_kind kind = eng ? eng->kind : KIND_NONE;
    int rc;

    if (n < 0)
        return kvs__fail(e, KVS_EBADARG, "negative count %d", n);
    if (n > 0 && (!keys || !list))
        return kvs__fail(e, KVS_EBADARG, "%s list is NULL with count %d",
                         keys ? what : "key", n);
    for (int i = 0; i < n; i++)
        if ((rc = check_key(&kind, &keys[i], i, e)) != 0)
            return rc;
    return 0;
}

int kvs__check_rows_list(const struct kvs__engine *eng, int n, const kvs_key_t *keys,
                         const kvs_row_sparse_t *values, struct kvs__err *e)
{
    int rc = check_rows_keys(eng, n, keys, values, "value", e);

    for (int i = 0; i < n && rc == 0; i++)
        rc = kvs__check_row_sparse(keys[i], i, &values[i], "value", e);
    return rc;
}

int kvs__check_rows_outs(const struct kvs__engine *eng, int n, const kvs_key_t *keys,
                         const kvs_array_t *row_ids, const kvs_row_sparse_t *outs,
                         struct kvs__err *e)
{
    int rc = check_rows_keys(eng, n, keys, outs, "out", e);

    if (rc == 0 && n > 0 && !row_ids)
        return kvs__fail(e, KVS_EBADARG, "row_ids list is NULL with count %d", n);
    for (int i = 0; i < n && rc == 0; i++)
        rc = kvs__check_rows_out(keys[i], i, &outs[i], e);
    return rc;
}

int kvs__check_rows_room(int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                         const kvs_array_t *row_ids, kvs_row_sparse_t *outs, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    size_t *need;
    int rc = 0, short_of = -1;

    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        if ((rc = kvs__check_row_ids(keys[i], i, &row_ids[i], values[i].ndim,
                                     values[i].ndim ? values[i].shape[0] : 0, e)) != 0)
            return rc;
    if (!(need = calloc((size_t)n, sizeof *need)))
        return kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t *u;

        if ((rc = kvs__rows_unique_copy(row_ids[i].data, (size_t)row_ids[i].shape[0], &u,
                                        &need[i], e)) != 0)
            break;
        free(u);
        if (short_of < 0 && need[i] > (size_t)outs[i].nnz)
            short_of = i;
    }
    if (rc == 0 && short_of >= 0) {
        rc = kvs__fail(e, -ENOSPC, "key %s: out %d has room for %lld rows, and %zu are "
                       "asked for", KEYSTR(ks, keys[short_of]), short_of,
                       (long long)outs[short_of].nnz, need[short_of]);
        for (int i = 0; i < n; i++)
            outs[i].nnz = (int64_t)need[i];
    }
    free(need);
    return rc;
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
