/*
 * combine.c - a worker's side of the rounds the workers combine
 * (combine.h): pushes into the round's input block (dense, or row-sparse
 * densified with the mark of its rows), the claim of a round this worker
 * completes, and pulls (whole, by rows, compact) out of the published
 * value.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "store/key.h"
#include "client/combine.h"
#include "proto/combine.h"
#include "store/engine.h"
#include "store/engine_args.h"
#include "front.h"
#include "device/mem.h"
#include "kernels/optim.h"
#include "client/residual.h"
#include "proto/trace.h"

#define CB_SLICE_NS (100 * 1000000ll)   /* a wait checks kvsd is alive this often */
#define CB_SPIN_NS  (20 * 1000ll)

static struct kvs__cb_head *head(const struct kvs__client *c)
{
    return (struct kvs__cb_head *)c->cb;
}

static int slot_ok(const struct kvs__client *c, const struct kvs__cb_slot *s)
{
    uint64_t nw = head(c)->nworkers, end, in;
    size_t esz = kvs_dtype_size(s->dtype);

    uint64_t rows;

    if (esz == 0 || s->ndim < 0 || s->ndim > KVS_MAX_NDIM || s->bytes > KVS__CB_MAX_BYTES
        || s->count > KVS__CB_MAX_BYTES || s->count * esz != s->bytes
        || s->stride > KVS__CB_MAX_BYTES || nw == 0 || nw > KVS__CB_MAX_WORKERS)
        return 0;
    /* Every block holds its value and a mark with a bit per row. */
    rows = kvs__cb_rows(s->ndim, s->shape);
    if ((rows && s->count % rows != 0)
        || s->stride < kvs__cb_mark_off(s->bytes) + kvs__cb_mark_bytes(rows))
        return 0;
    for (int p = 0; p < 2; p++) {
        if (__builtin_add_overflow(s->value_off[p], s->bytes, &end) || end > c->cb_size
            || __builtin_add_overflow(s->state_off[p], 16 * s->count, &end) || end > c->cb_size)
            return 0;
    }
    if (__builtin_add_overflow(s->load_off, 16 * s->count, &end) || end > c->cb_size)
        return 0;
    in = 2 * nw * s->stride;
    return !__builtin_add_overflow(s->in_off, in, &end) && end <= c->cb_size;
}

struct kvs__cb_slot *kvs__client_cb_find(const struct kvs__client *c, kvs_key_t key)
{
    struct kvs__cb_slot *s;

    if (!c->cb || !(s = kvs__cb_find(c->cb, c->cb_size, key)))
        return NULL;
    return slot_ok(c, s) ? s : NULL;
}

/* The job failed (kvsd, or a worker, wrote why): this handle is broken. */
static int job_failed(struct kvs__client *c, int32_t code, struct kvs__err *e)
{
    char msg[KVS__MSG_MAX];
    int rc;

    memcpy(msg, head(c)->fail_msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    pthread_mutex_lock(&c->lock);
    rc = kvs__client_broken(c, e, kvs__status_ok(code) ? code : KVS_EPROTO, "%s", msg);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* "waiting for ranks 1, 2": the active ranks not in mask. */
static void missing(uint64_t active, uint32_t mask, char *buf, size_t size)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int i = 0; i < KVS__CB_MAX_WORKERS && o + 16 < size; i++)
        if ((active >> i & 1) && !(mask >> i & 1))
            o += (size_t)snprintf(buf + o, size - o, "%s%d", o ? ", " : "", i);
}

/* This worker's deadline passed while it waited for round r of key to
 * close: it says what it waited for, and fails the job with that cause. */
