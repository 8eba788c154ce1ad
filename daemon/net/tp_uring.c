/*
 * tp_uring.c - the "uring" transport (kvs-transport.h's ops, offered by
 * the loader through tp_uring.h): io_uring through liburing.
 *
 * Receiving: each connection keeps one multishot receive armed, which
 * takes buffers from a ring of provided buffers that the loop registers
 * with the kernel once, shared by its connections (pbuf_setup says why).
 * A filled buffer is handed up as a RECV's data and goes back to the ring
 * at the next wait, when the caller is done with it. The kernel ends a
 * multishot receive when the buffers run out (-ENOBUFS) or when it sees
 * fit; the next wait arms it again, and what it had not read is still in
 * the socket, so bytes stay in order. Kernels without these (before Linux
 * 6.0), or that refuse the buffer ring, get one receive at a time into
 * the connection's own buffer.
 *
 * Sending: one send in flight per connection, the head of its queue (the
 * rest of it again after a short send), so that sends go out in order.
 * Sends of 64 KiB and more go zero-copy: the kernel sends from the
 * caller's pages and says in a later notification when it let go of them;
 * only then is the send SENT. A notification that says the kernel copied
 * after all (loopback, veth, a NIC that cannot gather) ends zero-copy for
 * that connection, as does a refusal: pinning pages that get copied
 * anyway only costs.
 *
 * Not used: registered (fixed) buffers for sends. Frames are the caller's
 * memory, each a new allocation: registering one would pin it and update
 * the kernel's table, which costs more than the copy it saves, and big
 * sends skip that copy already by going zero-copy. The ring of provided
 * buffers is the receive side's registered memory. Nor the setup flags
 * for one thread (SINGLE_ISSUER, DEFER_TASKRUN): kvsd opens a loop on one
 * thread and waits on another.
 *
 * A dropped connection's operations are cancelled, and its memory freed
 * only once the kernel has given every one of them back, notifications
 * included.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm/ring.h"
#include "kvs-transport.h"
#include "tp_util.h"
#include "tp_uring.h"

#ifndef IORING_SEND_ZC_REPORT_USAGE    /* Linux 6.2; liburing 2.3's headers predate it */
#define IORING_SEND_ZC_REPORT_USAGE  (1U << 3)
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

#define ENTRIES    256
#define RECV_BYTES (256 * 1024)        /* a connection's own buffer, without the ring */
/* The provided buffers: 8 of 128 KiB. Few in all (1 MiB), so that the
 * kernel writes into buffers still in the cache, where the caller then
 * reads them: 64 of 64 KiB made round trips of 64 KiB 15% slower. Not
 * 64 KiB each: buffers of about a loopback segment (60-96 KiB) made those
 * of 256 KiB twice as slow. A wait still takes up to four times what a
 * connection's one receive took before. A power of two, as the kernel
 * wants. */
#define PBUF_BYTES (128 * 1024)
#define PBUF_COUNT 8
#define PBUF_GROUP 0
/* Zero-copy pays once the copy it saves costs more than pinning the pages
 * and a second completion: from tens of KiB (the kernel's MSG_ZEROCOPY
 * notes say about 10 KB); 64 KiB keeps heartbeats and small messages
 * plain. A zero-copy send charges its pages to RLIMIT_MEMLOCK (8 MiB by
 * default) until its notification: one takes at most ZC_PART. */
#define ZC_MIN     (64 * 1024)
#define ZC_PART    (1024 * 1024)
#define SEND_PART  (1u << 30)          /* a completion's res is an int */

enum { OP_RECV = 1, OP_SEND = 2, OP_CANCEL = 3, OP_WAKE = 4 };

/* A send whose bytes all went, waiting for zero-copy notifications (its
 * own or those of the sends before it) before its SENT. */
struct zc_wait {
    struct zc_wait *next;
    struct kvs_transport_event sent;
    uint32_t seq;                      /* its place in the connection's queue */
    unsigned notifs;                   /* its notifications still to come */
};

