/*
 * push.c - the push path: a plan's inputs staged onto their key's device
 * (or reduced there by the front's hook), summed, and run through the
 * update rule (the caller's updater, an optimizer, or assignment) into the
 * stored values; and the pushes kvsd makes of entries it looked up
 * beforehand, whole or by element range.
 *
 * This is the hot path: it must never copy an input that is already where
 * its key lives. It must never change what a caller can observe before
 * commit: prepare and stage only acquire, and the updater works on shadow
 * copies swapped in when every updater of the call has succeeded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "store/engine.h"
#include "store/engine_model.h"
#include "store/table.h"
#include "device/mem.h"
#include "kernels/optim.h"
#include "store/optim_state.h"
#include "store/heap.h"
#include "store/plan.h"
#include "store/push.h"

/* The elements a group's push changes: its range, or the whole key. */
static size_t group_first(const struct group *gr)
{
    return gr->ranged ? gr->first : 0;
}

static size_t group_count(const struct group *gr)
{
    return gr->ranged ? gr->count : gr->ent->count;
}

/* Where element i of a key's value lies. */
static void *value_at(const struct entry *ent, size_t i)
{
    return (char *)ent->value + i * kvs_dtype_size(ent->dtype);
}

/* Acquires what the update rule needs for each group of a push plan. */
static int push_prepare(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
{
    int rc;

    for (int g = 0; g < p->ngroups; g++) {
        struct group *gr = &p->groups[g];
        struct entry *ent = gr->ent;

        if (gr->fresh)
            continue;                  /* initialised by this push: no update */
        if ((rc = kvs__entry_optim_takes(eng, ent, e)) != 0)
            return rc;
        if (eng->optim) {
            if (!ent->ostate
                && (rc = kvs__optim_state_new(eng->optim, ent->dtype, ent->count, ent->device,
                                              &gr->ostate, e)) != 0)
                return rc;
        }
        if (eng->updater && gr->k > 1 && (rc = kvs__entry_buffer(ent, &ent->scratch, 1, e)) != 0)
            return rc;
        if (eng->updater && (rc = kvs__entry_buffer(ent, &ent->shadow, 1, e)) != 0)
            return rc;
    }
    return 0;
}

/* Makes the entry's stage hold at least m copies of its value. */
static int ent_stage(struct entry *ent, int m, struct kvs__err *e)
{
    int rc;

    if (m <= ent->nstage)
        return 0;
    kvs__mem_free(ent->device, ent->stage);
    ent->stage = NULL;
    ent->nstage = 0;
    if ((rc = kvs__entry_buffer(ent, &ent->stage, (size_t)m, e)) != 0)
        return rc;
    ent->nstage = m;
    return 0;
}

/* Whether the engine's reduce takes a group: values from several devices,
 * one per device, the key's own among them. */
static bool reducible(const struct group *gr)
{
    uint64_t seen = 0;
    bool home = false;

    if (gr->k < 2 || !gr->dev || gr->ent->device == KVS_HOST)
        return false;
    for (int j = 0; j < gr->k; j++) {
        uint64_t bit = (uint64_t)1 << ((unsigned)(gr->dev[j] - 1) & 63);

        if (gr->dev[j] == KVS_HOST || gr->dev[j] > KVS__MAX_DEVICES || (seen & bit))
            return false;
        seen |= bit;
        home |= gr->dev[j] == gr->ent->device;
    }
    return home;
}

/* The engine's reduce of every group it takes, into the stage of each, as
 * one call; those groups then have that one input, on their key's device. */
static int push_reduce(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
{
    struct kvs__reduce_item *items = NULL;
    int m = 0, rc = 0;

    for (int g = 0; g < p->ngroups && rc == 0; g++) {
        struct group *gr = &p->groups[g];

        if (!reducible(gr))
            continue;
        if (!items && !(items = malloc(sizeof *items * (size_t)p->ngroups)))
            return kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", p->ngroups);
        if ((rc = ent_stage(gr->ent, 1, e)) != 0)
            break;
        items[m++] = (struct kvs__reduce_item){ gr->ent->dtype, group_count(gr),
                                                gr->ent->device, gr->ent->stage, gr->in,
                                                gr->dev, gr->k };
    }
    if (rc == 0 && m > 0 && (rc = eng->reduce(eng->reduce_ctx, items, m, e)) == 0) {
        for (int g = 0; g < p->ngroups; g++) {
            struct group *gr = &p->groups[g];

            if (!reducible(gr))
                continue;
            gr->in[0] = gr->ent->stage;
            gr->k = 1;
            gr->dev = NULL;
        }
    }
    free(items);
    return rc;
}

/* Copies the inputs of each group that lie on another device than their
 * key's value into the entry's stage, there, and points in[] at the
 * copies: sums and updates then read only memory of the value's device.
 * Nothing observable changes. */
static int push_stage(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
{
    int rc;

    if (eng->reduce && (rc = push_reduce(eng, p, e)) != 0)
        return rc;
    for (int g = 0; g < p->ngroups; g++) {
        struct group *gr = &p->groups[g];
        struct entry *ent = gr->ent;
        int m = 0;

        for (int j = 0; gr->dev && j < gr->k; j++)
            m += gr->dev[j] != ent->device;
        if (m == 0)
            continue;
        if ((rc = ent_stage(ent, m, e)) != 0)
            return rc;
        m = 0;
        for (int j = 0; j < gr->k; j++) {
            char *to = (char *)ent->stage + (size_t)m * ent->bytes;

            if (gr->dev[j] == ent->device)
                continue;
            if ((rc = kvs__mem_copy(to, ent->device, gr->in[j], gr->dev[j],
                                    group_count(gr) * kvs_dtype_size(ent->dtype),
                                    eng->nthreads, e)) != 0)
                return rc;
            gr->in[j] = to;
            gr->dev[j] = ent->device;
            m++;
        }
    }
    return 0;
}

/* The group's summed input: its only value, or their sum in scratch. */
static int merged(const struct kvs__engine *eng, const struct group *gr, const void **out,
                  struct kvs__err *e)
{
    const struct entry *ent = gr->ent;

    *out = gr->k == 1 ? gr->in[0] : ent->scratch;
    if (gr->k == 1)
        return 0;
    return kvs__mem_sum(ent->device, ent->dtype, ent->scratch, gr->in, gr->k, ent->count,
                        eng->nthreads, e);
}

/* Runs the caller's updater on shadow copies; swaps them in only when every
 * updater succeeded. */
static int push_updater(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];

    for (int g = 0; g < p->ngroups; g++) {
        struct group *gr = &p->groups[g];
        struct entry *ent = gr->ent;
        kvs_array_t in, stored;
        const void *sum;
        int rc;

        if (gr->fresh)
            continue;
        /* The updater sees finished arrays, on the key's device. */
        if ((rc = merged(eng, gr, &sum, e)) != 0
            || (rc = kvs__mem_copy(ent->shadow, ent->device, ent->value, ent->device,
                                   ent->bytes, eng->nthreads, e)) != 0
            || (rc = kvs__mem_finish(e)) != 0)
            return rc;
        in = kvs__entry_array(ent, (void *)sum);
        stored = kvs__entry_array(ent, ent->shadow);
        rc = eng->updater(ent->key, &in, &stored, eng->updater_ctx);
        if (rc != 0)
            return kvs__fail(e, KVS_EUPDATER, "key %s: updater returned %d",
                             KEYSTR(ks, ent->key), rc);
    }
    for (int g = 0; g < p->ngroups; g++) {
        struct entry *ent = p->groups[g].ent;
        void *t;

        if (p->groups[g].fresh)
            continue;
        /* On the host, value came from eng->mem and shadow from the heap. */
        t = ent->value;
        if (eng->mem.alloc == kvs__heap_alloc || ent->device != KVS_HOST) {
            ent->value = ent->shadow;
            ent->shadow = t;
        } else {
            kvs__copy(ent->value, ent->shadow, ent->bytes, eng->nthreads);
        }
    }
    return 0;
}

/* A source's error (kvs__sum_many, kvs__optim_update_many) as a push's. */
static int source_fail(int rc, struct kvs__err *e)
{
    if (rc == 0)
        return 0;
    return kvs__fail(e, rc == -ENOMEM ? -ENOMEM : KVS_EPEERDEAD,
                     "an input could not be read from its worker's memory (%s)",
                     strerror(-rc));
}

/* The sums that go straight into stored values (new keys, and every key
 * under ASSIGN), as one job over the threads: a list of many small keys
 * shares them as a big array would. Without memory for the batch, one by
 * one. */
static int push_sums(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
{
    struct kvs__sum_item *items = malloc(sizeof *items * (size_t)(p->ngroups ? p->ngroups : 1));
    int m = 0, rc = 0;

    for (int g = 0; g < p->ngroups && rc == 0; g++) {
        struct group *gr = &p->groups[g];
        struct entry *ent = gr->ent;
        void *out = value_at(ent, group_first(gr));

        if (!gr->fresh && (eng->optim || eng->updater))
            continue;
        if (items && ent->device == KVS_HOST)
            items[m++] = (struct kvs__sum_item){ ent->dtype, out, gr->in, gr->k,
                                                 group_count(gr), gr->src, gr->sink };
        else if (gr->src)              /* one by one, without memory for the batch */
            rc = source_fail(kvs__sum_many(&(struct kvs__sum_item){ ent->dtype, out, gr->in,
                                                                    gr->k, group_count(gr),
                                                                    gr->src, gr->sink },
                                           1, eng->nthreads), e);
        else
            rc = kvs__mem_sum(ent->device, ent->dtype, out, gr->in, gr->k, group_count(gr),
                              eng->nthreads, e);
    }
    if (rc == 0)
        rc = source_fail(kvs__sum_many(items, m, eng->nthreads), e);
    free(items);
    return rc;
}

/* The optimizer's updates of every key of the push but new ones, as one
 * job over the threads (each key's inputs summed beside its update); without
 * memory for the batch, one by one. */
static int push_updates(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
{
    struct kvs__optim_item *items = malloc(sizeof *items * (size_t)(p->ngroups ? p->ngroups : 1));
    int m = 0, rc = 0;

    for (int g = 0; g < p->ngroups && rc == 0; g++) {
        struct group *gr = &p->groups[g];
        struct entry *ent = gr->ent;
        struct kvs__optim_item it;

        if (gr->fresh)
            continue;
        if (gr->ostate) {
            ent->ostate = gr->ostate;
            gr->ostate = NULL;
        }
        it = (struct kvs__optim_item){ ent->ostate, ent->dtype, value_at(ent, group_first(gr)),
                                       (const void *const *)gr->in, gr->k, group_count(gr),
                                       group_first(gr), gr->step, gr->src };
        if (items && ent->device == KVS_HOST)
            items[m++] = it;
        else
            rc = kvs__mem_update(ent->device, eng->optim, &it, 1, eng->nthreads, e);
    }
    if (rc == 0)
        rc = source_fail(kvs__optim_update_many(eng->optim, items, m, eng->nthreads), e);
    free(items);
    return rc;
}

/* Applies a prepared push. Host keys cannot fail here; a device that fails
 * a kernel leaves its key's value as far as the device got (the call
 * fails with KVS_EDEVICE). */
static int push_commit(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
{
    int rc;

    if ((rc = push_sums(eng, p, e)) != 0 || (eng->optim && (rc = push_updates(eng, p, e)) != 0)
        || (rc = kvs__mem_finish(e)) != 0)
        return rc;
    for (int g = 0; g < p->ngroups; g++) {
        struct group *gr = &p->groups[g];

        if (gr->fresh) {
            kvs__table_put(eng, gr->ent);
            gr->fresh = false;
        }
        gr->ent->version++;
    }
    return 0;
}

int kvs__push_run(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
{
    int rc;

    if ((rc = push_prepare(eng, p, e)) != 0 || (rc = push_stage(eng, p, e)) != 0
        || (eng->updater && (rc = push_updater(eng, p, e)) != 0)
        || (rc = push_commit(eng, p, e)) != 0)
        kvs__mem_finish(NULL);         /* nothing left queued when the call returns */
    return rc;
}

int kvs__engine_push(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     const kvs_array_t *values, struct kvs__err *e)
{
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, values, "value", e)) != 0)
        return rc;
    if ((rc = kvs__plan_make(eng, n, keys, values, eng->init_on_push, &p, e)) != 0)
        return rc;
    rc = kvs__push_run(eng, &p, e);
    kvs__plan_free(eng, &p);
    return rc;
}

/* The inputs' devices a prepared item needs in its group: none (NULL, all
 * on the host) when they and the value are all on the host, the host
 * path of every kvsd round; else devs[0..item->k), from the item's (NULL:
 * all on the host), which push_stage rewrites. */
static bool item_on_host(const struct kvs__push_item *item)
{
    return !item->dev && ((const struct entry *)item->entry)->device == KVS_HOST;
}

/* Sources are read only by the host's sums and updates. */
static int sources_check(const struct kvs__engine *eng, const struct kvs__push_item *item,
                         struct kvs__err *e)
{
    if (item->src && (!item_on_host(item) || eng->updater || item->k > KVS__FETCH_MAX_K))
        return kvs__fail(e, KVS_EBADARG, "inputs read from another process need a host key, "
                         "host inputs, no updater and at most %d inputs", KVS__FETCH_MAX_K);
    return 0;
}

static void group_devs(struct group *gr, const struct kvs__push_item *item, int *devs)
{
    if (item_on_host(item))
        return;
    for (int j = 0; j < item->k; j++)
        devs[j] = item->dev ? item->dev[j] : KVS_HOST;
    gr->dev = devs;
}

int kvs__engine_push_entries(struct kvs__engine *eng, int n, const struct kvs__push_item *items,
                             struct kvs__err *e)
{
    struct plan p;
    int *devs = NULL;
    size_t ndevs = 0;
    int rc;

    if (n < 0 || (n > 0 && !items))
        return kvs__fail(e, KVS_EBADARG, "bad list of %d entries", n);
    memset(&p, 0, sizeof p);
    if (n == 0)
        return 0;
    for (int g = 0; g < n; g++) {
        if ((rc = sources_check(eng, &items[g], e)) != 0)
            return rc;
        p.n += items[g].k;
        ndevs += item_on_host(&items[g]) ? 0 : (size_t)items[g].k;
    }
    if (!(p.groups = calloc((size_t)n, sizeof *p.groups))
        || (ndevs && !(devs = malloc(sizeof *devs * ndevs)))) {
        free(p.groups);
        return kvs__fail(e, -ENOMEM, "out of memory for a push of %d keys", n);
    }
    p.ngroups = n;
    for (int g = 0, at = 0; g < n; g++) {
        p.groups[g].ent = items[g].entry;
        p.groups[g].k = items[g].k;
        p.groups[g].in = items[g].in;
        p.groups[g].src = items[g].src;
        p.groups[g].sink = items[g].sink;
        group_devs(&p.groups[g], &items[g], devs ? devs + at : NULL);
        at += item_on_host(&items[g]) ? 0 : items[g].k;
    }
    rc = kvs__push_run(eng, &p, e);
    kvs__plan_free(eng, &p);
    free(devs);
    return rc;
}

int kvs__engine_push_range(struct kvs__engine *eng, const struct kvs__push_item *item,
                           size_t first, size_t count, uint64_t step, struct kvs__err *e)
{
    struct group gr = { .ranged = true, .first = first, .count = count, .step = step };
    struct plan p = { .n = item ? item->k : 0, .ngroups = 1, .groups = &gr };
    const struct entry *ent = item ? item->entry : NULL;
    int *devs = NULL, rc;

    if (!ent || item->k < 1 || !item->in)
        return kvs__fail(e, KVS_EBADARG, "a range push needs an entry and an input");
    if (first > ent->count || count > ent->count - first)
        return kvs__fail(e, KVS_EBADARG, "range [%zu, %zu) of a key of %zu elements", first,
                         first + count, ent->count);
    if (eng->updater)
        return kvs__fail(e, KVS_EBADARG, "a range push takes an optimizer or none, not an "
                         "updater");
    if ((rc = sources_check(eng, item, e)) != 0)
        return rc;
    if (!item_on_host(item) && !(devs = malloc(sizeof *devs * (size_t)item->k)))
        return kvs__fail(e, -ENOMEM, "out of memory for a push");
    gr.ent = item->entry;
    gr.k = item->k;
    gr.in = item->in;
    gr.src = item->src;
    group_devs(&gr, item, devs);
    rc = kvs__push_run(eng, &p, e);
    kvs__optim_state_free(gr.ostate);  /* handed to the entry unless the push failed */
    free(devs);
    return rc;
}

uint64_t kvs__engine_steps(const struct kvs__engine *eng, const void *entry)
{
    const struct entry *ent = entry;

    (void)eng;
    return ent && ent->ostate ? ent->ostate->t : 0;
}
