/*
 * xcommits.h - the snapshots of a job across hosts (xcommits.c): the two
 * newest a host keeps in its runtime dir, the steps it offers in its join,
 * and the start from the step the hosts agreed on.
 */
#ifndef KVSD_XCOMMITS_H
#define KVSD_XCOMMITS_H

#include "daemon.h"

/* Before the join, with --restore: the steps of the snapshots this host
 * holds whole (<job>.snap, <job>.snap.prev, the checkpoint directory's),
 * newest first, into d->held_steps. 0, or KVS_EBADARG (said in e) when the
 * checkpoint directory's newest snapshot is another job's. */
int xcommits_held(struct daemon *d, struct kvs__err *e);

/* After the join, with --restore: the snapshot of d->agreed_step opened
 * into *out and its file's name into from (*out NULL for -1: an empty
 * store), for commits_apply; the runtime dir left holding it as the last
 * commit. 0, or the error (said in e: this host lacks it). Serve thread,
 * before any worker is served. */
struct kvs__snapshot;
int xcommits_find(struct daemon *d, struct kvs__snapshot **out, char *from, size_t len,
                  struct kvs__err *e);

/* Before a commit's snapshot is written: the last one stays beside it as
 * <job>.snap.prev, for a roll back to the step before when another host
 * lacks the new one. */
void xcommits_keep_last(struct daemon *d);

/* The job is over: the kept one goes too. */
void xcommits_drop_kept(struct daemon *d);

#endif
