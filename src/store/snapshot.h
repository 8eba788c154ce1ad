/*
 * snapshot.h - a store's snapshot (snapshot.c): every key of an engine,
 * its value, optimizer state and round count, the optimizer's spec, and the
 * step the job committed at, as one checksummed image; written to a file
 * crash-consistently, read back and checked, and restored into an empty
 * engine. kvs_commit's in-process stores keep it in memory; kvsd keeps it in
 * shared memory, and in a checkpoint folder (ckpt.h) with --checkpoint DIR.
 *
 * It knows engines and files, nothing of kvsd, rings or hosts: what a front
 * keeps beside the engine per key (kvsd's round counts) reaches it through
 * the callbacks below.
 */
#ifndef KVS_SNAPSHOT_H
#define KVS_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "store/engine.h"

/* What a snapshot says of the job it was made in, besides its keys. */
struct kvs__snap_meta {
    int64_t step;                      /* the committed step, >= 0 */
    char job[65];                      /* the job's name ("" in process) */
    int32_t nworkers;                  /* the job's workers (1 in process) */
    int32_t sync;                      /* 1 dist_sync, 0 dist_async, -1 in process */
    uint64_t seq;                      /* the commit's number in the job: 1, 2, ... */
    int64_t made_ns;                   /* CLOCK_REALTIME when made */
};

/* Per key, the front's round count (kvsd's rounds applied; 0 in process):
 * rounds(ctx, info) when writing; made(ctx, key, info, rounds) when
 * restoring, after the key is stored again, 0 or an error that stops the
 * restore. */
typedef uint64_t (*kvs__snap_rounds_fn)(void *ctx, const struct kvs__entry_info *info);
typedef int (*kvs__snap_made_fn)(void *ctx, kvs_key_t key, const struct kvs__entry_info *info,
                                 uint64_t rounds, struct kvs__err *e);

/* Writes eng's snapshot to path: a new file beside it (path.tmp.PID), the
 * image, a CRC-32C over all of it, then (durable) fsync, rename over path,
 * fsync of the directory; without durable, the rename alone (a file in
 * shared memory, which no power loss outlives anyway). The file at path is
 * the old one or the whole new one, whatever happens meanwhile. Values on a
 * GPU are KVS_ENOTSUP naming the key. *bytes (may be NULL): the file's size.
 * Errors: KVS_ENOTSUP, -errno (-ENOSPC: the old file stays), -ENOMEM. */
int kvs__snapshot_write(struct kvs__engine *eng, const struct kvs__snap_meta *meta,
                        kvs__snap_rounds_fn rounds, void *ctx, const char *path,
                        int durable, uint64_t *bytes, struct kvs__err *e);

/* A snapshot taken now and written later, while the engine goes on
 * changing (kvsd answers a commit once it has one, and a thread writes
 * it): the records of every key (name, shape, round count) and where
 * its value lies, the optimizer's spec, and its states' bytes, copied.
 * Values are not copied: the front keeps each captured value as it was
 * until its bytes are written, or hands a copy to the source below.
 * rounds is called once per key, in the records' order, here. Errors:
 * those of kvs__snapshot_write before it writes (KVS_ENOTSUP for a value
 * on a GPU, KVS_EBADARG), -ENOMEM. */
struct kvs__snap_capture;
int kvs__snapshot_capture(struct kvs__engine *eng, const struct kvs__snap_meta *meta,
                          kvs__snap_rounds_fn rounds, void *ctx,
                          struct kvs__snap_capture **out, struct kvs__err *e);
size_t kvs__capture_nkeys(const struct kvs__snap_capture *c);
void kvs__capture_free(struct kvs__snap_capture *c);          /* NULL is a no-op */

/* Where the bytes [off, off + n) of captured key i's value lie when they
 * are written: begin returns them (live + off while the front has not
 * changed the value, else from its copy); end follows once they are put
 * into the file. Pieces are small (1 MiB at most) and come in order, key
 * by key, so that a front's lock held from begin to end is held briefly. */
struct kvs__snap_source {
    const void *(*begin)(void *ctx, size_t i, const void *live, uint64_t off, size_t n);
    void (*end)(void *ctx, size_t i, uint64_t off, size_t n);
    void *ctx;
};

/* Writes the image of c to path as kvs__snapshot_write does (the same
 * bytes it would have written when c was taken), each value read through
 * src (NULL: the values as they lie now). Any thread; c is not changed. */
int kvs__snapshot_write_capture(const struct kvs__snap_capture *c,
                                const struct kvs__snap_source *src, const char *path,
                                int durable, uint64_t *bytes, struct kvs__err *e);

/* The same image in memory (*out malloc'd, *len its bytes). */
int kvs__snapshot_encode(struct kvs__engine *eng, const struct kvs__snap_meta *meta,
                         kvs__snap_rounds_fn rounds, void *ctx, uint8_t **out, size_t *len,
                         struct kvs__err *e);

/* A snapshot read and checked whole (magic, version, lengths, checksum):
 * an opaque image, mapped or in memory. */
struct kvs__snapshot;

/* Maps path read-only (the mapping stays in the snapshot: a big store's
 * file is not copied into memory), or takes len bytes at img (copied), and
 * checks them; what names the image in messages. Nothing of the caller
 * changes. Errors: KVS_ECORRUPT (truncated, a bad checksum, another format
 * or version, a bad record), -errno, -ENOMEM. */
int kvs__snapshot_open(const char *path, struct kvs__snapshot **out, struct kvs__err *e);
int kvs__snapshot_from(const uint8_t *img, size_t len, const char *what,
                       struct kvs__snapshot **out, struct kvs__err *e);
const struct kvs__snap_meta *kvs__snapshot_meta(const struct kvs__snapshot *s);
size_t kvs__snapshot_nkeys(const struct kvs__snapshot *s);
uint64_t kvs__snapshot_bytes(const struct kvs__snapshot *s);
void kvs__snapshot_free(struct kvs__snapshot *s);            /* NULL is a no-op */

/* Stores every key of s into eng, which must hold no key (else
 * KVS_EKEYEXISTS): its value, then the optimizer's spec and every key's
 * state; made (may be NULL) is told each key's round count. On failure eng
 * may hold some of the keys: the caller drops it. */
int kvs__snapshot_restore(struct kvs__engine *eng, const struct kvs__snapshot *s,
                          kvs__snap_made_fn made, void *ctx, struct kvs__err *e);

#endif
