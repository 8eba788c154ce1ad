/*
 * collectives.h - inits of a key and barriers: they complete when every
 * worker still in the job has come.
 */
#ifndef KVSD_COLLECTIVES_H
#define KVSD_COLLECTIVES_H

#include "daemon.h"

/* A worker's init, barrier or commit arrives; the collective completes when every
 * worker still in the job has come. */
void colls_arrive(struct daemon *d, struct req *r);

/* Completes the collectives that a worker's (or a host's) leaving leaves
 * complete. */
void colls_check(struct daemon *d);

/* A commit whose workers have all come waits for their pushes
 * (d->commit_waits): made once they are applied. Each serve pass. */
void colls_commit_check(struct daemon *d);

/* Across hosts: host h's workers all made collective m->op (host 0 hears
 * it), or host 0 says every host did (the others hear it, with an init's
 * value). */
void colls_remote_arrive(struct daemon *d, int h, const struct kvs__wire_msg *m);
void colls_remote_done(struct daemon *d, int h, const struct kvs__wire_msg *m);
/* 1 when this host's workers have all arrived in the init of key, which
 * waits for its end from host 0 (so another host may already send of the
 * key): its value's bytes in *bytes. Else 0. */
int colls_init_waiting(struct daemon *d, kvs_key_t key, uint64_t *bytes);

/* Stores the values of the inits completed since the last call, in one
 * engine call, and answers their workers. run_list calls it at its end. */
void colls_finish_inits(struct daemon *d);

/* Registers what a failing job does to the collectives waiting: they end
 * with its failure (job_hook). At start-up. */
void colls_init(struct daemon *d);

#endif
