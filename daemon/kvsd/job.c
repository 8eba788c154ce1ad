/*
 * job.c - the job's fate: how many workers a round or a collective waits
 * for, a job that fails (every waiting request and every later one gets the
 * first failure's status), a worker released or evicted, and the check
 * after pushes read out of workers' memory.
 *
 * The modules above that hold waiting requests (rounds, collectives, the
 * states across hosts) or must tell others of a failure (the other hosts,
 * the workers combining) are told through the hooks they registered
 * (d->fail_hooks); this file never calls them by name.
 *
 * Serve thread only. It must never unmap a worker's segment while a push
 * of it is still lent to a round.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "job.h"
#include "answers.h"
#include "devbufs.h"
#include "remote.h"
#include "tracing.h"

#include "proto/hello.h"
#include "shm/shm.h"

int job_expected(const struct daemon *d)
{
    return d->nworkers - d->left;
}

void job_hook(struct daemon *d, const struct fail_hook *h)
{
    if (d->nfail_hooks == FAIL_HOOKS_MAX)
        abort();                       /* a fixed set, registered at start-up */
    d->fail_hooks[d->nfail_hooks++] = h;
}

/* Fails every waiting request: the pulls and pushes in pending here, then
 * what the modules above hold (async pushes forwarded to other hosts,
 * saves and loads, pushes in rounds, collectives), in the order they
 * registered. */
void job_fail_waiting(struct daemon *d, int status, const char *msg)
{
    answer_complete_list(d, d->pending, status, msg);
    d->pending = NULL;
    for (int i = 0; i < d->nfail_hooks; i++)
        if (d->fail_hooks[i]->waiting)
            d->fail_hooks[i]->waiting(d, status, msg);
}

/* kvsd --recover: a worker died or was evicted (why), and the job rolls
 * back to its last commit. kvsd answers nothing more and leaves at once
 * with KVS__KVSD_EXIT_ROLLBACK, for kvsrun to start its successor with
 * --restore; the survivors see the kvsd gone (KVS_ERESTART) and reconnect
 * to the new one. A commit whose snapshot is being written is finished
 * first (the workers were answered: it is theirs). The snapshot file
 * stays for that kvsd; the socket goes
 * now, the lock with the process (flock), so that the successor starts at
 * once. Nothing is freed: the process ends. */
static _Noreturn void rollback(struct daemon *d, const char *why)
{
    if (d->snap_finish)
        d->snap_finish(d);
    if (d->rollback_host) {
        /* Across hosts: that host rolls back too; every host restarts. */
        say(d, "%s: rolling back with it to the newest commit every host holds", why);
        kvs__tr_instant(KVS__TR_JOB_FAILED, NULL, KVS_EPEERDEAD, why);
        if (d->listen_fd >= 0)
            unlink(d->sock_path);
        _exit(KVS__KVSD_EXIT_HOSTS);
    }
    if (d->resume_step >= 0)
        say(d, "worker %s: rolling back to the last commit, step %lld", why,
            (long long)d->resume_step);
    else
        say(d, "worker %s: rolling back to the start: no commit yet", why);
    kvs__tr_instant(KVS__TR_JOB_FAILED, NULL, KVS_EPEERDEAD, why);
    if (d->listen_fd >= 0)
        unlink(d->sock_path);
    _exit(KVS__KVSD_EXIT_ROLLBACK);
}

/* The job cannot go on: every waiting request and every later one fails
 * with the first failure's status and message. A worker gone with
 * --recover rolls the job back instead (rollback). */
void job_fail(struct daemon *d, int status, const char *fmt, ...)
{
    va_list ap;

    if (!d->failed && status == KVS_EPEERDEAD && d->o.recover) {
        char why[KVS__MSG_MAX];

        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        rollback(d, why);
    }
    if (!d->failed) {
        va_start(ap, fmt);
        vsnprintf(d->fail_msg, sizeof d->fail_msg, fmt, ap);
        va_end(ap);
        d->failed = status;
        say(d, "%s", d->fail_msg);
        kvs__tr_instant(KVS__TR_JOB_FAILED, NULL, status, d->fail_msg);
        for (int i = 0; i < d->nfail_hooks; i++)
            if (d->fail_hooks[i]->failed)
                d->fail_hooks[i]->failed(d, status, d->fail_msg);
    }
    job_fail_waiting(d, d->failed, d->fail_msg);
}

