/*
 * nccl_reduce.h - NCCL, loaded with dlopen at first use (KVS_NCCL names the
 * library; default libnccl.so.2), for the "nccl" store type: the values
 * a list call pushes for a key from several GPUs are reduced onto the
 * key's home GPU with ncclReduce, every key of the call in one NCCL
 * group, over communicators (ncclCommInitAll) of the devices each key's
 * values come from, made once per set of devices and kept.
 */
#ifndef KVS_NCCL_REDUCE_H
#define KVS_NCCL_REDUCE_H

#include <stddef.h>

#include "kvs.h"
#include "store/engine.h"
#include "base/error.h"

#define KVS__NCCL_DEFAULT "libnccl.so.2"

struct kvs__nccl;                      /* one store's communicators */

int  kvs__nccl_new(struct kvs__nccl **out, struct kvs__err *e);
void kvs__nccl_free(struct kvs__nccl *nc);        /* NULL is a no-op */

/* The reductions of items[0..m) (engine.h; nc a struct kvs__nccl), queued on mem.h's streams (finished by
 * kvs__mem_finish). Errors: KVS_EDEVICE with the reason (NCCL not found,
 * an NCCL call that failed), -ENOMEM. */
int kvs__nccl_reduce(void *nc, const struct kvs__reduce_item *items, int m,
                     struct kvs__err *e);

#endif
