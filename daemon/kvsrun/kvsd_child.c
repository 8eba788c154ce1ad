/*
 * kvsd_child.c - the kvsd kvsrun starts: found (--kvsd, $KVSD, beside
 * kvsrun, else PATH), started with the job's options, waited for until
 * its socket accepts or, across hosts, until it says through a pipe that
 * every host has joined and which ranks are this host's; and ended: its
 * own exit first when the job succeeded, else SIGTERM, then SIGKILL; a
 * kvsd already in the kernel's exit is waited for, not signalled.
 *
 * In a job that recovers, kvsd is started with --recover, and with
 * --restore (--generation G on the G-th restart) to resume from the last
 * snapshot; the options a kvsd lists in its --help are the ones passed.
 *
 * It never speaks kvsd's protocol (the probe connects and closes;
 * kvsd_ctl.c has what kvsrun tells and asks kvsd), and never stops a kvsd
 * it did not start.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvsrun.h"
#include "shm/ring.h"
#include "base/sys.h"
#include "proto/hello.h"

/* 1 when a kvsd listens at the socket: the connection was queued, or its
 * backlog is full (EAGAIN, which only a live listener gives); 0 when
 * nobody does. Non-blocking, so a kvsd that does not accept cannot hold
 * kvsrun up; the connection is closed at once, which kvsd takes as a
 * client that left before its hello. *pid (may be NULL): the listener's
 * process when the connection was queued, else 0. */
int probe(const char *path, pid_t *pid)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    struct ucred cred;
    socklen_t len = sizeof cred;
    int s, rc;

    if (pid)
        *pid = 0;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return 0;
    rc = EINTR_RETRY(connect(s, (const struct sockaddr *)&a, sizeof a));
    if (pid && (rc == 0 || errno == EISCONN)
        && getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
        *pid = cred.pid;
    rc = rc == 0 || errno == EAGAIN || errno == EISCONN;
    close(s);
    return rc;
}

static int executable(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The kvsd to start: --kvsd, $KVSD, the kvsd beside kvsrun's executable,
 * else "kvsd" for execvp to find in PATH. An uninstalled build has each
 * program in a folder of its own (daemon/kvsrun/kvsrun), and a libtool
 * build may run the real program from .libs/ behind a wrapper script one
 * level up: from either folder, kvsd is looked for one level up too, as
 * daemon/kvsd or daemon/kvsd/kvsd. */
static const char *find_kvsd(const struct run *r, char *buf, size_t size)
{
    const char *env = getenv("KVSD");
    char exe[PATH_MAX], *slash;
    ssize_t n;

    if (r->o.kvsd)
        return r->o.kvsd;
    if (env && *env)
        return env;
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        if ((slash = strrchr(exe, '/')) != NULL) {
            *slash = '\0';
            snprintf(buf, size, "%s/kvsd", exe);
            if (executable(buf))
                return buf;
            slash = strrchr(exe, '/');
            if (slash && (strcmp(slash + 1, ".libs") == 0 || strcmp(slash + 1, "kvsrun") == 0)) {
                *slash = '\0';
                snprintf(buf, size, "%s/kvsd", exe);
                if (executable(buf))
                    return buf;
                snprintf(buf, size, "%s/kvsd/kvsd", exe);
                if (executable(buf))
                    return buf;
            }
        }
    }
    return "kvsd";
}

/* Waits until the kvsd is reaped or deadline_ns; a stop signal ends the
 * wait early when cut_short is set. Returns 1 when it is gone. */
static int wait_kvsd(struct run *r, int64_t deadline_ns, int cut_short)
{
    for (;;) {
        reap(r);
        if (r->kvsd_done)
            return 1;
        if (take_signals(r) && cut_short)
            return 0;
        if (kvs__now_ns() >= deadline_ns)
            return 0;
        wait_slice(r, deadline_ns);
    }
}

/* Which of the recovery options kvsd has, from its --help (read once,
 * within EXEC_NS): a kvsd of an older build is started without those it
 * lacks, rather than failing on them. The child is waited for by its pid
 * alone, so that no worker's end is collected here. */
