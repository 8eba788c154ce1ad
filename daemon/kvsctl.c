/*
 * kvsctl - looks into the kvsd of a job on this host: the job's state
 * (status), its keys (keys), kvsd's counters and the keys' round latencies
 * (stats, or its sample as JSON with --json), a live view of the workers
 * and keys (top, top.c); or tells kvsd to stop (stop). Each question is
 * one control request on the job's socket, and its answer. plan (plan.c)
 * asks no kvsd: it models a job across hosts; nor does timeline
 * (timeline.c), which reads the trace files of a job.
 *
 * kvsctl never touches the job's shared memory, files or processes: all it
 * knows is kvsd's answer, which it decodes and checks (proto.c, and
 * sample.c for a sample) before it prints a byte of it. It never signals a
 * process and never removes a file; stop is kvsd's own doing. Every wait
 * of a question, the connect included, ends at one deadline, DEADLINE_NS
 * after the question began.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"
#include "kvs.h"
#include "plan.h"
#include "proto/proto.h"
#include "shm/ring.h"
#include "shm/shm.h"
#include "base/sys.h"
#include "timeline.h"

#define RETRY_MS    10                 /* between connects to a full backlog, looks at a stop */
#define TOP_INTERVAL_NS SEC_NS         /* kvsctl top's refresh, unless -d says */


static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvsctl [-j JOB] COMMAND\n"
            "       kvsctl [-j JOB] stats [--json]\n"
            "       kvsctl [-j JOB] top [--once] [-d SECONDS] [JOB]\n"
            "       kvsctl plan --hosts LIST --shapes FILE [--link RATE] [OPTIONS]\n"
            "       kvsctl timeline plot FILE [-o OUT.png] [--data OUT.tsv] [--no-plot]\n"
            "       kvsctl timeline merge OUT FILE...\n"
            "Asks the kvsd of a dist_sync/dist_async job on this host.\n"
            "Commands:\n"
            "  status    the job: mode, workers, number of keys, optimizer, failure\n"
            "  keys      every key: dtype, shape, version, sync rounds done\n"
            "  stats     kvsd's counters: rounds, pushes, pulls, bytes, collectives, ...;\n"
            "            then per key, busiest first, its rounds and their latency (p50,\n"
            "            p99, max: upper bounds of power-of-two buckets)\n"
            "            --json: the counters, each worker's and each key's with its\n"
            "            latency histogram, as one JSON object\n"
            "  top       a live view, refreshed every second: per worker its rounds/s,\n"
            "            bytes/s and time waiting for the store; per key its rounds/s and\n"
            "            latency; kvsd's CPU; the job's totals. q quits. A terminal only:\n"
            "            --once prints one frame (after one interval) as plain text;\n"
            "            -d SECONDS sets the interval (0.1 to 60)\n"
            "  stop      kvsd ends the job, as on SIGTERM; kvsctl waits until it is gone\n"
            "  plan      models a job across H hosts: bytes per host per round, imbalance,\n"
            "            round time on given links (no kvsd asked; 'kvsctl plan --help')\n"
            "  timeline  reads a job's KVS_TIMELINE file (no kvsd asked; 'kvsctl timeline\n"
            "            --help'): plot, each rank's wait for the others per round, as a\n"
            "            table and a PNG, naming the likely straggler; merge, the parts\n"
            "            written by the kvsd of each host, joined into one file\n"
            "Options:\n"
            "  -j, --job JOB    the job (default: $KVS_JOB, else \"default\"); top also takes\n"
            "                   it after the command\n"
            "  -h, --help       this text\n"
            "      --version    kvsctl's version\n"
            "Exit status: 0 on success (top: also when the job ends), 1 when kvsd could not\n"
            "be asked or answered with an error, 2 on a usage error. Every question to kvsd\n"
            "gives up after %lld s.\n",
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

/* What the command line asks. */
struct cmd {
    char job[KVS__JOB_MAX + 1];
    int command;                       /* enum kvs__ctl_command */
    int plan;                          /* the index of a plan or timeline command, or 0 */
    int json;                          /* stats --json: the sample, as JSON */
    int top;                           /* top: samples (command KVS__CTL_SAMPLE) */
    struct top_opts top_o;
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Says what is wrong with the command line; returns 2, the exit status. */
static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("kvsctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'kvsctl --help'.\n", stderr);
    return 2;
}

/* 1 when a is the option -s, --name or --name=VALUE. */
static int is_option(const char *a, const char *s, const char *name)
{
    size_t n = strlen(name);

    return strcmp(a, s) == 0 || (strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '='));
}

/* The value of option arg at argv[*i]: after its '=' (--name=VALUE), or
 * the next argument, then taken. NULL when there is none. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);

    if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (*i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

/* The arguments after the command (stats --json; top's own); 0, or 2 on a
 * usage error, said. *job: a job top names, or left alone. */
