/*
 * tp_uring.c - the "uring" transport (transport.h): io_uring through
 * liburing. Each connection keeps one receive in flight into its buffer,
 * armed again once the bytes it brought were handed up, and one send: the
 * head of its queue (the rest of it again after a short send), so that
 * sends go out in order. A dropped connection's operations are cancelled
 * and its buffers freed only when the kernel has given every one of them
 * back. Not yet: multishot receives with provided buffers, registered
 * buffers, zero-copy sends.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring.h"
#include "tp_util.h"
#include "transport.h"

#define RECV_BYTES (256 * 1024)
#define ENTRIES    256

enum { OP_RECV = 1, OP_SEND = 2, OP_CANCEL = 3 };

struct conn {
    int fd;                            /* -1: a free slot */
    int closed;                        /* CLOSED reported or queued */
    int dying;                         /* dropped: waits for its operations */
    int recv_busy, send_busy;          /* operations in flight */
    int rearm;                         /* its bytes were handed up: receive again */
    int held;                          /* a RECV of its buffer waits in `later` */
    struct tp_send *head, *tail;
    unsigned char *rbuf;
};

struct kvs__tp {
    struct io_uring ring;
    struct conn *c;
    int nconn;
    struct tp_later later;             /* events for the next wait */
};

static uint64_t udata(int id, int op)
{
    return (uint64_t)(uint32_t)id << 8 | (uint64_t)op;
}

/* Moves kept events into ev[n..max), oldest first: a RECV handed up frees
 * its connection's buffer for the next wait. Returns the new n. */
static int take_later(struct kvs__tp *t, struct kvs__tp_event *ev, int n, int max)
{
    int m = tp_later_take(&t->later, ev, n, max);

    for (int i = n; i < m; i++) {
        if (ev[i].type == KVS__TP_RECV) {
            t->c[ev[i].conn].held = 0;
            t->c[ev[i].conn].rearm = 1;
        }
    }
    return m;
}

static struct io_uring_sqe *sqe_get(struct kvs__tp *t)
{
    struct io_uring_sqe *s = io_uring_get_sqe(&t->ring);

    if (!s) {                          /* full: hand the queue to the kernel */
        io_uring_submit(&t->ring);
        s = io_uring_get_sqe(&t->ring);
    }
    return s;
}

static int uring_open(struct kvs__tp **out, struct kvs__err *e)
{
    struct kvs__tp *t = calloc(1, sizeof *t);
    int rc;

    if (!t)
        return kvs__fail(e, -ENOMEM, "out of memory");
    if ((rc = io_uring_queue_init(ENTRIES, &t->ring, 0)) != 0) {
        free(t);
        return kvs__fail(e, rc, "io_uring_queue_init: %s", strerror(-rc));
    }
    *out = t;
    return 0;
}

static struct conn *conn_get(struct kvs__tp *t, int id)
{
    return id >= 0 && id < t->nconn && t->c[id].fd >= 0 && !t->c[id].dying ? &t->c[id] : NULL;
}

/* Frees a dropped connection's slot once no operation of it is in flight. */
static void reap_dying(struct conn *c)
{
    if (!c->dying || c->recv_busy || c->send_busy)
        return;
    close(c->fd);
    tp_send_free_all(&c->head, &c->tail);
    free(c->rbuf);
    *c = (struct conn){ .fd = -1 };
}

static void uring_drop(struct kvs__tp *t, int id)
{
    struct conn *c = conn_get(t, id);

    if (!c)
        return;
    c->dying = 1;
    c->closed = 1;
    /* What is in flight ends soon: cancelled, and the socket shut. */
    shutdown(c->fd, SHUT_RDWR);
    for (int op = OP_RECV; op <= OP_SEND; op++) {
        struct io_uring_sqe *s;

        if (!(op == OP_RECV ? c->recv_busy : c->send_busy) || !(s = sqe_get(t)))
            continue;
        io_uring_prep_cancel64(s, udata(id, op), 0);
        io_uring_sqe_set_data64(s, udata(id, OP_CANCEL));
    }
    io_uring_submit(&t->ring);
    tp_later_forget(&t->later, id);
    reap_dying(c);
}

