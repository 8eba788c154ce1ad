/*
 * engine.c - the store: key table, merge, update rule, versions.
 *
 * Each data call runs in two phases. prepare checks every argument against
 * the table and acquires everything the call could need (entries for new
 * keys, table room, optimizer state, scratch buffers); nothing observable
 * changes. commit then applies the call and cannot fail, except for a
 * caller's updater, which works on shadow copies that are swapped in only
 * when every updater of the call has succeeded. This is how a failed call
 * leaves the store exactly as it was.
 *
 * The engine never keeps a pointer to caller memory past a call, never locks
 * (its front does), and never trusts a list's length or arrays before
 * checking them. Its state is engine_model.h's, its table and entries
 * table.c's, argument checks engine_args.c's; what a front asks of single
 * keys is engine_keys.c's, saving and loading optimizer states
 * engine_states.c's.
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
#include "store/engine_args.h"
#include "store/table.h"
#include "device/mem.h"
#include "kernels/optim.h"
#include "store/optim_state.h"

/* ---- memory ----------------------------------------------------------- */

static void *heap_alloc(void *ctx, size_t bytes)
{
    size_t size = (bytes + 63) & ~(size_t)63;

    (void)ctx;
    return aligned_alloc(64, size ? size : 64);
}

static void heap_free(void *ctx, void *p, size_t bytes)
{
    (void)ctx;
    (void)bytes;
    free(p);
}

static const struct kvs__mem heap_mem = { heap_alloc, heap_free, NULL };

/* ---- plans ------------------------------------------------------------ */

struct group {
    struct entry *ent;                 /* the key's entry; a new one when fresh */
    bool fresh;                        /* ent is not in the table yet */
    int k;                             /* values of this key in the list */
    const void **in;                   /* their data, in list order */
    int *dev;                          /* their devices; NULL: all on the host */
    const struct kvs__source *src;     /* their sources (array.h), or NULL */
    struct kvs__optim_state *ostate;   /* new state, handed to ent at commit */
    bool ranged;                       /* in[] and the update are elements [first,
                                        * first + count) of the key only */
    size_t first, count;
    uint64_t step;                     /* the optimizer's update number; 0: the next */
};

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

struct plan {
    int n, ngroups;
    struct group *groups;              /* ngroups; the head of one allocation */
    const void **inputs;               /* n, grouped: groups[g].in points in here */
    int *devs;                         /* n, grouped: groups[g].dev points in here */
    int *gid;                          /* n: group of each list index */
};

static void plan_free(struct kvs__engine *eng, struct plan *p)
{
    for (int g = 0; p->groups && g < p->ngroups; g++) {
        if (p->groups[g].fresh)
            kvs__entry_free(eng, p->groups[g].ent);
        kvs__optim_state_free(p->groups[g].ostate);
    }
    free(p->groups);
    memset(p, 0, sizeof *p);
}

/* Groups the list and resolves each group's entry. A key not in the table
 * gets a fresh entry shaped like its first array when allow_new, else is
 * KVS_ENOKEY. Every array is then matched against its entry. */
