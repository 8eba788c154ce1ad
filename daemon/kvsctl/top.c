/*
 * top.c - kvsctl top: a live view of a job, made of kvsd's samples
 * (proto.h, KVS__CTL_SAMPLE) one interval apart: per worker its rounds/s,
 * bytes/s and the time it spent waiting for the store; per key its
 * rounds/s and the latency of its rounds in the interval; kvsd's CPU; the
 * job's totals. A worker that holds the others up stands out by waiting
 * least: the others wait for it.
 *
 * The terminal gets plain ANSI escapes (the alternate screen, cursor
 * moves, erase to the end of a line), no curses. A frame fits the
 * terminal: its lines are cut at the width, never wrapped, and what does
 * not fit below is left out. Input is read a key at a time without echo,
 * and the terminal is put back as it was on every way out: q, SIGINT,
 * SIGTERM, SIGHUP, the job's end, an error. Nothing kvsd sent reaches the
 * terminal before sample.c has checked it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "ask.h"
#include "proto/proto.h"
#include "shm/ring.h"
#include "sample.h"
#include "top.h"

#define ROWS_DEFAULT 24
#define COLS_DEFAULT 80
#define LINE_BYTES   (SAMPLE_KEY_TEXT + 256)   /* a line before it is cut */
#define KEYS_MIN     3                 /* key lines kept when workers would fill the screen */

static volatile sig_atomic_t got_signal, got_winch;

static void on_signal(int sig)
{
    got_signal = sig;
}

static void on_winch(int sig)
{
    (void)sig;
    got_winch = 1;
}

/* ---- a frame: lines cut to the screen ------------------------------------ */

struct frame {
    char *buf;
    size_t len, cap;
    int rows, cols, n;
    int plain;                         /* --once: lines end with newlines, no escapes,
                                        * no limit of rows */
};

static void put(struct frame *f, const char *s, size_t n)
{
    if (n > f->cap - f->len) {
        size_t cap = (f->cap ? 2 * f->cap : 16384) + n;
        char *p = realloc(f->buf, cap);

        if (!p)
            return;                    /* the frame is short of this; the next is whole */
        f->buf = p;
        f->cap = cap;
    }
    memcpy(f->buf + f->len, s, n);
    f->len += n;
}

static int rows_left(const struct frame *f)
{
    return f->plain ? 1 << 20 : f->rows - f->n;
}

/* The bytes of s that take at most cols columns: one per character (a key
 * name may hold UTF-8), a character never split. */
static size_t cut(const char *s, int cols)
{
    size_t i = 0;
    int c = 0;

    while (s[i]) {
        size_t k = 1;

        if (c == cols)
            break;
        while (((unsigned char)s[i + k] & 0xc0) == 0x80)
            k++;
        i += k;
        c++;
    }
    return i;
}

static void line(struct frame *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The next line, cut at the frame's width; left out when no row is left. */
static void line(struct frame *f, const char *fmt, ...)
{
    char text[LINE_BYTES], esc[32];
    va_list ap;
    int n;

    if (rows_left(f) <= 0)
        return;
    va_start(ap, fmt);
    n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0)
        text[0] = '\0';
    f->n++;
    if (!f->plain) {
        n = snprintf(esc, sizeof esc, "\033[%d;1H", f->n);
        put(f, esc, (size_t)n);
    }
    put(f, text, cut(text, f->cols));
    put(f, f->plain ? "\n" : "\033[K", f->plain ? 1 : 3);
}

/* The frame onto the terminal: what is below its lines erased. 0, or -1
 * when stdout failed. */
static int show(struct frame *f)
{
    char esc[32];
    int n;

    if (!f->plain && f->n < f->rows) {
        n = snprintf(esc, sizeof esc, "\033[%d;1H\033[J", f->n + 1);
        put(f, esc, (size_t)n);
    }
    if (f->len && fwrite(f->buf, 1, f->len, stdout) != f->len)
        return -1;
    f->len = 0;
    f->n = 0;
    return fflush(stdout) != 0 ? -1 : 0;
}

/* ---- figures ------------------------------------------------------------- */

/* Columns the text takes: one per character. */
static int columns(const char *s)
{
    int c = 0;

    for (; *s; s++)
        c += ((unsigned char)*s & 0xc0) != 0x80;
    return c;
}

static uint64_t delta(uint64_t was, uint64_t now)
{
    return now >= was ? now - was : 0;
}

/* Per second, over dt_ns. */
static double per_s(uint64_t n, int64_t dt_ns)
{
    return (double)n * 1e9 / (double)dt_ns;
}

