/*
 * serve.c - the serve loop: each pass answers kvsctl, notes the deaths,
 * drains every worker's ring, takes the other hosts' messages, runs the
 * pending queue and wakes the workers, then sleeps on the daemon's
 * doorbell when nothing moved. It is the one place that calls every
 * module, each once a pass; it must never decode a request or post a
 * completion itself.
 */
#include <stdatomic.h>

#include "serve.h"
#include "answers.h"
#include "bridge.h"
#include "collectives.h"
#include "commits.h"
#include "combined.h"
#include "control.h"
#include "job.h"
#include "requests.h"
#include "rounds.h"
#include "tracing.h"

#define SERVE_SLICE_NS  (100 * 1000000ll)
#define SPIN_NS         (20 * 1000ll)

/* kvsd --exit-when-done, which nobody stops but its workers: a job whose
 * workers have not all come by connect_by fails (the others' calls end
 * with that cause, the other hosts learn of it), and a failed job is over
 * once no worker is live, whether or not the missing ones ever come.
 * 1 when kvsd should leave. */
static int over_early(struct daemon *d, int connected, int live, int64_t connect_by)
{
    if (!d->o.exit_when_done)
        return 0;
    if ((d->nworkers == 0 || connected < d->nworkers) && kvs__now_ns() >= connect_by
        && !d->failed)
        job_fail(d, KVS_ETIMEDOUT, "%d of %d workers of job '%s' connected within %.3g s "
                 "(kvsd --connect-timeout)", connected, d->nworkers, d->o.job,
                 (double)d->o.connect_ns / 1e9);
    if (d->failed && live == 0) {
        say(d, "the job failed and no worker is left: exiting");
        return 1;
    }
    return 0;
}

void serve_run(struct daemon *d)
{
    int64_t connect_by = kvs__now_ns() + d->o.connect_ns;

    while (!stop_signal) {
        uint32_t seen = kvs__bell_seq(d->bell);
        /* connected before the slots: the socket thread raises nslots,
         * then makes the slot LIVE, then counts the worker, so a worker
         * counted here is seen below, and "every worker connected, none
         * live" cannot come from a pass that missed one just arriving. */
        int connected = atomic_load(&d->connected);
        /* Only the slots ever used: a pass over all MAX_WORKERS of them
         * touched a cache line each and was most of a pass's time. */
        int progress = 0, live = 0, nslots = atomic_load(&d->nslots);

        commits_poll(d);               /* before kvsctl status tells of commits */
        if (control_serve(d))
            return;
        /* Before deaths: a worker that gave up in the combine area may
         * have made another exit, and the job fails for the first cause. */
        cb_check(d);
        for (int i = 0; i < nslots; i++) {
            struct worker *w = &d->workers[i];

            if (w->state == W_LIVE && w->hup) {
                /* Requests it posted before dying still count: drain first. */
                requests_drain(d, i);
                if (w->state == W_LIVE) {
                    atomic_store(&w->state, W_DEAD);
                    trace_worker(w, KVS__TR_DIED, NULL);
                    job_fail(d, KVS_EPEERDEAD, "rank %d (pid %d) died", w->rank,
                             (int)w->pid);
                    job_release_worker(d, w);
                }
            }
            if (w->state == W_LEFT && w->seg && !w->backlog_len)
                job_release_worker(d, w);  /* its CLOSE is answered: reclaim */
            live += w->state == W_LIVE;
        }
        for (int i = 0; i < nslots; i++) {
            if (d->workers[i].state == W_LIVE) {
                progress |= requests_drain(d, i);
                answer_flush_backlog(d, &d->workers[i]);
            }
        }
        if (d->hx)
            progress |= bridge_serve(d);
        while (rounds_serve_pending(d))
            progress = 1;
        if (d->commit_waits)
            colls_commit_check(d);
        answer_wake_workers(d);
        if (d->nworkers > 0 && connected >= d->nworkers && live == 0) {
            /* Across hosts a host owns keys that the others still push
             * to: it stays until every host's workers have left. */
            if (!d->hx || d->failed) {
                say(d, "every worker has left: exiting");
                return;
            }
            if (bridge_all_left(d)) {
                say(d, "every worker of every host has left: exiting");
                return;
            }
        }
        if (over_early(d, connected, live, connect_by))
            return;
        if (!progress) {
            d->st.waits++;
            kvs__bell_wait(d->bell, seen, kvs__now_ns() + SERVE_SLICE_NS, SPIN_NS);
        }
    }
}
