/*
 * kvsd - the host daemon of a dist_sync / dist_async job: it keeps the
 * job's store (the engine, values in a shared arena that workers map
 * read-only) and serves the workers' rings.
 *
 * Two threads. The socket thread accepts workers, runs the handshake
 * (peer uid checked before anything is sent), and watches every worker's
 * socket: a socket that closes without a CLOSE request is a death. The
 * serve thread drains the workers' request rings, runs rounds, barriers and
 * the engine, and posts completions; it sleeps on the daemon's doorbell,
 * which workers and the socket thread ring.
 *
 * kvsctl connects to the same socket and sends a control request instead
 * of a hello. The socket thread checks it and queues the connection; the
 * serve thread, which alone owns the engine and the job's state, writes
 * the answer, sends it with a short deadline and closes the connection.
 * The socket thread never looks at the engine, the rounds or the counters.
 *
 * kvsd trusts nothing a worker wrote: every request slot is decoded and
 * checked (proto/slots.c), ring indices are checked (ring.c); a worker whose ring
 * or request is bad is evicted, and the others go on. Nothing here waits
 * without a deadline.
 *
 * A job across hosts has one kvsd per host: hosts.c links them (a third
 * thread moves their frames) and bridge.c runs what they say to each
 * other; the serve thread takes their messages in its loop.
 *
 * This file is the program: options, set-up and teardown, and the steps
 * from one to the other; serve.c has the serve loop, which drives the rest
 * (requests.c runs the workers' requests, answers.c posts their
 * completions, rounds.c their rounds, collectives.c their inits and
 * barriers, control.c kvsctl's channel, accept.c the socket thread,
 * arena.c the shared segments and the arena, hosts.c and bridge.c the
 * other hosts). daemon.h holds the state; each module's header its calls.
 * It owns the process's signals, the job's lock file and socket, the
 * control and arena segments, the threads, and the order in which the
 * modules' hooks are registered; it must never decode a request, post a
 * completion or answer kvsctl itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "daemon.h"
#include "accept.h"
#include "arena.h"
#include "bridge.h"
#include "collectives.h"
#include "combined.h"
#include "commits.h"
#include "xcommits.h"
#include "hosts.h"
#include "job.h"
#include "req.h"
#include "rounds.h"
#include "serve.h"
#include "states.h"
#include "tracing.h"

#include "shm/shm.h"
#include "base/spec.h"

/* ---- set-up and teardown ---------------------------------------------- */

static int setup(struct daemon *d, struct kvs__err *e)
{
    struct kvs__mem mem = { arena_alloc, arena_free, d };
    int rc;

    if (kvs__worker_layout(d->o.sq_entries, d->o.cq_entries, d->o.staging, &d->wl) != 0)
        return kvs__fail(e, KVS_EBADARG, "staging of %llu bytes is too big",
                         (unsigned long long)d->o.staging);
    if ((rc = kvs__runtime_dir(d->dir, sizeof d->dir, e)) != 0)
        return rc;
    snprintf(d->lock_path, sizeof d->lock_path, "%s/%s.lock", d->dir, d->o.job);
    snprintf(d->sock_path, sizeof d->sock_path, "%s/%s.sock", d->dir, d->o.job);
    d->lock_fd = open(d->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (d->lock_fd < 0)
        return kvs__fail(e, -errno, "%s: %s", d->lock_path, strerror(errno));
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        /* Not ours: teardown must not remove the running kvsd's lock. */
        close(d->lock_fd);
        d->lock_fd = -1;
        return kvs__fail(e, -EBUSY, "another kvsd serves job '%s' (%s is locked)", d->o.job,
                         d->lock_path);
    }
    /* We hold the job's lock: a socket left at the path is a dead kvsd's,
     * and timelines left are an older job's. */
    unlink(d->sock_path);
    if ((rc = trace_setup(d, e)) != 0)
        return rc;
    if ((rc = kvs__sock_listen(d->sock_path, &d->listen_fd, e)) != 0)
        return rc;
    if ((rc = kvs__memfd_new("kvs-control", KVS__CONTROL_SIZE, KVS__SEAL_SIZE, &d->ctl_fd,
                             e)) != 0
        || (rc = kvs__map(d->ctl_fd, KVS__CONTROL_SIZE, 1, &d->ctl, e)) != 0)
        return rc;
    arena_head_init(d->ctl, KVS__SEG_CONTROL, KVS__CONTROL_SIZE);
    d->bell = (struct kvs__bell *)((char *)d->ctl + KVS__CONTROL_BELL_OFF);
    /* Only kvsd's own mapping of the arena may write: workers get a
     * read-only descriptor, and the write seal stops any descriptor of it
     * from making a writable mapping later. */
    if ((rc = kvs__memfd_new("kvs-arena", d->o.arena, KVS__SEAL_SIZE_OPEN, &d->arena_fd,
                             e)) != 0
        || (rc = kvs__map(d->arena_fd, d->o.arena, 1, (void **)&d->arena, e)) != 0
        || (rc = kvs__memfd_seal_writes(d->arena_fd, e)) != 0
        || (rc = kvs__memfd_reopen_ro(d->arena_fd, &d->arena_ro_fd, e)) != 0)
        return rc;
    arena_head_init(d->arena, KVS__SEG_ARENA, d->o.arena);
    d->arena_next = KVS__ARENA_DATA_OFF;
    if ((rc = kvs__engine_new(&mem, &d->eng, e)) != 0)
        return rc;
    kvs__engine_set_threads(d->eng, d->o.threads);
    kvs__engine_set_front_free(d->eng, rounds_free);
    return cb_setup(d, e);
}

