/*
 * tables.c - a list call's tables (proto/tables.h, KVS__SQE_TABLE): many
 * int-key inits, pushes or pulls written as entries in a range of staging
 * the call took, a slot and a completion per 4,096 requests instead of
 * per request; and the results kvsd wrote there, read once each and
 * checked before an answer takes them.
 *
 * It never takes or gives back staging (call.c does), never touches a
 * ring, and trusts no result kvsd wrote: proto/tables.c decodes each.
 */
#include <stdint.h>
#include <string.h>

#include "client/tables.h"
#include "kernels/array.h"
#include "proto/tables.h"

int kvs__client_table_make(struct kvs__client *c, kvs__fill_fn fill, const void *ctx, int n,
                           int t, uint64_t off, struct kvs__answers *ans, struct kvs__sqe *q,
                           uint64_t *res)
{
    int begin = t * KVS__TABLE_MAX, end = begin + KVS__TABLE_MAX < n ? begin + KVS__TABLE_MAX : n;
    unsigned char *p = c->staging + off;

    for (int i = begin; i < end; i++) {
        struct kvs__sqe s;

        fill(ctx, i, &s);
        /* Entries say which lie in this process's memory; the slot, that
         * some do. */
        if (i == begin)
            *q = (struct kvs__sqe){ .op = s.op, .flags = s.flags | KVS__SQE_TABLE,
                                    .priority = s.priority, .arg = (uint64_t)(end - begin) };
        else if (s.op != q->op
                 || ((s.flags ^ q->flags) & ~(KVS__SQE_TABLE | KVS__SQE_REMOTE)) != 0
                 || s.priority != q->priority)
            return KVS_EPROTO;
        q->flags |= s.flags & KVS__SQE_REMOTE;
        if ((s.flags & KVS__SQE_STRKEY)
            || (s.op != KVS__OP_INIT && s.op != KVS__OP_PUSH && s.op != KVS__OP_PULL))
            return KVS_EPROTO;
        ans->a[i].value_len = 0;
        if (s.op == KVS__OP_PULL || (s.flags & KVS__SQE_VALUE)) {
            kvs_array_t a = { .dtype = s.dtype, .ndim = s.ndim };

            memcpy(a.shape, s.shape, sizeof a.shape[0] * (size_t)s.ndim);
            ans->a[i].value_len = kvs__array_count(&a) * kvs_dtype_size(s.dtype);
        }
        p += kvs__tab_entry_encode(&s, p);
    }
    *res = (uint64_t)(p - c->staging);
    q->data_off = off;
    q->data_len = *res - off + (uint64_t)(end - begin) * KVS__TAB_RESULT_BYTES;
    return 0;
}

int kvs__client_table_answers(struct kvs__client *c, struct kvs__answers *ans, int nreq, int t,
                              uint64_t res_off, const struct kvs__cqe *q, struct kvs__err *e)
{
    int begin = t * KVS__TABLE_MAX, end = begin + KVS__TABLE_MAX < nreq
                                              ? begin + KVS__TABLE_MAX : nreq;
    const unsigned char *res = c->staging + res_off;

    for (int i = begin; i < end; i++, res += KVS__TAB_RESULT_BYTES) {
        struct kvs__answer *a = &ans->a[i];
        int32_t status = 0;
        uint64_t off = 0;
        int rc;

        if (!(q->flags & KVS__CQE_HELD)
            && (rc = kvs__tab_result_decode(res, c->arena_size, a->value_len, &status, &off,
                                            e)) != 0)
            return rc;
        a->status = status;
        a->value_off = off;
        a->round = 0;
        a->flags = 0;                  /* a table's values are never written in place */
        if (status != 0 && (ans->failed < 0 || i < ans->failed)) {
            ans->failed = i;
            memcpy(ans->msg, q->msg, sizeof ans->msg);
        }
    }
    return 0;
}