static void kvsd_options(struct run *r, const char *path)
{
    static char text[32768];
    char *const argv[] = { (char *)path, "--help", NULL };
    int64_t deadline = kvs__now_ns() + EXEC_NS;
    size_t got = 0;
    int pfd[2], st;
    pid_t pid;

    r->kvsd_has = KVSD_HAS_KNOWN;
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return;
    pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);

        setpgid(0, 0);
        dup2(pfd[1], 1);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 2);
        }
        sigprocmask(SIG_SETMASK, &r->old_mask, NULL);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        return;
    }
    for (;;) {
        struct pollfd p = { .fd = pfd[0], .events = POLLIN };
        int64_t left = deadline - kvs__now_ns();
        ssize_t n;

        if (left <= 0 || poll(&p, 1, (int)(left / 1000000 + 1)) == 0)
            break;
        n = EINTR_RETRY(read(pfd[0], text + got, sizeof text - 1 - got));
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == sizeof text - 1)
            break;
    }
    close(pfd[0]);
    text[got] = '\0';
    if (waitpid(pid, &st, WNOHANG) == 0) {
        kill(-pid, SIGKILL);           /* its own group: kvsrun's child alone */
        waitpid(pid, &st, 0);
    }
    if (strstr(text, "--restore"))
        r->kvsd_has |= KVSD_HAS_RESTORE;
    if (strstr(text, "--generation"))
        r->kvsd_has |= KVSD_HAS_GENERATION;
    if (strstr(text, "--checkpoint"))
        r->kvsd_has |= KVSD_HAS_CHECKPOINT;
    if (strstr(text, "--recover"))
        r->kvsd_has |= KVSD_HAS_RECOVER;
}

/* The recovery options of this start of kvsd, into argv from *argc.
 * 0, else kvsrun's exit status (said). */
static int recovery_args(struct run *r, const char *path, char **argv, int *argc, char *gen,
                         size_t gen_size)
{
    if (!r->recover)
        return 0;
    if (!(r->kvsd_has & KVSD_HAS_KNOWN)) {
        kvsd_options(r, path);
        if (r->o.checkpoint && !(r->kvsd_has & KVSD_HAS_CHECKPOINT)) {
            fprintf(stderr, "kvsrun: kvsd '%s' has no --checkpoint (an older build?)\n", path);
            return 1;
        }
        if (!(r->kvsd_has & KVSD_HAS_RESTORE))
            fprintf(stderr, "kvsrun: kvsd '%s' has no --restore (an older build?): a "
                    "restarted kvsd starts with an empty store\n", path);
    }
    if (r->kvsd_has & KVSD_HAS_RECOVER)
        argv[(*argc)++] = "--recover";
    if (r->o.checkpoint) {
        argv[(*argc)++] = "--checkpoint";
        argv[(*argc)++] = (char *)r->o.checkpoint;
    }
    /* A first start resumes from DIR's snapshot, when it holds one. */
    if ((r->gen > 0 || r->o.checkpoint) && (r->kvsd_has & KVSD_HAS_RESTORE))
        argv[(*argc)++] = "--restore";
    if (r->gen > 0 && (r->kvsd_has & KVSD_HAS_GENERATION)) {
        snprintf(gen, gen_size, "%d", r->gen);
        argv[(*argc)++] = "--generation";
        argv[(*argc)++] = gen;
    }
    return 0;
}

/* Starts kvsd for the job and waits until its socket accepts, or, across
 * hosts, until it says every host has joined. Returns 0, else kvsrun's
 * exit status (the message written). */
