/*
 * init.c - kvs__engine_init: a key's first value, or (replace) a new one
 * in place of the old, for every key of a list at once.
 *
 * Every key gets a fresh entry, so that a re-initialised key may change
 * shape; the entries go into the table only when every value is copied,
 * so that a failed init leaves the store as it was. It must never run an
 * update rule: an init is not a push.
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

int kvs__engine_init(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     const kvs_array_t *values, int replace, struct kvs__err *e)
{
    return kvs__engine_init_fill(eng, n, keys, values, replace, NULL, NULL, e);
}

int kvs__engine_init_fill(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                          const kvs_array_t *values, int replace,
                          int (*fill)(void *ctx, int i, void *entry, struct kvs__err *e),
                          void *ctx, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, values, "value", e)) != 0)
        return rc;
    /* Existing and repeated keys are refused before shapes are matched, so
     * that the message says what is really wrong. */
    for (int i = 0; !replace && i < n; i++)
        if (table_get(eng, keys[i]))
            return kvs__fail(e, KVS_EKEYEXISTS, "key %s: already initialised",
                             KEYSTR(ks, keys[i]));
    if ((rc = kvs__find_repeat(n, keys, e)) < 0)
        return rc;
    if (rc < n)
        return kvs__fail(e, KVS_EKEYEXISTS, "key %s: appears twice in one init",
                         KEYSTR(ks, keys[rc]));
    /* Every key gets a fresh entry: a re-initialised key may change shape. */
    memset(&p, 0, sizeof p);
    p.groups = calloc((size_t)(n ? n : 1), sizeof *p.groups);   /* gid, inputs unused */
    if (!p.groups)
        return kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
    for (int i = 0; i < n; i++) {
        if ((rc = kvs__entry_new(eng, keys[i], &values[i], &p.groups[i].ent, e)) != 0)
            goto out;
        p.groups[i].fresh = true;
        p.ngroups++;
    }
    if ((rc = kvs__table_reserve(eng, (size_t)n, e)) != 0)
        goto out;
    for (int i = 0; i < n; i++) {
        struct entry *ent = p.groups[i].ent;

        if ((rc = fill ? fill(ctx, i, ent, e)
                       : kvs__mem_copy(ent->value, ent->device, values[i].data,
                                       values[i].device, ent->bytes, eng->nthreads, e)) != 0)
            goto out;
    }
    if ((rc = kvs__mem_finish(e)) != 0)
        goto out;
    for (int i = 0; i < n; i++) {
        p.groups[i].ent->version = 1;
        kvs__table_put(eng, p.groups[i].ent);
        p.groups[i].fresh = false;
    }
out:
    if (rc != 0)
        kvs__mem_finish(NULL);         /* nothing left queued into entries freed here */
    kvs__plan_free(eng, &p);
    return rc;
}
