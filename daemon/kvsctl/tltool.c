/*
 * tltool.c - what kvsctl timeline's plot (tl_plot.c) and merge
 * (tl_merge.c) share (tltool.h): their usage text and usage errors,
 * growing an array, and files written whole: under a temporary name
 * beside the file, renamed to it once complete. It knows neither tool,
 * and calls neither.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tltool.h"

void tl_usage(FILE *f)
{
    fprintf(f,
            "usage: kvsctl timeline plot FILE [-o OUT.png] [--data OUT.tsv] [--no-plot]\n"
            "       kvsctl timeline merge OUT FILE...\n"
            "Reads the timeline a job writes with KVS_TIMELINE=FILE (Chrome trace-event\n"
            "JSON, format \"kvs timeline 1\"); asks no kvsd.\n"
            "  plot   each rank's wait for the other workers in each round: the union of\n"
            "         its 'waiting for others' and 'across hosts' intervals of that round,\n"
            "         in ms. Prints each rank's median and total wait and names the rank\n"
            "         that waited least, the likely straggler; draws the waits with gnuplot\n"
            "         (x: round, y: ms, a line a rank) into a PNG, by default FILE without\n"
            "         .json, -wait.png.\n"
            "    -o, --output OUT.png  the PNG's name\n"
            "        --data OUT.tsv    the table too: a round a line, then a column a rank\n"
            "        --no-plot         the summary (and --data) only; no gnuplot needed\n"
            "  merge  joins the parts of one job's timeline that the kvsd of each host\n"
            "         wrote (host 0: FILE, host H: FILE.hostH) into OUT, of the same\n"
            "         format, on host 0's clock: every event, each host's times moved by\n"
            "         its clock offset; dropped_events summed, clock_offsets joined,\n"
            "         hosts the most of the parts', host -1.\n"
            "Exit status: 0 on success; 1 when a file cannot be read or written, is not a\n"
            "kvs timeline or is malformed, or gnuplot is missing or fails; 2 on a usage\n"
            "error.\n");
}

__attribute__((format(printf, 1, 2)))
int tl_usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "kvsctl timeline: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'kvsctl timeline --help'.\n");
    return 2;
}

/* Makes *p hold at least need items of size bytes. 0, or -1. */
int tl_grow(void *p, size_t *cap, size_t need, size_t size)
{
    size_t c = *cap ? *cap : 64, bytes;
    void *q;

    if (need <= *cap)
        return 0;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return -1;
        c *= 2;
    }
    if (__builtin_mul_overflow(c, size, &bytes) || !(q = realloc(*(void **)p, bytes)))
        return -1;
    *(void **)p = q;
    *cap = c;
    return 0;
}

/* ---- files written whole ---------------------------------------------------- */

/* A temporary file beside path, to be renamed to it. 0, or 1 with the
 * message written. */
int tl_out_open(struct tl_out *o, const char *path)
{
    int n = snprintf(o->tmp, sizeof o->tmp, "%s.XXXXXX", path);

    o->path = path;
    o->f = NULL;
    if (n < 0 || (size_t)n >= sizeof o->tmp) {
        o->fd = -1;
        fprintf(stderr, "kvsctl timeline: %s: the name is too long\n", path);
        return 1;
    }
    if ((o->fd = mkostemp(o->tmp, O_CLOEXEC)) < 0) {
        fprintf(stderr, "kvsctl timeline: cannot create %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* Gives up the temporary file. */
void tl_out_drop(struct tl_out *o)
{
    if (o->f)
        fclose(o->f);
    else if (o->fd >= 0)
        close(o->fd);
    if (o->fd >= 0)
        unlink(o->tmp);
    o->f = NULL;
    o->fd = -1;
}

/* Closes the temporary file and renames it to its name, with the mode a
 * new file gets (mkstemp's is 0600). 0, or 1 with the message written
 * and the file given up. */
int tl_out_commit(struct tl_out *o)
{
    mode_t mask = umask(0);
    int rc = 0;

    umask(mask);
    if (o->f && (fflush(o->f) != 0 || ferror(o->f)))
        rc = -1;
    if (rc == 0 && fchmod(o->fd, 0666 & ~mask) != 0)
        rc = -1;
    if (o->f) {
        if (fclose(o->f) != 0)
            rc = -1;
    } else if (close(o->fd) != 0) {
        rc = -1;
    }
    o->f = NULL;
    if (rc == 0 && rename(o->tmp, o->path) != 0)
        rc = -1;
    if (rc != 0) {
        fprintf(stderr, "kvsctl timeline: cannot write %s: %s\n", o->path, strerror(errno));
        unlink(o->tmp);
    }
    o->fd = -1;
    return rc == 0 ? 0 : 1;
}