int start_kvsd(struct run *r)
{
    char buf[PATH_MAX + 16], num[16], what[128], nodes[16], rank[16], rfd[16], line[64];
    char gen[16];
    const char *path = find_kvsd(r, buf, sizeof buf);
    char *argv[48] = { (char *)path, "--job", r->o.net_job, "-n", num, "-q" };
    int argc = 6, pipefd[2] = { -1, -1 }, ready = 0;
    size_t got = 0;
    int64_t wait_ns = KVSD_START_NS + (r->o.nodes > 1 ? r->o.join_ns : 0), deadline;
    pid_t pid = 0;
    int rc, sig;

    snprintf(num, sizeof num, "%d", r->o.nworkers);
    if (r->o.staging) {
        argv[argc++] = "--staging";
        argv[argc++] = (char *)r->o.staging;
    }
    if (r->o.arena) {
        argv[argc++] = "--arena";
        argv[argc++] = (char *)r->o.arena;
    }
    if ((rc = recovery_args(r, path, argv, &argc, gen, sizeof gen)) != 0)
        return rc;
    if (r->o.nodes > 1) {
        /* The pipe's write end goes to kvsd; kvsrun keeps the read end. */
        if (pipe(pipefd) != 0 || fcntl(pipefd[0], F_SETFD, FD_CLOEXEC) != 0
            || fcntl(pipefd[0], F_SETFL, O_NONBLOCK) != 0) {
            fprintf(stderr, "kvsrun: pipe: %s\n", strerror(errno));
            return 1;
        }
        snprintf(nodes, sizeof nodes, "%d", r->o.nodes);
        snprintf(rank, sizeof rank, "%d", r->o.node_rank);
        snprintf(rfd, sizeof rfd, "%d", pipefd[1]);
        argv[argc++] = "--nodes";
        argv[argc++] = nodes;
        argv[argc++] = "--node-rank";
        argv[argc++] = rank;
        argv[argc++] = "--coord";
        argv[argc++] = r->o.coord;
        argv[argc++] = "--ready-fd";
        argv[argc++] = rfd;
        if (r->o.bind) {
            argv[argc++] = "--bind";
            argv[argc++] = (char *)r->o.bind;
        }
        if (r->o.secret_file) {
            argv[argc++] = "--secret-file";
            argv[argc++] = (char *)r->o.secret_file;
        }
        if (r->o.join) {
            argv[argc++] = "--join-timeout";
            argv[argc++] = (char *)r->o.join;
        }
    }
    rc = spawn(r, argv, -1, &pid);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    if (rc != 0) {
        fprintf(stderr, "kvsrun: cannot run kvsd '%s': %s\n", path, strerror(-rc));
        if (pipefd[0] >= 0)
            close(pipefd[0]);
        return 1;
    }
    r->kvsd = pid;
    r->kvsd_done = r->kvsd_told = r->kvsd_up = r->gone_off = 0;
    r->kvsd_started = kvs__now_ns();
    deadline = kvs__now_ns() + wait_ns;
    for (;;) {
        if (pipefd[0] >= 0 ? (ready = read_ready(r, pipefd[0], line, &got, sizeof line)) > 0
                           : probe(r->sock_path, NULL)) {
            if (pipefd[0] >= 0)
                close(pipefd[0]);
            r->kvsd_up = 1;
            return 0;
        }
        reap(r);
        if (r->kvsd_done || ready < 0) {
            if (!r->kvsd_done)
                wait_kvsd(r, kvs__now_ns() + KILL_AFTER_NS, 0);
            describe(what, sizeof what, r->kvsd_status);
            fprintf(stderr, "kvsrun: kvsd '%s' %s before it served job '%s'%s\n", path,
                    r->kvsd_done ? what : "ended its ready pipe", r->o.job,
                    WIFEXITED(r->kvsd_status) && WEXITSTATUS(r->kvsd_status) == 3
                        ? " (another kvsd serves it)" : "");
            r->kvsd_told = 1;
            break;
        }
        if (kvs__now_ns() >= deadline) {
            fprintf(stderr, "kvsrun: kvsd '%s' (pid %ld) did not %s within %lld s\n", path,
                    (long)r->kvsd, pipefd[0] >= 0 ? "see every host join" : "listen",
                    (long long)(wait_ns / SEC_NS));
            break;
        }
        if ((sig = take_signals(r)) != 0) {
            rc = 128 + sig;
            goto out;
        }
        {
            int64_t next = kvs__now_ns() + PROBE_MS * 1000000ll;

            wait_slice(r, next < deadline ? next : deadline);
        }
    }
    rc = 1;
out:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    return rc;
}

