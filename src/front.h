/*
 * front.h - the handle behind kvs_t and the operations each store type
 * provides. kvs.c owns handles (locking, options, errors) and the local
 * type; client.c provides the dist types. Nothing here is API.
 */
#ifndef KVS_FRONT_H
#define KVS_FRONT_H

#include <pthread.h>

#include "bufs.h"
#include "engine.h"
#include "error.h"

/* What one store type does; chosen by kvs_create. */
struct kvs__store_ops {
    int (*open)(kvs_t *kv);            /* after the handle's fields are set */
    int (*init)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                int replace);
    int (*push)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                int priority);
    int (*pull)(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs, int priority);
    int (*pushpull)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                    kvs_array_t *outs, int priority);
    int (*row_sparse_pull)(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                           const kvs_array_t *row_ids, int priority);
    /* pull_view (values NULL) or pushpull_view. The views' data hold a
     * placeholder the checks accept; set to the values on success. */
    int (*view)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                kvs_array_t *views, int priority);
    /* A zero-filled buffer of bytes (> 0), 64-byte aligned, or a failure
     * with a detail; array_free: -ENOENT when p is not a live buffer. */
    int (*array_alloc)(kvs_t *kv, size_t bytes, void **p);
    int (*array_free)(kvs_t *kv, void *p);
    int (*set_updater)(kvs_t *kv, kvs_updater_t fn, void *ctx);
    int (*set_optimizer)(kvs_t *kv, const char *spec);
    int (*set_gradient_compression)(kvs_t *kv, const char *spec);
    int (*save_states)(kvs_t *kv, const char *path, int dump_optimizer);
    int (*load_states)(kvs_t *kv, const char *path);
    int (*barrier)(kvs_t *kv);
    int (*apply_options)(kvs_t *kv);
    void (*close)(kvs_t *kv);
};

struct kvs {
    const struct kvs__store_ops *ops;
    char *type;                        /* as given to kvs_create */
    pthread_mutex_t lock;              /* serialises every call but the getters */
    struct kvs__err err;               /* last failure, under lock */
    int64_t opt_init_on_push, opt_threads, opt_timeout_ms;
    int rank, nworkers;
    struct kvs__engine *eng;           /* local types */
    struct kvs__bufs bufs;             /* local types: kvs_array_alloc's (addresses) */
    struct kvs__client *client;        /* dist types */
};

extern const struct kvs__store_ops kvs__dist_ops;

#endif
