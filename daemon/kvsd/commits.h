/*
 * commits.h - the job's commits: the snapshot kvsd writes at each
 * KVS__OP_COMMIT (in its runtime dir, <dir>/<job>.snap), the start from
 * one (--restore), and the copies into a checkpoint directory that a
 * thread of its own makes (--checkpoint DIR).
 */
#ifndef KVSD_COMMITS_H
#define KVSD_COMMITS_H

#include "daemon.h"

/* At start-up, once the engine is made and before any worker comes: the
 * snapshot's path; with --restore the last snapshot loaded into the
 * engine (<dir>/<job>.snap, else the newest valid one of the checkpoint
 * directory), its keys' rounds made; with --checkpoint the thread
 * started. 0, or the error (said in e: a snapshot of another job, a
 * snapshot that does not load). */
int commits_start(struct daemon *d, struct kvs__err *e);

/* Restores the snapshot s (opened from the file from), which it frees: a
 * snapshot of another job is refused (KVS_EBADARG, naming what differs).
 * 0, or the error (the engine may then hold some keys). Serve thread,
 * before any worker is served. */
struct kvs__snapshot;
int commits_apply(struct daemon *d, struct kvs__snapshot *s, const char *from,
                  struct kvs__err *e);

/* The commit at step, every worker's pushes before it applied: the
 * snapshot captured and handed to the writer thread, which writes it,
 * then claims it (d->resume_step, d->commit_seq: commits_poll) and hands
 * the copy into the checkpoint directory to its thread. With
 * checkpoint_sync, written and copied before it returns, as without a
 * writer. 0, or the error (KVS_ENOTSUP: a key on a GPU; -errno
 * writing the file in sync), which changes no earlier
 * commit. Serve thread. */
int commits_make(struct daemon *d, int64_t step, struct kvs__err *e);

/* Each serve pass: a snapshot the writer has finished is claimed as the
 * last commit. Serve thread. */
void commits_poll(struct daemon *d);

/* kvsctl checkpoint: the last commit's snapshot copied into the
 * checkpoint directory now, durably; returns once it is there. 0, or the
 * error (no --checkpoint, no commit yet, the write's). Serve thread. */
int commits_force(struct daemon *d, struct kvs__err *e);

/* What kvsctl status shows of the copies on disk: the newest seq copied
 * (0: none), the failed copies, and the newest failure's message (may be
 * NULL: msg[0] then ""). Any thread. */
void commits_disk(const struct daemon *d, uint64_t *seq, uint64_t *failures, char *msg,
                  size_t msg_len);

/* At exit: with done (every worker left), the copy of the last commit is
 * waited for and the snapshot file removed (the job is over); the thread
 * joined either way. */
void commits_stop(struct daemon *d, int done);

#endif
