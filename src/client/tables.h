/*
 * tables.h - a list call's tables in staging (tables.c), for the file
 * that posts calls (call.c): writing a table's entries and its slot, and
 * reading its results once its completion came. Not for the files above
 * the link: they hand kvs__client_run_batch a list and ask for tables.
 */
#ifndef KVS_CLIENT_TABLES_H
#define KVS_CLIENT_TABLES_H

#include <stdint.h>

#include "base/error.h"
#include "client/link.h"
#include "proto/slots.h"

/* Lists at least this long go in tables: shorter ones, slot by slot. */
#define TABLE_MIN 16
/* Staging one table takes at most: entries of any ndim, and results. */
#define TABLE_BYTES \
    ((uint64_t)KVS__TABLE_MAX * (KVS__TAB_ENTRY_BYTES(KVS_MAX_NDIM) + KVS__TAB_RESULT_BYTES))

/* Writes table t of a list call of n requests (fill, ctx) at staging
 * offset off, setting each answer's value_len to the size of the value
 * it will hand over (0: none), and makes its slot in *q (all but seq and
 * the end-of-list flag). *res: where its results go. 0, or KVS_EPROTO
 * when the list is not one op of int keys (a caller's mistake). */
int kvs__client_table_make(struct kvs__client *c, kvs__fill_fn fill, const void *ctx, int n,
                           int t, uint64_t off, struct kvs__answers *ans, struct kvs__sqe *q,
                           uint64_t *res);

/* The answers of table t of a call of nreq requests (ans), whose results
 * lie at staging offset res_off and whose completion q came: taken (a
 * HELD completion), or each request's result as kvsd wrote it in the
 * table, checked. Each answer's value_len was set when the table was
 * made: the size of the value it expects, or 0. c->lock held. 0, or
 * KVS_EPROTO with a detail: kvsd wrote a bad result. */
int kvs__client_table_answers(struct kvs__client *c, struct kvs__answers *ans, int nreq, int t,
                              uint64_t res_off, const struct kvs__cqe *q, struct kvs__err *e);

#endif
