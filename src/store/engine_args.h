/*
 * engine_args.h - engine_args.c's checks of a data call's arguments, the
 * same for the engine and for a client that checks before it sends. It
 * needs the engine's handle only by name, so that it stands below the
 * engine's face (engine.h) and never reaches up into it.
 */
#ifndef KVS_ENGINE_ARGS_H
#define KVS_ENGINE_ARGS_H

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

#endif
