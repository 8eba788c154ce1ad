/*
 * remote.h - pushes kvsd reads straight out of a worker's memory
 * (KVS__SQE_REMOTE): the probe at the handshake, the reads, their sources
 * for the engine.
 */
#ifndef KVSD_REMOTE_H
#define KVSD_REMOTE_H

#include "daemon.h"

/* At the handshake (socket thread): 1 when kvsd read the cookie at addr
 * (the hello's probe; 0: none) out of process pid, which then gets remote
 * pushes; w->pidfd is set then, else -1. It also writes the cookie back,
 * which sets w->may_write (outs written in place). What kvsd may not do
 * is said in its log (even under -q), once. remote_close undoes it. */
int remote_probe(const struct daemon *d, struct worker *w, pid_t pid, uint64_t addr,
                 const uint8_t *cookie);
void remote_close(struct worker *w);

/* 1 when r's data is still in its worker's memory (not copied). */
static inline int remote_in_worker(const struct req *r)
{
    return (r->s.flags & KVS__SQE_REMOTE) && !r->copy;
}

/* The sources of the closing round rd's inputs, in worker order as
 * rounds.c lists them (kvs__push_item.src): src[j] for each remote
 * one (else read NULL), each with its context in ctx (ncontrib of
 * remote_ctx_size() bytes). Returns how many are remote. Their workers
 * are marked (w->remote_used, d->remote_read) for job_remote_check. */
int remote_sources(struct daemon *d, const struct round *rd, struct kvs__source *src,
                   void *ctx);
size_t remote_ctx_size(void);

/* 1 when worker w's process has exited (its pidfd says so). */
int remote_exited(const struct worker *w);

/* Copies the remote push r into r->copy (on the host) now. 0, -ENOMEM, or
 * the read's error (the worker's address was bad, or it is gone). */
int remote_copy(struct daemon *d, struct req *r);

/* The outs the closing rounds rds[0..nr) write into as they are summed:
 * per round its sink in sinks[i] (NULL: none), for the remote pushes of
 * its workers that named an out and that kvsd may write. NULL when there
 * are none (or no memory: the outs are then copied, as without).
 * remote_writes_end(status: the engine's) marks each push whose out got
 * the whole value (req.written), says a refused write in the log once per
 * worker, and frees wr (NULL: nothing). Serve thread. */
struct remote_writes;
struct remote_writes *remote_writes_make(struct daemon *d, struct round *const *rds, size_t nr,
                                         const struct kvs__sink **sinks);
void remote_writes_end(struct daemon *d, struct remote_writes *wr, int status);

#endif
