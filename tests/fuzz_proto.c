/*
 * fuzz_proto.c - a libFuzzer target for the decoders of src/proto/. Each
 * input is offered to all of them: as a hello, a welcome, a control request
 * and a control reply (its exact length; kvs__msg_type must name what its
 * head says), and, cut or zero-padded to a slot, as an SQE and a CQE under
 * a few staging/arena sizes (and one taken from the bytes after the slot),
 * and whole as a table's entries (of each op) and as a table's result.
 * Whatever a decoder accepts must keep the promises its callers rely on,
 * re-encode to the very bytes it came from, and decode again to the same
 * struct.
 *
 * Built with -fsanitize=fuzzer, libFuzzer supplies main. Built with
 * -DKVS_FUZZ_MAIN instead, it is a plain program: with "--seeds DIR" it
 * writes valid encodings into DIR as a starting corpus; with files, it
 * runs each through the target; with neither, it runs the seeds and a
 * fixed sequence of mutations of them (a quick regression run).
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Not assert(): a release build must still stop on a broken promise. */
#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static int hello_eq(const struct kvs__hello *a, const struct kvs__hello *b)
{
    return a->version == b->version && a->mode == b->mode && a->rank == b->rank &&
           a->nworkers == b->nworkers && strcmp(a->job, b->job) == 0 &&
           a->probe == b->probe && memcmp(a->cookie, b->cookie, sizeof a->cookie) == 0;
}

static int welcome_eq(const struct kvs__welcome *a, const struct kvs__welcome *b)
{
    return a->version == b->version && a->status == b->status && a->worker == b->worker &&
           a->control_size == b->control_size && a->seg_size == b->seg_size &&
           a->arena_size == b->arena_size && a->sq_entries == b->sq_entries &&
           a->cq_entries == b->cq_entries && a->staging_off == b->staging_off &&
           a->staging_size == b->staging_size && strcmp(a->msg, b->msg) == 0;
}

static int sqe_eq(const struct kvs__sqe *a, const struct kvs__sqe *b)
{
    if (a->op != b->op || a->flags != b->flags || a->dtype != b->dtype || a->ndim != b->ndim ||
        a->priority != b->priority || a->seq != b->seq || a->key_id != b->key_id ||
        a->key_len != b->key_len || a->data_off != b->data_off ||
        a->data_len != b->data_len || a->arg != b->arg)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return memcmp(a->key_name, b->key_name, (size_t)a->key_len + 1) == 0;
}

static int cqe_eq(const struct kvs__cqe *a, const struct kvs__cqe *b)
{
    return a->seq == b->seq && a->status == b->status && a->value_off == b->value_off &&
           a->value_len == b->value_len && a->round == b->round && a->flags == b->flags &&
           strcmp(a->msg, b->msg) == 0;
}

static void hello_one(const uint8_t *data, size_t size)
{
    struct kvs__hello h, h2;
    struct kvs__err e;
    unsigned char re[KVS__HELLO_BYTES];

    if (kvs__hello_decode(data, size, &h, &e) != 0) {
        CHECK(e.code == KVS_EPROTO);
        return;
    }
    CHECK(size == KVS__HELLO_BYTES);
    CHECK(h.version == KVS__PROTO_VERSION);
    CHECK(h.mode == KVS__MODE_SYNC || h.mode == KVS__MODE_ASYNC);
    CHECK(h.nworkers >= 1 && h.nworkers <= 1024 && h.rank >= 0 && h.rank < h.nworkers);
    CHECK(strlen(h.job) >= 1 && strlen(h.job) <= KVS__JOB_MAX);
    CHECK(kvs__hello_encode(&h, re) == KVS__HELLO_BYTES);
    CHECK(memcmp(re, data, KVS__HELLO_BYTES) == 0);
    CHECK(kvs__hello_decode(re, sizeof re, &h2, &e) == 0);
    CHECK(hello_eq(&h, &h2));
}

static void welcome_one(const uint8_t *data, size_t size)
{
    struct kvs__welcome w, w2;
    struct kvs__err e;
    unsigned char re[KVS__WELCOME_BYTES];

    if (kvs__welcome_decode(data, size, &w, &e) != 0) {
        CHECK(e.code == KVS_EPROTO);
        return;
    }
    CHECK(size == KVS__WELCOME_BYTES);
    CHECK(kvs__status_ok(w.status));
    CHECK(strlen(w.msg) < KVS__MSG_MAX);
    if (w.status == 0) {
        CHECK(w.staging_off <= w.seg_size && w.staging_size <= w.seg_size - w.staging_off);
        CHECK(w.sq_entries != 0 && (w.sq_entries & (w.sq_entries - 1)) == 0);
        CHECK(w.cq_entries != 0 && (w.cq_entries & (w.cq_entries - 1)) == 0);
    }
    CHECK(kvs__welcome_encode(&w, re) == KVS__WELCOME_BYTES);
    CHECK(memcmp(re, data, KVS__WELCOME_BYTES) == 0);
    CHECK(kvs__welcome_decode(re, sizeof re, &w2, &e) == 0);
    CHECK(welcome_eq(&w, &w2));
}

