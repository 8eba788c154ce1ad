/*
 * plan.c - kvsctl plan: how a model's sync round would load the hosts of
 * a job, modelled, for one or several numbers of hosts.
 *
 * The model is kvsd's protocol across hosts (daemon/kvsd/bridge.c) with its own
 * sharding rule (src/proto/shard.c, the very code kvsd runs): for each part of
 * each key (a key whole, or a part of a split one), every host but the
 * part's owner sends the owner its sum (a PARTIAL frame), and the owner
 * sends the new value to every other host (a VALUE frame); each frame is
 * a head (KVS__WIRE_HEAD), a body naming the key and its shape
 * (kvs__wire_msg_bytes) and the part's data. The bytes a host's workers
 * move to and from kvsd on the host itself do not cross a link and are
 * not counted on the wire, so the number of workers a host runs changes
 * the memory's bytes (--memory) only.
 *
 * The round time modelled is bytes over the link's rate: with a link per
 * host, full duplex, the busiest host's max(sent, received); with
 * --shared-link (every host on one machine, one loopback) the bytes of
 * every host. No latency: a floor, beside the ring allreduce's, 2(H-1)/H x
 * S per host. With --memory RATE it also counts the bytes each host moves
 * through its memory in a round by copy (memory_traffic below: kvsd's
 * path as it is, each copy and sum read and written once), at RATE bytes
 * read plus written a second (bench/calib's figure), one step after the
 * other as kvsd takes them: the round is then the wire's time plus the
 * memory's, of the busiest host (a link per host) or of all hosts
 * together (--shared-link: one machine's memory and cores).
 *
 * It reads one file, the shapes, and writes stdout; it never connects to
 * anything.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs.h"
#include "plan.h"
#include "proto/shard.h"
#include "proto/wire.h"

#define LINE_MAX_BYTES 4096            /* a line of a shapes file */
#define NAME_MAX_BYTES 128             /* a tensor's name, NUL included */
#define HOSTS_LIST_MAX 4096            /* numbers of hosts in one --hosts */
#define WORKERS_MAX    4096            /* --workers */
#define DEFAULT_LINK   "100Gbit"
#define ESIZE          4               /* float32 */
#define STR_(x)        #x
#define STR(x)         STR_(x)             /* a number macro's digits */

struct tensor {
    char name[NAME_MAX_BYTES];
    int ndim;
    int64_t shape[KVS_MAX_NDIM];
    uint64_t count;
};

struct model {
    const char *path;
    struct tensor *t;
    int n, cap;
    uint64_t values;                   /* every tensor's elements */
};

/* One host's share of a round. */
struct load {
    uint64_t own, own_frames;          /* the parts it owns: bytes with their frames' heads */
    uint64_t own_data;                 /* the same without the heads */
    double memory;                     /* bytes read plus written in memory (--memory) */
    uint64_t sent, recv, frames_sent, frames_recv;
    int keys, parts;                   /* whole keys, and parts of split keys, it owns */
    int biggest;                       /* the tensor of its biggest part, or -1 */
    uint64_t biggest_bytes;
};

struct plan_opts {
    int hosts[HOSTS_LIST_MAX], nhosts;
    const char *shapes, *link, *memory;
    double rate;                       /* bytes/s */
    double mem_rate;                   /* bytes read plus written a second; 0: not modelled */
    int workers;                       /* a host's workers, for the memory's bytes */
    int shared, per_host, json;
    int64_t first_key;
    uint64_t split, part;              /* what if: used where split_set, part_set */
    int split_set, part_set;
};

