/*
 * rows.c - the engine's calls for row-sparse values (kvs.h's
 * kvs_row_sparse_t): init from rows, pushes of rows (their union-sum, then
 * the update rule), compact pulls of chosen rows, and the check and entry
 * push kvsd uses for the rounds it gathers itself.
 *
 * The update rules of a row-sparse sum: ASSIGN writes the sum's dense form
 * (absent rows zero); an updater, and an optimizer whose spec says
 * lazy_update=0, get the dense form through push.c's dense path; an
 * optimizer updates lazily otherwise: only the sum's rows and their state,
 * each run of consecutive rows an element range of one optimizer step.
 *
 * Ranges of rows (kvs__engine_push_rows_range) take the same rules over
 * their rows alone: kvsd's hosts each own whole rows of a big key. An
 * init from rows writes the sum's dense form straight into the new entry
 * (on a GPU: zeroed there, the sum's rows copied over), never through a
 * dense copy.
 *
 * It must never sum or update by itself: sums are kernels/rows.c's (which
 * are array.h's), updates the optimizer's kernels, dense pushes push.c's.
 * Every call checks and allocates everything before it changes anything,
 * so that a failed call leaves the store as it was.
 *
 * Keys on a GPU (in-process stores) keep these rules with the host's
 * kernels: only the sum's rows move. ASSIGN sums the rows on the host,
 * zeroes the value's other rows on the device and writes the sum's rows
 * there; a lazy update gathers the sum's rows of the value and of its
 * state into host staging (mem.h's kvs__mem_rows: one copy per run of
 * consecutive rows), updates them there as a state of those rows alone,
 * and writes them back; the dense rule writes the sum's rows into a
 * zeroed gradient on the key's GPU and pushes that through push.c. The
 * gathers run before anything changes; what can fail afterwards is the
 * device alone, as for dense pushes. Kernels that gather, update and
 * scatter by an index list on the GPU would move no row through the host
 * and cost one launch instead of a copy per run; they are not written.
 * kvsd's pushes (kvs__engine_check_rows, kvs__engine_push_rows and its
 * ranges) still refuse keys it keeps on a GPU (KVS_ENOTSUP).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "kernels/optim.h"
#include "kernels/rows.h"
#include "device/mem.h"
#include "store/engine.h"
#include "store/engine_model.h"
#include "store/optim_state.h"
#include "store/table.h"

/* How a key's row-sparse sum reaches its value. */
enum rule { RULE_ASSIGN, RULE_LAZY, RULE_DENSE };

/* One key's row-sparse push, prepared: everything allocated, nothing
 * written where a caller can see it. */
struct rpush {
    struct entry *ent;
    int k;
    const struct kvs__rows_in *in;
    int64_t lo, nr;                    /* the rows it changes: [lo, lo + nr) */
    uint64_t step;                     /* RULE_LAZY: the step it counts (0: the next) */
    bool ranged;                       /* lo and nr set by the caller; else the whole key */
    bool own;                          /* in[] is the caller's own memory, read as often as
                                        * needed; else (kvsd: a worker's) each index is read
                                        * once, into the union */
    enum rule rule;
    size_t row_elems, row_bytes;
    struct kvs__rows_union u;          /* the inputs' union, unless one input is its own sum */
    const int64_t *idx;                /* the sum's m sorted unique rows */
    size_t m;
    const void *sum;                   /* NULL, or the only input's rows: the sum itself */
    void *dense;                       /* RULE_DENSE: the sum's dense form */
    const void *dense_in;              /* dense, as push_entries' input list */
    struct kvs__optim_state *ns;       /* RULE_LAZY: new state for a key without one */
    struct kvs__optim_item *items;     /* RULE_LAZY: one per run of rows */
    const void **runs;                 /* each item's input, for sum */
    size_t nitems;
    int64_t *shift;                    /* RULE_DENSE over a range: idx counted from lo, */
    void *compact;                     /* and the sum's m rows (on a GPU: any rule's) */
    bool dev;                          /* ent's value is on a GPU: its rows staged on the host */
    void *wstage;                      /* dev, RULE_LAZY: the sum's rows of the value, */
    void *sstage[2];                   /* and of each state buffer, */
    struct kvs__optim_state hs;        /* those rows as a state of m rows, on the host */
    void *dgrad;                       /* dev, RULE_DENSE: the dense sum on the key's GPU */
};

static enum rule rule_of(const struct kvs__engine *eng)
{
    if (eng->updater || (eng->optim && !kvs__optim_lazy(eng->optim)))
        return RULE_DENSE;
    return eng->optim ? RULE_LAZY : RULE_ASSIGN;
}

