/*
 * test_transport.c - unit tests of the streams between hosts
 * (daemon/net/: tcp.h, loader.h) over loopback: TCP listeners, accepts and connects
 * with their deadlines, and every transport's loop (sockets, io_uring): bytes of any size
 * arrive whole and in order in both directions, sends complete in order,
 * a peer's close and a wait's deadline are reported, a closed or unknown
 * connection refuses sends, and a dropped one reports nothing more. For
 * io_uring also: receives far beyond its ring of buffers, big sends
 * (zero-copy, then plain once the kernel says it copied, or refused on
 * AF_UNIX), a drop while both are in flight, and the kernel refusing the
 * buffer ring or zero-copy (played by a seccomp filter).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cmocka.h>
#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#include "shm/ring.h"
#include "loader.h"
#include "tcp.h"
#include "tp_socket.h"
#include "tp_uring.h"

#define MS (1000000ll)

/* A connected pair over loopback: a (the dialer's end), b (the
 * listener's), both blocking sockets. */
static void pair(int *a, int *b)
{
    struct kvs__err e = { 0 };
    uint16_t port = 0;
    int l;

    assert_int_equal(kvs__tcp_listen("127.0.0.1", &port, 4, &l, &e), 0);
    assert_true(port != 0);
    assert_int_equal(kvs__tcp_connect("127.0.0.1", port, kvs__now_ns() + 2000 * MS, a, &e), 0);
    assert_int_equal(kvs__tcp_accept(l, kvs__now_ns() + 2000 * MS, b, &e), 0);
    close(l);
}

static void test_tcp_errors(void **state)
{
    struct kvs__err e = { 0 };
    uint16_t port = 0;
    int fd, l, s;
    int64_t t0;

    (void)state;
    assert_int_equal(kvs__tcp_listen("not-an-address", &port, 4, &fd, &e), KVS_EBADARG);
    assert_non_null(strstr(e.msg, "not-an-address"));
    assert_int_equal(fd, -1);
    /* A listener nobody dials: accept gives up at its deadline. */
    assert_int_equal(kvs__tcp_listen(NULL, &port, 4, &l, &e), 0);
    t0 = kvs__now_ns();
    assert_int_equal(kvs__tcp_accept(l, t0 + 100 * MS, &s, &e), -ETIMEDOUT);
    assert_true(kvs__now_ns() - t0 < 1000 * MS);
    /* The same port again is refused while it listens. */
    assert_true(kvs__tcp_listen(NULL, &port, 4, &fd, &e) < 0);
    assert_non_null(strstr(e.msg, "127.0.0.1"));
    close(l);
    /* Nobody listens now: connect tries until its deadline, then says so. */
    t0 = kvs__now_ns();
    assert_int_equal(kvs__tcp_connect("127.0.0.1", port, t0 + 150 * MS, &s, &e), -ECONNREFUSED);
    assert_true(kvs__now_ns() - t0 >= 140 * MS);
    assert_non_null(strstr(e.msg, "127.0.0.1"));
    assert_int_equal(kvs__tcp_connect("no-such-host.invalid", port, t0 + 150 * MS, &s, &e),
                     -EHOSTUNREACH);
}

/* A listener that comes up late: the dialer was already trying. */
struct late { uint16_t port; int fd; };

static void *late_listen(void *arg)
{
    struct late *l = arg;
    struct kvs__err e = { 0 };
    int s = -1;

    usleep(100 * 1000);
    if (kvs__tcp_listen("127.0.0.1", &l->port, 4, &l->fd, &e) == 0
        && kvs__tcp_accept(l->fd, kvs__now_ns() + 2000 * MS, &s, &e) == 0)
        close(s);
    return NULL;
}

static void test_tcp_connect_before_listen(void **state)
{
    struct kvs__err e = { 0 };
    struct late l = { 0, -1 };
    uint16_t port = 0;
    pthread_t th;
    int fd, s;

    (void)state;
    /* A free port: listen, note it, close. */
    assert_int_equal(kvs__tcp_listen(NULL, &port, 1, &fd, &e), 0);
    close(fd);
    l.port = port;
    assert_int_equal(pthread_create(&th, NULL, late_listen, &l), 0);
    assert_int_equal(kvs__tcp_connect("127.0.0.1", port, kvs__now_ns() + 3000 * MS, &s, &e), 0);
    pthread_join(th, NULL);
    close(s);
    close(l.fd);
}