static void teardown(struct daemon *d)
{
    /* Control connections queued after the serve loop ended get no answer. */
    pthread_mutex_lock(&d->ctl_lock);
    for (int i = 0; i < d->nctl; i++)
        close(d->ctlq[i].fd);
    d->nctl = 0;
    pthread_mutex_unlock(&d->ctl_lock);
    /* Waiting requests are answered while their workers' rings are still
     * mapped; releasing a worker unmaps them. */
    job_fail_waiting(d, KVS_ECLOSED, "kvsd stopped");
    bridge_free(d);
    for (int i = 0; i < MAX_WORKERS; i++)
        if (d->workers[i].state != W_FREE)
            job_release_worker(d, &d->workers[i]);
    kvs__engine_free(d->eng);
    cb_free(d);
    free(d->coll_tab);
    free(d->host_out);
    req_cache_free(d);
    rounds_cache_free(d);
    if (d->listen_fd >= 0) {
        close(d->listen_fd);
        unlink(d->sock_path);
    }
    if (d->lock_fd >= 0) {
        unlink(d->lock_path);
        close(d->lock_fd);
    }
}

/* ---- main ------------------------------------------------------------- */

/* The arena is a memfd that takes memory only where values are written,
 * and workers map it read-only once, at its full size: so it is sized for
 * the biggest store the machine could hold, not for the store at hand, and
 * a model of a billion parameters fits without flags. That is its memory
 * plus its swap, where a memfd's pages can go; at least 4 GiB, so that a
 * small machine still takes such a model when it has the swap; at most
 * the 1 TiB --arena takes. */
static uint64_t default_arena(void)
{
    struct sysinfo si;
    uint64_t mem = 0, min = 4ull << 30, max = 1ull << 40;

    if (sysinfo(&si) == 0)
        mem = ((uint64_t)si.totalram + si.totalswap) * (si.mem_unit ? si.mem_unit : 1);
    mem = (mem + (1ull << 30) - 1) & ~((1ull << 30) - 1);
    return mem < min ? min : mem > max ? max : mem;
}

