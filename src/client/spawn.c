/*
 * spawn.c - the host's kvsd of a job that no kvsrun started: the job's
 * first local worker starts it when nobody listens at the job's socket,
 * and every local worker waits for that socket, with backoff, by the
 * handle's deadline. kvsd is $KVS_KVSD, else the installed one, else the
 * first kvsd in PATH; it runs in a session of its own, detached (a
 * grandchild: it outlives the worker that started it, and nobody need
 * reap it), its output in JOB.log beside the job's socket, and ends with
 * its workers (--exit-when-done). Its --ready-fd tells when it ended
 * before serving, so that the starter fails at once with its last words.
 *
 * The worker may have threads (Python's, torch's): between fork and exec
 * the children call only async-signal-safe functions, on what was made
 * before the fork. It never reaps a process it did not fork, nor signals
 * a kvsd: a second kvsd of the same job is refused by the job's lock in
 * kvsd itself, and the worker that started it then connects to the one
 * that holds it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/spec.h"
#include "base/sys.h"
#include "client/launch.h"
#include "shm/ring.h"
#include "shm/shm.h"

extern char **environ;

#define BACKOFF_MIN_NS (1000000ll)          /* the first wait for the socket */
#define BACKOFF_MAX_NS (50 * 1000000ll)     /* the longest */
#define LOSER_NS       (2 * 1000000000ll)   /* a kvsd that ended at once may have lost
                                             * the job's lock to one about to listen */
#define FD_FLOOR       10                   /* the child's fds are moved above 0..3 */

static int executable(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The kvsd to run, into buf: $KVS_KVSD, else the installed one, else the
 * first kvsd in PATH. */
static int find_kvsd(char *buf, size_t size, struct kvs__err *e)
{
    const char *env = getenv("KVS_KVSD"), *path = getenv("PATH");

    if (env && *env) {
        if (!executable(env))
            return kvs__fail(e, KVS_EBADARG, "KVS_KVSD=%.200s is not an executable file", env);
        snprintf(buf, size, "%s", env);
        return 0;
    }
#ifdef KVS__BINDIR
    snprintf(buf, size, "%s/kvsd", KVS__BINDIR);
    if (executable(buf))
        return 0;
#endif
    while (path && *path) {
        size_t n = strcspn(path, ":");

        if (n > 0 && n < size - 6) {
            snprintf(buf, size, "%.*s/kvsd", (int)n, path);
            if (buf[0] == '/' && executable(buf))
                return 0;
        }
        path += n + (path[n] == ':');
    }
    return kvs__fail(e, KVS_ECLOSED, "no kvsd to start: set KVS_KVSD to its path, or put it "
                     "in PATH (looked in %s too)",
#ifdef KVS__BINDIR
                     KVS__BINDIR
#else
                     "no install folder"
#endif
                     );
}

/* fd moved to FD_FLOOR or above, close-on-exec; the old one closed. */
static int lift(int fd)
{
    int up;

    if (fd < 0 || fd >= FD_FLOOR)
        return fd;
    up = fcntl(fd, F_DUPFD_CLOEXEC, FD_FLOOR);
    close(fd);
    return up;
}

/* The child's side: a session of its own, then a grandchild that runs
 * kvsd with stdin /dev/null, stdout and stderr the log, fd 3 the ready
 * pipe, every other fd closed, signals as a fresh process has them. Only
 * async-signal-safe calls. */
static void child(const char *exe, char *const *argv, int null_fd, int log_fd, int ready_fd,
                  int max_fd, const char *fail_msg, size_t fail_len)
{
    struct sigaction dfl = { .sa_handler = SIG_DFL };
    sigset_t none;
    pid_t p;

    setsid();
    /* In the child of a process with threads, a fork that ran the
     * program's atfork handlers could block on a lock no thread holds. */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    p = _Fork();
#else
    p = fork();
#endif
    if (p != 0)
        _exit(p < 0 ? 1 : 0);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    if (dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0
        || dup2(ready_fd, 3) < 0)
        _exit(127);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0)
#endif
        for (int fd = 4; fd <= max_fd; fd++)
            close(fd);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(exe, argv, environ);
    if (write(2, fail_msg, fail_len) < 0)
        _exit(127);
    _exit(127);
}

/* Starts the host's kvsd of job l (its log at log): *ready is the read end
 * of its ready pipe, non-blocking. */
static int spawn(const struct kvs__launch *l, const char *log, int64_t timeout_ms, int *ready,
                 struct kvs__err *e)
{
    char exe[PATH_MAX], workers[16], secs[32], nodes[16], node[16], fail_msg[PATH_MAX + 64];
    char *argv[24] = { exe, "--job", (char *)l->net_job, "--workers", workers,
                       "--exit-when-done", "--connect-timeout", secs, "--ready-fd", "3" };
    int argc = 10, pfd[2], null_fd, log_fd, max_fd, st, rc;
    struct rlimit rl;
    sigset_t all, old;
    pid_t pid;