static const struct kvs_transport_ops *ops_under_test;

/* Waits, taking at most max (<= 64) events a wait, until `want` bytes
 * came on conn (checked against expect) and the sends with tokens
 * [0, nsent) completed, in order. */
static void pump_by(struct kvs_transport *t, int conn, const unsigned char *expect, size_t want,
                    int nsent, int max)
{
    size_t got = 0;
    int next_token = 0;
    int64_t deadline = kvs__now_ns() + 20000 * MS;

    while (got < want || next_token < nsent) {
        struct kvs_transport_event ev[64];
        struct kvs_transport_error e = { 0 };
        int n = ops_under_test->wait(t, ev, max, deadline, &e);

        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
            switch (ev[i].type) {
            case KVS_TRANSPORT_RECV:
                assert_int_equal(ev[i].conn, conn);
                assert_true(got + ev[i].len <= want);
                assert_memory_equal(ev[i].data, expect + got, ev[i].len);
                got += ev[i].len;
                break;
            case KVS_TRANSPORT_SENT:
                assert_int_equal(ev[i].token, (uint64_t)next_token);
                next_token++;
                break;
            default:
                fail_msg("event %d on connection %d (status %d)", ev[i].type, ev[i].conn,
                         ev[i].status);
            }
        }
    }
}

static void pump(struct kvs_transport *t, int conn, const unsigned char *expect, size_t want,
                 int nsent)
{
    pump_by(t, conn, expect, want, nsent, 8);
}

/* len bytes in which no 4-byte word repeats: a piece out of place shows. */
static unsigned char *pattern(size_t len, uint32_t seed)
{
    unsigned char *p = malloc(len);

    assert_non_null(p);
    for (size_t i = 0; i < len; i += 4) {
        uint32_t w = ((uint32_t)(i / 4) ^ seed) * 2654435761u;

        memcpy(p + i, &w, len - i < 4 ? len - i : 4);
    }
    return p;
}

/* The loop reports nothing more within 50 ms: no second SENT, no stray
 * event. */
static void quiet(struct kvs_transport *t)
{
    struct kvs_transport_event ev[4];
    struct kvs_transport_error e = { 0 };

    assert_int_equal(ops_under_test->wait(t, ev, 4, kvs__now_ns() + 50 * MS, &e), 0);
}

/* Sends buf[0..len) from ca to cb (token 1) and from cb to ca (token 2)
 * at once, reading at most max events a wait: every byte comes in order
 * on each side, and each send's SENT once. */
static void both_ways(struct kvs_transport *t, int ca, int cb, const unsigned char *buf, size_t len,
                      int max)
{
    struct kvs_transport_error e = { 0 };
    size_t got[2] = { 0, 0 };
    int sent[2] = { 0, 0 };
    int64_t deadline = kvs__now_ns() + 30000 * MS;

    assert_int_equal(ops_under_test->send(t, ca, buf, len, 1, &e), 0);
    assert_int_equal(ops_under_test->send(t, cb, buf, len, 2, &e), 0);
    while (got[0] < len || got[1] < len || !sent[0] || !sent[1]) {
        struct kvs_transport_event ev[64];
        int n = ops_under_test->wait(t, ev, max, deadline, &e);

        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
            int on_b = ev[i].conn == cb;

            assert_true(on_b || ev[i].conn == ca);
            if (ev[i].type == KVS_TRANSPORT_RECV) {
                assert_true(got[on_b] + ev[i].len <= len);
                assert_memory_equal(ev[i].data, buf + got[on_b], ev[i].len);
                got[on_b] += ev[i].len;
            } else {
                assert_int_equal(ev[i].type, KVS_TRANSPORT_SENT);
                assert_int_equal(ev[i].token, (uint64_t)(on_b ? 2 : 1));
                assert_int_equal(sent[on_b]++, 0);
            }
        }
    }
    quiet(t);
}

