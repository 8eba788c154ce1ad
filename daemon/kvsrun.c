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
 * kvsrun never speaks kvsd's protocol (its probe connects and closes),
 * never runs a job whose name another kvsrun holds (the job's .run file,
 * locked while kvsrun runs), never stops or cleans up after a kvsd it did
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
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvs.h"
#include "layout.h"
#include "proto.h"
#include "ring.h"
#include "shm.h"
#include "spec.h"
#include "sys.h"
#include "trace.h"

#define MAX_WORKERS    1024
#define SEC_NS         1000000000ll
#define KVSD_START_NS  (10 * SEC_NS)   /* kvsd's socket must accept by then */
#define KVSD_LEAVE_NS  (3 * SEC_NS)    /* kvsd's own exit after a job that succeeded */
#define KILL_AFTER_NS  (2 * SEC_NS)    /* from SIGTERM to SIGKILL */
#define GONE_NS        (5 * SEC_NS)    /* from SIGKILL to giving up on a process */
#define EXEC_NS        (10 * SEC_NS)   /* fork to exec, as the error pipe tells */
#define SLICE_MS       100             /* longest sleep between looks at children */
#define PROBE_MS       20              /* between probes of a starting kvsd */
#define JOIN_NS        (60 * SEC_NS)   /* every host of a job must have joined by then */
#define HOSTS_LEAVE_NS (3600 * SEC_NS) /* kvsd's exit after this host's workers, across
                                        * hosts: it stays while the others still push */
#define COORD_PORT     "47470"         /* the coordinator's port when none is named */


struct options {
    int nworkers;
    char job[KVS__JOB_MAX + 1];
    int job_picked;                    /* no -j: kvsrun made the name up */
    int64_t grace_ns;
    const char *kvsd;                  /* NULL: look for it */
    const char *timeout;               /* NULL: KVS_TIMEOUT is left as it is */
    const char *staging;               /* NULL: kvsd's default */
    const char *arena;                 /* NULL: kvsd's default */
    char **argv;                       /* the workers' program and its arguments */
    /* across hosts: nodes 1 is one host */
    int nodes, node_rank;
    char coord[300];
    const char *bind, *secret_file;
    char net_job[KVS__JOB_MAX + 1];    /* the job's name; job is then net_job.hR */
};

struct worker {
    pid_t pid;                         /* also its process group; 0: not started */
    int done;                          /* reaped */
};

struct run {
    struct options o;
    char dir[PATH_MAX];
    char sock_path[PATH_MAX + 80], lock_path[PATH_MAX + 80], run_path[PATH_MAX + 80];
    int run_fd;                        /* run_path, locked: this kvsrun runs the job */
    sigset_t stop_set;                 /* the signals passed on to the workers */
    sigset_t old_mask;                 /* restored in every child */
    int sfd;                           /* signalfd: stop signals and SIGCHLD */
    pid_t kvsd;                        /* the kvsd this kvsrun started, or 0 */
    int kvsd_done, kvsd_status;
    int kvsd_told;                     /* its ending has been reported */
    struct worker *w;
    int nstarted, nlive;
    int first_status;                  /* first failure as an exit code; -1 none */
    int stopping;                      /* a failure or a signal: the job ends */
    int64_t term_at, kill_at, give_up_at; /* 0: not (yet) due */
    int rank0, total;                  /* this host's first global rank, the job's workers */
    time_t started;                    /* kvsrun's start: a timeline older is not this job's */
};

static int64_t ms_to(int64_t deadline_ns)
{
    int64_t left = deadline_ns - kvs__now_ns();

    if (left <= 0)
        return 0;
    return left / 1000000 + 1;
}

