/*
 * test_tp_ucx.c - the UCX plug-in (kvs-transport-ucx.so) drops a message
 * whose token is not the one its receiver chose for the connection: two
 * loops of the plug-in adopt the two ends of a connection through a relay
 * that forges the token one end tells the other, so that every message
 * that end then sends carries a wrong token. Those messages are dropped:
 * no byte of them is handed up, and the connection goes on (no CLOSED);
 * the other direction, whose token is true, delivers. TAP output; exit 77
 * where the plug-in cannot open (UCX finds no transport).
 *
 * Usage: test_tp_ucx PLUGIN_PATH
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loader.h"
#include "shm/ring.h"                  /* kvs__now_ns */

#define MS 1000000ll
#define HELLO_BYTES 24                 /* tp_ucx.c's struct hello: magic, token, conn, addr_len */
#define TOKEN_OFF 8

static const struct kvs_transport_ops *ops;
static int ntest, failed;

static void tap(int ok, const char *what)
{
    printf("%sok %d - %s\n", ok ? "" : "not ", ++ntest, what);
    failed |= !ok;
}

struct adopting {
    struct kvs_transport *t;
    int fd, conn, rc;
    struct kvs_transport_error e;
};

static void *adopt_thread(void *arg)
{
    struct adopting *a = arg;

    a->rc = ops->adopt(a->t, a->fd, kvs__now_ns() + 10000 * MS, &a->conn, &a->e);
    return NULL;
}

static int io_all(int fd, void *buf, size_t n, int wr)
{
    unsigned char *p = buf;

    while (n > 0) {
        ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One hello from `from` to `to`, its token flipped when forge is set. */
static int relay_hello(int from, int to, int forge)
{
    unsigned char h[HELLO_BYTES], *addr;
    uint32_t alen;
    int rc;

    if (io_all(from, h, sizeof h, 0) != 0)
        return -1;
    memcpy(&alen, h + 20, sizeof alen);
    if (alen == 0 || alen > 65536 || !(addr = malloc(alen)))
        return -1;
    if (forge)
        h[TOKEN_OFF] ^= 1;
    rc = io_all(from, addr, alen, 0) == 0 && io_all(to, h, sizeof h, 1) == 0
         && io_all(to, addr, alen, 1) == 0 ? 0 : -1;
    free(addr);
    return rc;
}

/* Events of loop t within ms milliseconds: RECV bytes of conn added to
 * *got, SENT and CLOSED counted. */
static void pump(struct kvs_transport *t, int conn, int64_t ms, size_t *got, int *sent,
                 int *closed)
{
    int64_t until = kvs__now_ns() + ms * MS;
    struct kvs_transport_event ev[16];
    struct kvs_transport_error e = { 0, "" };

    while (kvs__now_ns() < until) {
        int n = ops->wait(t, ev, 16, kvs__now_ns() + 20 * MS, &e);

        for (int i = 0; i < n; i++) {
            if (ev[i].conn != conn)
                continue;
            if (ev[i].type == KVS_TRANSPORT_RECV)
                *got += ev[i].len;
            else if (ev[i].type == KVS_TRANSPORT_SENT)
                (*sent)++;
            else if (ev[i].type == KVS_TRANSPORT_CLOSED)
                (*closed)++;
        }
    }
}

int main(int argc, char **argv)
{
    struct kvs__tp_choice tpc;
    struct kvs__err err = { 0, "" };
    struct kvs_transport_error e = { 0, "" };
    struct adopting a = { 0 }, b = { 0 };
    pthread_t ta, tb;
    int sa[2], sb[2];
    static char msg[] = "a frame from the end whose token was forged";
    static char back[] = "a frame the other way";
    size_t a_got = 0, b_got = 0;
    int a_sent = 0, b_sent = 0, a_closed = 0, b_closed = 0, ok;

    if (argc != 2) {
        fprintf(stderr, "usage: test_tp_ucx PLUGIN_PATH\n");
        return 2;
    }
    setenv("UCX_TLS", "tcp", 0);
    if (kvs__tp_find(argv[1], &tpc, NULL, 0, &err) != 0) {
        printf("1..0 # SKIP the UCX plug-in does not open here: %s\n", err.msg);
        return 77;
    }
    ops = tpc.ops;
    if (ops->open(&a.t, &e) != 0 || ops->open(&b.t, &e) != 0) {
        printf("1..0 # SKIP the UCX plug-in does not open here: %s\n", e.msg);
        return 77;
    }
    printf("1..4\n");
    /* a.fd <-> sa[1] (relay) sb[1] <-> b.fd: b's hello reaches a with its
     * token forged, so every message a sends carries a wrong one. */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sa) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sb) != 0)
        return 1;
    a.fd = sa[0];
    b.fd = sb[0];
    pthread_create(&ta, NULL, adopt_thread, &a);
    pthread_create(&tb, NULL, adopt_thread, &b);
    ok = relay_hello(sa[1], sb[1], 0) == 0 && relay_hello(sb[1], sa[1], 1) == 0;
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    tap(ok && a.rc == 0 && b.rc == 0, "both ends adopt the connection through the relay");
    if (!ok || a.rc || b.rc) {
        fprintf(stderr, "adopt: %s / %s\n", a.e.msg, b.e.msg);
        return 1;
    }

    /* a -> b with the forged token, then b -> a with the true one. */
    ok = ops->send(a.t, a.conn, msg, sizeof msg, 1, &e) == 0
         && ops->send(b.t, b.conn, back, sizeof back, 2, &e) == 0;
    for (int i = 0; i < 50 && (a_got < sizeof back || a_sent < 1); i++) {
        pump(a.t, a.conn, 20, &a_got, &a_sent, &a_closed);
        pump(b.t, b.conn, 20, &b_got, &b_sent, &b_closed);
    }
    /* a while more for a forged message to show up, if it would */
    for (int i = 0; i < 10; i++) {
        pump(a.t, a.conn, 20, &a_got, &a_sent, &a_closed);
        pump(b.t, b.conn, 20, &b_got, &b_sent, &b_closed);
    }
    tap(ok && a_got == sizeof back && b_sent == 1,
        "the direction with the true token delivers");
    tap(b_got == 0, "a message with a forged token is dropped: none of its bytes go up");
    tap(a_closed == 0 && b_closed == 0, "... and the connection goes on");
    if (failed)
        fprintf(stderr, "a got %zu sent %d closed %d; b got %zu sent %d closed %d\n", a_got,
                a_sent, a_closed, b_got, b_sent, b_closed);
    ops->close(a.t);
    ops->close(b.t);
    kvs__tp_release(&tpc);
    return failed;
}
