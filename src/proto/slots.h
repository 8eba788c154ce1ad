/*
 * slots.h - the request (SQE) and completion (CQE) slots of the rings a
 * worker shares with kvsd (slots.c). A slot may also stand for a table of
 * requests in staging, whose entries tables.h lays out.
 */
#ifndef KVS_PROTO_SLOTS_H
#define KVS_PROTO_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"
#include "proto/head.h"
#include "proto/ops.h"

/* The most requests one list call (up to its LAST slot) may hold: kvsd keeps
 * a whole list in memory until its end, to check all of it before any of
 * it takes effect. Longer calls are sent in parts of at most this many. */
#define KVS__LIST_MAX (1 << 22)

struct kvs__sqe {
    uint8_t op;                        /* enum kvs__op */
    uint8_t flags;                     /* KVS__SQE_* */
    kvs_dtype_t dtype;                 /* valid for INIT/PUSH/PULL */
    int ndim;                          /* 0..KVS_MAX_NDIM */
    int64_t shape[KVS_MAX_NDIM];       /* each >= 0 */
    int32_t priority;
    uint64_t seq;                      /* the worker's request number, echoed in the CQE */
    int64_t key_id;                    /* int key */
    uint16_t key_len;                  /* string keys (KVS__SQE_STRKEY): 0..KVS_MAX_KEY_LEN
                                        * name bytes; int keys: 0 */
    char key_name[KVS_MAX_KEY_LEN + 1];/* NUL-terminated, no NUL inside */
    uint64_t data_off, data_len;       /* a range of the staging area */
    uint64_t arg;                      /* SAVE: dump flag; EXPLAIN: a seq; a PUSH
                                        * with KVS__SQE_2BIT: its threshold's bits; a
                                        * PUSH with KVS__SQE_REMOTE (no table): the
                                        * address of its out, data_len bytes of the
                                        * worker's memory, or 0 (below) */
};
#define KVS__SQE_LAST  0x01            /* the last slot of one list call */
#define KVS__SQE_VALUE 0x02            /* PUSH: complete with the key's value once
                                        * applied, as a PULL would (pushpull) */
#define KVS__SQE_STRKEY 0x04           /* the key is key_name, a string (maybe empty) */
#define KVS__SQE_TABLE 0x08            /* INIT, PUSH, PULL of int keys: the slot stands
                                        * for arg requests, listed in a table (below) */
#define KVS__SQE_2BIT  0x10            /* PUSH of a float32 value (no table): its data
                                        * is the value 2bit-compressed (compress.h),
                                        * kvs__gc_2bit_words(count) 32-bit words, with
                                        * the threshold (finite, > 0) as a float's bits
                                        * in the low half of arg */
#define KVS__SQE_DEVICE 0x20           /* INIT, PUSH, PULL (no table, no 2bit): the
                                        * value is not in staging but at data_off/
                                        * data_len of the worker's device buffer arg
                                        * (KVS__OP_REGISTER), the worker's device work
                                        * on it done. kvsd reads an INIT's or PUSH's
                                        * once, when it takes it; it writes a PULL's
                                        * value there, and answers once it is written */
#define KVS__SQE_REMOTE 0x40           /* PUSH with KVS__SQE_VALUE (no 2bit, no device):
                                        * the value is not in staging but at address
                                        * data_off of the worker's own memory, which
                                        * kvsd reads (process_vm_readv) until it
                                        * returns the data (below); only from a worker
                                        * whose welcome had KVS__WELCOME_REMOTE. In a
                                        * table the slot has it when any entry has
                                        * KVS__TAB_REMOTE, and entries say which.
                                        * Outside a table, a non-zero arg is the
                                        * address of the call's out for this value
                                        * (data_len bytes, the worker's memory too):
                                        * kvsd may write the value there as it makes
                                        * it (process_vm_writev), and then says so
                                        * (KVS__CQE_WRITTEN); the worker lends it
                                        * until the completion, or until kvsd has
                                        * answered an EXPLAIN of it (kvsd writes
                                        * nothing into a worker after that) */
#define KVS__SQE_ROWS  0x80           /* INIT, PUSH or PULL of a row-sparse value (no
                                        * table, no value, no 2bit, no device, no
                                        * remote). An INIT's or PUSH's dtype and shape
                                        * are the key's full value's (ndim >= 1), arg
                                        * its nnz rows, and its data nnz int64 row
                                        * ids, then the nnz rows (nnz * (8 + row
                                        * bytes) bytes in all); an INIT's key is zero
                                        * but for those rows, and the workers never
                                        * combine its rounds. A PULL's dtype and ndim
                                        * are zero, arg the rows it asks for, and its
                                        * data empty, or arg sorted unique int64 row
                                        * ids followed by room for the rows: when the
                                        * rows fit that room kvsd writes them there
                                        * (KVS__CQE_ROWS). Its completion names the
                                        * value, and in round the arena offset of the
                                        * key's shape record (layout.h); without
                                        * KVS__CQE_ROWS the worker copies the rows it
                                        * wants out of the arena itself */
