/*
 * cuda.c - loading the CUDA runtime (cuda.h). The library is built
 * without the toolkit's headers: the few entry points it calls are
 * declared here by their documented signatures (cudaError_t is an enum,
 * passed as an int).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "cuda.h"

/* cudaError_t values that say why there is no device. */
enum {
    CUDA_SUCCESS = 0,
    CUDA_STUB_LIBRARY = 34,            /* the toolkit's stub, not a driver */
    CUDA_INSUFFICIENT_DRIVER = 35,     /* no driver, or one too old */
    CUDA_NO_DEVICE = 100,
    CUDA_SYSTEM_DRIVER_MISMATCH = 803,
};

static struct {
    pthread_once_t once;
    int ndev;                          /* > 0, or 0 with why */
    struct kvs__err why;
} rt = { .once = PTHREAD_ONCE_INIT };

/* Counts the devices through the library at path, or says why not. */
static int count_devices(const char *path, struct kvs__err *e)
{
    int (*count)(int *);
    const char *(*say)(int);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int n = 0, rc;

    if (!lib)
        return kvs__fail(e, KVS_EDEVICE, "no CUDA runtime: %s cannot be loaded (%s)", path,
                         dlerror());
    *(void **)&count = dlsym(lib, "cudaGetDeviceCount");
    *(void **)&say = dlsym(lib, "cudaGetErrorString");
    if (!count || !say) {
        dlclose(lib);
        return kvs__fail(e, KVS_EDEVICE, "%s is not a CUDA runtime: it has no %s", path,
                         count ? "cudaGetErrorString" : "cudaGetDeviceCount");
    }
    /* The library stays loaded: the process uses it from here on. */
    rc = count(&n);
    if (rc == CUDA_INSUFFICIENT_DRIVER || rc == CUDA_STUB_LIBRARY
        || rc == CUDA_SYSTEM_DRIVER_MISMATCH)
        return kvs__fail(e, KVS_EDEVICE, "no CUDA driver (%s: %s)", path, say(rc));
    if (rc == CUDA_NO_DEVICE || (rc == CUDA_SUCCESS && n <= 0))
        return kvs__fail(e, KVS_EDEVICE, "no CUDA device (%s)", path);
    if (rc != CUDA_SUCCESS)
        return kvs__fail(e, KVS_EDEVICE, "cudaGetDeviceCount failed (%s: %s)", path, say(rc));
    return n;
}

static void load(void)
{
    const char *path = getenv("KVS_CUDART");
    int n = count_devices(path && *path ? path : KVS__CUDART_DEFAULT, &rt.why);

    rt.ndev = n > 0 ? n : 0;
}

int kvs__cuda_devices(struct kvs__err *e)
{
    pthread_once(&rt.once, load);
    if (rt.ndev == 0)
        return kvs__fail(e, rt.why.code, "%s", rt.why.msg);
    return rt.ndev;
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
