/*
 * hosts.c - the links between the kvsd of the hosts of one job: the
 * connections the join made (join.c), handed to the transport, and the
 * thread that moves frames over them.
 *
 * The links' thread owns the connections, through the transport
 * (net/loader.h: io_uring or sockets). It sends what the serve thread
 * queued (hosts_post), reads frames (the head checked before a byte of
 * payload is kept), sends a heartbeat each second a link is quiet (more
 * often under a silence bound below 5 s) and hands frames, and what
 * happened to a link (closed, silent past the heartbeat deadline,
 * malformed), to the serve thread (struct inmsg), ringing its doorbell;
 * it counts each link's frames and bytes each way as they go on the wire
 * (hosts_traffic, for kvsctl stats). It knows nothing of keys or rounds:
 * bridge.c does. No pass of this thread
 * waits on the serve thread's work, and the transports hand up what came
 * before the sends they finished: a kvsd busy with a long serve pass still
 * beats and reads, so that its peers can tell busy from dead. No
 * connection is taken once the links run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hosts.h"
#include "join.h"

#include "base/bytes.h"
#include "shm/shm.h"
#include "net/auth.h"
#include "net/loader.h"
#include "proto/wire.h"

#define SEC_NS          1000000000ll
#define BEAT_NS         SEC_NS         /* a heartbeat when a link sent nothing this long, */
#define BEATS_PER_BOUND 5              /* or a fifth of a shorter silence bound */
#define CLOCK_BEAT_NS   (SEC_NS / 5)   /* timeline on: a heartbeat this often, for the clocks */
#define STOP_NS         (5 * SEC_NS)   /* to send what is queued, at the end */
#define DRAIN_NS        (20 * 1000000ll) /* queued frames handed to links per pass, at most */
#define SEND_WINDOW     (4u << 20)     /* bytes handed to the transport per link at once */
#define EVENTS          64

/* A frame in a link's send queue: sent in order, SENT in order. */
struct sending {
    struct sending *next;
    struct frame *f;
};

struct link {
    int fd;                            /* until adopted */
    int conn;                          /* the transport's, -1: none (host itself, or ended) */
    char name[KVS__ADDR_MAX + 32];     /* "host 1 (127.0.0.1)" */
    uint32_t nworkers;
    int64_t last_recv, last_send;      /* the links' thread's */
    struct sending *inflight, **inflight_tail;
    struct sending *queue, *queue_last;/* not handed to the transport yet, in order */
    size_t inflight_bytes;
    unsigned char head[KVS__WIRE_HEAD];
    size_t head_got;
    struct kvs__frame_head fh;         /* valid once head_got is whole */
    unsigned char *pay;
    size_t pay_got;
    int reported;                      /* told the serve thread it ended */
    /* The peer's clock, from heartbeats (the links' thread's; read once
     * it has ended): the send time of its last heartbeat and when it came
     * here, and the estimate of (its clock - ours) of the least round trip
     * so far, whose error is at most half that round trip. */
    int64_t peer_sent, peer_came, last_beat;
    int64_t clk_offset, clk_rtt;       /* clk_rtt -1: no estimate yet */
    /* What went over the link (hosts_traffic): written by the links'
     * thread alone, read by the serve thread. */
    _Atomic uint64_t frames_out, bytes_out, frames_in, bytes_in;
};

struct hosts {
    int n, me;
    struct link *l;                    /* [n] */
    struct kvs__tp_choice tpc;         /* the transport (tpc.ops), and its plug-in */
    struct kvs_transport *tp;
    pthread_t th;
    int running;

    pthread_mutex_t lock;              /* the two queues and quit */
    struct outq { struct outq *next; struct frame *f; int to; } *out, **out_tail;
    struct inmsg *in, **in_tail;
    int quit;                          /* 1: end after sending what is queued */

    /* What the job lets another host send here (hosts_expect), written by
     * the serve thread, read by the links' thread at each frame's head:
     * the largest key this host may be sent a value of, the most rows a
     * key has (a rows message carries their ids), and the keys and their
     * bytes in all, which bound a state file. They only grow. */
    _Atomic uint64_t value_max, rows_max, nkeys, key_bytes;
    uint64_t arena;                    /* the arena's bytes: the most an init's value has */
};

