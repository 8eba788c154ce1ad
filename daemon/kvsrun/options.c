/*
 * options.c - kvsrun's command line: its usage, each option read and
 * checked as the library and kvsd would check it (so that a typo is a
 * usage error of kvsrun, not a worker or a kvsd that fails later), then
 * the hosts and the job's name placed (placement.c). It starts nothing;
 * the one file it touches is --checkpoint's folder, made when missing
 * and checked writable; --timeline only sets KVS_TIMELINE.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvs.h"
#include "kvsrun.h"
#include "proto/layout.h"
#include "shm/shm.h"
#include "base/spec.h"

enum { OPT_GRACE = 256, OPT_KVSD, OPT_TIMEOUT, OPT_STAGING, OPT_ARENA, OPT_VERSION,
       OPT_NODES, OPT_NODE_RANK, OPT_COORD, OPT_BIND, OPT_SECRET, OPT_TIMELINE,
       OPT_RESTARTS, OPT_CHECKPOINT, OPT_STALL };

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
            "Recovery (one host; see doc/recovery.md):\n"
            "      --restarts N         a worker that fails (a signal, a non-zero status)\n"
            "                           is restarted, up to N times per rank, with the same\n"
            "                           rank and environment (KVS_RESTART_COUNT says which\n"
            "                           restart); the kvsd restarts from the last commit\n"
            "                           with it, and a kvsd that ends by itself is\n"
            "                           restarted too, up to N times (default 0: none)\n"
            "      --checkpoint DIR     kvsd copies each commit's snapshot into DIR (made\n"
            "                           when missing); a job started on a DIR that holds\n"
            "                           one resumes from it\n"
            "      --stall-timeout S    a worker the others have waited on for S seconds is\n"
            "                           killed (SIGKILL) and counts as failed (default: off)\n"
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
            "                           without one the hosts link over loopback only,\n"
            "                           with a secret made for the job that only this\n"
            "                           user can read\n"
            "  -h, --help               this text\n"
            "      --version            kvsrun's version\n"
            "Exit status: that of the first worker to fail (128+S when signal S killed it),\n"
            "0 when every worker succeeded, 1 when kvsrun failed, 2 on a usage error.\n");
}

/* Seconds with fractions, in [lo, hi], read as the library reads
 * KVS_TIMEOUT (decimal only: strtod alone would take "0x10", " 5", "inf"
 * and "nan" too), so that kvsrun never passes on a value the workers'
 * kvs_create then refuses. */
