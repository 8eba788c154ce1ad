/*
 * head.c - the head every socket message between a worker (or kvsctl)
 * and kvsd starts with: its magic, type and version, read once and
 * checked before the message's own decoder looks further; and the rule a
 * status read from any message must meet.
 *
 * It knows no message's layout past its head, and never reads outside
 * the bytes it was given.
 */
#include <inttypes.h>

#include "base/bytes.h"
#include "proto/head.h"

/* The head's fields: the same in every socket message. */
enum {
    M_MAGIC = 0,       /* u32 */
    M_TYPE = 4,        /* u8 */
    M_VERSION = 8,     /* u32 */
    M_BYTES = 12,      /* the smallest prefix that tells all three */
};

int kvs__status_ok(int32_t s)
{
    return s == 0 || (s >= -30999 && s <= -30000) || (s >= -4095 && s <= -1);
}

int kvs__msg_head_check(const unsigned char *m, size_t len, size_t want, int type,
                        const char *what, struct kvs__err *e)
{
    uint32_t magic, version;

    if (len < M_BYTES)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, expected %zu", what, len, want);
    magic = get_u32(m, M_MAGIC);
    if (magic != KVS__PROTO_MAGIC)
        return kvs__fail(e, KVS_EPROTO, "%s: bad magic 0x%08" PRIx32 ", expected 0x%08x",
                         what, magic, KVS__PROTO_MAGIC);
    if (get_u8(m, M_TYPE) != type)
        return kvs__fail(e, KVS_EPROTO, "%s: message type %u, expected %d", what,
                         (unsigned)get_u8(m, M_TYPE), type);
    version = get_u32(m, M_VERSION);
    if (version != KVS__PROTO_VERSION)
        return kvs__fail(e, KVS_EPROTO, "%s: protocol version %" PRIu32 ", this is version %u",
                         what, version, KVS__PROTO_VERSION);
    if (len != want)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, expected %zu", what, len, want);
    return 0;
}

int kvs__msg_type(const void *buf, size_t len)
{
    unsigned char m[M_TYPE + 1];

    if (buf == NULL || len < sizeof m)
        return 0;
    copy_once(m, buf, sizeof m);
    if (get_u32(m, M_MAGIC) != KVS__PROTO_MAGIC)
        return 0;
    return get_u8(m, M_TYPE);
}
