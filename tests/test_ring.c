/*
 * test_ring.c - unit tests of ring.c: ring geometry and attach, filling,
 * draining and wrapping (the free-running counters across 2^32 too),
 * indexes corrupted by the other side (-EPROTO, never an access out of
 * bounds: the rings live in exactly-sized heap blocks that ASan watches),
 * the doorbells' timeouts, signals and wake-ups (rings raced against
 * waiters on their way to sleep, to catch a lost one), and a million
 * sequenced entries through an 8-slot ring between two threads and between
 * two processes, each side sleeping on a bell when the ring is full or
 * empty.
 * Meant to run under -fsanitize=thread as well, the fork test included:
 * every thread has been joined by the time it forks.
 *
 * cmocka's asserts run on the main thread of the parent only: threads and
 * the forked child report a code that the main thread checks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/ring.h"

/* The header as ring.c lays it out: a geometry line, then the producer's
 * tail and the consumer's head on lines of their own. The corruption tests
 * write through these; layout_matches() checks them against real use. */
#define HDR_BYTES 192
#define TAIL_OFF  64
#define HEAD_OFF  128

#define SEC       1000000000LL
#define MS        1000000LL
#define US        1000LL

#define STREAM_N  1000000u
#define STREAM_ENTRIES 8u
#define SLOT      16u                  /* two uint64_t: the number and a check word */
#define SPIN_NS   (50 * US)            /* about one cross-core futex wake-up */
/* How long one wait for a ring may take before it counts as a lost
 * wake-up. Per wait, not per stream: on a box with more runnable processes
 * than cores a stream can take many seconds without anything being wrong. */
#define WAIT_LIMIT (5 * SEC)

static _Atomic uint32_t *hdr_word(void *mem, size_t off)
{
    return (_Atomic uint32_t *)((unsigned char *)mem + off);
}

static void set_tail(void *mem, uint32_t v)
{
    atomic_store(hdr_word(mem, TAIL_OFF), v);
}

static void set_head(void *mem, uint32_t v)
{
    atomic_store(hdr_word(mem, HEAD_OFF), v);
}

static uint64_t check_word(uint64_t i)
{
    return ~i * 0x9e3779b97f4a7c15u;
}

/* A ring in a heap block of exactly kvs__ring_bytes, so that ASan reports
 * any access past its end. */
static void *ring_mem(uint32_t entries, uint32_t slot_size)
{
    size_t n = kvs__ring_bytes(entries, slot_size);
    void *p;

    assert_true(n > 0);
    p = aligned_alloc(64, n);
    assert_non_null(p);
    memset(p, 0xa5, n);
    return p;
}

/* A producer and a consumer on one fresh ring. */
static void *pair(struct kvs__ring *prod, struct kvs__ring *cons, uint32_t entries,
                  uint32_t slot_size)
{
    void *mem = ring_mem(entries, slot_size);

    assert_int_equal(kvs__ring_attach(prod, mem, entries, slot_size, 1), 0);
    assert_int_equal(kvs__ring_attach(cons, mem, entries, slot_size, 0), 0);
    return mem;
}

static void push_u64(struct kvs__ring *prod, uint64_t v)
{
    int err = 1;
    uint64_t *s = kvs__ring_reserve(prod, &err);

    assert_non_null(s);
    assert_int_equal(err, 0);
    s[0] = v;
    s[1] = check_word(v);
    kvs__ring_commit(prod);
}

static void pop_u64(struct kvs__ring *cons, uint64_t want)
{
    int err = 1;
    const uint64_t *s = kvs__ring_peek(cons, &err);

    assert_non_null(s);
    assert_int_equal(err, 0);
    assert_true(s[0] == want);
    assert_true(s[1] == check_word(want));
    kvs__ring_pop(cons);
}

static void assert_full(struct kvs__ring *prod)
{
    int err = 1;

    assert_null(kvs__ring_reserve(prod, &err));
    assert_int_equal(err, 0);
}

static void assert_empty(struct kvs__ring *cons)
{
    int err = 1;

    assert_null(kvs__ring_peek(cons, &err));
    assert_int_equal(err, 0);
}

/* ---- geometry ---- */