/* ---- options ---------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvsrun -n N [options] [--] PROGRAM [ARGS...]\n"
            "Runs N workers of one dist_sync/dist_async job, with a kvsd to serve them.\n"
            "  -n, --workers N          number of workers, 1..1024 (required)\n"
            "  -j, --job NAME           the job's name (default: run-PID of kvsrun)\n"
            "      --grace SECONDS      when a worker fails, the time the others get to\n"
            "                           exit on their own before SIGTERM (default 5)\n"
            "      --kvsd PATH          the kvsd to start (default: $KVSD, else the kvsd\n"
            "                           beside kvsrun, else kvsd from PATH)\n"
            "      --timeout SECONDS    exported to the workers as KVS_TIMEOUT\n"
            "      --staging BYTES      kvsd's staging area per worker, e.g. 1G: room for\n"
            "                           zero-copy buffers and copies (kvsd's default 256M)\n"
            "      --arena BYTES        room for the job's stored values, at least 1M\n"
            "                           (kvsd's default: the machine's memory and swap,\n"
            "                           at least 4G; sparse)\n"
            "      --timeline FILE      records every operation of the job into FILE, a\n"
            "                           trace for Perfetto (sets KVS_TIMELINE; across\n"
            "                           hosts, host H writes FILE.hostH)\n"
            "Across hosts (one kvsrun per host, each with its own N):\n"
            "      --nodes H            the job's hosts (default: $KVS_NODES, Slurm's\n"
            "                           SLURM_NNODES, Open MPI's OMPI_COMM_WORLD_SIZE, or 1)\n"
            "      --node-rank R        this host's rank (KVS_NODE_RANK, SLURM_NODEID,\n"
            "                           OMPI_COMM_WORLD_RANK); host 0's workers rank first\n"
            "      --coord HOST:PORT    where host 0 listens (KVS_COORD; under Slurm the\n"
            "                           first host of SLURM_JOB_NODELIST, on the port\n"
            "                           KVS_COORD=:PORT gives, else " COORD_PORT ")\n"
            "      --bind ADDR          the numeric address this host listens on\n"
            "      --secret-file FILE   the job's secret, mode 0600 (KVS_SECRET_FILE);\n"
            "                           without one the hosts link over loopback only\n"
            "  -h, --help               this text\n"
            "      --version            kvsrun's version\n"
            "Exit status: that of the first worker to fail (128+S when signal S killed it),\n"
            "0 when every worker succeeded, 1 when kvsrun failed, 2 on a usage error.\n");
}

/* Seconds with fractions, in [lo, hi], read as the library reads
 * KVS_TIMEOUT (decimal only: strtod alone would take "0x10", " 5", "inf"
 * and "nan" too), so that kvsrun never passes on a value the workers'
 * kvs_create then refuses. */
