/*
 * test_transport.c - unit tests of the streams between hosts
 * (daemon/transport.h) over loopback: TCP listeners, accepts and connects
 * with their deadlines, and every transport's loop (sockets, io_uring): bytes of any size
 * arrive whole and in order in both directions, sends complete in order,
 * a peer's close and a wait's deadline are reported, a closed or unknown
 * connection refuses sends, and a dropped one reports nothing more.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ring.h"
#include "transport.h"

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

static const struct kvs__tp_ops *ops_under_test;

/* Waits until `want` bytes came on conn (checked against expect) and the
 * sends with tokens [0, nsent) completed, in order. */
static void pump(struct kvs__tp *t, int conn, const unsigned char *expect, size_t want,
                 int nsent)
{
    size_t got = 0;
    int next_token = 0;
    int64_t deadline = kvs__now_ns() + 20000 * MS;

    while (got < want || next_token < nsent) {
        struct kvs__tp_event ev[8];
        struct kvs__err e = { 0 };
        int n = ops_under_test->wait(t, ev, 8, deadline, &e);

        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
            switch (ev[i].type) {
            case KVS__TP_RECV:
                assert_int_equal(ev[i].conn, conn);
                assert_true(got + ev[i].len <= want);
                assert_memory_equal(ev[i].data, expect + got, ev[i].len);
                got += ev[i].len;
                break;
            case KVS__TP_SENT:
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

static void test_loop_bytes(void **state)
{
    static const size_t sizes[] = { 1, 100, 65536, 1 << 20, 16 << 20 };
    size_t total = 0;
    unsigned char *buf;
    struct kvs__tp *t;
    struct kvs__err e = { 0 };
    int a, b, ca, cb;

    (void)state;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];
    assert_non_null(buf = malloc(total));
    for (size_t i = 0; i < total; i++)
        buf[i] = (unsigned char)(i * 131 + (i >> 13));
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, &ca, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, b, &cb, &e), 0);
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
    struct kvs__tp_event ev[4];
    struct kvs__tp *t;
    struct kvs__err e = { 0 };
    int a, b, ca, n;
    int64_t t0;
    char x = 'x';

    (void)state;
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, &ca, &e), 0);
    /* Nothing comes: the wait ends at its deadline, with no event. */
    t0 = kvs__now_ns();
    assert_int_equal(ops_under_test->wait(t, ev, 4, t0 + 100 * MS, &e), 0);
    assert_true(kvs__now_ns() - t0 >= 90 * MS && kvs__now_ns() - t0 < 2000 * MS);
    assert_int_equal(ops_under_test->wait(t, ev, 4, 0, &e), 0);
    /* The peer writes a byte and closes: the byte, then CLOSED with 0. */
    assert_int_equal(write(b, &x, 1), 1);
    close(b);
    n = 0;
    while (n == 0 || ev[n - 1].type != KVS__TP_CLOSED) {
        int k = ops_under_test->wait(t, ev + n, 4 - n, kvs__now_ns() + 2000 * MS, &e);

        assert_true(k > 0);
        n += k;
    }
    assert_int_equal(ev[0].type, KVS__TP_RECV);
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
    struct kvs__tp_event ev[4];
    struct kvs__tp *t;
    struct kvs__err e = { 0 };
    int a, b, ca, cb, c2;

    (void)state;
    pair(&a, &b);
    assert_int_equal(ops_under_test->open(&t, &e), 0);
    assert_int_equal(ops_under_test->adopt(t, a, &ca, &e), 0);
    assert_int_equal(ops_under_test->send(t, ca, big, sizeof big, 1, &e), 0);
    assert_int_equal(ops_under_test->send(t, ca, big, 10, 2, &e), 0);
    ops_under_test->drop(t, ca);
    /* Its id may be the dropped one's again (at once for sockets; io_uring
     * waits until the kernel gave the cancelled sends back). */
    assert_int_equal(ops_under_test->adopt(t, b, &cb, &e), 0);
    /* b reads what a's kernel buffer held, then a's close: no SENT. */
    for (;;) {
        int n = ops_under_test->wait(t, ev, 4, kvs__now_ns() + 5000 * MS, &e);

        assert_true(n > 0);
        for (int i = 0; i < n; i++)
            assert_int_not_equal(ev[i].type, KVS__TP_SENT);
        if (ev[n - 1].type == KVS__TP_CLOSED)
            break;
    }
    pair(&a, &b);
    assert_int_equal(ops_under_test->adopt(t, a, &c2, &e), 0);
    assert_int_not_equal(c2, cb);
    close(b);
    ops_under_test->close(t);
}

static void test_find(void **state)
{
    const struct kvs__tp_ops *o = NULL;
    struct kvs__err e = { 0 };
    char note[256];

    (void)state;
    unsetenv("KVS_TRANSPORT");
    assert_int_equal(kvs__tp_find(NULL, &o, note, sizeof note, &e), 0);
    assert_non_null(o);
#ifdef HAVE_LIBURING
    /* io_uring works on the machines the tests run on. */
    assert_string_equal(o->name, "uring");
    assert_string_equal(note, "");
    assert_int_equal(kvs__tp_find("uring", &o, NULL, 0, &e), 0);
    assert_string_equal(o->name, "uring");
#endif
    assert_int_equal(kvs__tp_find("socket", &o, NULL, 0, &e), 0);
    assert_string_equal(o->name, "socket");
    setenv("KVS_TRANSPORT", "socket", 1);
    assert_int_equal(kvs__tp_find(NULL, &o, note, sizeof note, &e), 0);
    assert_string_equal(o->name, "socket");
    setenv("KVS_TRANSPORT", "carrier-pigeon", 1);
    assert_int_equal(kvs__tp_find(NULL, &o, note, sizeof note, &e), KVS_EBADARG);
    assert_non_null(strstr(e.msg, "carrier-pigeon"));
    assert_non_null(strstr(e.msg, "socket"));
    unsetenv("KVS_TRANSPORT");
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
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_errors),
        cmocka_unit_test(test_tcp_connect_before_listen),
        cmocka_unit_test_setup(test_loop_bytes, use_socket),
        cmocka_unit_test_setup(test_loop_close_and_deadline, use_socket),
        cmocka_unit_test_setup(test_loop_drop_pending, use_socket),
#ifdef HAVE_LIBURING
        cmocka_unit_test_setup(test_loop_bytes, use_uring),
        cmocka_unit_test_setup(test_loop_close_and_deadline, use_uring),
        cmocka_unit_test_setup(test_loop_drop_pending, use_uring),
#endif
        cmocka_unit_test(test_find),
    };

    return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
