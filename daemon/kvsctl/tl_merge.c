/*
 * tl_merge.c - kvsctl timeline merge: joins the parts of one job's
 * timeline, one per host, into one file of the same format, on host 0's
 * clock: each host's file says, in otherData.clock_offsets, host 0's
 * clock less its own, which is added to its events' ts. Host 0's event
 * lines, and every line without a ts, are copied as they came once they
 * have parsed. The file appears whole or not at all (tltool.c's tl_out).
 * Nothing here calls plot (tl_plot.c) or the dispatcher (kvsctl.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timeline.h"
#include "tlread.h"
#include "tltool.h"

/* ---- merge ------------------------------------------------------------------- */

/* The metadata lines written so far: a part of each host may name the
 * same process; the second naming is left out. */
struct seen {
    struct seen_line { uint64_t hash; char *text; size_t len; } *slot;
    size_t n, cap;                     /* cap: 0 or a power of 2 */
};

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 14695981039346656037ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* 1 when the line is new (and is kept), 0 when seen before, -1 when out
 * of memory. */
static int seen_add(struct seen *s, const char *text, size_t len)
{
    uint64_t h = fnv1a(text, len);
    struct seen_line *e;

    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        struct seen_line *slot = calloc(cap, sizeof *slot);

        if (!slot)
            return -1;
        for (size_t i = 0; i < s->cap; i++) {
            size_t k;

            if (!s->slot[i].text)
                continue;
            for (k = s->slot[i].hash & (cap - 1); slot[k].text; k = (k + 1) & (cap - 1))
                ;
            slot[k] = s->slot[i];
        }
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    for (size_t k = h & (s->cap - 1);; k = (k + 1) & (s->cap - 1)) {
        e = &s->slot[k];
        if (!e->text)
            break;
        if (e->hash == h && e->len == len && memcmp(e->text, text, len) == 0)
            return 0;
    }
    if (!(e->text = malloc(len ? len : 1)))
        return -1;
    memcpy(e->text, text, len);
    e->hash = h;
    e->len = len;
    s->n++;
    return 1;
}

static void seen_free(struct seen *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slot[i].text);
    free(s->slot);
}

struct merge {
    FILE *out;
    size_t events, parts;
    int64_t dropped, hosts, most_host;
    char *offsets, *extra;             /* JSON texts */
    char *clock, *job;                 /* the first part's */
    size_t offsets_len, extra_len;
    FILE *offsets_f, *extra_f;
    size_t noffsets, nextra;
    struct { int64_t host; const char *path; } *host;   /* the parts of one host */
    size_t nhost, host_cap;
    struct seen seen;
};

