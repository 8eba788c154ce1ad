/*
 * array_x86.h - the x86-64 half kernels' face: what array.c asks of them
 * (and the tests, to hold them against the portable loops). Below array.h:
 * it needs nothing of it.
 */
#ifndef KVS_KERNELS_ARRAY_X86_H
#define KVS_KERNELS_ARRAY_X86_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"

/* Kernels for one half dtype that a CPU family runs faster than the
 * portable loops, with results identical to theirs bit for bit. widen and
 * narrow convert n elements (narrow rounds to nearest even); sum writes
 * out[j] = in[0][j] + ... + in[k-1][j] for begin <= j < end, k >= 2,
 * summed in float32, and out may be one of the inputs. */
struct kvs__half_kernels {
    void (*widen)(float *dst, const uint16_t *src, size_t n);
    void (*narrow)(uint16_t *dst, const float *src, size_t n);
    void (*sum)(uint16_t *out, const void *const *in, int k, size_t begin, size_t end);
};

/* The AVX2+F16C kernels for KVS_FLOAT16 or KVS_BFLOAT16 (array_x86.c), or
 * NULL when this CPU (or build) lacks them or dtype is another. The sums
 * and conversions above use them on their own; tests call them directly
 * to compare them with the portable loops. Thread-safe. */
const struct kvs__half_kernels *kvs__half_x86(kvs_dtype_t dtype);

#endif
