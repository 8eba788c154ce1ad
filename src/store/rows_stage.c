/*
 * rows_stage.c - row-sparse values whose rows and ids lie in GPU memory,
 * copied to host memory before a store type sees them: a copy of nnz
 * rows and nnz ids, the bytes of the rows given and never of the table.
 * The checks and sums of row-sparse values then run as for host values,
 * and every store type takes them alike.
 *
 * It owns those copies and the checks a value needs before its GPU memory
 * is read. It must never check ids or sum rows (engine_args.c and
 * kernels/rows.c do, on the host copies), nor read GPU memory but through
 * device/mem.h's copies.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "device/mem.h"
#include "store/engine_args.h"
#include "store/rows_stage.h"

/* Host copies of value a (on a GPU) into s, checked first. */
static int stage_one(kvs_key_t key, int i, const kvs_row_sparse_t *a, kvs_row_sparse_t *s,
                     struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], what[KVS_MAX_KEY_LEN + 40];
    static char placeholder;
    kvs_array_t full;
    size_t bytes, ids;
    int rc;

    kvs__key_str(ks, sizeof ks, key);
    snprintf(what, sizeof what, "key %s: value %d", ks, i);
    if (a->ndim < 1)
        return kvs__fail(e, KVS_ESHAPE, "%s: a row-sparse value needs ndim >= 1, not %d", what,
                         a->ndim);
    full = kvs__row_sparse_full(a, &placeholder);
    if ((rc = kvs__array_check(&full, what, e)) != 0)
        return rc;
    if (a->nnz < 0)
        return kvs__fail(e, KVS_EBADARG, "%s: nnz %lld is negative", what, (long long)a->nnz);
    if (a->nnz > 0 && (!a->indices || !a->data))
        return kvs__fail(e, KVS_EBADARG, "%s: %s is NULL with nnz %lld", what,
                         a->indices ? "data" : "indices", (long long)a->nnz);
    if (__builtin_mul_overflow((size_t)a->nnz, kvs__row_sparse_row_bytes(a), &bytes)
        || __builtin_mul_overflow((size_t)a->nnz, sizeof(int64_t), &ids))
        return kvs__fail(e, KVS_EBADARG, "%s: %lld rows are more bytes than fit in memory",
                         what, (long long)a->nnz);
    *s = *a;
    s->device = KVS_HOST;
    s->data = NULL;
    s->indices = NULL;
    if (a->nnz == 0)
        return 0;
    if ((rc = kvs__mem_check(a->device, a->data, bytes, what, e)) != 0
        || (rc = kvs__mem_check(a->device, a->indices, ids, what, e)) != 0)
        return rc;
    if (!(s->data = malloc(bytes ? bytes : 1)) || !(s->indices = malloc(ids))) {
        free(s->data);
        s->data = NULL;
        return kvs__fail(e, -ENOMEM, "%s: out of memory for a host copy of %lld rows", what,
                         (long long)a->nnz);
    }
    /* Copies into host memory are complete when they return. */
    if ((rc = kvs__mem_copy(s->data, KVS_HOST, a->data, a->device, bytes, 1, e)) != 0
        || (rc = kvs__mem_copy(s->indices, KVS_HOST, a->indices, a->device, ids, 1, e)) != 0) {
        free(s->data);
        free(s->indices);
        s->data = NULL;
        s->indices = NULL;
        return rc;
    }
    return 0;
}

int kvs__rows_stage(int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                    const kvs_row_sparse_t **out, struct kvs__err *e)
{
    kvs_row_sparse_t *s;
    int any = 0, rc = 0;

    *out = values;
    for (int i = 0; i < n && values && keys; i++)
        any |= values[i].device != KVS_HOST;
    if (!any)
        return 0;                      /* NULL lists are the ordinary checks' to refuse */
    if (!(s = calloc((size_t)n, sizeof *s)))
        return kvs__fail(e, -ENOMEM, "out of memory for a list of %d values", n);
    for (int i = 0; i < n && rc == 0; i++) {
        if (values[i].device == KVS_HOST)
            s[i] = values[i];
        else
            rc = stage_one(keys[i], i, &values[i], &s[i], e);
    }
    if (rc != 0) {
        kvs__rows_unstage(n, values, s);
        return rc;
    }
    *out = s;
    return 0;
}

void kvs__rows_unstage(int n, const kvs_row_sparse_t *values, const kvs_row_sparse_t *staged)
{
    if (!staged || staged == values)
        return;
    for (int i = 0; i < n; i++)
        if (values[i].device != KVS_HOST) {
            free(staged[i].data);
            free(staged[i].indices);
        }
    free((void *)staged);
}
