/*
 * front.h - the handle behind kvs_t and the operations each store type
 * provides. kvs.c owns handles (locking, options, errors) and the local
 * type; client/client.c provides the dist types. It declares no module's
 * calls: the store types include it for the handle they work on. Nothing
 * here is API.
 */
#ifndef KVS_FRONT_H
#define KVS_FRONT_H

#include <pthread.h>

#include "base/bufs.h"
#include "store/engine.h"
#include "base/error.h"

/* What a closed handle leaves to the holds of kvs_mem_hold (kvs.h): the
 * memory its buffers and views point into, which the store type's close
 * moves here instead of freeing it; the last kvs_mem_release frees it. */
struct kvs__leftover {
    void *map[3];                      /* dist types: mappings, unmapped */
    size_t map_len[3];
    struct kvs__engine *eng;           /* local types: the engine and its values */
    struct kvs__bufs bufs;             /* local types: heap buffers not freed */
};

/* What one store type does; chosen by kvs_create. Every call reports a
 * failure's detail in e, which the front copies to the handle. */
struct kvs__store_ops {
    /* 0: the front serialises every call under the handle's lock. 1: the
     * type takes what locks it needs itself, so that calls of several
     * threads progress independently (a dist call waiting for the other
     * workers must not hold up its siblings); e is then the calling
     * thread's own. */
    int concurrent;
    int (*open)(kvs_t *kv, struct kvs__err *e);   /* after the handle's fields are set */
    int (*init)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                int replace, struct kvs__err *e);
    int (*push)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                int priority, struct kvs__err *e);
    int (*pull)(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs, int priority,
                struct kvs__err *e);
    int (*pushpull)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                    kvs_array_t *outs, int priority, struct kvs__err *e);
    int (*row_sparse_pull)(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                           const kvs_array_t *row_ids, int priority, struct kvs__err *e);
    /* Row-sparse values (kvs.h); NULL: the type does not take them, and the
     * front fails the call with KVS_ENOTSUP naming the type. pushpull_rows
     * NULL: the front checks the pull's arguments, then calls push_rows and
     * pull_rows. */
    int (*init_rows)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                     struct kvs__err *e);
    int (*push_rows)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                     int priority, struct kvs__err *e);
    int (*pull_rows)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *row_ids,
                     kvs_row_sparse_t *outs, int priority, struct kvs__err *e);
    int (*pushpull_rows)(kvs_t *kv, int n, const kvs_key_t *keys,
                         const kvs_row_sparse_t *values, const kvs_array_t *row_ids,
                         kvs_row_sparse_t *outs, int priority, struct kvs__err *e);
    /* pull_view (values NULL) or pushpull_view. The views' data hold a
     * placeholder the checks accept; set to the values on success. */
    int (*view)(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                kvs_array_t *views, int priority, struct kvs__err *e);
    /* A zero-filled buffer of bytes (> 0), 64-byte aligned, or a failure
     * with a detail; array_free: -ENOENT when p is not a live buffer. */
    int (*array_alloc)(kvs_t *kv, size_t bytes, void **p, struct kvs__err *e);
    int (*array_free)(kvs_t *kv, void *p, struct kvs__err *e);
    int (*set_updater)(kvs_t *kv, kvs_updater_t fn, void *ctx, struct kvs__err *e);
    int (*set_optimizer)(kvs_t *kv, const char *spec, struct kvs__err *e);
    int (*set_gradient_compression)(kvs_t *kv, const char *spec, struct kvs__err *e);
    int (*save_states)(kvs_t *kv, const char *path, int dump_optimizer, struct kvs__err *e);
    int (*load_states)(kvs_t *kv, const char *path, struct kvs__err *e);
    int (*barrier)(kvs_t *kv, struct kvs__err *e);
    int (*commit)(kvs_t *kv, int64_t step, struct kvs__err *e);
    int (*resume_step)(kvs_t *kv, int64_t *step, struct kvs__err *e);
    /* After an option changed; a failure makes the front restore it. */
    int (*apply_options)(kvs_t *kv, struct kvs__err *e);
    /* keep NULL: frees everything. Else moves into *keep the memory the
     * handle's buffers and views point into, and frees the rest. */
    void (*close)(kvs_t *kv, struct kvs__leftover *keep);
};

struct kvs {
    const struct kvs__store_ops *ops;
    char *type;                        /* as given to kvs_create */
    pthread_mutex_t lock;              /* serialises every call but the getters (for
                                        * concurrent types: options and err only) */
    struct kvs__err err;               /* last failure, under lock */
    int64_t opt_init_on_push, opt_threads, opt_timeout_ms;
    int rank, nworkers;
    struct kvs__engine *eng;           /* local types */
    uint64_t *placed;                  /* device, nccl: bytes of values placed on each GPU */
    struct kvs__nccl *nccl;            /* nccl: its communicators */
    struct kvs__bufs bufs;             /* local types: kvs_array_alloc's (addresses) */
    uint8_t *snap;                     /* local types: the last commit's snapshot image */
    size_t snap_len;
    int64_t committed;                 /* local types: its step, -1 before any */
    uint64_t commits;                  /* local types: commits made, the snapshot's seq */
    struct kvs__client *client;        /* dist types */
    struct kvs_mem *mem;               /* made by the first kvs_mem_hold */
};

extern const struct kvs__store_ops kvs__dist_ops;

/* The options a call of a concurrent type works with, read under the
 * handle's lock. */
struct kvs__opts {
    int64_t init_on_push, threads, timeout_ms;
};
static inline void kvs__opts_get(kvs_t *kv, struct kvs__opts *o)
{
    pthread_mutex_lock(&kv->lock);
    o->init_on_push = kv->opt_init_on_push;
    o->threads = kv->opt_threads;
    o->timeout_ms = kv->opt_timeout_ms;
    pthread_mutex_unlock(&kv->lock);
}

#endif
