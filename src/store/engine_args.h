/*
 * engine_args.h - engine_args.c's checks of a data call's arguments, the
 * same for the engine and for a client that checks before it sends. It
 * needs the engine's handle only by name, so that it stands below the
 * engine's face (engine.h) and never reaches up into it.
 */
#ifndef KVS_ENGINE_ARGS_H
#define KVS_ENGINE_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"

struct kvs__engine;

/* Checks a list call's arguments as every data call does: n >= 0, lists
 * non-NULL, string keys' length, one kind of key (and the engine's kind;
 * eng may be NULL), each array (kvs__array_check). what names the arrays
 * in messages ("value", "out"). */
int kvs__check_list(const struct kvs__engine *eng, int n, const kvs_key_t *keys,
                    const kvs_array_t *arrs, const char *what, struct kvs__err *e);

/* Checks the row ids of out i of a row-sparse pull of key, whose value
 * has ndim dimensions and rows rows: a host int64 1-D array of ids in
 * [0, rows). */
int kvs__check_row_ids(kvs_key_t key, int i, const kvs_array_t *ids, int ndim, int64_t rows,
                       struct kvs__err *e);

/* Row-sparse values (kvs.h's kvs_row_sparse_t), the same checks for the
 * engine and for a client that checks before it sends. */

/* Value i of key (what names it: "value"): ndim 1..KVS_MAX_NDIM (KVS_ESHAPE
 * for ndim 0), a full shape an array could have, a kvs dtype, nnz >= 0,
 * indices and data non-NULL when nnz > 0, host memory (KVS_EBADARG), every
 * index in [0, shape[0]) (KVS_ERANGE naming the key, the position and the
 * index). Not checked against a stored key: kvs__engine_check_rows does. */
int kvs__check_row_sparse(kvs_key_t key, int i, const kvs_row_sparse_t *a, const char *what,
                          struct kvs__err *e);
/* The form of a row-sparse value, before its rows or ids are read: ndim
 * 1..KVS_MAX_NDIM (KVS_ESHAPE), a full shape an array could have, a kvs
 * dtype, nnz >= 0, indices and data non-NULL when nnz > 0, rows and ids
 * that fit in memory, and host memory unless any_device (KVS_EBADARG).
 * what names it in the detail: "key 7: value 0". */
int kvs__check_row_sparse_form(const kvs_row_sparse_t *a, int any_device, const char *what,
                               struct kvs__err *e);
/* Out i of a compact pull of key: room (nnz) >= 0, indices and data
 * non-NULL when room > 0, host memory. */
int kvs__check_rows_out(kvs_key_t key, int i, const kvs_row_sparse_t *out, struct kvs__err *e);
/* A row-sparse push's or init's list: count, lists, keys as
 * kvs__check_list checks them (eng may be NULL), each value. */
int kvs__check_rows_list(const struct kvs__engine *eng, int n, const kvs_key_t *keys,
                         const kvs_row_sparse_t *values, struct kvs__err *e);
/* A compact pull's list: count, lists (row_ids too), keys, each out. The
 * row ids are checked against their key by kvs__check_row_ids. */
int kvs__check_rows_outs(const struct kvs__engine *eng, int n, const kvs_key_t *keys,
                         const kvs_array_t *row_ids, const kvs_row_sparse_t *outs,
                         struct kvs__err *e);
/* The room of a pushpull's outs, checked before its push (the lists
 * checked as above; keys[i] has values[i]'s full shape): row_ids[i] as
 * kvs__check_row_ids checks them against that shape, and each out's room
 * against the sorted unique ids it will get: -ENOSPC with every out's nnz
 * set to the rows it needs when one has too little. */
int kvs__check_rows_room(int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                         const kvs_array_t *row_ids, kvs_row_sparse_t *outs,
                         struct kvs__err *e);
/* The full value of a checked row-sparse value, as an array over data. */
kvs_array_t kvs__row_sparse_full(const kvs_row_sparse_t *a, void *data);
/* Bytes of one row of a checked row-sparse value. */
size_t kvs__row_sparse_row_bytes(const kvs_row_sparse_t *a);

#endif
