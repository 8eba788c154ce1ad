/*
 * cudart.c - the CUDA runtime half of the stand-in: the part of the
 * runtime API that libkvs and the host build of its kernel module
 * (kernels.c) call, over host memory, so that the GPU path runs its tests
 * on machines without a GPU or a driver.
 *
 * Devices are numbers: KVS_STANDIN_DEVICES of them (default 2, at most 64;
 * 0 makes every call fail with cudaErrorNoDevice). The current device is
 * per thread, as in the real runtime.
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
 * with the real runtime. Of the driver API,
 * cudaGetDriverEntryPointByVersion gives cuMemGetAddressRange, which finds
 * the allocation (made or opened) that holds a pointer.
 *
 * Copies are checked as a driver would fault: a device side must lie
 * inside one allocation, a host side outside all of them, so a wrong
 * cudaMemcpyKind or an overrun fails with cudaErrorInvalidValue.
 * Copies between host and device are counted, bytes and calls each way
 * (kvs_standin_copied; a cudaMemcpyBatchAsync is one call), so that a
 * test can check what a call moved.
 *
 * Work is deferred: every copy, fill, host function (cudaLaunchHostFunc,
 * which the kernels use) and NCCL collective is queued on its stream and
 * runs only when a caller synchronises with it: cudaStreamSynchronize, a
 * cudaStreamQuery (which then says cudaSuccess), cudaEventSynchronize or
 * cudaEventQuery of an event recorded after it, cudaDeviceSynchronize, and
 * the calls that synchronise by themselves (cudaMemcpy, cudaMemset,
 * cudaMemcpyPeer, cudaFree, cudaIpcCloseMemHandle, cudaStreamDestroy).
 * It then runs in stream order, after what it waits for: the events a
 * stream was made to wait for (cudaStreamWaitEvent), and, as CUDA's legacy
 * default stream orders them, the legacy stream of its device for a
 * blocking stream and every blocking stream of the device for the legacy
 * one (cudaStreamPerThread is taken as the legacy stream). So a caller
 * that reads a result without synchronising reads what was there before,
 * as it may on a GPU, every time instead of now and then. Work runs on
 * the thread that synchronises, under one lock: a host function must not
 * call the runtime, as CUDA also says.
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
 *                                every stream, and runs nothing: work that
 *                                never finishes.
 *   KVS_STANDIN_NO_BATCH=1       cudaMemcpyBatchAsync fails with
 *                                cudaErrorNotSupported, as a driver without
 *                                batched copies does.
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

#define MAX_DEVICES 64
#define STREAM_MAGIC 0x4b56535354524d31ull /* "KVSSTRM1" */
#define EVENT_MAGIC 0x4b56534556454e31ull  /* "KVSEVEN1" */
#define DEAD_MAGIC 0x4b5653444541443full   /* "KVSDEAD?": a destroyed stream */
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

/* One item of a stream's work, run after its own stream's earlier items
 * and after every point in after[]. */
struct item {
    struct item *next;
    void (*fn)(void *arg);             /* NULL: an item that only waits */
    void *arg;
    int nafter;
    struct point after[];
};

/* A stream, or a device's legacy default stream. A destroyed one is kept,
 * its magic changed: events and queued items may still name it. */
struct CUstream_st {
    uint64_t magic;
    int device;
    int legacy;                        /* the device's legacy default stream */
    int blocking;                      /* ordered after the legacy stream, and it after this */
    uint64_t queued, done;             /* items queued, items run: under queue_lock */
    struct item *head, *tail;          /* the items not run yet */
    struct CUstream_st *next;          /* every stream, under queue_lock */
};

struct CUevent_st {
    uint64_t magic;
    int device;
    unsigned flags;
    int recorded;
    struct point at_point;             /* what completes the event: under queue_lock */
    struct timespec at;
};

/* What an IPC handle carries; the rest of its 64 bytes is zero. */
struct ipc_handle {
    uint32_t magic;
    int32_t pid, fd, device;
    uint64_t size, ino;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(cudaIpcMemHandle_t), "IPC handle too small");

/* queue_lock is taken before lock, never after: queued work, run under
 * queue_lock, finds its memory under lock. */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *streams;         /* under queue_lock: every stream made */
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

/* ---- queued work -------------------------------------------------------- */

/* The legacy default stream of each device, made at first use. */
static struct CUstream_st legacy[MAX_DEVICES];

/* Where a point of a stream's work is waited for: run_until keeps a stack
 * of them, the last pushed first. */
struct waits {
    struct point *v;
    size_t n, cap;
};

