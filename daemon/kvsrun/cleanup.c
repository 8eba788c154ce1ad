/*
 * cleanup.c - what kvsrun holds of the job, and gives back on the way
 * out: the job's name (its .run file, locked while kvsrun runs, so that
 * no second kvsrun runs a job of the same name), the socket and lock
 * file a kvsd that did not end cleanly left, the processes the workers
 * left running in their groups, and where the timeline was written.
 *
 * It never removes another kvsd's files (only under the job's lock) and
 * never signals a process outside the workers' groups.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvsrun.h"
#include "shm/ring.h"
#include "base/sys.h"
#include "proto/trace.h"

/* Takes the job's name for this kvsrun: NAME.run in the runtime
 * directory, locked for as long as kvsrun runs, holding its pid. Two
 * kvsruns under one name would send both jobs' workers to one kvsd, where
 * the second's are refused or, worse, join the first job; so the second
 * is refused here, before it starts anything, and told who has the name.
 * A kvsd started by hand holds no such file, and kvsrun serves its job as
 * before. Returns 0, else kvsrun's exit status (the message written). */
int claim_job(struct run *r)
{
    char buf[32], owner[64];
    struct stat held, named;
    pid_t kvsd;
    ssize_t n;

    /* The file is unlinked by its holder on the way out: a lock won on a
     * file no longer at the path is worth nothing, so look again. */
    for (int tries = 0; tries < 8; tries++) {
        int fd = EINTR_RETRY(open(r->run_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600));

        if (fd < 0) {
            fprintf(stderr, "kvsrun: cannot open %s: %s\n", r->run_path, strerror(errno));
            return 1;
        }
        if (EINTR_RETRY(flock(fd, LOCK_EX | LOCK_NB)) != 0) {
            int err = errno;

            n = err == EWOULDBLOCK ? EINTR_RETRY(pread(fd, buf, sizeof buf - 1, 0)) : -1;
            close(fd);
            if (err != EWOULDBLOCK) {
                fprintf(stderr, "kvsrun: cannot lock %s: %s\n", r->run_path, strerror(err));
                return 1;
            }
            buf[n > 0 ? n : 0] = '\0';
            if (probe(r->sock_path, &kvsd) && kvsd > 0)
                snprintf(owner, sizeof owner, "kvsd pid %ld", (long)kvsd);
            else if (atol(buf) > 0)
                snprintf(owner, sizeof owner, "kvsrun pid %ld", atol(buf));
            else                       /* it has locked, not yet written */
                snprintf(owner, sizeof owner, "another kvsrun is starting it");
            fprintf(stderr, "kvsrun: job %s is already running (%s); pick another name with "
                    "-j\n", r->o.job, owner);
            return 1;
        }
        if (fstat(fd, &held) == 0 && EINTR_RETRY(stat(r->run_path, &named)) == 0
            && held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
            n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || EINTR_RETRY(pwrite(fd, buf, (size_t)n, 0)) != n)
                fprintf(stderr, "kvsrun: cannot write %s: %s (the job runs; a second "
                        "kvsrun under its name is still refused)\n", r->run_path,
                        strerror(errno));
            r->run_fd = fd;
            return 0;
        }
        close(fd);
    }
    fprintf(stderr, "kvsrun: cannot take %s: it keeps being replaced\n", r->run_path);
    return 1;
}

/* Gives the job's name back: unlinked while still locked, so that nobody
 * takes a lock on a file that is about to go. */
void release_job(struct run *r)
{
    char parts[PATH_MAX + 80];
    struct kvs__err e = { 0, "" };

    if (r->run_fd < 0)
        return;
    /* A worker that ended after its kvsd (killed at the end of a failed
     * job) may have left its timeline's part, which no kvsd will merge. */
    if (kvs__tr_part_dir(r->o.job, parts, sizeof parts, &e) == 0)
        kvs__tr_clear_dir(parts);
    unlink(r->run_path);
    close(r->run_fd);
    r->run_fd = -1;
}

/* kvsd removes its socket and lock itself when it ends cleanly; after a
 * SIGKILL or a crash they stay. They are removed only under the job's
 * lock: should another kvsd have taken the job meanwhile, its files are
 * not kvsrun's to touch. */
void remove_job_files(struct run *r)
{
    int fd = EINTR_RETRY(open(r->lock_path, O_RDWR | O_CLOEXEC));

    if (fd < 0) {
        if (errno == ENOENT && !probe(r->sock_path, NULL))
            unlink(r->sock_path);
        return;
    }
    if (EINTR_RETRY(flock(fd, LOCK_EX | LOCK_NB)) == 0) {
        unlink(r->sock_path);
        unlink(r->lock_path);
    }
    close(fd);
}

/* 1 when some process is still in a worker's group (EPERM: one that
 * changed its uid, still there). */
static int groups_left(const struct run *r)
{
    for (int i = 0; i < r->nstarted; i++)
        if (kill(-r->w[i].pid, 0) == 0 || errno == EPERM)
            return 1;
    return 0;
}

static void signal_groups(const struct run *r, int sig)
{
    for (int i = 0; i < r->nstarted; i++)
        kill(-r->w[i].pid, sig);
}

/* What a worker left running in its group after it ended (a background
 * command, a helper) belongs to the job and ends with it: SIGTERM, then
 * SIGKILL. The groups cannot be another's yet: a process group's id is
 * not given out again while the group has members. */
void sweep(struct run *r)
{
    int64_t deadline;

    if (!groups_left(r))
        return;
    fprintf(stderr, "kvsrun: the workers left processes behind; stopping them\n");
    signal_groups(r, SIGTERM);
    for (int round = 0; round < 2; round++) {
        deadline = kvs__now_ns() + (round == 0 ? KILL_AFTER_NS : GONE_NS);
        for (;;) {
            reap(r);
            take_signals(r);
            if (!groups_left(r))
                return;
            if (kvs__now_ns() >= deadline)
                break;
            wait_slice(r, deadline);
        }
        if (round == 0)
            signal_groups(r, SIGKILL);
    }
    fprintf(stderr, "kvsrun: processes of job '%s' outlived SIGKILL\n", r->o.job);
}

/* Once the kvsd kvsrun started has ended: where the job's timeline is
 * (KVS_TIMELINE, --timeline), which that kvsd wrote as it ended. */
void say_timeline(const struct run *r)
{
    const char *t = getenv("KVS_TIMELINE");
    char path[PATH_MAX + 32];
    struct stat sb;

    if (!r->kvsd || !t || !*t)
        return;
    if (r->o.nodes > 1 && r->o.node_rank > 0)
        snprintf(path, sizeof path, "%s.host%d", t, r->o.node_rank);
    else
        snprintf(path, sizeof path, "%s", t);
    if (stat(path, &sb) == 0 && sb.st_mtime >= r->started)
        fprintf(stderr, "kvsrun: timeline written to %s%s\n", path,
                r->o.nodes > 1 ? " (this host's part: kvsctl timeline merge joins them)" : "");
    else
        fprintf(stderr, "kvsrun: no timeline was written to %s (kvsd says why above)\n", path);
}
