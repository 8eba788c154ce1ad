/*
 * groups.c - a list call's keys grouped by key (groups.h): what the worker
 * side sends is one request per key, whatever repeats the caller's list
 * has, and one request slot is made the same way for every op.
 *
 * Owns no state beyond the arrays of one grouping. It must never talk to
 * kvsd, nor look at the values: it sees keys, dtypes and shapes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/groups.h"
#include "store/key.h"

void kvs__client_sqe_key(struct kvs__sqe *s, kvs_key_t key)
{
    if (key.name) {
        s->flags |= KVS__SQE_STRKEY;
        s->key_len = (uint16_t)strlen(key.name);
        memcpy(s->key_name, key.name, s->key_len + 1u);
    } else {
        s->key_id = key.id;
    }
}

void kvs__client_sqe_array(struct kvs__sqe *s, const kvs_array_t *a)
{
    s->dtype = a->dtype;
    s->ndim = a->ndim;
    memcpy(s->shape, a->shape, sizeof s->shape[0] * (size_t)a->ndim);
}

void kvs__groups_free(struct kvs__groups *g)
{
    free(g->gid);
    free(g->member);
}

int kvs__groups_make(int n, const kvs_key_t *keys, struct kvs__groups *g, struct kvs__err *e)
{
    g->n = n;
    g->member = NULL;
    g->gid = malloc(sizeof(int) * 2 * (size_t)(n ? n : 1));
    if (!g->gid)
        return kvs__fail(e, -ENOMEM, "out of memory");
    g->first = g->gid + n;
    g->ng = kvs__group_keys(n, keys, g->gid, g->first, e);
    if (g->ng < 0) {
        free(g->gid);
        return g->ng;
    }
    /* Members by group, in list order (a counting sort): linear, where a
     * search per group would cost the square of the list's length. */
    g->member = malloc(sizeof(int) * ((size_t)n + (size_t)g->ng + 1));
    if (!g->member) {
        free(g->gid);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    g->mstart = g->member + n;
    memset(g->mstart, 0, sizeof(int) * ((size_t)g->ng + 1));
    for (int i = 0; i < n; i++)
        g->mstart[g->gid[i] + 1]++;
    for (int j = 0; j < g->ng; j++)
        g->mstart[j + 1] += g->mstart[j];
    {
        int *fill = g->gid + n;        /* reuse first[] as cursors, then restore it */

        for (int j = 0; j < g->ng; j++)
            fill[j] = g->mstart[j];
        for (int i = 0; i < n; i++)
            g->member[fill[g->gid[i]]++] = i;
        for (int j = 0; j < g->ng; j++)
            fill[j] = g->member[g->mstart[j]];
    }
    return 0;
}

int kvs__groups_match(const struct kvs__groups *g, const kvs_key_t *keys, const kvs_array_t *arrs,
                      const char *what, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    for (int i = 0; i < g->n; i++) {
        const kvs_array_t *f = &arrs[g->first[g->gid[i]]];

        if (arrs[i].dtype != f->dtype || !kvs__same_shape(&arrs[i], f)) {
            kvs__key_str(ks, sizeof ks, keys[i]);
            return kvs__fail(e, arrs[i].dtype != f->dtype ? KVS_EDTYPE : KVS_ESHAPE,
                             "key %s: %s %d differs in dtype or shape from %s %d of the "
                             "same key", ks, what, i, what, g->first[g->gid[i]]);
        }
    }
    return 0;
}

int kvs__groups_tabular(const struct kvs__groups *g, const kvs_key_t *keys,
                        uint32_t *const *coded, const int *dev, int start, int end)
{
    for (int j = start; j < end; j++)
        if (keys[g->first[j]].name || (coded && coded[j]) || (dev && dev[j] >= 0))
            return 0;
    return 1;
}
