/*
 * spec.h - reading the short text specs that configure the library, such
 * as "sgd lr=0.1 momentum=0.9" or "2bit threshold=0.5": a name, then
 * key=value parameters, all separated by whitespace, with numbers written
 * in the "C" locale. The parsers (optim.c, compress.c) keep their own names,
 * parameter tables and error messages; this cuts the text into pieces and
 * reads numbers, and never reports errors itself.
 */
#ifndef KVS_SPEC_H
#define KVS_SPEC_H

#include <locale.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Tokens quoted in detail messages are cut to this many bytes. */
#define KVS__SPEC_SHOWN 64

/* Reading position in a spec. The spec text must outlive it and stay
 * unchanged; every token handed out points into that text. */
struct kvs__spec {
    const char *rest;                  /* the part not read yet */
};

/* One parameter token, "key=value". */
struct kvs__spec_param {
    const char *key;                   /* the token's start */
    size_t key_len;                    /* up to the first '='; the whole token when it has none */
    const char *value;                 /* just past that '=', or NULL when the token has none */
    size_t value_len;                  /* to the end of the token; may be 0 */
};

/* Starts reading spec (not NULL) and returns its first token, the name:
 * its start in *name (out) and its length, 0 when spec is only whitespace.
 * Whitespace is the C locale's six characters, whatever the thread's locale. */
size_t kvs__spec_begin(struct kvs__spec *sp, const char *spec, const char **name);

/* The next token, cut at its first '=' into *p (out). Returns 1, or 0 when
 * only whitespace is left (then *p is unchanged). */
int kvs__spec_next_param(struct kvs__spec *sp, struct kvs__spec_param *p);

/* Whether s[0..len) is exactly word (case-sensitive). */
int kvs__spec_is(const char *s, size_t len, const char *word);

/* A token's length as the precision for "%.*s" in a detail message. */
static inline int kvs__spec_shown(size_t len)
{
    return len > KVS__SPEC_SHOWN ? KVS__SPEC_SHOWN : (int)len;
}

/* Read s[0..len), a value from kvs__spec_next_param, whole as a finite
 * number in the "C" locale: a double, or a float rounded once from the
 * text. The text may be of any length and is read in place: s[len] must be
 * whitespace or '\0', which no number contains. Returns 0 with the value
 * in *out, or -1 (*out unchanged) when len is 0, the text is not all
 * number, or the value is not finite ("inf", "nan", overflow). Underflow
 * is not an error: *out is then what strtod gives (0 or a subnormal).
 * errno is left as it was. Thread-safe. */
int kvs__spec_double(const char *s, size_t len, double *out);
int kvs__spec_float(const char *s, size_t len, float *out);

/* Writes v into buf (size bytes, NUL-terminated) in the fewest
 * significant digits that strtod reads back as v, in the "C" locale: 0.1
 * as "0.1", not "0.10000000000000001"; 1/3 as "0.3333333333333333"; whole
 * numbers below 1e16 written out ("1000", not "1e+03").
 * Returns what snprintf returns (a value >= size: cut short). Thread-safe;
 * the thread's locale is as it was on return. */
int kvs__spec_format_double(char *buf, size_t size, double v);

/* A size for a command line: a positive number of bytes (fractions
 * allowed) with an optional K, M or G suffix (powers of 1024), at most
 * 2^40, rounded up to a multiple of 4096. 0 with *out, or -1 (*out
 * unchanged). kvsd's and kvsrun's --staging and --arena. Thread-safe. */
int kvs__parse_bytes(const char *s, uint64_t *out);

/* The environment variable name as an integer in [lo, hi]: 1 and *out
 * when set to one, 0 when unset or empty, KVS_EBADARG (naming it) when set
 * to anything else. */
int kvs__env_int(const char *name, long lo, long hi, int *out, struct kvs__err *e);

/* KVS_TIMEOUT in milliseconds: every wait's deadline unless a handle sets
 * its own (KVS_OPT_TIMEOUT). 120000 when unset or empty; KVS_EBADARG (and
 * *ms 120000) when set to anything but seconds in (0, 31536000]. */
int kvs__env_timeout_ms(int64_t *ms, struct kvs__err *e);

/* The "C" locale, for writing numbers that kvs__spec_double reads back
 * (e.g. through uselocale around snprintf); (locale_t)0 in the unlikely
 * case that libc could not provide it, and then the thread's own locale
 * is all there is. Never freed by anyone. Thread-safe. */
locale_t kvs__spec_c_locale(void);

#endif
