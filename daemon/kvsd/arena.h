/*
 * arena.h - shared segments' heads, the arena the values live in, and the
 * seqlock a write of a value takes.
 */
#ifndef KVSD_ARENA_H
#define KVSD_ARENA_H

#include "daemon.h"

/* Writes a segment's head (magic, layout, kind, size) at seg. */
void arena_head_init(void *seg, uint32_t kind, uint64_t size);

/* The engine's allocator (struct kvs__mem, ctx is the daemon): values in
 * the shared arena. Serve thread only, once setup is done. */
void *arena_alloc(void *ctx, size_t bytes);
/* Bytes of the arena not handed out yet. */
uint64_t arena_room(const struct daemon *d);
void arena_free(void *ctx, void *p, size_t bytes);

/* Bracket a write of a value in the arena with its block's seqlock: a
 * worker copying the value meanwhile sees the sequence move and copies it
 * again. */
void arena_seq_begin(void *value);
void arena_seq_end(void *value);

#endif
