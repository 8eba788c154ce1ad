/*
 * combine.c - the combine area's slots, index and rounds (combine.h), the
 * same code in kvsd and in every worker.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kernels/array.h"
#include "proto/combine.h"
#include "store/key.h"
#include "kernels/optim.h"

struct cb_entry {                      /* an index entry */
    _Atomic uint64_t tag;              /* the key's hash with its low bit set; 0: empty */
    _Atomic uint64_t off;              /* its slot */
};

#define ALIGN64(x) (((x) + 63) & ~(uint64_t)63)

static struct cb_entry *index_of(void *area)
{
    return (struct cb_entry *)((unsigned char *)area + KVS__CB_INDEX_OFF);
}

void kvs__cb_plan(uint64_t off, uint64_t bytes, size_t count, uint64_t rows, kvs_dtype_t dtype,
                  uint32_t nworkers, struct kvs__cb_plan *plan)
{
    uint64_t at = off + ALIGN64(sizeof(struct kvs__cb_slot));
    uint64_t vb = ALIGN64(bytes ? bytes : 1);
    uint64_t sb = ALIGN64(2 * count * kvs__cb_state_elem(dtype) + 1);
    uint64_t stride = kvs__cb_mark_off(bytes) + ALIGN64(kvs__cb_mark_bytes(rows));

    *plan = (struct kvs__cb_plan){ .off = off, .bytes = bytes, .count = count, .rows = rows,
                                   .dtype = dtype, .nworkers = nworkers, .stride = stride };
    for (int p = 0; p < 2; p++, at += vb)
        plan->value_off[p] = at;
    for (int p = 0; p < 2; p++, at += sb)
        plan->state_off[p] = at;
    plan->load_off = at;
    at += sb;
    plan->in_off = at;
    at += 2 * (uint64_t)nworkers * stride;
    plan->size = at - off;
}

int kvs__cb_publish(void *area, const struct kvs__cb_plan *plan, kvs_key_t key, int ndim,
                    const int64_t *shape, const void *value)
{
    unsigned char *a = area;
    struct kvs__cb_slot *s = (struct kvs__cb_slot *)(a + plan->off);
    uint64_t tag = kvs__key_hash(key) | 1;
    struct cb_entry *ix = index_of(area), *slot = NULL;

    for (uint32_t i = 0; i < KVS__CB_INDEX; i++) {
        struct cb_entry *x = &ix[(tag + i) & (KVS__CB_INDEX - 1)];

        if (atomic_load_explicit(&x->tag, memory_order_relaxed) == 0) {
            slot = x;
            break;
        }
    }
    if (!slot)
        return -ENOSPC;
    s->is_str = key.name != NULL;
    s->key_id = key.name ? 0 : key.id;
    if (key.name) {
        s->name_len = (uint32_t)strnlen(key.name, KVS_MAX_KEY_LEN);
        memcpy(s->name, key.name, s->name_len);
        s->name[s->name_len] = '\0';
    }
    s->dtype = plan->dtype;
    s->ndim = ndim;
    memcpy(s->shape, shape, (size_t)ndim * sizeof *shape);
    s->bytes = plan->bytes;
    s->count = plan->count;
    memcpy(s->value_off, plan->value_off, sizeof s->value_off);
    memcpy(s->state_off, plan->state_off, sizeof s->state_off);
    s->load_off = plan->load_off;
    s->in_off = plan->in_off;
    s->stride = plan->stride;
    memcpy(a + plan->value_off[0], value, plan->bytes);
    atomic_store_explicit(&s->gen, 0, memory_order_relaxed);
    atomic_store_explicit(&s->arrive[1], kvs__cb_tag(1), memory_order_relaxed);
    atomic_store_explicit(&s->arrive[0], kvs__cb_tag(2), memory_order_relaxed);
    atomic_store_explicit(&slot->off, plan->off, memory_order_relaxed);
    atomic_store_explicit(&slot->tag, tag, memory_order_release);
    return 0;
}

struct kvs__cb_slot *kvs__cb_find(void *area, uint64_t size, kvs_key_t key)
{
    uint64_t tag = kvs__key_hash(key) | 1;
    struct cb_entry *ix = index_of(area);

