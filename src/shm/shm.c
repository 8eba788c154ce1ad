/*
 * shm.c - the operating-system plumbing under the multi-process store: the
 * user's private runtime directory, memfd segments (created, sealed,
 * re-opened read-only, checked, mapped), the Unix SOCK_SEQPACKET socket
 * that carries the handshake and passes descriptors with SCM_RIGHTS, and
 * exact reads and writes on the byte streams between hosts.
 *
 * It owns no state. It must never block past a caller's deadline, never
 * follow a symbolic link or trust a directory another user could write,
 * never leak a descriptor it received (every error path closes them), never
 * raise SIGPIPE, and never report through errno: every failure is -errno
 * with a detail naming the path or the call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm/ring.h"
#include "shm/shm.h"
#include "base/sys.h"

/* The most descriptors one message may carry, both ways. The receive
 * buffer has room for more than the sender may attach, so that a peer
 * sending too many is seen (and its extra descriptors closed) rather than
 * silently cut by the kernel. */
#define SEND_FDS_MAX 4
#define RECV_FDS_MAX 8


/* Records -errno (read at once, before anything can change it) with a
 * detail "what: strerror". */
static int fail_errno(struct kvs__err *e, const char *what, const char *arg)
{
    int code = -errno;

    if (code == 0)                     /* a call that failed without saying why */
        code = -EIO;
    if (arg != NULL)
        return kvs__fail(e, code, "%s %s: %s", what, arg, kvs_strerror(code));
    return kvs__fail(e, code, "%s: %s", what, kvs_strerror(code));
}

/* ---- the runtime directory ---------------------------------------------- */

int kvs__runtime_dir(char *buf, size_t size, struct kvs__err *e)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    char path[PATH_MAX];
    struct stat st;
    uid_t uid = geteuid();
    int n;

    if (buf == NULL || size == 0)
        return kvs__fail(e, -EINVAL, "runtime dir: no buffer");
    /* A relative XDG_RUNTIME_DIR would name a different place in every
     * working directory; the specification says to ignore it. */
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(path, sizeof path, "%s/kvs", xdg);
    else
        n = snprintf(path, sizeof path, "/tmp/kvs-%lu", (unsigned long)uid);
    if (n < 0 || (size_t)n >= sizeof path || (size_t)n >= size)
        return kvs__fail(e, -ENAMETOOLONG, "runtime dir: path of %d bytes does not fit %zu",
                         n, size < sizeof path ? size : sizeof path);

    /* Another process of the user may create the directory between our
     * lstat and our mkdir (EEXIST), or remove it again: look again, a
     * bounded number of times. */
    for (int tries = 0;; tries++) {
        if (EINTR_RETRY(lstat(path, &st)) == 0)
            break;
        if (errno != ENOENT || tries == 3)
            return fail_errno(e, "lstat", path);
        if (EINTR_RETRY(mkdir(path, 0700)) != 0 && errno != EEXIST)
            return fail_errno(e, "mkdir", path);
        /* Made by us or by someone else: either way, check what is there. */
    }

    /* The directory holds the job's sockets: whoever can write it can put
     * a socket of their own there and talk to our workers. */
    if (S_ISLNK(st.st_mode))
        return kvs__fail(e, -EPERM, "runtime dir %s is a symbolic link", path);
    if (!S_ISDIR(st.st_mode))
        return kvs__fail(e, -EPERM, "runtime dir %s is not a directory", path);
    if (st.st_uid != uid)
        return kvs__fail(e, -EPERM, "runtime dir %s is owned by uid %lu, not %lu", path,
                         (unsigned long)st.st_uid, (unsigned long)uid);
    if ((st.st_mode & 077) != 0)
        return kvs__fail(e, -EPERM, "runtime dir %s has mode %04o: group or others have access",
                         path, (unsigned)(st.st_mode & 07777));

    memcpy(buf, path, (size_t)n + 1);
    return 0;
}

