/*
 * control.c - kvsctl's channel into kvsd: the queue of checked control
 * connections between the socket thread and the serve thread, and the
 * answers to status, keys, gone, checkpoint and stop (stats and sample
 * are stats.c's), written as text that is cut between lines, never
 * inside one, when it does not fit (ctltext.c).
 *
 * Two sides. control_accept runs on the socket thread: it decodes and checks
 * the request, then queues the connection or refuses it; that side never
 * looks at the engine, the rounds or the counters. control_serve runs on the
 * serve thread, which alone owns the job's state: it writes each answer,
 * sends it with a short deadline and closes the connection. Nothing here
 * changes the store or a worker, and nothing waits without a deadline;
 * stop only tells the serve loop to end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "ctltext.h"
#include "bridge.h"
#include "combined.h"
#include "commits.h"
#include "job.h"
#include "stats.h"
#include "waits.h"

#include "shm/shm.h"

#define CTL_SEND_NS     (50 * 1000000ll)   /* the serve thread's wait to send one answer */

/* ---- control: kvsctl's requests --------------------------------------- */

/* As Python writes a shape: (), (4,), (2,3). */
static void shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, size, "(");

    for (int i = 0; i < ndim && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, i ? "," : "", shape[i]);
    if (o < size)
        snprintf(buf + o, size - o, "%s)", ndim == 1 ? "," : "");
}

/* A line of waits_list (text_add makes it safe for a reply). */
static void wait_line(void *ctx, const char *line)
{
    text_add(ctx, "waiting: %s\n", line);
}

/* The job's restarts and last commit, for status. */
static void commit_lines(struct daemon *d, struct text *t)
{
    char msg[KVS__MSG_MAX];
    uint64_t disk, failures;
    struct timespec now;

    text_add(t, "generation: %d (restarts so far)\n", d->o.generation);
    if (d->resume_step < 0) {
        text_add(t, "last commit: none\n");
    } else if (!d->o.recover) {
        clock_gettime(CLOCK_REALTIME, &now);
        text_add(t, "last commit: step %lld, commit %llu, %.1f s ago, no snapshot (the job "
                 "does not recover: no --restarts or --checkpoint)\n",
                 (long long)d->resume_step, (unsigned long long)d->commit_seq,
                 (double)(now.tv_sec * 1000000000ll + now.tv_nsec - d->commit_ns) / 1e9);
    } else {
        clock_gettime(CLOCK_REALTIME, &now);
        text_add(t, "last commit: step %lld, commit %llu, %.1f s ago, %llu bytes, %s %s\n",
                 (long long)d->resume_step, (unsigned long long)d->commit_seq,
                 (double)(now.tv_sec * 1000000000ll + now.tv_nsec - d->commit_ns) / 1e9,
                 (unsigned long long)d->commit_bytes,
                 d->restored_from[0] ? "restored from" : "in", d->restored_from[0]
                     ? d->restored_from : d->snap_path);
    }
    if (!d->o.checkpoint) {
        text_add(t, "checkpoint: none (no --checkpoint)\n");
        return;
    }
    commits_disk(d, &disk, &failures, msg, sizeof msg);
    text_add(t, "checkpoint: %s%s, last on disk: ", d->o.checkpoint,
             d->o.checkpoint_sync ? " (sync)" : "");
    if (disk)
        text_add(t, "commit %llu%s\n", (unsigned long long)disk,
                 disk == d->commit_seq ? ", the last" : ", not the last yet");
    else
        text_add(t, "none\n");
    if (failures)
        text_add(t, "checkpoint failures: %llu, the last: %s\n",
                 (unsigned long long)failures, msg);
}

static void ctl_status(struct daemon *d, struct text *t)
{
    const char *spec = kvs__engine_optimizer(d->eng);
    int nworkers, sync, live, dead;

    stats_workers(d, &nworkers, &sync, &live, &dead);
    text_add(t, "job: %s\n", d->o.job);
    text_add(t, "kvsd pid: %ld\n", (long)getpid());
    text_add(t, "mode: %s\n", sync < 0 ? "unknown yet" : sync ? "sync" : "async");
    if (nworkers > 0)
        text_add(t, "workers: %d expected, %d connected, %d left, %d dead\n", nworkers, live,
                 d->left, dead);
    else
        text_add(t, "workers: unknown yet, %d connected, %d left, %d dead\n", live, d->left,
                 dead);
    text_add(t, "keys: %zu\n", kvs__engine_nkeys(d->eng));
    text_add(t, "optimizer: %s\n", spec ? spec : "none");
    if (d->failed)
        text_add(t, "failed: yes: %s\n", d->fail_msg);
    else
        text_add(t, "failed: no\n");
    commit_lines(d, t);
    waits_list(d, wait_line, t);
}

