/*
 * kernels.c - the host build of the kernel module (cuda_kernels.h), for
 * the tests: the entry points of libkvs-cuda.so, loaded by libkvs the way
 * it loads the module nvcc builds (KVS_CUDA_KERNELS), each queuing the
 * host twin of its kernel (kvs__sum, kvs__optim_run) on the stream with
 * cudaLaunchHostFunc. The stand-in runtime (cudart.c) runs it in stream
 * order when someone synchronises, over its own mapping of device memory
 * (kvs_standin_host): the CPU cannot read device pointers themselves.
 *
 * What this proves is libkvs's side of the module: that it is loaded,
 * that launches get the right arguments and streams, and that their
 * results are waited for. The kernels of cuda_kernels.cu are the host's
 * here, so that they give the host's results says nothing of the GPU's
 * (tests/test_kernels.c checks those, on a GPU).
 *
 * A launch copies its arguments, as a kernel launch does: the caller's
 * array of input pointers may be gone when the work runs. A pointer that
 * is not device memory at run time is what a GPU would fault on: the
 * process stops with a message.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "kernels/cuda_kernels.h"
#include "kernels/optim.h"
#include "standin.h"

/* One launch's arguments, copied. */
struct launch {
    int update;                        /* kvs_cuda_update; else kvs_cuda_sum */
    struct kvs_cuda_step st;
    int dtype, k;
    void *out, *buf0, *buf1;
    size_t n;
    const void *in[];
};

int kvs_cuda_kernels_abi(void)
{
    return KVS_CUDA_KERNELS_ABI;
}

/* The runtime's mapping of bytes of device memory at p. */
static void *reach(const void *p, size_t bytes, const char *what)
{
    void *host = kvs_standin_host(p, bytes);

    if (!host) {
        fprintf(stderr, "kvs kernel module (host build): %s %p is not %zu bytes of device "
                "memory\n", what, p, bytes);
        abort();
    }
    return host;
}

static void run(void *arg)
{
    struct launch *l = arg;
    size_t es = kvs_dtype_size((kvs_dtype_t)l->dtype);
    size_t state = (l->dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float)) * l->n;
    const void *in[l->k];
    void *out = reach(l->out, es * l->n, l->update ? "the weight" : "the output");

    for (int i = 0; i < l->k; i++)
        in[i] = reach(l->in[i], es * l->n, "an input");
    if (!l->update)
        kvs__sum((kvs_dtype_t)l->dtype, out, in, l->k, l->n, 1);
    else
        kvs__optim_run(&l->st, (kvs_dtype_t)l->dtype, out, in, l->k,
                       l->buf0 ? reach(l->buf0, state, "a state buffer") : NULL,
                       l->buf1 ? reach(l->buf1, state, "a state buffer") : NULL, l->n, 1);
    free(l);
}

static int launch(const struct launch *args, const void *const *in, void *stream)
{
    struct launch *l;
    int rc;

    if (args->n == 0)
        return 0;
    if (args->k < 1 || kvs_dtype_size((kvs_dtype_t)args->dtype) == 0)
        return cudaErrorInvalidValue;
    if (!(l = malloc(sizeof *l + (size_t)args->k * sizeof l->in[0])))
        return cudaErrorMemoryAllocation;
    *l = *args;
    memcpy(l->in, in, (size_t)args->k * sizeof l->in[0]);
    if ((rc = cudaLaunchHostFunc(stream, run, l)) != cudaSuccess)
        free(l);
    return rc;
}

int kvs_cuda_sum(int dtype, void *out, const void *const *in, int k, size_t n, void *stream)
{
    struct launch l = { .dtype = dtype, .k = k, .out = out, .n = n };

    return launch(&l, in, stream);
}

int kvs_cuda_update(const struct kvs_cuda_step *st, int dtype, void *w, const void *const *in,
                    int k, void *buf0, void *buf1, size_t n, void *stream)
{
    struct launch l = { .update = 1, .st = *st, .dtype = dtype, .k = k, .out = w,
                        .buf0 = buf0, .buf1 = buf1, .n = n };

    return launch(&l, in, stream);
}
