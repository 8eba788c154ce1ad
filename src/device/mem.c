/*
 * mem.c - the memory provider (mem.h): the host's heap and kernels, and
 * CUDA devices through the runtime cuda.c loads.
 *
 * Each device has one stream and one event, made at first use and kept
 * for the life of the process. A call on a device makes it the thread's
 * current device for the call's duration and gives the caller's back
 * after: libkvs never leaves a caller on another device than its own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/array.h"
#include "device/cuda.h"
#include "kernels/cuda_kernels.h"
#include "device/mem.h"
#include "kernels/optim.h"
#include "shm/ring.h"
#include "base/spec.h"

#ifndef KVS__KERNELS_PATH
#define KVS__KERNELS_PATH "libkvs-cuda.so"
#endif

#define CUDA_ERROR_MEMORY_ALLOCATION 2

/* The kernel module's entry points (cuda_kernels.h). */
struct kernels {
    int (*sum)(int dtype, void *out, const void *const *in, int k, size_t n, void *stream);
    int (*update)(const struct kvs_cuda_step *st, int dtype, void *w, const void *const *in,
                  int k, void *buf0, void *buf1, size_t n, void *stream);
};

static struct {
    pthread_mutex_t lock;              /* making streams and events */
    void *stream[KVS__MAX_DEVICES];
    void *event[KVS__MAX_DEVICES];
    uint64_t peer_tried[KVS__MAX_DEVICES];   /* bit p of [d]: d asked for access to p */
    pthread_once_t kernels_once;
    struct kernels kernels;            /* sum NULL: none, with why */
    struct kvs__err kernels_why;
} cu = { .lock = PTHREAD_MUTEX_INITIALIZER, .kernels_once = PTHREAD_ONCE_INIT };

/* The devices with work this thread queued and has not waited for. */
static __thread uint64_t pending;

static int is_host(int device)
{
    return device == KVS_HOST;
}

/* ---- a device for the length of a call --------------------------------- */

struct on_device {
    const struct kvs__cudart *rt;
    int dev;                           /* the CUDA device index */
    int old;                           /* the caller's current device */
    void *stream, *event;
};

/* The message for a runtime error rc of what on dev. */
static int cuda_fail(const struct kvs__cudart *rt, int dev, int rc, const char *what,
                     struct kvs__err *e)
{
    return kvs__fail(e, rc == CUDA_ERROR_MEMORY_ALLOCATION ? -ENOMEM : KVS_EDEVICE,
                     "KVS_CUDA(%d): %s failed (%s)", dev, what, rt->error_string(rc));
}

/* Makes device (a KVS_CUDA code) the current device, its stream and event
 * made if they are not yet. */
static int enter(int device, struct on_device *d, struct kvs__err *e)
{
    int rc;

    d->dev = device - 1;
    if (!(d->rt = kvs__cudart(e)))
        return e ? e->code : KVS_EDEVICE;
    if (d->dev < 0 || d->dev >= d->rt->ndev || d->dev >= KVS__MAX_DEVICES)
        return kvs__cuda_device(d->dev < KVS__MAX_DEVICES ? d->dev : -1, e);
    if ((rc = d->rt->get_device(&d->old)) != 0)
        return cuda_fail(d->rt, d->dev, rc, "cudaGetDevice", e);
    if (d->old != d->dev && (rc = d->rt->set_device(d->dev)) != 0)
        return cuda_fail(d->rt, d->dev, rc, "cudaSetDevice", e);
    pthread_mutex_lock(&cu.lock);
    if (!cu.stream[d->dev] && (rc = d->rt->stream_create(&cu.stream[d->dev], 0)) != 0)
        cu.stream[d->dev] = NULL;
    if (rc == 0 && !cu.event[d->dev]
        && (rc = d->rt->event_create(&cu.event[d->dev], KVS__CUDA_EVENT_NO_TIMING)) != 0)
        cu.event[d->dev] = NULL;
    d->stream = cu.stream[d->dev];
    d->event = cu.event[d->dev];
    pthread_mutex_unlock(&cu.lock);
    if (rc != 0) {
        if (d->old != d->dev)
            d->rt->set_device(d->old);
        return cuda_fail(d->rt, d->dev, rc, "making a stream", e);
    }
    return 0;
}

