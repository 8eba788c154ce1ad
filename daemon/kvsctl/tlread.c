/*
 * tlread.c - reads kvs timeline files for kvsctl timeline: a JSON parser
 * for one bounded piece of text, and a reader that takes a file a line
 * at a time: the head line, one event a line, then the end of the list
 * and the otherData object.
 *
 * A timeline is untrusted input: it may be cut short (a job that died
 * while writing it), edited, or something else entirely. So every line
 * has a bound, the parser's depth has a bound, every value lives in
 * arenas sized before the parse (no allocation per value), and a number
 * out of a double's range becomes an infinity for the caller to refuse.
 * Nothing here interprets an event; that is plot's and merge's part
 * (tl_plot.c, tl_merge.c). Nothing here writes a file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "tlread.h"

#define READ_CAP      (TL_TAIL_MAX + 1)     /* the longest line the reader takes */
#define TAIL_VALS_MAX 65536
#define HEAD          "{\"traceEvents\":["

/* ---- JSON ------------------------------------------------------------------ */

struct parser {
    struct tl_json *j;
    const char *s;
    size_t len, at;
    int depth;
};

int tl_json_init(struct tl_json *j, size_t max_len, size_t max_vals)
{
    memset(j, 0, sizeof *j);
    /* A string's or number's bytes, NUL included, never outnumber its
     * text's, quotes or the next character included: 2 x the text is
     * room for all. */
    j->bytes_cap = 2 * max_len + 2;
    j->vals_cap = max_vals;
    j->vals = calloc(max_vals, sizeof *j->vals);
    j->bytes = malloc(j->bytes_cap);
    if (!j->vals || !j->bytes) {
        tl_json_free(j);
        return -ENOMEM;
    }
    return 0;
}

void tl_json_free(struct tl_json *j)
{
    free(j->vals);
    free(j->bytes);
    memset(j, 0, sizeof *j);
}

static int fail(struct parser *p, const char *why)
{
    if (!p->j->err) {
        p->j->err = why;
        p->j->err_at = p->at;
    }
    return -1;
}

static void skip_space(struct parser *p)
{
    while (p->at < p->len && (p->s[p->at] == ' ' || p->s[p->at] == '\t'
                              || p->s[p->at] == '\n' || p->s[p->at] == '\r'))
        p->at++;
}

static int peek(const struct parser *p)
{
    return p->at < p->len ? (unsigned char)p->s[p->at] : -1;
}

static struct tl_val *new_val(struct parser *p, enum tl_type type)
{
    struct tl_val *v;

    if (p->j->nvals == p->j->vals_cap) {
        fail(p, "too many values");
        return NULL;
    }
    v = &p->j->vals[p->j->nvals++];
    memset(v, 0, sizeof *v);
    v->type = type;
    return v;
}

static int put_byte(struct parser *p, unsigned char c)
{
    if (p->j->nbytes == p->j->bytes_cap)
        return fail(p, "too long");
    p->j->bytes[p->j->nbytes++] = (char)c;
    return 0;
}

static int hex4(struct parser *p, unsigned *out)
{
    unsigned v = 0;

    if (p->len - p->at < 4)
        return fail(p, "a \\u escape cut short");
    for (int i = 0; i < 4; i++) {
        int c = p->s[p->at++];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return fail(p, "a \\u escape that is not 4 hex digits");
    }
    *out = v;
    return 0;
}

static int put_utf8(struct parser *p, unsigned cp)
{
    unsigned char b[4];
    int n;

    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xc0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xe0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xf0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    for (int i = 0; i < n; i++)
        if (put_byte(p, b[i]) != 0)
            return -1;
    return 0;
}

/* The bytes of one UTF-8 character that starts at the parser's place
 * with a byte above 127: its length, or 0 when it is not one (a stray
 * continuation byte, one cut short, an overlong form, a surrogate, a code
 * point above U+10FFFF). JSON text is UTF-8, and the files merge writes
 * must stay so. */
