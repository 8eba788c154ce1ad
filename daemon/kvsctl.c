/*
 * kvsctl - looks into the kvsd of a job on this host: the job's state
 * (status), its keys (keys), kvsd's counters (stats); or tells kvsd to stop
 * (stop). It sends one control request on the job's socket and prints the
 * answer. plan (plan.c) asks no kvsd: it models a job across hosts.
 *
 * kvsctl never touches the job's shared memory, files or processes: all it
 * knows is kvsd's answer, which it decodes and checks (proto.c) before it
 * prints a byte of it. It never signals a process and never removes a
 * file; stop is kvsd's own doing. Every wait, the connect included, ends at
 * one deadline, DEADLINE_NS after the start.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvs.h"
#include "plan.h"
#include "proto.h"
#include "ring.h"
#include "shm.h"
#include "sys.h"

#define SEC_NS      1000000000ll
#define DEADLINE_NS (5 * SEC_NS)       /* for everything kvsctl waits on */
#define RETRY_MS    10                 /* between connects to a full backlog, looks at a stop */


static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvsctl [-j JOB] COMMAND\n"
            "       kvsctl plan --hosts LIST --shapes FILE [--link RATE] [OPTIONS]\n"
            "Asks the kvsd of a dist_sync/dist_async job on this host.\n"
            "Commands:\n"
            "  status    the job: mode, workers, number of keys, optimizer, failure\n"
            "  keys      every key: dtype, shape, version, sync rounds done\n"
            "  stats     kvsd's counters: rounds, pushes, pulls, bytes, collectives, ...\n"
            "  stop      kvsd ends the job, as on SIGTERM; kvsctl waits until it is gone\n"
            "  plan      models a job across H hosts: bytes per host per round, imbalance,\n"
            "            round time on given links (no kvsd asked; 'kvsctl plan --help')\n"
            "Options:\n"
            "  -j, --job JOB    the job (default: $KVS_JOB, else \"default\")\n"
            "  -h, --help       this text\n"
            "      --version    kvsctl's version\n"
            "Exit status: 0 on success, 1 when kvsd could not be asked or answered with an\n"
            "error, 2 on a usage error. Every command gives up after %lld s.\n",
            DEADLINE_NS / SEC_NS);
}

static int64_t ms_to(int64_t deadline_ns)
{
    int64_t left = deadline_ns - kvs__now_ns();

    if (left <= 0)
        return 0;
    return left / 1000000 + 1;
}

static void nap(int64_t deadline_ns)
{
    int64_t ms = ms_to(deadline_ns);

    /* EINTR only ends the nap early; the caller looks at the clock. */
    poll(NULL, 0, (int)(ms < RETRY_MS ? ms : RETRY_MS));
}

/* Returns -1 to go on, else the exit status (0 after --help/--version, 2
 * on a usage error, with the message written). *plan: the index of a
 * plan command, whose arguments are its own, or 0. */