static int parse_seconds(const char *s, double lo, double hi, double *out)
{
    double v;

    if (kvs__spec_double(s, strlen(s), &v) != 0 || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* The first host of a Slurm node list: "gpu[07-09,12],cpu1" is gpu07. */
static void slurm_first_host(const char *list, char *out, size_t size)
{
    size_t n = strcspn(list, ",[");

    if (n >= size)
        n = size - 1;
    memcpy(out, list, n);
    out[n] = '\0';
    if (list[n] == '[') {
        size_t m = strcspn(list + n + 1, ",-]");

        if (n + m >= size)
            m = size - 1 - n;
        memcpy(out + n, list + n + 1, m);
        out[n + m] = '\0';
    }
}

/* The hosts of the job: options first, then KVS_*, then Slurm's, then
 * Open MPI's variables (a launcher's rank and size count hosts: one kvsrun
 * per host). -1 to go on, else the exit status (said). */
static int hosts_options(struct options *o)
{
    static const char *const vars[][2] = {
        { "KVS_NODES", "KVS_NODE_RANK" },
        { "SLURM_NNODES", "SLURM_NODEID" },
        { "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK" },
    };
    const int nvars = (int)(sizeof vars / sizeof vars[0]);
    const char *coord = getenv("KVS_COORD");
    /* Under Slurm KVS_COORD may give the port alone (":PORT" or "PORT"). */
    int port_only = coord && *coord
                    && (coord[0] == ':' || strspn(coord, "0123456789") == strlen(coord));
    struct kvs__err e = { 0, "" };
    int from = -1;

    if (!o->secret_file && getenv("KVS_SECRET_FILE") && *getenv("KVS_SECRET_FILE"))
        o->secret_file = getenv("KVS_SECRET_FILE");
    for (int i = 0; i < nvars && (o->nodes < 0 || o->node_rank < 0); i++) {
        int n = -1, r = -1, hn, hr;

        if ((hn = kvs__env_int(vars[i][0], 1, 4096, &n, &e)) < 0
            || (hr = kvs__env_int(vars[i][1], 0, 4095, &r, &e)) < 0) {
            fprintf(stderr, "kvsrun: %s\n", e.msg);
            return 2;
        }
        if (!hn && !hr)
            continue;
        if (o->nodes < 0 && hn)
            o->nodes = n;
        if (o->node_rank < 0 && hr)
            o->node_rank = r;
        from = i;
    }
    if (o->nodes < 0)
        o->nodes = 1;
    if (o->nodes == 1)
        return -1;
    if (o->node_rank < 0 || o->node_rank >= o->nodes) {
        fprintf(stderr, "kvsrun: a job of %d hosts needs this host's rank in 0..%d "
                "(--node-rank, KVS_NODE_RANK)\n", o->nodes, o->nodes - 1);
        return 2;
    }
    if (!o->coord[0] && coord && *coord && !port_only)
        snprintf(o->coord, sizeof o->coord, "%s", coord);
    if (!o->coord[0] && from == 1 && getenv("SLURM_JOB_NODELIST")) {
        char host[256];
        const char *port = port_only ? coord + (coord[0] == ':') : COORD_PORT;

        slurm_first_host(getenv("SLURM_JOB_NODELIST"), host, sizeof host);
        snprintf(o->coord, sizeof o->coord, "%s:%s", host, port);
    }
    if (!o->coord[0]) {
        fprintf(stderr, "kvsrun: a job of %d hosts needs host 0's address (--coord HOST:PORT, "
                "KVS_COORD)\n", o->nodes);
        return 2;
    }
    return -1;
}

/* Returns -1 to go on, else the exit status (0 after --help/--version,
 * 2 on a usage error, with the message already written). */
static int parse_options(struct options *o, int argc, char **argv)
{
    enum { OPT_GRACE = 256, OPT_KVSD, OPT_TIMEOUT, OPT_STAGING, OPT_ARENA, OPT_VERSION,
           OPT_NODES, OPT_NODE_RANK, OPT_COORD, OPT_BIND, OPT_SECRET, OPT_TIMELINE };
    static const struct option longs[] = {
        { "workers", required_argument, NULL, 'n' },
        { "job", required_argument, NULL, 'j' },
        { "grace", required_argument, NULL, OPT_GRACE },
        { "kvsd", required_argument, NULL, OPT_KVSD },
        { "timeout", required_argument, NULL, OPT_TIMEOUT },
        { "staging", required_argument, NULL, OPT_STAGING },
        { "arena", required_argument, NULL, OPT_ARENA },
        { "timeline", required_argument, NULL, OPT_TIMELINE },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, OPT_VERSION },
        { "nodes", required_argument, NULL, OPT_NODES },
        { "node-rank", required_argument, NULL, OPT_NODE_RANK },
        { "coord", required_argument, NULL, OPT_COORD },
        { "bind", required_argument, NULL, OPT_BIND },
        { "secret-file", required_argument, NULL, OPT_SECRET },
        { NULL, 0, NULL, 0 },
    };
    struct kvs__err e = { 0, "" };
    int c;

    o->nodes = o->node_rank = -1;

    o->grace_ns = 5 * SEC_NS;
    opterr = 0;                        /* our messages carry "kvsrun: ", not argv[0] */
    /* '+': options end at PROGRAM, whose own options are its business;
     * ':': a missing value is told apart from an unknown option. */
    while ((c = getopt_long(argc, argv, "+:n:j:h", longs, NULL)) != -1) {
        char *end;
        long v;
        double secs;

        switch (c) {
        case 'n':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (end == optarg || *end || errno || v < 1 || v > MAX_WORKERS) {
                fprintf(stderr, "kvsrun: --workers '%s' is not a number in 1..%d\n", optarg,
                        MAX_WORKERS);
                return 2;
            }
            o->nworkers = (int)v;
            break;
        case 'j':
            if (kvs__job_name_check(optarg, &e) != 0) {
                fprintf(stderr, "kvsrun: %s\n", e.msg);
                return 2;
            }
            snprintf(o->job, sizeof o->job, "%s", optarg);
            break;
        case OPT_GRACE:
            if (parse_seconds(optarg, 0, 86400.0, &secs) != 0) {
                fprintf(stderr, "kvsrun: --grace '%s' is not a number of seconds in "
                        "0..86400\n", optarg);
                return 2;
            }
            o->grace_ns = (int64_t)(secs * (double)SEC_NS);
            break;
        case OPT_TIMELINE:
            /* kvsd and the workers inherit it, and each takes it from the
             * same working directory. */
            if (!*optarg || setenv("KVS_TIMELINE", optarg, 1) != 0) {
                fprintf(stderr, "kvsrun: --timeline needs a file's path\n");
                return 2;
            }
            break;
        case OPT_KVSD:
            if (!*optarg) {
                fprintf(stderr, "kvsrun: --kvsd needs a path\n");
                return 2;
            }
            o->kvsd = optarg;
            break;
        case OPT_TIMEOUT:
            /* The library's rule for KVS_TIMEOUT: anything else would make
             * every worker's kvs_create fail. */
            if (parse_seconds(optarg, 0, 86400.0 * 365, &secs) != 0 || !(secs > 0)) {
                fprintf(stderr, "kvsrun: --timeout '%s' is not a number of seconds above 0 "
                        "(at most a year)\n", optarg);
                return 2;
            }
            o->timeout = optarg;
            break;
        case OPT_STAGING:
        case OPT_ARENA: {
            uint64_t bytes;

            /* kvsd's own rule, checked here so that a typo is a usage error
             * of kvsrun, not a kvsd that fails to start. */
            if (kvs__parse_bytes(optarg, &bytes) != 0) {
                fprintf(stderr, "kvsrun: --%s '%s' is not a size in bytes (with K, M "
                        "or G), above 0 and at most 1T\n",
                        c == OPT_STAGING ? "staging" : "arena", optarg);
                return 2;
            }
            if (c == OPT_ARENA && bytes < KVS__ARENA_MIN) {
                fprintf(stderr, "kvsrun: --arena '%s' is below the arena's minimum of 1M\n",
                        optarg);
                return 2;
            }
            *(c == OPT_STAGING ? &o->staging : &o->arena) = optarg;
            break;
        }
        case OPT_NODES:
        case OPT_NODE_RANK:
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (end == optarg || *end || errno || v < (c == OPT_NODES) || v > 4096) {
                fprintf(stderr, "kvsrun: --%s '%s' is not a number in %d..4096\n",
                        c == OPT_NODES ? "nodes" : "node-rank", optarg, c == OPT_NODES);
                return 2;
            }
            *(c == OPT_NODES ? &o->nodes : &o->node_rank) = (int)v;
            break;
        case OPT_COORD:
            snprintf(o->coord, sizeof o->coord, "%s", optarg);
            break;
        case OPT_BIND:
            o->bind = optarg;
            break;
        case OPT_SECRET:
            o->secret_file = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("kvsrun (%s)\n", kvs_version(NULL, NULL, NULL));
            return 0;
        case ':':
            fprintf(stderr, "kvsrun: option '%s' needs a value\n", argv[optind - 1]);
            fprintf(stderr, "Try 'kvsrun --help'.\n");
            return 2;
        default:
            if (optopt > 0 && optopt < 256)
                fprintf(stderr, "kvsrun: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "kvsrun: unknown option '%s'\n", argv[optind - 1]);
            fprintf(stderr, "Try 'kvsrun --help'.\n");
            return 2;
        }
    }
    if (o->nworkers == 0) {
        fprintf(stderr, "kvsrun: -n N is required\nTry 'kvsrun --help'.\n");
        return 2;
    }
    if (optind >= argc) {
        fprintf(stderr, "kvsrun: no program to run\nTry 'kvsrun --help'.\n");
        return 2;
    }
    o->argv = argv + optind;
    if ((c = hosts_options(o)) >= 0)
        return c;
    if (!o->job[0] && o->nodes > 1) {
        fprintf(stderr, "kvsrun: a job across hosts needs its name (-j), the same on every "
                "host\n");
        return 2;
    }
    if (!o->job[0]) {
        snprintf(o->job, sizeof o->job, "run-%ld", (long)getpid());
        o->job_picked = 1;
    }
    snprintf(o->net_job, sizeof o->net_job, "%s", o->job);
    if (o->nodes > 1) {
        char local[2 * KVS__JOB_MAX];

        snprintf(local, sizeof local, "%s.h%d", o->net_job, o->node_rank);
        if (kvs__job_name_check(local, &e) != 0) {
            fprintf(stderr, "kvsrun: this host's part of job '%s' is named '%s': %s\n",
                    o->net_job, local, e.msg);
            return 2;
        }
        memcpy(o->job, local, strlen(local) + 1);  /* checked: at most KVS__JOB_MAX */
    }
    return -1;
}

/* ---- children ---------------------------------------------------------- */

static void describe(char *buf, size_t size, int status)
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
static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}

/* Sends sig to every started worker's process group that may still have
 * members; reaped leaders' groups are the sweep's business. */
static void signal_workers(struct run *r, int sig)
{
    for (int i = 0; i < r->nstarted; i++)
        if (!r->w[i].done)
            kill(-r->w[i].pid, sig);
}

/* The job is ending: the live workers get until term_at, then SIGTERM.
 * Only the first reason counts: a later one must not put SIGTERM off. */
static void begin_stop(struct run *r, int64_t term_at)
{
    if (r->stopping)
        return;
    r->stopping = 1;
    r->term_at = term_at;
}

/* Collects every child that has ended: workers, the kvsd, and orphans of
 * the workers, which come to kvsrun because it is their subreaper. */
static void reap(struct run *r)
{
    char what[128];
    pid_t p;
    int st;

    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        if (r->kvsd && p == r->kvsd) {
            r->kvsd_done = 1;
            r->kvsd_status = st;
            /* Its normal end is the workers' leaving; anything else, while
             * workers still run, is the reason they are about to fail. */
            if (r->nlive > 0 && (!WIFEXITED(st) || WEXITSTATUS(st) != 0)) {
                describe(what, sizeof what, st);
                fprintf(stderr, "kvsrun: kvsd (pid %ld) %s while the job ran\n", (long)p,
                        what);
                r->kvsd_told = 1;
            }
            continue;
        }
        for (int i = 0; i < r->nstarted; i++) {
            if (r->w[i].pid != p || r->w[i].done)
                continue;
            r->w[i].done = 1;
            r->nlive--;
            if (exit_code(st) != 0 && r->first_status < 0) {
                char grace[32];

                r->first_status = exit_code(st);
                describe(what, sizeof what, st);
                /* The grace as given: 1000, not %.3g's 1e+03. */
                kvs__spec_format_double(grace, sizeof grace, (double)r->o.grace_ns / SEC_NS);
                if (r->nlive > 0 && !r->stopping)
                    fprintf(stderr, "kvsrun: rank %d (pid %ld) %s; the other workers get "
                            "%s s to exit\n", i, (long)p, what, grace);
                else
                    fprintf(stderr, "kvsrun: rank %d (pid %ld) %s\n", i, (long)p, what);
                begin_stop(r, kvs__now_ns() + r->o.grace_ns);
            }
            break;
        }
    }
}