static void ctl_request_one(const uint8_t *data, size_t size)
{
    struct kvs__ctl_request q, q2;
    struct kvs__err e;
    unsigned char re[KVS__CTL_REQUEST_BYTES];

    if (kvs__ctl_request_decode(data, size, &q, &e) != 0) {
        CHECK(e.code == KVS_EPROTO);
        return;
    }
    CHECK(size == KVS__CTL_REQUEST_BYTES);
    CHECK(kvs__msg_type(data, size) == KVS__MSG_CTL_REQUEST);
    CHECK(q.version == KVS__PROTO_VERSION);
    CHECK(kvs__ctl_command_name(q.command) != NULL);
    CHECK(strlen(q.job) >= 1 && strlen(q.job) <= KVS__JOB_MAX);
    CHECK(kvs__ctl_request_encode(&q, re) == KVS__CTL_REQUEST_BYTES);
    CHECK(memcmp(re, data, KVS__CTL_REQUEST_BYTES) == 0);
    CHECK(kvs__ctl_request_decode(re, sizeof re, &q2, &e) == 0);
    CHECK(q.version == q2.version && q.command == q2.command && strcmp(q.job, q2.job) == 0);
}

/* The reply is big: both structs and the re-encoding are static (the
 * target runs on one thread), not fresh memory for every input. */
static void ctl_reply_one(const uint8_t *data, size_t size)
{
    static struct kvs__ctl_reply r_, r2_;
    static unsigned char re[KVS__CTL_REPLY_MAX];
    struct kvs__ctl_reply *r = &r_, *r2 = &r2_;
    struct kvs__err e;

    if (kvs__ctl_reply_decode(data, size, r, &e) != 0) {
        CHECK(e.code == KVS_EPROTO);
        return;
    }
    CHECK(kvs__msg_type(data, size) == KVS__MSG_CTL_REPLY);
    CHECK(r->version == KVS__PROTO_VERSION);
    CHECK(kvs__status_ok(r->status));
    CHECK(r->len <= KVS__CTL_TEXT_MAX && size == KVS__CTL_REPLY_HEAD + (size_t)r->len);
    CHECK(strlen(r->text) == r->len);
    for (size_t i = 0, k; i < r->len; i += k) {
        k = kvs__ctl_text_char(r->text + i, r->len - i);
        CHECK(k >= 1 && k <= 4);
        /* What a terminal would act on never gets through. */
        CHECK((unsigned char)r->text[i] >= 0x20 || r->text[i] == '\t' || r->text[i] == '\n');
        CHECK((unsigned char)r->text[i] != 0x7f);
    }
    CHECK(kvs__ctl_reply_encode(r, re) == size);
    CHECK(memcmp(re, data, size) == 0);
    CHECK(kvs__ctl_reply_decode(re, size, r2, &e) == 0);
    CHECK(r->version == r2->version && r->status == r2->status && r->len == r2->len &&
          memcmp(r->text, r2->text, (size_t)r->len + 1) == 0);
}

