/*
 * optim.h - the built-in optimizers (sgd, adam): spec parsing, MXNet's update
 * rules over one key's state. Works on plain buffers handed in by the
 * engine; never looks up keys, never allocates state (store/optim_state.h
 * makes it; store/statefile.h saves and loads it).
 */
#ifndef KVS_OPTIM_H
#define KVS_OPTIM_H

#include <stdint.h>
#include <stddef.h>

#include "kvs.h"
#include "kernels/cuda_kernels.h"
#include "base/error.h"

struct kvs__optim;                     /* a parsed spec; immutable */

struct kvs__optim_state {              /* one key's state */
    uint64_t t;                        /* updates applied so far (adam's bias correction) */
    kvs_dtype_t dtype;                 /* KVS_FLOAT64 for float64 keys, else KVS_FLOAT32 */
    size_t count;                      /* elements in each buffer */
    int nbuf;                          /* 0..2: sgd with momentum 1 (mom), adam 2 (mean, var) */
    int device;                        /* where buf lie: KVS_HOST or KVS_CUDA(i) (mem.h) */
    void *buf[2];
};

/* Parses "sgd lr=0.1 momentum=0.9" etc. (see kvs_set_optimizer in kvs.h).
 * Errors: KVS_ESPEC naming the bad optimizer or parameter, -ENOMEM. */
int kvs__optim_parse(const char *spec, struct kvs__optim **out, struct kvs__err *e);
void kvs__optim_free(struct kvs__optim *o);      /* NULL is a no-op */

const char *kvs__optim_name(const struct kvs__optim *o);   /* "sgd", "adam" */
/* The spec with every parameter written out; parses back to the same optimizer. */
const char *kvs__optim_spec(const struct kvs__optim *o);

/* 1 when a row-sparse gradient updates only its rows and their state
 * (lazy_update=1, the default), 0 when it is taken as dense. */
int kvs__optim_lazy(const struct kvs__optim *o);

/* State buffers per key this optimizer keeps (sgd: 1 with momentum, else
 * 0; adam: 2), as kvs__optim_state_new (store/optim_state.h)
 * makes them. */
int kvs__optim_nbuf(const struct kvs__optim *o);

/* One MXNet update of weight (dtype, count elements) by grad (same dtype
 * and count), advancing s->t. float16/bfloat16 are computed in float32 and
 * rounded once per element. Cannot fail: the state was made for this key. */
void kvs__optim_update(const struct kvs__optim *o, struct kvs__optim_state *s,
                       kvs_dtype_t dtype, void *weight, const void *grad, size_t count);

/* kvs__optim_update with the gradient in[0] + ... + in[k-1] (k >= 1, summed
 * as kvs__sum sums), summed a chunk at a time beside the update instead of
 * into a buffer, and split over at most nthreads threads (pool.h; 0: the
 * pool's default). The results are those of kvs__sum into a buffer, then
 * kvs__optim_update. */
void kvs__optim_update_sum(const struct kvs__optim *o, struct kvs__optim_state *s,
                           kvs_dtype_t dtype, void *weight, const void *const *in, int k,
                           size_t count, int nthreads);

/* Fixes the constants of one update of elements [first, first + count) of
 * a key of dtype by the sum of k inputs, and counts the step in s (step:
 * as kvs__optim_item's): what a kernel needs besides the buffers. -1, and
 * s left alone, when s does not fit (another dtype, too few elements,
 * another optimizer's buffers). */
int kvs__optim_prepare(const struct kvs__optim *o, struct kvs__optim_state *s,
                       kvs_dtype_t dtype, size_t first, size_t count, int k, uint64_t step,
                       struct kvs_cuda_step *st);

/* The host's kernel for prepared constants: kvs_cuda_update's arguments
 * (cuda_kernels.h), with the same results, over at most nthreads threads. */
void kvs__optim_run(const struct kvs_cuda_step *st, kvs_dtype_t dtype, void *weight,
                    const void *const *in, int k, void *buf0, void *buf1, size_t count,
                    int nthreads);

/* One key's update for kvs__optim_update_many: the arguments of
 * kvs__optim_update_sum, of count elements of the key from element first
 * on (weight and each in[i] point at that element; s is the whole key's
 * state). first 0 and count the key's: the whole key. step: the update's
 * number, which s counts from then on (a range's update when several
 * ranges of a key make one step); 0: one more than s counted. src: NULL,
 * or per input its source (array.h), read a block at a time beside the
 * update (read NULL: in[i] is in memory). */
struct kvs__optim_item {
    struct kvs__optim_state *s;
    kvs_dtype_t dtype;
    void *weight;
    const void *const *in;
    int k;
    size_t count;
    size_t first;
    uint64_t step;
    const struct kvs__source *src;
};

/* kvs__optim_update_sum of items[0..m) (distinct keys: no weight or state
 * shared), split over the threads as one job, so that many small keys
 * share them as one big key would. Returns 0, or the first error of a
 * source (or -ENOMEM for its buffer): weights and states are then updated
 * in part. Without sources it cannot fail. */
int kvs__optim_update_many(const struct kvs__optim *o, const struct kvs__optim_item *items,
                           int m, int nthreads);

#endif