enum kvs__rows_rule kvs__engine_rows_rule(const struct kvs__engine *eng)
{
    enum rule r = rule_of(eng);

    return r == RULE_DENSE ? KVS__ROWS_DENSE : r == RULE_LAZY ? KVS__ROWS_LAZY
                                                              : KVS__ROWS_ASSIGN;
}

static void rpush_release(struct rpush *rp)
{
    if (rp->dev)                       /* nothing left queued from the staging freed here */
        kvs__mem_finish(NULL);
    free(rp->wstage);
    free(rp->sstage[0]);
    free(rp->sstage[1]);
    if (rp->dgrad)
        kvs__mem_free(rp->ent->device, rp->dgrad);
    rp->wstage = rp->sstage[0] = rp->sstage[1] = rp->dgrad = NULL;
    kvs__rows_union_free(&rp->u);
    free(rp->dense);
    kvs__optim_state_free(rp->ns);
    free(rp->items);
    free(rp->runs);
    free(rp->shift);
    free(rp->compact);
    rp->shift = NULL;
    rp->compact = NULL;
    rp->dense = NULL;
    rp->ns = NULL;
    rp->items = NULL;
    rp->runs = NULL;
}

/* Elements in a row of ent (0 for a key of no rows). */
static size_t row_elems_of(const struct entry *ent)
{
    return ent->shape[0] > 0 ? ent->count / (size_t)ent->shape[0] : 0;
}

/* The entry of key that a (a checked row-sparse value) matches, for a
 * push: stored, of a, on the host unless gpu_ok, and its update rule
 * takes it. */
static int rows_entry(struct kvs__engine *eng, kvs_key_t key, const kvs_row_sparse_t *a,
                      bool gpu_ok, struct entry **out, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct entry *ent = table_get(eng, key);
    kvs_array_t full = kvs__row_sparse_full(a, a->data);
    int rc;

    if (eng->kind != KIND_NONE && kind_of(key) != eng->kind)
        return kvs__fail(e, KVS_EKEYKIND, "key %s: %s key among %s keys", KEYSTR(ks, key),
                         kind_name(kind_of(key)), kind_name(eng->kind));
    if (!ent)
        return kvs__fail(e, KVS_ENOKEY, "key %s: not initialised", KEYSTR(ks, key));
    if ((rc = kvs__entry_match(ent, &full, e)) != 0)
        return rc;
    if (ent->device != KVS_HOST && !gpu_ok)
        return kvs__fail(e, KVS_ENOTSUP, "key %s: its value is on a GPU in kvsd; kvsd takes "
                         "row-sparse values for keys on the host only", KEYSTR(ks, key));
    *out = ent;
    return 0;
}

int kvs__engine_check_rows(struct kvs__engine *eng, kvs_key_t key, const kvs_row_sparse_t *a,
                           struct kvs__entry_info *info, struct kvs__err *e)
{
    struct entry *ent;
    int rc;

    if ((rc = kvs__check_row_sparse(key, 0, a, "value", e)) != 0
        || (rc = rows_entry(eng, key, a, false, &ent, e)) != 0
        || (rc = kvs__entry_optim_takes(eng, ent, e)) != 0)
        return rc;
    return info ? kvs__engine_lookup(eng, key, info, e) : 0;
}

/* The runs of rows the lazy update takes as one range each. */
static size_t count_runs(const struct rpush *rp)
{
    size_t runs = 0;

    if (rp->sum) {
        for (size_t j = 0; j < rp->m; j++)
            runs += j == 0 || rp->idx[j] != rp->idx[j - 1] + 1;
        return runs;
    }
    for (size_t r = 0; r < rp->m; r = kvs__rows_run_end(&rp->u, r, rp->row_bytes))
        runs++;
    return runs;
}

/* The sum's rows of rp's inputs (rp->ent's shape and row size set): one
 * sorted unique input of the caller's own is its own sum; else their
 * union. */
