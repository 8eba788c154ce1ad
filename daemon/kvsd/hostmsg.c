/*
 * hostmsg.c - what a message between the hosts of a job says of a key's
 * round, for the modules that act on it (xrounds.c, forwards.c, bridge.c):
 * its part, its values (2bit pieces decoded), a VALUE made of a part, and
 * the failure of a host that broke the protocol.
 *
 * It must never send a frame or change a round: it reads and writes
 * messages, and a value into its key's own place.
 *
 * Serve thread only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostmsg.h"
#include "arena.h"
#include "hosts.h"
#include "job.h"
#include "owners.h"
#include "req.h"

#include "kernels/compress.h"

void hostmsg_free(struct inmsg *m)
{
    if (m) {
        free(m->pay);
        free(m);
    }
}

const void *hostmsg_elem(const struct round *rd, const void *data, uint64_t i)
{
    return (const char *)data + i * kvs_dtype_size(rd->dtype);
}

int hostmsg_part(const struct kvs__wire_msg *m)
{
    return m->nparts ? (int)m->part : 0;
}

void hostmsg_set_part(struct kvs__wire_msg *m, const struct round *rd, int p)
{
    m->part = rd->nparts > 1 ? (uint32_t)p : 0;
    m->nparts = rd->nparts > 1 ? (uint32_t)rd->nparts : 0;
}

void hostmsg_key_of_req(struct kvs__wire_msg *m, const struct rargs *s)
{
    memset(m, 0, sizeof *m);
    m->key = req_key(s);
    m->dtype = s->dtype;
    m->ndim = s->ndim;
    memcpy(m->shape, s->shape, sizeof m->shape[0] * (size_t)s->ndim);
}

void hostmsg_value(struct kvs__wire_msg *m, const struct round *rd, int p, int status,
                   const char *msg)
{
    uint64_t first, n;

    hostmsg_set_part(m, rd, p);
    m->pieces = 0;
    m->status = status;
    if (status == 0) {
        owners_part_range(rd, p, &first, &n);
        m->data = hostmsg_elem(rd, rd->value, first);
        m->len = n * kvs_dtype_size(rd->dtype);
        return;
    }
    m->data = msg;
    m->len = strlen(msg);
    m->ndim = 0;
    m->dtype = 0;
}

void hostmsg_broke(struct daemon *d, int h, const char *fmt, ...)
{
    char why[KVS__MSG_MAX - 64];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    job_fail(d, KVS_EPROTO, "%s broke the protocol: %s", hosts_name(d, h), why);
}

/* The sum of a message's 2bit pieces (float32) of n elements, malloc'd;
 * NULL without memory. In the pieces' order, as the host's workers' ranks. */
static float *decode_pieces(const struct kvs__wire_msg *m, uint64_t n)
{
    float *sum;

    if (!(sum = calloc(n ? n : 1, sizeof *sum)))
        return NULL;
    for (uint32_t i = 0; i < m->pieces; i++) {
        const uint32_t *words;
        float thr = kvs__wire_piece_get(m, n, i, &words);

        kvs__gc_2bit_dequantize_add(words, sum, n, thr);
    }
    return sum;
}

int hostmsg_values(const struct round *rd, const struct kvs__wire_msg *m,
                   const void **data, float **decoded)
{
    uint64_t lo, n;

    *decoded = NULL;
    *data = m->data;
    if (!m->pieces)
        return 0;
    owners_part_range(rd, hostmsg_part(m), &lo, &n);
    if (!(*decoded = decode_pieces(m, n)))
        return -ENOMEM;
    *data = *decoded;
    return 0;
}

void hostmsg_write_value(struct round *rd, const struct kvs__wire_msg *m)
{
    uint64_t lo, n;

    owners_part_range(rd, hostmsg_part(m), &lo, &n);
    arena_seq_begin(rd->value);
    memcpy((char *)rd->value + lo * kvs_dtype_size(rd->dtype), m->data, m->len);
    arena_seq_end(rd->value);
}
