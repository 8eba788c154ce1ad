/*
 * tables.c - the byte layouts of a table in staging, what one request
 * slot with KVS__SQE_TABLE stands for: the worker's entries (a key, a
 * dtype, a shape, where the data lies) and the results kvsd writes back.
 *
 * Fixed little-endian offsets, unused bytes zero, as slots.c's. A decoder
 * reads each entry or result once (the worker may be rewriting its
 * staging) and checks what kvs__sqe_decode checks of a slot. It never
 * reads past the bytes of the table it was given, and never allocates.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/bytes.h"
#include "proto/tables.h"

/* A table's entry: KVS__TAB_ENTRY_BYTES(ndim) bytes */
enum {
    T_KEY_ID = 0,      /* i64 */
    T_DTYPE = 8,       /* u8 */
    T_NDIM = 9,        /* u8 */
    T_FLAGS = 10,      /* u8, KVS__TAB_* */
    T_RSV0 = 11,       /* 5 bytes, zero */
    T_DATA_OFF = 16,   /* u64; PULL: zero */
    T_SHAPE = 24,      /* ndim i64 */
};

/* A table's result: KVS__TAB_RESULT_BYTES */
enum {
    U_STATUS = 0,      /* i32 */
    U_RSV0 = 4,        /* u32, zero */
    U_VALUE_OFF = 8,   /* u64 */
};

_Static_assert(T_SHAPE == KVS__TAB_ENTRY_BYTES(0), "a table entry's head has another size");
_Static_assert(U_VALUE_OFF + 8 == KVS__TAB_RESULT_BYTES, "a table result has another size");

size_t kvs__tab_entry_encode(const struct kvs__sqe *s, void *p)
{
    unsigned char *m = p;
    int ndim = s->ndim < 0 ? 0 : s->ndim > KVS_MAX_NDIM ? KVS_MAX_NDIM : s->ndim;

    memset(m, 0, T_SHAPE);
    put_i64(m, T_KEY_ID, s->key_id);
    put_u8(m, T_DTYPE, (uint8_t)s->dtype);
    put_u8(m, T_NDIM, (uint8_t)ndim);
    put_u8(m, T_FLAGS, s->flags & KVS__SQE_REMOTE ? KVS__TAB_REMOTE : 0);
    put_u64(m, T_DATA_OFF, s->data_off);
    for (int d = 0; d < ndim; d++)
        put_i64(m, T_SHAPE + 8 * (size_t)d, s->shape[d]);
    return KVS__TAB_ENTRY_BYTES(ndim);
}

int kvs__tab_entry_decode(const void *p, size_t avail, uint8_t op, uint8_t flags,
                          uint64_t staging_size, struct kvs__tab_entry *t, size_t *used,
                          struct kvs__err *e)
{
    unsigned char m[KVS__TAB_ENTRY_BYTES(KVS_MAX_NDIM)];
    const char *name = kvs__op_name(op);
    int64_t bytes;
    uint64_t end;
    size_t n;
    int rc;

    if (!name || !kvs__op_has_array(op))
        return kvs__fail(e, KVS_EPROTO, "a table of op %u", (unsigned)op);
    if (avail < T_SHAPE)
        return kvs__fail(e, KVS_EPROTO, "table (%s): an entry in %zu bytes", name, avail);
    copy_once(m, p, T_SHAPE);
    t->ndim = get_u8(m, T_NDIM);
    if (t->ndim > KVS_MAX_NDIM)
        return kvs__fail(e, KVS_EPROTO, "table (%s): ndim %d, at most %d", name, t->ndim,
                         KVS_MAX_NDIM);
    n = KVS__TAB_ENTRY_BYTES(t->ndim);
    if (avail < n)
        return kvs__fail(e, KVS_EPROTO, "table (%s): an entry of %zu bytes in %zu", name, n,
                         avail);
    /* The shape follows the head: read once too, never the head again. */
    copy_once(m + T_SHAPE, (const unsigned char *)p + T_SHAPE, n - T_SHAPE);
    t->key_id = get_i64(m, T_KEY_ID);
    t->dtype = (kvs_dtype_t)get_u8(m, T_DTYPE);
    t->data_off = get_u64(m, T_DATA_OFF);
    t->flags = get_u8(m, T_FLAGS);
    if (!zeros(m, T_RSV0, T_DATA_OFF - T_RSV0))
        return kvs__fail(e, KVS_EPROTO, "table (%s): reserved bytes are not zero", name);
    if ((t->flags & ~KVS__TAB_REMOTE) != 0
        || ((t->flags & KVS__TAB_REMOTE) && !(flags & KVS__SQE_REMOTE)))
        return kvs__fail(e, KVS_EPROTO, "table (%s): an entry's flags 0x%02x", name,
                         (unsigned)t->flags);
    for (int d = 0; d < t->ndim; d++) {
        t->shape[d] = get_i64(m, T_SHAPE + 8 * (size_t)d);
        if (t->shape[d] < 0)
            return kvs__fail(e, KVS_EPROTO, "table (%s): extent %" PRId64 " in dimension %d",
                             name, t->shape[d], d);
    }
    if ((rc = kvs__value_size(t->dtype, t->ndim, t->shape, &bytes)) != 0) {
        char what[32];

        snprintf(what, sizeof what, "table (%s)", name);
        return kvs__size_fail(e, rc, what, (int)t->dtype);
    }
    t->data_len = op == KVS__OP_PULL ? 0 : (uint64_t)bytes;
    if (op == KVS__OP_PULL && t->data_off != 0)
        return kvs__fail(e, KVS_EPROTO, "table (PULL): data at %" PRIu64, t->data_off);
    if (__builtin_add_overflow(t->data_off, t->data_len, &end)
        || (!(t->flags & KVS__TAB_REMOTE) && end > staging_size))
        return kvs__fail(e, KVS_EPROTO, "table (%s): data %" PRIu64 "+%" PRIu64 " outside the "
                         "staging area of %" PRIu64 " bytes", name, t->data_off, t->data_len,
                         staging_size);
    *used = n;
    return 0;
}

void kvs__tab_result_encode(void *p, int32_t status, uint64_t value_off)
{
    unsigned char *m = p;

    put_i32(m, U_STATUS, status);
    put_u32(m, U_RSV0, 0);
    put_u64(m, U_VALUE_OFF, value_off);
}

int kvs__tab_result_decode(const void *p, uint64_t arena_size, uint64_t value_len,
                           int32_t *status, uint64_t *value_off, struct kvs__err *e)
{
    unsigned char m[KVS__TAB_RESULT_BYTES];
    int32_t s;
    uint64_t off;

    copy_once(m, p, sizeof m);
    s = get_i32(m, U_STATUS);
    off = get_u64(m, U_VALUE_OFF);
    if (!kvs__status_ok(s) || get_u32(m, U_RSV0) != 0)
        return kvs__fail(e, KVS_EPROTO, "a table's result: status %" PRId32 " or reserved "
                         "bytes", s);
    if (s == 0 && value_len && (off > arena_size || value_len > arena_size - off))
        return kvs__fail(e, KVS_EPROTO, "a table's result: value %" PRIu64 "+%" PRIu64
                         " outside the arena of %" PRIu64 " bytes", off, value_len, arena_size);
    *status = s;
    *value_off = off;
    return 0;
}
