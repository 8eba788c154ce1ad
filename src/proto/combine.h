/*
 * combine.h - rounds that the workers combine themselves (KVS_COMBINE=1).
 *
 * In a dist_sync job on one host, a small key's round would otherwise hand
 * a core to kvsd and back. Here its value lives in the combine area, a
 * shared memfd that every worker of the job maps read-write: each worker
 * writes its push into its own input block of the round, sets its bit in
 * the round's arrival word, and the worker whose bit completes the round
 * (or kvsd, when a worker leaving completes it) claims it and opens it.
 * The round's elements are then combined in chunks (summed, and run
 * through the optimizer) by whoever takes them: the claimer, and every
 * worker that waits for the round or for the key's next one. The one that
 * finishes the last chunk publishes the round. kvsd makes the area, lays
 * out each key's slot at its init, and publishes the job's optimizer and
 * failure there; it is off the path of every round.
 *
 * The area belongs to the job: any of its workers can write any of it, so
 * a faulty worker can damage the values of its own job (as it could by
 * pushing garbage), and nothing else. kvsd reads from the area only the
 * words that decide what to do (arrival words, round numbers) and the
 * latency counts it shows, clamped, never an offset or a size: it keeps
 * its own copy of every slot's layout.
 *
 * A round's value and optimizer state are written into the buffers of its
 * parity, away from the last round's, and published by one store of the
 * round number: a combiner that dies part-way leaves the published value
 * and state whole (the job then fails, as it does whenever a worker dies).
 *
 * Each input block ends in a mark (struct kvs__cb_mark): whether the push
 * was dense, or row-sparse and which rows it held. A round whose every
 * push was row-sparse, under an optimizer that updates lazily, updates
 * only the union of their rows and those rows' state, as kvsd's rounds of
 * row-sparse pushes do (store/rows.c); every other round is dense. The
 * rows' values lie densified in the block, absent rows zero, so that the
 * sum without an optimizer is the row-sparse sum's dense form, as kvsd's
 * assignment writes it.
 *
 * A load of optimizer states goes through kvsd: it writes each slot's
 * loaded state (or none) into the slot's load buffer, then bumps opt_gen.
 * The next round of the key finds its last state made under an older
 * opt_gen, and starts from the loaded state instead of a zero one.
 */
#ifndef KVS_COMBINE_H
#define KVS_COMBINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"
#include "base/latency.h"
#include "proto/proto.h"
#include "shm/ring.h"

struct kvs__optim;

#define KVS__CB_MAGIC       0x3542434b5356534bull   /* "KSVSKCB5": inputs carry marks */
#define KVS__CB_MAX_WORKERS 32                      /* ranks fit an arrival word's mask */
#define KVS__CB_MAX_BYTES   ((uint64_t)1 << 40)      /* no slot is bigger (a sanity bound) */
#define KVS__CB_CHUNK       ((uint64_t)8192)         /* elements a worker combines at a time */
#define KVS__CB_INDEX       ((uint32_t)1 << 16)      /* index entries; half may be used */
#define KVS__CB_SPEC_MAX    4096
#define KVS__CB_INDEX_OFF   ((uint64_t)16 << 10)
#define KVS__CB_SLOTS_OFF   (KVS__CB_INDEX_OFF + (uint64_t)KVS__CB_INDEX * 16)
/* The smallest area worth making: the head, the index and a few slots. */
#define KVS__CB_MIN         (KVS__CB_SLOTS_OFF + ((uint64_t)8 << 20))

/* The head, at offset 0 of the area. */
struct kvs__cb_head {
    uint64_t magic;
    uint64_t size;                     /* the area's bytes */
    uint32_t nworkers;                 /* the job's, at most KVS__CB_MAX_WORKERS */
    uint32_t pad0;
    _Atomic uint64_t active;           /* a bit per rank still in the job */
    _Atomic int32_t failed;            /* 0; 1 while the first failure's text is
                                        * written; then the code (< 0) every call
                                        * fails with */
    uint32_t pad1;
    struct kvs__bell bell;             /* rung at every publish and failure */
    _Atomic uint64_t opt_seq;          /* seqlock of the optimizer's spec: odd while
                                        * kvsd writes it */
    uint64_t opt_gen;                  /* bumped when another optimizer replaces the
                                        * last: states made before it are dropped */
    uint32_t opt_len;                  /* spec bytes; 0: no optimizer (the round's
                                        * value is its sum) */
    char opt_spec[KVS__CB_SPEC_MAX];
    char fail_msg[KVS__MSG_MAX];       /* NUL-terminated once failed is set */
};

