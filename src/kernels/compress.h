/*
 * compress.h - gradient compression: MXNet's 2bit codec and its spec.
 * Values become one of {-threshold, 0, +threshold}, 2 bits each, 16 values
 * per 32-bit word, with what was cut off kept by the sender as a residual
 * and added to its next gradient. Pure functions over caller buffers.
 */
#ifndef KVS_COMPRESS_H
#define KVS_COMPRESS_H

#include <stdint.h>
#include <stddef.h>

#include "base/error.h"

enum kvs__gc_type { KVS__GC_NONE = 0, KVS__GC_2BIT = 1 };

struct kvs__gc {
    enum kvs__gc_type type;
    float threshold;                   /* > 0 for 2bit */
};

/* Parses "none", "2bit" or "2bit threshold=0.5" (0.5 is the default).
 * Errors: KVS_ESPEC (unknown type or parameter, threshold not a finite
 * number > 0), KVS_EBADARG (NULL). */
int kvs__gc_parse(const char *spec, struct kvs__gc *out, struct kvs__err *e);

/* 32-bit words that hold n compressed values: ceil(n / 16). */
size_t kvs__gc_2bit_words(size_t n);

/* residual[i] += grad[i]; then each value becomes +threshold (bits 11),
 * -threshold (bits 10) or 0 (bits 00), and residual[i] keeps the rest.
 * Value i sits in word i/16, byte (i%16)/4 of that word in memory order,
 * bits 7-6 for i%4 == 0 down to bits 1-0 for i%4 == 3 (MXNet's layout).
 * out has kvs__gc_2bit_words(n) words. */
void kvs__gc_2bit_quantize(const float *grad, float *residual, uint32_t *out, size_t n,
                           float threshold);

/* The inverse: out[i] = +threshold, -threshold or 0. */
void kvs__gc_2bit_dequantize(const uint32_t *in, float *out, size_t n, float threshold);
/* The same, added: out[i] += +threshold, -threshold or 0. */
void kvs__gc_2bit_dequantize_add(const uint32_t *in, float *out, size_t n, float threshold);

#endif
