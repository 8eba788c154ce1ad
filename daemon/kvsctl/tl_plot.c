/*
 * tl_plot.c - kvsctl timeline plot: each rank's wait for the other
 * workers, per round, from the trace file a job writes with
 * KVS_TIMELINE=FILE, which tlread.c reads.
 *
 * plot takes each rank's "waiting for others" events (cat "kvsd" or
 * "combine": the time the rank waited for the other workers of its host
 * in round args.round of key args.key) and, across hosts, its "across
 * hosts" events (cat "kvsd": the round's sum has gone to the key's owner
 * and the value is not back, so the rank waits for the other hosts'
 * workers), and gives, per rank and round number, the length of their
 * union: several keys wait at once, and a sum would count that time
 * twice. The rank that waited least is the one the others waited for:
 * without the waits across hosts, a host's ranks that wait only for
 * another host would look like stragglers. The table goes to a TSV file
 * and the plot to a PNG that gnuplot draws from a script on its standard
 * input; the PNG comes back
 * on its standard output, so no file name of the user's is ever part of
 * a script, and no shell is run.
 *
 * Every file written appears whole or not at all (tltool.c's tl_out).
 * Nothing here asks a kvsd, and nothing here calls merge (tl_merge.c) or
 * the dispatcher (kvsctl.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "timeline.h"
#include "tlread.h"
#include "tltool.h"

#define WAIT_NAME    "waiting for others"
#define HOSTS_NAME   "across hosts"
#define RANK_DIGITS  7                     /* "rank 9999999" */
#define CELLS_MAX    ((size_t)1 << 27)     /* rounds x ranks: 1 GiB of doubles */
#define GNUPLOT_S    60                    /* for gnuplot to draw the plot */
#define PNG_WIDTH    1200
#define PNG_HEIGHT   600
#define TITLE_MAX    80                    /* bytes of the file name in the title */
#define PNG_SIGNATURE "\x89PNG\r\n\x1a\n"

extern char **environ;

/* ---- plot: the waits ----------------------------------------------------------- */

struct wait {
    int64_t who;                       /* a pid as read, a rank once named */
    int64_t round;
    double t0, t1;                     /* us */
};

struct name {
    int64_t pid, rank;
    size_t seq;                        /* the first of two names of a pid wins */
};

struct waits {
    struct wait *w;
    size_t n, cap;
    struct name *names;
    size_t nnames, names_cap;
    size_t events, skipped, unnamed;
};

struct table {
    int64_t *ranks, *rounds;
    size_t nranks, nrounds;
    double *ms;                        /* [round][rank]: the wait in ms */
    double *median, *total;            /* [rank] */
};

/* "rank R": 0 and *rank, else -1. */
static int rank_of(const struct tl_val *v, int64_t *rank)
{
    int64_t r = 0;

    if (!v || v->type != TL_STR || v->len < 6 || v->len > 5 + RANK_DIGITS
        || memcmp(v->s, "rank ", 5) != 0)
        return -1;
    for (size_t i = 5; i < v->len; i++) {
        if (v->s[i] < '0' || v->s[i] > '9')
            return -1;
        r = r * 10 + (v->s[i] - '0');
    }
    *rank = r;
    return 0;
}

/* One event: a rank's name, a wait, or nothing to plot. 0, or -1 when
 * out of memory. */
static int take_event(struct waits *ws, const struct tl_val *ev)
{
    const struct tl_val *ph = tl_get(ev, "ph"), *name = tl_get(ev, "name");
    const struct tl_val *args = tl_get(ev, "args"), *cat = tl_get(ev, "cat");
    int64_t pid, rank, round;
    double ts, dur;

    ws->events++;
    if (tl_is(ph, "M") && tl_is(name, "process_name")) {
        if (rank_of(tl_get(args, "name"), &rank) != 0)
            return 0;                  /* kvsd, or another process */
        if (tl_int(tl_get(ev, "pid"), 0, PID_LIMIT, &pid) != 0) {
            ws->skipped++;
            return 0;
        }
        if (tl_grow(&ws->names, &ws->names_cap, ws->nnames + 1, sizeof *ws->names) != 0)
            return -1;
        ws->names[ws->nnames] = (struct name){ pid, rank, ws->nnames };
        ws->nnames++;
        return 0;
    }
    if (!tl_is(ph, "X")
        || !((tl_is(name, WAIT_NAME) && (tl_is(cat, "kvsd") || tl_is(cat, "combine")))
             || (tl_is(name, HOSTS_NAME) && tl_is(cat, "kvsd"))))
        return 0;
    if (tl_int(tl_get(ev, "pid"), 0, PID_LIMIT, &pid) != 0
        || tl_num(tl_get(ev, "ts"), &ts) != 0
        || tl_num(tl_get(ev, "dur"), &dur) != 0 || dur < 0 || !isfinite(ts + dur)
        || tl_int(tl_get(args, "round"), 0, ROUND_LIMIT, &round) != 0) {
        ws->skipped++;
        return 0;
    }
    if (tl_grow(&ws->w, &ws->cap, ws->n + 1, sizeof *ws->w) != 0)
        return -1;
    ws->w[ws->n++] = (struct wait){ pid, round, ts, ts + dur };
    return 0;
}