/* Reads every pending signal. A stop signal goes on to the workers' groups
 * at once (the workers are not in kvsrun's group, so a terminal's ^C
 * reaches them only this way). Returns the last stop signal read, 0 when
 * none came. */
static int take_signals(struct run *r)
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
    return last;
}

/* Sleeps until a signal comes or deadline_ns passes, SLICE_MS at most. */
static void wait_slice(struct run *r, int64_t deadline_ns)
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
static int spawn(struct run *r, char *const argv[], int rank, pid_t *pid)
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
        char num[16];

        close(ep[0]);
        setpgid(0, 0);
        /* Should kvsrun itself be killed (SIGKILL leaves it no say), its
         * children must not run on without it: kvsd then cleans up, and
         * the workers end. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        if (rank >= 0) {
            snprintf(num, sizeof num, "%d", r->rank0 + rank);
            if (setenv("KVS_RANK", num, 1) != 0)
                goto child_fail;
            snprintf(num, sizeof num, "%d", r->total);
            if (setenv("KVS_NUM_WORKERS", num, 1) != 0 || setenv("KVS_JOB", r->o.job, 1) != 0)
                goto child_fail;
            if (r->o.timeout && setenv("KVS_TIMEOUT", r->o.timeout, 1) != 0)
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

/* ---- kvsd --------------------------------------------------------------- */

