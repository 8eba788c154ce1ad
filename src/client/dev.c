/*
 * dev.c - the device buffers a worker shares with kvsd, so that kvsd
 * reads a device push straight from the worker's GPU memory (CUDA IPC)
 * instead of the worker copying it into staging first.
 *
 * A buffer is a whole allocation, known by its base address and its IPC
 * handle: the handle is asked for at every push (an allocation freed and
 * made again at the same address has another handle), and a buffer seen
 * for the first time is registered with kvsd under a free number, or the
 * number used longest ago by no call in flight (KVS__OP_REGISTER replaces
 * it in kvsd). A call pins the numbers it names until its answers are in:
 * kvsd has read their bytes by then, so a number is never replaced under a
 * push that names it.
 *
 * kvsd keeps a buffer open until its number is replaced, and an open
 * buffer keeps its memory alive after the worker frees it: every
 * SWEEP_EVERY registrations, the buffers whose allocation is gone (the
 * driver gives no handle for the base any more, or another one) are
 * unregistered, so that kvsd holds little more than the live ones.
 *
 * A kvsd that took the place of one gone (a job that recovers) knows no
 * buffer: the table notices the link's new generation at its next use and
 * registers every buffer again as it comes.
 *
 * Where sharing cannot work, pushes go through staging as before: memory
 * the driver gives no handle for, no free number (every one pinned), or a
 * kvsd that cannot open handles (started without a CUDA runtime), which a
 * store handle asks once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/dev.h"
#include "client/groups.h"
#include "device/mem.h"

/* Registrations between two sweeps for freed buffers. */
#define SWEEP_EVERY 64

struct devbuf {
    uintptr_t base;                    /* 0: the number is free */
    int device;
    unsigned char handle[KVS__DEVBUF_HANDLE_BYTES];
    int pins;                          /* calls in flight that name it */
    uint64_t used;                     /* when a call last named it */
};

struct kvs__devbufs {
    pthread_mutex_t lock;              /* the table; held across a registration */
    struct devbuf b[KVS__DEVBUF_MAX];
    int n;                             /* numbers [0, n) have been used: a push
                                        * looks at those only */
    uint64_t clock;
    int fresh;                         /* registrations since the last sweep */
    int refused;                       /* kvsd opens no handle: staging from now on */
    uint64_t gen;                      /* the link's generation it was made for */
};