static int rpush_rows(struct rpush *rp, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    const struct kvs__rows_in *in = rp->in;
    int64_t rows = rp->ent->shape[0];
    struct kvs__err why;
    int rc;

    if (rp->own && rp->k == 1 && in[0].nnz >= 0
        && kvs__rows_sorted_unique(in[0].idx, (size_t)in[0].nnz)
        && (in[0].nnz == 0 || (in[0].idx[0] >= 0 && in[0].idx[in[0].nnz - 1] < rows))) {
        rp->idx = in[0].idx;
        rp->m = (size_t)in[0].nnz;
        rp->sum = in[0].data;
        return 0;
    }
    /* The union reads each index once, checks it and keeps its own copy:
     * what a worker changes later cannot move a write. */
    if ((rc = kvs__rows_union_make(&rp->u, rp->k, in, rp->row_bytes, rows, &why)) != 0)
        return kvs__fail(e, rc, "key %s: %s", KEYSTR(ks, rp->ent->key), why.msg);
    rp->idx = rp->u.idx;
    rp->m = rp->u.m;
    return 0;
}

/* Writes the sum's dense form into dense (the key's shape): the sum's
 * rows, every other row zero. */
static void rpush_dense(struct kvs__engine *eng, const struct rpush *rp, void *dense)
{
    if (rp->sum) {
        kvs__rows_scatter(dense, rp->ent->shape[0], rp->row_bytes, rp->idx, rp->m, rp->sum);
        return;
    }
    kvs__rows_zero_gaps(dense, rp->ent->shape[0], rp->row_bytes, rp->idx, rp->m);
    kvs__rows_union_sum_into(&rp->u, rp->ent->dtype, dense, rp->row_elems, eng->nthreads);
}

/* rpush_prepare's part for a key on a GPU (rp's rows found): the sum's
 * compact rows, and per rule the dense gradient on the GPU, or the
 * value's and the state's rows gathered into host staging. Nothing
 * changes where a caller can see it. */
static int rpush_prepare_dev(struct kvs__engine *eng, struct rpush *rp, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct entry *ent = rp->ent;
    const struct kvs__optim_state *s;
    size_t rows_bytes = rp->m * rp->row_bytes, srow;
    int rc;

    if (!rp->sum && !(rp->compact = malloc(rows_bytes ? rows_bytes : 1)))
        return kvs__fail(e, -ENOMEM, "key %s: out of memory for %zu rows", KEYSTR(ks, ent->key),
                         rp->m);
    if (rp->rule == RULE_DENSE)
        return kvs__mem_alloc(ent->device, ent->bytes ? ent->bytes : 1, 1, &rp->dgrad, e);
    if (rp->rule != RULE_LAZY)
        return 0;
    if (!ent->ostate
        && (rc = kvs__optim_state_new(eng->optim, ent->dtype, ent->count, ent->device, &rp->ns,
                                      e)) != 0)
        return rc;
    s = rp->ns ? rp->ns : ent->ostate;
    srow = rp->row_elems * (s->dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float));
    rp->nitems = rp->row_bytes ? count_runs(rp) : 0;
    if (!(rp->wstage = malloc(rows_bytes ? rows_bytes : 1))
        || (rp->nitems && (!(rp->items = malloc(sizeof *rp->items * rp->nitems))
                           || (rp->sum && !(rp->runs = malloc(sizeof *rp->runs * rp->nitems))))))
        return kvs__fail(e, -ENOMEM, "key %s: out of memory for %zu rows",
                         KEYSTR(ks, ent->key), rp->m);
    for (int b = 0; b < s->nbuf; b++)
        if (!(rp->sstage[b] = calloc(rp->m ? rp->m : 1, srow ? srow : 1)))
            return kvs__fail(e, -ENOMEM, "key %s: out of memory for the state of %zu rows",
                             KEYSTR(ks, ent->key), rp->m);
    rp->hs = (struct kvs__optim_state){ .t = s->t, .dtype = s->dtype,
                                        .count = rp->m * rp->row_elems, .nbuf = s->nbuf,
                                        .device = KVS_HOST,
                                        .buf = { rp->sstage[0], rp->sstage[1] } };
    if ((rc = kvs__mem_rows(ent->device, ent->value, rp->row_bytes, rp->idx, rp->m, rp->wstage,
                            1, e)) != 0)
        return rc;
    for (int b = 0; b < s->nbuf && !rp->ns; b++)   /* a new state is zero */
        if ((rc = kvs__mem_rows(ent->device, s->buf[b], srow, rp->idx, rp->m, rp->sstage[b], 1,
                                e)) != 0)
            return rc;
    return 0;
}

