/*
 * test_buffers.c - the zero-copy API of kvs.h on the in-process "local"
 * store: kvs_array_alloc/kvs_array_free (shapes, zero fill, alignment, bad
 * arguments, double and foreign frees) and views (kvs_pull_view,
 * kvs_pushpull_view: they are the stored value, follow later pushes, and a
 * failing call changes neither the store nor the caller's views), and
 * holds on their memory past kvs_close (kvs_mem_hold). The dist
 * types' buffers and views run in real jobs (tests/dist_worker.c,
 * scenario "buffers"). Uses only kvs.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvs.h"
#include "testutil.h"

static void alloc_shapes_and_zero_fill(void **state)
{
    kvs_t *kv = new_store("local");
    int64_t shape[3] = { 3, 5, 7 };
    kvs_array_t a, s, e;

    (void)state;
    OK(kvs_array_alloc(kv, KVS_FLOAT64, 3, shape, &a));
    assert_non_null(a.data);
    assert_int_equal((uintptr_t)a.data % 64, 0);
    assert_int_equal(a.dtype, KVS_FLOAT64);
    assert_int_equal(a.ndim, 3);
    assert_int_equal(a.shape[0], 3);
    assert_int_equal(a.shape[1], 5);
    assert_int_equal(a.shape[2], 7);
    assert_int_equal(a.device, KVS_HOST);
    for (int i = 0; i < 3 * 5 * 7; i++)
        assert_true(((double *)a.data)[i] == 0.0);
    /* A scalar needs no shape; an empty array still gets a distinct buffer. */
    OK(kvs_array_alloc(kv, KVS_INT32, 0, NULL, &s));
    assert_int_equal(*(int32_t *)s.data, 0);
    shape[0] = 0;
    OK(kvs_array_alloc(kv, KVS_UINT8, 2, shape, &e));
    assert_non_null(e.data);
    assert_ptr_not_equal(e.data, s.data);
    OK(kvs_array_free(kv, &a));
    assert_null(a.data);
    OK(kvs_array_free(kv, &e));
    /* s is left for kvs_close to free (ASan would report a leak). */
    kvs_close(kv);
}

static void alloc_bad_arguments(void **state)
{
    kvs_t *kv = new_store("local");
    int64_t shape[2] = { 4, -1 };
    kvs_array_t a = { 0 };

    (void)state;
    EXPECT_RC(kvs_array_alloc(NULL, KVS_FLOAT32, 0, NULL, &a), KVS_EBADARG);
    EXPECT_RC(kvs_array_alloc(kv, KVS_FLOAT32, 0, NULL, NULL), KVS_EBADARG);
    EXPECT_DETAIL(kv, "out is NULL");
    EXPECT_RC(kvs_array_alloc(kv, KVS_FLOAT32, 2, NULL, &a), KVS_EBADARG);
    EXPECT_DETAIL(kv, "shape is NULL");
    EXPECT_RC(kvs_array_alloc(kv, KVS_FLOAT32, 2, shape, &a), KVS_EBADARG);
    EXPECT_DETAIL(kv, "extent -1");
    EXPECT_RC(kvs_array_alloc(kv, KVS_FLOAT32, KVS_MAX_NDIM + 1, shape, &a), KVS_EBADARG);
    EXPECT_RC(kvs_array_alloc(kv, (kvs_dtype_t)99, 1, shape, &a), KVS_EDTYPE);
    shape[1] = INT64_MAX;
    EXPECT_RC(kvs_array_alloc(kv, KVS_FLOAT32, 2, shape, &a), KVS_EBADARG);
    assert_null(a.data);               /* out untouched on failure */
    kvs_close(kv);
}

static void free_only_live_buffers(void **state)
{
    kvs_t *kv = new_store("local"), *other = new_store("local");
    int64_t n = 8;
    float mine[8];
    kvs_array_t a, b, copy, inner, heap = ARR(mine, KVS_FLOAT32, 1, 8);

    (void)state;
    OK(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &a));
    OK(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &b));
    copy = a;
    inner = a;
    inner.data = (float *)a.data + 1;
    EXPECT_RC(kvs_array_free(kv, NULL), KVS_EBADARG);
    EXPECT_RC(kvs_array_free(kv, &heap), KVS_EBADARG);
    EXPECT_DETAIL(kv, "not a live buffer");
    assert_ptr_equal(heap.data, mine);
    EXPECT_RC(kvs_array_free(kv, &inner), KVS_EBADARG);
    EXPECT_RC(kvs_array_free(other, &a), KVS_EBADARG);   /* another handle's */
    OK(kvs_array_free(kv, &a));
    EXPECT_RC(kvs_array_free(kv, &copy), KVS_EBADARG);   /* twice */
    EXPECT_RC(kvs_array_free(kv, &a), KVS_EBADARG);      /* data NULL now */
    OK(kvs_array_free(kv, &b));
    kvs_close(other);
    kvs_close(kv);
}