int kvs__job_name_check(const char *job, struct kvs__err *e)
{
    size_t len;

    if (job == NULL)
        return kvs__fail(e, KVS_EBADARG, "job name: NULL");
    len = strnlen(job, 64 + 1);
    if (len == 0 || len > 64)
        return kvs__fail(e, KVS_EBADARG, "job name: %s, must be 1 to 64 bytes",
                         len == 0 ? "empty" : "too long");
    /* The name becomes a file name in the runtime directory: no '/', no
     * "." or "..", nothing a shell or a log would mangle. */
    if (job[0] == '.')
        return kvs__fail(e, KVS_EBADARG, "job name \"%s\" starts with '.'", job);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)job[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return kvs__fail(e, KVS_EBADARG,
                             "job name: byte %zu (0x%02x) is not one of [A-Za-z0-9._-]", i, c);
    }
    return 0;
}

/* ---- memfd segments ---------------------------------------------------- */

int kvs__memfd_new(const char *name, size_t size, int seal, int *fd, struct kvs__err *e)
{
    /* Unsealed segments are created without MFD_ALLOW_SEALING, which
     * seals them against sealing: a receiver cannot freeze their size
     * under the creator. */
    unsigned flags = MFD_CLOEXEC | (seal ? MFD_ALLOW_SEALING : 0u);
    int rc, mfd;

    if (fd == NULL || name == NULL)
        return kvs__fail(e, -EINVAL, "memfd: NULL argument");
    *fd = -1;
    if (size > (size_t)INT64_MAX)
        return kvs__fail(e, -EFBIG, "memfd %s: size %zu is too big", name, size);

    mfd = EINTR_RETRY(memfd_create(name, flags));
    if (mfd < 0)
        return fail_errno(e, "memfd_create", name);
    if (EINTR_RETRY(ftruncate(mfd, (off_t)size)) != 0) {
        rc = fail_errno(e, "ftruncate of memfd", name);
        goto fail_fd;
    }
    if (seal && EINTR_RETRY(fcntl(mfd, F_ADD_SEALS,
                                  F_SEAL_SHRINK | F_SEAL_GROW
                                  | (seal == KVS__SEAL_SIZE ? F_SEAL_SEAL : 0))) != 0) {
        rc = fail_errno(e, "F_ADD_SEALS on memfd", name);
        goto fail_fd;
    }
    *fd = mfd;
    return 0;

fail_fd:
    close(mfd);
    return rc;
}

int kvs__memfd_seal_writes(int fd, struct kvs__err *e)
{
    if (EINTR_RETRY(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) != 0)
        return fail_errno(e, "F_ADD_SEALS (future writes) on memfd", NULL);
    return 0;
}

int kvs__memfd_reopen_ro(int fd, int *ro_fd, struct kvs__err *e)
{
    char path[32];
    int rfd;

    if (ro_fd == NULL)
        return kvs__fail(e, -EINVAL, "memfd reopen: NULL argument");
    *ro_fd = -1;
    if (fd < 0)
        return kvs__fail(e, -EBADF, "memfd reopen: descriptor %d", fd);
    /* A dup() would share the open file description and so its O_RDWR;
     * opening the /proc link makes a new one that is read-only, and
     * mmap refuses PROT_WRITE with MAP_SHARED on it. */
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    rfd = EINTR_RETRY(open(path, O_RDONLY | O_CLOEXEC));
    if (rfd < 0)
        return fail_errno(e, "open", path);
    *ro_fd = rfd;
    return 0;
}

int kvs__memfd_check(int fd, size_t size, int need_seals, struct kvs__err *e)
{
    const int want = F_SEAL_SHRINK | F_SEAL_GROW;
    struct stat st;
    int seals;

    if (EINTR_RETRY(fstat(fd, &st)) != 0)
        return fail_errno(e, "fstat of received memfd", NULL);
    if (!S_ISREG(st.st_mode))
        return kvs__fail(e, KVS_EPROTO, "received descriptor %d is not a memfd", fd);
    if (st.st_size < 0 || (uint64_t)st.st_size != (uint64_t)size)
        return kvs__fail(e, KVS_EPROTO, "received memfd has %lld bytes, expected %zu",
                         (long long)st.st_size, size);
    if (!need_seals)
        return 0;
    seals = EINTR_RETRY(fcntl(fd, F_GET_SEALS));
    if (seals < 0) {
        if (errno == EINVAL)           /* not a file that supports seals */
            return kvs__fail(e, KVS_EPROTO, "received descriptor %d carries no seals", fd);
        return fail_errno(e, "F_GET_SEALS on received memfd", NULL);
    }
    if ((seals & want) != want)
        return kvs__fail(e, KVS_EPROTO, "received memfd is not sealed against resizing "
                         "(seals 0x%x)", (unsigned)seals);
    return 0;
}

