/*
 * job.h - the job's fate: the workers a round waits for, the job failing,
 * workers released and evicted.
 */
#ifndef KVSD_JOB_H
#define KVSD_JOB_H

#include "daemon.h"

/* How many workers a round or a collective waits for: those still in the job. */
int job_expected(const struct daemon *d);

/* Registers h (kept, not copied): job_fail and job_fail_waiting call it,
 * after those registered before it. At start-up, before the serve loop. */
void job_hook(struct daemon *d, const struct fail_hook *h);

/* Completes every waiting request (pending here, and through the hooks
 * those the modules above hold) with status and msg. */
void job_fail_waiting(struct daemon *d, int status, const char *msg);

/* A worker died, was evicted, or gave up waiting: fails every waiting
 * request now, and through d->failed every later one, with status (the
 * first failure's) and its message, which is kept and said; the first
 * failure runs the hooks' failed first. */
void job_fail(struct daemon *d, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Frees what a worker holds: its unfinished list call (completed with
 * KVS_EPEERDEAD), its waiting requests, its backlog, its segment and its
 * socket. A push of it still waiting whose data is in the segment (a
 * worker that died) fails the job (job_fail) before the segment goes. */
void job_release_worker(struct daemon *d, struct worker *w);

/* Evicts a worker that broke the protocol (why says how): the job fails,
 * then the worker is released. */
void job_evict(struct daemon *d, struct worker *w, const char *why);

/* After an engine call with sources (remote_sources): evicts each worker
 * marked whose read failed or who has exited since (the job fails), and
 * clears the marks. 0, or -1 when the job failed so. */
int job_remote_check(struct daemon *d);

#endif