static void sqe_one(const unsigned char *slot, uint64_t staging)
{
    struct kvs__sqe s, s2;
    struct kvs__err e;
    unsigned char re[KVS__SQE_BYTES];

    if (kvs__sqe_decode(slot, staging, &s, &e) != 0) {
        CHECK(e.code == KVS_EPROTO);
        return;
    }
    CHECK(s.op >= KVS__OP_INIT && s.op <= KVS__OP_COMMIT);
    CHECK((s.flags & ~KVS__SQE_FLAGS) == 0);
    CHECK(!(s.flags & KVS__SQE_VALUE) || s.op == KVS__OP_PUSH);
    CHECK(s.key_len == 0 || (s.flags & KVS__SQE_STRKEY));
    CHECK(s.ndim >= 0 && s.ndim <= KVS_MAX_NDIM);
    CHECK(s.key_len <= KVS_MAX_KEY_LEN && strlen(s.key_name) == s.key_len);
    if (s.flags & KVS__SQE_DEVICE) {
        CHECK(s.op == KVS__OP_INIT || s.op == KVS__OP_PUSH || s.op == KVS__OP_PULL);
        CHECK(!(s.flags & (KVS__SQE_TABLE | KVS__SQE_2BIT)));
        CHECK(s.arg < KVS__DEVBUF_MAX && s.data_len <= UINT64_MAX - s.data_off);
    } else if ((s.flags & KVS__SQE_REMOTE) && !(s.flags & KVS__SQE_TABLE)) {
        /* A pushpull's array in the worker's own memory. */
        CHECK(s.op == KVS__OP_PUSH && (s.flags & KVS__SQE_VALUE));
        CHECK(!(s.flags & KVS__SQE_2BIT) && s.data_len <= UINT64_MAX - s.data_off);
        CHECK(s.data_len <= UINT64_MAX - s.arg);   /* its out, when arg names one */
    } else {
        CHECK(s.data_off <= staging && s.data_len <= staging - s.data_off);
    }
    if (s.op == KVS__OP_REGISTER)
        CHECK(s.arg < KVS__DEVBUF_MAX && s.data_len == KVS__DEVBUF_HANDLE_BYTES);
    if (s.flags & KVS__SQE_TABLE) {
        CHECK(s.op == KVS__OP_INIT || s.op == KVS__OP_PUSH || s.op == KVS__OP_PULL);
        CHECK(!(s.flags & KVS__SQE_STRKEY) && s.key_id == 0 && s.ndim == 0);
        CHECK(s.arg >= 1 && s.arg <= KVS__TABLE_MAX);
        CHECK(s.data_len >= s.arg * (KVS__TAB_ENTRY_BYTES(0) + KVS__TAB_RESULT_BYTES));
    } else if (s.flags & KVS__SQE_ROWS) {
        /* A row-sparse init's or push's ids and rows, or a pull naming no
         * array, with no data or its ids and room after them. */
        CHECK(s.op == KVS__OP_INIT || s.op == KVS__OP_PUSH || s.op == KVS__OP_PULL);
        CHECK(!(s.flags & (KVS__SQE_VALUE | KVS__SQE_2BIT | KVS__SQE_DEVICE | KVS__SQE_REMOTE)));
        if (s.op == KVS__OP_PULL) {
            CHECK(s.dtype == 0 && s.ndim == 0);
            CHECK(s.data_len == 0 ? s.data_off == 0
                                  : s.arg <= s.data_len / 8 && (s.data_off & 7) == 0);
        } else {
            int64_t row = (int64_t)kvs_dtype_size(s.dtype), total;

            CHECK(s.ndim >= 1 && row != 0 && s.arg <= (uint64_t)INT64_MAX);
            for (int d = 1; d < s.ndim; d++)
                row = s.shape[d] == 0 ? 0 : row;
            for (int d = 1; d < s.ndim && row != 0; d++)
                CHECK(!__builtin_mul_overflow(row, s.shape[d], &row));
            CHECK(!__builtin_mul_overflow((int64_t)s.arg, row + 8, &total));
            CHECK((uint64_t)total == s.data_len);
        }
    } else if (s.op == KVS__OP_INIT || s.op == KVS__OP_PUSH || s.op == KVS__OP_PULL) {
        int64_t count = 1, bytes;

        CHECK(kvs_dtype_size(s.dtype) != 0);
        for (int d = 0; d < s.ndim; d++)
            CHECK(s.shape[d] >= 0);
        /* Counted from the other end, with zeros first: the decoder's
         * answer must not depend on the order of the extents. */
        for (int d = s.ndim - 1; d >= 0; d--)
            if (s.shape[d] == 0)
                count = 0;
        for (int d = s.ndim - 1; d >= 0 && count != 0; d--)
            CHECK(!__builtin_mul_overflow(count, s.shape[d], &count));
        CHECK(!__builtin_mul_overflow(count, (int64_t)kvs_dtype_size(s.dtype), &bytes));
        if (s.flags & KVS__SQE_2BIT) {
            float t = kvs__arg_threshold(s.arg);

            CHECK(s.op == KVS__OP_PUSH && s.dtype == KVS_FLOAT32 && isfinite(t) && t > 0);
            CHECK(s.data_len == 4 * (uint64_t)((count + 15) / 16));
        } else if (s.op != KVS__OP_PULL || (s.flags & KVS__SQE_DEVICE)) {
            CHECK((uint64_t)bytes == s.data_len);
        }
    }
    if (s.op >= KVS__OP_SET_OPTIMIZER && s.op <= KVS__OP_LOAD_STATES)
        CHECK(s.data_len >= 1 && s.data_len <= 4095);
    kvs__sqe_encode(&s, re);
    CHECK(memcmp(re, slot, KVS__SQE_BYTES) == 0);
    CHECK(kvs__sqe_decode(re, staging, &s2, &e) == 0);
    CHECK(sqe_eq(&s, &s2));
}

