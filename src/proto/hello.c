/*
 * hello.c - the byte layouts of a worker's handshake with kvsd on the
 * socket: the hello it sends first, and kvsd's welcome, which says where
 * its rings and staging lie in the segments whose descriptors come with
 * it.
 *
 * Every field sits at a fixed offset, little-endian, written and read a
 * byte at a time, so the layout does not depend on the compiler's struct
 * padding or the host's byte order. Bytes no field uses must be zero, so
 * every valid message has exactly one encoding and a later version can
 * give them a meaning.
 *
 * It must never trust a byte twice: a decoder copies the message into a
 * local buffer once, parses only that copy, and checks every field before
 * its caller sees it. It never reads outside the message it was given,
 * and never allocates; it never maps or opens what a welcome describes.
 */
#include <inttypes.h>
#include <string.h>

#include "base/bytes.h"
#include "proto/hello.h"
#include "shm/shm.h"

/* hello: 128 bytes */
enum {
    H_MAGIC = 0,       /* u32 */
    H_TYPE = 4,        /* u8 */
    H_MODE = 5,        /* u8 */
    H_RSV0 = 6,        /* u16, zero */
    H_VERSION = 8,     /* u32 */
    H_RANK = 12,       /* i32 */
    H_NWORKERS = 16,   /* i32 */
    H_JOB = 20,        /* KVS__JOB_MAX + 1 bytes, NUL-terminated, zero after the NUL */
    H_RSV1 = H_JOB + KVS__JOB_MAX + 1,  /* zero up to H_PROBE */
    H_PROBE = 88,      /* u64 */
    H_COOKIE = 96,     /* KVS__COOKIE_BYTES */
    H_RSV2 = H_COOKIE + KVS__COOKIE_BYTES,  /* zero up to the end */
};

/* welcome: 288 bytes */
enum {
    W_MAGIC = 0,       /* u32 */
    W_TYPE = 4,        /* u8 */
    W_RSV0 = 5,        /* 3 bytes, zero */
    W_VERSION = 8,     /* u32 */
    W_STATUS = 12,     /* i32 */
    W_WORKER = 16,     /* u32 */
    W_SQ_ENTRIES = 20, /* u32 */
    W_CQ_ENTRIES = 24, /* u32 */
    W_FLAGS = 28,      /* u32, KVS__WELCOME_* */
    W_CONTROL_SIZE = 32,
    W_SEG_SIZE = 40,
    W_ARENA_SIZE = 48,
    W_STAGING_OFF = 56,
    W_STAGING_SIZE = 64, /* the five u64 */
    W_MSG = 72,        /* KVS__MSG_MAX bytes, NUL-terminated, zero after the NUL */
    W_COMBINE_SIZE = W_MSG + KVS__MSG_MAX,  /* u64 */
    W_RESUME_STEP = W_COMBINE_SIZE + 8, /* i64 as u64, >= -1 */
    W_RSV2 = W_RESUME_STEP + 8,         /* zero up to the end */
};

_Static_assert(H_RSV1 <= H_PROBE && H_RSV2 <= KVS__HELLO_BYTES,
               "hello layout overflows its size");
_Static_assert(W_RSV2 <= KVS__WELCOME_BYTES, "welcome layout overflows its size");

static int pow2(uint32_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

/* ---- hello -------------------------------------------------------------- */

size_t kvs__hello_encode(const struct kvs__hello *h, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, KVS__HELLO_BYTES);
    put_u32(p, H_MAGIC, KVS__PROTO_MAGIC);
    put_u8(p, H_TYPE, KVS__MSG_HELLO);
    put_u8(p, H_MODE, h->mode);
    put_u32(p, H_VERSION, h->version);
    put_i32(p, H_RANK, h->rank);
    put_i32(p, H_NWORKERS, h->nworkers);
    put_text(p, H_JOB, KVS__JOB_MAX + 1, h->job);
    put_u64(p, H_PROBE, h->probe);
    memcpy(p + H_COOKIE, h->cookie, KVS__COOKIE_BYTES);
    return KVS__HELLO_BYTES;
}

