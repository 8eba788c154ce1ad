/*
 * restart.c - a job that recovers (--restarts N, --checkpoint DIR): the
 * restart itself. One mechanism serves
 * every fault: the kvsd is ended (a kvsd --recover leaves by itself when
 * it sees a worker die; else SIGKILL), a new one is started from the last
 * snapshot and waited for until it serves, then each dead worker is
 * replaced under its rank and environment. Deaths seen together make one
 * kvsd restart. Each rank has N restarts, and so has the kvsd for the
 * times it ends by itself; when they are used up the job fails as any
 * job does.
 *
 * Which deaths are restarted is decided as they are reaped (supervise.c).
 * It signals only the kvsd kvsrun started and the process group of a
 * dead worker; it leaves the survivors alone (their handles reconnect by
 * themselves). Every wait here has a deadline.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "kvsrun.h"
#include "shm/ring.h"
#include "proto/hello.h"

/* The job cannot recover: it fails as any job does. Its exit code is
 * that of the first failure before (a worker's death not restarted
 * counts), else code when above 0. */
static void give_up(struct run *r, int code)
{
    char what[128];

    for (int i = 0; i < r->nstarted; i++) {
        if (!r->w[i].pending)
            continue;
        r->w[i].pending = 0;
        describe(what, sizeof what, r->w[i].status);
        fprintf(stderr, "kvsrun: rank %d (pid %ld) %s; not restarted: the job ends\n", i,
                (long)r->w[i].pid, what);
        if (r->first_status < 0)
            r->first_status = exit_code(r->w[i].status);
    }
    r->npending = 0;
    r->kvsd_lost = 0;
    r->death_at = 0;
    if (r->first_status < 0 && code > 0)
        r->first_status = code;
    begin_stop(r, kvs__now_ns() + r->o.grace_ns);
}

/* 1 when a kvsd's wait status says it ended since another host's did
 * (across hosts every host rolls back): not this host's fault, nor
 * counted against --restarts. */
static int hosts_rollback(int status)
{
    return WIFEXITED(status) && WEXITSTATUS(status) == KVS__KVSD_EXIT_HOSTS;
}

/* When kvsd ended by itself with no worker's death seen, it may be the
 * death kvsd saw first (status 75: a worker's socket closed before the
 * worker could be reaped): give the deaths OWN_EXIT_NS to show. A death
 * seen since this kvsd started, its worker replaced already, explains it
 * too. Then 1 when the kvsd's end is its own fault. */
static int kvsd_own_fault(struct run *r)
{
    int64_t deadline = kvs__now_ns() + OWN_EXIT_NS;

    if (r->npending || r->last_death >= r->kvsd_started || hosts_rollback(r->kvsd_status))
        return 0;
    if (WIFEXITED(r->kvsd_status) && WEXITSTATUS(r->kvsd_status) == KVS__KVSD_EXIT_ROLLBACK) {
        while (!r->npending && kvs__now_ns() < deadline) {
            wait_slice(r, deadline);
            reap(r);
        }
    }
    return r->npending == 0;
}

/* start_kvsd, and again while the kvsd it started ended before it
 * served: killed by a signal (a fault that struck it while it joined the
 * other hosts or read its commit; counted against --restarts), or rolled
 * back with another host of the job during the join (not counted; at most
 * 1 + --restarts times in a row). Any other end before serving is the
 * job's failure, as start_kvsd says. */
int start_kvsd_recovering(struct run *r)
{
    int rc, rollbacks = 0;

    while ((rc = start_kvsd(r)) == 1 && r->recover && r->kvsd_done) {
        if (WIFSIGNALED(r->kvsd_status) && r->kvsd_restarts < r->o.restarts) {
            r->kvsd_restarts++;
            fprintf(stderr, "kvsrun: kvsd (pid %ld) started again: restart %d of %d\n",
                    (long)r->kvsd, r->kvsd_restarts, r->o.restarts);
        } else if (hosts_rollback(r->kvsd_status) && rollbacks++ <= r->o.restarts) {
            fprintf(stderr, "kvsrun: kvsd (pid %ld) started again (not counted against "
                    "--restarts)\n", (long)r->kvsd);
        } else {
            break;
        }
        /* A kvsd killed by SIGKILL leaves its socket and lock behind. */
        remove_job_files(r);
        r->gen++;
    }
    return rc;
}

