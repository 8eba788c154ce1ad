/*
 * transport.h - the byte streams between the kvsd of the hosts of a job.
 *
 * Two layers. TCP itself (tcp.c): a listener bound to an address, and a
 * connect within a deadline; the handshake (handshake.h) runs on the
 * blocking socket these give, before kvsd keeps anything for the peer.
 * Then an ops table over connections that passed the handshake: a loop
 * that owns them (adopt), queues sends, and reports what happened (wait):
 * bytes received, sends done, connections closed. Implementations are
 * chosen at run time (kvs__tp_find): "uring" (io_uring through liburing,
 * the default) and "socket" (non-blocking sockets and epoll).
 *
 * A loop is used by one thread. Nothing it receives is trusted: it hands
 * bytes up, and the frame layer checks them. Every wait has a deadline.
 * Not used by kvsd yet: jobs across hosts are being built on it.
 */
#ifndef KVSD_TRANSPORT_H
#define KVSD_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

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

struct kvs__tp;                        /* one loop and its connections */

enum kvs__tp_event_type {
    KVS__TP_RECV = 1,                  /* bytes came: data, len */
    KVS__TP_SENT = 2,                  /* a send is done: token; its buffer is the
                                        * caller's again */
    KVS__TP_CLOSED = 3,                /* the connection ended: status 0 (the peer
                                        * closed) or -errno; its sends never complete.
                                        * It stays the caller's until dropped */
};

struct kvs__tp_event {
    int type;                          /* enum kvs__tp_event_type */
    int conn;                          /* the connection's id */
    int status;                        /* CLOSED */
    const void *data;                  /* RECV: valid until the next wait */
    size_t len;
    uint64_t token;                    /* SENT */
};

struct kvs__tp_ops {
    const char *name;
    /* A loop with no connection. */
    int (*open)(struct kvs__tp **out, struct kvs__err *e);
    /* Drops every connection and frees the loop. */
    void (*close)(struct kvs__tp *t);
    /* Takes a connected stream socket (any mode): the loop owns it from
     * here on, as connection *conn (a small number, reused after drop). */
    int (*adopt)(struct kvs__tp *t, int fd, int *conn, struct kvs__err *e);
    /* Queues len bytes (> 0) of buf on conn, after what was queued before:
     * buf stays the caller's to keep intact until KVS__TP_SENT comes with
     * token. -ENOTCONN on a connection that closed; KVS_EBADARG on an
     * unknown one. */
    int (*send)(struct kvs__tp *t, int conn, const void *buf, size_t len, uint64_t token,
                struct kvs__err *e);
    /* Moves what it can and reports up to max (> 0) events in ev, waiting
     * until one comes or deadline_ns passes (0: do not wait). Returns the
     * number of events, 0 at the deadline, or -errno. */
    int (*wait)(struct kvs__tp *t, struct kvs__tp_event *ev, int max, int64_t deadline_ns,
                struct kvs__err *e);
    /* Closes conn and forgets it: no event of it comes any more. */
    void (*drop)(struct kvs__tp *t, int conn);
};

extern const struct kvs__tp_ops kvs__tp_socket;
#ifdef HAVE_LIBURING
extern const struct kvs__tp_ops kvs__tp_uring;
#endif

/* The transport named name ("uring", "socket"); NULL: the one
 * KVS_TRANSPORT names, else the default: io_uring when this process may
 * use it, else sockets, and then note (size bytes, may be NULL) says why,
 * to be logged once. KVS_EBADARG naming the choices for an unknown name. */
int kvs__tp_find(const char *name, const struct kvs__tp_ops **out, char *note, size_t size,
                 struct kvs__err *e);

#endif
