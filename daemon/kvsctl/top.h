/*
 * top.h - kvsctl top (top.c): a live view of a job, made of kvsd's
 * samples one interval apart.
 */
#ifndef KVSCTL_TOP_H
#define KVSCTL_TOP_H

#include <stdint.h>

struct top_opts {
    int once;                          /* one frame, plain text, then exit */
    int64_t interval_ns;               /* between samples */
};

/* Runs `kvsctl top` on job: a frame every interval on the terminal until
 * q, SIGINT, SIGTERM or the job's end; with once, one frame on stdout.
 * Returns the exit status: 0; 1 when kvsd could not be asked or answered
 * badly; 2 when stdout is not a terminal (without once). */
int top_main(const char *job, const struct top_opts *o);

#endif
