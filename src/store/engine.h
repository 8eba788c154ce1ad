/*
 * engine.h - the store itself: the key table, the merge of pushed values,
 * the update rule (ASSIGN, a caller's updater, or a built-in optimizer),
 * versions. Every store type runs this one engine: in the caller's process
 * for "local", inside kvsd for the dist types. It is not thread-safe: the
 * front serialises calls on one engine.
 *
 * Every call validates everything before it changes anything; a call that
 * returns an error has left the engine as it was.
 *
 * The engine is opaque here: its state is engine_model.h's, for the
 * store's own files only. The calls below are engine.c's, engine_keys.c's
 * (single keys, the walk) and engine_states.c's (optimizer states); the
 * hook types and argument checks come from the headers below this one.
 */
#ifndef KVS_ENGINE_H
#define KVS_ENGINE_H

#include <stdint.h>
#include <stddef.h>

#include "kvs.h"
#include "base/error.h"
#include "store/engine_hooks.h"
#include "store/engine_args.h"
#include "kernels/rows.h"

struct kvs__engine;
struct kvs__optim_state;

int  kvs__engine_new(const struct kvs__mem *mem, struct kvs__engine **out, struct kvs__err *e);
void kvs__engine_free(struct kvs__engine *eng);          /* NULL is a no-op */

/* Threads for big sums and copies (0: the pool's default). */
void kvs__engine_set_threads(struct kvs__engine *eng, int nthreads);
/* Where a new key's value lives: place returns KVS_HOST or KVS_CUDA(i)
 * for a key first stored from like (bytes long). The default (NULL) keeps
 * it on like's device. Device values come from mem.h; eng's kvs__mem is
 * for host values only. */
void kvs__engine_set_place(struct kvs__engine *eng,
                           int (*place)(void *ctx, const kvs_array_t *like, size_t bytes),
                           void *ctx);
/* How a push sums the values of a key that come from several devices, one
 * per device, the key's own among them: reduce queues the reductions of
 * every such key of the push, together (the nccl type). NULL, the
 * default: the values are copied to the key's device and summed there. */
void kvs__engine_set_reduce(struct kvs__engine *eng,
                            int (*reduce)(void *ctx, const struct kvs__reduce_item *items,
                                          int m, struct kvs__err *e),
                            void *ctx);
/* MXNet's old behaviour: a push to an unknown key initialises it. */
void kvs__engine_set_init_on_push(struct kvs__engine *eng, int on);

/* The data calls of kvs.h, with the same contracts; replace selects
 * kvs_reinit. Arguments (n, lists) are checked here too. */
int kvs__engine_init(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     const kvs_array_t *values, int replace, struct kvs__err *e);
int kvs__engine_push(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     const kvs_array_t *values, struct kvs__err *e);
int kvs__engine_pull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                     kvs_array_t *outs, struct kvs__err *e);
int kvs__engine_pushpull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                         const kvs_array_t *values, kvs_array_t *outs, struct kvs__err *e);
/* pull and pushpull, but each out (a view: data ignored on entry) gets the
 * stored value's address instead of a copy; it stays valid until the key
 * is pushed, re-initialised or the engine freed. pushpull_view needs views. */
int kvs__engine_pull_view(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                          kvs_array_t *views, struct kvs__err *e);
int kvs__engine_pushpull_view(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                              const kvs_array_t *values, kvs_array_t *views,
                              struct kvs__err *e);
int kvs__engine_row_sparse_pull(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                                kvs_array_t *outs, const kvs_array_t *row_ids,
                                struct kvs__err *e);

/* kvs__engine_init whose new entries' values fill(ctx, i, entry) writes
 * (entry: value i's new entry, its value on its device, not yet in the
 * table; device work may be left queued: init waits for it) instead of
 * copying values[i].data, which is then neither read nor checked but for
 * its shape, dtype and device. A failing fill fails the init, which then
 * changes nothing. */
