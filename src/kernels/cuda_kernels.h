/*
 * cuda_kernels.h - the entry points of the kernel module, libkvs-cuda.so:
 * the element kernels of array.h and optim.c, compiled by nvcc for the
 * GPU (cuda_kernels.cu). libkvs loads the module with dlopen, as it loads
 * the CUDA runtime, so that libkvs itself needs neither. A kernel gives
 * exactly the results of its host twin, bit for bit: the same order of
 * operations, half types summed in float32 and rounded once, no fused
 * multiply-adds.
 *
 * This header is plain C, shared by both sides; it names no type of
 * libkvs's own. Every entry point returns 0 or the cudaError_t of the
 * launch that failed; none synchronises: the work is queued on stream.
 */
#ifndef KVS_CUDA_KERNELS_H
#define KVS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever an entry point or struct below changes: libkvs refuses a
 * module of another version. */
#define KVS_CUDA_KERNELS_ABI 1

/* dtype codes are kvs_dtype_t's: 0 float32, 1 float64, 2 float16,
 * 3 bfloat16, 4 int32, 5 int64, 6 uint8. */

/* One optimizer update's constants, fixed on the host (optim.c's
 * kvs__optim_prepare) before the kernel runs: kind 0 sgd, 1 adam; mom the
 * sgd momentum rule (one state buffer); clipping when clip > 0; lr already
 * bias-corrected for adam. Computed in float32 for every dtype but
 * float64, each constant converted from double once. */
struct kvs_cuda_step {
    int kind;
    int mom;
    int clipping;
    double lr, momentum, beta1, beta2, epsilon, wd, rescale, clip;
};

/* KVS_CUDA_KERNELS_ABI of the module. */
int kvs_cuda_kernels_abi(void);

/* out[j] = in[0][j] + ... + in[k-1][j] for j < n, k >= 1, as kvs__sum
 * computes it; in is a host array of k device pointers; out may be one of
 * the inputs. stream is a cudaStream_t. */
int kvs_cuda_sum(int dtype, void *out, const void *const *in, int k, size_t n, void *stream);

/* One optimizer update of n elements of a float dtype: the gradient is
 * in[0] + ... + in[k-1] (summed as kvs_cuda_sum sums, in the key's dtype:
 * half types rounded to their dtype before the update widens them again),
 * weight w in the key's dtype, state buffers buf0 (momentum, adam's mean)
 * and buf1 (adam's variance) in float64 for float64 keys, float32 for the
 * others, NULL when the rule keeps none. */
int kvs_cuda_update(const struct kvs_cuda_step *st, int dtype, void *w, const void *const *in,
                    int k, void *buf0, void *buf1, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
