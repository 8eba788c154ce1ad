/*
 * cuda_kernels.cu - libkvs-cuda.so, the GPU twins of the host's element
 * kernels: array.c's sum of k arrays and optim.c's sgd and adam with the
 * gradient summed beside the update (cuda_kernels.h). libkvs dlopens it.
 *
 * Every element comes out as the host makes it, bit for bit: the same
 * operations in the same order, built with -fmad=false (no fused
 * multiply-adds, which the host's gcc does not make either), IEEE division
 * and square root, subnormals kept; half types converted by the host's own
 * bit arithmetic, not the GPU's converters (whose NaNs differ); and a NaN
 * result carrying the bits an x86 host gives it (see x86_nan), which the
 * GPU's arithmetic alone would not.
 *
 * Owns no memory but the pointer table of a sum of many inputs, which
 * lives and dies on the caller's stream. It must never synchronise the
 * device or a stream, never allocate outside the stream's order, and never
 * export anything but the entry points of cuda_kernels.h. The element
 * functions are __host__ __device__ so that they can be checked against
 * the host kernels without a GPU.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

/* The module is built with -fvisibility=hidden: what the header declares
 * is all it exports. */
#pragma GCC visibility push(default)
#include "kernels/cuda_kernels.h"
#pragma GCC visibility pop

#define HD __host__ __device__

/* Threads per block, and the most blocks a launch takes: enough to fill
 * any current GPU several times over; bigger arrays are walked by
 * grid-stride loops with size_t indices. */
#define THREADS 256
#define MAX_BLOCKS 32768

/* Input pointers passed in a kernel's parameters; a sum of more inputs
 * reads them from a table in device memory. */
#define NEAR_INPUTS 32

enum { DT_F32, DT_F64, DT_F16, DT_BF16, DT_I32, DT_I64, DT_U8 };   /* kvs_dtype_t */
enum { KIND_SGD, KIND_ADAM };

/* ---- Bits and half precision ------------------------------------------ */

/* The half types as stored: two bytes each, told apart by type so that
 * load and store below pick their conversions. */
struct f16 {
    uint16_t bits;
};
struct bf16 {
    uint16_t bits;
};

HD static inline uint32_t f32_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof u);
    return u;
}

HD static inline float bits_f32(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof f);
    return f;
}

HD static inline uint64_t f64_bits(double d)
{
    uint64_t u;

    memcpy(&u, &d, sizeof u);
    return u;
}

HD static inline double bits_f64(uint64_t u)
{
    double d;

    memcpy(&d, &u, sizeof d);
    return d;
}

/* array.c's half_to_float, as branches: a signalling NaN comes out quiet,
 * subnormals are an integer count of 2^-24 (exact in float). */
HD static inline float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t r;

    if (em < 0x0400u)
        r = f32_bits((float)(int32_t)em * 0x1p-24f);
    else if (em >= 0x7c00u)
        r = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);
    else
        r = (em << 13) + ((127u - 15u) << 23);
    return bits_f32(sign | r);
}

/* array.c's float_to_half: nearest even by integer rounding for normal
 * results (a carry into the exponent makes 65520 and up infinity), by the
 * FPU's own rounding for subnormal ones, NaNs quiet with their top
 * payload bits. */
