/*
 * daemon.c - what every module of kvsd may use beside the state model:
 * say() and warn(), and the flag that stops both threads.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "daemon.h"

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "stop_signal is set by a signal handler");
atomic_int stop_signal;

static void vsay(const struct daemon *d, const char *fmt, va_list ap)
{
    fprintf(stderr, "kvsd[%s]: ", d->o.job);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void say(const struct daemon *d, const char *fmt, ...)
{
    va_list ap;

    if (d->o.quiet)
        return;
    va_start(ap, fmt);
    vsay(d, fmt, ap);
    va_end(ap);
}

void warn(const struct daemon *d, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsay(d, fmt, ap);
    va_end(ap);
}
