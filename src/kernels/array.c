/*
 * array.c - dtypes, shapes, half and bfloat16 conversion, and the element
 * kernels (sum of k arrays, copy). The check every caller array goes
 * through asks where its memory lies, and so is device/mem.c's.
 *
 * Owns no state and never allocates: scratch lives on the stack, a chunk at
 * a time. It must never keep a pointer to an array past a call, never know
 * about keys or stores, and never stream a big output through memory once
 * per input: each chunk of the output is finished while it is in cache.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "kernels/array.h"
#include "kernels/array_x86.h"
#include "base/pool.h"

/* Elements per kernel chunk: an output chunk plus an input chunk stay in
 * L1 for every dtype (float64: 2 x 16 KiB), and full chunks are compiled
 * with this constant trip count. */
#define CHUNK 2048

#define FOR_EACH KVS__FOR_EACH

/* Arrays at least this big are split over threads; smaller ones cost less
 * than waking another core (tens of microseconds: a 1 MiB sum takes about
 * 80 us on one core here, so splitting it gained nothing). */
#define PARALLEL_BYTES ((size_t)4 << 20)


static const struct {
    size_t size;
    const char *name;
} dtypes[] = {
    [KVS_FLOAT32]  = { 4, "float32" },
    [KVS_FLOAT64]  = { 8, "float64" },
    [KVS_FLOAT16]  = { 2, "float16" },
    [KVS_BFLOAT16] = { 2, "bfloat16" },
    [KVS_INT32]    = { 4, "int32" },
    [KVS_INT64]    = { 8, "int64" },
    [KVS_UINT8]    = { 1, "uint8" },
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

KVS_API size_t kvs_dtype_size(kvs_dtype_t dtype)
{
    /* The enum may be signed or unsigned; the cast catches both sides. */
    unsigned d = (unsigned)dtype;

    return d < NDTYPES ? dtypes[d].size : 0;
}

KVS_API const char *kvs_dtype_name(kvs_dtype_t dtype)
{
    unsigned d = (unsigned)dtype;

    return d < NDTYPES ? dtypes[d].name : "invalid";
}

int kvs__dtype_is_float(kvs_dtype_t dtype)
{
    return dtype == KVS_FLOAT32 || dtype == KVS_FLOAT64 || dtype == KVS_FLOAT16 ||
           dtype == KVS_BFLOAT16;
}

/* ---- Shapes --------------------------------------------------------- */

static int clamp_ndim(int ndim)
{
    return ndim < 0 ? 0 : ndim > KVS_MAX_NDIM ? KVS_MAX_NDIM : ndim;
}

void kvs__shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    char tmp[KVS__SHAPE_STR_MAX];
    size_t pos = 0;

    if (buf == NULL || size == 0)
        return;
    if (ndim < 0 || ndim > KVS_MAX_NDIM || (ndim > 0 && shape == NULL)) {
        snprintf(buf, size, "(?)");
        return;
    }
    tmp[pos++] = '(';
    for (int d = 0; d < ndim; d++)
        pos += (size_t)snprintf(tmp + pos, sizeof tmp - pos, "%s%" PRId64, d ? "," : "",
                                shape[d]);
    tmp[pos++] = ')';
    tmp[pos] = '\0';
    snprintf(buf, size, "%s", tmp);
}

size_t kvs__array_count(const kvs_array_t *a)
{
    size_t n = 1;

    for (int d = 0; d < clamp_ndim(a->ndim); d++)
        n *= (size_t)a->shape[d];
    return n;
}

int kvs__same_shape(const kvs_array_t *a, const kvs_array_t *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < clamp_ndim(a->ndim); d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

/* ---- Half precision ------------------------------------------------- */
/* Written without branches so that the sum and conversion loops that
 * inline them vectorise. */

static inline uint32_t float_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_float(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof f);
    return f;
}

/* All ones when c holds, else zero. Masks instead of ?: because the
 * compiler turns a chain of ?: into branches, which stops vectorisation. */
static inline uint32_t mask_if(int c)
{
    return (uint32_t)0 - (uint32_t)(c != 0);
}

