/*
 * ask.c - one question to the kvsd of a job on this host, and its checked
 * answer (ask.h): connect to the job's control socket in the user's
 * runtime directory, make sure its owner is this user, send one control
 * request, read one answer and decode it (proto/ctl.c checks every byte).
 *
 * It never touches the job's shared memory, files or processes: it only
 * asks. Every wait of a question, the connect included, ends at one
 * deadline, DEADLINE_NS after the question began. It prints nothing: what
 * went wrong comes back as a line for the caller to print.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ask.h"
#include "kvs.h"
#include "proto/proto.h"
#include "shm/ring.h"
#include "shm/shm.h"
#include "base/sys.h"

#define RETRY_MS 10                    /* between connects to a full backlog, looks at a stop */

static int64_t ms_to(int64_t deadline_ns)
{
    int64_t left = deadline_ns - kvs__now_ns();

    if (left <= 0)
        return 0;
    return left / 1000000 + 1;
}

static void nap(int64_t deadline_ns)
{
    int64_t ms = ms_to(deadline_ns);

    /* EINTR only ends the nap early; the caller looks at the clock. */
    poll(NULL, 0, (int)(ms < RETRY_MS ? ms : RETRY_MS));
}

/* Connects to path before deadline_ns. A kvsd whose backlog is full
 * (EAGAIN) is tried again until then: a blocking connect would wait for
 * it without a deadline. 0 and *fd, or -errno. */
static int connect_by(const char *path, int64_t deadline_ns, int *fd)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int s;

    if (strlen(path) >= sizeof a.sun_path)
        return -ENAMETOOLONG;
    memcpy(a.sun_path, path, strlen(path) + 1);
    s = EINTR_RETRY(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (s < 0)
        return -errno;
    for (;;) {
        int rc;

        if (EINTR_RETRY(connect(s, (const struct sockaddr *)&a, sizeof a)) == 0
            || errno == EISCONN) {
            *fd = s;
            return 0;
        }
        rc = -errno;
        if (rc != -EAGAIN || kvs__now_ns() >= deadline_ns) {
            close(s);
            return rc == -EAGAIN ? -ETIMEDOUT : rc;
        }
        nap(deadline_ns);
    }
}

/* 1 while path is the socket it was when kvsctl began (same device and
 * inode): a kvsd that stops removes it; a new kvsd makes another. */
static int same_socket(const char *path, const struct stat *was)
{
    struct stat st;

    return lstat(path, &st) == 0 && st.st_dev == was->st_dev && st.st_ino == was->st_ino;
}

/* The text of an error answer on one line: without its final newline. */
static int text_line_len(const struct kvs__ctl_reply *r)
{
    uint32_t n = r->len;

    while (n > 0 && r->text[n - 1] == '\n')
        n--;
    return (int)n;
}

static int put_msg(char *msg, size_t size, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int put_msg(char *msg, size_t size, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return rc;
}

int ctl_ask_at(const char *job, int command, struct kvs__ctl_reply *reply,
               struct ctl_where *at, char *msg, size_t size)
{
    static unsigned char buf[KVS__CTL_REPLY_MAX];
    char dir[PATH_MAX];
    struct kvs__ctl_request q = { .version = KVS__PROTO_VERSION };
    struct kvs__err e = { 0, "" };
    int64_t wait = command == KVS__CTL_CHECKPOINT ? CHECKPOINT_NS : DEADLINE_NS;
    int64_t deadline = kvs__now_ns() + wait;
    int fd = -1, nfds = 0, rc, status = ASK_FAILED;
    size_t len;
    uid_t uid;

    if (kvs__runtime_dir(dir, sizeof dir, &e) != 0)
        return put_msg(msg, size, ASK_FAILED, "%s", e.msg);
    snprintf(at->path, sizeof at->path, "%s/%s.sock", dir, job);
    rc = lstat(at->path, &at->was) != 0 ? -errno : connect_by(at->path, deadline, &fd);
    if (rc == -ENOENT || rc == -ECONNREFUSED)
        return put_msg(msg, size, ASK_GONE, "no kvsd serves job '%s' (%s)", job, at->path);
    if (rc == -ETIMEDOUT)
        return put_msg(msg, size, ASK_FAILED, "the kvsd of job '%s' accepted no connection within "
                       "%lld s", job, DEADLINE_NS / SEC_NS);
    if (rc != 0)
        return put_msg(msg, size, ASK_FAILED, "cannot connect to %s: %s", at->path, strerror(-rc));
    /* The directory is this user's alone (kvs__runtime_dir checks it);
     * this only makes sure of the one we talk to. */
    if (kvs__sock_peer(fd, &uid, NULL, &e) != 0 || uid != geteuid()) {
        put_msg(msg, size, 0, "%s is served by another user's process; not asking it", at->path);
        goto out;
    }

    q.command = (uint8_t)command;
    snprintf(q.job, sizeof q.job, "%s", job);
    len = kvs__ctl_request_encode(&q, buf);
    if ((rc = kvs__sock_send(fd, buf, len, NULL, 0, deadline, &e)) == 0)
        rc = kvs__sock_recv(fd, buf, sizeof buf, &len, NULL, 0, &nfds, deadline, &e);
    if (rc == -ECONNRESET || rc == -EPIPE) {
        put_msg(msg, size, 0, "the kvsd of job '%s' closed the connection without an answer (it "
                "may be stopping)", job);
        status = ASK_GONE;
        goto out;
    }
    if (rc == -ETIMEDOUT) {
        put_msg(msg, size, 0, "no answer from the kvsd of job '%s' within %lld s", job,
                (long long)(wait / SEC_NS));
        goto out;
    }
    if (rc != 0) {
        put_msg(msg, size, 0, "job '%s': %s", job, e.msg);
        goto out;
    }
    if (kvs__msg_type(buf, len) == KVS__MSG_WELCOME) {
        /* A kvsd that took the request for a bad hello: one from before
         * kvsctl, or of another protocol version. Its refusal says which. */
        struct kvs__welcome w;

        if (kvs__welcome_decode(buf, len, &w, &e) == 0 && w.status != 0) {
            char safe[4 * KVS__MSG_MAX];

            /* Nothing from a socket reaches the terminal unchecked. */
            kvs__ctl_text_escape(safe, sizeof safe, w.msg, strlen(w.msg), 0);
            put_msg(msg, size, 0, "the kvsd of job '%s' takes no control requests: %s", job, safe);
            goto out;
        }
    }
    if (kvs__ctl_reply_decode(buf, len, reply, &e) != 0) {
        put_msg(msg, size, 0, "a bad answer from the kvsd of job '%s': %s", job, e.msg);
        goto out;
    }
    if (reply->status != 0) {
        put_msg(msg, size, 0, "the kvsd of job '%s' refused: %.*s (%s)", job, text_line_len(reply),
                reply->text, kvs_err_name(reply->status));
        goto out;
    }
    status = ASK_OK;
out:
    close(fd);
    return status;
}

int ctl_ask(const char *job, int command, struct kvs__ctl_reply *reply, char *msg, size_t size)
{
    struct ctl_where at;

    return ctl_ask_at(job, command, reply, &at, msg, size);
}

int ctl_wait_gone(const struct ctl_where *at, int64_t deadline_ns)
{
    while (same_socket(at->path, &at->was) && kvs__now_ns() < deadline_ns)
        nap(deadline_ns);
    return !same_socket(at->path, &at->was);
}
