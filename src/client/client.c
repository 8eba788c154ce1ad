/*
 * client.c - the dist store types' operations (kvs__dist_ops, front.h):
 * each API call checked, split between kvsd's keys and the keys the
 * workers combine (combine.c), and made of list calls: what is sent is
 * send.c's, what comes back pull.c's, the link to kvsd connect.c's and call.c's. And the
 * rest: optimizer, compression, states, barrier, buffers, close.
 *
 * It must never touch a ring or the arena itself: the files below do.
 * Nothing below calls it: it is the top of the worker side.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/array.h"
#include "store/key.h"
#include "client/groups.h"
#include "client/link.h"
#include "client/dev.h"
#include "client/combine.h"
#include "client/send.h"
#include "client/pull.h"
#include "client/rows.h"
#include "proto/combine.h"
#include "kernels/compress.h"
#include "proto/layout.h"
#include "device/mem.h"
#include "kernels/optim.h"
#include "proto/trace.h"

#define CLOSE_MS 2000                       /* for kvsd to take a CLOSE: it may be gone */

/* ---- data calls ------------------------------------------------------- */

static int dist_init(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int replace, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct kvs__groups g;
    int rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0)
        return rc;
    if (replace)
        return kvs__fail(e, KVS_ENOTSUP, "kvs_reinit is not supported by %s yet", kv->type);
    if ((rc = kvs__groups_make(n, keys, &g, e)) != 0)
        return rc;
    if (g.ng != n) {
        for (int i = 0; i < n; i++) {
            if (g.first[g.gid[i]] != i) {
                kvs__key_str(ks, sizeof ks, keys[i]);
                rc = kvs__fail(e, KVS_EKEYEXISTS, "key %s: appears twice in one init", ks);
                break;
            }
        }
    } else {
        rc = kvs__client_send_groups(kv, KVS__OP_INIT, 0, &g, keys, values, NULL, 0, NULL,
                                     "kvs_init", e);
    }
    kvs__groups_free(&g);
    return rc;
}

static int dist_push_kd(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                        int priority, struct kvs__err *e)
{
    struct kvs__groups g;
    int rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0)
        return rc;
    if ((rc = kvs__groups_make(n, keys, &g, e)) != 0)
        return rc;
    if ((rc = kvs__groups_match(&g, keys, values, "value", e)) == 0)
        rc = kvs__client_send_groups(kv, KVS__OP_PUSH, 0, &g, keys, values, NULL, priority, NULL,
                                     "kvs_push", e);
    kvs__groups_free(&g);
    return rc;
}

static int push_kd(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                   kvs_array_t *outs, const kvs_array_t *rows, int view, int priority,
                   const char *what, struct kvs__err *e)
{
    (void)outs, (void)rows, (void)view, (void)what;
    return dist_push_kd(kv, n, keys, values, priority, e);
}

/* A call's result, counted into this worker's counters when it succeeded
 * (kvs__client_count): n values pushed (values, or NULL), and the bytes of
 * values and outs (or NULL). */
static int tally(kvs_t *kv, int rc, int n, const kvs_array_t *values, const kvs_array_t *outs)
{
    uint64_t bytes = 0;

    if (rc != 0)
        return rc;
    for (int i = 0; i < n; i++)
        bytes += (values ? kvs__client_array_bytes(&values[i]) : 0)
                 + (outs ? kvs__client_array_bytes(&outs[i]) : 0);
    kvs__client_count(kv->client, values ? (uint64_t)n : 0, bytes);
    return 0;
}

static int dist_push(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int priority, struct kvs__err *e)
{
    struct kvs__split sp;
    int rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0
        || (rc = kvs__client_split(kv, n, keys, (const kvs_array_t *const[3]){ values, NULL, NULL },
                            &sp, e)) != 0)
        return rc;
    if (sp.ncb == 0)
        rc = dist_push_kd(kv, n, keys, values, priority, e);
    else
        rc = kvs__client_split_run(kv, &sp, NULL, push_kd, 0, priority, "kvs_push", e);
    return tally(kv, rc, n, values, NULL);
}