const char *hosts_name(const struct daemon *d, int host)
{
    return d->hx && host >= 0 && host < d->hx->n ? d->hx->l[host].name : "a host";
}

/* ---- the links' thread -------------------------------------------------- */

static void frame_unref(struct frame *f)
{
    if (--f->refs == 0)
        free(f);
}

/* Appends m to the list that goes up at the end of this turn of the loop. */
static void hand_up(struct inmsg ***tail, struct inmsg *m)
{
    m->next = NULL;
    **tail = m;
    *tail = &m->next;
}

/* A link ends: its queued frames are dropped, the transport forgets it. */
static void link_end(struct hosts *hx, int h)
{
    struct link *l = &hx->l[h];

    for (struct sending **q = &l->inflight; q; q = q == &l->inflight ? &l->queue : NULL)
        while (*q) {
            struct sending *s = *q;

            *q = s->next;
            frame_unref(s->f);
            free(s);
        }
    l->inflight_tail = &l->inflight;
    l->inflight_bytes = 0;
    l->queue_last = NULL;
    if (l->conn >= 0)
        hx->tpc.ops->drop(hx->tp, l->conn);
    l->conn = -1;
    free(l->pay);
    l->pay = NULL;
    l->pay_got = 0;
}

/* Link h fails (type LINK_*, why in words): the serve thread hears it,
 * once, and the link ends. */
