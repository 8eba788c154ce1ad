/*
 * cudamem.c - device memory of the stand-in's CUDA runtime half:
 * allocations, copies and fills, and IPC handles. The rest of the runtime
 * (errors, devices, the queued work that copies and fills join, streams
 * and events, driver entry points) is in cudart.c; what the two files
 * share, in cudart_int.h.
 *
 * Device memory is not host memory a caller can read. Each cudaMalloc is
 * a memfd mapped twice: PROT_NONE at the address handed out, so that the
 * CPU faults on a device pointer as it would on a GPU's, and read-write
 * at a second address that only the stand-in's own work uses (copies,
 * fills, NCCL collectives, and host functions that ask kvs_standin_host
 * for it). An IPC handle (owner pid, descriptor, inode, size, device) is
 * opened by another process of the same user through /proc/<pid>/fd/<fd>,
 * mapped the same two ways. That path rather than pidfd_getfd(), because
 * the latter needs ptrace rights that Yama refuses between sibling
 * processes. The inode in the handle tells a stale handle (descriptor
 * closed or reused) from a live one. A handle is made of an allocation's
 * base pointer only, and cannot be opened in the process that made it, as
 * with the real runtime.
 *
 * Copies are checked as a driver would fault: a device side must lie
 * inside one allocation, a host side outside all of them, so a wrong
 * cudaMemcpyKind or an overrun fails with cudaErrorInvalidValue.
 * Copies between host and device are counted, bytes and calls each way
 * (kvs_standin_copied; a cudaMemcpyBatchAsync is one call), so that a
 * test can check what a call moved. Copies and fills are queued work on
 * their stream: cudart.c says when it runs.
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
 *   KVS_STANDIN_NO_BATCH=1       cudaMemcpyBatchAsync fails with
 *                                cudaErrorNotSupported, as a driver without
 *                                batched copies does.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cudart_int.h"

#define IPC_MAGIC 0x4b565349u /* "KVSI" */

/* What an IPC handle carries; the rest of its 64 bytes is zero. */
struct ipc_handle {
    uint32_t magic;
    int32_t pid, fd, device;
    uint64_t size, ino;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(cudaIpcMemHandle_t), "IPC handle too small");

/* ---- allocations -------------------------------------------------------- */

static struct alloc *allocs; /* under standin__lock */

struct alloc *standin__find_locked(const void *ptr)
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

    pthread_mutex_lock(&standin__lock);
    for (link = &allocs; *link; link = &(*link)->next) {
        if ((*link)->base == ptr && (*link)->origin == origin) {
            a = *link;
            *link = a->next;
            break;
        }
    }
    pthread_mutex_unlock(&standin__lock);
    return a;
}

static void add(struct alloc *a)
{
    pthread_mutex_lock(&standin__lock);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&standin__lock);
}

int standin__device_range(const void *ptr, size_t bytes, int *device)
{
    struct alloc *a;
    int inside = 0;

    pthread_mutex_lock(&standin__lock);
    a = standin__find_locked(ptr);
    if (a && bytes <= (size_t)(a->base + a->size - (const char *)ptr)) {
        *device = a->device;
        inside = 1;
    }
    pthread_mutex_unlock(&standin__lock);
    return inside;
}

void *kvs_standin_host(const void *ptr, size_t bytes)
{
    struct alloc *a;
    char *host = NULL;

    pthread_mutex_lock(&standin__lock);
    a = standin__find_locked(ptr);
    if (a && bytes <= (size_t)(a->base + a->size - (const char *)ptr))
        host = a->host + ((const char *)ptr - a->base);
    pthread_mutex_unlock(&standin__lock);
    return host;
}

/* Where the stand-in's own work reaches [ptr, ptr + bytes): the second
 * mapping of device memory, host memory as it is. */
static void *reach(const void *ptr, size_t bytes)
{
    void *host = kvs_standin_host(ptr, bytes);

    return host ? host : (void *)ptr;
}

/* Maps memfd fd of size bytes as a's device address and its own mapping. */
static int map_twice(struct alloc *a, int fd, size_t size)
{
    a->base = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
    if (a->base == MAP_FAILED)
        return -1;
    a->host = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->host == MAP_FAILED) {
        munmap(a->base, size);
        return -1;
    }
    a->size = size;
    return 0;
}

