/*
 * kvs.c - the public front: handles, store types, options, locking and the
 * detail message of kvs_last_error(). It checks the handle, takes the
 * handle's lock and hands the call to the store type's operations; it never
 * touches values itself (the engine does, in this process or in kvsd).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/array.h"
#include "device/cuda.h"
#include "store/engine.h"
#include "base/error.h"
#include "front.h"
#include "device/mem.h"
#include "store/nccl_reduce.h"
#include "store/rows_stage.h"
#include "store/snapshot.h"
#include "base/spec.h"
#include "proto/trace.h"
#include "shm/shm.h"

/* ---- the local store: the engine in this process ---------------------- */

/* MXNet's CommDevice: a new key goes to the GPU with the fewest bytes of
 * values so far (keys in the order they are first stored), whatever
 * device its first array is on; sums and updates then run there. Without
 * a GPU the store is the local store. A call that fails after placing a
 * key still counts its bytes: the balance is a heuristic. */
static int device_place(void *ctx, const kvs_array_t *like, size_t bytes)
{
    kvs_t *kv = ctx;
    int ndev = kvs__cuda_devices(NULL), best = 0;

    if (ndev <= 0)
        return like->device;
    if (ndev > KVS__MAX_DEVICES)
        ndev = KVS__MAX_DEVICES;
    for (int d = 1; d < ndev; d++)
        if (kv->placed[d] < kv->placed[best])
            best = d;
    kv->placed[best] += bytes;
    return KVS_CUDA(best);
}

/* The "device" type is the local store with device_place; "nccl" also
 * reduces values from several GPUs with NCCL. */
static int local_open(kvs_t *kv, struct kvs__err *e)
{
    int nccl = strcmp(kv->type, "nccl") == 0, rc;

    if ((nccl || strcmp(kv->type, "device") == 0)
        && !(kv->placed = calloc(KVS__MAX_DEVICES, sizeof *kv->placed)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    if ((nccl && (rc = kvs__nccl_new(&kv->nccl, e)) != 0)
        || (rc = kvs__engine_new(NULL, &kv->eng, e)) != 0) {
        kvs__nccl_free(kv->nccl);
        free(kv->placed);
        kv->nccl = NULL;
        kv->placed = NULL;
        return rc;
    }
    kv->committed = -1;
    if (kv->placed)
        kvs__engine_set_place(kv->eng, device_place, kv);
    if (kv->nccl)
        kvs__engine_set_reduce(kv->eng, kvs__nccl_reduce, kv->nccl);
    return 0;
}

static int local_init(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                      int replace, struct kvs__err *e)
{
    return kvs__engine_init(kv->eng, n, keys, values, replace, e);
}

static int local_push(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                      int priority, struct kvs__err *e)
{
    (void)priority;                    /* nothing waits in an in-process store */
    return kvs__engine_push(kv->eng, n, keys, values, e);
}

static int local_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                      int priority, struct kvs__err *e)
{
    (void)priority;
    return kvs__engine_pull(kv->eng, n, keys, outs, e);
}

static int local_pushpull(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                          kvs_array_t *outs, int priority, struct kvs__err *e)
{
    (void)priority;
    return kvs__engine_pushpull(kv->eng, n, keys, values, outs, e);
}

static int local_row_sparse_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                                 const kvs_array_t *row_ids, int priority, struct kvs__err *e)
{
    (void)priority;
    return kvs__engine_row_sparse_pull(kv->eng, n, keys, outs, row_ids, e);
}

static int local_init_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                           const kvs_row_sparse_t *values, struct kvs__err *e)
{
    return kvs__engine_init_row_sparse(kv->eng, n, keys, values, 0, e);
}

static int local_push_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                           const kvs_row_sparse_t *values, int priority, struct kvs__err *e)
{
    (void)priority;
    return kvs__engine_push_row_sparse(kv->eng, n, keys, values, e);
}

static int local_pull_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *row_ids,
                           kvs_row_sparse_t *outs, int priority, struct kvs__err *e)
{
    (void)priority;
    return kvs__engine_pull_rows(kv->eng, n, keys, row_ids, outs, e);
}

static int local_view(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                      kvs_array_t *views, int priority, struct kvs__err *e)
{
    (void)priority;
    if (values)
        return kvs__engine_pushpull_view(kv->eng, n, keys, values, views, e);
    return kvs__engine_pull_view(kv->eng, n, keys, views, e);
}

