/*
 * req.c - request records: cut in order from blocks of many (a long list
 * makes them by the hundred thousand) and freed back to them; a request's
 * key, array and data (kvsd's copy, the worker's staging, or still in the
 * worker's memory), and a 2bit push's words decoded.
 *
 * Serve thread only. It must never answer a request (answers.c does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "req.h"
#include "devbufs.h"
#include "remote.h"

#include "kernels/array.h"
#include "kernels/compress.h"

kvs_key_t req_key(const struct rargs *s)
{
    return (s->flags & KVS__SQE_STRKEY) ? KVS_STR_KEY(s->key_name) : KVS_INT_KEY(s->key_id);
}

kvs_array_t req_array(const struct rargs *s, void *data)
{
    kvs_array_t a = { .data = data, .dtype = s->dtype, .ndim = s->ndim, .device = KVS_HOST };

    memcpy(a.shape, s->shape, sizeof a.shape[0] * (size_t)s->ndim);
    return a;
}

/* Where a request's data is now: kvsd's copy, or the worker's staging. */
void *req_data(const struct daemon *d, const struct req *r)
{
    if (r->copy)
        return r->copy;
    return remote_in_worker(r) ? NULL : d->workers[r->w].staging + r->s.data_off;
}

int req_device(const struct req *r)
{
    return r->copy ? r->copy_dev : KVS_HOST;
}

/* Requests come and go by the hundred thousand in a long list call: they
 * are cut in order from blocks of REQ_BLOCK, and a block goes back to
 * malloc (or is kept as the one spare) when its last request is freed. */
struct req *req_new(struct daemon *d, int wi)
{
    struct req_block *b = d->blk;
    struct req *r;

    if (!b || b->used == REQ_BLOCK) {
        if (b && b->live == 0) {       /* every request of it is freed already */
            b->used = 0;
        } else {
            if (d->spare_blk) {
                b = d->spare_blk;
                d->spare_blk = NULL;
            } else if (!(b = malloc(sizeof *b))) {
                return NULL;
            }
            b->used = b->live = 0;
            d->blk = b;
        }
    }
    r = &b->r[b->used++];
    b->live++;
    r->blk = b;
    r->w = wi;
    r->lent = r->acked = 0;
    r->token = 0;
    r->nwait = r->xstatus = 0;
    r->xmsg = NULL;
    r->copy = r->coded = NULL;
    r->ridx = NULL;
    r->copy_dev = KVS_HOST;
    r->rd = NULL;
    r->out = 0;
    r->written = 0;
    r->next = NULL;
    r->s.key_name = NULL;
    r->tab = NULL;
    r->idx = 0;
    r->t_in = kvs__tr_begin();
    r->t_join = 0;
    return r;
}

void req_free(struct daemon *d, struct req *r)
{
    struct req_block *b = r->blk;

    if (r->copy_dev != KVS_HOST)       /* a device push's, made by devcopy_new */
        devcopy_drop(d, r->rd, r->copy);
    else
        free(r->copy);
    free(r->coded);
    free(r->ridx);
    free(r->xmsg);
    free(r->s.key_name);
    if (r->tab && --r->tab->live == 0)
        free(r->tab);
    if (--b->live > 0 || b == d->blk)
        return;
    if (!d->spare_blk)
        d->spare_blk = b;
    else
        free(b);
}

void req_cache_free(struct daemon *d)
{
    /* Every request is freed by now: the current block is empty. */
    free(d->blk);
    free(d->spare_blk);
    d->blk = d->spare_blk = NULL;
}

int req_decode_2bit(struct daemon *d, struct req *r, struct kvs__err *e)
{
    kvs_array_t a = req_array(&r->s, NULL);
    size_t n = kvs__array_count(&a);
    const void *words = d->workers[r->w].staging + r->s.data_off;

    /* The words are read from staging once: the worker could rewrite them. */
    if (!(r->copy = malloc(n ? n * sizeof(float) : 1))
        || !(r->coded = malloc(r->s.data_len ? r->s.data_len : 1)))
        return kvs__fail(e, -ENOMEM, "kvsd: out of memory for a 2bit push");
    memcpy(r->coded, words, r->s.data_len);
    kvs__gc_2bit_dequantize(r->coded, r->copy, n, kvs__arg_threshold(r->s.arg));
    if (!d->hx) {                      /* the words go to no other host */
        free(r->coded);
        r->coded = NULL;
    }
    return 0;
}
