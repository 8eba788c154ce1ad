/*
 * kvsd_ctl.c - what kvsrun tells and asks the kvsd that serves the job,
 * over kvsd's control requests (src/proto/ctl.h), as kvsctl does: that a
 * worker ended (gone), so that one that never connected is not waited for
 * until the job's timeout; and, for --stall-timeout, what the requests
 * in kvsd wait for, so that a worker the others have waited on too long
 * is killed and counts as failed.
 *
 * Each exchange is one connection with a deadline (CTL_NS); a kvsd that
 * does not answer costs kvsrun that answer, never its supervision. It
 * signals nothing but the process group of a worker of its own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvsrun.h"
#include "proto/ctl.h"
#include "shm/ring.h"
#include "shm/shm.h"
#include "base/sys.h"

/* One control request to the job's kvsd and its answer into *reply.
 * 0, or -1 when there was none (no kvsd, no answer in time, a refusal). */
static int ask(struct run *r, int command, int rank, int code, struct kvs__ctl_reply *reply)
{
    static unsigned char buf[KVS__CTL_REPLY_MAX];
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    struct kvs__ctl_request q = { .version = KVS__PROTO_VERSION, .command = (uint8_t)command,
                                  .rank = rank, .code = code };
    struct kvs__err e = { 0, "" };
    int64_t deadline = kvs__now_ns() + CTL_NS;
    int s, nfds = 0, rc = -1;
    uid_t uid;
    size_t len;

    if (strlen(r->sock_path) >= sizeof a.sun_path)
        return -1;
    memcpy(a.sun_path, r->sock_path, strlen(r->sock_path) + 1);
    snprintf(q.job, sizeof q.job, "%s", r->o.job);
    s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    /* Non-blocking: a full backlog is no answer, not a wait. */
    if (EINTR_RETRY(connect(s, (const struct sockaddr *)&a, sizeof a)) != 0 && errno != EISCONN)
        goto out;
    if (kvs__sock_peer(s, &uid, NULL, &e) != 0 || uid != geteuid())
        goto out;
    len = kvs__ctl_request_encode(&q, buf);
    if (kvs__sock_send(s, buf, len, NULL, 0, deadline, &e) != 0
        || kvs__sock_recv(s, buf, sizeof buf, &len, NULL, 0, &nfds, deadline, &e) != 0
        || kvs__ctl_reply_decode(buf, len, reply, &e) != 0 || reply->status != 0)
        goto out;
    rc = 0;
out:
    close(s);
    return rc;
}

void tell_gone(struct run *r, int i, int code)
{
    static struct kvs__ctl_reply reply;

    /* Only the kvsd kvsrun started, while it runs: one started by hand
     * may serve further runs of the job, which its slots must still take. */
    if (r->gone_off || !r->kvsd || r->kvsd_done)
        return;
    if (ask(r, KVS__CTL_GONE, r->rank0 + i, code, &reply) != 0 && probe(r->sock_path, NULL))
        r->gone_off = 1;               /* it serves, and did not answer: an older kvsd */
}

/* A line's worth of hash (FNV-1a), to tell one wait from the next. */
static uint32_t hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* One "waiting: ..." line of kvsctl status: the ranks it names after
 * "waiting for rank(s) " are marked as waited on (seen[i]) by what the
 * line says they miss (hash of the text before the counts). */
static void wait_line(struct run *r, const char *line, size_t n, uint32_t *on, char *seen)
{
    static const char tag[] = "waiting for rank";
    const char *p = memmem(line, n, tag, sizeof tag - 1), *end = line + n;
    const char *colon = memchr(line, ':', n);
    uint32_t h;

    if (!p)
        return;
    /* "key 3 round 5: 1 of 2 workers pushed, ...": the round names the
     * wait; the counts change as the others arrive. */
    h = hash(line, colon ? (size_t)(colon - line) : n);
    p += sizeof tag - 1;
    if (p < end && *p == 's')
        p++;
    while (p < end) {
        char *stop;
        long rank;

        while (p < end && (*p == ' ' || *p == ','))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            break;
        rank = strtol(p, &stop, 10);
        if (stop > end)
            break;
        p = stop;
        rank -= r->rank0;
        if (rank >= 0 && rank < r->nstarted) {
            seen[rank] = 1;
            on[rank] = h;
        }
    }
}

/* The killed worker's death is the job's first: the others, failing
 * because it died, must not come before it. Waits GONE_NS at most. */
static void reap_first(struct run *r, pid_t pid)
{
    int64_t deadline = kvs__now_ns() + GONE_NS;
    int st;

    for (;;) {
        pid_t p = waitpid(pid, &st, WNOHANG);

        if (p == pid) {
            child_ended(r, p, st);
            return;
        }
        if (p < 0 || kvs__now_ns() >= deadline)
            return;
        usleep(1000);
    }
}

void stall_check(struct run *r)
{
    static struct kvs__ctl_reply reply;
    static uint32_t on[MAX_WORKERS];
    static char seen[MAX_WORKERS];
    int64_t now;
    const char *p;

    if (!r->kvsd_up && r->kvsd)
        return;                        /* kvsd is between lives */
    if (ask(r, KVS__CTL_STATUS, 0, 0, &reply) != 0)
        return;
    memset(seen, 0, sizeof seen);
    for (p = reply.text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);

        if (n > 9 && memcmp(p, "waiting: ", 9) == 0)
            wait_line(r, p + 9, n - 9, on, seen);
        p += n + (nl != NULL);
    }
    now = kvs__now_ns();
    for (int i = 0; i < r->nstarted; i++) {
        struct worker *w = &r->w[i];

        if (w->done || !seen[i]) {
            w->waited_since = 0;
            continue;
        }
        if (!w->waited_since || w->waited_on != on[i]) {
            w->waited_since = now;
            w->waited_on = on[i];
            continue;
        }
        if (now - w->waited_since >= r->o.stall_ns) {
            fprintf(stderr, "kvsrun: rank %d (pid %ld) stalled: the others have waited on it "
                    "for %.1f s; killing it\n", i, (long)w->pid,
                    (double)(now - w->waited_since) / SEC_NS);
            kill(-w->pid, SIGKILL);
            w->waited_since = 0;
            reap_first(r, w->pid);
        }
    }
}
