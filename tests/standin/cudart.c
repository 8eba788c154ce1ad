/*
 * cudart.c - the CUDA runtime half of the stand-in: the part of the
 * runtime API that libkvs and the host build of its kernel module
 * (kernels.c) call, over host memory, so that the GPU path runs its tests
 * on machines without a GPU or a driver. This file has errors and
 * versions, the queued work of streams, devices, streams and events, and
 * driver entry points; device memory (allocations, copies and fills, IPC
 * handles) is in cudamem.c, and what the two files share in cudart_int.h.
 *
 * Devices are numbers: KVS_STANDIN_DEVICES of them (default 2, at most 64;
 * 0 makes every call fail with cudaErrorNoDevice). The current device is
 * per thread, as in the real runtime. Of the driver API,
 * cudaGetDriverEntryPointByVersion gives cuMemGetAddressRange, which finds
 * the allocation (made or opened) that holds a pointer.
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
 * Injected failures, read at each call so that a test can setenv them
 * (those of device memory: cudamem.c):
 *   KVS_STANDIN_LOST_DEVICE=i    device i is still counted, but every call
 *                                on it fails with cudaErrorDevicesUnavailable
 *                                (cudaFree still releases the memory).
 *   KVS_STANDIN_BUSY_STREAMS=1   cudaStreamQuery says cudaErrorNotReady for
 *                                every stream, and runs nothing: work that
 *                                never finishes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudart_int.h"

#define MAX_DEVICES 64
#define STREAM_MAGIC 0x4b56535354524d31ull /* "KVSSTRM1" */
#define EVENT_MAGIC 0x4b56534556454e31ull  /* "KVSEVEN1" */
#define DEAD_MAGIC 0x4b5653444541443full   /* "KVSDEAD?": a destroyed stream */

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

/* Taken before standin__lock, never after (cudart_int.h). */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *streams;         /* under queue_lock: every stream made */
pthread_mutex_t standin__lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t peer_enabled[MAX_DEVICES];  /* under standin__lock: bit p of [d] */
_Thread_local int standin__current_device;
static _Thread_local cudaError_t last_error;

cudaError_t standin__note(cudaError_t err)
{
    if (err != cudaSuccess)
        last_error = err;
    return err;
}

long standin__env_long(const char *name, long fallback)
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
    long n = standin__env_long("KVS_STANDIN_DEVICES", 2);

    return n > MAX_DEVICES ? MAX_DEVICES : (int)n;
}