static inline float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t normal = (em << 13) + ((127u - 15u) << 23);
    /* A signalling NaN comes out quiet, as hardware converters do. */
    uint32_t special = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);
    /* Subnormals are an integer count of 2^-24, exact in float. */
    uint32_t tiny = float_bits((float)(int32_t)em * 0x1p-24f);
    uint32_t is_tiny = mask_if(em < 0x0400u), is_special = mask_if(em >= 0x7c00u);
    uint32_t r = (tiny & is_tiny) | (special & is_special) | (normal & ~(is_tiny | is_special));

    return bits_float(sign | r);
}

static inline uint16_t float_to_half(float f)
{
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    /* Rounding by adding just under half an ulp plus the kept lsb gives ties
     * to even; a carry out of the mantissa bumps the exponent, which is also
     * how values from 65520 up become infinity (0x7c00). */
    uint32_t normal = (a - ((127u - 15u) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    /* Below 2^-14 the result is a multiple of 2^-24, the ulp of floats in
     * [0.5, 1): adding 0.5 lets the FPU round to nearest even for us. */
    uint32_t tiny = float_bits(bits_float(a) + 0.5f) - 0x3f000000u;
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);
    uint32_t is_tiny = mask_if(a < 0x38800000u);
    uint32_t is_normal = mask_if(a < 0x47800000u) & ~is_tiny;
    uint32_t is_nan = mask_if(a > 0x7f800000u);
    uint32_t is_inf = ~(is_tiny | is_normal | is_nan);
    uint32_t r = (tiny & is_tiny) | (normal & is_normal) | (nan & is_nan) | (0x7c00u & is_inf);

    return (uint16_t)(sign | r);
}

static inline float bf16_to_float(uint16_t h)
{
    return bits_float((uint32_t)h << 16);
}

static inline uint16_t float_to_bf16(float f)
{
    uint32_t u = float_bits(f);
    /* No NaN reaches the rounding sum, so it cannot wrap; the largest
     * finite floats round up to infinity, as nearest-even requires. */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;

    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

float kvs__f16_to_f32(uint16_t h)
{
    return half_to_float(h);
}

uint16_t kvs__f32_to_f16(float f)
{
    return float_to_half(f);
}

float kvs__bf16_to_f32(uint16_t h)
{
    return bf16_to_float(h);
}

uint16_t kvs__f32_to_bf16(float f)
{
    return float_to_bf16(f);
}

/* ---- Sum ------------------------------------------------------------ */
/* sum_range_X(out, in, k, begin, end) sums elements [begin, end) chunk by
 * chunk: each output chunk gets every input added before the next chunk
 * starts, so the output goes through memory once however many inputs
 * there are. Inputs are added in order in[0], in[1], ... so that
 * floating-point results depend neither on aliasing nor on threads.
 *
 * Output and inputs may be the same memory. The restrict-qualified loops
 * below never see an output that is also one of their inputs: when out is
 * in[0] the first step is out += in[1]; when out is a later input, each
 * chunk is summed into stack scratch and copied out after every input of
 * that chunk was read. */

typedef void sum_range_fn(void *out, const void *const *in, int k, size_t begin, size_t end);

static int out_is_later_input(const void *out, const void *const *in, int k)
{
    for (int j = 1; j < k; j++)
        if (in[j] == out)
            return 1;
    return 0;
}

/* Integers are summed as their unsigned twins (same size, same bits), where
 * overflow wraps by definition; uint8 is promoted to int and cut back. */
#define DEFINE_PLAIN_SUM(sfx, T)                                                          \
    static inline __attribute__((always_inline)) void add2_##sfx(                        \
        T *restrict o, const T *restrict a, const T *restrict b, size_t n)              \
    {                                                                                     \
        FOR_EACH(i, n, o[i] = (T)(a[i] + b[i]));                                          \
    }                                                                                     \
    static inline __attribute__((always_inline)) void add4_##sfx(                        \
        T *restrict o, const T *restrict a, const T *restrict b, const T *restrict c,   \
        const T *restrict d, size_t n)                                                    \
    {                                                                                     \
        FOR_EACH(i, n, o[i] = (T)((T)((T)(a[i] + b[i]) + c[i]) + d[i]));                  \
    }                                                                                     \
    static inline __attribute__((always_inline)) void acc_##sfx(                         \
        T *restrict o, const T *restrict a, size_t n)                                     \
    {                                                                                     \
        FOR_EACH(i, n, o[i] = (T)(o[i] + a[i]));                                          \
    }                                                                                     \
    static inline __attribute__((always_inline)) void acc3_##sfx(                        \
        T *restrict o, const T *restrict a, const T *restrict b, const T *restrict c,   \
        size_t n)                                                                         \
    {                                                                                     \
        FOR_EACH(i, n, o[i] = (T)((T)((T)(o[i] + a[i]) + b[i]) + c[i]));                  \
    }                                                                                     \
    static inline __attribute__((always_inline)) void chunk_##sfx(                       \
        T *o, const void *const *in, int k, size_t off, size_t n, int scratch)            \
    {                                                                                     \
        T t[CHUNK];                                                                       \
        const T *in0 = (const T *)in[0] + off;                                            \
        T *acc = scratch ? t : o;                                                         \
        int j;                                                                            \
                                                                                          \
        if (k == 1) {                                                                     \
            if (o != in0)                                                                 \
                memcpy(o, in0, n * sizeof(T));                                            \
            return;                                                                       \
        }                                                                                 \
        /* Four inputs per pass where there are four: one pass over the   */             \
        /* chunk instead of three. The order of additions stays in[0],    */             \
        /* in[1], ... so results do not depend on k's grouping.           */             \
        if (acc == in0) {                                                                 \
            acc_##sfx(acc, (const T *)in[1] + off, n);                                    \
            j = 2;                                                                        \
        } else if (k >= 4) {                                                              \
            add4_##sfx(acc, in0, (const T *)in[1] + off, (const T *)in[2] + off,          \
                       (const T *)in[3] + off, n);                                        \
            j = 4;                                                                        \
        } else {                                                                          \
            add2_##sfx(acc, in0, (const T *)in[1] + off, n);                              \
            j = 2;                                                                        \
        }                                                                                 \
        for (; j + 3 <= k; j += 3)                                                        \
            acc3_##sfx(acc, (const T *)in[j] + off, (const T *)in[j + 1] + off,           \
                       (const T *)in[j + 2] + off, n);                                    \
        for (; j < k; j++)                                                                \
            acc_##sfx(acc, (const T *)in[j] + off, n);                                    \
        if (scratch)                                                                      \
            memcpy(o, t, n * sizeof(T));                                                  \
    }                                                                                     \
    static void sum_range_##sfx(void *out, const void *const *in, int k, size_t begin,   \
                                size_t end)                                               \
    {                                                                                     \
        int scratch = out_is_later_input(out, in, k);                                     \
        T *o = out;                                                                       \
        size_t c = begin;                                                                 \
                                                                                          \
        /* Two call sites: the constant one is compiled for full chunks. */               \
        for (; end - c >= CHUNK; c += CHUNK)                                              \
            chunk_##sfx(o + c, in, k, c, CHUNK, scratch);                                 \
        if (c < end)                                                                      \
            chunk_##sfx(o + c, in, k, c, end - c, scratch);                               \
    }

