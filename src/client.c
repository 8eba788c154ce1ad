/*
 * client.c - the worker side of the dist store types: connects to the job's
 * kvsd, maps the segments it hands over, and turns each API call into
 * request slots on the worker's ring, then waits for their completions.
 * Pulls copy values straight out of the read-only arena, or hand out
 * pointers to them (views). Zero-copy buffers live at the top of the
 * staging area; pushes of them are sent by offset, without a copy.
 *
 * It never trusts what it reads from shared memory: completions are decoded
 * and checked (proto.c), ring indices are checked (ring.c), arena ranges
 * are checked against the arena's size. Every wait has a deadline
 * (KVS_OPT_TIMEOUT_MS), and kvsd's death is noticed within a wait slice.
 * Once a wait fails for a reason that leaves requests in flight (timeout,
 * kvsd gone, a peer dead, a protocol error), the handle is broken: every
 * later call returns the same error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "array.h"
#include "bufs.h"
#include "compress.h"
#include "front.h"
#include "layout.h"
#include "optim.h"
#include "proto.h"
#include "ring.h"
#include "shm.h"

#define WAIT_SLICE_NS   (100 * 1000000ll)   /* how often a wait checks that kvsd lives */
#define SPIN_NS         (20 * 1000ll)       /* spin before sleeping: half a futex wake-up */
#define CONNECT_WAIT_NS (10 * 1000000000ll) /* handshake deadline */

struct kvs__client {
    int sock;
    char job[KVS__JOB_MAX + 1];
    void *ctl, *seg;
    const unsigned char *arena;
    size_t ctl_size, seg_size, arena_size;
    struct kvs__bell *dbell, *wbell;
    struct kvs__ring sq, cq;
    unsigned char *staging;
    uint64_t staging_size;
    struct kvs__bufs bufs;             /* kvs_array_alloc's, as staging offsets */
    int sync;                          /* dist_sync (views allowed) */
    uint64_t next_seq;
    int broken;                        /* 0, or the error every call now returns */
    char broken_msg[KVS__ERR_MSG_MAX];
};

/* ---- environment ------------------------------------------------------ */

/* 1 and *out when the variable is set to an integer in [lo, hi], 0 when
 * unset, KVS_EBADARG when set to anything else. */
static int env_int(const char *name, long lo, long hi, int *out, struct kvs__err *e)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (!s || !*s)
        return 0;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return kvs__fail(e, KVS_EBADARG, "%s=%s is not an integer in [%ld, %ld]", name, s,
                         lo, hi);
    *out = (int)v;
    return 1;
}

/* Rank and size from kvsrun's variables, else Open MPI's, PMI's, Slurm's. */
static int job_env(kvs_t *kv, char *job, struct kvs__err *e)
{
    static const char *const vars[][2] = {
        { "KVS_RANK", "KVS_NUM_WORKERS" },
        { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
        { "PMI_RANK", "PMI_SIZE" },
        { "SLURM_PROCID", "SLURM_NTASKS" },
    };
    const char *j = getenv("KVS_JOB");
    int rank = 0, size = 1, rc;

    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int r = 0, s = 1, hr, hs;

        if ((hr = env_int(vars[i][0], 0, 1023, &r, e)) < 0)
            return hr;
        if ((hs = env_int(vars[i][1], 1, 1024, &s, e)) < 0)
            return hs;
        if (!hr && !hs)
            continue;
        if (!hr || !hs)
            return kvs__fail(e, KVS_EBADARG, "%s and %s must be set together", vars[i][0],
                             vars[i][1]);
        rank = r;
        size = s;
        break;
    }
    if (rank >= size)
        return kvs__fail(e, KVS_EBADARG, "rank %d is not below the number of workers %d",
                         rank, size);
    if (!j || !*j)
        j = "default";
    if ((rc = kvs__job_name_check(j, e)) != 0)
        return rc;
    snprintf(job, KVS__JOB_MAX + 1, "%s", j);
    kv->rank = rank;
    kv->nworkers = size;
    return 0;
}

/* ---- connecting ------------------------------------------------------- */

static int check_head(const void *seg, size_t size, uint32_t kind, const char *what,
                      struct kvs__err *e)
{
    struct kvs__seg_head h;

    memcpy(&h, seg, sizeof h);
    if (h.magic != KVS__SEG_MAGIC || h.layout != KVS__SEG_LAYOUT || h.kind != kind
        || h.size != size)
        return kvs__fail(e, KVS_EPROTO, "%s segment: magic, layout %u, kind %u or size %llu "
                         "is not this library's (layout %u)", what, h.layout, h.kind,
                         (unsigned long long)h.size, KVS__SEG_LAYOUT);
    return 0;
}

static void client_free(struct kvs__client *c)
{
    if (!c)
        return;
    if (c->arena)
        kvs__unmap((void *)c->arena, c->arena_size);
    if (c->seg)
        kvs__unmap(c->seg, c->seg_size);
    if (c->ctl)
        kvs__unmap(c->ctl, c->ctl_size);
    if (c->sock >= 0)
        close(c->sock);
    kvs__bufs_fini(&c->bufs);
    free(c);
}

