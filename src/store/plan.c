/*
 * plan.c - a data call's plan: the list grouped by key, each group's
 * entry found in the table or made fresh for a new key, every array
 * matched against its entry, table room reserved, the inputs laid out
 * group by group. One allocation per call.
 *
 * It must never change anything observable: a fresh entry stays out of
 * the table until the call commits (or is freed with the plan), and no
 * value is read or written here. Running a plan is init.c's, push.c's and
 * pull.c's.
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
#include "store/key.h"
#include "store/plan.h"

void kvs__plan_free(struct kvs__engine *eng, struct plan *p)
{
    for (int g = 0; p->groups && g < p->ngroups; g++) {
        if (p->groups[g].fresh)
            kvs__entry_free(eng, p->groups[g].ent);
        kvs__optim_state_free(p->groups[g].ostate);
    }
    free(p->groups);
    memset(p, 0, sizeof *p);
}

int kvs__plan_make(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                   const kvs_array_t *arrs, bool allow_new, struct plan *p,
                   struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    size_t cap = kvs__group_slots(n);
    int *first, rc, nfresh = 0;

    memset(p, 0, sizeof *p);
    p->n = n;
    if (n == 0)
        return 0;
    /* One allocation per call: groups, inputs, gid, first, hash slots. */
    if ((size_t)n > SIZE_MAX / 128)
        return kvs__fail(e, -ENOMEM, "a list of %d keys is too long", n);
    p->groups = malloc((sizeof *p->groups + sizeof *p->inputs) * (size_t)n
                       + sizeof(int) * (3 * (size_t)n + cap));
    if (!p->groups)
        return kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
    p->inputs = (const void **)(p->groups + n);
    p->devs = (int *)(p->inputs + n);
    p->gid = p->devs + n;
    first = p->gid + n;
    p->ngroups = kvs__group_keys_in(n, keys, p->gid, first, first + n);
    memset(p->groups, 0, sizeof *p->groups * (size_t)p->ngroups);
    for (int g = 0; g < p->ngroups; g++) {
        struct group *gr = &p->groups[g];
        kvs_key_t key = keys[first[g]];

        gr->ent = table_get(eng, key);
        if (!gr->ent) {
            if (!allow_new) {
                rc = kvs__fail(e, KVS_ENOKEY, "key %s: not initialised", KEYSTR(ks, key));
                goto fail;
            }
            if ((rc = kvs__entry_new(eng, key, &arrs[first[g]], &gr->ent, e)) != 0)
                goto fail;
            gr->fresh = true;
            nfresh++;
        }
    }
    for (int i = 0; i < n; i++) {
        struct group *gr = &p->groups[p->gid[i]];

        if ((rc = kvs__entry_match(gr->ent, &arrs[i], e)) != 0)
            goto fail;
        gr->k++;
    }
    /* Lay the inputs out group by group, each in list order. */
    for (int g = 0, at = 0; g < p->ngroups; g++) {
        p->groups[g].in = p->inputs + at;
        p->groups[g].dev = p->devs + at;
        at += p->groups[g].k;
        p->groups[g].k = 0;
    }
    for (int i = 0; i < n; i++) {
        struct group *gr = &p->groups[p->gid[i]];

        gr->dev[gr->k] = arrs[i].device;
        gr->in[gr->k++] = arrs[i].data;
    }
    if ((rc = kvs__table_reserve(eng, (size_t)nfresh, e)) != 0)
        goto fail;
    return 0;

fail:
    kvs__plan_free(eng, p);
    return rc;
}