cudaError_t standin__check_device(int device)
{
    int n = device_count();

    if (n == 0)
        return cudaErrorNoDevice;
    if (device < 0 || device >= n)
        return cudaErrorInvalidDevice;
    if (standin__env_long("KVS_STANDIN_LOST_DEVICE", -1) == device)
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
        return standin__note(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (!version)
        return standin__note(cudaErrorInvalidValue);
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

void standin__finish_stream(struct CUstream_st *s)
{
    pthread_mutex_lock(&queue_lock);
    run_until(s, s->queued);
    pthread_mutex_unlock(&queue_lock);
}

void standin__finish_device(int device)
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

cudaError_t standin__enqueue(struct CUstream_st *s, void (*fn)(void *), void *arg,
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

cudaError_t standin__resolve(cudaStream_t stream, int device, struct CUstream_st **out)
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
    cudaError_t err = standin__resolve(stream, device, &s);

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
        err = standin__resolve(handles[i], devices[i], &s[i]);
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
        return standin__note(cudaErrorInvalidValue);
    *count = device_count();
    return standin__note(*count ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    cudaError_t err = standin__check_device(device);

    if (err == cudaSuccess)
        standin__current_device = device;
    return standin__note(err);
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return standin__note(cudaErrorInvalidValue);
    *device = standin__current_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t err = standin__check_device(standin__current_device);

    if (err == cudaSuccess)
        standin__finish_device(standin__current_device);
    return standin__note(err);
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
    return standin__note(err);
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    int self = standin__current_device;
    cudaError_t err = standin__check_device(self);

    if (err == cudaSuccess)
        err = standin__check_device(peer);
    if (err == cudaSuccess && flags != 0)
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess && peer == self)
        err = cudaErrorInvalidDevice;
    if (err != cudaSuccess)
        return standin__note(err);
    pthread_mutex_lock(&standin__lock);
    if (peer_enabled[self] >> peer & 1)
        err = cudaErrorPeerAccessAlreadyEnabled;
    peer_enabled[self] |= 1ull << peer;
    pthread_mutex_unlock(&standin__lock);
    return standin__note(err);
}

/* ---- streams and events -------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    cudaError_t err = standin__check_device(standin__current_device);
    struct CUstream_st *s;

    if (err == cudaSuccess && (!stream || flags & ~cudaStreamNonBlocking))
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess)
        return standin__note(err);
    s = calloc(1, sizeof *s);
    if (!s)
        return standin__note(cudaErrorMemoryAllocation);
    s->magic = STREAM_MAGIC;
    s->device = standin__current_device;
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
    cudaError_t err = standin__resolve(stream, standin__current_device, &s);

    if (err == cudaSuccess && s->legacy)
        err = cudaErrorInvalidResourceHandle;
    if (err != cudaSuccess)
        return standin__note(err);
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
    cudaError_t err = standin__resolve(stream, standin__current_device, &s);

    if (err == cudaSuccess)
        standin__finish_stream(s);
    return standin__note(err);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    struct CUstream_st *s;
    cudaError_t err = standin__resolve(stream, standin__current_device, &s);

    if (err == cudaSuccess && standin__env_long("KVS_STANDIN_BUSY_STREAMS", 0) == 1)
        return cudaErrorNotReady;      /* not an error: not noted as the last one */
    if (err == cudaSuccess)
        standin__finish_stream(s);
    return standin__note(err);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data)
{
    struct CUstream_st *s;
    cudaError_t err = standin__resolve(stream, standin__current_device, &s);

    if (err == cudaSuccess && !fn)
        err = cudaErrorInvalidValue;
    return standin__note(err == cudaSuccess ? standin__enqueue(s, fn, user_data, NULL, 0) : err);
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
    cudaError_t err = standin__resolve(stream, standin__current_device, &s);

    if (err == cudaSuccess)
        err = check_event(event);
    if (err == cudaSuccess && flags != 0)
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess)
        return standin__note(err);
    pthread_mutex_lock(&queue_lock);
    if (event->recorded)
        at = event->at_point;
    pthread_mutex_unlock(&queue_lock);
    /* An event never recorded is complete: nothing to wait for. */
    return standin__note(at.stream ? standin__enqueue(s, NULL, NULL, &at, 1) : cudaSuccess);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    cudaError_t err = standin__check_device(standin__current_device);
    struct CUevent_st *e;

    if (err == cudaSuccess && (!event || flags & ~known))
        err = cudaErrorInvalidValue;
    if (err == cudaSuccess && flags & cudaEventInterprocess && !(flags & cudaEventDisableTiming))
        err = cudaErrorInvalidValue;
    if (err != cudaSuccess)
        return standin__note(err);
    e = calloc(1, sizeof *e);
    if (!e)
        return standin__note(cudaErrorMemoryAllocation);
    e->magic = EVENT_MAGIC;
    e->device = standin__current_device;
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
        err = standin__resolve(stream, standin__current_device, &s);
    /* The real runtime refuses to record an event into another device's stream. */
    if (err == cudaSuccess && s->device != event->device)
        err = cudaErrorInvalidResourceHandle;
    if (err != cudaSuccess)
        return standin__note(err);
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
        return standin__note(cudaErrorMemoryAllocation);
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
    return standin__note(err);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t err = check_event(event);

    if (err == cudaSuccess)
        finish_event(event);
    return standin__note(err);
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
        return standin__note(err);
    *ms = (float)((double)(end->at.tv_sec - start->at.tv_sec) * 1e3 +
                  (double)(end->at.tv_nsec - start->at.tv_nsec) / 1e6);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    cudaError_t err = check_event(event);

    if (err != cudaSuccess)
        return standin__note(err);
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

    pthread_mutex_lock(&standin__lock);
    if ((a = standin__find_locked((const void *)(uintptr_t)ptr)) != NULL) {
        if (base)
            *base = (drv_ptr)(uintptr_t)a->base;
        if (size)
            *size = a->size;
        rc = DRV_SUCCESS;
    }
    pthread_mutex_unlock(&standin__lock);
    return rc;
}

/* The driver functions the stand-in has: cuMemGetAddressRange alone. */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                             unsigned int version, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    (void)flags;
    if (!symbol || !fn)
        return standin__note(cudaErrorInvalidValue);
    *fn = NULL;
    if (strcmp(symbol, "cuMemGetAddressRange") == 0 && version >= 3020)
        *(drv_result (**)(drv_ptr *, size_t *, drv_ptr))fn = mem_get_address_range;
    if (status)
        *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