/* Buffers of the local store are plain heap memory: the engine copies a
 * push into the stored value anyway, and views need no buffer. */
static int local_array_alloc(kvs_t *kv, size_t bytes, void **p, struct kvs__err *e)
{
    size_t size = (bytes + 63) & ~(size_t)63;
    void *m;

    if (size < bytes || !(m = aligned_alloc(64, size)))
        return kvs__fail(e, -ENOMEM, "out of memory for a %zu-byte buffer", bytes);
    if (kvs__bufs_add(&kv->bufs, (uintptr_t)m, size) != 0) {
        free(m);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    memset(m, 0, size);
    *p = m;
    return 0;
}

static int local_array_free(kvs_t *kv, void *p, struct kvs__err *e)
{
    (void)e;                           /* the front words the failure */
    if (kvs__bufs_remove(&kv->bufs, (uintptr_t)p, NULL) != 0)
        return -ENOENT;
    free(p);
    return 0;
}

static int local_set_updater(kvs_t *kv, kvs_updater_t fn, void *ctx, struct kvs__err *e)
{
    (void)e;
    kvs__engine_set_updater(kv->eng, fn, ctx);
    return 0;
}

static int local_set_optimizer(kvs_t *kv, const char *spec, struct kvs__err *e)
{
    return kvs__engine_set_optimizer(kv->eng, spec, e);
}

static int local_set_gradient_compression(kvs_t *kv, const char *spec, struct kvs__err *e)
{
    (void)spec;                        /* MXNet's local store refuses it outright too */
    return kvs__fail(e, KVS_ENOTSUP,
                     "gradient compression is not supported by store type %s: nothing "
                     "crosses a process boundary", kv->type);
}

static int local_save_states(kvs_t *kv, const char *path, int dump_optimizer,
                             struct kvs__err *e)
{
    return kvs__engine_save_states(kv->eng, path, dump_optimizer, e);
}

static int local_load_states(kvs_t *kv, const char *path, struct kvs__err *e)
{
    return kvs__engine_load_states(kv->eng, path, e);
}

static int local_barrier(kvs_t *kv, struct kvs__err *e)
{
    (void)kv;                          /* one worker: everyone is already here */
    (void)e;
    return 0;
}

static int local_apply_options(kvs_t *kv, struct kvs__err *e)
{
    (void)e;
    kvs__engine_set_init_on_push(kv->eng, (int)kv->opt_init_on_push);
    kvs__engine_set_threads(kv->eng, (int)kv->opt_threads);
    return 0;
}

static void local_close(kvs_t *kv, struct kvs__leftover *keep)
{
    if (keep) {                        /* views point into the engine's values */
        keep->eng = kv->eng;
        keep->bufs = kv->bufs;
        kv->eng = NULL;
        kv->bufs = (struct kvs__bufs){ 0 };
    }
    kvs__engine_free(kv->eng);
    free(kv->snap);
    kvs__nccl_free(kv->nccl);
    free(kv->placed);
    for (size_t i = 0; i < kv->bufs.n; i++)
        free((void *)(uintptr_t)kv->bufs.r[i].off);
    kvs__bufs_fini(&kv->bufs);
}

/* An in-process store keeps its last commit as a snapshot image in
 * memory: a program that restarts itself has nothing to roll back to, but
 * the commit checks what a dist store's would (every value in host memory)
 * and says the step kvs_resume_step reports. The previous image goes once
 * the new one is made, so that a failed commit keeps the last one. */
static int local_commit(kvs_t *kv, int64_t step, struct kvs__err *e)
{
    struct kvs__snap_meta meta = { .step = step, .nworkers = 1, .sync = -1 };
    struct timespec ts;
    uint8_t *img;
    size_t len;
    int rc;

    clock_gettime(CLOCK_REALTIME, &ts);
    meta.made_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    meta.seq = kv->commits + 1;
    if ((rc = kvs__snapshot_encode(kv->eng, &meta, NULL, NULL, &img, &len, e)) != 0)
        return rc;
    free(kv->snap);
    kv->snap = img;
    kv->snap_len = len;
    kv->committed = step;
    kv->commits++;
    return 0;
}

static int local_resume_step(kvs_t *kv, int64_t *step, struct kvs__err *e)
{
    (void)e;
    *step = kv->committed;
    return 0;
}

static const struct kvs__store_ops local_ops = {
    .concurrent = 0,
    .open = local_open,
    .init = local_init,
    .push = local_push,
    .pull = local_pull,
    .pushpull = local_pushpull,
    .row_sparse_pull = local_row_sparse_pull,
    .init_rows = local_init_rows,
    .push_rows = local_push_rows,
    .pull_rows = local_pull_rows,
    .view = local_view,
    .array_alloc = local_array_alloc,
    .array_free = local_array_free,
    .set_updater = local_set_updater,
    .set_optimizer = local_set_optimizer,
    .set_gradient_compression = local_set_gradient_compression,
    .save_states = local_save_states,
    .load_states = local_load_states,
    .barrier = local_barrier,
    .commit = local_commit,
    .resume_step = local_resume_step,
    .apply_options = local_apply_options,
    .close = local_close,
};

/* ---- store types ------------------------------------------------------ */

static const struct {
    const char *name;
    const struct kvs__store_ops *ops;
} store_types[] = {
    { "local", &local_ops },
    { "local_update_cpu", &local_ops },      /* MXNet's historical names */
    { "local_allreduce_cpu", &local_ops },
    { "dist_sync", &kvs__dist_ops },
    { "dist_async", &kvs__dist_ops },
    { "dist_device_sync", &kvs__dist_ops },   /* MXNet's name: dist_sync */
    { "device", &local_ops },
    { "nccl", &local_ops },
};

/* ---- errors ----------------------------------------------------------- */

static _Thread_local char create_error[KVS__ERR_MSG_MAX];
static _Thread_local char last_error_copy[KVS__ERR_MSG_MAX];

KVS_API const char *kvs_last_error(const kvs_t *kv)
{
    kvs_t *k = (kvs_t *)kv;            /* the lock is not part of the value */

    if (!kv)
        return create_error;
    pthread_mutex_lock(&k->lock);
    memcpy(last_error_copy, k->err.msg, sizeof last_error_copy);
    pthread_mutex_unlock(&k->lock);
    return last_error_copy;
}

KVS_API const char *kvs_version(int *major, int *minor, int *patch)
{
    if (major)
        *major = KVS_VERSION_MAJOR;
    if (minor)
        *minor = KVS_VERSION_MINOR;
    if (patch)
        *patch = KVS_VERSION_PATCH;
    return "kvs " KVS_VERSION_STRING;
}

/* ---- life ------------------------------------------------------------- */

KVS_API int kvs_create(const char *type, kvs_t **out)
{
    struct kvs__err err = { 0, "" };
    const struct kvs__store_ops *ops = NULL;
    kvs_t *kv;
    size_t i;
    int rc;

    if (out)
        *out = NULL;
    if (!type || !out) {
        rc = kvs__fail(&err, KVS_EBADARG, "kvs_create: %s is NULL", type ? "out" : "type");
        goto fail;
    }
    for (i = 0; i < sizeof store_types / sizeof store_types[0]; i++)
        if (strcmp(type, store_types[i].name) == 0)
            break;
    if (i == sizeof store_types / sizeof store_types[0]) {
        rc = kvs__fail(&err, KVS_EBADTYPE, "unknown store type '%.64s'", type);
        goto fail;
    }
    ops = store_types[i].ops;
    kv = calloc(1, sizeof *kv);
    if (!kv || !(kv->type = strdup(type))) {
        free(kv);
        rc = kvs__fail(&err, -ENOMEM, "kvs_create: out of memory");
        goto fail;
    }
    kv->ops = ops;
    kv->nworkers = 1;
    if ((rc = kvs__tr_setup(&err)) != 0
        || (rc = kvs__env_timeout_ms(&kv->opt_timeout_ms, &err)) != 0) {
        free(kv->type);
        free(kv);
        goto fail;
    }
    pthread_mutex_init(&kv->lock, NULL);
    if ((rc = kv->ops->open(kv, &err)) != 0) {
        pthread_mutex_destroy(&kv->lock);
        free(kv->type);
        free(kv);
        goto fail;
    }
    kv->ops->apply_options(kv, &err);
    *out = kv;
    return 0;

fail:
    memcpy(create_error, err.msg, sizeof create_error);
    return rc;
}

/* ---- the timeline ------------------------------------------------------ */

KVS_API int kvs_timeline_start(const char *path)
{
    struct kvs__err err = { 0, "" };
    int rc = kvs__tr_start(path, &err);

    if (rc != 0)
        memcpy(create_error, err.msg, sizeof create_error);
    return rc;
}

KVS_API int kvs_timeline_stop(void)
{
    struct kvs__err err = { 0, "" };
    int rc = kvs__tr_stop(&err);

    if (rc != 0)
        memcpy(create_error, err.msg, sizeof create_error);
    return rc;
}

/* ---- memory past kvs_close -------------------------------------------- */

/* A handle's memory, shared by the handle while it is open and by the
 * holds of kvs_mem_hold; the last of them frees it. */
struct kvs_mem {
    atomic_long refs;                  /* holds, + 1 while the handle is open */
    struct kvs__leftover left;         /* what kvs_close left behind */
};

/* Makes kv->mem: no two threads race to it (kvs.h: holds are thread-safe). */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;

static int mem_hold(kvs_t *kv, kvs_mem_t **out, struct kvs__err *e)
{
    struct kvs_mem *m;

    if (!out)
        return kvs__fail(e, KVS_EBADARG, "kvs_mem_hold: out is NULL");
    pthread_mutex_lock(&mem_lock);
    if (!kv->mem && (kv->mem = calloc(1, sizeof *kv->mem)) != NULL)
        atomic_init(&kv->mem->refs, 1);
    if ((m = kv->mem) != NULL)
        atomic_fetch_add(&m->refs, 1);
    pthread_mutex_unlock(&mem_lock);
    if (!m)
        return kvs__fail(e, -ENOMEM, "out of memory");
    *out = m;
    return 0;
}

KVS_API int kvs_mem_release(kvs_mem_t *mem)
{
    struct kvs__leftover *l;

    if (!mem || atomic_fetch_sub(&mem->refs, 1) != 1)
        return 0;
    l = &mem->left;
    for (int i = 0; i < 3; i++)
        if (l->map[i])
            kvs__unmap(l->map[i], l->map_len[i]);
    kvs__engine_free(l->eng);
    for (size_t i = 0; i < l->bufs.n; i++)
        free((void *)(uintptr_t)l->bufs.r[i].off);
    kvs__bufs_fini(&l->bufs);
    free(mem);
    return 1;
}

KVS_API void kvs_close(kvs_t *kv)
{
    struct kvs_mem *m;

    if (!kv)
        return;
    /* With no hold left, no other can come: kvs_mem_hold must not run
     * beside kvs_close. */
    m = kv->mem;
    kv->ops->close(kv, m && atomic_load(&m->refs) > 1 ? &m->left : NULL);
    kvs_mem_release(m);
    pthread_mutex_destroy(&kv->lock);
    free(kv->type);
    free(kv);
}

/* ---- options and getters ---------------------------------------------- */

/* Runs a call under the handle's lock; a NULL handle is KVS_EBADARG. */
#define LOCKED(kv, call)                                                     \
    do {                                                                     \
        int rc_;                                                             \
        if (!(kv))                                                           \
            return KVS_EBADARG;                                              \
        pthread_mutex_lock(&(kv)->lock);                                     \
        rc_ = (call);                                                        \
        pthread_mutex_unlock(&(kv)->lock);                                   \
        return rc_;                                                          \
    } while (0)

/* Runs a call of the store type, which reports its failure in e (the
 * expression may use it), and keeps that as the handle's last error. The
 * handle's lock is held across the call for serialised types, and only
 * while the error is kept for concurrent ones. NULL handle: KVS_EBADARG.
 * TRACED also puts the call on the timeline as `what` (enum kvs__tr_what)
 * of its n keys, values and priority: when the timeline is off, that is a
 * branch before and one after. */
#define TRACED(kv, what, n, keys, values, priority, call)                    \
    TRACED_AS(kv, what, kvs__tr_call, n, keys, values, priority, call)
/* TRACED with the recorder of the call's values: kvs__tr_call (arrays) or
 * kvs__tr_call_rows (row-sparse values). */
#define TRACED_AS(kv, what, record, n, keys, values, priority, call)         \
    do {                                                                     \
        struct kvs__err err_ = { 0, "" }, *e = &err_;                        \
        int rc_, serial_;                                                    \
        int64_t t_;                                                          \
        if (!(kv))                                                           \
            return KVS_EBADARG;                                              \
        t_ = (what) >= 0 ? kvs__tr_begin() : 0;                              \
        serial_ = !(kv)->ops->concurrent;                                    \
        if (serial_)                                                         \
            pthread_mutex_lock(&(kv)->lock);                                 \
        rc_ = (call);                                                        \
        if (rc_ != 0) {                                                      \
            if (!serial_)                                                    \
                pthread_mutex_lock(&(kv)->lock);                             \
            (kv)->err = err_;                                                \
            if (!serial_)                                                    \
                pthread_mutex_unlock(&(kv)->lock);                           \
        }                                                                    \
        if (serial_)                                                         \
            pthread_mutex_unlock(&(kv)->lock);                               \
        if (t_)                                                              \
            record((what), t_, (n), (keys), (values), (priority), rc_,       \
                   err_.msg);                                                \
        (void)e;                                                             \
        return rc_;                                                          \
    } while (0)
#define CALL(kv, call) TRACED(kv, -1, 0, NULL, NULL, 0, call)

static int set_option(kvs_t *kv, kvs_option_t opt, int64_t value)
{
    int64_t init_on_push = kv->opt_init_on_push, threads = kv->opt_threads,
            timeout_ms = kv->opt_timeout_ms;
    int rc;

    switch (opt) {
    case KVS_OPT_INIT_ON_PUSH:
        if (value != 0 && value != 1)
            return kvs__fail(&kv->err, KVS_EBADARG,
                             "KVS_OPT_INIT_ON_PUSH: %lld is not 0 or 1", (long long)value);
        kv->opt_init_on_push = value;
        break;
    case KVS_OPT_THREADS:
        if (value < 0 || value > 64)
            return kvs__fail(&kv->err, KVS_EBADARG,
                             "KVS_OPT_THREADS: %lld is not in [0, 64]", (long long)value);
        kv->opt_threads = value;
        break;
    case KVS_OPT_TIMEOUT_MS:
        if (value < 1 || value > (int64_t)86400000 * 365)
            return kvs__fail(&kv->err, KVS_EBADARG,
                             "KVS_OPT_TIMEOUT_MS: %lld is not in [1, one year]",
                             (long long)value);
        kv->opt_timeout_ms = value;
        break;
    default:
        return kvs__fail(&kv->err, KVS_EBADARG, "unknown option %d", (int)opt);
    }
    if ((rc = kv->ops->apply_options(kv, &kv->err)) != 0) {
        kv->opt_init_on_push = init_on_push;
        kv->opt_threads = threads;
        kv->opt_timeout_ms = timeout_ms;
    }
    return rc;
}

static int get_option(kvs_t *kv, kvs_option_t opt, int64_t *value)
{
    if (!value)
        return kvs__fail(&kv->err, KVS_EBADARG, "kvs_get_option: value is NULL");
    switch (opt) {
    case KVS_OPT_INIT_ON_PUSH:
        *value = kv->opt_init_on_push;
        return 0;
    case KVS_OPT_THREADS:
        *value = kv->opt_threads;
        return 0;
    case KVS_OPT_TIMEOUT_MS:
        *value = kv->opt_timeout_ms;
        return 0;
    default:
        return kvs__fail(&kv->err, KVS_EBADARG, "unknown option %d", (int)opt);
    }
}

KVS_API int kvs_set_option(kvs_t *kv, kvs_option_t opt, int64_t value)
{
    LOCKED(kv, set_option(kv, opt, value));
}

KVS_API int kvs_get_option(const kvs_t *kv, kvs_option_t opt, int64_t *value)
{
    kvs_t *k = (kvs_t *)kv;

    LOCKED(k, get_option(k, opt, value));
}

KVS_API const char *kvs_type(const kvs_t *kv)
{
    return kv ? kv->type : NULL;
}

KVS_API int kvs_rank(const kvs_t *kv)
{
    return kv ? kv->rank : 0;
}

KVS_API int kvs_num_workers(const kvs_t *kv)
{
    return kv ? kv->nworkers : 1;
}

/* ---- calls ------------------------------------------------------------ */

KVS_API int kvs_init(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values)
{
    TRACED(kv, KVS__TR_INIT, n, keys, values, 0, kv->ops->init(kv, n, keys, values, 0, e));
}

KVS_API int kvs_reinit(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values)
{
    TRACED(kv, KVS__TR_INIT, n, keys, values, 0, kv->ops->init(kv, n, keys, values, 1, e));
}

KVS_API int kvs_push(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int priority)
{
    TRACED(kv, KVS__TR_PUSH, n, keys, values, priority,
           kv->ops->push(kv, n, keys, values, priority, e));
}

KVS_API int kvs_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                     int priority)
{
    TRACED(kv, KVS__TR_PULL, n, keys, outs, priority,
           kv->ops->pull(kv, n, keys, outs, priority, e));
}