static void cqe_one(const unsigned char *slot, uint64_t arena)
{
    struct kvs__cqe c, c2;
    struct kvs__err e;
    unsigned char re[KVS__CQE_BYTES];

    if (kvs__cqe_decode(slot, arena, &c, &e) != 0) {
        CHECK(e.code == KVS_EPROTO);
        return;
    }
    CHECK(kvs__status_ok(c.status));
    CHECK((c.flags & ~(uint32_t)KVS__CQE_FLAGS) == 0);
    CHECK(!(c.flags & (KVS__CQE_HELD | KVS__CQE_ROWS | KVS__CQE_WRITTEN)) || c.status == 0);
    CHECK(!(c.flags & KVS__CQE_WRITTEN)
          || !(c.flags & (KVS__CQE_HELD | KVS__CQE_RELEASE | KVS__CQE_ROWS)));
    CHECK(!(c.flags & KVS__CQE_ROWS) || !(c.flags & (KVS__CQE_HELD | KVS__CQE_RELEASE)));
    CHECK(strlen(c.msg) < KVS__MSG_MAX);
    CHECK(c.value_off <= arena && c.value_len <= arena - c.value_off);
    kvs__cqe_encode(&c, re);
    CHECK(memcmp(re, slot, KVS__CQE_BYTES) == 0);
    CHECK(kvs__cqe_decode(re, arena, &c2, &e) == 0);
    CHECK(cqe_eq(&c, &c2));
}

/* A table's entries, read one after another as kvsd reads them (for
 * requests of op, in staging bytes of staging), and a table's result. */
static void table_one(const uint8_t *data, size_t size, uint8_t op, uint8_t flags,
                      uint64_t staging)
{
    unsigned char re[KVS__TAB_ENTRY_BYTES(KVS_MAX_NDIM)];
    struct kvs__tab_entry t;
    struct kvs__err e;
    size_t used;

    while (size > 0) {
        struct kvs__sqe s = { .op = op };

        if (kvs__tab_entry_decode(data, size, op, flags, staging, &t, &used, &e) != 0) {
            CHECK(e.code == KVS_EPROTO);
            break;
        }
        CHECK(used == KVS__TAB_ENTRY_BYTES(t.ndim) && used <= size);
        CHECK(t.ndim >= 0 && t.ndim <= KVS_MAX_NDIM && kvs_dtype_size(t.dtype) != 0);
        for (int d = 0; d < t.ndim; d++)
            CHECK(t.shape[d] >= 0);
        /* A remote entry's data lies in the worker's memory: no overflow. */
        CHECK((t.flags & ~KVS__TAB_REMOTE) == 0);
        CHECK(!(t.flags & KVS__TAB_REMOTE) || (flags & KVS__SQE_REMOTE));
        if (t.flags & KVS__TAB_REMOTE)
            CHECK(t.data_len <= UINT64_MAX - t.data_off);
        else
            CHECK(t.data_off <= staging && t.data_len <= staging - t.data_off);
        CHECK(op != KVS__OP_PULL || (t.data_off == 0 && t.data_len == 0));
        s.key_id = t.key_id;
        s.dtype = t.dtype;
        s.ndim = t.ndim;
        memcpy(s.shape, t.shape, sizeof s.shape);
        s.data_off = t.data_off;
        s.flags = t.flags & KVS__TAB_REMOTE ? KVS__SQE_REMOTE : 0;
        CHECK(kvs__tab_entry_encode(&s, re) == used && memcmp(re, data, used) == 0);
        data += used;
        size -= used;
    }
}

static void result_one(const uint8_t *data, size_t size, uint64_t arena, uint64_t value_len)
{
    unsigned char re[KVS__TAB_RESULT_BYTES];
    struct kvs__err e;
    uint64_t off;
    int32_t st;

    if (size < KVS__TAB_RESULT_BYTES)
        return;
    if (kvs__tab_result_decode(data, arena, value_len, &st, &off, &e) != 0) {
        CHECK(e.code == KVS_EPROTO);
        return;
    }
    CHECK(kvs__status_ok(st));
    CHECK(st != 0 || value_len == 0 || (off <= arena && value_len <= arena - off));
    kvs__tab_result_encode(re, st, off);
    CHECK(memcmp(re, data, sizeof re) == 0);
}

/* The frames between hosts (wire.h): a head, and every payload decoder on
 * what follows it; whatever decodes encodes back to the same bytes. */