/* Gives the caller's device back; rc passes through. */
static int leave(const struct on_device *d, int rc)
{
    if (d->old != d->dev)
        d->rt->set_device(d->old);
    return rc;
}

/* Lets d (the current device) reach peer's memory directly where the
 * GPUs allow it, once per pair: copies between them then skip the host.
 * Where they do not, copies go through the host all the same. */
static void peer_access(const struct on_device *d, int peer)
{
    uint64_t bit = (uint64_t)1 << peer;
    int can = 0, tried;

    pthread_mutex_lock(&cu.lock);
    tried = (cu.peer_tried[d->dev] & bit) != 0;
    cu.peer_tried[d->dev] |= bit;
    pthread_mutex_unlock(&cu.lock);
    if (!tried && d->rt->can_access_peer(&can, d->dev, peer) == 0 && can)
        d->rt->enable_peer_access(peer, 0);   /* already enabled by the caller: as good */
}

/* Marks d's stream as holding this thread's work. */
static void queued(const struct on_device *d)
{
    pending |= (uint64_t)1 << d->dev;
}

/* How long a wait for a device may take: KVS_TIMEOUT, read once (a bad
 * value leaves the default; kvs_create has refused it already). */
static pthread_once_t wait_once = PTHREAD_ONCE_INIT;
static int64_t wait_ms;

static void read_wait(void)
{
    kvs__env_timeout_ms(&wait_ms, NULL);
}

/* Waits for everything queued on d's stream, or fails with KVS_ETIMEDOUT
 * once the wait has lasted KVS_TIMEOUT: it polls the stream, yielding the
 * core for the first microseconds, then sleeping 20 us at a time. */
static int stream_drain(const struct on_device *d, struct kvs__err *e)
{
    const struct timespec nap = { 0, 20000 };
    int64_t start = kvs__now_ns(), deadline;
    int rc;

    pthread_once(&wait_once, read_wait);
    deadline = start + wait_ms * 1000000;
    for (int polls = 0;; polls++) {
        if ((rc = d->rt->stream_query(d->stream)) == KVS__CUDA_SUCCESS)
            return 0;
        if (rc != KVS__CUDA_NOT_READY)
            return cuda_fail(d->rt, d->dev, rc, "cudaStreamQuery", e);
        if (kvs__now_ns() >= deadline)
            return kvs__fail(e, KVS_ETIMEDOUT, "KVS_CUDA(%d): device work not done after "
                             "%lld ms (KVS_TIMEOUT)", d->dev, (long long)wait_ms);
        if (polls < 64)
            sched_yield();
        else
            nanosleep(&nap, NULL);
    }
}

/* ---- the kernel module ------------------------------------------------- */