DEFINE_PLAIN_SUM(f32, float)
DEFINE_PLAIN_SUM(f64, double)
DEFINE_PLAIN_SUM(u32, uint32_t)
DEFINE_PLAIN_SUM(u64, uint64_t)
DEFINE_PLAIN_SUM(u8, uint8_t)

/* Faster half kernels for this CPU (array_x86.c), or NULL: picked once,
 * used by every half sum and conversion below. */
static const struct kvs__half_kernels *fast_f16, *fast_bf16;
static pthread_once_t fast_once = PTHREAD_ONCE_INIT;

static void pick_fast_kernels(void)
{
    fast_f16 = kvs__half_x86(KVS_FLOAT16);
    fast_bf16 = kvs__half_x86(KVS_BFLOAT16);
}

static const struct kvs__half_kernels *fast_kernels(kvs_dtype_t dtype)
{
    pthread_once(&fast_once, pick_fast_kernels);
    return dtype == KVS_FLOAT16 ? fast_f16 : fast_bf16;
}

/* float16 and bfloat16: each chunk is widened into float32 scratch, the
 * inputs are added there, and the result is rounded once. Every input of a
 * chunk is read before its output is written, so aliasing needs no care. */
#define DEFINE_HALF_SUM(sfx, dtype, to_float, from_float)                                        \
    static inline __attribute__((always_inline)) void widen_##sfx(                       \
        float *restrict t, const uint16_t *restrict a, size_t n)                          \
    {                                                                                     \
        FOR_EACH(i, n, t[i] = to_float(a[i]));                                            \
    }                                                                                     \
    static inline __attribute__((always_inline)) void widen_acc_##sfx(                   \
        float *restrict t, const uint16_t *restrict a, size_t n)                          \
    {                                                                                     \
        FOR_EACH(i, n, t[i] += to_float(a[i]));                                           \
    }                                                                                     \
    static inline __attribute__((always_inline)) void narrow_##sfx(                      \
        uint16_t *restrict o, const float *restrict t, size_t n)                          \
    {                                                                                     \
        FOR_EACH(i, n, o[i] = from_float(t[i]));                                          \
    }                                                                                     \
    static inline __attribute__((always_inline)) void chunk_##sfx(                       \
        uint16_t *o, const void *const *in, int k, size_t off, size_t n)                  \
    {                                                                                     \
        float t[CHUNK];                                                                   \
                                                                                          \
        if (k == 1) {                                                                     \
            const uint16_t *in0 = (const uint16_t *)in[0] + off;                          \
            if (o != in0)                                                                 \
                memcpy(o, in0, n * sizeof *o);                                            \
            return;                                                                       \
        }                                                                                 \
        widen_##sfx(t, (const uint16_t *)in[0] + off, n);                                 \
        for (int j = 1; j < k; j++)                                                       \
            widen_acc_##sfx(t, (const uint16_t *)in[j] + off, n);                         \
        narrow_##sfx(o, t, n);                                                            \
    }                                                                                     \
    static void sum_range_##sfx(void *out, const void *const *in, int k, size_t begin,   \
                                size_t end)                                               \
    {                                                                                     \
        const struct kvs__half_kernels *fast = fast_kernels(dtype);                       \
        uint16_t *o = out;                                                                \
        size_t c = begin;                                                                 \
                                                                                          \
        if (fast && k >= 2) {                                                             \
            fast->sum(o, in, k, begin, end);                                              \
            return;                                                                       \
        }                                                                                 \
        for (; end - c >= CHUNK; c += CHUNK)                                              \
            chunk_##sfx(o + c, in, k, c, CHUNK);                                          \
        if (c < end)                                                                      \
            chunk_##sfx(o + c, in, k, c, end - c);                                        \
    }

