/*
 * push.h - the push path (push.c): a plan's inputs merged and run through
 * the update rule into the stored values. kvs__engine_push and its
 * variants are engine.h's; this is what the other files of the engine
 * call.
 */
#ifndef KVS_PUSH_H
#define KVS_PUSH_H

#include "base/error.h"
#include "store/plan.h"

/* Prepares, stages and commits a push of the plan (made with its inputs):
 * on success every group's key holds its update and its version is
 * bumped, fresh keys are in the table; on failure the store is as it was,
 * but for a device that failed a kernel (KVS_EDEVICE). Nothing is left
 * queued on a device when it returns. */
int kvs__push_run(struct kvs__engine *eng, struct plan *p, struct kvs__err *e);

#endif
