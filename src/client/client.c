/*
 * client.c - the API calls of the dist store types, made of list calls on
 * the handle's link to kvsd (link.c): values summed into staging
 * (repeated keys summed here, as MXNet's workers merge their devices),
 * pushes of zero-copy buffers sent by offset, pulls copied straight out of
 * the read-only arena or handed out as pointers to it (views), and the
 * rest (optimizer, states, barrier, buffers). Arena ranges from kvsd are
 * checked against the arena's size before any use.
 *
 * Device arrays (KVS_CUDA(i)): kvsd reads an init's or a push's one
 * device array of a key from the worker's GPU memory through CUDA IPC
 * (dev.c), and writes a pull's first device out there, where it
 * can; else the value goes through staging or the arena, copied from or
 * onto its device here (mem.h).
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
#include "client/link.h"
#include "client/dev.h"
#include "client/combine.h"
#include "proto/combine.h"
#include "kernels/compress.h"
#include "proto/layout.h"
#include "device/mem.h"
#include "kernels/optim.h"
#include "proto/trace.h"

#define CLOSE_MS 2000                       /* for kvsd to take a CLOSE: it may be gone */

static void sqe_key(struct kvs__sqe *s, kvs_key_t key)
{
    if (key.name) {
        s->flags |= KVS__SQE_STRKEY;
        s->key_len = (uint16_t)strlen(key.name);
        memcpy(s->key_name, key.name, s->key_len + 1u);
    } else {
        s->key_id = key.id;
    }
}

static void sqe_array(struct kvs__sqe *s, const kvs_array_t *a)
{
    s->dtype = a->dtype;
    s->ndim = a->ndim;
    memcpy(s->shape, a->shape, sizeof s->shape[0] * (size_t)a->ndim);
}

/* ---- data calls ------------------------------------------------------- */

/* A grouped list: per group its first index and its members; per index its
 * group. */
struct groups {
    int n, ng;
    int *gid, *first;
    int *member, *mstart;              /* group g's indices: member[mstart[g]..mstart[g+1]) */
};

static void groups_free(struct groups *g)
{
    free(g->gid);
    free(g->member);
}