int kvs__hello_decode(const void *buf, size_t len, struct kvs__hello *h, struct kvs__err *e)
{
    unsigned char m[KVS__HELLO_BYTES];
    struct kvs__hello t;
    struct kvs__err je;
    int rc;

    if (buf == NULL)
        return kvs__fail(e, KVS_EPROTO, "hello: no message");
    copy_once(m, buf, len < sizeof m ? len : sizeof m);
    if ((rc = kvs__msg_head_check(m, len, KVS__HELLO_BYTES, KVS__MSG_HELLO, "hello", e)) != 0)
        return rc;
    if (get_u16(m, H_RSV0) != 0 || !zeros(m, H_RSV1, H_PROBE - H_RSV1)
        || !zeros(m, H_RSV2, KVS__HELLO_BYTES - H_RSV2))
        return kvs__fail(e, KVS_EPROTO, "hello: reserved bytes are not zero");

    memset(&t, 0, sizeof t);
    t.version = get_u32(m, H_VERSION);
    t.mode = get_u8(m, H_MODE);
    t.rank = get_i32(m, H_RANK);
    t.nworkers = get_i32(m, H_NWORKERS);
    t.probe = get_u64(m, H_PROBE);
    memcpy(t.cookie, m + H_COOKIE, KVS__COOKIE_BYTES);
    if (!t.probe && !zeros(m, H_COOKIE, KVS__COOKIE_BYTES))
        return kvs__fail(e, KVS_EPROTO, "hello: a cookie without a probe address");
    if (t.mode != KVS__MODE_SYNC && t.mode != KVS__MODE_ASYNC)
        return kvs__fail(e, KVS_EPROTO, "hello: unknown mode %u", (unsigned)t.mode);
    if (t.nworkers < 1 || t.nworkers > 1024)
        return kvs__fail(e, KVS_EPROTO, "hello: %" PRId32 " workers, expected 1 to 1024",
                         t.nworkers);
    if (t.rank < 0 || t.rank >= t.nworkers)
        return kvs__fail(e, KVS_EPROTO, "hello: rank %" PRId32 " outside [0, %" PRId32 ")",
                         t.rank, t.nworkers);
    if (get_text(m, H_JOB, KVS__JOB_MAX + 1, t.job) < 0)
        return kvs__fail(e, KVS_EPROTO, "hello: job name not NUL-terminated");
    if (kvs__job_name_check(t.job, &je) != 0)
        return kvs__fail(e, KVS_EPROTO, "hello: %s", je.msg);
    *h = t;
    return 0;
}

/* ---- welcome ------------------------------------------------------------ */

size_t kvs__welcome_encode(const struct kvs__welcome *w, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, KVS__WELCOME_BYTES);
    put_u32(p, W_MAGIC, KVS__PROTO_MAGIC);
    put_u8(p, W_TYPE, KVS__MSG_WELCOME);
    put_u32(p, W_VERSION, w->version);
    put_i32(p, W_STATUS, w->status);
    put_u32(p, W_WORKER, w->worker);
    put_u32(p, W_SQ_ENTRIES, w->sq_entries);
    put_u32(p, W_CQ_ENTRIES, w->cq_entries);
    put_u32(p, W_FLAGS, w->flags);
    put_u64(p, W_CONTROL_SIZE, w->control_size);
    put_u64(p, W_SEG_SIZE, w->seg_size);
    put_u64(p, W_ARENA_SIZE, w->arena_size);
    put_u64(p, W_STAGING_OFF, w->staging_off);
    put_u64(p, W_STAGING_SIZE, w->staging_size);
    put_text(p, W_MSG, KVS__MSG_MAX, w->msg);
    put_u64(p, W_COMBINE_SIZE, w->combine_size);
    put_u64(p, W_RESUME_STEP, (uint64_t)w->resume_step);
    return KVS__WELCOME_BYTES;
}

