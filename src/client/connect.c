/*
 * connect.c - a dist handle's connection to the job's kvsd: finds the job
 * in the environment (launch.c: kvsrun's variables, else torchrun's,
 * MPI's, PMI's, Slurm's; spawn.c starts or waits for the host's kvsd of
 * a job no kvsrun started), says hello on kvsd's socket, checks the
 * welcome, maps the segments whose descriptors come with it and checks
 * their heads; offers kvsd this process's memory for pushes it reads in
 * place; and undoes all of it when the handle closes. When kvsd of a job
 * that recovers went, connects again to the kvsd that replaces it and
 * maps its segments where the old ones were (kvs__client_reconnect).
 *
 * It never posts a request or reads a completion (call.c and wait.c do),
 * and trusts nothing kvsd sent: the welcome is decoded and checked
 * (proto/hello.c), every segment is sealed against resizing and its head
 * checked before the rings in it are attached (ring.c checks those).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/spec.h"
#include "client/launch.h"
#include "client/link.h"
#include "kernels/optim.h"
#include "proto/combine.h"
#include "proto/layout.h"
#include "proto/trace.h"
#include "shm/shm.h"

#define CONNECT_WAIT_NS (10 * 1000000000ll) /* handshake deadline */
#define RETRY_NS        (50 * 1000000ll)     /* between tries to reach a kvsd coming back */

/* ---- connecting ------------------------------------------------------- */

/* A segment kvsd handed over is the kind and size the welcome said, of
 * this library's layout. */
static int check_head(const void *seg, size_t size, uint32_t kind, const char *what,
                      struct kvs__err *e)
{
    struct kvs__seg_head h;

    memcpy(&h, seg, sizeof h);
    if (h.magic != KVS__SEG_MAGIC || h.layout != KVS__SEG_LAYOUT || h.kind != kind
        || h.size != size)
        return kvs__fail(e, KVS_EPROTO, "%s segment: magic, layout %u, kind %u or size %llu "
                         "is not this library's (layout %u)", what, h.layout, h.kind,
                         (unsigned long long)h.size, KVS__SEG_LAYOUT);
    return 0;
}