int kvs__engine_init_fill(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                          const kvs_array_t *values, int replace,
                          int (*fill)(void *ctx, int i, void *entry, struct kvs__err *e),
                          void *ctx, struct kvs__err *e);

/* Row-sparse values (kvs.h's kvs_row_sparse_t), with kvs.h's contracts:
 * init_row_sparse stores the full shape with the rows given, every other
 * row zero; push_row_sparse sums the values of each key into a row-sparse
 * sum and applies the update rule (ASSIGN, the updater on the dense form,
 * an optimizer lazily unless its spec says lazy_update=0); pull_rows
 * copies the stored rows named by row_ids[i] into outs[i] as sorted unique
 * rows (-ENOSPC with every out's nnz set to the rows it needs when one has
 * too little room, nothing else written). */
int kvs__engine_init_row_sparse(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                                const kvs_row_sparse_t *values, int replace,
                                struct kvs__err *e);
int kvs__engine_push_row_sparse(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                                const kvs_row_sparse_t *values, struct kvs__err *e);
int kvs__engine_pull_rows(struct kvs__engine *eng, int n, const kvs_key_t *keys,
                          const kvs_array_t *row_ids, kvs_row_sparse_t *outs,
                          struct kvs__err *e);

/* For a front that keeps state per key (kvsd's rounds): a key's entry as it
 * is now. value, shape and front stay valid until the key is re-initialised
 * or the engine freed. */
struct kvs__entry_info {
    void *value;
    int device;                        /* where value lies: KVS_HOST or KVS_CUDA(i) */
    size_t bytes, count;
    kvs_dtype_t dtype;
    int ndim;
    const int64_t *shape;
    uint64_t version;
    void **front;                      /* the front's own pointer for this key */
    void *entry;                       /* the entry itself, for kvs__engine_push_entries */
};
/* 0, or KVS_ENOKEY with a detail. */
int kvs__engine_lookup(struct kvs__engine *eng, kvs_key_t key, struct kvs__entry_info *out,
                       struct kvs__err *e);
/* 0 when a has the dtype and shape of the stored key, and the key's info
 * in *info (may be NULL), as kvs__engine_lookup gives it; else KVS_ENOKEY,
 * KVS_EDTYPE or KVS_ESHAPE with the detail a push or pull would give. */
int kvs__engine_check(struct kvs__engine *eng, kvs_key_t key, const kvs_array_t *a,
                      struct kvs__entry_info *info, struct kvs__err *e);
/* kvs__engine_check, and for a push also what the update rule needs:
 * KVS_EDTYPE for an integer key under an optimizer. */
int kvs__engine_check_push(struct kvs__engine *eng, kvs_key_t key, const kvs_array_t *a,
                           struct kvs__entry_info *info, struct kvs__err *e);
/* A push of k values of one stored key whose entry a front found
 * beforehand (kvs__engine_check_push's info.entry, still valid): in[] has
 * k inputs of the entry's dtype and size, as that check accepted them, on
 * the devices dev[] (NULL: all on the host). Inputs on another device than
 * the value are copied to it first, and in[] then points at the copies.
 * src: NULL, or per input its source (array.h: read NULL, in[i] is in
 * memory; else read a block at a time beside the sum or update), for a
 * host key and host inputs only, without an updater (KVS_EBADARG
 * otherwise). A source that fails fails the push with its error, and
 * leaves the key's value (and optimizer state) written in part. sink:
 * NULL, or where the value goes as well, a block at a time as it is
 * summed (array.h), when the push's sum goes straight into the value (no
 * optimizer, no updater, a host key); otherwise, and for a key's first
 * push, it gets nothing or part: the caller learns from its sink what it
 * got. */
struct kvs__push_item {
    void *entry;
    int k;
    const void **in;
    const int *dev;
    const struct kvs__source *src;
    const struct kvs__sink *sink;
};
/* A row-sparse input of a push to one entry found beforehand (a front that
 * gathers inputs itself: kvsd's rounds) is a struct kvs__rows_in
 * (kernels/rows.h: data, idx, nnz): nnz rows of the entry's dtype and row
 * size, idx[] in range and in any order, repeats allowed, as
 * kvs__engine_check_rows accepted them. */