KVS_API int kvs_pushpull(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                         kvs_array_t *outs, int priority)
{
    TRACED(kv, KVS__TR_PUSHPULL, n, keys, values, priority,
           kv->ops->pushpull(kv, n, keys, values, outs, priority, e));
}

KVS_API int kvs_row_sparse_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                                const kvs_array_t *row_ids, int priority)
{
    TRACED(kv, KVS__TR_ROW_SPARSE_PULL, n, keys, NULL, priority,
           kv->ops->row_sparse_pull(kv, n, keys, outs, row_ids, priority, e));
}

/* ---- row-sparse values ------------------------------------------------ */

/* A store type without an op for row-sparse values says so. */
static int rows_notsup(kvs_t *kv, const char *call, struct kvs__err *e)
{
    return kvs__fail(e, KVS_ENOTSUP, "%s: store type %s does not take row-sparse values",
                     call, kv->type);
}

/* Values given in GPU memory reach every type as host copies of their
 * rows and ids (store/rows_stage.h). */
static int init_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                     struct kvs__err *e)
{
    const kvs_row_sparse_t *v;
    int rc;

    if (!kv->ops->init_rows)
        return rows_notsup(kv, "kvs_init_row_sparse", e);
    if ((rc = kvs__rows_stage(n, keys, values, &v, e)) != 0)
        return rc;
    rc = kv->ops->init_rows(kv, n, keys, v, e);
    kvs__rows_unstage(n, values, v);
    return rc;
}