static int give_up(kvs_t *kv, const struct kvs__cb_slot *s, kvs_key_t key, uint64_t r,
                   const char *what, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    uint64_t active = atomic_load(&head(c)->active);
    uint32_t mask = kvs__cb_mask(atomic_load(&s->arrive[r & 1]));
    char ks[KVS_MAX_KEY_LEN + 8], who[160], why[600], all[700];
    int rc;

    kvs__key_str(ks, sizeof ks, key);
    missing(active, mask, who, sizeof who);
    snprintf(why, sizeof why, "%s of key %s round %llu: %d of %d workers pushed, waiting for "
             "rank%s %s", what, ks, (unsigned long long)r, __builtin_popcount(mask),
             __builtin_popcountll(active | mask), strchr(who, ',') ? "s" : "", who);
    snprintf(all, sizeof all, "rank %d gave up waiting (KVS_TIMEOUT): %s", kv->rank, why);
    kvs__cb_fail(c->cb, KVS_ETIMEDOUT, all);
    kvs__bell_ring(c->dbell);          /* kvsd fails the job with it */
    pthread_mutex_lock(&c->lock);
    rc = kvs__client_broken(c, e, KVS_ETIMEDOUT, "%s", why);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* The job's optimizer as the area has it now (NULL: none), and its
 * generation. Parsed optimizers are kept until the handle closes: another
 * thread may still be running one, and a round opened under one is made
 * with it. */
static int cb_optimizer(struct kvs__client *c, const struct kvs__optim **o, uint64_t *gen,
                        struct kvs__err *e)
{
    struct kvs__cb_head *h = head(c);
    char spec[KVS__CB_SPEC_MAX];
    uint64_t s1, s2, g;
    uint32_t len;
    int rc = 0;

    for (int tries = 0;; tries++) {
        s1 = atomic_load_explicit(&h->opt_seq, memory_order_acquire);
        g = h->opt_gen;
        len = h->opt_len;
        if (len < sizeof spec)
            memcpy(spec, h->opt_spec, len);
        atomic_thread_fence(memory_order_acquire);
        s2 = atomic_load_explicit(&h->opt_seq, memory_order_relaxed);
        if (s1 == s2 && !(s1 & 1) && len < sizeof spec)
            break;
        if (tries > 1000000)
            return kvs__fail(e, KVS_EPROTO, "the job's optimizer in the combine area stays "
                             "unreadable");
    }
    spec[len] = '\0';
    *gen = g;
    *o = NULL;
    if (len == 0)
        return 0;
    pthread_mutex_lock(&c->cb_lock);
    if (c->cb_nopt == 0 || c->cb_opts[c->cb_nopt - 1].gen != g) {
        struct kvs__cb_opt *v = realloc(c->cb_opts, (c->cb_nopt + 1) * sizeof *v);
        struct kvs__optim *p;

        if (!v)
            rc = kvs__fail(e, -ENOMEM, "out of memory");
        else if ((c->cb_opts = v, rc = kvs__optim_parse(spec, &p, e)) == 0)
            c->cb_opts[c->cb_nopt++] = (struct kvs__cb_opt){ p, g };
    }
    if (rc == 0)
        *o = c->cb_opts[c->cb_nopt - 1].o;
    pthread_mutex_unlock(&c->cb_lock);
    return rc;
}

/* The optimizer of generation gen, when this worker has it (or it is the
 * area's now); else NULL. */
static const struct kvs__optim *optimizer_of(struct kvs__client *c, uint64_t gen)
{
    const struct kvs__optim *o = NULL;
    struct kvs__err e;
    uint64_t g;

    pthread_mutex_lock(&c->cb_lock);
    for (size_t i = c->cb_nopt; i-- > 0 && !o;)
        if (c->cb_opts[i].gen == gen)
            o = c->cb_opts[i].o;
    pthread_mutex_unlock(&c->cb_lock);
    if (!o && (cb_optimizer(c, &o, &g, &e) != 0 || g != gen))
        o = NULL;
    return o;
}

/* Combines what is left to take of the slot's open rounds. */
static void cb_help(struct kvs__client *c, struct kvs__cb_slot *s)
{
    for (int p = 0; p < 2; p++) {
        uint64_t gen;

        if (kvs__cb_open(s, p, &gen))
            kvs__cb_help(c->cb, s, NULL, p, gen ? optimizer_of(c, gen) : NULL, gen);
    }
}

enum { UNTIL_FREE, UNTIL_DONE };

/* Waits until round r of the slot may take pushes (UNTIL_FREE: round
 * r - 2 is done) or is published (UNTIL_DONE), the job's failure, kvsd's
 * end or the deadline. span (or NULL): when the wait began and ended. */
static int cb_wait(kvs_t *kv, struct kvs__cb_slot *s, kvs_key_t key, int until, uint64_t r,
                   const char *what, int64_t *span, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__cb_head *h = head(c);
    struct kvs__opts o;
    int64_t deadline = 0, waiting = kvs__now_ns(), now_end;

    for (;;) {
        uint32_t seen = kvs__bell_seq(&h->bell);
        int32_t f = atomic_load_explicit(&h->failed, memory_order_acquire);
        int64_t now, end;
        int quiet;

        if (f < 0)
            return job_failed(c, f, e);
        if (until == UNTIL_DONE ? atomic_load_explicit(&s->gen, memory_order_acquire) >= r
                                : (atomic_load_explicit(&s->arrive[r & 1], memory_order_acquire)
                                   & ~(KVS__CB_CLAIMED | 0xffffffffull)) == kvs__cb_tag(r))
            break;
        cb_help(c, s);
        if (kvs__bell_seq(&h->bell) != seen)
            continue;
        now = kvs__now_ns();
        if (!deadline) {
            kvs__opts_get(kv, &o);
            deadline = now + o.timeout_ms * 1000000ll;
        }
        if (now >= deadline)
            return give_up(kv, s, key, until == UNTIL_DONE
                           ? atomic_load(&s->gen) + 1 : r - 2, what, e);
        end = now + CB_SLICE_NS < deadline ? now + CB_SLICE_NS : deadline;
        quiet = kvs__bell_wait(&h->bell, seen, end, CB_SPIN_NS) != 0;
        if (quiet && kvs__client_daemon_gone(c)) {
            pthread_mutex_lock(&c->lock);
            kvs__client_broken(c, e, KVS_ECLOSED, "%s: kvsd of job '%s' is gone", what, c->job);
            pthread_mutex_unlock(&c->lock);
            return KVS_ECLOSED;
        }
    }
    now_end = kvs__client_waited(c, waiting);
    if (span) {
        span[0] = waiting;
        span[1] = now_end;
    }
    return 0;
}

/* Writes into blk this worker's push of the slot's key: the sum of the
 * values at idx[0..m), and under 2bit compression (threshold > 0) what
 * kvsd would have made of it, the sum quantized with this worker's
 * residual of the key and dequantized. */
static int fill_input(kvs_t *kv, const struct kvs__cb_slot *s, kvs_key_t key, unsigned char *blk,
                      const kvs_array_t *values, const int *idx, int m, float threshold,
                      struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    uint32_t *coded;
    float *next;
    int rc;

    /* Dense: the round is dense (combine.h). */
    ((struct kvs__cb_mark *)(blk + kvs__cb_mark_off(s->bytes)))->how = 0;
    for (int j = 0; j < m; j++) {
        const kvs_array_t *v = &values[idx[j]];

        if (v->device != KVS_HOST || j == 0) {
            void *dst = j == 0 ? blk : NULL;
            void *tmp = NULL;

            if (!dst && !(dst = tmp = malloc(s->bytes ? s->bytes : 1)))
                return kvs__fail(e, -ENOMEM, "out of memory");
            if ((rc = kvs__mem_copy(dst, KVS_HOST, v->data, v->device, s->bytes, 1, e)) == 0
                && v->device != KVS_HOST)
                rc = kvs__mem_finish(e);
            if (rc == 0 && tmp)
                kvs__sum(s->dtype, blk, (const void *[]){ blk, tmp }, 2, s->count, 1);
            free(tmp);
            if (rc != 0)
                return rc;
        } else {
            kvs__sum(s->dtype, blk, (const void *[]){ blk, v->data }, 2, s->count, 1);
        }
    }
    if (threshold <= 0 || s->dtype != KVS_FLOAT32)
        return 0;
    if (!(coded = malloc(4 * (kvs__gc_2bit_words(s->count) + 1))))
        return kvs__fail(e, -ENOMEM, "out of memory");
    rc = kvs__residual_quantize(c->residuals, key, (const float *)blk, s->count, threshold,
                                coded, &next, e);
    if (rc == 0) {
        kvs__gc_2bit_dequantize(coded, (float *)blk, s->count, threshold);
        kvs__residual_commit(c->residuals, key, next);
    }
    free(coded);
    return rc;
}

/* Writes into blk this worker's row-sparse push of the slot's key: the
 * dense form of the rows of the values at idx[0..m) (checked), repeats
 * summed, every other row zero; and its mark, a bit for each row given. */
static void fill_rows(const struct kvs__cb_slot *s, unsigned char *blk,
                      const kvs_row_sparse_t *values, const int *idx, int m)
{
    uint64_t rows = kvs__cb_rows(s->ndim, s->shape);
    struct kvs__cb_mark *mk = (struct kvs__cb_mark *)(blk + kvs__cb_mark_off(s->bytes));
    size_t re = rows ? (size_t)(s->count / rows) : 0, rb = re * kvs_dtype_size(s->dtype);

    memset(blk, 0, s->bytes);
    memset(mk->bits, 0, 8 * ((rows + 63) / 64));
    for (int j = 0; j < m; j++) {
        const kvs_row_sparse_t *v = &values[idx[j]];

        for (int64_t r = 0; r < v->nnz; r++) {
            uint64_t id = (uint64_t)v->indices[r];
            unsigned char *dst = blk + id * rb;

            if (id >= rows)
                continue;              /* checked: the caller changed it since */
            kvs__sum(s->dtype, dst, (const void *[]){ dst, (const unsigned char *)v->data
                                                           + (size_t)r * rb }, 2, re, 1);
            mk->bits[id / 64] |= 1ull << (id % 64);
        }
    }
    mk->how = KVS__CB_ROWS;
}

/* Pushes the values at idx[0..m) (one key's, summed) into round *r, the
 * next of this worker's; opens the round when this push completes it, and
 * combines it unless reads follow (help 0: a wait for the round does).
 * rvalues (values NULL): row-sparse values, checked, whose rows are pushed.
 * Once the round is taken, a failure to write the push fails the job: the
 * others would wait for it in vain. */
static int cb_push(kvs_t *kv, struct kvs__cb_slot *s, kvs_key_t key, const kvs_array_t *values,
                   const kvs_row_sparse_t *rvalues, const int *idx, int m, float threshold,
                   int help, uint64_t *r, const char *what, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    struct kvs__cb_head *h = head(c);
    uint32_t bit = 1u << kv->rank;
    unsigned char *blk;
    uint64_t w, rr, gen;
    const struct kvs__optim *o;
    struct kvs__opts opts;
    int64_t t, span[2];
    int p, rc;

    *r = atomic_fetch_add(&s->pushed[kv->rank], 1) + 1;
    p = (int)(*r & 1);
    if ((rc = cb_wait(kv, s, key, UNTIL_FREE, *r, what, span, e)) != 0)
        return rc;
    kvs__tr_span_key_on(KVS__TR_QUEUED, span[0], span[1], key, s->bytes, (int64_t)*r);
    blk = (unsigned char *)c->cb + s->in_off + ((uint64_t)p * h->nworkers + (uint64_t)kv->rank)
          * s->stride;
    if (rvalues)
        fill_rows(s, blk, rvalues, idx, m);
    else if ((rc = fill_input(kv, s, key, blk, values, idx, m, threshold, e)) != 0) {
        kvs__cb_fail(c->cb, rc, e->msg);
        return rc;
    }
    /* The round's latency starts at its first push (combine.h); the next
     * arrivals find t_open set. */
    t = kvs__now_ns();
    atomic_compare_exchange_strong_explicit(&s->t_open[p], &(int64_t){ 0 }, t,
                                            memory_order_relaxed, memory_order_relaxed);
    kvs__tr_span_key_on(KVS__TR_COPY_IN, span[1], t, key, s->bytes, (int64_t)*r);
    w = atomic_load(&s->arrive[p]);
    do {
        if ((w & ~(KVS__CB_CLAIMED | 0xffffffffull)) != kvs__cb_tag(*r) || (w & bit)) {
            kvs__cb_fail(c->cb, KVS_EPROTO, "the combine area's round state is corrupt");
            return job_failed(c, KVS_EPROTO, e);
        }
    } while (!atomic_compare_exchange_weak(&s->arrive[p], &w, w | bit));
    if (!kvs__cb_try_claim(s, p, atomic_load(&h->active), &rr))
        return 0;
    if ((rc = cb_optimizer(c, &o, &gen, e)) != 0) {
        kvs__cb_fail(c->cb, rc, e->msg);
        return rc;
    }
    kvs__opts_get(kv, &opts);
    t = kvs__tr_begin();
    rc = kvs__cb_combine(c->cb, s, NULL, rr, o, gen, help,
                         kvs__now_ns() + opts.timeout_ms * 1000000ll);
    kvs__tr_span_key(KVS__TR_COMBINE, t, key, s->bytes, (int64_t)rr);
    if (rc == KVS_ETIMEDOUT)
        return give_up(kv, s, key, rr - 1, what, e);
    return rc < 0 ? job_failed(c, rc, e) : 0;
}

/* Copies (or views) the value of round r or a later one into out; rows:
 * only those, the others zeroed; cids (m of them, in range): only those
 * rows, one after another in out's data (a compact pull). */
static int cb_read(kvs_t *kv, struct kvs__cb_slot *s, kvs_key_t key, uint64_t r,
                   kvs_array_t *out, int view, const kvs_array_t *rows, const int64_t *cids,
                   int64_t m, const char *what, struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    /* The out has the stored shape (checked): its rows bound the ids. */
    size_t rb = out->ndim && out->shape[0] ? s->bytes / (size_t)out->shape[0] : 0;
    /* No ids (their data may be NULL then): no row. */
    const int64_t *ids = !rows ? NULL : rows->data ? rows->data : (const int64_t *)"";
    int64_t span[2];
    int rc;

    if ((rc = cb_wait(kv, s, key, UNTIL_DONE, r, what, span, e)) != 0)
        return rc;
    kvs__tr_span_key_on(KVS__TR_WAIT_OTHERS, span[0], span[1], key, s->bytes, (int64_t)r);
    for (;;) {
        uint64_t g = atomic_load_explicit(&s->gen, memory_order_acquire);
        int p = (int)(g & 1);
        uint64_t s1 = atomic_load_explicit(&s->vseq[p], memory_order_acquire);
        const unsigned char *src = (const unsigned char *)c->cb + s->value_off[p];
        int32_t f = atomic_load_explicit(&head(c)->failed, memory_order_acquire);

        /* A later round is being written over it (another thread of this
         * worker pushed again): read that one once it is published. */
        if (f < 0)
            return job_failed(c, f, e);
        if (s1 & 1) {
            if ((rc = cb_wait(kv, s, key, UNTIL_DONE, g + 1, what, NULL, e)) != 0)
                return rc;
            continue;
        }
        if (view) {
            out->data = (void *)src;
        } else if (cids) {
            for (int64_t j = 0; j < m; j++)
                memcpy((unsigned char *)out->data + (size_t)j * rb, src + (size_t)cids[j] * rb,
                       rb);
        } else if ((rc = kvs__mem_write_out(out->data, out->device, src, s->bytes,
                                            ids, rows && rows->data ? rows->shape[0] : 0,
                                            rb, 1, e)) != 0) {
            return rc;
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->vseq[p], memory_order_relaxed) == s1) {
            if (!view)
                kvs__tr_span_key_on(KVS__TR_COPY_OUT, span[1], 0, key, s->bytes, (int64_t)r);
            return 0;
        }
    }
}

