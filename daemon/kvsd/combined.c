/*
 * combined.c - kvsd's part in the rounds the workers combine (combine.h):
 * it makes the combine area, lays out a slot for each small key at its
 * init, publishes the optimizer and the job's failure there, completes the
 * rounds that a worker leaving completes, learns of a worker that gave up
 * waiting, and saves and loads the combined keys' optimizer states with
 * the engine's. Serve thread only, but cb_setup (main) and cb_join (socket
 * thread, under d->lock, before any worker is LIVE).
 *
 * kvsd trusts nothing in the area: it reads the arrival words, round
 * numbers, seqlocks and states there, a failure's code and text, and the
 * latency counts kvsctl shows (clamped, never used as an index), never an
 * offset or a size; every slot's layout is its own copy (d->cb_keys).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "combined.h"
#include "job.h"
#include "rounds.h"

#include "kernels/array.h"
#include "proto/combine.h"
#include "kernels/optim.h"
#include "store/statefile.h"
#include "shm/shm.h"
#include "base/spec.h"

static struct kvs__cb_head *head(const struct daemon *d)
{
    return (struct kvs__cb_head *)d->cb;
}

/* Keys up to this many bytes are combined by default (KVS_COMBINE_MAX):
 * above it, a round through kvsd reads zero-copy buffers in place, where
 * the workers would copy them into the area (bench/NOTES.md, section 13). */
#define CB_MAX_DEFAULT ((uint64_t)256 << 10)

/* The most a latency count read from the area counts for (2^48). */
#define CB_COUNT_MAX ((uint64_t)1 << 48)

/* The area, unless KVS_COMBINE=0 (every round then goes through kvsd) or
 * the job spans hosts; KVS_COMBINE other than 0 or 1 is an error, as is a
 * KVS_COMBINE_MAX that is not a size. */
int cb_setup(struct daemon *d, struct kvs__err *e)
{
    const char *max = getenv("KVS_COMBINE_MAX");
    uint64_t size = d->o.arena;
    int on = 1, rc;

    if ((rc = kvs__env_int("KVS_COMBINE", 0, 1, &on, e)) < 0)
        return rc;
    if (!on || d->o.nhosts > 1)
        return 0;
    d->cb_max = CB_MAX_DEFAULT;
    if (max && *max && kvs__parse_bytes(max, &d->cb_max) != 0)
        return kvs__fail(e, KVS_EBADARG, "KVS_COMBINE_MAX='%.64s': not a size in bytes (a "
                         "number with an optional K, M or G, at most 1T)", max);
    if (size < KVS__CB_MIN)
        size = KVS__CB_MIN;
    /* Workers write the area, but may not resize it under kvsd. */
    if ((rc = kvs__memfd_new("kvs-combine", size, KVS__SEAL_SIZE, &d->cb_fd, e)) != 0
        || (rc = kvs__map(d->cb_fd, size, 1, &d->cb, e)) != 0)
        return rc;
    d->cb_size = size;
    d->cb_next = KVS__CB_SLOTS_OFF;
    head(d)->magic = KVS__CB_MAGIC;
    head(d)->size = size;
    return 0;
}

/* The socket thread, under d->lock, is the one writer of cb_on after main;
 * the serve thread reads it each pass (cb_check) with no lock, so the
 * store is a release one after the head is written, and cb_check's load an
 * acquire one: a pass that sees 1 sees the head's workers too. */
void cb_join(struct daemon *d)
{
    int on;

    if (!d->cb || atomic_load_explicit(&d->cb_on, memory_order_relaxed) >= 0)
        return;
    /* A job that recovers keeps every key in kvsd, whose snapshot holds them. */
    on = d->sync == 1 && d->total <= KVS__CB_MAX_WORKERS && d->total == d->nworkers &&
         !d->o.recover;
    if (on) {
        head(d)->nworkers = (uint32_t)d->nworkers;
        atomic_store(&head(d)->active, (1ull << d->nworkers) - 1);
    }
    atomic_store_explicit(&d->cb_on, on, memory_order_release);
}