static void load_kernels(void)
{
    const char *path = getenv("KVS_CUDA_KERNELS");
    int (*abi)(void);
    void *lib;

    if (!path || !*path)
        path = KVS__KERNELS_PATH;
    if (!(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        kvs__fail(&cu.kernels_why, KVS_EDEVICE, "no CUDA kernels: %s cannot be loaded (%s)",
                  path, dlerror());
        return;
    }
    *(void **)&abi = dlsym(lib, "kvs_cuda_kernels_abi");
    *(void **)&cu.kernels.update = dlsym(lib, "kvs_cuda_update");
    if (!abi || abi() != KVS_CUDA_KERNELS_ABI || !cu.kernels.update) {
        kvs__fail(&cu.kernels_why, KVS_EDEVICE, "no CUDA kernels: %s is not a kernel module "
                  "of this version (%d)", path, KVS_CUDA_KERNELS_ABI);
        dlclose(lib);
        return;
    }
    *(void **)&cu.kernels.sum = dlsym(lib, "kvs_cuda_sum");
    if (!cu.kernels.sum)
        kvs__fail(&cu.kernels_why, KVS_EDEVICE, "no CUDA kernels: %s has no kvs_cuda_sum",
                  path);
}

/* The kernel module, or NULL with why not. */
static const struct kernels *kernels(struct kvs__err *e)
{
    pthread_once(&cu.kernels_once, load_kernels);
    if (!cu.kernels.sum) {
        kvs__fail(e, cu.kernels_why.code, "%s", cu.kernels_why.msg);
        return NULL;
    }
    return &cu.kernels;
}

/* ---- the provider ------------------------------------------------------ */

int kvs__mem_check(int device, const void *p, size_t bytes, const char *what,
                   struct kvs__err *e)
{
    struct kvs__cuda_ptr_attr attr;
    const struct kvs__cudart *rt;
    struct kvs__err why;
    int rc;

    if (is_host(device))
        return 0;
    if (device < 0)
        return kvs__fail(e, KVS_EDEVICE,
                         "%s is on device code %d, neither KVS_HOST nor KVS_CUDA(i)", what,
                         device);
    if (kvs__cuda_device(device - 1, &why) != 0)
        return kvs__fail(e, KVS_EDEVICE, "%s is on KVS_CUDA(%d): %s", what, device - 1,
                         why.msg);
    if (bytes == 0)
        return 0;
    rt = kvs__cudart(NULL);
    if ((rc = rt->pointer_attributes(&attr, p)) != 0)
        return kvs__fail(e, KVS_EDEVICE, "%s: cudaPointerGetAttributes failed (%s)", what,
                         rt->error_string(rc));
    if (attr.type != KVS__CUDA_MEMORY_DEVICE)
        return kvs__fail(e, KVS_EDEVICE, "%s says KVS_CUDA(%d), but its data is not device "
                         "memory", what, device - 1);
    if (attr.device != device - 1)
        return kvs__fail(e, KVS_EDEVICE, "%s says KVS_CUDA(%d), but its data is on "
                         "KVS_CUDA(%d)", what, device - 1, attr.device);
    return 0;
}

int kvs__array_check(const kvs_array_t *a, const char *what, struct kvs__err *e)
{
    char shp[KVS__SHAPE_STR_MAX];
    int64_t count = 1, bytes;
    size_t es, sbytes;
    int empty = 0;

    if (what == NULL)
        what = "array";
    if (a == NULL)
        return kvs__fail(e, KVS_EBADARG, "%s: no array (NULL)", what);
    es = kvs_dtype_size(a->dtype);
    if (es == 0)
        return kvs__fail(e, KVS_EDTYPE, "%s: dtype %d is not a kvs dtype", what,
                         (int)a->dtype);
    if (a->ndim < 0 || a->ndim > KVS_MAX_NDIM)
        return kvs__fail(e, KVS_EBADARG, "%s: ndim %d is outside [0, %d]", what, a->ndim,
                         KVS_MAX_NDIM);
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] < 0)
            return kvs__fail(e, KVS_EBADARG, "%s: extent %" PRId64 " in dimension %d", what,
                             a->shape[d], d);
        if (a->shape[d] == 0)
            empty = 1;
    }
    /* An empty array is empty however big its other extents are. */
    if (empty) {
        count = 0;
    } else {
        for (int d = 0; d < a->ndim; d++) {
            if (__builtin_mul_overflow(count, a->shape[d], &count)) {
                kvs__shape_str(shp, sizeof shp, a->ndim, a->shape);
                return kvs__fail(e, KVS_EBADARG,
                                 "%s: shape %s has more elements than fit in 64 bits", what,
                                 shp);
            }
        }
    }
    /* Both int64 (offsets, the wire) and size_t (memory) must hold the size. */
    if (__builtin_mul_overflow(count, (int64_t)es, &bytes) ||
        __builtin_add_overflow(bytes, 0, &sbytes)) {
        kvs__shape_str(shp, sizeof shp, a->ndim, a->shape);
        return kvs__fail(e, KVS_EBADARG, "%s: shape %s of %s is more bytes than fit in memory",
                         what, shp, kvs_dtype_name(a->dtype));
    }
    if (a->device != KVS_HOST && kvs__mem_check(a->device, a->data, sbytes, what, e) != 0)
        return e ? e->code : KVS_EDEVICE;
    if (a->data == NULL && count > 0) {
        kvs__shape_str(shp, sizeof shp, a->ndim, a->shape);
        return kvs__fail(e, KVS_EBADARG, "%s: data is NULL but shape %s has %" PRId64
                         " elements", what, shp, count);
    }
    return 0;
}