    *ready = -1;
    if ((rc = find_kvsd(exe, sizeof exe, e)) != 0)
        return rc;
    snprintf(workers, sizeof workers, "%d", l->local_size);
    snprintf(secs, sizeof secs, "%.3f", timeout_ms > 86400000 ? 86400.0 : timeout_ms / 1000.0);
    if (l->nodes > 1) {
        snprintf(nodes, sizeof nodes, "%d", l->nodes);
        snprintf(node, sizeof node, "%d", l->node);
        argv[argc++] = "--nodes";
        argv[argc++] = nodes;
        argv[argc++] = "--node-rank";
        argv[argc++] = node;
        argv[argc++] = "--coord";
        argv[argc++] = (char *)l->coord;
        argv[argc++] = "--secret-file";
        argv[argc++] = (char *)l->secret_file;
    }
    argv[argc] = NULL;
    snprintf(fail_msg, sizeof fail_msg, "kvs: cannot execute %s\n", exe);
    max_fd = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur
                                                                          : 65536;
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return kvs__fail(e, -errno, "pipe: %s", strerror(errno));
    log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (log_fd < 0)
        log_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pfd[1] = lift(pfd[1]);
    log_fd = lift(log_fd);
    null_fd = lift(null_fd);
    if (pfd[1] < 0 || log_fd < 0 || null_fd < 0) {
        rc = kvs__fail(e, -EMFILE, "no descriptors left to start kvsd");
        goto out;
    }
    /* No handler of the program's may run in the children before exec. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0)
        child(exe, argv, null_fd, log_fd, pfd[1], max_fd, fail_msg, strlen(fail_msg));
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        rc = kvs__fail(e, -errno, "fork to start kvsd: %s", strerror(errno));
        goto out;
    }
    /* The child leaves at once (its child runs kvsd): ours to reap, unless
     * the program lets the kernel or a handler of its own reap it. */
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    rc = 0;
out:
    close(pfd[1]);
    if (log_fd >= 0)
        close(log_fd);
    if (null_fd >= 0)
        close(null_fd);
    if (rc != 0) {
        close(pfd[0]);
        return rc;
    }
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    *ready = pfd[0];
    return 0;
}

/* The last line kvsd wrote to its log, into buf (empty when none). */
static void last_words(const char *log, char *buf, size_t size)
{
    char tail[512];
    ssize_t n = 0;
    int fd = open(log, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    off_t end;

    buf[0] = '\0';
    if (fd < 0)
        return;
    end = lseek(fd, 0, SEEK_END);
    if (end > 0)
        n = pread(fd, tail, sizeof tail - 1, end > (off_t)sizeof tail - 1
                                                 ? end - (off_t)(sizeof tail - 1) : 0);
    close(fd);
    if (n <= 0)
        return;
    tail[n] = '\0';
    while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == '\r'))
        tail[--n] = '\0';
    {
        char *nl = strrchr(tail, '\n');

        snprintf(buf, size, "%.*s", (int)size - 1, nl ? nl + 1 : tail);
    }
}

/* What the ready pipe says: 1 once kvsd ended it (it wrote its line, or
 * ended before serving), 0 while it is open. */
static int ready_ended(int fd, int *told)
{
    char buf[64];

    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);

        if (n > 0) {
            *told = 1;
            continue;
        }
        return n == 0 || (errno != EAGAIN && errno != EINTR);
    }
}

static void nap_ns(int64_t ns)
{
    struct timespec t = { ns / 1000000000, ns % 1000000000 };

    nanosleep(&t, NULL);
}

int kvs__launch_connect(const struct kvs__launch *l, const char *path, int64_t timeout_ms,
                        int64_t deadline, int *fd, struct kvs__err *e)
{
    char log[PATH_MAX + 96], words[256], secs[32];
    int64_t wait = BACKOFF_MIN_NS, ended_by = INT64_MAX;
    int ready = -1, told = 0, rc;
    size_t len = strlen(path);

    rc = kvs__sock_connect(path, fd, e);
    if (rc == 0 || !l->on_demand || (rc != -ENOENT && rc != -ECONNREFUSED))
        return rc;
    snprintf(log, sizeof log, "%.*s.log", (int)(len > 5 ? len - 5 : len), path);
    if (l->local_rank == 0 && (rc = spawn(l, log, timeout_ms, &ready, e)) != 0)
        return rc;
    for (;;) {
        int64_t now;

        if ((rc = kvs__sock_connect(path, fd, e)) == 0)
            break;
        if (rc != -ENOENT && rc != -ECONNREFUSED)
            break;
        now = kvs__now_ns();
        if (ready >= 0 && ready_ended(ready, &told)) {
            if (!told)
                ended_by = now + LOSER_NS;
            close(ready);
            ready = -1;
        }
        if (now >= deadline || now >= ended_by) {
            kvs__spec_format_double(secs, sizeof secs, (double)timeout_ms / 1000);
            last_words(log, words, sizeof words);
            if (now >= ended_by)
                rc = kvs__fail(e, KVS_ECLOSED, "the kvsd started for job '%s' (%s local "
                               "rank 0) ended before serving it: %s (log: %s)", l->job, l->by,
                               words[0] ? words : "it said nothing", log);
            else
                rc = kvs__fail(e, KVS_ECLOSED, "no kvsd served job '%s' within %s s "
                               "(KVS_TIMEOUT): the job's local rank 0 under %s starts it%s%s"
                               " (log: %s)", l->job, secs, l->by, words[0] ? "; it said: " : "",
                               words, log);
            break;
        }
        nap_ns(wait < deadline - now ? wait : deadline - now);
        wait = wait * 2 < BACKOFF_MAX_NS ? wait * 2 : BACKOFF_MAX_NS;
    }
    if (ready >= 0)
        close(ready);
    return rc;
}