static void test_ring_bytes(void **state)
{
    static const struct { uint32_t entries, slot; } bad[] = {
        { 0, 8 }, { 1, 8 }, { 3, 8 }, { 6, 8 }, { 1000, 8 }, { (1u << 20) + 1, 8 },
        { 1u << 21, 8 }, { 1u << 31, 8 }, { UINT32_MAX, 8 },
        { 2, 0 }, { 2, 4 }, { 2, 7 }, { 2, 12 }, { 2, 65536 + 8 }, { 2, UINT32_MAX },
        { 0, 0 },
    };
    static const struct { uint32_t entries, slot; } good[] = {
        { 2, 8 }, { 2, 65536 }, { 8, 16 }, { 8, 24 }, { 64, 256 }, { 256, 512 },
        { 1u << 20, 8 }, { 1u << 20, 65536 },
    };
    (void)state;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(kvs__ring_bytes(bad[i].entries, bad[i].slot), 0);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        size_t payload = (size_t)good[i].entries * good[i].slot;
        size_t n = kvs__ring_bytes(good[i].entries, good[i].slot);

        if (sizeof(size_t) < 8 && payload / good[i].slot != good[i].entries)
            continue;
        assert_int_equal(n % 64, 0);
        assert_true(n >= payload + HDR_BYTES);
        assert_true(n < payload + HDR_BYTES + 64);
    }
    assert_int_equal(kvs__ring_bytes(2, 8), 256);
    assert_int_equal(kvs__ring_bytes(8, 64), 192 + 512);
}

static void test_attach(void **state)
{
    struct kvs__ring r, c;
    void *mem = ring_mem(8, 16);
    size_t n = kvs__ring_bytes(8, 16);
    (void)state;

    /* Bad geometry, alignment, pointers. */
    assert_int_equal(kvs__ring_attach(&r, mem, 6, 16, 1), -EINVAL);
    assert_int_equal(kvs__ring_attach(&r, mem, 8, 12, 1), -EINVAL);
    assert_int_equal(kvs__ring_attach(&r, mem, 1, 16, 1), -EINVAL);
    assert_int_equal(kvs__ring_attach(&r, (unsigned char *)mem + 8, 8, 16, 1), -EINVAL);
    assert_int_equal(kvs__ring_attach(&r, NULL, 8, 16, 1), -EINVAL);
    assert_int_equal(kvs__ring_attach(NULL, mem, 8, 16, 1), -EINVAL);

    /* Joining a header nobody initialised. */
    memset(mem, 0, n);
    assert_int_equal(kvs__ring_attach(&c, mem, 8, 16, 0), -EINVAL);

    assert_int_equal(kvs__ring_attach(&r, mem, 8, 16, 1), 0);
    assert_ptr_equal(r.hdr, mem);
    assert_ptr_equal(r.slots, (unsigned char *)mem + HDR_BYTES);
    assert_int_equal((uintptr_t)r.slots % 64, 0);
    assert_int_equal(r.entries, 8);
    assert_int_equal(r.mask, 7);
    assert_int_equal(r.slot_size, 16);
    assert_int_equal(r.local, 0);

    /* The joining side must agree on the geometry. */
    assert_int_equal(kvs__ring_attach(&c, mem, 4, 16, 0), -EINVAL);
    assert_int_equal(kvs__ring_attach(&c, mem, 8, 8, 0), -EINVAL);
    assert_int_equal(kvs__ring_attach(&c, mem, 16, 16, 0), -EINVAL);
    assert_int_equal(kvs__ring_attach(&c, mem, 8, 16, 0), 0);
    assert_int_equal(c.entries, 8);
    assert_int_equal(c.local, 0);
    free(mem);
}

/* The offsets the corruption tests write through are where ring.c keeps
 * tail and head. */
static void test_layout_matches(void **state)
{
    struct kvs__ring p, c;
    void *mem = pair(&p, &c, 8, 16);
    (void)state;

    for (uint64_t i = 0; i < 5; i++)
        push_u64(&p, i);
    for (uint64_t i = 0; i < 3; i++)
        pop_u64(&c, i);
    assert_int_equal(atomic_load(hdr_word(mem, TAIL_OFF)), 5);
    assert_int_equal(atomic_load(hdr_word(mem, HEAD_OFF)), 3);
    free(mem);
}

