/*
 * join.c - the mesh of a job's hosts: on the main thread, before any
 * worker is served, one authenticated connection to every other host.
 *
 * Host 0 listens at the job's coordinator address and takes one
 * connection per other host; each must pass the handshake (handshake.h:
 * the job's secret, within a short deadline; anything else is dropped and
 * said) and then says where it listens itself (JOIN). Once every host has
 * joined, host 0 sends each the roster: every host's address and number of
 * workers. Then host r connects to hosts 1..r-1 and takes the connections
 * of hosts r+1..n-1, each authenticated the same way.
 *
 * In a job that recovers, a join also offers the steps of the snapshots
 * the host holds whole (d->held_steps), and host 0's roster names the
 * newest step every host holds (d->agreed_step, -1: none), which each
 * host restores: a roll back anywhere ends every host's kvsd, and their
 * successors meet here again. Only one connection
 * is in a handshake at a time and the listen backlog is short, so a port
 * scan or an idle connection costs a bounded wait and holds nothing. The
 * listener closes once the mesh is whole: no connection is taken later.
 *
 * It hands the connections to hosts.c, which moves frames over them; it
 * must never read or write a connection after the join, nor keep one.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "join.h"

#include "net/auth.h"
#include "net/handshake.h"
#include "shm/ring.h"
#include "net/tcp.h"
#include "proto/wire.h"

#define SEC_NS          1000000000ll
#define SHAKE_NS        (2 * SEC_NS)   /* an incoming connection's handshake, at most */
#define LISTEN_BACKLOG  8

static int is_loopback(const char *addr)
{
    return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0
           || strcmp(addr, "localhost") == 0;
}

/* HOST:PORT (HOST may be [v6]) into host and port. */
static int split_hostport(const char *s, char *host, size_t size, uint16_t *port,
                          struct kvs__err *e)
{
    const char *colon = strrchr(s, ':'), *h = s;
    size_t hl;
    char *end;
    long p;

    if (!colon)
        return kvs__fail(e, KVS_EBADARG, "coordinator '%s' is not HOST:PORT", s);
    hl = (size_t)(colon - s);
    if (hl >= 2 && s[0] == '[' && colon[-1] == ']') {
        h = s + 1;
        hl -= 2;
    }
    p = strtol(colon + 1, &end, 10);
    if (hl == 0 || hl >= size || *end || end == colon + 1 || p < 1 || p > 65535)
        return kvs__fail(e, KVS_EBADARG, "coordinator '%s' is not HOST:PORT with a port in "
                         "1..65535", s);
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return 0;
}

/* The numeric address of fd's peer. */
static void peer_addr(int fd, char *out, size_t size)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;

    out[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0)
        return;
    if (sa.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, out, (socklen_t)size);
    else if (sa.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, out, (socklen_t)size);
}

/* What a join's steps share. */
struct joining {
    const struct daemon *d;
    const struct kvs__secret *sec;
    struct kvs__host_id me;
    int64_t deadline;
    int lfd;                           /* where this host takes the others' links */
    struct kvs__wire_place *roster;    /* [hosts] */
    unsigned char *rbuf;               /* the roster's frame, of rbytes */
    size_t rbytes;
    int n, rank;                       /* the job's hosts, and this one's rank */
    struct join_peer *peers;           /* [n] */
    int64_t common[KVS__WIRE_JOIN_STEPS];  /* host 0: the steps every host joined so */
    int ncommon;                       /* far holds */
};

/* Host 0: the steps held keep those the join jn also offers. */
static void keep_common(struct joining *j, const struct kvs__wire_join *jn)
{
    int k = 0;

    for (int i = 0; i < j->ncommon; i++)
        for (uint32_t t = 0; t < jn->nsteps; t++)
            if (jn->steps[t] == j->common[i]) {
                j->common[k++] = j->common[i];
                break;
            }
    j->ncommon = k;
}

/* Host 0: what a host's join offered, said (kvsd's log): its restarts, and
 * the steps of the snapshots it holds. */