/* Checks and allocates what the push of rp's inputs needs. */
static int rpush_prepare(struct kvs__engine *eng, struct rpush *rp, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct entry *ent = rp->ent;
    int rc;

    rp->dev = ent->device != KVS_HOST;
    if (rp->dev && (!rp->own || rp->ranged))
        return kvs__fail(e, KVS_ENOTSUP, "key %s: its value is on a GPU in kvsd; kvsd takes "
                         "row-sparse values for keys on the host only", KEYSTR(ks, ent->key));
    if ((rc = kvs__entry_optim_takes(eng, ent, e)) != 0)
        return rc;
    rp->rule = rule_of(eng);
    if (!rp->ranged) {
        rp->lo = 0;
        rp->nr = ent->ndim > 0 ? ent->shape[0] : 0;
    }
    rp->row_elems = row_elems_of(ent);
    rp->row_bytes = rp->row_elems * kvs_dtype_size(ent->dtype);
    if ((rc = rpush_rows(rp, e)) != 0)
        return rc;
    if (rp->m && (rp->idx[0] < rp->lo || rp->idx[rp->m - 1] >= rp->lo + rp->nr))
        return kvs__fail(e, KVS_ERANGE, "key %s: row %" PRId64 " is outside rows [%" PRId64
                         ", %" PRId64 ") that this push changes", KEYSTR(ks, ent->key),
                         rp->idx[0] < rp->lo ? rp->idx[0] : rp->idx[rp->m - 1], rp->lo,
                         rp->lo + rp->nr);
    if (rp->dev)
        return rpush_prepare_dev(eng, rp, e);
    if (rp->rule == RULE_DENSE) {
        size_t bytes = rp->ranged ? (size_t)rp->nr * rp->row_bytes : ent->bytes;

        if (!(rp->dense = malloc(bytes ? bytes : 1)))
            return kvs__fail(e, -ENOMEM, "key %s: out of memory for the dense form of a "
                             "row-sparse sum (%zu bytes)", KEYSTR(ks, ent->key), bytes);
        rp->dense_in = rp->dense;
    }
    if (rp->rule == RULE_LAZY) {
        if (!ent->ostate
            && (rc = kvs__optim_state_new(eng->optim, ent->dtype, ent->count, ent->device,
                                          &rp->ns, e)) != 0)
            return rc;
        rp->nitems = rp->row_bytes ? count_runs(rp) : 0;
        if (rp->nitems && (!(rp->items = malloc(sizeof *rp->items * rp->nitems))
                           || (rp->sum && !(rp->runs = malloc(sizeof *rp->runs * rp->nitems)))))
            return kvs__fail(e, -ENOMEM, "key %s: out of memory for %zu runs of rows",
                             KEYSTR(ks, ent->key), rp->nitems);
    }
    return 0;
}

/* Writes the staged rows of a lazy update back to the key's GPU: the
 * value's and each state buffer's, then waits for them. */
static int rows_write_back(struct rpush *rp, struct kvs__err *e)
{
    struct entry *ent = rp->ent;
    size_t srow = rp->row_elems * (rp->hs.dtype == KVS_FLOAT64 ? sizeof(double) : sizeof(float));
    int rc = kvs__mem_rows(ent->device, ent->value, rp->row_bytes, rp->idx, rp->m, rp->wstage,
                           0, e);

    for (int b = 0; b < rp->hs.nbuf && rc == 0; b++)
        rc = kvs__mem_rows(ent->device, ent->ostate->buf[b], srow, rp->idx, rp->m,
                           rp->sstage[b], 0, e);
    return rc == 0 ? kvs__mem_finish(e) : rc;
}

/* The sum's m rows in host memory, compact: the only input, or their
 * union-sum in rp->compact. */
static const void *rows_sum(struct kvs__engine *eng, struct rpush *rp)
{
    if (rp->sum)
        return rp->sum;
    if (rp->m)
        kvs__rows_union_sum(&rp->u, rp->ent->dtype, rp->compact, rp->row_elems, eng->nthreads);
    return rp->compact;
}

/* ASSIGN of a key on a GPU: the rows the sum does not name zeroed there,
 * the sum's rows written over the others, waited for. */
static int rows_assign_dev(struct kvs__engine *eng, struct rpush *rp, struct kvs__err *e)
{
    struct entry *ent = rp->ent;
    const void *sum = rows_sum(eng, rp);
    int64_t at = 0, rows = ent->ndim > 0 ? ent->shape[0] : 0;
    int rc = 0;

    for (size_t j = 0; j <= rp->m && rc == 0; j++) {
        int64_t next = j < rp->m ? rp->idx[j] : rows;

        if (next > at)
            rc = kvs__mem_zero(ent->device, (char *)ent->value + (size_t)at * rp->row_bytes,
                               (size_t)(next - at) * rp->row_bytes, e);
        at = next + 1;
    }
    if (rc == 0)
        rc = kvs__mem_rows(ent->device, ent->value, rp->row_bytes, rp->idx, rp->m,
                           (void *)sum, 0, e);
    return rc == 0 ? kvs__mem_finish(e) : rc;
}

