/*
 * transport.h - the byte streams between the kvsd of the hosts of a job.
 *
 * Two layers. TCP itself (tcp.c): a listener bound to an address, and a
 * connect within a deadline; the handshake (handshake.h) runs on the
 * blocking socket these give, before kvsd keeps anything for the peer.
 * Then an ops table over connections that passed the handshake
 * (kvs-transport.h): a loop that owns them (adopt), queues sends, and
 * reports what happened (wait): bytes received, sends done, connections
 * closed. Implementations are chosen at run time (kvs__tp_find): "uring"
 * (io_uring through liburing, the default) and "socket" (non-blocking
 * sockets and epoll) are built in; others are plug-ins kvsd loads.
 *
 * A loop is used by one thread. Nothing it receives is trusted: it hands
 * bytes up, and the frame layer checks them. Every wait has a deadline.
 *
 * This is net's face to kvsd (with handshake.h and auth.h): the files of
 * daemon/net/ stand below kvsd and never include or call anything of it;
 * what they report goes up through the ops table's return values and
 * events, never by name.
 */
#ifndef KVSD_TRANSPORT_H
#define KVSD_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "kvs-transport.h"

/* ---- TCP (tcp.c) --------------------------------------------------------- */

/* A listening TCP socket on addr (a numeric IPv4 or IPv6 address; NULL:
 * 127.0.0.1) and *port (0: one the kernel picks, written back), with a
 * backlog of backlog pending connections. 0, or -errno / KVS_EBADARG
 * with a detail. */
int kvs__tcp_listen(const char *addr, uint16_t *port, int backlog, int *fd,
                    struct kvs__err *e);

/* Takes one pending connection of listener fd, waiting until deadline_ns:
 * a blocking socket (with TCP_NODELAY), in *out. -ETIMEDOUT when none
 * came. */
int kvs__tcp_accept(int fd, int64_t deadline_ns, int *out, struct kvs__err *e);

/* Connects to host (a numeric address or a name) and port within
 * deadline_ns, trying again while the peer refuses (it may not listen
 * yet): a blocking socket with TCP_NODELAY in *out. -ETIMEDOUT, or the
 * last error, with a detail naming host:port. */
int kvs__tcp_connect(const char *host, uint16_t port, int64_t deadline_ns, int *out,
                     struct kvs__err *e);

/* ---- the loop over connections --------------------------------------------- */

extern const struct kvs_transport_ops kvs__tp_socket;
#ifdef HAVE_LIBURING
extern const struct kvs_transport_ops kvs__tp_uring;
#endif

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
