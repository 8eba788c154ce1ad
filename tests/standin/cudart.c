/*
 * cudart.c - the CUDA runtime half of the stand-in: the part of the
 * runtime API that libkvs calls, over host memory, so that the GPU path
 * runs its tests on machines without a GPU or a driver.
 *
 * Devices are numbers: KVS_STANDIN_DEVICES of them (default 2, at most 64;
 * 0 makes every call fail with cudaErrorNoDevice). The current device is
 * per thread, as in the real runtime.
 *
 * Device memory is host memory: each cudaMalloc is a memfd mapped shared,
 * so that an IPC handle (owner pid, descriptor, inode, size, device) can
 * be opened by another process of the same user through
 * /proc/<pid>/fd/<fd>. That path rather than pidfd_getfd(), because the
 * latter needs ptrace rights that Yama refuses between sibling processes.
 * The inode in the handle tells a stale handle (descriptor closed or
 * reused) from a live one. A handle is made of an allocation's base
 * pointer only, and cannot be opened in the process that made it, as with
 * the real runtime; each open makes a new mapping. Of the driver API,
 * cudaGetDriverEntryPointByVersion gives cuMemGetAddressRange, which finds
 * the allocation (made or opened) that holds a pointer.
 *
 * Copies are checked as a driver would fault: a device side must lie
 * inside one allocation, a host side outside all of them, so a wrong
 * cudaMemcpyKind or an overrun fails with cudaErrorInvalidValue.
 *
 * Ordering: every operation runs to completion when it is enqueued, so
 * stream order holds trivially, events are complete once recorded and
 * every query says done. This does not catch a caller that forgets to
 * synchronize.
 *
 * Injected failures, read at each call so that a test can setenv them:
 *   KVS_STANDIN_FAIL_MALLOC=N    the Nth cudaMalloc fails with
 *                                cudaErrorMemoryAllocation, counting from
 *                                the first call that saw this value (a
 *                                call that sees another value, or none,
 *                                starts the count again); "all" fails every
 *                                call.
 *   KVS_STANDIN_FAIL_IPC_OPEN=1  cudaIpcOpenMemHandle fails with
 *                                cudaErrorMapBufferObjectFailed.
 *   KVS_STANDIN_LOST_DEVICE=i    device i is still counted, but every call
 *                                on it fails with cudaErrorDevicesUnavailable
 *                                (cudaFree still releases the memory).
 *   KVS_STANDIN_BUSY_STREAMS=1   cudaStreamQuery says cudaErrorNotReady for
 *                                every stream: work that never finishes.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

int kvs_standin = 1;

#define MAX_DEVICES 64
#define STREAM_MAGIC 0x4b56535354524d31ull /* "KVSSTRM1" */
#define EVENT_MAGIC 0x4b56534556454e31ull  /* "KVSEVEN1" */
#define IPC_MAGIC 0x4b565349u              /* "KVSI" */

#define ERRORS(X)                                                                         \
    X(cudaSuccess, "no error")                                                            \
    X(cudaErrorInvalidValue, "invalid argument")                                          \
    X(cudaErrorMemoryAllocation, "out of memory")                                         \
    X(cudaErrorInvalidDevice, "invalid device ordinal")                                   \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")               \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected")                            \
    X(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable")   \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle")                          \
    X(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed")                  \
    X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                \
    X(cudaErrorNotReady, "device not ready")

enum origin { MADE, OPENED };

/* One device allocation: made here (and owning its memfd) or mapped from
 * another process's IPC handle. */
struct alloc {
    struct alloc *next;
    char *base;
    size_t size;
    int fd; /* -1 for an opened mapping: the mapping alone keeps it */
    int device;
    enum origin origin;
    ino_t ino;
};

struct CUstream_st {
    uint64_t magic;
    int device;
};

struct CUevent_st {
    uint64_t magic;
    int device;
    unsigned flags;
    int recorded;
    struct timespec at;
};

/* What an IPC handle carries; the rest of its 64 bytes is zero. */
struct ipc_handle {
    uint32_t magic;
    int32_t pid, fd, device;
    uint64_t size, ino;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(cudaIpcMemHandle_t), "IPC handle too small");

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *allocs;                /* under lock */
static uint64_t peer_enabled[MAX_DEVICES];  /* under lock: bit p of [d] */
static _Thread_local int current_device;
static _Thread_local cudaError_t last_error;

/* Records a failure for cudaGetLastError; every API call returns through it. */
static cudaError_t note(cudaError_t err)
{
    if (err != cudaSuccess)
        last_error = err;
    return err;
}

static long env_long(const char *name, long fallback)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (!s || !*s)
        return fallback;
    v = strtol(s, &end, 10);
    return *end || v < 0 ? fallback : v;
}