int kvs__mem_alloc(int device, size_t bytes, int zero, void **out, struct kvs__err *e)
{
    struct on_device d;
    int rc;

    *out = NULL;
    if (is_host(device)) {
        size_t size = (bytes + 63) & ~(size_t)63;

        if (size < bytes || !(*out = aligned_alloc(64, size ? size : 64)))
            return kvs__fail(e, -ENOMEM, "out of memory for %zu bytes", bytes);
        if (zero)
            memset(*out, 0, bytes);
        return 0;
    }
    if ((rc = enter(device, &d, e)) != 0)
        return rc;
    /* cudaMalloc aligns to 256 bytes at least. */
    if ((rc = d.rt->malloc(out, bytes)) != 0) {
        *out = NULL;
        return leave(&d, kvs__fail(e, rc == CUDA_ERROR_MEMORY_ALLOCATION ? -ENOMEM
                                       : KVS_EDEVICE, "KVS_CUDA(%d): out of memory for %zu "
                                   "bytes (cudaMalloc: %s)", d.dev, bytes,
                                   d.rt->error_string(rc)));
    }
    if (zero && (rc = d.rt->memset_async(*out, 0, bytes, d.stream)) != 0) {
        d.rt->free(*out);
        *out = NULL;
        return leave(&d, cuda_fail(d.rt, d.dev, rc, "cudaMemsetAsync", e));
    }
    queued(&d);
    return leave(&d, 0);
}

void kvs__mem_free(int device, void *p)
{
    const struct kvs__cudart *rt;

    if (!p)
        return;
    if (is_host(device))
        free(p);
    else if ((rt = kvs__cudart(NULL)))
        rt->free(p);
}

int kvs__mem_copy(void *dst, int ddev, const void *src, int sdev, size_t bytes, int nthreads,
                  struct kvs__err *e)
{
    struct on_device d, s;
    int rc;

    if (bytes == 0)
        return 0;
    if (is_host(ddev) && is_host(sdev)) {
        kvs__copy(dst, src, bytes, nthreads);
        return 0;
    }
    /* The copy is queued on the stream of the device it writes to, or of
     * the one it reads from when it writes to the host; a copy between
     * devices waits for the source's stream first. */
    if ((rc = enter(is_host(ddev) ? sdev : ddev, &d, e)) != 0)
        return rc;
    if (!is_host(ddev) && !is_host(sdev) && ddev != sdev) {
        if ((rc = enter(sdev, &s, e)) != 0)
            return leave(&d, rc);
        rc = s.rt->event_record(s.event, s.stream);
        leave(&s, 0);
        peer_access(&d, s.dev);
        if (rc != 0)
            return leave(&d, cuda_fail(s.rt, s.dev, rc, "cudaEventRecord", e));
        if ((rc = d.rt->stream_wait_event(d.stream, s.event, 0)) != 0)
            return leave(&d, cuda_fail(d.rt, d.dev, rc, "cudaStreamWaitEvent", e));
    }
    if ((rc = d.rt->memcpy_async(dst, src, bytes, KVS__CUDA_MEMCPY_DEFAULT, d.stream)) != 0)
        return leave(&d, cuda_fail(d.rt, d.dev, rc, "cudaMemcpyAsync", e));
    queued(&d);
    return leave(&d, is_host(ddev) ? stream_drain(&d, e) : 0);
}

/* The runs of consecutive rows of idx[0..m) as copies between table and
 * compact: their number, and with dst non-NULL each one's pointers and
 * size. */