struct conn {
    int fd;                            /* -1: a free slot */
    int closed;                        /* CLOSED reported or queued */
    int dying;                         /* dropped: waits for its operations */
    int fd_gone;                       /* dropped with notifications to come: closed */
    int recv_busy, send_busy;          /* operations in flight */
    int rearm;                         /* no receive armed, and one may be */
    unsigned notifs;                   /* zero-copy notifications to come */
    int zc;                            /* big sends go zero-copy */
    int send_zc;                       /* the send in flight is zero-copy */
    uint64_t send_ud;                  /* its user_data, to cancel it */
    uint32_t seq;                      /* the head's place in the queue */
    unsigned head_notifs;              /* the head's notifications to come */
    struct tp_send *head, *tail;
    struct zc_wait *wait_head, *wait_tail;
    unsigned char *rbuf;               /* without the ring */
};

struct kvs_transport {
    struct io_uring ring;
    struct conn *c;
    int nconn;
    struct tp_later later;             /* events for the next wait */
    int zc;                            /* the kernel has zero-copy sends */
    struct io_uring_buf_ring *br;      /* NULL: no ring, a buffer per connection */
    unsigned char *pbuf;               /* its PBUF_COUNT buffers */
    size_t pbuf_map;                   /* bytes mapped at br */
    uint16_t back[PBUF_COUNT];         /* handed up: back to the ring at the next wait */
    int nback;
    int wake;                          /* an eventfd: wake writes it; a read of it is */
    int wake_armed;                    /* in flight while wake_armed, into wake_val */
    int woke;                          /* it completed: the wait returns */
    uint64_t wake_val;
};

/* A completion's user_data: the operation, the connection, and for a send
 * its place in the queue, which its notification carries too. */
static uint64_t udata(int id, int op, uint32_t seq)
{
    return (uint64_t)seq << 32 | (uint64_t)(uint32_t)id << 8 | (uint64_t)op;
}

static unsigned pbuf_id(const struct kvs_transport *t, const void *data)
{
    return (unsigned)(((const unsigned char *)data - t->pbuf) / PBUF_BYTES);
}

/* Buffer bid goes back to the ring at the next wait. */
static void pbuf_later(struct kvs_transport *t, unsigned bid)
{
    if (bid < PBUF_COUNT && t->nback < PBUF_COUNT)
        t->back[t->nback++] = (uint16_t)bid;
}

static void pbuf_return(struct kvs_transport *t)
{
    int mask = io_uring_buf_ring_mask(PBUF_COUNT);

    if (!t->br || !t->nback)
        return;
    for (int i = 0; i < t->nback; i++)
        io_uring_buf_ring_add(t->br, t->pbuf + (size_t)t->back[i] * PBUF_BYTES, PBUF_BYTES,
                              t->back[i], mask, i);
    io_uring_buf_ring_advance(t->br, t->nback);
    t->nback = 0;
}

/* One ring of buffers for the loop, not one per connection: a kvsd loop
 * has a connection per other host, seldom all busy at once, and one group
 * lets the busy ones use every buffer for the memory of one; none keeps
 * them past the next wait, when every receive that ran out is armed
 * again. 0, or the kernel's refusal (-EINVAL before Linux 5.19). */
static int pbuf_setup(struct kvs_transport *t)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t ring = (PBUF_COUNT * sizeof(struct io_uring_buf) + page - 1) / page * page;
    struct io_uring_buf_reg reg = { .ring_entries = PBUF_COUNT, .bgid = PBUF_GROUP };
    void *m;
    int rc;

    /* The ring must start on a page; its buffers follow. */
    t->pbuf_map = ring + (size_t)PBUF_COUNT * PBUF_BYTES;
    m = mmap(NULL, t->pbuf_map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -errno;
    reg.ring_addr = (uint64_t)(uintptr_t)m;
    io_uring_buf_ring_init(m);
    if ((rc = io_uring_register_buf_ring(&t->ring, &reg, 0)) != 0) {
        munmap(m, t->pbuf_map);
        return rc;
    }
    t->br = m;
    t->pbuf = (unsigned char *)m + ring;
    for (int i = 0; i < PBUF_COUNT; i++)
        pbuf_later(t, (unsigned)i);
    pbuf_return(t);
    return 0;
}

