/*
 * accept.c - the socket thread: it accepts connections on the job's
 * socket, checks the peer's uid before anything is sent, and runs the
 * handshake that gives a worker its slot and segment (rings, staging) and
 * the control and arena descriptors; a connection that opens with a control
 * request goes to control.c instead. It watches every live worker's socket:
 * one that closes without a CLOSE request marks its worker hup and rings
 * the daemon's doorbell.
 *
 * It must never look at the engine, the rounds, the requests or the
 * counters, and never touch a worker the serve thread owns: it fills only
 * a FREE slot, and once the worker is LIVE sets nothing in it but hup. It
 * never sends a byte to a client of another uid, and every wait has a
 * deadline.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "accept.h"
#include "arena.h"
#include "combined.h"
#include "control.h"
#include "remote.h"
#include "tracing.h"

#include "shm/shm.h"

/* ---- the handshake (socket thread) ------------------------------------ */

static int refuse(int fd, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(int fd, int status, const char *fmt, ...)
{
    struct kvs__welcome w = { .version = KVS__PROTO_VERSION, .status = status,
                              .resume_step = -1 };
    unsigned char buf[KVS__WELCOME_BYTES];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(w.msg, sizeof w.msg, fmt, ap);
    va_end(ap);
    kvs__sock_send(fd, buf, kvs__welcome_encode(&w, buf), NULL, 0,
                   kvs__now_ns() + HANDSHAKE_NS, NULL);
    return status;
}

/* The worker of hello h, on fd, admitted to its slot: the job, its size
 * and mode, and its rank checked, the slot free. Its index, or -1 when
 * refused (told on fd). */
static int admit(struct daemon *d, int fd, const struct kvs__hello *h)
{
    int wi, st;

    if (strcmp(h->job, d->o.job) != 0) {
        refuse(fd, KVS_EBADARG, "this kvsd serves job '%s', not '%s'", d->o.job, h->job);
        return -1;
    }
    pthread_mutex_lock(&d->lock);
    if (d->nworkers == 0)
        d->nworkers = d->total = h->nworkers;
    if (d->sync < 0)
        d->sync = h->mode == KVS__MODE_SYNC;
    cb_join(d);
    if (h->nworkers != d->total || d->sync != (h->mode == KVS__MODE_SYNC)) {
        pthread_mutex_unlock(&d->lock);
        refuse(fd, KVS_EBADARG, "the job has %d workers in %s mode; this worker says %d, %s",
               d->total, d->sync ? "sync" : "async", h->nworkers,
               h->mode == KVS__MODE_SYNC ? "sync" : "async");
        return -1;
    }
    /* Across hosts, this host serves ranks rank0 .. rank0 + nworkers - 1. */
    if (h->rank < d->rank0 || h->rank >= d->rank0 + d->nworkers) {
        pthread_mutex_unlock(&d->lock);
        refuse(fd, KVS_EBADARG, "rank %d is not one of this host's ranks %d..%d", h->rank,
               d->rank0, d->rank0 + d->nworkers - 1);
        return -1;
    }
    wi = h->rank - d->rank0;
    if ((st = atomic_load(&d->workers[wi].state)) != W_FREE) {
        pthread_mutex_unlock(&d->lock);
        if (st == W_LEFT)
            refuse(fd, KVS_EBADARG, "rank %d left the job (kvs_close); a worker joins a job "
                   "once", h->rank);
        else if (st == W_DEAD)
            refuse(fd, KVS_EBADARG, "rank %d died or was evicted: the job has failed", h->rank);
        else
            refuse(fd, KVS_EBADARG, "rank %d has already joined job '%s' (is another job "
                   "running under that name? kvsrun -j names a job)", h->rank, d->o.job);
        return -1;
    }
    pthread_mutex_unlock(&d->lock);
    return wi;
}

/* Worker w's segment, made and mapped (its descriptor in *seg_fd), its
 * rings attached, the rest of its slot cleared. 0, or -1 (e says why, and
 * the status to refuse it with). */
static int make_segment(struct daemon *d, struct worker *w, int *seg_fd, struct kvs__err *e)
{
    const struct kvs__worker_layout l = d->wl;

    w->sock = -1;
    w->hup = 0;
    w->batch = NULL;
    w->backlog = NULL;
    w->backlog_head = w->backlog_len = w->backlog_cap = 0;
    w->batch_len = 0;
    /* The worker gets a writable descriptor: sealed against resizing, or
     * it could shrink the segment under kvsd's mapping, and kvsd's next
     * read of its rings or of push data waiting in a round would fault. */
    if (kvs__memfd_new("kvs-worker", l.size, KVS__SEAL_SIZE, seg_fd, e) != 0
        || kvs__map(*seg_fd, l.size, 1, &w->seg, e) != 0)
        return -1;
    w->seg_size = l.size;
    arena_head_init(w->seg, KVS__SEG_WORKER, l.size);
    w->bell = (struct kvs__bell *)((char *)w->seg + KVS__WORKER_BELL_OFF);
    /* setup() checked this geometry through kvs__worker_layout. */
    if (kvs__ring_attach(&w->sq, (char *)w->seg + l.sq_off, d->o.sq_entries,
                         KVS__SQE_BYTES, 1) != 0
        || kvs__ring_attach(&w->cq, (char *)w->seg + l.cq_off, d->o.cq_entries,
                            KVS__CQE_BYTES, 1) != 0) {
        kvs__unmap(w->seg, w->seg_size);
        w->seg = NULL;
        kvs__fail(e, KVS_EPROTO, "kvsd: bad ring geometry");
        return -1;
    }
    w->staging = (unsigned char *)w->seg + l.staging_off;
    w->staging_size = l.staging_size;
    w->batch_tail = &w->batch;
    return 0;
}

/* Sends worker wi its welcome (flags: KVS__WELCOME_*) with the segments'
 * descriptors. 0, or -1 when it could not be sent. */
static int welcome(struct daemon *d, int fd, int wi, int seg_fd, uint32_t flags,
                   struct kvs__err *e)
{
    unsigned char buf[KVS__WELCOME_BYTES];
    struct kvs__welcome wel = { .version = KVS__PROTO_VERSION, .flags = flags,
                                .resume_step = d->resume_step };
    const struct kvs__worker_layout l = d->wl;
    int fds[4], nfds;
    size_t len;

    if (d->o.recover)
        wel.flags |= KVS__WELCOME_RECOVER;
    wel.worker = (uint32_t)wi;
    wel.control_size = KVS__CONTROL_SIZE;
    wel.seg_size = l.size;
    wel.arena_size = d->o.arena;
    wel.sq_entries = d->o.sq_entries;
    wel.cq_entries = d->o.cq_entries;
    wel.staging_off = l.staging_off;
    wel.staging_size = l.staging_size;
    fds[0] = d->ctl_fd;
    fds[1] = seg_fd;
    fds[2] = d->arena_ro_fd;
    nfds = 3 + cb_welcome(d, &wel, &fds[3]);
    len = kvs__welcome_encode(&wel, buf);
    return kvs__sock_send(fd, buf, len, fds, nfds, kvs__now_ns() + HANDSHAKE_NS, e) != 0 ? -1
                                                                                     : 0;
}

static void handshake(struct daemon *d, int fd)
{
    unsigned char buf[KVS__WELCOME_BYTES + KVS__HELLO_BYTES];   /* either message */
    struct kvs__err e = { 0, "" };
    struct kvs__hello h;
    struct worker *w;
    uint32_t flags = 0;
    uid_t uid;
    pid_t pid;
    size_t len;
    int seg_fd = -1, nfds, wi;

    if (kvs__sock_peer(fd, &uid, &pid, &e) != 0 || uid != geteuid()) {
        say(d, "refused a client of uid %d", (int)uid);
        goto drop;                     /* nothing is sent to another user */
    }
    if (kvs__sock_recv(fd, buf, sizeof buf, &len, NULL, 0, &nfds, kvs__now_ns() + HANDSHAKE_NS,
                       &e) != 0)
        goto drop;
    if (kvs__msg_type(buf, len) == KVS__MSG_CTL_REQUEST) {
        control_accept(d, fd, buf, len, pid);
        return;
    }
    if (kvs__hello_decode(buf, len, &h, &e) != 0) {
        refuse(fd, KVS_EPROTO, "%s", e.msg);
        goto drop;
    }
    if ((wi = admit(d, fd, &h)) < 0)
        goto drop;
    /* The slot is FREE, so the serve thread does not look inside it until
     * the state turns LIVE below (a release store). */
    w = &d->workers[wi];
    if (make_segment(d, w, &seg_fd, &e) != 0) {
        refuse(fd, e.code, "%s", e.msg);
        goto drop;
    }
    w->rank = h.rank;
    w->pid = pid;
    if (remote_probe(d, w, pid, h.probe, h.cookie))
        flags |= KVS__WELCOME_REMOTE;
    if (welcome(d, fd, wi, seg_fd, flags, &e) != 0) {
        kvs__unmap(w->seg, w->seg_size);
        w->seg = NULL;
        remote_close(w);
        goto drop;
    }
    close(seg_fd);
    w->sock = fd;
    /* The socket thread alone writes nslots: no lost update. */
    if (wi >= atomic_load(&d->nslots))
        atomic_store(&d->nslots, wi + 1);
    atomic_store(&w->state, W_LIVE);
    atomic_fetch_add(&d->connected, 1);
    say(d, "rank %d (pid %d) joined", w->rank, (int)pid);
    trace_worker(w, KVS__TR_JOINED, NULL);
    kvs__bell_ring(d->bell);
    return;

drop:
    if (seg_fd >= 0)
        close(seg_fd);
    close(fd);
}

/* Accepts workers and watches their sockets until told to stop. */
void *accept_thread(void *arg)
{
    struct daemon *d = arg;
    struct pollfd p[MAX_WORKERS + 1];
    int who[MAX_WORKERS + 1];

    while (!stop_signal) {
        int n = 0, fd;

        p[n++] = (struct pollfd){ .fd = d->listen_fd, .events = POLLIN };
        /* The serve thread closes a released worker's socket under the
         * lock (job_release_worker): read under it, and peeked at only
         * while the slot still has it, a socket is never one closed, or
         * its number reused, under this thread. A socket closed during
         * the poll is at worst seen readable: the check skips it. */
        pthread_mutex_lock(&d->lock);
        for (int i = 0; i < MAX_WORKERS; i++) {
            if (atomic_load(&d->workers[i].state) == W_LIVE && !d->workers[i].hup
                && d->workers[i].sock >= 0) {
                who[n] = i;
                p[n++] = (struct pollfd){ .fd = d->workers[i].sock, .events = POLLIN };
            }
        }
        pthread_mutex_unlock(&d->lock);
        if (poll(p, (nfds_t)n, 100) <= 0)
            continue;
        pthread_mutex_lock(&d->lock);
        for (int i = 1; i < n; i++) {
            char b;

            if (p[i].revents && d->workers[who[i]].sock == p[i].fd
                && recv(p[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) {
                d->workers[who[i]].hup = 1;
                kvs__bell_ring(d->bell);
            }
        }
        pthread_mutex_unlock(&d->lock);
        if ((p[0].revents & POLLIN) && kvs__sock_accept(d->listen_fd, 0, &fd, NULL) == 0)
            handshake(d, fd);
    }
    return NULL;
}