static int plan_make(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     const kvs_array_t *arrs, bool allow_new, struct plan *p,
                     struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    size_t cap = kvs__group_slots(n);
    int *first, rc, nfresh = 0;

    memset(p, 0, sizeof *p);
    p->n = n;
    if (n == 0)
        return 0;
    /* One allocation per call: groups, inputs, gid, first, hash slots. */
    if ((size_t)n > SIZE_MAX / 128)
        return kvs__fail(e, -ENOMEM, "a list of %d keys is too long", n);
    p->groups = malloc((sizeof *p->groups + sizeof *p->inputs) * (size_t)n
                       + sizeof(int) * (3 * (size_t)n + cap));
    if (!p->groups)
        return kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
    p->inputs = (const void **)(p->groups + n);
    p->devs = (int *)(p->inputs + n);
    p->gid = p->devs + n;
    first = p->gid + n;
    p->ngroups = kvs__group_keys_in(n, keys, p->gid, first, first + n);
    memset(p->groups, 0, sizeof *p->groups * (size_t)p->ngroups);
    for (int g = 0; g < p->ngroups; g++) {
        struct group *gr = &p->groups[g];
        kvs_key_t key = keys[first[g]];

        gr->ent = table_get(eng, key);
        if (!gr->ent) {
            if (!allow_new) {
                rc = kvs__fail(e, KVS_ENOKEY, "key %s: not initialised", KEYSTR(ks, key));
                goto fail;
            }
            if ((rc = kvs__entry_new(eng, key, &arrs[first[g]], &gr->ent, e)) != 0)
                goto fail;
            gr->fresh = true;
            nfresh++;
        }
    }
    for (int i = 0; i < n; i++) {
        struct group *gr = &p->groups[p->gid[i]];

        if ((rc = kvs__entry_match(gr->ent, &arrs[i], e)) != 0)
            goto fail;
        gr->k++;
    }
    /* Lay the inputs out group by group, each in list order. */
    for (int g = 0, at = 0; g < p->ngroups; g++) {
        p->groups[g].in = p->inputs + at;
        p->groups[g].dev = p->devs + at;
        at += p->groups[g].k;
        p->groups[g].k = 0;
    }
    for (int i = 0; i < n; i++) {
        struct group *gr = &p->groups[p->gid[i]];

        gr->dev[gr->k] = arrs[i].device;
        gr->in[gr->k++] = arrs[i].data;
    }
    if ((rc = kvs__table_reserve(eng, (size_t)nfresh, e)) != 0)
        goto fail;
    return 0;

fail:
    plan_free(eng, p);
    return rc;
}

/* ---- init ------------------------------------------------------------- */

int kvs__engine_init(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     const kvs_array_t *values, int replace, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, values, "value", e)) != 0)
        return rc;
    /* Existing and repeated keys are refused before shapes are matched, so
     * that the message says what is really wrong. */
    for (int i = 0; !replace && i < n; i++)
        if (table_get(eng, keys[i]))
            return kvs__fail(e, KVS_EKEYEXISTS, "key %s: already initialised",
                             KEYSTR(ks, keys[i]));
    if ((rc = kvs__find_repeat(n, keys, e)) < 0)
        return rc;
    if (rc < n)
        return kvs__fail(e, KVS_EKEYEXISTS, "key %s: appears twice in one init",
                         KEYSTR(ks, keys[rc]));
    /* Every key gets a fresh entry: a re-initialised key may change shape. */
    memset(&p, 0, sizeof p);
    p.groups = calloc((size_t)(n ? n : 1), sizeof *p.groups);   /* gid, inputs unused */
    if (!p.groups)
        return kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
    for (int i = 0; i < n; i++) {
        if ((rc = kvs__entry_new(eng, keys[i], &values[i], &p.groups[i].ent, e)) != 0)
            goto out;
        p.groups[i].fresh = true;
        p.ngroups++;
    }
    if ((rc = kvs__table_reserve(eng, (size_t)n, e)) != 0)
        goto out;
    for (int i = 0; i < n; i++) {
        struct entry *ent = p.groups[i].ent;

        if ((rc = kvs__mem_copy(ent->value, ent->device, values[i].data, values[i].device,
                                ent->bytes, eng->nthreads, e)) != 0)
            goto out;
    }
    if ((rc = kvs__mem_finish(e)) != 0)
        goto out;
    for (int i = 0; i < n; i++) {
        p.groups[i].ent->version = 1;
        kvs__table_put(eng, p.groups[i].ent);
        p.groups[i].fresh = false;
    }
out:
    if (rc != 0)
        kvs__mem_finish(NULL);         /* nothing left queued into entries freed here */
    plan_free(eng, &p);
    return rc;
}

