/*
 * mem.h - the memory provider: where an array's bytes live (KVS_HOST, or
 * KVS_CUDA(i) for CUDA device i) and the element kernels that run there.
 * The engine works through it and knows no CUDA.
 *
 * Host memory is the heap, and its kernels are array.h's and optim.h's.
 * Device memory comes from the CUDA runtime (cuda.h); its kernels are the
 * kernel module's (cuda_kernels.h, loaded at first use from
 * KVS_CUDA_KERNELS or the installed path), launched on the device's
 * stream; the CPU never reads device memory itself.
 *
 * Device work is queued on one stream per device, a blocking stream: it
 * runs after the work the caller queued on the legacy default stream, so
 * a caller's array is read only once what the caller wrote there is done.
 * Work across devices is ordered by events. Nothing waits until
 * kvs__mem_finish, which the engine calls once at the end of a call (and a
 * copy into host memory, which waits for itself): a call's results are in
 * place when it returns. Every wait ends at KVS_TIMEOUT (read once per
 * process) with KVS_ETIMEDOUT.
 *
 * Every function that can fail returns 0 or a negative code with a detail:
 * KVS_EDEVICE naming the device and the runtime's error, -ENOMEM.
 */
#ifndef KVS_MEM_H
#define KVS_MEM_H

#include <stdint.h>
#include <stddef.h>

#include "kvs.h"
#include "base/error.h"

struct kvs__optim;
struct kvs__optim_item;

/* The most CUDA devices a process uses. */
#define KVS__MAX_DEVICES 64

/* 0 when an array of bytes at p can be on device: the device exists and,
 * for a device array, the runtime knows p as memory of that device. what
 * names the array in the message. */
int kvs__mem_check(int device, const void *p, size_t bytes, const char *what,
                   struct kvs__err *e);

/* Checks one caller array: known dtype, ndim in [0, KVS_MAX_NDIM], extents
 * >= 0, element count and byte size without overflow (size_t and int64),
 * its device and data as kvs__mem_check has them, data non-NULL when it
 * has elements. what names the array in the message ("value 2"). Returns
 * 0 or KVS_EDTYPE / KVS_EBADARG / KVS_EDEVICE with a detail. */
int kvs__array_check(const kvs_array_t *a, const char *what, struct kvs__err *e);

/* bytes (> 0) of memory on device, 64-byte aligned, zeroed when zero. */
int kvs__mem_alloc(int device, size_t bytes, int zero, void **out, struct kvs__err *e);
void kvs__mem_free(int device, void *p);          /* NULL is a no-op */

/* Copies bytes from src on sdev to dst on ddev (host copies split over at
 * most nthreads threads). Copies into host memory are complete when this
 * returns; copies into a device are queued. */
int kvs__mem_copy(void *dst, int ddev, const void *src, int sdev, size_t bytes, int nthreads,
                  struct kvs__err *e);

/* Moves m rows of row_bytes between a table on device (a KVS_CUDA code)
 * and m contiguous rows of host memory, row j of compact being row
 * idx[j] of table (idx sorted unique, in the table): to_host 1 gathers
 * them into compact, 0 scatters compact into the table. One copy per run
 * of consecutive rows, so that the bytes moved are the rows' alone, all
 * in one cudaMemcpyBatchAsync where the runtime has it (CUDA 13), queued
 * on the device's stream. A gather is complete when it returns; a
 * scatter is queued (kvs__mem_finish), and compact must stay put until
 * then. */
int kvs__mem_rows(int device, void *table, size_t row_bytes, const int64_t *idx, size_t m,
                  void *compact, int to_host, struct kvs__err *e);

/* Zeroes bytes at p on device (a KVS_CUDA code), queued on its stream. */
int kvs__mem_zero(int device, void *p, size_t bytes, struct kvs__err *e);

/* Writes the value at src (bytes of host memory) into dst on device: all
 * of it, or with rows only those nrows rows of row_bytes, every other row
 * zero (onto a device gathered in host memory first). Complete when it
 * returns, on a device too. */
int kvs__mem_write_out(void *dst, int device, const void *src, size_t bytes,
                       const int64_t *rows, int64_t nrows, size_t row_bytes, int threads,
                       struct kvs__err *e);

/* kvs__sum on device: out and every in[i] are memory of device. */
int kvs__mem_sum(int device, kvs_dtype_t dtype, void *out, const void *const *in, int k,
                 size_t n, int nthreads, struct kvs__err *e);

/* kvs__optim_update_many on device: the weights, inputs and states of
 * items[0..m) are memory of device. */
int kvs__mem_update(int device, const struct kvs__optim *o, const struct kvs__optim_item *items,
                    int m, int nthreads, struct kvs__err *e);

/* The stream of device (a KVS_CUDA code) for another library's work
 * (NCCL), which kvs__mem_finish then waits for. */
int kvs__mem_stream(int device, void **stream, struct kvs__err *e);

/* Queues a marker on device's stream, which runs after the caller's work
 * on the legacy default stream: once the next kvs__mem_finish returns,
 * what the caller wrote on device before is done, for another process to
 * read. */
int kvs__mem_fence(int device, struct kvs__err *e);

/* Waits for the device work this thread queued since its last finish. */
int kvs__mem_finish(struct kvs__err *e);

/* Device memory shared with another process of the same user (CUDA IPC):
 * the runtime's handle of the allocation that holds it, the allocation's
 * size, and where in it the memory starts. The handle is opaque bytes; the
 * process that made it cannot open it. */
#define KVS__MEM_IPC_HANDLE_BYTES 64
struct kvs__mem_ipc {
    unsigned char handle[KVS__MEM_IPC_HANDLE_BYTES];
    uint64_t size, offset;
};

/* What another process needs to reach bytes at p on device (a KVS_CUDA
 * code): the allocation that holds them, found through the driver. */
int kvs__mem_ipc_export(int device, const void *p, size_t bytes, struct kvs__mem_ipc *out,
                        struct kvs__err *e);
/* Opens another process's handle on device (a KVS_CUDA code), peer access
 * enabled as needed: *base is the allocation's start in this process,
 * *size its size as the runtime here sees it (not as the handle says: the
 * other process may lie), *on the device it lives on. Close it with
 * kvs__mem_ipc_close. KVS_EDEVICE when the handle does not open. */
int kvs__mem_ipc_open(int device, const unsigned char *handle, void **base, size_t *size,
                      int *on, struct kvs__err *e);
void kvs__mem_ipc_close(void *base);             /* NULL is a no-op */

#endif