/* ---- one thread ---- */

static void test_fill_drain(void **state)
{
    struct kvs__ring p, c;
    void *mem = pair(&p, &c, 8, 16);
    (void)state;

    assert_empty(&c);
    for (int round = 0; round < 3; round++) {
        uint64_t base = (uint64_t)round * 100;

        for (uint64_t i = 0; i < 8; i++)
            push_u64(&p, base + i);
        assert_full(&p);
        assert_full(&p);
        /* Full stays full until the consumer frees a slot. */
        pop_u64(&c, base);
        push_u64(&p, base + 8);
        assert_full(&p);
        for (uint64_t i = 1; i <= 8; i++)
            pop_u64(&c, base + i);
        assert_empty(&c);
        assert_empty(&c);
    }

    /* A slot the consumer has peeked at stays put until it pops. */
    push_u64(&p, 42);
    {
        int err;
        const void *a = kvs__ring_peek(&c, &err), *b = kvs__ring_peek(&c, &err);

        assert_non_null(a);
        assert_ptr_equal(a, b);
    }
    pop_u64(&c, 42);
    assert_empty(&c);

    /* err may be NULL. */
    assert_non_null(kvs__ring_reserve(&p, NULL));
    assert_null(kvs__ring_peek(&c, NULL));
    free(mem);
}

/* A commit with nothing reserved and a pop with nothing peeked leave the
 * shared indexes alone, so the other side never sees an impossible one. */
static void test_misuse_ignored(void **state)
{
    struct kvs__ring p, c;
    void *mem = pair(&p, &c, 4, 8);
    (void)state;

    kvs__ring_pop(&c);
    assert_int_equal(atomic_load(hdr_word(mem, HEAD_OFF)), 0);
    for (uint64_t i = 0; i < 4; i++) {
        uint64_t *s = kvs__ring_reserve(&p, NULL);

        assert_non_null(s);
        *s = i;
        kvs__ring_commit(&p);
    }
    assert_null(kvs__ring_reserve(&p, NULL));
    kvs__ring_commit(&p);
    assert_int_equal(atomic_load(hdr_word(mem, TAIL_OFF)), 4);
    for (uint64_t i = 0; i < 4; i++) {
        const uint64_t *s = kvs__ring_peek(&c, NULL);

        assert_non_null(s);
        assert_true(*s == i);
        kvs__ring_pop(&c);
    }
    kvs__ring_pop(&c);
    assert_int_equal(atomic_load(hdr_word(mem, HEAD_OFF)), 4);
    free(mem);
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

/* Random batches in and out, many times round, starting the free-running
 * counters at `base` (both sides and the header moved there by hand). */
static void wrap_from(uint32_t base)
{
    struct kvs__ring p, c;
    void *mem = pair(&p, &c, 8, 24);
    uint64_t rng = base ^ 12345u, next_in = 0, next_out = 0;

    p.local = p.cached = c.local = c.cached = base;
    set_tail(mem, base);
    set_head(mem, base);

    while (next_out < 100000) {
        uint64_t in = lcg(&rng) % 9, out = lcg(&rng) % 9;

        for (uint64_t k = 0; k < in; k++) {
            uint64_t *s = kvs__ring_reserve(&p, NULL);

            if (s == NULL) {
                assert_int_equal(next_in - next_out, 8);
                break;
            }
            s[0] = next_in;
            s[1] = check_word(next_in);
            s[2] = next_in + 1;
            kvs__ring_commit(&p);
            next_in++;
        }
        for (uint64_t k = 0; k < out; k++) {
            const uint64_t *s = kvs__ring_peek(&c, NULL);

            if (s == NULL) {
                assert_int_equal(next_in, next_out);
                break;
            }
            assert_true(s[0] == next_out);
            assert_true(s[1] == check_word(next_out));
            assert_true(s[2] == next_out + 1);
            kvs__ring_pop(&c);
            next_out++;
        }
    }
    assert_true(p.local == (uint32_t)(base + next_in));
    assert_true(c.local == (uint32_t)(base + next_out));
    free(mem);
}

static void test_wrap_around(void **state)
{
    (void)state;
    wrap_from(0);
    wrap_from(UINT32_MAX - 1000);
    wrap_from(0x80000000u - 3);
}

/* ---- corrupted indexes ---- */

static void test_corrupt_tail(void **state)
{
    struct kvs__ring p, c;
    void *mem = pair(&p, &c, 8, 16);
    const uint32_t head = 3;
    const uint32_t bad[] = { head + 8 + 5, head + 8 + 1, head - 1, head + 0x80000000u,
                             UINT32_MAX, 0 };
    int err;
    (void)state;

    for (uint64_t i = 0; i < head; i++)
        push_u64(&p, i);
    for (uint64_t i = 0; i < head; i++)
        pop_u64(&c, i);

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_tail(mem, bad[i]);
        err = 0;
        assert_null(kvs__ring_peek(&c, &err));
        assert_int_equal(err, -EPROTO);
        assert_int_equal(c.local, head);
    }

    /* The limit itself is a full ring, not an error. */
    set_tail(mem, head + 8);
    err = 1;
    assert_non_null(kvs__ring_peek(&c, &err));
    assert_int_equal(err, 0);
    for (uint32_t i = 0; i < 8; i++) {
        assert_non_null(kvs__ring_peek(&c, &err));
        kvs__ring_pop(&c);
    }

    /* A tail that goes bad after the consumer cached a good one: what was
     * checked is still served, and the next read of the tail fails. */
    set_tail(mem, c.local + 2);
    assert_non_null(kvs__ring_peek(&c, &err));
    set_tail(mem, c.local + 8 + 5);
    kvs__ring_pop(&c);
    assert_non_null(kvs__ring_peek(&c, &err));
    kvs__ring_pop(&c);
    assert_null(kvs__ring_peek(&c, &err));
    assert_int_equal(err, -EPROTO);
    free(mem);
}

