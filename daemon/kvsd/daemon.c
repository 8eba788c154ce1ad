/*
 * daemon.c - what every module of kvsd may use beside the state model:
 * say(), and the flag that stops both threads.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>

#include "daemon.h"

volatile sig_atomic_t stop_signal;

void say(const struct daemon *d, const char *fmt, ...)
{
    va_list ap;

    if (d->o.quiet)
        return;
    fprintf(stderr, "kvsd[%s]: ", d->o.job);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