static int push_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_row_sparse_t *values,
                     int priority, struct kvs__err *e)
{
    const kvs_row_sparse_t *v;
    int rc;

    if (!kv->ops->push_rows)
        return rows_notsup(kv, "kvs_push_row_sparse", e);
    if ((rc = kvs__rows_stage(n, keys, values, &v, e)) != 0)
        return rc;
    rc = kv->ops->push_rows(kv, n, keys, v, priority, e);
    kvs__rows_unstage(n, values, v);
    return rc;
}

static int pull_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *row_ids,
                     kvs_row_sparse_t *outs, int priority, struct kvs__err *e)
{
    if (!kv->ops->pull_rows)
        return rows_notsup(kv, "kvs_pull_rows", e);
    return kv->ops->pull_rows(kv, n, keys, row_ids, outs, priority, e);
}

/* The push, then the pull, when the type has no call for both: the pull's
 * arguments are checked first, so that a pull that cannot be made does not
 * follow a push that was (its row ids against keys the push may not know
 * yet are the pull's own to refuse; room is checked before the push). */
static int pushpull_staged(kvs_t *kv, int n, const kvs_key_t *keys,
                           const kvs_row_sparse_t *values, const kvs_array_t *row_ids,
                           kvs_row_sparse_t *outs, int priority, struct kvs__err *e)
{
    int rc;

    if (kv->ops->pushpull_rows)
        return kv->ops->pushpull_rows(kv, n, keys, values, row_ids, outs, priority, e);
    if ((rc = kvs__check_rows_list(NULL, n, keys, values, e)) != 0
        || (rc = kvs__check_rows_outs(NULL, n, keys, row_ids, outs, e)) != 0
        || (rc = kvs__check_rows_room(n, keys, values, row_ids, outs, e)) != 0)
        return rc;
    if ((rc = kv->ops->push_rows(kv, n, keys, values, priority, e)) != 0)
        return rc;
    return kv->ops->pull_rows(kv, n, keys, row_ids, outs, priority, e);
}