static void say_held(const struct daemon *d, uint32_t from, const struct kvs__wire_join *jn)
{
    char steps[32 * KVS__WIRE_JOIN_STEPS] = "";
    size_t o = 0;

    for (uint32_t i = 0; i < jn->nsteps; i++)
        o += (size_t)snprintf(steps + o, sizeof steps - o, "%s%lld", i ? ", " : "",
                              (long long)jn->steps[i]);
    say(d, "host %u joined: generation %u, holding the commits of step%s %s", (unsigned)from,
        (unsigned)jn->generation, jn->nsteps == 1 ? "" : "s", jn->nsteps ? steps : "(none)");
}

/* Host 0: the newest step every host holds, -1 for none. */
static int64_t agreed(const struct joining *j)
{
    int64_t best = -1;

    for (int i = 0; i < j->ncommon; i++)
        if (j->common[i] > best)
            best = j->common[i];
    return best;
}

/* At host 0, the join frame that follows a handshake (from, of nw
 * workers, at addr), into the roster. */
static int take_join(struct joining *j, int fd, uint32_t from, uint32_t nw, const char *addr,
                     int64_t shake, struct kvs__err *why)
{
    unsigned char p[256];
    struct kvs__wire_join jn;
    size_t len;
    uint32_t again;
    int rc;

    if ((rc = kvs__frame_read(fd, (uint32_t)j->n, KVS__FRAME_JOIN, p, sizeof p, &len,
                              &again, shake, why)) == 0
        && (rc = kvs__wire_join_decode(p, len, &jn, why)) == 0 && again != from)
        rc = kvs__fail(why, KVS_EPROTO, "a join of host %u from host %u",
                       (unsigned)again, (unsigned)from);
    if (rc == 0) {
        if (jn.generation || jn.nsteps)
            say_held(j->d, from, &jn);
        keep_common(j, &jn);
        j->roster[from].nworkers = nw;
        j->roster[from].port = jn.port;
        snprintf(j->roster[from].addr, sizeof j->roster[from].addr, "%s",
                 jn.addr[0] ? jn.addr : addr);
    }
    return rc;
}

/* Takes connections on the listener until one passes the handshake (and,
 * at host 0, sends its join) from a host not linked yet that should
 * connect here; the rest are dropped and said. -ETIMEDOUT at the join's
 * deadline. */
static int take_one(struct daemon *d, struct joining *j, struct kvs__err *e)
{
    for (;;) {
        struct kvs__err why = { 0, "" };
        char addr[KVS__ADDR_MAX];
        uint32_t from = 0, nw = 0;
        int fd, rc;
        int64_t shake;

        if ((rc = kvs__tcp_accept(j->lfd, j->deadline, &fd, e)) != 0)
            return rc;
        peer_addr(fd, addr, sizeof addr);
        shake = kvs__now_ns() + SHAKE_NS;
        rc = kvs__handshake_server(fd, j->sec, &j->me, shake < j->deadline ? shake : j->deadline,
                                   &from, &nw, &why);
        if (rc == 0 && (from < (uint32_t)(j->rank == 0 ? 1 : j->rank + 1)
                        || j->peers[from].fd >= 0))
            rc = kvs__fail(&why, KVS_EPROTO, "host %u is linked already, or should connect "
                           "the other way", (unsigned)from);
        if (rc == 0 && j->rank == 0)
            rc = take_join(j, fd, from, nw, addr, shake, &why);
        if (rc != 0) {
            say(d, "dropped a connection from %s: %s", addr[0] ? addr : "an unknown address",
                why.msg);
            close(fd);
            continue;
        }
        j->peers[from].fd = fd;
        j->peers[from].nworkers = nw;
        snprintf(j->peers[from].name, sizeof j->peers[from].name, "host %u (%s)",
                 (unsigned)from, addr);
        return 0;
    }
}

