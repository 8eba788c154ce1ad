/*
 * tp_ucx.c - the "ucx" transport plug-in (kvs-transport.h): frames between
 * hosts through UCX's UCP layer, whose transports (TCP, shared memory,
 * InfiniBand and RoCE verbs) UCX picks, as UCX_TLS allows. Built as
 * kvs-transport-ucx.so; kvsd loads it for KVS_TRANSPORT=ucx and never
 * links UCX itself.
 *
 * Reaching a peer: adopt takes the TCP socket kvsd authenticated with the
 * job's secret and swaps over it, with the peer, this worker's UCP address
 * and a random token for the connection. An endpoint is made to that
 * address only; every message carries the token its receiver chose, and
 * one without the right token is dropped, so that nothing reaches kvsd
 * from a peer that did not come through the handshake. No UCP listener
 * is opened. The socket stays open, unused, as a second sign of a peer's
 * death: its end is reported once UCX has had a moment to deliver what
 * the peer sent before it (UCX's own error, in order after the data, ends
 * the connection at once).
 *
 * Moving bytes: each send is one active message, whose header says the
 * token, the receiver's id of the connection and the send's place in the
 * connection's order. UCX sends small ones eagerly and big ones by
 * rendezvous, which moves the data straight from the sender's buffer into
 * the receiver's (zero-copy where the fabric can). UCX may complete
 * messages out of order; receives are handed up, and sends reported
 * SENT, in each connection's order.
 *
 * Waiting: the loop sleeps in epoll on UCX's event fd (armed before each
 * sleep), the wake-up eventfd and the sockets; no thread spins on
 * ucp_worker_progress.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "kvs-transport.h"
#include "tp_util.h"

#define AM_ID          7               /* the active message id of kvs frames */
#define HELLO_MAGIC    0x3158435553564b4bull  /* "KKVSUCX1" */
#define ADDR_MAX       (64 * 1024)     /* a UCP worker address, at most */
#define EFD_ID         (UINT32_MAX - 1)/* epoll data: UCX's event fd */
#define WAKE_ID        UINT32_MAX      /* epoll data: the wake-up eventfd */
#define EOF_GRACE_NS   (500 * 1000000ll)/* a socket's end to CLOSED, at most */
#define FLUSH_NS       (200 * 1000000ll)/* a dropped link's sends to leave, at most */
/* Receives held while one before them is still coming: a rendezvous
 * lets thousands of small messages pass it. kvsd keeps a few MiB in flight
 * per link, which bounds this far below; past it the peer is broken. */
#define REORDER_MAX    (1u << 20)

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* What each message carries before its bytes. */
struct hdr {
    uint64_t token;                    /* the receiver's token of the connection */
    uint32_t conn;                     /* the receiver's id of it */
    uint32_t zero;
    uint64_t seq;                      /* its place among the connection's sends */
};

/* A send in flight, in its connection's queue. */
struct tx {
    struct tx *next;
    struct hdr hdr;                    /* UCX reads it until the send completes */
    uint64_t token;                    /* the caller's */
    int done;                          /* 1: completed, 2: failed */
    int orphan;                        /* its connection was dropped: freed at completion */
};

/* A message received, or being received, in its connection's order. */
struct rx {
    struct rx *next;
    struct rx *fnext;                  /* in the list of rendezvous to start */
    uint64_t seq;
    size_t len;
    unsigned char *buf;                /* ours (malloc), or UCX's (desc) */
    void *desc;                        /* UCX's data to release, or a rendezvous' to fetch */
    int fetch;                         /* a rendezvous not started yet */
    int done;                          /* 1: the bytes are in buf, 2: failed */
    int orphan;
    int conn;
};

struct conn {
    int fd;                            /* -1: a free slot; else the TCP socket */
    int closed;                        /* CLOSED reported or queued */
    int64_t eof_at;                    /* when the socket ended; 0: it has not */
    int eof_status;
    ucp_ep_h ep;
    uint64_t my_token, peer_token;
    uint32_t peer_id;                  /* the peer's id of this connection */
    uint64_t send_seq, recv_seq;       /* the next to send; the next to hand up */
    struct tx *tx_head, *tx_tail;
    struct rx *rx, *rx_last;           /* sorted by seq */
    size_t nrx;
};

