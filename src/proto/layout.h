/*
 * layout.h - the shape of the shared segments of a job, which kvsd creates
 * and workers map: the control segment (the daemon's doorbell), one segment
 * per worker (its doorbell, its two rings, its staging area), and the arena
 * (stored values, read-only in workers). Each starts with a head whose magic,
 * layout version, kind and size are checked on attach.
 */
#ifndef KVS_LAYOUT_H
#define KVS_LAYOUT_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvs.h"
#include "proto/proto.h"
#include "shm/ring.h"

#define KVS__SEG_MAGIC  0x4745534b5356534bull   /* "KSVSKSEG" */
#define KVS__SEG_LAYOUT 2u

enum kvs__seg_kind { KVS__SEG_CONTROL = 1, KVS__SEG_WORKER = 2, KVS__SEG_ARENA = 3 };

/* A worker's counters, in the head of its segment (zero in the others):
 * the worker alone writes them, with relaxed atomic adds, and kvsd only
 * reads them to show them (kvsctl top), trusting nothing of them. */
struct kvs__seg_stats {
    _Atomic uint64_t pushes;           /* values pushed: a key per push call, each time */
    _Atomic uint64_t bytes;            /* the bytes of the values pushed and pulled */
    _Atomic uint64_t wait_ns;          /* time spent waiting for kvsd's answers and for
                                        * combined rounds */
};

struct kvs__seg_head {                 /* 64 bytes at offset 0 of every segment */
    uint64_t magic;
    uint32_t layout;
    uint32_t kind;
    uint64_t size;
    struct kvs__seg_stats stats;
    uint64_t pad[2];
};
_Static_assert(sizeof(struct kvs__seg_head) == 64, "a segment's head is 64 bytes");

/* Control: the head, then the daemon's doorbell, which workers ring after
 * posting requests. */
#define KVS__CONTROL_BELL_OFF 64
#define KVS__CONTROL_SIZE     4096

/* Worker segment: head; the worker's doorbell (kvsd rings it after posting
 * completions or freeing request slots); the request ring (SQ); the
 * completion ring (CQ); the staging area, page-aligned. */
#define KVS__WORKER_BELL_OFF 64
#define KVS__WORKER_SQ_OFF   128

/* Arena: head, then value blocks from KVS__ARENA_DATA_OFF. Each block is a
 * 64-byte block head followed by the value's bytes; kvsd makes seq odd
 * while it writes the value, even when done (a seqlock readers check). */
#define KVS__ARENA_DATA_OFF 4096
/* The smallest arena kvsd makes (kvsd --arena, kvsrun --arena): its head
 * alone takes 4K, and workers refuse an arena no bigger than its head. */
#define KVS__ARENA_MIN      ((uint64_t)1 << 20)
struct kvs__block_head {
    _Atomic uint64_t seq;
    uint64_t bytes;
    uint64_t pad[6];
};

/* A key's shape record in the arena, in a block of its own: what a worker
 * needs to copy single rows out of the key's value, which a row-sparse
 * pull's completion names (slots.h, KVS__SQE_ROWS). kvsd writes it once,
 * before any completion names it, and never again (a dist type's keys are
 * never re-initialised); a worker reads it once and checks it against the
 * value's range before it trusts a field. */
#define KVS__KEY_META_MAGIC 0x4154454d59454b53ull   /* "SKEYMETA" */
struct kvs__key_meta {
    uint64_t magic;
    uint32_t dtype;
    uint32_t ndim;
    int64_t shape[KVS_MAX_NDIM];
};

/* Offsets of a worker segment's parts, the same computation on both sides. */
struct kvs__worker_layout {
    uint64_t sq_off, cq_off, staging_off, staging_size, size;
};

static inline int kvs__worker_layout(uint32_t sq_entries, uint32_t cq_entries,
                                     uint64_t staging_size, struct kvs__worker_layout *l)
{
    size_t sq = kvs__ring_bytes(sq_entries, KVS__SQE_BYTES),
           cq = kvs__ring_bytes(cq_entries, KVS__CQE_BYTES);

    if (sq == 0 || cq == 0 || staging_size > ((uint64_t)1 << 40))
        return -1;
    l->sq_off = KVS__WORKER_SQ_OFF;
    l->cq_off = l->sq_off + sq;
    l->staging_off = (l->cq_off + cq + 4095) & ~(uint64_t)4095;
    l->staging_size = staging_size;
    l->size = l->staging_off + staging_size;
    return 0;
}

#endif
