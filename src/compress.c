/*
 * compress.c - gradient compression: the spec parser and MXNet's 2bit codec
 * (quantize with a sender-side residual, dequantize).
 *
 * Owns no data: every function works on buffers the caller hands in and
 * keeps nothing between calls (the one process-wide thing is a handle to
 * the "C" locale, looked up once for the parser). It must never allocate,
 * never touch keys, stores or shared memory, and never change the wire
 * layout: the bits it writes are the bits MXNet 1.9 writes, so that a
 * buffer compressed here decodes the same in MXNet and the other way round.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                    /* strtof_l, newlocale */
#endif

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"

#define GC_DEFAULT_THRESHOLD 0.5f      /* MXNet's GradientCompressionParam default */
#define GC_VALUES_PER_WORD 16
#define GC_SHOWN_MAX 64                /* longest token quoted in a detail message */

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

void kvs__gc_2bit_dequantize(const uint32_t *in, float *out, size_t n, float threshold)
{
    const uint8_t *bytes = (const uint8_t *)in;
    /* By code: 11 -> +t, 10 -> -t; 00 and the never-written 01 -> 0, as
     * MXNet reads anything that is neither of its two masks. */
    const float value[4] = { 0.0f, 0.0f, -threshold, threshold };

    for (size_t i = 0; i < n; i++)
        out[i] = value[(bytes[i >> 2] >> (6 - 2 * (i & 3))) & 3u];
}

/* ---- Spec ------------------------------------------------------------ */

/*
 * Numbers in a spec are written with '.', whatever LC_NUMERIC the
 * application chose: a program that calls setlocale(LC_ALL, "") under a
 * locale with a decimal comma must still parse "threshold=0.5". The "C"
 * locale object is static in libc, so nothing is allocated or leaked.
 */
static locale_t c_locale = (locale_t)0;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* Parses s[0..len) as a float (one rounding, as MXNet parses its float
 * parameter). The token is delimited by whitespace or the end of the
 * string, which no number contains, so strtof cannot read past it.
 * Returns 0 on success, -1 when the token is not all number. */
static int parse_float(const char *s, size_t len, float *out)
{
    char *end;
    float v;
    int saved_errno = errno;           /* strtof's ERANGE is ours to judge, not the caller's */

    /* An empty value would let strtof skip ahead into the next token. */
    if (len == 0)
        return -1;
    pthread_once(&c_locale_once, c_locale_init);
    if (c_locale != (locale_t)0)
        v = strtof_l(s, &end, c_locale);
    else
        v = strtof(s, &end);
    errno = saved_errno;
    if (end != s + len)
        return -1;
    *out = v;
    return 0;
}

static int is_space(char c)
{
    /* Not isspace(): the spec's separators must not depend on the locale. */
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The next whitespace-separated token at or after *p: its start and length,
 * with *p moved past it. Returns 0 when only whitespace is left. */
static size_t next_token(const char **p, const char **tok)
{
    const char *s = *p;
    size_t len = 0;

    while (*s != '\0' && is_space(*s))
        s++;
    *tok = s;
    while (s[len] != '\0' && !is_space(s[len]))
        len++;
    *p = s + len;
    return len;
}

static int token_is(const char *tok, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(tok, word, len) == 0;
}

/* Tokens go into messages cut to a readable length; "%.*s" needs an int. */
static int shown(size_t len)
{
    return len > GC_SHOWN_MAX ? GC_SHOWN_MAX : (int)len;
}

int kvs__gc_parse(const char *spec, struct kvs__gc *out, struct kvs__err *e)
{
    struct kvs__gc gc = { .type = KVS__GC_NONE, .threshold = GC_DEFAULT_THRESHOLD };
    const char *p = spec;
    const char *tok;
    size_t len;
    int have_threshold = 0;

    if (spec == NULL || out == NULL)
        return kvs__fail(e, KVS_EBADARG, "gradient compression: %s is NULL",
                         spec == NULL ? "spec" : "output");

    len = next_token(&p, &tok);
    if (len == 0)
        return kvs__fail(e, KVS_ESPEC,
                         "gradient compression: empty spec (expected \"none\" or \"2bit\")");
    if (token_is(tok, len, "none"))
        gc.type = KVS__GC_NONE;
    else if (token_is(tok, len, "2bit"))
        gc.type = KVS__GC_2BIT;
    else
        return kvs__fail(e, KVS_ESPEC, "gradient compression: unknown type '%.*s'"
                         " (expected \"none\" or \"2bit\")", shown(len), tok);

    while ((len = next_token(&p, &tok)) != 0) {
        const char *eq = memchr(tok, '=', len);
        size_t name_len, val_len;
        const char *val;

        if (eq == NULL)
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: parameter '%.*s' has no '=value'",
                             shown(len), tok);
        name_len = (size_t)(eq - tok);
        val = eq + 1;
        val_len = len - name_len - 1;

        /* "none" takes no parameters: a threshold there is a mistake the
         * caller should hear about, not something to drop silently. */
        if (gc.type != KVS__GC_2BIT || !token_is(tok, name_len, "threshold"))
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: unknown parameter '%.*s' for type %s",
                             shown(name_len), tok,
                             gc.type == KVS__GC_2BIT ? "2bit" : "none");
        if (have_threshold)
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: parameter 'threshold' given twice");
        have_threshold = 1;

        if (parse_float(val, val_len, &gc.threshold) != 0 || !isfinite(gc.threshold))
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: threshold '%.*s' is not a finite number",
                             shown(val_len), val);
        if (!(gc.threshold > 0.0f))
            return kvs__fail(e, KVS_ESPEC,
                             "gradient compression: threshold '%.*s' must be greater than 0",
                             shown(val_len), val);
    }

    if (gc.type == KVS__GC_NONE)
        gc.threshold = 0.0f;
    *out = gc;
    return 0;
}