struct kvs_transport {
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd, ep_fd, wake;              /* UCX's event fd, epoll, the wake-up eventfd */
    struct conn *c;
    int nconn;
    struct tp_later later;
    struct rx *pend, **pend_tail;      /* whose RECVs wait in later, in its order */
    struct rx *handed;                 /* handed up by the last wait: freed by the next */
    struct rx *fetchq;                 /* rendezvous announced, not started yet */
    int woke;
};

static struct conn *conn_get(struct kvs_transport *t, int id)
{
    return id >= 0 && id < t->nconn && t->c[id].fd >= 0 ? &t->c[id] : NULL;
}

static int ucs_fail(struct kvs_transport_error *e, const char *what, ucs_status_t st)
{
    return tp_fail(e, st == UCS_ERR_NO_MEMORY ? -ENOMEM : -EIO, "%s: %s", what,
                   ucs_status_string(st));
}

/* ---- events ------------------------------------------------------------- */

/* conn ended: its CLOSED goes up once. */
static void conn_closed(struct kvs_transport *t, int id, int status)
{
    struct conn *c = &t->c[id];

    if (c->closed)
        return;
    c->closed = 1;
    tp_later_add(&t->later, (struct kvs_transport_event){ .type = KVS_TRANSPORT_CLOSED,
                                                          .conn = id, .status = status });
}

/* A receive's bytes go back: UCX's descriptor (data kept, or a rendezvous
 * never fetched), or our buffer. */
static void rx_free(struct kvs_transport *t, struct rx *r)
{
    if (r->desc)
        ucp_am_data_release(t->worker, r->desc);
    else
        free(r->buf);
    free(r);
}

/* Moves kept events into ev[n..max); the receives whose RECVs went move
 * to the handed list, freed by the next wait. Returns the new n. */
static int take(struct kvs_transport *t, struct kvs_transport_event *ev, int n, int max)
{
    int m = tp_later_take(&t->later, ev, n, max);

    for (int i = n; i < m; i++) {
        struct rx *r = t->pend;

        if (ev[i].type != KVS_TRANSPORT_RECV || !r)
            continue;
        if (!(t->pend = r->next))
            t->pend_tail = &t->pend;
        r->next = t->handed;
        t->handed = r;
    }
    return m;
}

/* Frees the receives handed up by the last wait. */
static void handed_free(struct kvs_transport *t)
{
    while (t->handed) {
        struct rx *r = t->handed;

        t->handed = r->next;
        rx_free(t, r);
    }
}

/* Forgets conn's kept events, and frees the receives among them. */
static void forget(struct kvs_transport *t, int id)
{
    struct rx **at = &t->pend;

    while (*at) {
        struct rx *r = *at;

        if (r->conn == id) {
            *at = r->next;
            rx_free(t, r);
        } else {
            at = &r->next;
        }
    }
    t->pend_tail = at;
    tp_later_forget(&t->later, id);
}

/* Sends done at the head of each queue go up as SENT, in order; receives
 * that come next in order go up as RECV. */
static void deliver(struct kvs_transport *t)
{
    for (int id = 0; id < t->nconn; id++) {
        struct conn *c = &t->c[id];

        if (c->fd < 0)
            continue;
        while (c->tx_head && c->tx_head->done) {
            struct tx *x = c->tx_head;

            if (!(c->tx_head = x->next))
                c->tx_tail = NULL;
            if (x->done == 2)
                conn_closed(t, id, -ECONNRESET);
            else if (!c->closed)
                tp_later_add(&t->later, (struct kvs_transport_event){
                    .type = KVS_TRANSPORT_SENT, .conn = id, .token = x->token });
            free(x);
        }
        while (c->rx && c->rx->seq == c->recv_seq && c->rx->done) {
            struct rx *r = c->rx;

            if (!(c->rx = r->next))
                c->rx_last = NULL;
            c->nrx--;
            c->recv_seq++;
            if (r->done == 2 || c->closed) {
                conn_closed(t, id, -ECONNRESET);
                rx_free(t, r);
                continue;
            }
            r->next = NULL;
            *t->pend_tail = r;
            t->pend_tail = &r->next;
            tp_later_add(&t->later, (struct kvs_transport_event){
                .type = KVS_TRANSPORT_RECV, .conn = id, .data = r->buf, .len = r->len });
        }
    }
}