static int pushpull_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                         const kvs_row_sparse_t *values, const kvs_array_t *row_ids,
                         kvs_row_sparse_t *outs, int priority, struct kvs__err *e)
{
    const kvs_row_sparse_t *v;
    int rc;

    if (!kv->ops->pushpull_rows && (!kv->ops->push_rows || !kv->ops->pull_rows))
        return rows_notsup(kv, "kvs_pushpull_row_sparse", e);
    if ((rc = kvs__rows_stage(n, keys, values, &v, e)) != 0)
        return rc;
    rc = pushpull_staged(kv, n, keys, v, row_ids, outs, priority, e);
    kvs__rows_unstage(n, values, v);
    return rc;
}

KVS_API int kvs_init_row_sparse(kvs_t *kv, int n, const kvs_key_t *keys,
                                const kvs_row_sparse_t *values)
{
    TRACED_AS(kv, KVS__TR_INIT_ROWS, kvs__tr_call_rows, n, keys, values, 0,
              init_rows(kv, n, keys, values, e));
}

KVS_API int kvs_push_row_sparse(kvs_t *kv, int n, const kvs_key_t *keys,
                                const kvs_row_sparse_t *values, int priority)
{
    TRACED_AS(kv, KVS__TR_PUSH_ROWS, kvs__tr_call_rows, n, keys, values, priority,
              push_rows(kv, n, keys, values, priority, e));
}