/* One optimizer step of the key over the sum's rows alone: each run of
 * rows is an element range of the step, its inputs summed beside the
 * update as a dense push sums them. */
static int rpush_lazy(struct kvs__engine *eng, struct rpush *rp, struct kvs__err *e)
{
    struct entry *ent = rp->ent;
    uint64_t step;
    size_t x = 0;

    if (rp->ns) {
        ent->ostate = rp->ns;
        rp->ns = NULL;
    }
    step = rp->step ? rp->step : ent->ostate->t + 1;
    for (size_t r = 0, r1; r < rp->m && rp->nitems; r = r1, x++) {
        const void *const *in;
        int k;

        if (rp->sum) {
            for (r1 = r + 1; r1 < rp->m && rp->idx[r1] == rp->idx[r1 - 1] + 1; r1++)
                ;
            rp->runs[x] = (const char *)rp->sum + r * rp->row_bytes;
            in = &rp->runs[x];
            k = 1;
        } else {
            r1 = kvs__rows_run_end(&rp->u, r, rp->row_bytes);
            in = rp->u.src + rp->u.start[r];
            k = (int)(rp->u.start[r + 1] - rp->u.start[r]);
        }
        rp->items[x] = (struct kvs__optim_item){
            .s = ent->ostate, .dtype = ent->dtype,
            .weight = (char *)ent->value + (size_t)rp->idx[r] * rp->row_bytes,
            .in = in, .k = k, .count = (r1 - r) * rp->row_elems,
            .first = (size_t)rp->idx[r] * rp->row_elems, .step = step, .src = NULL };
        if (rp->dev) {                 /* the staged rows, counted from the sum's first */
            rp->items[x].s = &rp->hs;
            rp->items[x].weight = (char *)rp->wstage + r * rp->row_bytes;
            rp->items[x].first = r * rp->row_elems;
        }
    }
    /* Without sources the updates cannot fail. */
    (void)kvs__optim_update_many(eng->optim, rp->items, (int)rp->nitems, eng->nthreads);
    ent->ostate->t = step;             /* an empty sum is a step too, as a dense push */
    if (!rp->dev)
        return 0;
    return rows_write_back(rp, e);
}

/* Applies prepared pushes: the dense ones through push.c's path first (an
 * updater may fail them: nothing has changed then), then the others,
 * which cannot fail. */
static int rpush_run(struct kvs__engine *eng, struct rpush *rps, int ng, struct kvs__err *e)
{
    struct kvs__push_item *items = NULL;
    int nd = 0, rc = 0;

    for (int g = 0; g < ng; g++)
        nd += rps[g].rule == RULE_DENSE;
    if (nd > 0) {
        if (!(items = calloc((size_t)nd, sizeof *items)))
            return kvs__fail(e, -ENOMEM, "out of memory for a push of %d keys", nd);
        nd = 0;
        for (int g = 0; g < ng; g++) {
            struct rpush *rp = &rps[g];

            if (rp->rule != RULE_DENSE)
                continue;
            if (rp->dev) {             /* the sum's rows into the zeroed gradient, queued */
                if ((rc = kvs__mem_rows(rp->ent->device, rp->dgrad, rp->row_bytes, rp->idx,
                                        rp->m, (void *)rows_sum(eng, rp), 0, e)) != 0)
                    break;
                rp->dense_in = rp->dgrad;
            } else {
                rpush_dense(eng, rp, rp->dense);
            }
            items[nd++] = (struct kvs__push_item){ .entry = rp->ent, .k = 1,
                                                   .in = &rp->dense_in,
                                                   .dev = &rp->ent->device };
        }
        if (rc != 0) {
            free(items);
            kvs__mem_finish(NULL);
            return rc;
        }
        rc = kvs__engine_push_entries(eng, nd, items, e);
        free(items);
        if (rc != 0)
            return rc;
    }
    for (int g = 0; g < ng; g++) {
        struct rpush *rp = &rps[g];

        if (rp->rule == RULE_DENSE)
            continue;                  /* push_entries counted its version */
        if (rp->rule == RULE_ASSIGN && rp->dev)
            rc = rows_assign_dev(eng, rp, e);
        else if (rp->rule == RULE_ASSIGN)
            rpush_dense(eng, rp, rp->ent->value);
        else
            rc = rpush_lazy(eng, rp, e);
        if (rc != 0)                   /* a device failed: the keys before are pushed */
            return rc;
        rp->ent->version++;
    }
    return 0;
}

