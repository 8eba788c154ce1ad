/*
 * tp_socket.c - the "socket" transport (kvs-transport.h's ops, offered by
 * the loader through tp_socket.h): non-blocking stream
 * sockets and epoll, for kernels or containers that refuse io_uring.
 *
 * Each connection has a queue of sends, written in order as far as the
 * socket takes them (the rest when epoll says it has room again), and a
 * receive buffer that one wait fills at most once: the bytes are handed
 * up as they came, framing is the caller's. Sends done and connections
 * found closed while sending are kept as events for the next wait.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm/ring.h"
#include "base/sys.h"
#include "kvs-transport.h"
#include "tp_util.h"
#include "tp_socket.h"

#define RECV_BYTES (256 * 1024)        /* per connection and wait */
#define WAKE_ID    UINT32_MAX          /* epoll's data of the wake-up eventfd */

struct conn {
    int fd;                            /* -1: a free slot */
    int closed;                        /* CLOSED was reported, or is queued */
    int want_out;                      /* EPOLLOUT is asked for */
    struct tp_send *head, *tail;
    unsigned char *rbuf;
};

struct kvs_transport {
    int ep;
    int wake;                          /* an eventfd: wake writes it */
    struct conn *c;
    int nconn;                         /* slots in c */
    struct tp_later later;             /* events for the next wait */
};

static int sock_open(struct kvs_transport **out, struct kvs_transport_error *e)
{
    struct kvs_transport *t = calloc(1, sizeof *t);
    struct epoll_event ev = { .events = EPOLLIN, .data.u32 = WAKE_ID };
    int err;

    if (!t)
        return tp_fail(e, -ENOMEM, "out of memory");
    t->ep = t->wake = -1;
    if ((t->ep = epoll_create1(EPOLL_CLOEXEC)) < 0
        || (t->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0
        || epoll_ctl(t->ep, EPOLL_CTL_ADD, t->wake, &ev) != 0) {
        err = errno;
        if (t->ep >= 0)
            close(t->ep);
        if (t->wake >= 0)
            close(t->wake);
        free(t);
        return tp_fail(e, -err, "epoll: %s", strerror(err));
    }
    *out = t;
    return 0;
}

static void sock_wake(struct kvs_transport *t)
{
    uint64_t one = 1;
    ssize_t w = write(t->wake, &one, sizeof one);  /* EAGAIN: pending already */

    (void)w;
}

static struct conn *conn_get(struct kvs_transport *t, int id)
{
    return id >= 0 && id < t->nconn && t->c[id].fd >= 0 ? &t->c[id] : NULL;
}

static void sock_drop(struct kvs_transport *t, int id)
{
    struct conn *c = conn_get(t, id);

    if (!c)
        return;
    epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    tp_send_free_all(&c->head, &c->tail);
    free(c->rbuf);
    *c = (struct conn){ .fd = -1 };
    tp_later_forget(&t->later, id);
}

static void sock_close(struct kvs_transport *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nconn; i++)
        sock_drop(t, i);
    close(t->ep);
    close(t->wake);
    free(t->c);
    tp_later_free(&t->later);
    free(t);
}

static int sock_adopt(struct kvs_transport *t, int fd, int64_t deadline_ns, int *id,
                      struct kvs_transport_error *e)
{
    struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
    int fl = fcntl(fd, F_GETFL), i = tp_slot((void **)&t->c, &t->nconn, sizeof *t->c), rc;

    (void)deadline_ns;                 /* nothing to say over the socket first */
    if (i < 0) {
        rc = tp_fail(e, i, "no room for connection %d", t->nconn);
        goto fail;
    }
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        rc = tp_fail(e, -errno, "fcntl: %s", strerror(errno));
        goto fail;
    }
    if (!(t->c[i].rbuf = malloc(RECV_BYTES))) {
        rc = tp_fail(e, -ENOMEM, "out of memory");
        goto fail;
    }
    ev.data.u32 = (uint32_t)i;
    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        rc = tp_fail(e, -errno, "epoll_ctl: %s", strerror(errno));
        free(t->c[i].rbuf);
        t->c[i].rbuf = NULL;
        goto fail;
    }
    t->c[i].fd = fd;
    *id = i;
    return 0;
fail:
    close(fd);
    return rc;
}

/* Asks epoll for room to write on c, or stops asking. */
static void want_out(struct kvs_transport *t, struct conn *c, int id, int on)
{
    struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0),
                              .data.u32 = (uint32_t)id };

    if (c->want_out != on && epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->want_out = on;
}