static void test_corrupt_head(void **state)
{
    struct kvs__ring p, c;
    void *mem = pair(&p, &c, 8, 16);
    const uint32_t tail = 8;
    const uint32_t bad[] = { tail + 1, tail + 5, tail - 8 - 5, tail - 8 - 1, UINT32_MAX,
                             tail + 0x80000000u };
    int err;
    (void)state;

    for (uint64_t i = 0; i < tail; i++)
        push_u64(&p, i);
    assert_full(&p);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_head(mem, bad[i]);
        err = 0;
        assert_null(kvs__ring_reserve(&p, &err));
        assert_int_equal(err, -EPROTO);
        assert_int_equal(p.local, tail);
        /* commit must not publish past what was really reserved. */
        kvs__ring_commit(&p);
        assert_int_equal(atomic_load(hdr_word(mem, TAIL_OFF)), tail);
    }
    /* Head == tail (all consumed) is fine. */
    set_head(mem, tail);
    err = 1;
    assert_non_null(kvs__ring_reserve(&p, &err));
    assert_int_equal(err, 0);
    free(mem);
}

/* ---- doorbells ---- */

static int64_t elapsed_since(int64_t t0)
{
    return kvs__now_ns() - t0;
}

/* A wait that only a ring may end. A lost wake-up does not make
 * kvs__bell_wait fail: by its deadline the sequence has long moved, so it
 * returns 0; a wait that lasted until its deadline is the sign. */
static int wait_rung(struct kvs__bell *b, uint32_t seen, int64_t spin_ns)
{
    int64_t deadline = kvs__now_ns() + WAIT_LIMIT;
    int rc = kvs__bell_wait(b, seen, deadline, spin_ns);

    return rc == 0 && kvs__now_ns() >= deadline ? -ETIMEDOUT : rc;
}