static int device_count(void)
{
    long n = env_long("KVS_STANDIN_DEVICES", 2);

    return n > MAX_DEVICES ? MAX_DEVICES : (int)n;
}

cudaError_t standin__check_device(int device)
{
    int n = device_count();

    if (n == 0)
        return cudaErrorNoDevice;
    if (device < 0 || device >= n)
        return cudaErrorInvalidDevice;
    if (env_long("KVS_STANDIN_LOST_DEVICE", -1) == device)
        return cudaErrorDevicesUnavailable;
    return cudaSuccess;
}

/* ---- errors and versions ---------------------------------------------- */

const char *cudaGetErrorString(cudaError_t error)
{
#define STRING(code, text)                                                                \
    case code:                                                                            \
        return text;
    switch (error) {
        ERRORS(STRING)
    default:
        return "unrecognized error code";
    }
#undef STRING
}

const char *cudaGetErrorName(cudaError_t error)
{
#define NAME(code, text)                                                                  \
    case code:                                                                            \
        return #code;
    switch (error) {
        ERRORS(NAME)
    default:
        return "unrecognized error code";
    }
#undef NAME
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t err = last_error;

    last_error = cudaSuccess;
    return err;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

cudaError_t cudaDriverGetVersion(int *version)
{
    if (!version)
        return note(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (!version)
        return note(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

/* ---- devices ------------------------------------------------------------ */

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return note(cudaErrorInvalidValue);
    *count = device_count();
    return note(*count ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    cudaError_t err = standin__check_device(device);

    if (err == cudaSuccess)
        current_device = device;
    return note(err);
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return note(cudaErrorInvalidValue);
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    return note(standin__check_device(current_device));
}

cudaError_t cudaDeviceCanAccessPeer(int *can_access, int device, int peer)
{
    cudaError_t err = standin__check_device(device);

    if (err == cudaSuccess)
        err = standin__check_device(peer);
    if (err == cudaSuccess && !can_access)
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess)
        *can_access = device != peer;
    return note(err);
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    int self = current_device;
    cudaError_t err = standin__check_device(self);

    if (err == cudaSuccess)
        err = standin__check_device(peer);
    if (err == cudaSuccess && flags != 0)
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess && peer == self)
        err = cudaErrorInvalidDevice;
    if (err != cudaSuccess)
        return note(err);
    pthread_mutex_lock(&lock);
    if (peer_enabled[self] >> peer & 1)
        err = cudaErrorPeerAccessAlreadyEnabled;
    peer_enabled[self] |= 1ull << peer;
    pthread_mutex_unlock(&lock);
    return note(err);
}

/* ---- allocations -------------------------------------------------------- */

/* The allocation that contains ptr, or NULL. Called under lock. */
static struct alloc *find_locked(const void *ptr)
{
    const char *p = ptr;

    for (struct alloc *a = allocs; a; a = a->next)
        if (p >= a->base && p < a->base + a->size)
            return a;
    return NULL;
}

/* Unlinks the allocation of that origin starting exactly at ptr. */
static struct alloc *take(const void *ptr, enum origin origin)
{
    struct alloc **link, *a = NULL;

    pthread_mutex_lock(&lock);
    for (link = &allocs; *link; link = &(*link)->next) {
        if ((*link)->base == ptr && (*link)->origin == origin) {
            a = *link;
            *link = a->next;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return a;
}

static void add(struct alloc *a)
{
    pthread_mutex_lock(&lock);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&lock);
}

int standin__device_range(const void *ptr, size_t bytes, int *device)
{
    struct alloc *a;
    int inside = 0;

    pthread_mutex_lock(&lock);
    a = find_locked(ptr);
    if (a && bytes <= (size_t)(a->base + a->size - (const char *)ptr)) {
        *device = a->device;
        inside = 1;
    }
    pthread_mutex_unlock(&lock);
    return inside;
}

/* Whether this cudaMalloc is the one KVS_STANDIN_FAIL_MALLOC names. */
static int malloc_fails(void)
{
    static char seen[32];     /* under lock: the value being counted */
    static unsigned long calls;
    const char *v = getenv("KVS_STANDIN_FAIL_MALLOC");
    int fails;

    if (v && strcmp(v, "all") == 0)
        return 1;
    pthread_mutex_lock(&lock);
    if (!v || strncmp(seen, v, sizeof seen) != 0) {
        snprintf(seen, sizeof seen, "%s", v ? v : "");
        calls = 0;
    }
    fails = v && ++calls == strtoul(v, NULL, 10);
    pthread_mutex_unlock(&lock);
    return fails;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    struct alloc *a;
    struct stat st;
    cudaError_t err;

    if (!ptr)
        return note(cudaErrorInvalidValue);
    err = standin__check_device(current_device);
    if (err != cudaSuccess)
        return note(err);
    if (malloc_fails())
        return note(cudaErrorMemoryAllocation);
    *ptr = NULL;
    if (size == 0)
        return cudaSuccess;
    a = calloc(1, sizeof *a);
    if (!a)
        return note(cudaErrorMemoryAllocation);
    a->fd = memfd_create("kvs-standin", MFD_CLOEXEC);
    if (a->fd < 0)
        goto fail_free;
    if (ftruncate(a->fd, (off_t)size) != 0 || fstat(a->fd, &st) != 0)
        goto fail_close;
    a->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (a->base == MAP_FAILED)
        goto fail_close;
    a->size = size;
    a->device = current_device;
    a->origin = MADE;
    a->ino = st.st_ino;
    add(a);
    *ptr = a->base;
    return cudaSuccess;

fail_close:
    close(a->fd);
fail_free:
    free(a);
    return note(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void *ptr)
{
    struct alloc *a;
    cudaError_t err;

    if (!ptr)
        return cudaSuccess;
    a = take(ptr, MADE);
    if (!a)
        return note(cudaErrorInvalidValue);
    err = standin__check_device(a->device);
    munmap(a->base, a->size);
    close(a->fd);
    free(a);
    /* The memory is released all the same: a test of a lost device must
     * not leak. Only the loss itself is reported. */
    return note(err == cudaErrorDevicesUnavailable ? err : cudaSuccess);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr)
{
    int device;

    if (!attr)
        return note(cudaErrorInvalidValue);
    memset(attr, 0, sizeof *attr);
    if (standin__device_range(ptr, 0, &device)) {
        attr->type = cudaMemoryTypeDevice;
        attr->device = device;
        attr->devicePointer = (void *)ptr;
    } else {
        attr->type = cudaMemoryTypeUnregistered;
        attr->device = cudaInvalidDeviceId;
    }
    return cudaSuccess;
}

/* ---- copies ------------------------------------------------------------- */

enum side { HOST, DEVICE, EITHER };

/* Whether [ptr, ptr + bytes) may be the given side of a copy. */
static cudaError_t check_side(const void *ptr, size_t bytes, enum side want)
{
    struct alloc *a;
    int device = -1;
    int ok;

    pthread_mutex_lock(&lock);
    a = find_locked(ptr);
    if (a) {
        ok = want != HOST && bytes <= (size_t)(a->base + a->size - (const char *)ptr);
        device = a->device;
    } else {
        ok = want != DEVICE && ptr;
    }
    pthread_mutex_unlock(&lock);
    if (!ok)
        return cudaErrorInvalidValue;
    return device < 0 ? cudaSuccess : standin__check_device(device);
}

static cudaError_t copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    static const enum side sides[][2] = {
        [cudaMemcpyHostToHost] = {HOST, HOST},
        [cudaMemcpyHostToDevice] = {DEVICE, HOST},
        [cudaMemcpyDeviceToHost] = {HOST, DEVICE},
        [cudaMemcpyDeviceToDevice] = {DEVICE, DEVICE},
        [cudaMemcpyDefault] = {EITHER, EITHER},
    };
    cudaError_t err;

    if ((unsigned)kind >= sizeof sides / sizeof sides[0])
        return cudaErrorInvalidMemcpyDirection;
    if (count == 0)
        return cudaSuccess;
    err = check_side(dst, count, sides[kind][0]);
    if (err == cudaSuccess)
        err = check_side(src, count, sides[kind][1]);
    if (err == cudaSuccess)
        memcpy(dst, src, count);
    return err;
}

static cudaError_t fill(void *ptr, int value, size_t count)
{
    cudaError_t err = count ? check_side(ptr, count, DEVICE) : cudaSuccess;

    if (err == cudaSuccess)
        memset(ptr, value, count);
    return err;
}

/* The device a stream belongs to, after checking the stream and device. */
static cudaError_t stream_device(cudaStream_t stream, int *device)
{
    if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        *device = current_device;
    else if (stream->magic == STREAM_MAGIC)
        *device = stream->device;
    else
        return cudaErrorInvalidResourceHandle;
    return standin__check_device(*device);
}

static cudaError_t check_stream(cudaStream_t stream)
{
    int device;

    return stream_device(stream, &device);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return note(copy(dst, src, count, kind));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream)
{
    cudaError_t err = check_stream(stream);

    return note(err == cudaSuccess ? copy(dst, src, count, kind) : err);
}

static cudaError_t copy_peer(void *dst, int dst_device, const void *src, int src_device,
                             size_t count)
{
    cudaError_t err = standin__check_device(dst_device);

    if (err == cudaSuccess)
        err = standin__check_device(src_device);
    return err == cudaSuccess ? copy(dst, src, count, cudaMemcpyDeviceToDevice) : err;
}

cudaError_t cudaMemcpyPeer(void *dst, int dst_device, const void *src, int src_device,
                           size_t count)
{
    return note(copy_peer(dst, dst_device, src, src_device, count));
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device,
                                size_t count, cudaStream_t stream)
{
    cudaError_t err = check_stream(stream);

    return note(err == cudaSuccess ? copy_peer(dst, dst_device, src, src_device, count) : err);
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
    return note(fill(ptr, value, count));
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    cudaError_t err = check_stream(stream);

    return note(err == cudaSuccess ? fill(ptr, value, count) : err);
}

/* ---- streams and events -------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    cudaError_t err = standin__check_device(current_device);
    struct CUstream_st *s;

    if (err == cudaSuccess && (!stream || flags & ~cudaStreamNonBlocking))
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess)
        return note(err);
    s = calloc(1, sizeof *s);
    if (!s)
        return note(cudaErrorMemoryAllocation);
    s->magic = STREAM_MAGIC;
    s->device = current_device;
    *stream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    int device;
    cudaError_t err = stream_device(stream, &device);

    if (err == cudaSuccess && (stream == NULL || stream == cudaStreamLegacy ||
                               stream == cudaStreamPerThread))
        err = cudaErrorInvalidResourceHandle;
    if (err != cudaSuccess)
        return note(err);
    stream->magic = 0;
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    return note(check_stream(stream));
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    cudaError_t err = check_stream(stream);

    if (err == cudaSuccess && env_long("KVS_STANDIN_BUSY_STREAMS", 0) == 1)
        return cudaErrorNotReady;      /* not an error: not noted as the last one */
    return note(err);
}

static cudaError_t check_event(cudaEvent_t event)
{
    if (!event || event->magic != EVENT_MAGIC)
        return cudaErrorInvalidResourceHandle;
    return standin__check_device(event->device);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    cudaError_t err = check_stream(stream);

    if (err == cudaSuccess)
        err = check_event(event);
    return note(err);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    cudaError_t err = standin__check_device(current_device);
    struct CUevent_st *e;

    if (err == cudaSuccess && (!event || flags & ~known))
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess && flags & cudaEventInterprocess && !(flags & cudaEventDisableTiming))
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess)
        return note(err);
    e = calloc(1, sizeof *e);
    if (!e)
        return note(cudaErrorMemoryAllocation);
    e->magic = EVENT_MAGIC;
    e->device = current_device;
    e->flags = flags;
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    int device;
    cudaError_t err = check_event(event);

    if (err == cudaSuccess)
        err = stream_device(stream, &device);
    /* The real runtime refuses to record an event into another device's stream. */
    if (err == cudaSuccess && device != event->device)
        err = cudaErrorInvalidResourceHandle;
    if (err != cudaSuccess)
        return note(err);
    clock_gettime(CLOCK_MONOTONIC, &event->at);
    event->recorded = 1;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    return note(check_event(event));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    return note(check_event(event));
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    cudaError_t err = check_event(start);

    if (err == cudaSuccess)
        err = check_event(end);
    if (err == cudaSuccess && !ms)
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess && (!start->recorded || !end->recorded ||
                               (start->flags | end->flags) & cudaEventDisableTiming))
        err = cudaErrorInvalidResourceHandle;
    if (err != cudaSuccess)
        return note(err);
    *ms = (float)((double)(end->at.tv_sec - start->at.tv_sec) * 1e3 +
                  (double)(end->at.tv_nsec - start->at.tv_nsec) / 1e6);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    cudaError_t err = check_event(event);

    if (err != cudaSuccess)
        return note(err);
    event->magic = 0;
    free(event);
    return cudaSuccess;
}

