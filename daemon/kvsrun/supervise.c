/*
 * supervise.c - kvsrun's children and the signals that concern them:
 * each child forked into a process group of its own (a worker, or the
 * kvsd), every ended child reaped (kvsrun is the workers' subreaper, so
 * their orphans come here too), stop signals read from a signalfd and
 * passed on to the workers' groups; a failure or a signal starts the stop
 * (grace, SIGTERM, SIGKILL 2 s later), while in a job that recovers a
 * death with restarts left marks a restart due (restart.c does it).
 *
 * It signals only the process groups of its own workers, never a process
 * outside the job, and nothing here waits without a deadline; signals
 * arrive through the signalfd, so no handler runs in the middle of
 * anything.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvsrun.h"
#include "shm/ring.h"
#include "base/spec.h"
#include "base/sys.h"
#include "proto/hello.h"

static int64_t ms_to(int64_t deadline_ns)
{
    int64_t left = deadline_ns - kvs__now_ns();

    if (left <= 0)
        return 0;
    return left / 1000000 + 1;
}

void describe(char *buf, size_t size, int status)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "ended with wait status %#x", (unsigned)status);
}

/* The shell's convention: the exit code, or 128 + the signal. */
int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}

/* Sends sig to every started worker's process group that may still have
 * members; reaped leaders' groups are the sweep's business. */
void signal_workers(struct run *r, int sig)
{
    for (int i = 0; i < r->nstarted; i++)
        if (!r->w[i].done)
            kill(-r->w[i].pid, sig);
}

/* The job is ending: the live workers get until term_at, then SIGTERM.
 * Only the first reason counts: a later one must not put SIGTERM off. */
void begin_stop(struct run *r, int64_t term_at)
{
    if (r->stopping)
        return;
    r->stopping = 1;
    r->term_at = term_at;
}

/* A recovery is due since now, or since an earlier death. */
static void note_death(struct run *r)
{
    if (!r->death_at)
        r->death_at = kvs__now_ns();
}

/* A worker that failed is replaced while its rank has restarts left. */
int restart_worker_due(struct run *r, int i)
{
    if (!r->recover || r->stopping || r->w[i].restarts >= r->o.restarts)
        return 0;
    r->w[i].pending = 1;
    r->npending++;
    note_death(r);
    r->last_death = kvs__now_ns();
    return 1;
}

/* A kvsd that ended unasked while the job runs is restarted; its own
 * restarts are counted when it is (restart.c). */
int restart_kvsd_due(struct run *r)
{
    /* Its exit 0 is its leaving once every worker has: not a fault. */
    if (!r->recover || r->stopping || !r->kvsd_up || exit_code(r->kvsd_status) == 0
        || (r->nlive == 0 && r->npending == 0))
        return 0;
    r->kvsd_up = 0;
    r->kvsd_lost = 1;
    note_death(r);
    return 1;
}

/* Child p ended with wait status st: a worker, the kvsd, or an orphan of
 * a worker (which comes to kvsrun because it is their subreaper). */
void child_ended(struct run *r, pid_t p, int st)
{
    char what[128];
    int was_up;

    if (r->kvsd && p == r->kvsd) {
        r->kvsd_done = 1;
        r->kvsd_status = st;
        if (restart_kvsd_due(r))
            return;                    /* said when it is restarted */
        was_up = r->kvsd_up;
        r->kvsd_up = 0;
        /* Its normal end is the workers' leaving; anything else, while
         * workers still run, is the reason they are about to fail. A
         * kvsd --recover's exit after a death is its part in the
         * recovery, or in the failure already said; one kvsrun ended
         * to restart it is said with the restart. */
        if (r->nlive > 0 && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            && !(r->recover && (!was_up || (WIFEXITED(st)
                 && (WEXITSTATUS(st) == KVS__KVSD_EXIT_ROLLBACK
                     || WEXITSTATUS(st) == KVS__KVSD_EXIT_HOSTS))))) {
            describe(what, sizeof what, st);
            fprintf(stderr, "kvsrun: kvsd (pid %ld) %s while the job ran\n", (long)p,
                    what);
            r->kvsd_told = 1;
        }
        return;
    }
    for (int i = 0; i < r->nstarted; i++) {
        if (r->w[i].pid != p || r->w[i].done)
            continue;
        r->w[i].done = 1;
        r->w[i].status = st;
        r->w[i].tell = 1;
        r->nlive--;
        if (exit_code(st) != 0 && restart_worker_due(r, i))
            break;
        if (exit_code(st) != 0 && r->first_status < 0) {
            char grace[32], used[64] = "";

            r->first_status = exit_code(st);
            describe(what, sizeof what, st);
            /* The grace as given: 1000, not %.3g's 1e+03. */
            kvs__spec_format_double(grace, sizeof grace, (double)r->o.grace_ns / SEC_NS);
            if (r->o.restarts > 0 && r->w[i].restarts >= r->o.restarts)
                snprintf(used, sizeof used, "; its %d restart%s used up", r->o.restarts,
                         r->o.restarts == 1 ? " is" : "s are");
            if (r->nlive > 0 && !r->stopping)
                fprintf(stderr, "kvsrun: rank %d (pid %ld) %s%s; the other workers get "
                        "%s s to exit\n", i, (long)p, what, used, grace);
            else
                fprintf(stderr, "kvsrun: rank %d (pid %ld) %s%s\n", i, (long)p, what, used);
            begin_stop(r, kvs__now_ns() + r->o.grace_ns);
        }
        break;
    }
}

/* Collects every child that has ended. */
void reap(struct run *r)
{
    pid_t p;
    int st;

    while ((p = waitpid(-1, &st, WNOHANG)) > 0)
        child_ended(r, p, st);
}