static int uring_adopt(struct kvs__tp *t, int fd, int *id, struct kvs__err *e)
{
    int fl = fcntl(fd, F_GETFL), i = tp_slot((void **)&t->c, &t->nconn, sizeof *t->c);

    if (i < 0)
        return kvs__fail(e, i, "no room for connection %d", t->nconn);
    /* Blocking: io_uring then waits for the socket itself. */
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        return kvs__fail(e, -errno, "fcntl: %s", strerror(errno));
    if (!(t->c[i].rbuf = malloc(RECV_BYTES)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    t->c[i].fd = fd;
    t->c[i].rearm = 1;
    *id = i;
    return 0;
}

static int send_head(struct kvs__tp *t, struct conn *c, int id)
{
    struct io_uring_sqe *s;

    if (c->send_busy || !c->head || c->closed)
        return 0;
    if (!(s = sqe_get(t)))
        return -EBUSY;
    io_uring_prep_send(s, c->fd, c->head->buf + c->head->done, c->head->len - c->head->done,
                       MSG_NOSIGNAL);
    io_uring_sqe_set_data64(s, udata(id, OP_SEND));
    c->send_busy = 1;
    return 0;
}

static int uring_send(struct kvs__tp *t, int id, const void *buf, size_t len, uint64_t token,
                      struct kvs__err *e)
{
    struct conn *c = conn_get(t, id);
    int rc;

    if ((rc = tp_send_queue(c ? &c->head : NULL, c ? &c->tail : NULL, c && c->closed, id, buf,
                            len, token, e)) != 0)
        return rc;
    if ((rc = send_head(t, c, id)) != 0)
        return kvs__fail(e, rc, "io_uring: no room for a send");
    io_uring_submit(&t->ring);
    return 0;
}

static int closed_event(struct kvs__tp *t, struct conn *c, int id, int status)
{
    if (c->closed)
        return 0;
    c->closed = 1;
    return tp_later_add(&t->later, (struct kvs__tp_event){ .type = KVS__TP_CLOSED, .conn = id,
                                                           .status = status });
}

/* One completion: an event kept for the caller, or the next step. */
static int complete(struct kvs__tp *t, const struct io_uring_cqe *q)
{
    int id = (int)(q->user_data >> 8), op = (int)(q->user_data & 0xff);
    struct conn *c;

    if (op == OP_CANCEL || id < 0 || id >= t->nconn || t->c[id].fd < 0)
        return 0;
    c = &t->c[id];
    if (op == OP_RECV)
        c->recv_busy = 0;
    else
        c->send_busy = 0;
    if (c->dying) {
        reap_dying(c);
        return 0;
    }
    if (op == OP_RECV) {
        if (q->res > 0) {
            c->held = 1;
            return tp_later_add(&t->later, (struct kvs__tp_event){
                .type = KVS__TP_RECV, .conn = id, .data = c->rbuf, .len = (size_t)q->res });
        }
        return closed_event(t, c, id, q->res == 0 ? 0 : q->res);
    }
    if (q->res < 0)
        return closed_event(t, c, id, q->res);
    c->head->done += (size_t)q->res;
    if (c->head->done == c->head->len
        && tp_later_add(&t->later, tp_send_pop(&c->head, &c->tail, id)) != 0)
        return -ENOMEM;
    return send_head(t, c, id);
}

static int uring_wait(struct kvs__tp *t, struct kvs__tp_event *ev, int max, int64_t deadline_ns,
                      struct kvs__err *e)
{
    int n = 0;

    if (max <= 0)
        return kvs__fail(e, KVS_EBADARG, "wait: room for %d events", max);
    /* Receive again where the last wait handed the bytes up. */
    for (int i = 0; i < t->nconn; i++) {
        struct conn *c = &t->c[i];
        struct io_uring_sqe *s;

        if (c->fd < 0 || c->dying || c->closed || !c->rearm || c->held || c->recv_busy)
            continue;
        if (!(s = sqe_get(t)))
            break;
        io_uring_prep_recv(s, c->fd, c->rbuf, RECV_BYTES, 0);
        io_uring_sqe_set_data64(s, udata(i, OP_RECV));
        c->recv_busy = 1;
        c->rearm = 0;
    }
    for (;;) {
        struct io_uring_cqe *q;
        int64_t left;
        int rc;

        n = take_later(t, ev, n, max);
        if (n == max)
            return n;
        left = deadline_ns - kvs__now_ns();
        if (n > 0 || left <= 0) {
            rc = io_uring_submit(&t->ring);
        } else {
            struct __kernel_timespec ts = {
                .tv_sec = left > 1000000000ll ? 1 : 0,
                .tv_nsec = left > 1000000000ll ? 0 : left };

            /* The number submitted, or -ETIME when nothing completed. */
            rc = io_uring_submit_and_wait_timeout(&t->ring, &q, 1, &ts, NULL);
        }
        if (rc < 0 && rc != -ETIME && rc != -EAGAIN && rc != -EINTR && rc != -EBUSY)
            return kvs__fail(e, rc, "io_uring: %s", strerror(-rc));
        {
            unsigned head, seen = 0;

            rc = 0;
            io_uring_for_each_cqe(&t->ring, head, q) {
                if ((rc = complete(t, q)) != 0)
                    break;
                seen++;
            }
            io_uring_cq_advance(&t->ring, seen);
            if (rc != 0)
                return kvs__fail(e, rc, "out of memory");
            if (seen)
                io_uring_submit(&t->ring);
        }
        n = take_later(t, ev, n, max);
        if (n > 0 || kvs__now_ns() >= deadline_ns)
            return n;
    }
}

static void uring_close(struct kvs__tp *t)
{
    int64_t deadline = kvs__now_ns() + 1000000000ll;
    int busy;

    if (!t)
        return;
    for (int i = 0; i < t->nconn; i++)
        uring_drop(t, i);
    /* The kernel gives back what the drops cancelled; a buffer goes only
     * then (at worst, after a second, the ring's exit waits for them). */
    do {
        struct io_uring_cqe *q;
        struct __kernel_timespec ts = { .tv_nsec = 10000000 };
        unsigned head, seen = 0;

        busy = 0;
        io_uring_submit_and_wait_timeout(&t->ring, &q, 1, &ts, NULL);
        io_uring_for_each_cqe(&t->ring, head, q) {
            complete(t, q);
            seen++;
        }
        io_uring_cq_advance(&t->ring, seen);
        for (int i = 0; i < t->nconn; i++)
            busy |= t->c[i].fd >= 0;
    } while (busy && kvs__now_ns() < deadline);
    io_uring_queue_exit(&t->ring);
    for (int i = 0; i < t->nconn; i++)
        if (t->c[i].fd >= 0) {
            t->c[i].recv_busy = t->c[i].send_busy = 0;
            reap_dying(&t->c[i]);
        }
    free(t->c);
    free(t->later.ev);
    free(t);
}

const struct kvs__tp_ops kvs__tp_uring = {
    .name = "uring",
    .open = uring_open,
    .close = uring_close,
    .adopt = uring_adopt,
    .send = uring_send,
    .wait = uring_wait,
    .drop = uring_drop,
};
