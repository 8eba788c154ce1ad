/*
 * protoutil.h - helpers shared by the unit tests of src/proto/'s message
 * codecs (test_proto.c, test_proto_ctl.c) and slot codecs (test_slots.c):
 * exact-size heap buffers, finding a text field in an encoding, filling a
 * string field, the protocol version after this one, and a valid hello
 * and welcome. Everything here is static inline, so that a test that does
 * not use a helper does not warn.
 */
#ifndef KVS_PROTOUTIL_H
#define KVS_PROTOUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/proto.h"

/* A fresh heap buffer of exactly n bytes: ASan flags a read of byte n. */
static inline unsigned char *exact(size_t n)
{
    unsigned char *p = malloc(n);

    assert_non_null(p);
    memset(p, 0xa5, n);
    return p;
}

/* Offset of the first occurrence of needle in hay; the tests find text
 * fields this way instead of hard-coding the layout. */
static inline size_t find(const unsigned char *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);

    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0)
            return i;
    fail_msg("\"%s\" not found in the encoding", needle);
    return 0;
}

static inline void fill(char *s, size_t n, char c)
{
    memset(s, c, n);
    s[n] = '\0';
}

/* The version after this one: refused, by number. */
#define NEXT (KVS__PROTO_VERSION + 1)
#define NEXT_TEXT next_text()

static inline const char *next_text(void)
{
    static char b[32];

    snprintf(b, sizeof b, "version %u", NEXT);
    return b;
}

/* A valid hello and a valid welcome, for a test to change a field of. */
static inline struct kvs__hello hello_ok(void)
{
    struct kvs__hello h;

    memset(&h, 0, sizeof h);
    h.version = KVS__PROTO_VERSION;
    h.mode = KVS__MODE_SYNC;
    h.rank = 2;
    h.nworkers = 4;
    strcpy(h.job, "train-1");
    return h;
}

static inline struct kvs__welcome welcome_ok(void)
{
    struct kvs__welcome w;

    memset(&w, 0, sizeof w);
    w.version = KVS__PROTO_VERSION;
    w.status = 0;
    w.worker = 3;
    w.control_size = 4096;
    w.seg_size = 1 << 20;
    w.arena_size = 1 << 24;
    w.sq_entries = 256;
    w.cq_entries = 512;
    w.staging_off = 1 << 16;
    w.staging_size = (1 << 20) - (1 << 16);
    w.resume_step = -1;
    return w;
}

#endif