/* Maps what the welcome describes; fds are closed by the caller. */
static int client_map(struct kvs__client *c, const struct kvs__welcome *w, const int *fds,
                      struct kvs__err *e)
{
    struct kvs__worker_layout l;
    int rc;

    if (w->control_size != KVS__CONTROL_SIZE
        || kvs__worker_layout(w->sq_entries, w->cq_entries, w->staging_size, &l) != 0
        || l.size != w->seg_size || l.staging_off != w->staging_off
        || w->arena_size <= KVS__ARENA_DATA_OFF || w->arena_size > SIZE_MAX / 2)
        return kvs__fail(e, KVS_EPROTO, "kvsd's segment sizes do not fit this library's layout");
    /* Sealed against resizing, all three: a segment cut short under a
     * mapping would fault this process at its next access. */
    if ((rc = kvs__memfd_check(fds[0], w->control_size, 1, e)) != 0
        || (rc = kvs__memfd_check(fds[1], w->seg_size, 1, e)) != 0
        || (rc = kvs__memfd_check(fds[2], w->arena_size, 1, e)) != 0)
        return rc;
    if ((rc = kvs__map(fds[0], w->control_size, 1, &c->ctl, e)) != 0)
        return rc;
    c->ctl_size = w->control_size;
    if ((rc = kvs__map(fds[1], w->seg_size, 1, &c->seg, e)) != 0)
        return rc;
    c->seg_size = w->seg_size;
    if ((rc = kvs__map(fds[2], w->arena_size, 0, (void **)&c->arena, e)) != 0)
        return rc;
    c->arena_size = w->arena_size;
    if ((rc = check_head(c->ctl, c->ctl_size, KVS__SEG_CONTROL, "control", e)) != 0
        || (rc = check_head(c->seg, c->seg_size, KVS__SEG_WORKER, "worker", e)) != 0
        || (rc = check_head(c->arena, c->arena_size, KVS__SEG_ARENA, "arena", e)) != 0)
        return rc;
    c->dbell = (struct kvs__bell *)((char *)c->ctl + KVS__CONTROL_BELL_OFF);
    c->wbell = (struct kvs__bell *)((char *)c->seg + KVS__WORKER_BELL_OFF);
    if (kvs__ring_attach(&c->sq, (char *)c->seg + l.sq_off, w->sq_entries, KVS__SQE_BYTES, 0)
        || kvs__ring_attach(&c->cq, (char *)c->seg + l.cq_off, w->cq_entries, KVS__CQE_BYTES, 0))
        return kvs__fail(e, KVS_EPROTO, "kvsd's ring geometry is invalid");
    c->staging = (unsigned char *)c->seg + l.staging_off;
    c->staging_size = l.staging_size;
    return 0;
}

static int client_connect(kvs_t *kv, struct kvs__client *c, struct kvs__err *e)
{
    char dir[PATH_MAX], path[PATH_MAX + 80];
    unsigned char buf[KVS__WELCOME_BYTES + 1];
    struct kvs__hello h = { .version = KVS__PROTO_VERSION, .rank = kv->rank,
                            .nworkers = kv->nworkers };
    struct kvs__welcome w;
    int64_t deadline = kvs__now_ns() + CONNECT_WAIT_NS;
    int fds[3], nfds = 0, rc;
    size_t len;

    c->sync = strcmp(kv->type, "dist_async") != 0;
    h.mode = c->sync ? KVS__MODE_SYNC : KVS__MODE_ASYNC;
    snprintf(h.job, sizeof h.job, "%s", c->job);
    if ((rc = kvs__runtime_dir(dir, sizeof dir, e)) != 0)
        return rc;
    snprintf(path, sizeof path, "%s/%s.sock", dir, c->job);
    if ((rc = kvs__sock_connect(path, &c->sock, e)) != 0) {
        if (rc == -ENOENT || rc == -ECONNREFUSED)
            return kvs__fail(e, KVS_ECLOSED, "no kvsd serves job '%s' (%s): start the job "
                             "with kvsrun, or kvsd --job %s", c->job, path, c->job);
        return rc;
    }
    len = kvs__hello_encode(&h, buf);
    if ((rc = kvs__sock_send(c->sock, buf, len, NULL, 0, deadline, e)) != 0)
        return rc;
    rc = kvs__sock_recv(c->sock, buf, sizeof buf, &len, fds, 3, &nfds, deadline, e);
    if (rc == -ECONNRESET)
        return kvs__fail(e, KVS_ECLOSED, "kvsd of job '%s' closed the connection", c->job);
    if (rc != 0)
        return rc;
    if ((rc = kvs__welcome_decode(buf, len, &w, e)) == 0) {
        if (w.status != 0)
            rc = kvs__fail(e, w.status, "kvsd refused: %s", w.msg);
        else if (nfds != 3)
            rc = kvs__fail(e, KVS_EPROTO, "kvsd sent %d descriptors, not 3", nfds);
        else
            rc = client_map(c, &w, fds, e);
    }
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    return rc;
}