    for (uint32_t i = 0; i < KVS__CB_INDEX; i++) {
        struct cb_entry *x = &ix[(tag + i) & (KVS__CB_INDEX - 1)];
        uint64_t t = atomic_load_explicit(&x->tag, memory_order_acquire), off;
        struct kvs__cb_slot *s;

        if (t == 0)
            return NULL;
        if (t != tag)
            continue;
        off = atomic_load_explicit(&x->off, memory_order_relaxed);
        if (off < KVS__CB_SLOTS_OFF || (off & 63) != 0 || off > size
            || size - off < sizeof *s)
            return NULL;
        s = (struct kvs__cb_slot *)((unsigned char *)area + off);
        if (s->is_str != (key.name != NULL))
            continue;
        if (key.name ? s->name_len < sizeof s->name && strlen(key.name) == s->name_len
                       && memcmp(s->name, key.name, s->name_len) == 0
                     : s->key_id == key.id)
            return s;
    }
    return NULL;
}

int kvs__cb_try_claim(struct kvs__cb_slot *s, int p, uint64_t active, uint64_t *round)
{
    for (;;) {
        uint64_t w = atomic_load_explicit(&s->arrive[p], memory_order_seq_cst);
        uint64_t g = atomic_load_explicit(&s->gen, memory_order_seq_cst);
        uint64_t r = ((g + 1) & 1) == (uint64_t)p ? g + 1 : g + 2;
        uint32_t m = kvs__cb_mask(w);

        if ((w & KVS__CB_CLAIMED) || m == 0 || (m & (uint32_t)active) != (uint32_t)active)
            return 0;
        /* Another round's tag: gen moved on meanwhile (look again), or, while
         * it stays, nothing of this parity is claimable (a word a faulty
         * worker wrote must not keep kvsd here). */
        if ((w & ~(KVS__CB_CLAIMED | 0xffffffffull)) != kvs__cb_tag(r)) {
            if (atomic_load_explicit(&s->gen, memory_order_seq_cst) == g)
                return 0;
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&s->arrive[p], &w, w | KVS__CB_CLAIMED,
                                                  memory_order_seq_cst,
                                                  memory_order_seq_cst)) {
            *round = r;
            return 1;
        }
    }
}

/* The state kvsd loaded into the slot for opt_gen (combine.h), copied to
 * dst (the plan's state bytes) with its steps in *t: 1; 0 when none was
 * loaded for opt_gen; KVS_ETIMEDOUT when kvsd's write of it does not end
 * by deadline_ns. */
static int take_loaded(const unsigned char *a, struct kvs__cb_slot *s,
                       const struct kvs__cb_plan *plan, uint64_t opt_gen, void *dst, uint64_t *t,
                       int64_t deadline_ns)
{
    uint64_t bytes = 2 * plan->count * kvs__cb_state_elem(plan->dtype);

    for (;;) {
        uint64_t s1 = atomic_load_explicit(&s->lseq, memory_order_acquire), g, lt;

        if (!(s1 & 1)) {
            g = s->load_gen;
            lt = s->load_t;
            if (g == opt_gen)
                memcpy(dst, a + plan->load_off, bytes);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&s->lseq, memory_order_relaxed) == s1) {
                *t = lt;
                return g == opt_gen;
            }
        }
        if (kvs__now_ns() >= deadline_ns)
            return KVS_ETIMEDOUT;
    }
}

/* How a round's chunks are made (a slot's how[p]). */
enum {
    CB_COPY,                           /* no inputs: the last value, unchanged */
    CB_SUM,                            /* no optimizer: the sum */
    CB_FROM_LAST,                      /* optimizer, from round r - 1's state */
    CB_FROM_HERE,                      /* optimizer, from the state already in place
                                        * (loaded by the opener) */
    CB_FROM_ZERO,                      /* optimizer, from a zero state */
};

static void slot_plan(const struct kvs__cb_head *h, const struct kvs__cb_slot *s,
                      struct kvs__cb_plan *own)
{
    *own = (struct kvs__cb_plan){ .bytes = s->bytes, .count = s->count, .dtype = s->dtype,
                                  .rows = kvs__cb_rows(s->ndim, s->shape),
                                  .nworkers = h->nworkers, .load_off = s->load_off,
                                  .in_off = s->in_off, .stride = s->stride };
    memcpy(own->value_off, s->value_off, sizeof own->value_off);
    memcpy(own->state_off, s->state_off, sizeof own->state_off);
}