int kvs__engine_push_rows(struct kvs__engine *eng, void *entry, int k,
                          const struct kvs__rows_in *in, struct kvs__err *e)
{
    struct rpush rp = { .ent = entry, .k = k, .in = in, .own = false };
    int rc;

    if (!entry || k < 0 || (k > 0 && !in))
        return kvs__fail(e, KVS_EBADARG, "a push of rows needs an entry and %d inputs", k);
    if ((rc = rpush_prepare(eng, &rp, e)) == 0)
        rc = rpush_run(eng, &rp, 1, e);
    rpush_release(&rp);
    return rc;
}

/* The range's dense form in rp->dense (nr rows): the sum's rows, summed
 * compactly, at their places counted from lo; every other row zero. */
static void range_dense(struct kvs__engine *eng, struct rpush *rp)
{
    for (size_t j = 0; j < rp->m; j++)
        rp->shift[j] = rp->idx[j] - rp->lo;
    if (rp->m)
        kvs__rows_union_sum(&rp->u, rp->ent->dtype, rp->compact, rp->row_elems, eng->nthreads);
    kvs__rows_scatter(rp->dense, rp->nr, rp->row_bytes, rp->shift, rp->m, rp->compact);
}

/* Zeroes the rows of [lo, lo + nr) of the value that the sum does not
 * name (ASSIGN over a range). */
static void range_zero_gaps(struct rpush *rp)
{
    char *v = rp->ent->value;
    int64_t at = rp->lo;

    for (size_t j = 0; j <= rp->m; j++) {
        int64_t next = j < rp->m ? rp->idx[j] : rp->lo + rp->nr;

        if (next > at)
            kvs__rows_zero_gaps(v + (size_t)at * rp->row_bytes, next - at, rp->row_bytes,
                                NULL, 0);
        at = next + 1;
    }
}

int kvs__engine_push_rows_range(struct kvs__engine *eng, void *entry, int k,
                                const struct kvs__rows_in *in, int64_t first_row, int64_t nrows,
                                uint64_t step, struct kvs__err *e)
{
    struct rpush rp = { .ent = entry, .k = k, .in = in, .lo = first_row, .nr = nrows,
                        .step = step, .ranged = true, .own = false };
    char ks[KVS_MAX_KEY_LEN + 8];
    int rc;

    if (!entry || k < 0 || (k > 0 && !in))
        return kvs__fail(e, KVS_EBADARG, "a push of rows needs an entry and %d inputs", k);
    if (rp.ent->ndim < 1 || first_row < 0 || nrows < 0 || first_row > rp.ent->shape[0]
        || nrows > rp.ent->shape[0] - first_row)
        return kvs__fail(e, KVS_EBADARG, "key %s: rows [%" PRId64 ", %" PRId64 ") of a key of "
                         "%" PRId64 " rows", KEYSTR(ks, rp.ent->key), first_row,
                         first_row + nrows, rp.ent->ndim < 1 ? 0 : rp.ent->shape[0]);
    if (eng->updater)
        return kvs__fail(e, KVS_EBADARG, "key %s: a push of a range of rows takes an optimizer "
                         "or none, not an updater", KEYSTR(ks, rp.ent->key));
    if ((rc = rpush_prepare(eng, &rp, e)) != 0)
        goto out;
    if (rp.rule == RULE_DENSE) {
        struct kvs__push_item item = { .entry = entry, .k = 1, .in = &rp.dense_in };

        if (!(rp.shift = malloc(sizeof *rp.shift * (rp.m ? rp.m : 1)))
            || !(rp.compact = malloc(rp.m ? rp.m * rp.row_bytes : 1))) {
            rc = kvs__fail(e, -ENOMEM, "key %s: out of memory for %zu rows",
                           KEYSTR(ks, rp.ent->key), rp.m);
            goto out;
        }
        range_dense(eng, &rp);
        rc = kvs__engine_push_range(eng, &item, (size_t)first_row * rp.row_elems,
                                    (size_t)nrows * rp.row_elems, step, e);
        goto out;
    }
    if (rp.rule == RULE_ASSIGN) {
        range_zero_gaps(&rp);
        kvs__rows_union_sum_into(&rp.u, rp.ent->dtype, rp.ent->value, rp.row_elems,
                                 eng->nthreads);
    } else {
        (void)rpush_lazy(eng, &rp, e);  /* on the host: cannot fail */
    }
    rp.ent->version++;
out:
    rpush_release(&rp);
    return rc;
}

