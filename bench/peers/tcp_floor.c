/*
 * tcp_floor.c - the floor of scripts/bench's rounds across hosts: how long
 * two processes take to move S bytes over one TCP connection when that is
 * all they do. Built by scripts/bench; not part of the kvs build.
 *
 *   tcp_floor [--sizes LIST] [--resnet] [--seconds S] [--min-reps M]
 *             [--timeout S] [--name NAME]
 *       listens on 127.0.0.1, forks the other end, which connects: both
 *       ends on this machine, over loopback.
 *   tcp_floor --listen ADDR:PORT [the options above]
 *   tcp_floor --connect ADDR:PORT [--timeout S]
 *       one end each, started apart (in two network namespaces, say). The
 *       listening end leads: it picks the cases and prints the rows; the
 *       connecting end follows what it is sent.
 *
 * Two cases per size, each timed at the leading end, rep by rep:
 *   NAME        both ways at once: the leader starts sending S bytes, the
 *               follower starts sending its own S as soon as the first
 *               bytes arrive, and the rep ends when the leader has sent
 *               all of its S and received all of the follower's. About a
 *               round trip plus S each way at once: what a round across two
 *               hosts must at least take, each host sending and receiving
 *               its S bytes (bench/NOTES.md, section 10).
 *   NAME-1way   the leader sends S bytes, the follower answers one byte
 *               once it has them all.
 * --resnet adds a case "resnet50" of the ResNet-50 step's bytes
 * (../resnet50_sizes.h) as one transfer. The harness is round.h's rule:
 * 3 untimed reps, then at least min_reps and about S seconds, the median;
 * CPU per rep is both ends' CPU time, summed. Rows as round.h prints them,
 * with 2 (the ends) as the worker count. Each case runs twice, the ends
 * sleeping in poll when they wait and the ends spinning, and the row is
 * the faster of the two (idle_wait says why).
 *
 * Every wait (accept, connect, each poll, the forked end's exit) gives up
 * after --timeout seconds (default 60) and ends the program with status 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "round.h"
#include "resnet50_sizes.h"

#define DEFAULT_SIZES "4K,256K,4M,64M"
#define MAX_BYTES     ((uint64_t)1 << 30)

enum { KIND_END = 0, KIND_BOTH = 1, KIND_ONEWAY = 2 };

static int timeout_ms = 60000;

static void fail(const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", rh_who, what, strerror(errno));
    exit(1);
}

static void stuck(const char *what)
{
    fprintf(stderr, "%s: %s: nothing for %d s\n", rh_who, what, timeout_ms / 1000);
    exit(1);
}

/* Waits in poll until fd is ready for ev, at most timeout_ms; returns
 * revents. */
static short wait_fd(int fd, short ev, const char *what)
{
    struct pollfd p = { .fd = fd, .events = ev };

    for (;;) {
        int r = poll(&p, 1, timeout_ms);

        if (r > 0)
            return p.revents;
        if (r == 0)
            stuck(what);
        if (errno != EINTR)
            fail("poll");
    }
}

/* How an end waits for the other: spinning (the calls tried again at
 * once) or sleeping in poll. Which is faster depends on where the
 * scheduler puts the two ends: spinning keeps a wake-up out of a small
 * rep's time when each end has a core, as Open MPI's ranks do, but holds
 * the core when the other end, or the kernel's network work, was put on
 * it. Each case runs both ways; the faster is the floor. */
static int spinning;

struct idle {
    int waiting;
    double since;
};

static void idle_wait(struct idle *d, int fd, short ev, const char *what)
{
    if (!spinning) {
        wait_fd(fd, ev, what);
        return;
    }
    if (!d->waiting) {
        d->waiting = 1;
        d->since = rh_now();
    } else if (rh_now() - d->since > timeout_ms / 1000.0) {
        stuck(what);
    }
}

/* Waits until the other end's next bytes are there. */
static void wait_in(int fd, const char *what)
{
    struct idle d = { 0 };
    char c;

    while (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            fail("recv");
        idle_wait(&d, fd, POLLIN, what);
    }
}