static void push_wait(struct waits *w, struct point p)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->v = realloc(w->v, w->cap * sizeof *w->v);
        if (!w->v) {
            fputs("kvs stand-in: out of memory running queued work\n", stderr);
            abort();
        }
    }
    w->v[w->n++] = p;
}

/* Runs the items of stream s until it has run upto of them, each after
 * what it waits for, in the order they were queued. What an item waits
 * for was queued before it, so the stack ends. Called under queue_lock. */
static void run_until(struct CUstream_st *s, uint64_t upto)
{
    struct waits w = { NULL, 0, 0 };

    push_wait(&w, (struct point){ s, upto });
    while (w.n > 0) {
        struct point top = w.v[w.n - 1];
        struct item *it;
        int blocked = 0;

        if (top.stream->done >= top.seq) {
            w.n--;
            continue;
        }
        it = top.stream->head;
        for (int i = 0; i < it->nafter && !blocked; i++) {
            if (it->after[i].stream->done < it->after[i].seq) {
                push_wait(&w, it->after[i]);
                blocked = 1;
            }
        }
        if (blocked)
            continue;
        top.stream->head = it->next;
        if (!it->next)
            top.stream->tail = NULL;
        if (it->fn)
            it->fn(it->arg);
        top.stream->done++;
        free(it);
    }
    free(w.v);
}

/* Everything queued on s so far. */
static void finish_stream(struct CUstream_st *s)
{
    pthread_mutex_lock(&queue_lock);
    run_until(s, s->queued);
    pthread_mutex_unlock(&queue_lock);
}

/* Everything queued on device's streams (every device's: -1). */
static void finish_device(int device)
{
    pthread_mutex_lock(&queue_lock);
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (device < 0 || s->device == device)
            run_until(s, s->queued);
    pthread_mutex_unlock(&queue_lock);
}

/* Whether work queued on s waits for what t has queued: the legacy
 * stream and a blocking stream of one device wait for each other. */
static int orders(const struct CUstream_st *s, const struct CUstream_st *t)
{
    return t != s && t->device == s->device && t->queued > t->done
           && ((s->legacy && t->blocking) || (s->blocking && t->legacy));
}

/* An item for s that runs fn(arg) after the points in after[] and what
 * the legacy stream's rule adds, not queued yet; NULL when out of memory.
 * Called under queue_lock. */
static struct item *new_item(struct CUstream_st *s, void (*fn)(void *), void *arg,
                             const struct point *after, int nafter)
{
    struct item *it;
    int n = nafter;

    for (struct CUstream_st *t = streams; t; t = t->next)
        n += orders(s, t);
    it = calloc(1, sizeof *it + (size_t)n * sizeof it->after[0]);
    if (!it)
        return NULL;
    it->fn = fn;
    it->arg = arg;
    for (int i = 0; i < nafter; i++)
        if (after[i].stream != s && after[i].stream->done < after[i].seq)
            it->after[it->nafter++] = after[i];
    for (struct CUstream_st *t = streams; t; t = t->next)
        if (orders(s, t))
            it->after[it->nafter++] = (struct point){ t, t->queued };
    return it;
}

/* Puts it at the end of s's work. Called under queue_lock. */
static void append(struct CUstream_st *s, struct item *it)
{
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    s->queued++;
}

static cudaError_t enqueue(struct CUstream_st *s, void (*fn)(void *), void *arg,
                           const struct point *after, int nafter)
{
    struct item *it;

    pthread_mutex_lock(&queue_lock);
    it = new_item(s, fn, arg, after, nafter);
    if (it)
        append(s, it);
    pthread_mutex_unlock(&queue_lock);
    return it ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* The stream a handle names, the default ones being device's legacy
 * stream; after checking the handle and the device. */
static cudaError_t resolve(cudaStream_t stream, int device, struct CUstream_st **out)
{
    cudaError_t err;

    if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
        if ((err = standin__check_device(device)) != cudaSuccess)
            return err;
        pthread_mutex_lock(&queue_lock);
        if (legacy[device].magic != STREAM_MAGIC) {
            legacy[device] = (struct CUstream_st){ .magic = STREAM_MAGIC, .device = device,
                                                   .legacy = 1, .next = streams };
            streams = &legacy[device];
        }
        pthread_mutex_unlock(&queue_lock);
        *out = &legacy[device];
        return cudaSuccess;
    }
    if (stream->magic != STREAM_MAGIC)
        return cudaErrorInvalidResourceHandle;
    *out = stream;
    return standin__check_device(stream->device);
}