int cb_welcome(const struct daemon *d, struct kvs__welcome *w, int *fd)
{
    if (d->cb_on != 1)
        return 0;
    w->flags |= KVS__WELCOME_COMBINE;
    w->combine_size = d->cb_size;
    *fd = d->cb_fd;
    return 1;
}

/* ---- keys ------------------------------------------------------------- */

void cb_add_keys(struct daemon *d, int n, const kvs_key_t *keys)
{
    for (int i = 0; d->cb_on == 1 && i < n; i++) {
        struct kvs__entry_info info;
        struct kvs__cb_plan plan;
        struct cb_key ck;
        struct round *rd;

        if (kvs__engine_lookup(d->eng, keys[i], &info, NULL) != 0 || info.device != KVS_HOST
            || !kvs__dtype_is_float(info.dtype) || info.bytes > d->cb_max
            || d->cb_n >= KVS__CB_INDEX / 2)
            continue;
        kvs__cb_plan(d->cb_next, info.bytes, info.count, kvs__cb_rows(info.ndim, info.shape),
                     info.dtype, (uint32_t)d->nworkers, &plan);
        if (plan.size > d->cb_size - d->cb_next)
            continue;                  /* the area is full: kvsd takes the key */
        if (d->cb_n == d->cb_cap) {
            size_t cap = d->cb_cap ? 2 * d->cb_cap : 64;
            struct cb_key *p = realloc(d->cb_keys, cap * sizeof *p);

            if (!p)
                continue;
            d->cb_keys = p;
            d->cb_cap = cap;
        }
        ck = (struct cb_key){ plan, keys[i], info.entry };
        if ((keys[i].name && !(ck.key.name = strdup(keys[i].name)))
            || !(rd = rounds_of(d, &info, keys[i]))
            || kvs__cb_publish(d->cb, &plan, keys[i], info.ndim, info.shape, info.value) != 0) {
            free((char *)ck.key.name);
            continue;
        }
        rd->cb = (int)d->cb_n + 1;
        d->cb_keys[d->cb_n++] = ck;
        d->cb_next += plan.size;
    }
}

static struct kvs__cb_slot *slot_of(const struct daemon *d, const struct kvs__cb_plan *p)
{
    return (struct kvs__cb_slot *)((unsigned char *)d->cb + p->off);
}

static uint64_t state_bytes(const struct kvs__cb_plan *p)
{
    return 2 * p->count * kvs__cb_state_elem(p->dtype);
}

/* ---- the optimizer ---------------------------------------------------- */

