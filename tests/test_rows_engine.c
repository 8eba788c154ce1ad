/*
 * test_rows_engine.c - row-sparse values beneath kvs.h: the engine's calls
 * that kvsd makes for a round's rows (kvs__engine_check_rows, then
 * kvs__engine_push_rows of several workers' inputs: their union-sum,
 * lazily applied, an index changed after the check refused with nothing
 * changed; kvs__engine_push_rows_range: a round's rows pushed in ranges
 * leave what one push of them all does, for every update rule, and
 * ASSIGN zeroes the absent rows of the range only), and the row kernels
 * (sort-unique against qsort, the compact union-sum against the dense
 * sum). The stores are made and read through kvs.h, each result against
 * a reference computed here. Each case has a deadline of its own (an
 * alarm, KVS_TEST_SLOW times longer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvs.h"
#include "front.h"
#include "kernels/rows.h"
#include "store/engine.h"
#include "rowsutil.h"


/* ---- kvsd's entry ------------------------------------------------------- */

/* kvs__engine_check_rows, then kvs__engine_push_rows of inputs from
 * several workers: their union-sum, lazily applied; an index out of range
 * (a worker that changed its staging after the check) is refused by the
 * push itself, naming input and position, with nothing changed. */
static void test_engine_push_rows(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], got[N], d0[2 * C], d1[2 * C], g[N];
    int64_t i0[] = { 3, 1 }, i1[] = { 1, 12 };
    kvs_row_sparse_t v[2] = { rsp(d0, i0, 2, KVS_FLOAT32), rsp(d1, i1, 2, KVS_FLOAT32) };
    struct kvs__rows_in in[2] = { { d0, i0, 2 }, { d1, i1, 2 } };
    struct kvs__entry_info info;
    struct kvs__err e = { 0, "" };
    struct snap before;

    (void)state;
    fill_w(w, N, 1.5f);
    fill_w(d0, 2 * C, 0.2f);
    fill_w(d1, 2 * C, -0.6f);
    init_f32(kv, 1, w);
    OK(kvs_set_optimizer(kv, "sgd lr=0.25 momentum=0.5 wd=0.1"));
    EXPECT_RC(kvs__engine_check_rows(kv->eng, IK(1), &v[1], &info, &e), KVS_ERANGE);
    i1[1] = 7;
    OK(kvs__engine_check_rows(kv->eng, IK(1), &v[0], &info, &e));
    OK(kvs__engine_check_rows(kv->eng, IK(1), &v[1], &info, &e));
    assert_int_equal(info.version, 1);
    take(kv, 1, &before);
    i1[1] = 10;                        /* changed after the check */
    EXPECT_RC(kvs__engine_push_rows(kv->eng, info.entry, 2, in, &e), KVS_ERANGE);
    assert_non_null(strstr(e.msg, "input 1"));
    assert_non_null(strstr(e.msg, "position 1"));
    expect_same(kv, 1, &before);
    i1[1] = 7;
    OK(kvs__engine_push_rows(kv->eng, info.entry, 2, in, &e));
    dense_sum(g, v, 2);
    {
        float mom[N] = { 0 };

        for (int x = 0; x < N; x++)
            if (x / C == 1 || x / C == 3 || x / C == 7)
                ref_sgd(&w[x], &mom[x], g[x], 0.25f, 0.5f, 0.1f, 1.0f, -1.0f);
    }
    pull_f32(kv, 1, got);
    assert_memory_equal(got, w, sizeof w);
    kvs_close(kv);
}

/* The rows of in[0..k) that lie in [lo, hi), copied into data and idx
 * (room for every row), as out[0..k). */
static void rows_in_range(const struct kvs__rows_in *in, int k, int64_t lo, int64_t hi,
                          float *data, int64_t *idx, struct kvs__rows_in *out)
{
    for (int i = 0, at = 0; i < k; i++) {
        out[i] = (struct kvs__rows_in){ data + at * C, idx + at, 0 };
        for (int64_t j = 0; j < in[i].nnz; j++)
            if (in[i].idx[j] >= lo && in[i].idx[j] < hi) {
                memcpy(data + at * C, (const float *)in[i].data + j * C, sizeof(float) * C);
                idx[at++] = in[i].idx[j];
                out[i].nnz++;
            }
    }
}