/* ---- UCX's callbacks (inside ucp_worker_progress) ----------------------- */

static void sent_cb(void *req, ucs_status_t st, void *arg)
{
    struct tx *x = arg;

    x->done = st == UCS_OK ? 1 : 2;
    if (x->orphan)
        free(x);
    ucp_request_free(req);
}

static void fetched_cb(void *req, ucs_status_t st, size_t len, void *arg)
{
    struct rx *r = arg;

    r->done = st == UCS_OK && len == r->len ? 1 : 2;
    if (r->orphan) {
        free(r->buf);
        free(r);
    }
    ucp_request_free(req);
}

static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    struct kvs_transport *t = arg;

    (void)st;
    for (int id = 0; id < t->nconn; id++)
        if (t->c[id].fd >= 0 && t->c[id].ep == ep)
            conn_closed(t, id, -ECONNRESET);
}

/* A message: checked, then kept in its connection's order. Nothing in it
 * is trusted: a header that does not name a connection with its token is
 * dropped, as is a message out of any order the sender could make. */
static ucs_status_t am_recv(void *arg, const void *header, size_t hlen, void *data, size_t len,
                            const ucp_am_recv_param_t *p)
{
    struct kvs_transport *t = arg;
    int rndv = !!(p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
    struct hdr h;
    struct conn *c;
    struct rx *r, **at;

    if (hlen != sizeof h || !header || len == 0)
        return UCS_OK;
    memcpy(&h, header, sizeof h);
    if (h.conn > INT32_MAX || !(c = conn_get(t, (int)h.conn)) || h.token != c->my_token
        || h.zero != 0)
        return UCS_OK;
    if (c->closed)
        return UCS_OK;
    if (h.seq < c->recv_seq || h.seq - c->recv_seq >= REORDER_MAX || c->nrx >= REORDER_MAX) {
        conn_closed(t, (int)h.conn, KVS_EPROTO);
        return UCS_OK;
    }
    /* In order, as nearly all come: at the end, without a walk. */
    if (!c->rx_last || c->rx_last->seq < h.seq)
        at = c->rx_last ? &c->rx_last->next : &c->rx;
    else
        for (at = &c->rx; *at && (*at)->seq < h.seq; at = &(*at)->next)
            ;
    if (*at && (*at)->seq == h.seq) {
        conn_closed(t, (int)h.conn, KVS_EPROTO);
        return UCS_OK;
    }
    if (!(r = calloc(1, sizeof *r))) {
        conn_closed(t, (int)h.conn, -ENOMEM);
        return UCS_OK;
    }
    r->seq = h.seq;
    r->len = len;
    r->conn = (int)h.conn;
    if (rndv) {                        /* fetched once this callback returned */
        r->desc = data;
        r->fetch = 1;
        r->fnext = t->fetchq;
        t->fetchq = r;
    } else if (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        r->desc = r->buf = data;       /* UCX's, kept until handed up and done with */
        r->done = 1;
    } else if ((r->buf = malloc(len)) != NULL) {
        memcpy(r->buf, data, len);
        r->done = 1;
    } else {
        free(r);
        conn_closed(t, (int)h.conn, -ENOMEM);
        return UCS_OK;
    }
    r->next = *at;
    *at = r;
    if (!r->next)
        c->rx_last = r;
    c->nrx++;
    return r->desc ? UCS_INPROGRESS : UCS_OK;
}

/* Starts the rendezvous receives progress announced, each straight into
 * a buffer of its own. */
static void fetch(struct kvs_transport *t)
{
    while (t->fetchq) {
        struct rx *r = t->fetchq;
        ucp_request_param_t prm = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.recv_am = fetched_cb,
            .user_data = r,
        };
        void *desc = r->desc, *req;

        t->fetchq = r->fnext;
        r->fetch = 0;
        r->desc = NULL;
        if (!(r->buf = malloc(r->len))) {
            ucp_am_data_release(t->worker, desc);
            r->done = 2;
            continue;
        }
        req = ucp_am_recv_data_nbx(t->worker, desc, r->buf, r->len, &prm);
        if (UCS_PTR_IS_ERR(req))
            r->done = 2;
        else if (!req)
            r->done = 1;
    }
}