static void test_now_ns(void **state)
{
    struct timespec ts;
    int64_t a, b, ref;
    (void)state;

    a = kvs__now_ns();
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ref = (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
    b = kvs__now_ns();
    assert_true(a <= ref && ref <= b);
}

static void test_bell_timeout(void **state)
{
    struct kvs__bell b = { 0 };
    int64_t t0, dt;
    (void)state;

    t0 = kvs__now_ns();
    assert_int_equal(kvs__bell_wait(&b, 0, t0 + 200 * MS, 100 * US), -ETIMEDOUT);
    dt = elapsed_since(t0);
    assert_true(dt >= 200 * MS);
    assert_true(dt < 200 * MS + SEC);
    assert_int_equal(atomic_load(&b.sleepers), 0);

    /* Without any spinning. */
    t0 = kvs__now_ns();
    assert_int_equal(kvs__bell_wait(&b, 0, t0 + 100 * MS, 0), -ETIMEDOUT);
    dt = elapsed_since(t0);
    assert_true(dt >= 100 * MS);
    assert_true(dt < 100 * MS + SEC);

    /* A spin longer than the deadline ends at the deadline. */
    t0 = kvs__now_ns();
    assert_int_equal(kvs__bell_wait(&b, 0, t0 + 50 * MS, 10 * SEC), -ETIMEDOUT);
    dt = elapsed_since(t0);
    assert_true(dt >= 50 * MS);
    assert_true(dt < 50 * MS + SEC);

    /* A deadline already past. */
    t0 = kvs__now_ns();
    assert_int_equal(kvs__bell_wait(&b, 0, t0 - SEC, 0), -ETIMEDOUT);
    assert_int_equal(kvs__bell_wait(&b, 0, 1, 1 * MS), -ETIMEDOUT);
    assert_true(elapsed_since(t0) < SEC);
    assert_int_equal(atomic_load(&b.sleepers), 0);
}

/* Deadline 0: spin for spin_ns, never sleep. */
static void test_bell_no_sleep(void **state)
{
    struct kvs__bell b = { 0 };
    int64_t t0, dt;
    (void)state;

    t0 = kvs__now_ns();
    assert_int_equal(kvs__bell_wait(&b, 0, 0, 0), -ETIMEDOUT);
    assert_int_equal(kvs__bell_wait(&b, 0, 0, 2 * MS), -ETIMEDOUT);
    dt = elapsed_since(t0);
    assert_true(dt >= 2 * MS);
    assert_true(dt < SEC);
    assert_int_equal(atomic_load(&b.sleepers), 0);
}

static void test_bell_already_moved(void **state)
{
    struct kvs__bell b = { 0 };
    uint32_t seen = kvs__bell_seq(&b);
    int64_t t0;
    (void)state;

    assert_int_equal(seen, 0);
    kvs__bell_ring(&b);
    assert_int_equal(kvs__bell_seq(&b), 1);
    assert_int_equal(atomic_load(&b.sleepers), 0);

    t0 = kvs__now_ns();
    assert_int_equal(kvs__bell_wait(&b, seen, t0 + 10 * SEC, 10 * SEC), 0);
    assert_int_equal(kvs__bell_wait(&b, seen, 0, 0), 0);
    assert_int_equal(kvs__bell_wait(&b, seen + 7, t0 + 10 * SEC, 0), 0);
    assert_true(elapsed_since(t0) < SEC);

    /* The sequence wraps. */
    atomic_store(&b.seq, UINT32_MAX);
    kvs__bell_ring(&b);
    assert_int_equal(kvs__bell_seq(&b), 0);
    assert_int_equal(kvs__bell_wait(&b, UINT32_MAX, kvs__now_ns() + 10 * SEC, 0), 0);
}

struct waiter {
    pthread_t tid;
    struct kvs__bell *bell;
    uint32_t seen;
    int64_t deadline, spin;
    int rc;
    int64_t woke_at;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;

    w->rc = kvs__bell_wait(w->bell, w->seen, w->deadline, w->spin);
    w->woke_at = kvs__now_ns();
    return NULL;
}

/* Waits until n threads have announced themselves as sleepers, then a
 * little longer so that they are inside FUTEX_WAIT. */
static void until_sleepers(struct kvs__bell *b, uint32_t n)
{
    int64_t give_up = kvs__now_ns() + 10 * SEC;
    struct timespec pause = { 0, 20 * MS };

    while (atomic_load(&b->sleepers) < n && kvs__now_ns() < give_up)
        sched_yield();
    assert_int_equal(atomic_load(&b->sleepers), n);
    nanosleep(&pause, NULL);
}

static void test_bell_wakes_threads(void **state)
{
    enum { NW = 3 };
    struct kvs__bell b = { 0 };
    struct waiter w[NW];
    int64_t rung;
    (void)state;

    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NW; i++) {
            w[i] = (struct waiter){ .bell = &b, .seen = kvs__bell_seq(&b),
                                    .deadline = kvs__now_ns() + 10 * SEC,
                                    .spin = round == 0 ? 0 : 1 * MS, .rc = 1 };
            assert_int_equal(pthread_create(&w[i].tid, NULL, waiter_main, &w[i]), 0);
        }
        until_sleepers(&b, NW);
        rung = kvs__now_ns();
        kvs__bell_ring(&b);
        for (int i = 0; i < NW; i++) {
            assert_int_equal(pthread_join(w[i].tid, NULL), 0);
            assert_int_equal(w[i].rc, 0);
            assert_true(w[i].woke_at >= rung);
            assert_true(w[i].woke_at - rung < 5 * SEC);
        }
        assert_int_equal(atomic_load(&b.sleepers), 0);
    }
}