void recover(struct run *r)
{
    char what[128];
    int own, rc, kvsd_status, n = 0;
    pid_t old_kvsd = r->kvsd;
    int64_t served;

    if (r->stopping) {                 /* the job ends: no restart */
        give_up(r, 0);
        return;
    }
    if (end_kvsd_now(r) != 0) {
        give_up(r, 1);
        return;
    }
    kvsd_status = r->kvsd_status;
    own = r->kvsd_lost && kvsd_own_fault(r);
    if (r->stopping) {                 /* a failure or a signal came meanwhile */
        give_up(r, 0);
        return;
    }
    if (own && r->kvsd_restarts >= r->o.restarts) {
        describe(what, sizeof what, kvsd_status);
        fprintf(stderr, "kvsrun: kvsd (pid %ld) %s while the job ran; its %d restart%s used "
                "up\n", (long)old_kvsd, what, r->o.restarts, r->o.restarts == 1 ? " is" : "s are");
        r->kvsd_told = 1;
        give_up(r, 1);
        return;
    }
    /* Counted first: a kvsd lost again before it serves counts after it. */
    if (own)
        n = ++r->kvsd_restarts;
    /* A kvsd killed by SIGKILL leaves its socket and lock behind. */
    remove_job_files(r);
    r->gen++;
    if ((rc = start_kvsd_recovering(r)) != 0) {
        fprintf(stderr, "kvsrun: the job cannot recover without its kvsd\n");
        give_up(r, rc);
        return;
    }
    served = kvs__now_ns();
    if (served - r->death_at > r->longest_ns)
        r->longest_ns = served - r->death_at;
    /* kvsd_status: the kvsd that started the recovery, not one lost since. */
    if (r->kvsd_lost && !own && !r->npending && hosts_rollback(kvsd_status))
        fprintf(stderr, "kvsrun: kvsd (pid %ld) rolled back with another host of the job: "
                "restarted from the newest commit every host holds (not counted against "
                "--restarts)\n", (long)old_kvsd);
    if (own) {
        describe(what, sizeof what, kvsd_status);
        fprintf(stderr, "kvsrun: kvsd (pid %ld) %s: restart %d of %d; restarted from the last "
                "commit\n", (long)old_kvsd, what, n, r->o.restarts);
    }
    r->kvsd_lost = 0;
    r->death_at = 0;
    /* Workers that finished before are not waited for by the new kvsd. */
    for (int i = 0; i < r->nstarted; i++)
        if (r->w[i].done && !r->w[i].pending && exit_code(r->w[i].status) == 0)
            tell_gone(r, i, 0);
    for (int i = 0; i < r->nstarted; i++) {
        struct worker *w = &r->w[i];

        /* Also survivors' waits are over: the new kvsd has none yet. */
        w->waited_since = 0;
        if (!w->pending)
            continue;
        w->pending = 0;
        r->npending--;
        w->restarts++;
        describe(what, sizeof what, w->status);
        fprintf(stderr, "kvsrun: rank %d (pid %ld) %s: restart %d of %d; kvsd restarted from "
                "the last commit\n", i, (long)w->pid, what, w->restarts, r->o.restarts);
        /* What the dead worker left in its group must not run on beside
         * its replacement. */
        kill(-w->pid, SIGKILL);
        if ((rc = start_worker(r, i)) != 0) {
            give_up(r, rc);
            return;
        }
    }
}

/* Across hosts, once this host's workers have all ended well, its kvsd
 * stays up for the other hosts' (they push keys it owns). When it leaves
 * with KVS__KVSD_EXIT_HOSTS, another host rolled back: it is started again
 * (not counted against --restarts), told that its workers are gone, so
 * that the others can join it and finish; at most 1 + --restarts times.
 * One killed by a signal meanwhile is started again the same way, counted
 * as its own restart. */
void rejoin_ended(struct run *r)
{
    for (int n = 0; r->o.nodes > 1 && r->recover && r->kvsd && n <= r->o.restarts; n++) {
        int64_t deadline = kvs__now_ns() + HOSTS_LEAVE_NS;
        pid_t old = r->kvsd;
        char what[128];

        while (reap(r), !r->kvsd_done && kvs__now_ns() < deadline && !take_signals(r))
            wait_slice(r, deadline);
        if (!r->kvsd_done)
            return;
        if (WIFSIGNALED(r->kvsd_status)) {
            describe(what, sizeof what, r->kvsd_status);
            if (r->kvsd_restarts >= r->o.restarts) {
                fprintf(stderr, "kvsrun: kvsd (pid %ld) %s after this host's workers ended; its "
                        "%d restart%s used up\n", (long)old, what, r->o.restarts,
                        r->o.restarts == 1 ? " is" : "s are");
                return;
            }
            r->kvsd_restarts++;
            fprintf(stderr, "kvsrun: kvsd (pid %ld) %s after this host's workers ended: restart "
                    "%d of %d, for the other hosts to join and finish\n", (long)old, what,
                    r->kvsd_restarts, r->o.restarts);
        } else if (WIFEXITED(r->kvsd_status)
                   && WEXITSTATUS(r->kvsd_status) == KVS__KVSD_EXIT_HOSTS) {
            fprintf(stderr, "kvsrun: kvsd (pid %ld) rolled back with another host of the job "
                    "after this host's workers ended: restarted for the others to join (not "
                    "counted against --restarts)\n", (long)old);
        } else {
            return;
        }
        remove_job_files(r);
        r->gen++;
        if (start_kvsd_recovering(r) != 0)
            return;
        for (int i = 0; i < r->nstarted; i++)
            if (r->w[i].done)
                tell_gone(r, i, exit_code(r->w[i].status));
    }
}

void restart_summary(const struct run *r)
{
    char line[1024];
    size_t o = 0;
    int any = r->kvsd_restarts > 0;

    for (int i = 0; i < r->nstarted; i++)
        any |= r->w[i].restarts > 0;
    if (!any)
        return;
    o += (size_t)snprintf(line, sizeof line, "kvsrun: restarts:");
    for (int i = 0; i < r->nstarted && o + 64 < sizeof line; i++)
        if (r->w[i].restarts > 0)
            o += (size_t)snprintf(line + o, sizeof line - o, " rank %d: %d,", i,
                                  r->w[i].restarts);
    snprintf(line + o, sizeof line - o, " kvsd's own: %d; the longest recovery took %.2f s",
             r->kvsd_restarts, (double)r->longest_ns / SEC_NS);
    fprintf(stderr, "%s\n", line);
}