static uint64_t chunks_of(const struct kvs__cb_plan *plan)
{
    return plan->count ? (plan->count + KVS__CB_CHUNK - 1) / KVS__CB_CHUNK : 1;
}

/* The row-sparse pushes of a round, for a lazy update: the marks of the
 * inputs in[0..k) (blocks at their starts), when every one is row-sparse;
 * else 0 (the round is dense). */
static int rows_marks(const struct kvs__cb_plan *plan, unsigned char *const *blk, int k,
                      const struct kvs__cb_mark **marks)
{
    uint64_t mo = kvs__cb_mark_off(plan->bytes);

    if (plan->rows == 0 || plan->count < plan->rows || plan->count % plan->rows != 0)
        return 0;
    for (int i = 0; i < k; i++) {
        marks[i] = (const struct kvs__cb_mark *)(blk[i] + mo);
        if (marks[i]->how != KVS__CB_ROWS)
            return 0;
    }
    return 1;
}

/* Whether row j is in any of the k row-sparse pushes. */
static int row_in(const struct kvs__cb_mark *const *marks, int k, uint64_t j)
{
    for (int i = 0; i < k; i++)
        if (marks[i]->bits[j / 64] >> (j % 64) & 1)
            return 1;
    return 0;
}

/* One optimizer step over elements [x0, x1) of the chunk that starts at
 * element b: the inputs at blk, the state sp (two halves of half bytes). */
static void update_range(const struct kvs__cb_plan *plan, const struct kvs__optim *o,
                         struct kvs__optim_state *st, uint64_t t, unsigned char *val,
                         unsigned char *const *blk, int k, unsigned char *sp, uint64_t half,
                         uint64_t b, uint64_t x0, uint64_t x1)
{
    uint64_t es = kvs_dtype_size(plan->dtype), ses = kvs__cb_state_elem(plan->dtype);
    const void *in[KVS__CB_MAX_WORKERS];
    struct kvs_cuda_step step;

    for (int i = 0; i < k; i++)
        in[i] = blk[i] + x0 * es;
    if (kvs__optim_prepare(o, st, plan->dtype, x0, x1 - x0, k, t, &step) == 0)
        kvs__optim_run(&step, plan->dtype, val + (x0 - b) * es, in, k, sp + x0 * ses,
                       sp + half + x0 * ses, x1 - x0, 1);
}

/* Elements [b, b + n) of parity p's round, made as how says from the
 * inputs of the ranks in mask. Under a lazy optimizer a round of
 * row-sparse pushes updates the rows they hold, each run of them one
 * range; the others keep the last value and state (copied first). */
