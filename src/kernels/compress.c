/*
 * compress.c - gradient compression: the spec parser and MXNet's 2bit codec
 * (quantize with a sender-side residual, dequantize).
 *
 * Owns no data: every function works on buffers the caller hands in and
 * keeps nothing between calls (cutting the spec's text and reading its
 * number are spec.c's job). It must never allocate, never touch keys,
 * stores or shared memory, and never change the wire layout: the bits it
 * writes are the bits MXNet 1.9 writes, so that a buffer compressed here
 * decodes the same in MXNet and the other way round.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/compress.h"
#include "base/spec.h"

#define GC_DEFAULT_THRESHOLD 0.5f      /* MXNet's GradientCompressionParam default */
#define GC_VALUES_PER_WORD 16

size_t kvs__gc_2bit_words(size_t n)
{
    /* Written without n + 15 so that it cannot wrap for n near SIZE_MAX. */
    return n / GC_VALUES_PER_WORD + (n % GC_VALUES_PER_WORD != 0);
}

/*
 * Quantizes values [i, i + k) (k <= 16) into code[0..k): 3 for 11, 2 for
 * 10, 0 for 00. MXNet's else-if is written with all-ones masks instead of
 * branches, so that the compiler can vectorize a loop over data it could
 * not predict. What is subtracted is pos, neg or +0.0f, chosen by bits;
 * r - (+0.0f) is r for every float (-0 and NaN included), so subtracting 0
 * where MXNet subtracts nothing keeps the residual bit for bit.
 */
static inline void quantize_run(const float *grad, float *residual, size_t i, size_t k,
                                float pos, uint8_t *code)
{
    const float neg = -pos;            /* exact: negation only flips the sign */
    uint32_t pos_u, neg_u;

    memcpy(&pos_u, &pos, sizeof pos_u);
    memcpy(&neg_u, &neg, sizeof neg_u);
    for (size_t j = 0; j < k; j++) {
        float r = residual[i + j] + grad[i + j];
        uint32_t up = 0u - (uint32_t)(r >= pos);
        uint32_t down = (0u - (uint32_t)(r <= neg)) & ~up;
        uint32_t sub_u = (pos_u & up) | (neg_u & down);
        float sub;

        memcpy(&sub, &sub_u, sizeof sub);
        residual[i + j] = r - sub;
        code[j] = (uint8_t)((up & 3u) | (down & 2u));
    }
}

/*
 * MXNet's layout: code j of a word lives in byte j / 4 of the word *in
 * memory order* (MXNet casts the float word to char *), bits 7-6 for
 * j % 4 == 0 down to bits 1-0 for j % 4 == 3; so 11 there is its
 * posbits[j & 3] and 10 its negbits[j & 3]. The word is written byte by
 * byte, never as shifts of a uint32_t, which would move the values around
 * on a big-endian host. Codes past k are 0.
 */
static inline void pack_word(uint8_t *bytes, const uint8_t *code, size_t k)
{
    uint8_t c[GC_VALUES_PER_WORD] = { 0 };

    memcpy(c, code, k);
    for (size_t b = 0; b < 4; b++)
        bytes[b] = (uint8_t)(c[4 * b] << 6 | c[4 * b + 1] << 4 | c[4 * b + 2] << 2 |
                             c[4 * b + 3]);
}

void kvs__gc_2bit_quantize(const float *grad, float *residual, uint32_t *out, size_t n,
                           float threshold)
{
    uint8_t *bytes = (uint8_t *)out;
    uint8_t code[GC_VALUES_PER_WORD];
    size_t full = n / GC_VALUES_PER_WORD;
    size_t rest = n % GC_VALUES_PER_WORD;

    for (size_t w = 0; w < full; w++) {
        quantize_run(grad, residual, w * GC_VALUES_PER_WORD, GC_VALUES_PER_WORD, threshold,
                     code);
        pack_word(bytes + w * sizeof(uint32_t), code, GC_VALUES_PER_WORD);
    }
    /* A partial last word: the bits of the values it lacks stay 0, as
     * MXNet zeroes the whole word before it fills the values it has. */
    if (rest != 0) {
        quantize_run(grad, residual, full * GC_VALUES_PER_WORD, rest, threshold, code);
        pack_word(bytes + full * sizeof(uint32_t), code, rest);
    }
}

