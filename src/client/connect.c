/*
 * connect.c - a dist handle's connection to the job's kvsd: finds the job
 * in the environment (kvsrun's variables, else MPI's, PMI's, Slurm's),
 * says hello on kvsd's socket, checks the welcome, maps the segments whose
 * descriptors come with it and checks their heads; offers kvsd this
 * process's memory for pushes it reads in place; and undoes all of it
 * when the handle closes.
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
#include <sys/prctl.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/spec.h"
#include "client/link.h"
#include "kernels/optim.h"
#include "proto/combine.h"
#include "proto/layout.h"
#include "proto/trace.h"
#include "shm/shm.h"

#define CONNECT_WAIT_NS (10 * 1000000000ll) /* handshake deadline */

/* ---- environment ------------------------------------------------------ */

/* Rank and size from kvsrun's variables, else Open MPI's, PMI's, Slurm's. */
static int job_env(kvs_t *kv, char *job, struct kvs__err *e)
{
    static const char *const vars[][2] = {
        { "KVS_RANK", "KVS_NUM_WORKERS" },
        { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
        { "PMI_RANK", "PMI_SIZE" },
        { "SLURM_PROCID", "SLURM_NTASKS" },
    };
    const char *j = getenv("KVS_JOB");
    int rank = 0, size = 1, rc;

    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int r = 0, s = 1, hr, hs;

        if ((hr = kvs__env_int(vars[i][0], 0, 1023, &r, e)) < 0)
            return hr;
        if ((hs = kvs__env_int(vars[i][1], 1, 1024, &s, e)) < 0)
            return hs;
        if (!hr && !hs)
            continue;
        if (!hr || !hs)
            return kvs__fail(e, KVS_EBADARG, "%s and %s must be set together", vars[i][0],
                             vars[i][1]);
        rank = r;
        size = s;
        break;
    }
    if (rank >= size)
        return kvs__fail(e, KVS_EBADARG, "rank %d is not below the number of workers %d",
                         rank, size);
    if (!j || !*j)
        j = "default";
    if ((rc = kvs__job_name_check(j, e)) != 0)
        return rc;
    snprintf(job, KVS__JOB_MAX + 1, "%s", j);
    kv->rank = rank;
    kv->nworkers = size;
    return 0;
}

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

/* Maps what the welcome describes; fds are closed by the caller. */
static int client_map(struct kvs__client *c, const struct kvs__welcome *w, const int *fds,
                      struct kvs__err *e)
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
    if ((rc = kvs__map(fds[0], w->control_size, 1, &c->ctl, e)) != 0)
        return rc;
    c->ctl_size = w->control_size;
    if ((rc = kvs__map(fds[1], w->seg_size, 1, &c->seg, e)) != 0)
        return rc;
    c->seg_size = w->seg_size;
    if ((rc = kvs__map(fds[2], w->arena_size, 0, (void **)&c->arena, e)) != 0)
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
 * pushes on staging; a bad KVS_REMOTE is the caller's error. */
static int offer_memory(struct kvs__client *c, struct kvs__hello *h, struct kvs__err *e)
{
    struct kvs__err ig = { 0, "" };
    int on = 1, rc;
    uid_t uid;
    pid_t pid;

    if ((rc = kvs__env_int("KVS_REMOTE", 0, 1, &on, e)) < 0)
        return rc;
    if (!on || kvs__sock_peer(c->sock, &uid, &pid, &ig) != 0
        || getrandom(c->cookie, sizeof c->cookie, 0) != (ssize_t)sizeof c->cookie)
        return 0;
    /* EINVAL without Yama: then the uid alone decides, as for ptrace. */
    prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0);
    h->probe = (uint64_t)(uintptr_t)c->cookie;
    memcpy(h->cookie, c->cookie, sizeof h->cookie);
    return 0;
}

static int client_connect(kvs_t *kv, struct kvs__client *c, struct kvs__err *e)
{
    char dir[PATH_MAX], path[PATH_MAX + 80];
    unsigned char buf[KVS__WELCOME_BYTES + 1];
    struct kvs__hello h = { .version = KVS__PROTO_VERSION, .rank = kv->rank,
                            .nworkers = kv->nworkers };
    struct kvs__welcome w;
    int64_t deadline = kvs__now_ns() + CONNECT_WAIT_NS;
    int fds[4], nfds = 0, rc;
    size_t len;

    c->sync = strcmp(kv->type, "dist_async") != 0;
    h.mode = c->sync ? KVS__MODE_SYNC : KVS__MODE_ASYNC;
    snprintf(h.job, sizeof h.job, "%s", c->job);
    if ((rc = kvs__runtime_dir(dir, sizeof dir, e)) != 0)
        return rc;
    snprintf(path, sizeof path, "%s/%s.sock", dir, c->job);
    if ((rc = kvs__sock_connect(path, &c->sock, e)) != 0) {
        if (rc == -ENOENT || rc == -ECONNREFUSED)
            return kvs__fail(e, KVS_ECLOSED, "no kvsd serves job '%s' (%s): start workers "
                             "with kvsrun -n N PROGRAM, or set KVS_JOB to a running job's "
                             "name", c->job, path);
        return rc;
    }
    if ((rc = offer_memory(c, &h, e)) != 0)
        return rc;
    len = kvs__hello_encode(&h, buf);
    if ((rc = kvs__sock_send(c->sock, buf, len, NULL, 0, deadline, e)) != 0)
        return rc;
    rc = kvs__sock_recv(c->sock, buf, sizeof buf, &len, fds, 4, &nfds, deadline, e);
    if (rc == -ECONNRESET)
        return kvs__fail(e, KVS_ECLOSED, "kvsd of job '%s' closed the connection", c->job);
    if (rc != 0)
        return rc;
    if ((rc = kvs__welcome_decode(buf, len, &w, e)) == 0) {
        if (w.status != 0)
            rc = kvs__fail(e, w.status, "kvsd refused: %s", w.msg);
        else if (nfds != 3 + !!(w.flags & KVS__WELCOME_COMBINE))
            rc = kvs__fail(e, KVS_EPROTO, "kvsd sent %d descriptors, not %d", nfds,
                           3 + !!(w.flags & KVS__WELCOME_COMBINE));
        else if ((w.flags & KVS__WELCOME_REMOTE) && !h.probe)
            rc = kvs__fail(e, KVS_EPROTO, "kvsd reads memory it was not offered");
        else
            rc = client_map(c, &w, fds, e);
        c->remote = rc == 0 && (w.flags & KVS__WELCOME_REMOTE);
        c->resume_step = w.resume_step < 0 ? -1 : w.resume_step;
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    return rc;
}

int kvs__client_open(kvs_t *kv, struct kvs__err *e)
{
    struct kvs__client *c = calloc(1, sizeof *c);
    int rc;

    if (!c)
        return kvs__fail(e, -ENOMEM, "out of memory");
    c->sock = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->post, NULL);
    pthread_mutex_init(&c->cb_lock, NULL);
    if ((rc = job_env(kv, c->job, e)) != 0 || (rc = client_connect(kv, c, e)) != 0) {
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