/* One part's otherData into m. 0, or 1 with the message written. */
static int merge_other(struct merge *m, const char *path, const struct tl_val *other)
{
    static const char *const known[] = { "format", "clock", "host", "hosts", "dropped_events",
                                         "clock_offsets" };
    const struct tl_val *clock = tl_get(other, "clock"), *job = tl_get(other, "job");
    const struct tl_val *v, *offsets;
    int64_t host = -1, hosts = 0, dropped = 0;

    if ((v = tl_get(other, "host")) && tl_int(v, -1, PID_LIMIT, &host) != 0) {
        fprintf(stderr, "kvsctl timeline: %s: otherData.host is not a host number\n", path);
        return 1;
    }
    if ((v = tl_get(other, "hosts")) && tl_int(v, 1, PID_LIMIT, &hosts) != 0) {
        fprintf(stderr, "kvsctl timeline: %s: otherData.hosts is not a number of hosts\n",
                path);
        return 1;
    }
    if ((v = tl_get(other, "dropped_events"))
        && tl_int(v, 0, ROUND_LIMIT, &dropped) != 0) {
        fprintf(stderr, "kvsctl timeline: %s: otherData.dropped_events is not a count\n",
                path);
        return 1;
    }
    if ((offsets = tl_get(other, "clock_offsets")) && offsets->type != TL_ARR) {
        fprintf(stderr, "kvsctl timeline: %s: otherData.clock_offsets is not a list\n", path);
        return 1;
    }
    if (clock && clock->type != TL_STR) {
        fprintf(stderr, "kvsctl timeline: %s: otherData.clock is not a string\n", path);
        return 1;
    }
    if (m->parts == 0 && clock && !(m->clock = strndup(clock->s, clock->len)))
        goto oom;
    if (m->parts > 0 && clock && m->clock
        && (strlen(m->clock) != clock->len || memcmp(m->clock, clock->s, clock->len) != 0)) {
        fprintf(stderr, "kvsctl timeline: %s: its clock is not the first part's: parts of "
                "one job?\n", path);
        return 1;
    }
    if (m->parts == 0 && job && job->type == TL_STR
        && !(m->job = strndup(job->s, job->len)))
        goto oom;
    if (m->parts > 0 && job && job->type == TL_STR && m->job
        && (strlen(m->job) != job->len || memcmp(m->job, job->s, job->len) != 0)) {
        fprintf(stderr, "kvsctl timeline: %s: its otherData.job is not the first part's: "
                "parts of another job\n", path);
        return 1;
    }
    if (host >= 0) {
        for (size_t i = 0; i < m->nhost; i++)
            if (m->host[i].host == host) {
                fprintf(stderr, "kvsctl timeline: %s and %s are both host %" PRId64 "'s "
                        "part\n", m->host[i].path, path, host);
                return 1;
            }
        if (tl_grow(&m->host, &m->host_cap, m->nhost + 1, sizeof *m->host) != 0)
            goto oom;
        m->host[m->nhost].host = host;
        m->host[m->nhost++].path = path;
        m->most_host = host > m->most_host ? host : m->most_host;
    }
    m->hosts = hosts > m->hosts ? hosts : m->hosts;
    if (dropped > ROUND_LIMIT - m->dropped) {
        fprintf(stderr, "kvsctl timeline: %s: too many dropped events to count\n", path);
        return 1;
    }
    m->dropped += dropped;
    for (const struct tl_val *o = offsets ? offsets->child : NULL; o; o = o->next) {
        if (m->noffsets++)
            putc(',', m->offsets_f);
        tl_json_write(m->offsets_f, o);
    }
    /* Members the tools do not know are the first part's, as they came. */
    for (const struct tl_val *o = m->parts == 0 ? other->child : NULL; o; o = o->next) {
        size_t k = 0;

        while (k < sizeof known / sizeof known[0]
               && !(o->key_len == strlen(known[k]) && memcmp(o->key, known[k], o->key_len) == 0))
            k++;
        if (k < sizeof known / sizeof known[0])
            continue;
        putc(',', m->extra_f);
        tl_json_write(m->extra_f, &(struct tl_val){ .type = TL_STR, .s = o->key,
                                                   .len = o->key_len });
        putc(':', m->extra_f);
        tl_json_write(m->extra_f, o);
        m->nextra++;
    }
    m->parts++;
    return 0;
oom:
    fprintf(stderr, "kvsctl timeline: out of memory\n");
    return 1;
}

/* What moves a part's times onto host 0's clock: its own entry of
 * clock_offsets, host 0's clock less its own. Nothing for host 0, for a
 * merged file (host -1, on host 0's clock already), or for a host whose
 * offset was never measured (said). 0 and *us, or 1 with the message
 * written. */
static int part_shift(const char *path, const struct tl_val *other, double *us)
{
    const struct tl_val *offsets = tl_get(other, "clock_offsets"), *measured;
    int64_t host = -1, h;
    double error = 0;

    *us = 0;
    if (tl_int(tl_get(other, "host"), -1, PID_LIMIT, &host) != 0 || host <= 0)
        return 0;
    for (const struct tl_val *o = offsets ? offsets->child : NULL; o; o = o->next) {
        if (tl_int(tl_get(o, "host"), 0, PID_LIMIT, &h) != 0 || h != host)
            continue;
        if ((measured = tl_get(o, "measured")) && measured->type == TL_FALSE) {
            fprintf(stderr, "kvsctl timeline: %s: host %" PRId64 "'s clock was never compared "
                    "with host 0's: its times stay on its own clock\n", path, host);
            return 0;
        }
        if (tl_num(tl_get(o, "offset_us"), us) != 0 || fabs(*us) > OFFSET_LIMIT_US) {
            fprintf(stderr, "kvsctl timeline: %s: host %" PRId64 "'s offset_us is not a "
                    "number of microseconds\n", path, host);
            return 1;
        }
        if (tl_num(tl_get(o, "error_us"), &error) == 0)
            printf("%s: host %" PRId64 "'s times moved by %.3f us onto host 0's clock (within "
                   "%.3f us)\n", path, host, *us, error);
        else
            printf("%s: host %" PRId64 "'s times moved by %.3f us onto host 0's clock\n", path,
                   host, *us);
        return 0;
    }
    fprintf(stderr, "kvsctl timeline: %s: no clock offset for host %" PRId64 ": its times stay "
            "on its own clock\n", path, host);
    return 0;
}

/* An event with its ts moved by us, written anew (the rest as it came). */
static void write_moved(FILE *f, struct tl_val *ev, double us)
{
    struct tl_val *ts = (struct tl_val *)tl_get(ev, "ts");
    char num[64];
    double t;

    if (ts && tl_num(ts, &t) == 0 && fabs(t + us) < OFFSET_LIMIT_US) {
        ts->len = (size_t)snprintf(num, sizeof num, "%.3f", t + us);
        ts->s = num;
    }
    tl_json_write(f, ev);
}