void kvs__client_free(struct kvs__client *c)
{
    if (!c)
        return;
    if (c->arena)
        kvs__unmap((void *)c->arena, c->arena_size);
    if (c->cb)
        kvs__unmap(c->cb, c->cb_size);
    for (size_t i = 0; i < c->cb_nopt; i++)
        kvs__optim_free(c->cb_opts[i].o);
    free(c->cb_opts);
    pthread_mutex_destroy(&c->cb_lock);
    if (c->seg)
        kvs__unmap(c->seg, c->seg_size);
    if (c->ctl)
        kvs__unmap(c->ctl, c->ctl_size);
    if (c->sock >= 0)
        close(c->sock);
    kvs__bufs_fini(&c->bufs);
    kvs__bufs_fini(&c->xfer);
    while (c->holds) {
        struct kvs__hold *h = c->holds;

        c->holds = h->next;
        free(h->returned);
        free(h);
    }
    kvs__residuals_free(c->residuals);
    pthread_mutex_destroy(&c->post);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Maps fd where *out points already (MAP_FIXED, replacing what is there)
 * when fixed, else where the kernel likes. */
static int map_at(int fd, size_t size, int writable, int fixed, void **out, struct kvs__err *e)
{
    void *p;

    if (!fixed)
        return kvs__map(fd, size, writable, out, e);
    p = mmap(*out, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED)
        return kvs__fail(e, -errno, "mmap at %p: %s", *out, strerror(errno));
    return 0;
}

/* Maps what the welcome describes; fds are closed by the caller. fixed:
 * at the addresses of the mappings c has (of the same sizes: the caller
 * checked), which they replace. */
static int client_map(struct kvs__client *c, const struct kvs__welcome *w, const int *fds,
                      int fixed, struct kvs__err *e)
{
    struct kvs__worker_layout l;
    int rc;

    if (w->control_size != KVS__CONTROL_SIZE
        || kvs__worker_layout(w->sq_entries, w->cq_entries, w->staging_size, &l) != 0
        || l.size != w->seg_size || l.staging_off != w->staging_off
        || w->arena_size <= KVS__ARENA_DATA_OFF || w->arena_size > SIZE_MAX / 2)
        return kvs__fail(e, KVS_EPROTO, "kvsd's segment sizes do not fit this library's layout");
    /* Sealed against resizing, all three: a segment cut short under a
     * mapping would fault this process at its next access. */
    if ((rc = kvs__memfd_check(fds[0], w->control_size, 1, e)) != 0
        || (rc = kvs__memfd_check(fds[1], w->seg_size, 1, e)) != 0
        || (rc = kvs__memfd_check(fds[2], w->arena_size, 1, e)) != 0)
        return rc;
    if ((rc = map_at(fds[0], w->control_size, 1, fixed, &c->ctl, e)) != 0)
        return rc;
    c->ctl_size = w->control_size;
    if ((rc = map_at(fds[1], w->seg_size, 1, fixed, &c->seg, e)) != 0)
        return rc;
    c->seg_size = w->seg_size;
    if ((rc = map_at(fds[2], w->arena_size, 0, fixed, (void **)&c->arena, e)) != 0)
        return rc;
    c->arena_size = w->arena_size;
    if ((rc = check_head(c->ctl, c->ctl_size, KVS__SEG_CONTROL, "control", e)) != 0
        || (rc = check_head(c->seg, c->seg_size, KVS__SEG_WORKER, "worker", e)) != 0
        || (rc = check_head(c->arena, c->arena_size, KVS__SEG_ARENA, "arena", e)) != 0)
        return rc;
    c->dbell = (struct kvs__bell *)((char *)c->ctl + KVS__CONTROL_BELL_OFF);
    c->wbell = (struct kvs__bell *)((char *)c->seg + KVS__WORKER_BELL_OFF);
    if (kvs__ring_attach(&c->sq, (char *)c->seg + l.sq_off, w->sq_entries, KVS__SQE_BYTES, 0)
        || kvs__ring_attach(&c->cq, (char *)c->seg + l.cq_off, w->cq_entries, KVS__CQE_BYTES, 0))
        return kvs__fail(e, KVS_EPROTO, "kvsd's ring geometry is invalid");
    c->staging = (unsigned char *)c->seg + l.staging_off;
    c->staging_size = l.staging_size;
    if (!(w->flags & KVS__WELCOME_COMBINE))
        return 0;
    if (w->combine_size < KVS__CB_MIN || w->combine_size > SIZE_MAX / 2)
        return kvs__fail(e, KVS_EPROTO, "kvsd's combine area of %" PRIu64 " bytes does not fit "
                         "this library's layout", w->combine_size);
    if ((rc = kvs__memfd_check(fds[3], w->combine_size, 1, e)) != 0
        || (rc = kvs__map(fds[3], w->combine_size, 1, &c->cb, e)) != 0)
        return rc;
    c->cb_size = w->combine_size;
    if (((struct kvs__cb_head *)c->cb)->magic != KVS__CB_MAGIC
        || ((struct kvs__cb_head *)c->cb)->size != c->cb_size)
        return kvs__fail(e, KVS_EPROTO, "kvsd's combine area has a bad head");
    return 0;
}

/* Lets kvsd (the socket's peer) read this process's memory, unless
 * KVS_REMOTE=0: names it the tracer Yama asks for, and puts a random
 * cookie in the hello for kvsd to read back. A failure here only leaves
 * pushes on staging; a bad KVS_REMOTE or KVS_REMOTE_MIN is the caller's
 * error. The least bytes a call lends kvsd so: 4 MiB unless
 * KVS_REMOTE_MIN says (bench/NOTES.md: below that the copies into
 * staging, on every worker's core at once, were faster). */
static int offer_memory(struct kvs__client *c, struct kvs__hello *h, struct kvs__err *e)
{
    struct kvs__err ig = { 0, "" };
    const char *min = getenv("KVS_REMOTE_MIN");
    int on = 1, rc;
    uid_t uid;
    pid_t pid;

    if ((rc = kvs__env_int("KVS_REMOTE", 0, 1, &on, e)) < 0)
        return rc;
    c->remote_min = (uint64_t)4 << 20;
    if (min && *min && kvs__parse_bytes(min, &c->remote_min) != 0)
        return kvs__fail(e, KVS_EBADARG, "KVS_REMOTE_MIN='%.64s': not a size in bytes (a "
                         "number with an optional K, M or G, at most 1T)", min);
    if (!on || kvs__sock_peer(c->sock, &uid, &pid, &ig) != 0
        || getrandom(c->cookie, sizeof c->cookie, 0) != (ssize_t)sizeof c->cookie)
        return 0;
    /* EINVAL without Yama: then the uid alone decides, as for ptrace. */
    prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0);
    h->probe = (uint64_t)(uintptr_t)c->cookie;
    memcpy(h->cookie, c->cookie, sizeof h->cookie);
    return 0;
}

