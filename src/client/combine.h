/*
 * combine.h - the rounds the workers combine among themselves (combine.c)
 * in the job's combine area (proto/combine.h), and list calls split
 * between those keys and kvsd's. Nothing here is API.
 */
#ifndef KVS_CLIENT_COMBINE_H
#define KVS_CLIENT_COMBINE_H

#include "kvs.h"
#include "base/error.h"
#include "client/link.h"

/* The slot of key when its
 * rounds are combined by the workers, else NULL. */
struct kvs__cb_slot;
struct kvs__cb_slot *kvs__client_cb_find(const struct kvs__client *c, kvs_key_t key);
/* A list call of n such keys (slots[i]: keys[i]'s): pushes values (or
 * NULL), then pulls into outs (or NULL), views (view) or rows (or NULL).
 * Checks every array against its key before anything happens. */
int kvs__client_cb_call(kvs_t *kv, int n, const kvs_key_t *keys,
                        struct kvs__cb_slot *const *slots, const kvs_array_t *values,
                        kvs_array_t *outs, const kvs_array_t *rows, int view, const char *what,
                        struct kvs__err *e);

/* Row-sparse values of such keys (client/rows.c checks each value as it
 * checks any, then these against the slots). kvs__client_cb_check_rows:
 * dtype, shape and row ids of values[i] against slots[i]'s key
 * (KVS_EDTYPE, KVS_ESHAPE, KVS_ERANGE naming the key, and the value by
 * pos[i], its place in the caller's list). push_rows: pushes
 * the checked values, those of a key given several times summed, each key
 * one round (combine.h says how a round of rows is updated). pull_rows:
 * waits for this worker's last push of the key to be published, then
 * copies rows ids[0..m) (in range) of its value into data, one after
 * another. */
int kvs__client_cb_check_rows(int n, const kvs_key_t *keys, struct kvs__cb_slot *const *slots,
                              const kvs_row_sparse_t *values, const int *pos,
                              struct kvs__err *e);
int kvs__client_cb_push_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                             struct kvs__cb_slot *const *slots, const kvs_row_sparse_t *values,
                             const char *what, struct kvs__err *e);
int kvs__client_cb_pull_rows(kvs_t *kv, struct kvs__cb_slot *s, kvs_key_t key,
                             const int64_t *ids, int64_t m, void *data, const char *what,
                             struct kvs__err *e);

/* A list call split between kvsd's keys and those the workers combine:
 * the keys and arrays of both parts, copied, kvsd's first. */
struct kvs__split {
    int nkd, ncb;
    int *idx;                          /* [nkd + ncb]: each one's place in the call */
    struct kvs__cb_slot **slots;       /* [ncb]: the combined keys' slots */
    kvs_key_t *keys;
    kvs_array_t *arrs[3];              /* values, outs, rows, or NULL */
};
/* Splits a list of n keys with its arrays src (values, outs, rows, each
 * or NULL); checks that combined keys' values are not freed buffers. 0
 * with sp->ncb 0 when no key of it is combined (nothing made). */
int kvs__client_split(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *const src[3],
                      struct kvs__split *sp, struct kvs__err *e);
/* Runs a split call: kvsd's part by kd (which checks its arrays against
 * the stored keys before anything happens), then the combined part;
 * hands the outs back (a view sets their data) and frees sp. */
typedef int kvs__split_fn(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                          kvs_array_t *outs, const kvs_array_t *rows, int view, int priority,
                          const char *what, struct kvs__err *e);
int kvs__client_split_run(kvs_t *kv, struct kvs__split *sp, kvs_array_t *outs,
                          kvs__split_fn *kd, int view, int priority, const char *what,
                          struct kvs__err *e);

#endif
