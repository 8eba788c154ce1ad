/*
 * sample.c - kvsd's sample (proto.h, KVS__CTL_SAMPLE) as kvsctl reads it:
 * every line parsed and checked against the format, numbers against their
 * bounds, key names unescaped; and written out as JSON for scripts
 * (kvsctl stats --json).
 *
 * The text comes from another process: proto/ctl.c has checked that it is
 * printable UTF-8 of a bounded length, nothing more. Here a line that is
 * not exactly as the format says, a number out of range or a line out of
 * order rejects the whole sample; nothing of it is used before then. It
 * never prints anything it has not checked, and never writes a byte of a
 * name into JSON without escaping it.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

#define WORKERS_MAX 1024               /* kvsd's MAX_WORKERS */
#define KEYS_MAX    100000             /* more than a reply's text can hold */

/* A line being read: the bytes from p to end. */
struct cur {
    const char *p, *end;
};

static int bad(char *msg, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int bad(char *msg, size_t size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* The next word (up to a space or the line's end), and the space after it
 * taken: 1; 0 at the line's end or at a space (two spaces in a row). */
static int word(struct cur *c, const char **w, size_t *n)
{
    const char *s = c->p;

    while (c->p < c->end && *c->p != ' ')
        c->p++;
    *w = s;
    *n = (size_t)(c->p - s);
    if (c->p < c->end)
        c->p++;                        /* the space; a line never ends with one */
    return *n > 0;
}

static int is_word(struct cur *c, const char *want)
{
    const char *w;
    size_t n;

    return word(c, &w, &n) && n == strlen(want) && memcmp(w, want, n) == 0;
}

/* 1 when the line (never empty) is all read and did not end with a space. */
static int done(const struct cur *c)
{
    return c->p == c->end && c->end[-1] != ' ';
}

/* A decimal of 1 to 20 digits, at most max. */
static int number(struct cur *c, uint64_t max, uint64_t *v)
{
    const char *w;
    size_t n;
    uint64_t x = 0;

    if (!word(c, &w, &n) || n > 20 || (n > 1 && w[0] == '0'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i] < '0' || w[i] > '9' || __builtin_mul_overflow(x, 10, &x)
            || __builtin_add_overflow(x, (uint64_t)(w[i] - '0'), &x))
            return 0;
    }
    if (x > max)
        return 0;
    *v = x;
    return 1;
}

static int hexval(char h)
{
    return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
         : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
}

/* A key as kvsd writes it: an int key in decimal, or a string key in
 * quotes, escaped (kvs__ctl_text_escape with quote). */
static int key_word(struct cur *c, struct sample_key *k)
{
    const char *s = c->p;
    size_t n;

    if (c->p < c->end && *c->p == '"') {
        k->is_str = 1;
        k->name_len = 0;
        for (c->p++;; ) {
            int ch;

            if (c->p >= c->end)
                return 0;
            if (*c->p == '"') {
                c->p++;
                break;
            }
            if (*c->p != '\\') {
                ch = (unsigned char)*c->p++;
            } else if (c->end - c->p >= 2 && c->p[1] && strchr("\"\\tn", c->p[1])) {
                ch = c->p[1] == 't' ? '\t' : c->p[1] == 'n' ? '\n' : c->p[1];
                c->p += 2;
            } else if (c->end - c->p >= 4 && c->p[1] == 'x' && hexval(c->p[2]) >= 0
                       && hexval(c->p[3]) >= 0) {
                ch = hexval(c->p[2]) * 16 + hexval(c->p[3]);
                c->p += 4;
            } else {
                return 0;
            }
            if (ch == 0 || k->name_len >= KVS_MAX_KEY_LEN)
                return 0;
            k->name[k->name_len++] = (char)ch;
        }
        k->name[k->name_len] = '\0';
        n = (size_t)(c->p - s);
        if (c->p < c->end && *c->p++ != ' ')
            return 0;
    } else {
        const char *w;
        uint64_t mag = 0;
        size_t neg;

        if (!word(c, &w, &n))
            return 0;
        neg = w[0] == '-';
        if (neg >= n || n - neg > 19 || (n - neg > 1 && w[neg] == '0'))
            return 0;
        for (size_t i = neg; i < n; i++) {
            if (w[i] < '0' || w[i] > '9')
                return 0;
            mag = mag * 10 + (uint64_t)(w[i] - '0');
        }
        if (mag > (uint64_t)INT64_MAX + neg)
            return 0;
        k->is_str = 0;
        k->id = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    }
    /* The word as it came, for showing: printable, as the reply's text is. */
    if (n > SAMPLE_KEY_TEXT)
        return 0;
    memcpy(k->text, s, n);
    k->text[n] = '\0';
    return 1;
}

static int key_line(struct cur *c, struct sample_key *k)
{
    const char *w;
    size_t n;
    int last = -1;

    memset(k, 0, sizeof *k);
    if (!key_word(c, k) || !word(c, &w, &n))
        return 0;
    if (n == 4 && memcmp(w, "kvsd", 4) == 0)
        k->combined = 0;
    else if (n == 7 && memcmp(w, "workers", 7) == 0)
        k->combined = 1;
    else
        return 0;
    if (!number(c, UINT64_MAX, &k->rounds))
        return 0;
    while (c->p < c->end) {
        const char *colon;
        uint64_t b = 0, v;

        if (!word(c, &w, &n) || !(colon = memchr(w, ':', n)) || colon == w
            || colon - w > 2)
            return 0;
        for (const char *q = w; q < colon; q++)
            if (*q < '0' || *q > '9')
                return 0;
            else
                b = b * 10 + (uint64_t)(*q - '0');
        if ((colon - w == 2 && w[0] == '0') || b >= KVS__LAT_BUCKETS || (int)b <= last)
            return 0;
        {
            struct cur num = { colon + 1, w + n };

            if (!number(&num, UINT64_MAX, &v) || num.p != num.end || v == 0)
                return 0;
        }
        k->lat[b] = v;
        last = (int)b;
    }
    return done(c);
}

static int counter_line(struct cur *c, struct sample *s)
{
    const char *w;
    size_t n;
    uint64_t v;

    if (s->ncounters >= SAMPLE_COUNTERS || !word(c, &w, &n) || n >= SAMPLE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((w[i] >= 'a' && w[i] <= 'z') || w[i] == '_'))
            return 0;
    if (!number(c, UINT64_MAX, &v) || !done(c))
        return 0;
    for (int i = 0; i < s->ncounters; i++)
        if (strlen(s->counters[i].name) == n && memcmp(s->counters[i].name, w, n) == 0)
            return 0;
    memcpy(s->counters[s->ncounters].name, w, n);
    s->counters[s->ncounters].name[n] = '\0';
    s->counters[s->ncounters++].v = v;
    return 1;
}

static int worker_line(struct cur *c, struct sample *s)
{
    struct sample_worker w;
    uint64_t rank, pid;

    if (s->nworkers >= WORKERS_MAX || !number(c, INT32_MAX, &rank)
        || !number(c, INT32_MAX, &pid) || !number(c, UINT64_MAX, &w.pushes)
        || !number(c, UINT64_MAX, &w.bytes) || !number(c, UINT64_MAX, &w.wait_ns) || !done(c))
        return 0;
    w.rank = (int)rank;
    w.pid = (long)pid;
    s->workers[s->nworkers++] = w;
    return 1;
}

static int link_line(struct cur *c, struct sample *s)
{
    struct sample_link l;
    uint64_t h;

    if (s->nlinks >= SAMPLE_LINKS || !number(c, SAMPLE_LINKS - 1, &h)
        || (s->nlinks > 0 && (int)h <= s->links[s->nlinks - 1].host)
        || !number(c, UINT64_MAX, &l.frames_out) || !number(c, UINT64_MAX, &l.bytes_out)
        || !number(c, UINT64_MAX, &l.frames_in) || !number(c, UINT64_MAX, &l.bytes_in)
        || !done(c))
        return 0;
    l.host = (int)h;
    s->links[s->nlinks++] = l;
    return 1;
}

static int rows_line(struct cur *c, struct sample_rows *r)
{
    memset(r, 0, sizeof *r);
    return key_word(c, &r->key) && number(c, UINT64_MAX, &r->pushed)
           && number(c, UINT64_MAX, &r->pulled) && number(c, UINT64_MAX, &r->sent)
           && number(c, UINT64_MAX, &r->received) && done(c);
}

/* Room for one more of n things of size bytes in *p (capacity *cap, at
 * most KEYS_MAX): 1; 0 past it, or with *nomem set. */
static int room(void **p, size_t n, size_t *cap, size_t size, int *nomem)
{
    size_t c = *cap ? 2 * *cap : 64;
    void *q;

    if (n < *cap)
        return 1;
    if (c > KEYS_MAX)
        return 0;
    if (!(q = realloc(*p, c * size))) {
        *nomem = 1;
        return 0;
    }
    *p = q;
    *cap = c;
    return 1;
}

/* Where a line is in the order of the format. */
enum { L_HEAD, L_CLOCK, L_CPU, L_MODE, L_WORKERS, L_FAILED, L_COUNTERS, L_LINK, L_WORKER,
       L_MORE_WORKERS, L_ROWS, L_MORE_ROWS, L_KEY, L_MORE_KEYS, L_END };

/* What a parse keeps between lines. */
struct parse {
    int at;
    size_t keys_cap, rows_cap;
    int nomem;
};

static int sample_line(struct cur *c, struct sample *s, struct parse *ps)
{
    int *at = &ps->at;
    const char *w;
    size_t n;
    uint64_t a, b, x, y;

    switch (*at) {
    case L_HEAD:
        *at = L_CLOCK;
        if (!is_word(c, "kvs-sample") || !number(c, 2, &a) || a < 1 || !done(c))
            return 0;
        s->version = (int)a;
        return 1;
    case L_CLOCK:
        *at = L_CPU;
        if (!is_word(c, "clock") || !number(c, INT64_MAX, &a) || !done(c))
            return 0;
        s->clock = (int64_t)a;
        return 1;
    case L_CPU:
        *at = L_MODE;
        return is_word(c, "cpu") && number(c, UINT64_MAX, &s->cpu_user)
               && number(c, UINT64_MAX, &s->cpu_sys) && done(c);
    case L_MODE:
        *at = L_WORKERS;
        if (!is_word(c, "mode") || !word(c, &w, &n) || !done(c)
            || !((n == 4 && memcmp(w, "sync", 4) == 0) || (n == 5 && memcmp(w, "async", 5) == 0)
                 || (n == 7 && memcmp(w, "unknown", 7) == 0)))
            return 0;
        memcpy(s->mode, w, n);
        s->mode[n] = '\0';
        return 1;
    case L_WORKERS:
        *at = L_FAILED;
        if (!is_word(c, "workers") || !number(c, WORKERS_MAX, &a) || !number(c, WORKERS_MAX, &b)
            || !number(c, WORKERS_MAX, &x) || !number(c, WORKERS_MAX, &y) || !done(c))
            return 0;
        s->expected = (int)a, s->live = (int)b, s->left = (int)x, s->dead = (int)y;
        return 1;
    case L_FAILED:
        *at = L_COUNTERS;
        if (!is_word(c, "failed") || !number(c, 1, &a) || !done(c))
            return 0;
        s->failed = (int)a;
        return 1;
    }
    if (!word(c, &w, &n))
        return 0;
#define IS(lit) (n == sizeof(lit) - 1 && memcmp(w, lit, n) == 0)
    if (IS("counter") && *at == L_COUNTERS)
        return counter_line(c, s);
    if (IS("link") && s->version >= 2 && *at <= L_LINK) {
        *at = L_LINK;
        return link_line(c, s);
    }
    if (IS("worker") && *at <= L_WORKER) {
        *at = L_WORKER;
        return worker_line(c, s);
    }
    if (IS("more") && *at <= L_MORE_KEYS) {
        /* Each after the lines it counts, once. */
        static const struct { const char *what; int after, at, version; } more[] = {
            { "workers", L_WORKER, L_MORE_WORKERS, 1 },
            { "rows", L_ROWS, L_MORE_ROWS, 2 },
            { "keys", L_KEY, L_MORE_KEYS, 1 },
        };
        uint64_t *counts[] = { &s->more_workers, &s->more_rows, &s->more_keys };

        if (!word(c, &w, &n))
            return 0;
        for (int i = 0; i < 3; i++)
            if (n == strlen(more[i].what) && memcmp(w, more[i].what, n) == 0) {
                if (*at > more[i].after || s->version < more[i].version)
                    return 0;
                *at = more[i].at;
                return number(c, i == 0 ? WORKERS_MAX : UINT64_MAX, counts[i]) && done(c);
            }
        return 0;
    }
    if (IS("rows") && s->version >= 2 && *at <= L_ROWS) {
        *at = L_ROWS;
        if (!room((void **)&s->rows, s->nrows, &ps->rows_cap, sizeof *s->rows, &ps->nomem))
            return 0;
        return rows_line(c, &s->rows[s->nrows++]);
    }
    if (IS("key") && *at <= L_KEY) {
        *at = L_KEY;
        if (!room((void **)&s->keys, s->nkeys, &ps->keys_cap, sizeof *s->keys, &ps->nomem))
            return 0;
        return key_line(c, &s->keys[s->nkeys++]);
    }
    if (IS("end") && *at >= L_COUNTERS) {
        *at = L_END;
        return done(c);
    }
#undef IS
    return 0;
}

int sample_parse(const char *text, size_t len, struct sample *s, char *msg, size_t size)
{
    const char *p = text, *end = text + len;
    struct parse ps = { .at = L_HEAD };
    int line = 0;

    memset(s, 0, sizeof *s);
    if (!(s->workers = malloc(WORKERS_MAX * sizeof *s->workers))
        || !(s->links = malloc(SAMPLE_LINKS * sizeof *s->links))) {
        sample_free(s);
        return bad(msg, size, "out of memory");
    }
    while (p < end && ps.at != L_END) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        struct cur c = { p, nl ? nl : end };

        line++;
        if (!nl || c.p == c.end || !sample_line(&c, s, &ps)) {
            int shown = (int)(c.end - p < 60 ? c.end - p : 60);

            sample_free(s);
            if (ps.nomem)
                return bad(msg, size, "out of memory");
            if (!nl)
                return bad(msg, size, "line %d does not end", line);
            /* The text is printable: the reply's decoder checked it. */
            return bad(msg, size, "line %d is not as the format says: '%.*s'", line, shown, p);
        }
        p = nl + 1;
    }
    if (ps.at != L_END || p != end) {
        sample_free(s);
        return bad(msg, size, ps.at != L_END ? "the sample has no end line" :
                   "text follows the end line");
    }
    return 0;
}

void sample_free(struct sample *s)
{
    free(s->workers);
    free(s->keys);
    free(s->links);
    free(s->rows);
    memset(s, 0, sizeof *s);
}

uint64_t sample_counter(const struct sample *s, const char *name)
{
    for (int i = 0; i < s->ncounters; i++)
        if (strcmp(s->counters[i].name, name) == 0)
            return s->counters[i].v;
    return 0;
}

/* ---- JSON ----------------------------------------------------------------- */

/* The bytes of a valid UTF-8 character at s (n left), else 0. */
static size_t utf8_char(const unsigned char *s, size_t n)
{
    size_t k = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
             : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    uint32_t cp;

    if (k == 0 || k > n)
        return 0;
    cp = k == 1 ? s[0] : (uint32_t)(s[0] & (0x7f >> k));
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* No overlong forms, surrogates or points past U+10FFFF. */
    if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000)
        || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return k;
}