/* Reads every pending signal. A stop signal goes on to the workers' groups
 * at once (the workers are not in kvsrun's group, so a terminal's ^C
 * reaches them only this way), and starts the stop. Returns the last stop signal read, 0 when
 * none came. */
int take_signals(struct run *r)
{
    struct signalfd_siginfo si;
    int last = 0;

    while (EINTR_RETRY(read(r->sfd, &si, sizeof si)) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;

        if (sig == SIGCHLD || !sigismember(&r->stop_set, sig))
            continue;
        signal_workers(r, sig);
        last = sig;
    }
    /* Whichever wait it came in (a recovery's too), the job ends. */
    if (last && !r->stopping)
        begin_stop(r, kvs__now_ns() + r->o.grace_ns);
    return last;
}

/* Sleeps until a signal comes or deadline_ns passes, SLICE_MS at most. */
void wait_slice(struct run *r, int64_t deadline_ns)
{
    struct pollfd p = { .fd = r->sfd, .events = POLLIN };
    int64_t ms = ms_to(deadline_ns);

    /* EINTR (a stop and continue) only ends the slice early. */
    poll(&p, 1, (int)(ms < SLICE_MS ? ms : SLICE_MS));
}

/* Forks a child in a process group of its own, with kvsrun's original
 * signal mask, that runs argv (PATH searched when argv[0] has no '/').
 * rank >= 0: a worker, with the job's variables set; rank < 0: the kvsd,
 * reading nothing from kvsrun's stdin. Returns 0 and *pid, or -errno when
 * fork failed or the program could not be run (the exec's errno comes
 * back through a close-on-exec pipe, so the caller can say why). */
int spawn(struct run *r, char *const argv[], int rank, pid_t *pid)
{
    pid_t parent = getpid(), p;
    int ep[2], err = 0, rc = 0;
    ssize_t n;

    if (pipe2(ep, O_CLOEXEC) != 0)
        return -errno;
    p = fork();
    if (p < 0) {
        rc = -errno;
        goto out_pipe;
    }
    if (p == 0) {
        close(ep[0]);
        setpgid(0, 0);
        /* Should kvsrun itself be killed (SIGKILL leaves it no say), its
         * children must not run on without it: kvsd then cleans up, and
         * the workers end. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        if (rank >= 0) {
            if (worker_env(r, rank) != 0)
                goto child_fail;
        } else {
            int fd = EINTR_RETRY(open("/dev/null", O_RDONLY));

            if (fd < 0 || dup2(fd, 0) < 0)
                goto child_fail;
            if (fd != 0)
                close(fd);
        }
        sigprocmask(SIG_SETMASK, &r->old_mask, NULL);
        execvp(argv[0], argv);
    child_fail:
        err = errno;
        n = write(ep[1], &err, sizeof err);
        (void)n;
        _exit(127);
    }
    /* Also here, so that the group exists before kvsrun signals it; EACCES
     * means the child has already exec'd, after its own setpgid. */
    setpgid(p, p);
    close(ep[1]);
    ep[1] = -1;
    {
        struct pollfd pf = { .fd = ep[0], .events = POLLIN };
        int64_t deadline = kvs__now_ns() + EXEC_NS;

        /* Past the deadline the exec is taken to have happened: the child
         * is reaped and reported like any other. */
        while (poll(&pf, 1, (int)ms_to(deadline)) < 0 && errno == EINTR) {
        }
        if (pf.revents) {
            n = EINTR_RETRY(read(ep[0], &err, sizeof err));
            if (n == (ssize_t)sizeof err)
                rc = -err;
        }
    }
    *pid = p;
out_pipe:
    close(ep[0]);
    if (ep[1] >= 0)
        close(ep[1]);
    return rc;
}

/* Returns 0 when every worker was started, else kvsrun's exit status (the
 * message written): 126/127 when the program cannot be run, as a shell
 * says, 1 when fork failed. Workers already started are then stopped by
 * the caller. */
int start_worker(struct run *r, int i)
{
    pid_t pid = 0;
    int rc = spawn(r, r->o.argv, i, &pid);

    if (rc != 0 && pid == 0) {
        fprintf(stderr, "kvsrun: cannot start rank %d: %s\n", i, strerror(-rc));
        return 1;
    }
    if (rc != 0) {
        /* Every rank runs the same program: one failed exec is all. */
        fprintf(stderr, "kvsrun: cannot run '%s': %s\n", r->o.argv[0], strerror(-rc));
        return rc == -ENOENT ? 127 : 126;
    }
    r->w[i].pid = pid;
    r->w[i].done = 0;
    r->w[i].tell = 0;
    r->w[i].waited_since = 0;
    if (i >= r->nstarted)
        r->nstarted = i + 1;
    r->nlive++;
    return 0;
}

int start_workers(struct run *r)
{
    for (int i = 0; i < r->o.nworkers; i++) {
        int rc = start_worker(r, i);

        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The stop signals kvsrun takes over; one ignored when kvsrun started (a
 * background command of a script ignores SIGINT) stays ignored. */
int setup_signals(struct run *r)
{
    static const int stops[] = { SIGINT, SIGTERM, SIGHUP };
    sigset_t all;

    sigemptyset(&r->stop_set);
    for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) {
        struct sigaction sa;

        if (sigaction(stops[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            continue;
        sigaddset(&r->stop_set, stops[i]);
    }
    all = r->stop_set;
    sigaddset(&all, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &all, &r->old_mask) != 0)
        return -errno;
    r->sfd = signalfd(-1, &all, SFD_NONBLOCK | SFD_CLOEXEC);
    if (r->sfd < 0) {
        int rc = -errno;

        sigprocmask(SIG_SETMASK, &r->old_mask, NULL);
        return rc;
    }
    return 0;
}