/* What this kernel offers. Zero-copy sends came with multishot receives
 * (Linux 6.0): the probe for one says both. */
static void features(struct kvs_transport *t)
{
    struct io_uring_probe *p = io_uring_get_probe_ring(&t->ring);

    t->zc = p && io_uring_opcode_supported(p, IORING_OP_SEND_ZC);
    if (p)
        io_uring_free_probe(p);
    if (t->zc)
        pbuf_setup(t);
}

/* Moves kept events into ev[n..max), what came in first (tp_util.h). A RECV handed up is
 * done with at the next wait: its buffer goes back to the ring then, or
 * (without the ring) its connection may receive into its own again. */
static int take_later(struct kvs_transport *t, struct kvs_transport_event *ev, int n, int max)
{
    int m = tp_later_take(&t->later, ev, n, max);

    for (int i = n; i < m; i++) {
        if (ev[i].type != KVS_TRANSPORT_RECV)
            continue;
        if (t->br)
            pbuf_later(t, pbuf_id(t, ev[i].data));
        else
            t->c[ev[i].conn].rearm = 1;
    }
    return m;
}

static struct io_uring_sqe *sqe_get(struct kvs_transport *t)
{
    struct io_uring_sqe *s = io_uring_get_sqe(&t->ring);

    if (!s) {                          /* full: hand the queue to the kernel */
        io_uring_submit(&t->ring);
        s = io_uring_get_sqe(&t->ring);
    }
    return s;
}

static int uring_open(struct kvs_transport **out, struct kvs_transport_error *e)
{
    struct kvs_transport *t = calloc(1, sizeof *t);
    int rc;

    if (!t)
        return tp_fail(e, -ENOMEM, "out of memory");
    if ((t->wake = eventfd(0, EFD_CLOEXEC)) < 0) {
        rc = -errno;
        free(t);
        return tp_fail(e, rc, "eventfd: %s", strerror(-rc));
    }
    if ((rc = io_uring_queue_init(ENTRIES, &t->ring, 0)) != 0) {
        close(t->wake);
        free(t);
        return tp_fail(e, rc, "io_uring_queue_init: %s", strerror(-rc));
    }
    features(t);
    *out = t;
    return 0;
}

static struct conn *conn_get(struct kvs_transport *t, int id)
{
    return id >= 0 && id < t->nconn && t->c[id].fd >= 0 && !t->c[id].dying ? &t->c[id] : NULL;
}

/* Frees a dropped connection's slot once nothing of it is in flight. */
static void reap_dying(struct conn *c)
{
    if (!c->dying || c->recv_busy || c->send_busy || c->notifs)
        return;
    if (!c->fd_gone)
        close(c->fd);
    tp_send_free_all(&c->head, &c->tail);
    while (c->wait_head) {
        struct zc_wait *w = c->wait_head;

        c->wait_head = w->next;
        free(w);
    }
    free(c->rbuf);
    *c = (struct conn){ .fd = -1 };
}

/* Forgets conn's kept events; the buffers of its RECVs go back. */
static void forget_recvs(struct kvs_transport *t, int id)
{
    for (size_t i = 0; t->br && i < t->later.in.n; i++) {
        const struct kvs_transport_event *k = tp_later_in(&t->later, i);

        if (k->conn == id && k->type == KVS_TRANSPORT_RECV)
            pbuf_later(t, pbuf_id(t, k->data));
    }
    tp_later_forget(&t->later, id);
}