/* 1 when process pid is in the kernel's exit (PF_EXITING among the flags
 * of /proc/PID/stat): it has left, and is giving its memory back, which
 * for a store of gigabytes takes a second or two, and several times that
 * on a loaded machine. No signal would hasten it. */
static int exiting(pid_t pid)
{
    char path[64], buf[512], *p;
    unsigned long flags;
    size_t n;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    if (!(f = fopen(path, "re")))
        return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* After the name, which may hold anything: state ppid pgrp session
     * tty_nr tpgid flags. */
    if (!(p = strrchr(buf, ')')) || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1)
        return 0;
    return (flags & 0x4) != 0;         /* PF_EXITING */
}

/* Waits for a kvsd in the kernel's exit, up to EXITING_NS. */
static void wait_exiting(struct run *r)
{
    if (!r->kvsd_done && exiting(r->kvsd))
        wait_kvsd(r, kvs__now_ns() + EXITING_NS, 1);
}

int end_kvsd_now(struct run *r)
{
    r->kvsd_up = 0;
    if (!r->kvsd || r->kvsd_done)
        return 0;
    /* kvsd --recover leaves by itself once it sees a worker's death. */
    wait_kvsd(r, kvs__now_ns() + OWN_EXIT_NS, 0);
    wait_exiting(r);
    if (!r->kvsd_done) {
        kill(-r->kvsd, SIGKILL);
        wait_kvsd(r, kvs__now_ns() + GONE_NS, 0);
        wait_exiting(r);
    }
    if (!r->kvsd_done) {
        fprintf(stderr, "kvsrun: kvsd (pid %ld) did not end after SIGKILL; cannot restart it\n",
                (long)r->kvsd);
        return 1;
    }
    return 0;
}

/* Ends the kvsd kvsrun started: its own exit first when the job succeeded
 * (it leaves once every worker has), else SIGTERM at once, SIGKILL 2 s
 * later; one already in the kernel's exit is given the time it takes.
 * Returns 0, or 1 when it could not be ended. The files it may have left
 * are cleanup.c's. */
int stop_kvsd(struct run *r, int wait_first)
{
    char what[128];

    if (!r->kvsd)
        return 0;
    if (!r->kvsd_done && wait_first)
        wait_kvsd(r, kvs__now_ns() + (r->o.nodes > 1 ? HOSTS_LEAVE_NS : KVSD_LEAVE_NS), 1);
    wait_exiting(r);
    if (!r->kvsd_done) {
        kill(-r->kvsd, SIGTERM);
        wait_kvsd(r, kvs__now_ns() + KILL_AFTER_NS, 0);
        wait_exiting(r);
    }
    if (!r->kvsd_done) {
        fprintf(stderr, "kvsrun: kvsd (pid %ld) ignored SIGTERM; killing it\n", (long)r->kvsd);
        kill(-r->kvsd, SIGKILL);
        wait_kvsd(r, kvs__now_ns() + GONE_NS, 0);
        wait_exiting(r);
    }
    if (!r->kvsd_done) {
        fprintf(stderr, "kvsrun: kvsd (pid %ld) did not end after SIGKILL; %s is left\n",
                (long)r->kvsd, r->sock_path);
        return 1;
    }
    /* A SIGKILL of kvsrun's own has been reported above. */
    if (!r->kvsd_told && exit_code(r->kvsd_status) != 0
        && !(WIFSIGNALED(r->kvsd_status) && WTERMSIG(r->kvsd_status) == SIGKILL)
        && !(r->recover && WIFEXITED(r->kvsd_status)
             && (WEXITSTATUS(r->kvsd_status) == KVS__KVSD_EXIT_ROLLBACK
                 || WEXITSTATUS(r->kvsd_status) == KVS__KVSD_EXIT_HOSTS))) {
        describe(what, sizeof what, r->kvsd_status);
        fprintf(stderr, "kvsrun: kvsd (pid %ld) %s\n", (long)r->kvsd, what);
    }
    return 0;
}