static void bytes_rate(char *buf, size_t size, double bps)
{
    static const char *const units[] = { "B/s", "KB/s", "MB/s", "GB/s", "TB/s" };
    int u = 0;

    while (bps >= 1000 && u < 4) {
        bps /= 1000;
        u++;
    }
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", bps, units[u]);
}

static const struct sample_worker *worker_of(const struct sample *s, int rank)
{
    for (int i = 0; i < s->nworkers; i++)
        if (s->workers[i].rank == rank)
            return &s->workers[i];
    return NULL;
}

static int by_text(const void *x, const void *y)
{
    return strcmp((*(const struct sample_key *const *)x)->text,
                  (*(const struct sample_key *const *)y)->text);
}

/* A key of the newer sample with what the interval added to it. */
struct shown_key {
    const struct sample_key *k;
    uint64_t rounds;                   /* in the interval */
    uint64_t lat[KVS__LAT_BUCKETS];    /* the interval's */
    size_t order;                      /* kvsd's: the busiest overall first */
};

static int busiest(const void *x, const void *y)
{
    const struct shown_key *a = x, *b = y;

    if (a->rounds != b->rounds)
        return a->rounds > b->rounds ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* The keys of b, busiest in the interval since a first. NULL without
 * memory (the frame then has no keys). */
static struct shown_key *interval_keys(const struct sample *a, const struct sample *b)
{
    struct shown_key *sk = malloc((b->nkeys ? b->nkeys : 1) * sizeof *sk);
    const struct sample_key **old = malloc((a->nkeys ? a->nkeys : 1) * sizeof *old);

    if (!sk || !old) {
        free(sk);
        free(old);
        return NULL;
    }
    for (size_t i = 0; i < a->nkeys; i++)
        old[i] = &a->keys[i];
    qsort(old, a->nkeys, sizeof *old, by_text);
    for (size_t i = 0; i < b->nkeys; i++) {
        const struct sample_key *k = &b->keys[i], *const *was;

        was = bsearch(&k, old, a->nkeys, sizeof *old, by_text);
        sk[i] = (struct shown_key){ .k = k, .order = i };
        sk[i].rounds = delta(was ? (*was)->rounds : 0, k->rounds);
        for (int j = 0; j < KVS__LAT_BUCKETS; j++)
            sk[i].lat[j] = delta(was ? (*was)->lat[j] : 0, k->lat[j]);
    }
    qsort(sk, b->nkeys, sizeof *sk, busiest);
    free(old);
    return sk;
}

/* ---- the view ------------------------------------------------------------ */

static void render(struct frame *f, const char *job, const struct sample *a,
                   const struct sample *b, int64_t interval_ns)
{
    int64_t dt = b->clock - a->clock > 0 ? b->clock - a->clock : 1;
    uint64_t cpu = delta(a->cpu_user + a->cpu_sys, b->cpu_user + b->cpu_sys);
    uint64_t pushes = 0, bytes = 0, wait = 0;
    struct shown_key *keys = interval_keys(a, b);
    size_t nkeys = keys ? b->nkeys : 0;
    int avail, wshown, keyw = 3;
    char rate[32], q50[16], q99[16];

    for (int i = 0; i < b->nworkers; i++) {
        const struct sample_worker *w = &b->workers[i], *was = worker_of(a, w->rank);

        if (was && was->pid == w->pid) {
            pushes += delta(was->pushes, w->pushes);
            bytes += delta(was->bytes, w->bytes);
            wait += delta(was->wait_ns, w->wait_ns);
        }
    }
    line(f, "kvsctl top%s: job %s, %s, %d/%d workers%s, kvsd CPU %.1f%%, every %.1f s",
         f->plain ? "" : " (q quits)", job, b->mode, b->live, b->expected,
         b->failed ? ", FAILED" : "", 100.0 * (double)cpu / (double)dt,
         (double)interval_ns / 1e9);
    /* The job's rounds: kvsd's and those its workers combined. */
    bytes_rate(rate, sizeof rate, per_s(bytes, dt));
    line(f, "job  %.1f rounds/s  %.1f pushes/s  %s  waits %.0f ms/s  rounds %" PRIu64,
         per_s(delta(sample_counter(a, "rounds") + sample_counter(a, "combined_rounds"),
                     sample_counter(b, "rounds") + sample_counter(b, "combined_rounds")), dt),
         per_s(pushes, dt), rate, per_s(wait, dt) / 1e6,
         sample_counter(b, "rounds") + sample_counter(b, "combined_rounds"));
    line(f, "%s", "");
    line(f, "%4s %8s %9s %11s %9s %6s", "RANK", "PID", "ROUNDS/S", "BYTES/S", "WAIT MS", "WAIT%");

    /* Workers first, but a few key lines always show. */
    avail = rows_left(f) - 2;
    wshown = b->nworkers;
    if (!f->plain && wshown > avail - (int)(nkeys < KEYS_MIN ? nkeys : KEYS_MIN))
        wshown = avail - (int)(nkeys < KEYS_MIN ? nkeys : KEYS_MIN);
    if (wshown < 0)
        wshown = 0;
    for (int i = 0; i < b->nworkers && i < wshown; i++) {
        const struct sample_worker *w = &b->workers[i], *was = worker_of(a, w->rank);
        uint64_t dw;

        if (i == wshown - 1 && wshown < b->nworkers) {
            line(f, "... %d more workers", b->nworkers - i);
            break;
        }
        if (!was || was->pid != w->pid) {
            line(f, "%4d %8ld %9s %11s %9s %6s", w->rank, w->pid, "-", "-", "-", "-");
            continue;
        }
        /* A wait is counted when it ends: one that began in the last
         * interval adds to this one, which then reads over 100%. */
        dw = delta(was->wait_ns, w->wait_ns);
        bytes_rate(rate, sizeof rate, per_s(delta(was->bytes, w->bytes), dt));
        line(f, "%4d %8ld %9.1f %11s %9.1f %5.1f%%", w->rank, w->pid,
             per_s(delta(was->pushes, w->pushes), dt), rate, (double)dw / 1e6,
             dw < (uint64_t)dt ? 100.0 * (double)dw / (double)dt : 100.0);
    }
    if (b->more_workers && wshown >= b->nworkers)
        line(f, "... %" PRIu64 " more workers kvsd did not list", b->more_workers);

    line(f, "%s", "");
    for (size_t i = 0; i < nkeys; i++)
        if (columns(keys[i].k->text) > keyw)
            keyw = columns(keys[i].k->text);
    /* The key's column takes what the numbers leave of the width. */
    if (keyw > f->cols - 50)
        keyw = f->cols - 50 > 8 ? f->cols - 50 : 8;
    line(f, "%-*s %9s %11s %8s %8s  %s", keyw, "KEY", "ROUNDS/S", "ROUNDS", "P50", "P99",
         "BY");
    for (size_t i = 0; i < nkeys; i++) {
        const struct shown_key *k = &keys[i];
        char kt[SAMPLE_KEY_TEXT + 1];
        size_t kb = cut(k->k->text, keyw);

        if (rows_left(f) == 1 && i + 1 < nkeys) {
            line(f, "... %zu more keys", nkeys - i + b->more_keys);
            break;
        }
        memcpy(kt, k->k->text, kb);
        kt[kb] = '\0';
        kvs__lat_format(q50, sizeof q50, kvs__lat_quantile(k->lat, 0.5));
        kvs__lat_format(q99, sizeof q99, kvs__lat_quantile(k->lat, 0.99));
        line(f, "%s%*s %9.1f %11" PRIu64 " %8s %8s  %s", kt, keyw - columns(kt), "",
             per_s(k->rounds, dt), k->k->rounds, q50, q99, k->k->combined ? "workers" : "kvsd");
    }
    if (b->more_keys && rows_left(f) > 0)
        line(f, "... %" PRIu64 " more keys kvsd did not list", b->more_keys);
    free(keys);
}

/* ---- sampling and the terminal ------------------------------------------- */

/* A sample of job's kvsd, parsed and checked into *s: ASK_OK, or as
 * ctl_ask says, with why in msg. */
static int take(const char *job, struct kvs__ctl_reply *reply, struct sample *s, char *msg,
                size_t size)
{
    char why[256];
    int rc = ctl_ask(job, KVS__CTL_SAMPLE, reply, msg, size);

    if (rc != ASK_OK)
        return rc;
    if (sample_parse(reply->text, reply->len, s, why, sizeof why) != 0) {
        snprintf(msg, size, "a bad sample from the kvsd of job '%s': %s", job, why);
        return ASK_FAILED;
    }
    return ASK_OK;
}

struct term {
    int in_raw;                        /* stdin is a terminal taken out of canonical mode */
    struct termios saved;
    int in;                            /* where keys come from, or -1 */
};

static void term_enter(struct term *t)
{
    struct sigaction sa;

    /* Without SA_RESTART: a signal ends the wait for a key at once. */
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, NULL);
    t->in = STDIN_FILENO;
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t->saved) == 0) {
        struct termios raw = t->saved;

        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        t->in_raw = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    /* The alternate screen, the cursor hidden. */
    fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout);
    fflush(stdout);
}

