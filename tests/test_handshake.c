/*
 * test_handshake.c - the handshake between hosts (daemon/net/handshake.c),
 * both sides at once over real connections (a socket pair, and TCP on
 * loopback): hosts of one job and one secret accept each other; a wrong
 * secret, another job, another job size, garbage and an idle peer all end
 * in an error on both sides within the deadline, never a hang.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "handshake.h"
#include "shm/ring.h"                      /* kvs__now_ns */

static struct kvs__secret secret_of(const char *text)
{
    struct kvs__secret s;
    char path[] = "/tmp/kvs_test_handshake_XXXXXX";
    struct kvs__err e = { 0, "" };
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(kvs__secret_load(path, &s, &e), 0);
    unlink(path);
    return s;
}

struct server {
    int fd;
    struct kvs__secret secret;
    struct kvs__host_id me;
    int64_t deadline_ns;
    int rc;
    uint32_t client, workers;
    struct kvs__err e;
};

static void *serve(void *arg)
{
    struct server *sv = arg;

    sv->rc = kvs__handshake_server(sv->fd, &sv->secret, &sv->me, sv->deadline_ns, &sv->client,
                                   &sv->workers, &sv->e);
    close(sv->fd);
    return NULL;
}

#define SECRET "the job's secret: 32 bytes long!"

/* Runs a client of (secret, job, host, nhosts) against a server that is
 * host 0 of 3 of job "job-a"; returns the client's code, the server's in
 * *server_rc. */
static int run(const char *client_secret, const char *job, uint32_t host, uint32_t nhosts,
               struct server *sv, struct kvs__err *e)
{
    struct kvs__secret cs = secret_of(client_secret);
    struct kvs__host_id me = { job, host, nhosts, 5 };
    int64_t deadline = kvs__now_ns() + 5000000000LL;
    pthread_t t;
    int sp[2], rc;

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    *sv = (struct server){ .fd = sp[0], .secret = secret_of(SECRET),
                           .me = { "job-a", 0, 3, 2 }, .deadline_ns = deadline };
    assert_int_equal(pthread_create(&t, NULL, serve, sv), 0);
    rc = kvs__handshake_client(sp[1], &cs, &me, 0, deadline, e);
    close(sp[1]);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(kvs__now_ns() < deadline);     /* nobody waited for the deadline */
    return rc;
}

static void says(const struct kvs__err *e, const char *text)
{
    if (!strstr(e->msg, text))
        fail_msg("detail \"%s\" does not say \"%s\"", e->msg, text);
}

static void test_accepted(void **state)
{
    struct server sv;
    struct kvs__err e = { 0, "" };

    (void)state;
    assert_int_equal(run(SECRET "\n", "job-a", 2, 3, &sv, &e), 0);
    assert_int_equal(sv.rc, 0);
    assert_int_equal(sv.client, 2);
    assert_int_equal(sv.workers, 5);
}

static void test_wrong_secret(void **state)
{
    struct server sv;
    struct kvs__err e = { 0, "" };

    (void)state;
    assert_int_equal(run("not the job's secret, 32 bytes..", "job-a", 1, 3, &sv, &e),
                     KVS_EPROTO);
    says(&e, "server host's proof is wrong");
    assert_int_not_equal(sv.rc, 0);            /* the client hung up before its proof */
}

static void test_refusals_say_why(void **state)
{
    struct server sv;
    struct kvs__err e = { 0, "" };

    (void)state;
    assert_int_equal(run(SECRET, "job-b", 1, 3, &sv, &e), KVS_EBADARG);
    says(&e, "host 0 refused this host: host 1 is of job 'job-b', this host serves job 'job-a'");
    assert_int_equal(sv.rc, KVS_EBADARG);
    assert_int_equal(run(SECRET, "job-a", 1, 2, &sv, &e), KVS_EBADARG);
    says(&e, "says the job has 2 hosts; it has 3");
    assert_int_equal(run(SECRET, "job-a", 0, 3, &sv, &e), KVS_EBADARG);
    says(&e, "this is host 0");
    /* Host 3 of a job of 3: the server drops a bad frame without a word. */
    assert_int_equal(run(SECRET, "job-a", 3, 4, &sv, &e), -ECONNRESET);
    assert_int_equal(sv.rc, KVS_EPROTO);
}

/* A peer that is not a kvs host: garbage is refused at the first head, an
 * idle connection at the deadline. */
static void test_garbage_and_idle(void **state)
{
    struct server sv = { .secret = secret_of(SECRET), .me = { "job-a", 0, 3, 2 } };
    const char junk[] = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
    pthread_t t;
    int sp[2];

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    sv.fd = sp[0];
    sv.deadline_ns = kvs__now_ns() + 5000000000LL;
    assert_int_equal(pthread_create(&t, NULL, serve, &sv), 0);
    assert_int_equal(write(sp[1], junk, sizeof junk), (ssize_t)sizeof junk);
    assert_int_equal(pthread_join(t, NULL), 0);
    close(sp[1]);
    assert_int_equal(sv.rc, KVS_EPROTO);
    says(&sv.e, "not a kvs host");

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    sv.fd = sp[0];
    sv.deadline_ns = kvs__now_ns() + 200000000LL;             /* 0.2 s */
    assert_int_equal(pthread_create(&t, NULL, serve, &sv), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    close(sp[1]);
    assert_int_equal(sv.rc, -ETIMEDOUT);
}

/* The same over TCP on loopback: a byte stream that may split frames. */
static void test_tcp_loopback(void **state)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    struct server sv = { .secret = secret_of(SECRET), .me = { "job-a", 0, 3, 2 } };
    struct kvs__secret cs = secret_of(SECRET);
    struct kvs__host_id me = { "job-a", 1, 3, 4 };
    struct kvs__err e = { 0, "" };
    pthread_t t;
    int l, c;

    (void)state;
    l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(l >= 0);
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 4), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &alen), 0);
    c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof a), 0);
    sv.fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    assert_true(sv.fd >= 0);
    sv.deadline_ns = kvs__now_ns() + 5000000000LL;
    assert_int_equal(pthread_create(&t, NULL, serve, &sv), 0);
    assert_int_equal(kvs__handshake_client(c, &cs, &me, 0, sv.deadline_ns, &e), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(sv.rc, 0);
    assert_int_equal(sv.client, 1);
    assert_int_equal(sv.workers, 4);
    close(c);
    close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepted),
        cmocka_unit_test(test_wrong_secret),
        cmocka_unit_test(test_refusals_say_why),
        cmocka_unit_test(test_garbage_and_idle),
        cmocka_unit_test(test_tcp_loopback),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