static void test_loop_bytes(void **state)
{
    static const size_t sizes[] = { 1, 100, 65536, 1 << 20, 16 << 20 };
    size_t total = 0;
    unsigned char *buf;
    struct kvs_transport *t;
    struct kvs_transport_error e = { 0 };
    int a, b, ca, cb;

    (void)state;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];
    assert_non_null(buf = malloc(total));
    for (size_t i = 0; i < total; i++)
        buf[i] = (unsigned char)(i * 131 + (i >> 13));
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, 0, &ca, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, b, 0, &cb, &e), 0);
    assert_int_not_equal(ca, cb);
    /* a to b: every size queued at once, the big ones far beyond what a
     * socket buffers; the loop moves them while b reads. */
    for (size_t i = 0, off = 0; i < sizeof sizes / sizeof sizes[0]; off += sizes[i], i++)
        assert_int_equal(ops_under_test->send(t, ca, buf + off, sizes[i], i, &e), 0);
    pump(t, cb, buf, total, (int)(sizeof sizes / sizeof sizes[0]));
    /* and back */
    assert_int_equal(ops_under_test->send(t, cb, buf, 1 << 20, 0, &e), 0);
    pump(t, ca, buf, 1 << 20, 1);
    ops_under_test->close(t);
    free(buf);
}

static void test_loop_close_and_deadline(void **state)
{
    struct kvs_transport_event ev[4];
    struct kvs_transport *t;
    struct kvs_transport_error e = { 0 };
    int a, b, ca, n;
    int64_t t0;
    char x = 'x';

    (void)state;
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, 0, &ca, &e), 0);
    /* Nothing comes: the wait ends at its deadline, with no event. */
    t0 = kvs__now_ns();
    assert_int_equal(ops_under_test->wait(t, ev, 4, t0 + 100 * MS, &e), 0);
    assert_true(kvs__now_ns() - t0 >= 90 * MS && kvs__now_ns() - t0 < 2000 * MS);
    assert_int_equal(ops_under_test->wait(t, ev, 4, 0, &e), 0);
    /* The peer writes a byte and closes: the byte, then CLOSED with 0. */
    assert_int_equal(write(b, &x, 1), 1);
    close(b);
    n = 0;
    while (n == 0 || ev[n - 1].type != KVS_TRANSPORT_CLOSED) {
        int k = ops_under_test->wait(t, ev + n, 4 - n, kvs__now_ns() + 2000 * MS, &e);

        assert_true(k > 0);
        n += k;
    }
    assert_int_equal(ev[0].type, KVS_TRANSPORT_RECV);
    assert_int_equal(ev[0].len, 1);
    assert_int_equal(ev[n - 1].status, 0);
    assert_int_equal(ev[n - 1].conn, ca);
    /* Sends on it are refused; on an unknown connection too. */
    assert_int_equal(ops_under_test->send(t, ca, &x, 1, 0, &e), -ENOTCONN);
    assert_int_equal(ops_under_test->send(t, ca + 7, &x, 1, 0, &e), KVS_EBADARG);
    assert_int_equal(ops_under_test->send(t, -1, &x, 1, 0, &e), KVS_EBADARG);
    /* Dropped: its id is free again, and nothing of it is reported. */
    ops_under_test->drop(t, ca);
    assert_int_equal(ops_under_test->wait(t, ev, 4, 0, &e), 0);
    ops_under_test->close(t);
}

/* Sends queued, then the connection dropped before they went: no SENT of
 * them ever comes, and the next connection (maybe with the same id) sees
 * none either. */
static void test_loop_drop_pending(void **state)
{
    static unsigned char big[8 << 20];
    struct kvs_transport_event ev[4];
    struct kvs_transport *t;
    struct kvs_transport_error e = { 0 };
    int a, b, ca, cb, c2;

    (void)state;
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, 0, &ca, &e), 0);
    assert_int_equal(ops_under_test->send(t, ca, big, sizeof big, 1, &e), 0);
    assert_int_equal(ops_under_test->send(t, ca, big, 10, 2, &e), 0);
    ops_under_test->drop(t, ca);
    /* Its id may be the dropped one's again (at once for sockets; io_uring
     * waits until the kernel gave the cancelled sends back). */
    assert_int_equal(ops_under_test->adopt(t, b, 0, &cb, &e), 0);
    /* b reads what a's kernel buffer held, then a's close: no SENT. */
    for (;;) {
        int n = ops_under_test->wait(t, ev, 4, kvs__now_ns() + 5000 * MS, &e);

        assert_true(n > 0);
        for (int i = 0; i < n; i++)
            assert_int_not_equal(ev[i].type, KVS_TRANSPORT_SENT);
        if (ev[n - 1].type == KVS_TRANSPORT_CLOSED)
            break;
    }
    pair(&a, &b);
    assert_int_equal(ops_under_test->adopt(t, a, 0, &c2, &e), 0);
    assert_int_not_equal(c2, cb);
    close(b);
    ops_under_test->close(t);
}