void cb_optimizer(struct daemon *d)
{
    const char *spec = kvs__engine_optimizer(d->eng);
    struct kvs__cb_head *h = head(d);
    struct kvs__optim *o = NULL;
    size_t len;

    if (d->cb_on != 1 || !spec)
        return;
    len = strlen(spec);
    if (len >= KVS__CB_SPEC_MAX || kvs__optim_parse(spec, &o, NULL) != 0) {
        job_fail(d, KVS_ESPEC, "kvsd: the optimizer '%.64s' cannot be handed to the workers "
                 "that combine rounds", spec);
        return;
    }
    kvs__optim_free(d->cb_opt);
    d->cb_opt = o;
    d->cb_opt_gen++;
    atomic_fetch_add_explicit(&h->opt_seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memcpy(h->opt_spec, spec, len);
    h->opt_len = (uint32_t)len;
    h->opt_gen = d->cb_opt_gen;
    atomic_fetch_add_explicit(&h->opt_seq, 1, memory_order_release);
}

/* ---- optimizer states ------------------------------------------------- */

#define SNAPSHOT_NS (1000 * 1000000ll)  /* a save waits this long for a round mid-write */

/* The state a combined key's next round starts from (combine.h): its
 * published round's when made under the current optimizer, else the one
 * kvsd loaded for that. Copied into buf (state_bytes): 1 and its steps in
 * *t; 0 when it has none; KVS_ETIMEDOUT when the published round is
 * rewritten or mid-write at every look until the deadline (a worker
 * stopped in the middle of a round). */
static int snapshot(const struct daemon *d, const struct kvs__cb_plan *pl, unsigned char *buf,
                    uint64_t *t)
{
    struct kvs__cb_slot *s = slot_of(d, pl);
    const unsigned char *a = d->cb;
    int64_t deadline = kvs__now_ns() + SNAPSHOT_NS;
    uint64_t made, steps;

    for (;;) {
        uint64_t g = atomic_load_explicit(&s->gen, memory_order_acquire);
        int p = (int)(g & 1);
        uint64_t s1 = atomic_load_explicit(&s->vseq[p], memory_order_acquire);

        if (!(s1 & 1)) {
            made = s->state_gen[p];
            steps = s->t[p];
            memcpy(buf, a + pl->state_off[p], state_bytes(pl));
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&s->vseq[p], memory_order_relaxed) == s1
                && atomic_load_explicit(&s->gen, memory_order_relaxed) == g)
                break;
        }
        if (kvs__now_ns() >= deadline)
            return KVS_ETIMEDOUT;
        sched_yield();
    }
    if (made == d->cb_opt_gen) {
        *t = steps;
        return 1;
    }
    /* Only this thread writes the loaded state: no seqlock to read it. */
    if (s->load_gen != d->cb_opt_gen)
        return 0;
    memcpy(buf, a + pl->load_off, state_bytes(pl));
    *t = s->load_t;
    return 1;
}

/* The record of combined key ck's state, in *rec (its state and name
 * malloc'd, the state NULL when it has none). */
static int record_of(const struct daemon *d, const struct cb_key *ck, struct kvs__state_rec *rec,
                     struct kvs__err *e)
{
    const struct kvs__cb_plan *pl = &ck->plan;
    uint64_t half = pl->count * kvs__cb_state_elem(pl->dtype);
    struct kvs__optim_state *st = malloc(sizeof *st + 2 * half);
    char ks[KVS_MAX_KEY_LEN + 8];
    int rc;

    *rec = (struct kvs__state_rec){ ck->key, pl->dtype, NULL };
    if (!st)
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory saving states");
    *st = (struct kvs__optim_state){
        .dtype = pl->dtype == KVS_FLOAT64 ? KVS_FLOAT64 : KVS_FLOAT32, .count = pl->count,
        .nbuf = kvs__optim_nbuf(d->cb_opt), .device = KVS_HOST,
        .buf = { st + 1, (unsigned char *)(st + 1) + half },
    };
    if ((rc = snapshot(d, pl, st->buf[0], &st->t)) == 1) {
        rec->state = st;
        return 0;
    }
    free(st);
    if (rc == 0)
        return 0;
    kvs__key_str(ks, sizeof ks, ck->key);
    return kvs__fail(e, rc, "key %s: a round its workers combine stays mid-write, its state "
                     "cannot be saved", ks);
}

/* Keys whose state the engine keeps: those kvsd updates. */
static int not_combined(void *ctx, kvs_key_t key)
{
    struct daemon *d = ctx;
    struct kvs__entry_info info;
    const struct round *rd;

    if (kvs__engine_lookup(d->eng, key, &info, NULL) != 0)
        return 1;
    rd = *info.front;
    return !rd || !rd->cb;
}

