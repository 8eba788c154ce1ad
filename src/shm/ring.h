/*
 * ring.h - lock-free single-producer/single-consumer rings of fixed-size
 * slots in shared memory, and the doorbells (event counts on a futex) that
 * their waiters sleep on.
 *
 * A ring's header and slots live in memory both processes map read-write,
 * so each side keeps the geometry in its own struct kvs__ring (never
 * re-read from shared memory) and checks every index it reads from the
 * other side: a head or tail that cannot be right makes the call fail with
 * -EPROTO, never an access out of bounds.
 *
 * Waiting: a doorbell is a 32-bit sequence bumped on every ring and a count
 * of sleepers. A waiter takes the sequence, re-checks its condition, then
 * spins briefly and sleeps on the futex until the sequence moves or its
 * deadline passes. Ringing a bell nobody sleeps on costs no system call.
 * Futexes are the shared (not private) kind: waiters are in several
 * processes.
 */
#ifndef KVS_RING_H
#define KVS_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ---- doorbells ---- */

struct kvs__bell {                     /* in shared memory, zero-initialised */
    _Atomic uint32_t seq;
    _Atomic uint32_t sleepers;
};

uint32_t kvs__bell_seq(struct kvs__bell *b);   /* acquire load of seq */
void kvs__bell_ring(struct kvs__bell *b);      /* seq++; wakes every sleeper, if any */

/* Returns 0 once b->seq != seen, -ETIMEDOUT when deadline_ns (CLOCK_MONOTONIC,
 * absolute; 0 = do not sleep, only spin) passes first. Spins for at most
 * spin_ns before sleeping (0: never spin). Never fails otherwise. */
int kvs__bell_wait(struct kvs__bell *b, uint32_t seen, int64_t deadline_ns, int64_t spin_ns);

/* CLOCK_MONOTONIC now, in nanoseconds. */
int64_t kvs__now_ns(void);

/* ---- rings ---- */

/* Bytes of shared memory a ring of `entries` slots of `slot_size` bytes takes
 * (header included, a multiple of 64), or 0 when entries is not a power of two
 * in [2, 2^20] or slot_size not a multiple of 8 in [8, 65536]. */
size_t kvs__ring_bytes(uint32_t entries, uint32_t slot_size);

struct kvs__ring {                     /* one side's private view */
    void *hdr;                         /* shared header */
    unsigned char *slots;              /* shared slots */
    uint32_t entries, mask, slot_size; /* trusted copies */
    uint32_t local;                    /* producer: next tail; consumer: next head */
    uint32_t cached;                   /* the other side's index as last read and
                                        * checked: producer: head; consumer: tail */
};

/* Attaches to a ring at mem (kvs__ring_bytes(entries, slot_size) bytes,
 * 64-byte aligned). init non-zero: zeroes the header and writes the geometry
 * into it (the creating side, before anyone else maps it); init zero: the
 * header must carry that same geometry. Returns 0 or -EINVAL (bad geometry). */
int kvs__ring_attach(struct kvs__ring *r, void *mem, uint32_t entries, uint32_t slot_size,
                     int init);

/* Producer: a free slot to fill, or NULL when the ring is full. -EPROTO
 * (via *err) when the consumer's head is impossible. */
void *kvs__ring_reserve(struct kvs__ring *r, int *err);
/* Producer: publishes the slot reserved last (release order). */
void kvs__ring_commit(struct kvs__ring *r);

/* Consumer: the oldest published slot, or NULL when empty; -EPROTO (via
 * *err) when the producer's tail is impossible (more than `entries` ahead). */
const void *kvs__ring_peek(struct kvs__ring *r, int *err);
/* Consumer: frees the slot returned by the last peek (release order). */
void kvs__ring_pop(struct kvs__ring *r);

#endif