static void on_signal(int sig)
{
    (void)sig;
    stop_signal = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvsd --job NAME [options]\n"
            "Serves the store of one dist_sync/dist_async job to its workers.\n"
            "  -j, --job NAME       the job (as KVS_JOB in the workers; across hosts\n"
            "                       each host's workers use NAME.hR, R the host's rank)\n"
            "  -n, --workers N      the job's number of workers (default: from the first)\n"
            "      --staging BYTES  staging area per worker (default 256M)\n"
            "      --arena BYTES    room for stored values, at least 1M (default: the\n"
            "                       machine's memory and swap, at least 4G; sparse until\n"
            "                       values fill it)\n"
            "      --threads N      threads for big sums (default: online CPUs, at most 8)\n"
            "Across hosts (one kvsd per host; kvsrun passes these):\n"
            "      --nodes H        the job's hosts (default 1)\n"
            "      --node-rank R    this host's rank, 0..H-1\n"
            "      --coord HOST:PORT  where host 0 listens for the others\n"
            "      --bind ADDR      the numeric address to listen on (default: loopback,\n"
            "                       or every address with a secret file)\n"
            "      --secret-file F  the job's shared secret (mode 0600); without one the\n"
            "                       hosts link over loopback only, with a secret made\n"
            "                       for the job that only this user can read\n"
            "      --heartbeat-timeout SECONDS  a host silent this long is dead (default 5)\n"
            "      --join-timeout SECONDS  every host must join by then (default 60)\n"
            "      --ready-fd FD    where to write \"RANK0 TOTAL\" once the hosts are joined\n"
            "Recovery (kvsrun passes these; see doc/recovery.md):\n"
            "      --recover        a worker's death ends this kvsd at once (exit status\n"
            "                       75; 76 when another host's kvsd went), for kvsrun to\n"
            "                       restart it from the last commit; the workers'\n"
            "                       handles reconnect to the new one\n"
            "      --restore        start from the job's last snapshot: <runtime dir>/\n"
            "                       JOB.snap, else the newest valid one in --checkpoint;\n"
            "                       across hosts the newest commit every host holds\n"
            "      --checkpoint DIR copy each commit's snapshot into DIR (two kept)\n"
            "      --checkpoint-sync  a commit answers once its copy is on disk (also\n"
            "                       KVS_CHECKPOINT_SYNC=1)\n"
            "      --generation N   the job's restarts so far, for kvsctl status\n"
            "Started on demand (by a job's first worker on the host, without kvsrun):\n"
            "      --exit-when-done exit once the last worker has left, closed or dead,\n"
            "                       even when others never came after the job failed;\n"
            "                       fail the job when its workers have not all\n"
            "                       connected within --connect-timeout\n"
            "      --connect-timeout SECONDS  for --exit-when-done (default 120)\n"
            "  -q, --quiet          no messages on stderr\n"
            "  -h, --help           this text\n"
            "      --version        the version\n"
            "kvsd exits when every worker has left, on SIGINT/SIGTERM, or on kvsctl stop.\n");
}

/* The options kvsd takes, for getopt_long. */
static const struct option longs[] = {
    { "job", required_argument, NULL, 'j' },
    { "workers", required_argument, NULL, 'n' },
    { "staging", required_argument, NULL, 's' },
    { "arena", required_argument, NULL, 'a' },
    { "threads", required_argument, NULL, 't' },
    { "quiet", no_argument, NULL, 'q' },
    { "nodes", required_argument, NULL, 'H' },
    { "node-rank", required_argument, NULL, 'R' },
    { "coord", required_argument, NULL, 'C' },
    { "bind", required_argument, NULL, 'B' },
    { "secret-file", required_argument, NULL, 'S' },
    { "heartbeat-timeout", required_argument, NULL, 'T' },
    { "join-timeout", required_argument, NULL, 'J' },
    { "ready-fd", required_argument, NULL, 'F' },
    { "recover", no_argument, NULL, 'r' },
    { "restore", no_argument, NULL, 'O' },
    { "checkpoint", required_argument, NULL, 'K' },
    { "checkpoint-sync", no_argument, NULL, 'Y' },
    { "generation", required_argument, NULL, 'G' },
    { "exit-when-done", no_argument, NULL, 'X' },
    { "connect-timeout", required_argument, NULL, 'W' },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
};

/* The defaults, before the options. */
static void defaults(struct daemon *d)
{
    d->o.staging = 256ull << 20;
    d->o.arena = default_arena();
    d->o.sq_entries = 1024;
    d->o.cq_entries = 1024;
    d->sync = -1;
    d->o.nhosts = 1;
    d->o.heartbeat_ns = 5 * 1000000000ll;
    d->o.join_ns = 60 * 1000000000ll;
    d->o.connect_ns = 120 * 1000000000ll;
    d->o.ready_fd = -1;
    d->nhosts = 1;
    d->lock_fd = d->listen_fd = d->ctl_fd = d->arena_fd = d->arena_ro_fd = d->cb_fd = -1;
    d->cb_on = -1;
    d->resume_step = -1;
}

/* A number option (c, its argument arg) into o: -1 when read, else the
 * exit status 2 (said). */
static int number_option(struct options *o, int c, const char *arg)
{
    char *end;
    long v = strtol(arg, &end, 10);

    switch (c) {
    case 'n':
    case 't':
        if (*end || v < (c == 'n' ? 1 : 0) || v > (c == 'n' ? MAX_WORKERS : 64)) {
            fprintf(stderr, "kvsd: bad --%s '%s'\n", c == 'n' ? "workers" : "threads", arg);
            return 2;
        }
        *(c == 'n' ? &o->nworkers : &o->threads) = (int)v;
        return -1;
    case 'G':
        if (*end || end == arg || v < 0 || v > INT_MAX) {
            fprintf(stderr, "kvsd: bad --generation '%s'\n", arg);
            return 2;
        }
        o->generation = (int)v;
        return -1;
    default:                           /* 'H', 'R', 'F' */
        if (*end || end == arg || v < (c == 'H') || v > (c == 'F' ? INT_MAX : KVS__HOSTS_MAX)) {
            fprintf(stderr, "kvsd: bad --%s '%s'\n",
                    c == 'H' ? "nodes" : c == 'R' ? "node-rank" : "ready-fd", arg);
            return 2;
        }
        *(c == 'H' ? &o->nhosts : c == 'R' ? &o->host : &o->ready_fd) = (int)v;
        return -1;
    }
}