static void make_chunk(unsigned char *a, const struct kvs__cb_slot *s,
                       const struct kvs__cb_plan *plan, int p, uint32_t how, uint32_t mask,
                       const struct kvs__optim *o, uint64_t b, uint64_t n)
{
    uint64_t es = kvs_dtype_size(plan->dtype), ses = kvs__cb_state_elem(plan->dtype);
    uint64_t half = plan->count * ses;
    unsigned char *val = a + plan->value_off[p] + b * es;
    unsigned char *last = a + plan->value_off[p ^ 1] + b * es;
    unsigned char *sp = a + plan->state_off[p], *sq = a + plan->state_off[p ^ 1];
    unsigned char *blk[KVS__CB_MAX_WORKERS];
    const void *in[KVS__CB_MAX_WORKERS];
    const struct kvs__cb_mark *marks[KVS__CB_MAX_WORKERS];
    int k = 0;

    for (uint32_t i = 0; i < plan->nworkers && i < KVS__CB_MAX_WORKERS; i++)
        if (mask & (1u << i)) {
            blk[k] = a + plan->in_off + ((uint64_t)p * plan->nworkers + i) * plan->stride;
            in[k] = blk[k] + b * es;
            k++;
        }
    if (how == CB_COPY || k == 0) {
        memcpy(val, last, n * es);
    } else if (how == CB_SUM || !o) {
        kvs__sum(plan->dtype, val, in, k, n, 1);
    } else {
        struct kvs__optim_state st = {
            .dtype = plan->dtype == KVS_FLOAT64 ? KVS_FLOAT64 : KVS_FLOAT32,
            .count = plan->count, .nbuf = kvs__optim_nbuf(o), .device = KVS_HOST,
            .buf = { sp, sp + half },
        };

        memcpy(val, last, n * es);
        for (uint64_t i = 0; i < 2 && how != CB_FROM_HERE; i++) {
            if (how == CB_FROM_LAST)
                memcpy(sp + i * half + b * ses, sq + i * half + b * ses, n * ses);
            else
                memset(sp + i * half + b * ses, 0, n * ses);
        }
        if (kvs__optim_lazy(o) && rows_marks(plan, blk, k, marks)) {
            uint64_t re = plan->count / plan->rows, x = b, end = b + n;

            /* Runs of rows held, clipped to the chunk (rows may cross it). */
            while (x < end) {
                uint64_t j = x / re, x1;

                if (!row_in(marks, k, j)) {
                    x = (j + 1) * re;
                    continue;
                }
                while (j + 1 < plan->rows && (j + 1) * re < end && row_in(marks, k, j + 1))
                    j++;
                x1 = (j + 1) * re < end ? (j + 1) * re : end;
                update_range(plan, o, &st, s->t[p], val, blk, k, sp, half, b, x, x1);
                x = x1;
            }
        } else {
            update_range(plan, o, &st, s->t[p], val, blk, k, sp, half, b, b, b + n);
        }
    }
}

/* Round r (parity p), every chunk of it made: published, and its latency
 * counted. t_open is cleared before round r + 2 may take pushes: the
 * first of those sets it again. */
static void publish(struct kvs__cb_head *h, struct kvs__cb_slot *s, int p, uint64_t r)
{
    int64_t t0 = atomic_exchange_explicit(&s->t_open[p], 0, memory_order_relaxed);

    if (t0 > 0)
        atomic_fetch_add_explicit(&s->lat[kvs__lat_bucket(kvs__now_ns() - t0)], 1,
                                  memory_order_relaxed);
    atomic_store_explicit(&s->work[p], 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->vseq[p], 1, memory_order_release);
    atomic_store_explicit(&s->gen, r, memory_order_release);
    atomic_store_explicit(&s->arrive[p], kvs__cb_tag(r + 2), memory_order_seq_cst);
    kvs__bell_ring(&h->bell);
}

/* Chunks of parity p's open round, taken one at a time until none is
 * left; the number made. */