/* Value i's code: 11 -> +t, 10 -> -t; 00 and the never-written 01 -> 0, as
 * MXNet reads anything that is neither of its two masks. */
static inline unsigned code_at(const uint8_t *bytes, size_t i)
{
    return (bytes[i >> 2] >> (6 - 2 * (i & 3))) & 3u;
}

void kvs__gc_2bit_dequantize(const uint32_t *in, float *out, size_t n, float threshold)
{
    const uint8_t *bytes = (const uint8_t *)in;
    const float value[4] = { 0.0f, 0.0f, -threshold, threshold };

    for (size_t i = 0; i < n; i++)
        out[i] = value[code_at(bytes, i)];
}

void kvs__gc_2bit_dequantize_add(const uint32_t *in, float *out, size_t n, float threshold)
{
    const uint8_t *bytes = (const uint8_t *)in;
    const float value[4] = { 0.0f, 0.0f, -threshold, threshold };

    for (size_t i = 0; i < n; i++)
        out[i] += value[code_at(bytes, i)];
}

/* ---- Spec ------------------------------------------------------------ */

int kvs__gc_parse(const char *spec, struct kvs__gc *out, struct kvs__err *e)
{
    struct kvs__gc gc = { .type = KVS__GC_NONE, .threshold = GC_DEFAULT_THRESHOLD };
    struct kvs__spec sp;
    struct kvs__spec_param par;
    const char *name;
    size_t len;
    int have_threshold = 0;

    if (spec == NULL || out == NULL)
        return kvs__fail(e, KVS_EBADARG, "gradient compression: %s is NULL",
                         spec == NULL ? "spec" : "output");

    len = kvs__spec_begin(&sp, spec, &name);
    if (len == 0)
        return kvs__fail(e, KVS_ESPEC,
                         "gradient compression: empty spec (expected \"none\" or \"2bit\")");
    if (kvs__spec_is(name, len, "none"))
        gc.type = KVS__GC_NONE;
    else if (kvs__spec_is(name, len, "2bit"))
        gc.type = KVS__GC_2BIT;
    else
        return kvs__fail(e, KVS_ESPEC, "gradient compression: unknown type '%.*s'"
                         " (expected \"none\" or \"2bit\")", kvs__spec_shown(len), name);

    while (kvs__spec_next_param(&sp, &par)) {
        if (par.value == NULL)
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: parameter '%.*s' has no '=value'",
                             kvs__spec_shown(par.key_len), par.key);

        /* "none" takes no parameters: a threshold there is a mistake the
         * caller should hear about, not something to drop silently. */
        if (gc.type != KVS__GC_2BIT || !kvs__spec_is(par.key, par.key_len, "threshold"))
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: unknown parameter '%.*s' for type %s",
                             kvs__spec_shown(par.key_len), par.key,
                             gc.type == KVS__GC_2BIT ? "2bit" : "none");
        if (have_threshold)
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: parameter 'threshold' given twice");
        have_threshold = 1;

        if (kvs__spec_float(par.value, par.value_len, &gc.threshold) != 0)
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: threshold '%.*s' is not a finite number",
                             kvs__spec_shown(par.value_len), par.value);
        if (!(gc.threshold > 0.0f))
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: threshold '%.*s' must be greater than 0",
                             kvs__spec_shown(par.value_len), par.value);
    }

    if (gc.type == KVS__GC_NONE)
        gc.threshold = 0.0f;
    *out = gc;
    return 0;
}
