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
 * pushes; w->pidfd is set then, else -1. remote_close undoes it. */
int remote_probe(struct worker *w, pid_t pid, uint64_t addr, const uint8_t *cookie);
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

#endif