static void link_fail(struct hosts *hx, int h, int type, struct inmsg ***tail,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void link_fail(struct hosts *hx, int h, int type, struct inmsg ***tail,
                      const char *fmt, ...)
{
    struct inmsg *m;
    va_list ap;

    if (!hx->l[h].reported && (m = calloc(1, sizeof *m)) != NULL) {
        m->host = h;
        m->type = type;
        va_start(ap, fmt);
        vsnprintf(m->why, sizeof m->why, fmt, ap);
        va_end(ap);
        hx->l[h].reported = 1;
        hand_up(tail, m);
    }
    link_end(hx, h);
}

static int link_of(const struct hosts *hx, int conn)
{
    for (int i = 0; i < hx->n; i++)
        if (hx->l[i].conn == conn)
            return i;
    return -1;
}

/* Queues f on link h (a link that ended drops it); a link that cannot
 * take it fails, since its peer would wait for the frame in vain. */
/* Hands link h's queued frames to the transport while less than
 * SEND_WINDOW bytes of it are in flight: what waits beyond that can still
 * be passed by a value of higher priority. */
static void link_pump(struct hosts *hx, int h, struct inmsg ***tail)
{
    struct link *l = &hx->l[h];

    while (l->conn >= 0 && l->queue && (!l->inflight || l->inflight_bytes < SEND_WINDOW)) {
        struct sending *s = l->queue;
        struct kvs_transport_error e = { 0, "" };

        if (!(l->queue = s->next))
            l->queue_last = NULL;
        if (hx->tpc.ops->send(hx->tp, l->conn, s->f->buf, s->f->len, (uint64_t)(uintptr_t)s,
                          &e) != 0) {
            frame_unref(s->f);
            free(s);
            link_fail(hx, h, LINK_CLOSED, tail, "a frame to %s could not be sent: %s",
                      l->name, e.msg);
            return;
        }
        atomic_fetch_add_explicit(&l->frames_out, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&l->bytes_out, s->f->len, memory_order_relaxed);
        s->next = NULL;
        *l->inflight_tail = s;
        l->inflight_tail = &s->next;
        l->inflight_bytes += s->f->len;
        l->last_send = kvs__now_ns();
    }
}

/* Queues f for link h: a value before the values of lower priority
 * queued after the link's last frame of another kind (which keeps its
 * place: a LEFT never passes a PARTIAL sent before it), anything else
 * last. */
static void link_send(struct hosts *hx, int h, struct frame *f, struct inmsg ***tail)
{
    struct link *l = &hx->l[h];
    struct sending *s, **at = &l->queue;

    if (l->conn < 0) {
        frame_unref(f);
        return;
    }
    if (!(s = malloc(sizeof *s))) {
        frame_unref(f);
        link_fail(hx, h, LINK_CLOSED, tail, "a frame to %s could not be sent: out of memory",
                  l->name);
        return;
    }
    s->f = f;
    /* Last, unless it passes the last: then after the last frame it may
     * not pass (a walk, for the rare frame of a higher priority). */
    if (l->queue_last && (!f->value || !l->queue_last->f->value
                          || l->queue_last->f->priority >= f->priority)) {
        at = &l->queue_last->next;
    } else {
        for (struct sending **q = &l->queue; *q; q = &(*q)->next)
            if (!(*q)->f->value || (*q)->f->priority >= f->priority)
                at = &(*q)->next;
    }
    s->next = *at;
    *at = s;
    if (!s->next)
        l->queue_last = s;
    link_pump(hx, h, tail);
}

/* A heartbeat says the host is alive, and carries the clocks: a, when it
 * was sent (t3, the peer's clock); b, the send time of our last heartbeat
 * the peer had (t1, ours); its 8 bytes of data, how long the peer held
 * that one (t3 - t2).
 * With t4, now: the round trip is (t4 - t1) - (t3 - t2), and the peer's
 * clock less ours ((t2 - t1) + (t3 - t4)) / 2, within half the round trip.
 * A payload that does not decode says nothing of the clocks. */
static void beat_came(struct link *l, int64_t now)
{
    struct kvs__wire_msg m;
    struct kvs__err e = { 0, "" };
    uint64_t hold;
    int64_t t1, t2, t3, rtt;

    if (kvs__wire_msg_decode(KVS__FRAME_HEARTBEAT, l->pay, (size_t)l->fh.len, &m, &e) != 0
        || m.a == 0 || m.a > (uint64_t)INT64_MAX)
        return;
    t3 = (int64_t)m.a;
    l->peer_sent = t3;
    l->peer_came = now;
    if (m.b == 0 || m.b > (uint64_t)now || m.len != 8)
        return;
    hold = get_u64(m.data, 0);
    if (hold > m.a)
        return;
    t1 = (int64_t)m.b;
    t2 = t3 - (int64_t)hold;
    rtt = (now - t1) - (t3 - t2);
    if (rtt < 0 || (l->clk_rtt >= 0 && rtt >= l->clk_rtt))
        return;
    l->clk_rtt = rtt;
    l->clk_offset = ((t2 - t1) + (t3 - now)) / 2;
}

/* A heartbeat for link l, sent now: see beat_came. */
static struct frame *beat_new(const struct daemon *d, const struct link *l, int64_t now)
{
    struct kvs__wire_msg m = { 0 };
    unsigned char hold[8];

    m.a = (uint64_t)now;
    if (l->peer_sent) {
        m.b = (uint64_t)l->peer_sent;
        put_u64(hold, 0, (uint64_t)(now - l->peer_came));
        m.data = hold;
        m.len = sizeof hold;
    }
    return hosts_frame_new(d, KVS__FRAME_HEARTBEAT, &m, NULL);
}

/* A state file of the keys hosts_expect was told of: its head and the
 * optimizer's spec, each key's record head and name, and at most two
 * float32 buffers of a float16 key's elements (4 bytes per byte). */
#define STATES_HEAD     (8192 + KVS__WIRE_TEXT_MAX)
#define STATES_PER_KEY  512

static uint64_t states_max(uint64_t nkeys, uint64_t bytes)
{
    uint64_t n;

    if (nkeys > KVS__WIRE_PAYLOAD_MAX / STATES_PER_KEY || bytes > KVS__WIRE_PAYLOAD_MAX / 4)
        return KVS__WIRE_PAYLOAD_MAX;
    n = STATES_HEAD + nkeys * STATES_PER_KEY + 4 * bytes;
    return n < KVS__WIRE_PAYLOAD_MAX ? n : KVS__WIRE_PAYLOAD_MAX;
}

/* The head just read on link h announces no more payload than the job
 * lets its type carry (kvs__wire_msg_max of what hosts_expect was told),
 * so that no frame's memory is taken beyond what the job declared. */
static int link_bound(struct hosts *hx, int h, struct kvs__err *bad)
{
    struct link *l = &hx->l[h];
    struct kvs__wire_bounds b = {
        .value = atomic_load(&hx->value_max),
        .pieces = l->nworkers,         /* their pieces are its workers' pushes */
        .states = states_max(atomic_load(&hx->nkeys), atomic_load(&hx->key_bytes)),
        .rows = atomic_load(&hx->rows_max),
    };
    uint64_t max;

    /* An init's value from host 0 is rank 0's, which may differ from
     * this host's (the init then fails, storing nothing): bounded by the
     * arena it would be stored in. */
    if (l->fh.type == KVS__FRAME_DONE && b.value < hx->arena)
        b.value = hx->arena;
    max = kvs__wire_msg_max(l->fh.type, &b);

    if (l->fh.len <= max)
        return 0;
    return kvs__fail(bad, KVS_EPROTO, "a %s frame of %llu bytes, more than this job lets it "
                     "carry: %llu bytes, as the job's largest key here is %llu bytes",
                     kvs__frame_name(l->fh.type), (unsigned long long)l->fh.len,
                     (unsigned long long)max, (unsigned long long)b.value), -1;
}

/* Bytes that came on link h: frames cut out of them go up. Returns 0, or
 * -1 with *bad set when the link sent a malformed head, or one that
 * announces more than the job lets it carry. */
static int link_recv(struct hosts *hx, int h, const unsigned char *p, size_t n,
                     struct inmsg ***tail, struct kvs__err *bad)
{
    struct link *l = &hx->l[h];

    while (n > 0) {
        size_t take;

        if (l->head_got < KVS__WIRE_HEAD) {
            take = KVS__WIRE_HEAD - l->head_got < n ? KVS__WIRE_HEAD - l->head_got : n;
            memcpy(l->head + l->head_got, p, take);
            l->head_got += take;
            p += take;
            n -= take;
            if (l->head_got < KVS__WIRE_HEAD)
                return 0;
            if (kvs__frame_head_decode(l->head, KVS__WIRE_HEAD, (uint32_t)hx->n, &l->fh,
                                       bad) != 0)
                return -1;
            if (l->fh.host != (uint32_t)h || l->fh.type < KVS__FRAME_PARTIAL)
                return kvs__fail(bad, KVS_EPROTO, "a %s frame said to be of host %u, out "
                                 "of place", kvs__frame_name(l->fh.type),
                                 (unsigned)l->fh.host), -1;
            if (link_bound(hx, h, bad) != 0)
                return -1;
            l->pay_got = 0;
            if (n == 0)
                return 0;
        }
        /* The sender proved the secret, and the head's length is within
         * what the job lets the frame carry: the payload is taken whole at once (memory is only touched as
         * its bytes come), so that a big value is never copied twice. */
        take = l->fh.len - l->pay_got < n ? (size_t)(l->fh.len - l->pay_got) : n;
        if (!l->pay) {
            if (!(l->pay = malloc((size_t)l->fh.len)))
                return kvs__fail(bad, -ENOMEM, "out of memory for a frame of %llu bytes",
                                 (unsigned long long)l->fh.len), -1;
        }
        memcpy(l->pay + l->pay_got, p, take);
        l->pay_got += take;
        p += take;
        n -= take;
        if (l->pay_got < l->fh.len)
            return 0;
        l->head_got = 0;
        atomic_fetch_add_explicit(&l->frames_in, 1, memory_order_relaxed);
        if (l->fh.type == KVS__FRAME_HEARTBEAT) {
            beat_came(l, kvs__now_ns());
            free(l->pay);
            l->pay = NULL;
            continue;
        }
        {
            struct inmsg *m = calloc(1, sizeof *m);

            if (!m)
                return kvs__fail(bad, -ENOMEM, "out of memory for a frame"), -1;
            m->host = h;
            m->type = l->fh.type;
            m->len = (size_t)l->fh.len;
            m->pay = l->pay;
            l->pay = NULL;
            hand_up(tail, m);
        }
    }
    return 0;
}

/* The frames the serve thread queued, handed to their links: at most
 * DRAIN_NS of them per pass, so that a serve pass that queued a million
 * frames never keeps this thread from its heartbeats and receives; the
 * rest go back to the head of the queue, in order. Returns 1 when some
 * are left. */
static int drain_out(struct hosts *hx, struct inmsg ***tail)
{
    struct outq *out, **last;
    int64_t until = kvs__now_ns() + DRAIN_NS;
    unsigned k = 0;

    pthread_mutex_lock(&hx->lock);
    out = hx->out;
    last = hx->out_tail;
    hx->out = NULL;
    hx->out_tail = &hx->out;
    pthread_mutex_unlock(&hx->lock);
    while (out && (++k % 256 != 0 || kvs__now_ns() < until)) {
        struct outq *o = out;

        out = o->next;
        link_send(hx, o->to, o->f, tail);
        free(o);
    }
    if (!out)
        return 0;
    /* *last is the next of the last one taken, which is still queued. */
    pthread_mutex_lock(&hx->lock);
    if (!(*last = hx->out))
        hx->out_tail = last;
    hx->out = out;
    pthread_mutex_unlock(&hx->lock);
    return 1;
}

/* A quiet link beats; with the timeline on, every link beats often, busy
 * or not, for its clocks (beat_came). */
static void beat_quiet(struct daemon *d, struct hosts *hx, int64_t now, struct inmsg ***tail)
{
    int64_t every = d->o.heartbeat_ns / BEATS_PER_BOUND < BEAT_NS
                    ? d->o.heartbeat_ns / BEATS_PER_BOUND : BEAT_NS;

    for (int h = 0; h < hx->n; h++) {
        struct link *l = &hx->l[h];
        struct frame *beat;

        if (l->conn < 0 || (now - l->last_send < every
                            && !(kvs__tr_begin() && now - l->last_beat >= CLOCK_BEAT_NS)))
            continue;
        if ((beat = beat_new(d, l, now)) != NULL) {
            beat->refs = 1;
            l->last_beat = now;
            link_send(hx, h, beat, tail);
        }
    }
}

/* A link silent past the bound fails. Called right after a wait that
 * took what the transport held, so that silence is the peer's, never
 * bytes this thread had not read yet. */
static void fail_silent(struct daemon *d, struct hosts *hx, struct inmsg ***tail)
{
    int64_t now = kvs__now_ns();

    for (int h = 0; h < hx->n; h++) {
        struct link *l = &hx->l[h];

        if (l->conn >= 0 && now - l->last_recv > d->o.heartbeat_ns)
            link_fail(hx, h, LINK_SILENT, tail, "%s has been silent for %.1f s (its kvsd is "
                      "stopped, or the link is down)", l->name,
                      (double)(now - l->last_recv) / 1e9);
    }
}

/* What the transport's wait brought: bytes, sends done, links closed. */
static void take_events(struct hosts *hx, const struct kvs_transport_event *ev, int n,
                        struct inmsg ***tail)
{
    for (int i = 0; i < n; i++) {
        int h;

        if ((h = link_of(hx, ev[i].conn)) < 0)
            continue;
        if (ev[i].type == KVS_TRANSPORT_RECV) {
            struct kvs__err bad = { 0, "" };

            hx->l[h].last_recv = kvs__now_ns();
            atomic_fetch_add_explicit(&hx->l[h].bytes_in, ev[i].len, memory_order_relaxed);
            if (link_recv(hx, h, ev[i].data, ev[i].len, tail, &bad) != 0)
                link_fail(hx, h, LINK_BAD, tail, "%s sent a malformed frame: %s",
                          hx->l[h].name, bad.msg);
        } else if (ev[i].type == KVS_TRANSPORT_SENT) {
            struct link *l = &hx->l[h];
            struct sending *s = l->inflight;

            if (s && (uint64_t)(uintptr_t)s == ev[i].token) {
                l->inflight = s->next;
                if (!l->inflight)
                    l->inflight_tail = &l->inflight;
                l->inflight_bytes -= s->f->len;
                frame_unref(s->f);
                free(s);
                link_pump(hx, h, tail);
            }
        } else if (ev[i].type == KVS_TRANSPORT_CLOSED) {
            link_fail(hx, h, LINK_CLOSED, tail, "%s is gone: its connection %s%s%s",
                      hx->l[h].name, ev[i].status ? "broke (" : "was closed",
                      ev[i].status ? kvs_strerror(ev[i].status) : "",
                      ev[i].status ? ")" : "");
        }
    }
}

static int links_busy(const struct hosts *hx)
{
    for (int h = 0; h < hx->n; h++)
        if (hx->l[h].conn >= 0 && (hx->l[h].inflight || hx->l[h].queue))
            return 1;
    return 0;
}

static void *links_thread(void *arg)
{
    struct daemon *d = arg;
    struct hosts *hx = d->hx;
    struct kvs_transport_event ev[EVENTS];
    int64_t stop_by = 0;

    for (;;) {
        struct inmsg *up = NULL, **tail = &up;
        struct kvs_transport_error we = { 0, "" };
        int64_t now = kvs__now_ns();
        int quit, more, n;

        more = drain_out(hx, &tail);
        pthread_mutex_lock(&hx->lock);
        quit = hx->quit;
        pthread_mutex_unlock(&hx->lock);
        if (quit && !stop_by)
            stop_by = now + STOP_NS;
        if (quit && ((!more && !links_busy(hx)) || now >= stop_by))
            break;
        if (!quit)
            beat_quiet(d, hx, now, &tail);
        /* A loop that fails fails every link: no frame would move. */
        if ((n = hx->tpc.ops->wait(hx->tp, ev, EVENTS, more ? now : now + 100 * 1000000ll,
                                   &we)) < 0) {
            n = 0;
            for (int h = 0; h < hx->n; h++)
                if (hx->l[h].conn >= 0)
                    link_fail(hx, h, LINK_BAD, &tail, "the %s transport failed: %s",
                              hx->tpc.ops->name, we.msg);
        }
        take_events(hx, ev, n, &tail);
        if (!quit)
            fail_silent(d, hx, &tail);
        if (up) {
            pthread_mutex_lock(&hx->lock);
            *hx->in_tail = up;
            hx->in_tail = tail;
            pthread_mutex_unlock(&hx->lock);
            kvs__bell_ring(d->bell);
        }
    }
    for (int h = 0; h < hx->n; h++)
        link_end(hx, h);
    return NULL;
}

/* ---- the serve thread's side -------------------------------------------- */

struct frame *hosts_frame_new(const struct daemon *d, int type, const struct kvs__wire_msg *m,
                        void **data)
{
    size_t body = kvs__wire_msg_bytes(m);
    struct frame *f;
    struct kvs__frame_head fh = { (uint8_t)type, (uint32_t)d->me, body + m->len };

    if (m->len > KVS__WIRE_PAYLOAD_MAX
        || !(f = malloc(sizeof *f + KVS__WIRE_HEAD + body + m->len)))
        return NULL;
    f->refs = 0;
    f->priority = m->priority;
    f->value = type == KVS__FRAME_PARTIAL || type == KVS__FRAME_VALUE
               || type == KVS__FRAME_FORWARD;
    f->len = KVS__WIRE_HEAD + body + m->len;
    kvs__frame_head_encode(&fh, f->buf);
    kvs__wire_msg_encode(type, m, f->buf + KVS__WIRE_HEAD);
    if (m->data && m->len)
        memcpy(f->buf + KVS__WIRE_HEAD + body, m->data, m->len);
    if (data)
        *data = f->buf + KVS__WIRE_HEAD + body;
    return f;
}

int hosts_post(struct daemon *d, struct frame *f, int to)
{
    struct hosts *hx = d->hx;
    struct outq *head = NULL, **tail = &head;
    int n;

    f->refs = 0;
    for (int h = 0; h < hx->n; h++) {
        struct outq *o;

        if (h == hx->me || (to >= 0 && h != to) || (to == HOSTS_IN && d->host_out[h]))
            continue;
        if (!(o = malloc(sizeof *o)))
            continue;
        o->f = f;
        o->to = h;
        o->next = NULL;
        *tail = o;
        tail = &o->next;
        f->refs++;
    }
    if (!head) {
        free(f);
        return 0;
    }
    n = f->refs;
    pthread_mutex_lock(&hx->lock);
    *hx->out_tail = head;
    hx->out_tail = tail;
    pthread_mutex_unlock(&hx->lock);
    hx->tpc.ops->wake(hx->tp);
    return n;
}

int hosts_traffic(const struct daemon *d, int h, struct hosts_traffic *t)
{
    const struct link *l;

    if (!d->hx || h < 0 || h >= d->hx->n || h == d->hx->me)
        return -1;
    l = &d->hx->l[h];
    t->frames_out = atomic_load_explicit(&l->frames_out, memory_order_relaxed);
    t->bytes_out = atomic_load_explicit(&l->bytes_out, memory_order_relaxed);
    t->frames_in = atomic_load_explicit(&l->frames_in, memory_order_relaxed);
    t->bytes_in = atomic_load_explicit(&l->bytes_in, memory_order_relaxed);
    return 0;
}

/* Takes what the links' thread handed up, in order. */
struct inmsg *hosts_take(struct daemon *d)
{
    struct hosts *hx = d->hx;
    struct inmsg *m;

    pthread_mutex_lock(&hx->lock);
    m = hx->in;
    hx->in = NULL;
    hx->in_tail = &hx->in;
    pthread_mutex_unlock(&hx->lock);
    return m;
}

void hosts_expect(struct daemon *d, uint64_t bytes, uint64_t rows)
{
    struct hosts *hx = d->hx;
    uint64_t max;

    if (!hx)
        return;
    max = atomic_load(&hx->value_max);
    if (bytes > max)
        atomic_store(&hx->value_max, bytes);
    /* A key has no more rows than bytes: a worker's shape cannot raise
     * the bound past its value's. */
    rows = rows < bytes ? rows : bytes;
    if (rows > atomic_load(&hx->rows_max))
        atomic_store(&hx->rows_max, rows);
    atomic_fetch_add(&hx->nkeys, 1);
    max = atomic_load(&hx->key_bytes);
    atomic_store(&hx->key_bytes, bytes > UINT64_MAX - max ? UINT64_MAX : max + bytes);
}

void hosts_expect_any(struct daemon *d)
{
    if (d->hx && atomic_load(&d->hx->value_max) < d->o.arena)
        atomic_store(&d->hx->value_max, d->o.arena);
    if (d->hx && atomic_load(&d->hx->rows_max) < d->o.arena)
        atomic_store(&d->hx->rows_max, d->o.arena);
}

/* The links, made for the job's hosts over transport tpc (d->hx's now),
 * none joined yet. */
static int links_new(struct daemon *d, const struct kvs__tp_choice *tpc, struct kvs__err *e)
{
    struct hosts *hx;

    if (!(hx = calloc(1, sizeof *hx)) || !(hx->l = calloc((size_t)d->o.nhosts, sizeof *hx->l))
        || !(d->host_out = calloc((size_t)d->o.nhosts, 1))) {
        free(hx);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    d->hx = hx;
    hx->arena = d->o.arena;
    d->nhosts = hx->n = d->o.nhosts;
    d->me = hx->me = d->o.host;
    for (int h = 0; h < hx->n; h++)
        hx->l[h].clk_rtt = -1;
    hx->tpc = *tpc;
    hx->out_tail = &hx->out;
    hx->in_tail = &hx->in;
    pthread_mutex_init(&hx->lock, NULL);
    for (int i = 0; i < hx->n; i++) {
        hx->l[i].fd = hx->l[i].conn = -1;
        hx->l[i].inflight_tail = &hx->l[i].inflight;
        snprintf(hx->l[i].name, sizeof hx->l[i].name, "host %d", i);
    }
    return 0;
}

/* The mesh (join.c) gives each link its connection, even when it failed:
 * hosts_stop closes what it made. */
static int links_join(struct daemon *d, const struct kvs__secret *sec, struct kvs__err *e)
{
    struct hosts *hx = d->hx;
    struct join_peer *peers;
    int rc;

    if (!(peers = calloc((size_t)hx->n, sizeof *peers)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (int i = 0; i < hx->n; i++) {
        peers[i].fd = -1;
        memcpy(peers[i].name, hx->l[i].name, sizeof peers[i].name);
    }
    rc = join_mesh(d, sec, peers, e);
    for (int i = 0; i < hx->n; i++) {
        hx->l[i].fd = peers[i].fd;
        hx->l[i].nworkers = peers[i].nworkers;
        memcpy(hx->l[i].name, peers[i].name, sizeof hx->l[i].name);
    }
    free(peers);
    return rc;
}

/* The transport takes the joined links, and the links' thread starts. */
static int links_run(struct daemon *d, struct kvs__err *e)
{
    struct hosts *hx = d->hx;
    struct kvs_transport_error te = { 0, "" };
    int64_t deadline;
    int rc;

    if ((rc = hx->tpc.ops->open(&hx->tp, &te)) != 0)
        return kvs__fail(e, rc, "the %s transport: %s", hx->tpc.ops->name, te.msg);
    /* Each host adopts its links in the order of the hosts: a transport
     * that talks over the socket in adopt finds its peer adopting too. */
    deadline = kvs__now_ns() + d->o.join_ns;
    for (int i = 0; i < hx->n; i++) {
        struct link *l = &hx->l[i];
        int fd = l->fd;

        if (i == hx->me)
            continue;
        l->fd = -1;                    /* the transport's, whatever adopt says */
        if ((rc = hx->tpc.ops->adopt(hx->tp, fd, deadline, &l->conn, &te)) != 0)
            return kvs__fail(e, rc, "the %s transport could not take the link to %s: %s",
                             hx->tpc.ops->name, l->name, te.msg);
        l->last_recv = l->last_send = kvs__now_ns();
    }
    say(d, "host %d of %d: workers' ranks %d..%d of %d, over %s", hx->me, hx->n, d->rank0,
        d->rank0 + d->o.nworkers - 1, d->total, hx->tpc.ops->name);
    if ((rc = pthread_create(&hx->th, NULL, links_thread, d)) != 0)
        return kvs__fail(e, -rc, "cannot start a thread: %s", strerror(rc));
    hx->running = 1;
    return 0;
}

int hosts_start(struct daemon *d, struct kvs__err *e)
{
    struct kvs__secret sec;
    struct kvs__tp_choice tpc;
    char note[256] = "", job_secret[PATH_MAX];
    int rc, made = 0;

    /* The transport first: a plug-in that cannot work fails here, before
     * the other hosts wait for this one. */
    if ((rc = kvs__tp_find(NULL, &tpc, note, sizeof note, e)) != 0)
        return rc;
    /* Without a file, the job's own secret, which only this user can
     * read: the hosts are on this machine (loopback only, join.c). */
    rc = d->o.secret_file ? kvs__secret_load(d->o.secret_file, &sec, e)
                          : kvs__secret_job(d->o.net_job, d->o.coord, &sec, job_secret,
                                            sizeof job_secret, &made, e);
    if (rc != 0) {
        kvs__tp_release(&tpc);
        return rc;
    }
    if (!d->o.secret_file)
        say(d, "no secret file: the hosts link over loopback only, with the job's secret "
            "%s %s", job_secret, made ? "(made)" : "(read)");
    if ((rc = links_new(d, &tpc, e)) == 0) {
        if (note[0])
            say(d, "%s", note);
        rc = links_join(d, &sec, e);
    } else
        kvs__tp_release(&tpc);
    /* Every other host proved the secret to host 0 in the join (or the
     * job failed): none reads the file again. */
    if (!d->o.secret_file && d->o.host == 0)
        kvs__secret_job_remove(job_secret, &sec);
    kvs__secret_wipe(&sec);
    if (rc != 0)
        return rc;
    return links_run(d, e);
}

void hosts_stop(struct daemon *d, int clean)
{
    struct hosts *hx = d->hx;

    if (!hx)
        return;
    if (hx->running) {
        if (clean) {
            struct kvs__wire_msg m = { 0 };
            struct frame *f = hosts_frame_new(d, KVS__FRAME_BYE, &m, NULL);

            if (f)
                hosts_post(d, f, HOSTS_ALL);
        }
        pthread_mutex_lock(&hx->lock);
        hx->quit = 1;
        pthread_mutex_unlock(&hx->lock);
        hx->tpc.ops->wake(hx->tp);
        pthread_join(hx->th, NULL);
    /* The links' thread is done with the clocks: host 0's, kept. */
    if (hx->me != 0 && hx->l[0].clk_rtt >= 0) {
        d->clock0_known = 1;
        d->clock0_offset = hx->l[0].clk_offset;
        d->clock0_error = (hx->l[0].clk_rtt + 1) / 2;
    }
    }
    for (int i = 0; i < hx->n; i++)
        if (hx->l[i].fd >= 0)
            close(hx->l[i].fd);
    while (hx->out) {
        struct outq *o = hx->out;

        hx->out = o->next;
        frame_unref(o->f);
        free(o);
    }
    for (struct inmsg *m = hx->in, *next; m; m = next) {
        next = m->next;
        free(m->pay);
        free(m);
    }
    if (hx->tp)
        hx->tpc.ops->close(hx->tp);
    kvs__tp_release(&hx->tpc);
    pthread_mutex_destroy(&hx->lock);
    free(hx->l);
    free(hx);
    d->hx = NULL;
}
