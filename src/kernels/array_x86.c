/*
 * array_x86.c - float16 and bfloat16 kernels for x86-64 CPUs with AVX2 and
 * F16C: widening to float32, rounding back, and sums of k arrays, eight
 * elements per instruction.
 *
 * Every result is bit for bit what array.c's portable loops give: the same
 * conversions (F16C rounds to nearest even and quiets NaNs as they do; the
 * bfloat16 rounding is theirs, lane by lane) and the same order of float32
 * additions, in[0] + in[1] + ... Only array.c calls in here, and only after
 * kvs__half_x86 said this CPU has the instructions; elsewhere the file
 * compiles to a kvs__half_x86 that always says no.
 */
#include <string.h>

#include "kernels/array_x86.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <immintrin.h>

#define TARGET __attribute__((target("avx2,f16c")))

TARGET static inline __m256 widen8_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

TARGET static inline __m256 widen8_bf16(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));

    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

TARGET static inline __m128i narrow8_f16(__m256 v)
{
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
}

/* array.c's float_to_bf16 on eight lanes: round to nearest even by adding
 * just under half an ulp plus the kept lsb (wrapping only for NaNs, which
 * take the other branch), NaNs kept quiet with their high payload. */
TARGET static inline __m128i narrow8_bf16(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb),
                          16);
    __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                        _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
    /* Every lane is below 2^16, so the saturating pack is a plain one; it
     * works per 128-bit half, and qwords 0 and 2 hold lanes 0-3 and 4-7. */
    __m256i packed = _mm256_packus_epi32(r, r);

    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

/* A tail of fewer than eight elements goes through zero-padded copies, so
 * that no load or store reaches past the caller's arrays. */
#define DEFINE_KERNELS(sfx)                                                                  \
    TARGET static void widen_##sfx(float *dst, const uint16_t *src, size_t n)              \
    {                                                                                        \
        size_t i = 0;                                                                        \
                                                                                             \
        for (; n - i >= 8; i += 8)                                                           \
            _mm256_storeu_ps(dst + i, widen8_##sfx(src + i));                                \
        if (i < n) {                                                                         \
            uint16_t h[8] = { 0 };                                                           \
            float f[8];                                                                      \
                                                                                             \
            memcpy(h, src + i, (n - i) * sizeof *h);                                         \
            _mm256_storeu_ps(f, widen8_##sfx(h));                                            \
            memcpy(dst + i, f, (n - i) * sizeof *f);                                         \
        }                                                                                    \
    }                                                                                        \
    TARGET static void narrow_##sfx(uint16_t *dst, const float *src, size_t n)             \
    {                                                                                        \
        size_t i = 0;                                                                        \
                                                                                             \
        for (; n - i >= 8; i += 8)                                                           \
            _mm_storeu_si128((__m128i *)(dst + i), narrow8_##sfx(_mm256_loadu_ps(src + i))); \
        if (i < n) {                                                                         \
            float f[8] = { 0 };                                                              \
            uint16_t h[8];                                                                   \
                                                                                             \
            memcpy(f, src + i, (n - i) * sizeof *f);                                         \
            _mm_storeu_si128((__m128i *)h, narrow8_##sfx(_mm256_loadu_ps(f)));               \
            memcpy(dst + i, h, (n - i) * sizeof *h);                                         \
        }                                                                                    \
    }                                                                                        \
    /* Eight elements of every input are read before those eight of the */                  \
    /* output are written, so out may be any of the inputs. */                               \
    TARGET static void sum_##sfx(uint16_t *out, const void *const *in, int k, size_t begin, \
                                 size_t end)                                                 \
    {                                                                                        \
        size_t i = begin;                                                                    \
                                                                                             \
        for (; end - i >= 8; i += 8) {                                                       \
            __m256 acc = widen8_##sfx((const uint16_t *)in[0] + i);                          \
                                                                                             \
            for (int j = 1; j < k; j++)                                                      \
                acc = _mm256_add_ps(acc, widen8_##sfx((const uint16_t *)in[j] + i));         \
            _mm_storeu_si128((__m128i *)(out + i), narrow8_##sfx(acc));                      \
        }                                                                                    \
        if (i < end) {                                                                       \
            uint16_t h[8] = { 0 }, o[8];                                                     \
            __m256 acc;                                                                      \
                                                                                             \
            memcpy(h, (const uint16_t *)in[0] + i, (end - i) * sizeof *h);                   \
            acc = widen8_##sfx(h);                                                           \
            for (int j = 1; j < k; j++) {                                                    \
                memcpy(h, (const uint16_t *)in[j] + i, (end - i) * sizeof *h);               \
                acc = _mm256_add_ps(acc, widen8_##sfx(h));                                   \
            }                                                                                \
            _mm_storeu_si128((__m128i *)o, narrow8_##sfx(acc));                              \
            memcpy(out + i, o, (end - i) * sizeof *o);                                       \
        }                                                                                    \
    }                                                                                        \
    static const struct kvs__half_kernels kernels_##sfx = { widen_##sfx, narrow_##sfx,      \
                                                            sum_##sfx };

DEFINE_KERNELS(f16)
DEFINE_KERNELS(bf16)

/* AVX2 and F16C in the CPU, and the kernel saving the AVX registers
 * (OSXSAVE, and XCR0's SSE and AVX state bits) so that they can be used. */
static int cpu_has_avx2_f16c(void)
{
    unsigned a, b, c, d, xcr0_lo, xcr0_hi;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if (!(c & bit_OSXSAVE) || !(c & bit_AVX) || !(c & bit_F16C))
        return 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6) != 0x6)
        return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b & bit_AVX2) != 0;
}

const struct kvs__half_kernels *kvs__half_x86(kvs_dtype_t dtype)
{
    if (!cpu_has_avx2_f16c())
        return NULL;
    switch (dtype) {
    case KVS_FLOAT16:
        return &kernels_f16;
    case KVS_BFLOAT16:
        return &kernels_bf16;
    default:
        return NULL;
    }
}

#else

const struct kvs__half_kernels *kvs__half_x86(kvs_dtype_t dtype)
{
    (void)dtype;
    return NULL;
}

#endif
