/*
 * pull.c - the calls that read stored values out: pull (a copy, or a view
 * of the value where it lies), pushpull (a push, then a pull of the same
 * plan), and the row-sparse pull of chosen rows.
 *
 * It must never change a stored value (pushpull's push is push.c's), and
 * checks every out against its key before anything is copied, so that a
 * failed pull writes nothing it was not asked for.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "store/engine.h"
#include "store/engine_model.h"
#include "store/table.h"
#include "device/mem.h"
#include "kernels/optim.h"
#include "store/optim_state.h"
#include "store/plan.h"
#include "store/push.h"

/* Hands each out its key's value: a copy into its data, or (view) the
 * stored value itself, where it lies. */
static int pull_commit(struct kvs__engine *eng, const struct plan *p, kvs_array_t *outs,
                       bool view, struct kvs__err *e)
{
    int rc = 0;

    for (int i = 0; i < p->n && rc == 0; i++) {
        const struct entry *ent = p->groups[p->gid[i]].ent;

        if (view) {
            outs[i].data = ent->value;
            outs[i].device = ent->device;
        } else {
            rc = kvs__mem_copy(outs[i].data, outs[i].device, ent->value, ent->device,
                               ent->bytes, eng->nthreads, e);
        }
    }
    if (rc == 0)
        return kvs__mem_finish(e);
    kvs__mem_finish(NULL);
    return rc;
}

static int pull_run(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                    kvs_array_t *outs, bool view, struct kvs__err *e)
{
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, outs, view ? "view" : "out", e)) != 0)
        return rc;
    if ((rc = kvs__plan_make(eng, n, keys, outs, false, &p, e)) != 0)
        return rc;
    rc = pull_commit(eng, &p, outs, view, e);
    kvs__plan_free(eng, &p);
    return rc;
}

int kvs__engine_pull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     kvs_array_t *outs, struct kvs__err *e)
{
    return pull_run(eng, n, keys, outs, false, e);
}

int kvs__engine_pull_view(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                          kvs_array_t *views, struct kvs__err *e)
{
    return pull_run(eng, n, keys, views, true, e);
}

static int pushpull_run(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                        const kvs_array_t *values, kvs_array_t *outs, bool view,
                        struct kvs__err *e)
{
    kvs_array_t *dst = outs ? outs : (kvs_array_t *)values;
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, values, "value", e)) != 0)
        return rc;
    if (outs && (rc = kvs__check_list(eng, n, keys, outs, view ? "view" : "out", e)) != 0)
        return rc;
    if ((rc = kvs__plan_make(eng, n, keys, values, eng->init_on_push, &p, e)) != 0)
        return rc;
    /* An out must fit the value its key will hold, the value pushed for it. */
    for (int i = 0; outs && i < n; i++) {
        if ((rc = kvs__entry_match(p.groups[p.gid[i]].ent, &outs[i], e)) != 0)
            goto out;
    }
    if ((rc = kvs__push_run(eng, &p, e)) == 0)
        rc = pull_commit(eng, &p, dst, view, e);
out:
    kvs__plan_free(eng, &p);
    return rc;
}

int kvs__engine_pushpull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                         const kvs_array_t *values, kvs_array_t *outs, struct kvs__err *e)
{
    return pushpull_run(eng, n, keys, values, outs, false, e);
}

int kvs__engine_pushpull_view(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                              const kvs_array_t *values, kvs_array_t *views,
                              struct kvs__err *e)
{
    return pushpull_run(eng, n, keys, values, views, true, e);
}

/* Writes the rows of ent that ids name into out, zeros elsewhere. Rows of
 * a device go through host memory: a row-sparse pull is for small tables
 * read a few rows at a time. */
static int gather_rows(struct kvs__engine *eng, const struct entry *ent, kvs_array_t *out,
                       const kvs_array_t *ids, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    size_t row = ent->shape[0] ? ent->bytes / (size_t)ent->shape[0] : 0;
    const int64_t *id = ids->data;
    char *dst = out->data, *tmp = NULL;
    const char *src = ent->value;
    int rc = 0;

    if (ent->bytes == 0)
        return 0;
    if (out->device != KVS_HOST || ent->device != KVS_HOST) {
        if (!(tmp = malloc(ent->bytes * (ent->device != KVS_HOST ? 2 : 1))))
            return kvs__fail(e, -ENOMEM, "key %s: out of memory for a %zu-byte buffer",
                             KEYSTR(ks, ent->key), ent->bytes);
        if (out->device != KVS_HOST)
            dst = tmp;
        if (ent->device != KVS_HOST) {
            src = tmp + ent->bytes;
            rc = kvs__mem_copy(tmp + ent->bytes, KVS_HOST, ent->value, ent->device,
                               ent->bytes, eng->nthreads, e);
        }
    }
    if (rc == 0) {
        memset(dst, 0, ent->bytes);
        for (int64_t j = 0; j < ids->shape[0]; j++)
            memcpy(dst + (size_t)id[j] * row, src + (size_t)id[j] * row, row);
        if (dst != out->data
            && (rc = kvs__mem_copy(out->data, out->device, dst, KVS_HOST, ent->bytes,
                                   eng->nthreads, e)) == 0)
            rc = kvs__mem_finish(e);
    }
    free(tmp);
    return rc;
}

int kvs__engine_row_sparse_pull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                                kvs_array_t *outs, const kvs_array_t *row_ids,
                                struct kvs__err *e)
{
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, outs, "out", e)) != 0)
        return rc;
    if (n > 0 && !row_ids)
        return kvs__fail(e, KVS_EBADARG, "row_ids list is NULL with count %d", n);
    if ((rc = kvs__plan_make(eng, n, keys, outs, false, &p, e)) != 0)
        return rc;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct entry *ent = p.groups[p.gid[i]].ent;

        rc = kvs__check_row_ids(keys[i], i, &row_ids[i], ent->ndim,
                                ent->ndim ? ent->shape[0] : 0, e);
    }
    for (int i = 0; i < n && rc == 0; i++)
        rc = gather_rows(eng, p.groups[p.gid[i]].ent, &outs[i], &row_ids[i], e);
    kvs__plan_free(eng, &p);
    return rc;
}
