/*
 * ckpt.h - a checkpoint folder (kvsrun --checkpoint DIR): the last two
 * snapshots of a job on disk (ckpt.c), which kvsd restarted from disk
 * reads back.
 */
#ifndef KVS_CKPT_H
#define KVS_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "store/snapshot.h"

/* Copies the snapshot file src (a checked one, e.g. kvsd's in shared
 * memory) into dir as snap-SEQ.kvs, durably (new file, fsync, rename, fsync
 * of dir), then removes every snap-*.kvs of dir but the two newest and
 * the one written (SEQ should grow across restarts: the newest is the
 * highest). Temp files of earlier copies whose writer is gone (a kvsd
 * killed while it copied) are removed first. Errors: -errno (-ENOSPC:
 * nothing of dir changes but a removed temp file). */
int kvs__ckpt_save(const char *dir, const char *src, uint64_t seq, struct kvs__err *e);

/* 1 when dir holds a file of commit seq's name (snap-SEQ.kvs), else 0; its
 * content is not checked. */
int kvs__ckpt_has(const char *dir, uint64_t seq);

/* Opens the newest snapshot of dir that checks whole. A newer one that does
 * not is reported through report(ctx, path, why) (may be NULL) and passed
 * over. *out NULL (and 0 returned) when dir holds none that checks.
 * Errors: -errno reading dir (-ENOENT: no such dir), -ENOMEM. */
int kvs__ckpt_newest(const char *dir, struct kvs__snapshot **out, char *path, size_t path_len,
                     void (*report)(void *ctx, const char *path, const char *why),
                     void *ctx, struct kvs__err *e);

/* The same for the newest of commit step's (of a job across hosts, whose
 * hosts restore a step they agree on), passing over those that do not
 * check, unsaid. */
int kvs__ckpt_find(const char *dir, int64_t step, struct kvs__snapshot **out, char *path,
                   size_t path_len, struct kvs__err *e);

/* Renames dir's snapshots of commits after seq (snap-SEQ.kvs, SEQ above
 * seq) to snap-SEQ.kvs.rolled-back, which no restore reads: commits a job
 * rolled back past, which its next commits must not meet. Returns how many
 * (0 for no dir). */
int kvs__ckpt_set_aside(const char *dir, uint64_t seq);

/* The steps of dir's snapshots of job that check whole, newest first, at
 * most max into steps: their count (0 for no dir). */
size_t kvs__ckpt_steps(const char *dir, const char *job, int64_t *steps, size_t max);

#endif