static void cancel(struct kvs_transport *t, int id, uint64_t ud)
{
    struct io_uring_sqe *s = sqe_get(t);

    if (!s)
        return;
    io_uring_prep_cancel64(s, ud, 0);
    io_uring_sqe_set_data64(s, udata(id, OP_CANCEL, 0));
}

static void uring_drop(struct kvs_transport *t, int id)
{
    struct conn *c = conn_get(t, id);

    if (!c)
        return;
    c->dying = 1;
    c->closed = 1;
    /* What is in flight ends soon: cancelled, and the socket shut. */
    shutdown(c->fd, SHUT_RDWR);
    if (c->recv_busy)
        cancel(t, id, udata(id, OP_RECV, 0));
    if (c->send_busy)
        cancel(t, id, c->send_ud);
    io_uring_submit(&t->ring);
    /* A notification comes when the socket lets go of the pages, which a
     * peer that reads nothing may put off for minutes: reset the
     * connection, so that its queue goes now. */
    if (c->notifs || (c->send_busy && c->send_zc)) {
        struct linger now = { 1, 0 };

        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
        close(c->fd);
        c->fd_gone = 1;
    }
    forget_recvs(t, id);
    reap_dying(c);
}

static void uring_wake(struct kvs_transport *t)
{
    uint64_t one = 1;
    ssize_t w = write(t->wake, &one, sizeof one);

    (void)w;
}

static int uring_adopt(struct kvs_transport *t, int fd, int64_t deadline_ns, int *id,
                       struct kvs_transport_error *e)
{
    int fl = fcntl(fd, F_GETFL), i = tp_slot((void **)&t->c, &t->nconn, sizeof *t->c), rc;

    (void)deadline_ns;                 /* nothing to say over the socket first */
    if (i < 0)
        rc = tp_fail(e, i, "no room for connection %d", t->nconn);
    /* Blocking: io_uring then waits for the socket itself. */
    else if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        rc = tp_fail(e, -errno, "fcntl: %s", strerror(errno));
    else if (!t->br && !(t->c[i].rbuf = malloc(RECV_BYTES)))
        rc = tp_fail(e, -ENOMEM, "out of memory");
    else
        rc = 0;
    if (rc != 0) {
        close(fd);
        return rc;
    }
    t->c[i].fd = fd;
    t->c[i].rearm = 1;
    t->c[i].zc = t->zc;
    *id = i;
    return 0;
}

/* Sends the head of conn's queue, or what is left of it: zero-copy when
 * that is big and the connection still tries it. */
static int send_head(struct kvs_transport *t, struct conn *c, int id)
{
    struct io_uring_sqe *s;
    const unsigned char *p;
    size_t n;

    if (c->send_busy || !c->head || c->closed)
        return 0;
    if (!(s = sqe_get(t)))
        return -EBUSY;
    p = c->head->buf + c->head->done;
    n = c->head->len - c->head->done;
    c->send_zc = c->zc && n >= ZC_MIN;
    if (c->send_zc)
        io_uring_prep_send_zc(s, c->fd, p, n < ZC_PART ? n : ZC_PART, MSG_NOSIGNAL,
                              IORING_SEND_ZC_REPORT_USAGE);
    else
        io_uring_prep_send(s, c->fd, p, n < SEND_PART ? n : SEND_PART, MSG_NOSIGNAL);
    c->send_ud = udata(id, OP_SEND, c->seq);
    io_uring_sqe_set_data64(s, c->send_ud);
    c->send_busy = 1;
    return 0;
}

static int uring_send(struct kvs_transport *t, int id, const void *buf, size_t len, uint64_t token,
                      struct kvs_transport_error *e)
{
    struct conn *c = conn_get(t, id);
    int rc;

