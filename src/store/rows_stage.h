/*
 * rows_stage.h - row-sparse values given in GPU memory, copied to host
 * memory (their rows and ids, nothing else) so that every store type
 * takes them as it takes host values.
 */
#ifndef KVS_ROWS_STAGE_H
#define KVS_ROWS_STAGE_H

#include "kvs.h"
#include "base/error.h"

/* *out is values itself when none of values[0..n) lies on a GPU, else a
 * copy of the list in which each value on a GPU (device = KVS_CUDA(i))
 * points at host copies of its nnz rows and ids, device KVS_HOST. A value
 * on a GPU is checked first: a full shape and dtype an array could have,
 * nnz >= 0, data and indices non-NULL when nnz > 0, its device existing
 * and holding nnz rows at data and nnz int64 ids at indices. Every other
 * check (ids in range, the key's shape) is the host value's, later.
 * Release with kvs__rows_unstage. Errors: KVS_EBADARG, KVS_ESHAPE,
 * KVS_EDTYPE, KVS_EDEVICE naming key and value, -ENOMEM; nothing is
 * allocated then. */
int kvs__rows_stage(int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                    const kvs_row_sparse_t **out, struct kvs__err *e);
/* Frees what kvs__rows_stage made for values (staged == values: nothing). */
void kvs__rows_unstage(int n, const kvs_row_sparse_t *values, const kvs_row_sparse_t *staged);

#endif