/* kvs__engine_push_rows_range: the pushes of a round's rows split in two
 * ranges, each with the round's step, leave the value and the state bit
 * for bit as one push of all the rows does, for every update rule (an
 * owner whose range got no row counts the step too); a row outside the
 * range, a bad range and an updater are refused, changing nothing. */
static void test_engine_push_rows_range(void **state)
{
    const char *specs[] = { NULL, "sgd lr=0.1 momentum=0.9 wd=0.01",
                            "adam lr=0.01 beta1=0.8 wd=0.02", "adam lr=0.05 wd=0.01 lazy_update=0",
                            "sgd lr=0.2 momentum=0.5 wd=0.1 lazy_update=0" };
    float d0[3 * C], d1[2 * C];
    int64_t i0[] = { 3, 1, 3 }, i1[] = { 1, 2 };
    struct kvs__rows_in in[2] = { { d0, i0, 3 }, { d1, i1, 2 } };

    (void)state;
    fill_w(d0, 3 * C, 0.4f);
    fill_w(d1, 2 * C, -0.9f);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        kvs_t *a = new_store("local"), *b = new_store("local");
        float w[N], wa[N], wb[N];
        struct kvs__entry_info ia, ib;
        struct kvs__err e = { 0, "" };
        enum kvs__rows_rule want = !specs[s] ? KVS__ROWS_ASSIGN
                                   : strstr(specs[s], "lazy_update=0") ? KVS__ROWS_DENSE
                                                                       : KVS__ROWS_LAZY;

        fill_w(w, N, 1.25f);
        init_f32(a, 1, w);
        init_f32(b, 1, w);
        if (specs[s]) {
            OK(kvs_set_optimizer(a, specs[s]));
            OK(kvs_set_optimizer(b, specs[s]));
        }
        assert_int_equal(kvs__engine_rows_rule(b->eng), want);
        OK(kvs__engine_lookup(a->eng, IK(1), &ia, &e));
        OK(kvs__engine_lookup(b->eng, IK(1), &ib, &e));
        for (uint64_t round = 1; round <= 2; round++) {
            /* rows [0, 4) hold every pushed row; [4, 10) none */
            const int64_t cut[] = { 0, 4, R };

            OK(kvs__engine_push_rows(a->eng, ia.entry, 2, in, &e));
            for (int r = 0; r < 2; r++) {
                float data[5 * C];
                int64_t idx[5];
                struct kvs__rows_in part[2];

                rows_in_range(in, 2, cut[r], cut[r + 1], data, idx, part);
                OK(kvs__engine_push_rows_range(b->eng, ib.entry, 2, part, cut[r],
                                               cut[r + 1] - cut[r], round, &e));
            }
            pull_f32(a, 1, wa);
            pull_f32(b, 1, wb);
            assert_memory_equal(wa, wb, sizeof wa);
            expect_same_state(a, b, 1);
            if (specs[s])
                assert_int_equal(kvs__engine_steps(b->eng, ib.entry), round);
        }
        if (want == KVS__ROWS_LAZY)    /* rows 0 and 4..9 never pushed */
            assert_memory_equal(wb + 4 * C, w + 4 * C, sizeof(float) * 6 * C);
        if (want == KVS__ROWS_ASSIGN)
            for (int x = 4 * C; x < N; x++)
                assert_true(wb[x] == 0.0f);
        {
            struct snap before;

            take(b, 1, &before);
            /* row 3 outside [4, 10); a range past the key */
            EXPECT_RC(kvs__engine_push_rows_range(b->eng, ib.entry, 2, in, 4, 6, 3, &e),
                      KVS_ERANGE);
            assert_non_null(strstr(e.msg, "outside rows"));
            EXPECT_RC(kvs__engine_push_rows_range(b->eng, ib.entry, 2, in, 4, 7, 3, &e),
                      KVS_EBADARG);
            expect_same(b, 1, &before);
        }
        kvs_close(a);
        kvs_close(b);
    }
}

/* ASSIGN over a range: the range's absent rows become zero, rows outside
 * the range keep their values; an updater takes whole keys only. */
