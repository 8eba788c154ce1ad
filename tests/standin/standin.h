/*
 * standin.h - what the stand-in's two halves share: the real toolkit
 * headers, whose declarations are exactly what the library exports, the
 * exports of its own (kvs_standin_host, for the host build of the
 * kernel module, kernels.c; kvs_standin_copied, for the tests), and what
 * the NCCL half (nccl.c) asks of the CUDA runtime half (cudart.c, and
 * cudamem.c for device memory; what those two share is in cudart_int.h).
 */
#ifndef KVS_STANDIN_H
#define KVS_STANDIN_H

#include <stddef.h>

/* The library is built with hidden visibility: the functions declared by
 * the toolkit's headers are its exports, and nothing else is but
 * kvs_standin_host. */
#pragma GCC visibility push(default)
#include <cuda_runtime_api.h>
#include <nccl.h>

/* nccl.h declares these with empty parentheses, which is not a prototype in C. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* Where queued work reaches the device memory [ptr, ptr + bytes): the
 * stand-in's own mapping of it, the CPU being unable to read ptr itself.
 * NULL when the range is not inside one device allocation of this process
 * (made here or opened from an IPC handle). For work the stand-in runs (a
 * host function of cudaLaunchHostFunc), as a GPU's kernel reaches device
 * memory; any thread. */
void *kvs_standin_host(const void *ptr, size_t bytes);

/* What this process copied between host and device memory so far, for a
 * test that checks how much a call moves: out[0] bytes to a device,
 * out[1] bytes to the host, out[2] and out[3] the copies that moved them
 * (each cudaMemcpy* call, counted when it is made). Any thread. */
void kvs_standin_copied(unsigned long long out[4]);
#pragma GCC visibility pop

/* cudaSuccess when device exists and has not been declared lost
 * (KVS_STANDIN_LOST_DEVICE); otherwise the error that a runtime call on
 * it returns. Any thread. */
cudaError_t standin__check_device(int device);

/* Whether [ptr, ptr + bytes) lies inside one device allocation of this
 * process (made here or opened from an IPC handle); if so, *device is the
 * allocation's device. Any thread. */
int standin__device_range(const void *ptr, size_t bytes, int *device);

/* cudaSuccess when stream is a live stream of device, or a default stream
 * (then device's legacy stream); else the runtime's error. */
cudaError_t standin__check_stream(cudaStream_t stream, int device);

/* Queues fn(arg) on each of the n streams (a default one: the legacy
 * stream of devices[i]), where each waits for the work queued before it on
 * all n streams: fn runs n times, and at its first run every stream has
 * reached it. All are queued, or none (cudaErrorMemoryAllocation, or the
 * error of a stream that is not one). */
cudaError_t standin__enqueue_all(int n, const cudaStream_t *streams, const int *devices,
                                 void (*fn)(void *), void *arg);

#endif