/* ---- driver entry points ------------------------------------------------ */

/* The driver API's types and codes, as cuda.h has them (that header's
 * name is libkvs's own loader's too, so it is not included here). */
typedef int drv_result;                     /* CUresult */
typedef unsigned long long drv_ptr;         /* CUdeviceptr */
enum { DRV_SUCCESS = 0, DRV_NOT_FOUND = 500 };

/* cuMemGetAddressRange (_v2): the allocation, made here or opened, that
 * holds ptr. */
static drv_result mem_get_address_range(drv_ptr *base, size_t *size, drv_ptr ptr)
{
    struct alloc *a;
    drv_result rc = DRV_NOT_FOUND;

    pthread_mutex_lock(&lock);
    if ((a = find_locked((const void *)(uintptr_t)ptr)) != NULL) {
        if (base)
            *base = (drv_ptr)(uintptr_t)a->base;
        if (size)
            *size = a->size;
        rc = DRV_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The driver functions the stand-in has: cuMemGetAddressRange alone. */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                             unsigned int version, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    (void)flags;
    if (!symbol || !fn)
        return note(cudaErrorInvalidValue);
    *fn = NULL;
    if (strcmp(symbol, "cuMemGetAddressRange") == 0 && version >= 3020)
        *(drv_result (**)(drv_ptr *, size_t *, drv_ptr))fn = mem_get_address_range;
    if (status)
        *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

/* ---- IPC ---------------------------------------------------------------- */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *ptr)
{
    struct ipc_handle h = {.magic = IPC_MAGIC, .pid = getpid()};
    struct alloc *a;
    int found;

    if (!handle)
        return note(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    a = find_locked(ptr);
    found = a && a->origin == MADE && a->base == ptr;   /* the runtime takes a base */
    if (found) {
        h.fd = a->fd;
        h.device = a->device;
        h.size = a->size;
        h.ino = a->ino;
    }
    pthread_mutex_unlock(&lock);
    if (!found)
        return note(cudaErrorInvalidValue);
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &h, sizeof h);
    return note(standin__check_device(h.device));
}

/* The owner's memfd behind a handle, checked to be the allocation the
 * handle was made for, or -1. */
static int open_owner_fd(const struct ipc_handle *h)
{
    char path[64];
    struct stat st;
    int fd;

    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || st.st_ino != h->ino || (uint64_t)st.st_size != h->size) {
        close(fd);
        return -1;
    }
    return fd;
}

