/*
 * wire_frame.c - the head of every frame between the kvsd of two hosts
 * (see wire.h): magic, version, type, sender and payload length at fixed
 * little-endian offsets, unused bytes zero, checked before anyone sees
 * them; the frame types' names; and the one copy of a fixed payload.
 *
 * It never reads a payload's fields (the handshake's, the roster's and
 * the messages' files do), and never trusts a length beyond what the
 * frame's type allows.
 */
#include <inttypes.h>
#include <string.h>

#include "base/bytes.h"
#include "proto/wire_frame.h"

/* frame head: 24 bytes */
enum {
    F_MAGIC = 0,       /* u32 */
    F_TYPE = 4,        /* u8 */
    F_RSV0 = 5,        /* 3 bytes, zero (flags, later) */
    F_VERSION = 8,     /* u32 */
    F_HOST = 12,       /* u32 */
    F_LEN = 16,        /* u64 */
};

static const char *const frame_names[KVS__FRAME_TYPES] = {
    [KVS__FRAME_HELLO] = "hello", [KVS__FRAME_CHALLENGE] = "challenge",
    [KVS__FRAME_PROOF] = "proof", [KVS__FRAME_VERDICT] = "verdict",
    [KVS__FRAME_JOIN] = "join", [KVS__FRAME_ROSTER] = "roster",
    [KVS__FRAME_PARTIAL] = "partial", [KVS__FRAME_VALUE] = "value",
    [KVS__FRAME_FORWARD] = "forward", [KVS__FRAME_ARRIVE] = "arrive",
    [KVS__FRAME_DONE] = "done", [KVS__FRAME_OPTIMIZER] = "optimizer",
    [KVS__FRAME_LEFT] = "left", [KVS__FRAME_FAIL] = "fail",
    [KVS__FRAME_HEARTBEAT] = "heartbeat", [KVS__FRAME_BYE] = "bye",
    [KVS__FRAME_STATES_ASK] = "states-ask", [KVS__FRAME_STATES] = "states",
};

const char *kvs__frame_name(int type)
{
    return type > 0 && type < KVS__FRAME_TYPES ? frame_names[type] : "unknown";
}

size_t kvs__frame_payload_bytes(int type)
{
    switch (type) {
    case KVS__FRAME_HELLO:     return KVS__WIRE_HELLO_BYTES;
    case KVS__FRAME_CHALLENGE: return KVS__WIRE_CHALLENGE_BYTES;
    case KVS__FRAME_PROOF:     return KVS__WIRE_PROOF_BYTES;
    case KVS__FRAME_VERDICT:   return KVS__WIRE_VERDICT_BYTES;
    case KVS__FRAME_JOIN:      return KVS__WIRE_JOIN_BYTES;
    default:                   return 0;
    }
}

void kvs__frame_head_encode(const struct kvs__frame_head *h, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, KVS__WIRE_HEAD);
    put_u32(p, F_MAGIC, KVS__WIRE_MAGIC);
    put_u8(p, F_TYPE, h->type);
    put_u32(p, F_VERSION, KVS__WIRE_VERSION);
    put_u32(p, F_HOST, h->host);
    put_u64(p, F_LEN, h->len);
}

int kvs__frame_head_decode(const void *buf, size_t len, uint32_t nhosts,
                           struct kvs__frame_head *h, struct kvs__err *e)
{
    unsigned char m[KVS__WIRE_HEAD];
    struct kvs__frame_head t;
    uint32_t magic, version, limit = nhosts ? nhosts : KVS__HOSTS_MAX;
    size_t want;

    if (buf == NULL || len != KVS__WIRE_HEAD)
        return kvs__fail(e, KVS_EPROTO, "frame: a head of %zu bytes, expected %d",
                         buf ? len : 0, KVS__WIRE_HEAD);
    copy_once(m, buf, sizeof m);
    magic = get_u32(m, F_MAGIC);
    if (magic != KVS__WIRE_MAGIC)
        return kvs__fail(e, KVS_EPROTO, "frame: bad magic 0x%08" PRIx32 ", expected 0x%08x "
                         "(not a kvs host)", magic, KVS__WIRE_MAGIC);
    version = get_u32(m, F_VERSION);
    if (version != KVS__WIRE_VERSION)
        return kvs__fail(e, KVS_EPROTO, "frame: wire version %" PRIu32 ", this is version %u",
                         version, KVS__WIRE_VERSION);
    if (!zeros(m, F_RSV0, 3))
        return kvs__fail(e, KVS_EPROTO, "frame: reserved bytes are not zero");
    t.type = get_u8(m, F_TYPE);
    t.host = get_u32(m, F_HOST);
    t.len = get_u64(m, F_LEN);
    if (t.type == 0 || t.type >= KVS__FRAME_TYPES)
        return kvs__fail(e, KVS_EPROTO, "frame: unknown type %u", (unsigned)t.type);
    if (t.host >= limit)
        return kvs__fail(e, KVS_EPROTO, "frame: host %" PRIu32 " outside [0, %" PRIu32 ")",
                         t.host, limit);
    if ((want = kvs__frame_payload_bytes(t.type)) != 0 && t.len != want)
        return kvs__fail(e, KVS_EPROTO, "frame: %s of %" PRIu64 " bytes, expected %zu",
                         frame_names[t.type], t.len, want);
    want = t.type == KVS__FRAME_ROSTER ? KVS__WIRE_ROSTER_MIN : KVS__WIRE_MSG_MIN;
    if (!kvs__frame_payload_bytes(t.type) && (t.len < want || t.len > KVS__WIRE_PAYLOAD_MAX))
        return kvs__fail(e, KVS_EPROTO, "frame: %s of %" PRIu64 " bytes, expected %zu to "
                         "%llu", frame_names[t.type], t.len, want, KVS__WIRE_PAYLOAD_MAX);
    *h = t;
    return 0;
}

int kvs__wire_payload(unsigned char *m, size_t size, const void *buf, size_t len, int type,
                      struct kvs__err *e)
{
    if (buf == NULL || len != size)
        return kvs__fail(e, KVS_EPROTO, "%s: %zu bytes, expected %zu", kvs__frame_name(type),
                         buf ? len : 0, size);
    copy_once(m, buf, size);
    return 0;
}