DEFINE_HALF_SUM(f16, KVS_FLOAT16, half_to_float, float_to_half)
DEFINE_HALF_SUM(bf16, KVS_BFLOAT16, bf16_to_float, float_to_bf16)

static sum_range_fn *const sum_ranges[] = {
    [KVS_FLOAT32]  = sum_range_f32,
    [KVS_FLOAT64]  = sum_range_f64,
    [KVS_FLOAT16]  = sum_range_f16,
    [KVS_BFLOAT16] = sum_range_bf16,
    [KVS_INT32]    = sum_range_u32,
    [KVS_INT64]    = sum_range_u64,
    [KVS_UINT8]    = sum_range_u8,
};

struct sum_job {
    sum_range_fn *fn;
    void *out;
    const void *const *in;
    int k;
};

static void sum_task(void *ctx, size_t begin, size_t end)
{
    struct sum_job *job = ctx;

    job->fn(job->out, job->in, job->k, begin, end);
}

void kvs__sum(kvs_dtype_t dtype, void *out, const void *const *in, int k, size_t n,
              int nthreads)
{
    unsigned d = (unsigned)dtype;
    size_t es = kvs_dtype_size(dtype), bytes;
    struct sum_job job;

    /* An overflow means an array that never passed kvs__array_check. */
    if (es == 0 || n == 0 || __builtin_mul_overflow(n, es, &bytes))
        return;
    if (k <= 0) {
        /* The empty sum: all-zero bits are zero in every dtype. */
        memset(out, 0, bytes);
        return;
    }
    job = (struct sum_job){ .fn = sum_ranges[d], .out = out, .in = in, .k = k };
    if (bytes < PARALLEL_BYTES || nthreads == 1) {
        job.fn(out, in, k, 0, n);
        return;
    }
    /* Half the threshold per chunk: a share big enough to pay for waking
     * a thread, small enough that 1 MiB already splits in two. */
    kvs__parallel_for(n, (PARALLEL_BYTES / 2) / es, nthreads, sum_task, &job);
}