static int parse_options(int argc, char **argv, char *job, size_t job_size, int *command,
                         int *plan)
{
    enum { OPT_VERSION = 256 };
    static const struct option longs[] = {
        { "job", required_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, OPT_VERSION },
        { NULL, 0, NULL, 0 },
    };
    struct kvs__err e = { 0, "" };
    const char *name = NULL, *from = "-j";
    int c;

    opterr = 0;                        /* our messages carry "kvsctl: ", not argv[0] */
    while ((c = getopt_long(argc, argv, "+:j:h", longs, NULL)) != -1) {
        switch (c) {
        case 'j':
            name = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("kvsctl (%s)\n", kvs_version(NULL, NULL, NULL));
            return 0;
        case ':':
            fprintf(stderr, "kvsctl: option '%s' needs a value\nTry 'kvsctl --help'.\n",
                    argv[optind - 1]);
            return 2;
        default:
            if (optopt > 0 && optopt < 256)
                fprintf(stderr, "kvsctl: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "kvsctl: unknown option '%s'\n", argv[optind - 1]);
            fprintf(stderr, "Try 'kvsctl --help'.\n");
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "kvsctl: no command (status, keys, stats, stop or plan)\n"
                "Try 'kvsctl --help'.\n");
        return 2;
    }
    if (strcmp(argv[optind], "plan") == 0) {
        *plan = optind;
        return -1;
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "kvsctl: one command at a time; '%s' is one too many\n"
                "Try 'kvsctl --help'.\n", argv[optind + 1]);
        return 2;
    }
    *command = 0;
    for (int k = KVS__CTL_STATUS; k <= KVS__CTL_STOP; k++)
        if (strcmp(argv[optind], kvs__ctl_command_name(k)) == 0)
            *command = k;
    if (*command == 0) {
        fprintf(stderr, "kvsctl: unknown command '%s' (status, keys, stats, stop or plan)\n"
                "Try 'kvsctl --help'.\n", argv[optind]);
        return 2;
    }
    if (!name) {
        name = getenv("KVS_JOB");
        from = "KVS_JOB";
        if (!name || !*name)
            name = "default";
    }
    if (kvs__job_name_check(name, &e) != 0) {
        fprintf(stderr, "kvsctl: %s: %s\n", from, e.msg);
        return 2;
    }
    snprintf(job, job_size, "%s", name);
    return -1;
}

/* Connects to path before deadline_ns. A kvsd whose backlog is full
 * (EAGAIN) is tried again until then: a blocking connect would wait for
 * it without a deadline. 0 and *fd, or -errno. */
static int connect_by(const char *path, int64_t deadline_ns, int *fd)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int s;

    if (strlen(path) >= sizeof a.sun_path)
        return -ENAMETOOLONG;
    memcpy(a.sun_path, path, strlen(path) + 1);
    s = EINTR_RETRY(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (s < 0)
        return -errno;
    for (;;) {
        int rc;

        if (EINTR_RETRY(connect(s, (const struct sockaddr *)&a, sizeof a)) == 0
            || errno == EISCONN) {
            *fd = s;
            return 0;
        }
        rc = -errno;
        if (rc != -EAGAIN || kvs__now_ns() >= deadline_ns) {
            close(s);
            return rc == -EAGAIN ? -ETIMEDOUT : rc;
        }
        nap(deadline_ns);
    }
}

/* 1 while path is the socket it was when kvsctl began (same device and
 * inode): a kvsd that stops removes it; a new kvsd makes another. */
static int same_socket(const char *path, const struct stat *was)
{
    struct stat st;

    return lstat(path, &st) == 0 && st.st_dev == was->st_dev && st.st_ino == was->st_ino;
}

/* Writes text as it came, with a final newline. 0, or 1 when stdout
 * failed (a closed pipe, a full disk). */