static int dist_open(kvs_t *kv)
{
    struct kvs__client *c = calloc(1, sizeof *c);
    int rc;

    if (!c)
        return kvs__fail(&kv->err, -ENOMEM, "out of memory");
    c->sock = -1;
    if ((rc = job_env(kv, c->job, &kv->err)) != 0
        || (rc = client_connect(kv, c, &kv->err)) != 0) {
        client_free(c);
        return rc;
    }
    kv->client = c;
    return 0;
}

/* ---- requests --------------------------------------------------------- */

static int broken(kvs_t *kv, int code, const char *fmt, const char *detail)
{
    struct kvs__client *c = kv->client;

    c->broken = code;
    snprintf(c->broken_msg, sizeof c->broken_msg, fmt, detail);
    return kvs__fail(&kv->err, code, "%s", c->broken_msg);
}

/* 1 when kvsd has closed our socket (it died, or stopped). */
static int daemon_gone(struct kvs__client *c)
{
    struct pollfd p = { .fd = c->sock, .events = POLLIN };
    char b;

    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLHUP | POLLERR))
        return 1;
    return recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Posts reqs[0..n) (the last flagged as the end of the list) and waits for
 * all their completions, stored in cqes[] in the same order. Returns 0 when
 * every request got a completion (each with its own status), else the error
 * that broke the handle. */
static int run_batch(kvs_t *kv, struct kvs__sqe *reqs, int n, struct kvs__cqe *cqes)
{
    struct kvs__client *c = kv->client;
    struct kvs__err e = { 0, "" };
    int64_t deadline = kvs__now_ns() + kv->opt_timeout_ms * 1000000ll;
    uint64_t base = c->next_seq;
    unsigned char *got = calloc((size_t)n, 1);
    int sent = 0, done = 0, err = 0, rc = 0, quiet = 0;

    if (!got)
        return kvs__fail(&kv->err, -ENOMEM, "out of memory");
    c->next_seq += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        reqs[i].seq = base + (uint64_t)i;
        reqs[i].flags = (uint8_t)((reqs[i].flags & ~KVS__SQE_LAST)
                                  | (i == n - 1 ? KVS__SQE_LAST : 0));
    }
    while (done < n) {
        uint32_t seen = kvs__bell_seq(c->wbell);
        int posted = 0, consumed = 0;
        const void *slot;
        void *s;

        while (sent < n && (s = kvs__ring_reserve(&c->sq, &err)) != NULL) {
            kvs__sqe_encode(&reqs[sent++], s);
            kvs__ring_commit(&c->sq);
            posted = 1;
        }
        while (!err && (slot = kvs__ring_peek(&c->cq, &err)) != NULL) {
            struct kvs__cqe q;
            uint64_t i;

            if (kvs__cqe_decode(slot, c->arena_size, &q, &e) != 0) {
                rc = broken(kv, KVS_EPROTO, "bad completion from kvsd: %s", e.msg);
                goto out;
            }
            kvs__ring_pop(&c->cq);
            i = q.seq - base;
            if (q.seq < base || i >= (uint64_t)n || got[i]) {
                rc = broken(kv, KVS_EPROTO, "kvsd completed a request %s", "never made");
                goto out;
            }
            got[i] = 1;
            cqes[i] = q;
            done++;
            consumed = 1;
        }
        if (err) {
            rc = broken(kv, KVS_EPROTO, "a ring shared with kvsd is corrupt (%s)",
                        kvs_strerror(err));
            goto out;
        }
        if (posted || consumed) {
            /* New requests, or room for completions kvsd may be holding
             * back; once all n are in it owes this worker none, and a
             * ring would only wake it for nothing (a futex wake-up of
             * another core costs the ringer some 10 us here). */
            if (posted || done < n)
                kvs__bell_ring(c->dbell);
            continue;
        }
        if (kvs__now_ns() >= deadline) {
            rc = broken(kv, KVS_ETIMEDOUT, "no answer from kvsd within the deadline "
                        "(KVS_OPT_TIMEOUT_MS)%s", "");
            goto out;
        }
        /* Only after a whole slice without a ring: a dead kvsd rings no
         * more, and the check is a system call or two on every pass. */
        if (quiet && daemon_gone(c)) {
            rc = broken(kv, KVS_ECLOSED, "kvsd of job '%s' is gone", c->job);
            goto out;
        }
        {
            int64_t now = kvs__now_ns(), slice = now + WAIT_SLICE_NS;

            quiet = kvs__bell_wait(c->wbell, seen, slice < deadline ? slice : deadline,
                                   SPIN_NS) != 0;
        }
    }
out:
    free(got);
    return rc;
}