/* 0, or 1 with the message written. */
static int read_waits(const char *path, struct waits *ws)
{
    struct tl_file t;
    struct tl_val *ev;
    int rc;

    if (tl_open(&t, path) != 0)
        goto bad;
    while ((rc = tl_next(&t, &ev, NULL, NULL)) > 0)
        if (take_event(ws, ev) != 0) {
            snprintf(t.err, sizeof t.err, "out of memory");
            goto bad;
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

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static int cmp_name(const void *a, const void *b)
{
    const struct name *x = a, *y = b;

    if (x->pid != y->pid)
        return (x->pid > y->pid) - (x->pid < y->pid);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static int cmp_wait(const void *a, const void *b)
{
    const struct wait *x = a, *y = b;

    if (x->who != y->who)
        return (x->who > y->who) - (x->who < y->who);
    if (x->round != y->round)
        return (x->round > y->round) - (x->round < y->round);
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Sorts v[0..*n) and leaves each value once. */
static void sort_unique(int64_t *v, size_t *n)
{
    size_t k = 0;

    qsort(v, *n, sizeof *v, cmp_i64);
    for (size_t i = 0; i < *n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    *n = k;
}

static size_t index_of(const int64_t *v, size_t n, int64_t x)
{
    const int64_t *p = bsearch(&x, v, n, sizeof *v, cmp_i64);

    return (size_t)(p - v);            /* x is one of v: the callers built v from them */
}

static const struct name *name_of(const struct name *names, size_t n, int64_t pid)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (names[mid].pid < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && names[lo].pid == pid ? &names[lo] : NULL;
}

/* The table from the waits: ranks, rounds, and each cell the length of
 * the union of the rank's intervals of the round. 0, or 1 with the
 * message written. */
static int build_table(const char *path, struct waits *ws, struct table *tab)
{
    size_t k = 0, cells;

    /* A pid named twice keeps its first name. */
    qsort(ws->names, ws->nnames, sizeof *ws->names, cmp_name);
    for (size_t i = 0; i < ws->nnames; i++)
        if (k == 0 || ws->names[k - 1].pid != ws->names[i].pid)
            ws->names[k++] = ws->names[i];
    ws->nnames = k;
    if (ws->nnames == 0) {
        fprintf(stderr, "kvsctl timeline: %s: no process is named \"rank R\": no worker's "
                "waits to plot\n", path);
        return 1;
    }
    if (!(tab->ranks = malloc(ws->nnames * sizeof *tab->ranks)))
        goto oom;
    for (size_t i = 0; i < ws->nnames; i++)
        tab->ranks[i] = ws->names[i].rank;
    tab->nranks = ws->nnames;
    sort_unique(tab->ranks, &tab->nranks);

    k = 0;
    for (size_t i = 0; i < ws->n; i++) {
        const struct name *nm = name_of(ws->names, ws->nnames, ws->w[i].who);

        if (!nm) {
            ws->unnamed++;
            continue;
        }
        ws->w[k] = ws->w[i];
        ws->w[k++].who = nm->rank;
    }
    ws->n = k;
    if (ws->n == 0) {
        fprintf(stderr, "kvsctl timeline: %s: no rank has a \"%s\" or \"%s\" event: nothing "
                "to plot\n", path, WAIT_NAME, HOSTS_NAME);
        return 1;
    }
    if (!(tab->rounds = malloc(ws->n * sizeof *tab->rounds)))
        goto oom;
    for (size_t i = 0; i < ws->n; i++)
        tab->rounds[i] = ws->w[i].round;
    tab->nrounds = ws->n;
    sort_unique(tab->rounds, &tab->nrounds);
    if (__builtin_mul_overflow(tab->nrounds, tab->nranks, &cells) || cells > CELLS_MAX) {
        fprintf(stderr, "kvsctl timeline: %s: %zu rounds of %zu ranks are too many to "
                "tabulate\n", path, tab->nrounds, tab->nranks);
        return 1;
    }
    if (!(tab->ms = calloc(cells, sizeof *tab->ms)))
        goto oom;

    qsort(ws->w, ws->n, sizeof *ws->w, cmp_wait);
    for (size_t i = 0; i < ws->n;) {
        const struct wait *w = ws->w;
        double from = w[i].t0, to = w[i].t1, us = 0;
        size_t j = i + 1;

        for (; j < ws->n && w[j].who == w[i].who && w[j].round == w[i].round; j++) {
            if (w[j].t0 > to) {
                us += to - from;
                from = w[j].t0;
                to = w[j].t1;
            } else if (w[j].t1 > to) {
                to = w[j].t1;
            }
        }
        us += to - from;
        tab->ms[index_of(tab->rounds, tab->nrounds, w[i].round) * tab->nranks
                + index_of(tab->ranks, tab->nranks, w[i].who)] = us / 1000;
        i = j;
    }
    return 0;
oom:
    fprintf(stderr, "kvsctl timeline: out of memory\n");
    return 1;
}

/* Each rank's median and total wait over every round (a round it did
 * not wait in counts 0). 0, or -1 when out of memory. */
static int rank_stats(struct table *tab)
{
    double *col = malloc(tab->nrounds * sizeof *col);

    tab->median = calloc(tab->nranks, sizeof *tab->median);
    tab->total = calloc(tab->nranks, sizeof *tab->total);
    if (!col || !tab->median || !tab->total) {
        free(col);
        return -1;
    }
    for (size_t r = 0; r < tab->nranks; r++) {
        size_t n = tab->nrounds;

        for (size_t i = 0; i < n; i++) {
            col[i] = tab->ms[i * tab->nranks + r];
            tab->total[r] += col[i];
        }
        qsort(col, n, sizeof *col, cmp_double);
        tab->median[r] = n % 2 ? col[n / 2] : (col[n / 2 - 1] + col[n / 2]) / 2;
    }
    free(col);
    return 0;
}

/* The ranks as "rank 1", "ranks 1 and 3", "ranks 1, 3 and 4". */
static void print_ranks(const struct table *tab, const int *pick)
{
    size_t n = 0, k = 0;

    for (size_t r = 0; r < tab->nranks; r++)
        n += pick[r] != 0;
    printf("rank%s", n > 1 ? "s" : "");
    for (size_t r = 0; r < tab->nranks; r++) {
        if (!pick[r])
            continue;
        k++;
        printf("%s%" PRId64, k == 1 ? " " : k == n ? " and " : ", ", tab->ranks[r]);
    }
}

/* Which rank waited least, in words: the others waited for it. Totals
 * equal to the printed microsecond count as equal. */
static void print_straggler(const struct table *tab, int *pick)
{
    double least = INFINITY, lo = INFINITY, hi = -INFINITY;
    size_t n = 0, others;

    if (tab->nranks < 2) {
        printf("one rank only (rank %" PRId64 "): no other to compare it with.\n",
               tab->ranks[0]);
        return;
    }
    for (size_t r = 0; r < tab->nranks; r++)
        least = fmin(least, tab->total[r]);
    for (size_t r = 0; r < tab->nranks; r++) {
        pick[r] = tab->total[r] - least < 0.0005;
        n += pick[r] != 0;
        if (!pick[r]) {
            lo = fmin(lo, tab->total[r]);
            hi = fmax(hi, tab->total[r]);
        }
    }
    if (n == tab->nranks) {
        printf("every rank waited as long, %.3f ms in all: no straggler stands out.\n",
               least);
        return;
    }
    others = tab->nranks - n;
    print_ranks(tab, pick);
    printf(" waited least, %.3f ms%s in all, against ", least, n > 1 ? " each" : "");
    if (hi - lo < 0.0005)
        printf("%.3f ms", lo);
    else
        printf("%.3f to %.3f ms", lo, hi);
    printf(" for the other%s: the other%s waiting for %s, so %s the likely straggler%s.\n",
           others > 1 ? "s" : "", others > 1 ? "s were" : " was", n > 1 ? "them" : "it",
           n > 1 ? "they are" : "it is", n > 1 ? "s" : "");
}

static void print_summary(const char *path, const struct waits *ws, const struct table *tab,
                          int *pick)
{
    printf("%s: %zu rank%s, %zu round%s (%" PRId64 " to %" PRId64 "), %zu wait%s\n", path,
           tab->nranks, tab->nranks == 1 ? "" : "s", tab->nrounds,
           tab->nrounds == 1 ? "" : "s", tab->rounds[0], tab->rounds[tab->nrounds - 1], ws->n,
           ws->n == 1 ? "" : "s");
    printf("%7s %12s %12s\n", "RANK", "MEDIAN_MS", "TOTAL_MS");
    for (size_t r = 0; r < tab->nranks; r++)
        printf("%7" PRId64 " %12.3f %12.3f\n", tab->ranks[r], tab->median[r], tab->total[r]);
    print_straggler(tab, pick);
}

/* The table as text: a head line, then a line a round. sep: '\t' for
 * the TSV, ' ' for gnuplot (whose head quotes each rank's title). */
static void write_table(FILE *f, const struct table *tab, char sep)
{
    fprintf(f, sep == '\t' ? "round" : "\"round\"");
    for (size_t r = 0; r < tab->nranks; r++)
        fprintf(f, sep == '\t' ? "\trank %" PRId64 : " \"rank %" PRId64 "\"", tab->ranks[r]);
    putc('\n', f);
    for (size_t i = 0; i < tab->nrounds; i++) {
        fprintf(f, "%" PRId64, tab->rounds[i]);
        for (size_t r = 0; r < tab->nranks; r++)
            fprintf(f, "%c%.3f", sep, tab->ms[i * tab->nranks + r]);
        putc('\n', f);
    }
}

static int write_tsv(const char *path, const struct table *tab)
{
    struct tl_out o;

    if (tl_out_open(&o, path) != 0)
        return 1;
    if (!(o.f = fdopen(o.fd, "w"))) {
        fprintf(stderr, "kvsctl timeline: cannot write %s: %s\n", path, strerror(errno));
        tl_out_drop(&o);
        return 1;
    }
    write_table(o.f, tab, '\t');
    return tl_out_commit(&o);
}

/* ---- plot: gnuplot ----------------------------------------------------------- */

/* The file's name for the plot's title, inside gnuplot's single quotes,
 * where only a quote is special (written twice); bytes that are not
 * printable ASCII become '?'. The title is drawn without enhanced text,
 * so nothing in it is markup either. */
static void title_name(FILE *f, const char *path)
{
    const char *base = strrchr(path, '/');
    size_t n = 0;

    base = base && base[1] ? base + 1 : path;
    for (const unsigned char *p = (const unsigned char *)base; *p && n < TITLE_MAX; p++, n++) {
        if (*p == '\'')
            fputs("''", f);
        else
            putc(*p >= 0x20 && *p < 0x7f ? *p : '?', f);
    }
    if (strlen(base) > TITLE_MAX)
        fputs("...", f);
}

/* The whole script, data inline. NULL when out of memory. */
static char *gnuplot_script(const char *path, const struct table *tab, size_t *len)
{
    char *s = NULL;
    FILE *f = open_memstream(&s, len);

    if (!f)
        return NULL;
    /* Whatever the user's ~/.gnuplot set is undone, and the PNG goes to
     * standard output. */
    fprintf(f,
            "reset\n"
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "    set terminal pngcairo size %d,%d noenhanced\n"
            "} else {\n"
            "    set terminal png size %d,%d noenhanced\n"
            "}\n"
            "set output\n",
            PNG_WIDTH, PNG_HEIGHT, PNG_WIDTH, PNG_HEIGHT);
    fputs("set title 'Wait for the other workers in each round: ", f);
    title_name(f, path);
    fputs("'\n"
          "set xlabel 'round'\n"
          "set ylabel 'wait (ms)'\n"
          "set yrange [0:*]\n"
          "set grid\n"
          "set key outside right top\n"
          "set key autotitle columnheader\n"
          "set autoscale xfix\n"
          "set offsets graph 0.02, graph 0.02, graph 0.05, 0\n", f);
    /* Rounds are whole numbers: no tics between them. One round alone
     * gets a range around it. */
    if (tab->nrounds == 1)
        fprintf(f, "set xrange [%" PRId64 ":%" PRId64 "]\n", tab->rounds[0] - 1,
                tab->rounds[0] + 1);
    if (tab->rounds[tab->nrounds - 1] - tab->rounds[0] <= 20)
        fputs("set xtics 1\n", f);
    else
        fputs("set format x '%.0f'\n", f);
    fputs("$waits << EOD\n", f);
    write_table(f, tab, ' ');
    fprintf(f, "EOD\n"
            "plot for [i=2:%zu] $waits using 1:i with %s lw 2\n",
            tab->nranks + 1, tab->nrounds > 100 ? "lines" : "linespoints");
    if (fclose(f) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Feeds gnuplot the script on its stdin (in) while its stdout (from,
 * the PNG) goes into fd, until it closes its stdout, by the deadline.
 * Closes in and from. 0, 1 (a write to fd failed: errno), or -1 (the
 * deadline passed). */
static int gnuplot_talk(int in, int from, const char *script, size_t len, int fd,
                        int64_t deadline)
{
    size_t off = 0;
    char buf[65536];

    while (from >= 0) {
        struct pollfd p[2] = { { from, POLLIN, 0 }, { in, POLLOUT, 0 } };
        int64_t left = deadline - now_ms();
        ssize_t n;

        if (left <= 0)
            break;
        if (poll(p, in >= 0 ? 2 : 1, (int)left) < 0)
            continue;                  /* EINTR: the deadline is looked at again */
        if (p[0].revents) {
            n = read(from, buf, sizeof buf);
            if (n > 0 && write_all(fd, buf, (size_t)n) != 0)
                goto failed;
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                close(from);
                from = -1;
            }
        }
        if (in >= 0 && p[1].revents) {
            /* gnuplot gone, or stopped reading after an error of its own:
             * its status says which. */
            int gone = !(p[1].revents & POLLOUT);

            if (!gone && (n = write(in, script + off, len - off)) > 0)
                off += (size_t)n;
            else if (!gone && errno != EINTR && errno != EAGAIN)
                gone = 1;
            if (off == len || gone) {
                close(in);
                in = -1;
            }
        }
    }
    if (in >= 0)
        close(in);
    if (from < 0)
        return 0;
    close(from);
    return -1;
failed:
    if (in >= 0)
        close(in);
    close(from);
    return 1;
}

/* Waits for gnuplot until the deadline, then kills it. Its status, or -1
 * when it had to be killed. */
static int gnuplot_reap(pid_t pid, int64_t deadline)
{
    int status;

    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);

        if (r == pid)
            return status;
        if (r < 0 && errno != EINTR)
            return -1;
        if (now_ms() >= deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            return -1;
        }
        poll(NULL, 0, 10);
    }
}

/* Draws the table into out with gnuplot. 0, or 1 with the message
 * written. */
static int plot(const char *path, const struct table *tab, const char *out)
{
    static char arg0[] = "gnuplot";
    char *argv[] = { arg0, NULL }, *script, sig[8];
    posix_spawn_file_actions_t fa;
    int in[2] = { -1, -1 }, from[2] = { -1, -1 }, err, talk, status;
    int64_t deadline = now_ms() + GNUPLOT_S * 1000;
    struct tl_out o;
    size_t len;
    pid_t pid;

    if (!(script = gnuplot_script(path, tab, &len))) {
        fprintf(stderr, "kvsctl timeline: out of memory\n");
        return 1;
    }
    if (tl_out_open(&o, out) != 0) {
        free(script);
        return 1;
    }
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
        fprintf(stderr, "kvsctl timeline: cannot make a pipe: %s\n", strerror(errno));
        goto fail;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    fflush(stdout);
    err = posix_spawnp(&pid, arg0, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(from[1]);
    in[0] = from[1] = -1;
    if (err == ENOENT) {
        fprintf(stderr, "kvsctl timeline: gnuplot is not installed (not found in PATH); it "
                "draws the plot: install it (Debian: apt-get install gnuplot-nox), or use "
                "--no-plot\n");
        goto fail;
    }
    if (err != 0) {
        fprintf(stderr, "kvsctl timeline: cannot run gnuplot: %s\n", strerror(err));
        goto fail;
    }
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    talk = gnuplot_talk(in[1], from[0], script, len, o.fd, deadline);
    in[1] = from[0] = -1;
    status = gnuplot_reap(pid, deadline);
    if (talk == 1) {
        fprintf(stderr, "kvsctl timeline: cannot write %s: %s\n", out, strerror(errno));
        goto fail;
    }
    if (talk < 0 || status < 0) {
        fprintf(stderr, "kvsctl timeline: gnuplot did not finish within %d s\n", GNUPLOT_S);
        goto fail;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "kvsctl timeline: gnuplot failed (%s %d); its messages are above\n",
                WIFEXITED(status) ? "exit status" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        goto fail;
    }
    if (pread(o.fd, sig, sizeof sig, 0) != (ssize_t)sizeof sig
        || memcmp(sig, PNG_SIGNATURE, sizeof sig) != 0) {
        fprintf(stderr, "kvsctl timeline: gnuplot wrote no PNG (does it have the png or "
                "pngcairo terminal?)\n");
        goto fail;
    }
    free(script);
    return tl_out_commit(&o);
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (from[i] >= 0)
            close(from[i]);
    }
    tl_out_drop(&o);
    free(script);
    return 1;
}

/* FILE.json -> FILE-wait.png, else FILE-wait.png. NULL when out of memory. */
static char *default_png(const char *path)
{
    size_t n = strlen(path);
    char *s;

    if (n > 5 && strcmp(path + n - 5, ".json") == 0)
        n -= 5;
    if (!(s = malloc(n + sizeof "-wait.png")))
        return NULL;
    memcpy(s, path, n);
    memcpy(s + n, "-wait.png", sizeof "-wait.png");
    return s;
}

int tl_plot_main(int argc, char **argv)
{
    enum { O_DATA = 256, O_NO_PLOT };
    static const struct option longs[] = {
        { "output", required_argument, NULL, 'o' },
        { "data", required_argument, NULL, O_DATA },
        { "no-plot", no_argument, NULL, O_NO_PLOT },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *path, *png = NULL, *data = NULL;
    struct waits ws = { 0 };
    struct table tab = { 0 };
    char *png_own = NULL;
    int c, no_plot = 0, *pick = NULL, rc = 1;

    optind = 0;                        /* a fresh scan of plot's own arguments */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'o':
            png = optarg;
            break;
        case O_DATA:
            data = optarg;
            break;
        case O_NO_PLOT:
            no_plot = 1;
            break;
        case 'h':
            tl_usage(stdout);
            return 0;
        case ':':
            return tl_usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return tl_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return tl_usage_error("plot: no FILE (a timeline, from KVS_TIMELINE=FILE)");
    if (optind + 1 < argc)
        return tl_usage_error("plot: one FILE at a time; '%s' is one too many "
                           "('kvsctl timeline merge' joins the parts of hosts)",
                           argv[optind + 1]);
    if (png && no_plot)
        return tl_usage_error("plot: -o and --no-plot: one or the other");
    path = argv[optind];
    if (!no_plot && !png && !(png = png_own = default_png(path))) {
        fprintf(stderr, "kvsctl timeline: out of memory\n");
        return 1;
    }

    if (read_waits(path, &ws) != 0 || build_table(path, &ws, &tab) != 0)
        goto out;
    if (rank_stats(&tab) != 0 || !(pick = calloc(tab.nranks, sizeof *pick))) {
        fprintf(stderr, "kvsctl timeline: out of memory\n");
        goto out;
    }
    if (ws.skipped)
        fprintf(stderr, "kvsctl timeline: %s: %zu event%s skipped: a bad or missing pid, ts, "
                "dur or args.round\n", path, ws.skipped, ws.skipped == 1 ? "" : "s");
    if (ws.unnamed)
        fprintf(stderr, "kvsctl timeline: %s: %zu wait%s skipped: of a process not named "
                "\"rank R\"\n", path, ws.unnamed, ws.unnamed == 1 ? "" : "s");
    if (data && write_tsv(data, &tab) != 0)
        goto out;
    print_summary(path, &ws, &tab, pick);
    if (data)
        printf("table: %s\n", data);
    if (png) {
        if (plot(path, &tab, png) != 0)
            goto out;
        printf("plot: %s\n", png);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kvsctl timeline: cannot write: %s\n", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    free(pick);
    free(tab.ranks);
    free(tab.rounds);
    free(tab.ms);
    free(tab.median);
    free(tab.total);
    free(ws.w);
    free(ws.names);
    free(png_own);
    return rc;
}