static int print_text(const struct kvs__ctl_reply *r)
{
    if (r->len > 0 && fwrite(r->text, 1, r->len, stdout) != r->len)
        return 1;
    if (r->len > 0 && r->text[r->len - 1] != '\n')
        putchar('\n');
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kvsctl: cannot write the answer: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

/* The text of an error answer on one line: without its final newline. */
static int text_line_len(const struct kvs__ctl_reply *r)
{
    uint32_t n = r->len;

    while (n > 0 && r->text[n - 1] == '\n')
        n--;
    return (int)n;
}

int main(int argc, char **argv)
{
    static struct kvs__ctl_reply reply;
    static unsigned char buf[KVS__CTL_REPLY_MAX];
    char job[KVS__JOB_MAX + 1], dir[PATH_MAX], path[PATH_MAX + 80];
    struct kvs__ctl_request q = { .version = KVS__PROTO_VERSION };
    struct kvs__err e = { 0, "" };
    struct stat was;
    int64_t deadline = kvs__now_ns() + DEADLINE_NS;
    int command = 0, plan = 0, fd = -1, nfds = 0, rc, status = 1;
    size_t len;
    uid_t uid;

    if ((rc = parse_options(argc, argv, job, sizeof job, &command, &plan)) >= 0)
        return rc;
    if (plan)
        return plan_main(argc - plan, argv + plan);
    if (kvs__runtime_dir(dir, sizeof dir, &e) != 0) {
        fprintf(stderr, "kvsctl: %s\n", e.msg);
        return 1;
    }
    snprintf(path, sizeof path, "%s/%s.sock", dir, job);
    rc = lstat(path, &was) != 0 ? -errno : connect_by(path, deadline, &fd);
    if (rc == -ENOENT || rc == -ECONNREFUSED) {
        fprintf(stderr, "kvsctl: no kvsd serves job '%s' (%s)\n", job, path);
        return 1;
    }
    if (rc == -ETIMEDOUT) {
        fprintf(stderr, "kvsctl: the kvsd of job '%s' accepted no connection within %lld s\n",
                job, DEADLINE_NS / SEC_NS);
        return 1;
    }
    if (rc != 0) {
        fprintf(stderr, "kvsctl: cannot connect to %s: %s\n", path, strerror(-rc));
        return 1;
    }
    /* The directory is this user's alone (kvs__runtime_dir checks it);
     * this only makes sure of the one we talk to. */
    if (kvs__sock_peer(fd, &uid, NULL, &e) != 0 || uid != geteuid()) {
        fprintf(stderr, "kvsctl: %s is served by another user's process; not asking it\n",
                path);
        goto out;
    }

    q.command = (uint8_t)command;
    snprintf(q.job, sizeof q.job, "%s", job);
    len = kvs__ctl_request_encode(&q, buf);
    if ((rc = kvs__sock_send(fd, buf, len, NULL, 0, deadline, &e)) == 0)
        rc = kvs__sock_recv(fd, buf, sizeof buf, &len, NULL, 0, &nfds, deadline, &e);
    if (rc == -ECONNRESET || rc == -EPIPE) {
        fprintf(stderr, "kvsctl: the kvsd of job '%s' closed the connection without an "
                "answer (it may be stopping)\n", job);
        goto out;
    }
    if (rc == -ETIMEDOUT) {
        fprintf(stderr, "kvsctl: no answer from the kvsd of job '%s' within %lld s\n", job,
                DEADLINE_NS / SEC_NS);
        goto out;
    }
    if (rc != 0) {
        fprintf(stderr, "kvsctl: job '%s': %s\n", job, e.msg);
        goto out;
    }
    if (kvs__msg_type(buf, len) == KVS__MSG_WELCOME) {
        /* A kvsd that took the request for a bad hello: one from before
         * kvsctl, or of another protocol version. Its refusal says which. */
        struct kvs__welcome w;

        if (kvs__welcome_decode(buf, len, &w, &e) == 0 && w.status != 0) {
            char safe[4 * KVS__MSG_MAX];

            /* Nothing from a socket reaches the terminal unchecked. */
            kvs__ctl_text_escape(safe, sizeof safe, w.msg, strlen(w.msg), 0);
            fprintf(stderr, "kvsctl: the kvsd of job '%s' takes no control requests: %s\n",
                    job, safe);
            goto out;
        }
    }
    if (kvs__ctl_reply_decode(buf, len, &reply, &e) != 0) {
        fprintf(stderr, "kvsctl: a bad answer from the kvsd of job '%s': %s\n", job, e.msg);
        goto out;
    }
    if (reply.status != 0) {
        fprintf(stderr, "kvsctl: the kvsd of job '%s' refused: %.*s (%s)\n", job,
                text_line_len(&reply), reply.text, kvs_err_name(reply.status));
        goto out;
    }
    if (print_text(&reply) != 0)
        goto out;
    if (command == KVS__CTL_STOP) {
        /* kvsd has answered and is on its way out: it removes its
         * socket as it ends, once the workers' requests are failed. */
        while (same_socket(path, &was) && kvs__now_ns() < deadline)
            nap(deadline);
        if (same_socket(path, &was)) {
            fprintf(stderr, "kvsctl: the kvsd of job '%s' said it was stopping, but is still "
                    "there after %lld s\n", job, DEADLINE_NS / SEC_NS);
            goto out;
        }
    }
    status = 0;
out:
    close(fd);
    return status;
}
