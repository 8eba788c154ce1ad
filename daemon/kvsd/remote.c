/*
 * remote.c - pushes that kvsd reads out of the worker's own memory
 * (KVS__SQE_REMOTE): a kvs_pushpull of an ordinary array, which the worker
 * lends until the push completes, instead of copying it into staging. The
 * engine reads such an input a block at a time beside the sum or update
 * (array.h, struct kvs__source), so its bytes are read once, by kvsd, into
 * the cache, and never written anywhere whole: one copy where staging
 * made two and a read.
 *
 * Permission: kvsd reads with process_vm_readv, which the kernel allows
 * when kvsd may ptrace the worker. The worker names kvsd its tracer
 * (PR_SET_PTRACER, for Yama) and sends the address of a random cookie in
 * its hello; the socket thread reads the cookie back at the handshake, and
 * only a worker whose cookie was read takes remote pushes. Anything else
 * (another ptrace policy, a non-dumpable process, KVS_REMOTE=0) leaves the
 * worker on staging copies, with nothing lost but the copy's time.
 *
 * What is read is the worker's own memory, at addresses it names: a wrong
 * address is the worker's fault, and only that worker's input is wrong or
 * unreadable. A read that fails fails the job (the round is then lost,
 * like any round of a worker that dies): kvsd evicts the worker. A process
 * id names another process once the worker has exited and been reaped, so
 * kvsd holds a pidfd of each worker and, after reading, checks that it has
 * not exited: a sum is never made of another process's memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "remote.h"

/* The most bytes one process_vm_readv moves (the kernel's own cap is
 * about 2 GiB). */
#define READ_MAX ((size_t)1 << 30)

static int remote_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
    char *to = buf;

    while (len > 0) {
        size_t n = len < READ_MAX ? len : READ_MAX;
        struct iovec l = { to, n }, r = { (void *)(uintptr_t)addr, n };
        ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);

        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? -errno : -EFAULT;
        to += got;
        addr += (uint64_t)got;
        len -= (size_t)got;
    }
    return 0;
}

int remote_probe(struct worker *w, pid_t pid, uint64_t addr, const uint8_t *cookie)
{
    uint8_t got[KVS__COOKIE_BYTES];
    int fd;

    w->pidfd = -1;
    if (!addr)
        return 0;
    if ((fd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0)
        return 0;                      /* a kernel before 5.3: no way to check the pid */
    if (remote_read(pid, addr, got, sizeof got) != 0 || memcmp(got, cookie, sizeof got) != 0) {
        close(fd);
        return 0;
    }
    w->pidfd = fd;
    return 1;
}

void remote_close(struct worker *w)
{
    if (w->pidfd >= 0)
        close(w->pidfd);
    w->pidfd = -1;
}

/* A source's context: one worker's array. */
struct remote_src {
    struct worker *w;
    uint64_t addr;
};

static int source_read(const void *ctx, size_t off, void *buf, size_t len)
{
    const struct remote_src *s = ctx;
    int rc = remote_read(s->w->pid, s->addr + off, buf, len);

    if (rc != 0)
        atomic_store(&s->w->remote_bad, rc);
    return rc;
}

int remote_sources(struct daemon *d, const struct round *rd, struct kvs__source *src,
                   void *ctx)
{
    struct remote_src *s = ctx;
    int n = 0, j = 0;

    for (int w = 0; w < d->nworkers; w++) {
        const struct req *r = rd->contrib[w];

        if (!r)
            continue;
        src[j] = (struct kvs__source){ NULL, NULL };
        if (remote_in_worker(r)) {
            s[j] = (struct remote_src){ &d->workers[w], r->s.data_off };
            src[j] = (struct kvs__source){ source_read, &s[j] };
            d->workers[w].remote_used = 1;
            d->remote_read = 1;
            n++;
        }
        j++;
    }
    d->st.remote_pushes += (uint64_t)n;
    return n;
}

size_t remote_ctx_size(void)
{
    return sizeof(struct remote_src);
}

/* 1 when w's process has exited (its pid may name another process now). */
int remote_exited(const struct worker *w)
{
    struct pollfd p = { .fd = w->pidfd, .events = POLLIN };
    int rc;

    while ((rc = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    return rc != 0;
}

int remote_copy(struct daemon *d, struct req *r)
{
    struct worker *w = &d->workers[r->w];
    int rc;

    if (!(r->copy = malloc(r->s.data_len ? r->s.data_len : 1)))
        return -ENOMEM;
    r->copy_dev = KVS_HOST;
    if ((rc = remote_read(w->pid, r->s.data_off, r->copy, r->s.data_len)) == 0 && remote_exited(w))
        rc = -ESRCH;
    if (rc != 0) {
        free(r->copy);
        r->copy = NULL;
        return rc;
    }
    d->st.remote_pushes++;
    return 0;
}