/* A join that failed with rc: a timeout names the hosts that did not come. */
static int join_failed(struct daemon *d, const struct joining *j, int rc, struct kvs__err *e)
{
    char who[256] = "", why[sizeof e->msg];
    size_t o = 0;

    if (rc != -ETIMEDOUT)
        return rc;
    snprintf(why, sizeof why, "%s", e->msg);   /* e->msg is rewritten below */
    for (int i = 0; i < j->n && o + 16 < sizeof who; i++)
        if (i != j->rank && j->peers[i].fd < 0)
            o += (size_t)snprintf(who + o, sizeof who - o, "%s%d", o ? ", " : "", i);
    return kvs__fail(e, -ETIMEDOUT, "the job's hosts did not all join within %lld s "
                     "(coordinator %s; host%s %s missing)%s%s",
                     (long long)(d->o.join_ns / SEC_NS), d->o.coord,
                     strchr(who, ',') ? "s" : "", who, why[0] ? ": " : "", why);
}

/* Host 0 takes every other host's join, then sends them all the roster. */
static int join_host0(struct daemon *d, struct joining *j, struct kvs__err *e)
{
    int rc;

    for (int i = 1; i < j->n; i++)
        if ((rc = take_one(d, j, e)) != 0)
            return join_failed(d, j, rc, e);
    d->agreed_step = agreed(j);
    kvs__wire_roster_encode(j->roster, (uint32_t)j->n, d->agreed_step, j->rbuf);
    for (int i = 1; i < j->n; i++)
        if ((rc = kvs__frame_write(j->peers[i].fd, KVS__FRAME_ROSTER, 0, j->rbuf, j->rbytes,
                                   j->deadline, e)) != 0)
            return rc;
    return 0;
}

/* Any other host joins at host 0 (chost:cport), telling it the port it
 * listens on, and takes the roster. */
static int join_at_host0(struct daemon *d, struct joining *j, const char *chost,
                         uint16_t cport, uint16_t port, struct kvs__err *e)
{
    struct kvs__wire_join jn = { .port = port, .generation = (uint32_t)d->o.generation,
                                 .nsteps = (uint32_t)d->nheld };
    char addr[KVS__ADDR_MAX];
    unsigned char p[256];
    size_t len;
    uint32_t from;
    int fd, rc;

    memcpy(jn.steps, d->held_steps, sizeof jn.steps[0] * (size_t)d->nheld);
    if (d->o.bind && strcmp(d->o.bind, "0.0.0.0") != 0 && strcmp(d->o.bind, "::") != 0)
        snprintf(jn.addr, sizeof jn.addr, "%s", d->o.bind);
    if ((rc = kvs__tcp_connect(chost, cport, j->deadline, &fd, e)) != 0)
        return join_failed(d, j, rc, e);
    j->peers[0].fd = fd;
    peer_addr(fd, addr, sizeof addr);
    snprintf(j->peers[0].name, sizeof j->peers[0].name, "host 0 (%s)", addr);
    kvs__wire_join_encode(&jn, p);
    if ((rc = kvs__handshake_client(fd, j->sec, &j->me, 0, j->deadline, e)) != 0
        || (rc = kvs__frame_write(fd, KVS__FRAME_JOIN, (uint32_t)j->rank, p,
                                  kvs__frame_payload_bytes(KVS__FRAME_JOIN), j->deadline,
                                  e)) != 0
        || (rc = kvs__frame_read(fd, (uint32_t)j->n, KVS__FRAME_ROSTER, j->rbuf, j->rbytes,
                                 &len, &from, j->deadline, e)) != 0
        || (rc = kvs__wire_roster_decode(j->rbuf, len, (uint32_t)j->n, j->roster,
                                         &d->agreed_step, e)) != 0)
        return join_failed(d, j, rc, e);
    if (j->roster[j->rank].nworkers != (uint32_t)d->o.nworkers)
        return kvs__fail(e, KVS_EPROTO, "host 0's roster gives this host %u workers, not %d",
                         (unsigned)j->roster[j->rank].nworkers, d->o.nworkers);
    j->peers[0].nworkers = j->roster[0].nworkers;
    return 0;
}

/* Any other host joins at host 0, connects to the hosts of lower rank and
 * takes the links of those above. */