int cb_save_states(struct daemon *d, const char *path, int dump_optimizer, struct kvs__err *e)
{
    struct kvs__state_rec *recs;
    const uint8_t *img[1];
    uint8_t *bytes = NULL;
    size_t n = 0, len;
    int rc = 0;

    /* Without an optimizer the engine says so. */
    if (d->cb_n == 0 || !d->cb_opt)
        return kvs__engine_save_states(d->eng, path, dump_optimizer, e);
    if (!(recs = calloc(d->cb_n, sizeof *recs)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory saving states");
    for (size_t i = 0; i < d->cb_n && rc == 0; i++)
        if ((rc = record_of(d, &d->cb_keys[i], &recs[n], e)) == 0 && recs[n].state)
            n++;
    /* The combined keys' states go in as another engine's would. */
    if (rc == 0 && (rc = kvs__optim_encode(d->cb_opt, 0, recs, n, &bytes, &len, e)) == 0) {
        img[0] = bytes;
        rc = kvs__engine_save_states_with(d->eng, path, dump_optimizer, not_combined, d, img,
                                          &len, 1, NULL, e);
    }
    for (size_t i = 0; i < n; i++)
        free(recs[i].state);
    free(recs);
    free(bytes);
    return rc;
}

/* Writes the engine's state of combined key ck, newly loaded, or none,
 * into its slot's load buffer, for the optimizer's generation gen. */
static void load_one(struct daemon *d, const struct cb_key *ck, uint64_t gen)
{
    const struct kvs__optim_state *st = kvs__engine_state(d->eng, ck->entry);
    struct kvs__cb_slot *s = slot_of(d, &ck->plan);
    unsigned char *buf = (unsigned char *)d->cb + ck->plan.load_off;
    uint64_t half = ck->plan.count * kvs__cb_state_elem(ck->plan.dtype);

    if (st && (st->count != ck->plan.count || st->device != KVS_HOST))
        st = NULL;
    atomic_fetch_add_explicit(&s->lseq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memset(buf, 0, 2 * half);
    for (int b = 0; st && b < st->nbuf && b < 2; b++)
        memcpy(buf + (uint64_t)b * half, st->buf[b], half);
    s->load_t = st ? st->t : 0;
    s->load_gen = st ? gen : 0;
    atomic_fetch_add_explicit(&s->lseq, 1, memory_order_release);
}

int cb_load_states(struct daemon *d, const char *path, struct kvs__err *e)
{
    int rc = kvs__engine_load_states(d->eng, path, e);

    if (rc != 0 || d->cb_n == 0)
        return rc;
    /* For the generation cb_optimizer publishes next: every combined key's
     * next round then finds its last state outdated and takes this one. */
    for (size_t i = 0; i < d->cb_n; i++)
        load_one(d, &d->cb_keys[i], d->cb_opt_gen + 1);
    cb_optimizer(d);
    return 0;
}

/* ---- a worker leaves, the job fails ----------------------------------- */

/* The rounds its leaving completes: kvsd claims and combines them, in
 * order, unless a worker arriving at the same time does. */
void cb_leave(struct daemon *d, int wi)
{
    uint64_t active;

    if (d->cb_on != 1)
        return;
    active = atomic_fetch_and(&head(d)->active, ~(1ull << wi)) & ~(1ull << wi);
    for (size_t i = 0; i < d->cb_n && !d->failed; i++) {
        struct kvs__cb_slot *s = slot_of(d, &d->cb_keys[i].plan);

        for (int k = 0; k < 2 && !d->failed; k++) {
            uint64_t g = atomic_load(&s->gen), r;
            int rc;

            if (!kvs__cb_try_claim(s, (int)((g + 1) & 1), active, &r)
                && !kvs__cb_try_claim(s, (int)(g & 1), active, &r))
                break;
            rc = kvs__cb_combine(d->cb, s, &d->cb_keys[i].plan, r, d->cb_opt, d->cb_opt_gen, 1,
                                 kvs__now_ns() + HANDSHAKE_NS);
            if (rc != 0)
                job_fail(d, rc, "kvsd could not complete round %llu of a key its workers "
                         "combine after rank %d left", (unsigned long long)r, d->rank0 + wi);
        }
    }
}

/* The job failed: every worker waiting in the area learns why. */
static void cb_fail(struct daemon *d, int status, const char *msg)
{
    if (d->cb_on == 1)
        kvs__cb_fail(d->cb, status, msg);
}

void cb_init(struct daemon *d)
{
    static const struct fail_hook hook = { cb_fail, NULL };

    job_hook(d, &hook);
}

/* A worker that gave up waiting for a combined round failed the job in
 * the area (combine.h): kvsd fails it here too, with that worker's text. */
void cb_check(struct daemon *d)
{
    struct kvs__cb_head *h;
    char msg[KVS__MSG_MAX], text[KVS__MSG_MAX];
    int32_t f;

    if (atomic_load_explicit(&d->cb_on, memory_order_acquire) != 1 || d->failed)
        return;
    h = head(d);
    if ((f = atomic_load_explicit(&h->failed, memory_order_acquire)) >= 0)
        return;
    memcpy(msg, h->fail_msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    kvs__ctl_text_escape(text, sizeof text, msg, strlen(msg), 0);
    job_fail(d, kvs__status_ok(f) ? f : KVS_EPROTO, "%s", text);
}

uint64_t cb_rounds(const struct daemon *d)
{
    uint64_t n = 0;

    for (size_t i = 0; i < d->cb_n; i++)
        n += atomic_load_explicit(&slot_of(d, &d->cb_keys[i].plan)->gen, memory_order_relaxed);
    return n;
}

/* ---- what kvsctl shows --------------------------------------------------- */

uint64_t cb_key_rounds(const struct daemon *d, const struct round *rd)
{
    return atomic_load_explicit(&slot_of(d, &d->cb_keys[rd->cb - 1].plan)->gen,
                                memory_order_relaxed);
}

void cb_key_latency(const struct daemon *d, const struct round *rd, uint64_t *lat)
{
    const struct kvs__cb_slot *s = slot_of(d, &d->cb_keys[rd->cb - 1].plan);

    /* Any worker can write these: each is clamped, so that sums of them
     * stay far from overflowing, and nothing is indexed by them. */
    for (int b = 0; b < KVS__LAT_BUCKETS; b++) {
        uint64_t n = atomic_load_explicit(&s->lat[b], memory_order_relaxed);

        lat[b] = n < CB_COUNT_MAX ? n : CB_COUNT_MAX;
    }
}

int cb_round_text(const struct daemon *d, size_t i, char *buf, size_t size)
{
    const struct kvs__cb_slot *s = slot_of(d, &d->cb_keys[i].plan);
    uint64_t g = atomic_load(&s->gen), active = atomic_load(&head(d)->active);
    char ks[KVS_MAX_KEY_LEN + 8], who[160];

    /* The round after the last published one, or the one after that
     * (its parity's word says which: its tag is the round's). */
    for (uint64_t r = g + 1; r <= g + 2; r++) {
        uint64_t w = atomic_load(&s->arrive[r & 1]);
        uint32_t mask = kvs__cb_mask(w), missing = (uint32_t)active & ~mask;
        size_t o = 0;

        if (mask == 0 || (w & KVS__CB_CLAIMED) || (w & ~(KVS__CB_CLAIMED | 0xffffffffull))
                                                     != kvs__cb_tag(r))
            continue;
        who[0] = '\0';
        for (int k = 0; k < d->nworkers && o < sizeof who; k++)
            if (missing & (1u << k))
                o += (size_t)snprintf(who + o, sizeof who - o, "%s%d", o ? ", " : "",
                                      d->rank0 + k);
        kvs__key_str(ks, sizeof ks, d->cb_keys[i].key);
        snprintf(buf, size, "key %s round %llu: %d of %d workers pushed, waiting for rank%s %s",
                 ks, (unsigned long long)r, __builtin_popcount(mask & (uint32_t)active),
                 __builtin_popcountll(active), strchr(who, ',') ? "s" : "", who);
        return 1;
    }
    return 0;
}

void cb_free(struct daemon *d)
{
    kvs__optim_free(d->cb_opt);
    for (size_t i = 0; i < d->cb_n; i++)
        free((char *)d->cb_keys[i].key.name);
    free(d->cb_keys);
    if (d->cb)
        kvs__unmap(d->cb, d->cb_size);
    if (d->cb_fd >= 0)
        close(d->cb_fd);
}
