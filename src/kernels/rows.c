/*
 * rows.c - row-sparse kernels: row ids sorted and made unique, the union
 * of several inputs' rows laid out for their sum, the sum itself (through
 * array.h's kvs__sum_many: one summation in the whole library), and the
 * dense form of sorted rows.
 *
 * Owns no state. It must never look up a key or judge an array against a
 * store (the engine and the clients do), and never sum by itself: a row's
 * sum is the dense sum's, element for element.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/array.h"
#include "kernels/rows.h"

/* Below this many ids a comparison sort is as quick as a radix sort and
 * needs no buffer. */
#define RADIX_MIN 512
#define RADIX_BITS 11
#define RADIX_SIZE (1u << RADIX_BITS)

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Passes of RADIX_BITS a radix sort of values up to max needs. */
static int radix_passes(uint64_t max)
{
    int bits = 0;

    while (max) {
        bits++;
        max >>= 1;
    }
    return (bits + RADIX_BITS - 1) / RADIX_BITS;
}

/* A stable LSD radix sort of n non-negative values, a and tmp of n each;
 * the result ends in a. */
static void radix_i64(int64_t *a, int64_t *tmp, size_t n, uint64_t max)
{
    int passes = radix_passes(max);
    size_t count[RADIX_SIZE];
    int64_t *from = a, *to = tmp;

    for (int p = 0; p < passes; p++) {
        unsigned shift = (unsigned)(p * RADIX_BITS);
        size_t sum = 0;

        memset(count, 0, sizeof count);
        for (size_t i = 0; i < n; i++)
            count[((uint64_t)from[i] >> shift) & (RADIX_SIZE - 1)]++;
        for (size_t b = 0; b < RADIX_SIZE; b++) {
            size_t c = count[b];

            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            to[count[((uint64_t)from[i] >> shift) & (RADIX_SIZE - 1)]++] = from[i];
        int64_t *t = from;
        from = to;
        to = t;
    }
    if (from != a)
        memcpy(a, from, n * sizeof *a);
}

int kvs__rows_sorted_unique(const int64_t *ids, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (ids[i] <= ids[i - 1])
            return 0;
    return 1;
}

size_t kvs__rows_sort_unique(int64_t *ids, size_t n)
{
    size_t m = 0;

    if (n == 0)
        return 0;
    if (!kvs__rows_sorted_unique(ids, n)) {
        int64_t *tmp = NULL, min = ids[0], max = ids[0];

        for (size_t i = 1; i < n; i++) {
            min = ids[i] < min ? ids[i] : min;
            max = ids[i] > max ? ids[i] : max;
        }
        if (n >= RADIX_MIN && min >= 0)
            tmp = malloc(n * sizeof *tmp);
        if (tmp)
            radix_i64(ids, tmp, n, (uint64_t)max);
        else
            qsort(ids, n, sizeof *ids, cmp_i64);
        free(tmp);
    }
    for (size_t i = 0; i < n; i++)
        if (m == 0 || ids[i] != ids[m - 1])
            ids[m++] = ids[i];
    return m;
}

int kvs__rows_unique_copy(const int64_t *ids, size_t n, int64_t **out, size_t *m,
                          struct kvs__err *e)
{
    int64_t *c;

    *out = NULL;
    *m = 0;
    if (n == 0)
        return 0;
    if (n > SIZE_MAX / sizeof *c || !(c = malloc(n * sizeof *c)))
        return kvs__fail(e, -ENOMEM, "out of memory for %zu row ids", n);
    memcpy(c, ids, n * sizeof *c);
    *m = kvs__rows_sort_unique(c, n);
    *out = c;
    return 0;
}

/* ---- the union of several inputs' rows -------------------------------- */

/* A row of an input: its row id, and its place in the inputs laid end to
 * end (which orders the rows of one id as a dense sum adds them). */
struct row_at {
    int64_t row;
    uint64_t seq;
};

static int cmp_row_at(const void *a, const void *b)
{
    const struct row_at *x = a, *y = b;

    if (x->row != y->row)
        return (x->row > y->row) - (x->row < y->row);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Stable LSD radix sort by row, so that rows of one id stay in seq order. */
static void radix_rows(struct row_at *a, struct row_at *tmp, size_t n, uint64_t max)
{
    int passes = radix_passes(max);
    size_t count[RADIX_SIZE];
    struct row_at *from = a, *to = tmp;

    for (int p = 0; p < passes; p++) {
        unsigned shift = (unsigned)(p * RADIX_BITS);
        size_t sum = 0;

        memset(count, 0, sizeof count);
        for (size_t i = 0; i < n; i++)
            count[((uint64_t)from[i].row >> shift) & (RADIX_SIZE - 1)]++;
        for (size_t b = 0; b < RADIX_SIZE; b++) {
            size_t c = count[b];

            count[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            to[count[((uint64_t)from[i].row >> shift) & (RADIX_SIZE - 1)]++] = from[i];
        struct row_at *t = from;
        from = to;
        to = t;
    }
    if (from != a)
        memcpy(a, from, n * sizeof *a);
}

void kvs__rows_union_free(struct kvs__rows_union *u)
{
    free(u->idx);
    free(u->start);
    free(u->src);
    free(u->items);
    memset(u, 0, sizeof *u);
}

/* Inputs merged, rather than sorted, up to this many: each output row
 * looks at every input's next row. */
#define MERGE_MAX_K 16

/* The union of k inputs whose indices each ascend strictly (what a client
 * that sorted its rows sends), by a k-way merge: each index read once,
 * checked, and compared with its input's last. 1 when an input does not
 * ascend (u then holds nothing: the caller sorts instead); 0; or an error. */
static int union_merge(struct kvs__rows_union *u, int k, const struct kvs__rows_in *in,
                       size_t row_bytes, int64_t rows, size_t total, struct kvs__err *e)
{
    int64_t head[MERGE_MAX_K], pos[MERGE_MAX_K];
    size_t x = 0;
    int rc = 0;

    if (!(u->idx = malloc(total * sizeof *u->idx))
        || !(u->start = malloc((total + 1) * sizeof *u->start))
        || !(u->items = malloc(total * sizeof(struct kvs__sum_item)))
        || !(u->src = malloc(total * sizeof *u->src))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for the union of %zu rows", total);
        goto fail;
    }
    for (int i = 0; i < k; i++) {
        pos[i] = 0;
        head[i] = in[i].nnz > 0 ? in[i].idx[0] : INT64_MAX;
        if (in[i].nnz > 0 && (head[i] < 0 || head[i] >= rows)) {
            rc = kvs__fail(e, KVS_ERANGE, "input %d: row id %lld at position 0 is out of "
                           "range [0, %lld)", i, (long long)head[i], (long long)rows);
            goto fail;
        }
    }
    u->m = 0;
    for (;;) {
        int64_t r = INT64_MAX;

        for (int i = 0; i < k; i++)
            r = head[i] < r ? head[i] : r;
        if (r == INT64_MAX)
            break;
        u->idx[u->m] = r;
        u->start[u->m++] = x;
        for (int i = 0; i < k; i++) {
            int64_t j, next;

            if (head[i] != r)
                continue;
            j = pos[i]++;
            u->src[x++] = (const char *)in[i].data + (size_t)j * row_bytes;
            if (j + 1 >= in[i].nnz) {
                head[i] = INT64_MAX;
                continue;
            }
            next = in[i].idx[j + 1];
            if (next <= r) {           /* not ascending: sort instead */
                rc = 1;
                goto fail;
            }
            if (next >= rows) {
                rc = kvs__fail(e, KVS_ERANGE, "input %d: row id %lld at position %lld is out "
                               "of range [0, %lld)", i, (long long)next, (long long)(j + 1),
                               (long long)rows);
                goto fail;
            }
            head[i] = next;
        }
    }
    u->start[u->m] = x;
    return 0;
fail:
    kvs__rows_union_free(u);
    return rc;
}

int kvs__rows_union_make(struct kvs__rows_union *u, int k, const struct kvs__rows_in *in,
                         size_t row_bytes, int64_t rows, struct kvs__err *e)
{
    struct row_at *at = NULL, *tmp = NULL;
    const void **by_seq = NULL;
    size_t total = 0, m = 0;
    uint64_t seq = 0;
    int rc = 0;

    memset(u, 0, sizeof *u);
    for (int i = 0; i < k; i++) {
        if (in[i].nnz < 0 || __builtin_add_overflow(total, (size_t)in[i].nnz, &total))
            return kvs__fail(e, KVS_EBADARG, "input %d: %lld rows", i, (long long)in[i].nnz);
    }
    if (total == 0)
        return 0;
    if (total > SIZE_MAX / sizeof *at / 2)
        return kvs__fail(e, -ENOMEM, "out of memory for the union of %zu rows", total);
    if (k <= MERGE_MAX_K && (rc = union_merge(u, k, in, row_bytes, rows, total, e)) <= 0)
        return rc;
    rc = 0;
    if (total > SIZE_MAX / sizeof *at / 2
        || !(at = malloc(total * sizeof *at)) || !(by_seq = malloc(total * sizeof *by_seq))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for the union of %zu rows", total);
        goto out;
    }
    for (int i = 0; i < k; i++) {
        for (int64_t j = 0; j < in[i].nnz; j++, seq++) {
            int64_t r = in[i].idx[j];

            if (r < 0 || r >= rows) {
                rc = kvs__fail(e, KVS_ERANGE, "input %d: row id %lld at position %lld is out "
                               "of range [0, %lld)", i, (long long)r, (long long)j,
                               (long long)rows);
                goto out;
            }
            at[seq] = (struct row_at){ r, seq };
            by_seq[seq] = (const char *)in[i].data + (size_t)j * row_bytes;
        }
    }
    if (total >= RADIX_MIN && (tmp = malloc(total * sizeof *tmp)))
        radix_rows(at, tmp, total, (uint64_t)(rows > 0 ? rows - 1 : 0));
    else
        qsort(at, total, sizeof *at, cmp_row_at);
    free(tmp);
    for (size_t x = 0; x < total; x++)
        m += x == 0 || at[x].row != at[x - 1].row;
    if (!(u->idx = malloc(m * sizeof *u->idx)) || !(u->start = malloc((m + 1) * sizeof *u->start))
        || !(u->items = malloc(m * sizeof(struct kvs__sum_item)))
        || !(u->src = malloc(total * sizeof *u->src))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory for the union of %zu rows", total);
        goto out;
    }
    u->m = 0;
    for (size_t x = 0; x < total; x++) {
        if (x == 0 || at[x].row != at[x - 1].row) {
            u->idx[u->m] = at[x].row;
            u->start[u->m++] = x;
        }
        u->src[x] = by_seq[at[x].seq];
    }
    u->start[u->m] = total;
out:
    free(at);
    free(by_seq);
    if (rc != 0)
        kvs__rows_union_free(u);
    return rc;
}

/* 1 when output row r's inputs are output row r - 1's, each one row on:
 * the two rows sum as one stretch of elements. */
static int continues(const struct kvs__rows_union *u, size_t r, size_t row_bytes)
{
    size_t k = u->start[r + 1] - u->start[r];

    if (k != u->start[r] - u->start[r - 1])
        return 0;
    for (size_t j = 0; j < k; j++)
        if ((const char *)u->src[u->start[r] + j]
            != (const char *)u->src[u->start[r - 1] + j] + row_bytes)
            return 0;
    return 1;
}

/* kvs__sum_many over m items, which takes an int count; the items have
 * no source, so it cannot fail. */
static void sum_items(struct kvs__sum_item *items, size_t m, int nthreads)
{
    for (size_t i = 0; i < m; i += INT_MAX / 2) {
        size_t c = m - i < INT_MAX / 2 ? m - i : INT_MAX / 2;

        (void)kvs__sum_many(items + i, (int)c, nthreads);
    }
}

void kvs__rows_union_sum(const struct kvs__rows_union *u, kvs_dtype_t dtype, void *out,
                         size_t row_elems, int nthreads)
{
    struct kvs__sum_item *items = u->items;
    size_t row_bytes = row_elems * kvs_dtype_size(dtype), m = 0;

    if (u->m == 0 || row_bytes == 0)
        return;
    /* One item per stretch of rows whose inputs are stretches too (inputs
     * of the same rows, in order: a dense push by rows is one item). */
    for (size_t r = 0, r1; r < u->m; r = r1) {
        for (r1 = r + 1; r1 < u->m && continues(u, r1, row_bytes); r1++)
            ;
        items[m++] = (struct kvs__sum_item){ dtype, (char *)out + r * row_bytes,
                                             u->src + u->start[r],
                                             (int)(u->start[r + 1] - u->start[r]),
                                             (r1 - r) * row_elems, NULL, NULL };
    }
    sum_items(items, m, nthreads);
}

size_t kvs__rows_run_end(const struct kvs__rows_union *u, size_t r, size_t row_bytes)
{
    size_t r1 = r + 1;

    while (r1 < u->m && u->idx[r1] == u->idx[r1 - 1] + 1 && continues(u, r1, row_bytes))
        r1++;
    return r1;
}

void kvs__rows_union_sum_into(const struct kvs__rows_union *u, kvs_dtype_t dtype, void *dense,
                              size_t row_elems, int nthreads)
{
    struct kvs__sum_item *items = u->items;
    size_t row_bytes = row_elems * kvs_dtype_size(dtype), m = 0;

    if (u->m == 0 || row_bytes == 0)
        return;
    for (size_t r = 0, r1; r < u->m; r = r1) {
        r1 = kvs__rows_run_end(u, r, row_bytes);
        items[m++] = (struct kvs__sum_item){ dtype,
                                             (char *)dense + (size_t)u->idx[r] * row_bytes,
                                             u->src + u->start[r],
                                             (int)(u->start[r + 1] - u->start[r]),
                                             (r1 - r) * row_elems, NULL, NULL };
    }
    sum_items(items, m, nthreads);
}

void kvs__rows_zero_gaps(void *dense, int64_t rows, size_t row_bytes, const int64_t *idx,
                         size_t m)
{
    char *d = dense;
    int64_t next = 0;

    for (size_t j = 0; j < m; j++) {
        if (idx[j] > next)
            memset(d + (size_t)next * row_bytes, 0, (size_t)(idx[j] - next) * row_bytes);
        next = idx[j] + 1;
    }
    if (rows > next)
        memset(d + (size_t)next * row_bytes, 0, (size_t)(rows - next) * row_bytes);
}

void kvs__rows_scatter(void *dense, int64_t rows, size_t row_bytes, const int64_t *idx,
                       size_t m, const void *data)
{
    char *d = dense;
    int64_t next = 0;                  /* the first row not written yet */

    for (size_t j = 0; j < m; j++) {
        if (idx[j] > next)
            memset(d + (size_t)next * row_bytes, 0, (size_t)(idx[j] - next) * row_bytes);
        memcpy(d + (size_t)idx[j] * row_bytes, (const char *)data + j * row_bytes, row_bytes);
        next = idx[j] + 1;
    }
    if (rows > next)
        memset(d + (size_t)next * row_bytes, 0, (size_t)(rows - next) * row_bytes);
}