static size_t row_runs(void *table, size_t row_bytes, const int64_t *idx, size_t m,
                       void *compact, int to_host, void **dst, const void **src, size_t *size)
{
    size_t n = 0;

    for (size_t j = 0, j1; j < m; j = j1, n++) {
        char *t = (char *)table + (size_t)idx[j] * row_bytes;
        char *c = (char *)compact + j * row_bytes;

        for (j1 = j + 1; j1 < m && idx[j1] == idx[j1 - 1] + 1; j1++)
            ;
        if (dst) {
            dst[n] = to_host ? c : t;
            src[n] = to_host ? t : c;
            size[n] = (j1 - j) * row_bytes;
        }
    }
    return n;
}

int kvs__mem_rows(int device, void *table, size_t row_bytes, const int64_t *idx, size_t m,
                  void *compact, int to_host, struct kvs__err *e)
{
    struct kvs__cuda_memcpy_attr attr = { .src_access_order = KVS__CUDA_SRC_ACCESS_STREAM };
    size_t runs, first = 0;
    struct on_device d;
    void **dst = NULL;
    const void **src = NULL;
    size_t *size = NULL;
    int rc = 0;

    if (m == 0 || row_bytes == 0)
        return 0;
    if (is_host(device))
        return kvs__fail(e, KVS_EBADARG, "a copy of rows needs a table on a device");
    runs = row_runs(table, row_bytes, idx, m, compact, to_host, NULL, NULL, NULL);
    if (!(dst = malloc(sizeof *dst * runs)) || !(src = malloc(sizeof *src * runs))
        || !(size = malloc(sizeof *size * runs))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for %zu copies of rows", runs);
        goto out;
    }
    row_runs(table, row_bytes, idx, m, compact, to_host, dst, src, size);
    if ((rc = enter(device, &d, e)) != 0)
        goto out;
    /* One call for all the runs where the runtime batches copies; a call
     * per run where it does not, or refuses the batch (it checks a batch
     * before it queues any of it). */
    if (d.rt->memcpy_batch_async && runs > 1
        && d.rt->memcpy_batch_async(dst, src, size, runs, &attr, &first, 1, d.stream) == 0)
        runs = 0;
    for (size_t j = 0; j < runs && rc == 0; j++)
        if ((rc = d.rt->memcpy_async(dst[j], src[j], size[j], KVS__CUDA_MEMCPY_DEFAULT,
                                     d.stream)) != 0)
            rc = cuda_fail(d.rt, d.dev, rc, "cudaMemcpyAsync", e);
    queued(&d);
    if (rc == 0 && to_host)
        rc = stream_drain(&d, e);
    rc = leave(&d, rc);
out:
    free(dst);
    free(src);
    free(size);
    return rc;
}

int kvs__mem_zero(int device, void *p, size_t bytes, struct kvs__err *e)
{
    struct on_device d;
    int rc;

    if (bytes == 0)
        return 0;
    if (is_host(device)) {
        memset(p, 0, bytes);
        return 0;
    }
    if ((rc = enter(device, &d, e)) != 0)
        return rc;
    if ((rc = d.rt->memset_async(p, 0, bytes, d.stream)) != 0)
        return leave(&d, cuda_fail(d.rt, d.dev, rc, "cudaMemsetAsync", e));
    queued(&d);
    return leave(&d, 0);
}

int kvs__mem_write_out(void *dst, int device, const void *src, size_t bytes,
                       const int64_t *rows, int64_t nrows, size_t row_bytes, int threads,
                       struct kvs__err *e)
{
    if (device != KVS_HOST) {
        void *tmp = NULL;
        int rc;

        if (rows) {                    /* into host memory: cannot fail */
            if (!(tmp = malloc(bytes ? bytes : 1)))
                return kvs__fail(e, -ENOMEM, "out of memory");
            kvs__mem_write_out(tmp, KVS_HOST, src, bytes, rows, nrows, row_bytes, threads, e);
        }
        if ((rc = kvs__mem_copy(dst, device, tmp ? tmp : src, KVS_HOST, bytes, 1, e)) == 0)
            rc = kvs__mem_finish(e);
        free(tmp);
        return rc;
    }
    if (!rows) {
        kvs__copy(dst, src, bytes, threads);
        return 0;
    }
    memset(dst, 0, bytes);
    for (int64_t j = 0; j < nrows; j++)
        memcpy((char *)dst + (size_t)rows[j] * row_bytes,
               (const char *)src + (size_t)rows[j] * row_bytes, row_bytes);
    return 0;
}

