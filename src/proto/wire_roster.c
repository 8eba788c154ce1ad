/*
 * wire_roster.c - the byte layouts of a host's join (where it listens)
 * and host 0's roster (where every host listens, and how many workers
 * it runs). Fixed little-endian offsets, unused bytes zero, every field
 * checked: an address is numeric text, never a name to resolve. It never
 * connects anywhere itself.
 */
#include <inttypes.h>
#include <string.h>

#include "base/bytes.h"
#include "proto/wire_roster.h"

/* join: 104 bytes; roster: 16 bytes, then 64 per host */
enum {
    JO_PORT = 0,       /* u16 */
    JO_RSV = 2,        /* 6 bytes, zero */
    JO_ADDR = 8,       /* KVS__ADDR_MAX, NUL-terminated, zeros after */
    JO_GEN = JO_ADDR + KVS__ADDR_MAX,  /* u32 */
    JO_NSTEPS = JO_GEN + 4,            /* u32, 0..KVS__WIRE_JOIN_STEPS */
    JO_STEPS = JO_NSTEPS + 4,          /* i64 each, >= 0; unused ones zero */
    JO_BYTES = JO_STEPS + 8 * KVS__WIRE_JOIN_STEPS,
    RO_N = 0,          /* u32 */
    RO_RSV = 4,        /* u32, zero */
    RO_STEP = 8,       /* i64, -1 or more */
    RO_HOSTS = 16,
    RP_NWORKERS = 0,   /* u32 */
    RP_PORT = 4,       /* u16 */
    RP_RSV = 6,        /* u16, zero */
    RP_ADDR = 8,
    RP_BYTES = RP_ADDR + KVS__ADDR_MAX,
};

_Static_assert(JO_BYTES == KVS__WIRE_JOIN_BYTES && RO_HOSTS + RP_BYTES == KVS__WIRE_ROSTER_MIN,
               "a join or a roster has another size than its frame's");

/* A numeric address's text at off of p: NUL-terminated, zeros after. */
static int get_addr(const unsigned char *p, size_t off, char *out, const char *what,
                    struct kvs__err *e)
{
    if (get_text(p, off, KVS__ADDR_MAX, out) < 0)
        return kvs__fail(e, KVS_EPROTO, "%s: address not NUL-terminated", what);
    for (const char *c = out; *c; c++)
        if (!strchr("0123456789abcdefABCDEF.:", *c))
            return kvs__fail(e, KVS_EPROTO, "%s: address '%s' is not numeric", what, out);
    return 0;
}

void kvs__wire_join_encode(const struct kvs__wire_join *m, void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, JO_BYTES);
    put_u16(p, JO_PORT, m->port);
    put_text(p, JO_ADDR, KVS__ADDR_MAX, m->addr);
    put_u32(p, JO_GEN, m->generation);
    put_u32(p, JO_NSTEPS, m->nsteps);
    for (uint32_t i = 0; i < m->nsteps && i < KVS__WIRE_JOIN_STEPS; i++)
        put_u64(p, JO_STEPS + 8 * i, (uint64_t)m->steps[i]);
}

int kvs__wire_join_decode(const void *buf, size_t len, struct kvs__wire_join *m,
                          struct kvs__err *e)
{
    unsigned char p[JO_BYTES];
    struct kvs__wire_join t;
    int rc;