    if ((rc = tp_send_queue(c ? &c->head : NULL, c ? &c->tail : NULL, c && c->closed, id, buf,
                            len, token, e)) != 0)
        return rc;
    if ((rc = send_head(t, c, id)) != 0)
        return tp_fail(e, rc, "io_uring: no room for a send");
    io_uring_submit(&t->ring);
    return 0;
}

static int closed_event(struct kvs_transport *t, struct conn *c, int id, int status)
{
    if (c->closed)
        return 0;
    c->closed = 1;
    return tp_later_add(&t->later, (struct kvs_transport_event){
        .type = KVS_TRANSPORT_CLOSED, .conn = id, .status = status });
}

/* A multishot receive's completion: bytes in one of the ring's buffers,
 * or its end. */
static int recv_ring_done(struct kvs_transport *t, struct conn *c, int id,
                          const struct io_uring_cqe *q)
{
    unsigned bid = q->flags >> IORING_CQE_BUFFER_SHIFT;
    int more = q->flags & IORING_CQE_F_MORE, rc = 0;

    if (!more)
        c->recv_busy = 0;
    if (q->flags & IORING_CQE_F_BUFFER) {
        if (q->res > 0 && bid < PBUF_COUNT && !c->closed)
            rc = tp_later_add(&t->later, (struct kvs_transport_event){
                .type = KVS_TRANSPORT_RECV, .conn = id, .data = t->pbuf + (size_t)bid * PBUF_BYTES,
                .len = (size_t)q->res });
        if (q->res <= 0 || c->closed || rc != 0)
            pbuf_later(t, bid);
    }
    if (more || c->closed || rc != 0)
        return rc;
    /* Ended with bytes, or out of buffers: armed again once they are back. */
    if (q->res > 0 || q->res == -ENOBUFS) {
        c->rearm = 1;
        return 0;
    }
    return closed_event(t, c, id, q->res);
}

/* A receive into the connection's own buffer: armed again once its bytes
 * were handed up. */
static int recv_plain_done(struct kvs_transport *t, struct conn *c, int id,
                           const struct io_uring_cqe *q)
{
    c->recv_busy = 0;
    if (c->closed)
        return 0;
    if (q->res > 0)
        return tp_later_add(&t->later, (struct kvs_transport_event){
            .type = KVS_TRANSPORT_RECV, .conn = id, .data = c->rbuf, .len = (size_t)q->res });
    return closed_event(t, c, id, q->res);
}

/* SENT of the sends waiting in order whose notifications all came. */
static int zc_release(struct kvs_transport *t, struct conn *c)
{
    while (!c->closed && c->wait_head && !c->wait_head->notifs) {
        struct zc_wait *w = c->wait_head;

        if (tp_later_add(&t->later, w->sent) != 0)
            return -ENOMEM;
        if (!(c->wait_head = w->next))
            c->wait_tail = NULL;
        free(w);
    }
    return 0;
}

/* The head's bytes all went: SENT now, or once its notifications and
 * those of the sends before it came. */
static int head_done(struct kvs_transport *t, struct conn *c, int id)
{
    struct kvs_transport_event sent = tp_send_pop(&c->head, &c->tail, id);
    struct zc_wait *w;

    if (!c->head_notifs && !c->wait_head) {
        c->seq++;
        return tp_later_add(&t->later, sent);
    }
    if (!(w = malloc(sizeof *w)))
        return -ENOMEM;
    *w = (struct zc_wait){ .sent = sent, .seq = c->seq++, .notifs = c->head_notifs };
    c->head_notifs = 0;
    if (c->wait_tail)
        c->wait_tail->next = w;
    else
        c->wait_head = w;
    c->wait_tail = w;
    return 0;
}

/* Refusals of zero-copy that a plain send does not meet: a socket without
 * it (AF_UNIX), a kernel without usage reports (6.0, 6.1), RLIMIT_MEMLOCK. */
static int zc_refused(int res)
{
    return res == -EOPNOTSUPP || res == -EINVAL || res == -ENOMEM || res == -ENOBUFS;
}