static void unmap(struct alloc *a)
{
    munmap(a->base, a->size);
    munmap(a->host, a->size);
}

/* Whether this cudaMalloc is the one KVS_STANDIN_FAIL_MALLOC names. */
static int malloc_fails(void)
{
    static char seen[32];     /* under standin__lock: the value being counted */
    static unsigned long calls;
    const char *v = getenv("KVS_STANDIN_FAIL_MALLOC");
    int fails;

    if (v && strcmp(v, "all") == 0)
        return 1;
    pthread_mutex_lock(&standin__lock);
    if (!v || strncmp(seen, v, sizeof seen) != 0) {
        snprintf(seen, sizeof seen, "%s", v ? v : "");
        calls = 0;
    }
    fails = v && ++calls == strtoul(v, NULL, 10);
    pthread_mutex_unlock(&standin__lock);
    return fails;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    struct alloc *a;
    struct stat st;
    cudaError_t err;

    if (!ptr)
        return standin__note(cudaErrorInvalidValue);
    err = standin__check_device(standin__current_device);
    if (err != cudaSuccess)
        return standin__note(err);
    if (malloc_fails())
        return standin__note(cudaErrorMemoryAllocation);
    *ptr = NULL;
    if (size == 0)
        return cudaSuccess;
    a = calloc(1, sizeof *a);
    if (!a)
        return standin__note(cudaErrorMemoryAllocation);
    a->fd = memfd_create("kvs-standin", MFD_CLOEXEC);
    if (a->fd < 0)
        goto fail_free;
    if (ftruncate(a->fd, (off_t)size) != 0 || fstat(a->fd, &st) != 0
        || map_twice(a, a->fd, size) != 0)
        goto fail_close;
    a->device = standin__current_device;
    a->origin = MADE;
    a->ino = st.st_ino;
    add(a);
    *ptr = a->base;
    return cudaSuccess;

fail_close:
    close(a->fd);
fail_free:
    free(a);
    return standin__note(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void *ptr)
{
    struct alloc *a;
    cudaError_t err;

    if (!ptr)
        return cudaSuccess;
    /* As the real one, it waits for the device: no queued work is left to
     * touch the memory. */
    standin__finish_device(-1);
    a = take(ptr, MADE);
    if (!a)
        return standin__note(cudaErrorInvalidValue);
    err = standin__check_device(a->device);
    unmap(a);
    close(a->fd);
    free(a);
    /* The memory is released all the same: a test of a lost device must
     * not leak. Only the loss itself is reported. */
    return standin__note(err == cudaErrorDevicesUnavailable ? err : cudaSuccess);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr)
{
    int device;

    if (!attr)
        return standin__note(cudaErrorInvalidValue);
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

    pthread_mutex_lock(&standin__lock);
    a = standin__find_locked(ptr);
    if (a) {
        ok = want != HOST && bytes <= (size_t)(a->base + a->size - (const char *)ptr);
        device = a->device;
    } else {
        ok = want != DEVICE && ptr;
    }
    pthread_mutex_unlock(&standin__lock);
    if (!ok)
        return cudaErrorInvalidValue;
    return device < 0 ? cudaSuccess : standin__check_device(device);
}

/* A copy or a fill, queued. */
struct move {
    void *dst;
    const void *src;                   /* NULL: fill with value */
    int value;
    size_t count;
};

static void move_run(void *arg)
{
    struct move *m = arg;

    if (m->src)
        memcpy(reach(m->dst, m->count), reach(m->src, m->count), m->count);
    else
        memset(reach(m->dst, m->count), m->value, m->count);
    free(m);
}

/* The device whose legacy stream a synchronous call on these pointers
 * uses: the device memory's (the destination's first), else the current
 * device. */
static int sync_device(const void *dst, const void *src, size_t count)
{
    int device;

    if (standin__device_range(dst, count, &device)
        || (src && standin__device_range(src, count, &device)))
        return device;
    return standin__current_device;
}

/* Queues the move on s; with wait, runs s's work up to it. */
static cudaError_t queue_move(struct CUstream_st *s, void *dst, const void *src, int value,
                              size_t count, int wait)
{
    struct move *m = malloc(sizeof *m);
    cudaError_t err;

    if (!m)
        return cudaErrorMemoryAllocation;
    *m = (struct move){ dst, src, value, count };
    if ((err = standin__enqueue(s, move_run, m, NULL, 0)) != cudaSuccess) {
        free(m);
        return err;
    }
    if (wait)
        standin__finish_stream(s);
    return cudaSuccess;
}

/* Bytes and copies between host and device memory (kvs_standin_copied). */
static unsigned long long copied[4];

void kvs_standin_copied(unsigned long long out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = __atomic_load_n(&copied[i], __ATOMIC_RELAXED);
}

/* Counts a checked copy that crosses between host and device, as calls
 * more calls (0 for all but one copy of a batch). */
static void count_copy(void *dst, const void *src, size_t count, int calls)
{
    int dev, to_dev = standin__device_range(dst, count, &dev);
    int from_dev = standin__device_range(src, count, &dev);

    if (to_dev == from_dev)
        return;
    __atomic_add_fetch(&copied[to_dev ? 0 : 1], count, __ATOMIC_RELAXED);
    __atomic_add_fetch(&copied[to_dev ? 2 : 3], calls, __ATOMIC_RELAXED);
}

static cudaError_t copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                        cudaStream_t stream, int wait)
{
    static const enum side sides[][2] = {
        [cudaMemcpyHostToHost] = {HOST, HOST},
        [cudaMemcpyHostToDevice] = {DEVICE, HOST},
        [cudaMemcpyDeviceToHost] = {HOST, DEVICE},
        [cudaMemcpyDeviceToDevice] = {DEVICE, DEVICE},
        [cudaMemcpyDefault] = {EITHER, EITHER},
    };
    struct CUstream_st *s;
    int device = wait ? sync_device(dst, src, count) : standin__current_device;
    cudaError_t err = standin__resolve(stream, device, &s);

    if (err != cudaSuccess)
        return err;
    if ((unsigned)kind >= sizeof sides / sizeof sides[0])
        return cudaErrorInvalidMemcpyDirection;
    if (count == 0)
        return cudaSuccess;
    err = check_side(dst, count, sides[kind][0]);
    if (err == cudaSuccess)
        err = check_side(src, count, sides[kind][1]);
    if (err == cudaSuccess)
        count_copy(dst, src, count, 1);
    return err == cudaSuccess ? queue_move(s, dst, src, 0, count, wait) : err;
}

