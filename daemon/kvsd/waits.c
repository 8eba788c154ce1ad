/*
 * waits.c - what waits in kvsd, in words: for kvsctl status (every open
 * round and collective, who is missing) and for a worker that gave up
 * waiting (what its request waits for).
 *
 * Serve thread only. It only reads: it must never change a round, a
 * collective or a request.
 */
#include <stdio.h>
#include <string.h>

#include "waits.h"
#include "combined.h"
#include "hosts.h"
#include "job.h"
#include "req.h"
#include "states.h"

/* The ranks still in the job (connected or not yet) that have not joined
 * the round rd or the collective c, as "1, 3". */
static void missing_ranks(const struct daemon *d, const struct round *rd, const struct coll *c,
                          char *buf, size_t size)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < d->nworkers && o + 16 < size; i++) {
        int st = d->workers[i].state;

        if (st == W_LEFT || st == W_DEAD || (rd ? rd->contrib[i] != NULL : c->arrived[i]))
            continue;
        o += (size_t)snprintf(buf + o, size - o, "%s%d", o ? ", " : "", d->rank0 + i);
    }
}

static void round_text(const struct daemon *d, const struct round *rd, const char *call,
                       kvs_key_t key, char *buf, size_t size)
{
    char ks[KVS_MAX_KEY_LEN + 8], who[160];

    kvs__key_str(ks, sizeof ks, key);
    if (rd->inflight) {                /* across hosts: every worker here has pushed */
        snprintf(buf, size, "%s%skey %s round %llu: this host's workers pushed, waiting for "
                 "the other hosts' (the key's owner is %s)", call, *call ? " of " : "", ks,
                 (unsigned long long)rd->done + 1, hosts_name(d, rd->owner));
        return;
    }
    missing_ranks(d, rd, NULL, who, sizeof who);
    snprintf(buf, size, "%s%skey %s round %llu: %d of %d workers pushed, waiting for rank%s "
             "%s", call, *call ? " of " : "", ks, (unsigned long long)rd->done + 1,
             rd->nlive, job_expected(d), strchr(who, ',') ? "s" : "", who);
}

static void coll_text(const struct daemon *d, const struct coll *c, char *buf, size_t size)
{
    char ks[KVS_MAX_KEY_LEN + 8], who[160];

    missing_ranks(d, NULL, c, who, sizeof who);
    if (c->op == KVS__OP_INIT) {
        kvs__key_str(ks, sizeof ks, c->key);
        snprintf(buf, size, "kvs_init of key %s: %d of %d workers called it, waiting for "
                 "rank%s %s", ks, c->narrived, job_expected(d), strchr(who, ',') ? "s" : "", who);
    } else {
        snprintf(buf, size, "kvs_barrier: %d of %d workers arrived, waiting for rank%s %s",
                 c->narrived, job_expected(d), strchr(who, ',') ? "s" : "", who);
    }
}

void waits_explain(const struct daemon *d, int wi, uint64_t seq, char *buf, size_t size)
{
    buf[0] = '\0';
    for (const struct req *r = d->pending; r; r = r->next) {
        if (r->w != wi || r->s.seq != seq)
            continue;
        round_text(d, r->rd, r->s.op == KVS__OP_PULL ? "kvs_pull" : "kvs_pushpull",
                   req_key(&r->s), buf, size);
        return;
    }
    for (const struct round *rd = d->open; rd; rd = rd->next)
        if (rd->contrib[wi] && rd->contrib[wi]->s.seq == seq) {
            round_text(d, rd, "kvs_pushpull", req_key(&rd->contrib[wi]->s), buf, size);
            return;
        }
    for (const struct coll *c = d->colls; c; c = c->next)
        for (const struct req *r = c->reqs; r; r = r->next)
            if (r->w == wi && r->s.seq == seq) {
                coll_text(d, c, buf, size);
                return;
            }
    states_explain(d, wi, seq, buf, size);
}

void waits_list(const struct daemon *d, void (*line)(void *ctx, const char *text), void *ctx)
{
    char buf[KVS_MAX_KEY_LEN + 320];

    for (const struct round *rd = d->open; rd; rd = rd->next) {
        for (int i = 0; i < d->nworkers; i++) {
            if (rd->contrib[i]) {
                round_text(d, rd, "", req_key(&rd->contrib[i]->s), buf, sizeof buf);
                line(ctx, buf);
                break;
            }
        }
    }
    /* The open rounds of keys the workers combine: from the area, which
     * is only shown here, never acted on. */
    for (size_t i = 0; i < d->cb_n; i++)
        if (cb_round_text(d, i, buf, sizeof buf))
            line(ctx, buf);
    for (const struct coll *c = d->colls; c; c = c->next) {
        coll_text(d, c, buf, sizeof buf);
        line(ctx, buf);
    }
}
