/*
 * test_sum.c - unit tests of kvs__sum_many (array.c): a batch of sums,
 * split over threads as one job, gives every item exactly what kvs__sum
 * gives it alone, whatever the sizes, dtypes and thread counts; and when
 * one item's output is another's input, the items run in order, as
 * separate calls would; inputs read through sources (a block at a time)
 * give the same bytes, and a source that fails fails the batch.
 */
#include <errno.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/array.h"

#define NITEMS 40

static void fill(void *p, size_t bytes, unsigned seed)
{
    unsigned char *b = p;

    for (size_t i = 0; i < bytes; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (unsigned char)(seed >> 16);
    }
}

/* n elements of dtype dt from seed: any bits, but floats that are exact
 * small multiples (no NaN payloads to compare). */
static void fill_input(kvs_dtype_t dt, void *p, size_t n, unsigned seed)
{
    fill(p, n * kvs_dtype_size(dt), seed);
    for (size_t e = 0; e < n && dt == KVS_FLOAT32; e++)
        ((float *)p)[e] = (float)((e * 31 + seed) % 1000) / 8;
    for (size_t e = 0; e < n && dt == KVS_FLOAT64; e++)
        ((double *)p)[e] = (double)((e * 17 + seed) % 999) / 4;
}

/* Items of every dtype and of sizes from 0 to past the split threshold,
 * with 1 to 5 inputs, the output sometimes its own first input: each is
 * compared with kvs__sum on a copy, byte for byte. */
static void test_many_matches_one_by_one(void **state)
{
    static const kvs_dtype_t dts[] = { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16, KVS_BFLOAT16,
                                       KVS_INT32, KVS_INT64, KVS_UINT8 };
    struct kvs__sum_item items[NITEMS];
    void *want[NITEMS], *ins[NITEMS][5];
    const void *inp[NITEMS][5];

    (void)state;
    for (int threads = 1; threads <= 4; threads *= 2) {
        for (int i = 0; i < NITEMS; i++) {
            kvs_dtype_t dt = dts[i % 7];
            size_t es = kvs_dtype_size(dt),
                   n = i == 3 ? 0 : i % 9 == 0 ? ((size_t)3 << 20) / es + 7 : (size_t)(i * 997 + 1);
            int k = 1 + i % 5;

            for (int j = 0; j < k; j++) {
                ins[i][j] = malloc(n * es + 1);
                assert_non_null(ins[i][j]);
                fill_input(dt, ins[i][j], n, (unsigned)(i * 7 + j));
                inp[i][j] = ins[i][j];
            }
            want[i] = malloc(n * es + 1);
            assert_non_null(want[i]);
            /* Odd items sum into their first input, in place. */
            items[i] = (struct kvs__sum_item){ dt, i % 2 ? ins[i][0] : malloc(n * es + 1),
                                               inp[i], k, n, NULL, NULL };
            assert_non_null(items[i].out);
            kvs__sum(dt, want[i], inp[i], k, n, 1);
        }
        kvs__sum_many(items, NITEMS, threads);
        for (int i = 0; i < NITEMS; i++) {
            size_t bytes = items[i].n * kvs_dtype_size(items[i].dtype);

            if (memcmp(items[i].out, want[i], bytes) != 0)
                fail_msg("threads %d: item %d (%s, %zu values, %d inputs) differs", threads, i,
                         kvs_dtype_name(items[i].dtype), items[i].n, items[i].k);
            if (i % 2 == 0)
                free(items[i].out);
            for (int j = 0; j < items[i].k; j++)
                free(ins[i][j]);
            free(want[i]);
        }
    }
}

/* Item 1 reads item 0's output: it must see item 0's new value, as it
 * would after a kvs__sum of item 0. Big enough that a split would run
 * them side by side. */
static void test_many_output_read_by_later_item(void **state)
{
    size_t n = (size_t)4 << 20;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    const void *in0[2], *in1[1];
    struct kvs__sum_item items[2];

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    for (size_t i = 0; i < n; i++) {
        a[i] = 1.0f;
        b[i] = 2.0f;
        c[i] = -1.0f;
    }
    in0[0] = a;
    in0[1] = b;
    in1[0] = a;                        /* item 1 copies item 0's output */
    items[0] = (struct kvs__sum_item){ KVS_FLOAT32, a, in0, 2, n, NULL, NULL };
    items[1] = (struct kvs__sum_item){ KVS_FLOAT32, c, in1, 1, n, NULL, NULL };
    kvs__sum_many(items, 2, 4);
    for (size_t i = 0; i < n; i++) {
        if (a[i] != 3.0f || c[i] != 3.0f)
            fail_msg("element %zu: %g and %g, want 3 and 3", i, (double)a[i], (double)c[i]);
    }
    free(a);
    free(b);
    free(c);
}

static void test_many_empty(void **state)
{
    float out = 5.0f;
    struct kvs__sum_item item = { KVS_FLOAT32, &out, NULL, 0, 1, NULL, NULL };

    (void)state;
    kvs__sum_many(NULL, 0, 2);         /* nothing to do */
    kvs__sum_many(&item, 1, 2);        /* the empty sum is zero, as kvs__sum has it */
    assert_true(out == 0.0f);
}

/* A source over an array of this process, as kvsd's reads another's:
 * copies the bytes asked for, or fails from byte fail_at on. */