cudaError_t standin__check_stream(cudaStream_t stream, int device)
{
    struct CUstream_st *s;
    cudaError_t err = resolve(stream, device, &s);

    return err == cudaSuccess && s->device != device ? cudaErrorInvalidResourceHandle : err;
}

cudaError_t standin__enqueue_all(int n, const cudaStream_t *handles, const int *devices,
                                 void (*fn)(void *), void *arg)
{
    struct CUstream_st *s[n];
    struct point before[n], after[n > 1 ? n - 1 : 1];
    struct item *it[n];
    cudaError_t err = cudaSuccess;
    int made = 0;

    for (int i = 0; i < n && err == cudaSuccess; i++)
        err = resolve(handles[i], devices[i], &s[i]);
    if (err != cudaSuccess)
        return err;
    pthread_mutex_lock(&queue_lock);
    for (int i = 0; i < n; i++)
        before[i] = (struct point){ s[i], s[i]->queued };
    for (; made < n; made++) {
        int k = 0;

        for (int j = 0; j < n; j++)
            if (j != made)
                after[k++] = before[j];
        if (!(it[made] = new_item(s[made], fn, arg, after, k)))
            break;
    }
    for (int i = 0; i < made; i++) {
        if (made == n)
            append(s[i], it[i]);
        else
            free(it[i]);
    }
    pthread_mutex_unlock(&queue_lock);
    return made == n ? cudaSuccess : cudaErrorMemoryAllocation;
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
    cudaError_t err = standin__check_device(current_device);

    if (err == cudaSuccess)
        finish_device(current_device);
    return note(err);
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

void *kvs_standin_host(const void *ptr, size_t bytes)
{
    struct alloc *a;
    char *host = NULL;

    pthread_mutex_lock(&lock);
    a = find_locked(ptr);
    if (a && bytes <= (size_t)(a->base + a->size - (const char *)ptr))
        host = a->host + ((const char *)ptr - a->base);
    pthread_mutex_unlock(&lock);
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
    if (ftruncate(a->fd, (off_t)size) != 0 || fstat(a->fd, &st) != 0
        || map_twice(a, a->fd, size) != 0)
        goto fail_close;
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
    /* As the real one, it waits for the device: no queued work is left to
     * touch the memory. */
    finish_device(-1);
    a = take(ptr, MADE);
    if (!a)
        return note(cudaErrorInvalidValue);
    err = standin__check_device(a->device);
    unmap(a);
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
    return current_device;
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
    if ((err = enqueue(s, move_run, m, NULL, 0)) != cudaSuccess) {
        free(m);
        return err;
    }
    if (wait)
        finish_stream(s);
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
    cudaError_t err = resolve(stream, wait ? sync_device(dst, src, count) : current_device, &s);

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
    cudaError_t err = resolve(stream, wait ? sync_device(ptr, NULL, count) : current_device, &s);

    if (err == cudaSuccess && count)
        err = check_side(ptr, count, DEVICE);
    return err == cudaSuccess && count ? queue_move(s, ptr, NULL, value, count, wait) : err;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return note(copy(dst, src, count, kind, NULL, 1));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return note(copy(dst, src, count, kind, stream, 0));
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
    return note(copy_peer(dst, dst_device, src, src_device, count, NULL, 1));
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device,
                                size_t count, cudaStream_t stream)
{
    return note(copy_peer(dst, dst_device, src, src_device, count, stream, 0));
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
    return note(fill(ptr, value, count, NULL, 1));
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

    if (env_long("KVS_STANDIN_NO_BATCH", 0) == 1)
        return note(cudaErrorNotSupported);
    if (!dsts || !srcs || !sizes || !count || !attrs || !attrsIdxs || !numAttrs
        || numAttrs > count || attrsIdxs[0] != 0 || !stream || stream == cudaStreamLegacy
        || stream == cudaStreamPerThread)
        return note(cudaErrorInvalidValue);
    for (size_t a = 0; a < numAttrs; a++)
        if ((a && attrsIdxs[a] <= attrsIdxs[a - 1]) || attrsIdxs[a] >= count
            || attrs[a].srcAccessOrder < cudaMemcpySrcAccessOrderStream
            || attrs[a].srcAccessOrder > cudaMemcpySrcAccessOrderAny)
            return note(cudaErrorInvalidValue);
    if ((err = resolve(stream, current_device, &s)) != cudaSuccess)
        return note(err);
    for (size_t i = 0; i < count; i++)
        if (sizes[i] && ((err = check_side(dsts[i], sizes[i], EITHER)) != cudaSuccess
                         || (err = check_side(srcs[i], sizes[i], EITHER)) != cudaSuccess))
            return note(err);
    for (size_t i = 0, first = 1; i < count; i++) {
        if (!sizes[i])
            continue;
        count_copy(dsts[i], srcs[i], sizes[i], (int)first);
        first = 0;
        if ((err = queue_move(s, dsts[i], srcs[i], 0, sizes[i], 0)) != cudaSuccess)
            return note(err);
    }
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    return note(fill(ptr, value, count, stream, 0));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data)
{
    struct CUstream_st *s;
    cudaError_t err = resolve(stream, current_device, &s);

    if (err == cudaSuccess && !fn)
        err = cudaErrorInvalidValue;
    return note(err == cudaSuccess ? enqueue(s, fn, user_data, NULL, 0) : err);
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
    s->blocking = !(flags & cudaStreamNonBlocking);
    pthread_mutex_lock(&queue_lock);
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&queue_lock);
    *stream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    struct CUstream_st *s;
    cudaError_t err = resolve(stream, current_device, &s);

    if (err == cudaSuccess && s->legacy)
        err = cudaErrorInvalidResourceHandle;
    if (err != cudaSuccess)
        return note(err);
    /* Its work is done before it goes; the stream stays listed, dead,
     * for the events and items that name it. */
    pthread_mutex_lock(&queue_lock);
    run_until(s, s->queued);
    s->magic = DEAD_MAGIC;
    pthread_mutex_unlock(&queue_lock);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    struct CUstream_st *s;
    cudaError_t err = resolve(stream, current_device, &s);

    if (err == cudaSuccess)
        finish_stream(s);
    return note(err);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    struct CUstream_st *s;
    cudaError_t err = resolve(stream, current_device, &s);

    if (err == cudaSuccess && env_long("KVS_STANDIN_BUSY_STREAMS", 0) == 1)
        return cudaErrorNotReady;      /* not an error: not noted as the last one */
    if (err == cudaSuccess)
        finish_stream(s);
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
    struct CUstream_st *s;
    struct point at = { NULL, 0 };
    cudaError_t err = resolve(stream, current_device, &s);

    if (err == cudaSuccess)
        err = check_event(event);
    if (err == cudaSuccess && flags != 0)
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess)
        return note(err);
    pthread_mutex_lock(&queue_lock);
    if (event->recorded)
        at = event->at_point;
    pthread_mutex_unlock(&queue_lock);
    /* An event never recorded is complete: nothing to wait for. */
    return note(at.stream ? enqueue(s, NULL, NULL, &at, 1) : cudaSuccess);
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
    struct CUstream_st *s;
    struct item *it;
    cudaError_t err = check_event(event);

    if (err == cudaSuccess)
        err = resolve(stream, current_device, &s);
    /* The real runtime refuses to record an event into another device's stream. */
    if (err == cudaSuccess && s->device != event->device)
        err = cudaErrorInvalidResourceHandle;
    if (err != cudaSuccess)
        return note(err);
    /* An item that only waits marks the point: on the legacy stream, it
     * also waits for the blocking streams, as the event does. */
    pthread_mutex_lock(&queue_lock);
    if ((it = new_item(s, NULL, NULL, NULL, 0)) != NULL) {
        append(s, it);
        event->at_point = (struct point){ s, s->queued };
        event->recorded = 1;
    }
    pthread_mutex_unlock(&queue_lock);
    if (!it)
        return note(cudaErrorMemoryAllocation);
    clock_gettime(CLOCK_MONOTONIC, &event->at);
    return cudaSuccess;
}

/* Runs the work event waits for, if it was recorded. */
static void finish_event(cudaEvent_t event)
{
    pthread_mutex_lock(&queue_lock);
    if (event->recorded)
        run_until(event->at_point.stream, event->at_point.seq);
    pthread_mutex_unlock(&queue_lock);
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    cudaError_t err = check_event(event);

    if (err == cudaSuccess)
        finish_event(event);
    return note(err);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t err = check_event(event);

    if (err == cudaSuccess)
        finish_event(event);
    return note(err);
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
    return note(cudaErrorMapBufferObjectFailed);
}

cudaError_t cudaIpcCloseMemHandle(void *ptr)
{
    struct alloc *a;

    finish_device(-1);                 /* no queued work is left to touch it */
    if (!(a = take(ptr, OPENED)))
        return note(cudaErrorInvalidValue);
    unmap(a);
    free(a);
    return cudaSuccess;
}
