/*
 * tcp.h - tcp.c's calls: TCP listeners and connections between the kvsd
 * of the hosts of a job, each within a deadline. They give blocking
 * sockets, on which the handshake (handshake.h) runs before kvsd keeps
 * anything for the peer; a transport's loop (loader.h) then adopts them.
 *
 * Part of net's face to kvsd (with loader.h, handshake.h and auth.h): it
 * never includes or calls anything of kvsd.
 */
#ifndef KVSD_TCP_H
#define KVSD_TCP_H

#include <stdint.h>

#include "base/error.h"

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

#endif