/* Says hello on the job's socket (c->sock from then on) and takes the
 * welcome, checked, in *w and its descriptors in fds (*nfds of them, the
 * caller closes them), by deadline at the latest. l: how the job was
 * launched, on the first connection (NULL: a kvsd that takes the place of
 * one gone). A kvsd started on demand is waited for, and its welcome too:
 * across hosts it comes once every host has joined. */
static int client_hello(kvs_t *kv, struct kvs__client *c, const struct kvs__launch *l,
                        struct kvs__welcome *w, int *fds, int *nfds, int64_t deadline,
                        struct kvs__err *e)
{
    struct kvs__opts o;
    char dir[PATH_MAX], path[PATH_MAX + 80];
    unsigned char buf[KVS__WELCOME_BYTES + 1];
    struct kvs__hello h = { .version = KVS__PROTO_VERSION, .rank = kv->rank,
                            .nworkers = kv->nworkers };
    int rc;
    size_t len;

    *nfds = 0;
    kvs__opts_get(kv, &o);
    if (l && l->on_demand)
        deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    else if (deadline > kvs__now_ns() + CONNECT_WAIT_NS)
        deadline = kvs__now_ns() + CONNECT_WAIT_NS;
    c->sync = strcmp(kv->type, "dist_async") != 0;
    h.mode = c->sync ? KVS__MODE_SYNC : KVS__MODE_ASYNC;
    snprintf(h.job, sizeof h.job, "%s", c->job);
    if ((rc = kvs__runtime_dir(dir, sizeof dir, e)) != 0)
        return rc;
    snprintf(path, sizeof path, "%s/%s.sock", dir, c->job);
    rc = l ? kvs__launch_connect(l, path, o.timeout_ms, deadline, &c->sock, e)
           : kvs__sock_connect(path, &c->sock, e);
    if (rc != 0) {
        if (rc == -ENOENT || rc == -ECONNREFUSED)
            return kvs__fail(e, KVS_ECLOSED, "no kvsd serves job '%s' (%s): start workers "
                             "with kvsrun -n N PROGRAM or under torchrun, mpirun or srun, or "
                             "set KVS_JOB to a running job's name", c->job, path);
        return rc;
    }
    if ((rc = offer_memory(c, &h, e)) != 0)
        return rc;
    len = kvs__hello_encode(&h, buf);
    if ((rc = kvs__sock_send(c->sock, buf, len, NULL, 0, deadline, e)) != 0)
        return rc;
    rc = kvs__sock_recv(c->sock, buf, sizeof buf, &len, fds, 4, nfds, deadline, e);
    if (rc == -ECONNRESET)
        return kvs__fail(e, KVS_ECLOSED, "kvsd of job '%s' closed the connection", c->job);
    if (rc != 0)
        return rc;
    if ((rc = kvs__welcome_decode(buf, len, w, e)) != 0)
        return rc;
    if (w->status != 0)
        return kvs__fail(e, w->status, "kvsd refused: %s", w->msg);
    if (*nfds != 3 + !!(w->flags & KVS__WELCOME_COMBINE))
        return kvs__fail(e, KVS_EPROTO, "kvsd sent %d descriptors, not %d", *nfds,
                         3 + !!(w->flags & KVS__WELCOME_COMBINE));
    if ((w->flags & KVS__WELCOME_REMOTE) && !h.probe)
        return kvs__fail(e, KVS_EPROTO, "kvsd reads memory it was not offered");
    return 0;
}

