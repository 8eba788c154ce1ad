/*
 * transport.c - which transport a loop between hosts uses (transport.h):
 * io_uring where it is built and the kernel lets this process use it,
 * else sockets and epoll; KVS_TRANSPORT=uring|socket forces one.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

#ifdef HAVE_LIBURING
#define CHOICES "uring, socket"
#else
#define CHOICES "socket"
#endif

/* 0 when a loop of ops opens here; else its error in why. */
static int opens(const struct kvs__tp_ops *ops, char *why, size_t size)
{
    struct kvs__err e = { 0, "" };
    struct kvs__tp *t;

    if (ops->open(&t, &e) != 0) {
        snprintf(why, size, "%s", e.msg);
        return e.code;
    }
    ops->close(t);
    return 0;
}

int kvs__tp_find(const char *name, const struct kvs__tp_ops **out, char *note, size_t size,
                 struct kvs__err *e)
{
    static const struct kvs__tp_ops *const all[] = {
#ifdef HAVE_LIBURING
        &kvs__tp_uring,
#endif
        &kvs__tp_socket,
    };
    char why[KVS__ERR_MSG_MAX];

    if (note && size)
        note[0] = '\0';
    if (!name || !*name)
        name = getenv("KVS_TRANSPORT");
    if (name && *name) {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (strcmp(name, all[i]->name) == 0) {
                *out = all[i];
                return 0;
            }
        return kvs__fail(e, KVS_EBADARG, "KVS_TRANSPORT=%s: no such transport here (%s)",
                         name, CHOICES);
    }
    /* The default: the first that opens (container seccomp profiles refuse
     * io_uring_setup). */
    for (size_t i = 0; i + 1 < sizeof all / sizeof all[0]; i++) {
        if (opens(all[i], why, sizeof why) == 0) {
            *out = all[i];
            return 0;
        }
        if (note && size)
            snprintf(note, size, "%s refused (%s): using %s", all[i]->name, why,
                     all[i + 1]->name);
    }
    *out = all[sizeof all / sizeof all[0] - 1];
    return 0;
}