/* A buffer works as any array: init, push (also with its key repeated),
 * pull into it, pushpull in place. */
static void buffers_as_arrays(void **state)
{
    kvs_t *kv = new_store("local");
    int64_t shape[2] = { 2, 3 };
    kvs_array_t a, b;
    kvs_key_t k = IK(1), kk[2] = { IK(1), IK(1) };

    (void)state;
    OK(kvs_array_alloc(kv, KVS_FLOAT32, 2, shape, &a));
    OK(kvs_array_alloc(kv, KVS_FLOAT32, 2, shape, &b));
    fill_f32(a.data, 6, 1.5f);
    OK(kvs_init(kv, 1, &k, &a));
    fill_f32(a.data, 6, 2.0f);
    fill_f32(b.data, 6, 3.0f);
    OK(kvs_push(kv, 2, kk, (kvs_array_t[]){ a, b }, 0));
    OK(kvs_pull(kv, 1, &k, &b, 0));
    EXPECT_ALL_F32((float *)b.data, 6, 5.0f);
    OK(kvs_pushpull(kv, 1, &k, &a, NULL, 0));
    EXPECT_ALL_F32((float *)a.data, 6, 2.0f);
    kvs_close(kv);
}

static void pull_view_is_the_stored_value(void **state)
{
    kvs_t *kv = new_store("local");
    float v[6], g[6];
    kvs_key_t keys[3] = { IK(4), IK(9), IK(4) };
    kvs_array_t vals[2] = { ARR(v, KVS_FLOAT32, 2, 2, 3), ARR(g, KVS_FLOAT32, 1, 6) };
    kvs_array_t views[3] = { ARR(NULL, KVS_FLOAT32, 2, 2, 3), ARR(NULL, KVS_FLOAT32, 1, 6),
                             ARR(NULL, KVS_FLOAT32, 2, 2, 3) };

    (void)state;
    fill_f32(v, 6, 1.0f);
    fill_f32(g, 6, 7.0f);
    OK(kvs_init(kv, 2, keys, vals));
    OK(kvs_pull_view(kv, 3, keys, views, 0));
    EXPECT_ALL_F32((float *)views[0].data, 6, 1.0f);
    EXPECT_ALL_F32((float *)views[1].data, 6, 7.0f);
    assert_ptr_equal(views[0].data, views[2].data);      /* a repeated key: one value */
    assert_ptr_not_equal(views[0].data, v);
    /* The view follows the store: a push shows through it. */
    fill_f32(v, 6, 4.0f);
    OK(kvs_push(kv, 1, keys, vals, 0));
    EXPECT_ALL_F32((float *)views[0].data, 6, 4.0f);
    kvs_close(kv);
}

static void pushpull_view(void **state)
{
    kvs_t *kv = new_store("local");
    int64_t n = 1000;
    kvs_array_t g, view = ARR(NULL, KVS_FLOAT32, 1, 1000);
    kvs_key_t k = SK("w");

    (void)state;
    OK(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &g));
    OK(kvs_init(kv, 1, &k, &g));
    OK(kvs_set_optimizer(kv, "sgd lr=0.5"));
    for (int step = 1; step <= 3; step++) {
        fill_f32(g.data, 1000, 1.0f);
        OK(kvs_pushpull_view(kv, 1, &k, &g, &view, 0));
        EXPECT_ALL_F32((float *)view.data, 1000, -0.5f * (float)step);
        EXPECT_ALL_F32((float *)g.data, 1000, 1.0f);                  /* the input is left alone */
    }
    kvs_close(kv);
}

