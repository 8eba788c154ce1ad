/*
 * combined.c - kvsd's part in the rounds the workers combine (combine.h):
 * it makes the combine area, lays out a slot for each small key at its
 * init, publishes the optimizer and the job's failure there, completes the
 * rounds that a worker leaving completes, and learns of a worker that gave
 * up waiting. Serve thread only, but cb_setup (main) and cb_join (socket
 * thread, under d->lock, before any worker is LIVE).
 *
 * kvsd trusts nothing in the area: it reads the arrival words and round
 * numbers there, and a failure's code and text, never an offset or a
 * size; every slot's layout is its own copy (d->cb_plans).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "combine.h"
#include "kvsd.h"
#include "optim.h"
#include "shm.h"

static struct kvs__cb_head *head(const struct daemon *d)
{
    return (struct kvs__cb_head *)d->cb;
}

int cb_setup(struct daemon *d, struct kvs__err *e)
{
    const char *v = getenv("KVS_COMBINE");
    uint64_t size = d->o.arena;
    int rc;

    if (!v || strcmp(v, "1") != 0 || d->o.nhosts > 1)
        return 0;
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

void cb_join(struct daemon *d)
{
    if (!d->cb || d->cb_on >= 0)
        return;
    d->cb_on = d->sync == 1 && d->total <= KVS__CB_MAX_WORKERS && d->total == d->nworkers;
    if (d->cb_on) {
        head(d)->nworkers = (uint32_t)d->nworkers;
        atomic_store(&head(d)->active, (1ull << d->nworkers) - 1);
    }
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
        struct round *rd;

        if (kvs__engine_lookup(d->eng, keys[i], &info, NULL) != 0 || info.device != KVS_HOST
            || !kvs__dtype_is_float(info.dtype) || info.bytes > KVS__CB_MAX_BYTES
            || d->cb_n >= KVS__CB_INDEX / 2)
            continue;
        kvs__cb_plan(d->cb_next, info.bytes, info.count, info.dtype, (uint32_t)d->nworkers,
                     &plan);
        if (plan.size > d->cb_size - d->cb_next)
            continue;                  /* the area is full: kvsd takes the key */
        if (d->cb_n == d->cb_cap) {
            size_t cap = d->cb_cap ? 2 * d->cb_cap : 64;
            struct kvs__cb_plan *p = realloc(d->cb_plans, cap * sizeof *p);

            if (!p)
                continue;
            d->cb_plans = p;
            d->cb_cap = cap;
        }
        if (!(rd = round_of(d, &info, keys[i]))
            || kvs__cb_publish(d->cb, &plan, keys[i], info.ndim, info.shape, info.value) != 0)
            continue;
        rd->cb = 1;
        d->cb_plans[d->cb_n++] = plan;
        d->cb_next += plan.size;
    }
}

static struct kvs__cb_slot *slot_of(const struct daemon *d, const struct kvs__cb_plan *p)
{
    return (struct kvs__cb_slot *)((unsigned char *)d->cb + p->off);
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
        fail_job(d, KVS_ESPEC, "kvsd: the optimizer '%.64s' cannot be handed to the workers "
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
        struct kvs__cb_slot *s = slot_of(d, &d->cb_plans[i]);

        for (int k = 0; k < 2 && !d->failed; k++) {
            uint64_t g = atomic_load(&s->gen), r;
            int rc;

            if (!kvs__cb_try_claim(s, (int)((g + 1) & 1), active, &r)
                && !kvs__cb_try_claim(s, (int)(g & 1), active, &r))
                break;
            rc = kvs__cb_combine(d->cb, s, &d->cb_plans[i], r, d->cb_opt, d->cb_opt_gen,
                                 kvs__now_ns() + HANDSHAKE_NS);
            if (rc != 0)
                fail_job(d, rc, "kvsd could not complete round %llu of a key its workers "
                         "combine after rank %d left", (unsigned long long)r, d->rank0 + wi);
        }
    }
}

void cb_fail(struct daemon *d, int status, const char *msg)
{
    if (d->cb_on == 1)
        kvs__cb_fail(d->cb, status, msg);
}

/* A worker that gave up waiting for a combined round failed the job in
 * the area (combine.h): kvsd fails it here too, with that worker's text. */
void cb_check(struct daemon *d)
{
    struct kvs__cb_head *h;
    char msg[KVS__MSG_MAX], text[KVS__MSG_MAX];
    int32_t f;

    if (d->cb_on != 1 || d->failed)
        return;
    h = head(d);
    if ((f = atomic_load_explicit(&h->failed, memory_order_acquire)) >= 0)
        return;
    memcpy(msg, h->fail_msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    kvs__ctl_text_escape(text, sizeof text, msg, strlen(msg), 0);
    fail_job(d, kvs__status_ok(f) ? f : KVS_EPROTO, "%s", text);
}

uint64_t cb_rounds(const struct daemon *d)
{
    uint64_t n = 0;

    for (size_t i = 0; i < d->cb_n; i++)
        n += atomic_load_explicit(&slot_of(d, &d->cb_plans[i])->gen, memory_order_relaxed);
    return n;
}

void cb_free(struct daemon *d)
{
    kvs__optim_free(d->cb_opt);
    free(d->cb_plans);
    if (d->cb)
        kvs__unmap(d->cb, d->cb_size);
    if (d->cb_fd >= 0)
        close(d->cb_fd);
}
