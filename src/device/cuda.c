/*
 * cuda.c - loading the CUDA runtime (cuda.h). The library is built
 * without the toolkit's headers: the few entry points it calls are
 * declared in cuda.h by their documented signatures (cudaError_t is an
 * enum, passed as an int).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "device/cuda.h"

/* cudaError_t values that say why there is no device. */
enum {
    CUDA_STUB_LIBRARY = 34,            /* the toolkit's stub, not a driver */
    CUDA_INSUFFICIENT_DRIVER = 35,     /* no driver, or one too old */
    CUDA_NO_DEVICE = 100,
    CUDA_SYSTEM_DRIVER_MISMATCH = 803,
};

/* The driver API version whose cuMemGetAddressRange (the _v2 one, with
 * 64-bit device pointers) libkvs asks for. */
#define DRIVER_API_VERSION 12000

static struct {
    pthread_once_t once;
    struct kvs__cudart rt;             /* ndev > 0, or 0 with why */
    struct kvs__err why;
} loaded = { .once = PTHREAD_ONCE_INIT };

/* The entry points, by name, and where each goes in the table. */
#define ENTRY(field, name) { offsetof(struct kvs__cudart, field), name }
static const struct { size_t off; const char *name; } entries[] = {
    ENTRY(get_device, "cudaGetDevice"),
    ENTRY(set_device, "cudaSetDevice"),
    ENTRY(malloc, "cudaMalloc"),
    ENTRY(free, "cudaFree"),
    ENTRY(memcpy_async, "cudaMemcpyAsync"),
    ENTRY(memset_async, "cudaMemsetAsync"),
    ENTRY(pointer_attributes, "cudaPointerGetAttributes"),
    ENTRY(stream_create, "cudaStreamCreateWithFlags"),
    ENTRY(stream_query, "cudaStreamQuery"),
    ENTRY(event_create, "cudaEventCreateWithFlags"),
    ENTRY(event_record, "cudaEventRecord"),
    ENTRY(stream_wait_event, "cudaStreamWaitEvent"),
    ENTRY(can_access_peer, "cudaDeviceCanAccessPeer"),
    ENTRY(enable_peer_access, "cudaDeviceEnablePeerAccess"),
    ENTRY(error_string, "cudaGetErrorString"),
    ENTRY(ipc_get_mem_handle, "cudaIpcGetMemHandle"),
    ENTRY(ipc_open_mem_handle, "cudaIpcOpenMemHandle"),
    ENTRY(ipc_close_mem_handle, "cudaIpcCloseMemHandle"),
};
#undef ENTRY

/* Loads the library at path into rt and counts its devices, or says why
 * not. */
static int load_runtime(const char *path, struct kvs__cudart *rt, struct kvs__err *e)
{
    int (*count)(int *), (*version)(int *), v = 0;
    int (*entry_point)(const char *symbol, void **fn, unsigned version,
                       unsigned long long flags, int *found);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int n = 0, rc, found = -1;

    if (!lib)
        return kvs__fail(e, KVS_EDEVICE, "no CUDA runtime: %s cannot be loaded (%s)", path,
                         dlerror());
    *(void **)&count = dlsym(lib, "cudaGetDeviceCount");
    for (size_t i = 0; i < sizeof entries / sizeof entries[0] && count; i++) {
        void *fn = dlsym(lib, entries[i].name);

        if (!fn) {
            dlclose(lib);
            return kvs__fail(e, KVS_EDEVICE, "%s is not a CUDA runtime: it has no %s", path,
                             entries[i].name);
        }
        *(void **)((char *)rt + entries[i].off) = fn;
    }
    if (!count) {
        dlclose(lib);
        return kvs__fail(e, KVS_EDEVICE, "%s is not a CUDA runtime: it has no %s", path,
                         "cudaGetDeviceCount");
    }
    /* The library stays loaded: the process uses it from here on. */
    rt->path = path;
    *(void **)&entry_point = dlsym(lib, "cudaGetDriverEntryPointByVersion");
    if (!entry_point || entry_point("cuMemGetAddressRange", (void **)&rt->mem_range,
                                    DRIVER_API_VERSION, 0, &found) != KVS__CUDA_SUCCESS
        || found != 0)
        rt->mem_range = NULL;
    *(void **)&version = dlsym(lib, "cudaRuntimeGetVersion");
    if (!version || version(&v) != KVS__CUDA_SUCCESS || v < KVS__CUDA_BATCH_VERSION
        || !(*(void **)&rt->memcpy_batch_async = dlsym(lib, "cudaMemcpyBatchAsync")))
        rt->memcpy_batch_async = NULL;
    rc = count(&n);
    if (rc == CUDA_INSUFFICIENT_DRIVER || rc == CUDA_STUB_LIBRARY
        || rc == CUDA_SYSTEM_DRIVER_MISMATCH)
        return kvs__fail(e, KVS_EDEVICE, "no CUDA driver (%s: %s)", path, rt->error_string(rc));
    if (rc == CUDA_NO_DEVICE || (rc == KVS__CUDA_SUCCESS && n <= 0))
        return kvs__fail(e, KVS_EDEVICE, "no CUDA device (%s)", path);
    if (rc != KVS__CUDA_SUCCESS)
        return kvs__fail(e, KVS_EDEVICE, "cudaGetDeviceCount failed (%s: %s)", path,
                         rt->error_string(rc));
    rt->ndev = n;
    return 0;
}

static void load(void)
{
    const char *path = getenv("KVS_CUDART");

    if (load_runtime(path && *path ? path : KVS__CUDART_DEFAULT, &loaded.rt, &loaded.why) != 0)
        loaded.rt.ndev = 0;
}

const struct kvs__cudart *kvs__cudart(struct kvs__err *e)
{
    pthread_once(&loaded.once, load);
    if (loaded.rt.ndev == 0) {
        kvs__fail(e, loaded.why.code, "%s", loaded.why.msg);
        return NULL;
    }
    return &loaded.rt;
}

int kvs__cuda_devices(struct kvs__err *e)
{
    const struct kvs__cudart *rt = kvs__cudart(e);

    return rt ? rt->ndev : loaded.why.code;
}

int kvs__cuda_device(int i, struct kvs__err *e)
{
    int n = kvs__cuda_devices(e);

    if (n < 0)
        return n;
    if (i < 0 || i >= n)
        return kvs__fail(e, KVS_EDEVICE, "no CUDA device %d (%d device%s)", i, n,
                         n == 1 ? "" : "s");
    return 0;
}