/* A size (c 's', 'a') or a time (c 'T', 'J', 'W') option into o: -1 when read,
 * else the exit status 2 (said). */
static int measure_option(struct options *o, int c, const char *arg)
{
    double secs;

    if (c == 's' || c == 'a') {
        if (kvs__parse_bytes(arg, c == 's' ? &o->staging : &o->arena) != 0) {
            fprintf(stderr, "kvsd: --%s '%s' is not a size in bytes (with K, M or G), "
                    "above 0 and at most 1T\n", c == 's' ? "staging" : "arena", arg);
            return 2;
        }
        if (c == 'a' && o->arena < KVS__ARENA_MIN) {
            fprintf(stderr, "kvsd: --arena '%s' is below the arena's minimum of 1M\n", arg);
            return 2;
        }
        return -1;
    }
    if (kvs__spec_double(arg, strlen(arg), &secs) != 0 || !(secs > 0) || secs > 86400) {
        fprintf(stderr, "kvsd: --%s '%s' is not a number of seconds in (0, 86400]\n",
                c == 'T' ? "heartbeat-timeout" : c == 'J' ? "join-timeout" : "connect-timeout",
                arg);
        return 2;
    }
    *(c == 'T' ? &o->heartbeat_ns : c == 'J' ? &o->join_ns : &o->connect_ns) =
        (int64_t)(secs * 1e9);
    return -1;
}

/* Reads the command line into d->o: -1 to go on, else the exit status
 * (0 after --help or --version, 2 for a bad command line, said). */