/* A key's slot. The fields down to `name` are written by kvsd before the
 * key's index entry publishes the slot, and never again. */
struct kvs__cb_slot {
    int64_t key_id;
    uint32_t name_len;                 /* string keys: name bytes; int keys: 0 */
    uint32_t is_str;
    kvs_dtype_t dtype;
    int ndim;
    int64_t shape[KVS_MAX_NDIM];
    uint64_t bytes, count;
    uint64_t value_off[2];             /* round r's value: value_off[r & 1] */
    uint64_t state_off[2];             /* its optimizer state: 2 buffers of count
                                        * float32 (float64 keys: float64) each */
    uint64_t load_off;                 /* a state loaded by kvsd, laid out the same */
    uint64_t in_off;                   /* inputs: [2][nworkers] blocks of stride,
                                        * each a value and its mark */
    uint64_t stride;
    char name[KVS_MAX_KEY_LEN + 1];
    /* live: the round state */
    _Atomic uint64_t gen;              /* the last round published (0: init) */
    _Atomic uint64_t arrive[2];        /* round parity's arrival word (below) */
    _Atomic uint64_t vseq[2];          /* seqlock of value and state of a parity */
    uint64_t t[2];                     /* optimizer steps in the parity's state */
    uint64_t state_gen[2];             /* opt_gen the parity's state was made under;
                                        * 0: none */
    _Atomic uint64_t lseq;             /* seqlock of the loaded state: odd while kvsd
                                        * writes it */
    uint64_t load_gen;                 /* opt_gen kvsd loaded it for; 0: none */
    uint64_t load_t;                   /* its optimizer steps */
    _Atomic uint64_t work[2];          /* the parity's round while open: its tag,
                                        * KVS__CB_OPEN, and the next chunk to take
                                        * (low 32 bits); 0 otherwise */
    _Atomic uint64_t done[2];          /* chunks of it combined */
    _Atomic uint64_t need[2];          /* the optimizer generation its chunks are
                                        * made with; 0: none */
    _Atomic uint32_t how[2];           /* how its chunks are made (combine.c) */
    _Atomic uint64_t pushed[KVS__CB_MAX_WORKERS];   /* pushes so far, per rank */
    /* latencies, for kvsctl: a round's runs from the first push written into
     * it (the first worker to set t_open, just before it sets its arrival
     * bit) to its publish, and is counted by the one that publishes it */
    _Atomic int64_t t_open[2];         /* the parity's open round's (kvs__now_ns);
                                        * 0: none yet */
    _Atomic uint64_t lat[KVS__LAT_BUCKETS];         /* latency.h: rounds per bucket */
};

/* An arrival word: the round's tag (its number over 2, low 31 bits), a
 * claimed bit, and the mask of ranks that pushed into the round. */
#define KVS__CB_CLAIMED ((uint64_t)1 << 32)
#define KVS__CB_OPEN    KVS__CB_CLAIMED         /* in a work word: chunks to take */
static inline uint64_t kvs__cb_tag(uint64_t round)
{
    return ((round >> 1) & 0x7fffffffu) << 33;
}
static inline uint32_t kvs__cb_mask(uint64_t word)
{
    return (uint32_t)word;
}

/* Bytes of an element of a key's optimizer state. */
static inline uint64_t kvs__cb_state_elem(kvs_dtype_t dtype)
{
    return dtype == KVS_FLOAT64 ? 8 : 4;
}

/* An input block's mark, at mark_off within the block (kvs__cb_mark_off):
 * how the push that wrote the block was made, then, for a row-sparse one,
 * a bit per row of the key, set for the rows it held. */
struct kvs__cb_mark {
    uint64_t how;                      /* KVS__CB_ROWS, or anything else: dense */
    uint64_t bits[];                   /* (rows + 63) / 64 words */
};
#define KVS__CB_ROWS ((uint64_t)0x53574f52)     /* "ROWS" */