static cudaError_t fill(void *ptr, int value, size_t count, cudaStream_t stream, int wait)
{
    struct CUstream_st *s;
    int device = wait ? sync_device(ptr, NULL, count) : standin__current_device;
    cudaError_t err = standin__resolve(stream, device, &s);

    if (err == cudaSuccess && count)
        err = check_side(ptr, count, DEVICE);
    return err == cudaSuccess && count ? queue_move(s, ptr, NULL, value, count, wait) : err;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return standin__note(copy(dst, src, count, kind, NULL, 1));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return standin__note(copy(dst, src, count, kind, stream, 0));
}

static cudaError_t copy_peer(void *dst, int dst_device, const void *src, int src_device,
                             size_t count, cudaStream_t stream, int wait)
{
    cudaError_t err = standin__check_device(dst_device);

    if (err == cudaSuccess)
        err = standin__check_device(src_device);
    return err == cudaSuccess ? copy(dst, src, count, cudaMemcpyDeviceToDevice, stream, wait)
                              : err;
}

cudaError_t cudaMemcpyPeer(void *dst, int dst_device, const void *src, int src_device,
                           size_t count)
{
    return standin__note(copy_peer(dst, dst_device, src, src_device, count, NULL, 1));
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device,
                                size_t count, cudaStream_t stream)
{
    return standin__note(copy_peer(dst, dst_device, src, src_device, count, stream, 0));
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
    return standin__note(fill(ptr, value, count, NULL, 1));
}

/* CUDA 13's batch: every copy checked before any is queued, as a driver
 * validates the batch; the legacy default stream is refused, as the
 * runtime refuses it. Each attribute must name a source access order. */
cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                 size_t count, struct cudaMemcpyAttributes *attrs,
                                 size_t *attrsIdxs, size_t numAttrs, cudaStream_t stream)
{
    struct CUstream_st *s;
    cudaError_t err;

    if (standin__env_long("KVS_STANDIN_NO_BATCH", 0) == 1)
        return standin__note(cudaErrorNotSupported);
    if (!dsts || !srcs || !sizes || !count || !attrs || !attrsIdxs || !numAttrs
        || numAttrs > count || attrsIdxs[0] != 0 || !stream || stream == cudaStreamLegacy
        || stream == cudaStreamPerThread)
        return standin__note(cudaErrorInvalidValue);
    for (size_t a = 0; a < numAttrs; a++)
        if ((a && attrsIdxs[a] <= attrsIdxs[a - 1]) || attrsIdxs[a] >= count
            || attrs[a].srcAccessOrder < cudaMemcpySrcAccessOrderStream
            || attrs[a].srcAccessOrder > cudaMemcpySrcAccessOrderAny)
            return standin__note(cudaErrorInvalidValue);
    if ((err = standin__resolve(stream, standin__current_device, &s)) != cudaSuccess)
        return standin__note(err);
    for (size_t i = 0; i < count; i++)
        if (sizes[i] && ((err = check_side(dsts[i], sizes[i], EITHER)) != cudaSuccess
                         || (err = check_side(srcs[i], sizes[i], EITHER)) != cudaSuccess))
            return standin__note(err);
    for (size_t i = 0, first = 1; i < count; i++) {
        if (!sizes[i])
            continue;
        count_copy(dsts[i], srcs[i], sizes[i], (int)first);
        first = 0;
        if ((err = queue_move(s, dsts[i], srcs[i], 0, sizes[i], 0)) != cudaSuccess)
            return standin__note(err);
    }
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    return standin__note(fill(ptr, value, count, stream, 0));
}

/* ---- IPC ---------------------------------------------------------------- */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *ptr)
{
    struct ipc_handle h = {.magic = IPC_MAGIC, .pid = getpid()};
    struct alloc *a;
    int found;

    if (!handle)
        return standin__note(cudaErrorInvalidValue);
    pthread_mutex_lock(&standin__lock);
    a = standin__find_locked(ptr);
    found = a && a->origin == MADE && a->base == ptr;   /* the runtime takes a base */
    if (found) {
        h.fd = a->fd;
        h.device = a->device;
        h.size = a->size;
        h.ino = a->ino;
    }
    pthread_mutex_unlock(&standin__lock);
    if (!found)
        return standin__note(cudaErrorInvalidValue);
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &h, sizeof h);
    return standin__note(standin__check_device(h.device));
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
    cudaError_t err = standin__check_device(standin__current_device);
    int fd;

    memcpy(&h, handle.reserved, sizeof h);
    if (err == cudaSuccess && (!ptr || flags & ~cudaIpcMemLazyEnablePeerAccess))
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess && (h.magic != IPC_MAGIC || h.pid == getpid() || h.size == 0 ||
                               h.size > SIZE_MAX))
        err = cudaErrorInvalidResourceHandle;
    if (err == cudaSuccess)
        err = standin__check_device(h.device);
    if (err == cudaSuccess && standin__env_long("KVS_STANDIN_FAIL_IPC_OPEN", 0) != 0)
        err = cudaErrorMapBufferObjectFailed;
    if (err != cudaSuccess)
        return standin__note(err);
    fd = open_owner_fd(&h);
    if (fd < 0)
        return standin__note(cudaErrorInvalidResourceHandle);
    a = calloc(1, sizeof *a);
    if (!a)
        goto fail_close;
    if (map_twice(a, fd, (size_t)h.size) != 0)
        goto fail_free;
    close(fd);
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
    return standin__note(cudaErrorMapBufferObjectFailed);
}

cudaError_t cudaIpcCloseMemHandle(void *ptr)
{
    struct alloc *a;

    standin__finish_device(-1);        /* no queued work is left to touch it */
    if (!(a = take(ptr, OPENED)))
        return standin__note(cudaErrorInvalidValue);
    unmap(a);
    free(a);
    return cudaSuccess;
}