static int help_parity(void *area, struct kvs__cb_slot *s, const struct kvs__cb_plan *plan,
                       int p, const struct kvs__optim *o, uint64_t opt_gen)
{
    struct kvs__cb_head *h = area;
    uint64_t n = chunks_of(plan);
    int made = 0;

    for (;;) {
        uint64_t w = atomic_load_explicit(&s->work[p], memory_order_acquire), c;
        uint32_t how;

        if (!(w & KVS__CB_OPEN) || (c = (uint32_t)w) >= n)
            return made;
        /* Read before the claim, and the round's own once the claim
         * (of an unchanged word: the same round, still open) succeeds. */
        how = atomic_load_explicit(&s->how[p], memory_order_relaxed);
        if (how >= CB_FROM_LAST
            && (!o || atomic_load_explicit(&s->need[p], memory_order_relaxed) != opt_gen))
            return made;
        if (!atomic_compare_exchange_weak_explicit(&s->work[p], &w, w + 1,
                                                   memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        make_chunk(area, s, plan, p, how,
                   kvs__cb_mask(atomic_load_explicit(&s->arrive[p], memory_order_relaxed)), o,
                   c * KVS__CB_CHUNK,
                   c + 1 < n ? KVS__CB_CHUNK : plan->count - c * KVS__CB_CHUNK);
        made++;
        /* gen stays r - 1 until the last chunk is in. */
        if (atomic_fetch_add_explicit(&s->done[p], 1, memory_order_acq_rel) + 1 == n)
            publish(h, s, p, atomic_load_explicit(&s->gen, memory_order_relaxed) + 1);
    }
}

int kvs__cb_open(const struct kvs__cb_slot *s, int p, uint64_t *opt_gen)
{
    uint64_t w = atomic_load_explicit(&s->work[p], memory_order_acquire);

    if (!(w & KVS__CB_OPEN))
        return 0;
    *opt_gen = atomic_load_explicit(&s->need[p], memory_order_relaxed);
    return 1;
}

int kvs__cb_help(void *area, struct kvs__cb_slot *s, const struct kvs__cb_plan *plan, int p,
                 const struct kvs__optim *o, uint64_t opt_gen)
{
    struct kvs__cb_plan own;

    if (!plan) {
        slot_plan(area, s, &own);
        plan = &own;
    }
    return help_parity(area, s, plan, p, o, opt_gen);
}

int kvs__cb_combine(void *area, struct kvs__cb_slot *s, const struct kvs__cb_plan *plan,
                    uint64_t r, const struct kvs__optim *o, uint64_t opt_gen, int help,
                    int64_t deadline_ns)
{
    struct kvs__cb_head *h = area;
    unsigned char *a = area;
    struct kvs__cb_plan own;
    int p = (int)(r & 1), q = p ^ 1, loaded = 0;
    uint64_t qgen, lt = 0, t = 0;
    uint32_t how, mask;

    if (!plan) {
        slot_plan(h, s, &own);
        plan = &own;
    }
    /* Round r - 1 is complete (every rank in r pushed into it first), and
     * opened or about to be: r starts from its value and state. */
    while (atomic_load_explicit(&s->gen, memory_order_acquire) != r - 1) {
        uint32_t seen = kvs__bell_seq(&h->bell);
        int32_t f = atomic_load_explicit(&h->failed, memory_order_acquire);

        if (f < 0)
            return f;
        if (help_parity(area, s, plan, q, o, opt_gen) > 0
            || atomic_load_explicit(&s->gen, memory_order_acquire) == r - 1)
            continue;
        if (kvs__bell_wait(&h->bell, seen, deadline_ns, 20000) != 0)
            return KVS_ETIMEDOUT;
    }
    mask = kvs__cb_mask(atomic_load_explicit(&s->arrive[p], memory_order_acquire));
    qgen = s->state_gen[q];
    if (mask == 0) {
        how = CB_COPY;
    } else if (!o) {
        how = CB_SUM;
    } else if (qgen == opt_gen) {
        how = CB_FROM_LAST;
        t = s->t[q];
    } else {
        /* Parity p's state is nobody's until round r publishes it: a load
         * may be copied there before its seqlock moves, and a wait for it
         * given up leaves the published parity whole. */
        if ((loaded = take_loaded(a, s, plan, opt_gen, a + plan->state_off[p], &lt,
                                  deadline_ns)) < 0)
            return loaded;
        how = loaded ? CB_FROM_HERE : CB_FROM_ZERO;
        t = loaded ? lt : 0;
    }
    atomic_fetch_add_explicit(&s->vseq[p], 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->how[p], how, memory_order_relaxed);
    atomic_store_explicit(&s->need[p], how >= CB_FROM_LAST ? opt_gen : 0, memory_order_relaxed);
    s->t[p] = how >= CB_FROM_LAST ? t + 1 : 0;
    s->state_gen[p] = how >= CB_FROM_LAST ? opt_gen : 0;
    atomic_store_explicit(&s->done[p], 0, memory_order_relaxed);
    atomic_store_explicit(&s->work[p], kvs__cb_tag(r) | KVS__CB_OPEN, memory_order_release);
    if (chunks_of(plan) > 1)
        kvs__bell_ring(&h->bell);      /* waiters may take chunks */
    if (help)
        help_parity(area, s, plan, p, o, opt_gen);
    return 0;
}

void kvs__cb_fail(void *area, int code, const char *msg)
{
    struct kvs__cb_head *h = area;
    int32_t none = 0;

    /* The first to fail it writes the text, then the code (1 meanwhile). */
    if (atomic_compare_exchange_strong(&h->failed, &none, 1)) {
        snprintf(h->fail_msg, sizeof h->fail_msg, "%s", msg ? msg : "");
        atomic_store_explicit(&h->failed, code < 0 ? code : KVS_EPEERDEAD,
                              memory_order_release);
    }
    kvs__bell_ring(&h->bell);
}