struct mem_src {
    const unsigned char *p;
    size_t fail_at;
};

static int mem_read(const void *ctx, size_t off, void *buf, size_t len)
{
    const struct mem_src *m = ctx;

    if (off + len > m->fail_at)
        return -EFAULT;
    memcpy(buf, m->p + off, len);
    return 0;
}

/* A sink that copies each block it gets into a mirror of the output and
 * counts the bytes. */
struct mirror {
    unsigned char *p;
    _Atomic size_t bytes;
};

static void mirror_write(const void *ctx, size_t off, const void *buf, size_t len)
{
    struct mirror *m = (struct mirror *)ctx;

    memcpy(m->p + off, buf, len);
    atomic_fetch_add(&m->bytes, len);
}

/* Items of every dtype, some inputs in memory and some through sources,
 * every third with a sink: byte for byte what kvs__sum makes, on one
 * thread and several, sizes below and above a block and the split
 * threshold; each sink gets every byte of its output once. */
static void test_many_sources(void **state)
{
    static const kvs_dtype_t dts[] = { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16, KVS_BFLOAT16,
                                       KVS_INT32, KVS_INT64, KVS_UINT8 };
    enum { M = 14, K = 3 };
    struct kvs__sum_item items[M];
    struct kvs__source src[M][K];
    struct mem_src ms[M][K];
    struct mirror mir[M];
    struct kvs__sink sinks[M];
    void *want[M], *ins[M][K];
    const void *inp[M][K];

    (void)state;
    for (int threads = 1; threads <= 2; threads++) {
        for (int i = 0; i < M; i++) {
            kvs_dtype_t dt = dts[i % 7];
            size_t es = kvs_dtype_size(dt);
            size_t n = i < 7 ? (size_t)(i * 40001 + 3) : ((size_t)5 << 20) / es + (size_t)i;

            for (int j = 0; j < K; j++) {
                assert_non_null(ins[i][j] = malloc(n * es));
                fill_input(dt, ins[i][j], n, (unsigned)(i * 5 + j));
                inp[i][j] = ins[i][j];
            }
            assert_non_null(want[i] = malloc(n * es));
            kvs__sum(dt, want[i], inp[i], K, n, 1);
            /* Input 1 always a source, input 2 on odd items. */
            for (int j = 0; j < K; j++) {
                int remote = j == 1 || (j == 2 && i % 2);

                ms[i][j] = (struct mem_src){ ins[i][j], SIZE_MAX };
                src[i][j] = (struct kvs__source){ remote ? mem_read : NULL, &ms[i][j] };
                if (remote)
                    inp[i][j] = NULL;
            }
            assert_non_null(items[i].out = malloc(n * es));
            items[i] = (struct kvs__sum_item){ dt, items[i].out, inp[i], K, n, src[i], NULL };
            assert_non_null(mir[i].p = calloc(n ? n : 1, es));
            mir[i].bytes = 0;
            sinks[i] = (struct kvs__sink){ mirror_write, &mir[i] };
            if (i % 3 == 0)
                items[i].sink = &sinks[i];
        }
        assert_int_equal(kvs__sum_many(items, M, threads), 0);
        for (int i = 0; i < M; i++) {
            size_t bytes = items[i].n * kvs_dtype_size(items[i].dtype);

            if (memcmp(items[i].out, want[i], bytes) != 0)
                fail_msg("threads %d, item %d (dtype %d, n %zu) differs", threads, i,
                         (int)items[i].dtype, items[i].n);
            if (i % 3 == 0 && (mir[i].bytes != bytes || memcmp(mir[i].p, want[i], bytes) != 0))
                fail_msg("threads %d, item %d: its sink got %zu of %zu bytes, or others",
                         threads, i, (size_t)mir[i].bytes, bytes);
            if (i % 3 != 0 && mir[i].bytes != 0)
                fail_msg("item %d has no sink, yet wrote", i);
        }
        /* A sink on sums of inputs all in memory: the same. */
        for (int i = 0; i < M; i += 3) {
            size_t bytes = items[i].n * kvs_dtype_size(items[i].dtype);
            struct kvs__sum_item it = items[i];

            for (int j = 0; j < K; j++)
                inp[i][j] = ins[i][j];
            it.src = NULL;
            mir[i].bytes = 0;
            memset(mir[i].p, 0, bytes);
            memset(it.out, 0, bytes);
            assert_int_equal(kvs__sum_many(&it, 1, threads), 0);
            if (memcmp(it.out, want[i], bytes) != 0 || mir[i].bytes != bytes
                || memcmp(mir[i].p, want[i], bytes) != 0)
                fail_msg("threads %d, item %d without sources: sink or output differs",
                         threads, i);
        }
        /* A source that fails part-way fails the whole batch with its error. */
        ms[M - 1][1].fail_at = items[M - 1].n * kvs_dtype_size(items[M - 1].dtype) / 2;
        assert_int_equal(kvs__sum_many(items, M, threads), -EFAULT);
        assert_int_equal(kvs__sum_many(&items[M - 1], 1, threads), -EFAULT);
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < K; j++)
                free(ins[i][j]);
            free(want[i]);
            free(items[i].out);
            free(mir[i].p);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_matches_one_by_one),
        cmocka_unit_test(test_many_output_read_by_later_item),
        cmocka_unit_test(test_many_empty),
        cmocka_unit_test(test_many_sources),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