/* What the link keeps from a welcome besides its mappings. */
static void client_welcomed(struct kvs__client *c, const struct kvs__welcome *w)
{
    c->remote = (w->flags & KVS__WELCOME_REMOTE) != 0;
    c->recover = (w->flags & KVS__WELCOME_RECOVER) != 0;
    c->resume_step = w->resume_step < 0 ? -1 : w->resume_step;
}

static int client_connect(kvs_t *kv, struct kvs__client *c, const struct kvs__launch *l,
                          struct kvs__err *e)
{
    struct kvs__welcome w;
    int fds[4], nfds = 0, rc;

    if ((rc = client_hello(kv, c, l, &w, fds, &nfds, INT64_MAX, e)) == 0
        && (rc = client_map(c, &w, fds, 0, e)) == 0)
        client_welcomed(c, &w);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    return rc;
}

/* ---- reconnecting ----------------------------------------------------- */

/* The new kvsd's segments are the sizes of the old ones, in the same
 * layout: they can take the old ones' places. */
static int same_geometry(const struct kvs__client *c, const struct kvs__welcome *w)
{
    return w->control_size == c->ctl_size && w->seg_size == c->seg_size
           && w->arena_size == c->arena_size && w->sq_entries == c->sq.entries
           && w->cq_entries == c->cq.entries
           && w->staging_off == (uint64_t)(c->staging - (unsigned char *)c->seg)
           && w->staging_size == c->staging_size;
}

/* Hands the addresses of the old mappings to nothing that can be read or
 * written (PROT_NONE, reserved so that no later mapping lands there): a
 * pointer kept into them faults at once instead of reading another
 * allocation. Then maps fresh: the buffers of kvs_array_alloc are gone. */
static int remap_fresh(struct kvs__client *c, const struct kvs__welcome *w, const int *fds,
                       struct kvs__err *e)
{
    void *old[3] = { c->ctl, c->seg, (void *)c->arena };
    size_t size[3] = { c->ctl_size, c->seg_size, c->arena_size };

    for (int i = 0; i < 3; i++)
        if (mmap(old[i], size[i], PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED
                 | MAP_NORESERVE, -1, 0) == MAP_FAILED)
            munmap(old[i], size[i]);
    c->ctl = c->seg = NULL;
    c->arena = NULL;
    kvs__bufs_fini(&c->bufs);
    memset(&c->bufs, 0, sizeof c->bufs);
    return client_map(c, w, fds, 0, e);
}

/* Maps the new kvsd's segments where the old ones were, keeping the bytes
 * of the buffers in use: a program's pointers into them stay good. */
static int remap_fixed(struct kvs__client *c, const struct kvs__welcome *w, const int *fds,
                       struct kvs__err *e)
{
    unsigned char **keep = calloc(c->bufs.n ? c->bufs.n : 1, sizeof *keep);
    int rc;

    if (!keep)
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (size_t i = 0; i < c->bufs.n; i++) {
        const struct kvs__range *r = &c->bufs.r[i];

        if (!(keep[i] = malloc(r->len))) {
            rc = kvs__fail(e, -ENOMEM, "out of memory keeping the buffers of kvs_array_alloc");
            goto out;
        }
        memcpy(keep[i], c->staging + r->off, r->len);
    }
    if ((rc = client_map(c, w, fds, 1, e)) == 0)
        for (size_t i = 0; i < c->bufs.n; i++)
            memcpy(c->staging + c->bufs.r[i].off, keep[i], c->bufs.r[i].len);
out:
    for (size_t i = 0; i < c->bufs.n; i++)
        free(keep[i]);
    free(keep);
    return rc;
}

