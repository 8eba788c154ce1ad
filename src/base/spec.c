/*
 * spec.c - the tokenizer and number reader behind every text spec
 * (optim.c's "sgd lr=0.1 ...", compress.c's "2bit threshold=0.5"), and the
 * writer of numbers that people read back (specs, messages).
 *
 * Owns nothing but a process-wide handle to the "C" locale, looked up once.
 * It must never allocate, never write into the spec text, and never know
 * any name or parameter: what a token means, and what to say when it is
 * wrong, belongs to the parser that asked.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                    /* strtod_l, strtof_l, newlocale */
#endif

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/spec.h"

/*
 * Numbers are read with '.', whatever LC_NUMERIC the application set: a
 * program running under a decimal-comma locale must still parse "lr=0.5",
 * and a spec saved in one locale must load in another. The "C" locale
 * object is static in libc, so nothing leaks.
 */
static locale_t c_locale = (locale_t)0;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

locale_t kvs__spec_c_locale(void)
{
    pthread_once(&c_locale_once, c_locale_init);
    return c_locale;
}

static int is_space(char c)
{
    /* Not isspace(): separators must not depend on the locale either. */
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The next token at or after sp->rest: its start in *tok and its length,
 * with sp->rest moved past it. 0 when only whitespace is left. */
static size_t next_token(struct kvs__spec *sp, const char **tok)
{
    const char *s = sp->rest;
    size_t len = 0;

    while (*s != '\0' && is_space(*s))
        s++;
    *tok = s;
    while (s[len] != '\0' && !is_space(s[len]))
        len++;
    sp->rest = s + len;
    return len;
}

size_t kvs__spec_begin(struct kvs__spec *sp, const char *spec, const char **name)
{
    sp->rest = spec;
    return next_token(sp, name);
}

int kvs__spec_next_param(struct kvs__spec *sp, struct kvs__spec_param *p)
{
    const char *tok, *eq;
    size_t len = next_token(sp, &tok);

    if (len == 0)
        return 0;
    eq = memchr(tok, '=', len);
    p->key = tok;
    if (eq == NULL) {
        p->key_len = len;
        p->value = NULL;
        p->value_len = 0;
    } else {
        p->key_len = (size_t)(eq - tok);
        p->value = eq + 1;
        p->value_len = len - p->key_len - 1;
    }
    return 1;
}

int kvs__spec_is(const char *s, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(s, word, len) == 0;
}

/*
 * Both readers parse in place: the value ends at whitespace or '\0', so
 * strto* stops at its end or fails before it, and nothing is copied (a
 * long but valid number is read whole, not cut to a buffer). An empty
 * value is refused first: strto* would skip the whitespace after it and
 * read the next token.
 */
int kvs__spec_double(const char *s, size_t len, double *out)
{
    locale_t c = kvs__spec_c_locale();
    char *end;
    double v;
    int saved_errno = errno;           /* strtod's ERANGE is judged here, not left to the caller */

    /* Decimal only: strtod would also take hex, "inf" and "nan". */
    if (len == 0 || strspn(s, "0123456789+-.eE") < len)
        return -1;
    v = c != (locale_t)0 ? strtod_l(s, &end, c) : strtod(s, &end);
    errno = saved_errno;
    if (end != s + len || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int kvs__parse_bytes(const char *s, uint64_t *out)
{
    char buf[64];
    size_t len = strlen(s);
    double v, mul = 1.0;

    if (len > 0) {
        switch (s[len - 1]) {
        case 'K': case 'k': mul = 1024.0; len--; break;
        case 'M': case 'm': mul = 1048576.0; len--; break;
        case 'G': case 'g': mul = 1073741824.0; len--; break;
        default: break;
        }
    }
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (kvs__spec_double(buf, len, &v) != 0 || !(v > 0) || v * mul > (double)((uint64_t)1 << 40))
        return -1;
    *out = ((uint64_t)(v * mul) + 4095) & ~(uint64_t)4095;
    return 0;
}

int kvs__spec_format_double(char *buf, size_t size, double v)
{
    locale_t c = kvs__spec_c_locale(), old = (locale_t)0;
    int n = 0;

    /* snprintf and strtod follow the thread's locale: switch this thread
     * only, so that "0.5" is written, not "0,5", whatever the application
     * set, and kvs__spec_double reads the text back. */
    if (c != (locale_t)0)
        old = uselocale(c);
    /* %.17g always reads back, but says 0.1 as 0.10000000000000001: the
     * first precision that reads back is what a person wrote. */
    for (int prec = 1; prec <= 17; prec++) {
        const char *e;
        int x;

        n = snprintf(buf, size, "%.*g", prec, v);
        if (n < 0 || (size_t)n >= size || isnan(v))
            break;
        if (strtod(buf, NULL) != v)
            continue;
        /* %g goes to an exponent once it passes the precision: 1000 is
         * "1e+03" at one digit. Whole numbers below 1e16 are written out,
         * as people write them (and Python's repr does); they need no more
         * digits than they have, so they read back too. */
        if ((e = strchr(buf, 'e')) != NULL && (x = atoi(e + 1)) >= prec && x < 16) {
            char whole[24];
            int m = snprintf(whole, sizeof whole, "%.*g", x + 1, v);

            if (m > 0 && (size_t)m < size && strtod(whole, NULL) == v) {
                memcpy(buf, whole, (size_t)m + 1);
                n = m;
            }
        }
        break;
    }
    if (old != (locale_t)0)
        uselocale(old);
    return n;
}

int kvs__spec_float(const char *s, size_t len, float *out)
{
    locale_t c = kvs__spec_c_locale();
    char *end;
    float v;
    int saved_errno = errno;

    if (len == 0)
        return -1;
    /* strtof, not (float)strtod: one rounding, as MXNet parses its floats. */
    v = c != (locale_t)0 ? strtof_l(s, &end, c) : strtof(s, &end);
    errno = saved_errno;
    if (end != s + len || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int kvs__env_int(const char *name, long lo, long hi, int *out, struct kvs__err *e)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (!s || !*s)
        return 0;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return kvs__fail(e, KVS_EBADARG, "%s=%s is not an integer in [%ld, %ld]", name, s,
                         lo, hi);
    *out = (int)v;
    return 1;
}

/* Seconds, fractions allowed; two minutes unset: long enough for a slow
 * worker's step, short enough that a stuck job ends. Anything else set
 * there is an error: a deadline the user did not mean is worse than none. */
int kvs__env_timeout_ms(int64_t *ms, struct kvs__err *e)
{
    const char *s = getenv("KVS_TIMEOUT");
    double v;

    *ms = 120000;
    if (!s || !*s)
        return 0;
    if (kvs__spec_double(s, strlen(s), &v) != 0 || !(v > 0) || v > 86400.0 * 365)
        return kvs__fail(e, KVS_EBADARG, "KVS_TIMEOUT=%.64s is not a number of seconds in "
                         "(0, 31536000]", s);
    *ms = (int64_t)(v * 1000.0 + 0.5) > 0 ? (int64_t)(v * 1000.0 + 0.5) : 1;
    return 0;
}