/* The keys listing takes two walks: one for the columns' widths, one for
 * the lines, as many as fit. */
struct listing {
    const struct daemon *d;
    struct text *t;
    int pass;
    int wkey, wdtype, wshape, wversion;
    size_t shown;
};

#define SHAPE_TEXT_MAX (KVS_MAX_NDIM * 21 + 4)

static int list_key(void *ctx, kvs_key_t key, const struct kvs__entry_info *info)
{
    struct listing *l = ctx;
    char ks[KEY_TEXT_MAX + 1], shape[SHAPE_TEXT_MAX], version[24];
    char line[KEY_TEXT_MAX + SHAPE_TEXT_MAX + 128];
    const struct round *rd = *info->front;
    uint64_t done;
    size_t kcols;
    int n;

    key_text(ks, sizeof ks, key);
    kcols = text_columns(ks);
    shape_text(shape, sizeof shape, info->ndim, info->shape);
    /* A key the workers combine: kvsd's entry keeps its init's version,
     * each round since is in the combine area. */
    done = !rd ? 0 : rd->cb ? cb_key_rounds(l->d, rd) : rd->done;
    snprintf(version, sizeof version, "%" PRIu64, info->version + (rd && rd->cb ? done : 0));
    if (l->pass == 0) {
        l->wkey = text_width(l->wkey, kcols);
        l->wdtype = text_width(l->wdtype, strlen(kvs_dtype_name(info->dtype)));
        l->wshape = text_width(l->wshape, strlen(shape));
        l->wversion = text_width(l->wversion, strlen(version));
        return 0;
    }
    /* The key is padded by columns, the other fields are ASCII. */
    n = snprintf(line, sizeof line, "%s%*s  %-*s  %-*s  %-*s  %" PRIu64 "\n", ks,
                 kcols < (size_t)l->wkey ? l->wkey - (int)kcols : 0, "", l->wdtype,
                 kvs_dtype_name(info->dtype), l->wshape, shape, l->wversion, version, done);
    if (!text_line(l->t, line, n, sizeof line))
        return 1;                      /* full: the rest is counted, not shown */
    l->shown++;
    return 0;
}

static int ctl_keys(struct daemon *d, struct text *t, struct kvs__err *e)
{
    struct listing l = { .d = d, .t = t, .wkey = 3, .wdtype = 5, .wshape = 5, .wversion = 7 };
    size_t total = kvs__engine_nkeys(d->eng);
    int rc;

    if ((rc = kvs__engine_foreach(d->eng, list_key, &l, e)) < 0)
        return rc;
    text_add(t, "%-*s  %-*s  %-*s  %-*s  %s\n", l.wkey, "KEY", l.wdtype, "DTYPE", l.wshape,
             "SHAPE", l.wversion, "VERSION", "ROUNDS");
    l.pass = 1;
    if ((rc = kvs__engine_foreach(d->eng, list_key, &l, e)) < 0)
        return rc;
    if (l.shown < total)
        text_add(t, "... and %zu more keys, not shown\n", total - l.shown);
    return 0;
}

/* kvsrun's word that rank `rank` of this host ended, with exit code
 * `code`. A worker that connected is its socket's business. One that
 * never did would be waited for until the job's timeout, here and on the
 * other hosts: it counts at once as left when it succeeded (as a worker
 * that joined and closed at once), and as dead, failing the job, when it
 * did not. The slot goes from FREE under d->lock, as admit() takes it, so
 * a hello of that rank is refused after this. */
static int ctl_gone(struct daemon *d, int rank, int code, struct text *t, struct kvs__err *e)
{
    int wi = rank - d->rank0, st;

    if (d->nworkers <= 0 || wi < 0 || wi >= d->nworkers)
        return kvs__fail(e, KVS_EBADARG, "rank %d is not one of this host's ranks", rank);
    pthread_mutex_lock(&d->lock);
    st = atomic_load(&d->workers[wi].state);
    if (st == W_FREE)
        atomic_store(&d->workers[wi].state, code ? W_DEAD : W_LEFT);
    pthread_mutex_unlock(&d->lock);
    if (st != W_FREE) {
        text_add(t, "rank %d connected: its socket tells\n", rank);
        return 0;
    }
    atomic_fetch_add(&d->connected, 1);
    text_add(t, "rank %d never connected: counted as %s\n", rank, code ? "dead" : "left");
    if (code) {
        job_fail(d, KVS_EPEERDEAD, "rank %d ended (exit code %d) before it connected", rank,
                 code);
        return 0;
    }
    d->left++;
    say(d, "rank %d ended before it connected: counted as left", rank);
    bridge_worker_left(d, wi);
    return 0;
}

/* Sends one reply and waits at most until deadline_ns; the connection is
 * the caller's to close. Errors only cost kvsctl its answer. */