void kvs__devbufs_free(struct kvs__devbufs *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static struct kvs__devbufs *table(struct kvs__client *c)
{
    struct kvs__devbufs *t;

    pthread_mutex_lock(&c->lock);
    if (!c->devbufs && (t = calloc(1, sizeof *t)) != NULL) {
        pthread_mutex_init(&t->lock, NULL);
        c->devbufs = t;
    }
    t = c->devbufs;
    pthread_mutex_unlock(&c->lock);
    return t;
}

/* The number for a buffer not registered yet: a free one (a registration
 * that failed left it so), a number never used, else the one no call pins
 * that was named longest ago; -1 when all are pinned. */
static int pick(struct kvs__devbufs *t)
{
    int best = -1;

    for (int i = 0; i < t->n; i++) {
        if (!t->b[i].base)
            return i;
        if (!t->b[i].pins && (best < 0 || t->b[i].used < t->b[best].used))
            best = i;
    }
    return t->n < KVS__DEVBUF_MAX ? t->n++ : best;
}

/* 1 when b's allocation is gone: its base is no longer the start of an
 * allocation with b's handle. */
static int freed(const struct devbuf *b)
{
    struct kvs__mem_ipc ipc;

    return kvs__mem_ipc_export(b->device, (const void *)b->base, 1, &ipc, NULL) != 0
           || ipc.offset != 0 || memcmp(ipc.handle, b->handle, sizeof ipc.handle) != 0;
}

/* Unregisters every buffer no call pins whose allocation is gone: kvsd
 * closes it (a handle of zeros). t->lock held. */
static int sweep(kvs_t *kv, struct kvs__devbufs *t, struct kvs__err *e)
{
    static const unsigned char none[KVS__DEVBUF_HANDLE_BYTES];
    int rc;

    t->fresh = 0;
    for (int i = 0; i < t->n; i++) {
        if (!t->b[i].base || t->b[i].pins || !freed(&t->b[i]))
            continue;
        t->b[i].base = 0;
        if ((rc = kvs__client_send(kv, KVS__OP_REGISTER, none, sizeof none, (uint64_t)i,
                                   "a freed device buffer's unregistration", e)) != 0)
            return rc;
    }
    return 0;
}

int kvs__client_devbuf(kvs_t *kv, const void *p, int device, uint64_t bytes, int *num,
                       uint64_t *off, struct kvs__err *e)
{
    struct kvs__devbufs *t = table(kv->client);
    struct kvs__err why = { 0, "" };
    struct kvs__mem_ipc ipc;
    uintptr_t base;
    int i, rc;

    if (!t)
        return kvs__fail(e, -ENOMEM, "out of memory");
    if (kvs__mem_ipc_export(device, p, bytes, &ipc, &why) != 0)
        return 0;                      /* not shareable: the caller copies it */
    base = (uintptr_t)p - ipc.offset;
    pthread_mutex_lock(&t->lock);
    pthread_mutex_lock(&kv->client->lock);
    if (t->gen != kv->client->gen) {  /* another kvsd: it knows none of them */
        for (i = 0; i < t->n; i++)
            t->b[i].base = 0;
        t->refused = t->fresh = 0;
        t->gen = kv->client->gen;
    }
    pthread_mutex_unlock(&kv->client->lock);
    if (t->refused) {
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    for (i = 0; i < t->n; i++)
        if (t->b[i].base == base && memcmp(t->b[i].handle, ipc.handle, sizeof ipc.handle) == 0)
            break;
    if (i == t->n) {
        if (t->fresh >= SWEEP_EVERY && (rc = sweep(kv, t, &why)) != 0) {
            pthread_mutex_unlock(&t->lock);
            return kvs__fail(e, rc, "%s", why.msg);
        }
        if ((i = pick(t)) < 0) {
            pthread_mutex_unlock(&t->lock);
            return 0;
        }
        t->b[i].base = 0;              /* kvsd replaces it, or has it no more */
        rc = kvs__client_send(kv, KVS__OP_REGISTER, ipc.handle, sizeof ipc.handle,
                              (uint64_t)i, "a device buffer's registration", &why);
        if (rc == KVS_EDEVICE) {
            t->refused = 1;
            pthread_mutex_unlock(&t->lock);
            return 0;
        }
        if (rc != 0) {
            pthread_mutex_unlock(&t->lock);
            return kvs__fail(e, rc, "%s", why.msg);
        }
        t->b[i].base = base;
        t->b[i].device = device;
        memcpy(t->b[i].handle, ipc.handle, sizeof ipc.handle);
        t->fresh++;
    }
    t->b[i].pins++;
    t->b[i].used = ++t->clock;
    pthread_mutex_unlock(&t->lock);
    *num = i;
    *off = ipc.offset;
    return 1;
}

void kvs__client_devbuf_unpin(struct kvs__client *c, int num)
{
    struct kvs__devbufs *t = c->devbufs;

    pthread_mutex_lock(&t->lock);
    t->b[num].pins--;
    pthread_mutex_unlock(&t->lock);
}

int kvs__client_share_device(kvs_t *kv, const struct kvs__groups *g, const kvs_array_t *arrs,
                             int pull, uint32_t *const *coded, uint64_t *at, int *dev,
                             struct kvs__err *e)
{
    uint64_t fenced = 0;               /* bit i: KVS_CUDA(i) (i < KVS__MAX_DEVICES) */
    int rc = 0;

    for (int j = 0; j < g->ng && rc == 0; j++) {
        const kvs_array_t *a = &arrs[g->first[j]];
        uint64_t bit;

        if ((!pull && (g->mstart[j + 1] - g->mstart[j] != 1 || coded[j]))
            || a->device == KVS_HOST)
            continue;
        rc = kvs__client_devbuf(kv, a->data, a->device, kvs__client_array_bytes(a), &dev[j],
                                &at[j], e);
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
