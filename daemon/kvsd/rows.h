/*
 * rows.h - row-sparse requests (KVS__SQE_ROWS) in kvsd (rows.c): a push's
 * row ids taken and checked, what kvsd does not take, a key's shape
 * record for row-sparse pulls, and the row-sparse inputs of a push
 * handed to the engine.
 */
#ifndef KVSD_ROWS_H
#define KVSD_ROWS_H

#include "daemon.h"

/* A row-sparse push's or pull's row ids, copied out of its worker's
 * staging once into r->ridx: from here on only the copy is read (the
 * worker could rewrite its staging). 0 or -ENOMEM. */
int rows_take_ids(struct daemon *d, struct req *r, struct kvs__err *e);

/* A row-sparse init's (KVS__SQE_ROWS INIT) value in its dense form, in
 * *out (kvs__mem_alloc'd on the host, *len bytes): zero but for the rows
 * it gives, repeats summed, as kvs__engine_init_row_sparse would store
 * it. Its ids are copied out of staging once and checked (KVS_ERANGE
 * naming the key and position) before any row is read. 0, or the error
 * with nothing kept. */
int rows_init_value(struct daemon *d, const struct req *r, void **out, uint64_t *len,
                    struct kvs__err *e);
/* The bytes of r's dense value: an init's data_len, or for a row-sparse
 * init its full shape's (the slot's check found it without overflow). */
uint64_t rows_init_len(const struct req *r);

/* A row-sparse pull's completion, once its key's value is ready: when r
 * gave its row ids and room for their rows in staging, the rows are
 * gathered there and *flags gets KVS__CQE_ROWS; otherwise (room too
 * small, an id out of range, the worker gone) nothing is written, and the
 * worker reads the rows out of the arena. Serve thread only: no value
 * changes meanwhile. */
void rows_gather(struct daemon *d, const struct round *rd, const struct req *r,
                 uint32_t *flags);

/* The row-sparse value push r names (its slot's dtype and shape, kvsd's
 * copy of its ids, its rows where its data lies now), for
 * kvs__engine_check_rows. */
kvs_row_sparse_t rows_value(const struct daemon *d, const struct req *r);

/* A row-sparse request of a key whose rounds r->rd now names: KVS_ENOTSUP
 * for what kvsd does not take (across hosts, a key the workers combine, a
 * push to a key kept on a GPU); a pull's key gets its shape record in the
 * arena, once (-ENOMEM when the arena has no room for it). info: the key's,
 * from the engine. */
int rows_check(struct daemon *d, struct req *r, const struct kvs__entry_info *info,
               struct kvs__err *e);

/* 1 when some of the k pushes reqs[] is row-sparse. */
int rows_any(struct req *const *reqs, int k);

/* The push of the k requests reqs[] (one key's, rd's; in rank order) as
 * one row-sparse push, under the value's seqlock: a dense one among them
 * counts as every row of the key (a round of dense and row-sparse pushes
 * is a dense sum, updated as one). All or nothing, as the engine is. */
int rows_apply(struct daemon *d, struct round *rd, struct req *const *reqs, int k,
               struct kvs__err *e);

#endif
