/*
 * test_raw.c - kvsd against a worker that speaks the protocol by hand:
 * the order in which kvsd serves waiting requests (higher priority first),
 * and what it does with a worker that writes garbage into its own ring (an
 * unknown request, an impossible ring index, a range outside its staging
 * area): that worker is evicted, the other worker's round fails with
 * KVS_EPEERDEAD, and kvsd neither crashes nor hangs. A worker that closes
 * while pushes of it still wait in kvsd (whose data is in its staging
 * area) fails the job the same way. A worker cannot resize its segment
 * under kvsd. And a client of another user is refused.
 *
 * kvsd is $top_builddir/daemon/kvsd/kvsd (or $KVSD), run in a private
 * XDG_RUNTIME_DIR.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto/layout.h"
#include "proto/proto.h"
#include "shm/ring.h"
#include "shm/shm.h"

#define SEC 1000000000ll
#define SQ_TAIL_OFF 64                 /* ring.c's header: geometry, tail, head lines */

extern char **environ;

struct raw {
    int sock, seg_fd;                  /* seg_fd: the segment's descriptor, kept open */
    void *ctl, *seg;
    const unsigned char *arena;
    struct kvs__welcome w;
    struct kvs__bell *dbell;
    struct kvs__ring sq, cq;
    unsigned char *staging;
};

static char job[64];
static pid_t kvsd_pid;

static void start_kvsd(const char *name, int n)
{
    char nbuf[16], path[PATH_MAX], sock[PATH_MAX + 80], dir[PATH_MAX];
    const char *kvsd = getenv("KVSD");
    char *argv[] = { "kvsd", "--job", (char *)name, "-n", nbuf, "-q", NULL };
    int64_t deadline = kvs__now_ns() + 10 * SEC;
    struct stat st;

    if (!kvsd) {
        snprintf(path, sizeof path, "%s/daemon/kvsd/kvsd",
                 getenv("top_builddir") ? getenv("top_builddir") : ".");
        kvsd = path;
    }
    snprintf(nbuf, sizeof nbuf, "%d", n);
    snprintf(job, sizeof job, "%s", name);
    assert_int_equal(posix_spawn(&kvsd_pid, kvsd, NULL, NULL, argv, environ), 0);
    assert_int_equal(kvs__runtime_dir(dir, sizeof dir, NULL), 0);
    snprintf(sock, sizeof sock, "%s/%s.sock", dir, name);
    while (stat(sock, &st) != 0 && kvs__now_ns() < deadline)
        usleep(10000);
    assert_int_equal(stat(sock, &st), 0);
}