static void wire_one(const uint8_t *msg, size_t size)
{
    struct kvs__frame_head h, h2;
    struct kvs__wire_hello he;
    struct kvs__wire_challenge ch;
    struct kvs__wire_proof pr;
    struct kvs__wire_verdict ve;
    struct kvs__wire_join jo;
    int64_t step;
    static struct kvs__wire_place places[KVS__HOSTS_MAX];
    static unsigned char big[8 + 64 * KVS__HOSTS_MAX];
    struct kvs__wire_msg m;
    struct kvs__err e;
    const uint8_t *pl = size > KVS__WIRE_HEAD ? msg + KVS__WIRE_HEAD : msg;
    size_t plen = size > KVS__WIRE_HEAD ? size - KVS__WIRE_HEAD : size;
    unsigned char re[512];

    if (kvs__frame_head_decode(msg, size < KVS__WIRE_HEAD ? size : KVS__WIRE_HEAD, 0, &h,
                               &e) == 0) {
        CHECK(size >= KVS__WIRE_HEAD && h.host < KVS__HOSTS_MAX);
        CHECK(kvs__frame_payload_bytes(h.type) ? h.len == kvs__frame_payload_bytes(h.type)
                                               : h.len <= KVS__WIRE_PAYLOAD_MAX);
        kvs__frame_head_encode(&h, re);
        CHECK(memcmp(re, msg, KVS__WIRE_HEAD) == 0);
        CHECK(kvs__frame_head_decode(re, KVS__WIRE_HEAD, h.host + 1, &h2, &e) == 0);
        CHECK(h2.type == h.type && h2.host == h.host && h2.len == h.len);
    } else {
        CHECK(e.code == KVS_EPROTO);
    }
    if (kvs__wire_hello_decode(pl, plen, &he, &e) == 0) {
        CHECK(he.nhosts >= 1 && he.nhosts <= KVS__HOSTS_MAX);
        CHECK(he.nworkers >= 1 && he.nworkers <= 1024 && strlen(he.job) <= KVS__JOB_MAX);
        kvs__wire_hello_encode(&he, re);
        CHECK(memcmp(re, pl, plen) == 0);
    }
    if (kvs__wire_challenge_decode(pl, plen, &ch, &e) == 0) {
        kvs__wire_challenge_encode(&ch, re);
        CHECK(memcmp(re, pl, plen) == 0);
    }
    if (kvs__wire_proof_decode(pl, plen, &pr, &e) == 0) {
        kvs__wire_proof_encode(&pr, re);
        CHECK(memcmp(re, pl, plen) == 0);
    }
    if (kvs__wire_verdict_decode(pl, plen, &ve, &e) == 0) {
        CHECK(kvs__status_ok(ve.status) && strlen(ve.msg) < KVS__MSG_MAX);
        kvs__wire_verdict_encode(&ve, re);
        CHECK(memcmp(re, pl, plen) == 0);
    }
    if (kvs__wire_join_decode(pl, plen, &jo, &e) == 0) {
        CHECK(jo.port != 0);
        kvs__wire_join_encode(&jo, re);
        CHECK(memcmp(re, pl, plen) == 0);
    }
    if (plen >= 16 && (plen - 16) % 64 == 0 && (plen - 16) / 64 <= KVS__HOSTS_MAX
        && kvs__wire_roster_decode(pl, plen, (uint32_t)((plen - 16) / 64), places, &step,
                                   &e) == 0) {
        kvs__wire_roster_encode(places, (uint32_t)((plen - 16) / 64), step, big);
        CHECK(memcmp(big, pl, plen) == 0);
    }
    for (int type = KVS__FRAME_PARTIAL; type < KVS__FRAME_TYPES; type++) {
        size_t body;

        if (kvs__wire_msg_decode(type, pl, plen, &m, &e) != 0)
            continue;
        body = kvs__wire_msg_bytes(&m);
        CHECK(body <= plen && m.len == plen - body && (const uint8_t *)m.data == pl + body);
        CHECK(body <= sizeof re);
        kvs__wire_msg_encode(type, &m, re);
        CHECK(memcmp(re, pl, body) == 0);
        if (m.nparts)
            CHECK(m.part < m.nparts && m.nparts <= KVS__HOSTS_MAX
                  && (type == KVS__FRAME_PARTIAL || type == KVS__FRAME_VALUE
                      || type == KVS__FRAME_FORWARD));
        if (m.rows) {                  /* ids ascending, ids and rows inside the data */
            CHECK(type == KVS__FRAME_PARTIAL || type == KVS__FRAME_FORWARD
                  || (type == KVS__FRAME_VALUE && m.status == 0));
            CHECK(!m.rest_zero || type == KVS__FRAME_VALUE);
            CHECK(!m.pieces && m.ndim >= 1 && (const uint8_t *)m.ids == pl + body + 8);
            CHECK((const uint8_t *)m.row_data == (const uint8_t *)m.ids + 8 * m.nnz
                  && (const uint8_t *)m.row_data <= pl + plen);
            for (uint64_t j = 1; j < m.nnz; j++)
                CHECK(m.ids[j] > m.ids[j - 1]);
        }
        if (m.pieces) {
            uint64_t count = 1, first;

            for (int i = 0; i < m.ndim; i++)
                count *= (uint64_t)m.shape[i];
            if (m.nparts)
                kvs__wire_part(count, 4, kvs__wire_row(m.ndim, m.shape), m.nparts, m.part,
                               &first, &count);
            CHECK(m.dtype == KVS_FLOAT32 && m.len == m.pieces * kvs__wire_piece_bytes(count));
            for (uint32_t i = 0; i < m.pieces; i++) {
                const uint32_t *words;
                float t = kvs__wire_piece_get(&m, count, i, &words);

                CHECK(isfinite(t) && t > 0);
                CHECK((const uint8_t *)words >= pl + body
                      && (const uint8_t *)words + 4 * ((count + 15) / 16) <= pl + plen);
            }
        }
    }
}