/* 1 when a kvsd listens at the socket: the connection was queued, or its
 * backlog is full (EAGAIN, which only a live listener gives); 0 when
 * nobody does. Non-blocking, so a kvsd that does not accept cannot hold
 * kvsrun up; the connection is closed at once, which kvsd takes as a
 * client that left before its hello. *pid (may be NULL): the listener's
 * process when the connection was queued, else 0. */
static int probe(const char *path, pid_t *pid)
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

/* Takes the job's name for this kvsrun: NAME.run in the runtime
 * directory, locked for as long as kvsrun runs, holding its pid. Two
 * kvsruns under one name would send both jobs' workers to one kvsd, where
 * the second's are refused or, worse, join the first job; so the second
 * is refused here, before it starts anything, and told who has the name.
 * A kvsd started by hand holds no such file, and kvsrun serves its job as
 * before. Returns 0, else kvsrun's exit status (the message written). */
static int claim_job(struct run *r)
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
static void release_job(struct run *r)
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

static int executable(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* A kvsd in directory dir, into buf: installed there, or in the build tree
 * in its own folder (dir/kvsd/kvsd). 1 when found. */
static int beside(const char *dir, char *buf, size_t size)
{
    snprintf(buf, size, "%s/kvsd", dir);
    if (executable(buf))
        return 1;
    snprintf(buf, size, "%s/kvsd/kvsd", dir);
    return executable(buf);
}

/* The kvsd to start: --kvsd, $KVSD, the kvsd beside kvsrun's executable,
 * else "kvsd" for execvp to find in PATH. An uninstalled libtool build
 * runs the real program from .libs/ behind a wrapper script one level up,
 * and kvsd's may be at either place. */
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
            if (beside(exe, buf, size))
                return buf;
            slash = strrchr(exe, '/');
            if (slash && strcmp(slash + 1, ".libs") == 0) {
                *slash = '\0';
                if (beside(exe, buf, size))
                    return buf;
            }
        }
    }
    return "kvsd";
}