static void term_leave(struct term *t)
{
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    if (t->in_raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
    t->in_raw = 0;
}

/* Waits for a key until until_ns: 'q' when q (or Q) was pressed, else 0
 * (the time came, a signal, another key). */
static int wait_key(struct term *t, int64_t until_ns)
{
    struct pollfd p = { .fd = t->in, .events = POLLIN };
    int64_t left = until_ns - kvs__now_ns();
    char keys[64];
    ssize_t n;

    if (left < 0)
        left = 0;
    if (poll(&p, t->in >= 0 ? 1 : 0, (int)(left / 1000000 + (left % 1000000 != 0))) <= 0)
        return 0;
    n = read(t->in, keys, sizeof keys);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        t->in = -1;                    /* no more keys: only signals end the view */
        return 0;
    }
    for (ssize_t i = 0; i < n; i++)
        if (keys[i] == 'q' || keys[i] == 'Q')
            return 'q';
    return 0;
}

static void term_size(struct frame *f)
{
    struct winsize ws;

    f->rows = ROWS_DEFAULT;
    f->cols = COLS_DEFAULT;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
        f->rows = ws.ws_row;
        f->cols = ws.ws_col;
    }
}

/* One frame as plain text, after one interval. */
static int top_once(const char *job, const struct top_opts *o, struct kvs__ctl_reply *reply,
                    struct sample *a)
{
    struct frame f = { .rows = ROWS_DEFAULT, .cols = COLS_DEFAULT, .plain = 1 };
    struct sample b;
    char msg[1024];
    int64_t until = kvs__now_ns() + o->interval_ns;
    int rc;