/* Runs UCX until it has nothing to do, starting each rendezvous as soon as
 * it is announced (a stream of small messages must not hold it up), then
 * hands up what is in order. */
static void progress(struct kvs_transport *t)
{
    unsigned did;

    do {
        did = ucp_worker_progress(t->worker);
        fetch(t);
    } while (did);
    deliver(t);
}

/* Waits, progressing, until req completes or deadline_ns; frees it. */
static void req_wait(struct kvs_transport *t, void *req, int64_t deadline_ns)
{
    if (!req || UCS_PTR_IS_ERR(req))
        return;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && now_ns() < deadline_ns)
        ucp_worker_progress(t->worker);
    ucp_request_free(req);             /* if still in flight, UCX finishes it alone */
}

/* Ends ep: what it sent first leaves (a live peer's, within FLUSH_NS),
 * then a forced close, which never waits for the peer. UCX wants close
 * requests released, never kept past a failure of their endpoint. */
static void ep_end(struct kvs_transport *t, ucp_ep_h ep, int live)
{
    ucp_request_param_t force = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE };
    ucp_request_param_t none = { .op_attr_mask = 0 };
    void *req;

    if (live)
        req_wait(t, ucp_ep_flush_nbx(ep, &none), now_ns() + FLUSH_NS);
    req = ucp_ep_close_nbx(ep, &force);
    if (req && !UCS_PTR_IS_ERR(req))
        ucp_request_free(req);
}

/* ---- the ops ------------------------------------------------------------ */

static void ucx_close(struct kvs_transport *t);