cudaError_t cudaIpcOpenMemHandle(void **ptr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    struct ipc_handle h;
    struct alloc *a;
    cudaError_t err = standin__check_device(current_device);
    int fd;

    memcpy(&h, handle.reserved, sizeof h);
    if (err == cudaSuccess && (!ptr || flags & ~cudaIpcMemLazyEnablePeerAccess))
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess && (h.magic != IPC_MAGIC || h.pid == getpid() || h.size == 0 ||
                               h.size > SIZE_MAX))
        err = cudaErrorInvalidResourceHandle;
    if (err == cudaSuccess)
        err = standin__check_device(h.device);
    if (err == cudaSuccess && env_long("KVS_STANDIN_FAIL_IPC_OPEN", 0) != 0)
        err = cudaErrorMapBufferObjectFailed;
    if (err != cudaSuccess)
        return note(err);
    fd = open_owner_fd(&h);
    if (fd < 0)
        return note(cudaErrorInvalidResourceHandle);
    a = calloc(1, sizeof *a);
    if (!a)
        goto fail_close;
    a->base = mmap(NULL, (size_t)h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->base == MAP_FAILED)
        goto fail_free;
    close(fd);
    a->size = (size_t)h.size;
    a->fd = -1;
    a->device = h.device;
    a->origin = OPENED;
    a->ino = (ino_t)h.ino;
    add(a);
    *ptr = a->base;
    return cudaSuccess;

fail_free:
    free(a);
fail_close:
    close(fd);
    return note(cudaErrorMapBufferObjectFailed);
}

cudaError_t cudaIpcCloseMemHandle(void *ptr)
{
    struct alloc *a = take(ptr, OPENED);

    if (!a)
        return note(cudaErrorInvalidValue);
    munmap(a->base, a->size);
    free(a);
    return cudaSuccess;
}
