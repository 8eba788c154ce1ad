/*
 * cudart_int.h - what the two files of the stand-in's CUDA runtime half
 * share: cudart.c (errors, queued work, devices, streams and events,
 * driver entry points) and cudamem.c (allocations, copies, IPC handles).
 * Private to them: the library is built with hidden visibility, so none
 * of this is exported, and nccl.c asks only what standin.h declares.
 */
#ifndef KVS_STANDIN_CUDART_INT_H
#define KVS_STANDIN_CUDART_INT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "standin.h"

enum origin { MADE, OPENED };

/* One device allocation: made here (and owning its memfd) or mapped from
 * another process's IPC handle. */
struct alloc {
    struct alloc *next;
    char *base;                        /* the device address: PROT_NONE */
    char *host;                        /* the same bytes, for the stand-in's own work */
    size_t size;
    int fd; /* -1 for an opened mapping: the mapping alone keeps it */
    int device;
    enum origin origin;
    ino_t ino;
};

/* A point in a stream's work: done once the stream has run seq items. */
struct point {
    struct CUstream_st *stream;
    uint64_t seq;
};

/* ---- cudart.c ------------------------------------------------------------ */

/* Guards the allocations (cudamem.c) and the devices' peer access. The
 * queue lock (cudart.c's: streams and their work) is taken before it,
 * never after: queued work, run under the queue lock, finds its memory
 * under this one. */
extern pthread_mutex_t standin__lock;

/* The calling thread's current device (cudaSetDevice), as in the real
 * runtime. */
extern _Thread_local int standin__current_device;

/* Records a failure for cudaGetLastError, and returns err: every API call
 * returns through it. */
cudaError_t standin__note(cudaError_t err);

/* The environment variable name as a number >= 0, read at each call so
 * that a test can setenv it; fallback when it is unset, empty or not one. */
long standin__env_long(const char *name, long fallback);

/* The stream a handle names, the default ones being device's legacy
 * stream (made at first use); after checking the handle and the device. */
cudaError_t standin__resolve(cudaStream_t stream, int device, struct CUstream_st **out);

/* Queues fn(arg) on s, to run after s's earlier work, the nafter points in
 * after[], and what the legacy stream's rule adds (fn NULL: an item that
 * only waits). cudaErrorMemoryAllocation when out of memory, nothing
 * queued. */
cudaError_t standin__enqueue(struct CUstream_st *s, void (*fn)(void *), void *arg,
                             const struct point *after, int nafter);

/* Runs everything queued on s so far, and what it waits for. */
void standin__finish_stream(struct CUstream_st *s);

/* Runs everything queued on device's streams (every device's: -1). */
void standin__finish_device(int device);

/* ---- cudamem.c ----------------------------------------------------------- */

/* The allocation (made or opened) that contains ptr, or NULL. Called
 * under standin__lock. */
struct alloc *standin__find_locked(const void *ptr);

#endif