/* kvsd's exit status, waiting at most 10 s (then it is killed: a hang). */
static int kvsd_exit(void)
{
    int64_t deadline = kvs__now_ns() + 10 * SEC;
    int status;

    while (waitpid(kvsd_pid, &status, WNOHANG) == 0) {
        if (kvs__now_ns() > deadline) {
            kill(kvsd_pid, SIGKILL);
            waitpid(kvsd_pid, &status, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void raw_connect(struct raw *r, int rank, int n)
{
    char dir[PATH_MAX], path[PATH_MAX + 80];
    unsigned char buf[KVS__WELCOME_BYTES + 1];
    struct kvs__hello h = { .version = KVS__PROTO_VERSION, .mode = KVS__MODE_SYNC,
                            .rank = rank, .nworkers = n };
    struct kvs__worker_layout l = { 0 };
    int fds[3], nfds;
    size_t len;

    snprintf(h.job, sizeof h.job, "%s", job);
    assert_int_equal(kvs__runtime_dir(dir, sizeof dir, NULL), 0);
    snprintf(path, sizeof path, "%s/%s.sock", dir, job);
    assert_int_equal(kvs__sock_connect(path, &r->sock, NULL), 0);
    len = kvs__hello_encode(&h, buf);
    assert_int_equal(kvs__sock_send(r->sock, buf, len, NULL, 0, kvs__now_ns() + 5 * SEC, NULL), 0);
    assert_int_equal(kvs__sock_recv(r->sock, buf, sizeof buf, &len, fds, 3, &nfds,
                                    kvs__now_ns() + 5 * SEC, NULL), 0);
    assert_int_equal(kvs__welcome_decode(buf, len, &r->w, NULL), 0);
    assert_int_equal(r->w.status, 0);
    assert_int_equal(nfds, 3);
    assert_int_equal(kvs__map(fds[0], r->w.control_size, 1, &r->ctl, NULL), 0);
    assert_int_equal(kvs__map(fds[1], r->w.seg_size, 1, &r->seg, NULL), 0);
    assert_int_equal(kvs__map(fds[2], r->w.arena_size, 0, (void **)&r->arena, NULL), 0);
    close(fds[0]);
    close(fds[2]);
    r->seg_fd = fds[1];
    assert_int_equal(kvs__worker_layout(r->w.sq_entries, r->w.cq_entries, r->w.staging_size, &l), 0);
    r->dbell = (struct kvs__bell *)((char *)r->ctl + KVS__CONTROL_BELL_OFF);
    assert_int_equal(kvs__ring_attach(&r->sq, (char *)r->seg + l.sq_off, r->w.sq_entries,
                                      KVS__SQE_BYTES, 0), 0);
    assert_int_equal(kvs__ring_attach(&r->cq, (char *)r->seg + l.cq_off, r->w.cq_entries,
                                      KVS__CQE_BYTES, 0), 0);
    r->staging = (unsigned char *)r->seg + l.staging_off;
}

static void raw_post(struct raw *r, const struct kvs__sqe *s)
{
    int err = 0;
    void *slot = kvs__ring_reserve(&r->sq, &err);

    assert_non_null(slot);
    kvs__sqe_encode(s, slot);
    kvs__ring_commit(&r->sq);
    kvs__bell_ring(r->dbell);
}

static void raw_wait(struct raw *r, struct kvs__cqe *c)
{
    int64_t deadline = kvs__now_ns() + 10 * SEC;
    const void *slot;
    int err = 0;

    while (!(slot = kvs__ring_peek(&r->cq, &err))) {
        assert_int_equal(err, 0);
        assert_true(kvs__now_ns() < deadline);
        usleep(1000);
    }
    assert_int_equal(kvs__cqe_decode(slot, r->w.arena_size, c, NULL), 0);
    kvs__ring_pop(&r->cq);
}

static void raw_init_key(struct raw *r, uint64_t seq, uint64_t key)
{
    struct kvs__sqe s = { .op = KVS__OP_INIT, .flags = KVS__SQE_LAST, .dtype = KVS_FLOAT32,
                          .ndim = 1, .shape = { 4 }, .seq = seq, .key_id = key,
                          .data_len = 16 };
    struct kvs__cqe c;
    float v[4] = { 1, 2, 3, 4 };

    memcpy(r->staging, v, sizeof v);
    raw_post(r, &s);
    raw_wait(r, &c);
    assert_int_equal(c.seq, seq);
    assert_int_equal(c.status, 0);
}

static void raw_init(struct raw *r, uint64_t seq)
{
    raw_init_key(r, seq, 1);
}

/* 1 once kvsd has closed the connection, within 3 s; 0 if it has not. */
static int raw_evicted(struct raw *r)
{
    int64_t deadline = kvs__now_ns() + 3 * SEC;
    struct pollfd p = { .fd = r->sock, .events = POLLIN };
    char b;

    while (kvs__now_ns() < deadline) {
        if (poll(&p, 1, 50) > 0 && recv(r->sock, &b, 1, MSG_DONTWAIT) == 0)
            return 1;
    }
    return 0;
}

static void setup_runtime_dir(void)
{
    static char dir[] = "/tmp/kvs-raw-XXXXXX";

    if (!getenv("XDG_RUNTIME_DIR") || strncmp(getenv("XDG_RUNTIME_DIR"), "/tmp/kvs-raw-", 13)) {
        assert_non_null(mkdtemp(dir));
        chmod(dir, 0700);
        setenv("XDG_RUNTIME_DIR", dir, 1);
    }
    /* These workers post every request to kvsd: none of their keys is
     * left to the workers to combine. */
    setenv("KVS_COMBINE", "0", 1);
}

/* Requests waiting in kvsd are served higher priority first: four pulls
 * posted as one list come back in priority order. */
static void test_priority_order(void **state)
{
    static const int32_t prio[4] = { 0, 5, 1, 9 };
    static const uint64_t want[4] = { 13, 11, 12, 10 };   /* seqs by priority */
    struct raw r;
    struct kvs__cqe c;

    (void)state;
    setup_runtime_dir();
    start_kvsd("raw-priority", 1);
    raw_connect(&r, 0, 1);
    raw_init(&r, 1);
    for (int i = 0; i < 4; i++) {
        struct kvs__sqe s = { .op = KVS__OP_PULL, .flags = i == 3 ? KVS__SQE_LAST : 0,
                              .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 },
                              .priority = prio[i], .seq = 10 + (uint64_t)i, .key_id = 1 };

        raw_post(&r, &s);
    }
    for (int i = 0; i < 4; i++) {
        float v[4];

        raw_wait(&r, &c);
        assert_int_equal(c.status, 0);
        assert_int_equal(c.seq, want[i]);
        assert_int_equal(c.value_len, 16);
        memcpy(v, r.arena + c.value_off, sizeof v);
        assert_true(v[0] == 1 && v[3] == 4);
    }
    {
        struct kvs__sqe s = { .op = KVS__OP_CLOSE, .flags = KVS__SQE_LAST, .seq = 20 };

        raw_post(&r, &s);
        raw_wait(&r, &c);
        assert_int_equal(c.status, 0);
    }
    close(r.sock);
    close(r.seg_fd);
    assert_int_equal(kvsd_exit(), 0);
}

enum garbage { BAD_OP, BAD_TAIL, BAD_RANGE };

/* Rank 0 is a real worker; rank 1 (here) joins, inits, then writes garbage. */
static void evict_case(enum garbage g, const char *name)
{
    char njob[64];
    struct raw r;
    pid_t child;
    int status;

    setup_runtime_dir();
    snprintf(njob, sizeof njob, "raw-%s", name);
    start_kvsd(njob, 2);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        kvs_t *kv;
        float v[4] = { 9, 9, 9, 9 };
        kvs_key_t k = KVS_INT_KEY(1);
        kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } };
        int rc;

        setenv("KVS_JOB", njob, 1);
        setenv("KVS_RANK", "0", 1);
        setenv("KVS_NUM_WORKERS", "2", 1);
        if (kvs_create("dist_sync", &kv) || kvs_init(kv, 1, &k, &a))
            _exit(2);
        /* The push returns once taken, or fails if the eviction came
         * first; the pull waits for a round the evicted worker never joins. */
        if ((rc = kvs_push(kv, 1, &k, &a, 0)) == 0)
            rc = kvs_pull(kv, 1, &k, &a, 0);
        kvs_close(kv);
        _exit(rc == KVS_EPEERDEAD ? 0 : 3);
    }
    raw_connect(&r, 1, 2);
    raw_init(&r, 1);
    switch (g) {
    case BAD_OP: {
        int err = 0;
        void *slot = kvs__ring_reserve(&r.sq, &err);

        assert_non_null(slot);
        memset(slot, 0xab, KVS__SQE_BYTES);
        kvs__ring_commit(&r.sq);
        break;
    }
    case BAD_TAIL:
        atomic_store((_Atomic uint32_t *)((char *)r.sq.hdr + SQ_TAIL_OFF),
                     r.sq.local + r.w.sq_entries + 5);
        break;
    case BAD_RANGE: {
        struct kvs__sqe s = { .op = KVS__OP_PUSH, .flags = KVS__SQE_LAST,
                              .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 }, .seq = 2,
                              .key_id = 1, .data_off = r.w.staging_size - 8, .data_len = 16 };
        int err = 0;
        void *slot = kvs__ring_reserve(&r.sq, &err);

        assert_non_null(slot);
        /* The encoder writes what it is given; the decoder must refuse it. */
        kvs__sqe_encode(&s, slot);
        kvs__ring_commit(&r.sq);
        break;
    }
    }
    kvs__bell_ring(r.dbell);
    assert_true(raw_evicted(&r));
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close(r.sock);
    close(r.seg_fd);
    /* kvsd served through it all and leaves when both are gone. */
    assert_int_equal(kvsd_exit(), 0);
}

