/*
 * tp_socket.c - the "socket" transport (transport.h): non-blocking stream
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
#include <sys/socket.h>
#include <unistd.h>

#include "ring.h"
#include "sys.h"
#include "transport.h"

#define RECV_BYTES (256 * 1024)        /* per connection and wait */
#define CONNS_MAX  (1 << 16)

struct send {
    const unsigned char *buf;
    size_t len, done;
    uint64_t token;
    struct send *next;
};

struct conn {
    int fd;                            /* -1: a free slot */
    int closed;                        /* CLOSED was reported, or is queued */
    int want_out;                      /* EPOLLOUT is asked for */
    struct send *head, *tail;
    unsigned char *rbuf;
};

struct kvs__tp {
    int ep;
    struct conn *c;
    int nconn;                         /* slots in c */
    struct kvs__tp_event *later;       /* events for the next wait */
    size_t nlater, later_cap;
};

/* Moves kept events into ev[n..max), oldest first; returns the new n. */
static int take_later(struct kvs__tp *t, struct kvs__tp_event *ev, int n, int max)
{
    size_t k = 0;

    while (n < max && k < t->nlater)
        ev[n++] = t->later[k++];
    memmove(t->later, t->later + k, sizeof *t->later * (t->nlater - k));
    t->nlater -= k;
    return n;
}

static int later_add(struct kvs__tp *t, struct kvs__tp_event ev)
{
    if (t->nlater == t->later_cap) {
        size_t cap = t->later_cap ? 2 * t->later_cap : 64;
        struct kvs__tp_event *l = realloc(t->later, sizeof *l * cap);

        if (!l)
            return -ENOMEM;
        t->later = l;
        t->later_cap = cap;
    }
    t->later[t->nlater++] = ev;
    return 0;
}

static int sock_open(struct kvs__tp **out, struct kvs__err *e)
{
    struct kvs__tp *t = calloc(1, sizeof *t);

    if (!t)
        return kvs__fail(e, -ENOMEM, "out of memory");
    if ((t->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        int err = errno;

        free(t);
        return kvs__fail(e, -err, "epoll_create1: %s", strerror(err));
    }
    *out = t;
    return 0;
}

static struct conn *conn_get(struct kvs__tp *t, int id)
{
    return id >= 0 && id < t->nconn && t->c[id].fd >= 0 ? &t->c[id] : NULL;
}

static void sock_drop(struct kvs__tp *t, int id)
{
    struct conn *c = conn_get(t, id);
    size_t j = 0;

    if (!c)
        return;
    epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    while (c->head) {
        struct send *s = c->head;

        c->head = s->next;
        free(s);
    }
    free(c->rbuf);
    *c = (struct conn){ .fd = -1 };
    for (size_t i = 0; i < t->nlater; i++)
        if (t->later[i].conn != id)
            t->later[j++] = t->later[i];
    t->nlater = j;
}

static void sock_close(struct kvs__tp *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nconn; i++)
        sock_drop(t, i);
    close(t->ep);
    free(t->c);
    free(t->later);
    free(t);
}

static int sock_adopt(struct kvs__tp *t, int fd, int *id, struct kvs__err *e)
{
    struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
    int fl = fcntl(fd, F_GETFL), i;

    for (i = 0; i < t->nconn && t->c[i].fd >= 0; i++)
        ;
    if (i == t->nconn) {
        int cap = t->nconn ? 2 * t->nconn : 8;
        struct conn *c;

        if (cap > CONNS_MAX)
            return kvs__fail(e, KVS_EBADARG, "more than %d connections", CONNS_MAX);
        if (!(c = realloc(t->c, sizeof *c * (size_t)cap)))
            return kvs__fail(e, -ENOMEM, "out of memory");
        for (int j = t->nconn; j < cap; j++)
            c[j] = (struct conn){ .fd = -1 };
        t->c = c;
        t->nconn = cap;
    }
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
        return kvs__fail(e, -errno, "fcntl: %s", strerror(errno));
    if (!(t->c[i].rbuf = malloc(RECV_BYTES)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    ev.data.u32 = (uint32_t)i;
    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int err = errno;

        free(t->c[i].rbuf);
        t->c[i].rbuf = NULL;
        return kvs__fail(e, -err, "epoll_ctl: %s", strerror(err));
    }
    t->c[i].fd = fd;
    *id = i;
    return 0;
}

/* Asks epoll for room to write on c, or stops asking. */
static void want_out(struct kvs__tp *t, struct conn *c, int id, int on)
{
    struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0),
                              .data.u32 = (uint32_t)id };

    if (c->want_out != on && epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->want_out = on;
}

