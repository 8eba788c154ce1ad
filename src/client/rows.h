/*
 * rows.h - row-sparse values in the dist types, the worker's side
 * (rows.c): pushes of rows only, compact pulls out of the arena, and the
 * dense form an init sends. Nothing here is API.
 */
#ifndef KVS_CLIENT_ROWS_H
#define KVS_CLIENT_ROWS_H

#include "kvs.h"
#include "base/error.h"

/* kvs_push_row_sparse: one request per key, its values' ids and rows
 * (only those) in staging, or as they lie in a buffer of kvs_array_alloc
 * when the rows follow the ids there. kvsd checks every id and the shape
 * against the key. KVS_ENOTSUP under 2bit compression. */
int kvs__client_push_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                          const kvs_row_sparse_t *values, int priority, struct kvs__err *e);

/* kvs_pull_rows: waits as a pull does, then copies the sorted unique rows
 * of row_ids[i] out of the arena into outs[i] (kvs.h's contract, -ENOSPC
 * included), touching no other row. */
int kvs__client_pull_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *row_ids,
                          kvs_row_sparse_t *outs, int priority, struct kvs__err *e);

/* The dense form of value i (of key) of an init: every row not given
 * zero, repeats summed, in out (its data malloc'd; NULL on failure). Checks
 * the value and its ids (KVS_ERANGE naming key and position). */
int kvs__client_rows_dense(kvs_key_t key, int i, const kvs_row_sparse_t *v, kvs_array_t *out,
                           struct kvs__err *e);

#endif