static int group(int n, const kvs_key_t *keys, struct groups *g, struct kvs__err *e)
{
    g->n = n;
    g->member = NULL;
    g->gid = malloc(sizeof(int) * 2 * (size_t)(n ? n : 1));
    if (!g->gid)
        return kvs__fail(e, -ENOMEM, "out of memory");
    g->first = g->gid + n;
    g->ng = kvs__group_keys(n, keys, g->gid, g->first, e);
    if (g->ng < 0) {
        free(g->gid);
        return g->ng;
    }
    /* Members by group, in list order (a counting sort): linear, where a
     * search per group would cost the square of the list's length. */
    g->member = malloc(sizeof(int) * ((size_t)n + (size_t)g->ng + 1));
    if (!g->member) {
        free(g->gid);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    g->mstart = g->member + n;
    memset(g->mstart, 0, sizeof(int) * ((size_t)g->ng + 1));
    for (int i = 0; i < n; i++)
        g->mstart[g->gid[i] + 1]++;
    for (int j = 0; j < g->ng; j++)
        g->mstart[j + 1] += g->mstart[j];
    {
        int *fill = g->gid + n;        /* reuse first[] as cursors, then restore it */

        for (int j = 0; j < g->ng; j++)
            fill[j] = g->mstart[j];
        for (int i = 0; i < n; i++)
            g->member[fill[g->gid[i]]++] = i;
        for (int j = 0; j < g->ng; j++)
            fill[j] = g->member[g->mstart[j]];
    }
    return 0;
}

/* Arrays of one key must agree with the key's first array. */
static int group_match(const struct groups *g, const kvs_key_t *keys, const kvs_array_t *arrs,
                       const char *what, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    for (int i = 0; i < g->n; i++) {
        const kvs_array_t *f = &arrs[g->first[g->gid[i]]];

        if (arrs[i].dtype != f->dtype || !kvs__same_shape(&arrs[i], f)) {
            kvs__key_str(ks, sizeof ks, keys[i]);
            return kvs__fail(e, arrs[i].dtype != f->dtype ? KVS_EDTYPE : KVS_ESHAPE,
                             "key %s: %s %d differs in dtype or shape from %s %d of the "
                             "same key", ks, what, i, what, g->first[g->gid[i]]);
        }
    }
    return 0;
}

static size_t array_bytes(const kvs_array_t *a)
{
    return kvs__array_count(a) * kvs_dtype_size(a->dtype);
}

/* The bytes a push of a sends: its 2bit words when coded. */
static size_t sent_bytes(const kvs_array_t *a, int coded)
{
    return coded ? 4 * kvs__gc_2bit_words(kvs__array_count(a)) : array_bytes(a);
}

/* 1 when the requests of groups [start, end) may go in tables: int keys,
 * no 2bit push (coded: per group its words, or NULL; may be NULL), no
 * device push (dev: per group its device buffer, or -1; may be NULL). */
static int tabular(const struct groups *g, const kvs_key_t *keys, uint32_t *const *coded,
                   const int *dev, int start, int end)
{
    for (int j = start; j < end; j++)
        if (keys[g->first[j]].name || (coded && coded[j]) || (dev && dev[j] >= 0))
            return 0;
    return 1;
}

/* What the requests of send_groups are made from. */
struct groups_src {
    uint8_t op, flags;
    int priority, start;               /* start: the batch's first group */
    const struct groups *g;
    const kvs_key_t *keys;
    const kvs_array_t *arrs;
    const uint64_t *at;                /* per group: its data's staging offset, or
                                        * its offset in device buffer dev[] */
    const int *dev;                    /* per group: kvsd reads it from this device
                                        * buffer (dev.c), or -1 */
    const unsigned char *remote;       /* per group: kvsd reads it out of this
                                        * process's memory, at[] its address */
    const uint32_t *const *coded;      /* per group: its 2bit words, or NULL */
    uint64_t threshold;                /* theirs, as a slot's arg */
};

static void fill_group(const void *ctx, int i, struct kvs__sqe *s)
{
    const struct groups_src *src = ctx;
    int j = src->start + i, coded = src->coded[j] != NULL;
    const kvs_array_t *a = &src->arrs[src->g->first[j]];

    *s = (struct kvs__sqe){ .op = src->op, .flags = src->flags, .priority = src->priority,
                            .data_off = src->at[j], .data_len = sent_bytes(a, coded) };
    if (coded) {
        s->flags |= KVS__SQE_2BIT;
        s->arg = src->threshold;
    } else if (src->dev[j] >= 0) {
        s->flags |= KVS__SQE_DEVICE;
        s->arg = (uint64_t)src->dev[j];
    } else if (src->remote[j]) {
        s->flags |= KVS__SQE_REMOTE;
    }
    sqe_key(s, src->keys[src->g->first[j]]);
    sqe_array(s, a);
}

/* What a push of 2bit compression sends of each float32 group: the sum
 * of its arrays quantized with this worker's residual of the key, in
 * coded[j] (malloc'd), the residual it makes in next[j]. */
static int code_groups(kvs_t *kv, const struct groups *g, const kvs_key_t *keys,
                       const kvs_array_t *arrs, const void **in, float threshold,
                       uint32_t **coded, float **next, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__opts o;
    int rc = 0;

    kvs__opts_get(kv, &o);
    for (int j = 0; j < g->ng && rc == 0; j++) {
        const kvs_array_t *a = &arrs[g->first[j]];
        size_t n = kvs__array_count(a);
        int k = g->mstart[j + 1] - g->mstart[j];
        float *sum = NULL;

        if (a->dtype != KVS_FLOAT32)
            continue;
        if (!(coded[j] = malloc(4 * (kvs__gc_2bit_words(n) + 1)))
            || (k > 1 && !(sum = malloc((n ? n : 1) * sizeof *sum)))) {
            rc = kvs__fail(e, -ENOMEM, "out of memory");
            break;
        }
        if (sum)
            kvs__sum(KVS_FLOAT32, sum, in + g->mstart[j], k, n, (int)o.threads);
        rc = kvs__residual_quantize(c->residuals, keys[g->first[j]],
                                    sum ? sum : (const float *)in[g->mstart[j]], n, threshold,
                                    coded[j], &next[j], e);
        free(sum);
    }
    return rc;
}

/* Host copies of the device arrays of a list whose values are summed or
 * coded here: held[i] for member i of g (NULL for host arrays, and for a
 * group of one device array that is not coded, which is copied straight
 * into staging), its address put in in[i]. */
static int hold_device(const struct groups *g, const kvs_array_t *arrs, int coding,
                       const void **in, void **held, struct kvs__err *e)
{
    for (int j = 0; j < g->ng; j++) {
        const kvs_array_t *f = &arrs[g->first[j]];
        int k = g->mstart[j + 1] - g->mstart[j];

        if (k == 1 && !(coding && f->dtype == KVS_FLOAT32))
            continue;
        for (int m = g->mstart[j]; m < g->mstart[j + 1]; m++) {
            const kvs_array_t *a = &arrs[g->member[m]];
            size_t bytes = array_bytes(a);
            int rc;

            if (a->device == KVS_HOST)
                continue;
            if (!(held[m] = malloc(bytes ? bytes : 1)))
                return kvs__fail(e, -ENOMEM, "out of memory");
            if ((rc = kvs__mem_copy(held[m], KVS_HOST, a->data, a->device, bytes, 1, e)) != 0)
                return rc;
            in[m] = held[m];
        }
    }
    return 0;
}

/* The values kvsd reads from device memory itself (inits, pushes: per
 * group of one device array, not coded) or writes there (pulls: into a
 * group's first out on a device): per such group, its device buffer in
 * dev[j] (-1: none) and its offset there in at[j]; then waits until the
 * caller's work on those devices is done, so that kvsd reads what the
 * caller wrote, and writes over what the caller no longer reads. coded:
 * per group its 2bit words or NULL; NULL for a pull. */
static int share_device(kvs_t *kv, const struct groups *g, const kvs_array_t *arrs, int pull,
                        uint32_t *const *coded, uint64_t *at, int *dev, struct kvs__err *e)
{
    uint64_t fenced = 0;               /* bit i: KVS_CUDA(i) (i < KVS__MAX_DEVICES) */
    int rc = 0;

    for (int j = 0; j < g->ng && rc == 0; j++) {
        const kvs_array_t *a = &arrs[g->first[j]];
        uint64_t bit;

        if ((!pull && (g->mstart[j + 1] - g->mstart[j] != 1 || coded[j]))
            || a->device == KVS_HOST)
            continue;
        rc = kvs__client_devbuf(kv, a->data, a->device, array_bytes(a), &dev[j], &at[j], e);
        if (rc == 1) {                 /* memory of a device the provider knows: < 64 */
            bit = (uint64_t)1 << (a->device - 1);
            rc = fenced & bit ? 0 : kvs__mem_fence(a->device, e);
            fenced |= bit;
        }
    }
    if (rc == 0 && fenced)
        rc = kvs__mem_finish(e);
    return rc;
}

/* kvsd reads arrays out of this process's memory only when a call lends
 * it at least REMOTE_CALL_MIN bytes so, in arrays of REMOTE_MIN or more.
 * Measured (bench/NOTES.md): below that kvsd reads on one thread, a system
 * call per block, while the workers' copies into staging run on all cores
 * at once; the round then took longer than with copies. */
#define REMOTE_MIN ((size_t)64 << 10)
#define REMOTE_CALL_MIN ((size_t)4 << 20)

/* 1 when kvsd may read group j's array (a, as sent: not coded) out of
 * this process's memory: a pushpull's (its call waits until kvsd has read
 * it: the array stays the caller's), its only array, ordinary host memory
 * (not a zero-copy buffer), big enough, and kvsd able to (c->remote). */
static int lendable(const struct kvs__client *c, const struct groups *g, int j,
                    const kvs_array_t *a, uint8_t flags, int coded)
{
    uintptr_t p = (uintptr_t)a->data, s = (uintptr_t)c->staging;

    return c->remote && (flags & KVS__SQE_VALUE) && !coded && a->device == KVS_HOST
           && g->mstart[j + 1] - g->mstart[j] == 1 && array_bytes(a) >= REMOTE_MIN
           && (p < s || p - s >= c->staging_size);
}

/* Marks in remote[] the groups whose arrays kvsd reads out of this
 * process's memory (their at[] their addresses), when the call lends
 * enough of them. */
static void lend_memory(const struct kvs__client *c, const struct groups *g,
                        const kvs_array_t *arrs, uint8_t flags, uint32_t *const *coded,
                        unsigned char *remote, uint64_t *at)
{
    size_t total = 0;

    for (int j = 0; j < g->ng; j++)
        if (lendable(c, g, j, &arrs[g->first[j]], flags, coded[j] != NULL))
            total += array_bytes(&arrs[g->first[j]]);
    if (total < REMOTE_CALL_MIN)
        return;
    for (int j = 0; j < g->ng; j++) {
        const kvs_array_t *a = &arrs[g->first[j]];

        if ((remote[j] = (unsigned char)lendable(c, g, j, a, flags, coded[j] != NULL)))
            at[j] = (uint64_t)(uintptr_t)a->data;
    }
}

/* Sends one request per group, each with its data in staging: a buffer's
 * as it lies, else what kvs__sum makes of the group's arrays (summing
 * repeated keys here, as MXNet's workers merge their devices before
 * sending) in a transient range, or under 2bit compression a float32
 * push's words; a group of one device array is read by kvsd from its
 * device where it can (share_device), else copied into staging from its
 * device. Groups go in batches that fit the transient part and
 * KVS__LIST_MAX; each batch is all-or-nothing in kvsd, and the residuals
 * of its coded pushes change only when kvsd took it. out: the answers, per
 * group (may be NULL; its array has room for every group). */
static int send_groups(kvs_t *kv, uint8_t op, uint8_t flags, const struct groups *g,
                       const kvs_key_t *keys, const kvs_array_t *arrs, int priority,
                       struct kvs__answers *out, const char *what, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    size_t ng = (size_t)(g->ng ? g->ng : 1);
    struct kvs__answer *own = out ? NULL : malloc(ng * sizeof *own);
    struct kvs__answers ans = { .a = out ? out->a : own, .failed = -1 };
    uint64_t *at = malloc(ng * sizeof *at);     /* per group: staging offset; ~0: to place */
    int *dev = malloc(ng * sizeof *dev);        /* per group: device buffer, or -1 */
    const void **in = malloc(sizeof *in * (size_t)(g->n ? g->n : 1));
    struct kvs__sum_item *items = malloc(ng * sizeof *items);
    uint32_t **coded = calloc(ng, sizeof *coded);
    float **next = calloc(ng, sizeof *next);
    void **held = calloc((size_t)(g->n ? g->n : 1), sizeof *held);
    unsigned char *remote = calloc(ng, 1);
    struct groups_src src = { .op = op, .flags = flags, .priority = priority, .g = g,
                              .keys = keys, .arrs = arrs, .at = at, .dev = dev,
                              .remote = remote, .coded = (const uint32_t *const *)coded };
    struct kvs__opts o;
    struct kvs__gc gc;
    uint64_t room;
    int rc = 0, start = 0, coding;

    kvs__opts_get(kv, &o);
    if (!ans.a || !at || !dev || !in || !items || !coded || !next || !held || !remote) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t j = 0; j < ng; j++)
        dev[j] = -1;
    for (int i = 0; i < g->n; i++)
        in[i] = arrs[g->member[i]].data;
    pthread_mutex_lock(&c->lock);
    gc = c->gc;
    pthread_mutex_unlock(&c->lock);
    src.threshold = kvs__threshold_arg(gc.threshold);
    coding = op == KVS__OP_PUSH && gc.type == KVS__GC_2BIT;
    if ((rc = hold_device(g, arrs, coding, in, held, e)) != 0
        || (coding && (rc = code_groups(kv, g, keys, arrs, in, gc.threshold, coded, next,
                                        e)) != 0)
        || (rc = share_device(kv, g, arrs, 0, coded, at, dev, e)) != 0)
        goto out;
    pthread_mutex_lock(&c->lock);
    room = kvs__client_transient(c);
    for (int j = 0; j < g->ng; j++)
        if (dev[j] < 0)
            at[j] = ~(uint64_t)0;
    lend_memory(c, g, arrs, flags, coded, remote, at);
    for (int j = 0; j < g->ng && rc == 0; j++) {
        const kvs_array_t *a = &arrs[g->first[j]];
        uint64_t bytes = sent_bytes(a, coded[j] != NULL);
        int zc = 0;

        if (dev[j] >= 0 || remote[j])
            continue;
        if (g->mstart[j + 1] - g->mstart[j] == 1 && !coded[j] && a->device == KVS_HOST
            && (zc = kvs__client_in_buffer(c, a->data, bytes, &at[j], e)) < 0) {
            rc = zc;
        } else if (!zc && bytes > room) {
            char ks[KVS_MAX_KEY_LEN + 8];

            kvs__key_str(ks, sizeof ks, keys[g->first[j]]);
            rc = kvs__fail(e, KVS_EBADARG, "key %s: %llu bytes do not fit the %llu bytes "
                           "below the lowest buffer in the %llu-byte staging area "
                           "(kvsrun --staging sets its size)", ks, (unsigned long long)bytes,
                           (unsigned long long)room, (unsigned long long)c->staging_size);
        }
    }
    pthread_mutex_unlock(&c->lock);
    while (rc == 0 && start < g->ng) {
        uint64_t total = 0, off = 0, pos = 0;
        struct kvs__answers part = { .a = ans.a + start, .failed = -1 };
        struct kvs__hold *h;
        int end = start, m = 0, zc = 0;
        int64_t t;

        for (; end < g->ng && end - start < KVS__LIST_MAX; end++) {
            uint64_t bytes = at[end] == ~(uint64_t)0
                                 ? (sent_bytes(&arrs[g->first[end]], coded[end] != NULL) + 63)
                                       & ~(uint64_t)63 : 0;

            if (total + bytes > room)
                break;
            total += bytes;
        }
        if (!(h = calloc(1, sizeof *h)) || !(h->returned = calloc((size_t)(end - start), 1))) {
            free(h);
            rc = kvs__fail(e, -ENOMEM, "out of memory");
            break;
        }
        if (total && (rc = kvs__client_xfer_take(kv, total, &off, what, e)) != 0) {
            free(h->returned);
            free(h);
            break;
        }
        h->off = off;
        h->len = total;
        t = kvs__tr_begin();
        for (int j = start; j < end && rc == 0; j++) {
            const kvs_array_t *a = &arrs[g->first[j]];
            uint64_t bytes = sent_bytes(a, coded[j] != NULL);

            if (dev[j] >= 0 || remote[j])
                continue;
            if (at[j] != ~(uint64_t)0) {
                zc = 1;
                continue;
            }
            at[j] = off + pos;
            pos += (bytes + 63) & ~(uint64_t)63;
            if (coded[j])
                memcpy(c->staging + at[j], coded[j], bytes);
            else if (a->device != KVS_HOST && !held[g->mstart[j]])   /* the group's only array */
                rc = kvs__mem_copy(c->staging + at[j], KVS_HOST, a->data, a->device, bytes,
                                   (int)o.threads, e);
            else
                items[m++] = (struct kvs__sum_item){
                    .dtype = a->dtype, .out = c->staging + at[j],
                    .in = in + g->mstart[j], .k = g->mstart[j + 1] - g->mstart[j],
                    .n = kvs__array_count(a) };
        }
        if (rc != 0) {
            pthread_mutex_lock(&c->lock);
            kvs__client_hold_free(c, h);
            pthread_mutex_unlock(&c->lock);
            break;
        }
        h->zc = zc;
        /* The range is this call's alone: filled without the lock. */
        kvs__sum_many(items, m, (int)o.threads);
        if (t && total) {
            struct kvs__tr_args ta = KVS__TR_ARGS;

            ta.key = keys[g->first[start]];
            ta.has_key = 1;
            ta.nkeys = end - start;
            ta.bytes = total;
            kvs__tr_put(KVS__TR_COPY_IN, t, 0, &ta, 0, NULL);
        }
        src.start = start;
        if ((rc = kvs__client_run(kv, fill_group, &src, end - start,
                                  tabular(g, keys, coded, dev, start, end),
                                  &part, h, what, e)) != 0)
            break;
        for (int j = start; j < end; j++)
            if (next[j]) {
                kvs__residual_commit(c->residuals, keys[g->first[j]], next[j]);
                next[j] = NULL;
            }
        start = end;
    }
out:
    for (size_t j = 0; coded && next && j < (size_t)g->ng; j++) {
        free(coded[j]);
        free(next[j]);
    }
    for (int i = 0; held && i < g->n; i++)
        free(held[i]);
    for (int j = 0; dev && j < g->ng; j++)
        if (dev[j] >= 0)
            kvs__client_devbuf_unpin(c, dev[j]);
    free(dev);
    free(remote);
    free(held);
    free(next);
    free(coded);
    free(items);
    free(in);
    free(at);
    free(own);
    return rc;
}