    if ((rc = kvs__wire_payload(p, sizeof p, buf, len, KVS__FRAME_JOIN, e)) != 0)
        return rc;
    if (!zeros(p, JO_RSV, JO_ADDR - JO_RSV))
        return kvs__fail(e, KVS_EPROTO, "join: reserved bytes are not zero");
    t.port = get_u16(p, JO_PORT);
    if (t.port == 0)
        return kvs__fail(e, KVS_EPROTO, "join: port 0");
    if ((rc = get_addr(p, JO_ADDR, t.addr, "join", e)) != 0)
        return rc;
    t.generation = get_u32(p, JO_GEN);
    t.nsteps = get_u32(p, JO_NSTEPS);
    if (t.nsteps > KVS__WIRE_JOIN_STEPS)
        return kvs__fail(e, KVS_EPROTO, "join: %" PRIu32 " steps, at most %d", t.nsteps,
                         KVS__WIRE_JOIN_STEPS);
    for (uint32_t i = 0; i < KVS__WIRE_JOIN_STEPS; i++) {
        t.steps[i] = (int64_t)get_u64(p, JO_STEPS + 8 * i);
        if (i < t.nsteps ? t.steps[i] < 0 : t.steps[i] != 0)
            return kvs__fail(e, KVS_EPROTO, "join: step %" PRIu32 " is %" PRId64, i,
                             t.steps[i]);
    }
    *m = t;
    return 0;
}

size_t kvs__wire_roster_bytes(uint32_t n)
{
    return RO_HOSTS + (size_t)n * RP_BYTES;
}

void kvs__wire_roster_encode(const struct kvs__wire_place *hosts, uint32_t n, int64_t step,
                             void *buf)
{
    unsigned char *p = buf;

    memset(p, 0, kvs__wire_roster_bytes(n));
    put_u32(p, RO_N, n);
    put_u64(p, RO_STEP, (uint64_t)step);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char *q = p + RO_HOSTS + (size_t)i * RP_BYTES;

        put_u32(q, RP_NWORKERS, hosts[i].nworkers);
        put_u16(q, RP_PORT, hosts[i].port);
        put_text(q, RP_ADDR, KVS__ADDR_MAX, hosts[i].addr);
    }
}

int kvs__wire_roster_decode(const void *buf, size_t len, uint32_t n,
                            struct kvs__wire_place *hosts, int64_t *step, struct kvs__err *e)
{
    const unsigned char *b = buf;
    unsigned char head[RO_HOSTS], q[RP_BYTES];
    uint32_t total = 0;

    if (!buf || n == 0 || n > KVS__HOSTS_MAX || len != kvs__wire_roster_bytes(n))
        return kvs__fail(e, KVS_EPROTO, "roster: %zu bytes, expected %zu for %" PRIu32
                         " hosts", buf ? len : 0, kvs__wire_roster_bytes(n), n);
    copy_once(head, b, sizeof head);
    if (get_u32(head, RO_N) != n || get_u32(head, RO_RSV) != 0)
        return kvs__fail(e, KVS_EPROTO, "roster: of %" PRIu32 " hosts, expected %" PRIu32,
                         get_u32(head, RO_N), n);
    if ((int64_t)get_u64(head, RO_STEP) < -1)
        return kvs__fail(e, KVS_EPROTO, "roster: step %" PRId64, (int64_t)get_u64(head, RO_STEP));
    for (uint32_t i = 0; i < n; i++) {
        struct kvs__wire_place t;
        int rc;

        copy_once(q, b + RO_HOSTS + (size_t)i * RP_BYTES, sizeof q);
        t.nworkers = get_u32(q, RP_NWORKERS);
        t.port = get_u16(q, RP_PORT);
        if (get_u16(q, RP_RSV) != 0)
            return kvs__fail(e, KVS_EPROTO, "roster: reserved bytes are not zero");
        if (t.nworkers < 1 || t.nworkers > 1024 || (total += t.nworkers) > 1024)
            return kvs__fail(e, KVS_EPROTO, "roster: host %" PRIu32 " has %" PRIu32
                             " workers; the job at most 1024 in all", i, t.nworkers);
        if ((rc = get_addr(q, RP_ADDR, t.addr, "roster", e)) != 0)
            return rc;
        if (i > 0 && (t.port == 0 || !t.addr[0]))
            return kvs__fail(e, KVS_EPROTO, "roster: host %" PRIu32 " has no address", i);
        hosts[i] = t;
    }
    *step = (int64_t)get_u64(head, RO_STEP);
    return 0;
}