static void test_engine_push_rows_range_assign(void **state)
{
    kvs_t *kv = new_store("local");
    float w[N], got[N], d[2 * C];
    int64_t idx[] = { 7, 5 };
    struct kvs__rows_in in = { d, idx, 2 };
    struct kvs__entry_info info;
    struct kvs__err e = { 0, "" };
    struct seen seen = { 0 };

    (void)state;
    fill_w(w, N, 3.0f);
    fill_w(d, 2 * C, -1.5f);
    init_f32(kv, 1, w);
    OK(kvs__engine_lookup(kv->eng, IK(1), &info, &e));
    OK(kvs__engine_push_rows_range(kv->eng, info.entry, 1, &in, 4, 4, 0, &e));
    pull_f32(kv, 1, got);
    for (int x = 0; x < N; x++) {
        int row = x / C;
        float want = row < 4 || row >= 8 ? w[x] : row == 7 ? d[x % C]
                     : row == 5 ? d[C + x % C] : 0.0f;

        assert_true(got[x] == want);
    }
    OK(kvs_set_updater(kv, record, &seen));
    EXPECT_RC(kvs__engine_push_rows_range(kv->eng, info.entry, 1, &in, 4, 4, 0, &e),
              KVS_EBADARG);
    assert_int_equal(seen.calls, 0);
    kvs_close(kv);
}

/* ---- the kernels ----------------------------------------------------------- */

/* Sort-unique of many ids (the radix path) against qsort. */
static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static void test_sort_unique(void **state)
{
    size_t n = 5000, m, k = 0;
    int64_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    uint64_t x = 88172645463325252ull;

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        a[i] = b[i] = (int64_t)(x % 3000000);
    }
    m = kvs__rows_sort_unique(a, n);
    qsort(b, n, sizeof *b, cmp64);
    for (size_t i = 0; i < n; i++)
        if (k == 0 || b[i] != b[k - 1])
            b[k++] = b[i];
    assert_int_equal(m, k);
    assert_memory_equal(a, b, m * sizeof *a);
    free(a);
    free(b);
}

/* The compact union-sum (what a client sums before it sends): sorted
 * unique rows, each the sum of its inputs' rows, equal to the dense sum's
 * rows; merged (ascending inputs) and sorted (others) alike. */
static void test_union_sum_compact(void **state)
{
    float d0[3 * C], d1[3 * C], out[R * C], want[N];
    int64_t i0[] = { 1, 4, 5 }, i1[] = { 4, 5, 9 }, j1[] = { 9, 5, 4 };
    struct kvs__rows_in in[2] = { { d0, i0, 3 }, { d1, i1, 3 } };
    kvs_row_sparse_t v[2] = { rsp(d0, i0, 3, KVS_FLOAT32), rsp(d1, i1, 3, KVS_FLOAT32) };
    struct kvs__rows_union u;
    struct kvs__err e = { 0, "" };
    const int64_t rows[] = { 1, 4, 5, 9 };

    (void)state;
    fill_w(d0, 3 * C, 0.5f);
    fill_w(d1, 3 * C, 2.25f);
    dense_sum(want, v, 2);
    for (int pass = 0; pass < 2; pass++) {
        OK(kvs__rows_union_make(&u, 2, in, C * sizeof(float), R, &e));
        assert_int_equal(u.m, 4);
        assert_memory_equal(u.idx, rows, sizeof rows);
        kvs__rows_union_sum(&u, KVS_FLOAT32, out, C, 0);
        for (size_t r = 0; r < u.m; r++)
            EXPECT_F32(out + r * C, want + rows[r] * C, C);
        kvs__rows_union_free(&u);
        /* the same rows, the second input's reversed (and its data too) */
        for (int j = 0; j < 3; j++)
            for (int c = 0; c < C; c++)
                if (j < 1) {
                    float t = d1[j * C + c];

                    d1[j * C + c] = d1[(2 - j) * C + c];
                    d1[(2 - j) * C + c] = t;
                }
        in[1].idx = j1;
    }
    in[1].idx = i1;
    i1[2] = R;
    EXPECT_RC(kvs__rows_union_make(&u, 2, in, C * sizeof(float), R, &e), KVS_ERANGE);
    assert_null(u.idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_engine_push_rows),
        CASE(test_engine_push_rows_range),
        CASE(test_engine_push_rows_range_assign),
        CASE(test_union_sum_compact),
        CASE(test_sort_unique),
    };
    return cmocka_run_group_tests_name("rows_engine", tests, NULL, NULL);
}