/* Where a block's mark lies: after its value, 64-byte aligned. */
static inline uint64_t kvs__cb_mark_off(uint64_t bytes)
{
    return ((bytes ? bytes : 1) + 63) & ~(uint64_t)63;
}
/* The bytes of the mark of a key of rows rows. */
static inline uint64_t kvs__cb_mark_bytes(uint64_t rows)
{
    return sizeof(struct kvs__cb_mark) + 8 * ((rows + 63) / 64);
}
/* The rows of a slot's key (0 for a scalar), which its mark has room for. */
static inline uint64_t kvs__cb_rows(int ndim, const int64_t *shape)
{
    return ndim >= 1 && shape[0] > 0 ? (uint64_t)shape[0] : 0;
}

/* Where a slot's parts lie, as kvsd computes them at the slot's offset (and
 * keeps: it never reads them back from the area). */
struct kvs__cb_plan {
    uint64_t off, size;                /* the slot, and its bytes in all */
    uint64_t bytes, count, value_off[2], state_off[2], load_off, in_off, stride;
    uint64_t rows;                     /* the key's (kvs__cb_rows) */
    kvs_dtype_t dtype;
    uint32_t nworkers;
};
void kvs__cb_plan(uint64_t off, uint64_t bytes, size_t count, uint64_t rows, kvs_dtype_t dtype,
                  uint32_t nworkers, struct kvs__cb_plan *plan);

/* Writes the slot of plan (its bytes zero) for key, of dtype and shape,
 * with value as round 0's, and publishes it in the index. 0, or -ENOSPC
 * when the index is half full (the key then goes through kvsd). */
int kvs__cb_publish(void *area, const struct kvs__cb_plan *plan, kvs_key_t key, int ndim,
                    const int64_t *shape, const void *value);

/* The slot of key, or NULL when the key is not combined. Checks the
 * index entry's offset against the area's size. */
struct kvs__cb_slot *kvs__cb_find(void *area, uint64_t size, kvs_key_t key);

/* Claims the round of parity p if ranks have arrived in it, every active
 * one among them, and nobody claimed it: 1 when the caller now owns it,
 * and *round is its number (from gen, which it follows). */
int kvs__cb_try_claim(struct kvs__cb_slot *s, int p, uint64_t active, uint64_t *round);

/* Opens round r of the slot, whose arrival word is claimed by the caller,
 * once round r - 1 is published (helping to combine it meanwhile): its
 * chunks sum the inputs of the ranks that arrived and run the optimizer
 * (o, made under opt_gen; NULL: the value is the sum) from round r - 1's
 * state when made under opt_gen, else from the loaded one when loaded for
 * opt_gen, else from zero. help: the caller then combines chunks until
 * none is left to take (0: it leaves them to kvs__cb_help, its own later
 * or another's). plan: where the parts lie (kvsd's own copy), or NULL to
 * read them from the slot (a worker). Returns 0, or the job's failure
 * code, or KVS_ETIMEDOUT when round r - 1 is not published, or the loaded
 * state stays mid-write, by deadline_ns. */
int kvs__cb_combine(void *area, struct kvs__cb_slot *s, const struct kvs__cb_plan *plan,
                    uint64_t r, const struct kvs__optim *o, uint64_t opt_gen, int help,
                    int64_t deadline_ns);

/* Whether parity p's round is open with chunks left to take: 1, and in
 * *opt_gen the optimizer generation its chunks need (0: none). */
int kvs__cb_open(const struct kvs__cb_slot *s, int p, uint64_t *opt_gen);

/* Combines chunks of parity p's open round until none is left to take,
 * and publishes the round when it finishes the last chunk. A round that
 * needs the optimizer is left to others unless o is the one it was opened
 * with (opt_gen). Returns the chunks combined. */
int kvs__cb_help(void *area, struct kvs__cb_slot *s, const struct kvs__cb_plan *plan, int p,
                 const struct kvs__optim *o, uint64_t opt_gen);

/* Fails the job in the area with code and msg, and wakes every waiter. */
void kvs__cb_fail(void *area, int code, const char *msg);

#endif
