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
 * table.c's, argument checks engine_args.c's, what a front asks of single
 * keys engine_keys.c's; a call's plan is plan.c's; the calls themselves
 * are init.c's, push.c's (the hot path) and pull.c's; saving and loading
 * optimizer states is engine_states.c's. This file owns the engine's life and its settings:
 * the update rule, threads and the front's hooks. It must never call the
 * files of the calls: they are above it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/engine.h"
#include "store/engine_model.h"
#include "store/engine_args.h"
#include "store/table.h"
#include "device/mem.h"
#include "kernels/optim.h"
#include "store/optim_state.h"
#include "store/heap.h"

/* Values on the heap unless the front hands the engine its own memory. */
static const struct kvs__mem heap_mem = { kvs__heap_alloc, kvs__heap_free, NULL };

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
