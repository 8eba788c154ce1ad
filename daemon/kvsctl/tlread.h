/*
 * tlread.h - reads the files KVS_TIMELINE makes: Chrome trace-event JSON,
 * one event a line, ending with an otherData object whose format is
 * "kvs timeline 1". For kvsctl timeline (tl_plot.c, tl_merge.c). Nothing
 * here is trusted: every line is bounded, parsed whole, and checked
 * before use.
 */
#ifndef KVSCTL_TLREAD_H
#define KVSCTL_TLREAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TL_FORMAT    "kvs timeline 1"
#define TL_LINE_MAX  65536             /* bytes of one event line */
#define TL_TAIL_MAX  (1 << 20)         /* bytes after the event list */
#define TL_DEPTH_MAX 32                /* nested arrays and objects */

enum tl_type { TL_NULL, TL_FALSE, TL_TRUE, TL_NUM, TL_STR, TL_ARR, TL_OBJ };

/* One JSON value. Strings are decoded and NUL-terminated (a \u0000
 * inside one makes strlen short of len: compare with len). */
struct tl_val {
    enum tl_type type;
    const char *s;                     /* TL_STR: the bytes; TL_NUM: its text */
    size_t len;                        /* of s */
    double num;                        /* TL_NUM; +-inf when out of a double's range */
    const char *key;                   /* as an object's member: its name */
    size_t key_len;
    struct tl_val *child;              /* TL_ARR, TL_OBJ: the first member */
    struct tl_val *next;               /* the next member of the same parent */
};

/* Where the values of one parse live; reused by the next parse. */
struct tl_json {
    struct tl_val *vals;
    size_t nvals, vals_cap;
    char *bytes;                       /* strings and numbers' text */
    size_t nbytes, bytes_cap;
    const char *err;                   /* why the last parse failed */
    size_t err_at;                     /* and at which byte of the text */
};

/* Makes j able to parse texts of up to max_len bytes with up to max_vals
 * values. 0, or -ENOMEM. Free with tl_json_free. */
int tl_json_init(struct tl_json *j, size_t max_len, size_t max_vals);
void tl_json_free(struct tl_json *j);

/* Parses text[0..len) as one JSON value with nothing but white space
 * around it. 0 and *out (valid until the next parse with j), or -1 with
 * j->err and j->err_at. Numbers must be JSON's (no NaN, no Infinity). */
int tl_json_parse(struct tl_json *j, const char *text, size_t len, struct tl_val **out);

/* obj's first member named key, or NULL (also when obj is not an object). */
const struct tl_val *tl_get(const struct tl_val *obj, const char *key);

/* 1 when v is the string s. */
int tl_is(const struct tl_val *v, const char *s);

/* v as a whole number in [lo, hi]: 0 and *out, or -1. */
int tl_int(const struct tl_val *v, int64_t lo, int64_t hi, int64_t *out);

/* v as a finite number: 0 and *out, or -1. */
int tl_num(const struct tl_val *v, double *out);

/* Writes v as JSON on f: strings escaped, numbers as their text. */
void tl_json_write(FILE *f, const struct tl_val *v);

/* A timeline file being read. */
struct tl_file {
    const char *path;
    FILE *f;
    char *buf;                         /* what was read, not yet taken as lines */
    size_t start, end, cap;
    int eof;
    long line;                         /* of the last line taken */
    int done;                          /* the event list has ended */
    struct tl_json ev, tail;
    char *tail_text;
    struct tl_val *other;              /* otherData, once done */
    char err[512];                     /* why the last call failed */
};

/* Opens path and checks its first line ({"traceEvents":[). 0, or -1 with
 * t->err. Call tl_close even after a failure. */
int tl_open(struct tl_file *t, const char *path);

/* The next event: 1 with *ev (valid until the next call) and, when text
 * is not NULL, the line's own text without its comma (*text, *len); 0 at
 * the end of the list, once the rest of the file is read and its
 * otherData checked (t->other, the same lifetime as t); -1 with t->err
 * for a line that is not a JSON object, a file cut short, or one that
 * is not a kvs timeline. */
int tl_next(struct tl_file *t, struct tl_val **ev, const char **text, size_t *len);

void tl_close(struct tl_file *t);

#endif
