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
 *
 * Outs written in place: a remote push may name its call's out as well
 * (the slot's arg). When its round's sum goes straight into the value (no
 * optimizer), each block of the sum, while in the cache, is also written
 * into every such out (process_vm_writev): the worker then skips its copy
 * out of the arena (KVS__CQE_WRITTEN). The arena's value is written as
 * ever, so any out not written whole (a write refused or short, the
 * worker gone, an optimizer) is simply answered as before, and its worker
 * copies the value: a torn out is never passed off as the value. Before
 * every write kvsd checks that the worker may still be written: not after
 * it answered the worker's EXPLAIN or CLOSE (w->nowrite, set by the serve
 * thread, which also runs the sum and so never between two writes), not
 * once its pidfd is closed or says it exited. The writes run on the pool's
 * threads inside the serve thread's call to the engine.
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

/* The most bytes one process_vm_readv or process_vm_writev moves (the
 * kernel's own cap is about 2 GiB). */
#define MOVE_MAX ((size_t)1 << 30)

/* process_vm_readv or process_vm_writev: the direction of a move. */
typedef ssize_t vm_move_fn(pid_t pid, const struct iovec *local, unsigned long nlocal,
                           const struct iovec *remote, unsigned long nremote,
                           unsigned long flags);

/* Moves len bytes between buf and addr of process pid, in the direction
 * of move: 0, or a negative errno (-EFAULT when it stopped short: part of
 * the range may be moved). */
static int remote_move(vm_move_fn *move, pid_t pid, uint64_t addr, void *buf, size_t len)
{
    char *at = buf;

    while (len > 0) {
        size_t n = len < MOVE_MAX ? len : MOVE_MAX;
        struct iovec l = { at, n }, r = { (void *)(uintptr_t)addr, n };
        ssize_t done = move(pid, &l, 1, &r, 1, 0);

        if (done < 0 && errno == EINTR)
            continue;
        if (done <= 0)
            return done < 0 ? -errno : -EFAULT;
        at += done;
        addr += (uint64_t)done;
        len -= (size_t)done;
    }
    return 0;
}

static int remote_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
    return remote_move(process_vm_readv, pid, addr, buf, len);
}

/* buf is only read: process_vm_writev's local iovec is not const. */
static int remote_write(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
    return remote_move(process_vm_writev, pid, addr, (void *)(uintptr_t)buf, len);
}

