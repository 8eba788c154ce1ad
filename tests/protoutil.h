/*
 * protoutil.h - helpers shared by the unit tests of src/proto/'s message
 * codecs (test_proto.c) and slot codecs (test_slots.c): exact-size heap
 * buffers, finding a text field in an encoding, and filling a string
 * field. Everything here is static inline, so that a test that does not
 * use a helper does not warn.
 */
#ifndef KVS_PROTOUTIL_H
#define KVS_PROTOUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

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

#endif