/* A ring that lands while the waiter is on its way to sleep: the waiter
 * publishes that it has taken the sequence, and the ringer rings at once,
 * so the two race through sleepers and seq round after round. A lost
 * wake-up leaves the waiter asleep until its deadline. (A bell_ring that
 * reads sleepers before it bumps seq fails here once anything, even a
 * microsecond's delay, comes between the two.) */
#define RACE_ROUNDS 20000

struct racer {
    struct kvs__bell bell;
    _Atomic uint32_t ready;            /* rounds whose sequence the waiter took */
    int rc;                            /* 0, or 1 + the round that timed out */
};

static void *race_waiter(void *arg)
{
    struct racer *x = arg;

    for (uint32_t i = 0; i < RACE_ROUNDS; i++) {
        uint32_t seen = kvs__bell_seq(&x->bell);

        atomic_store(&x->ready, i + 1);
        /* A varying head start for the ringer, so that its read of sleepers
         * falls before, inside and after this side's way into the wait. */
        for (volatile uint32_t k = 0; k < (i * 7919u) % 4096; k++)
            ;
        if (wait_rung(&x->bell, seen, 0) != 0) {
            x->rc = (int)i + 1;
            atomic_store(&x->ready, UINT32_MAX);
            return NULL;
        }
    }
    return NULL;
}

static void test_bell_race(void **state)
{
    struct racer x;
    pthread_t tid;
    (void)state;

    memset(&x, 0, sizeof x);
    assert_int_equal(pthread_create(&tid, NULL, race_waiter, &x), 0);
    for (uint32_t i = 0; i < RACE_ROUNDS; i++) {
        uint32_t r;

        /* Yielding only now and then: a sched_yield on every pass would
         * make this side too slow to ring inside the waiter's window. */
        for (uint32_t k = 1; (r = atomic_load(&x.ready)) < i + 1; k++)
            if (k % 256 == 0)
                sched_yield();
        if (r == UINT32_MAX)
            break;
        kvs__bell_ring(&x.bell);
    }
    assert_int_equal(pthread_join(tid, NULL), 0);
    assert_int_equal(x.rc, 0);
    assert_int_equal(atomic_load(&x.bell.seq), RACE_ROUNDS);
    assert_int_equal(atomic_load(&x.bell.sleepers), 0);
}

static void on_signal(int sig)
{
    (void)sig;
}

/* Signals interrupt FUTEX_WAIT (no SA_RESTART); the wait goes on until its
 * deadline all the same. */
static void test_bell_signals(void **state)
{
    struct kvs__bell b = { 0 };
    struct sigaction sa, old;
    struct waiter w = { .bell = &b, .seen = 0, .spin = 0, .rc = 1 };
    int64_t t0;
    (void)state;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);

    t0 = kvs__now_ns();
    w.deadline = t0 + 300 * MS;
    assert_int_equal(pthread_create(&w.tid, NULL, waiter_main, &w), 0);
    until_sleepers(&b, 1);
    for (int i = 0; i < 5; i++) {
        struct timespec pause = { 0, 10 * MS };

        pthread_kill(w.tid, SIGUSR1);
        nanosleep(&pause, NULL);
    }
    assert_int_equal(pthread_join(w.tid, NULL), 0);
    assert_int_equal(w.rc, -ETIMEDOUT);
    assert_true(w.woke_at - t0 >= 300 * MS);
    assert_true(w.woke_at - t0 < 300 * MS + SEC);
    assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
}