static void test_evict_unknown_request(void **state)
{
    (void)state;
    evict_case(BAD_OP, "op");
}

static void test_evict_impossible_tail(void **state)
{
    (void)state;
    evict_case(BAD_TAIL, "tail");
}

static void test_evict_range_outside_staging(void **state)
{
    (void)state;
    evict_case(BAD_RANGE, "range");
}

/* A worker that closes while its pushes wait in kvsd, one in key 1's open
 * round and one queued behind it for the next, posted with the CLOSE in
 * one list: both were taken (answered at once, KVS__CQE_HELD), so they
 * still count, from copies kvsd makes before the worker's segment goes
 * (their data is released first, then the CLOSE is answered). The two
 * real workers push key 1 twice and pull: the first round sums the three
 * workers' first pushes, the second the raw worker's queued push and the
 * real workers' second ones. */
static void test_close_with_push_waiting(void **state)
{
    struct kvs__sqe push = { .op = KVS__OP_PUSH, .dtype = KVS_FLOAT32, .ndim = 1,
                             .shape = { 4 }, .key_id = 1, .data_len = 16 };
    struct kvs__sqe close_req = { .op = KVS__OP_CLOSE, .flags = KVS__SQE_LAST, .seq = 12 };
    float v[8] = { 5, 5, 5, 5, 7, 7, 7, 7 };
    int held = 0, released = 0, closed = 0;
    pid_t child[2];
    struct raw r;

    (void)state;
    setup_runtime_dir();
    start_kvsd("raw-close-push", 3);
    for (int i = 0; i < 2; i++) {
        child[i] = fork();
        assert_true(child[i] >= 0);
        if (child[i] == 0) {
            kvs_t *kv;
            float w[4] = { 1, 1, 1, 1 }, o[4];
            kvs_key_t k = KVS_INT_KEY(1);
            kvs_array_t a = { .data = w, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } },
                        out = a;

            out.data = o;
            setenv("KVS_JOB", "raw-close-push", 1);
            setenv("KVS_RANK", i ? "1" : "0", 1);
            setenv("KVS_NUM_WORKERS", "3", 1);
            if (kvs_create("dist_sync", &kv) || kvs_init(kv, 1, &k, &a))
                _exit(2);
            /* Round 1 after the raw worker's first push: 1 + 1 + 5. */
            usleep(300 * 1000);
            if (kvs_push(kv, 1, &k, &a, 0) || kvs_pull(kv, 1, &k, &out, 0) || o[0] != 7)
                _exit(3);
            /* Round 2, the raw worker long gone: 1 + 1 + 7. */
            if (kvs_push(kv, 1, &k, &a, 0) || kvs_pull(kv, 1, &k, &out, 0) || o[0] != 9)
                _exit(4);
            kvs_close(kv);
            _exit(0);
        }
    }
    raw_connect(&r, 2, 3);
    raw_init_key(&r, 1, 1);
    memcpy(r.staging, v, sizeof v);
    push.seq = 10;
    push.flags = KVS__SQE_LAST;
    raw_post(&r, &push);
    push.seq = 11;
    push.flags = 0;
    push.data_off = 16;
    raw_post(&r, &push);
    raw_post(&r, &close_req);
    while (!closed) {
        struct kvs__cqe c;

        raw_wait(&r, &c);
        assert_int_equal(c.status, 0);
        if (c.flags & KVS__CQE_HELD) {
            assert_true(c.seq == 10 || c.seq == 11);
            held++;
        } else if (c.flags & KVS__CQE_RELEASE) {
            assert_true(c.seq == 10 || c.seq == 11);
            released++;
        } else {
            assert_int_equal(c.seq, 12);
            closed = 1;
        }
    }
    assert_int_equal(held, 2);
    assert_int_equal(released, 2);
    for (int i = 0; i < 2; i++) {
        int status;

        assert_int_equal(waitpid(child[i], &status, 0), child[i]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    close(r.sock);
    close(r.seg_fd);
    assert_int_equal(kvsd_exit(), 0);
}

/* A worker's segment is sealed against resizing: shrinking it would make
 * kvsd fault on its next read of the rings or of push data in a round. The
 * worker's tries fail with EPERM, and a push and a pull go on as before. */
static void test_segment_size_sealed(void **state)
{
    struct kvs__sqe push = { .op = KVS__OP_PUSH, .flags = KVS__SQE_LAST, .dtype = KVS_FLOAT32,
                             .ndim = 1, .shape = { 4 }, .seq = 2, .key_id = 1,
                             .data_len = 16 };
    struct kvs__sqe pull = { .op = KVS__OP_PULL, .flags = KVS__SQE_LAST, .dtype = KVS_FLOAT32,
                             .ndim = 1, .shape = { 4 }, .seq = 3, .key_id = 1 };
    struct kvs__sqe close_req = { .op = KVS__OP_CLOSE, .flags = KVS__SQE_LAST, .seq = 4 };
    float v[4] = { 5, 6, 7, 8 }, o[4];
    struct kvs__cqe c;
    struct raw r;

    (void)state;
    setup_runtime_dir();
    start_kvsd("raw-sealed", 1);
    raw_connect(&r, 0, 1);
    raw_init(&r, 1);
    assert_int_equal(ftruncate(r.seg_fd, 0), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(ftruncate(r.seg_fd, (off_t)r.w.seg_size * 2), -1);
    assert_int_equal(errno, EPERM);
    memcpy(r.staging, v, sizeof v);
    raw_post(&r, &push);
    raw_wait(&r, &c);                  /* taken at once, ... */
    assert_int_equal(c.seq, 2);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.flags, KVS__CQE_HELD);
    raw_wait(&r, &c);                  /* ... released when its round closed */
    assert_int_equal(c.seq, 2);
    assert_int_equal(c.flags, KVS__CQE_RELEASE);
    raw_post(&r, &pull);
    raw_wait(&r, &c);
    assert_int_equal(c.seq, 3);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.value_len, 16);
    memcpy(o, r.arena + c.value_off, sizeof o);
    assert_memory_equal(o, v, sizeof v);
    raw_post(&r, &close_req);
    raw_wait(&r, &c);
    assert_int_equal(c.status, 0);
    close(r.sock);
    close(r.seg_fd);
    assert_int_equal(kvsd_exit(), 0);
}