/* The first failed completion of a batch, as the call's error. */
static int batch_status(kvs_t *kv, const struct kvs__cqe *cqes, int n)
{
    for (int i = 0; i < n; i++) {
        if (cqes[i].status != 0) {
            if (cqes[i].status == KVS_EPEERDEAD)
                broken(kv, KVS_EPEERDEAD, "%s", cqes[i].msg);
            return kvs__fail(&kv->err, cqes[i].status, "%s", cqes[i].msg);
        }
    }
    return 0;
}

/* Runs a batch and returns the first error of its completions. */
static int run(kvs_t *kv, struct kvs__sqe *reqs, int n, struct kvs__cqe *cqes)
{
    int rc = run_batch(kv, reqs, n, cqes);

    return rc ? rc : batch_status(kv, cqes, n);
}

static void sqe_key(struct kvs__sqe *s, kvs_key_t key)
{
    if (key.name) {
        s->key_len = (uint16_t)strlen(key.name);
        memcpy(s->key_name, key.name, s->key_len + 1u);
    } else {
        s->key_id = key.id;
    }
}

static void sqe_array(struct kvs__sqe *s, const kvs_array_t *a)
{
    s->dtype = a->dtype;
    s->ndim = a->ndim;
    memcpy(s->shape, a->shape, sizeof s->shape[0] * (size_t)a->ndim);
}

static int usable(kvs_t *kv)
{
    struct kvs__client *c = kv->client;

    if (c->broken)
        return kvs__fail(&kv->err, c->broken, "%s", c->broken_msg);
    return 0;
}

/* ---- data calls ------------------------------------------------------- */

/* A grouped list: per group its first index; per index its group. */
struct groups {
    int n, ng;
    int *gid, *first;
};

static int group(kvs_t *kv, int n, const kvs_key_t *keys, struct groups *g)
{
    g->n = n;
    g->gid = malloc(sizeof(int) * 2 * (size_t)(n ? n : 1));
    if (!g->gid)
        return kvs__fail(&kv->err, -ENOMEM, "out of memory");
    g->first = g->gid + n;
    g->ng = kvs__group_keys(n, keys, g->gid, g->first, &kv->err);
    if (g->ng < 0) {
        free(g->gid);
        return g->ng;
    }
    return 0;
}

/* Arrays of one key must agree with the key's first array. */
static int group_match(kvs_t *kv, const struct groups *g, const kvs_key_t *keys,
                       const kvs_array_t *arrs, const char *what)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    for (int i = 0; i < g->n; i++) {
        const kvs_array_t *f = &arrs[g->first[g->gid[i]]];

        if (arrs[i].dtype != f->dtype || !kvs__same_shape(&arrs[i], f)) {
            kvs__key_str(ks, sizeof ks, keys[i]);
            return kvs__fail(&kv->err, arrs[i].dtype != f->dtype ? KVS_EDTYPE : KVS_ESHAPE,
                             "key %s: %s %d differs in dtype or shape from %s %d of the "
                             "same key", ks, what, i, what, g->first[g->gid[i]]);
        }
    }
    return 0;
}

/* Bytes at the bottom of staging free for the copies of one call: those
 * below the lowest buffer. */
static uint64_t transient_size(const struct kvs__client *c)
{
    return kvs__bufs_low(&c->bufs, c->staging_size) & ~(uint64_t)63;
}

/* Where a value already lies in staging: 1 and *off when it lies wholly in
 * one buffer, 0 when it lies outside staging, KVS_EBADARG when it lies in
 * staging but not in a live buffer (freed, or straddling two). */
static int in_buffer(kvs_t *kv, const void *data, uint64_t bytes, uint64_t *off)
{
    const struct kvs__client *c = kv->client;
    uintptr_t p = (uintptr_t)data, s = (uintptr_t)c->staging;

    if (p < s || p - s >= c->staging_size)
        return 0;
    if (!kvs__bufs_find(&c->bufs, p - s, bytes))
        return kvs__fail(&kv->err, KVS_EBADARG, "an array at %p lies in kvs's staging area "
                         "but not in a live buffer of kvs_array_alloc", data);
    *off = p - s;
    return 1;
}

/* Sends one request per group, each with its data in staging: a buffer's
 * as it lies, else what kvs__sum makes of the group's arrays (summing
 * repeated keys here, as MXNet's workers merge their devices before
 * sending) in the transient part. Groups are sent in batches that fit the
 * transient part; each batch is all-or-nothing in kvsd. */
static int send_groups(kvs_t *kv, uint8_t op, uint8_t flags, const struct groups *g,
                       const kvs_key_t *keys, const kvs_array_t *arrs, int priority,
                       struct kvs__cqe *out)
{
    struct kvs__client *c = kv->client;
    struct kvs__sqe *reqs = calloc((size_t)(g->ng ? g->ng : 1), sizeof *reqs);
    struct kvs__cqe *cqes = out ? out : calloc((size_t)(g->ng ? g->ng : 1), sizeof *cqes);
    const void **in = malloc(sizeof *in * (size_t)(g->n ? g->n : 1));
    uint64_t room = transient_size(c);
    int rc = 0, start = 0;

