/*
 * ring.c - the single-producer/single-consumer slot rings that a worker and
 * kvsd share, and the doorbells their waiters sleep on: the ring header's
 * layout in shared memory, the index arithmetic, and the futex calls.
 *
 * It must never index a slot with a value read from shared memory (only
 * with its own counter and its own copy of the mask), never trust the other
 * side's index before checking it against the ring's size, never read the
 * geometry back from shared memory after attach, and never make a waiter
 * spin for longer than it asked to before it sleeps.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm/ring.h"

#define RING_MAGIC   0x3152534bu       /* "KSR1" little-endian */
#define RING_FORMAT  1u                /* bumped when struct ring_hdr changes */
#define CACHE_LINE   64

#define MIN_ENTRIES  2u
#define MAX_ENTRIES  (1u << 20)
#define MIN_SLOT     8u
#define MAX_SLOT     65536u

/* Spin iterations that only pause before each also yields the core. A
 * handful: enough to catch a bell rung from another running core (a cache
 * line's round trip), no more. These boxes run more processes than cores
 * and the scheduler often packs a job's processes onto fewer cores than
 * it has, so the side we wait for is often runnable on our own core and
 * can move only once we yield; every pause before the first yield is
 * added to each such hand-over (256 pauses, some 7 us, made a 4 KiB
 * round of 2 workers take over twice as long). A yield that finds no
 * one else to run returns at once, so a spin that yields on every pass
 * still sees the bell within a system call's time. */
#define SPIN_PAUSES  8
/* What a waiter sleeps for between polls when the futex call itself fails
 * (a seccomp filter refusing it): slow, but never a burnt core. */
#define POLL_NS      1000000

/*
 * The producer writes only tail, the consumer only head; each sits on its
 * own cache line so that one side's publishing does not steal the line the
 * other side is writing. The first line is written once, by the creating
 * side, and read once by the other side on attach.
 */
struct ring_hdr {
    _Alignas(CACHE_LINE) uint32_t magic;
    uint32_t format;
    uint32_t entries;
    uint32_t slot_size;
    _Alignas(CACHE_LINE) _Atomic uint32_t tail;
    _Alignas(CACHE_LINE) _Atomic uint32_t head;
};

_Static_assert(sizeof(struct ring_hdr) == 3 * CACHE_LINE, "ring header is three cache lines");

/* ---- doorbells ---- */

int64_t kvs__now_ns(void)
{
    struct timespec ts;

    /* Cannot fail for CLOCK_MONOTONIC with a valid pointer. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Shared futexes (no FUTEX_PRIVATE_FLAG): the kernel keys them by the
 * mapping's page, so a ring in one process wakes a sleeper in another. */
static long futex_wait(_Atomic uint32_t *addr, uint32_t val, const struct timespec *rel)
{
    return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, rel, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

uint32_t kvs__bell_seq(struct kvs__bell *b)
{
    return atomic_load_explicit(&b->seq, memory_order_acquire);
}

/*
 * Why no wake-up can be lost. The ringer does  seq++ ; read sleepers  and
 * the waiter does  sleepers++ ; read seq ; FUTEX_WAIT(seq == seen). The
 * four memory operations are seq_cst, so they fall in one total order that
 * keeps each thread's program order. If the ringer's read of sleepers comes
 * before the waiter's increment, then the ringer's seq++ comes before the
 * waiter's read of seq, which therefore sees the new value: the waiter does
 * not sleep. If it comes after, the ringer sees sleepers > 0 and calls
 * FUTEX_WAKE; the kernel compares seq with seen under the futex bucket lock
 * before queueing the waiter, so a wake that comes before the waiter is
 * queued makes FUTEX_WAIT return EAGAIN instead of sleeping. With release
 * and acquire alone, each side's read could be ordered before its own write
 * (C11 allows it, and so do weakly ordered CPUs; x86's locked add happens
 * not to), both would see the old values, and the waiter would sleep
 * through the ring.
 *
 * The seq++ is also a release: data published before kvs__bell_ring (a
 * ring's tail) is visible to a waiter that has seen seq move. The one thing
 * this cannot see is exactly 2^32 rings between taking seen and waiting.
 */
void kvs__bell_ring(struct kvs__bell *b)
{
    atomic_fetch_add_explicit(&b->seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst) > 0)
        futex_wake_all(&b->seq);
}

static int64_t add_sat(int64_t a, int64_t b)
{
    return b > INT64_MAX - a ? INT64_MAX : a + b;
}

/* Spins until seq moves (1) or the clock reaches end (0). */
static int spin(struct kvs__bell *b, uint32_t seen, int64_t end)
{
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(&b->seq, memory_order_acquire) != seen)
            return 1;
        if (i < SPIN_PAUSES) {
            cpu_relax();               /* a few hundred ns in all: no clock read */
            continue;
        }
        sched_yield();
        if (kvs__now_ns() >= end)
            return 0;
    }
}