static size_t utf8_length(const struct parser *p)
{
    const unsigned char *u = (const unsigned char *)p->s + p->at;
    size_t left = p->len - p->at, n;
    unsigned cp;

    if (u[0] >= 0xc2 && u[0] <= 0xdf) {
        n = 2;
        cp = u[0] & 0x1f;
    } else if (u[0] >= 0xe0 && u[0] <= 0xef) {
        n = 3;
        cp = u[0] & 0x0f;
    } else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
        n = 4;
        cp = u[0] & 0x07;
    } else {
        return 0;
    }
    if (left < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (u[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff
        || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* At the opening quote: the string decoded into the arena. */
static int parse_string(struct parser *p, const char **out, size_t *out_len)
{
    size_t first = p->j->nbytes;

    p->at++;
    for (;;) {
        int c = peek(p);

        if (c < 0)
            return fail(p, "a string not ended");
        p->at++;
        if (c == '"')
            break;
        if (c < 0x20) {
            p->at--;
            return fail(p, "a control character in a string");
        }
        if (c >= 0x80) {
            size_t n;

            p->at--;
            if ((n = utf8_length(p)) == 0)
                return fail(p, "a string that is not UTF-8");
            for (size_t i = 0; i < n; i++)
                if (put_byte(p, (unsigned char)p->s[p->at++]) != 0)
                    return -1;
            continue;
        }
        if (c != '\\') {
            if (put_byte(p, (unsigned char)c) != 0)
                return -1;
            continue;
        }
        c = peek(p);
        p->at++;
        switch (c) {
        case '"': case '\\': case '/':
            if (put_byte(p, (unsigned char)c) != 0)
                return -1;
            break;
        case 'b': if (put_byte(p, '\b') != 0) return -1; break;
        case 'f': if (put_byte(p, '\f') != 0) return -1; break;
        case 'n': if (put_byte(p, '\n') != 0) return -1; break;
        case 'r': if (put_byte(p, '\r') != 0) return -1; break;
        case 't': if (put_byte(p, '\t') != 0) return -1; break;
        case 'u': {
            unsigned cp, lo;

            if (hex4(p, &cp) != 0)
                return -1;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return fail(p, "a lone low surrogate \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (p->len - p->at < 2 || p->s[p->at] != '\\' || p->s[p->at + 1] != 'u')
                    return fail(p, "a high surrogate \\u escape without its low half");
                p->at += 2;
                if (hex4(p, &lo) != 0)
                    return -1;
                if (lo < 0xdc00 || lo > 0xdfff)
                    return fail(p, "a high surrogate \\u escape without its low half");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (put_utf8(p, cp) != 0)
                return -1;
            break;
        }
        default:
            p->at--;
            return fail(p, "an unknown escape in a string");
        }
    }
    *out_len = p->j->nbytes - first;
    if (put_byte(p, 0) != 0)
        return -1;
    *out = p->j->bytes + first;
    return 0;
}

static int digits(struct parser *p)
{
    size_t from = p->at;

    while (peek(p) >= '0' && peek(p) <= '9')
        p->at++;
    return p->at > from ? 0 : fail(p, "a number without digits");
}

static int parse_number(struct parser *p, struct tl_val *v)
{
    size_t from = p->at, n;
    char *copy;

    if (peek(p) == '-')
        p->at++;
    if (peek(p) == '0')
        p->at++;
    else if (digits(p) != 0)
        return -1;
    if (peek(p) == '.') {
        p->at++;
        if (digits(p) != 0)
            return -1;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        p->at++;
        if (peek(p) == '+' || peek(p) == '-')
            p->at++;
        if (digits(p) != 0)
            return -1;
    }
    /* strtod reads more than JSON's numbers (hex, "inf"): it gets a
     * copy of exactly the digits checked above. */
    n = p->at - from;
    if (n + 1 > p->j->bytes_cap - p->j->nbytes)
        return fail(p, "too long");
    copy = p->j->bytes + p->j->nbytes;
    memcpy(copy, p->s + from, n);
    copy[n] = 0;
    p->j->nbytes += n + 1;
    v->s = copy;
    v->len = n;
    v->num = strtod(copy, NULL);       /* ERANGE: +-HUGE_VAL or a tiny one, as wanted */
    return 0;
}

static int word(struct parser *p, const char *w)
{
    size_t n = strlen(w);

    if (p->len - p->at < n || memcmp(p->s + p->at, w, n) != 0)
        return fail(p, "expected a value");
    p->at += n;
    return 0;
}

static struct tl_val *parse_value(struct parser *p);

/* At '[' or '{'. */
static int parse_members(struct parser *p, struct tl_val *v, int obj)
{
    struct tl_val **tail = &v->child;
    int close = obj ? '}' : ']';

    if (++p->depth > TL_DEPTH_MAX)
        return fail(p, "nested too deep");
    p->at++;
    skip_space(p);
    if (peek(p) == close) {
        p->at++;
        p->depth--;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        struct tl_val *m;

        skip_space(p);
        if (obj) {
            if (peek(p) != '"')
                return fail(p, "expected a member's name");
            if (parse_string(p, &key, &key_len) != 0)
                return -1;
            skip_space(p);
            if (peek(p) != ':')
                return fail(p, "expected ':'");
            p->at++;
        }
        if (!(m = parse_value(p)))
            return -1;
        m->key = key;
        m->key_len = key_len;
        *tail = m;
        tail = &m->next;
        skip_space(p);
        if (peek(p) == ',') {
            p->at++;
            continue;
        }
        if (peek(p) == close) {
            p->at++;
            p->depth--;
            return 0;
        }
        if (peek(p) < 0)
            return fail(p, obj ? "an object not ended" : "an array not ended");
        return fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static struct tl_val *parse_value(struct parser *p)
{
    struct tl_val *v = NULL;
    int c, rc = 0;

    skip_space(p);
    c = peek(p);
    if (c < 0) {
        fail(p, "a value missing at the end");
        return NULL;
    }
    switch (c) {
    case '{':
    case '[':
        if ((v = new_val(p, c == '{' ? TL_OBJ : TL_ARR)))
            rc = parse_members(p, v, c == '{');
        break;
    case '"':
        if ((v = new_val(p, TL_STR)))
            rc = parse_string(p, &v->s, &v->len);
        break;
    case 't':
        if ((v = new_val(p, TL_TRUE)))
            rc = word(p, "true");
        break;
    case 'f':
        if ((v = new_val(p, TL_FALSE)))
            rc = word(p, "false");
        break;
    case 'n':
        if ((v = new_val(p, TL_NULL)))
            rc = word(p, "null");
        break;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            if ((v = new_val(p, TL_NUM)))
                rc = parse_number(p, v);
        } else {
            fail(p, "expected a value");
        }
    }
    return rc == 0 ? v : NULL;
}

int tl_json_parse(struct tl_json *j, const char *text, size_t len, struct tl_val **out)
{
    struct parser p = { .j = j, .s = text, .len = len };
    struct tl_val *v;

    j->nvals = 0;
    j->nbytes = 0;
    j->err = NULL;
    j->err_at = 0;
    if (2 * len + 2 > j->bytes_cap) {
        j->err = "too long";
        return -1;
    }
    if (!(v = parse_value(&p)))
        return -1;
    skip_space(&p);
    if (p.at != len)
        return fail(&p, "more after the value");
    *out = v;
    return 0;
}

const struct tl_val *tl_get(const struct tl_val *obj, const char *key)
{
    size_t n = strlen(key);

    if (!obj || obj->type != TL_OBJ)
        return NULL;
    for (const struct tl_val *m = obj->child; m; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0)
            return m;
    return NULL;
}

int tl_is(const struct tl_val *v, const char *s)
{
    return v && v->type == TL_STR && v->len == strlen(s) && memcmp(v->s, s, v->len) == 0;
}

int tl_num(const struct tl_val *v, double *out)
{
    if (!v || v->type != TL_NUM || !isfinite(v->num))
        return -1;
    *out = v->num;
    return 0;
}

int tl_int(const struct tl_val *v, int64_t lo, int64_t hi, int64_t *out)
{
    double d;

    /* Callers keep lo and hi within +-2^53, where doubles are exact. */
    if (tl_num(v, &d) != 0 || d != floor(d) || d < (double)lo || d > (double)hi)
        return -1;
    *out = (int64_t)d;
    return 0;
}

static void write_string(FILE *f, const char *s, size_t len)
{
    putc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20)
                fprintf(f, "\\u%04x", c);
            else
                putc(c, f);
        }
    }
    putc('"', f);
}

void tl_json_write(FILE *f, const struct tl_val *v)
{
    switch (v->type) {
    case TL_NULL:
        fputs("null", f);
        break;
    case TL_FALSE:
        fputs("false", f);
        break;
    case TL_TRUE:
        fputs("true", f);
        break;
    case TL_NUM:
        fwrite(v->s, 1, v->len, f);
        break;
    case TL_STR:
        write_string(f, v->s, v->len);
        break;
    case TL_ARR:
    case TL_OBJ:
        putc(v->type == TL_OBJ ? '{' : '[', f);
        for (const struct tl_val *m = v->child; m; m = m->next) {
            if (m != v->child)
                putc(',', f);
            if (v->type == TL_OBJ) {
                write_string(f, m->key, m->key_len);
                putc(':', f);
            }
            tl_json_write(f, m);
        }
        putc(v->type == TL_OBJ ? '}' : ']', f);
        break;
    }
}

/* ---- the file --------------------------------------------------------------- */

__attribute__((format(printf, 2, 3)))
static int file_error(struct tl_file *t, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* The next line, without its newline: 1 with *line, *len and *ended
 * (whether a newline ended it), 0 at the end of the file, -1. */
static int read_line(struct tl_file *t, char **line, size_t *len, int *ended)
{
    for (;;) {
        char *nl = memchr(t->buf + t->start, '\n', t->end - t->start);
        size_t got;

        if (nl || (t->eof && t->end > t->start)) {
            *line = t->buf + t->start;
            *len = nl ? (size_t)(nl - *line) : t->end - t->start;
            *ended = nl != NULL;
            t->start += *len + (nl != NULL);
            t->line++;
            return 1;
        }
        if (t->eof)
            return 0;
        if (t->start > 0) {
            memmove(t->buf, t->buf + t->start, t->end - t->start);
            t->end -= t->start;
            t->start = 0;
        }
        if (t->end == t->cap)
            return file_error(t, "%s:%ld: a line longer than %d bytes", t->path, t->line + 1,
                              TL_TAIL_MAX);
        got = fread(t->buf + t->end, 1, t->cap - t->end, t->f);
        t->end += got;
        if (got == 0) {
            if (ferror(t->f))
                return file_error(t, "%s: cannot read: %s", t->path, strerror(errno));
            t->eof = 1;
        }
    }
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static void trim(char **s, size_t *len)
{
    while (*len > 0 && is_space((*s)[0])) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && is_space((*s)[*len - 1]))
        (*len)--;
}

/* A string of the file for a message: printable ASCII only, bounded. */
static void shown(char *out, size_t size, const struct tl_val *v)
{
    size_t n = 0, i = 0;

    if (!v || v->type != TL_STR) {
        snprintf(out, size, "%s", v ? "not a string" : "missing");
        return;
    }
    out[n++] = '"';
    for (; i < v->len && n + 5 < size; i++)
        out[n++] = v->s[i] >= 0x20 && v->s[i] < 0x7f ? v->s[i] : '?';
    if (i < v->len) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n++] = '"';
    out[n] = 0;
}

int tl_open(struct tl_file *t, const char *path)
{
    char *line;
    size_t len;
    int ended, rc;

    memset(t, 0, sizeof *t);
    t->path = path;
    t->cap = READ_CAP;
    if (!(t->f = fopen(path, "r")))
        return file_error(t, "%s: cannot open: %s", path, strerror(errno));
    if (!(t->buf = malloc(t->cap))
        || tl_json_init(&t->ev, TL_LINE_MAX, TL_LINE_MAX / 2 + 2) != 0)
        return file_error(t, "out of memory");
    if ((rc = read_line(t, &line, &len, &ended)) < 0)
        return -1;
    if (rc == 0)
        return file_error(t, "%s: empty, not a kvs timeline", path);
    trim(&line, &len);
    /* The head is the format's, to the byte but for white space. */
    {
        const char *want = HEAD;
        size_t i = 0;

        for (; *want && i <= len; want++) {
            while (i < len && (line[i] == ' ' || line[i] == '\t'))
                i++;
            if (i == len || line[i] != *want)
                break;
            i++;
        }
        if (*want || i != len)
            return file_error(t, "%s:1: not a kvs timeline (it does not begin with %s)",
                              path, HEAD);
    }
    return 0;
}

/* After the ']' that ends the list: the rest of the file, which must be
 * the top object's other members, otherData among them. */
static int read_tail(struct tl_file *t, char *rest, size_t rest_len)
{
    const struct tl_val *other, *format;
    struct tl_val *top;
    size_t n = 0, from = 0;
    long list_end = t->line;
    char *line, fmt[64];
    size_t len;
    int ended, rc;

    if (!(t->tail_text = malloc(TL_TAIL_MAX + 2))
        || tl_json_init(&t->tail, TL_TAIL_MAX + 1, TAIL_VALS_MAX) != 0)
        return file_error(t, "out of memory");
    memcpy(t->tail_text, rest, rest_len);
    n = rest_len;
    while ((rc = read_line(t, &line, &len, &ended)) > 0) {
        if (len + 1 > TL_TAIL_MAX - n)
            return file_error(t, "%s:%ld: more than %d bytes after the event list", t->path,
                              t->line, TL_TAIL_MAX);
        t->tail_text[n++] = '\n';
        memcpy(t->tail_text + n, line, len);
        n += len;
    }
    if (rc < 0)
        return -1;
    /* ",\"displayTimeUnit\":...}" is the top object's rest: as "{...}" it
     * parses on its own. */
    while (from < n && is_space(t->tail_text[from]))
        from++;
    if (from == n)
        return file_error(t, "%s: cut short after the event list (line %ld): no otherData",
                          t->path, list_end);
    if (t->tail_text[from] != ',')
        return file_error(t, "%s:%ld: no otherData after the event list: not a kvs timeline",
                          t->path, list_end);
    t->tail_text[from] = '{';
    if (tl_json_parse(&t->tail, t->tail_text + from, n - from, &top) != 0) {
        if (t->tail.err_at >= n - from)
            return file_error(t, "%s: cut short in its otherData (after line %ld)", t->path,
                              list_end);
        return file_error(t, "%s: after the event list (line %ld): not JSON: %s", t->path,
                          list_end, t->tail.err);
    }
    other = tl_get(top, "otherData");
    if (!other || other->type != TL_OBJ)
        return file_error(t, "%s: no otherData object after the event list: not a kvs "
                          "timeline", t->path);
    format = tl_get(other, "format");
    if (!tl_is(format, TL_FORMAT)) {
        shown(fmt, sizeof fmt, format);
        return file_error(t, "%s: not a kvs timeline: otherData.format is %s, not \"%s\"",
                          t->path, fmt, TL_FORMAT);
    }
    t->other = (struct tl_val *)other;
    t->done = 1;
    return 0;
}

int tl_next(struct tl_file *t, struct tl_val **ev, const char **text, size_t *len)
{
    char *line;
    size_t n;
    int ended, rc;

    if (t->done)
        return 0;
    for (;;) {
        if ((rc = read_line(t, &line, &n, &ended)) < 0)
            return -1;
        if (rc == 0)
            return file_error(t, "%s: cut short after line %ld: the event list does not end "
                              "(a job still running, or one that died?)", t->path, t->line);
        trim(&line, &n);
        if (n == 0)
            continue;
        if (line[0] == ']')
            return read_tail(t, line + 1, n - 1) == 0 ? 0 : -1;
        if (line[0] != '{')
            return file_error(t, "%s:%ld: neither an event ({...}) nor the end of the list (])",
                              t->path, t->line);
        if (n > TL_LINE_MAX)
            return file_error(t, "%s:%ld: an event line longer than %d bytes", t->path,
                              t->line, TL_LINE_MAX);
        /* Every event but the last is followed by a comma. */
        if (line[n - 1] == ',') {
            n--;
            trim(&line, &n);
        }
        if (tl_json_parse(&t->ev, line, n, ev) != 0) {
            if (!ended && t->ev.err_at >= n)
                return file_error(t, "%s:%ld: cut short inside an event (a truncated file?)",
                                  t->path, t->line);
            return file_error(t, "%s:%ld: not a JSON event (at its byte %zu): %s", t->path,
                              t->line, t->ev.err_at + 1, t->ev.err);
        }
        if (text) {
            *text = line;
            *len = n;
        }
        return 1;
    }
}

void tl_close(struct tl_file *t)
{
    if (t->f)
        fclose(t->f);
    free(t->buf);
    free(t->tail_text);
    tl_json_free(&t->ev);
    tl_json_free(&t->tail);
    memset(t, 0, sizeof *t);
}