/* 0 when a is a row-sparse value of the stored key (dtype, full shape,
 * every index in range, nnz >= 0), with the key's info in *info (may be
 * NULL); else the error and detail kvs_push_row_sparse gives. */
int kvs__engine_check_rows(struct kvs__engine *eng, kvs_key_t key, const kvs_row_sparse_t *a,
                           struct kvs__entry_info *info, struct kvs__err *e);
/* The push of k row-sparse inputs of one entry (info.entry of
 * kvs__engine_check_rows, still valid): their row-sparse sum (the union of
 * the rows, each row summed), then the update rule as
 * kvs__engine_push_row_sparse applies it. All or nothing. The inputs may
 * lie in memory another process can write (a worker's staging): each
 * index is read once, checked against the key's rows (KVS_ERANGE naming
 * the input and position) and copied; rows are then read from data by
 * position, so a changed index never moves a write. */
int kvs__engine_push_rows(struct kvs__engine *eng, void *entry, int k,
                          const struct kvs__rows_in *in, struct kvs__err *e);
/* How the engine's update rule takes a row-sparse sum: ASSIGN (no
 * optimizer: the value becomes the sum, absent rows zero), LAZY (an
 * optimizer updates the sum's rows alone), DENSE (an updater, or an
 * optimizer with lazy_update=0: the sum's dense form, zeros included). */
enum kvs__rows_rule { KVS__ROWS_ASSIGN, KVS__ROWS_LAZY, KVS__ROWS_DENSE };
enum kvs__rows_rule kvs__engine_rows_rule(const struct kvs__engine *eng);
/* kvs__engine_push_rows restricted to rows [first_row, first_row + nrows)
 * of the entry, as kvs__engine_push_range is to a range of elements:
 * every input row must lie there (KVS_ERANGE otherwise), and the sum
 * changes those rows alone: ASSIGN writes the sum's rows and zeroes the
 * range's others; LAZY updates the sum's rows and their state; DENSE
 * pushes the range's dense form through kvs__engine_push_range (an
 * updater takes whole keys: KVS_EBADARG). An optimizer counts the update
 * as step `step` (0: the next), also when no row is given, so that the
 * owners of a key's ranges each count one step a round. All or nothing.
 * kvsd's hosts each own whole rows of a big key this way. */
int kvs__engine_push_rows_range(struct kvs__engine *eng, void *entry, int k,
                                const struct kvs__rows_in *in, int64_t first_row, int64_t nrows,
                                uint64_t step, struct kvs__err *e);
/* kvs__engine_push of n such items, each of another key: no lookups, no
 * grouping, the same sums and updates. All or nothing. */
int kvs__engine_push_entries(struct kvs__engine *eng, int n, const struct kvs__push_item *items,
                             struct kvs__err *e);
/* The push of one such item to elements [first, first + count) of its key
 * only: each in[i] holds those elements, and the sum (ASSIGN) or the
 * optimizer's update, its state's same elements, change them alone (the
 * key's version is bumped). An optimizer counts the update as its step
 * number `step` (Adam's bias correction uses it), so that the updates of
 * several ranges make one step; 0: the next, as a whole push does. An
 * updater's push takes whole keys, so that fails with KVS_EBADARG, as a
 * range past the key does. kvsd's hosts each own ranges of a big key this
 * way. */
int kvs__engine_push_range(struct kvs__engine *eng, const struct kvs__push_item *item,
                           size_t first, size_t count, uint64_t step, struct kvs__err *e);
/* The updates the optimizer's state of an entry has counted (0: none). */
uint64_t kvs__engine_steps(const struct kvs__engine *eng, const void *entry);
/* The optimizer's state of an entry (NULL: none), valid until the entry's
 * state is dropped or replaced (an update rule set, a load). */