/* s[0..n) as a JSON string: quotes, backslashes and controls escaped; a
 * byte that is not part of valid UTF-8 (a name is any bytes) becomes
 * U+FFFD, so that the output is always valid JSON. */
static void json_string(FILE *f, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;

    fputc('"', f);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_char(u + i, n - i);

        if (k == 0) {
            fputs("\\ufffd", f);
            i++;
        } else if (u[i] == '"' || u[i] == '\\') {
            fprintf(f, "\\%c", u[i++]);
        } else if (u[i] == '\n') {
            fputs("\\n", f);
            i++;
        } else if (u[i] == '\t') {
            fputs("\\t", f);
            i++;
        } else if (u[i] < 0x20 || u[i] == 0x7f) {
            fprintf(f, "\\u%04x", u[i++]);
        } else {
            fwrite(u + i, 1, k, f);
            i += k;
        }
    }
    fputc('"', f);
}

/* A key as JSON: a number for an int key, a string for a string key. */
static void json_key(FILE *f, const struct sample_key *k)
{
    if (k->is_str)
        json_string(f, k->name, k->name_len);
    else
        fprintf(f, "%" PRId64, k->id);
}

int sample_json(FILE *f, const char *job, const struct sample *s)
{
    fputs("{\"job\": ", f);
    json_string(f, job, strlen(job));
    fprintf(f, ", \"mode\": \"%s\", \"failed\": %s,\n", s->mode, s->failed ? "true" : "false");
    fprintf(f, " \"workers\": {\"expected\": %d, \"live\": %d, \"left\": %d, \"dead\": %d},\n",
            s->expected, s->live, s->left, s->dead);
    fprintf(f, " \"kvsd_cpu_ns\": {\"user\": %" PRIu64 ", \"system\": %" PRIu64 "},\n",
            s->cpu_user, s->cpu_sys);
    fputs(" \"counters\": {", f);
    for (int i = 0; i < s->ncounters; i++)
        fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", s->counters[i].name, s->counters[i].v);
    fputs("},\n \"ranks\": [", f);
    for (int i = 0; i < s->nworkers; i++) {
        const struct sample_worker *w = &s->workers[i];

        fprintf(f, "%s\n  {\"rank\": %d, \"pid\": %ld, \"pushes\": %" PRIu64 ", \"bytes\": %"
                PRIu64 ", \"wait_ns\": %" PRIu64 "}", i ? "," : "", w->rank, w->pid,
                w->pushes, w->bytes, w->wait_ns);
    }
    fprintf(f, "],\n \"ranks_not_shown\": %" PRIu64 ",\n \"links\": [", s->more_workers);
    for (int i = 0; i < s->nlinks; i++) {
        const struct sample_link *l = &s->links[i];

        fprintf(f, "%s\n  {\"host\": %d, \"frames_out\": %" PRIu64 ", \"bytes_out\": %" PRIu64
                ", \"frames_in\": %" PRIu64 ", \"bytes_in\": %" PRIu64 "}", i ? "," : "",
                l->host, l->frames_out, l->bytes_out, l->frames_in, l->bytes_in);
    }
    fputs("],\n \"rows\": [", f);
    for (size_t i = 0; i < s->nrows; i++) {
        const struct sample_rows *r = &s->rows[i];

        fprintf(f, "%s\n  {\"key\": ", i ? "," : "");
        json_key(f, &r->key);
        fprintf(f, ", \"pushed\": %" PRIu64 ", \"pulled\": %" PRIu64 ", \"sent\": %" PRIu64
                ", \"received\": %" PRIu64 "}", r->pushed, r->pulled, r->sent, r->received);
    }
    fprintf(f, "],\n \"rows_not_shown\": %" PRIu64 ",\n", s->more_rows);
    fprintf(f, " \"latency\": \"from a round's first push to its end; histogram[i] counts the "
            "rounds of [2^i, 2^(i+1)) ns; p50_ns, p99_ns and max_ns are the upper bounds of "
            "their buckets\",\n \"keys\": [");
    for (size_t i = 0; i < s->nkeys; i++) {
        const struct sample_key *k = &s->keys[i];

        fprintf(f, "%s\n  {\"key\": ", i ? "," : "");
        json_key(f, k);
        fprintf(f, ", \"combined\": %s, \"rounds\": %" PRIu64 ", \"p50_ns\": %" PRIu64
                ", \"p99_ns\": %" PRIu64 ", \"max_ns\": %" PRIu64 ", \"histogram\": [",
                k->combined ? "true" : "false", k->rounds, kvs__lat_quantile(k->lat, 0.5),
                kvs__lat_quantile(k->lat, 0.99), kvs__lat_quantile(k->lat, 1));
        for (int b = 0; b < KVS__LAT_BUCKETS; b++)
            fprintf(f, "%s%" PRIu64, b ? ", " : "", k->lat[b]);
        fputs("]}", f);
    }
    fprintf(f, "],\n \"keys_not_shown\": %" PRIu64 "}\n", s->more_keys);
    return fflush(f) != 0 || ferror(f) ? -1 : 0;
}