static int seconds_arg(const char *s, double lo, double hi, double *out)
{
    double v;

    if (kvs__spec_double(s, strlen(s), &v) != 0 || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* A whole number in lo..hi: 0, or -1. */
static int number_arg(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Takes the value arg of option c (one of those with a value) into *o.
 * -1 to go on, else the exit status (2, said). */
static int take_option(struct options *o, int c, const char *arg)
{
    struct kvs__err e = { 0, "" };
    double secs;
    long v;

    switch (c) {
    case 'n':
        if (number_arg(arg, 1, MAX_WORKERS, &v) != 0) {
            fprintf(stderr, "kvsrun: --workers '%s' is not a number in 1..%d\n", arg,
                    MAX_WORKERS);
            return 2;
        }
        o->nworkers = (int)v;
        break;
    case 'j':
        if (kvs__job_name_check(arg, &e) != 0) {
            fprintf(stderr, "kvsrun: %s\n", e.msg);
            return 2;
        }
        snprintf(o->job, sizeof o->job, "%s", arg);
        break;
    case OPT_GRACE:
        if (seconds_arg(arg, 0, 86400.0, &secs) != 0) {
            fprintf(stderr, "kvsrun: --grace '%s' is not a number of seconds in "
                    "0..86400\n", arg);
            return 2;
        }
        o->grace_ns = (int64_t)(secs * (double)SEC_NS);
        break;
    case OPT_TIMELINE:
        /* kvsd and the workers inherit it, and each takes it from the
         * same working directory. */
        if (!*arg || setenv("KVS_TIMELINE", arg, 1) != 0) {
            fprintf(stderr, "kvsrun: --timeline needs a file's path\n");
            return 2;
        }
        break;
    case OPT_KVSD:
        if (!*arg) {
            fprintf(stderr, "kvsrun: --kvsd needs a path\n");
            return 2;
        }
        o->kvsd = arg;
        break;
    case OPT_TIMEOUT:
        /* The library's rule for KVS_TIMEOUT: anything else would make
         * every worker's kvs_create fail. */
        if (seconds_arg(arg, 0, 86400.0 * 365, &secs) != 0 || !(secs > 0)) {
            fprintf(stderr, "kvsrun: --timeout '%s' is not a number of seconds above 0 "
                    "(at most a year)\n", arg);
            return 2;
        }
        o->timeout = arg;
        break;
    case OPT_STAGING:
    case OPT_ARENA: {
        uint64_t bytes;

        /* kvsd's own rule, checked here so that a typo is a usage error
         * of kvsrun, not a kvsd that fails to start. */
        if (kvs__parse_bytes(arg, &bytes) != 0) {
            fprintf(stderr, "kvsrun: --%s '%s' is not a size in bytes (with K, M "
                    "or G), above 0 and at most 1T\n",
                    c == OPT_STAGING ? "staging" : "arena", arg);
            return 2;
        }
        if (c == OPT_ARENA && bytes < KVS__ARENA_MIN) {
            fprintf(stderr, "kvsrun: --arena '%s' is below the arena's minimum of 1M\n",
                    arg);
            return 2;
        }
        *(c == OPT_STAGING ? &o->staging : &o->arena) = arg;
        break;
    }
    case OPT_NODES:
    case OPT_NODE_RANK:
        if (number_arg(arg, c == OPT_NODES, 4096, &v) != 0) {
            fprintf(stderr, "kvsrun: --%s '%s' is not a number in %d..4096\n",
                    c == OPT_NODES ? "nodes" : "node-rank", arg, c == OPT_NODES);
            return 2;
        }
        *(c == OPT_NODES ? &o->nodes : &o->node_rank) = (int)v;
        break;
    case OPT_COORD:
        snprintf(o->coord, sizeof o->coord, "%s", arg);
        break;
    case OPT_RESTARTS:
        if (number_arg(arg, 0, MAX_RESTARTS, &v) != 0) {
            fprintf(stderr, "kvsrun: --restarts '%s' is not a number in 0..%d\n", arg,
                    MAX_RESTARTS);
            return 2;
        }
        o->restarts = (int)v;
        break;
    case OPT_CHECKPOINT:
        if (!*arg) {
            fprintf(stderr, "kvsrun: --checkpoint needs a folder\n");
            return 2;
        }
        o->checkpoint = arg;
        break;
    case OPT_STALL:
        if (seconds_arg(arg, 0, 86400.0 * 365, &secs) != 0 || !(secs > 0)) {
            fprintf(stderr, "kvsrun: --stall-timeout '%s' is not a number of seconds above 0 "
                    "(at most a year)\n", arg);
            return 2;
        }
        o->stall_ns = (int64_t)(secs * (double)SEC_NS);
        if (o->stall_ns < 1000000)
            o->stall_ns = 1000000;
        break;
    case OPT_BIND:
        o->bind = arg;
        break;
    case OPT_SECRET:
        o->secret_file = arg;
        break;
    }
    return -1;
}

/* The options before PROGRAM. -1 to go on, else the exit status. */
static int read_options(struct options *o, int argc, char **argv)
{
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
        { "restarts", required_argument, NULL, OPT_RESTARTS },
        { "checkpoint", required_argument, NULL, OPT_CHECKPOINT },
        { "stall-timeout", required_argument, NULL, OPT_STALL },
        { NULL, 0, NULL, 0 },
    };
    int c, rc;

    opterr = 0;                        /* our messages carry "kvsrun: ", not argv[0] */
    /* '+': options end at PROGRAM, whose own options are its business;
     * ':': a missing value is told apart from an unknown option. */
    while ((c = getopt_long(argc, argv, "+:n:j:h", longs, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("kvsrun (kvs) %s\n", KVS_VERSION_STRING);
            return 0;
        case ':':
            fprintf(stderr, "kvsrun: option '%s' needs a value\n", argv[optind - 1]);
            fprintf(stderr, "Try 'kvsrun --help'.\n");
            return 2;
        case '?':
            if (optopt > 0 && optopt < 256)
                fprintf(stderr, "kvsrun: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "kvsrun: unknown option '%s'\n", argv[optind - 1]);
            fprintf(stderr, "Try 'kvsrun --help'.\n");
            return 2;
        default:
            if ((rc = take_option(o, c, optarg)) >= 0)
                return rc;
        }
    }
    return -1;
}

/* What must be there: -n N, and the program. -1 to go on, else 2. */
static int check_required(struct options *o, int argc, char **argv)
{
    if (o->nworkers == 0) {
        fprintf(stderr, "kvsrun: -n N is required\nTry 'kvsrun --help'.\n");
        return 2;
    }
    if (optind >= argc) {
        fprintf(stderr, "kvsrun: no program to run\nTry 'kvsrun --help'.\n");
        return 2;
    }
    o->argv = argv + optind;
    return -1;
}

/* --checkpoint's folder, made when missing (its parents too), and
 * writable: kvsd, started later, would otherwise fail at the first
 * commit. *dirp becomes its absolute path, which kvsd takes. -1 to go on,
 * else 1 (said). */
static int checkpoint_dir(const char **dirp)
{
    static char abs[PATH_MAX];
    const char *dir = *dirp;
    char path[PATH_MAX];
    struct stat st;
    size_t n = strlen(dir);

    if (n >= sizeof path) {
        fprintf(stderr, "kvsrun: --checkpoint '%s' is too long a path\n", dir);
        return 1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "kvsrun: cannot make the checkpoint folder %s: %s\n", path,
                    strerror(errno));
            return 1;
        }
        path[i] = dir[i];
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kvsrun: --checkpoint %s is not a folder\n", dir);
        return 1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "kvsrun: cannot write into the checkpoint folder %s: %s\n", dir,
                strerror(errno));
        return 1;
    }
    if (!realpath(dir, abs)) {
        fprintf(stderr, "kvsrun: --checkpoint %s: %s\n", dir, strerror(errno));
        return 1;
    }
    *dirp = abs;
    return -1;
}

int parse_options(struct options *o, int argc, char **argv)
{
    int rc;

    o->nodes = o->node_rank = -1;
    o->grace_ns = 5 * SEC_NS;
    if ((rc = read_options(o, argc, argv)) >= 0)
        return rc;
    if ((rc = check_required(o, argc, argv)) >= 0)
        return rc;
    if ((rc = hosts_options(o)) >= 0)
        return rc;
    if (o->nodes > 1 && (o->restarts > 0 || o->checkpoint)) {
        fprintf(stderr, "kvsrun: --%s: recovery across hosts is not yet supported (a job of "
                "%d hosts)\n", o->restarts > 0 ? "restarts" : "checkpoint", o->nodes);
        return 2;
    }
    if (o->checkpoint && (rc = checkpoint_dir(&o->checkpoint)) >= 0)
        return rc;
    return name_job(o);
}