    if (!reqs || !cqes || !in) {
        rc = kvs__fail(&kv->err, -ENOMEM, "out of memory");
        goto out;
    }
    while (start < g->ng) {
        uint64_t off = 0;
        int end = start;

        for (; end < g->ng; end++) {
            const kvs_array_t *a = &arrs[g->first[end]];
            size_t bytes = kvs__array_count(a) * kvs_dtype_size(a->dtype);
            char ks[KVS_MAX_KEY_LEN + 8];
            uint64_t at = off;
            int k = 0, zc = 0;

            for (int i = g->first[end]; i < g->n; i++)
                if (g->gid[i] == end)
                    in[k++] = arrs[i].data;
            if (k == 1 && (zc = in_buffer(kv, a->data, bytes, &at)) < 0) {
                rc = zc;
                goto out;
            }
            if (!zc && bytes > room) {
                kvs__key_str(ks, sizeof ks, keys[g->first[end]]);
                rc = kvs__fail(&kv->err, KVS_EBADARG, "key %s: %zu bytes do not fit the "
                               "%llu bytes below the lowest buffer in the %llu-byte "
                               "staging area (kvsd --staging)", ks, bytes,
                               (unsigned long long)room,
                               (unsigned long long)c->staging_size);
                goto out;
            }
            if (!zc && off + bytes > room)
                break;
            if (!zc) {
                kvs__sum(a->dtype, c->staging + off, in, k, kvs__array_count(a),
                         (int)kv->opt_threads);
                off += (bytes + 63) & ~(uint64_t)63;
            }
            reqs[end] = (struct kvs__sqe){ .op = op, .flags = flags, .priority = priority,
                                           .data_off = at, .data_len = bytes };
            sqe_key(&reqs[end], keys[g->first[end]]);
            sqe_array(&reqs[end], a);
        }
        if ((rc = run(kv, reqs + start, end - start, cqes + start)) != 0)
            goto out;
        start = end;
    }
out:
    free(in);
    if (cqes != out)
        free(cqes);
    free(reqs);
    return rc;
}

static int dist_init(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int replace)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct groups g;
    int rc;

    if ((rc = usable(kv)) != 0 || (rc = kvs__check_list(NULL, n, keys, values, "value",
                                                          &kv->err)) != 0)
        return rc;
    if (replace)
        return kvs__fail(&kv->err, KVS_ENOTSUP, "kvs_reinit is not supported by %s yet",
                         kv->type);
    if ((rc = group(kv, n, keys, &g)) != 0)
        return rc;
    if (g.ng != n) {
        for (int i = 0; i < n; i++) {
            if (g.first[g.gid[i]] != i) {
                kvs__key_str(ks, sizeof ks, keys[i]);
                rc = kvs__fail(&kv->err, KVS_EKEYEXISTS, "key %s: appears twice in one init",
                               ks);
                break;
            }
        }
    } else {
        rc = send_groups(kv, KVS__OP_INIT, 0, &g, keys, values, 0, NULL);
    }
    free(g.gid);
    return rc;
}

static int dist_push(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     int priority)
{
    struct groups g;
    int rc;

    if ((rc = usable(kv)) != 0 || (rc = kvs__check_list(NULL, n, keys, values, "value",
                                                          &kv->err)) != 0)
        return rc;
    if ((rc = group(kv, n, keys, &g)) != 0)
        return rc;
    if ((rc = group_match(kv, &g, keys, values, "value")) == 0)
        rc = send_groups(kv, KVS__OP_PUSH, 0, &g, keys, values, priority, NULL);
    free(g.gid);
    return rc;
}

/* The block of a value a completion points to, once its range is checked
 * against the arena and the size the caller expects. */
static int value_block(kvs_t *kv, const struct kvs__cqe *q, size_t bytes,
                       const struct kvs__block_head **bh)
{
    struct kvs__client *c = kv->client;

    if (q->value_len != bytes || q->value_off < KVS__ARENA_DATA_OFF + sizeof **bh
        || (q->value_off & 63) != 0)
        return broken(kv, KVS_EPROTO, "kvsd answered a pull with a bad arena range%s", "");
    *bh = (const struct kvs__block_head *)(c->arena + q->value_off - sizeof **bh);
    return 0;
}

/* Copies a value out of the arena, retrying while kvsd rewrites it. */
static int copy_value(kvs_t *kv, const struct kvs__cqe *q, void *dst, size_t bytes,
                      const int64_t *rows, int64_t nrows, size_t row_bytes)
{
    struct kvs__client *c = kv->client;
    const struct kvs__block_head *bh;
    int64_t deadline = kvs__now_ns() + kv->opt_timeout_ms * 1000000ll;
    int rc;

    if ((rc = value_block(kv, q, bytes, &bh)) != 0)
        return rc;
    for (;;) {
        uint64_t s1 = atomic_load_explicit(&bh->seq, memory_order_acquire), s2;

        if ((s1 & 1) == 0) {
            const unsigned char *src = c->arena + q->value_off;

            if (!rows) {
                kvs__copy(dst, src, bytes, (int)kv->opt_threads);
            } else {
                memset(dst, 0, bytes);
                for (int64_t j = 0; j < nrows; j++)
                    memcpy((char *)dst + (size_t)rows[j] * row_bytes,
                           src + (size_t)rows[j] * row_bytes, row_bytes);
            }
            atomic_thread_fence(memory_order_acquire);
            s2 = atomic_load_explicit(&bh->seq, memory_order_relaxed);
            if (s1 == s2)
                return 0;
        }
        if (kvs__now_ns() >= deadline)
            return broken(kv, KVS_ETIMEDOUT, "a value stayed busy in kvsd past the "
                          "deadline%s", "");
    }
}