/* Forgets everything kept for the kvsd gone: the calls waiting (theirs
 * return KVS_ERESTART, by the link's generation), the staging it still
 * held, request numbers, residuals of 2bit pushes (the pushes they were
 * left from are rolled back), the rows' size hints. The transient ranges
 * of calls not posted yet stay theirs to give back. */
static void client_forget(struct kvs__client *c)
{
    kvs__residuals_zero(c->residuals);
    c->waiters = NULL;
    while (c->holds) {
        struct kvs__hold *h = c->holds;

        c->holds = h->next;
        kvs__client_hold_free(c, h);
    }
    c->next_seq = 0;
    memset(c->row_hint, 0, sizeof c->row_hint);
}

static void nap(int64_t ns)
{
    struct timespec t = { ns / 1000000000, ns % 1000000000 };

    nanosleep(&t, NULL);
}

int kvs__client_reconnect(struct kvs__client *c, struct kvs__err *e)
{
    struct kvs__err last = { 0, "" };
    struct kvs__welcome w;
    struct kvs__opts o;
    char secs[32];
    int64_t deadline;
    int fds[4], nfds = 0, rc;

    kvs__opts_get(c->kv, &o);
    deadline = kvs__now_ns() + o.timeout_ms * 1000000ll;
    kvs__spec_format_double(secs, sizeof secs, (double)o.timeout_ms / 1000);
    if (c->cb)
        return kvs__fail(e, KVS_ECLOSED, "kvsd of job '%s' went away, and a handle whose "
                         "workers combine keys does not reconnect", c->job);
    for (;;) {
        if (c->sock >= 0)
            close(c->sock);
        c->sock = -1;
        if ((rc = client_hello(c->kv, c, NULL, &w, fds, &nfds, deadline, &last)) == 0)
            break;
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        if (kvs__now_ns() + RETRY_NS >= deadline)
            return kvs__fail(e, KVS_ECLOSED, "kvsd of job '%s' went away and no kvsd took "
                             "its place within %s s (KVS_TIMEOUT): %s", c->job, secs, last.msg);
        nap(RETRY_NS);
    }
    if (w.flags & KVS__WELCOME_COMBINE)
        rc = kvs__fail(e, KVS_ECLOSED, "the kvsd that took the place of job '%s''s has its "
                       "workers combine keys: a handle does not reconnect to it", c->job);
    else {
        client_forget(c);
        rc = same_geometry(c, &w) ? remap_fixed(c, &w, fds, e) : remap_fresh(c, &w, fds, e);
    }
    if (rc == 0)
        client_welcomed(c, &w);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    return rc;
}

int kvs__client_open(kvs_t *kv, struct kvs__err *e)
{
    struct kvs__client *c = calloc(1, sizeof *c);
    struct kvs__launch l;
    int rc;

    if (!c)
        return kvs__fail(e, -ENOMEM, "out of memory");
    c->sock = -1;
    c->kv = kv;
    c->resume_step = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->post, NULL);
    pthread_mutex_init(&c->cb_lock, NULL);
    if ((rc = kvs__launch_env(&l, e)) == 0) {
        memcpy(c->job, l.job, sizeof c->job);
        kv->rank = l.rank;
        kv->nworkers = l.size;
        rc = client_connect(kv, c, &l, e);
    }
    if (rc != 0) {
        kvs__client_free(c);
        return rc;
    }
    kv->client = c;
    if (kvs__tr_path()) {
        char name[32];

        snprintf(name, sizeof name, "rank %d", kv->rank);
        kvs__tr_process(kv->rank + 1, name, kv->rank);
        kvs__tr_joined(c->job);
    }
    return 0;
}