/* Sends out bytes of sbuf while receiving in bytes into rbuf, on a
 * non-blocking socket; either may be 0. Tries both calls and, when neither
 * moved, waits (idle_wait). */
static void xfer(int fd, const char *sbuf, size_t out, char *rbuf, size_t in)
{
    size_t sent = 0, got = 0;
    struct idle d = { 0 };

    while (sent < out || got < in) {
        int moved = 0;

        if (got < in) {
            ssize_t n = recv(fd, rbuf + got, in - got, 0);

            if (n > 0) {
                got += (size_t)n;
                moved = 1;
            } else if (n == 0) {
                fprintf(stderr, "%s: the other end closed the connection\n", rh_who);
                exit(1);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                fail("recv");
            }
        }
        if (sent < out) {
            ssize_t n = send(fd, sbuf + sent, out - sent, MSG_NOSIGNAL);

            if (n > 0) {
                sent += (size_t)n;
                moved = 1;
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                fail("send");
            }
        }
        if (moved)
            d.waiting = 0;
        else if (sent < out || got < in)
            idle_wait(&d, fd, (short)((sent < out ? POLLOUT : 0) | (got < in ? POLLIN : 0)),
                      "transfer");
    }
}

static void put_u64(int fd, uint64_t v)
{
    unsigned char b[8];

    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    xfer(fd, (const char *)b, sizeof b, NULL, 0);
}

