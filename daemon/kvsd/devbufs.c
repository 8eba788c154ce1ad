/*
 * devbufs.c - the device buffers workers share with kvsd (serve thread
 * only). A worker registers each allocation its device pushes come from
 * by its CUDA IPC handle, under a number of its choosing (KVS__OP_REGISTER);
 * kvsd opens the handle once and keeps it in the worker's table until the
 * number is registered again, or the worker leaves or dies. A device
 * request (KVS__SQE_DEVICE) names a range of such a buffer: kvsd checks it
 * against the size its own runtime reports, never the worker's. An init's
 * or a push's bytes are copied out once, when kvsd takes it, so that the
 * worker's memory is its own again when it is answered and nothing of it
 * is read later; a pull's value is written in, and the pull answered once
 * the copy is done.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "devbufs.h"

#include "device/mem.h"

_Static_assert(KVS__DEVBUF_HANDLE_BYTES == KVS__MEM_IPC_HANDLE_BYTES,
               "a registration carries the runtime's IPC handle");

int devbuf_register(struct daemon *d, const struct req *r, struct kvs__err *e)
{
    struct worker *w = &d->workers[r->w];
    unsigned char handle[KVS__DEVBUF_HANDLE_BYTES];
    struct kvs__err why = { 0, "" };
    struct devbuf *b;
    void *base;
    size_t size;
    int on, rc;

    if (!w->devbufs && !(w->devbufs = calloc(KVS__DEVBUF_MAX, sizeof *w->devbufs)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for device buffers");
    /* Read once: the worker could rewrite its staging meanwhile. */
    memcpy(handle, w->staging + r->s.data_off, sizeof handle);
    b = &w->devbufs[r->s.arg];
    kvs__mem_ipc_close(b->base);
    if (b->base)
        d->devbufs_open--;
    *b = (struct devbuf){ NULL, 0, 0 };
    if (!memcmp(handle, (unsigned char[KVS__DEVBUF_HANDLE_BYTES]){ 0 }, sizeof handle))
        return 0;                      /* closed, and nothing opened */
    /* Opened on the first device: the handle says which one the memory is
     * on, and peer access reaches it from there. */
    if ((rc = kvs__mem_ipc_open(KVS_CUDA(0), handle, &base, &size, &on, &why)) != 0)
        return kvs__fail(e, rc, "kvsd cannot open rank %d's device buffer: %s", w->rank,
                         why.msg);
    *b = (struct devbuf){ base, size, on };
    d->devbufs_open++;
    d->st.devbufs_opened++;
    return 0;
}

/* Where r's range of its worker's device buffer lies here. */
static int devbuf_range(const struct daemon *d, const struct req *r, void **p, int *device,
                        struct kvs__err *e)
{
    const struct worker *w = &d->workers[r->w];
    const struct devbuf *b = w->devbufs ? &w->devbufs[r->s.arg] : NULL;

    if (!b || !b->base)
        return kvs__fail(e, KVS_EBADARG, "request %" PRIu64 ": device buffer %" PRIu64
                         " is not registered", r->s.seq, r->s.arg);
    if (r->s.data_off > b->size || r->s.data_len > b->size - r->s.data_off)
        return kvs__fail(e, KVS_EBADARG, "request %" PRIu64 ": bytes %" PRIu64 "+%" PRIu64
                         " lie outside device buffer %" PRIu64 " (%zu bytes)", r->s.seq,
                         r->s.data_off, r->s.data_len, r->s.arg, b->size);
    *p = (char *)b->base + r->s.data_off;
    *device = b->device;
    return 0;
}

int devbuf_device(const struct daemon *d, const struct req *r, int *device, struct kvs__err *e)
{
    void *p;

    return devbuf_range(d, r, &p, device, e);
}

/* Copies r's range of its worker's buffer into p on device dev (in), or
 * p's bytes into the range (!in), and waits for the copy. */
static int devbuf_copy(const struct daemon *d, const struct req *r, void *p, int dev, int in,
                       struct kvs__err *e)
{
    void *b;
    int bdev, rc;

    if ((rc = devbuf_range(d, r, &b, &bdev, e)) != 0)
        return rc;
    if ((rc = kvs__mem_copy(in ? p : b, in ? dev : bdev, in ? b : p, in ? bdev : dev,
                            (size_t)r->s.data_len, 1, e)) != 0
        || (rc = kvs__mem_finish(e)) != 0)
        kvs__mem_finish(NULL);
    return rc;
}

int devbuf_read(const struct daemon *d, const struct req *r, void *dst, int to,
                struct kvs__err *e)
{
    return devbuf_copy(d, r, dst, to, 1, e);
}

int devbuf_write(const struct daemon *d, const struct req *r, const void *src, int from,
                 struct kvs__err *e)
{
    return devbuf_copy(d, r, (void *)src, from, 0, e);
}

/* ---- copies of device pushes ------------------------------------------ */

/* A push kvsd reads from a device buffer is copied onto its key's device
 * when taken, and the copy is dropped when the round is applied: a key on
 * a GPU keeps up to one copy per worker for its next rounds, since
 * cudaMalloc and cudaFree cost far more than the copy (cudaFree waits for
 * the whole device). */
int devcopy_new(struct round *rd, void **out, struct kvs__err *e)
{
    if (rd->nspare > 0) {
        *out = rd->spare[--rd->nspare];
        return 0;
    }
    return kvs__mem_alloc(rd->device, rd->bytes ? rd->bytes : 1, 0, out, e);
}

void devcopy_drop(const struct daemon *d, struct round *rd, void *p)
{
    if (!rd->spare && rd->device != KVS_HOST)
        rd->spare = calloc((size_t)d->nworkers, sizeof *rd->spare);
    if (rd->spare && rd->nspare < d->nworkers)
        rd->spare[rd->nspare++] = p;
    else
        kvs__mem_free(rd->device, p);
}

void devcopies_free(struct round *rd)
{
    while (rd->nspare > 0)
        kvs__mem_free(rd->device, rd->spare[--rd->nspare]);
    free(rd->spare);
    rd->spare = NULL;
}

void devbufs_close(struct daemon *d, struct worker *w)
{
    if (!w->devbufs)
        return;
    for (int i = 0; i < KVS__DEVBUF_MAX; i++) {
        if (w->devbufs[i].base) {
            kvs__mem_ipc_close(w->devbufs[i].base);
            d->devbufs_open--;
        }
    }
    free(w->devbufs);
    w->devbufs = NULL;
}