/* Hands out the value of a completion: a view of it in the arena (dist_sync
 * only: kvsd rewrites it in the next round, which needs this worker's push),
 * else a copy into out's data. */
static int deliver(kvs_t *kv, const struct kvs__cqe *q, kvs_array_t *out, int view)
{
    size_t bytes = kvs__array_count(out) * kvs_dtype_size(out->dtype);
    const struct kvs__block_head *bh;
    int rc;

    if (!view)
        return copy_value(kv, q, out->data, bytes, NULL, 0, 0);
    if ((rc = value_block(kv, q, bytes, &bh)) != 0)
        return rc;
    if (atomic_load_explicit(&bh->seq, memory_order_acquire) & 1)
        return broken(kv, KVS_EPROTO, "kvsd answered a pull with a value it is still "
                      "writing%s", "");
    out->data = (void *)(kv->client->arena + q->value_off);
    return 0;
}

/* Pulls every group's value; outs of a key all receive it. rows (may be
 * NULL): per out, the row ids to copy, others zeroed. view: outs get
 * pointers to the values (rows NULL). */
static int pull_groups(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                       const kvs_array_t *rows, int view, int priority)
{
    struct kvs__sqe *reqs = NULL;
    struct kvs__cqe *cqes = NULL;
    struct groups g;
    int rc;

    if ((rc = group(kv, n, keys, &g)) != 0)
        return rc;
    if ((rc = group_match(kv, &g, keys, outs, view ? "view" : "out")) != 0)
        goto out;
    reqs = calloc((size_t)(g.ng ? g.ng : 1), sizeof *reqs);
    cqes = calloc((size_t)(g.ng ? g.ng : 1), sizeof *cqes);
    if (!reqs || !cqes) {
        rc = kvs__fail(&kv->err, -ENOMEM, "out of memory");
        goto out;
    }
    for (int j = 0; j < g.ng; j++) {
        reqs[j].op = KVS__OP_PULL;
        reqs[j].priority = priority;
        sqe_key(&reqs[j], keys[g.first[j]]);
        sqe_array(&reqs[j], &outs[g.first[j]]);
    }
    if ((rc = run(kv, reqs, g.ng, cqes)) != 0)
        goto out;
    for (int i = 0; i < n && rc == 0; i++) {
        size_t bytes = kvs__array_count(&outs[i]) * kvs_dtype_size(outs[i].dtype);

        if (!rows)
            rc = deliver(kv, &cqes[g.gid[i]], &outs[i], view);
        else
            rc = copy_value(kv, &cqes[g.gid[i]], outs[i].data, bytes, rows[i].data,
                            rows[i].shape[0],
                            outs[i].shape[0] ? bytes / (size_t)outs[i].shape[0] : 0);
    }
out:
    free(cqes);
    free(reqs);
    free(g.gid);
    return rc;
}

static int dist_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs, int priority)
{
    int rc;

    if ((rc = usable(kv)) != 0 || (rc = kvs__check_list(NULL, n, keys, outs, "out",
                                                          &kv->err)) != 0)
        return rc;
    return pull_groups(kv, n, keys, outs, NULL, 0, priority);
}

/* One request per key: the push's completion carries the value it made.
 * view: outs get pointers to the values. */
static int pushpull_groups(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                           kvs_array_t *outs, int view, int priority)
{
    kvs_array_t *dst = outs ? outs : (kvs_array_t *)values;
    const char *what = view ? "view" : "out";
    struct kvs__cqe *cqes = NULL;
    struct groups g;
    int rc;

    if ((rc = usable(kv)) != 0
        || (rc = kvs__check_list(NULL, n, keys, values, "value", &kv->err)) != 0
        || (outs && (rc = kvs__check_list(NULL, n, keys, outs, what, &kv->err)) != 0))
        return rc;
    for (int i = 0; outs && i < n; i++)
        if (outs[i].dtype != values[i].dtype || !kvs__same_shape(&outs[i], &values[i]))
            return kvs__fail(&kv->err, outs[i].dtype != values[i].dtype ? KVS_EDTYPE
                             : KVS_ESHAPE, "%s %d does not match value %d", what, i, i);
    if ((rc = group(kv, n, keys, &g)) != 0)
        return rc;
    if ((rc = group_match(kv, &g, keys, values, "value")) != 0)
        goto out;
    if (!(cqes = calloc((size_t)(g.ng ? g.ng : 1), sizeof *cqes))) {
        rc = kvs__fail(&kv->err, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = send_groups(kv, KVS__OP_PUSH, KVS__SQE_VALUE, &g, keys, values, priority,
                          cqes)) != 0)
        goto out;
    for (int i = 0; i < n && rc == 0; i++)
        rc = deliver(kv, &cqes[g.gid[i]], &dst[i], view);
out:
    free(cqes);
    free(g.gid);
    return rc;
}