static int dist_init(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int replace, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct groups g;
    int rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0)
        return rc;
    if (replace)
        return kvs__fail(e, KVS_ENOTSUP, "kvs_reinit is not supported by %s yet", kv->type);
    if ((rc = group(n, keys, &g, e)) != 0)
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
        rc = send_groups(kv, KVS__OP_INIT, 0, &g, keys, values, 0, NULL, "kvs_init", e);
    }
    groups_free(&g);
    return rc;
}

static int dist_push_kd(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                        int priority, struct kvs__err *e)
{
    struct groups g;
    int rc;

    if ((rc = kvs__client_usable(kv->client, e)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", e)) != 0)
        return rc;
    if ((rc = group(n, keys, &g, e)) != 0)
        return rc;
    if ((rc = group_match(&g, keys, values, "value", e)) == 0)
        rc = send_groups(kv, KVS__OP_PUSH, 0, &g, keys, values, priority, NULL, "kvs_push", e);
    groups_free(&g);
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
        bytes += (values ? array_bytes(&values[i]) : 0) + (outs ? array_bytes(&outs[i]) : 0);
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

/* The block of a value a completion points to, once its range is checked
 * against the arena and the size the caller expects. */
static int value_block(struct kvs__client *c, const struct kvs__answer *q, size_t bytes,
                       const struct kvs__block_head **bh, struct kvs__err *e)
{
    if (q->value_len != bytes || q->value_off < KVS__ARENA_DATA_OFF + sizeof **bh
        || (q->value_off & 63) != 0) {
        pthread_mutex_lock(&c->lock);
        kvs__client_broken(c, e, KVS_EPROTO, "kvsd answered a pull with a bad arena range");
        pthread_mutex_unlock(&c->lock);
        return KVS_EPROTO;
    }
    *bh = (const struct kvs__block_head *)(c->arena + q->value_off - sizeof **bh);
    return 0;
}

/* Copies a value out of the arena into dst on device, retrying while kvsd
 * rewrites it (kvs__mem_write_out says how). */
static int copy_value(kvs_t *kv, const struct kvs__answer *q, void *dst, int device,
                      size_t bytes, const int64_t *rows, int64_t nrows, size_t row_bytes,
                      struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    const struct kvs__block_head *bh;
    struct kvs__opts o;
    int64_t deadline;
    int rc;

    kvs__opts_get(kv, &o);
    deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    if ((rc = value_block(c, q, bytes, &bh, e)) != 0)
        return rc;
    for (;;) {
        uint64_t s1 = atomic_load_explicit(&bh->seq, memory_order_acquire), s2;

        if ((s1 & 1) == 0) {
            if ((rc = kvs__mem_write_out(dst, device, c->arena + q->value_off, bytes, rows,
                                         nrows, row_bytes, (int)o.threads, e)) != 0)
                return rc;
            atomic_thread_fence(memory_order_acquire);
            s2 = atomic_load_explicit(&bh->seq, memory_order_relaxed);
            if (s1 == s2)
                return 0;
        }
        if (kvs__now_ns() >= deadline) {
            pthread_mutex_lock(&c->lock);
            rc = kvs__client_broken(c, e, KVS_ETIMEDOUT, "a value stayed busy in kvsd past the "
                                    "deadline");
            pthread_mutex_unlock(&c->lock);
            return rc;
        }
    }
}

/* Hands out the value of a completion: a view of it in the arena (dist_sync
 * only: kvsd rewrites it in the next round, which needs this worker's push),
 * else a copy into out's data. */
static int deliver(kvs_t *kv, const struct kvs__answer *q, kvs_array_t *out, int view,
                   struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    size_t bytes = array_bytes(out);
    const struct kvs__block_head *bh;
    int rc;

    if (!view)
        return copy_value(kv, q, out->data, out->device, bytes, NULL, 0, 0, e);
    if ((rc = value_block(c, q, bytes, &bh, e)) != 0)
        return rc;
    if (atomic_load_explicit(&bh->seq, memory_order_acquire) & 1) {
        pthread_mutex_lock(&c->lock);
        rc = kvs__client_broken(c, e, KVS_EPROTO, "kvsd answered a pull with a value it is "
                                "still writing");
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    out->data = (void *)(c->arena + q->value_off);
    return 0;
}

/* What the requests of pull_groups are made from. */
struct pull_src {
    int priority, start;
    const struct groups *g;
    const kvs_key_t *keys;
    const kvs_array_t *outs;
    const int *dev;                    /* per group: kvsd writes its first out, at at[],
                                        * in this device buffer (share_device), or -1 */
    const uint64_t *at;
};

static void fill_pull(const void *ctx, int i, struct kvs__sqe *s)
{
    const struct pull_src *src = ctx;
    int j = src->start + i;
    const kvs_array_t *a = &src->outs[src->g->first[j]];

    *s = (struct kvs__sqe){ .op = KVS__OP_PULL, .priority = src->priority };
    if (src->dev[j] >= 0) {
        s->flags |= KVS__SQE_DEVICE;
        s->arg = (uint64_t)src->dev[j];
        s->data_off = src->at[j];
        s->data_len = array_bytes(a);
    }
    sqe_key(s, src->keys[src->g->first[j]]);
    sqe_array(s, a);
}

/* Out i of a device pull's group (kvsd wrote the group's first out): a
 * copy of the first, unless it is the first. Queued onto a device. */
static int deliver_copy(const struct groups *g, kvs_array_t *outs, int i, struct kvs__err *e)
{
    const kvs_array_t *f = &outs[g->first[g->gid[i]]];

    if (f == &outs[i])
        return 0;
    return kvs__mem_copy(outs[i].data, outs[i].device, f->data, f->device, array_bytes(f), 1, e);
}

/* Pulls every group's value; outs of a key all receive it. rows (may be
 * NULL): per out, the row ids to copy, others zeroed. view: outs get
 * pointers to the values (rows NULL). Otherwise kvsd writes a group's
 * first out itself where it lies on a device kvsd can reach
 * (share_device); the group's other outs are copied from it. */
static int pull_kd(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                   kvs_array_t *outs, const kvs_array_t *rows, int view, int priority,
                   const char *what, struct kvs__err *e)
{
    struct pull_src src = { .priority = priority, .keys = keys, .outs = outs };
    (void)values;
    struct kvs__answer *a = NULL;
    uint64_t *at = NULL;
    int *dev = NULL, copied = 0;
    struct groups g;
    int64_t t;
    int rc;

    if ((rc = group(n, keys, &g, e)) != 0)
        return rc;
    src.g = &g;
    if ((rc = group_match(&g, keys, outs, view ? "view" : "out", e)) != 0)
        goto out;
    if (!(a = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *a))
        || !(dev = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *dev))
        || !(at = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *at))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    for (int j = 0; j < g.ng; j++)
        dev[j] = -1;
    if (!view && !rows && (rc = share_device(kv, &g, outs, 1, NULL, at, dev, e)) != 0)
        goto out;
    src.dev = dev;
    src.at = at;
    for (int start = 0; start < g.ng && rc == 0; start += KVS__LIST_MAX) {
        int len = g.ng - start < KVS__LIST_MAX ? g.ng - start : KVS__LIST_MAX;
        struct kvs__answers part = { .a = a + start, .failed = -1 };

        src.start = start;
        rc = kvs__client_run(kv, fill_pull, &src, len,
                             tabular(&g, keys, NULL, dev, start, start + len), &part, NULL,
                             what, e);
    }
    t = kvs__tr_begin();
    for (int i = 0; i < n && rc == 0; i++) {
        size_t bytes = array_bytes(&outs[i]);

        if (dev[g.gid[i]] >= 0) {
            rc = deliver_copy(&g, outs, i, e);
            copied = 1;
        } else if (!rows) {
            rc = deliver(kv, &a[g.gid[i]], &outs[i], view, e);
        } else {    /* the ids' data may be NULL when there are none: then no row */
            rc = copy_value(kv, &a[g.gid[i]], outs[i].data, outs[i].device, bytes,
                            rows[i].data ? rows[i].data : (const int64_t *)"", rows[i].shape[0],
                            outs[i].shape[0] ? bytes / (size_t)outs[i].shape[0] : 0, e);
        }
    }
    if (copied && rc == 0)
        rc = kvs__mem_finish(e);
    else if (copied)
        kvs__mem_finish(NULL);
    if (!view)
        kvs__tr_list(KVS__TR_COPY_OUT, t, n, keys, outs);
out:
    for (int j = 0; dev && j < g.ng; j++)
        if (dev[j] >= 0)
            kvs__client_devbuf_unpin(kv->client, dev[j]);
    free(at);
    free(dev);
    free(a);
    groups_free(&g);
    return rc;
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
        return pull_kd(kv, n, keys, NULL, outs, rows, view, priority, what, e);
    return kvs__client_split_run(kv, &sp, outs, pull_kd, view, priority, what, e);
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
    struct groups g;
    int64_t t;
    int rc;

    (void)rows;
    if ((rc = group(n, keys, &g, e)) != 0)
        return rc;
    if ((rc = group_match(&g, keys, values, "value", e)) != 0)
        goto out;
    if (!(ans.a = malloc((size_t)(g.ng ? g.ng : 1) * sizeof *ans.a))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = send_groups(kv, KVS__OP_PUSH, KVS__SQE_VALUE, &g, keys, values, priority, &ans,
                          what_call, e)) != 0)
        goto out;
    t = kvs__tr_begin();
    for (int i = 0; i < n && rc == 0; i++)
        rc = deliver(kv, &ans.a[g.gid[i]], &dst[i], view, e);
    if (!view)
        kvs__tr_list(KVS__TR_COPY_OUT, t, n, keys, dst);
out:
    free(ans.a);
    groups_free(&g);
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

static void dist_close(kvs_t *kv)
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
    if (!c->broken)
        kvs__client_run_batch(kv, kvs__client_fill_from, &req, 1, 0, &ans, NULL, CLOSE_MS,
                              "kvs_close", &e);
    kvs__devbufs_free(c->devbufs);
    c->devbufs = NULL;
    kvs__client_free(c);
    kv->client = NULL;
}

const struct kvs__store_ops kvs__dist_ops = {
    .concurrent = 1,
    .open = kvs__client_open,
    .init = dist_init,
    .push = dist_push,
    .pull = dist_pull,
    .pushpull = dist_pushpull,
    .row_sparse_pull = dist_row_sparse_pull,
    .view = dist_view,
    .array_alloc = dist_array_alloc,
    .array_free = dist_array_free,
    .set_updater = dist_set_updater,
    .set_optimizer = dist_set_optimizer,
    .set_gradient_compression = dist_set_gradient_compression,
    .save_states = dist_save_states,
    .load_states = dist_load_states,
    .barrier = dist_barrier,
    .apply_options = dist_apply_options,
    .close = dist_close,
};
