/*
 * engine_hooks.h - what a front hands the engine to say where and how:
 * the memory provider of stored host values, and the reduction items of
 * the cross-device reduce hook. Types only; it declares no calls, so that
 * the engine's state model (engine_model.h) and its face (engine.h) can
 * both stand on it.
 */
#ifndef KVS_ENGINE_HOOKS_H
#define KVS_ENGINE_HOOKS_H

#include <stddef.h>

#include "kvs.h"

/* Where stored values live. The default (NULL) is the heap; a daemon can hand
 * in shared memory. alloc returns memory aligned to 64 bytes, or NULL. */
struct kvs__mem {
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p, size_t bytes);
    void *ctx;
};

/* One key's reduction across devices: in[0..k) on the distinct devices
 * dev[0..k) (each KVS_CUDA(i)), home among them; the sum of their n
 * elements goes to out, on home. */
struct kvs__reduce_item {
    kvs_dtype_t dtype;
    size_t n;
    int home;
    void *out;
    const void *const *in;
    const int *dev;
    int k;
};

#endif
