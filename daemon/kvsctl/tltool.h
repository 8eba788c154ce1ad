/*
 * tltool.h - what kvsctl timeline's plot (tl_plot.c) and merge
 * (tl_merge.c) share (tltool.c): their limits, their usage, and files
 * written whole. Their entry points are in timeline.h.
 */
#ifndef KVSCTL_TLTOOL_H
#define KVSCTL_TLTOOL_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#define PID_LIMIT    INT32_MAX
#define ROUND_LIMIT  ((int64_t)1 << 53)   /* exact in a double */
#define OFFSET_LIMIT_US 1e15               /* a clock offset, or a time, beyond 30 years */

/* The usage text into f; a usage error's message on stderr, returning 2. */
void tl_usage(FILE *f);
int tl_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Makes *p hold at least need items of size bytes. 0, or -1. */
int tl_grow(void *p, size_t *cap, size_t need, size_t size);

/* A file written whole: under a temporary name beside path, renamed to it
 * by tl_out_commit (0, or 1 with the message written and the file given
 * up); tl_out_open: 0, or 1 with the message written; tl_out_drop gives
 * the temporary file up. */
struct tl_out {
    const char *path;
    char tmp[PATH_MAX];
    int fd;
    FILE *f;
};

int tl_out_open(struct tl_out *o, const char *path);
void tl_out_drop(struct tl_out *o);
int tl_out_commit(struct tl_out *o);

#endif