/* ---- streams: threads and processes ---- */

struct bells {
    _Alignas(64) struct kvs__bell data;    /* rung by the producer after commit */
    _Alignas(64) struct kvs__bell space;   /* rung by the consumer after pop */
};

/* Both return 0, a negative code (-ETIMEDOUT: a wake-up went missing), or
 * 1 + the index of the first entry that came out wrong. */
static int64_t produce(struct kvs__ring *r, struct bells *b, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        int err;
        uint64_t *s;

        while ((s = kvs__ring_reserve(r, &err)) == NULL) {
            uint32_t seen;

            if (err != 0)
                return err;
            /* Take the sequence, then look again: a pop between the two
             * moves the sequence and the wait returns at once. */
            seen = kvs__bell_seq(&b->space);
            if ((s = kvs__ring_reserve(r, &err)) != NULL)
                break;
            if (err != 0)
                return err;
            if (wait_rung(&b->space, seen, SPIN_NS) != 0)
                return -ETIMEDOUT;
        }
        s[0] = i;
        s[1] = check_word(i);
        kvs__ring_commit(r);
        kvs__bell_ring(&b->data);
    }
    return 0;
}

static int64_t consume(struct kvs__ring *r, struct bells *b, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        int err;
        const uint64_t *s;

        while ((s = kvs__ring_peek(r, &err)) == NULL) {
            uint32_t seen;

            if (err != 0)
                return err;
            seen = kvs__bell_seq(&b->data);
            if ((s = kvs__ring_peek(r, &err)) != NULL)
                break;
            if (err != 0)
                return err;
            if (wait_rung(&b->data, seen, SPIN_NS) != 0)
                return -ETIMEDOUT;
        }
        if (s[0] != i || s[1] != check_word(i))
            return (int64_t)i + 1;
        kvs__ring_pop(r);
        kvs__bell_ring(&b->space);
    }
    return 0;
}

struct producer_arg {
    struct kvs__ring ring;
    struct bells *bells;
    uint64_t n;
    int64_t rc;
};

static void *producer_main(void *arg)
{
    struct producer_arg *a = arg;

    a->rc = produce(&a->ring, a->bells, a->n);
    return NULL;
}

static void test_stream_threads(void **state)
{
    struct bells bells;
    struct producer_arg pa;
    struct kvs__ring cons;
    void *mem = ring_mem(STREAM_ENTRIES, SLOT);
    pthread_t tid;
    int64_t rc;
    (void)state;

    memset(&bells, 0, sizeof bells);
    memset(&pa, 0, sizeof pa);
    assert_int_equal(kvs__ring_attach(&pa.ring, mem, STREAM_ENTRIES, SLOT, 1), 0);
    assert_int_equal(kvs__ring_attach(&cons, mem, STREAM_ENTRIES, SLOT, 0), 0);
    pa.bells = &bells;
    pa.n = STREAM_N;
    pa.rc = 1;

    assert_int_equal(pthread_create(&tid, NULL, producer_main, &pa), 0);
    rc = consume(&cons, &bells, STREAM_N);
    assert_int_equal(pthread_join(tid, NULL), 0);
    assert_int_equal(rc, 0);
    assert_int_equal(pa.rc, 0);
    assert_empty(&cons);
    assert_int_equal(atomic_load(&bells.data.seq), STREAM_N);
    assert_int_equal(atomic_load(&bells.space.seq), STREAM_N);
    assert_int_equal(atomic_load(&bells.data.sleepers), 0);
    assert_int_equal(atomic_load(&bells.space.sleepers), 0);
    free(mem);
}

#define PINGS 2000