static int pull_groups(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                       const kvs_array_t *rows, int view, int priority, const char *what,
                       struct kvs__err *e)
{
    struct kvs__split sp;
    int rc;

    if ((rc = kvs__client_split(kv, n, keys, (const kvs_array_t *const[3]){ NULL, outs, rows }, &sp,
                         e)) != 0)
        return rc;
    if (sp.ncb == 0)
        return kvs__client_pull_kd(kv, n, keys, NULL, outs, rows, view, priority, what, e);
    return kvs__client_split_run(kv, &sp, outs, kvs__client_pull_kd, view, priority, what, e);
}

static int dist_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs, int priority,
                     struct kvs__err *e)
{
    int rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, outs, "out", e)) != 0)
        return rc;
    return tally(kv, pull_groups(kv, n, keys, outs, NULL, 0, priority, "kvs_pull", e), n, NULL,
                 outs);
}

/* One request per key: the push's completion carries the value it made.
 * view: outs get pointers to the values. */
static int pushpull_kd(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                       kvs_array_t *outs, const kvs_array_t *rows, int view, int priority,
                       const char *what_call, struct kvs__err *e)
{
    kvs_array_t *dst = outs ? outs : (kvs_array_t *)values;
    struct kvs__answers ans = { .a = NULL, .failed = -1 };
    struct kvs__groups g;
    uint64_t gen = kvs__client_gen(kv->client);
    int64_t t;
    int rc;

    (void)rows;
    if ((rc = kvs__groups_make(n, keys, &g, e)) != 0)
        return rc;
    if ((rc = kvs__groups_match(&g, keys, values, "value", e)) != 0)
        goto out;
    if (!(ans.a = calloc((size_t)(g.ng ? g.ng : 1), sizeof *ans.a))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = kvs__client_send_groups(kv, KVS__OP_PUSH, KVS__SQE_VALUE, &g, keys, values,
                                      view ? NULL : dst, priority, &ans, what_call, e)) != 0)
        goto out;
    t = kvs__tr_begin();
    for (int i = 0; i < n && rc == 0; i++)
        if (!(ans.a[g.gid[i]].flags & KVS__CQE_WRITTEN))   /* else kvsd wrote it there */
            rc = kvs__client_deliver(kv, &ans.a[g.gid[i]], &dst[i], view, e);
    if (!view)
        kvs__tr_list(KVS__TR_COPY_OUT, t, n, keys, dst);
    if (rc == 0)                       /* kvsd went meanwhile: this may be the next one's */
        rc = kvs__client_since(kv->client, gen, e);
out:
    free(ans.a);
    kvs__groups_free(&g);
    return rc;
}

static int pushpull_groups(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                           kvs_array_t *outs, int view, int priority, struct kvs__err *e)
{
    const char *call = view ? "kvs_pushpull_view" : "kvs_pushpull";
    const char *what = view ? "view" : "out";
    struct kvs__split sp;
    int rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0
        || (outs && (rc = kvs__check_list(NULL, n, keys, outs, what, e)) != 0))
        return rc;
    for (int i = 0; outs && i < n; i++)
        if (outs[i].dtype != values[i].dtype || !kvs__same_shape(&outs[i], &values[i]))
            return kvs__fail(e, outs[i].dtype != values[i].dtype ? KVS_EDTYPE : KVS_ESHAPE,
                             "%s %d does not match value %d", what, i, i);
    if ((rc = kvs__client_split(kv, n, keys,
                            (const kvs_array_t *const[3]){ values, outs ? outs : values, NULL },
                            &sp, e)) != 0)
        return rc;
    if (sp.ncb == 0)
        return pushpull_kd(kv, n, keys, values, outs, NULL, view, priority, call, e);
    return kvs__client_split_run(kv, &sp, outs, pushpull_kd, view, priority, call, e);
}

