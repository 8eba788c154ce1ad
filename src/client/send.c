/*
 * send.c - what a list call sends kvsd: one request per key, its data in
 * staging. A zero-copy buffer's value is sent as it lies, the arrays of a
 * repeated key are summed here (as MXNet's workers merge their devices),
 * a float32 push under 2bit compression is quantized with this worker's
 * residual, a single device array is read by kvsd from the device where
 * it can (dev.c), a big pushpull's host arrays out of this process's
 * memory; the rest is copied into a transient range of staging.
 *
 * Owns the staging of one call from the range it takes to the hold it
 * hands the link (call.c). It must never wait for kvsd itself: posting
 * and waiting are the link's, and a batch is all-or-nothing in kvsd.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "kernels/compress.h"
#include "device/mem.h"
#include "proto/trace.h"
#include "client/groups.h"
#include "client/link.h"
#include "client/dev.h"
#include "client/send.h"

/* The bytes a push of a sends: its 2bit words when coded. */
static size_t sent_bytes(const kvs_array_t *a, int coded)
{
    return coded ? 4 * kvs__gc_2bit_words(kvs__array_count(a)) : kvs__client_array_bytes(a);
}


/* What the requests of kvs__client_send_groups are made from. */
struct groups_src {
    uint8_t op, flags;
    int priority, start;               /* start: the batch's first group */
    const struct kvs__groups *g;
    const kvs_key_t *keys;
    const kvs_array_t *arrs;
    const uint64_t *at;                /* per group: its data's staging offset, or
                                        * its offset in device buffer dev[] */
    const int *dev;                    /* per group: kvsd reads it from this device
                                        * buffer (dev.c), or -1 */
    const unsigned char *remote;       /* per group: kvsd reads it out of this
                                        * process's memory, at[] its address */
    const uint64_t *out;               /* per group: the address of its out kvsd may
                                        * write (a remote push's), or 0 */
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
        s->arg = src->out[j];          /* dropped if the call goes in tables */
    }
    kvs__client_sqe_key(s, src->keys[src->g->first[j]]);
    kvs__client_sqe_array(s, a);
}

/* What a push of 2bit compression sends of each float32 group: the sum
 * of its arrays quantized with this worker's residual of the key, in
 * coded[j] (malloc'd), the residual it makes in next[j]. */
