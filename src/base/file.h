/*
 * file.h - files replaced whole, never seen half written: the new bytes go
 * to a temporary file beside the target, which is synced, closed and
 * renamed over it; then the directory is synced, so that the rename
 * survives a power cut too. The snapshot, the checkpoint folder and the
 * optimizer state file all write this way.
 */
#ifndef KVS_FILE_H
#define KVS_FILE_H

#include "base/error.h"

/* fsync(fd), again while it is interrupted: 0 or -errno. */
int kvs__fsync(int fd);

/* Makes a rename in dir (or in the directory of path) durable. A file
 * system that cannot sync a directory and says so (EINVAL, ENOTSUP)
 * counts as done: the file itself was synced. Errors: -errno, -ENOMEM. */
int kvs__fsync_dir(const char *dir, struct kvs__err *e);
int kvs__fsync_dir_of(const char *path, struct kvs__err *e);

/* A new file named tmp for writing, made exclusively and not through a
 * symbolic link (a stale one of an earlier process of this pid is removed
 * first): its descriptor, or -errno. */
int kvs__file_create(const char *tmp, struct kvs__err *e);

/* Syncs fd (with durable), closes it and renames tmp to path; the caller
 * then syncs the directory (kvs__fsync_dir) when durable. fd is closed
 * whatever happens; on failure tmp is the caller's to remove. */
int kvs__file_finish(int fd, const char *tmp, const char *path, int durable,
                     struct kvs__err *e);

#endif