int kvs__welcome_decode(const void *buf, size_t len, struct kvs__welcome *w,
                        struct kvs__err *e)
{
    unsigned char m[KVS__WELCOME_BYTES];
    struct kvs__welcome t;
    uint64_t end;
    int rc;

    if (buf == NULL)
        return kvs__fail(e, KVS_EPROTO, "welcome: no message");
    copy_once(m, buf, len < sizeof m ? len : sizeof m);
    if ((rc = kvs__msg_head_check(m, len, KVS__WELCOME_BYTES, KVS__MSG_WELCOME, "welcome", e)) != 0)
        return rc;
    if (!zeros(m, W_RSV0, 3) || (get_u32(m, W_FLAGS) & ~(KVS__WELCOME_REMOTE | KVS__WELCOME_COMBINE |
                                     KVS__WELCOME_RECOVER)) != 0 ||
        !zeros(m, W_RSV2, KVS__WELCOME_BYTES - W_RSV2))
        return kvs__fail(e, KVS_EPROTO, "welcome: reserved bytes are not zero");

    memset(&t, 0, sizeof t);
    t.version = get_u32(m, W_VERSION);
    t.status = get_i32(m, W_STATUS);
    t.worker = get_u32(m, W_WORKER);
    t.sq_entries = get_u32(m, W_SQ_ENTRIES);
    t.cq_entries = get_u32(m, W_CQ_ENTRIES);
    t.flags = get_u32(m, W_FLAGS);
    t.control_size = get_u64(m, W_CONTROL_SIZE);
    t.seg_size = get_u64(m, W_SEG_SIZE);
    t.arena_size = get_u64(m, W_ARENA_SIZE);
    t.staging_off = get_u64(m, W_STAGING_OFF);
    t.staging_size = get_u64(m, W_STAGING_SIZE);
    t.combine_size = get_u64(m, W_COMBINE_SIZE);
    t.resume_step = (int64_t)get_u64(m, W_RESUME_STEP);
    if (t.resume_step < -1)
        return kvs__fail(e, KVS_EPROTO, "welcome: resume step %" PRId64 " < -1", t.resume_step);
    if (!kvs__status_ok(t.status))
        return kvs__fail(e, KVS_EPROTO, "welcome: status %" PRId32 " is not an error code",
                         t.status);
    if (get_text(m, W_MSG, KVS__MSG_MAX, t.msg) < 0)
        return kvs__fail(e, KVS_EPROTO, "welcome: message not NUL-terminated");
    /* A refusal carries no geometry: the worker maps nothing. */
    if (t.status == 0) {
        if (!pow2(t.sq_entries) || !pow2(t.cq_entries))
            return kvs__fail(e, KVS_EPROTO, "welcome: ring sizes %" PRIu32 "/%" PRIu32
                             " are not powers of two", t.sq_entries, t.cq_entries);
        if (t.control_size == 0 || t.seg_size == 0 || t.arena_size == 0)
            return kvs__fail(e, KVS_EPROTO, "welcome: a segment of size 0");
        if ((t.combine_size != 0) != ((t.flags & KVS__WELCOME_COMBINE) != 0))
            return kvs__fail(e, KVS_EPROTO, "welcome: a combine area of %" PRIu64 " bytes "
                             "with flags 0x%" PRIx32, t.combine_size, t.flags);
        if (__builtin_add_overflow(t.staging_off, t.staging_size, &end) || end > t.seg_size)
            return kvs__fail(e, KVS_EPROTO, "welcome: staging %" PRIu64 "+%" PRIu64
                             " outside the segment of %" PRIu64 " bytes",
                             t.staging_off, t.staging_size, t.seg_size);
    }
    *w = t;
    return 0;
}
