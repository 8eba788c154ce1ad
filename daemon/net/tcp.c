/*
 * tcp.c - TCP listeners and connections between the kvsd of the hosts of
 * a job (tcp.h): a listener bound to a numeric address, an accept
 * and a connect within a deadline. What they return are blocking sockets
 * for the handshake; the loop (tp_socket.c) makes its own non-blocking.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm/ring.h"
#include "base/sys.h"
#include "tcp.h"

/* Milliseconds from now until deadline_ns, at least 0, at most a second
 * (so that a long wait still looks at the clock now and then). */
static int ms_until(int64_t deadline_ns)
{
    int64_t left = deadline_ns - kvs__now_ns();

    if (left <= 0)
        return 0;
    return left > 1000000000ll ? 1000 : (int)((left + 999999) / 1000000);
}

static int fail_sys(struct kvs__err *e, const char *what, const char *addr, uint16_t port)
{
    int err = errno;

    return kvs__fail(e, -err, "%s %s:%u: %s", what, addr, (unsigned)port, strerror(err));
}

static void nodelay(int fd)
{
    int one = 1;

    /* Frames are written whole: Nagle would only hold small ones back. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* addr:port as a socket address, for a numeric address only (a listener
 * binds where it is told, never where a name happens to resolve). */
static int numeric_addr(const char *addr, uint16_t port, struct sockaddr_storage *sa,
                        socklen_t *len, struct kvs__err *e)
{
    struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE,
                              .ai_socktype = SOCK_STREAM }, *res = NULL;
    char ps[8];
    int rc;

    snprintf(ps, sizeof ps, "%u", (unsigned)port);
    if ((rc = getaddrinfo(addr, ps, &hints, &res)) != 0 || !res)
        return kvs__fail(e, KVS_EBADARG, "address '%s' is not a numeric IPv4 or IPv6 address",
                         addr);
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int kvs__tcp_listen(const char *addr, uint16_t *port, int backlog, int *fd, struct kvs__err *e)
{
    struct sockaddr_storage sa;
    socklen_t len;
    int s, one = 1, rc;

    if (!port || !fd || backlog < 1)
        return kvs__fail(e, KVS_EBADARG, "listen: bad arguments");
    *fd = -1;
    if (!addr)
        addr = "127.0.0.1";
    if ((rc = numeric_addr(addr, *port, &sa, &len, e)) != 0)
        return rc;
    if ((s = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
        return fail_sys(e, "socket for", addr, *port);
    /* A restarted kvsd may bind again at once, past the old one's TIME_WAIT. */
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&sa, len) != 0 || listen(s, backlog) != 0) {
        rc = fail_sys(e, "listen on", addr, *port);
        close(s);
        return rc;
    }
    if (*port == 0) {
        len = sizeof sa;
        if (getsockname(s, (struct sockaddr *)&sa, &len) != 0) {
            rc = fail_sys(e, "getsockname of", addr, *port);
            close(s);
            return rc;
        }
        *port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
    }
    *fd = s;
    return 0;
}

int kvs__tcp_accept(int fd, int64_t deadline_ns, int *out, struct kvs__err *e)
{
    *out = -1;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int s = EINTR_RETRY(accept4(fd, NULL, NULL, SOCK_CLOEXEC));
        int n;

        if (s >= 0) {
            nodelay(s);
            *out = s;
            return 0;
        }
        /* A connection that went away before it was taken is not an
         * error of the listener. */
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED
            && errno != EPROTO)
            return kvs__fail(e, -errno, "accept: %s", strerror(errno));
        if (kvs__now_ns() >= deadline_ns)
            return kvs__fail(e, -ETIMEDOUT, "accept: no connection before the deadline");
        n = poll(&p, 1, ms_until(deadline_ns));
        if (n < 0 && errno != EINTR)
            return kvs__fail(e, -errno, "poll: %s", strerror(errno));
    }
}

/* One try at connecting to ai within the deadline: 0, or -errno. */
static int connect_one(const struct addrinfo *ai, int64_t deadline_ns, int *out)
{
    int s = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
    socklen_t len = sizeof err;

    if (s < 0)
        return -errno;
    if (connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            err = -errno;
            close(s);
            return err;
        }
        for (;;) {
            struct pollfd p = { .fd = s, .events = POLLOUT };
            int n = poll(&p, 1, ms_until(deadline_ns));

            if (n > 0)
                break;
            if (n < 0 && errno != EINTR) {
                err = -errno;
                close(s);
                return err;
            }
            if (n == 0 && kvs__now_ns() >= deadline_ns) {
                close(s);
                return -ETIMEDOUT;
            }
        }
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            err = err ? -err : -errno;
            close(s);
            return err;
        }
    }
    /* Blocking again, for the handshake's reads and writes. */
    {
        int fl = fcntl(s, F_GETFL);

        if (fl < 0 || fcntl(s, F_SETFL, fl & ~O_NONBLOCK) != 0) {
            err = -errno;
            close(s);
            return err;
        }
    }
    nodelay(s);
    *out = s;
    return 0;
}

int kvs__tcp_connect(const char *host, uint16_t port, int64_t deadline_ns, int *out,
                     struct kvs__err *e)
{
    struct addrinfo hints = { .ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM }, *res;
    char ps[8];
    int rc = -ETIMEDOUT;

    if (!host || !out)
        return kvs__fail(e, KVS_EBADARG, "connect: bad arguments");
    *out = -1;
    snprintf(ps, sizeof ps, "%u", (unsigned)port);
    if ((rc = getaddrinfo(host, ps, &hints, &res)) != 0)
        return kvs__fail(e, -EHOSTUNREACH, "connect to %s:%u: %s", host, (unsigned)port,
                         gai_strerror(rc));
    /* A peer that does not listen yet refuses: try again until the
     * deadline, every 20 ms. */
    for (;;) {
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next)
            if ((rc = connect_one(ai, deadline_ns, out)) == 0)
                break;
        if (rc == 0 || (rc != -ECONNREFUSED && rc != -ENETUNREACH && rc != -EHOSTUNREACH)
            || kvs__now_ns() >= deadline_ns)
            break;
        poll(NULL, 0, ms_until(deadline_ns) < 20 ? ms_until(deadline_ns) : 20);
    }
    freeaddrinfo(res);
    if (rc != 0)
        return kvs__fail(e, rc, "connect to %s:%u: %s", host, (unsigned)port,
                         rc == -ETIMEDOUT ? "no answer before the deadline" : strerror(-rc));
    return 0;
}