struct shared {
    struct bells stream;
    struct bells ping;                 /* data: parent -> child, space: back */
    _Alignas(64) _Atomic uint32_t child_rc;
};

/* The child: producer side of every phase. Its exit status says which
 * phase failed (0: none). */
static int child_main(struct shared *sh, void *ring_mem_p)
{
    struct kvs__ring prod;
    int64_t give_up = kvs__now_ns() + WAIT_LIMIT;
    uint32_t seen;
    struct timespec pause = { 0, 20 * MS };

    if (kvs__ring_attach(&prod, ring_mem_p, STREAM_ENTRIES, SLOT, 0) != 0)
        return 10;

    /* 1: wake the parent, which sleeps with no spinning at all. */
    while (atomic_load(&sh->ping.data.sleepers) == 0) {
        if (kvs__now_ns() > give_up)
            return 11;
        sched_yield();
    }
    nanosleep(&pause, NULL);
    kvs__bell_ring(&sh->ping.data);

    /* 2: ping-pong, both sides sleeping in the futex every time. */
    seen = 0;
    for (int i = 0; i < PINGS; i++) {
        if (wait_rung(&sh->ping.space, seen, 0) != 0)
            return 12;
        seen = kvs__bell_seq(&sh->ping.space);
        kvs__bell_ring(&sh->ping.data);
    }

    /* 3: the stream. */
    if (produce(&prod, &sh->stream, STREAM_N) != 0)
        return 13;
    return 0;
}

static void test_stream_processes(void **state)
{
    size_t rbytes = kvs__ring_bytes(STREAM_ENTRIES, SLOT), total;
    size_t roff = (sizeof(struct shared) + 63) & ~(size_t)63;
    unsigned char *map;
    struct shared *sh;
    struct kvs__ring cons;
    pid_t pid;
    int status = 0;
    int64_t t0, rc;
    uint32_t seen;
    (void)state;

    total = roff + rbytes;
    map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    sh = (struct shared *)map;
    assert_int_equal(kvs__ring_attach(&cons, map + roff, STREAM_ENTRIES, SLOT, 1), 0);

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child_main(sh, map + roff));

    /* 1: only a cross-process FUTEX_WAKE ends this before the deadline. */
    t0 = kvs__now_ns();
    rc = kvs__bell_wait(&sh->ping.data, 0, t0 + 10 * SEC, 0);
    if (rc != 0)
        kill(pid, SIGKILL);
    assert_int_equal(rc, 0);
    assert_true(elapsed_since(t0) < 5 * SEC);

    /* 2: ping-pong. */
    for (int i = 0; i < PINGS && rc == 0; i++) {
        seen = kvs__bell_seq(&sh->ping.data);
        kvs__bell_ring(&sh->ping.space);
        rc = wait_rung(&sh->ping.data, seen, 0);
    }
    if (rc != 0)
        kill(pid, SIGKILL);
    assert_int_equal(rc, 0);

    /* 3: the stream. */
    rc = consume(&cons, &sh->stream, STREAM_N);
    if (rc != 0)
        kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(rc, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_empty(&cons);
    assert_int_equal(atomic_load(&sh->stream.data.seq), STREAM_N);
    assert_int_equal(atomic_load(&sh->ping.data.sleepers), 0);
    assert_int_equal(atomic_load(&sh->ping.space.sleepers), 0);
    munmap(map, total);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_bytes),
        cmocka_unit_test(test_attach),
        cmocka_unit_test(test_layout_matches),
        cmocka_unit_test(test_fill_drain),
        cmocka_unit_test(test_misuse_ignored),
        cmocka_unit_test(test_wrap_around),
        cmocka_unit_test(test_corrupt_tail),
        cmocka_unit_test(test_corrupt_head),
        cmocka_unit_test(test_now_ns),
        cmocka_unit_test(test_bell_timeout),
        cmocka_unit_test(test_bell_no_sleep),
        cmocka_unit_test(test_bell_already_moved),
        cmocka_unit_test(test_bell_wakes_threads),
        cmocka_unit_test(test_bell_race),
        cmocka_unit_test(test_bell_signals),
        cmocka_unit_test(test_stream_threads),
        cmocka_unit_test(test_stream_processes),
    };

    return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