static int dist_pushpull(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                         kvs_array_t *outs, int priority, struct kvs__err *e)
{
    return tally(kv, pushpull_groups(kv, n, keys, values, outs, 0, priority, e), n, values,
                 outs ? outs : values);
}

static int dist_view(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     kvs_array_t *views, int priority, struct kvs__err *e)
{
    int rc;

    if (!kv->client->sync)
        return kvs__fail(e, KVS_ENOTSUP, "views are not supported by %s: other "
                         "workers' pushes rewrite a value at any time; use kvs_pull",
                         kv->type);
    if (values)
        return tally(kv, pushpull_groups(kv, n, keys, values, views, 1, priority, e), n, values,
                     views);
    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, views, "view", e)) != 0)
        return rc;
    return tally(kv, pull_groups(kv, n, keys, views, NULL, 1, priority, "kvs_pull_view", e), n,
                 NULL, views);
}

static int dist_row_sparse_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                                const kvs_array_t *row_ids, int priority, struct kvs__err *e)
{
    int rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, outs, "out", e)) != 0)
        return rc;
    if (n > 0 && !row_ids)
        return kvs__fail(e, KVS_EBADARG, "row_ids list is NULL with count %d", n);
    /* An out has the stored shape (kvsd checks it), so its rows bound the ids. */
    for (int i = 0; i < n; i++) {
        if ((rc = kvs__check_row_ids(keys[i], i, &row_ids[i], outs[i].ndim,
                                     outs[i].ndim ? outs[i].shape[0] : 0, e)) != 0)
            return rc;
    }
    return tally(kv, pull_groups(kv, n, keys, outs, row_ids, 0, priority,
                                 "kvs_row_sparse_pull", e), n, NULL, outs);
}

/* ---- row-sparse values (rows.c) ---------------------------------------- */

/* An init of row-sparse values sends only their rows (rows.c); kvsd
 * stores the rest zero. Such keys stay kvsd's, never combined by the
 * workers, so that their row-sparse pushes are taken. */
static int dist_init_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                          const kvs_row_sparse_t *values, struct kvs__err *e)
{
    return kvs__client_init_rows(kv, n, keys, values, e);
}

/* ---- update rules and the rest ---------------------------------------- */

static int dist_set_updater(kvs_t *kv, kvs_updater_t fn, void *ctx, struct kvs__err *e)
{
    (void)fn;
    (void)ctx;
    return kvs__fail(e, KVS_ENOTSUP, "custom updaters are not supported by %s: "
                     "updates run in kvsd, use kvs_set_optimizer", kv->type);
}

/* Sends a text argument (a spec, a path) through staging. */
static int send_text(kvs_t *kv, uint8_t op, const char *text, uint64_t arg, const char *what,
                     struct kvs__err *e)
{
    size_t len = strlen(text);

    if (len == 0 || len > 4095)
        return kvs__fail(e, KVS_EBADARG, "%s: text of %zu bytes: must be 1..4095", what, len);
    return kvs__client_send(kv, op, text, len, arg, what, e);
}

static int dist_set_optimizer(kvs_t *kv, const char *spec, struct kvs__err *e)
{
    struct kvs__optim *o;
    int rc;

    if (!spec)
        return kvs__fail(e, KVS_EBADARG, "optimizer spec is NULL");
    /* Refuse a bad spec here, with the parser's own message. */
    if ((rc = kvs__optim_parse(spec, &o, e)) != 0)
        return rc;
    rc = send_text(kv, KVS__OP_SET_OPTIMIZER, kvs__optim_spec(o), 0, "kvs_set_optimizer", e);
    kvs__optim_free(o);
    return rc;
}

/* Pushes of float32 values from here on are quantized with this worker's
 * residuals and dequantized by kvsd (kvs.h), or by this worker for the
 * keys the workers combine (combine.c). Other dtypes go as they are:
 * the codec is float32's. "none" stops it; the residuals stay, for a
 * later "2bit". */