/* The connection ended: its sends never complete; CLOSED goes out once. */
static int conn_closed(struct kvs__tp *t, struct conn *c, int id, int status)
{
    if (c->closed)
        return 0;
    c->closed = 1;
    want_out(t, c, id, 0);
    return later_add(t, (struct kvs__tp_event){ .type = KVS__TP_CLOSED, .conn = id,
                                                .status = status });
}

/* Writes what c's queue holds, as far as the socket takes it; each send
 * done becomes a SENT event for the next wait. */
static int flush(struct kvs__tp *t, struct conn *c, int id)
{
    while (c->head && !c->closed) {
        struct send *s = c->head;
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
        c->head = s->next;
        if (!c->head)
            c->tail = NULL;
        if (later_add(t, (struct kvs__tp_event){ .type = KVS__TP_SENT, .conn = id,
                                                 .token = s->token }) != 0) {
            free(s);
            return -ENOMEM;
        }
        free(s);
    }
    want_out(t, c, id, 0);
    return 0;
}

static int sock_send(struct kvs__tp *t, int id, const void *buf, size_t len, uint64_t token,
                     struct kvs__err *e)
{
    struct conn *c = conn_get(t, id);
    struct send *s;
    int rc;

    if (!c || !buf || len == 0)
        return kvs__fail(e, KVS_EBADARG, "send: connection %d, %zu bytes", id, len);
    if (c->closed)
        return kvs__fail(e, -ENOTCONN, "send: connection %d is closed", id);
    if (!(s = malloc(sizeof *s)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    *s = (struct send){ .buf = buf, .len = len, .token = token };
    if (c->tail)
        c->tail->next = s;
    else
        c->head = s;
    c->tail = s;
    if (c->head == s && (rc = flush(t, c, id)) != 0)
        return kvs__fail(e, rc, "out of memory");
    return 0;
}

/* Reads once from c into its buffer: a RECV, a CLOSED, or nothing yet. */
static int recv_one(struct kvs__tp *t, struct conn *c, int id, struct kvs__tp_event *ev)
{
    ssize_t n = EINTR_RETRY(recv(c->fd, c->rbuf, RECV_BYTES, MSG_DONTWAIT));

    if (n > 0) {
        *ev = (struct kvs__tp_event){ .type = KVS__TP_RECV, .conn = id, .data = c->rbuf,
                                      .len = (size_t)n };
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    c->closed = 1;
    want_out(t, c, id, 0);
    *ev = (struct kvs__tp_event){ .type = KVS__TP_CLOSED, .conn = id,
                                  .status = n == 0 ? 0 : -errno };
    return 1;
}

static int sock_wait(struct kvs__tp *t, struct kvs__tp_event *ev, int max, int64_t deadline_ns,
                     struct kvs__err *e)
{
    struct epoll_event ready[64];
    int n = 0;

    if (max <= 0)
        return kvs__fail(e, KVS_EBADARG, "wait: room for %d events", max);
    for (;;) {
        int64_t left;
        int got, ms;

        /* What the last calls left for now first, in order. */
        n = take_later(t, ev, n, max);
        if (n == max)
            return n;
        left = deadline_ns - kvs__now_ns();
        ms = n > 0 || left <= 0 ? 0 : left > 1000000000ll ? 1000 : (int)((left + 999999) / 1000000);
        got = epoll_wait(t->ep, ready, (int)(sizeof ready / sizeof ready[0]), ms);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return kvs__fail(e, -errno, "epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < got; i++) {
            int id = (int)ready[i].data.u32;
            struct conn *c = conn_get(t, id);
            int rc;

            if (!c || c->closed)
                continue;
            if ((ready[i].events & EPOLLOUT) && (rc = flush(t, c, id)) != 0)
                return kvs__fail(e, rc, "out of memory");
            /* One read per connection and wait, when an event has room:
             * else the socket stays readable, and the next wait reads it. */
            if ((ready[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && n < max
                && !c->closed)
                n += recv_one(t, c, id, &ev[n]);
        }
        n = take_later(t, ev, n, max);
        if (n > 0 || kvs__now_ns() >= deadline_ns)
            return n;
    }
}

const struct kvs__tp_ops kvs__tp_socket = {
    .name = "socket",
    .open = sock_open,
    .close = sock_close,
    .adopt = sock_adopt,
    .send = sock_send,
    .wait = sock_wait,
    .drop = sock_drop,
};

int kvs__tp_find(const char *name, const struct kvs__tp_ops **out, struct kvs__err *e)
{
    static const struct kvs__tp_ops *const all[] = { &kvs__tp_socket };

    if (!name || !*name)
        name = getenv("KVS_TRANSPORT");
    if (!name || !*name) {
        *out = all[0];
        return 0;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, all[i]->name) == 0) {
            *out = all[i];
            return 0;
        }
    return kvs__fail(e, KVS_EBADARG, "KVS_TRANSPORT=%s: no such transport (socket)", name);
}