/* ---- push ------------------------------------------------------------- */

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
        if (eng->mem.alloc == heap_alloc || ent->device != KVS_HOST) {
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
                                                 group_count(gr), gr->src };
        else if (gr->src)              /* one by one, without memory for the batch */
            rc = source_fail(kvs__sum_many(&(struct kvs__sum_item){ ent->dtype, out, gr->in,
                                                                    gr->k, group_count(gr),
                                                                    gr->src },
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

static int push_run(struct kvs__engine *eng, struct plan *p, struct kvs__err *e)
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
    if ((rc = plan_make(eng, n, keys, values, eng->init_on_push, &p, e)) != 0)
        return rc;
    rc = push_run(eng, &p, e);
    plan_free(eng, &p);
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
        group_devs(&p.groups[g], &items[g], devs ? devs + at : NULL);
        at += item_on_host(&items[g]) ? 0 : items[g].k;
    }
    rc = push_run(eng, &p, e);
    plan_free(eng, &p);
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
    rc = push_run(eng, &p, e);
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

/* ---- pull ------------------------------------------------------------- */

/* Hands each out its key's value: a copy into its data, or (view) the
 * stored value itself, where it lies. */
static int pull_commit(struct kvs__engine *eng, const struct plan *p, kvs_array_t *outs,
                       bool view, struct kvs__err *e)
{
    int rc = 0;

    for (int i = 0; i < p->n && rc == 0; i++) {
        const struct entry *ent = p->groups[p->gid[i]].ent;

        if (view) {
            outs[i].data = ent->value;
            outs[i].device = ent->device;
        } else {
            rc = kvs__mem_copy(outs[i].data, outs[i].device, ent->value, ent->device,
                               ent->bytes, eng->nthreads, e);
        }
    }
    if (rc == 0)
        return kvs__mem_finish(e);
    kvs__mem_finish(NULL);
    return rc;
}

static int pull_run(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                    kvs_array_t *outs, bool view, struct kvs__err *e)
{
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, outs, view ? "view" : "out", e)) != 0)
        return rc;
    if ((rc = plan_make(eng, n, keys, outs, false, &p, e)) != 0)
        return rc;
    rc = pull_commit(eng, &p, outs, view, e);
    plan_free(eng, &p);
    return rc;
}

int kvs__engine_pull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     kvs_array_t *outs, struct kvs__err *e)
{
    return pull_run(eng, n, keys, outs, false, e);
}

int kvs__engine_pull_view(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                          kvs_array_t *views, struct kvs__err *e)
{
    return pull_run(eng, n, keys, views, true, e);
}

static int pushpull_run(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                        const kvs_array_t *values, kvs_array_t *outs, bool view,
                        struct kvs__err *e)
{
    kvs_array_t *dst = outs ? outs : (kvs_array_t *)values;
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, values, "value", e)) != 0)
        return rc;
    if (outs && (rc = kvs__check_list(eng, n, keys, outs, view ? "view" : "out", e)) != 0)
        return rc;
    if ((rc = plan_make(eng, n, keys, values, eng->init_on_push, &p, e)) != 0)
        return rc;
    /* An out must fit the value its key will hold, the value pushed for it. */
    for (int i = 0; outs && i < n; i++) {
        if ((rc = kvs__entry_match(p.groups[p.gid[i]].ent, &outs[i], e)) != 0)
            goto out;
    }
    if ((rc = push_run(eng, &p, e)) == 0)
        rc = pull_commit(eng, &p, dst, view, e);
out:
    plan_free(eng, &p);
    return rc;
}

int kvs__engine_pushpull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                         const kvs_array_t *values, kvs_array_t *outs, struct kvs__err *e)
{
    return pushpull_run(eng, n, keys, values, outs, false, e);
}

int kvs__engine_pushpull_view(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                              const kvs_array_t *values, kvs_array_t *views,
                              struct kvs__err *e)
{
    return pushpull_run(eng, n, keys, values, views, true, e);
}

/* Writes the rows of ent that ids name into out, zeros elsewhere. Rows of
 * a device go through host memory: a row-sparse pull is for small tables
 * read a few rows at a time. */
static int gather_rows(struct kvs__engine *eng, const struct entry *ent, kvs_array_t *out,
                       const kvs_array_t *ids, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    size_t row = ent->shape[0] ? ent->bytes / (size_t)ent->shape[0] : 0;
    const int64_t *id = ids->data;
    char *dst = out->data, *tmp = NULL;
    const char *src = ent->value;
    int rc = 0;

    if (ent->bytes == 0)
        return 0;
    if (out->device != KVS_HOST || ent->device != KVS_HOST) {
        if (!(tmp = malloc(ent->bytes * (ent->device != KVS_HOST ? 2 : 1))))
            return kvs__fail(e, -ENOMEM, "key %s: out of memory for a %zu-byte buffer",
                             KEYSTR(ks, ent->key), ent->bytes);
        if (out->device != KVS_HOST)
            dst = tmp;
        if (ent->device != KVS_HOST) {
            src = tmp + ent->bytes;
            rc = kvs__mem_copy(tmp + ent->bytes, KVS_HOST, ent->value, ent->device,
                               ent->bytes, eng->nthreads, e);
        }
    }
    if (rc == 0) {
        memset(dst, 0, ent->bytes);
        for (int64_t j = 0; j < ids->shape[0]; j++)
            memcpy(dst + (size_t)id[j] * row, src + (size_t)id[j] * row, row);
        if (dst != out->data
            && (rc = kvs__mem_copy(out->data, out->device, dst, KVS_HOST, ent->bytes,
                                   eng->nthreads, e)) == 0)
            rc = kvs__mem_finish(e);
    }
    free(tmp);
    return rc;
}