/* Eight bytes at off as a little-endian size, or fallback when the input
 * is too short to hold them. */
static uint64_t size_at(const uint8_t *data, size_t size, size_t off, uint64_t fallback)
{
    uint64_t v = 0;

    if (size < off + 8)
        return fallback;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | data[off + (size_t)i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint64_t sizes[] = { 0, 4096, (uint64_t)1 << 40, UINT64_MAX };
    /* Heap copies of the exact size, so that ASan sees a read past the end
     * of a message even when the fuzzer's own buffer is bigger. */
    uint8_t *msg = calloc(size ? size : 1, 1);
    unsigned char *sqe = malloc(KVS__SQE_BYTES), *cqe = malloc(KVS__CQE_BYTES);

    CHECK(msg != NULL && sqe != NULL && cqe != NULL);
    if (size > 0)
        memcpy(msg, data, size);
    hello_one(msg, size);
    welcome_one(msg, size);
    ctl_request_one(msg, size);
    ctl_reply_one(msg, size);
    wire_one(msg, size);
    if (size >= 5 && kvs__msg_type(msg, size) != 0)
        CHECK(kvs__msg_type(msg, size) == msg[4]);

    memset(sqe, 0, KVS__SQE_BYTES);
    memcpy(sqe, data, size < KVS__SQE_BYTES ? size : KVS__SQE_BYTES);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        sqe_one(sqe, sizes[i]);
    sqe_one(sqe, size_at(data, size, KVS__SQE_BYTES, 65536));

    memset(cqe, 0, KVS__CQE_BYTES);
    memcpy(cqe, data, size < KVS__CQE_BYTES ? size : KVS__CQE_BYTES);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        cqe_one(cqe, sizes[i]);
    cqe_one(cqe, size_at(data, size, KVS__CQE_BYTES, 1 << 20));

    for (uint8_t op = KVS__OP_INIT; op <= KVS__OP_PULL; op++) {
        table_one(msg, size, op, 0, 4096);
        table_one(msg, size, op, KVS__SQE_REMOTE, 4096);
        table_one(msg, size, op, 0, UINT64_MAX);
    }
    result_one(msg, size, 1 << 20, 0);
    result_one(msg, size, 1 << 20, 64);

    free(cqe);
    free(sqe);
    free(msg);
    return 0;
}

#ifdef KVS_FUZZ_MAIN
/* ---- seeds and the plain-program driver --------------------------------- */

#define NSEEDS_MAX 32

struct seed {
    size_t len;
    unsigned char bytes[KVS__SQE_BYTES + 8];
};

static size_t make_seeds(struct seed *out)
{
    size_t n = 0;
    struct kvs__hello h;
    struct kvs__welcome w;
    struct kvs__ctl_request q;
    struct kvs__ctl_reply *r = calloc(1, sizeof *r);
    struct kvs__cqe c;

    memset(&h, 0, sizeof h);
    h.version = KVS__PROTO_VERSION;
    h.mode = KVS__MODE_ASYNC;
    h.rank = 3;
    h.nworkers = 8;
    strcpy(h.job, "train-job.1");
    out[n].len = kvs__hello_encode(&h, out[n].bytes);
    n++;

    memset(&w, 0, sizeof w);
    w.version = KVS__PROTO_VERSION;
    w.worker = 3;
    w.control_size = 4096;
    w.seg_size = 1 << 20;
    w.arena_size = 1 << 24;
    w.sq_entries = 256;
    w.cq_entries = 256;
    w.staging_off = 1 << 16;
    w.staging_size = (1 << 20) - (1 << 16);
    out[n].len = kvs__welcome_encode(&w, out[n].bytes);
    n++;
    w.status = KVS_EPROTO;
    strcpy(w.msg, "version mismatch");
    out[n].len = kvs__welcome_encode(&w, out[n].bytes);
    n++;

    for (int op = KVS__OP_INIT; op <= KVS__OP_REGISTER; op++) {
        struct kvs__sqe s;

        memset(&s, 0, sizeof s);
        s.op = (uint8_t)op;
        s.seq = (uint64_t)op * 11;
        s.flags = op % 2 ? KVS__SQE_LAST : 0;
        if (op <= KVS__OP_PULL) {
            s.dtype = KVS_FLOAT32;
            s.ndim = 2;
            s.shape[0] = 4;
            s.shape[1] = 8;
            if (op != KVS__OP_PULL) {
                s.data_off = 64;
                s.data_len = 128;
            }
            if (op == KVS__OP_PUSH) {
                s.flags |= KVS__SQE_STRKEY;
                s.key_len = 6;
                strcpy(s.key_name, "weight");
            } else {
                s.key_id = 42;
            }
        } else if (op <= KVS__OP_LOAD_STATES) {
            s.data_len = 32;
            s.arg = op == KVS__OP_SAVE_STATES;
        } else if (op == KVS__OP_REGISTER) {
            s.data_len = KVS__DEVBUF_HANDLE_BYTES;
            s.arg = 7;
        }
        kvs__sqe_encode(&s, out[n].bytes);
        out[n].len = KVS__SQE_BYTES;
        if (op == KVS__OP_INIT) {      /* a seed that names its staging size */
            uint64_t staging = 4096;

            for (int i = 0; i < 8; i++)
                out[n].bytes[KVS__SQE_BYTES + (size_t)i] = (unsigned char)(staging >> (8 * i));
            out[n].len += 8;
        }
        n++;
    }

    {                                  /* a table slot, then its entries */
        struct kvs__sqe s = { .op = KVS__OP_PUSH, .flags = KVS__SQE_TABLE | KVS__SQE_LAST,
                              .seq = 5, .arg = 2, .data_off = 64, .data_len = 112 };
        struct kvs__sqe a = { .op = KVS__OP_PUSH, .key_id = 7, .dtype = KVS_FLOAT16,
                              .ndim = 2, .shape = { 3, 5 }, .data_off = 256 };

        kvs__sqe_encode(&s, out[n].bytes);
        out[n].len = KVS__SQE_BYTES;
        n++;
        out[n].len = kvs__tab_entry_encode(&a, out[n].bytes);
        a.ndim = 0;
        out[n].len += kvs__tab_entry_encode(&a, out[n].bytes + out[n].len);
        n++;
        kvs__tab_result_encode(out[n].bytes, 0, 4096);
        out[n].len = KVS__TAB_RESULT_BYTES;
        n++;
    }

    memset(&c, 0, sizeof c);
    c.seq = 11;
    c.value_off = 4096;
    c.value_len = 128;
    c.round = 7;
    kvs__cqe_encode(&c, out[n].bytes);
    out[n].len = KVS__CQE_BYTES;
    n++;
    c.status = KVS_ESHAPE;
    strcpy(c.msg, "key 7: shape (2,3) does not match stored (4,4)");
    kvs__cqe_encode(&c, out[n].bytes);
    out[n].len = KVS__CQE_BYTES;
    n++;

    for (int k = KVS__CTL_STATUS; k <= KVS__CTL_CHECKPOINT; k++) {
        memset(&q, 0, sizeof q);
        q.version = KVS__PROTO_VERSION;
        q.command = (uint8_t)k;
        strcpy(q.job, k % 2 ? "default" : "train-job.1");
        out[n].len = kvs__ctl_request_encode(&q, out[n].bytes);
        n++;
    }
    /* Replies small enough for a seed: an answer with multi-byte text, an
     * empty one, a refusal. */
    CHECK(r != NULL);
    r->version = KVS__PROTO_VERSION;
    strcpy(r->text, "KEY  DTYPE\n\"w\xc3\xa9\"  float32\t(2,3)\n\xe2\x82\xac\xf0\x9f\x98\x80\n");
    r->len = (uint32_t)strlen(r->text);
    out[n].len = kvs__ctl_reply_encode(r, out[n].bytes);
    n++;
    r->len = 0;
    out[n].len = kvs__ctl_reply_encode(r, out[n].bytes);
    n++;
    r->status = KVS_EBADARG;
    strcpy(r->text, "this kvsd serves job 'a', not 'b'");
    r->len = (uint32_t)strlen(r->text);
    out[n].len = kvs__ctl_reply_encode(r, out[n].bytes);
    n++;
    free(r);
    {
        struct kvs__frame_head fh = { KVS__FRAME_HELLO, 1, 0 };
        struct kvs__wire_hello wh = { .nhosts = 2, .nworkers = 2 };
        struct kvs__wire_verdict wv = { KVS_EBADARG, "this host serves job 'a'" };

        strcpy(wh.job, "job-a");
        memset(wh.nonce, 0xa5, sizeof wh.nonce);
        fh.len = kvs__frame_payload_bytes(KVS__FRAME_HELLO);
        kvs__frame_head_encode(&fh, out[n].bytes);
        kvs__wire_hello_encode(&wh, out[n].bytes + KVS__WIRE_HEAD);
        out[n++].len = KVS__WIRE_HEAD + fh.len;
        fh.type = KVS__FRAME_VERDICT;
        fh.len = kvs__frame_payload_bytes(KVS__FRAME_VERDICT);
        kvs__frame_head_encode(&fh, out[n].bytes);
        kvs__wire_verdict_encode(&wv, out[n].bytes + KVS__WIRE_HEAD);
        out[n++].len = KVS__WIRE_HEAD + fh.len;
    }
    {
        /* A dist_async push's rows: rows 1 and 4 of a (6, 2) float32 key. */
        struct kvs__wire_msg m = { .key = KVS_INT_KEY(7), .dtype = KVS_FLOAT32, .ndim = 2,
                                   .shape = { 6, 2 }, .b = 3, .rows = 1 };
        struct kvs__frame_head fh = { KVS__FRAME_FORWARD, 1, 0 };
        const int64_t ids[2] = { 1, 4 };
        size_t body = kvs__wire_msg_bytes(&m);
        float *rows;

        m.len = kvs__wire_rows_bytes(2, 8);
        fh.len = body + m.len;
        kvs__frame_head_encode(&fh, out[n].bytes);
        kvs__wire_msg_encode(KVS__FRAME_FORWARD, &m, out[n].bytes + KVS__WIRE_HEAD);
        rows = kvs__wire_rows_put(out[n].bytes + KVS__WIRE_HEAD + body, 2, ids);
        for (int i = 0; i < 4; i++)
            rows[i] = 0.25f * (float)i;
        out[n++].len = KVS__WIRE_HEAD + fh.len;
    }
    CHECK(n <= NSEEDS_MAX);
    return n;
}

static int write_seeds(const char *dir)
{
    struct seed *seeds = calloc(NSEEDS_MAX, sizeof *seeds);
    size_t n;

    if (seeds == NULL)
        return 1;
    n = make_seeds(seeds);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        FILE *f;

        snprintf(path, sizeof path, "%s/seed-%02zu", dir, i);
        if ((f = fopen(path, "wb")) == NULL || fwrite(seeds[i].bytes, 1, seeds[i].len, f) !=
            seeds[i].len || fclose(f) != 0) {
            perror(path);
            free(seeds);
            return 1;
        }
    }
    printf("%zu seeds written to %s\n", n, dir);
    free(seeds);
    return 0;
}