static int code_groups(kvs_t *kv, const struct kvs__groups *g, const kvs_key_t *keys,
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
static int hold_device(const struct kvs__groups *g, const kvs_array_t *arrs, int coding,
                       const void **in, void **held, struct kvs__err *e)
{
    for (int j = 0; j < g->ng; j++) {
        const kvs_array_t *f = &arrs[g->first[j]];
        int k = g->mstart[j + 1] - g->mstart[j];

        if (k == 1 && !(coding && f->dtype == KVS_FLOAT32))
            continue;
        for (int m = g->mstart[j]; m < g->mstart[j + 1]; m++) {
            const kvs_array_t *a = &arrs[g->member[m]];
            size_t bytes = kvs__client_array_bytes(a);
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

/* kvsd reads arrays out of this process's memory only when a call lends
 * it at least c->remote_min bytes so (KVS_REMOTE_MIN, 4 MiB by default),
 * in arrays of REMOTE_MIN or more. Measured (bench/NOTES.md): below that
 * kvsd reads on one thread, a system call per block, while the workers'
 * copies into staging run on all cores at once; the round then took
 * longer than with copies. */
#define REMOTE_MIN ((size_t)64 << 10)

/* 1 when kvsd may read group j's array (a, as sent: not coded) out of
 * this process's memory: a pushpull's (its call waits until kvsd has read
 * it: the array stays the caller's), its only array, ordinary host memory
 * (not a zero-copy buffer), big enough, and kvsd able to (c->remote). */
static int lendable(const struct kvs__client *c, const struct kvs__groups *g, int j,
                    const kvs_array_t *a, uint8_t flags, int coded)
{
    uintptr_t p = (uintptr_t)a->data, s = (uintptr_t)c->staging;

    return c->remote && (flags & KVS__SQE_VALUE) && !coded && a->device == KVS_HOST
           && g->mstart[j + 1] - g->mstart[j] == 1 && kvs__client_array_bytes(a) >= REMOTE_MIN
           && (p < s || p - s >= c->staging_size);
}

/* A range of memory a call lends kvsd: an array it reads, or an out it
 * may write. */
struct span {
    uintptr_t lo, hi;
};

static int span_cmp(const void *x, const void *y)
{
    const struct span *a = x, *b = y;

    return a->lo != b->lo ? (a->lo > b->lo) - (a->lo < b->lo) : (a->hi > b->hi) - (a->hi < b->hi);
}

/* 1 when no two of the call's lent ranges (the remote groups' arrays and
 * outs) overlap, but for an out that is its own group's array (in place):
 * kvsd writes a key's out as that key's round closes, which may come
 * before another key's round reads an array there (the copies out, after
 * every answer, never could). 0 as well without memory to check. */
static int apart(const struct kvs__groups *g, const kvs_array_t *arrs, const kvs_array_t *outs,
                 const unsigned char *remote, const uint64_t *out)
{
    struct span *sp = malloc(sizeof *sp * 2 * (size_t)(g->ng ? g->ng : 1));
    size_t n = 0;
    int ok = sp != NULL;

    for (int j = 0; ok && j < g->ng; j++) {
        uintptr_t a = (uintptr_t)arrs[g->first[j]].data;
        size_t bytes = kvs__client_array_bytes(&arrs[g->first[j]]);

        if (!remote[j])
            continue;
        sp[n++] = (struct span){ a, a + bytes };
        if (out[j] && out[j] != a)
            sp[n++] = (struct span){ out[j], out[j] + kvs__client_array_bytes(&outs[g->first[j]]) };
    }
    if (ok)
        qsort(sp, n, sizeof *sp, span_cmp);
    for (size_t i = 1; ok && i < n; i++)
        ok = sp[i].lo >= sp[i - 1].hi;
    free(sp);
    return ok;
}

/* Marks in remote[] the groups whose arrays kvsd reads out of this
 * process's memory (their at[] their addresses), when the call lends
 * enough of them; with outs, out[] gets the address of each such group's
 * out, when kvsd may write it: ordinary host memory outside staging, as
 * its array is, and no lent range overlapping another (apart). Returns
 * how many outs it lends. */
static int lend_memory(const struct kvs__client *c, const struct kvs__groups *g,
                       const kvs_array_t *arrs, const kvs_array_t *outs, uint8_t flags,
                       uint32_t *const *coded, unsigned char *remote, uint64_t *at,
                       uint64_t *out)
{
    size_t total = 0;
    int n = 0;

    for (int j = 0; j < g->ng; j++)
        if (lendable(c, g, j, &arrs[g->first[j]], flags, coded[j] != NULL))
            total += kvs__client_array_bytes(&arrs[g->first[j]]);
    if (total < c->remote_min)
        return 0;
    for (int j = 0; j < g->ng; j++) {
        const kvs_array_t *a = &arrs[g->first[j]];

        if ((remote[j] = (unsigned char)lendable(c, g, j, a, flags, coded[j] != NULL)))
            at[j] = (uint64_t)(uintptr_t)a->data;
        if (remote[j] && outs && lendable(c, g, j, &outs[g->first[j]], flags, 0)) {
            out[j] = (uint64_t)(uintptr_t)outs[g->first[j]].data;
            n++;
        }
    }
    if (n && !apart(g, arrs, outs, remote, out)) {
        memset(out, 0, sizeof *out * (size_t)g->ng);
        n = 0;
    }
    return n;
}

/* One kvs__client_send_groups as it goes: per group where its data lies
 * and what is sent of it, per member its input. */
struct send {
    kvs_t *kv;
    const struct kvs__groups *g;
    const kvs_key_t *keys;
    const kvs_array_t *arrs;
    const kvs_array_t *outs;           /* the call's outs kvsd may write, or NULL */
    const char *what;
    int threads;
    struct kvs__answer *own;           /* the answers, when the caller keeps none */
    struct kvs__answers ans;
    uint64_t *at;                      /* per group: staging offset; ~0: to place */
    int *dev;                          /* per group: device buffer, or -1 */
    const void **in;                   /* per member: its data, or its host copy */
    struct kvs__sum_item *items;
    uint32_t **coded;                  /* per group: its 2bit words, or NULL */
    float **next;                      /* per group: the residual its push makes */
    void **held;                       /* per member: its host copy, or NULL */
    unsigned char *remote;             /* per group: kvsd reads it out of this process */
    uint64_t *out;                     /* per group: its out kvsd may write, or 0 */
    int outs_lent;                     /* how many; counted in c->outs_lent */
    uint64_t room;                     /* the transient part of staging */
    uint64_t gen;                      /* the link's generation the call began in */
    struct groups_src src;
};

static int send_open(struct send *sd, kvs_t *kv, uint8_t op, uint8_t flags,
                     const struct kvs__groups *g, const kvs_key_t *keys,
                     const kvs_array_t *arrs, const kvs_array_t *outs, int priority,
                     struct kvs__answers *out, const char *what, struct kvs__err *e)
{
    size_t ng = (size_t)(g->ng ? g->ng : 1), n = (size_t)(g->n ? g->n : 1);
    struct kvs__opts o;

    kvs__opts_get(kv, &o);
    *sd = (struct send){ .kv = kv, .g = g, .keys = keys, .arrs = arrs, .outs = outs,
                         .what = what, .threads = (int)o.threads,
                         .gen = kvs__client_gen(kv->client) };
    sd->own = out ? NULL : malloc(ng * sizeof *sd->own);
    sd->ans = (struct kvs__answers){ .a = out ? out->a : sd->own, .failed = -1 };
    sd->at = malloc(ng * sizeof *sd->at);
    sd->dev = malloc(ng * sizeof *sd->dev);
    sd->in = malloc(sizeof *sd->in * n);
    sd->items = malloc(ng * sizeof *sd->items);
    sd->coded = calloc(ng, sizeof *sd->coded);
    sd->next = calloc(ng, sizeof *sd->next);
    sd->held = calloc(n, sizeof *sd->held);
    sd->remote = calloc(ng, 1);
    sd->out = calloc(ng, sizeof *sd->out);
    sd->src = (struct groups_src){ .op = op, .flags = flags, .priority = priority, .g = g,
                                   .keys = keys, .arrs = arrs, .at = sd->at, .dev = sd->dev,
                                   .remote = sd->remote, .out = sd->out,
                                   .coded = (const uint32_t *const *)sd->coded };
    for (size_t j = 0; sd->dev && j < ng; j++)
        sd->dev[j] = -1;
    if (!sd->ans.a || !sd->at || !sd->dev || !sd->in || !sd->items || !sd->coded || !sd->next
        || !sd->held || !sd->remote || !sd->out)
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (int i = 0; i < g->n; i++)
        sd->in[i] = arrs[g->member[i]].data;
    return 0;
}

static void send_close(struct send *sd)
{
    const struct kvs__groups *g = sd->g;

    for (size_t j = 0; sd->coded && sd->next && j < (size_t)g->ng; j++) {
        free(sd->coded[j]);
        free(sd->next[j]);
    }
    for (int i = 0; sd->held && i < g->n; i++)
        free(sd->held[i]);
    for (int j = 0; sd->dev && j < g->ng; j++)
        if (sd->dev[j] >= 0)
            kvs__client_devbuf_unpin(sd->kv->client, sd->dev[j]);
    free(sd->dev);
    free(sd->remote);
    free(sd->out);
    free(sd->held);
    free(sd->next);
    free(sd->coded);
    free(sd->items);
    free(sd->in);
    free(sd->at);
    free(sd->own);
}

/* What is sent of each group before any staging is taken: host copies of
 * device arrays summed or coded here, 2bit words under compression, and
 * the device buffers kvsd reads itself. */
static int send_inputs(struct send *sd, struct kvs__err *e)
{
    struct kvs__client *c = sd->kv->client;
    const struct kvs__groups *g = sd->g;
    struct kvs__gc gc;
    int rc, coding;

    pthread_mutex_lock(&c->lock);
    gc = c->gc;
    pthread_mutex_unlock(&c->lock);
    sd->src.threshold = kvs__threshold_arg(gc.threshold);
    coding = sd->src.op == KVS__OP_PUSH && gc.type == KVS__GC_2BIT;
    if ((rc = hold_device(g, sd->arrs, coding, sd->in, sd->held, e)) != 0
        || (coding && (rc = code_groups(sd->kv, g, sd->keys, sd->arrs, sd->in, gc.threshold,
                                        sd->coded, sd->next, e)) != 0))
        return rc;
    return kvs__client_share_device(sd->kv, g, sd->arrs, 0, sd->coded, sd->at, sd->dev, e);
}

/* Where each group's data goes: a zero-copy buffer's offset as it lies,
 * the caller's memory kvsd reads (lend_memory), else a place in the
 * transient part to take later (~0), which every such group must fit. */
static int send_place(struct send *sd, struct kvs__err *e)
{
    struct kvs__client *c = sd->kv->client;
    const struct kvs__groups *g = sd->g;
    int rc = 0;

    pthread_mutex_lock(&c->lock);
    sd->room = kvs__client_transient(c);
    for (int j = 0; j < g->ng; j++)
        if (sd->dev[j] < 0)
            sd->at[j] = ~(uint64_t)0;
    sd->outs_lent = lend_memory(c, g, sd->arrs, sd->outs, sd->src.flags, sd->coded, sd->remote,
                                sd->at, sd->out);
    c->outs_lent += sd->outs_lent;
    for (int j = 0; j < g->ng && rc == 0; j++) {
        const kvs_array_t *a = &sd->arrs[g->first[j]];
        uint64_t bytes = sent_bytes(a, sd->coded[j] != NULL);
        int zc = 0;

        if (sd->dev[j] >= 0 || sd->remote[j])
            continue;
        if (g->mstart[j + 1] - g->mstart[j] == 1 && !sd->coded[j] && a->device == KVS_HOST
            && (zc = kvs__client_in_buffer(c, a->data, bytes, &sd->at[j], e)) < 0) {
            rc = zc;
        } else if (!zc && bytes > sd->room) {
            char ks[KVS_MAX_KEY_LEN + 8];

            kvs__key_str(ks, sizeof ks, sd->keys[g->first[j]]);
            rc = kvs__fail(e, KVS_EBADARG, "key %s: %llu bytes do not fit the %llu bytes "
                           "below the lowest buffer in the %llu-byte staging area "
                           "(kvsrun --staging sets its size)", ks, (unsigned long long)bytes,
                           (unsigned long long)sd->room, (unsigned long long)c->staging_size);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* The end of the batch from group start: as many groups as KVS__LIST_MAX
 * and the transient part allow; *total: the staging they take. */
static int batch_end(const struct send *sd, int start, uint64_t *total)
{
    const struct kvs__groups *g = sd->g;
    int end = start;

    *total = 0;
    for (; end < g->ng && end - start < KVS__LIST_MAX; end++) {
        uint64_t bytes = sd->at[end] == ~(uint64_t)0
                             ? (sent_bytes(&sd->arrs[g->first[end]], sd->coded[end] != NULL) + 63)
                                   & ~(uint64_t)63 : 0;

        if (*total + bytes > sd->room)
            break;
        *total += bytes;
    }
    return end;
}

/* Puts the data of groups [start, end) in their places from off on in
 * staging: coded words and single device arrays copied now, sums listed
 * in sd->items (*m of them) to make once the range is filled. *zc: some
 * group's data lies in a zero-copy buffer. */
static int batch_fill(struct send *sd, int start, int end, uint64_t off, int *m, int *zc,
                      struct kvs__err *e)
{
    struct kvs__client *c = sd->kv->client;
    const struct kvs__groups *g = sd->g;
    uint64_t pos = 0;
    int rc = 0;

    for (int j = start; j < end && rc == 0; j++) {
        const kvs_array_t *a = &sd->arrs[g->first[j]];
        uint64_t bytes = sent_bytes(a, sd->coded[j] != NULL);

        if (sd->dev[j] >= 0 || sd->remote[j])
            continue;
        if (sd->at[j] != ~(uint64_t)0) {
            *zc = 1;
            continue;
        }
        sd->at[j] = off + pos;
        pos += (bytes + 63) & ~(uint64_t)63;
        if (sd->coded[j])
            memcpy(c->staging + sd->at[j], sd->coded[j], bytes);
        else if (a->device != KVS_HOST && !sd->held[g->mstart[j]])   /* the group's only array */
            rc = kvs__mem_copy(c->staging + sd->at[j], KVS_HOST, a->data, a->device, bytes,
                               sd->threads, e);
        else
            sd->items[(*m)++] = (struct kvs__sum_item){
                .dtype = a->dtype, .out = c->staging + sd->at[j],
                .in = sd->in + g->mstart[j], .k = g->mstart[j + 1] - g->mstart[j],
                .n = kvs__array_count(a) };
    }
    return rc;
}

/* Stages and sends groups [start, end) of one batch as one list call,
 * with the hold of the staging it lends kvsd; the residuals of its coded
 * pushes are committed once kvsd took it. */
static int send_batch(struct send *sd, int start, int end, uint64_t total,
                      struct kvs__err *e)
{
    struct kvs__client *c = sd->kv->client;
    const struct kvs__groups *g = sd->g;
    struct kvs__answers part = { .a = sd->ans.a + start, .failed = -1 };
    struct kvs__hold *h;
    uint64_t off = 0;
    int m = 0, zc = 0, rc;
    int64_t t;

    if (!(h = calloc(1, sizeof *h)) || !(h->returned = calloc((size_t)(end - start), 1))) {
        free(h);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    h->gen = sd->gen;
    if (total && (rc = kvs__client_xfer_take(sd->kv, total, &off, sd->what, e)) != 0) {
        free(h->returned);
        free(h);
        return rc;
    }
    h->off = off;
    h->len = total;
    t = kvs__tr_begin();
    if ((rc = batch_fill(sd, start, end, off, &m, &zc, e)) != 0) {
        pthread_mutex_lock(&c->lock);
        kvs__client_hold_free(c, h);
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    h->zc = zc;
    /* The range is this call's alone: filled without the lock. */
    kvs__sum_many(sd->items, m, sd->threads);
    if (t && total) {
        struct kvs__tr_args ta = KVS__TR_ARGS;

        ta.key = sd->keys[g->first[start]];
        ta.has_key = 1;
        ta.nkeys = end - start;
        ta.bytes = total;
        kvs__tr_put(KVS__TR_COPY_IN, t, 0, &ta, 0, NULL);
    }
    sd->src.start = start;
    if ((rc = kvs__client_run(sd->kv, fill_group, &sd->src, end - start,
                              !(sd->src.flags & KVS__SQE_ROWS)
                                  && kvs__groups_tabular(g, sd->keys, sd->coded, sd->dev,
                                                         start, end),
                              &part, h, sd->what, e)) != 0)
        return rc;
    for (int j = start; j < end; j++) {
        if (!sd->out[j])               /* only an out it named was written */
            part.a[j - start].flags &= ~(uint32_t)KVS__CQE_WRITTEN;
        if (sd->next[j]) {
            kvs__residual_commit(c->residuals, sd->keys[g->first[j]], sd->next[j]);
            sd->next[j] = NULL;
        }
    }
    return 0;
}

int kvs__client_send_groups(kvs_t *kv, uint8_t op, uint8_t flags, const struct kvs__groups *g,
                            const kvs_key_t *keys, const kvs_array_t *arrs,
                            const kvs_array_t *outs, int priority, struct kvs__answers *out,
                            const char *what, struct kvs__err *e)
{
    struct send sd;
    int rc;

    if ((rc = send_open(&sd, kv, op, flags, g, keys, arrs, outs, priority, out, what, e)) == 0
        && (rc = send_inputs(&sd, e)) == 0)
        rc = send_place(&sd, e);
    for (int start = 0, end; rc == 0 && start < g->ng; start = end) {
        uint64_t total;

        end = batch_end(&sd, start, &total);
        rc = send_batch(&sd, start, end, total, e);
    }
    if (sd.outs_lent) {
        pthread_mutex_lock(&kv->client->lock);
        kv->client->outs_lent -= sd.outs_lent;
        pthread_mutex_unlock(&kv->client->lock);
    }
    send_close(&sd);
    return rc;
}
