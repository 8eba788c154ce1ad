/*
 * tp_util.h - what the transports' loops (tp_socket.c, tp_uring.c, the
 * UCX plug-in tp_ucx.c) keep alike: a connection's queue of sends, and the
 * events kept for the next wait. Static inline: each transport is its own
 * file. It stands on kvs-transport.h alone, below the loader (loader.h),
 * which the backends never include.
 */
#ifndef KVSD_TP_UTIL_H
#define KVSD_TP_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs-transport.h"

#define TP_CONNS_MAX (1 << 16)

/* Records code and a detail in e (may be NULL); returns code. */
static inline int tp_fail(struct kvs_transport_error *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int tp_fail(struct kvs_transport_error *e, int code, const char *fmt, ...)
{
    va_list ap;

    if (e) {
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* A free slot of the array *arr of *n connections of size bytes each,
 * whose first member is the int fd (-1: free), doubling the array when
 * none is: its index, or -ENOMEM, or -EMFILE past TP_CONNS_MAX. */
static inline int tp_slot(void **arr, int *n, size_t size)
{
    int cap = *n ? 2 * *n : 8, i;
    unsigned char *a = *arr;

    for (i = 0; i < *n; i++) {
        int fd;

        memcpy(&fd, a + (size_t)i * size, sizeof fd);
        if (fd < 0)
            return i;
    }
    if (cap > TP_CONNS_MAX)
        return -EMFILE;
    if (!(a = realloc(a, size * (size_t)cap)))
        return -ENOMEM;
    memset(a + size * (size_t)*n, 0, size * (size_t)(cap - *n));
    for (int j = *n; j < cap; j++)
        memcpy(a + (size_t)j * size, &(int){ -1 }, sizeof(int));
    *arr = a;
    *n = cap;
    return i;
}

/* One queued send: buf[done..len) still to go. */
struct tp_send {
    const unsigned char *buf;
    size_t len, done;
    uint64_t token;
    struct tp_send *next;
};

/* Appends a send to the queue head/tail: 0, or -ENOMEM. */
static inline int tp_send_push(struct tp_send **head, struct tp_send **tail, const void *buf,
                               size_t len, uint64_t token)
{
    struct tp_send *s = malloc(sizeof *s);

    if (!s)
        return -ENOMEM;
    *s = (struct tp_send){ .buf = buf, .len = len, .token = token };
    if (*tail)
        (*tail)->next = s;
    else
        *head = s;
    *tail = s;
    return 0;
}

/* A send's checks, then tp_send_push: head and tail NULL for a
 * connection that does not exist. */
static inline int tp_send_queue(struct tp_send **head, struct tp_send **tail, int closed, int id,
                                const void *buf, size_t len, uint64_t token,
                                struct kvs_transport_error *e)
{
    if (!head || !buf || len == 0)
        return tp_fail(e, KVS_EBADARG, "send: connection %d, %zu bytes", id, len);
    if (closed)
        return tp_fail(e, -ENOTCONN, "send: connection %d is closed", id);
    if (tp_send_push(head, tail, buf, len, token) != 0)
        return tp_fail(e, -ENOMEM, "out of memory");
    return 0;
}

/* Frees the queue's first send, whose bytes all went: its SENT event. */
static inline struct kvs_transport_event tp_send_pop(struct tp_send **head,
                                                     struct tp_send **tail, int conn)
{
    struct tp_send *s = *head;
    struct kvs_transport_event ev = { .type = KVS_TRANSPORT_SENT, .conn = conn,
                                      .token = s->token };

    *head = s->next;
    if (!*head)
        *tail = NULL;
    free(s);
    return ev;
}

static inline void tp_send_free_all(struct tp_send **head, struct tp_send **tail)
{
    while (*head) {
        struct tp_send *s = *head;

        *head = s->next;
        free(s);
    }
    *tail = NULL;
}

/* Events kept for the next wait. What came in (RECV, CLOSED) is handed up
 * before the SENTs of sends done, each kind in its order: a loop that sends
 * many small frames has a SENT for each, and were they taken first, every
 * wait would be full of them while what the peers send, their heartbeats
 * included, waited unread behind (and a busy peer would look dead). */
struct tp_later_q {
    struct kvs_transport_event *ev;
    size_t head, n, cap;               /* the events are ev[head..head+n) */
};

struct tp_later {
    struct tp_later_q in, sent;
};

static inline int tp_later_q_add(struct tp_later_q *q, struct kvs_transport_event ev)
{
    if (q->head + q->n == q->cap) {
        if (q->head > 0 && q->head >= q->cap / 2) {   /* half is free: move down */
            memmove(q->ev, q->ev + q->head, sizeof *q->ev * q->n);
            q->head = 0;
        } else {
            size_t cap = q->cap ? 2 * q->cap : 64;
            struct kvs_transport_event *p = realloc(q->ev, sizeof *p * cap);

            if (!p)
                return -ENOMEM;
            q->ev = p;
            q->cap = cap;
        }
    }
    q->ev[q->head + q->n++] = ev;
    return 0;
}

static inline int tp_later_add(struct tp_later *l, struct kvs_transport_event ev)
{
    return tp_later_q_add(ev.type == KVS_TRANSPORT_SENT ? &l->sent : &l->in, ev);
}

static inline int tp_later_q_take(struct tp_later_q *q, struct kvs_transport_event *ev, int n,
                                  int max)
{
    while (n < max && q->n > 0) {
        ev[n++] = q->ev[q->head++];
        q->n--;
    }
    if (q->n == 0)
        q->head = 0;
    return n;
}

/* Moves kept events into ev[n..max), what came in first; returns the new n. */
static inline int tp_later_take(struct tp_later *l, struct kvs_transport_event *ev, int n, int max)
{
    return tp_later_q_take(&l->sent, ev, tp_later_q_take(&l->in, ev, n, max), max);
}

/* Events kept, of both kinds. */
static inline size_t tp_later_count(const struct tp_later *l)
{
    return l->in.n + l->sent.n;
}

/* The kept event i of what came in, i < l->in.n, oldest first. */
static inline const struct kvs_transport_event *tp_later_in(const struct tp_later *l, size_t i)
{
    return &l->in.ev[l->in.head + i];
}

static inline void tp_later_q_forget(struct tp_later_q *q, int conn)
{
    size_t j = q->head;

    for (size_t i = q->head; i < q->head + q->n; i++)
        if (q->ev[i].conn != conn)
            q->ev[j++] = q->ev[i];
    q->n = j - q->head;
}

/* Forgets the kept events of a connection dropped. */
static inline void tp_later_forget(struct tp_later *l, int conn)
{
    tp_later_q_forget(&l->in, conn);
    tp_later_q_forget(&l->sent, conn);
}

static inline void tp_later_free(struct tp_later *l)
{
    free(l->in.ev);
    free(l->sent.ev);
    *l = (struct tp_later){ 0 };
}

#endif
