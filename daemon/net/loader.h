/*
 * loader.h - the loader's calls: which transport kvsd's loop between
 * hosts uses, built in or loaded from a plug-in.
 *
 * A transport is an ops table over connections that passed the handshake
 * (kvs-transport.h, the interface every backend implements, built in or
 * not): a loop that owns them (adopt), queues sends, and reports what
 * happened (wait): bytes received, sends done, connections closed.
 * Implementations are chosen at run time (kvs__tp_find): "uring"
 * (io_uring through liburing, the default; tp_uring.h) and "socket"
 * (non-blocking sockets and epoll; tp_socket.h) are built in; others are
 * plug-ins kvsd loads. The backends stand below the loader: they include
 * kvs-transport.h and tp_util.h, never this header.
 *
 * A loop is used by one thread. Nothing it receives is trusted: it hands
 * bytes up, and the frame layer checks them. Every wait has a deadline.
 *
 * This is net's face to kvsd (with tcp.h, handshake.h and auth.h): the
 * files of daemon/net/ stand below kvsd and never include or call
 * anything of it; what they report goes up through the ops table's return
 * values and events, never by name.
 */
#ifndef KVSD_LOADER_H
#define KVSD_LOADER_H

#include <stddef.h>

#include "base/error.h"
#include "kvs-transport.h"

/* A transport kvsd found, and the plug-in it came from, if any. */
struct kvs__tp_choice {
    const struct kvs_transport_ops *ops;
    void *dl;                          /* dlopen's handle; NULL: built in */
    char path[512];                    /* the plug-in's file; "": built in */
};

/* The transport named name: "uring" or "socket" (built in), a plug-in's
 * bare name (kvs-transport-NAME.so in KVS_TRANSPORT_DIR, else kvs's
 * library directory) or a path to one. NULL: the one KVS_TRANSPORT names,
 * else the default: io_uring when this process may use it, else sockets,
 * and then note (size bytes, may be NULL) says why, to be logged once. A
 * plug-in is loaded, its table checked and a loop of it opened and
 * closed, so that what fails fails here: KVS_EBADARG naming the file and
 * why (not found, no entry, another version, a member missing, open
 * failed). kvs__tp_release unloads it. */
int kvs__tp_find(const char *name, struct kvs__tp_choice *out, char *note, size_t size,
                 struct kvs__err *e);
void kvs__tp_release(struct kvs__tp_choice *c);

#endif
