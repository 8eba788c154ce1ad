/*
 * rowsutil.h - helpers shared by the unit tests of row-sparse values
 * through kvs.h (test_rows.c) and of the row calls beneath it
 * (test_rows_engine.c): the test key's shape, row-sparse views, a key's
 * value set and read, fills, the optimizer state read from the engine,
 * the dense sum, reference sgd and adam on one element, an updater that
 * records its input, and a key's value and state taken to compare after
 * a refusal. The checks end the test through cmocka. Everything here is
 * static inline, so that a test that does not use a helper does not warn.
 */
#ifndef KVS_ROWSUTIL_H
#define KVS_ROWSUTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvs.h"
#include "front.h"
#include "kernels/optim.h"
#include "store/engine.h"
#include "testutil.h"

#define R 10                           /* rows of the test keys */
#define C 3                            /* elements per row */
#define N (R * C)

static inline kvs_row_sparse_t rsp(void *data, int64_t *idx, int64_t nnz, kvs_dtype_t dt)
{
    return (kvs_row_sparse_t){ .data = data, .indices = idx, .nnz = nnz, .dtype = dt, .ndim = 2,
                               .shape = { R, C }, .device = KVS_HOST };
}

static inline void init_f32(kvs_t *kv, int key, const float *w)
{
    kvs_array_t a = ARR(w, KVS_FLOAT32, 2, R, C);

    OK(kvs_init(kv, 1, &IK(key), &a));
}

static inline void pull_f32(kvs_t *kv, int key, float *w)
{
    kvs_array_t a = ARR(w, KVS_FLOAT32, 2, R, C);

    OK(kvs_pull(kv, 1, &IK(key), &a, 0));
}

/* Values that are not round, so that any misplaced operation shows. */
static inline void fill_w(float *w, size_t n, float seed)
{
    for (size_t i = 0; i < n; i++)
        w[i] = seed + 0.37f * (float)i - 0.011f * (float)(i * i % 7);
}

/* The optimizer state of key (NULL: none). */
static inline const struct kvs__optim_state *state_of(kvs_t *kv, int key)
{
    struct kvs__entry_info info;

    if (kvs__engine_lookup(kv->eng, IK(key), &info, NULL) != 0)
        return NULL;
    return kvs__engine_state(kv->eng, info.entry);
}

/* A copy of key's state buffer b (zeros when none). */
static inline void state_buf(kvs_t *kv, int key, int b, float *out)
{
    const struct kvs__optim_state *s = state_of(kv, key);

    memset(out, 0, sizeof(float) * N);
    if (s && b < s->nbuf)
        memcpy(out, s->buf[b], sizeof(float) * N);
}

/* Both state buffers of key are the same, bit for bit, in stores a and b. */
static inline void expect_same_state(kvs_t *a, kvs_t *b, int key)
{
    float sa[N], sb[N];

    for (int buf = 0; buf < 2; buf++) {
        state_buf(a, key, buf, sa);
        state_buf(b, key, buf, sb);
        assert_memory_equal(sa, sb, sizeof sa);
    }
}

/* The dense sum of k row-sparse float32 values, summed in list order. */
static inline void dense_sum(float *out, const kvs_row_sparse_t *v, int k)
{
    memset(out, 0, sizeof(float) * N);
    for (int i = 0; i < k; i++)
        for (int64_t j = 0; j < v[i].nnz; j++)
            for (int c = 0; c < C; c++)
                out[v[i].indices[j] * C + c] += ((const float *)v[i].data)[j * C + c];
}

/* ---- references ----------------------------------------------------- */

/* MXNet's sgd with momentum on one element, in the kernel's order. */
static inline void ref_sgd(float *w, float *mom, float g, float lr, float momentum, float wd,
                           float rescale, float clip)
{
    float cg = rescale * g;

    if (clip > 0)
        cg = cg > clip ? clip : cg < -clip ? -clip : cg;
    *mom = momentum * *mom - lr * wd * *w - lr * cg;
    *w = *w + *mom;
}

/* MXNet's adam on one element: the bias-corrected lr in double from the
 * spec's numbers, the rest in float32 as the kernel computes it. */
static inline void ref_adam(float *w, float *mean, float *var, float g, double lr0, int t,
                            double b1d, double b2d, float eps, float wd, float rescale,
                            float clip)
{
    float lr = (float)(lr0 * (sqrt(1.0 - pow(b2d, t)) / (1.0 - pow(b1d, t))));
    float b1 = (float)b1d, b2 = (float)b2d;
    float gr = g * rescale + *w * wd;

    if (clip > 0)
        gr = gr > clip ? clip : gr < -clip ? -clip : gr;
    *mean = b1 * *mean + (1.0f - b1) * gr;
    *var = b2 * *var + (1.0f - b2) * gr * gr;
    *w = *w - lr * *mean / (sqrtf(*var) + eps);
}

/* ---- an updater that records its input --------------------------------- */

struct seen {
    int calls;
    int ndim;
    int64_t shape[2];
    float in[N];
};

static inline int record(kvs_key_t key, const kvs_array_t *in, kvs_array_t *stored, void *ctx)
{
    struct seen *s = ctx;
    float *w = stored->data;

    (void)key;
    s->calls++;
    s->ndim = in->ndim;
    s->shape[0] = in->shape[0];
    s->shape[1] = in->shape[1];
    memcpy(s->in, in->data, sizeof s->in);
    for (int x = 0; x < N; x++)
        w[x] += 2 * ((const float *)in->data)[x];
    return 0;
}

/* ---- a key taken whole, to compare after a refusal --------------------- */

struct snap {
    float w[N], s0[N], s1[N];
    uint64_t t;
};

static inline void take(kvs_t *kv, int key, struct snap *s)
{
    pull_f32(kv, key, s->w);
    state_buf(kv, key, 0, s->s0);
    state_buf(kv, key, 1, s->s1);
    s->t = state_of(kv, key) ? state_of(kv, key)->t : 0;
}

static inline void expect_same(kvs_t *kv, int key, const struct snap *before)
{
    struct snap now;

    take(kv, key, &now);
    assert_memory_equal(&now, before, sizeof now);
}

#endif