/* Elements [begin, begin + n) of the sum, into out[0 .. n): a part of what
 * kvs__sum makes, element for element, on the calling thread. */
void kvs__sum_part(kvs_dtype_t dtype, void *out, const void *const *in, int k, size_t begin,
                   size_t n)
{
    for (size_t c = 0; c < n; c += CHUNK) {
        size_t m = n - c < CHUNK ? n - c : CHUNK;

        switch (dtype) {
        case KVS_FLOAT32:  chunk_f32((float *)out + c, in, k, begin + c, m, 0); break;
        case KVS_FLOAT64:  chunk_f64((double *)out + c, in, k, begin + c, m, 0); break;
        case KVS_FLOAT16:  chunk_f16((uint16_t *)out + c, in, k, begin + c, m); break;
        case KVS_BFLOAT16: chunk_bf16((uint16_t *)out + c, in, k, begin + c, m); break;
        case KVS_INT32:    chunk_u32((uint32_t *)out + c, in, k, begin + c, m, 0); break;
        case KVS_INT64:    chunk_u64((uint64_t *)out + c, in, k, begin + c, m, 0); break;
        case KVS_UINT8:    chunk_u8((uint8_t *)out + c, in, k, begin + c, m, 0); break;
        }
    }
}

/* ---- Inputs read from elsewhere -------------------------------------- */

int kvs__fetch_blocks(struct kvs__fetch *f, const void *const *in,
                      const struct kvs__source *src, int k, size_t es, size_t begin,
                      size_t end, kvs__block_fn *fn, void *arg)
{
    const void *blk[KVS__FETCH_MAX_K];
    size_t per = KVS__FETCH_BYTES / es, need = 0;

    if (k > KVS__FETCH_MAX_K || per == 0)
        return -EINVAL;
    for (int j = 0; src && j < k; j++)
        need += src[j].read ? KVS__FETCH_BYTES : 0;
    if (need > f->cap) {
        void *b = realloc(f->buf, need);

        if (!b)
            return -ENOMEM;
        f->buf = b;
        f->cap = need;
    }
    for (size_t b = begin; b < end; b += per) {
        size_t e = end - b < per ? end - b : per;
        char *at = f->buf;

        e += b;
        for (int j = 0; j < k; j++) {
            int rc;

            if (!src || !src[j].read) {
                blk[j] = (const char *)in[j] + b * es;
                continue;
            }
            if ((rc = src[j].read(src[j].ctx, b * es, at, (e - b) * es)) != 0)
                return rc;
            blk[j] = at;
            at += KVS__FETCH_BYTES;
        }
        fn(arg, b, e, blk);
    }
    return 0;
}

/* ---- Many sums as one job ------------------------------------------- */

struct many_job {
    const struct kvs__sum_item *items;
    const size_t *start;               /* m + 1 byte offsets: item i is [start[i], start[i+1]) */
    int m;
    _Atomic int err;                   /* the first source's error, or 0 */
};