KVS_API int kvs_pull_rows(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *row_ids,
                          kvs_row_sparse_t *outs, int priority)
{
    TRACED_AS(kv, KVS__TR_PULL_ROWS, kvs__tr_call_rows, n, keys, outs, priority,
              pull_rows(kv, n, keys, row_ids, outs, priority, e));
}

KVS_API int kvs_pushpull_row_sparse(kvs_t *kv, int n, const kvs_key_t *keys,
                                    const kvs_row_sparse_t *values, const kvs_array_t *row_ids,
                                    kvs_row_sparse_t *outs, int priority)
{
    TRACED_AS(kv, KVS__TR_PUSHPULL_ROWS, kvs__tr_call_rows, n, keys, values, priority,
              pushpull_rows(kv, n, keys, values, row_ids, outs, priority, e));
}

KVS_API int kvs_set_updater(kvs_t *kv, kvs_updater_t fn, void *ctx)
{
    CALL(kv, kv->ops->set_updater(kv, fn, ctx, e));
}

KVS_API int kvs_set_optimizer(kvs_t *kv, const char *spec)
{
    TRACED(kv, KVS__TR_SET_OPTIMIZER, 0, NULL, NULL, 0, kv->ops->set_optimizer(kv, spec, e));
}

KVS_API int kvs_set_gradient_compression(kvs_t *kv, const char *spec)
{
    CALL(kv, kv->ops->set_gradient_compression(kv, spec, e));
}