int kvs__mem_sum(int device, kvs_dtype_t dtype, void *out, const void *const *in, int k,
                 size_t n, int nthreads, struct kvs__err *e)
{
    const struct kernels *kn;
    struct on_device d;
    int rc;

    if (is_host(device)) {
        kvs__sum(dtype, out, in, k, n, nthreads);
        return 0;
    }
    if ((rc = enter(device, &d, e)) != 0)
        return rc;
    if (!(kn = kernels(e)))
        return leave(&d, e ? e->code : KVS_EDEVICE);
    if ((rc = kn->sum((int)dtype, out, in, k, n, d.stream)) != 0)
        return leave(&d, cuda_fail(d.rt, d.dev, rc, "the sum kernel", e));
    queued(&d);
    return leave(&d, 0);
}

int kvs__mem_update(int device, const struct kvs__optim *o, const struct kvs__optim_item *items,
                    int m, int nthreads, struct kvs__err *e)
{
    const struct kernels *kn;
    struct on_device d;
    int rc;

    if (is_host(device))               /* no sources: it cannot fail */
        return kvs__optim_update_many(o, items, m, nthreads) == 0
                   ? 0 : kvs__fail(e, KVS_EBADARG, "an update read no input");
    if ((rc = enter(device, &d, e)) != 0)
        return rc;
    if (!(kn = kernels(e)))
        return leave(&d, e ? e->code : KVS_EDEVICE);
    for (int i = 0; i < m && rc == 0; i++) {
        const struct kvs__optim_item *it = &items[i];
        struct kvs__optim_state *s = it->s;
        size_t es = it->dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float);
        void *buf[2] = { NULL, NULL };
        struct kvs_cuda_step st;

        if (kvs__optim_prepare(o, s, it->dtype, it->first, it->count, it->k, it->step,
                               &st) != 0)
            continue;                  /* a state of another key: left alone, as on the host */
        for (int b = 0; b < s->nbuf; b++)
            buf[b] = (char *)s->buf[b] + it->first * es;
        if ((rc = kn->update(&st, (int)it->dtype, it->weight, it->in, it->k, buf[0], buf[1],
                             it->count, d.stream)) != 0)
            rc = cuda_fail(d.rt, d.dev, rc, "the optimizer kernel", e);
    }
    queued(&d);
    return leave(&d, rc);
}

int kvs__mem_stream(int device, void **stream, struct kvs__err *e)
{
    struct on_device d;
    int rc;

    if ((rc = enter(device, &d, e)) != 0)
        return rc;
    *stream = d.stream;
    queued(&d);
    return leave(&d, 0);
}

int kvs__mem_fence(int device, struct kvs__err *e)
{
    struct on_device d;
    int rc;

    if ((rc = enter(device, &d, e)) != 0)
        return rc;
    if ((rc = d.rt->event_record(d.event, d.stream)) != 0)
        return leave(&d, cuda_fail(d.rt, d.dev, rc, "cudaEventRecord", e));
    queued(&d);
    return leave(&d, 0);
}

int kvs__mem_finish(struct kvs__err *e)
{
    int rc = 0;

    while (pending) {
        int dev = __builtin_ctzll(pending);
        struct on_device d;
        struct kvs__err *err = rc == 0 ? e : NULL;   /* the first failure's message */
        int r = enter(KVS_CUDA(dev), &d, err);

        pending &= pending - 1;
        if (r == 0)
            r = leave(&d, stream_drain(&d, err));
        if (rc == 0)
            rc = r;
    }
    return rc;
}