/* 32 MiB in one send each way at once, a few events read a wait: far
 * more than io_uring's ring of buffers holds (1 MiB), so the buffers run
 * out and the receives are armed again, many times, the two connections
 * sharing the ring. Then one way, one event a wait. */
static void test_loop_beyond_buffers(void **state)
{
    size_t len = 32 << 20;
    unsigned char *buf = pattern(len, 1);
    struct kvs_transport *t;
    struct kvs_transport_error e = { 0 };
    int a, b, ca, cb;

    (void)state;
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, 0, &ca, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, b, 0, &cb, &e), 0);
    both_ways(t, ca, cb, buf, len, 3);
    assert_int_equal(ops_under_test->send(t, ca, buf, len, 0, &e), 0);
    pump_by(t, cb, buf, len, 1, 1);
    quiet(t);
    ops_under_test->close(t);
    free(buf);
}

/* Sends at, just under and far over io_uring's zero-copy threshold (64
 * KiB), mixed with small ones, each SENT once and in order, every byte in
 * place; then the same again on the same connection. Over loopback the
 * kernel copies what it was to send zero-copy and says so: the second
 * round goes plain, and works as well. */
static void test_loop_big_sends(void **state)
{
    static const size_t sizes[] = { 65536, 65535, (1 << 20) + 3, 100, 4 << 20, 3 * 65536 + 1 };
    size_t total = 0;
    unsigned char *buf;
    struct kvs_transport *t;
    struct kvs_transport_error e = { 0 };
    int a, b, ca, cb;

    (void)state;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];
    buf = pattern(total, 2);
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, 0, &ca, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, b, 0, &cb, &e), 0);
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0, off = 0; i < sizeof sizes / sizeof sizes[0]; off += sizes[i], i++)
            assert_int_equal(ops_under_test->send(t, ca, buf + off, sizes[i], i, &e), 0);
        pump(t, cb, buf, total, (int)(sizeof sizes / sizeof sizes[0]));
        quiet(t);
    }
    both_ways(t, ca, cb, buf, 2 << 20, 8);
    ops_under_test->close(t);
    free(buf);
}

/* Big sends on AF_UNIX sockets, which refuse zero-copy: they go plain. */
static void test_loop_unix(void **state)
{
    size_t len = (1 << 20) + 5;
    unsigned char *buf = pattern(len, 4);
    struct kvs_transport *t;
    struct kvs_transport_error e = { 0 };
    int sv[2], ca, cb;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, sv[0], 0, &ca, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, sv[1], 0, &cb, &e), 0);
    both_ways(t, ca, cb, buf, len, 8);
    both_ways(t, ca, cb, buf, 70000, 8);
    ops_under_test->close(t);
    free(buf);
}

/* A connection dropped with a big send in flight (its peer reads nothing
 * yet: io_uring's zero-copy send waits for room, its notification too)
 * and its receive armed, while bytes it received are in the caller's
 * hands: nothing of the connection is reported after, its socket closes
 * (the peer reads to the end) and the loop goes on with a new
 * connection. ASan or valgrind check the memory. */
static void test_loop_drop_busy(void **state)
{
    size_t len = 16 << 20;
    unsigned char *buf = pattern(len, 5), *sink = malloc(1 << 20);
    struct kvs_transport_event ev[8];
    struct kvs_transport *t;
    struct kvs_transport_error e = { 0 };
    int a, b, c, d, ca, cc, cd, n, ended = 0;
    size_t drained = 0;
    int64_t deadline;

    (void)state;
    assert_non_null(sink);
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, 0, &ca, &e), 0);
    assert_int_equal(ops_under_test->send(t, ca, buf, len, 7, &e), 0);
    assert_int_equal(write(b, buf, 100), 100);
    n = ops_under_test->wait(t, ev, 8, kvs__now_ns() + 2000 * MS, &e);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].type, KVS_TRANSPORT_RECV);
    assert_int_equal(ev[0].len, 100);
    assert_memory_equal(ev[0].data, buf, 100);
    ops_under_test->drop(t, ca);