static int join_other(struct daemon *d, struct joining *j, const char *chost, uint16_t cport,
                      uint16_t port, struct kvs__err *e)
{
    int fd, rc;

    if ((rc = join_at_host0(d, j, chost, cport, port, e)) != 0)
        return rc;
    for (int i = 1; i < j->rank; i++) {
        struct join_peer *p = &j->peers[i];

        if ((rc = kvs__tcp_connect(j->roster[i].addr, j->roster[i].port, j->deadline, &fd,
                                   e)) != 0)
            return join_failed(d, j, rc, e);
        p->fd = fd;
        p->nworkers = j->roster[i].nworkers;
        snprintf(p->name, sizeof p->name, "host %d (%s)", i, j->roster[i].addr);
        if ((rc = kvs__handshake_client(fd, j->sec, &j->me, (uint32_t)i, j->deadline, e)) != 0)
            return join_failed(d, j, rc, e);
    }
    for (int i = j->rank + 1; i < j->n; i++)
        if ((rc = take_one(d, j, e)) != 0)
            return join_failed(d, j, rc, e);
    return 0;
}

/* Where this host listens (*bind) and host 0 is (chost:cport), checked:
 * without a secret file, loopback only: the job's own secret is on this
 * machine alone (net/auth.h). */
static int join_where(struct daemon *d, char *chost, size_t size, uint16_t *cport,
                      const char **bind, struct kvs__err *e)
{
    int rc;

    if ((rc = split_hostport(d->o.coord, chost, size, cport, e)) != 0)
        return rc;
    *bind = d->o.bind ? d->o.bind : d->o.secret_file ? "0.0.0.0" : "127.0.0.1";
    if (!d->o.secret_file && (!is_loopback(*bind) || !is_loopback(chost)))
        return kvs__fail(e, KVS_EBADARG, "without a secret file (--secret-file) hosts link over "
                         "loopback only: '%s' is not", is_loopback(*bind) ? chost : *bind);
    return 0;
}

/* The job's workers, from the roster: this host's first global rank, and
 * their total. */
static int join_ranks(struct daemon *d, const struct joining *j, struct kvs__err *e)
{
    d->rank0 = 0;
    d->total = 0;
    for (int i = 0; i < j->n; i++) {
        if (i < j->rank)
            d->rank0 += (int)j->roster[i].nworkers;
        d->total += (int)j->roster[i].nworkers;
    }
    if (d->total > MAX_WORKERS)
        return kvs__fail(e, KVS_EBADARG, "the job's hosts run %d workers; at most %d",
                         d->total, MAX_WORKERS);
    return 0;
}

int join_mesh(struct daemon *d, const struct kvs__secret *sec, struct join_peer *peers,
              struct kvs__err *e)
{
    int n = d->o.nhosts, rank = d->o.host;
    struct joining j = { d, sec, { d->o.net_job, (uint32_t)rank, (uint32_t)n,
                                (uint32_t)d->o.nworkers },
                         kvs__now_ns() + d->o.join_ns, -1,
                         calloc((size_t)n, sizeof *j.roster), NULL,
                         kvs__wire_roster_bytes((uint32_t)n), n, rank, peers, { 0 }, 0 };
    char chost[256];
    const char *bind;
    uint16_t cport = 0, port = 0;
    int rc;

    j.ncommon = d->nheld;
    memcpy(j.common, d->held_steps, sizeof j.common[0] * (size_t)d->nheld);
    d->agreed_step = -1;
    j.rbuf = malloc(j.rbytes);
    if (!j.roster || !j.rbuf) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = join_where(d, chost, sizeof chost, &cport, &bind, e)) != 0)
        goto out;
    if (rank == 0)
        port = cport;
    if ((rc = kvs__tcp_listen(bind, &port, LISTEN_BACKLOG, &j.lfd, e)) != 0)
        goto out;
    j.roster[rank].nworkers = (uint32_t)d->o.nworkers;
    rc = rank == 0 ? join_host0(d, &j, e) : join_other(d, &j, chost, cport, port, e);
    if (rc == 0)
        rc = join_ranks(d, &j, e);
out:
    if (j.lfd >= 0)
        close(j.lfd);
    free(j.roster);
    free(j.rbuf);
    return rc;
}