/* ---- memory shared between processes ----------------------------------- */

_Static_assert(KVS__MEM_IPC_HANDLE_BYTES == KVS__CUDA_IPC_HANDLE_BYTES,
               "an IPC handle is the runtime's 64 bytes");

int kvs__mem_ipc_export(int device, const void *p, size_t bytes, struct kvs__mem_ipc *out,
                        struct kvs__err *e)
{
    struct kvs__cuda_ipc_handle h;
    struct on_device d;
    unsigned long long base;
    size_t size;
    int rc;

    if ((rc = kvs__mem_check(device, p, bytes, "the memory to share", e)) != 0)
        return rc;
    if (is_host(device))
        return kvs__fail(e, KVS_EBADARG, "host memory has no CUDA IPC handle");
    if ((rc = enter(device, &d, e)) != 0)
        return rc;
    if (!d.rt->mem_range)
        return leave(&d, kvs__fail(e, KVS_EDEVICE, "%s gives no cuMemGetAddressRange: device "
                                   "memory cannot be shared", d.rt->path));
    if ((rc = d.rt->mem_range(&base, &size, (unsigned long long)(uintptr_t)p)) != 0)
        return leave(&d, kvs__fail(e, KVS_EDEVICE, "KVS_CUDA(%d): cuMemGetAddressRange failed "
                                   "(CUresult %d)", d.dev, rc));
    if ((uintptr_t)p < base || bytes > size - ((uintptr_t)p - base))
        return leave(&d, kvs__fail(e, KVS_EDEVICE, "KVS_CUDA(%d): %zu bytes at %p overrun "
                                   "their allocation", d.dev, bytes, p));
    if ((rc = d.rt->ipc_get_mem_handle(&h, (void *)(uintptr_t)base)) != 0)
        return leave(&d, cuda_fail(d.rt, d.dev, rc, "cudaIpcGetMemHandle", e));
    memcpy(out->handle, h.bytes, sizeof out->handle);
    out->size = size;
    out->offset = (uintptr_t)p - base;
    return leave(&d, 0);
}

int kvs__mem_ipc_open(int device, const unsigned char *handle, void **base, size_t *size,
                      int *on, struct kvs__err *e)
{
    struct kvs__cuda_ipc_handle h;
    struct kvs__cuda_ptr_attr attr;
    struct on_device d;
    unsigned long long b;
    void *p;
    int rc;

    if (is_host(device))
        return kvs__fail(e, KVS_EBADARG, "a CUDA IPC handle opens on a device, not the host");
    if ((rc = enter(device, &d, e)) != 0)
        return rc;
    memcpy(h.bytes, handle, sizeof h.bytes);
    if ((rc = d.rt->ipc_open_mem_handle(&p, h, KVS__CUDA_IPC_LAZY_PEER)) != 0)
        return leave(&d, kvs__fail(e, KVS_EDEVICE, "KVS_CUDA(%d): the CUDA IPC handle does not "
                                   "open (%s)", d.dev, d.rt->error_string(rc)));
    if (!d.rt->mem_range || d.rt->mem_range(&b, size, (unsigned long long)(uintptr_t)p) != 0
        || b != (uintptr_t)p || d.rt->pointer_attributes(&attr, p) != 0
        || attr.type != KVS__CUDA_MEMORY_DEVICE || attr.device < 0
        || attr.device >= KVS__MAX_DEVICES) {
        d.rt->ipc_close_mem_handle(p);
        return leave(&d, kvs__fail(e, KVS_EDEVICE, "KVS_CUDA(%d): memory opened from a CUDA "
                                   "IPC handle is not one device allocation", d.dev));
    }
    *base = p;
    *on = KVS_CUDA(attr.device);
    return leave(&d, 0);
}

void kvs__mem_ipc_close(void *base)
{
    const struct kvs__cudart *rt;

    if (base && (rt = kvs__cudart(NULL)) != NULL)
        rt->ipc_close_mem_handle(base);
}