static int dist_pushpull(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                         kvs_array_t *outs, int priority)
{
    return pushpull_groups(kv, n, keys, values, outs, 0, priority);
}

static int dist_view(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *values,
                     kvs_array_t *views, int priority)
{
    int rc;

    if (!kv->client->sync)
        return kvs__fail(&kv->err, KVS_ENOTSUP, "views are not supported by %s: other "
                         "workers' pushes rewrite a value at any time; use kvs_pull",
                         kv->type);
    if (values)
        return pushpull_groups(kv, n, keys, values, views, 1, priority);
    if ((rc = usable(kv)) != 0 || (rc = kvs__check_list(NULL, n, keys, views, "view",
                                                          &kv->err)) != 0)
        return rc;
    return pull_groups(kv, n, keys, views, NULL, 1, priority);
}

static int dist_row_sparse_pull(kvs_t *kv, int n, const kvs_key_t *keys, kvs_array_t *outs,
                                const kvs_array_t *row_ids, int priority)
{
    char ks[KVS_MAX_KEY_LEN + 8], name[KVS_MAX_KEY_LEN + 40];
    int rc;

    if ((rc = usable(kv)) != 0 || (rc = kvs__check_list(NULL, n, keys, outs, "out",
                                                          &kv->err)) != 0)
        return rc;
    if (n > 0 && !row_ids)
        return kvs__fail(&kv->err, KVS_EBADARG, "row_ids list is NULL with count %d", n);
    /* An out has the stored shape (kvsd checks it), so its rows bound the ids. */
    for (int i = 0; i < n; i++) {
        const kvs_array_t *ids = &row_ids[i];
        const int64_t *id;

        kvs__key_str(ks, sizeof ks, keys[i]);
        snprintf(name, sizeof name, "key %s: row_ids %d", ks, i);
        if ((rc = kvs__array_check(ids, name, &kv->err)) != 0)
            return rc;
        if (ids->dtype != KVS_INT64)
            return kvs__fail(&kv->err, KVS_EDTYPE, "%s: dtype %s, row ids must be int64",
                             name, kvs_dtype_name(ids->dtype));
        if (ids->ndim != 1)
            return kvs__fail(&kv->err, KVS_ESHAPE, "%s: %d dimensions, row ids must be 1-D",
                             name, ids->ndim);
        if (outs[i].ndim < 1)
            return kvs__fail(&kv->err, KVS_ESHAPE, "key %s: a scalar has no rows", ks);
        id = ids->data;
        for (int64_t j = 0; j < ids->shape[0]; j++)
            if (id[j] < 0 || id[j] >= outs[i].shape[0])
                return kvs__fail(&kv->err, KVS_ERANGE, "key %s: row id %lld out of range "
                                 "[0, %lld)", ks, (long long)id[j],
                                 (long long)outs[i].shape[0]);
    }
    return pull_groups(kv, n, keys, outs, row_ids, 0, priority);
}

/* ---- update rules and the rest ---------------------------------------- */

static int dist_set_updater(kvs_t *kv, kvs_updater_t fn, void *ctx)
{
    (void)fn;
    (void)ctx;
    return kvs__fail(&kv->err, KVS_ENOTSUP, "custom updaters are not supported by %s: "
                     "updates run in kvsd, use kvs_set_optimizer", kv->type);
}

/* Sends a text argument (a spec, a path) through staging. */
static int send_text(kvs_t *kv, uint8_t op, const char *text, uint64_t arg)
{
    struct kvs__client *c = kv->client;
    struct kvs__sqe req = { .op = op, .arg = arg };
    struct kvs__cqe cqe;
    size_t len = strlen(text);
    int rc;

    if ((rc = usable(kv)) != 0)
        return rc;
    if (len == 0 || len > 4095)
        return kvs__fail(&kv->err, KVS_EBADARG, "text of %zu bytes: must be 1..4095", len);
    if (len > transient_size(c))
        return kvs__fail(&kv->err, -ENOSPC, "no room for %zu bytes of text: buffers of "
                         "kvs_array_alloc fill the staging area", len);
    memcpy(c->staging, text, len);
    req.data_len = len;
    return run(kv, &req, 1, &cqe);
}

static int dist_set_optimizer(kvs_t *kv, const char *spec)
{
    struct kvs__optim *o;
    int rc;

    if (!spec)
        return kvs__fail(&kv->err, KVS_EBADARG, "optimizer spec is NULL");
    /* Refuse a bad spec here, with the parser's own message. */
    if ((rc = kvs__optim_parse(spec, &o, &kv->err)) != 0)
        return rc;
    rc = send_text(kv, KVS__OP_SET_OPTIMIZER, kvs__optim_spec(o), 0);
    kvs__optim_free(o);
    return rc;
}

