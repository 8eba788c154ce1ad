/*
 * optim_state.h - one key's optimizer state buffers (struct kvs__optim_state,
 * kernels/optim.h), made and copied on any device through device/mem.h.
 * The update kernels below this layer only read and write them.
 */
#ifndef KVS_OPTIM_STATE_H
#define KVS_OPTIM_STATE_H

#include <stddef.h>

#include "kvs.h"
#include "base/error.h"
#include "kernels/optim.h"

/* A zeroed state for a key of dtype (a float dtype) and count elements,
 * its buffers on device (mem.h). Errors: KVS_EDTYPE (not a float dtype),
 * -ENOMEM, KVS_EDEVICE. */
int kvs__optim_state_new(const struct kvs__optim *o, kvs_dtype_t dtype, size_t count,
                         int device, struct kvs__optim_state **out, struct kvs__err *e);
void kvs__optim_state_free(struct kvs__optim_state *s);     /* NULL is a no-op */

/* A copy of s with its buffers on device (mem.h). Errors: -ENOMEM,
 * KVS_EDEVICE. */
int kvs__optim_state_copy(const struct kvs__optim_state *s, int device,
                          struct kvs__optim_state **out, struct kvs__err *e);

#endif