int kvs__engine_push_row_sparse(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                                const kvs_row_sparse_t *values, struct kvs__err *e)
{
    struct kvs__rows_in *ins = NULL;
    struct rpush *rps = NULL;
    int *gid = NULL, *first = NULL, ng = 0, rc;

    if ((rc = kvs__check_rows_list(eng, n, keys, values, e)) != 0 || n == 0)
        return rc;
    if (!(gid = malloc(sizeof *gid * 2 * (size_t)n)) || !(ins = malloc(sizeof *ins * (size_t)n))
        || !(rps = calloc((size_t)n, sizeof *rps))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
        goto out;
    }
    first = gid + n;
    if ((rc = kvs__group_keys(n, keys, gid, first, e)) < 0)
        goto out;
    ng = rc;
    rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if ((rc = rows_entry(eng, keys[i], &values[i], true, &rps[gid[i]].ent, e)) == 0)
            rps[gid[i]].k++;
    if (rc != 0)
        goto out;
    /* Each key's inputs side by side in ins, in list order. */
    for (int g = 0, at = 0; g < ng; g++) {
        rps[g].own = true;
        rps[g].in = ins + at;
        at += rps[g].k;
        rps[g].k = 0;
    }
    for (int i = 0; i < n; i++) {
        struct rpush *rp = &rps[gid[i]];

        ((struct kvs__rows_in *)rp->in)[rp->k++] =
            (struct kvs__rows_in){ values[i].data, values[i].indices, values[i].nnz };
    }
    for (int g = 0; g < ng && rc == 0; g++)
        rc = rpush_prepare(eng, &rps[g], e);
    if (rc == 0)
        rc = rpush_run(eng, rps, ng, e);
out:
    for (int g = 0; rps && g < ng; g++)
        rpush_release(&rps[g]);
    free(rps);
    free(ins);
    free(gid);
    return rc;
}

/* ---- init --------------------------------------------------------------- */

/* What the fill of a row-sparse init needs: per value its rows found
 * and summed over a shape-only entry. */
struct rinit {
    struct kvs__engine *eng;
    struct entry *shape;
    struct rpush *rps;
};

/* Writes value i's dense form into its new entry: on the host in place;
 * on a GPU, every row zeroed there and the sum's rows copied over. */
static int rinit_fill(void *ctx, int i, void *entry, struct kvs__err *e)
{
    struct rinit *ri = ctx;
    struct rpush *rp = &ri->rps[i];
    struct entry *ent = entry;
    int rc;

    if (ent->device == KVS_HOST) {
        rpush_dense(ri->eng, rp, ent->value);
        return 0;
    }
    if ((rc = kvs__mem_zero(ent->device, ent->value, ent->bytes, e)) != 0)
        return rc;
    return kvs__mem_rows(ent->device, ent->value, rp->row_bytes, rp->idx, rp->m,
                         (void *)rows_sum(ri->eng, rp), 0, e);
}

int kvs__engine_init_row_sparse(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                                const kvs_row_sparse_t *values, int replace,
                                struct kvs__err *e)
{
    static char placeholder;           /* the full values' data: never read */
    char ks[KVS_MAX_KEY_LEN + 8];
    struct rinit ri = { .eng = eng };
    struct kvs__rows_in *ins = NULL;
    kvs_array_t *full = NULL;
    int rc, made = 0;

    if ((rc = kvs__check_rows_list(eng, n, keys, values, e)) != 0 || n == 0)
        return rc;
    if (!(full = calloc((size_t)n, sizeof *full)) || !(ins = calloc((size_t)n, sizeof *ins))
        || !(ri.shape = calloc((size_t)n, sizeof *ri.shape))
        || !(ri.rps = calloc((size_t)n, sizeof *ri.rps))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
        goto out;
    }
    /* Each value's rows and their sum, then a dense init that writes them
     * into each new entry (rinit_fill): the checks, placement and commit
     * of kvs__engine_init, with no dense copy of the value on the way. */
    for (int i = 0; i < n && rc == 0; i++, made++) {
        const kvs_row_sparse_t *v = &values[i];
        struct entry *shape = &ri.shape[i];
        struct rpush *rp = &ri.rps[i];
        size_t rows_bytes;

        ins[i] = (struct kvs__rows_in){ v->data, v->indices, v->nnz };
        *shape = (struct entry){ .key = keys[i], .dtype = v->dtype, .ndim = v->ndim };
        *rp = (struct rpush){ .ent = shape, .k = 1, .in = &ins[i], .own = true };
        full[i] = kvs__row_sparse_full(v, &placeholder);
        memcpy(shape->shape, v->shape, sizeof shape->shape);
        shape->count = kvs__array_count(&full[i]);
        rp->row_elems = row_elems_of(shape);
        rp->row_bytes = rp->row_elems * kvs_dtype_size(v->dtype);
        if ((rc = rpush_rows(rp, e)) != 0)
            break;
        rows_bytes = rp->m * rp->row_bytes;
        if (!rp->sum && !(rp->compact = malloc(rows_bytes ? rows_bytes : 1)))
            rc = kvs__fail(e, -ENOMEM, "key %s: out of memory for %zu rows",
                           KEYSTR(ks, keys[i]), rp->m);
    }
    if (rc == 0)
        rc = kvs__engine_init_fill(eng, n, keys, full, replace, rinit_fill, &ri, e);
out:
    for (int i = 0; ri.rps && i < made; i++)
        rpush_release(&ri.rps[i]);
    free(ri.rps);
    free(ri.shape);
    free(ins);
    free(full);
    return rc;
}

