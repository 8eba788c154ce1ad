/*
 * cuda.h - the CUDA runtime, loaded with dlopen at first use so that one
 * build runs on machines without a GPU, a driver or the toolkit: a device
 * array there fails with KVS_EDEVICE and the reason.
 *
 * KVS_CUDART names the library to load (a path or a soname); the default
 * is libcudart.so.13. The library is loaded, its entry points looked up
 * and its devices counted once per process; the outcome, good or bad, is
 * kept.
 */
#ifndef KVS_CUDA_H
#define KVS_CUDA_H

#include <stddef.h>

#include "base/error.h"

#define KVS__CUDART_DEFAULT "libcudart.so.13"

/* The values of the runtime's enums and flags that libkvs passes, as
 * driver_types.h defines them. */
enum {
    KVS__CUDA_SUCCESS = 0,
    KVS__CUDA_NOT_READY = 600,         /* cudaErrorNotReady: work still queued */
    KVS__CUDA_MEMCPY_DEFAULT = 4,      /* cudaMemcpyDefault: direction from the pointers */
    KVS__CUDA_MEMORY_DEVICE = 2,       /* cudaMemoryTypeDevice */
    KVS__CUDA_EVENT_NO_TIMING = 2,     /* cudaEventDisableTiming */
    KVS__CUDA_IPC_LAZY_PEER = 1,       /* cudaIpcMemLazyEnablePeerAccess */
    KVS__CUDA_SRC_ACCESS_STREAM = 1,   /* cudaMemcpySrcAccessOrderStream */
    KVS__CUDA_BATCH_VERSION = 13000,   /* the runtime whose cudaMemcpyBatchAsync is called */
};

/* struct cudaMemcpyAttributes, as CUDA 13's cudaMemcpyBatchAsync takes it. */
struct kvs__cuda_memcpy_attr {
    int src_access_order;
    struct { int type, id; } src_loc_hint, dst_loc_hint;
    unsigned flags;
};

/* struct cudaPointerAttributes, as the runtime fills it. */
struct kvs__cuda_ptr_attr {
    int type;
    int device;
    void *device_pointer;
    void *host_pointer;
    long reserved[8];
};

/* cudaIpcMemHandle_t: 64 opaque bytes, passed by value. */
#define KVS__CUDA_IPC_HANDLE_BYTES 64
struct kvs__cuda_ipc_handle {
    unsigned char bytes[KVS__CUDA_IPC_HANDLE_BYTES];
};

/* The runtime's entry points libkvs calls (cudaError_t is an int here,
 * streams and events opaque pointers), and what the library is. */
struct kvs__cudart {
    int (*get_device)(int *device);
    int (*set_device)(int device);
    int (*malloc)(void **ptr, size_t bytes);
    int (*free)(void *ptr);
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, int kind, void *stream);
    int (*memset_async)(void *ptr, int value, size_t bytes, void *stream);
    int (*pointer_attributes)(struct kvs__cuda_ptr_attr *attr, const void *ptr);
    int (*stream_create)(void **stream, unsigned flags);
    int (*stream_query)(void *stream);
    int (*event_create)(void **event, unsigned flags);
    int (*event_record)(void *event, void *stream);
    int (*stream_wait_event)(void *stream, void *event, unsigned flags);
    int (*can_access_peer)(int *can, int device, int peer);
    int (*enable_peer_access)(int peer, unsigned flags);
    const char *(*error_string)(int err);
    int (*ipc_get_mem_handle)(struct kvs__cuda_ipc_handle *handle, void *base);
    int (*ipc_open_mem_handle)(void **base, struct kvs__cuda_ipc_handle handle, unsigned flags);
    int (*ipc_close_mem_handle)(void *base);
    /* The driver's cuMemGetAddressRange (CUresult an int, CUdeviceptr a
     * 64-bit integer), found through cudaGetDriverEntryPointByVersion; NULL
     * when the driver does not give it. */
    int (*mem_range)(unsigned long long *base, size_t *size, unsigned long long ptr);
    /* cudaMemcpyBatchAsync with CUDA 13's signature; NULL when the runtime
     * is older (12.8's takes another argument) or does not have it. */
    int (*memcpy_batch_async)(void *const *dsts, const void *const *srcs, const size_t *sizes,
                              size_t count, struct kvs__cuda_memcpy_attr *attrs,
                              size_t *attrs_idxs, size_t nattrs, void *stream);
    const char *path;                  /* the library loaded */
    int ndev;
};

/* The loaded runtime, or NULL with KVS_EDEVICE and why there is none
 * ("no CUDA runtime: libcudart.so.13 cannot be loaded (...)", "no CUDA
 * driver (...)", "no CUDA device (...)"). */
const struct kvs__cudart *kvs__cudart(struct kvs__err *e);

/* The number of CUDA devices this process sees: > 0, or KVS_EDEVICE with
 * why there are none. */
int kvs__cuda_devices(struct kvs__err *e);

/* 0 when CUDA device i exists, else KVS_EDEVICE naming what there is. */
int kvs__cuda_device(int i, struct kvs__err *e);

#endif