/* The send in flight completed; with F_MORE, a notification follows. */
static int send_done(struct kvs_transport *t, struct conn *c, int id, const struct io_uring_cqe *q)
{
    int rc;

    c->send_busy = 0;
    if (q->flags & IORING_CQE_F_MORE) {
        c->notifs++;
        c->head_notifs++;
    }
    if (c->closed)
        return 0;
    if (q->res < 0 && c->send_zc && zc_refused(q->res)) {
        c->zc = 0;
        return send_head(t, c, id);
    }
    if (q->res < 0)
        return closed_event(t, c, id, q->res);
    c->head->done += (size_t)q->res;
    if (c->head->done == c->head->len && (rc = head_done(t, c, id)) != 0)
        return rc;
    return send_head(t, c, id);
}

/* A zero-copy send's notification: the kernel let go of its pages. */
static int notif_done(struct kvs_transport *t, struct conn *c, const struct io_uring_cqe *q)
{
    uint32_t seq = (uint32_t)(q->user_data >> 32);

    if (c->notifs)
        c->notifs--;
    if ((uint32_t)q->res & IORING_NOTIF_USAGE_ZC_COPIED)
        c->zc = 0;
    if (seq == c->seq) {
        if (c->head_notifs)
            c->head_notifs--;
        return 0;
    }
    for (struct zc_wait *w = c->wait_head; w; w = w->next)
        if (w->seq == seq) {
            if (w->notifs)
                w->notifs--;
            break;
        }
    return zc_release(t, c);
}

/* One completion: an event kept for the caller, or the next step. */
static int cqe_take(struct kvs_transport *t, const struct io_uring_cqe *q)
{
    int id = (int)(q->user_data >> 8 & 0xffffff), op = (int)(q->user_data & 0xff), rc;
    struct conn *c;

    if (op == OP_CANCEL)
        return 0;
    if (op == OP_WAKE) {
        t->wake_armed = 0;
        t->woke = 1;
        return 0;
    }
    if (id >= t->nconn || t->c[id].fd < 0) {
        if (t->br && (q->flags & IORING_CQE_F_BUFFER))
            pbuf_later(t, q->flags >> IORING_CQE_BUFFER_SHIFT);
        return 0;
    }
    c = &t->c[id];
    if (op == OP_RECV)
        rc = t->br ? recv_ring_done(t, c, id, q) : recv_plain_done(t, c, id, q);
    else if (q->flags & IORING_CQE_F_NOTIF)
        rc = notif_done(t, c, q);
    else
        rc = send_done(t, c, id, q);
    reap_dying(c);
    return rc;
}

/* Arms a receive on each connection that has none and may, and the read
 * of the wake-up eventfd. */
static void recv_arm(struct kvs_transport *t)
{
    struct io_uring_sqe *w;

    if (!t->wake_armed && (w = sqe_get(t)) != NULL) {
        io_uring_prep_read(w, t->wake, &t->wake_val, sizeof t->wake_val, 0);
        io_uring_sqe_set_data64(w, udata(0xffffff, OP_WAKE, 0));
        t->wake_armed = 1;
    }
    for (int i = 0; i < t->nconn; i++) {
        struct conn *c = &t->c[i];
        struct io_uring_sqe *s;

        if (c->fd < 0 || c->dying || c->closed || !c->rearm || c->recv_busy)
            continue;
        if (!(s = sqe_get(t)))
            break;
        if (t->br) {
            io_uring_prep_recv_multishot(s, c->fd, NULL, 0, 0);
            s->flags |= IOSQE_BUFFER_SELECT;
            s->buf_group = PBUF_GROUP;
        } else {
            io_uring_prep_recv(s, c->fd, c->rbuf, RECV_BYTES, 0);
        }
        io_uring_sqe_set_data64(s, udata(i, OP_RECV, 0));
        c->recv_busy = 1;
        c->rearm = 0;
    }
}

