/*
 * dev.h - the device buffers a worker shares with kvsd through CUDA IPC
 * (dev.c), so that kvsd reads and writes device arrays in place. Nothing
 * here is API.
 */
#ifndef KVS_CLIENT_DEV_H
#define KVS_CLIENT_DEV_H

#include <stdint.h>

#include "kvs.h"
#include "base/error.h"
#include "client/link.h"

/* Where kvsd can read or write bytes at p on device itself: 1, with the
 * number of the registered buffer that holds them in *num and their offset
 * there in *off, the number pinned until kvs__client_devbuf_unpin; 0 when
 * the caller must copy them through staging; or the error of a
 * registration that failed for another reason than kvsd having no CUDA.
 * Registers the buffer with kvsd when needed. */
struct kvs__devbufs;
int kvs__client_devbuf(kvs_t *kv, const void *p, int device, uint64_t bytes, int *num,
                       uint64_t *off, struct kvs__err *e);
void kvs__client_devbuf_unpin(struct kvs__client *c, int num);
void kvs__devbufs_free(struct kvs__devbufs *t);   /* NULL is a no-op */

/* The values of a grouped list (groups.h) kvsd reads from device memory
 * itself (inits, pushes: per group of one device array, not coded) or
 * writes there (pulls: into a group's first out on a device): per such
 * group, its device buffer in dev[j] (-1: none) and its offset there in
 * at[j]; then waits until the caller's work on those devices is done, so
 * that kvsd reads what the caller wrote, and writes over what the caller
 * no longer reads. coded: per group its 2bit words or NULL; NULL for a
 * pull. */
struct kvs__groups;
int kvs__client_share_device(kvs_t *kv, const struct kvs__groups *g, const kvs_array_t *arrs,
                             int pull, uint32_t *const *coded, uint64_t *at, int *dev,
                             struct kvs__err *e);

#endif
