/*
 * watch.c - the job's run: the loop that watches the workers until every
 * one has ended. Each turn takes the signals and the ended children
 * (supervise.c), does a recovery that is due (restart.c), tells kvsd of
 * the workers that ended and, with --stall-timeout, looks at what the
 * others wait for (kvsd_ctl.c), and moves the stop along its deadlines
 * (grace, SIGTERM, SIGKILL 2 s later).
 *
 * It signals only the process groups of its own workers, and sleeps only
 * until the next deadline, SLICE_MS at most.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>

#include "kvsrun.h"
#include "shm/ring.h"

/* kvsd hears of each worker that ended (kvsd_ctl.c), so that one that
 * never connected is not waited for; a worker to be replaced is not gone. */
static void tell_ended(struct run *r)
{
    for (int i = 0; i < r->nstarted; i++) {
        if (!r->w[i].tell || r->w[i].pending)
            continue;
        r->w[i].tell = 0;
        if (!r->recover || exit_code(r->w[i].status) == 0)
            tell_gone(r, i, exit_code(r->w[i].status));
    }
}

/* Runs until every started worker is reaped: stop signals are passed on,
 * a failure or a signal starts the stop (grace, SIGTERM, SIGKILL 2 s
 * later). Returns 0, or 1 when some worker outlived SIGKILL. */
int supervise(struct run *r)
{
    for (;;) {
        int64_t now, next;

        if (take_signals(r) && !r->stopping)
            begin_stop(r, kvs__now_ns() + r->o.grace_ns);
        reap(r);
        if (r->npending || r->kvsd_lost)
            recover(r);
        tell_ended(r);
        if (r->nlive == 0 && (r->npending == 0 || r->stopping))
            return 0;
        now = kvs__now_ns();
        if (r->o.stall_ns && !r->stopping && now >= r->next_poll) {
            stall_check(r);
            r->next_poll = kvs__now_ns() + r->o.stall_ns / 4;
        }
        if (r->term_at && now >= r->term_at) {
            signal_workers(r, SIGTERM);
            r->term_at = 0;
            r->kill_at = now + KILL_AFTER_NS;
        }
        if (r->kill_at && now >= r->kill_at) {
            signal_workers(r, SIGKILL);
            r->kill_at = 0;
            r->give_up_at = now + GONE_NS;
        }
        if (r->give_up_at && now >= r->give_up_at) {
            fprintf(stderr, "kvsrun: %d worker(s) did not end after SIGKILL; leaving them\n",
                    r->nlive);
            return 1;
        }
        next = now + SLICE_MS * 1000000ll;
        if (r->o.stall_ns && r->next_poll < next)
            next = r->next_poll;
        if (r->term_at && r->term_at < next)
            next = r->term_at;
        if (r->kill_at && r->kill_at < next)
            next = r->kill_at;
        wait_slice(r, next);
    }
}