static int uring_wait(struct kvs_transport *t, struct kvs_transport_event *ev, int max,
                      int64_t deadline_ns, struct kvs_transport_error *e)
{
    if (max <= 0)
        return tp_fail(e, KVS_EBADARG, "wait: room for %d events", max);
    for (;;) {
        struct io_uring_cqe *q;
        int64_t left = deadline_ns - kvs__now_ns();
        unsigned head, seen = 0;
        int rc, n;

        /* Nothing was handed up yet in this wait: what the last one
         * handed up is done with, its buffers free again. */
        pbuf_return(t);
        recv_arm(t);
        if (tp_later_count(&t->later) > 0 || left <= 0 || t->woke) {
            rc = io_uring_submit(&t->ring);
        } else {
            struct __kernel_timespec ts = {
                .tv_sec = left > 1000000000ll ? 1 : 0,
                .tv_nsec = left > 1000000000ll ? 0 : left };

            /* The number submitted, or -ETIME when nothing completed. */
            rc = io_uring_submit_and_wait_timeout(&t->ring, &q, 1, &ts, NULL);
        }
        if (rc < 0 && rc != -ETIME && rc != -EAGAIN && rc != -EINTR && rc != -EBUSY)
            return tp_fail(e, rc, "io_uring: %s", strerror(-rc));
        /* Every completion is reaped before any kept event goes up, so
         * that what came in is never stuck behind a backlog of SENTs. */
        rc = 0;
        io_uring_for_each_cqe(&t->ring, head, q) {
            if ((rc = cqe_take(t, q)) != 0)
                break;
            seen++;
        }
        io_uring_cq_advance(&t->ring, seen);
        if (rc != 0)
            return tp_fail(e, rc, "out of memory");
        if (seen)
            io_uring_submit(&t->ring);
        n = take_later(t, ev, 0, max);
        if (n > 0 || t->woke || kvs__now_ns() >= deadline_ns) {
            t->woke = 0;
            return n;
        }
    }
}

static void uring_close(struct kvs_transport *t)
{
    int64_t deadline = kvs__now_ns() + 1000000000ll;
    int busy;

    if (!t)
        return;
    for (int i = 0; i < t->nconn; i++)
        uring_drop(t, i);
    uring_wake(t);                     /* its read in flight completes */
    /* The kernel gives back what the drops cancelled; a buffer goes only
     * then (at worst, after a second, the ring's exit waits for them). */
    do {
        struct io_uring_cqe *q;
        struct __kernel_timespec ts = { .tv_nsec = 10000000 };
        unsigned head, seen = 0;

        io_uring_submit_and_wait_timeout(&t->ring, &q, 1, &ts, NULL);
        io_uring_for_each_cqe(&t->ring, head, q) {
            cqe_take(t, q);
            seen++;
        }
        io_uring_cq_advance(&t->ring, seen);
        busy = t->wake_armed;
        for (int i = 0; i < t->nconn; i++)
            busy |= t->c[i].fd >= 0;
    } while (busy && kvs__now_ns() < deadline);
    io_uring_queue_exit(&t->ring);
    close(t->wake);
    for (int i = 0; i < t->nconn; i++)
        if (t->c[i].fd >= 0) {
            t->c[i].recv_busy = t->c[i].send_busy = 0;
            t->c[i].notifs = 0;
            reap_dying(&t->c[i]);
        }
    if (t->br)
        munmap(t->br, t->pbuf_map);
    free(t->c);
    tp_later_free(&t->later);
    free(t);
}

const struct kvs_transport_ops kvs__tp_uring = {
    .version = KVS_TRANSPORT_VERSION,
    .size = sizeof(struct kvs_transport_ops),
    .name = "uring",
    .open = uring_open,
    .close = uring_close,
    .adopt = uring_adopt,
    .send = uring_send,
    .wait = uring_wait,
    .drop = uring_drop,
    .wake = uring_wake,
};