const struct kvs__optim_state *kvs__engine_state(const struct kvs__engine *eng,
                                                 const void *entry);
/* Calls fn(ctx, key, info) for every stored key, in key order (int keys
 * ascending, string keys by strcmp), so that what a front shows of the
 * store does not depend on the table's layout. key.name and info are valid
 * during the call only; fn must not change the engine. A non-zero return of
 * fn stops the walk and is returned. Errors: -ENOMEM. */
int kvs__engine_foreach(struct kvs__engine *eng,
                        int (*fn)(void *ctx, kvs_key_t key, const struct kvs__entry_info *info),
                        void *ctx, struct kvs__err *e);
/* The number of stored keys. */
size_t kvs__engine_nkeys(const struct kvs__engine *eng);
/* The optimizer's spec with every parameter written out, or NULL when none
 * is set. Valid until the update rule changes or the engine is freed. */
const char *kvs__engine_optimizer(const struct kvs__engine *eng);
/* Called with an entry's front pointer when the entry goes away. */
void kvs__engine_set_front_free(struct kvs__engine *eng, void (*fn)(void *front));

/* Update rules: each replaces the previous one and drops optimizer state. */
void kvs__engine_set_updater(struct kvs__engine *eng, kvs_updater_t fn, void *ctx);
int  kvs__engine_set_optimizer(struct kvs__engine *eng, const char *spec, struct kvs__err *e);
/* Frees every key's optimizer state (a load replaces them all). */
void kvs__engine_drop_states(struct kvs__engine *eng);
int  kvs__engine_save_states(struct kvs__engine *eng, const char *path, int dump_optimizer,
                             struct kvs__err *e);
int  kvs__engine_load_states(struct kvs__engine *eng, const char *path, struct kvs__err *e);

/* Optimizer states split over several engines (kvsd's hosts, each owning
 * some keys): keep says which keys' states a call takes (NULL: all). */
typedef int (*kvs__key_filter)(void *ctx, kvs_key_t key);
/* The states of the kept keys as a state file's bytes, *out malloc'd. */
int  kvs__engine_encode_states(struct kvs__engine *eng, kvs__key_filter keep, void *ctx,
                               uint8_t **out, size_t *len, struct kvs__err *e);
/* The same bytes put into w (kvs__optim_encode_to: w->crc is theirs
 * after), for a snapshot that streams them into its file. */
struct kvs__sf_writer;
int  kvs__engine_put_states(struct kvs__engine *eng, struct kvs__sf_writer *w,
                            struct kvs__err *e);
/* Keys whose states several engines keep in parts (kvsd's big keys, each
 * host updating a range): this engine is `me`, image i's engine who[i];
 * part says which elements [*first, *first + *n) of key's state engine
 * `who` keeps, and returns 0 when none keeps it in parts. */
struct kvs__states_split {
    int me;
    const int *who;
    int (*part)(void *ctx, kvs_key_t key, int who, size_t *first, size_t *n);
    void *ctx;
};
/* Saves to path, as one file, the kept keys' states and those in the nimg
 * images (_encode_states of other engines: decoded and checked here). With
 * split, the records of one key from several engines are spliced into one
 * (a key two engines keep whole is KVS_ECORRUPT). */
int  kvs__engine_save_states_with(struct kvs__engine *eng, const char *path,
                                  int dump_optimizer, kvs__key_filter keep, void *ctx,
                                  const uint8_t *const *img, const size_t *len, int nimg,
                                  const struct kvs__states_split *split, struct kvs__err *e);
/* Loads a state file's bytes (what names them in messages) as
 * _load_states loads a file: every record is checked against this store,
 * the file's optimizer (when it has one) replaces the store's, and every
 * state is dropped; then only the kept keys' states are taken. */
int  kvs__engine_load_image(struct kvs__engine *eng, const uint8_t *img, size_t len,
                            const char *what, kvs__key_filter keep, void *ctx,
                            struct kvs__err *e);

#endif
