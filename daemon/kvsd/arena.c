/*
 * arena.c - kvsd's shared memory as the workers see it: the head that
 * starts every segment kvsd makes (the control segment, the arena, each
 * worker's), and the arena where the engine keeps values: a bump allocator
 * over one memfd that workers map read-only, and the seqlock at the head of
 * each value's block.
 *
 * It must never reuse or move a block (workers hold offsets into the arena
 * for as long as the job runs), never hand out room past the arena's size,
 * and never map, grow or unmap a segment: setup and the handshake do.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "arena.h"

void arena_head_init(void *seg, uint32_t kind, uint64_t size)
{
    struct kvs__seg_head h = { .magic = KVS__SEG_MAGIC, .layout = KVS__SEG_LAYOUT,
                               .kind = kind, .size = size };

    memcpy(seg, &h, sizeof h);
}

/* ---- the arena: where the engine keeps values ------------------------- */

/* Values are allocated from the shared arena, each after a block head that
 * holds its seqlock. Freed blocks are not reused: values are made by init
 * and live as long as the job. */
void *arena_alloc(void *ctx, size_t bytes)
{
    struct daemon *d = ctx;
    uint64_t need = sizeof(struct kvs__block_head) + ((bytes + 63) & ~(uint64_t)63);
    struct kvs__block_head *bh;

    if (bytes > d->o.arena || d->arena_next + need > d->o.arena)
        return NULL;
    bh = (struct kvs__block_head *)(d->arena + d->arena_next);
    atomic_store_explicit(&bh->seq, 0, memory_order_relaxed);
    bh->bytes = bytes;
    d->arena_next += need;
    return bh + 1;
}

uint64_t arena_room(const struct daemon *d)
{
    return d->o.arena - d->arena_next;
}

void arena_free(void *ctx, void *p, size_t bytes)
{
    (void)ctx;
    (void)p;
    (void)bytes;
}

static struct kvs__block_head *block_of(void *value)
{
    return (struct kvs__block_head *)value - 1;
}

void arena_seq_begin(void *value)
{
    atomic_fetch_add_explicit(&block_of(value)->seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

void arena_seq_end(void *value)
{
    atomic_fetch_add_explicit(&block_of(value)->seq, 1, memory_order_release);
}