static int dist_set_gradient_compression(kvs_t *kv, const char *spec, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__gc gc;
    int rc;

    if ((rc = kvs__gc_parse(spec, &gc, e)) != 0)
        return rc;
    pthread_mutex_lock(&c->lock);
    if (gc.type == KVS__GC_2BIT && !c->residuals && kvs__residuals_new(&c->residuals) != 0)
        rc = kvs__fail(e, -ENOMEM, "out of memory");
    else
        c->gc = gc;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* kvsd runs in another directory: relative paths are made absolute here. */
static int path_op(kvs_t *kv, uint8_t op, const char *path, uint64_t arg, const char *what,
                   struct kvs__err *e)
{
    char abs[PATH_MAX];

    if (!path || !*path)
        return kvs__fail(e, KVS_EBADARG, "path is NULL or empty");
    if (path[0] == '/') {
        snprintf(abs, sizeof abs, "%s", path);
    } else {
        if (!getcwd(abs, sizeof abs))
            return kvs__fail(e, -errno, "getcwd: %s", strerror(errno));
        if (strlen(abs) + 1 + strlen(path) >= sizeof abs)
            return kvs__fail(e, -ENAMETOOLONG, "path %s is too long", path);
        strcat(abs, "/");
        strcat(abs, path);
    }
    return send_text(kv, op, abs, arg, what, e);
}

static int dist_save_states(kvs_t *kv, const char *path, int dump_optimizer,
                            struct kvs__err *e)
{
    return path_op(kv, KVS__OP_SAVE_STATES, path, dump_optimizer != 0,
                   "kvs_save_optimizer_states", e);
}

static int dist_load_states(kvs_t *kv, const char *path, struct kvs__err *e)
{
    return path_op(kv, KVS__OP_LOAD_STATES, path, 0, "kvs_load_optimizer_states", e);
}

static int dist_barrier(kvs_t *kv, struct kvs__err *e)
{
    struct kvs__sqe req = { .op = KVS__OP_BARRIER };
    KVS__ONE_ANSWER(ans);

    return kvs__client_run(kv, kvs__client_fill_from, &req, 1, 0, &ans, NULL, "kvs_barrier", e);
}

/* Buffers take the highest free range of staging, above every transient
 * range in use: ordinary calls copy into the bottom part, below every
 * buffer. */
static int dist_array_alloc(kvs_t *kv, size_t bytes, void **p, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    uint64_t size = ((uint64_t)bytes + 63) & ~(uint64_t)63, off;
    int rc;

    pthread_mutex_lock(&c->lock);
    if ((rc = kvs__client_usable_locked(c, e)) != 0)
        goto out;
    if (size < bytes || kvs__bufs_fit_top(&c->bufs, kvs__bufs_high(&c->xfer, 0),
                                          c->staging_size, size, 64, &off) != 0) {
        rc = kvs__fail(e, -ENOSPC, "no room for a %zu-byte buffer in the %llu-byte staging "
                       "area, where %zu buffers live (kvsrun --staging sets its size)",
                       bytes, (unsigned long long)c->staging_size, c->bufs.n);
        goto out;
    }
    if (kvs__bufs_add(&c->bufs, off, size) != 0) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    memset(c->staging + off, 0, size);
    *p = c->staging + off;
out:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* A buffer kvsd may still read (a push of it whose round is open) is
 * copied by kvsd first, so that its memory can be handed out again. */
static int dist_array_free(kvs_t *kv, void *p, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    uintptr_t a = (uintptr_t)p, s = (uintptr_t)c->staging;
    int rc, lent;

    if (a < s || a - s >= c->staging_size)
        return -ENOENT;
    pthread_mutex_lock(&c->lock);
    lent = !c->broken && kvs__client_lending(c, 1) && kvs__bufs_find(&c->bufs, a - s, 0);
    pthread_mutex_unlock(&c->lock);
    if (lent && (rc = kvs__client_spill(kv, e)) != 0)
        return rc;
    pthread_mutex_lock(&c->lock);
    rc = kvs__bufs_remove(&c->bufs, a - s, NULL);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int dist_apply_options(kvs_t *kv, struct kvs__err *e)
{
    /* Read from the handle at each call, but for this one. */
    if (kv->opt_init_on_push)
        return kvs__fail(e, KVS_ENOTSUP, "KVS_OPT_INIT_ON_PUSH is not supported by %s: "
                         "init every key with kvs_init", kv->type);
    return 0;
}

static void dist_close(kvs_t *kv, struct kvs__leftover *keep)
{
    struct kvs__client *c = kv->client;
    struct kvs__sqe req = { .op = KVS__OP_CLOSE };
    struct kvs__err e = { 0, "" };
    KVS__ONE_ANSWER(ans);

    if (!c)
        return;
    /* Leave the job cleanly, so that later rounds complete without us (kvsd
     * keeps copies of our pushes still in open rounds). A short deadline:
     * kvsd may be gone. */
    kvs__tr_flush();                   /* before leaving: kvsd merges once all left */
    pthread_mutex_lock(&c->lock);
    c->closing = 1;                    /* no reconnecting now */
    pthread_mutex_unlock(&c->lock);
    if (!c->broken)
        kvs__client_run_batch(kv, kvs__client_fill_from, &req, 1, 0, &ans, NULL, CLOSE_MS,
                              "kvs_close", &e);
    kvs__devbufs_free(c->devbufs);
    c->devbufs = NULL;
    if (keep) {                        /* buffers live in staging, views in arena or cb */
        void *maps[3] = { c->seg, (void *)c->arena, c->cb };
        size_t lens[3] = { c->seg_size, c->arena_size, c->cb_size };

        memcpy(keep->map, maps, sizeof maps);
        memcpy(keep->map_len, lens, sizeof lens);
        c->seg = c->cb = NULL;
        c->arena = NULL;
    }
    kvs__client_free(c);
    kv->client = NULL;
}
/* A collective like the barrier: kvsd answers once every worker asked
 * with the same step and the snapshot is made; the step is then the one
 * a restart resumes from. */
static int dist_commit(kvs_t *kv, int64_t step, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__sqe req = { .op = KVS__OP_COMMIT, .arg = (uint64_t)step };
    KVS__ONE_ANSWER(ans);
    int rc;

    if (step < 0)
        return kvs__fail(e, KVS_EBADARG, "kvs_commit: step %lld is negative", (long long)step);
    rc = kvs__client_run(kv, kvs__client_fill_from, &req, 1, 0, &ans, NULL, "kvs_commit", e);
    if (rc == 0) {
        pthread_mutex_lock(&c->lock);
        c->resume_step = step;
        pthread_mutex_unlock(&c->lock);
    }
    return rc;
}

static int dist_resume_step(kvs_t *kv, int64_t *step, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;

    (void)e;
    pthread_mutex_lock(&c->lock);
    *step = c->resume_step;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

const struct kvs__store_ops kvs__dist_ops = {
    .concurrent = 1,
    .open = kvs__client_open,
    .init = dist_init,
    .push = dist_push,
    .pull = dist_pull,
    .pushpull = dist_pushpull,
    .row_sparse_pull = dist_row_sparse_pull,
    .init_rows = dist_init_rows,
    .push_rows = kvs__client_push_rows,
    .pull_rows = kvs__client_pull_rows,
    .view = dist_view,
    .array_alloc = dist_array_alloc,
    .array_free = dist_array_free,
    .set_updater = dist_set_updater,
    .set_optimizer = dist_set_optimizer,
    .set_gradient_compression = dist_set_gradient_compression,
    .save_states = dist_save_states,
    .load_states = dist_load_states,
    .barrier = dist_barrier,
    .commit = dist_commit,
    .resume_step = dist_resume_step,
    .apply_options = dist_apply_options,
    .close = dist_close,
};