#define KVS__SQE_FLAGS (KVS__SQE_LAST | KVS__SQE_VALUE | KVS__SQE_STRKEY | KVS__SQE_TABLE \
                        | KVS__SQE_2BIT | KVS__SQE_DEVICE | KVS__SQE_REMOTE | KVS__SQE_ROWS)

/* A table: a list of many small keys in a few slots instead of a slot per
 * key (a slot of 512 bytes, decoded and answered one by one, cost kvsd
 * more than the key's whole work). A slot with KVS__SQE_TABLE carries the
 * op, flags (but STRKEY), priority and seq of arg requests, 1 to
 * KVS__TABLE_MAX; key, dtype and shape fields are zero. Its data range in
 * staging holds the table: arg entries one after another, each
 * KVS__TAB_ENTRY_BYTES(ndim) bytes (an int key, a dtype, a shape, and for
 * INIT and PUSH where its data lies in staging), then arg results of
 * KVS__TAB_RESULT_BYTES, nothing else. kvsd reads the entries once, when it
 * reads the slot; it writes each request's result (a status, and for a
 * PULL or a PUSH with KVS__SQE_VALUE the value's place in the arena) before
 * it posts the table's one completion, which carries the status and
 * message of the first request of the table that failed. A table of sync
 * pushes without KVS__SQE_VALUE is answered by one KVS__CQE_HELD
 * completion once all are taken, and its data returned by one
 * KVS__CQE_RELEASE once kvsd reads none of it. The worker lends the whole
 * range until the table's completion. */
#define KVS__TABLE_MAX       4096
#define KVS__TAB_ENTRY_BYTES(ndim) (24 + 8 * (size_t)(ndim))
#define KVS__TAB_RESULT_BYTES 16

/* A push's data (in staging) is lent to kvsd from its request until it is
 * returned: by a KVS__CQE_RELEASE entry with the push's seq once kvsd no
 * longer reads it (the round closed, or kvsd copied it on a SPILL or when
 * the worker left), or by the push's completion when it comes without
 * KVS__CQE_HELD. A completion with KVS__CQE_HELD (a dist_sync push taken
 * into its key's round, which closes later) returns nothing. Whichever
 * comes first returns the data; the worker counts each request once and
 * may reuse that staging only then. */
#define KVS__CQE_HELD    0x01
#define KVS__CQE_RELEASE 0x02          /* not a completion: seq's data is returned */
#define KVS__CQE_ROWS    0x04          /* a KVS__SQE_ROWS PULL's rows are in its data
                                        * range, after its ids (only with status 0) */
#define KVS__CQE_WRITTEN 0x08          /* a KVS__SQE_REMOTE push's value was written
                                        * whole into its out (arg), as well as into
                                        * the arena (only with status 0) */
#define KVS__CQE_FLAGS   (KVS__CQE_HELD | KVS__CQE_RELEASE | KVS__CQE_ROWS | KVS__CQE_WRITTEN)

struct kvs__cqe {
    uint64_t seq;                      /* the SQE's seq */
    int32_t status;                    /* 0 or a negative code */
    uint32_t flags;                    /* KVS__CQE_* */
    uint64_t value_off, value_len;     /* PULL: the value's bytes in the arena */
    uint64_t round;                    /* PULL: the round the value belongs to; a
                                        * KVS__SQE_ROWS PULL: its key's shape record */
    char msg[KVS__MSG_MAX];            /* detail when status != 0 */
};

#define KVS__SQE_BYTES 512             /* slot sizes of the two rings */
#define KVS__CQE_BYTES 256

/* A 2bit push's threshold in a slot's arg, and back. */
uint64_t kvs__threshold_arg(float threshold);
float kvs__arg_threshold(uint64_t arg);

void kvs__sqe_encode(const struct kvs__sqe *s, void *slot);
/* Checks everything a worker could have put in the slot: op, flags, dtype,
 * ndim, extents (and that their element count times the dtype size equals
 * data_len for INIT/PUSH, or its 2bit words' bytes for a 2bit push, without
 * overflow), key length and NUL, data range within staging_size (a device
 * push's: without overflow, kvsd checks it against the buffer; a remote
 * push's: without overflow, the kernel checks it), text
 * lengths, a device buffer's number. KVS_EPROTO with a detail otherwise. */
int kvs__sqe_decode(const void *slot, uint64_t staging_size, struct kvs__sqe *s,
                    struct kvs__err *e);

void kvs__cqe_encode(const struct kvs__cqe *c, void *slot);
/* Checks status range, message NUL, and value_off + value_len <= arena_size. */
int kvs__cqe_decode(const void *slot, uint64_t arena_size, struct kvs__cqe *c,
                    struct kvs__err *e);

#endif
