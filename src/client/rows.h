/*
 * rows.h - row-sparse values in the dist types, the worker's side
 * (rows.c): pushes and inits of rows only, compact pulls. Nothing here
 * is API.
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

/* kvs_pull_rows (kvs.h's contract, -ENOSPC included): waits as a pull
 * does, kvsd gathering the sorted unique rows of row_ids[i] into staging
 * when they are few enough, else the worker copying them out of the
 * arena; either way no other row is touched. */
int kvs__client_pull_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *row_ids,
                          kvs_row_sparse_t *outs, int priority, struct kvs__err *e);

/* kvs_init_row_sparse: one INIT per key with its ids and rows (only
 * those) in staging, as a push sends them; kvsd stores the key zero but
 * for those rows. Each value's ids are checked here against its shape
 * (KVS_ERANGE naming key and position); a key twice in one call is
 * KVS_EKEYEXISTS. */
int kvs__client_init_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                          const kvs_row_sparse_t *values, struct kvs__err *e);

#endif