static void plan_usage(FILE *f)
{
    fprintf(f,
            "usage: kvsctl plan --hosts LIST --shapes FILE [--link RATE] [--shared-link]\n"
            "                   [--first-key K] [--per-host] [--json] [--split BYTES] [--part BYTES]\n"
            "                   [--memory RATE [--workers W]]\n"
            "Models a sync round of a model's float32 tensors across H hosts: each host's bytes\n"
            "sent and received under kvsd's own sharding rule, the imbalance, the connections,\n"
            "and the round time that is on links of RATE, beside the ring allreduce's bound.\n"
            "  --hosts LIST     numbers of hosts: 8 | 8,16,64 | 2-8 (one row each)\n"
            "  --shapes FILE    one tensor a line: NAME DIMS, e.g. 'conv1.weight 64x3x7x7';\n"
            "                   '#' starts a comment; keys are K, K+1, ... in file order\n"
            "  --link RATE      each host's link (default %s): 100Gbit, 25Gbit, 800Mbit,\n"
            "                   100Gb/s (bits per second), 3.2GB/s, 500MB/s, 2GiB/s (bytes)\n"
            "  --shared-link    one link carries every host's bytes (hosts on one machine)\n"
            "  --first-key K    the first tensor's key (default 0; bench_suite --resnet: 1000)\n"
            "  --per-host       each host's share, under each row\n"
            "  --json           the same as JSON, one object per number of hosts\n"
            "  --split BYTES    split keys of this many bytes or more (default kvsd's: 8M / H,\n"
            "                   from 64K to 4M): to ask what if\n"
            "  --part BYTES     in parts of at most this (default kvsd's, 1M): to ask what if\n"
            "  --memory RATE    also count each host's copies and sums in memory, at RATE\n"
            "                   bytes read plus written a second (bench/calib's copy figure,\n"
            "                   e.g. 28GB/s); the round is then the wire's time plus the memory's\n"
            "  --workers W      workers a host, each pushing and pulling by copy (default 1)\n",
            DEFAULT_LINK);
}

static int usage_error(const char *fmt, const char *what)
{
    fprintf(stderr, "kvsctl plan: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\nTry 'kvsctl plan --help'.\n");
    return 2;
}

/* ---- arguments ------------------------------------------------------------ */

/* "8", "8,16,64", "2-8", "2,4-6": into o->hosts. 0, or -1. */
static int parse_hosts(const char *s, struct plan_opts *o)
{
    o->nhosts = 0;
    while (*s) {
        char *end;
        long lo, hi;

        errno = 0;
        lo = strtol(s, &end, 10);
        hi = lo;
        if (end == s || errno)
            return -1;
        if (*end == '-') {
            s = end + 1;
            hi = strtol(s, &end, 10);
            if (end == s || errno)
                return -1;
        }
        if (lo < 1 || hi < lo || hi > KVS__HOSTS_MAX)
            return -1;
        for (long h = lo; h <= hi; h++) {
            if (o->nhosts == HOSTS_LIST_MAX)
                return -1;
            o->hosts[o->nhosts++] = (int)h;
        }
        if (*end == ',' && end[1])
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return o->nhosts > 0 ? 0 : -1;
}

/* "100Gbit", "3.2GB/s": bytes per second, > 0. 0, or -1. */
static int parse_rate(const char *s, double *rate)
{
    static const struct { const char *unit; double bytes; } units[] = {
        { "bit", 1.0 / 8 }, { "Kbit", 1e3 / 8 }, { "kbit", 1e3 / 8 }, { "Mbit", 1e6 / 8 },
        { "Gbit", 1e9 / 8 }, { "Tbit", 1e12 / 8 },
        { "bit/s", 1.0 / 8 }, { "Kbit/s", 1e3 / 8 }, { "kbit/s", 1e3 / 8 },
        { "Mbit/s", 1e6 / 8 }, { "Gbit/s", 1e9 / 8 }, { "Tbit/s", 1e12 / 8 },
        { "b/s", 1.0 / 8 }, { "Kb/s", 1e3 / 8 }, { "kb/s", 1e3 / 8 }, { "Mb/s", 1e6 / 8 },
        { "Gb/s", 1e9 / 8 }, { "Tb/s", 1e12 / 8 },
        { "B/s", 1 }, { "KB/s", 1e3 }, { "kB/s", 1e3 }, { "MB/s", 1e6 }, { "GB/s", 1e9 },
        { "TB/s", 1e12 }, { "KiB/s", 1024.0 }, { "MiB/s", 1048576.0 },
        { "GiB/s", 1073741824.0 },
    };
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || !(v > 0) || *s == '-' || *s == '+')
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) {
            *rate = v * units[i].bytes;
            return isfinite(*rate) && *rate > 0 ? 0 : -1;
        }
    return -1;
}

