/*
 * optim_state.c - the state buffers an optimizer keeps per key (momentum;
 * adam's mean and variance), on the host or a GPU.
 *
 * Owns their allocation and copying, which is all that ties optimizer
 * state to the memory providers. It must never update or read the values:
 * the update kernels (kernels/optim.c) do, on buffers handed in.
 */
#include <errno.h>
#include <stdlib.h>

#include "kernels/array.h"
#include "device/mem.h"
#include "store/optim_state.h"

int kvs__optim_state_new(const struct kvs__optim *o, kvs_dtype_t dtype, size_t count,
                         int device, struct kvs__optim_state **out, struct kvs__err *e)
{
    struct kvs__optim_state *s;
    size_t esize, bytes;
    int rc;

    if (o == NULL || out == NULL)
        return kvs__fail(e, KVS_EBADARG, "optimizer state: %s is NULL",
                         o == NULL ? "optimizer" : "output");
    *out = NULL;
    if (!kvs__dtype_is_float(dtype))
        return kvs__fail(e, KVS_EDTYPE, "optimizer %s: dtype %s is not a float type",
                         kvs__optim_name(o), kvs_dtype_name(dtype));
    /* float64 keys keep float64 state; every other float type is computed
     * in float32 and keeps float32 state, like MXNet's multi-precision mode. */
    esize = dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float);
    if (__builtin_mul_overflow(count, esize, &bytes))
        return kvs__fail(e, -ENOMEM, "optimizer %s: state of %zu elements is too large",
                         kvs__optim_name(o), count);
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return kvs__fail(e, -ENOMEM, "optimizer %s: out of memory", kvs__optim_name(o));
    s->dtype = dtype == KVS_FLOAT64 ? KVS_FLOAT64 : KVS_FLOAT32;
    s->count = count;
    s->device = device;
    for (int i = 0; i < kvs__optim_nbuf(o) && bytes != 0; i++) {
        if ((rc = kvs__mem_alloc(device, bytes, 1, &s->buf[i], e)) != 0) {
            kvs__optim_state_free(s);
            return rc;
        }
    }
    s->nbuf = kvs__optim_nbuf(o);
    *out = s;
    return 0;
}

void kvs__optim_state_free(struct kvs__optim_state *s)
{
    if (s == NULL)
        return;
    kvs__mem_free(s->device, s->buf[1]);
    kvs__mem_free(s->device, s->buf[0]);
    free(s);
}

int kvs__optim_state_copy(const struct kvs__optim_state *s, int device,
                          struct kvs__optim_state **out, struct kvs__err *e)
{
    size_t bytes = s->count * (s->dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float));
    struct kvs__optim_state *t = calloc(1, sizeof *t);
    int rc = 0;

    *out = NULL;
    if (!t)
        return kvs__fail(e, -ENOMEM, "out of memory for an optimizer state");
    *t = *s;
    t->device = device;
    t->buf[0] = t->buf[1] = NULL;
    for (int b = 0; b < s->nbuf && bytes != 0 && rc == 0; b++) {
        if ((rc = kvs__mem_alloc(device, bytes, 0, &t->buf[b], e)) == 0)
            rc = kvs__mem_copy(t->buf[b], device, s->buf[b], s->device, bytes, 0, e);
    }
    if (rc == 0)
        rc = kvs__mem_finish(e);
    if (rc != 0) {
        kvs__mem_finish(NULL);
        kvs__optim_state_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
