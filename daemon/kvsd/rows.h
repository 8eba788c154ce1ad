/*
 * rows.h - row-sparse requests (KVS__SQE_ROWS) in kvsd (rows.c): a push's
 * row ids taken and checked, what kvsd does not take, a key's shape
 * record for row-sparse pulls, and the row-sparse inputs of a push
 * handed to the engine.
 */
#ifndef KVSD_ROWS_H
#define KVSD_ROWS_H

#include "daemon.h"

/* A row-sparse push's row ids, copied out of its worker's staging once
 * into r->ridx: from here on only the copy is read (the worker could
 * rewrite its staging). 0 or -ENOMEM. */
int rows_take_ids(struct daemon *d, struct req *r, struct kvs__err *e);

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