#ifdef HAVE_LIBURING
    /* Its buffer goes back to the ring at the next wait, not at the drop
     * (sockets free theirs at the drop). */
    if (ops_under_test == &kvs__tp_uring)
        assert_memory_equal(ev[0].data, buf, 100);
#endif
    /* The peer reads what came, then the end (a reset, for a socket
     * dropped with pages the kernel still held); the loop says nothing. */
    assert_int_equal(fcntl(b, F_SETFL, O_NONBLOCK), 0);
    deadline = kvs__now_ns() + 10000 * MS;
    while (!ended && kvs__now_ns() < deadline) {
        ssize_t r = read(b, sink, 1 << 20);

        if (r > 0) {
            assert_memory_equal(sink, buf + drained, (size_t)r);
            drained += (size_t)r;
        } else if (r == 0 || errno == ECONNRESET) {
            ended = 1;
        } else {
            assert_int_equal(errno, EAGAIN);
            assert_int_equal(ops_under_test->wait(t, ev, 8, kvs__now_ns() + 10 * MS, &e), 0);
        }
    }
    assert_true(ended);
    assert_true(drained < len);
    close(b);
    quiet(t);
    pair(&c, &d);
    assert_int_equal(ops_under_test->adopt(t, c, 0, &cc, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, d, 0, &cd, &e), 0);
    both_ways(t, cc, cd, buf, 3 << 20, 8);
    ops_under_test->close(t);
    free(sink);
    free(buf);
}

static void test_find(void **state)
{
    struct kvs__tp_choice c;
    struct kvs__err e = { 0 };
    char note[256];

    (void)state;
    unsetenv("KVS_TRANSPORT");
    assert_int_equal(kvs__tp_find(NULL, &c, note, sizeof note, &e), 0);
    assert_non_null(c.ops);
    assert_null(c.dl);
#ifdef HAVE_LIBURING
    /* io_uring works on the machines the tests run on. */
    assert_string_equal(c.ops->name, "uring");
    assert_string_equal(note, "");
    assert_int_equal(kvs__tp_find("uring", &c, NULL, 0, &e), 0);
    assert_string_equal(c.ops->name, "uring");
#endif
    assert_int_equal(kvs__tp_find("socket", &c, NULL, 0, &e), 0);
    assert_string_equal(c.ops->name, "socket");
    setenv("KVS_TRANSPORT", "socket", 1);
    assert_int_equal(kvs__tp_find(NULL, &c, note, sizeof note, &e), 0);
    assert_string_equal(c.ops->name, "socket");
    /* An unknown name: no plug-in of that name where plug-ins are. */
    setenv("KVS_TRANSPORT_DIR", "/nonexistent", 1);
    setenv("KVS_TRANSPORT", "carrier-pigeon", 1);
    assert_int_equal(kvs__tp_find(NULL, &c, note, sizeof note, &e), KVS_EBADARG);
    assert_non_null(strstr(e.msg, "carrier-pigeon"));
    assert_non_null(strstr(e.msg, "socket"));
    assert_non_null(strstr(e.msg, "/nonexistent/kvs-transport-carrier-pigeon.so"));
    assert_null(c.ops);
    setenv("KVS_TRANSPORT", "../../etc/x", 1);
    assert_int_equal(kvs__tp_find(NULL, &c, NULL, 0, &e), KVS_EBADARG);
    unsetenv("KVS_TRANSPORT_DIR");
    unsetenv("KVS_TRANSPORT");
}

/* The stub plug-in, loaded for the tests after test_plugin. */
static struct kvs__tp_choice stub_kept;

/* A plug-in: loaded by path, it works as the transport it wraps; each way
 * it can be wrong is refused, naming the file and the reason. */