/* Elements [b, e) of one sum whose inputs blk[] point at element b. */
static void sum_block(void *arg, size_t b, size_t e, const void *const *blk)
{
    const struct kvs__sum_item *it = arg;
    size_t es = kvs_dtype_size(it->dtype);
    char *out = (char *)it->out + b * es;

    sum_ranges[(unsigned)it->dtype](out, blk, it->k, 0, e - b);
    if (it->sink)
        it->sink->write(it->sink->ctx, b * es, out, (e - b) * es);
}

/* Elements [e0, e1) of item it, its sources read a block at a time into
 * f; a failure is kept in *err (the first one). */
static void sum_item_part(const struct kvs__sum_item *it, size_t e0, size_t e1,
                          struct kvs__fetch *f, _Atomic int *err)
{
    int rc, none = 0;

    if (!it->src && !it->sink) {
        sum_ranges[(unsigned)it->dtype](it->out, it->in, it->k, e0, e1);
        return;
    }
    if (atomic_load_explicit(err, memory_order_relaxed) != 0)
        return;                        /* another part failed: the sum is lost */
    rc = kvs__fetch_blocks(f, it->in, it->src, it->k, kvs_dtype_size(it->dtype), e0, e1,
                           sum_block, (void *)it);
    if (rc != 0)
        atomic_compare_exchange_strong(err, &none, rc);
}

/* The items' bytes laid end to end; a chunk [begin, end) of that line sums
 * the elements that start in it, so the chunks split every item exactly. */
static void many_task(void *ctx, size_t begin, size_t end)
{
    struct many_job *job = ctx;
    struct kvs__fetch f = { NULL, 0 };

    for (int i = kvs__span_first(job->start, job->m, begin);
         i < job->m && job->start[i] < end; i++) {
        const struct kvs__sum_item *it = &job->items[i];
        size_t es = kvs_dtype_size(it->dtype), s = job->start[i],
               bytes = job->start[i + 1] - s,
               b = begin > s ? begin - s : 0, e = end - s < bytes ? end - s : bytes,
               e0 = (b + es - 1) / es, e1 = (e + es - 1) / es;

        if (e0 < e1)
            sum_item_part(it, e0, e1, &f, &job->err);
    }
    free(f.buf);
}

struct out_range {
    uintptr_t lo, hi;
    int item;
};

static int out_range_cmp(const void *a, const void *b)
{
    const struct out_range *x = a, *y = b;

    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* 1 when an output overlaps another item's output or inputs (or when that
 * cannot be checked for want of memory). */
static int items_overlap(const struct kvs__sum_item *items, int m, const size_t *start)
{
    struct out_range *r = malloc(sizeof *r * (size_t)m);
    int clash = 0;

    if (!r)
        return 1;
    for (int i = 0; i < m; i++)
        r[i] = (struct out_range){ (uintptr_t)items[i].out,
                                   (uintptr_t)items[i].out + (start[i + 1] - start[i]), i };
    qsort(r, (size_t)m, sizeof *r, out_range_cmp);
    for (int i = 1; i < m && !clash; i++)
        clash = r[i].lo < r[i - 1].hi;
    for (int i = 0; i < m && !clash; i++) {
        size_t bytes = start[i + 1] - start[i];

        for (int j = 0; j < items[i].k && !clash; j++) {
            uintptr_t lo = (uintptr_t)items[i].in[j], hi = lo + bytes;
            int a = 0, b = m;

            if (items[i].src && items[i].src[j].read)
                continue;              /* not in this process's memory */

            while (a < b) {            /* the first output that ends after lo */
                int mid = a + (b - a) / 2;

                if (r[mid].hi <= lo)
                    a = mid + 1;
                else
                    b = mid;
            }
            for (int x = a; x < m && r[x].lo < hi && !clash; x++)
                clash = r[x].item != i;
        }
    }
    free(r);
    return clash;
}

