/*
 * arrayutil.h - helpers shared by the unit tests of array.c (test_array.c)
 * and of the half-precision conversions and the x86 half kernels
 * (test_half.c): a small deterministic generator, so that failures repeat,
 * a float's bits and back, and a malloc that fails the test rather than
 * return NULL. Everything here is static inline, so that a test that does
 * not use a helper does not warn.
 */
#ifndef KVS_ARRAYUTIL_H
#define KVS_ARRAYUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static inline uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static inline uint32_t fbits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bitsf(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void *xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);

    assert_non_null(p);
    return p;
}

#endif