static int parse_options(struct daemon *d, int argc, char **argv)
{
    struct kvs__err e = { 0, "" };
    int c, rc = -1;

    while (rc < 0 && (c = getopt_long(argc, argv, "j:n:qh", longs, NULL)) != -1) {
        switch (c) {
        case 'j':
            if (kvs__job_name_check(optarg, &e) != 0) {
                fprintf(stderr, "kvsd: %s\n", e.msg);
                return 2;
            }
            snprintf(d->o.job, sizeof d->o.job, "%s", optarg);
            break;
        case 'n':
        case 't':
        case 'H':
        case 'R':
        case 'F':
            rc = number_option(&d->o, c, optarg);
            break;
        case 's':
        case 'a':
        case 'T':
        case 'J':
        case 'W':
            rc = measure_option(&d->o, c, optarg);
            break;
        case 'q':
            d->o.quiet = 1;
            break;
        case 'r':
            d->o.recover = 1;
            break;
        case 'O':
            d->o.restore = 1;
            break;
        case 'K':
            if (optarg[0] != '/') {
                fprintf(stderr, "kvsd: --checkpoint '%s' is not an absolute path\n", optarg);
                return 2;
            }
            d->o.checkpoint = optarg;
            break;
        case 'Y':
            d->o.checkpoint_sync = 1;
            break;
        case 'X':
            d->o.exit_when_done = 1;
            break;
        case 'G':
            rc = number_option(&d->o, c, optarg);
            break;
        case 'C':
            d->o.coord = optarg;
            break;
        case 'B':
            d->o.bind = optarg;
            break;
        case 'S':
            d->o.secret_file = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("kvsd (kvs) %s\n", KVS_VERSION_STRING);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    return rc;
}

/* The options checked together (extra_args: arguments that are not
 * options), and this host's part of a job across
 * hosts named (NAME.hR): -1 to go on, else the exit status 2 (said). */
static int check_options(struct options *o, int extra_args)
{
    struct kvs__err e = { 0, "" };
    char local[2 * KVS__JOB_MAX];

    if (!o->job[0] || extra_args) {
        usage(stderr);
        return 2;
    }
    if (o->nhosts > 1 && (!o->coord || !o->nworkers || o->host >= o->nhosts)) {
        fprintf(stderr, "kvsd: a job of %d hosts needs --coord, --workers and a --node-rank "
                "below %d\n", o->nhosts, o->nhosts);
        return 2;
    }
    snprintf(o->net_job, sizeof o->net_job, "%s", o->job);
    if (o->nhosts == 1)
        return -1;
    snprintf(local, sizeof local, "%s.h%d", o->net_job, o->host);
    if (kvs__job_name_check(local, &e) != 0) {
        fprintf(stderr, "kvsd: this host's part of job '%s' is named '%s': %s\n", o->net_job,
                local, e.msg);
        return 2;
    }
    memcpy(o->job, local, strlen(local) + 1);  /* checked: at most KVS__JOB_MAX */
    return -1;
}

/* The state before set-up: the workers' slots empty, the locks, the
 * signals. */
static void init_state(struct daemon *d)
{
    struct sigaction sa = { .sa_handler = on_signal };

    d->nworkers = d->total = d->o.nworkers;
    for (int i = 0; i < MAX_WORKERS; i++) {
        d->workers[i].sock = -1;
        d->workers[i].pidfd = -1;
    }
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->ctl_lock, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The modules' hooks, in the order a failing job runs them: the other
 * hosts and the workers combining learn of it first, then the waiting
 * requests end (async pushes forwarded, saves and loads, rounds,
 * collectives). bridge_init also gives rounds.c its round_ops. */
static void register_hooks(struct daemon *d)
{
    bridge_init(d);
    cb_init(d);
    states_init(d);
    rounds_init(d);
    colls_init(d);
}

/* Across hosts with --restore: the commit the hosts agreed on, restored.
 * 0, or the error (in e). */
static int restore_agreed(struct daemon *d, struct kvs__err *e)
{
    struct kvs__snapshot *s;
    char from[sizeof d->restored_from];
    int rc;

    if (!d->o.restore)
        return 0;
    if ((rc = xcommits_find(d, &s, from, sizeof from, e)) != 0)
        return rc;
    return s ? commits_apply(d, s, from, e) : 0;
}

/* Joins the other hosts, if any, and tells the ready fd: 0, or 1 (said;
 * everything undone). */
static int join_hosts(struct daemon *d)
{
    struct kvs__err e = { 0, "" };

    if (d->o.nhosts > 1 && (hosts_start(d, &e) != 0 || restore_agreed(d, &e) != 0)) {
        fprintf(stderr, "kvsd: host %d of job '%s': %s\n", d->o.host, d->o.job, e.msg);
        hosts_stop(d, 0);
        teardown(d);
        return 1;
    }
    if (d->o.ready_fd >= 0) {
        dprintf(d->o.ready_fd, "%d %d\n", d->rank0, d->total);
        close(d->o.ready_fd);
    }
    return 0;
}

/* Serves until the end with the socket thread beside, then ends the links
 * and the thread: 0, or 1 when the thread did not start (said). */
static int run(struct daemon *d)
{
    pthread_t th;
    int rc;

    say(d, "serving on %s", d->sock_path);
    if ((rc = pthread_create(&th, NULL, accept_thread, d)) != 0) {
        fprintf(stderr, "kvsd: cannot start a thread: %s\n", strerror(rc));
        return 1;
    }
    serve_run(d);
    /* Ended by a signal, or failed: the other hosts see the links close
     * without a bye, which fails their job too. */
    hosts_stop(d, !stop_signal && !d->failed);
    stop_signal = 1;
    pthread_join(th, NULL);
    trace_write(d);
    return 0;
}

int main(int argc, char **argv)
{
    static struct daemon d;
    struct kvs__err e = { 0, "" };
    int rc;

    /* The serve loop allocates per request and per list call (a list of
     * 200,000 keys makes arrays of tens of MB): kept in the heap rather
     * than mapped and unmapped each time, they cost page faults once. */
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    defaults(&d);
    if ((rc = parse_options(&d, argc, argv)) >= 0)
        return rc;
    if ((rc = check_options(&d.o, optind != argc)) >= 0)
        return rc;
    init_state(&d);
    register_hooks(&d);
    if ((rc = setup(&d, &e)) != 0) {
        fprintf(stderr, "kvsd: %s\n", e.msg);
        teardown(&d);
        return rc == -EBUSY ? 3 : 1;
    }
    if ((rc = commits_start(&d, &e)) != 0) {
        fprintf(stderr, "kvsd: %s\n", e.msg);
        commits_stop(&d, 0);
        teardown(&d);
        return 1;
    }
    if (join_hosts(&d) != 0)
        return 1;
    rc = run(&d);
    /* Every worker left (not a signal, not a failure): the job is over. */
    commits_stop(&d, !d.failed && d.nworkers > 0 && d.left == d.nworkers);
    teardown(&d);
    return rc;
}