/* One part's otherData, then its events into m->out, on host 0's clock.
 * 0, or 1 with the message written. */
static int merge_part(struct merge *m, const char *path)
{
    struct tl_file t;
    struct tl_val *ev;
    const char *text;
    size_t len;
    double shift;
    int rc;

    /* The clock offset is at the end: a first pass finds it, a second
     * copies the events. */
    if (tl_open(&t, path) != 0)
        goto bad;
    while ((rc = tl_next(&t, &ev, NULL, NULL)) > 0)
        ;
    if (rc < 0)
        goto bad;
    rc = merge_other(m, path, t.other) != 0 || part_shift(path, t.other, &shift) != 0;
    tl_close(&t);
    if (rc != 0)
        return 1;
    if (tl_open(&t, path) != 0)
        goto bad;
    while ((rc = tl_next(&t, &ev, &text, &len)) > 0) {
        if (tl_is(tl_get(ev, "ph"), "M")) {
            int r = seen_add(&m->seen, text, len);

            if (r < 0) {
                snprintf(t.err, sizeof t.err, "out of memory");
                goto bad;
            }
            if (r == 0)
                continue;
        }
        if (m->events++)
            fputs(",\n", m->out);
        if (shift != 0)
            write_moved(m->out, ev, shift);
        else
            fwrite(text, 1, len, m->out);
    }
    if (rc < 0)
        goto bad;
    tl_close(&t);
    return 0;
bad:
    fprintf(stderr, "kvsctl timeline: %s\n", t.err);
    tl_close(&t);
    return 1;
}

int tl_merge_main(int argc, char **argv)
{
    static const struct option longs[] = {
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct merge m = { .most_host = -1 };
    struct tl_out o = { .fd = -1 };
    const char *out;
    int64_t hosts;
    int c, rc = 1;

    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        if (c == 'h') {
            tl_usage(stdout);
            return 0;
        }
        return tl_usage_error("unknown option '%s'", argv[optind - 1]);
    }
    if (argc - optind < 2)
        return tl_usage_error("merge: needs OUT and at least one FILE (host 0's part, then "
                           "FILE.host1, ...)");
    out = argv[optind++];
    if (!(m.offsets_f = open_memstream(&m.offsets, &m.offsets_len))
        || !(m.extra_f = open_memstream(&m.extra, &m.extra_len))) {
        fprintf(stderr, "kvsctl timeline: out of memory\n");
        goto out;
    }
    if (tl_out_open(&o, out) != 0)
        goto out;
    if (!(o.f = m.out = fdopen(o.fd, "w"))) {
        fprintf(stderr, "kvsctl timeline: cannot write %s: %s\n", out, strerror(errno));
        goto out;
    }
    fputs("{\"traceEvents\":[\n", m.out);
    for (int i = optind; i < argc; i++)
        if (merge_part(&m, argv[i]) != 0)
            goto out;
    if (fflush(m.offsets_f) != 0 || fflush(m.extra_f) != 0) {
        fprintf(stderr, "kvsctl timeline: out of memory\n");
        goto out;
    }
    hosts = m.hosts > m.most_host + 1 ? m.hosts : m.most_host + 1;
    if (hosts < 1)
        hosts = (int64_t)m.parts;
    fputs(m.events ? "\n],\n" : "],\n", m.out);
    fputs("\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":\"" TL_FORMAT "\"", m.out);
    if (m.clock) {
        fputs(",\"clock\":", m.out);
        tl_json_write(m.out, &(struct tl_val){ .type = TL_STR, .s = m.clock,
                                              .len = strlen(m.clock) });
    }
    fprintf(m.out, ",\"host\":-1,\"hosts\":%" PRId64 ",\"dropped_events\":%" PRId64
            ",\"clock_offsets\":[", hosts, m.dropped);
    fwrite(m.offsets, 1, m.offsets_len, m.out);
    fputc(']', m.out);
    fwrite(m.extra, 1, m.extra_len, m.out);
    fputs("}}\n", m.out);
    if (tl_out_commit(&o) != 0)
        goto out;
    printf("%s: %zu event%s of %zu part%s, %" PRId64 " dropped while recording\n", out,
           m.events, m.events == 1 ? "" : "s", m.parts, m.parts == 1 ? "" : "s", m.dropped);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kvsctl timeline: cannot write: %s\n", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (rc != 0)
        tl_out_drop(&o);
    if (m.offsets_f)
        fclose(m.offsets_f);
    if (m.extra_f)
        fclose(m.extra_f);
    free(m.offsets);
    free(m.extra);
    free(m.clock);
    free(m.job);
    free(m.host);
    seen_free(&m.seen);
    return rc;
}
