/*
 * kvsctl - looks into the kvsd of a job on this host: the job's state
 * (status), its keys (keys), kvsd's counters, its links' traffic and the
 * keys' round latencies and rows (stats, --short without what is per key,
 * or its sample as JSON with --json), a live view of the workers
 * and keys (top); or tells kvsd to stop (stop). plan asks no kvsd: it
 * models a job across hosts; nor does timeline, which reads the trace
 * files of a job.
 *
 * This file is the dispatcher: it reads the command line and runs one
 * sub-tool, each in a file of its own: status.c (status, keys, stats,
 * stop), top.c, plan.c, tl_plot.c and tl_merge.c (timeline plot and
 * merge). Those that ask kvsd ask through ask.c. No sub-tool calls back
 * into this file.
 *
 * kvsctl never touches the job's shared memory, files or processes: all it
 * knows is kvsd's answer, which it decodes and checks (proto/ctl.c, and
 * sample.c for a sample) before it prints a byte of it. It never signals a
 * process and never removes a file; stop is kvsd's own doing. Every wait
 * of a question, the connect included, ends at one deadline, DEADLINE_NS
 * after the question began.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ask.h"
#include "kvs.h"
#include "plan.h"
#include "proto/proto.h"
#include "shm/shm.h"
#include "status.h"
#include "timeline.h"
#include "tltool.h"
#include "top.h"

#define TOP_INTERVAL_NS SEC_NS         /* kvsctl top's refresh, unless -d says */


static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvsctl [-j JOB] COMMAND\n"
            "       kvsctl [-j JOB] stats [--short | --json]\n"
            "       kvsctl [-j JOB] top [--once] [-d SECONDS] [JOB]\n"
            "       kvsctl plan --hosts LIST --shapes FILE [--link RATE] [OPTIONS]\n"
            "       kvsctl timeline plot FILE [-o OUT.png] [--data OUT.tsv] [--no-plot]\n"
            "       kvsctl timeline merge OUT FILE...\n"
            "Asks the kvsd of a dist_sync/dist_async job on this host.\n"
            "Commands:\n"
            "  status    the job: mode, workers, number of keys, optimizer, failure\n"
            "  keys      every key: dtype, shape, version, sync rounds done\n"
            "  stats     kvsd's counters: rounds, pushes, pulls, bytes, rows, collectives,\n"
            "            ...; across hosts, per link the frames and bytes sent and received;\n"
            "            then per key, busiest first, its rounds and their latency (p50,\n"
            "            p99, max: upper bounds of power-of-two buckets), and per row-sparse\n"
            "            key its rows pushed, pulled, sent to and received from other hosts\n"
            "            --short: without the listings per key (a job of many keys)\n"
            "            --json: the counters, each worker's and each key's with its\n"
            "            latency histogram, as one JSON object\n"
            "  top       a live view, refreshed every second: per worker its rounds/s,\n"
            "            bytes/s and time waiting for the store; per key its rounds/s and\n"
            "            latency; kvsd's CPU; the job's totals. q quits. A terminal only:\n"
            "            --once prints one frame (after one interval) as plain text;\n"
            "            -d SECONDS sets the interval (0.1 to 60)\n"
            "  stop      kvsd ends the job, as on SIGTERM; kvsctl waits until it is gone\n"
            "  checkpoint  kvsd writes the job's last commit into its checkpoint directory\n"
            "            (kvsrun --checkpoint DIR) now; answers once it is on disk\n"
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

/* What the command line asks. */
struct cmd {
    char job[KVS__JOB_MAX + 1];
    int command;                       /* enum kvs__ctl_command */
    int plan;                          /* the index of a plan or timeline command, or 0 */
    int json;                          /* stats --json: the sample, as JSON */
    int brief;                         /* stats --short: KVS__CTL_STATS_SHORT */
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
        } else if (c->command == KVS__CTL_STATS && strcmp(a, "--short") == 0) {
            c->brief = 1;
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
    static const char *const commands = "status, keys, stats, top, stop, checkpoint, plan "
                                        "or timeline";
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
            printf("kvsctl (kvs) %s\n", KVS_VERSION_STRING);
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
    if (strcmp(argv[optind], kvs__ctl_command_name(KVS__CTL_CHECKPOINT)) == 0)
        c->command = KVS__CTL_CHECKPOINT;
    if (c->command == 0)
        return usage_error("unknown command '%s' (%s)", argv[optind], commands);
    if ((rc = command_args(argc, argv, optind + 1, c, &cjob)) != 0)
        return rc;
    if (c->json && c->brief)
        return usage_error("stats: --short or --json, not both");
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
    else if (c->brief)
        c->command = KVS__CTL_STATS_SHORT;
    snprintf(c->job, sizeof c->job, "%s", name);
    return -1;
}

/* kvsctl timeline: argv[0] is "timeline", argv[1] "plot" or "merge". */
static int timeline(int argc, char **argv)
{
    if (argc < 2)
        return tl_usage_error("no subcommand (plot or merge)");
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        tl_usage(stdout);
        return 0;
    }
    /* A closed stdout or a gnuplot gone early is an error to report, not
     * a signal to die of. */
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(argv[1], "plot") == 0)
        return tl_plot_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "merge") == 0)
        return tl_merge_main(argc - 1, argv + 1);
    return tl_usage_error("unknown subcommand '%s' (plot or merge)", argv[1]);
}

int main(int argc, char **argv)
{
    struct cmd c = { .command = 0 };
    int rc;

    if ((rc = parse_options(argc, argv, &c)) >= 0)
        return rc;
    if (c.plan && strcmp(argv[c.plan], "plan") == 0)
        return plan_main(argc - c.plan, argv + c.plan);
    if (c.plan)
        return timeline(argc - c.plan, argv + c.plan);
    if (c.top)
        return top_main(c.job, &c.top_o);
    return status_main(c.job, c.command, c.json);
}
