/*
 * groups.h - a list call's keys grouped by key (groups.c), as the worker
 * side sends them: one request per group, its arrays summed here. And the
 * request slot's key and array fields. Nothing here is API.
 */
#ifndef KVS_CLIENT_GROUPS_H
#define KVS_CLIENT_GROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"
#include "kernels/array.h"
#include "proto/proto.h"

/* A grouped list: per group its first index and its members; per index its
 * group. */
struct kvs__groups {
    int n, ng;
    int *gid, *first;
    int *member, *mstart;              /* group g's indices: member[mstart[g]..mstart[g+1]) */
};

/* Groups a list of n keys (g's arrays malloc'd; kvs__groups_free frees
 * them). Errors: -ENOMEM. */
int kvs__groups_make(int n, const kvs_key_t *keys, struct kvs__groups *g, struct kvs__err *e);
void kvs__groups_free(struct kvs__groups *g);

/* 0 when the arrays of each key agree with the key's first array (dtype,
 * shape), else KVS_EDTYPE or KVS_ESHAPE naming the array (what: "value",
 * "out"). */
int kvs__groups_match(const struct kvs__groups *g, const kvs_key_t *keys, const kvs_array_t *arrs,
                      const char *what, struct kvs__err *e);

/* 1 when the requests of groups [start, end) may go in tables: int keys,
 * no 2bit push (coded: per group its words, or NULL; may be NULL), no
 * device push (dev: per group its device buffer, or -1; may be NULL). */
int kvs__groups_tabular(const struct kvs__groups *g, const kvs_key_t *keys,
                        uint32_t *const *coded, const int *dev, int start, int end);

/* A request slot's key, and its array's dtype and shape. */
void kvs__client_sqe_key(struct kvs__sqe *s, kvs_key_t key);
void kvs__client_sqe_array(struct kvs__sqe *s, const kvs_array_t *a);

/* The bytes of a checked array's value. */
static inline size_t kvs__client_array_bytes(const kvs_array_t *a)
{
    return kvs__array_count(a) * kvs_dtype_size(a->dtype);
}

#endif
