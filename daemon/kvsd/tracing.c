/*
 * trace.c - kvsd's part of the timeline (src/proto/trace.h): kvsd's own name,
 * the phases it measures of each push (recorded in the pushing worker's
 * process, on a track of the key), the workers' comings and goings, and
 * the host's file, merged from kvsd's events and the parts the workers
 * left in the job's runtime directory.
 */
#include <stdio.h>
#include <string.h>

#include "tracing.h"
#include "req.h"

int trace_setup(struct daemon *d, struct kvs__err *e)
{
    char name[32];
    int rc;

    if ((rc = kvs__tr_setup(e)) != 0
        || (rc = kvs__tr_part_dir(d->o.job, d->tr_dir, sizeof d->tr_dir, e)) != 0)
        return rc;
    kvs__tr_clear_dir(d->tr_dir);
    if (!kvs__tr_path())
        return 0;
    if (d->o.nhosts > 1)
        snprintf(name, sizeof name, "kvsd host %d", d->o.host);
    else
        snprintf(name, sizeof name, "kvsd");
    kvs__tr_process(KVS__TR_KVSD_PID + d->o.host, name, 10000 + d->o.host);
    kvs__tr_thread("serve");
    return 0;
}

void trace_write(struct daemon *d)
{
    const char *path = kvs__tr_path();
    char out[PATH_MAX + 32], meta[512];
    struct kvs__err e = { 0, "" };

    if (!path) {
        kvs__tr_clear_dir(d->tr_dir);  /* workers that trace beside a kvsd that does not */
        return;
    }
    if (d->o.nhosts > 1 && d->o.host > 0)
        snprintf(out, sizeof out, "%s.host%d", path, d->o.host);
    else
        snprintf(out, sizeof out, "%s", path);
    /* Host 0's clock less this one's: what kvsctl timeline merge adds to
     * this host's times; the true offset lies within error of it. */
    snprintf(meta, sizeof meta, "\"host\":%d,\"hosts\":%d,\"job\":\"%s\",\"clock_offsets\":"
             "[{\"host\":%d,\"offset_us\":%.3f,\"error_us\":%.3f,\"measured\":%s}]",
             d->o.host, d->o.nhosts > 1 ? d->o.nhosts : 1, d->o.net_job, d->o.host,
             (double)d->clock0_offset / 1e3, (double)d->clock0_error / 1e3,
             d->o.host == 0 || d->clock0_known ? "true" : "false");
    if (kvs__tr_merge(d->tr_dir, out, meta, &e) != 0)   /* said even when quiet */
        fprintf(stderr, "kvsd: job %s: the timeline was not written: %s\n", d->o.job, e.msg);
    else
        say(d, "timeline of %s written to %s", d->o.nhosts > 1 ? "this host" : "the job", out);
    kvs__tr_clear_dir(d->tr_dir);
}

void trace_round(struct daemon *d, struct round *rd)
{
    int64_t now = kvs__tr_now();
    int sum = kvs__engine_optimizer(d->eng) ? KVS__TR_SUM_OPTIM : KVS__TR_SUM;

    for (int w = 0; w < d->nworkers; w++) {
        const struct req *r = rd->contrib[w];
        struct kvs__tr_args a = KVS__TR_ARGS;
        int64_t q0;

        if (!r || !r->t_join)
            continue;
        a.key = req_key(&r->s);
        a.has_key = 1;
        if (!rd->tr_tid)
            rd->tr_tid = kvs__tr_key_track(a.key);
        a.tid = rd->tr_tid;
        a.pid = d->workers[w].rank + 1;
        a.bytes = rd->bytes;
        a.round = (int64_t)rd->done;
        /* Queued from its coming, or from the end of the key's round
         * before, which it may have come during: a track's spans never
         * overlap. */
        q0 = r->t_in > rd->t_prev ? r->t_in : rd->t_prev;
        if (r->t_join > q0) {
            a.priority = r->s.priority;
            a.has_priority = 1;
            kvs__tr_put(KVS__TR_QUEUED, q0, r->t_join, &a, 0, NULL);
            a.has_priority = 0;
        }
        if (rd->t_ready > r->t_join)
            kvs__tr_put(KVS__TR_WAIT_OTHERS, r->t_join, rd->t_ready, &a, 0, NULL);
        if (d->hx && now > rd->t_ready)
            kvs__tr_put(KVS__TR_HOSTS, rd->t_ready, now, &a, 0, NULL);
        if (rd->t_sum1 > rd->t_sum0 && rd->t_sum0 >= rd->t_ready)
            kvs__tr_put(sum, rd->t_sum0, rd->t_sum1, &a, 0, NULL);
    }
    rd->t_prev = now;
    rd->t_ready = rd->t_sum0 = rd->t_sum1 = 0;
}

void trace_error(struct daemon *d, const struct req *r, int status, const char *msg)
{
    struct kvs__tr_args a = KVS__TR_ARGS;

    a.pid = d->workers[r->w].rank + 1;
    if (r->s.op == KVS__OP_PUSH || r->s.op == KVS__OP_PULL || r->s.op == KVS__OP_INIT) {
        a.key = req_key(&r->s);
        a.has_key = 1;
    }
    kvs__tr_instant(KVS__TR_ERROR, &a, status, msg);
}

void trace_worker(const struct worker *w, int what, const char *msg)
{
    struct kvs__tr_args a = KVS__TR_ARGS;
    char name[32];

    if (!kvs__tr_begin())
        return;
    snprintf(name, sizeof name, "rank %d", w->rank);
    kvs__tr_name_process(w->rank + 1, name, w->rank);
    a.pid = w->rank + 1;
    a.rank = w->rank;
    kvs__tr_instant(what, &a, 0, msg);
}