KVS_API int kvs_save_optimizer_states(kvs_t *kv, const char *path, int dump_optimizer)
{
    TRACED(kv, KVS__TR_SAVE_STATES, 0, NULL, NULL, 0,
           kv->ops->save_states(kv, path, dump_optimizer, e));
}

KVS_API int kvs_load_optimizer_states(kvs_t *kv, const char *path)
{
    TRACED(kv, KVS__TR_LOAD_STATES, 0, NULL, NULL, 0,
           kv->ops->load_states(kv, path, e));
}

KVS_API int kvs_barrier(kvs_t *kv)
{
    TRACED(kv, KVS__TR_BARRIER, 0, NULL, NULL, 0, kv->ops->barrier(kv, e));
}

static int commit_call(kvs_t *kv, int64_t step, struct kvs__err *e)
{
    if (step < 0)
        return kvs__fail(e, KVS_EBADARG, "kvs_commit: step %lld < 0", (long long)step);
    return kv->ops->commit(kv, step, e);
}

KVS_API int kvs_commit(kvs_t *kv, int64_t step)
{
    TRACED(kv, -1, 0, NULL, NULL, 0, commit_call(kv, step, e));
}

static int resume_step_call(kvs_t *kv, int64_t *step, struct kvs__err *e)
{
    if (!step)
        return kvs__fail(e, KVS_EBADARG, "kvs_resume_step: step is NULL");
    return kv->ops->resume_step(kv, step, e);
}