int kvs__sum_many(const struct kvs__sum_item *items, int m, int nthreads)
{
    size_t *start, total = 0;
    int ok = 1, rc;

    if (m <= 0)
        return 0;
    if (!(start = malloc(sizeof *start * ((size_t)m + 1))))
        ok = 0;
    for (int i = 0; ok && i < m; i++) {
        size_t bytes;

        start[i] = total;
        if (items[i].k <= 0 || kvs_dtype_size(items[i].dtype) == 0
            || __builtin_mul_overflow(items[i].n, kvs_dtype_size(items[i].dtype), &bytes)
            || __builtin_add_overflow(total, bytes, &total))
            ok = 0;                    /* empty sums and the like: one at a time */
    }
    if (ok)
        start[m] = total;
    if (!ok || total < PARALLEL_BYTES || nthreads == 1 || items_overlap(items, m, start)) {
        struct kvs__fetch f = { NULL, 0 };
        _Atomic int err = 0;

        for (int i = 0; i < m && atomic_load(&err) == 0; i++) {
            if ((items[i].src || items[i].sink) && items[i].k > 0)
                sum_item_part(&items[i], 0, items[i].n, &f, &err);
            else
                kvs__sum(items[i].dtype, items[i].out, items[i].in, items[i].k, items[i].n,
                         nthreads);
        }
        free(f.buf);
        rc = atomic_load(&err);
    } else {
        struct many_job job = { items, start, m, 0 };

        kvs__parallel_for(total, PARALLEL_BYTES / 2, nthreads, many_task, &job);
        rc = atomic_load(&job.err);
    }
    free(start);
    return rc;
}

/* ---- Copy and conversion -------------------------------------------- */

struct copy_job {
    char *dst;
    const char *src;
};

static void copy_task(void *ctx, size_t begin, size_t end)
{
    struct copy_job *job = ctx;

    memcpy(job->dst + begin, job->src + begin, end - begin);
}

void kvs__copy(void *dst, const void *src, size_t bytes, int nthreads)
{
    struct copy_job job = { .dst = dst, .src = src };

    if (bytes == 0 || dst == src)
        return;
    if (bytes < PARALLEL_BYTES || nthreads == 1) {
        memcpy(dst, src, bytes);
        return;
    }
    kvs__parallel_for(bytes, PARALLEL_BYTES / 2, nthreads, copy_task, &job);
}

void kvs__to_f32(kvs_dtype_t dtype, float *dst, const void *src, size_t n)
{
    switch (dtype) {
    case KVS_FLOAT32:
        if ((const void *)dst != src)
            memmove(dst, src, n * sizeof *dst);
        break;
    case KVS_FLOAT64:
        FOR_EACH(i, n, dst[i] = (float)((const double *)src)[i]);
        break;
    case KVS_FLOAT16:
        if (fast_kernels(dtype))
            fast_kernels(dtype)->widen(dst, src, n);
        else
            FOR_EACH(i, n, dst[i] = half_to_float(((const uint16_t *)src)[i]));
        break;
    case KVS_BFLOAT16:
        if (fast_kernels(dtype))
            fast_kernels(dtype)->widen(dst, src, n);
        else
            FOR_EACH(i, n, dst[i] = bf16_to_float(((const uint16_t *)src)[i]));
        break;
    default:
        /* Not a float dtype: the caller checks kvs__dtype_is_float first. */
        break;
    }
}

void kvs__from_f32(kvs_dtype_t dtype, void *dst, const float *src, size_t n)
{
    switch (dtype) {
    case KVS_FLOAT32:
        if (dst != (const void *)src)
            memmove(dst, src, n * sizeof *src);
        break;
    case KVS_FLOAT64:
        FOR_EACH(i, n, ((double *)dst)[i] = (double)src[i]);
        break;
    case KVS_FLOAT16:
        if (fast_kernels(dtype))
            fast_kernels(dtype)->narrow(dst, src, n);
        else
            FOR_EACH(i, n, ((uint16_t *)dst)[i] = float_to_half(src[i]));
        break;
    case KVS_BFLOAT16:
        if (fast_kernels(dtype))
            fast_kernels(dtype)->narrow(dst, src, n);
        else
            FOR_EACH(i, n, ((uint16_t *)dst)[i] = float_to_bf16(src[i]));
        break;
    default:
        break;
    }
}