static int dist_set_gradient_compression(kvs_t *kv, const char *spec)
{
    struct kvs__gc gc;
    int rc;

    if ((rc = kvs__gc_parse(spec, &gc, &kv->err)) != 0)
        return rc;
    if (gc.type == KVS__GC_NONE)
        return 0;
    return kvs__fail(&kv->err, KVS_ENOTSUP, "2bit compression for %s is not implemented "
                     "yet", kv->type);
}

/* kvsd runs in another directory: relative paths are made absolute here. */
static int path_op(kvs_t *kv, uint8_t op, const char *path, uint64_t arg)
{
    char abs[PATH_MAX];

    if (!path || !*path)
        return kvs__fail(&kv->err, KVS_EBADARG, "path is NULL or empty");
    if (path[0] == '/') {
        snprintf(abs, sizeof abs, "%s", path);
    } else {
        if (!getcwd(abs, sizeof abs))
            return kvs__fail(&kv->err, -errno, "getcwd: %s", strerror(errno));
        if (strlen(abs) + 1 + strlen(path) >= sizeof abs)
            return kvs__fail(&kv->err, -ENAMETOOLONG, "path %s is too long", path);
        strcat(abs, "/");
        strcat(abs, path);
    }
    return send_text(kv, op, abs, arg);
}

static int dist_save_states(kvs_t *kv, const char *path, int dump_optimizer)
{
    return path_op(kv, KVS__OP_SAVE_STATES, path, dump_optimizer != 0);
}

static int dist_load_states(kvs_t *kv, const char *path)
{
    return path_op(kv, KVS__OP_LOAD_STATES, path, 0);
}

static int dist_barrier(kvs_t *kv)
{
    struct kvs__sqe req = { .op = KVS__OP_BARRIER };
    struct kvs__cqe cqe;
    int rc;

    if ((rc = usable(kv)) != 0)
        return rc;
    return run(kv, &req, 1, &cqe);
}

/* Buffers take the highest free range of staging: ordinary calls copy into
 * the bottom part, below every buffer. */
static int dist_array_alloc(kvs_t *kv, size_t bytes, void **p)
{
    struct kvs__client *c = kv->client;
    uint64_t size = ((uint64_t)bytes + 63) & ~(uint64_t)63, off;
    int rc;

    if ((rc = usable(kv)) != 0)
        return rc;
    if (size < bytes || kvs__bufs_fit_top(&c->bufs, 0, c->staging_size, size, 64, &off) != 0)
        return kvs__fail(&kv->err, -ENOSPC, "no room for a %zu-byte buffer in the %llu-byte "
                         "staging area, where %zu buffers live (kvsd --staging sets its "
                         "size)", bytes, (unsigned long long)c->staging_size, c->bufs.n);
    if (kvs__bufs_add(&c->bufs, off, size) != 0)
        return kvs__fail(&kv->err, -ENOMEM, "out of memory");
    memset(c->staging + off, 0, size);
    *p = c->staging + off;
    return 0;
}

static int dist_array_free(kvs_t *kv, void *p)
{
    struct kvs__client *c = kv->client;
    uintptr_t a = (uintptr_t)p, s = (uintptr_t)c->staging;

    if (a < s || a - s >= c->staging_size)
        return -ENOENT;
    return kvs__bufs_remove(&c->bufs, a - s, NULL);
}

static int dist_apply_options(kvs_t *kv)
{
    (void)kv;                          /* read from the handle at each call */
    return 0;
}

static void dist_close(kvs_t *kv)
{
    struct kvs__client *c = kv->client;
    struct kvs__sqe req = { .op = KVS__OP_CLOSE };
    struct kvs__cqe cqe;

    if (!c)
        return;
    /* Leave the job cleanly, so that later rounds complete without us. A
     * short deadline: kvsd may be gone. */
    if (!c->broken) {
        int64_t t = kv->opt_timeout_ms;

        kv->opt_timeout_ms = t < 2000 ? t : 2000;
        run_batch(kv, &req, 1, &cqe);
        kv->opt_timeout_ms = t;
    }
    client_free(c);
    kv->client = NULL;
}

const struct kvs__store_ops kvs__dist_ops = {
    .open = dist_open,
    .init = dist_init,
    .push = dist_push,
    .pull = dist_pull,
    .pushpull = dist_pushpull,
    .row_sparse_pull = dist_row_sparse_pull,
    .view = dist_view,
    .array_alloc = dist_array_alloc,
    .array_free = dist_array_free,
    .set_updater = dist_set_updater,
    .set_optimizer = dist_set_optimizer,
    .set_gradient_compression = dist_set_gradient_compression,
    .save_states = dist_save_states,
    .load_states = dist_load_states,
    .barrier = dist_barrier,
    .apply_options = dist_apply_options,
    .close = dist_close,
};