    while (kvs__now_ns() < until)
        poll(NULL, 0, (int)((until - kvs__now_ns()) / 1000000 + 1));
    if (take(job, reply, &b, msg, sizeof msg) != ASK_OK) {
        fprintf(stderr, "kvsctl: %s\n", msg);
        return 1;
    }
    render(&f, job, a, &b, o->interval_ns);
    rc = show(&f);
    free(f.buf);
    sample_free(&b);
    if (rc != 0) {
        fprintf(stderr, "kvsctl: cannot write the view: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

int top_main(const char *job, const struct top_opts *o)
{
    static struct kvs__ctl_reply reply;
    struct sample a, b;
    struct frame f = { .plain = 0 };
    struct term t = { .in = -1 };
    char msg[1024];
    int64_t next;
    int status = 0, have_b = 0, ended = 0, rc;

    if (!o->once && !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "kvsctl: top needs a terminal on stdout; 'kvsctl top --once' prints "
                "one frame as text\n");
        return 2;
    }
    if (take(job, &reply, &a, msg, sizeof msg) != ASK_OK) {
        fprintf(stderr, "kvsctl: %s\n", msg);
        return 1;
    }
    if (o->once) {
        rc = top_once(job, o, &reply, &a);
        sample_free(&a);
        return rc;
    }
    term_enter(&t);
    term_size(&f);
    line(&f, "kvsctl top: job %s: the first figures come in %.1f s (q quits)", job,
         (double)o->interval_ns / 1e9);
    show(&f);
    next = kvs__now_ns() + o->interval_ns;
    while (!got_signal) {
        if (wait_key(&t, next) == 'q')
            break;
        if (got_winch && have_b) {
            got_winch = 0;
            term_size(&f);
            render(&f, job, &a, &b, o->interval_ns);
            show(&f);
        }
        if (got_signal || kvs__now_ns() < next)
            continue;
        next += o->interval_ns;
        if (next < kvs__now_ns())
            next = kvs__now_ns() + o->interval_ns;
        if (have_b) {
            sample_free(&a);
            a = b;
            have_b = 0;
        }
        if ((rc = take(job, &reply, &b, msg, sizeof msg)) != ASK_OK) {
            ended = rc == ASK_GONE;
            status = ended ? 0 : 1;
            break;
        }
        have_b = 1;
        term_size(&f);
        render(&f, job, &a, &b, o->interval_ns);
        if (show(&f) != 0) {
            snprintf(msg, sizeof msg, "cannot write the view: %s", strerror(errno));
            status = 1;
            break;
        }
    }
    term_leave(&t);
    free(f.buf);
    sample_free(&a);
    if (have_b)
        sample_free(&b);
    if (got_signal) {
        /* Ended as the signal would have ended it, the terminal put back. */
        signal(got_signal, SIG_DFL);
        raise(got_signal);
        return 128 + got_signal;
    }
    if (ended)
        printf("kvsctl top: job '%s' has ended: its kvsd is gone\n", job);
    else if (status)
        fprintf(stderr, "kvsctl: %s\n", msg);
    return status;
}
