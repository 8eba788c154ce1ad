/*
 * send.h - what a list call sends kvsd (send.c). Nothing here is API.
 */
#ifndef KVS_CLIENT_SEND_H
#define KVS_CLIENT_SEND_H

#include <stdint.h>

#include "kvs.h"
#include "base/error.h"
#include "client/groups.h"
#include "client/link.h"

/* Sends one request per group, each with its data in staging: a buffer's
 * as it lies, else what kvs__sum makes of the group's arrays (summing
 * repeated keys here, as MXNet's workers merge their devices before
 * sending) in a transient range, or under 2bit compression a float32
 * push's words; a group of one device array is read by kvsd from its
 * device where it can (kvs__client_share_device), else copied into staging from its
 * device. Groups go in batches that fit the transient part and
 * KVS__LIST_MAX; each batch is all-or-nothing in kvsd, and the residuals
 * of its coded pushes change only when kvsd took it. out: the answers, per
 * group (may be NULL; its array has room for every group). outs: a
 * pushpull's outs (or NULL), which kvsd may write where it reads the
 * group's array out of this process's memory: an answer with
 * KVS__CQE_WRITTEN says the out holds the value. */
int kvs__client_send_groups(kvs_t *kv, uint8_t op, uint8_t flags, const struct kvs__groups *g,
                            const kvs_key_t *keys, const kvs_array_t *arrs,
                            const kvs_array_t *outs, int priority, struct kvs__answers *out,
                            const char *what, struct kvs__err *e);

#endif