static int command_args(int argc, char **argv, int first, struct cmd *c, const char **job)
{
    const char *name = kvs__ctl_command_name(c->command), *v;

    if (c->top)
        name = "top";
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        int is_d = is_option(a, "-d", "--delay"), is_j = is_option(a, "-j", "--job");

        if (c->command == KVS__CTL_STATS && strcmp(a, "--json") == 0) {
            c->json = 1;
        } else if (c->top && strcmp(a, "--once") == 0) {
            c->top_o.once = 1;
        } else if (c->top && (is_d || is_j)) {
            if (!(v = option_value(argc, argv, &i, is_d ? "--delay" : "--job")))
                return usage_error("option '%s' needs a value", a);
            if (is_j) {
                if (*job)
                    return usage_error("top: the job is given twice ('%s' and '%s')", *job, v);
                *job = v;
            } else {
                char *end;
                double sec = strtod(v, &end);

                if (end == v || *end || !(sec >= 0.1 && sec <= 60))
                    return usage_error("top: -d '%s': not a number of seconds from 0.1 to 60",
                                       v);
                c->top_o.interval_ns = (int64_t)(sec * SEC_NS);
            }
        } else if (c->top && a[0] != '-' && !*job) {
            *job = a;
        } else if (a[0] == '-' && a[1]) {
            return usage_error("%s: unknown option '%s'", name, a);
        } else if (c->top) {
            return usage_error("top: one job at a time; '%s' is one too many", a);
        } else {
            return usage_error("one command at a time; '%s' is one too many", a);
        }
    }
    return 0;
}

/* Returns -1 to go on, else the exit status (0 after --help/--version, 2
 * on a usage error, with the message written). */