KVS_API int kvs_resume_step(kvs_t *kv, int64_t *step)
{
    TRACED(kv, -1, 0, NULL, NULL, 0, resume_step_call(kv, step, e));
}

/* ---- zero-copy buffers and views -------------------------------------- */

static int array_alloc(kvs_t *kv, kvs_dtype_t dtype, int ndim, const int64_t *shape,
                       kvs_array_t *out, struct kvs__err *e)
{
    kvs_array_t a = { .dtype = dtype, .ndim = ndim, .device = KVS_HOST };
    size_t bytes;
    int rc;

    if (!out)
        return kvs__fail(e, KVS_EBADARG, "kvs_array_alloc: out is NULL");
    if (ndim > 0 && !shape)
        return kvs__fail(e, KVS_EBADARG, "kvs_array_alloc: shape is NULL with ndim %d",
                         ndim);
    if (ndim > 0 && ndim <= KVS_MAX_NDIM)
        memcpy(a.shape, shape, sizeof a.shape[0] * (size_t)ndim);
    a.data = out;                      /* not NULL, so that only the shape is judged */
    if ((rc = kvs__array_check(&a, "kvs_array_alloc", e)) != 0)
        return rc;
    bytes = kvs__array_count(&a) * kvs_dtype_size(dtype);
    if ((rc = kv->ops->array_alloc(kv, bytes ? bytes : 1, &a.data, e)) != 0)
        return rc;
    *out = a;
    return 0;
}

static int array_free(kvs_t *kv, kvs_array_t *arr, struct kvs__err *e)
{
    int rc;

    if (!arr || !arr->data)
        return kvs__fail(e, KVS_EBADARG, "kvs_array_free: %s is NULL",
                         arr ? "data" : "arr");
    if ((rc = kv->ops->array_free(kv, arr->data, e)) == -ENOENT)
        return kvs__fail(e, KVS_EBADARG, "kvs_array_free: %p is not a live buffer "
                         "of this handle (freed already, or not from kvs_array_alloc)",
                         arr->data);
    if (rc != 0)
        return rc;
    arr->data = NULL;
    return 0;
}

/* The views go to the store type as copies whose data is a placeholder the
 * array checks accept, on the host; only a call that succeeded hands back
 * pointers, and where they point. */
static int view(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                kvs_array_t *views, int priority, struct kvs__err *e)
{
    static char placeholder;
    kvs_array_t *v;
    int rc;

    if (n < 0)
        return kvs__fail(e, KVS_EBADARG, "negative count %d", n);
    if (n > 0 && !views)
        return kvs__fail(e, KVS_EBADARG, "view list is NULL with count %d", n);
    if (!(v = malloc(sizeof *v * (size_t)(n ? n : 1))))
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        v[i] = views[i];
        v[i].data = &placeholder;
        v[i].device = KVS_HOST;
    }
    if ((rc = kv->ops->view(kv, n, keys, values, v, priority, e)) == 0) {
        for (int i = 0; i < n; i++) {
            views[i].data = v[i].data;
            views[i].device = v[i].device;
        }
    }
    free(v);
    return rc;
}

KVS_API int kvs_array_alloc(kvs_t *kv, kvs_dtype_t dtype, int ndim, const int64_t *shape,
                            kvs_array_t *out)
{
    CALL(kv, array_alloc(kv, dtype, ndim, shape, out, e));
}

KVS_API int kvs_array_free(kvs_t *kv, kvs_array_t *arr)
{
    CALL(kv, array_free(kv, arr, e));
}

KVS_API int kvs_mem_hold(kvs_t *kv, kvs_mem_t **out)
{
    CALL(kv, mem_hold(kv, out, e));
}

KVS_API int kvs_pull_view(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *views,
                          int priority)
{
    TRACED(kv, KVS__TR_PULL_VIEW, n, keys, views, priority,
           view(kv, n, keys, NULL, views, priority, e));
}

KVS_API int kvs_pushpull_view(kvs_t *kv, int n, const kvs_key_t *keys,
                              const kvs_array_t *values, kvs_array_t *views, int priority)
{
    TRACED(kv, KVS__TR_PUSHPULL_VIEW, n, keys, values, priority,
           view(kv, n, keys, values, views, priority, e));
}
