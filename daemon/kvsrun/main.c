/*
 * kvsrun - the launcher of a dist_sync / dist_async job on one host (or of
 * one host's part of a job across hosts: one kvsrun per host). It
 * makes sure a kvsd serves the job (starting one when none does), starts
 * the N workers with KVS_JOB, KVS_RANK and KVS_NUM_WORKERS set, passes the
 * signals it receives on to them, stops the rest when one fails, and on
 * the way out leaves nothing of the job behind: no worker, nothing a
 * worker left running in its process group, and, when kvsrun started the
 * kvsd, no kvsd, socket or lock file.
 *
 * kvsrun speaks to kvsd only through its control requests (kvsd_ctl.c:
 * a worker gone, the waits for --stall-timeout); it never runs a job
 * whose name another kvsrun holds (the job's .run file, locked while
 * kvsrun runs), never stops or cleans up after a kvsd it did
 * not start, and never signals a process outside the job: only the
 * process groups of its own workers and of the kvsd it started. Nothing
 * here waits without a deadline; signals arrive through a signalfd, so no
 * handler runs in the middle of anything.
 *
 * Across hosts, kvsrun always starts its host's kvsd, with the hosts'
 * options, and waits for it to say (through a pipe) that every host has
 * joined and which global ranks are this host's: its workers get those
 * (host-major: host 0's first) and the job's total. The host count, rank
 * and coordinator come from the options, else KVS_NODES, KVS_NODE_RANK and
 * KVS_COORD, else Slurm's or Open MPI's variables, so that srun or mpirun
 * can start one kvsrun per host.
 *
 * With --restarts or --checkpoint the job recovers (restart.c): a worker
 * that dies, or a kvsd that ends by itself, restarts the kvsd from the
 * last snapshot and the dead workers under their ranks.
 *
 * This file is main, a short sequence of named steps; the steps are
 * options.c (the command line), placement.c (hosts, ranks, names, the
 * workers' variables), supervise.c (children and signals), watch.c (the
 * workers' run), kvsd_child.c (the kvsd kvsrun starts), restart.c (a job
 * that recovers), kvsd_ctl.c (what kvsrun tells and asks kvsd) and cleanup.c
 * (what kvsrun holds of the job, given back); kvsrun.h is what they
 * share.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "kvsrun.h"
#include "shm/ring.h"

/* What a run needs before anything starts: the job's files named, room
 * for the workers, the signals taken over. 0, else kvsrun's exit status
 * (said), with nothing left held. */
static int prepare(struct run *r)
{
    int rc;

    if ((rc = job_paths(r)) != 0)
        return rc;
    r->w = calloc((size_t)r->o.nworkers, sizeof *r->w);
    if (!r->w) {
        fprintf(stderr, "kvsrun: out of memory\n");
        return 1;
    }
    if ((rc = setup_signals(r)) != 0) {
        fprintf(stderr, "kvsrun: cannot take over signals: %s\n", strerror(-rc));
        free(r->w);
        return 1;
    }
    /* Orphans of the workers come to kvsrun rather than to init, so that
     * they are reaped here and their groups empty while kvsrun watches. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    return 0;
}

/* A kvsd to serve the job: across hosts kvsrun always starts its own; on
 * one host, a kvsd that already serves the job is used. 0, else kvsrun's
 * exit status (said). */
static int serve_job(struct run *r)
{
    if (r->o.nodes > 1 && probe(r->sock_path, NULL)) {
        fprintf(stderr, "kvsrun: a kvsd already serves %s: across hosts kvsrun starts its "
                "own\n", r->o.job);
        return 1;
    }
    if (r->o.nodes > 1 || !probe(r->sock_path, NULL))
        return start_kvsd_recovering(r);
    if (r->recover) {
        fprintf(stderr, "kvsrun: a kvsd already serves %s: a job that recovers needs the kvsd "
                "kvsrun starts (it restarts it)\n", r->o.job);
        return 1;
    }
    return 0;
}

/* The job: its name claimed, a kvsd to serve it, the workers run to their
 * end and what they left behind stopped. Returns kvsrun's exit status;
 * *failed is 0 only when the job ended well, so that kvsd may leave on its
 * own. */
static int run_job(struct run *r, int *failed)
{
    int rc;

    *failed = 1;
    r->started = time(NULL);
    if ((rc = claim_job(r)) != 0)
        return rc;
    /* A name kvsrun made up is said, so that kvsctl -j can find the job. */
    if (r->o.job_picked)
        fprintf(stderr, "kvsrun: job %s (kvsctl -j %s status)\n", r->o.job, r->o.job);
    r->total = r->o.nworkers;
    if ((rc = serve_job(r)) != 0)
        return rc;
    if ((rc = start_workers(r)) != 0) {
        begin_stop(r, kvs__now_ns());
        supervise(r);
        sweep(r);
        return rc;
    }
    rc = supervise(r);
    sweep(r);
    restart_summary(r);
    *failed = r->stopping || rc != 0;
    return r->first_status >= 0 ? r->first_status : rc;
}

/* The way out: the kvsd kvsrun started ended and its files gone, the
 * timeline said, the job's name given back, the signals restored.
 * Returns the exit status, 1 when kvsd could not be ended. */
static int leave(struct run *r, int status, int job_failed)
{
    if (!job_failed)
        rejoin_ended(r);
    if (stop_kvsd(r, !job_failed) != 0 && status == 0)
        status = 1;
    if (r->kvsd && r->kvsd_done)
        remove_job_files(r);
    say_timeline(r);
    release_job(r);
    close(r->sfd);
    sigprocmask(SIG_SETMASK, &r->old_mask, NULL);
    free(r->w);
    return status;
}

int main(int argc, char **argv)
{
    static struct run r;
    int rc, status, failed;

    r.first_status = -1;
    r.sfd = -1;
    r.run_fd = -1;
    if ((rc = parse_options(&r.o, argc, argv)) >= 0)
        return rc;
    r.recover = r.o.restarts > 0 || r.o.checkpoint != NULL;
    if ((rc = prepare(&r)) != 0)
        return rc;
    status = run_job(&r, &failed);
    return leave(&r, status, failed);
}