static uint64_t get_u64(int fd)
{
    unsigned char b[8];
    uint64_t v = 0;

    xfer(fd, NULL, 0, (char *)b, sizeof b);
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static void put_double(int fd, double d)
{
    uint64_t v;

    memcpy(&v, &d, sizeof v);
    put_u64(fd, v);
}

static double get_double(int fd)
{
    uint64_t v = get_u64(fd);
    double d;

    memcpy(&d, &v, sizeof d);
    return d;
}

static void set_options(int fd)
{
    int one = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        fail("TCP_NODELAY");
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
        fail("O_NONBLOCK");
}

/* "10.0.0.1:47470" into *sa. Returns 0, or -1. */
static int parse_addr(const char *s, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    char *end;
    unsigned long port;

    if (colon == NULL || (size_t)(colon - s) >= sizeof host)
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    errno = 0;
    port = strtoul(colon + 1, &end, 10);
    if (errno || *end != '\0' || end == colon + 1 || port > 65535)
        return -1;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int listen_on(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

    if (fd < 0)
        fail("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)sa, sizeof *sa) != 0)
        fail("bind");
    if (listen(fd, 1) != 0)
        fail("listen");
    return fd;
}

static int accept_one(int lfd)
{
    int fd;

    wait_fd(lfd, POLLIN, "accept");
    fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        fail("accept");
    close(lfd);
    set_options(fd);
    return fd;
}

/* Connects, retrying while nobody listens yet, for timeout_ms in all. */
static int connect_to(const struct sockaddr_in *sa)
{
    double deadline = rh_now() + timeout_ms / 1000.0;

    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
        socklen_t len = sizeof err;

        if (fd < 0)
            fail("socket");
        if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0)
            err = 0;
        else if (errno != EINPROGRESS)
            err = errno;
        else if ((wait_fd(fd, POLLOUT, "connect") & POLLOUT) == 0
                 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = err ? err : ECONNREFUSED;
        if (err == 0) {
            set_options(fd);
            return fd;
        }
        close(fd);
        if ((err != ECONNREFUSED && err != ENETUNREACH) || rh_now() > deadline) {
            errno = err;
            fail("connect");
        }
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

static char *buffer(size_t bytes, int seed)
{
    char *p = rh_alloc(bytes);

    for (size_t i = 0; i < bytes; i++)          /* touches every page, too */
        p[i] = (char)((i * 31 + (size_t)seed) & 0xff);
    return p;
}

/* A received buffer holds the sender's pattern: checked on the untimed
 * reps only, at three places, to catch a stream out of step. */
static void check(const char *r, size_t bytes, int seed)
{
    size_t at[3] = { 0, bytes / 2, bytes - 1 };

    for (int i = 0; i < 3; i++)
        if (r[at[i]] != (char)((at[i] * 31 + (size_t)seed) & 0xff)) {
            fprintf(stderr, "%s: WRONG BYTE at %zu of %zu\n", rh_who, at[i], bytes);
            exit(1);
        }
}

/* One rep at the leading end: S bytes both ways at once, or S out and
 * the follower's one byte back. */
static void lead_rep(int fd, int kind, const char *s, char *r, size_t bytes)
{
    if (kind == KIND_BOTH) {
        xfer(fd, s, bytes, r, bytes);
    } else {
        xfer(fd, s, bytes, NULL, 0);
        xfer(fd, NULL, 0, r, 1);
    }
}

/* One case at the leading end, the ends waiting as `spin` says; fills
 * *res. Before each batch of reps the follower is told how many. */
static void lead_case(int fd, int kind, size_t bytes, int spin, const struct rh_opts *o,
                      struct rh_result *res)
{
    size_t rbytes = kind == KIND_BOTH ? bytes : 1;
    char *s = buffer(bytes, 1), *r = buffer(rbytes, 0);
    double *t = rh_alloc(sizeof(double) * RH_MAX_REPS), cpu = 0.0, start;
    long reps = 0, more;

    put_u64(fd, (uint64_t)kind);
    put_u64(fd, (uint64_t)bytes);
    put_u64(fd, (uint64_t)spin);
    spinning = spin;
    for (int w = 0; w < RH_WARMUP; w++) {          /* the follower counts these itself */
        lead_rep(fd, kind, s, r, bytes);
        check(r, rbytes, 2);
    }
    start = rh_now();
    while ((more = rh_more(o, reps, rh_now() - start)) > 0) {
        put_u64(fd, (uint64_t)more);
        for (long end = reps + more; reps < end; reps++) {
            double c0 = rh_cpu(), t0 = rh_now();

            lead_rep(fd, kind, s, r, bytes);
            t[reps] = rh_now() - t0;
            cpu += rh_cpu() - c0;
        }
    }
    put_u64(fd, 0);
    res->reps = reps;
    res->median_s = rh_median(t, reps);
    res->cpu_s = (cpu + get_double(fd)) / (double)reps;
    res->aux_cpu_s = NAN;
    res->compute_us = 0;
    free(t);
    free(r);
    free(s);
}

/* The following end: does what the leader's headers say until KIND_END. */
static void follow(int fd)
{
    for (;;) {
        uint64_t kind = get_u64(fd), bytes, spin;
        char *s, *r;
        double cpu = 0.0;
        long round = 0;

        if (kind == KIND_END)
            return;
        bytes = get_u64(fd);
        spin = get_u64(fd);
        if ((kind != KIND_BOTH && kind != KIND_ONEWAY) || bytes == 0 || bytes > MAX_BYTES
            || spin > 1) {
            fprintf(stderr, "%s: a bad case from the other end\n", rh_who);
            exit(1);
        }
        spinning = (int)spin;
        s = buffer(kind == KIND_BOTH ? (size_t)bytes : 1, 2);
        r = buffer((size_t)bytes, 0);
        for (uint64_t more = RH_WARMUP; more > 0; ) {
            if (more > (uint64_t)RH_MAX_REPS) {
                fprintf(stderr, "%s: a bad count from the other end\n", rh_who);
                exit(1);
            }
            for (uint64_t i = 0; i < more; i++, round++) {
                double c0;

                /* Start only once the leader has: its clock is running. */
                wait_in(fd, "the next rep");
                c0 = rh_cpu();
                if (kind == KIND_BOTH) {
                    xfer(fd, s, (size_t)bytes, r, (size_t)bytes);
                } else {
                    xfer(fd, NULL, 0, r, (size_t)bytes);
                    xfer(fd, s, 1, NULL, 0);
                }
                if (round < RH_WARMUP)
                    check(r, (size_t)bytes, 1);
                else
                    cpu += rh_cpu() - c0;
            }
            more = get_u64(fd);
        }
        put_double(fd, cpu);
        free(r);
        free(s);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: tcp_floor [--listen ADDR:PORT | --connect ADDR:PORT] [--sizes LIST]"
            " [--resnet] [--seconds S] [--min-reps M] [--timeout S] [--name NAME]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct rh_opts o = { .seconds = 1.0, .min_reps = 10 };
    const char *sizes_arg = DEFAULT_SIZES, *listen_arg = NULL, *connect_arg = NULL;
    const char *name = "floor";
    size_t sizes[RH_MAX_SIZES + 1];
    int nsizes, resnet = 0, fd;
    double timeout_s = 60.0;
    struct sockaddr_in sa;
    pid_t child = -1;
    char oneway[64];

    rh_who = "tcp_floor";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--resnet") == 0)
            resnet = 1;
        else if (v == NULL)
            usage();
        else if (rh_opt(&o, &sizes_arg, a, v))
            i++;
        else if (strcmp(a, "--timeout") == 0)
            timeout_s = atof(argv[++i]);
        else if (strcmp(a, "--name") == 0)
            name = argv[++i];
        else if (strcmp(a, "--listen") == 0)
            listen_arg = argv[++i];
        else if (strcmp(a, "--connect") == 0)
            connect_arg = argv[++i];
        else
            usage();
    }
    nsizes = rh_parse_sizes(sizes_arg, sizes, RH_MAX_SIZES);
    if (nsizes < 0 || !rh_opts_ok(&o) || !(timeout_s >= 1 && timeout_s <= 3600)
        || (listen_arg && connect_arg) || strlen(name) > 40) {
        fprintf(stderr, "tcp_floor: bad arguments\n");
        return 2;
    }
    if (o.compute_us != 0) {
        fprintf(stderr, "tcp_floor: --compute-us is not for the floor (its reps have no barrier "
                "to compute after)\n");
        return 2;
    }
    timeout_ms = (int)(timeout_s * 1000);
    snprintf(oneway, sizeof oneway, "%s-1way", name);
    if (resnet)
        sizes[nsizes++] = (size_t)RESNET50_NVALUES * sizeof(float);

    if (connect_arg) {
        if (parse_addr(connect_arg, &sa) != 0)
            usage();
        fd = connect_to(&sa);
        follow(fd);
        close(fd);
        return 0;
    }
    if (listen_arg) {
        if (parse_addr(listen_arg, &sa) != 0)
            usage();
        fd = accept_one(listen_on(&sa));
    } else {
        socklen_t len = sizeof sa;
        int lfd;

        parse_addr("127.0.0.1:0", &sa);
        lfd = listen_on(&sa);
        if (getsockname(lfd, (struct sockaddr *)&sa, &len) != 0)
            fail("getsockname");
        fflush(stdout);
        child = fork();
        if (child < 0)
            fail("fork");
        if (child == 0) {
            close(lfd);
            rh_who = "tcp_floor (the forked end)";
            fd = connect_to(&sa);
            follow(fd);
            close(fd);
            _exit(0);
        }
        fd = accept_one(lfd);
    }

    for (int k = 0; k < nsizes; k++) {
        const char *cas = resnet && k == nsizes - 1 ? "resnet50" : "allreduce";

        for (int kind = KIND_BOTH; kind <= KIND_ONEWAY; kind++) {
            struct rh_result r, spun;

            lead_case(fd, kind, sizes[k], 0, &o, &r);
            lead_case(fd, kind, sizes[k], 1, &o, &spun);
            rh_print(cas, kind == KIND_BOTH ? name : oneway, 2, (double)sizes[k],
                     spun.median_s < r.median_s ? &spun : &r);
        }
    }
    put_u64(fd, KIND_END);
    close(fd);

    if (child > 0) {
        double deadline = rh_now() + timeout_s;
        int st;
        pid_t w;

        while ((w = waitpid(child, &st, WNOHANG)) == 0 && rh_now() < deadline) {
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        if (w == 0) {
            kill(child, SIGKILL);
            waitpid(child, &st, 0);
            fprintf(stderr, "tcp_floor: the forked end did not exit in %.0f s\n", timeout_s);
            return 1;
        }
        if (w < 0)
            fail("waitpid");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "tcp_floor: the forked end failed\n");
            return 1;
        }
    }
    return 0;
}
