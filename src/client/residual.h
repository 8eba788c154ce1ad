/*
 * residual.h - a worker's 2bit residuals, per key, for the dist store
 * types' gradient compression (compress.h holds the codec). Thread-safe:
 * any thread of a handle may push.
 */
#ifndef KVS_RESIDUAL_H
#define KVS_RESIDUAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

struct kvs__residuals;

/* An empty table; 0 or -ENOMEM. _free takes NULL. */
int kvs__residuals_new(struct kvs__residuals **out);
void kvs__residuals_free(struct kvs__residuals *t);

/* Every key's residual back to zero, as before its first push (the pushes
 * it was left from were rolled back). NULL is a no-op. */
void kvs__residuals_zero(struct kvs__residuals *t);

/* Quantizes grad (n values) of key into out (kvs__gc_2bit_words(n) words)
 * from the key's residual (zero at its first push), leaving the residual
 * as it was: the one this push makes is in *next, for _commit once kvsd
 * took the push, or for free() when it did not. KVS_ESHAPE when the key's
 * earlier pushes had another count, -ENOMEM. */
int kvs__residual_quantize(struct kvs__residuals *t, kvs_key_t key, const float *grad,
                           size_t n, float threshold, uint32_t *out, float **next,
                           struct kvs__err *e);

/* next (from _quantize of key) becomes the key's residual; takes next. */
void kvs__residual_commit(struct kvs__residuals *t, kvs_key_t key, float *next);

#endif