int remote_probe(const struct daemon *d, struct worker *w, pid_t pid, uint64_t addr,
                 const uint8_t *cookie)
{
    uint8_t got[KVS__COOKIE_BYTES];
    int fd, rc;

    w->pidfd = -1;
    w->may_write = w->write_noted = 0;
    atomic_store(&w->nowrite, 0);
    if (!addr)
        return 0;
    if ((fd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0) {
        warn(d, "rank %d (pid %d): no pidfd (%s): kvsd neither reads nor writes its memory, "
            "its arrays are copied", w->rank, (int)pid, strerror(errno));
        return 0;                      /* a kernel before 5.3: no way to check the pid */
    }
    if ((rc = remote_read(pid, addr, got, sizeof got)) != 0
        || memcmp(got, cookie, sizeof got) != 0) {
        warn(d, "rank %d (pid %d): kvsd may not read its memory (%s): its arrays are copied",
            w->rank, (int)pid, rc ? strerror(-rc) : "the cookie differs");
        close(fd);
        return 0;
    }
    /* The same bytes written back: the worker does not read them again. */
    if ((rc = remote_write(pid, addr, got, sizeof got)) != 0)
        warn(d, "rank %d (pid %d): kvsd may not write its memory (%s): its outs are copied",
            w->rank, (int)pid, strerror(-rc));
    w->may_write = rc == 0;
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

/* ---- outs written in place ---------------------------------------------- */

/* One out a round's sum is written into. */
struct remote_out {
    struct worker *w;
    struct req *r;
    _Atomic uint64_t done;             /* bytes written */
    _Atomic int err;                   /* the first write that failed (-errno), or 0 */
};

/* A round's sink context: its outs. */
struct remote_sink {
    struct remote_out *out;
    int n;
};

struct remote_writes {
    struct kvs__sink *sinks;           /* per round */
    struct remote_sink *ctx;           /* per round */
    struct remote_out *outs;
    size_t nr, nout;
};

/* 0 when w may be written now (checked before every write). */
static int may_write_now(const struct worker *w)
{
    if (atomic_load(&w->nowrite) || w->pidfd < 0)
        return -ECANCELED;
    return remote_exited(w) ? -ESRCH : 0;
}

static void sink_write(const void *ctx, size_t off, const void *buf, size_t len)
{
    const struct remote_sink *s = ctx;

    for (int i = 0; i < s->n; i++) {
        struct remote_out *o = &s->out[i];
        int rc, none = 0;

        if (atomic_load_explicit(&o->err, memory_order_relaxed) != 0)
            continue;
        if ((rc = may_write_now(o->w)) == 0
            && (rc = remote_write(o->w->pid, o->r->out + off, buf, len)) == 0) {
            atomic_fetch_add(&o->done, (uint64_t)len);
            continue;
        }
        atomic_compare_exchange_strong(&o->err, &none, rc);
    }
}

/* 1 when r's out may be written: a remote push still in its worker's
 * memory that named an out, from a worker kvsd may write. */
static int writable(const struct daemon *d, const struct req *r)
{
    const struct worker *w = &d->workers[r->w];

    return r->out && remote_in_worker(r) && w->may_write && atomic_load(&w->nowrite) == 0
           && w->pidfd >= 0;
}

struct remote_writes *remote_writes_make(struct daemon *d, struct round *const *rds, size_t nr,
                                         const struct kvs__sink **sinks)
{
    struct remote_writes *wr;
    size_t nout = 0, k = 0;

    for (size_t i = 0; i < nr; i++) {
        sinks[i] = NULL;
        for (int w = 0; w < d->nworkers; w++)
            nout += rds[i]->contrib[w] && writable(d, rds[i]->contrib[w]);
    }
    if (nout == 0 || !(wr = calloc(1, sizeof *wr)))
        return NULL;
    wr->sinks = calloc(nr, sizeof *wr->sinks);
    wr->ctx = calloc(nr, sizeof *wr->ctx);
    wr->outs = calloc(nout, sizeof *wr->outs);
    if (!wr->sinks || !wr->ctx || !wr->outs) {
        remote_writes_end(d, wr, -ENOMEM);     /* copied, as without */
        return NULL;
    }
    wr->nr = nr;
    wr->nout = nout;
    for (size_t i = 0; i < nr; i++) {
        wr->ctx[i].out = wr->outs + k;
        for (int w = 0; w < d->nworkers; w++) {
            struct req *r = rds[i]->contrib[w];

            if (r && writable(d, r))
                wr->outs[k++] = (struct remote_out){ .w = &d->workers[w], .r = r };
        }
        wr->ctx[i].n = (int)(wr->outs + k - wr->ctx[i].out);
        if (wr->ctx[i].n > 0) {
            wr->sinks[i] = (struct kvs__sink){ sink_write, &wr->ctx[i] };
            sinks[i] = &wr->sinks[i];
        }
    }
    return wr;
}

void remote_writes_end(struct daemon *d, struct remote_writes *wr, int status)
{
    for (size_t i = 0; wr && i < wr->nout; i++) {
        struct remote_out *o = &wr->outs[i];
        int err = atomic_load(&o->err);

        if (status == 0 && err == 0 && atomic_load(&o->done) == o->r->s.data_len) {
            o->r->written = 1;
            d->st.outs_written++;
            continue;
        }
        /* Refused for good (another user, not dumpable, a ptrace policy):
         * this worker's outs are copied from now on. A worker gone, or
         * one that asked why it waits, is no news. */
        if (err == -EPERM || err == -EACCES)
            o->w->may_write = 0;
        if (err != 0 && err != -ECANCELED && err != -ESRCH && !o->w->write_noted) {
            o->w->write_noted = 1;
            warn(d, "rank %d (pid %d): kvsd could not write a value into its out (%s): "
                "%s copied", o->w->rank, (int)o->w->pid, strerror(-err),
                o->w->may_write ? "that one is" : "its outs are");
        }
    }
    if (wr) {
        free(wr->sinks);
        free(wr->ctx);
        free(wr->outs);
        free(wr);
    }
}