/* kvsd checks the peer's uid before it sends anything: a client of
 * another user that reaches the socket (here the test opens the directory
 * and the socket to everyone) gets no welcome, only a closed connection. */
static void test_other_uid_refused(void **state)
{
    char dir[PATH_MAX], path[PATH_MAX + 80];
    pid_t child;
    int status;

    (void)state;
    if (geteuid() != 0)
        skip();                        /* only root can be another user */
    setup_runtime_dir();
    start_kvsd("raw-uid", 1);
    assert_int_equal(kvs__runtime_dir(dir, sizeof dir, NULL), 0);
    snprintf(path, sizeof path, "%s/raw-uid.sock", dir);
    assert_int_equal(chmod(getenv("XDG_RUNTIME_DIR"), 0711), 0);
    assert_int_equal(chmod(dir, 0711), 0);
    assert_int_equal(chmod(path, 0666), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        unsigned char buf[KVS__WELCOME_BYTES + 1];
        struct kvs__hello h = { .version = KVS__PROTO_VERSION, .mode = KVS__MODE_SYNC,
                                .rank = 0, .nworkers = 1 };
        int fd, nfds, rc;
        size_t len;

        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(2);
        snprintf(h.job, sizeof h.job, "raw-uid");
        if (kvs__sock_connect(path, &fd, NULL) != 0)
            _exit(3);
        len = kvs__hello_encode(&h, buf);
        kvs__sock_send(fd, buf, len, NULL, 0, kvs__now_ns() + 5 * SEC, NULL);
        rc = kvs__sock_recv(fd, buf, sizeof buf, &len, NULL, 0, &nfds, kvs__now_ns() + 5 * SEC,
                            NULL);
        _exit(rc == -ECONNRESET ? 0 : 4);
    }
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    chmod(dir, 0700);
    chmod(getenv("XDG_RUNTIME_DIR"), 0700);
    kill(kvsd_pid, SIGTERM);
    assert_int_equal(kvsd_exit(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority_order),
        cmocka_unit_test(test_evict_unknown_request),
        cmocka_unit_test(test_evict_impossible_tail),
        cmocka_unit_test(test_evict_range_outside_staging),
        cmocka_unit_test(test_close_with_push_waiting),
        cmocka_unit_test(test_segment_size_sealed),
        cmocka_unit_test(test_other_uid_refused),
    };

    char path[PATH_MAX];
    int rc;

    signal(SIGPIPE, SIG_IGN);
    rc = cmocka_run_group_tests_name("raw", tests, NULL, NULL);
    if (kvs__runtime_dir(path, sizeof path, NULL) == 0 && getenv("XDG_RUNTIME_DIR")) {
        rmdir(path);                   /* kvsd left nothing in it, or this fails */
        rmdir(getenv("XDG_RUNTIME_DIR"));
    }
    return rc;
}