/* ---- compact pulls -------------------------------------------------------- */

int kvs__engine_pull_rows(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                          const kvs_array_t *row_ids, kvs_row_sparse_t *outs,
                          struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8];
    struct entry **ents = NULL;
    int64_t **uniq = NULL;
    size_t *need = NULL;
    int rc, short_of = -1;

    if ((rc = kvs__check_rows_outs(eng, n, keys, row_ids, outs, e)) != 0 || n == 0)
        return rc;
    if (!(ents = calloc((size_t)n, sizeof *ents)) || !(uniq = calloc((size_t)n, sizeof *uniq))
        || !(need = calloc((size_t)n, sizeof *need))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for a list of %d keys", n);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        struct entry *ent = table_get(eng, keys[i]);

        if (eng->kind != KIND_NONE && kind_of(keys[i]) != eng->kind) {
            rc = kvs__fail(e, KVS_EKEYKIND, "key %s: %s key among %s keys",
                           KEYSTR(ks, keys[i]), kind_name(kind_of(keys[i])),
                           kind_name(eng->kind));
            goto out;
        }
        if (!ent) {
            rc = kvs__fail(e, KVS_ENOKEY, "key %s: not initialised", KEYSTR(ks, keys[i]));
            goto out;
        }
        if ((rc = kvs__check_row_ids(keys[i], i, &row_ids[i], ent->ndim,
                                     ent->ndim ? ent->shape[0] : 0, e)) != 0)
            goto out;
        ents[i] = ent;
    }
    for (int i = 0; i < n; i++) {
        if ((rc = kvs__rows_unique_copy(row_ids[i].data, (size_t)row_ids[i].shape[0], &uniq[i],
                                        &need[i], e)) != 0)
            goto out;
        if (short_of < 0 && need[i] > (size_t)outs[i].nnz)
            short_of = i;
    }
    if (short_of >= 0) {
        rc = kvs__fail(e, -ENOSPC, "key %s: out %d has room for %lld rows, and %zu are "
                       "asked for", KEYSTR(ks, keys[short_of]), short_of,
                       (long long)outs[short_of].nnz, need[short_of]);
        for (int i = 0; i < n; i++)
            outs[i].nnz = (int64_t)need[i];
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const struct entry *ent = ents[i];
        kvs_row_sparse_t *o = &outs[i];
        size_t row = row_elems_of(ent) * kvs_dtype_size(ent->dtype);

        /* A GPU's rows come straight into the out, a copy per run of rows.
         * Outs before it are written: a device that fails here is the
         * only failure after the checks. */
        if (ent->device != KVS_HOST
            && (rc = kvs__mem_rows(ent->device, ent->value, row, uniq[i], need[i], o->data, 1,
                                   e)) != 0)
            goto out;
        for (size_t j = 0; j < need[i]; j++) {
            o->indices[j] = uniq[i][j];
            if (ent->device == KVS_HOST)
                memcpy((char *)o->data + j * row,
                       (const char *)ent->value + (size_t)uniq[i][j] * row, row);
        }
        o->nnz = (int64_t)need[i];
        o->dtype = ent->dtype;
        o->ndim = ent->ndim;
        memset(o->shape, 0, sizeof o->shape);
        memcpy(o->shape, ent->shape, sizeof o->shape[0] * (size_t)ent->ndim);
    }
out:
    for (int i = 0; uniq && i < n; i++)
        free(uniq[i]);
    free(uniq);
    free(need);
    free(ents);
    return rc;
}