static int wait_kvsd(struct run *r, int64_t deadline_ns, int cut_short);

/* Reads kvsd's "RANK0 TOTAL" line from fd (non-blocking) into r: 1 once
 * whole, 0 not yet, -1 when kvsd closed the pipe without it. */
static int read_ready(struct run *r, int fd, char *buf, size_t *got, size_t size)
{
    ssize_t n = read(fd, buf + *got, size - 1 - *got);

    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0)
        return -1;
    *got += (size_t)n;
    buf[*got] = '\0';
    if (!strchr(buf, '\n'))
        return *got + 1 < size ? 0 : -1;
    if (sscanf(buf, "%d %d", &r->rank0, &r->total) != 2 || r->rank0 < 0 || r->total < 1
        || r->total > MAX_WORKERS || r->rank0 + r->o.nworkers > r->total)
        return -1;
    return 1;
}

/* Starts kvsd for the job and waits until its socket accepts, or, across
 * hosts, until it says every host has joined. Returns 0, else kvsrun's
 * exit status (the message written). */
static int start_kvsd(struct run *r)
{
    char buf[PATH_MAX + 16], num[16], what[128], nodes[16], rank[16], rfd[16], line[64];
    const char *path = find_kvsd(r, buf, sizeof buf);
    char *argv[24] = { (char *)path, "--job", r->o.net_job, "-n", num, "-q" };
    int argc = 6, pipefd[2] = { -1, -1 }, ready = 0;
    size_t got = 0;
    int64_t wait_ns = KVSD_START_NS + (r->o.nodes > 1 ? JOIN_NS : 0), deadline;
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
    deadline = kvs__now_ns() + wait_ns;
    for (;;) {
        if (pipefd[0] >= 0 ? (ready = read_ready(r, pipefd[0], line, &got, sizeof line)) > 0
                           : probe(r->sock_path, NULL)) {
            if (pipefd[0] >= 0)
                close(pipefd[0]);
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

/* kvsd removes its socket and lock itself when it ends cleanly; after a
 * SIGKILL or a crash they stay. They are removed only under the job's
 * lock: should another kvsd have taken the job meanwhile, its files are
 * not kvsrun's to touch. */
static void remove_job_files(struct run *r)
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

/* Ends the kvsd kvsrun started: its own exit first when the job succeeded
 * (it leaves once every worker has), else SIGTERM at once, SIGKILL 2 s
 * later. Returns 0, or 1 when it could not be ended. */
/* Once the kvsd kvsrun started has ended: where the job's timeline is
 * (KVS_TIMELINE, --timeline), which that kvsd wrote as it ended. */
static void say_timeline(const struct run *r)
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

static int stop_kvsd(struct run *r, int wait_first)
{
    char what[128];

    if (!r->kvsd)
        return 0;
    if (!r->kvsd_done && wait_first)
        wait_kvsd(r, kvs__now_ns() + (r->o.nodes > 1 ? HOSTS_LEAVE_NS : KVSD_LEAVE_NS), 1);
    if (!r->kvsd_done) {
        kill(-r->kvsd, SIGTERM);
        wait_kvsd(r, kvs__now_ns() + KILL_AFTER_NS, 0);
    }
    if (!r->kvsd_done) {
        fprintf(stderr, "kvsrun: kvsd (pid %ld) ignored SIGTERM; killing it\n", (long)r->kvsd);
        kill(-r->kvsd, SIGKILL);
        wait_kvsd(r, kvs__now_ns() + GONE_NS, 0);
    }
    if (!r->kvsd_done) {
        fprintf(stderr, "kvsrun: kvsd (pid %ld) did not end after SIGKILL; %s is left\n",
                (long)r->kvsd, r->sock_path);
        return 1;
    }
    /* A SIGKILL of kvsrun's own has been reported above. */
    if (!r->kvsd_told && exit_code(r->kvsd_status) != 0
        && !(WIFSIGNALED(r->kvsd_status) && WTERMSIG(r->kvsd_status) == SIGKILL)) {
        describe(what, sizeof what, r->kvsd_status);
        fprintf(stderr, "kvsrun: kvsd (pid %ld) %s\n", (long)r->kvsd, what);
    }
    remove_job_files(r);
    return 0;
}

/* ---- workers ------------------------------------------------------------ */

/* Returns 0 when every worker was started, else kvsrun's exit status (the
 * message written): 126/127 when the program cannot be run, as a shell
 * says, 1 when fork failed. Workers already started are then stopped by
 * the caller. */
static int start_workers(struct run *r)
{
    for (int i = 0; i < r->o.nworkers; i++) {
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
        r->nstarted++;
        r->nlive++;
    }
    return 0;
}

/* Runs until every started worker is reaped: stop signals are passed on,
 * a failure or a signal starts the stop (grace, SIGTERM, SIGKILL 2 s
 * later). Returns 0, or 1 when some worker outlived SIGKILL. */
static int supervise(struct run *r)
{
    for (;;) {
        int64_t now, next;

        if (take_signals(r) && !r->stopping)
            begin_stop(r, kvs__now_ns() + r->o.grace_ns);
        reap(r);
        if (r->nlive == 0)
            return 0;
        now = kvs__now_ns();
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
        if (r->term_at && r->term_at < next)
            next = r->term_at;
        if (r->kill_at && r->kill_at < next)
            next = r->kill_at;
        wait_slice(r, next);
    }
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
static void sweep(struct run *r)
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

/* ---- main --------------------------------------------------------------- */

/* The stop signals kvsrun takes over; one ignored when kvsrun started (a
 * background command of a script ignores SIGINT) stays ignored. */
static int setup_signals(struct run *r)
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

int main(int argc, char **argv)
{
    static struct run r;
    struct kvs__err e = { 0, "" };
    struct sockaddr_un a;
    int rc, status = 1, job_failed = 1;

    r.first_status = -1;
    r.sfd = -1;
    r.run_fd = -1;
    if ((rc = parse_options(&r.o, argc, argv)) >= 0)
        return rc;
    if (kvs__runtime_dir(r.dir, sizeof r.dir, &e) != 0) {
        fprintf(stderr, "kvsrun: %s\n", e.msg);
        return 1;
    }
    snprintf(r.sock_path, sizeof r.sock_path, "%s/%s.sock", r.dir, r.o.job);
    snprintf(r.lock_path, sizeof r.lock_path, "%s/%s.lock", r.dir, r.o.job);
    snprintf(r.run_path, sizeof r.run_path, "%s/%s.run", r.dir, r.o.job);
    if (strlen(r.sock_path) >= sizeof a.sun_path) {
        fprintf(stderr, "kvsrun: socket path %s is longer than a Unix socket's %zu bytes\n",
                r.sock_path, sizeof a.sun_path - 1);
        return 1;
    }
    r.w = calloc((size_t)r.o.nworkers, sizeof *r.w);
    if (!r.w) {
        fprintf(stderr, "kvsrun: out of memory\n");
        return 1;
    }
    if ((rc = setup_signals(&r)) != 0) {
        fprintf(stderr, "kvsrun: cannot take over signals: %s\n", strerror(-rc));
        goto out_free;
    }
    /* Orphans of the workers come to kvsrun rather than to init, so that
     * they are reaped here and their groups empty while kvsrun watches. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    r.started = time(NULL);
    if ((rc = claim_job(&r)) != 0) {
        status = rc;
        goto out_kvsd;
    }
    /* A name kvsrun made up is said, so that kvsctl -j can find the job. */
    if (r.o.job_picked)
        fprintf(stderr, "kvsrun: job %s (kvsctl -j %s status)\n", r.o.job, r.o.job);
    r.total = r.o.nworkers;
    if (r.o.nodes > 1 && probe(r.sock_path, NULL)) {
        fprintf(stderr, "kvsrun: a kvsd already serves %s: across hosts kvsrun starts its "
                "own\n", r.o.job);
        status = 1;
        goto out_kvsd;
    }
    if ((r.o.nodes > 1 || !probe(r.sock_path, NULL)) && (rc = start_kvsd(&r)) != 0) {
        status = rc;
        goto out_kvsd;
    }
    if ((rc = start_workers(&r)) != 0) {
        status = rc;
        begin_stop(&r, kvs__now_ns());
        supervise(&r);
        sweep(&r);
        goto out_kvsd;
    }
    rc = supervise(&r);
    sweep(&r);
    status = r.first_status >= 0 ? r.first_status : rc;
    job_failed = r.stopping || rc != 0;

out_kvsd:
    if (stop_kvsd(&r, !job_failed) != 0 && status == 0)
        status = 1;
    say_timeline(&r);
    release_job(&r);
    close(r.sfd);
    sigprocmask(SIG_SETMASK, &r.old_mask, NULL);
out_free:
    free(r.w);
    return status;
}