static int run_file(const char *path)
{
    static unsigned char buf[1 << 16];
    FILE *f = fopen(path, "rb");
    size_t n;

    if (f == NULL) {
        perror(path);
        return 1;
    }
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

/* Every seed, then each with one to four bytes changed, a million times
 * over, from a fixed generator: the same run every time. */
static int run_mutations(void)
{
    struct seed *seeds = calloc(NSEEDS_MAX, sizeof *seeds);
    unsigned char buf[KVS__SQE_BYTES + 8];
    uint64_t x = 0x2545f4914f6cdd1du;
    size_t n;
    long runs = 0;

    if (seeds == NULL)
        return 1;
    n = make_seeds(seeds);
    for (size_t i = 0; i < n; i++, runs++)
        LLVMFuzzerTestOneInput(seeds[i].bytes, seeds[i].len);
    for (long r = 0; r < 1000000; r++, runs++) {
        const struct seed *s;
        int k;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s = &seeds[x % n];
        memcpy(buf, s->bytes, s->len);
        k = 1 + (int)((x >> 20) % 4);
        for (int j = 0; j < k; j++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[(x >> 8) % s->len] ^= (unsigned char)(1u << ((x >> 4) % 8));
            if ((x >> 40) % 8 == 0)
                buf[(x >> 24) % s->len] = (unsigned char)(x >> 48);
        }
        LLVMFuzzerTestOneInput(buf, s->len);
    }
    printf("%ld inputs, no failure\n", runs);
    free(seeds);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--seeds") == 0)
        return write_seeds(argv[2]);
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            if (run_file(argv[i]) != 0)
                return 1;
        return 0;
    }
    return run_mutations();
}
#endif
