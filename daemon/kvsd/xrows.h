/*
 * xrows.h - row-sparse pushes across hosts (xrows.c): this host's sum of
 * its workers' rows of a dist_sync round or of one dist_async push, its
 * slices by part, the rows messages of a part (a host's sum or push to the
 * owner, the updated rows back), and the owner's update of a part's rows.
 */
#ifndef KVSD_XROWS_H
#define KVSD_XROWS_H

#include "daemon.h"

#include "kernels/rows.h"
#include "proto/wire_msg.h"

/* This host's sum of its workers' pushes of the open round of rd when one
 * is row-sparse (a dense push counts as every row, as on one host):
 * rd->xr, 1; 0 when every push is dense (rd->xr NULL); <0 with e set. */
int xrows_sum(struct daemon *d, struct round *rd, struct kvs__err *e);
/* The same of one row-sparse push r alone (dist_async): rd->xr, 1; <0
 * with e set. */
int xrows_sum_push(struct daemon *d, struct round *rd, struct req *r, struct kvs__err *e);
void xrows_free(struct round *rd);

/* Rows [*lo, *lo + *n) of the key are part p's. */
void xrows_part_rows(const struct round *rd, int p, int64_t *lo, int64_t *n);

/* rd->xr's rows of part p, as an input. */
struct kvs__rows_in xrows_slice(const struct round *rd, int p);

/* Sends rd->xr's rows of part p to the part's owner as a rows PARTIAL of
 * round rd->done + 1 (type KVS__FRAME_PARTIAL), or as a rows FORWARD
 * (type KVS__FRAME_FORWARD; m->b: the push's token). m: the key.
 * -ENOMEM. */
int xrows_send(struct daemon *d, struct round *rd, int p, int type, struct kvs__wire_msg *m);

/* At the owner of part p: applies the k inputs to the part's rows as one
 * update of step `step` (kvs__engine_push_rows_range) and puts the rows it
 * changed (their union) in *u (empty for the dense rule). */
int xrows_apply(struct daemon *d, struct round *rd, int p, int k, const struct kvs__rows_in *in,
                uint64_t step, struct kvs__rows_union *u, struct kvs__err *e);

/* The part's updated rows u, read from the value, to every other host as
 * a rows VALUE (m: the key and round; "the rest is zero" under ASSIGN).
 * -ENOMEM. */
int xrows_tell(struct daemon *d, struct round *rd, int p, struct kvs__wire_msg *m,
               const struct kvs__rows_union *u);

/* A rows VALUE m of rd's key, written into this host's copy. */
void xrows_write(struct round *rd, const struct kvs__wire_msg *m);

#endif
