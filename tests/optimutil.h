/*
 * optimutil.h - helpers shared by the unit tests of the built-in
 * optimizers (test_optim.c) and of their state file (test_statefile.c):
 * a spec that must parse and a state that must be made. Both end the test
 * through cmocka when the call fails. Everything here is static inline, so
 * that a test that does not use a helper does not warn.
 */
#ifndef KVS_OPTIMUTIL_H
#define KVS_OPTIMUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/optim.h"
#include "store/optim_state.h"

static inline struct kvs__optim *parse_ok(const char *spec)
{
    struct kvs__optim *o = NULL;
    struct kvs__err e = { 0 };
    int rc = kvs__optim_parse(spec, &o, &e);

    if (rc != 0)
        fail_msg("parse \"%s\": %d %s", spec, rc, e.msg);
    assert_non_null(o);
    return o;
}

static inline struct kvs__optim_state *state_ok(const struct kvs__optim *o,
                                                kvs_dtype_t dtype, size_t count)
{
    struct kvs__optim_state *s = NULL;
    struct kvs__err e = { 0 };
    int rc = kvs__optim_state_new(o, dtype, count, KVS_HOST, &s, &e);

    if (rc != 0)
        fail_msg("state_new: %d %s", rc, e.msg);
    assert_non_null(s);
    return s;
}

#endif