HD static inline uint16_t float_to_half(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t r;

    if (a < 0x38800000u)
        r = f32_bits(bits_f32(a) + 0.5f) - 0x3f000000u;
    else if (a < 0x47800000u)
        r = (a - ((127u - 15u) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    else if (a > 0x7f800000u)
        r = 0x7e00u | ((a >> 13) & 0x03ffu);
    else
        r = 0x7c00u;
    return (uint16_t)(sign | r);
}

HD static inline float bf16_to_float(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* array.c's float_to_bf16: nearest even, NaN made quiet. */
HD static inline uint16_t float_to_bf16(float f)
{
    uint32_t u = f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* An element as the kernels compute with it: half types widened to float,
 * the others as they are; store rounds back. */
template <typename T> HD static inline T load(const T *p)
{
    return *p;
}

HD static inline float load(const struct f16 *p)
{
    return half_to_float(p->bits);
}

HD static inline float load(const struct bf16 *p)
{
    return bf16_to_float(p->bits);
}

template <typename T> HD static inline void store(T *p, T v)
{
    *p = v;
}

HD static inline void store(struct f16 *p, float v)
{
    p->bits = float_to_half(v);
}

HD static inline void store(struct bf16 *p, float v)
{
    p->bits = float_to_bf16(v);
}

/* ---- Arithmetic with the host's NaNs ----------------------------------- */

/* IEEE leaves a NaN result's bits open. An x86-64 host (SSE) gives the
 * first operand when it is a NaN, else the second, made quiet, and for an
 * invalid operation on numbers (inf - inf, 0 * inf, 0 / 0, sqrt(-1)) the
 * "real indefinite", a quiet NaN with the sign set; a GPU gives one
 * canonical NaN in every case. r is the GPU's result of a op b. Results
 * that are numbers are IEEE's on both sides and pass unchanged.
 *
 * So a NaN that comes in (or is made) and flows through keeps the bits
 * the host gives it. Where two different NaNs meet, the host keeps the
 * one its compiler happened to put first, which source order does not
 * fix; here it is the first in source order. */
HD static inline float x86_nan(float r, float a, float b)
{
    if (r == r)
        return r;
    if (a != a)
        return bits_f32(f32_bits(a) | 0x00400000u);
    if (b != b)
        return bits_f32(f32_bits(b) | 0x00400000u);
    return bits_f32(0xffc00000u);
}

HD static inline double x86_nan(double r, double a, double b)
{
    if (r == r)
        return r;
    if (a != a)
        return bits_f64(f64_bits(a) | 0x0008000000000000u);
    if (b != b)
        return bits_f64(f64_bits(b) | 0x0008000000000000u);
    return bits_f64(0xfff8000000000000u);
}

/* Integers are summed as their unsigned twins, wrapping; uint8 is
 * promoted to int and cut back, as array.c does. */
template <typename T> HD static inline T add(T a, T b)
{
    return (T)(a + b);
}

HD static inline float add(float a, float b)
{
    return x86_nan(a + b, a, b);
}

HD static inline double add(double a, double b)
{
    return x86_nan(a + b, a, b);
}

template <typename C> HD static inline C sub(C a, C b)
{
    return x86_nan(a - b, a, b);
}

template <typename C> HD static inline C mul(C a, C b)
{
    return x86_nan(a * b, a, b);
}

template <typename C> HD static inline C quot(C a, C b)
{
    return x86_nan(a / b, a, b);
}

/* sqrtf for float, sqrt for double, as optim.c picks them. */
HD static inline float root(float a)
{
    return x86_nan(sqrtf(a), a, a);
}

HD static inline double root(double a)
{
    return x86_nan(sqrt(a), a, a);
}

/* ---- Sum --------------------------------------------------------------- */

/* The k inputs of a sum: in the kernel's parameters when they fit, else a
 * table in device memory. */
struct inputs {
    const void *near[NEAR_INPUTS];
    const void *const *far;
    int k;
};

HD static inline const void *input(const struct inputs *in, int i)
{
    return in->far ? in->far[i] : in->near[i];
}

/* Element j of in[0] + ... + in[k-1], added in that order in A (float for
 * the half types, the dtype itself for the others), before rounding to
 * the dtype: array.c's sum for one element. */
template <typename T, typename A> HD static inline A sum_at(const struct inputs *in, size_t j)
{
    A acc = load((const T *)input(in, 0) + j);

    for (int i = 1; i < in->k; i++)
        acc = add(acc, (A)load((const T *)input(in, i) + j));
    return acc;
}

__device__ static inline size_t first_index(void)
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ static inline size_t grid_stride(void)
{
    return (size_t)gridDim.x * blockDim.x;
}

static unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;

    return b < MAX_BLOCKS ? (unsigned)b : MAX_BLOCKS;
}

/* Every input of element j is read before out[j] is written, so out may
 * be one of them. The inputs are __grid_constant__ so that indexing them
 * reads the parameters in place instead of copying them per thread. */
template <typename T, typename A>
static __global__ void sum_kernel(T *out, const __grid_constant__ struct inputs in, size_t n)
{
    for (size_t j = first_index(); j < n; j += grid_stride())
        store(out + j, sum_at<T, A>(&in, j));
}

template <typename T, typename A>
static int launch_sum(void *out, const struct inputs *in, size_t n, cudaStream_t s)
{
    sum_kernel<T, A><<<blocks_for(n), THREADS, 0, s>>>((T *)out, *in, n);
    return (int)cudaGetLastError();
}

/* One slice of a pointer table, written by a kernel so that the pointers
 * travel in launch parameters, not through a copy from pageable host
 * memory (which may wait for the stream). */
struct slice {
    const void *p[NEAR_INPUTS];
    int count;
};

static __global__ void fill_table(const void **table, const __grid_constant__ struct slice sl)
{
    if ((int)threadIdx.x < sl.count)
        table[threadIdx.x] = sl.p[threadIdx.x];
}

/* Fills b for the k device pointers of in; for more than NEAR_INPUTS, a
 * table allocated and filled on stream s, which unbind_inputs frees
 * there, after the kernels that read it. */
static int bind_inputs(struct inputs *b, const void *const *in, int k, cudaStream_t s)
{
    const void **table;
    int rc;

    memset(b, 0, sizeof *b);
    b->k = k;
    if (k <= NEAR_INPUTS) {
        memcpy(b->near, in, (size_t)k * sizeof *in);
        return 0;
    }
    rc = (int)cudaMallocAsync((void **)&table, (size_t)k * sizeof *table, s);
    if (rc != 0)
        return rc;
    for (int i = 0; i < k; i += NEAR_INPUTS) {
        struct slice sl;

        sl.count = k - i < NEAR_INPUTS ? k - i : NEAR_INPUTS;
        memset(sl.p, 0, sizeof sl.p);
        memcpy(sl.p, in + i, (size_t)sl.count * sizeof *in);
        fill_table<<<1, NEAR_INPUTS, 0, s>>>(table + i, sl);
        rc = (int)cudaGetLastError();
        if (rc != 0) {
            cudaFreeAsync(table, s);
            return rc;
        }
    }
    b->far = table;
    return 0;
}

/* Frees b's table, if it has one; returns rc, the outcome so far, or the
 * free's error when rc is 0. */
static int unbind_inputs(struct inputs *b, cudaStream_t s, int rc)
{
    int frc = b->far ? (int)cudaFreeAsync((void *)b->far, s) : 0;

    return rc != 0 ? rc : frc;
}

static size_t dtype_size(int dtype)
{
    switch (dtype) {
    case DT_F32: case DT_I32: return 4;
    case DT_F64: case DT_I64: return 8;
    case DT_F16: case DT_BF16: return 2;
    case DT_U8: return 1;
    default: return 0;
    }
}

int kvs_cuda_kernels_abi(void)
{
    return KVS_CUDA_KERNELS_ABI;
}

int kvs_cuda_sum(int dtype, void *out, const void *const *in, int k, size_t n, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    size_t es = dtype_size(dtype), bytes;
    struct inputs b;
    int rc;

    if (es == 0 || __builtin_mul_overflow(n, es, &bytes))
        return (int)cudaErrorInvalidValue;
    if (n == 0)
        return 0;
    /* kvs__sum's empty sum: all-zero bits are zero in every dtype. */
    if (k <= 0)
        return (int)cudaMemsetAsync(out, 0, bytes, s);
    /* One input is copied, not converted: a signalling NaN stays one. */
    if (k == 1)
        return out == in[0] ? 0 : (int)cudaMemcpyAsync(out, in[0], bytes, cudaMemcpyDefault, s);
    rc = bind_inputs(&b, in, k, s);
    if (rc != 0)
        return rc;
    switch (dtype) {
    case DT_F32:  rc = launch_sum<float, float>(out, &b, n, s); break;
    case DT_F64:  rc = launch_sum<double, double>(out, &b, n, s); break;
    case DT_F16:  rc = launch_sum<struct f16, float>(out, &b, n, s); break;
    case DT_BF16: rc = launch_sum<struct bf16, float>(out, &b, n, s); break;
    case DT_I32:  rc = launch_sum<uint32_t, uint32_t>(out, &b, n, s); break;
    case DT_I64:  rc = launch_sum<uint64_t, uint64_t>(out, &b, n, s); break;
    case DT_U8:   rc = launch_sum<uint8_t, uint8_t>(out, &b, n, s); break;
    }
    return unbind_inputs(&b, s, rc);
}

/* ---- Update ------------------------------------------------------------ */

/* One update's constants in the compute type C: float for every dtype but
 * float64, each converted from double once, as optim.c's (float)st->p[i]. */
template <typename C> struct consts {
    C lr, momentum, beta1, beta2, epsilon, wd, rescale, clip;
    int clipping;
};

template <typename C> static struct consts<C> consts_of(const struct kvs_cuda_step *st)
{
    struct consts<C> c;

    c.lr = (C)st->lr;
    c.momentum = (C)st->momentum;
    c.beta1 = (C)st->beta1;
    c.beta2 = (C)st->beta2;
    c.epsilon = (C)st->epsilon;
    c.wd = (C)st->wd;
    c.rescale = (C)st->rescale;
    c.clip = (C)st->clip;
    c.clipping = st->clipping;
    return c;
}

/* The gradient of element j as the host's update sees it: in[0] itself
 * for one input, else the sum rounded to the key's dtype (the host sums
 * into a buffer of that dtype), then widened to C. */
template <typename T, typename C> HD static inline C grad_at(const struct inputs *in, size_t j)
{
    T g;

    if (in->k == 1)
        return load((const T *)input(in, 0) + j);
    store(&g, sum_at<T, C>(in, j));
    return load(&g);
}

/* optim.c's KVS__CLIP: NaN passes through. */
template <typename C> HD static inline C clip(C x, C b)
{
    return x > b ? b : x < -b ? -b : x;
}

/* KVS__DEFINE_SGD for one element:
 *   w + ((0 - lr*wd*w) - lr*clip(rescale*g))    (clipping)
 *   w + ((0 - lr*wd*w) - lr*rescale*g)          (no clipping) */
template <typename C> HD static inline C sgd(C w, C g, const struct consts<C> *c)
{
    C decay = mul(mul(c->lr, c->wd), w);
    C step = c->clipping ? mul(c->lr, clip(mul(c->rescale, g), c->clip))
                         : mul(mul(c->lr, c->rescale), g);

    return add(w, sub(sub((C)0, decay), step));
}

/* KVS__DEFINE_SGD_MOM: mom = (momentum*mom - lr*wd*w) - lr*clip(rescale*g)
 * (or - lr*rescale*g), then w + mom. */
template <typename C> HD static inline C sgd_mom(C w, C g, C *mom, const struct consts<C> *c)
{
    C decay = mul(mul(c->lr, c->wd), w);
    C step = c->clipping ? mul(c->lr, clip(mul(c->rescale, g), c->clip))
                         : mul(mul(c->lr, c->rescale), g);

    *mom = sub(sub(mul(c->momentum, *mom), decay), step);
    return add(w, *mom);
}

/* KVS__DEFINE_ADAM: gr = g*rescale + w*wd, clipped (weight decay inside
 * the clip); mean = beta1*mean + (1 - beta1)*gr; var = beta2*var +
 * ((1 - beta2)*gr)*gr; w - (lr*mean) / (sqrt(var) + epsilon), lr already
 * bias-corrected. */
template <typename C>
HD static inline C adam(C w, C g, C *mean, C *var, const struct consts<C> *c)
{
    C gr = add(mul(g, c->rescale), mul(w, c->wd));

    if (c->clipping)
        gr = clip(gr, c->clip);
    *mean = add(mul(c->beta1, *mean), mul(sub((C)1, c->beta1), gr));
    *var = add(mul(c->beta2, *var), mul(mul(sub((C)1, c->beta2), gr), gr));
    return sub(w, quot(mul(c->lr, *mean), add(root(*var), c->epsilon)));
}

/* Elementwise like the sum: w may be one of the inputs. */
template <typename T, typename C>
static __global__ void sgd_kernel(T *w, const __grid_constant__ struct inputs in,
                                  const __grid_constant__ struct consts<C> c, size_t n)
{
    for (size_t j = first_index(); j < n; j += grid_stride())
        store(w + j, sgd(load(w + j), grad_at<T, C>(&in, j), &c));
}

template <typename T, typename C>
static __global__ void sgd_mom_kernel(T *w, const __grid_constant__ struct inputs in, C *mom,
                                      const __grid_constant__ struct consts<C> c, size_t n)
{
    for (size_t j = first_index(); j < n; j += grid_stride())
        store(w + j, sgd_mom(load(w + j), grad_at<T, C>(&in, j), mom + j, &c));
}

template <typename T, typename C>
static __global__ void adam_kernel(T *w, const __grid_constant__ struct inputs in, C *mean,
                                   C *var, const __grid_constant__ struct consts<C> c, size_t n)
{
    for (size_t j = first_index(); j < n; j += grid_stride())
        store(w + j, adam(load(w + j), grad_at<T, C>(&in, j), mean + j, var + j, &c));
}

template <typename T, typename C>
static int launch_update(const struct kvs_cuda_step *st, void *w, const struct inputs *in,
                         void *buf0, void *buf1, size_t n, cudaStream_t s)
{
    struct consts<C> c = consts_of<C>(st);
    unsigned nb = blocks_for(n);

    if (st->kind == KIND_ADAM)
        adam_kernel<T, C><<<nb, THREADS, 0, s>>>((T *)w, *in, (C *)buf0, (C *)buf1, c, n);
    else if (st->mom)
        sgd_mom_kernel<T, C><<<nb, THREADS, 0, s>>>((T *)w, *in, (C *)buf0, c, n);
    else
        sgd_kernel<T, C><<<nb, THREADS, 0, s>>>((T *)w, *in, c, n);
    return (int)cudaGetLastError();
}

int kvs_cuda_update(const struct kvs_cuda_step *st, int dtype, void *w, const void *const *in,
                    int k, void *buf0, void *buf1, size_t n, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    struct inputs b;
    int rc;

    if (st == NULL || dtype < DT_F32 || dtype > DT_BF16 || k < 1
        || (st->kind != KIND_SGD && st->kind != KIND_ADAM))
        return (int)cudaErrorInvalidValue;
    if ((st->kind == KIND_ADAM && (buf0 == NULL || buf1 == NULL))
        || (st->kind == KIND_SGD && st->mom && buf0 == NULL))
        return (int)cudaErrorInvalidValue;
    if (n == 0)
        return 0;
    rc = bind_inputs(&b, in, k, s);
    if (rc != 0)
        return rc;
    switch (dtype) {
    case DT_F32:  rc = launch_update<float, float>(st, w, &b, buf0, buf1, n, s); break;
    case DT_F64:  rc = launch_update<double, double>(st, w, &b, buf0, buf1, n, s); break;
    case DT_F16:  rc = launch_update<struct f16, float>(st, w, &b, buf0, buf1, n, s); break;
    case DT_BF16: rc = launch_update<struct bf16, float>(st, w, &b, buf0, buf1, n, s); break;
    }
    return unbind_inputs(&b, s, rc);
}