static void ctl_send(int fd, const struct kvs__ctl_reply *r, int64_t deadline_ns)
{
    unsigned char *msg = malloc(KVS__CTL_REPLY_HEAD + (size_t)r->len);
    size_t len;

    if (!msg)
        return;
    if ((len = kvs__ctl_reply_encode(r, msg)) != 0)
        kvs__sock_send(fd, msg, len, NULL, 0, deadline_ns, NULL);
    free(msg);
}

/* Answers the control requests the socket thread queued (serve thread).
 * Returns 1 when one of them was stop. */
int control_serve(struct daemon *d)
{
    struct ctl_conn q[CTL_QUEUE_MAX];
    int n, stop = 0;

    pthread_mutex_lock(&d->ctl_lock);
    n = d->nctl;
    memcpy(q, d->ctlq, sizeof q[0] * (size_t)n);
    d->nctl = 0;
    pthread_mutex_unlock(&d->ctl_lock);
    for (int i = 0; i < n; i++) {
        struct kvs__ctl_reply *r = &d->reply;
        struct text t = { r->text, 0, KVS__CTL_TEXT_MAX, 0 };
        struct kvs__err e = { 0, "" };
        int rc = 0;

        switch (q[i].command) {
        case KVS__CTL_STATUS:
            ctl_status(d, &t);
            break;
        case KVS__CTL_KEYS:
            rc = ctl_keys(d, &t, &e);
            break;
        case KVS__CTL_STATS:
        case KVS__CTL_STATS_SHORT:
            stats_answer(d, &t, q[i].command == KVS__CTL_STATS_SHORT, &e);
            break;
        case KVS__CTL_SAMPLE:
            rc = stats_sample(d, &t, &e);
            break;
        case KVS__CTL_CHECKPOINT:
            if ((rc = commits_force(d, &e)) == 0)
                text_add(&t, "commit %llu (step %lld) is on disk in %s\n",
                         (unsigned long long)d->commit_seq, (long long)d->resume_step,
                         d->o.checkpoint);
            break;
        case KVS__CTL_STOP:
            text_add(&t, "stopping\n");
            stop = 1;
            say(d, "told to stop by kvsctl (pid %d)", (int)q[i].pid);
            break;
        case KVS__CTL_GONE:
            rc = ctl_gone(d, q[i].rank, q[i].code, &t, &e);
            break;
        default:                       /* the decoder let no other through */
            rc = kvs__fail(&e, KVS_EPROTO, "unknown command");
        }
        if (rc != 0) {
            t.len = 0;
            t.full = 0;
            text_add(&t, "%s\n", e.msg);
        }
        r->version = KVS__PROTO_VERSION;
        r->status = rc;
        r->len = (uint32_t)t.len;
        ctl_send(q[i].fd, r, kvs__now_ns() + CTL_SEND_NS);
        close(q[i].fd);
    }
    return stop;
}

static void ctl_refuse(int fd, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* An answer from the socket thread: a request it will not queue. */
static void ctl_refuse(int fd, int status, const char *fmt, ...)
{
    struct kvs__ctl_reply *r = malloc(sizeof *r);
    char msg[KVS__ERR_MSG_MAX];
    va_list ap;

    if (!r)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->version = KVS__PROTO_VERSION;
    r->status = status;
    r->len = (uint32_t)kvs__ctl_text_escape(r->text, KVS__CTL_TEXT_MAX + 1, msg, strlen(msg),
                                            0);
    ctl_send(fd, r, kvs__now_ns() + HANDSHAKE_NS);
    free(r);
}

/* A connection whose first message is a control request (socket thread):
 * checked, then queued for the serve thread, which answers and closes it.
 * Takes fd. */
void control_accept(struct daemon *d, int fd, const void *msg, size_t len, pid_t pid)
{
    struct kvs__err e = { 0, "" };
    struct kvs__ctl_request q;
    int queued = 0;

    if (kvs__ctl_request_decode(msg, len, &q, &e) != 0) {
        ctl_refuse(fd, KVS_EPROTO, "%s", e.msg);
    } else if (strcmp(q.job, d->o.job) != 0) {
        ctl_refuse(fd, KVS_EBADARG, "this kvsd serves job '%s', not '%s'", d->o.job, q.job);
    } else {
        pthread_mutex_lock(&d->ctl_lock);
        if (d->nctl < CTL_QUEUE_MAX) {
            d->ctlq[d->nctl++] = (struct ctl_conn){ .fd = fd, .command = q.command, .pid = pid,
                                                    .rank = q.rank, .code = q.code };
            queued = 1;
        }
        pthread_mutex_unlock(&d->ctl_lock);
        if (queued) {
            kvs__bell_ring(d->bell);
            return;
        }
        ctl_refuse(fd, -EBUSY, "kvsd has %d control requests waiting; try again",
                   CTL_QUEUE_MAX);
    }
    close(fd);
}