int kvs__engine_row_sparse_pull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                                kvs_array_t *outs, const kvs_array_t *row_ids,
                                struct kvs__err *e)
{
    struct plan p;
    int rc;

    if ((rc = kvs__check_list(eng, n, keys, outs, "out", e)) != 0)
        return rc;
    if (n > 0 && !row_ids)
        return kvs__fail(e, KVS_EBADARG, "row_ids list is NULL with count %d", n);
    if ((rc = plan_make(eng, n, keys, outs, false, &p, e)) != 0)
        return rc;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct entry *ent = p.groups[p.gid[i]].ent;

        rc = kvs__check_row_ids(keys[i], i, &row_ids[i], ent->ndim,
                                ent->ndim ? ent->shape[0] : 0, e);
    }
    for (int i = 0; i < n && rc == 0; i++)
        rc = gather_rows(eng, p.groups[p.gid[i]].ent, &outs[i], &row_ids[i], e);
    plan_free(eng, &p);
    return rc;
}

/* ---- update rules ----------------------------------------------------- */

void kvs__engine_drop_states(struct kvs__engine *eng)
{
    for (size_t i = 0; i < eng->cap; i++) {
        if (eng->slots[i].ent) {
            kvs__optim_state_free(eng->slots[i].ent->ostate);
            eng->slots[i].ent->ostate = NULL;
        }
    }
}

void kvs__engine_set_updater(struct kvs__engine *eng, kvs_updater_t fn, void *ctx)
{
    kvs__engine_drop_states(eng);
    kvs__optim_free(eng->optim);
    eng->optim = NULL;
    eng->updater = fn;
    eng->updater_ctx = ctx;
}

int kvs__engine_set_optimizer(struct kvs__engine *eng, const char *spec, struct kvs__err *e)
{
    struct kvs__optim *o;
    int rc;

    if (!spec)
        return kvs__fail(e, KVS_EBADARG, "optimizer spec is NULL");
    if ((rc = kvs__optim_parse(spec, &o, e)) != 0)
        return rc;
    kvs__engine_set_updater(eng, NULL, NULL);
    eng->optim = o;
    return 0;
}

/* ---- life ------------------------------------------------------------- */

int kvs__engine_new(const struct kvs__mem *mem, struct kvs__engine **out, struct kvs__err *e)
{
    struct kvs__engine *eng = calloc(1, sizeof *eng);

    *out = NULL;
    if (!eng)
        return kvs__fail(e, -ENOMEM, "out of memory for a store");
    eng->mem = mem ? *mem : heap_mem;
    *out = eng;
    return 0;
}

void kvs__engine_free(struct kvs__engine *eng)
{
    if (!eng)
        return;
    for (size_t i = 0; i < eng->cap; i++)
        kvs__entry_free(eng, eng->slots[i].ent);
    free(eng->slots);
    kvs__optim_free(eng->optim);
    free(eng);
}

void kvs__engine_set_threads(struct kvs__engine *eng, int nthreads)
{
    eng->nthreads = nthreads;
}

void kvs__engine_set_place(struct kvs__engine *eng,
                           int (*place)(void *ctx, const kvs_array_t *like, size_t bytes),
                           void *ctx)
{
    eng->place = place;
    eng->place_ctx = ctx;
}

void kvs__engine_set_reduce(struct kvs__engine *eng,
                            int (*reduce)(void *ctx, const struct kvs__reduce_item *items,
                                          int m, struct kvs__err *e),
                            void *ctx)
{
    eng->reduce = reduce;
    eng->reduce_ctx = ctx;
}

void kvs__engine_set_init_on_push(struct kvs__engine *eng, int on)
{
    eng->init_on_push = on != 0;
}
