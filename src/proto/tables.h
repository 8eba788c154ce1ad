/*
 * tables.h - a table's entries and results in staging (tables.c): what a
 * slot with KVS__SQE_TABLE (slots.h) stands for.
 */
#ifndef KVS_PROTO_TABLES_H
#define KVS_PROTO_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"
#include "proto/slots.h"

#define KVS__TAB_REMOTE 0x01           /* an entry's data_off is an address of the
                                        * worker's memory (KVS__SQE_REMOTE) */

struct kvs__tab_entry {
    int64_t key_id;
    kvs_dtype_t dtype;
    int ndim;
    uint8_t flags;                     /* KVS__TAB_* */
    int64_t shape[KVS_MAX_NDIM];
    uint64_t data_off, data_len;       /* data_len: what the shape makes; PULL: 0, 0 */
};

/* A table's entry, made from the request s would be (key_id, dtype, ndim,
 * shape, data_off, KVS__SQE_REMOTE as KVS__TAB_REMOTE): writes KVS__TAB_ENTRY_BYTES(s->ndim) bytes at p and
 * returns that count. */
size_t kvs__tab_entry_encode(const struct kvs__sqe *s, void *p);
/* Reads the entry at p, of the avail bytes left of a table of requests of
 * op and slot flags, into *t and its size into *used: checks what
 * kvs__sqe_decode checks of a slot's key, dtype, shape, data range and
 * flags. KVS_EPROTO otherwise. */
int kvs__tab_entry_decode(const void *p, size_t avail, uint8_t op, uint8_t flags,
                          uint64_t staging_size,
                          struct kvs__tab_entry *t, size_t *used, struct kvs__err *e);
/* A table's result: status (0 or a negative code) and, when it hands over
 * a value, its offset in the arena. decode checks the status, the
 * reserved bytes, and that value_off + value_len (the size the worker
 * expects, 0 when no value) lies in the arena. */
void kvs__tab_result_encode(void *p, int32_t status, uint64_t value_off);
int kvs__tab_result_decode(const void *p, uint64_t arena_size, uint64_t value_len,
                           int32_t *status, uint64_t *value_off, struct kvs__err *e);

#endif