int kvs__map(int fd, size_t size, int writable, void **out, struct kvs__err *e)
{
    void *p;

    if (out == NULL)
        return kvs__fail(e, -EINVAL, "mmap: NULL argument");
    *out = NULL;
    if (size == 0)
        return kvs__fail(e, -EINVAL, "mmap of descriptor %d: size 0", fd);
    p = mmap(NULL, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return fail_errno(e, writable ? "mmap read-write" : "mmap read-only", NULL);
    *out = p;
    return 0;
}

void kvs__unmap(void *p, size_t size)
{
    if (p != NULL && size != 0)
        munmap(p, size);
}

/* ---- sockets ----------------------------------------------------------- */

static int sock_addr(const char *path, struct sockaddr_un *a, struct kvs__err *e)
{
    size_t len;

    if (path == NULL)
        return kvs__fail(e, -EINVAL, "socket path: NULL");
    len = strlen(path);
    /* An empty path would mean an abstract socket, which any process of
     * the network namespace can reach: never. */
    if (len == 0)
        return kvs__fail(e, -EINVAL, "socket path: empty");
    if (len >= sizeof a->sun_path)
        return kvs__fail(e, -ENAMETOOLONG, "socket path %s: %zu bytes, at most %zu", path,
                         len, sizeof a->sun_path - 1);
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    memcpy(a->sun_path, path, len + 1);
    return 0;
}

/* Waits until fd is ready for events or the deadline passes. A deadline
 * of 0 or in the past means the caller's one non-blocking attempt was all
 * it wanted. The timeout is recomputed from the deadline after every
 * wake-up, so signals cannot stretch the wait. */
static int wait_fd(int fd, short events, int64_t deadline_ns, const char *what,
                   struct kvs__err *e)
{
    for (;;) {
        struct pollfd p = { .fd = fd, .events = events };
        int64_t left;
        int ms, n;

        if (deadline_ns <= 0 || (left = deadline_ns - kvs__now_ns()) <= 0)
            return kvs__fail(e, -ETIMEDOUT, "%s: deadline passed", what);
        /* Round up: a wake-up a little early would only poll again. */
        if (left / 1000000 >= INT_MAX)
            ms = INT_MAX;
        else
            ms = (int)((left + 999999) / 1000000);
        n = poll(&p, 1, ms);
        if (n > 0)
            return 0;                  /* ready, or an error the call will report */
        if (n < 0 && errno != EINTR)
            return fail_errno(e, "poll", what);
    }
}

int kvs__sock_listen(const char *path, int *fd, struct kvs__err *e)
{
    struct sockaddr_un a, t;
    char tmp[sizeof a.sun_path + 8];
    const char *at = path;
    int rc, s;

    if (fd == NULL)
        return kvs__fail(e, -EINVAL, "listen: NULL argument");
    *fd = -1;
    if ((rc = sock_addr(path, &a, e)) != 0)
        return rc;
    /* Bound and listening under a name of its own first, then linked to
     * path (which fails when path exists, as bind would): the socket
     * appears only once it accepts, so a worker that finds it never gets
     * "connection refused". (A path too long for the extra name is bound
     * as it is.) */
    snprintf(tmp, sizeof tmp, "%s.new", path);
    if (sock_addr(tmp, &t, NULL) == 0) {
        unlink(tmp);
        a = t;
        at = tmp;
    }
    /* Non-blocking, so that accept never waits past its deadline on a
     * connection that went away between poll and accept. */
    s = EINTR_RETRY(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s < 0)
        return fail_errno(e, "socket for", path);
    if (EINTR_RETRY(bind(s, (const struct sockaddr *)&a, sizeof a)) != 0) {
        rc = fail_errno(e, "bind", at);
        goto fail_sock;
    }
    /* bind honours the umask, which is process-wide state we must not
     * touch; the 0700 directory already keeps others out until chmod. */
    if (EINTR_RETRY(chmod(at, 0600)) != 0) {
        rc = fail_errno(e, "chmod", at);
        goto fail_bound;
    }
    if (EINTR_RETRY(listen(s, SOMAXCONN)) != 0) {
        rc = fail_errno(e, "listen", at);
        goto fail_bound;
    }
    if (at != path) {
        if (link(at, path) != 0) {
            if (errno == EEXIST)
                errno = EADDRINUSE;
            rc = fail_errno(e, "bind", path);
            goto fail_bound;
        }
        unlink(at);
    }
    *fd = s;
    return 0;

fail_bound:
    unlink(at);
fail_sock:
    close(s);
    return rc;
}

int kvs__sock_connect(const char *path, int *fd, struct kvs__err *e)
{
    struct sockaddr_un a;
    int rc, s;

    if (fd == NULL)
        return kvs__fail(e, -EINVAL, "connect: NULL argument");
    *fd = -1;
    if ((rc = sock_addr(path, &a, e)) != 0)
        return rc;
    s = EINTR_RETRY(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (s < 0)
        return fail_errno(e, "socket for", path);
    /* A Unix connect interrupted while the backlog was full established
     * nothing, so trying again is sound. */
    if (EINTR_RETRY(connect(s, (const struct sockaddr *)&a, sizeof a)) != 0) {
        rc = fail_errno(e, "connect", path);
        goto fail_sock;
    }
    *fd = s;
    return 0;

fail_sock:
    close(s);
    return rc;
}

int kvs__sock_accept(int lfd, int64_t deadline_ns, int *fd, struct kvs__err *e)
{
    int rc, s;

    if (fd == NULL)
        return kvs__fail(e, -EINVAL, "accept: NULL argument");
    *fd = -1;
    for (;;) {
        s = EINTR_RETRY(accept4(lfd, NULL, NULL, SOCK_CLOEXEC));
        if (s >= 0)
            break;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED)
            return fail_errno(e, "accept", NULL);
        if ((rc = wait_fd(lfd, POLLIN, deadline_ns, "accept", e)) != 0)
            return rc;
    }
    *fd = s;
    return 0;
}

int kvs__sock_peer(int fd, uid_t *uid, pid_t *pid, struct kvs__err *e)
{
    struct ucred cred;
    socklen_t len = sizeof cred;

    if (EINTR_RETRY(getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) != 0)
        return fail_errno(e, "getsockopt SO_PEERCRED", NULL);
    if (len != sizeof cred)
        return kvs__fail(e, KVS_EPROTO, "getsockopt SO_PEERCRED: %u bytes", (unsigned)len);
    if (uid != NULL)
        *uid = cred.uid;
    if (pid != NULL)
        *pid = cred.pid;
    return 0;
}

int kvs__sock_send(int fd, const void *buf, size_t len, const int *fds, int nfds,
                   int64_t deadline_ns, struct kvs__err *e)
{
    union {                            /* aligned as a cmsghdr must be */
        char bytes[CMSG_SPACE(sizeof(int) * SEND_FDS_MAX)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    ssize_t n;
    int rc;

    /* On a SEQPACKET socket an empty message reads as end of file: the
     * peer would take it for our death. */
    if (buf == NULL || len == 0)
        return kvs__fail(e, -EINVAL, "send: empty message");
    if (nfds < 0 || nfds > SEND_FDS_MAX || (nfds > 0 && fds == NULL))
        return kvs__fail(e, -EINVAL, "send: %d descriptors, at most %d", nfds, SEND_FDS_MAX);
    if (nfds > 0) {
        struct cmsghdr *c;
        size_t fdbytes = sizeof(int) * (size_t)nfds;

        memset(&ctl, 0, sizeof ctl);
        msg.msg_control = ctl.bytes;
        msg.msg_controllen = CMSG_SPACE(fdbytes);
        c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(fdbytes);
        memcpy(CMSG_DATA(c), fds, fdbytes);
    }

    for (;;) {
        n = EINTR_RETRY(sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT));
        if (n >= 0)
            break;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fail_errno(e, "sendmsg", NULL);
        if ((rc = wait_fd(fd, POLLOUT, deadline_ns, "send", e)) != 0)
            return rc;
    }
    /* SEQPACKET sends whole messages or nothing; anything else is a kernel
     * we do not understand. */
    if ((size_t)n != len)
        return kvs__fail(e, -EIO, "sendmsg: %zd of %zu bytes sent", n, len);
    return 0;
}

int kvs__sock_recv(int fd, void *buf, size_t cap, size_t *len, int *fds, int maxfds,
                   int *nfds, int64_t deadline_ns, struct kvs__err *e)
{
    union {
        char bytes[CMSG_SPACE(sizeof(int) * RECV_FDS_MAX)];
        struct cmsghdr align;
    } ctl;
    struct iovec iov;
    struct msghdr msg;
    struct cmsghdr *c;
    int got[RECV_FDS_MAX];
    int ngot = 0, other = 0, rc;
    ssize_t n;

    if (nfds != NULL)
        *nfds = 0;
    if (buf == NULL || cap == 0 || len == NULL || nfds == NULL || maxfds < 0 ||
        (maxfds > 0 && fds == NULL))
        return kvs__fail(e, -EINVAL, "recv: bad arguments");

    for (;;) {
        /* recvmsg rewrites the header's lengths and flags: set them again
         * for every attempt. */
        iov.iov_base = buf;
        iov.iov_len = cap;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.bytes;
        msg.msg_controllen = sizeof ctl.bytes;
        n = EINTR_RETRY(recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT));
        if (n >= 0)
            break;
        if (errno == ECONNRESET)
            return kvs__fail(e, -ECONNRESET, "recv: the peer closed the connection");
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fail_errno(e, "recvmsg", NULL);
        if ((rc = wait_fd(fd, POLLIN, deadline_ns, "recv", e)) != 0)
            return rc;
    }

    /* Take every descriptor that arrived before judging the message, so
     * that each error below can close them all. */
    for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        size_t k;

        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
            c->cmsg_len < CMSG_LEN(0)) {
            other = 1;
            continue;
        }
        k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int d;

            memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof d);
            if (ngot < RECV_FDS_MAX)
                got[ngot++] = d;
            else                       /* cannot happen with our buffer; never leak */
                close(d);
        }
    }

    if (n == 0) {
        rc = kvs__fail(e, -ECONNRESET, "recv: the peer closed the connection");
        goto fail_fds;
    }
    if (msg.msg_flags & MSG_TRUNC) {
        rc = kvs__fail(e, KVS_EPROTO, "recv: message longer than %zu bytes", cap);
        goto fail_fds;
    }
    if ((msg.msg_flags & MSG_CTRUNC) || ngot > maxfds) {
        rc = kvs__fail(e, KVS_EPROTO, "recv: more than %d descriptors attached", maxfds);
        goto fail_fds;
    }
    if (other) {
        rc = kvs__fail(e, KVS_EPROTO, "recv: unexpected control message");
        goto fail_fds;
    }
    if (ngot > 0)
        memcpy(fds, got, sizeof(int) * (size_t)ngot);
    *nfds = ngot;
    *len = (size_t)n;
    return 0;

fail_fds:
    for (int i = 0; i < ngot; i++)
        close(got[i]);
    return rc;
}

/* Byte streams (TCP): exactly len bytes, in as many calls as it takes. */
int kvs__stream_write(int fd, const void *buf, size_t len, int64_t deadline_ns,
                      struct kvs__err *e)
{
    const unsigned char *p = buf;
    int rc;

    while (len > 0) {
        ssize_t n = EINTR_RETRY(send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT));

        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return fail_errno(e, "send", NULL);
        if ((rc = wait_fd(fd, POLLOUT, deadline_ns, "send", e)) != 0)
            return rc;
    }
    return 0;
}

int kvs__stream_read(int fd, void *buf, size_t len, int64_t deadline_ns, struct kvs__err *e)
{
    unsigned char *p = buf;
    int rc;

    while (len > 0) {
        ssize_t n = EINTR_RETRY(recv(fd, p, len, MSG_DONTWAIT));

        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return kvs__fail(e, -ECONNRESET, "recv: the peer closed the connection");
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return fail_errno(e, "recv", NULL);
        if ((rc = wait_fd(fd, POLLIN, deadline_ns, "recv", e)) != 0)
            return rc;
    }
    return 0;
}
