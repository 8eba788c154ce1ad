/*
 * loader.c - which transport a loop between hosts uses (loader.h):
 * io_uring where it is built and the kernel lets this process use it,
 * else sockets and epoll; KVS_TRANSPORT=uring|socket forces one, and any
 * other name loads a plug-in (kvs-transport.h), checked here before kvsd
 * joins the hosts, so that a bad one fails at once, naming the file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader.h"
#include "tp_socket.h"
#include "tp_uring.h"

#ifdef HAVE_LIBURING
#define CHOICES "uring, socket"
#else
#define CHOICES "socket"
#endif

#ifndef KVS__TRANSPORT_DIR
#define KVS__TRANSPORT_DIR "/usr/local/lib/kvs"
#endif

/* 0 when a loop of ops opens here; else its error in why. */
static int opens(const struct kvs_transport_ops *ops, struct kvs_transport_error *why)
{
    struct kvs_transport *t = NULL;
    int rc;

    *why = (struct kvs_transport_error){ 0, "" };
    if ((rc = ops->open(&t, why)) != 0) {
        if (!why->msg[0])
            snprintf(why->msg, sizeof why->msg, "open failed (%d)", rc);
        return rc;
    }
    ops->close(t);
    return 0;
}

/* Loads the plug-in at c->path (named name): 0, or KVS_EBADARG saying why. */
static int load(struct kvs__tp_choice *c, const char *name, struct kvs__err *e)
{
    const struct kvs_transport_ops *ops;
    struct kvs_transport_error why;
    kvs_transport_entry_fn *hello;
    const char *missing = NULL;
    char who[sizeof c->path + 64];

    /* Messages start with what was asked for, and the file when not that. */
    if (strcmp(name, c->path) == 0)
        snprintf(who, sizeof who, "KVS_TRANSPORT=%s", name);
    else
        snprintf(who, sizeof who, "KVS_TRANSPORT=%s (%s)", name, c->path);
    if (access(c->path, F_OK) != 0)
        return kvs__fail(e, KVS_EBADARG, "KVS_TRANSPORT=%s: no such transport (built in: %s; "
                         "no plug-in at %s)", name, CHOICES, c->path);
    dlerror();
    if (!(c->dl = dlopen(c->path, RTLD_NOW | RTLD_LOCAL)))
        return kvs__fail(e, KVS_EBADARG, "%s: cannot load it: %s", who, dlerror());
    *(void **)&hello = dlsym(c->dl, KVS_TRANSPORT_ENTRY);
    if (!hello)
        return kvs__fail(e, KVS_EBADARG, "%s: has no %s: not a kvs transport", who,
                         KVS_TRANSPORT_ENTRY);
    if (!(ops = hello()))
        return kvs__fail(e, KVS_EBADARG, "%s: gave no ops table", who);
    if (ops->version != KVS_TRANSPORT_VERSION)
        return kvs__fail(e, KVS_EBADARG, "%s: built for transport ops version %u; this kvsd "
                         "takes version %u (rebuild it against this kvs's kvs-transport.h)",
                         who, (unsigned)ops->version, KVS_TRANSPORT_VERSION);
    if (ops->size < sizeof *ops)
        missing = "its table is short";
    else if (!ops->name || !ops->name[0])
        missing = "name";
    else if (!ops->open || !ops->close || !ops->adopt || !ops->send || !ops->wait
             || !ops->drop || !ops->wake)
        missing = "a call (open, close, adopt, send, wait, drop and wake are required)";
    if (missing)
        return kvs__fail(e, KVS_EBADARG, "%s: the ops table lacks %s", who, missing);
    if (opens(ops, &why) != 0)
        return kvs__fail(e, KVS_EBADARG, "%s: the %s transport does not open here: %s", who,
                         ops->name, why.msg);
    c->ops = ops;
    return 0;
}

int kvs__tp_find(const char *name, struct kvs__tp_choice *out, char *note, size_t size,
                 struct kvs__err *e)
{
    static const struct kvs_transport_ops *const all[] = {
#ifdef HAVE_LIBURING
        &kvs__tp_uring,
#endif
        &kvs__tp_socket,
    };
    struct kvs_transport_error why;
    const char *dir;
    int rc;

    *out = (struct kvs__tp_choice){ 0 };
    if (note && size)
        note[0] = '\0';
    if (!name || !*name)
        name = getenv("KVS_TRANSPORT");
    if (name && *name) {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            if (strcmp(name, all[i]->name) == 0) {
                out->ops = all[i];
                return 0;
            }
        dir = getenv("KVS_TRANSPORT_DIR");
        if (!dir || !*dir)
            dir = KVS__TRANSPORT_DIR;
        if (strchr(name, '/'))
            rc = snprintf(out->path, sizeof out->path, "%s", name);
        else if (strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") == strlen(name))
            rc = snprintf(out->path, sizeof out->path, "%s/kvs-transport-%s.so", dir, name);
        else
            return kvs__fail(e, KVS_EBADARG, "KVS_TRANSPORT=%s: not a transport's name "
                             "(built in: %s; a plug-in's name, or a path)", name, CHOICES);
        if (rc < 0 || (size_t)rc >= sizeof out->path)
            return kvs__fail(e, KVS_EBADARG, "KVS_TRANSPORT=%s: the path is too long", name);
        if ((rc = load(out, name, e)) != 0)
            kvs__tp_release(out);
        return rc;
    }
    /* The default: the first that opens (container seccomp profiles refuse
     * io_uring_setup). */
    for (size_t i = 0; i + 1 < sizeof all / sizeof all[0]; i++) {
        if (opens(all[i], &why) == 0) {
            out->ops = all[i];
            return 0;
        }
        if (note && size)
            snprintf(note, size, "%s refused (%s): using %s", all[i]->name, why.msg,
                     all[i + 1]->name);
    }
    out->ops = all[sizeof all / sizeof all[0] - 1];
    return 0;
}

void kvs__tp_release(struct kvs__tp_choice *c)
{
    if (c->dl)
        dlclose(c->dl);
    *c = (struct kvs__tp_choice){ 0 };
}