/* The connection ended: its sends never complete; CLOSED goes out once. */
static int conn_closed(struct kvs_transport *t, struct conn *c, int id, int status)
{
    if (c->closed)
        return 0;
    c->closed = 1;
    want_out(t, c, id, 0);
    return tp_later_add(&t->later, (struct kvs_transport_event){
        .type = KVS_TRANSPORT_CLOSED, .conn = id, .status = status });
}

/* Writes what c's queue holds, as far as the socket takes it; each send
 * done becomes a SENT event for the next wait. */
static int flush(struct kvs_transport *t, struct conn *c, int id)
{
    while (c->head && !c->closed) {
        struct tp_send *s = c->head;
        ssize_t n = EINTR_RETRY(send(c->fd, s->buf + s->done, s->len - s->done,
                                     MSG_NOSIGNAL | MSG_DONTWAIT));

        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                want_out(t, c, id, 1);
                return 0;
            }
            return conn_closed(t, c, id, -errno);
        }
        s->done += (size_t)n;
        if (s->done < s->len)
            continue;
        if (tp_later_add(&t->later, tp_send_pop(&c->head, &c->tail, id)) != 0)
            return -ENOMEM;
    }
    want_out(t, c, id, 0);
    return 0;
}

static int sock_send(struct kvs_transport *t, int id, const void *buf, size_t len, uint64_t token,
                     struct kvs_transport_error *e)
{
    struct conn *c = conn_get(t, id);
    int rc;

    if ((rc = tp_send_queue(c ? &c->head : NULL, c ? &c->tail : NULL, c && c->closed, id, buf,
                            len, token, e)) != 0)
        return rc;
    if (c->head == c->tail && (rc = flush(t, c, id)) != 0)
        return tp_fail(e, rc, "out of memory");
    return 0;
}

/* Reads once from c into its buffer: a RECV, a CLOSED, or nothing yet. */
static int recv_one(struct kvs_transport *t, struct conn *c, int id, struct kvs_transport_event *ev)
{
    ssize_t n = EINTR_RETRY(recv(c->fd, c->rbuf, RECV_BYTES, MSG_DONTWAIT));

    if (n > 0) {
        *ev = (struct kvs_transport_event){ .type = KVS_TRANSPORT_RECV, .conn = id, .data = c->rbuf,
                                      .len = (size_t)n };
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    c->closed = 1;
    want_out(t, c, id, 0);
    *ev = (struct kvs_transport_event){ .type = KVS_TRANSPORT_CLOSED, .conn = id,
                                  .status = n == 0 ? 0 : -errno };
    return 1;
}

static int sock_wait(struct kvs_transport *t, struct kvs_transport_event *ev, int max,
                     int64_t deadline_ns, struct kvs_transport_error *e)
{
    struct epoll_event ready[64];
    int woke = 0;

    if (max <= 0)
        return tp_fail(e, KVS_EBADARG, "wait: room for %d events", max);
    for (;;) {
        int64_t left = deadline_ns - kvs__now_ns();
        int n, got, ms;

        /* Closes kept first, then what the sockets hold, then the SENTs
         * kept: a backlog of SENTs never keeps the sockets unread. */
        n = tp_later_q_take(&t->later.in, ev, 0, max);
        ms = n > 0 || tp_later_count(&t->later) > 0 || left <= 0 ? 0
             : left > 1000000000ll ? 1000 : (int)((left + 999999) / 1000000);
        got = epoll_wait(t->ep, ready, (int)(sizeof ready / sizeof ready[0]), ms);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return tp_fail(e, -errno, "epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < got; i++) {
            int id = (int)ready[i].data.u32;
            struct conn *c = conn_get(t, id);
            uint64_t v;
            int rc;

            if (ready[i].data.u32 == WAKE_ID) {
                ssize_t r = read(t->wake, &v, sizeof v);   /* resets it */

                (void)r;
                woke = 1;
                continue;
            }
            if (!c || c->closed)
                continue;
            if ((ready[i].events & EPOLLOUT) && (rc = flush(t, c, id)) != 0)
                return tp_fail(e, rc, "out of memory");
            /* One read per connection and wait, when an event has room:
             * else the socket stays readable, and the next wait reads it. */
            if ((ready[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && n < max
                && !c->closed)
                n += recv_one(t, c, id, &ev[n]);
        }
        n = tp_later_take(&t->later, ev, n, max);
        if (n > 0 || woke || kvs__now_ns() >= deadline_ns)
            return n;
    }
}

const struct kvs_transport_ops kvs__tp_socket = {
    .version = KVS_TRANSPORT_VERSION,
    .size = sizeof(struct kvs_transport_ops),
    .name = "socket",
    .open = sock_open,
    .close = sock_close,
    .adopt = sock_adopt,
    .send = sock_send,
    .wait = sock_wait,
    .drop = sock_drop,
    .wake = sock_wake,
};