static int ucx_open(struct kvs_transport **out, struct kvs_transport_error *e)
{
    ucp_params_t pp = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .name = "kvsd",
    };
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,   /* opened on one thread, run on another */
    };
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS
                      | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = am_recv,
    };
    struct epoll_event ev = { .events = EPOLLIN };
    struct kvs_transport *t = calloc(1, sizeof *t);
    ucp_config_t *cfg;
    ucs_status_t st;
    int rc;

    if (!t)
        return tp_fail(e, -ENOMEM, "out of memory");
    t->efd = t->ep_fd = t->wake = -1;
    t->pend_tail = &t->pend;
    ap.arg = t;
    if ((st = ucp_config_read(NULL, NULL, &cfg)) != UCS_OK) {
        rc = ucs_fail(e, "ucp_config_read", st);
        goto fail;
    }
    st = ucp_init(&pp, cfg, &t->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        t->ctx = NULL;
        rc = ucs_fail(e, "ucp_init", st);
        goto fail;
    }
    if ((st = ucp_worker_create(t->ctx, &wp, &t->worker)) != UCS_OK) {
        t->worker = NULL;
        rc = ucs_fail(e, "ucp_worker_create", st);
        goto fail;
    }
    if ((st = ucp_worker_set_am_recv_handler(t->worker, &ap)) != UCS_OK) {
        rc = ucs_fail(e, "ucp_worker_set_am_recv_handler", st);
        goto fail;
    }
    if ((st = ucp_worker_get_efd(t->worker, &t->efd)) != UCS_OK) {
        t->efd = -1;
        rc = ucs_fail(e, "ucp_worker_get_efd (UCX's transports here cannot wake a sleeper)", st);
        goto fail;
    }
    if ((t->ep_fd = epoll_create1(EPOLL_CLOEXEC)) < 0
        || (t->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        rc = tp_fail(e, -errno, "epoll: %s", strerror(errno));
        goto fail;
    }
    ev.data.u32 = EFD_ID;
    if (epoll_ctl(t->ep_fd, EPOLL_CTL_ADD, t->efd, &ev) != 0) {
        rc = tp_fail(e, -errno, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    ev.data.u32 = WAKE_ID;
    if (epoll_ctl(t->ep_fd, EPOLL_CTL_ADD, t->wake, &ev) != 0) {
        rc = tp_fail(e, -errno, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    *out = t;
    return 0;
fail:
    ucx_close(t);
    return rc;
}

static void ucx_wake(struct kvs_transport *t)
{
    uint64_t one = 1;
    ssize_t w = write(t->wake, &one, sizeof one);  /* EAGAIN: pending already */

    (void)w;
}

/* Writes or reads len bytes of fd (blocking) before deadline_ns. */
static int io_all(int fd, void *p, size_t len, int out, int64_t deadline_ns)
{
    unsigned char *b = p;

    while (len > 0) {
        struct pollfd pf = { fd, out ? POLLOUT : POLLIN, 0 };
        int64_t left = deadline_ns - now_ns();
        ssize_t n;

        if (left <= 0)
            return -ETIMEDOUT;
        if (poll(&pf, 1, (int)(left / 1000000 + 1)) < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (!pf.revents)
            continue;
        n = out ? send(fd, b, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, b, len, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ECONNRESET;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/* What each end of a connection says first, over the authenticated socket. */
struct hello {
    uint64_t magic;
    uint64_t token;                    /* the sender's, for the messages it receives */
    uint32_t conn;                     /* the sender's id of the connection */
    uint32_t addr_len;                 /* then the sender's UCP address */
};

static int ucx_adopt(struct kvs_transport *t, int fd, int64_t deadline_ns, int *id,
                     struct kvs_transport_error *e)
{
    ucp_ep_params_t epp = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                      | UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = { .cb = ep_failed, .arg = t },
    };
    struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
    struct hello mine = { .magic = HELLO_MAGIC }, theirs;
    ucp_address_t *addr = NULL;
    unsigned char *peer = NULL;
    size_t alen = 0;
    ucs_status_t st;
    int i, rc, fl;
    struct conn *c;

    if ((i = tp_slot((void **)&t->c, &t->nconn, sizeof *t->c)) < 0) {
        close(fd);
        return tp_fail(e, i, "no room for connection %d", t->nconn);
    }
    c = &t->c[i];
    *c = (struct conn){ .fd = -1 };
    if (getrandom(&c->my_token, sizeof c->my_token, 0) != sizeof c->my_token) {
        rc = tp_fail(e, -EIO, "getrandom: %s", strerror(errno));
        goto fail;
    }
    if ((st = ucp_worker_get_address(t->worker, &addr, &alen)) != UCS_OK) {
        rc = ucs_fail(e, "ucp_worker_get_address", st);
        goto fail;
    }
    mine.token = c->my_token;
    mine.conn = (uint32_t)i;
    mine.addr_len = (uint32_t)alen;
    if ((rc = io_all(fd, &mine, sizeof mine, 1, deadline_ns)) != 0
        || (rc = io_all(fd, addr, alen, 1, deadline_ns)) != 0
        || (rc = io_all(fd, &theirs, sizeof theirs, 0, deadline_ns)) != 0) {
        rc = tp_fail(e, rc, "swapping UCX addresses with the peer: %s%s", strerror(-rc),
                     rc == -ECONNRESET ? " (is its kvsd on another transport? KVS_TRANSPORT "
                     "must be the same on every host)" : "");
        goto fail;
    }
    if (theirs.magic != HELLO_MAGIC || theirs.addr_len == 0 || theirs.addr_len > ADDR_MAX
        || theirs.conn > INT32_MAX) {
        rc = tp_fail(e, KVS_EPROTO, "the peer does not speak the ucx transport (is its kvsd "
                     "on another transport? KVS_TRANSPORT must be the same on every host)");
        goto fail;
    }
    if (!(peer = malloc(theirs.addr_len))) {
        rc = tp_fail(e, -ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = io_all(fd, peer, theirs.addr_len, 0, deadline_ns)) != 0) {
        rc = tp_fail(e, rc, "reading the peer's UCX address: %s", strerror(-rc));
        goto fail;
    }
    epp.address = (const ucp_address_t *)peer;
    if ((st = ucp_ep_create(t->worker, &epp, &c->ep)) != UCS_OK) {
        c->ep = NULL;
        rc = ucs_fail(e, "ucp_ep_create", st);
        goto fail;
    }
    fl = fcntl(fd, F_GETFL);
    ev.data.u32 = (uint32_t)i;
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0
        || epoll_ctl(t->ep_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        rc = tp_fail(e, -errno, "epoll_ctl: %s", strerror(errno));
        goto fail;
    }
    c->peer_token = theirs.token;
    c->peer_id = theirs.conn;
    c->fd = fd;
    ucp_worker_release_address(t->worker, addr);
    free(peer);
    *id = i;
    return 0;
fail:
    if (c->ep)
        ep_end(t, c->ep, 0);
    *c = (struct conn){ .fd = -1 };
    if (addr)
        ucp_worker_release_address(t->worker, addr);
    free(peer);
    close(fd);
    return rc;
}

static int ucx_send(struct kvs_transport *t, int id, const void *buf, size_t len, uint64_t token,
                    struct kvs_transport_error *e)
{
    struct conn *c = conn_get(t, id);
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = sent_cb,
    };
    struct tx *x;
    void *req;

    if (!c || !buf || len == 0)
        return tp_fail(e, KVS_EBADARG, "send: connection %d, %zu bytes", id, len);
    if (c->closed)
        return tp_fail(e, -ENOTCONN, "send: connection %d is closed", id);
    if (!(x = calloc(1, sizeof *x)))
        return tp_fail(e, -ENOMEM, "out of memory");
    x->hdr = (struct hdr){ .token = c->peer_token, .conn = c->peer_id, .seq = c->send_seq++ };
    x->token = token;
    prm.user_data = x;
    if (c->tx_tail)
        c->tx_tail->next = x;
    else
        c->tx_head = x;
    c->tx_tail = x;
    req = ucp_am_send_nbx(c->ep, AM_ID, &x->hdr, sizeof x->hdr, buf, len, &prm);
    if (!req)
        x->done = 1;                   /* gone at once; SENT at the next wait */
    else if (UCS_PTR_IS_ERR(req))
        x->done = 2;                   /* the connection's end, at the next wait */
    return 0;
}

/* The socket said something: its end (or bytes it should never carry). */
static void sock_event(struct kvs_transport *t, int id)
{
    struct conn *c = conn_get(t, id);
    unsigned char b[64];
    ssize_t n;

    if (!c || c->eof_at)
        return;
    n = recv(c->fd, b, sizeof b, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    c->eof_status = n == 0 ? 0 : n > 0 ? KVS_EPROTO : -errno;
    c->eof_at = now_ns();
    epoll_ctl(t->ep_fd, EPOLL_CTL_DEL, c->fd, NULL);
}

/* Sockets that ended a grace ago: their connections' CLOSED. Returns the
 * earliest time one is still due, or INT64_MAX. */
static int64_t grace(struct kvs_transport *t, int64_t now)
{
    int64_t next = INT64_MAX;

    for (int id = 0; id < t->nconn; id++) {
        struct conn *c = &t->c[id];

        if (c->fd < 0 || !c->eof_at || c->closed)
            continue;
        if (now - c->eof_at >= EOF_GRACE_NS)
            conn_closed(t, id, c->eof_status);
        else if (c->eof_at + EOF_GRACE_NS < next)
            next = c->eof_at + EOF_GRACE_NS;
    }
    return next;
}

static int ucx_wait(struct kvs_transport *t, struct kvs_transport_event *ev, int max,
                    int64_t deadline_ns, struct kvs_transport_error *e)
{
    int n = 0;

    if (max <= 0)
        return tp_fail(e, KVS_EBADARG, "wait: room for %d events", max);
    handed_free(t);                    /* the last wait's RECVs are done with */
    for (;;) {
        struct epoll_event ready[64];
        int64_t now, until;
        ucs_status_t st;
        int got, ms;

        progress(t);
        now = now_ns();
        until = grace(t, now);
        n = take(t, ev, n, max);
        if (n > 0 || t->woke || now >= deadline_ns) {
            t->woke = 0;
            return n;
        }
        /* Armed, UCX's fd wakes epoll for anything that comes from here
         * on; busy: something came since the progress, go again. */
        if ((st = ucp_worker_arm(t->worker)) == UCS_ERR_BUSY)
            continue;
        if (st != UCS_OK)
            return ucs_fail(e, "ucp_worker_arm", st);
        if (until > deadline_ns)
            until = deadline_ns;
        ms = until - now > 1000000000ll ? 1000 : (int)((until - now + 999999) / 1000000);
        if ((got = epoll_wait(t->ep_fd, ready, (int)(sizeof ready / sizeof ready[0]), ms)) < 0) {
            if (errno == EINTR)
                continue;
            return tp_fail(e, -errno, "epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < got; i++) {
            uint64_t v;

            if (ready[i].data.u32 == WAKE_ID) {
                ssize_t r = read(t->wake, &v, sizeof v);   /* resets it */

                (void)r;
                t->woke = 1;
            } else if (ready[i].data.u32 != EFD_ID) {
                sock_event(t, (int)ready[i].data.u32);
            }
        }
    }
}

static void ucx_drop(struct kvs_transport *t, int id)
{
    struct conn *c = conn_get(t, id);

    if (!c)
        return;
    for (struct tx *x = c->tx_head, *next; x; x = next) {
        next = x->next;
        if (x->done)
            free(x);
        else
            x->orphan = 1;             /* the close cancels it; its callback frees it */
    }
    for (struct rx **q = &t->fetchq; *q;)
        if ((*q)->conn == id)
            *q = (*q)->fnext;          /* its descriptor goes in rx_free, below */
        else
            q = &(*q)->fnext;
    for (struct rx *r = c->rx, *next; r; r = next) {
        next = r->next;
        if (!r->fetch && r->buf && !r->done)
            r->orphan = 1;             /* a rendezvous in flight: its callback frees it */
        else
            rx_free(t, r);
    }
    /* A connection that ended gets no flush: its peer would not answer. */
    ep_end(t, c->ep, !c->closed && !c->eof_at);
    epoll_ctl(t->ep_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    *c = (struct conn){ .fd = -1 };
    forget(t, id);
}

static void ucx_close(struct kvs_transport *t)
{
    int64_t deadline = now_ns() + 1000000000ll;

    if (!t)
        return;
    for (int id = 0; id < t->nconn; id++)
        ucx_drop(t, id);               /* and their RECVs still kept (forget) */
    handed_free(t);
    if (t->worker) {
        /* What the forced closes left to UCX, within the bound. */
        while (ucp_worker_progress(t->worker) && now_ns() < deadline)
            ;
        ucp_worker_destroy(t->worker);
    }
    if (t->ctx)
        ucp_cleanup(t->ctx);
    if (t->ep_fd >= 0)
        close(t->ep_fd);
    if (t->wake >= 0)
        close(t->wake);
    free(t->c);
    tp_later_free(&t->later);
    free(t);
}

static const struct kvs_transport_ops ops = {
    .version = KVS_TRANSPORT_VERSION,
    .size = sizeof(struct kvs_transport_ops),
    .name = "ucx",
    .open = ucx_open,
    .close = ucx_close,
    .adopt = ucx_adopt,
    .send = ucx_send,
    .wait = ucx_wait,
    .drop = ucx_drop,
    .wake = ucx_wake,
};

__attribute__((visibility("default"))) const struct kvs_transport_ops *kvs_transport_entry(void)
{
    return &ops;
}
