/*
 * array.h - dtypes, shapes and the element kernels the engine runs on them:
 * sum of several arrays, half-precision conversion. Owns no state but the
 * thread pool it borrows from pool.h for big arrays. Knows nothing of keys
 * or stores.
 */
#ifndef KVS_ARRAY_H
#define KVS_ARRAY_H

#include <stdint.h>
#include <stddef.h>

#include "kvs.h"
#include "base/error.h"

/* Element count of a checked array (1 for ndim 0). */
size_t kvs__array_count(const kvs_array_t *a);

/* 1 when a and b have the same ndim and extents. */
int kvs__same_shape(const kvs_array_t *a, const kvs_array_t *b);

/* Writes "(2,3)" ("()" for ndim 0) into buf, truncated to size; a buffer
 * of KVS__SHAPE_STR_MAX holds any shape: 8 extents of at most 20
 * characters, commas, parentheses. */
#define KVS__SHAPE_STR_MAX (KVS_MAX_NDIM * 21 + 4)
void kvs__shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/* IEEE half and bfloat16 conversions; float to half rounds to nearest even
 * and keeps NaN a NaN, infinities infinite, overflow to infinity. */
float    kvs__f16_to_f32(uint16_t h);
uint16_t kvs__f32_to_f16(float f);
float    kvs__bf16_to_f32(uint16_t h);
uint16_t kvs__f32_to_bf16(float f);

/* for (size_t i = 0; i < n; i++) body, as element kernels write it: a main
 * loop over a multiple of KVS__BLOCK elements, then the rest one by one.
 * GCC at -O2 vectorises only loops that need no scalar epilogue; a trip
 * count with its low bits clear is such a loop (with restrict pointers and
 * no branch in body). */
#define KVS__BLOCK 16
#define KVS__FOR_EACH(i, n, body)                                                        \
    do {                                                                                  \
        size_t i##_main_ = (n) & ~(size_t)(KVS__BLOCK - 1);                               \
        for (size_t i = 0; i < i##_main_; i++) {                                          \
            body;                                                                         \
        }                                                                                 \
        for (size_t i = i##_main_; i < (n); i++) {                                        \
            body;                                                                         \
        }                                                                                 \
    } while (0)

/* out[j] = in[0][j] + ... + in[k-1][j] for j < n, k >= 1. float16 and
 * bfloat16 are summed in float32 and rounded once; integer types wrap
 * (modulo 2^bits, no undefined behaviour). out may be one of the inputs.
 * Big arrays are split into chunks summed on several threads (pool.h),
 * with nthreads as the most threads to use (0: the pool's size). */
void kvs__sum(kvs_dtype_t dtype, void *out, const void *const *in, int k, size_t n,
              int nthreads);

/* Elements [begin, begin + n) of kvs__sum's out, into out[0 .. n) (out is
 * none of the inputs), on the calling thread: the same values, element for
 * element, for a caller that consumes a sum a part at a time. */
void kvs__sum_part(kvs_dtype_t dtype, void *out, const void *const *in, int k, size_t begin,
                   size_t n);

/* An input that is not in this process's memory (a worker's array that
 * kvsd reads with process_vm_readv): read copies its bytes [off, off +
 * len) into buf and returns 0, or a negative errno. Sums and updates read
 * such inputs a block at a time right beside their work, so that a block
 * is read into the cache and used there, never copied whole. Threads call
 * read at once, with the same ctx. */
struct kvs__source {
    int (*read)(const void *ctx, size_t off, void *buf, size_t len);
    const void *ctx;
};

/* Where a sum's result goes besides its output (kvsd's workers' outs,
 * written with process_vm_writev): write gets each block [off, off + len)
 * of the output's bytes right after the block is summed, while it is in
 * the cache, and keeps its own errors (the sum goes on). Threads call
 * write at once, with the same ctx, for disjoint blocks; blocks that are
 * not summed this way (see kvs__sum_item) are never written. */
struct kvs__sink {
    void (*write)(const void *ctx, size_t off, const void *buf, size_t len);
    const void *ctx;
};

/* Bytes of one source read at a time: k of them stay in L2 beside the
 * output block. A sum or update with sources has at most KVS__FETCH_MAX_K
 * inputs (kvsd's workers). */
#define KVS__FETCH_BYTES ((size_t)256 << 10)
#define KVS__FETCH_MAX_K 1024

/* A thread's buffer for blocks of sources, grown as needed; the caller
 * frees buf. */
struct kvs__fetch {
    void *buf;
    size_t cap;
};

/* Calls fn(arg, b, e, blk) for consecutive blocks [b, e) that cover
 * elements [begin, end) of k inputs of es bytes each, where blk[j] points
 * at element b of input j: in[j] + b * es when src is NULL or src[j].read
 * is, else a block of f's buffer that source j's bytes were read into.
 * Stops at the first read that fails and returns its error; 0 when all
 * were read, -ENOMEM without memory for f. */
typedef void kvs__block_fn(void *arg, size_t b, size_t e, const void *const *blk);
int kvs__fetch_blocks(struct kvs__fetch *f, const void *const *in,
                      const struct kvs__source *src, int k, size_t es, size_t begin,
                      size_t end, kvs__block_fn *fn, void *arg);

/* One sum of a batch for kvs__sum_many: out[j] = in[0][j] + ... +
 * in[k-1][j] for j < n, as kvs__sum computes it. src: NULL, or per input
 * its source (read NULL: in[j] is in memory; else in[j] is not used).
 * sink: NULL, or where every block of out goes as well once summed (with
 * k <= KVS__FETCH_MAX_K; the whole of out when the sum succeeds). */
struct kvs__sum_item {
    kvs_dtype_t dtype;
    void *out;
    const void *const *in;
    int k;
    size_t n;
    const struct kvs__source *src;
    const struct kvs__sink *sink;
};

/* The sums of items[0..m), each exactly as kvs__sum would make it, but
 * split over the threads as one job: arrays too small for kvs__sum to
 * split still share the threads when there are many. When one item's
 * output overlaps another item's inputs or output the items run one after
 * another, in order, as separate kvs__sum calls would. Returns 0, or the
 * first error of a source (or -ENOMEM for its buffer): the outputs are
 * then written in part. Without sources it cannot fail. */
int kvs__sum_many(const struct kvs__sum_item *items, int m, int nthreads);

/* memcpy that splits big copies over several threads like kvs__sum. */
void kvs__copy(void *dst, const void *src, size_t bytes, int nthreads);

/* Converts n elements of a float dtype (float32, float64, float16,
 * bfloat16) to float32 and back (back rounds to nearest even). */
void kvs__to_f32(kvs_dtype_t dtype, float *dst, const void *src, size_t n);
void kvs__from_f32(kvs_dtype_t dtype, void *dst, const float *src, size_t n);

/* 1 for float32, float64, float16, bfloat16. */
int kvs__dtype_is_float(kvs_dtype_t dtype);

#endif