/* 1 when kvsd still reads a push of worker wi from wi's staging. */
static int lends(const struct daemon *d, int wi)
{
    for (const struct req *r = d->pending; r; r = r->next)
        if (r->w == wi && r->lent)
            return 1;
    for (const struct round *rd = d->open; rd; rd = rd->next)
        if (rd->contrib[wi] && rd->contrib[wi]->lent)
            return 1;
    return 0;
}

void job_release_worker(struct daemon *d, struct worker *w)
{
    int wi = (int)(w - d->workers);

    answer_complete_list(d, w->batch, KVS_EPEERDEAD, "worker gone");
    w->batch = NULL;
    /* A round must not keep data from a segment that is about to go: the
     * job fails. (A dead or evicted worker's job has failed already; one
     * that left cleanly had its pushes copied when it left.) */
    if (lends(d, wi))
        job_fail(d, KVS_EPEERDEAD, "rank %d (pid %d) left the job with a push unfinished",
                 w->rank, (int)w->pid);
    /* Pushes of a worker that left were copied: they still count. */
    for (struct req **p = &d->pending; *p;) {
        struct req *r = *p;

        if (r->w == wi && !r->copy) {
            *p = r->next;
            answer_finish(d, r, KVS_EPEERDEAD, "worker gone");
        } else {
            p = &r->next;
        }
    }
    answer_backlog_free(w);
    devbufs_close(d, w);
    remote_close(w);
    if (w->seg)
        kvs__unmap(w->seg, w->seg_size);
    w->seg = NULL;
    /* The socket thread polls and peeks at the socket of a LIVE worker
     * that it read under d->lock, and peeks only while it holds the lock
     * and the slot still has that socket: closed under the lock, the
     * socket is never read by it while closed or once its number is
     * reused. */
    pthread_mutex_lock(&d->lock);
    if (w->sock >= 0)
        close(w->sock);
    w->sock = -1;
    pthread_mutex_unlock(&d->lock);
}

void job_evict(struct daemon *d, struct worker *w, const char *why)
{
    say(d, "evicting rank %d (pid %d): %s", w->rank, (int)w->pid, why);
    trace_worker(w, KVS__TR_EVICTED, why);
    atomic_store(&w->state, W_DEAD);
    /* The job fails first, with this message: releasing would fail it
     * with a vaguer one, for the pushes the worker leaves behind. */
    job_fail(d, KVS_EPEERDEAD, "rank %d (pid %d) was evicted: %s", w->rank, (int)w->pid, why);
    job_release_worker(d, w);
}

/* Reads out of workers' memory fail on the worker (it exited, or its
 * address was bad): the worker is evicted, the job fails. */
int job_remote_check(struct daemon *d)
{
    int bad = 0;

    if (!d->remote_read)               /* nothing was read since the last check */
        return 0;
    d->remote_read = 0;
    for (int i = 0; i < d->nworkers; i++) {
        struct worker *w = &d->workers[i];
        int rc = atomic_exchange(&w->remote_bad, 0);

        if (!w->remote_used)
            continue;
        w->remote_used = 0;
        if (rc == 0 && !remote_exited(w))
            continue;
        bad = 1;
        if (atomic_load(&w->state) == W_LIVE)
            job_evict(d, w, rc ? "kvsd could not read a push out of its memory" : "it exited");
        else
            job_fail(d, KVS_EPEERDEAD, "rank %d (pid %d): kvsd could not read a push out of "
                     "its memory", w->rank, (int)w->pid);
    }
    return bad ? -1 : 0;
}