static int check_array(const struct kvs__cb_slot *s, kvs_key_t key, const kvs_array_t *a,
                       const char *what, struct kvs__err *e)
{
    char ks[KVS_MAX_KEY_LEN + 8], want[96], got[96];

    if (a->dtype == s->dtype && a->ndim == s->ndim
        && memcmp(a->shape, s->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0)
        return 0;
    kvs__key_str(ks, sizeof ks, key);
    kvs__shape_str(want, sizeof want, s->ndim, s->shape);
    kvs__shape_str(got, sizeof got, a->ndim, a->shape);
    return kvs__fail(e, a->dtype != s->dtype ? KVS_EDTYPE : KVS_ESHAPE,
                     "key %s: %s of dtype %d shape %s, stored dtype %d shape %s", ks, what,
                     (int)a->dtype, got, (int)s->dtype, want);
}

int kvs__client_cb_call(kvs_t *kv, int n, const kvs_key_t *keys,
                        struct kvs__cb_slot *const *slots, const kvs_array_t *values,
                        kvs_array_t *outs, const kvs_array_t *rows, int view, const char *what,
                        struct kvs__err *e)
{
    struct kvs__client *c = kv->client;
    int *gid = NULL, *first = NULL, *idx = NULL, ng, rc = 0;
    uint64_t *round = NULL;
    float threshold = 0;

    for (int i = 0; i < n; i++) {
        if ((values && (rc = check_array(slots[i], keys[i], &values[i], "value", e)) != 0)
            || (outs && (rc = check_array(slots[i], keys[i], &outs[i], view ? "view" : "out",
                                          e)) != 0))
            return rc;
    }
    if (!(gid = malloc((size_t)(n ? n : 1) * sizeof *gid))
        || !(first = malloc((size_t)(n ? n : 1) * sizeof *first))
        || !(idx = malloc((size_t)(n ? n : 1) * sizeof *idx))
        || !(round = malloc((size_t)(n ? n : 1) * sizeof *round))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    if ((ng = kvs__group_keys(n, keys, gid, first, e)) < 0) {
        rc = ng;
        goto out;
    }
    pthread_mutex_lock(&c->lock);
    if (c->gc.type == KVS__GC_2BIT)
        threshold = c->gc.threshold;
    pthread_mutex_unlock(&c->lock);
    for (int j = 0; j < ng && rc == 0; j++) {
        struct kvs__cb_slot *s = slots[first[j]];
        int m = 0;

        if (!values) {
            round[j] = atomic_load(&s->pushed[kv->rank]);
            continue;
        }
        for (int i = first[j]; i < n; i++)
            if (gid[i] == j)
                idx[m++] = i;
        rc = cb_push(kv, s, keys[first[j]], values, NULL, idx, m, threshold, outs == NULL,
                     &round[j], what, e);
    }
    for (int i = 0; outs && i < n && rc == 0; i++)
        rc = cb_read(kv, slots[i], keys[i], round[gid[i]], &outs[i], view,
                     rows ? &rows[i] : NULL, NULL, 0, what, e);
out:
    free(round);
    free(idx);
    free(first);
    free(gid);
    return rc;
}

/* ---- row-sparse values ------------------------------------------------ */

int kvs__client_cb_check_rows(int n, const kvs_key_t *keys, struct kvs__cb_slot *const *slots,
                              const kvs_row_sparse_t *values, const int *pos,
                              struct kvs__err *e)
{
    for (int i = 0; i < n; i++) {
        const struct kvs__cb_slot *s = slots[i];
        const kvs_row_sparse_t *v = &values[i];
        kvs_array_t ids = { .data = v->indices, .dtype = KVS_INT64, .ndim = 1,
                            .shape = { v->nnz }, .device = KVS_HOST };
        char ks[KVS_MAX_KEY_LEN + 8], want[96], got[96];
        int rc;

        if (v->dtype != s->dtype || v->ndim != s->ndim
            || memcmp(v->shape, s->shape, (size_t)v->ndim * sizeof v->shape[0]) != 0) {
            kvs__key_str(ks, sizeof ks, keys[i]);
            kvs__shape_str(want, sizeof want, s->ndim, s->shape);
            kvs__shape_str(got, sizeof got, v->ndim, v->shape);
            return kvs__fail(e, v->dtype != s->dtype ? KVS_EDTYPE : KVS_ESHAPE,
                             "key %s: value %d of dtype %d shape %s, stored dtype %d shape %s",
                             ks, pos[i], (int)v->dtype, got, (int)s->dtype, want);
        }
        if ((rc = kvs__check_row_ids(keys[i], pos[i], &ids, s->ndim, s->shape[0], e)) != 0)
            return rc;
    }
    return 0;
}

int kvs__client_cb_push_rows(kvs_t *kv, int n, const kvs_key_t *keys,
                             struct kvs__cb_slot *const *slots, const kvs_row_sparse_t *values,
                             const char *what, struct kvs__err *e)
{
    int *gid = NULL, *first = NULL, *idx = NULL, ng, rc = 0;
    size_t nn = (size_t)(n ? n : 1);

    if (!(gid = malloc(nn * sizeof *gid)) || !(first = malloc(nn * sizeof *first))
        || !(idx = malloc(nn * sizeof *idx))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    if ((ng = kvs__group_keys(n, keys, gid, first, e)) < 0) {
        rc = ng;
        goto out;
    }
    for (int j = 0; j < ng && rc == 0; j++) {
        uint64_t round;
        int m = 0;

        for (int i = first[j]; i < n; i++)
            if (gid[i] == j)
                idx[m++] = i;
        rc = cb_push(kv, slots[first[j]], keys[first[j]], NULL, values, idx, m, 0, 1, &round,
                     what, e);
    }
out:
    free(idx);
    free(first);
    free(gid);
    return rc;
}

int kvs__client_cb_pull_rows(kvs_t *kv, struct kvs__cb_slot *s, kvs_key_t key,
                             const int64_t *ids, int64_t m, void *data, const char *what,
                             struct kvs__err *e)
{
    kvs_array_t out = { .data = data, .dtype = s->dtype, .ndim = s->ndim };

    memcpy(out.shape, s->shape, (size_t)s->ndim * sizeof out.shape[0]);
    return cb_read(kv, s, key, atomic_load(&s->pushed[kv->rank]), &out, 0, NULL, ids, m, what,
                   e);
}

/* ---- list calls split between kvsd and the combined keys ------------- */

static void split_free(struct kvs__split *sp)
{
    free(sp->idx);
    free(sp->slots);
    free(sp->keys);
    for (int k = 0; k < 3; k++)
        free(sp->arrs[k]);
}

int kvs__client_split(kvs_t *kv, int n, const kvs_key_t *keys, const kvs_array_t *const src[3],
                      struct kvs__split *sp, struct kvs__err *e)
{
    struct kvs__cb_slot **found;
    int a = 0, b, nomem = 0;

    memset(sp, 0, sizeof *sp);
    if (!kv->client->cb || n == 0)
        return 0;
    if (!(found = malloc((size_t)n * sizeof *found)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        sp->ncb += (found[i] = kvs__client_cb_find(kv->client, keys[i])) != NULL;
    if (sp->ncb == 0) {
        free(found);
        return 0;
    }
    sp->nkd = n - sp->ncb;
    sp->idx = malloc((size_t)n * sizeof *sp->idx);
    sp->slots = malloc((size_t)sp->ncb * sizeof *sp->slots);
    sp->keys = malloc((size_t)n * sizeof *sp->keys);
    for (int k = 0; k < 3; k++)
        if (src[k] && !(sp->arrs[k] = malloc((size_t)n * sizeof *sp->arrs[k])))
            nomem = 1;
    if (nomem || !sp->idx || !sp->slots || !sp->keys) {
        free(found);
        split_free(sp);
        return kvs__fail(e, -ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&kv->client->lock);
    for (int i = 0; src[0] && i < n; i++) {
        uint64_t off;
        int rc;

        if (found[i] && (rc = kvs__client_in_buffer(kv->client, src[0][i].data,
                                                    kvs__array_count(&src[0][i])
                                                    * kvs_dtype_size(src[0][i].dtype),
                                                    &off, e)) < 0) {
            pthread_mutex_unlock(&kv->client->lock);
            free(found);
            split_free(sp);
            return rc;
        }
    }
    pthread_mutex_unlock(&kv->client->lock);
    b = sp->nkd;
    for (int i = 0; i < n; i++) {
        int at = found[i] ? b++ : a++;

        if (found[i])
            sp->slots[at - sp->nkd] = found[i];
        sp->idx[at] = i;
        sp->keys[at] = keys[i];
        for (int k = 0; k < 3; k++)
            if (src[k])
                sp->arrs[k][at] = src[k][i];
    }
    free(found);
    return 0;
}

int kvs__client_split_run(kvs_t *kv, struct kvs__split *sp, kvs_array_t *outs,
                          kvs__split_fn *kd, int view, int priority, const char *what,
                          struct kvs__err *e)
{
    kvs_array_t *const *a = sp->arrs;
    int k = sp->nkd, rc = 0;

    if (k > 0)
        rc = kd(kv, k, sp->keys, a[0], a[1], a[2], view, priority, what, e);
    if (rc == 0)
        rc = kvs__client_cb_call(kv, sp->ncb, sp->keys + k, sp->slots, a[0] ? a[0] + k : NULL,
                                 a[1] ? a[1] + k : NULL, a[2] ? a[2] + k : NULL, view, what, e);
    for (int i = 0; outs && a[1] && i < k + sp->ncb; i++)
        outs[sp->idx[i]] = a[1][i];
    split_free(sp);
    return rc;
}