static void test_plugin(void **state)
{
    static const struct { const char *how, *says; } bad[] = {
        { "version", "built for transport ops version 2; this kvsd takes version 1" },
        { "short", "lacks a call" },
        { "open", "does not open here: the stub's device is unplugged" },
        { "none", "gave no ops table" },
    };
    struct kvs_transport_error te = { 0 };
    struct kvs__tp_choice c;
    struct kvs__err e = { 0 };
    struct kvs_transport *t;

    (void)state;
    unsetenv("TP_STUB");
    assert_int_equal(kvs__tp_find(STUB_PATH, &c, NULL, 0, &e), 0);
    assert_non_null(c.dl);
    assert_string_equal(c.ops->name, "stub");
    assert_string_equal(c.path, STUB_PATH);
    assert_int_equal(c.ops->open(&t, &te), 0);
    c.ops->close(t);
    kvs__tp_release(&c);
    assert_null(c.dl);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("TP_STUB", bad[i].how, 1);
        e.msg[0] = '\0';
        assert_int_equal(kvs__tp_find(STUB_PATH, &c, NULL, 0, &e), KVS_EBADARG);
        assert_non_null(strstr(e.msg, STUB_PATH));
        if (!strstr(e.msg, bad[i].says))
            fail_msg("TP_STUB=%s: '%s' does not say '%s'", bad[i].how, e.msg, bad[i].says);
        assert_null(c.ops);
        assert_null(c.dl);
    }
    unsetenv("TP_STUB");
    /* Not a plug-in: a shared object without the entry; no file at all. */
    assert_int_equal(kvs__tp_find("/lib/x86_64-linux-gnu/libm.so.6", &c, NULL, 0, &e),
                     KVS_EBADARG);
    assert_non_null(strstr(e.msg, "has no kvs_transport_entry"));
    assert_non_null(strstr(e.msg, "libm.so.6"));
    assert_int_equal(kvs__tp_find("/nonexistent/tp.so", &c, NULL, 0, &e), KVS_EBADARG);
    assert_non_null(strstr(e.msg, "no plug-in at /nonexistent/tp.so"));
    /* Kept for the tests of the loop that follow. */
    assert_int_equal(kvs__tp_find(STUB_PATH, &stub_kept, NULL, 0, &e), 0);
    ops_under_test = stub_kept.ops;
}

/* A wait on one thread returns at once when another wakes it, long before
 * its deadline; a wake with no wait makes the next one return. */
static void *waker(void *arg)
{
    struct timespec ts = { 0, 50 * MS };

    nanosleep(&ts, NULL);
    ops_under_test->wake(arg);
    return NULL;
}

static void test_loop_wake(void **state)
{
    struct kvs_transport_error e = { 0 };
    struct kvs_transport_event ev[4];
    struct kvs_transport *t;
    pthread_t th;
    int64_t t0;

    (void)state;
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(pthread_create(&th, NULL, waker, t), 0);
    t0 = kvs__now_ns();
    assert_int_equal(ops_under_test->wait(t, ev, 4, t0 + 10000 * MS, &e), 0);
    assert_true(kvs__now_ns() - t0 < 5000 * MS);
    pthread_join(th, NULL);
    ops_under_test->wake(t);
    t0 = kvs__now_ns();
    assert_int_equal(ops_under_test->wait(t, ev, 4, t0 + 10000 * MS, &e), 0);
    assert_true(kvs__now_ns() - t0 < 5000 * MS);
    /* Woken once: the next wait runs to its deadline. */
    t0 = kvs__now_ns();
    assert_int_equal(ops_under_test->wait(t, ev, 4, t0 + 100 * MS, &e), 0);
    assert_true(kvs__now_ns() - t0 >= 100 * MS);
    ops_under_test->close(t);
}

static int use_socket(void **state)
{
    (void)state;
    ops_under_test = &kvs__tp_socket;
    return 0;
}

#ifdef HAVE_LIBURING
static int use_uring(void **state)
{
    (void)state;
    ops_under_test = &kvs__tp_uring;
    return 0;
}

static int refused = -1;               /* what the filters refuse: 1 the ring, 2 the probe too */

/* From here on io_uring_register(2) refuses opcode op with EINVAL, as a
 * kernel that lacks it: a seccomp filter, for good (so: the last tests). */
static int refuse_register(unsigned op)
{
    /* args[1]'s low half */
    unsigned arg1 = offsetof(struct seccomp_data, args[1])
                    + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 4 : 0);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg1),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, op, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof f / sizeof f[0], f };

    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
           && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

