/*
 * ops.h - the ops a request slot may carry (slots.h), and what the
 * decoders of slots and tables (slots.c, tables.c) judge an op by: its
 * name, whether it carries an array, and the bytes of an array's value.
 * These run for every slot and every table entry kvsd reads: static
 * inline, no call. It must never read a slot or a table itself.
 */
#ifndef KVS_PROTO_OPS_H
#define KVS_PROTO_OPS_H

#include <stdint.h>

#include "kvs.h"
#include "base/error.h"

enum kvs__op {
    KVS__OP_INIT = 1,       /* key, dtype, shape, value at data_off/data_len in staging */
    KVS__OP_PUSH = 2,       /* same */
    KVS__OP_PULL = 3,       /* key, dtype, shape: the value after this worker's pushes */
    KVS__OP_BARRIER = 4,
    KVS__OP_SET_OPTIMIZER = 5,  /* spec text at data_off/data_len (no NUL), < 4096 */
    KVS__OP_SAVE_STATES = 6,    /* absolute path at data_off/data_len; arg = dump flag */
    KVS__OP_LOAD_STATES = 7,    /* absolute path at data_off/data_len */
    KVS__OP_CLOSE = 8,          /* this worker leaves the job cleanly */
    KVS__OP_SPILL = 9,          /* copy every push of this worker whose data kvsd still
                                 * reads from staging, and release it */
    KVS__OP_EXPLAIN = 10,       /* this worker gave up waiting for request arg: say
                                 * what it waits for (in the CQE's message) and fail
                                 * the job with that cause */
    KVS__OP_REGISTER = 11,      /* a device buffer of this worker, as number arg
                                 * (< KVS__DEVBUF_MAX): its allocation's CUDA IPC
                                 * handle, KVS__DEVBUF_HANDLE_BYTES at data_off/
                                 * data_len in staging. Replaces the buffer that had
                                 * that number before; kvsd closes it, and every
                                 * buffer of a worker that leaves or dies. A handle
                                 * of zeros only closes it (the allocation is
                                 * gone). */
    KVS__OP_COMMIT = 12,        /* a collective: the job's snapshot at step arg (>= 0),
                                 * made once every worker has asked with the same step
                                 * and every push each made before it is applied */
};

/* The device buffers one worker may have registered at a time. */
#define KVS__DEVBUF_MAX 1024
#define KVS__DEVBUF_HANDLE_BYTES 64

/* 1 when a request of op carries an array: a key, a dtype and a shape. */
static inline int kvs__op_has_array(int op)
{
    return op == KVS__OP_INIT || op == KVS__OP_PUSH || op == KVS__OP_PULL;
}

/* The op's name ("PUSH"), or NULL for no op. */
static inline const char *kvs__op_name(int op)
{
    switch (op) {
    case KVS__OP_INIT: return "INIT";
    case KVS__OP_PUSH: return "PUSH";
    case KVS__OP_PULL: return "PULL";
    case KVS__OP_BARRIER: return "BARRIER";
    case KVS__OP_SET_OPTIMIZER: return "SET_OPTIMIZER";
    case KVS__OP_SAVE_STATES: return "SAVE_STATES";
    case KVS__OP_LOAD_STATES: return "LOAD_STATES";
    case KVS__OP_CLOSE: return "CLOSE";
    case KVS__OP_SPILL: return "SPILL";
    case KVS__OP_EXPLAIN: return "EXPLAIN";
    case KVS__OP_REGISTER: return "REGISTER";
    case KVS__OP_COMMIT: return "COMMIT";
    default: return NULL;
    }
}

/* Why a dtype and shape make no value: */
enum { KVS__SIZE_OK, KVS__SIZE_DTYPE, KVS__SIZE_SHAPE, KVS__SIZE_BYTES };

/* The bytes of a value of dtype and shape (ndim extents, each >= 0) in
 * *bytes, by the rule of kvs__array_check, which the engine applies: an
 * empty array is empty however big its other extents, and a size must
 * fit an int64. KVS__SIZE_OK, or why not. */
static inline int kvs__value_size(kvs_dtype_t dtype, int ndim, const int64_t *shape,
                                  int64_t *bytes)
{
    int64_t es = (int64_t)kvs_dtype_size(dtype), count = 1;

    if (es == 0)
        return KVS__SIZE_DTYPE;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0)
            count = 0;
    for (int d = 0; d < ndim && count; d++)
        if (__builtin_mul_overflow(count, shape[d], &count))
            return KVS__SIZE_SHAPE;
    return __builtin_mul_overflow(count, es, bytes) ? KVS__SIZE_BYTES : KVS__SIZE_OK;
}

/* The bytes of one row of a value of dtype and shape (ndim >= 1): its
 * extents past the first times the dtype's size, in *bytes (0 when one of
 * them is 0). KVS__SIZE_OK, or why not. */
static inline int kvs__row_size(kvs_dtype_t dtype, int ndim, const int64_t *shape,
                                int64_t *bytes)
{
    return ndim < 1 ? KVS__SIZE_SHAPE : kvs__value_size(dtype, ndim - 1, shape + 1, bytes);
}

/* The bytes of a row-sparse push of nnz rows of row_bytes each: its row
 * ids (int64) and its rows. -1 on overflow or nnz < 0. */
static inline int64_t kvs__rows_bytes(int64_t nnz, int64_t row_bytes)
{
    int64_t per, total;

    if (nnz < 0 || __builtin_add_overflow(row_bytes, (int64_t)8, &per)
        || __builtin_mul_overflow(nnz, per, &total))
        return -1;
    return total;
}

/* The error of kvs__value_size's why, for what ("request 5 (PUSH)"). */
static inline int kvs__size_fail(struct kvs__err *e, int why, const char *what, int dtype)
{
    if (why == KVS__SIZE_DTYPE)
        return kvs__fail(e, KVS_EPROTO, "%s: unknown dtype %d", what, dtype);
    return kvs__fail(e, KVS_EPROTO, "%s: %s overflows 64 bits", what,
                     why == KVS__SIZE_SHAPE ? "shape" : "byte size");
}

#endif