/* A failing view call leaves the views and the store as they were. */
static void view_errors_change_nothing(void **state)
{
    kvs_t *kv = new_store("local");
    float v[4] = { 1, 2, 3, 4 }, w[4] = { 9, 9, 9, 9 };
    kvs_key_t k = IK(0), keys[2] = { IK(0), IK(5) };
    kvs_array_t val = ARR(v, KVS_FLOAT32, 1, 4), pushes[2] = { ARR(w, KVS_FLOAT32, 1, 4),
                                                               ARR(w, KVS_FLOAT32, 1, 4) };
    kvs_array_t views[2] = { ARR(w, KVS_FLOAT32, 1, 4), ARR(w, KVS_FLOAT32, 1, 4) };
    kvs_array_t bad = ARR(w, KVS_FLOAT32, 1, 3), wrongtype = ARR(w, KVS_INT32, 1, 4);

    (void)state;
    OK(kvs_init(kv, 1, &k, &val));
    EXPECT_RC(kvs_pull_view(kv, 2, keys, views, 0), KVS_ENOKEY);
    assert_ptr_equal(views[0].data, w);
    EXPECT_RC(kvs_pull_view(kv, 1, &k, &bad, 0), KVS_ESHAPE);
    EXPECT_DETAIL(kv, "shape (3)");
    EXPECT_RC(kvs_pull_view(kv, 1, &k, &wrongtype, 0), KVS_EDTYPE);
    EXPECT_RC(kvs_pull_view(kv, 1, &k, NULL, 0), KVS_EBADARG);
    EXPECT_RC(kvs_pull_view(kv, -1, &k, views, 0), KVS_EBADARG);
    EXPECT_RC(kvs_pull_view(NULL, 1, &k, views, 0), KVS_EBADARG);
    OK(kvs_pull_view(kv, 0, NULL, NULL, 0));
    /* Push of key 0 then an unknown key: nothing is pushed. */
    EXPECT_RC(kvs_pushpull_view(kv, 2, keys, pushes, views, 0), KVS_ENOKEY);
    EXPECT_RC(kvs_pushpull_view(kv, 1, &k, pushes, &bad, 0), KVS_ESHAPE);
    EXPECT_RC(kvs_pushpull_view(kv, 1, &k, pushes, NULL, 0), KVS_EBADARG);
    assert_ptr_equal(views[0].data, w);
    OK(kvs_pull_view(kv, 1, &k, views, 0));
    assert_true(memcmp(views[0].data, v, sizeof v) == 0);
    kvs_close(kv);
}

/* A hold keeps the memory of buffers and views past kvs_close: they read
 * their last values (ASan would report a read of freed memory), a buffer
 * takes writes, and the last release frees it all (ASan would report a
 * leak otherwise); a hold released while the handle is open changes
 * nothing, and kvs_close then frees as without one. */
static void holds_keep_memory_past_close(void **state)
{
    kvs_t *kv = new_store("local");
    int64_t n = 1000;
    kvs_array_t g, freed, view = ARR(NULL, KVS_FLOAT32, 1, 1000);
    kvs_key_t k = IK(3);
    kvs_mem_t *m1 = NULL, *m2 = NULL, *early = NULL;

    (void)state;
    EXPECT_RC(kvs_mem_hold(NULL, &m1), KVS_EBADARG);
    EXPECT_RC(kvs_mem_hold(kv, NULL), KVS_EBADARG);
    EXPECT_DETAIL(kv, "NULL");
    assert_int_equal(kvs_mem_release(NULL), 0);
    OK(kvs_mem_hold(kv, &early));
    assert_int_equal(kvs_mem_release(early), 0);          /* the handle still has it */
    OK(kvs_mem_hold(kv, &m1));
    OK(kvs_mem_hold(kv, &m2));
    assert_ptr_equal(m1, m2);
    OK(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &g));
    OK(kvs_array_alloc(kv, KVS_FLOAT32, 1, &n, &freed));
    OK(kvs_array_free(kv, &freed));                       /* freed now, not kept */
    fill_f32(g.data, 1000, 2.5f);
    OK(kvs_init(kv, 1, &k, &g));
    OK(kvs_set_optimizer(kv, "sgd lr=1"));
    fill_f32(g.data, 1000, 1.0f);
    OK(kvs_pushpull_view(kv, 1, &k, &g, &view, 0));
    EXPECT_ALL_F32((float *)view.data, 1000, 1.5f);
    kvs_close(kv);
    EXPECT_ALL_F32((float *)view.data, 1000, 1.5f);
    EXPECT_ALL_F32((float *)g.data, 1000, 1.0f);
    fill_f32(g.data, 1000, 7.0f);
    EXPECT_ALL_F32((float *)g.data, 1000, 7.0f);
    assert_int_equal(kvs_mem_release(m1), 0);
    EXPECT_ALL_F32((float *)view.data, 1000, 1.5f);
    assert_int_equal(kvs_mem_release(m2), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alloc_shapes_and_zero_fill),
        cmocka_unit_test(alloc_bad_arguments),
        cmocka_unit_test(free_only_live_buffers),
        cmocka_unit_test(buffers_as_arrays),
        cmocka_unit_test(pull_view_is_the_stored_value),
        cmocka_unit_test(pushpull_view),
        cmocka_unit_test(view_errors_change_nothing),
        cmocka_unit_test(holds_keep_memory_past_close),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