static int parse_options(int argc, char **argv, struct cmd *c)
{
    enum { OPT_VERSION = 256 };
    static const struct option longs[] = {
        { "job", required_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, OPT_VERSION },
        { NULL, 0, NULL, 0 },
    };
    static const char *const commands = "status, keys, stats, top, stop, plan or timeline";
    struct kvs__err e = { 0, "" };
    const char *name = NULL, *from = "-j", *cjob = NULL;
    int opt, rc;

    opterr = 0;                        /* our messages carry "kvsctl: ", not argv[0] */
    while ((opt = getopt_long(argc, argv, "+:j:h", longs, NULL)) != -1) {
        switch (opt) {
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
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            if (optopt > 0 && optopt < 256)
                return usage_error("unknown option '-%c'", optopt);
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("no command (%s)", commands);
    if (strcmp(argv[optind], "plan") == 0 || strcmp(argv[optind], "timeline") == 0) {
        c->plan = optind;
        return -1;
    }
    c->command = 0;
    if (strcmp(argv[optind], "top") == 0) {
        c->top = 1;
        c->command = KVS__CTL_SAMPLE;
        c->top_o.interval_ns = TOP_INTERVAL_NS;
    }
    for (int k = KVS__CTL_STATUS; k <= KVS__CTL_STOP; k++)
        if (strcmp(argv[optind], kvs__ctl_command_name(k)) == 0)
            c->command = k;
    if (c->command == 0)
        return usage_error("unknown command '%s' (%s)", argv[optind], commands);
    if ((rc = command_args(argc, argv, optind + 1, c, &cjob)) != 0)
        return rc;
    if (cjob && name)
        return usage_error("top: the job is given twice ('%s' and '%s')", name, cjob);
    if (cjob) {
        name = cjob;
        from = "top";
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
    if (c->json || c->top)
        c->command = KVS__CTL_SAMPLE;
    snprintf(c->job, sizeof c->job, "%s", name);
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

/* Where a question went: the socket, as it was when asked (stop waits
 * for it to go). */
struct where {
    char path[PATH_MAX + 80];
    struct stat was;
};

static int say(char *msg, size_t size, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int say(char *msg, size_t size, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return rc;
}

static int ask(const char *job, int command, struct kvs__ctl_reply *reply, struct where *at,
               char *msg, size_t size)
{
    static unsigned char buf[KVS__CTL_REPLY_MAX];
    char dir[PATH_MAX];
    struct kvs__ctl_request q = { .version = KVS__PROTO_VERSION };
    struct kvs__err e = { 0, "" };
    int64_t deadline = kvs__now_ns() + DEADLINE_NS;
    int fd = -1, nfds = 0, rc, status = ASK_FAILED;
    size_t len;
    uid_t uid;

    if (kvs__runtime_dir(dir, sizeof dir, &e) != 0)
        return say(msg, size, ASK_FAILED, "%s", e.msg);
    snprintf(at->path, sizeof at->path, "%s/%s.sock", dir, job);
    rc = lstat(at->path, &at->was) != 0 ? -errno : connect_by(at->path, deadline, &fd);
    if (rc == -ENOENT || rc == -ECONNREFUSED)
        return say(msg, size, ASK_GONE, "no kvsd serves job '%s' (%s)", job, at->path);
    if (rc == -ETIMEDOUT)
        return say(msg, size, ASK_FAILED, "the kvsd of job '%s' accepted no connection within "
                   "%lld s", job, DEADLINE_NS / SEC_NS);
    if (rc != 0)
        return say(msg, size, ASK_FAILED, "cannot connect to %s: %s", at->path, strerror(-rc));
    /* The directory is this user's alone (kvs__runtime_dir checks it);
     * this only makes sure of the one we talk to. */
    if (kvs__sock_peer(fd, &uid, NULL, &e) != 0 || uid != geteuid()) {
        say(msg, size, 0, "%s is served by another user's process; not asking it", at->path);
        goto out;
    }

    q.command = (uint8_t)command;
    snprintf(q.job, sizeof q.job, "%s", job);
    len = kvs__ctl_request_encode(&q, buf);
    if ((rc = kvs__sock_send(fd, buf, len, NULL, 0, deadline, &e)) == 0)
        rc = kvs__sock_recv(fd, buf, sizeof buf, &len, NULL, 0, &nfds, deadline, &e);
    if (rc == -ECONNRESET || rc == -EPIPE) {
        say(msg, size, 0, "the kvsd of job '%s' closed the connection without an answer (it "
            "may be stopping)", job);
        status = ASK_GONE;
        goto out;
    }
    if (rc == -ETIMEDOUT) {
        say(msg, size, 0, "no answer from the kvsd of job '%s' within %lld s", job,
            DEADLINE_NS / SEC_NS);
        goto out;
    }
    if (rc != 0) {
        say(msg, size, 0, "job '%s': %s", job, e.msg);
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
            say(msg, size, 0, "the kvsd of job '%s' takes no control requests: %s", job, safe);
            goto out;
        }
    }
    if (kvs__ctl_reply_decode(buf, len, reply, &e) != 0) {
        say(msg, size, 0, "a bad answer from the kvsd of job '%s': %s", job, e.msg);
        goto out;
    }
    if (reply->status != 0) {
        say(msg, size, 0, "the kvsd of job '%s' refused: %.*s (%s)", job, text_line_len(reply),
            reply->text, kvs_err_name(reply->status));
        goto out;
    }
    status = ASK_OK;
out:
    close(fd);
    return status;
}

int ctl_ask(const char *job, int command, struct kvs__ctl_reply *reply, char *msg, size_t size)
{
    struct where at;

    return ask(job, command, reply, &at, msg, size);
}

/* stats --json: the sample, checked, as JSON. */
static int print_json(const char *job, const struct kvs__ctl_reply *r)
{
    struct sample smp;
    char why[256];
    int rc;

    if (sample_parse(r->text, r->len, &smp, why, sizeof why) != 0) {
        fprintf(stderr, "kvsctl: a bad sample from the kvsd of job '%s': %s\n", job, why);
        return 1;
    }
    rc = sample_json(stdout, job, &smp);
    sample_free(&smp);
    if (rc != 0) {
        fprintf(stderr, "kvsctl: cannot write the answer: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static struct kvs__ctl_reply reply;
    struct cmd c = { .command = 0 };
    struct where at;
    char msg[PATH_MAX + 512];
    int rc;

    if ((rc = parse_options(argc, argv, &c)) >= 0)
        return rc;
    if (c.plan && strcmp(argv[c.plan], "plan") == 0)
        return plan_main(argc - c.plan, argv + c.plan);
    if (c.plan)
        return timeline_main(argc - c.plan, argv + c.plan);
    if (c.top)
        return top_main(c.job, &c.top_o);
    if (ask(c.job, c.command, &reply, &at, msg, sizeof msg) != ASK_OK) {
        fprintf(stderr, "kvsctl: %s\n", msg);
        return 1;
    }
    if (c.json)
        return print_json(c.job, &reply);
    if (print_text(&reply) != 0)
        return 1;
    if (c.command == KVS__CTL_STOP) {
        int64_t deadline = kvs__now_ns() + DEADLINE_NS;

        /* kvsd has answered and is on its way out: it removes its
         * socket as it ends, once the workers' requests are failed. */
        while (same_socket(at.path, &at.was) && kvs__now_ns() < deadline)
            nap(deadline);
        if (same_socket(at.path, &at.was)) {
            fprintf(stderr, "kvsctl: the kvsd of job '%s' said it was stopping, but is still "
                    "there after %lld s\n", c.job, DEADLINE_NS / SEC_NS);
            return 1;
        }
    }
    return 0;
}