/* "4M", "256K", "1048576": bytes (K, M, G of 1024). 0, or -1. */
static int parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    int shift = 0;

    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    if (*end == 'K' || *end == 'M' || *end == 'G') {
        shift = *end == 'K' ? 10 : *end == 'M' ? 20 : 30;
        end++;
    }
    if (*end || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* -1 to go on, else the exit status. */
static int plan_options(int argc, char **argv, struct plan_opts *o)
{
    enum { O_SHARED = 256, O_FIRST, O_PER_HOST, O_JSON, O_SPLIT, O_PART, O_MEMORY, O_WORKERS };
    static const struct option longs[] = {
        { "hosts", required_argument, NULL, 'H' },
        { "shapes", required_argument, NULL, 's' },
        { "link", required_argument, NULL, 'l' },
        { "shared-link", no_argument, NULL, O_SHARED },
        { "first-key", required_argument, NULL, O_FIRST },
        { "per-host", no_argument, NULL, O_PER_HOST },
        { "json", no_argument, NULL, O_JSON },
        { "split", required_argument, NULL, O_SPLIT },
        { "part", required_argument, NULL, O_PART },
        { "memory", required_argument, NULL, O_MEMORY },
        { "workers", required_argument, NULL, O_WORKERS },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *hosts = NULL;
    char *end;
    int c;

    o->link = DEFAULT_LINK;
    o->workers = 1;
    optind = 0;                        /* a fresh scan of plan's own arguments */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        switch (c) {
        case 'H':
            hosts = optarg;
            break;
        case 's':
            o->shapes = optarg;
            break;
        case 'l':
            o->link = optarg;
            break;
        case O_SHARED:
            o->shared = 1;
            break;
        case O_FIRST:
            errno = 0;
            o->first_key = strtoll(optarg, &end, 10);
            if (end == optarg || *end || errno)
                return usage_error("--first-key: '%s' is not an integer key", optarg);
            break;
        case O_PER_HOST:
            o->per_host = 1;
            break;
        case O_JSON:
            o->json = 1;
            break;
        case O_SPLIT:
            if (parse_bytes(optarg, &o->split) != 0)
                return usage_error("--split: '%s' is not a number of bytes (4M, 256K, 4096)",
                                   optarg);
            o->split_set = 1;
            break;
        case O_PART:
            if (parse_bytes(optarg, &o->part) != 0 || o->part == 0)
                return usage_error("--part: '%s' is not a number of bytes above 0 (1M, 64K)",
                                   optarg);
            o->part_set = 1;
            break;
        case O_MEMORY:
            o->memory = optarg;
            break;
        case O_WORKERS:
            errno = 0;
            o->workers = (int)strtol(optarg, &end, 10);
            if (end == optarg || *end || errno || o->workers < 1 || o->workers > WORKERS_MAX)
                return usage_error("--workers: '%s' is not a number of workers from 1 to "
                                   STR(WORKERS_MAX), optarg);
            break;
        case 'h':
            plan_usage(stdout);
            return 0;
        case ':':
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!hosts)
        return usage_error("%s", "--hosts is missing (e.g. --hosts 8,16,64)");
    if (!o->shapes)
        return usage_error("%s", "--shapes is missing (a file of NAME DIMS lines)");
    if (parse_hosts(hosts, o) != 0)
        return usage_error("--hosts: '%s' is not a list of numbers of hosts from 1 to "
                           "4096 (8 | 8,16,64 | 2-8)", hosts);
    if (parse_rate(o->link, &o->rate) != 0)
        return usage_error("--link: '%s' is not a rate (100Gbit, 800Mbit, 100Gb/s, 3.2GB/s, "
                           "2GiB/s)", o->link);
    if (o->memory && parse_rate(o->memory, &o->mem_rate) != 0)
        return usage_error("--memory: '%s' is not a rate (28GB/s, 20GiB/s)", o->memory);
    return -1;
}

/* ---- the shapes file ------------------------------------------------------- */

static int bad_line(const struct model *m, int line, const char *why, const char *what)
{
    fprintf(stderr, "kvsctl plan: %s:%d: %s", m->path, line, why);
    if (what)
        fprintf(stderr, " '%s'", what);
    fputc('\n', stderr);
    return 1;
}

/* "64x3x7x7" into t's shape and count. NULL, or why not. */
static const char *parse_dims(char *dims, struct tensor *t)
{
    char *p = dims;

    t->ndim = 0;
    t->count = 1;
    for (;;) {
        char *end;
        unsigned long long v;

        if (*p < '0' || *p > '9')
            return "dims are positive integers joined by 'x', not";
        errno = 0;
        v = strtoull(p, &end, 10);
        if (errno || v == 0 || v > INT64_MAX)
            return "a dim out of range (1 and up) in";
        if (t->ndim == KVS_MAX_NDIM)
            return "more dims than kvs allows (" STR(KVS_MAX_NDIM) ") in";
        if (__builtin_mul_overflow(t->count, (uint64_t)v, &t->count)
            || t->count > KVS__WIRE_PAYLOAD_MAX / ESIZE)
            return "a tensor bigger than a kvs value may be:";
        t->shape[t->ndim++] = (int64_t)v;
        if (*end == '\0')
            return NULL;
        if (*end != 'x')
            return "dims are positive integers joined by 'x', not";
        p = end + 1;
    }
}

/* Reads m->path. 0, or 1 with the message written. */
static int read_shapes(struct model *m)
{
    char buf[LINE_MAX_BYTES + 2];
    FILE *f = fopen(m->path, "r");
    int line = 0, rc = 1;

    if (!f) {
        fprintf(stderr, "kvsctl plan: cannot read %s: %s\n", m->path, strerror(errno));
        return 1;
    }
    while (fgets(buf, sizeof buf, f)) {
        char *hash, *name, *dims, *rest, *save = NULL;
        struct tensor t;
        const char *why;

        line++;
        if (!strchr(buf, '\n') && !feof(f)) {
            bad_line(m, line, "a line longer than " STR(LINE_MAX_BYTES) " bytes",
                     NULL);
            goto out;
        }
        if ((hash = strchr(buf, '#')))
            *hash = '\0';
        if (!(name = strtok_r(buf, " \t\r\n", &save)))
            continue;                  /* blank, or a comment */
        dims = strtok_r(NULL, " \t\r\n", &save);
        rest = strtok_r(NULL, " \t\r\n", &save);
        if (!dims) {
            bad_line(m, line, "a tensor needs its dims after its name, as in 'fc.bias 1000':",
                     name);
            goto out;
        }
        if (rest) {
            bad_line(m, line, "NAME DIMS, then nothing but a comment; found", rest);
            goto out;
        }
        if (strlen(name) >= sizeof t.name) {
            bad_line(m, line, "a name longer than " STR(NAME_MAX_BYTES) " bytes",
                     NULL);
            goto out;
        }
        if ((why = parse_dims(dims, &t))) {
            bad_line(m, line, why, dims);
            goto out;
        }
        snprintf(t.name, sizeof t.name, "%s", name);
        if (m->n == m->cap) {
            int cap = m->cap ? 2 * m->cap : 256;
            struct tensor *nt = m->cap < INT_MAX / 2 ? realloc(m->t, sizeof *nt * (size_t)cap)
                                                     : NULL;

            if (!nt) {
                fprintf(stderr, "kvsctl plan: out of memory reading %s\n", m->path);
                goto out;
            }
            m->t = nt;
            m->cap = cap;
        }
        m->t[m->n++] = t;
        if (__builtin_add_overflow(m->values, t.count, &m->values)
            || m->values > UINT64_MAX / 2 / ESIZE) {
            bad_line(m, line, "the tensors' bytes add up to more than this model counts", NULL);
            goto out;
        }
    }
    if (ferror(f)) {
        fprintf(stderr, "kvsctl plan: cannot read %s: %s\n", m->path, strerror(errno));
        goto out;
    }
    if (m->n == 0) {
        fprintf(stderr, "kvsctl plan: %s: no tensors in it (lines of NAME DIMS)\n", m->path);
        goto out;
    }
    rc = 0;
out:
    fclose(f);
    return rc;
}

/* ---- the model --------------------------------------------------------------- */

struct row {
    int hosts, parts;
    uint64_t split, part;              /* the bounds the row was modelled with */
    uint64_t busiest, total_sent;
    double mean, imbalance, round_s, ring_s;
    double wire_s, memory_s;           /* round_s's two terms (memory_s 0 without --memory) */
    double memory_busiest, memory_total;   /* bytes in memory: the busiest host's, all hosts' */
};

/* The bytes a host reads and writes in memory in one round by copy of the
 * whole model (T bytes), owning O of them (payload, no frame heads), with
 * W workers, H hosts; kvsd's path as it is (bench/NOTES.md section 10):
 * - each worker copies its push in and the value out: 4WT;
 * - the W pushes of each part it does not own are summed into a PARTIAL
 *   frame: (W + 1)(T - O);
 * - every frame it receives is copied from the receive buffer into its
 *   payload: the H - 1 sums of each part it owns and the values of the
 *   others, 2((H - 1)O + T - O);
 * - the owner sums its W pushes and the H - 1 sums into the value:
 *   (W + H)O, and copies the value into one VALUE frame for all: 2O;
 * - a value received is copied into the arena: 2(T - O).
 * The kernel's copies of the frames are the wire's, not counted here. */
static double memory_traffic(double t, double o, int w, int h)
{
    double others = t - o;

    return 4.0 * w * t + (w + 1.0) * others + 2.0 * ((h - 1.0) * o + others)
           + (w + (double)h) * o + (h > 1 ? 2.0 * o : 0.0) + 2.0 * others;
}

/* Each host's share of a round of m at nh hosts, into load[nh]. */
static void plan_hosts(const struct model *m, const struct plan_opts *o, int nh,
                       struct load *load, struct row *r)
{
    struct kvs__shard s = KVS__SHARD(nh);
    uint64_t all = 0, all_frames = 0, sum = 0;
    double bytes = (double)m->values * ESIZE;

    memset(load, 0, sizeof *load * (size_t)nh);
    memset(r, 0, sizeof *r);
    for (int h = 0; h < nh; h++)
        load[h].biggest = -1;
    if (o->split_set)
        s.split_bytes = o->split;
    if (o->part_set)
        s.part_bytes = o->part;
    r->hosts = nh;
    r->split = s.split_bytes;
    r->part = s.part_bytes;
    for (int i = 0; i < m->n; i++) {
        const struct tensor *t = &m->t[i];
        kvs_key_t key = KVS_INT_KEY(o->first_key + i);
        struct kvs__wire_msg msg;
        int np = kvs__shard_parts(&s, t->count * ESIZE), owner = kvs__shard_owner(&s, key);
        uint64_t head;

        memset(&msg, 0, sizeof msg);
        msg.key = key;
        msg.ndim = t->ndim;
        head = KVS__WIRE_HEAD + kvs__wire_msg_bytes(&msg);
        r->parts += np;
        for (int p = 0; p < np; p++) {
            int at = kvs__shard_part_owner(&s, owner, np, p);
            uint64_t first, n, b;

            kvs__wire_part(t->count, ESIZE, kvs__wire_row(t->ndim, t->shape), (uint32_t)np,
                           (uint32_t)p, &first, &n);
            b = head + n * ESIZE;
            load[at].own += b;
            load[at].own_data += n * ESIZE;
            load[at].own_frames++;
            if (np > 1)
                load[at].parts++;
            else
                load[at].keys++;
            if (load[at].biggest < 0 || n * ESIZE > load[at].biggest_bytes) {
                load[at].biggest = i;
                load[at].biggest_bytes = n * ESIZE;
            }
            all += b;
            all_frames++;
        }
    }
    for (int h = 0; h < nh; h++) {
        struct load *l = &load[h];
        uint64_t others = all - l->own, others_frames = all_frames - l->own_frames;
        uint64_t fan = (uint64_t)(nh - 1), most;

        /* PARTIAL: its sum of every part it does not own, to that part's
         * owner; the sums of its own parts from every other host. */
        l->sent = others;
        l->frames_sent = others_frames;
        l->recv = fan * l->own;
        l->frames_recv = fan * l->own_frames;
        /* VALUE: its parts' values to every other host; the others' parts'
         * values from their owners. */
        l->sent += fan * l->own;
        l->frames_sent += fan * l->own_frames;
        l->recv += others;
        l->frames_recv += others_frames;
        most = l->sent > l->recv ? l->sent : l->recv;
        if (most > r->busiest)
            r->busiest = most;
        sum += most;
        r->total_sent += l->sent;
        l->memory = memory_traffic(bytes, (double)l->own_data, o->workers, nh);
        if (l->memory > r->memory_busiest)
            r->memory_busiest = l->memory;
        r->memory_total += l->memory;
        /* A link per host: the slowest host's wire and memory, one after
         * the other. */
        if (!o->shared) {
            double wire = (double)most / o->rate;
            double mem = o->mem_rate > 0 ? l->memory / o->mem_rate : 0;

            if (wire + mem > r->round_s) {
                r->round_s = wire + mem;
                r->wire_s = wire;
                r->memory_s = mem;
            }
        }
    }
    r->mean = (double)sum / nh;
    r->imbalance = r->mean > 0 ? (double)r->busiest / r->mean : 0;
    if (o->shared) {
        r->wire_s = (double)r->total_sent / o->rate;
        r->memory_s = o->mem_rate > 0 ? r->memory_total / o->mem_rate : 0;
        r->round_s = r->wire_s + r->memory_s;
        r->ring_s = 2.0 * (nh - 1) * bytes / o->rate;
    } else {
        r->ring_s = 2.0 * (nh - 1) / nh * bytes / o->rate;
    }
}

/* ---- output ------------------------------------------------------------------ */

static void print_head(const struct model *m, const struct plan_opts *o)
{
    printf("model: %s: %d tensors, %" PRIu64 " float32 values (%.1f MiB), keys %" PRId64
           "..%" PRId64 "\n", m->path, m->n, m->values,
           (double)m->values * ESIZE / 1048576.0, o->first_key, o->first_key + m->n - 1);
    if (o->shared)
        printf("link: %s = %.3f GB/s, one link for every host's bytes; round = all hosts' "
               "bytes sent / rate\n", o->link, o->rate / 1e9);
    else
        printf("link: %s = %.3f GB/s for each host, full duplex; round = the busiest host's "
               "max(sent, received) / rate\n", o->link, o->rate / 1e9);
    if (o->split_set)
        printf("split: keys of %" PRIu64 " bytes or more (what if)", o->split);
    else
        printf("split: keys of 2 x %" PRIu64 " / H bytes or more, from %" PRIu64 " to %" PRIu64
               " (kvsd's)", KVS__SPLIT_BYTES, KVS__SPLIT_FLOOR, KVS__SPLIT_BYTES);
    printf(" in parts of at most %" PRIu64 " bytes (%s)\n", o->part_set ? o->part : KVS__PART_BYTES,
           o->part_set ? "what if" : "kvsd's");
    if (o->mem_rate > 0)
        printf("memory: %s = %.3f GB/s read plus written, %d worker%s a host by copy; round = "
               "the wire's time plus the memory's%s\n", o->memory, o->mem_rate / 1e9, o->workers,
               o->workers == 1 ? "" : "s", o->shared ? " (all hosts' bytes)" : "");
    printf("%5s %6s %5s %14s %14s %9s %10s %10s %10s", "HOSTS", "PARTS", "CONNS",
           "BUSIEST_BYTES", "MEAN_BYTES", "IMBALANCE", "ROUND_MS", "RING_MS", "ROUND/RING");
    if (o->mem_rate > 0)
        printf(" %10s %10s", "WIRE_MS", "MEMORY_MS");
    putchar('\n');
}

static void print_ratio(double a, double b, const char *fmt, int width)
{
    if (b > 0)
        printf(fmt, width, a / b);
    else
        printf("%*s", width, "-");
}

static void print_row(const struct model *m, const struct plan_opts *o, const struct row *r,
                      const struct load *load)
{
    printf("%5d %6d %5d %14" PRIu64 " %14.0f ", r->hosts, r->parts, r->hosts - 1, r->busiest,
           r->mean);
    print_ratio((double)r->busiest, r->mean, "%*.3f", 9);
    printf(" %10.3f %10.3f ", r->round_s * 1e3, r->ring_s * 1e3);
    print_ratio(r->round_s, r->ring_s, "%*.3f", 10);
    if (o->mem_rate > 0)
        printf(" %10.3f %10.3f", r->wire_s * 1e3, r->memory_s * 1e3);
    putchar('\n');
    if (!load)
        return;
    printf("  %5s %5s %6s %12s %12s %12s %8s %8s  %s\n", "HOST", "KEYS", "PARTS", "OWNED_BYTES",
           "SENT_BYTES", "RECV_BYTES", "FRAMES>", "FRAMES<", "BIGGEST");
    for (int h = 0; h < r->hosts; h++) {
        const struct load *l = &load[h];

        printf("  %5d %5d %6d %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %8" PRIu64 " %8" PRIu64
               "  %s\n", h, l->keys, l->parts, l->own, l->sent, l->recv, l->frames_sent,
               l->frames_recv, l->biggest >= 0 ? m->t[l->biggest].name : "-");
    }
}

/* A tensor's name as a JSON string (names are the file's bytes: escape
 * what JSON requires). */
static void json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

static void print_json(const struct model *m, const struct plan_opts *o, const struct row *r,
                       const struct load *load)
{
    printf("{\"hosts\": %d, \"tensors\": %d, \"bytes\": %" PRIu64 ", \"parts\": %d, "
           "\"connections_per_host\": %d, \"link_bytes_per_s\": %.17g, \"shared_link\": %s, "
           "\"busiest_bytes\": %" PRIu64 ", \"mean_bytes\": %.17g, \"imbalance\": %.17g, "
           "\"total_bytes_sent\": %" PRIu64 ", \"round_s\": %.17g, \"ring_s\": %.17g, "
           "\"split_bytes\": %" PRIu64 ", \"part_bytes\": %" PRIu64 ", \"wire_s\": %.17g, "
           "\"memory_s\": %.17g, \"memory_bytes_per_s\": %.17g, \"workers\": %d, "
           "\"busiest_memory_bytes\": %.17g, \"total_memory_bytes\": %.17g",
           r->hosts, m->n, m->values * ESIZE, r->parts, r->hosts - 1, o->rate,
           o->shared ? "true" : "false", r->busiest, r->mean, r->imbalance, r->total_sent,
           r->round_s, r->ring_s, r->split, r->part, r->wire_s, r->memory_s, o->mem_rate,
           o->workers, r->memory_busiest, r->memory_total);
    if (load) {
        printf(", \"per_host\": [");
        for (int h = 0; h < r->hosts; h++) {
            const struct load *l = &load[h];

            printf("%s{\"host\": %d, \"keys\": %d, \"parts\": %d, \"owned_bytes\": %" PRIu64
                   ", \"sent_bytes\": %" PRIu64 ", \"recv_bytes\": %" PRIu64
                   ", \"frames_sent\": %" PRIu64 ", \"frames_recv\": %" PRIu64
                   ", \"memory_bytes\": %.17g, \"biggest\": ",
                   h ? ", " : "", h, l->keys, l->parts, l->own, l->sent, l->recv,
                   l->frames_sent, l->frames_recv, l->memory);
            if (l->biggest >= 0)
                json_string(m->t[l->biggest].name);
            else
                printf("null");
            putchar('}');
        }
        putchar(']');
    }
    printf("}\n");
}

int plan_main(int argc, char **argv)
{
    static struct plan_opts o;
    struct model m = { 0 };
    struct load *load = NULL;
    int rc, most = 0;

    if ((rc = plan_options(argc, argv, &o)) >= 0)
        return rc;
    m.path = o.shapes;
    if ((rc = read_shapes(&m)) != 0)
        goto out;
    for (int i = 0; i < o.nhosts; i++)
        most = o.hosts[i] > most ? o.hosts[i] : most;
    if (!(load = calloc((size_t)most, sizeof *load))) {
        fprintf(stderr, "kvsctl plan: out of memory\n");
        rc = 1;
        goto out;
    }
    if (!o.json)
        print_head(&m, &o);
    for (int i = 0; i < o.nhosts; i++) {
        struct row r;

        plan_hosts(&m, &o, o.hosts[i], load, &r);
        if (o.json)
            print_json(&m, &o, &r, o.per_host ? load : NULL);
        else
            print_row(&m, &o, &r, o.per_host ? load : NULL);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kvsctl plan: cannot write: %s\n", strerror(errno));
        rc = 1;
    }
out:
    free(load);
    free(m.t);
    return rc;
}