int kvs__bell_wait(struct kvs__bell *b, uint32_t seen, int64_t deadline_ns, int64_t spin_ns)
{
    int rc;

    if (atomic_load_explicit(&b->seq, memory_order_acquire) != seen)
        return 0;

    if (spin_ns > 0) {
        int64_t end = add_sat(kvs__now_ns(), spin_ns);

        if (deadline_ns != 0 && deadline_ns < end)
            end = deadline_ns;
        if (spin(b, seen, end))
            return 0;
    }
    if (deadline_ns == 0)
        return -ETIMEDOUT;

    atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
    for (;;) {
        int64_t left;
        struct timespec rel;

        if (atomic_load_explicit(&b->seq, memory_order_seq_cst) != seen) {
            rc = 0;
            break;
        }
        left = deadline_ns - kvs__now_ns();
        if (left <= 0) {
            rc = -ETIMEDOUT;
            break;
        }
        /* A relative timeout, recomputed on every pass, because a signal or
         * a spurious wake-up returns early and the deadline is absolute. */
        rel.tv_sec = left / 1000000000;
        rel.tv_nsec = left % 1000000000;
        if (futex_wait(&b->seq, seen, &rel) != 0 && errno != EINTR && errno != EAGAIN &&
            errno != ETIMEDOUT) {
            /* The futex is unusable here; fall back to polling. */
            if (left > POLL_NS) {
                rel.tv_sec = 0;
                rel.tv_nsec = POLL_NS;
            }
            nanosleep(&rel, NULL);
        }
    }
    /* Relaxed: this waiter wants no more wake-ups, and a ringer that still
     * sees the old count only makes one needless FUTEX_WAKE. */
    atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
    return rc;
}

/* ---- rings ---- */

size_t kvs__ring_bytes(uint32_t entries, uint32_t slot_size)
{
    size_t data, total;

    if (entries < MIN_ENTRIES || entries > MAX_ENTRIES || (entries & (entries - 1)) != 0)
        return 0;
    if (slot_size < MIN_SLOT || slot_size > MAX_SLOT || slot_size % 8 != 0)
        return 0;
    /* Only a 32-bit size_t can overflow: 2^20 slots of 2^16 bytes. */
    if (__builtin_mul_overflow((size_t)entries, (size_t)slot_size, &data) ||
        __builtin_add_overflow(data, sizeof(struct ring_hdr) + CACHE_LINE - 1, &total))
        return 0;
    return total & ~(size_t)(CACHE_LINE - 1);
}

int kvs__ring_attach(struct kvs__ring *r, void *mem, uint32_t entries, uint32_t slot_size,
                     int init)
{
    struct ring_hdr *h = mem;

    if (r == NULL || mem == NULL || (uintptr_t)mem % CACHE_LINE != 0 ||
        kvs__ring_bytes(entries, slot_size) == 0)
        return -EINVAL;

    if (init) {
        memset(h, 0, sizeof *h);
        h->magic = RING_MAGIC;
        h->format = RING_FORMAT;
        h->entries = entries;
        h->slot_size = slot_size;
        atomic_store_explicit(&h->tail, 0, memory_order_relaxed);
        atomic_store_explicit(&h->head, 0, memory_order_relaxed);
    } else {
        /* Read once, here only: afterwards this side uses its own copies,
         * whatever the other side writes into the header. */
        uint32_t magic = h->magic, format = h->format;
        uint32_t e = h->entries, s = h->slot_size;

        if (magic != RING_MAGIC || format != RING_FORMAT || e != entries || s != slot_size)
            return -EINVAL;
    }

    r->hdr = h;
    r->slots = (unsigned char *)mem + sizeof *h;
    r->entries = entries;
    r->mask = entries - 1;
    r->slot_size = slot_size;
    /* Each side's own index is 0 until it moves it itself, and a cached 0
     * for the other side's only errs towards "full" or "empty": the first
     * such answer re-reads the real index. */
    r->local = 0;
    r->cached = 0;
    return 0;
}

static void set_err(int *err, int code)
{
    if (err != NULL)
        *err = code;
}

static unsigned char *slot_at(const struct kvs__ring *r, uint32_t index)
{
    return r->slots + (size_t)(index & r->mask) * r->slot_size;
}

void *kvs__ring_reserve(struct kvs__ring *r, int *err)
{
    struct ring_hdr *h = r->hdr;

    if (r->local - r->cached >= r->entries) {
        /* Acquire: the consumer's reads of the slots it freed are done
         * before we overwrite them. */
        uint32_t head = atomic_load_explicit(&h->head, memory_order_acquire);

        /* Unsigned: a head ahead of our tail wraps to a huge distance. */
        if (r->local - head > r->entries) {
            set_err(err, -EPROTO);
            return NULL;
        }
        r->cached = head;
        if (r->local - head == r->entries) {
            set_err(err, 0);
            return NULL;
        }
    }
    set_err(err, 0);
    return slot_at(r, r->local);
}

void kvs__ring_commit(struct kvs__ring *r)
{
    struct ring_hdr *h = r->hdr;

    /* Without a reserved slot the ring is full as far as we know; publishing
     * would hand the consumer a tail it must reject. */
    if (r->local - r->cached >= r->entries)
        return;
    r->local++;
    atomic_store_explicit(&h->tail, r->local, memory_order_release);
}

const void *kvs__ring_peek(struct kvs__ring *r, int *err)
{
    struct ring_hdr *h = r->hdr;

    if (r->cached == r->local) {
        /* Acquire: the producer's writes to the slots are visible once we
         * see the tail that publishes them. */
        uint32_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);

        /* Unsigned: a tail behind our head wraps to a huge distance. */
        if (tail - r->local > r->entries) {
            set_err(err, -EPROTO);
            return NULL;
        }
        r->cached = tail;
        if (tail == r->local) {
            set_err(err, 0);
            return NULL;
        }
    }
    set_err(err, 0);
    return slot_at(r, r->local);
}

void kvs__ring_pop(struct kvs__ring *r)
{
    struct ring_hdr *h = r->hdr;

    /* Nothing peeked: moving head past tail would be an impossible index. */
    if (r->cached == r->local)
        return;
    r->local++;
    atomic_store_explicit(&h->head, r->local, memory_order_release);
}
