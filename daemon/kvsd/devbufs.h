/*
 * devbufs.h - the device buffers workers register, and the copies of
 * device pushes kept on a key's GPU.
 */
#ifndef KVSD_DEVBUFS_H
#define KVSD_DEVBUFS_H

#include "daemon.h"

/* r (KVS__OP_REGISTER) opens the handle in its worker's staging as the
 * worker's buffer r->s.arg, closing the buffer of that number before (a
 * handle of zeros: only that).
 * KVS_EDEVICE when it does not open here (no CUDA, a bad handle), -ENOMEM. */
int devbuf_register(struct daemon *d, const struct req *r, struct kvs__err *e);
/* The device request r's range (KVS__SQE_DEVICE) checked against its
 * worker's buffer: KVS_EBADARG for a buffer not registered or a range past
 * its end. devbuf_device: the device it lies on here. devbuf_read: its
 * bytes copied into dst on device `to`, and finished; also KVS_EDEVICE.
 * devbuf_write: src's bytes, on device from, written there and finished. */
int devbuf_device(const struct daemon *d, const struct req *r, int *device, struct kvs__err *e);
int devbuf_read(const struct daemon *d, const struct req *r, void *dst, int to,
                struct kvs__err *e);
int devbuf_write(const struct daemon *d, const struct req *r, const void *src, int from,
                 struct kvs__err *e);
/* Memory on rd's key's device for a device push's copy, and its end: a
 * key on a GPU keeps some for its next rounds. -ENOMEM,
 * KVS_EDEVICE. devcopies_free: what the key kept. */
int devcopy_new(struct round *rd, void **out, struct kvs__err *e);
void devcopy_drop(const struct daemon *d, struct round *rd, void *p);
void devcopies_free(struct round *rd);
/* Closes every buffer w registered (it left, or died). */
void devbufs_close(struct daemon *d, struct worker *w);

#endif
