/*
 * dist_rows.h - what the two files of the row-sparse worker
 * (tests/dist_rows.c, tests/dist_rows_hosts.c) share: the job's state from
 * distutil.h, the shape of the small test table, the local store that
 * lazy updates are checked against, and the scenarios that
 * dist_rows_hosts.c runs for dist_rows.c's main.
 */
#ifndef KVS_TESTS_DIST_ROWS_H
#define KVS_TESTS_DIST_ROWS_H

#define DISTUTIL_SHARED
#include "distutil.h"

#define R 50                           /* rows of the table */
#define C 3                            /* columns */

/* The job's key k and a local store's, both initialised to a under the
 * optimizer spec: the local store, given every worker's pushes, is the
 * reference. Returns it after the job's barrier. */
static inline kvs_t *twin(kvs_key_t k, const kvs_array_t *a, const char *spec)
{
    kvs_t *local;

    ok(kvs_create("local", &local), "create local");
    ok(kvs_init(local, 1, &k, a), "init local");
    ok(kvs_set_optimizer(local, spec), "set_optimizer local");
    ok(kvs_init(kv, 1, &k, a), "init");
    ok(kvs_set_optimizer(kv, spec), "set_optimizer");
    ok(kvs_barrier(kv), "barrier");
    return local;
}

/* dist_rows_hosts.c: the scenario "hosts" in a store of type type, and
 * "lazy_chunks". */
void hosts(const char *type);
void lazy_chunks(void);

#endif
