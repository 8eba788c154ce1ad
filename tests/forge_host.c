/*
 * forge_host.c - host 1 of a two-host job that holds the job's secret and
 * then lies (test_hosts_forged.sh): it joins host 0 as a kvsd would (the
 * handshake with the secret, its join, the roster), takes part in the
 * init of keys 3 (1,024 float32) and 5 (16,384 float32) that host 0's
 * worker (forge_worker) makes, then sends one forged frame:
 *
 *   tib      a partial whose head announces 1 TiB of payload
 *   over     a partial of key 3 as 2,048 float32 (8,192 bytes, more than
 *            key 3's 4,096 and less than key 5's)
 *   unknown  a partial of key 9, which the job never declared
 *
 * and waits for host 0's FAIL frame (or the link's end), printing its
 * text. Exits 0 when host 0 failed the job within the deadline, 1 when
 * anything else happened.
 *
 * Usage: forge_host SECRET_FILE JOB PORT MODE SECONDS
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "handshake.h"
#include "tcp.h"
#include "proto/wire.h"
#include "shm/ring.h"                  /* kvs__now_ns */

#define SEC_NS 1000000000ll
#define READ_MAX (1u << 20)            /* a frame host 0 sends here, at most */

static int64_t deadline;

static void die(const char *fmt, const char *what)
{
    fprintf(stderr, "forge_host: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    exit(1);
}

/* n bytes from fd by the deadline; 0, or -1 when the link ended. */
static int read_full(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;

    while (n > 0) {
        struct pollfd pf = { fd, POLLIN, 0 };
        int64_t left = (deadline - kvs__now_ns()) / 1000000;
        ssize_t got;

        if (left <= 0)
            die("%s", "the deadline passed with no answer from host 0");
        if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        if (!(pf.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        got = read(fd, p, n);
        if (got <= 0) {
            if (got < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static void write_full(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;

    while (n > 0) {
        ssize_t put = write(fd, p, n);

        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            die("write: %s", strerror(errno));
        p += put;
        n -= (size_t)put;
    }
}

/* A message of type from host 1: its head and body, then len bytes of
 * data (zeros) unless head_only; the head says head_len when not 0. */
static void send_msg(int fd, int type, const struct kvs__wire_msg *m, uint64_t head_len,
                     int head_only)
{
    static unsigned char buf[KVS__WIRE_HEAD + 512 + 65536 * 2];
    size_t body = kvs__wire_msg_bytes(m);
    struct kvs__frame_head h = { (uint8_t)type, 1, head_len ? head_len : body + m->len };

    if (!head_only && m->len > sizeof buf - KVS__WIRE_HEAD - body)
        die("%s", "a message too big for this program");
    kvs__frame_head_encode(&h, buf);
    kvs__wire_msg_encode(type, m, buf + KVS__WIRE_HEAD);
    if (!head_only && m->data)
        memcpy(buf + KVS__WIRE_HEAD + body, m->data, m->len);
    else if (!head_only)
        memset(buf + KVS__WIRE_HEAD + body, 0, m->len);
    write_full(fd, buf, KVS__WIRE_HEAD + body + (head_only ? 0 : m->len));
}

/* The next frame from host 0, decoded into *m (its payload in pay).
 * Returns its type, or -1 when the link ended. */
static int next_msg(int fd, unsigned char *pay, struct kvs__wire_msg *m)
{
    unsigned char head[KVS__WIRE_HEAD];
    struct kvs__frame_head h;
    struct kvs__err e = { 0, "" };

    if (read_full(fd, head, sizeof head) != 0)
        return -1;
    if (kvs__frame_head_decode(head, sizeof head, 2, &h, &e) != 0)
        die("host 0 sent a bad head: %s", e.msg);
    if (h.len > READ_MAX)
        die("%s", "host 0 sent a frame bigger than this program takes");
    if (read_full(fd, pay, (size_t)h.len) != 0)
        return -1;
    if (kvs__wire_msg_decode(h.type, pay, (size_t)h.len, m, &e) != 0)
        die("host 0 sent a bad message: %s", e.msg);
    return h.type;
}

static int connect_host0(int port)
{
    struct kvs__err e = { 0, "" };
    int fd;

    /* host 0's kvsd may not listen yet */
    while (kvs__tcp_connect("127.0.0.1", (uint16_t)port, kvs__now_ns() + SEC_NS, &fd, &e) != 0) {
        if (kvs__now_ns() > deadline)
            die("cannot reach host 0: %s", e.msg);
        usleep(50000);
    }
    return fd;
}

int main(int argc, char **argv)
{
    static unsigned char pay[READ_MAX];
    struct kvs__secret sec;
    struct kvs__err e = { 0, "" };
    struct kvs__wire_join jn = { .port = 1 };
    struct kvs__wire_msg m;
    unsigned char p[KVS__WIRE_JOIN_BYTES];
    size_t rlen;
    uint32_t from;
    const char *mode;
    int fd, done = 0, type;
    char text[KVS__WIRE_TEXT_MAX + 1];

    if (argc != 6)
        die("%s", "usage: forge_host SECRET_FILE JOB PORT MODE SECONDS");
    mode = argv[4];
    deadline = kvs__now_ns() + atoll(argv[5]) * SEC_NS;
    if (kvs__secret_load(argv[1], &sec, &e) != 0)
        die("%s", e.msg);

    struct kvs__host_id me = { argv[2], 1, 2, 1 };

    fd = connect_host0(atoi(argv[3]));
    kvs__wire_join_encode(&jn, p);
    if (kvs__handshake_client(fd, &sec, &me, 0, deadline, &e) != 0
        || kvs__frame_write(fd, KVS__FRAME_JOIN, 1, p, sizeof p, deadline, &e) != 0
        || kvs__frame_read(fd, 2, KVS__FRAME_ROSTER, pay, kvs__wire_roster_bytes(2), &rlen,
                           &from, deadline, &e) != 0)
        die("joining host 0: %s", e.msg);
    kvs__secret_wipe(&sec);
    fprintf(stderr, "forge_host: joined host 0\n");

    /* The init of keys 3 and 5: this host's arrival, then host 0's ends. */
    for (int k = 0; k < 2; k++) {
        memset(&m, 0, sizeof m);
        m.op = KVS__OP_INIT;
        m.key = KVS_INT_KEY(k ? 5 : 3);
        m.dtype = KVS_FLOAT32;
        m.ndim = 1;
        m.shape[0] = k ? 16384 : 1024;
        send_msg(fd, KVS__FRAME_ARRIVE, &m, 0, 0);
    }
    while (done < 2) {
        if ((type = next_msg(fd, pay, &m)) < 0)
            die("%s", "host 0 ended the link during the init");
        if (type == KVS__FRAME_DONE)
            done++;
        else if (type == KVS__FRAME_FAIL)
            die("host 0 failed the job during the init: %s", kvs__wire_msg_text(&m, text));
    }
    fprintf(stderr, "forge_host: keys 3 and 5 inited; sending a forged %s frame\n", mode);

    memset(&m, 0, sizeof m);
    m.key = KVS_INT_KEY(3);
    m.dtype = KVS_FLOAT32;
    m.ndim = 1;
    m.shape[0] = 1024;
    if (strcmp(mode, "tib") == 0) {
        /* The head claims 1 TiB; only the body follows. */
        m.shape[0] = (int64_t)((1ull << 40) / 4);
        m.len = 1ull << 40;
        send_msg(fd, KVS__FRAME_PARTIAL, &m, 1ull << 40, 1);
    } else if (strcmp(mode, "over") == 0) {
        m.shape[0] = 2048;
        m.len = 8192;
        send_msg(fd, KVS__FRAME_PARTIAL, &m, 0, 0);
    } else if (strcmp(mode, "rows") == 0) {
        /* Rows of key 3 whose count (0: the data is zeros) is not their
         * 32 bytes. */
        m.rows = 1;
        m.len = kvs__wire_rows_bytes(2, 4);
        send_msg(fd, KVS__FRAME_PARTIAL, &m, 0, 0);
    } else if (strcmp(mode, "rows_forward") == 0) {
        /* A dist_async push's rows of key 3 whose ids go down: 5, then 2. */
        static int64_t rows[1 + 2 + 1];   /* count, ids, two rows of one float32 */
        const int64_t ids[2] = { 5, 2 };

        m.rows = 1;
        m.b = 1;
        m.len = kvs__wire_rows_bytes(2, 4);
        kvs__wire_rows_put(rows, 2, ids);
        m.data = rows;
        send_msg(fd, KVS__FRAME_FORWARD, &m, 0, 0);
    } else if (strcmp(mode, "unknown") == 0) {
        m.key = KVS_INT_KEY(9);
        m.shape[0] = 4;
        m.len = 16;
        send_msg(fd, KVS__FRAME_PARTIAL, &m, 0, 0);
    } else {
        die("unknown mode '%s'", mode);
    }

    for (;;) {
        if ((type = next_msg(fd, pay, &m)) < 0) {
            printf("forge_host: host 0 ended the link\n");
            return 0;
        }
        if (type == KVS__FRAME_FAIL) {
            printf("forge_host: host 0 failed the job: %s\n", kvs__wire_msg_text(&m, text));
            return 0;
        }
    }
}