/* A kernel that refuses the buffer ring: receives into each connection's
 * own buffer; zero-copy sends still. */
static int use_uring_no_ring(void **state)
{
    (void)state;
    if (refused < 0)
        refused = refuse_register(IORING_REGISTER_PBUF_RING);
    ops_under_test = &kvs__tp_uring;
    return 0;
}

/* A kernel before 6.0: no probe of what it has, so neither zero-copy nor
 * multishot receives. */
static int use_uring_old(void **state)
{
    (void)state;
    if (refused == 1)
        refused = refuse_register(IORING_REGISTER_PROBE) ? 2 : 0;
    ops_under_test = &kvs__tp_uring;
    return 0;
}

/* The filters are on: a buffer ring is refused, and then the probe. */
static void test_refused(void **state)
{
    size_t size = (size_t)sysconf(_SC_PAGESIZE);
    struct io_uring_buf_reg reg = { .ring_entries = 1 };
    struct io_uring_probe *p;
    struct io_uring ring;
    void *page = NULL;

    (void)state;
    if (refused <= 0)
        skip();                        /* no seccomp here */
    assert_int_equal(posix_memalign(&page, size, size), 0);
    reg.ring_addr = (uint64_t)(uintptr_t)page;
    assert_int_equal(io_uring_queue_init(8, &ring, 0), 0);
    assert_int_equal(io_uring_register_buf_ring(&ring, &reg, 0), -EINVAL);
    p = io_uring_get_probe_ring(&ring);
    assert_true(refused == 2 ? p == NULL : p != NULL);
    if (p)
        io_uring_free_probe(p);
    io_uring_queue_exit(&ring);
    free(page);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_errors),
        cmocka_unit_test(test_tcp_connect_before_listen),
        cmocka_unit_test_setup(test_loop_bytes, use_socket),
        cmocka_unit_test_setup(test_loop_close_and_deadline, use_socket),
        cmocka_unit_test_setup(test_loop_drop_pending, use_socket),
        cmocka_unit_test_setup(test_loop_beyond_buffers, use_socket),
        cmocka_unit_test_setup(test_loop_big_sends, use_socket),
        cmocka_unit_test_setup(test_loop_unix, use_socket),
        cmocka_unit_test_setup(test_loop_drop_busy, use_socket),
        cmocka_unit_test_setup(test_loop_wake, use_socket),
#ifdef HAVE_LIBURING
        cmocka_unit_test_setup(test_loop_bytes, use_uring),
        cmocka_unit_test_setup(test_loop_close_and_deadline, use_uring),
        cmocka_unit_test_setup(test_loop_drop_pending, use_uring),
        cmocka_unit_test_setup(test_loop_beyond_buffers, use_uring),
        cmocka_unit_test_setup(test_loop_big_sends, use_uring),
        cmocka_unit_test_setup(test_loop_unix, use_uring),
        cmocka_unit_test_setup(test_loop_drop_busy, use_uring),
        cmocka_unit_test_setup(test_loop_wake, use_uring),
#endif
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_plugin),
        cmocka_unit_test(test_loop_bytes),         /* over the plug-in test_plugin loaded */
        cmocka_unit_test(test_loop_wake),
#ifdef HAVE_LIBURING
        /* Last: the filter stays. */
        cmocka_unit_test_setup(test_refused, use_uring_no_ring),
        cmocka_unit_test_setup(test_loop_bytes, use_uring_no_ring),
        cmocka_unit_test_setup(test_loop_close_and_deadline, use_uring_no_ring),
        cmocka_unit_test_setup(test_loop_beyond_buffers, use_uring_no_ring),
        cmocka_unit_test_setup(test_loop_big_sends, use_uring_no_ring),
        cmocka_unit_test_setup(test_loop_drop_busy, use_uring_no_ring),
        cmocka_unit_test_setup(test_refused, use_uring_old),
        cmocka_unit_test_setup(test_loop_bytes, use_uring_old),
        cmocka_unit_test_setup(test_loop_drop_pending, use_uring_old),
        cmocka_unit_test_setup(test_loop_big_sends, use_uring_old),
#endif
    };

    return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
