/*
 * standin.h - what the stand-in's two halves share: the real toolkit
 * headers, whose declarations are exactly what the library exports, and
 * what the NCCL half (nccl.c) asks of the CUDA runtime half (cudart.c).
 */
#ifndef KVS_STANDIN_H
#define KVS_STANDIN_H

#include <stddef.h>

/* The library is built with hidden visibility: the functions declared by
 * the toolkit's headers are its exports, and nothing else is. */
#pragma GCC visibility push(default)
#include <cuda_runtime_api.h>
#include <nccl.h>

/* Present only in the stand-in: a caller that finds it knows that device
 * memory is host memory and runs its host kernels on it. */
extern int kvs_standin;

/* nccl.h declares these with empty parentheses, which is not a prototype in C. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
#pragma GCC visibility pop

/* cudaSuccess when device exists and has not been declared lost
 * (KVS_STANDIN_LOST_DEVICE); otherwise the error that a runtime call on
 * it returns. Any thread. */
cudaError_t standin__check_device(int device);

/* Whether [ptr, ptr + bytes) lies inside one device allocation of this
 * process (made here or opened from an IPC handle); if so, *device is the
 * allocation's device. Any thread. */
int standin__device_range(const void *ptr, size_t bytes, int *device);

#endif
