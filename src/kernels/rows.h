/*
 * rows.h - the kernels of row-sparse values (kvs.h's kvs_row_sparse_t):
 * row ids sorted and made unique, and the union-sum of several row-sparse
 * inputs into sorted unique rows. The same code serves the engine, the
 * dist client and kvsd, so that every front sums rows alike. Knows
 * nothing of keys or stores; the sums are array.h's.
 */
#ifndef KVS_ROWS_H
#define KVS_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"
#include "base/error.h"

/* One row-sparse input: nnz rows of data (each of a row's bytes), row j
 * being row idx[j] of the full value; idx in any order, repeats allowed. */
struct kvs__rows_in {
    const void *data;
    const int64_t *idx;
    int64_t nnz;
};

/* Sorts ids[0..n) ascending and drops repeats, in place; returns how many
 * are left. Cannot fail (without memory for a radix sort it sorts in
 * place, more slowly). */
size_t kvs__rows_sort_unique(int64_t *ids, size_t n);

/* 1 when ids[0..n) is strictly ascending (sorted, no repeats). */
int kvs__rows_sorted_unique(const int64_t *ids, size_t n);

/* The sorted unique ids of ids[0..n), as a malloc'd copy in *out (NULL when
 * m is 0) and their number in *m: the rows a compact pull of ids needs.
 * Errors: -ENOMEM. */
int kvs__rows_unique_copy(const int64_t *ids, size_t n, int64_t **out, size_t *m,
                          struct kvs__err *e);

/* The union of the rows of k inputs, laid out for their sum: m sorted
 * unique row ids, and for row u the input rows src[start[u] ..
 * start[u+1]) that sum into it, in input order and, within an input, in
 * position order (the order a dense sum of the inputs would add them). */
struct kvs__rows_union {
    size_t m;
    int64_t *idx;                      /* m sorted unique row ids */
    size_t *start;                     /* m + 1 offsets into src */
    const void **src;                  /* the rows to sum, grouped by output row */
    void *items;                       /* the sum's batch, made here so that it cannot fail */
};

/* Makes u for k inputs of rows of row_bytes bytes each; every index must
 * be in [0, rows) (KVS_ERANGE naming input and position otherwise: a
 * check that callers made already, kept because inputs may come from
 * memory that is not trusted). Errors: KVS_ERANGE, -ENOMEM. On failure u
 * holds nothing. */
int kvs__rows_union_make(struct kvs__rows_union *u, int k, const struct kvs__rows_in *in,
                         size_t row_bytes, int64_t rows, struct kvs__err *e);

/* The union-sum: row u of out (u->m rows of row_elems elements of dtype)
 * is the sum of its input rows, as kvs__sum sums (float16 and bfloat16 in
 * float32 rounded once, integers wrapping). out must not overlap an input.
 * Over at most nthreads threads (0: the pool's default). Cannot fail. */
void kvs__rows_union_sum(const struct kvs__rows_union *u, kvs_dtype_t dtype, void *out,
                         size_t row_elems, int nthreads);

/* The union-sum straight into a value's dense form: row idx[u] of dense
 * (rows of row_elems elements of dtype) gets output row u's sum, as
 * kvs__rows_union_sum makes it; every other row of dense is left alone.
 * dense must not overlap an input. Cannot fail. */
void kvs__rows_union_sum_into(const struct kvs__rows_union *u, kvs_dtype_t dtype, void *dense,
                              size_t row_elems, int nthreads);

/* The end of the run of output rows from r on that make one stretch of
 * elements, in the dense value and in each of their inputs: consecutive
 * row ids, the same number of inputs, each one row on. Rows [r, end) can
 * be summed or updated as one array of (end - r) rows. */
size_t kvs__rows_run_end(const struct kvs__rows_union *u, size_t r, size_t row_bytes);

void kvs__rows_union_free(struct kvs__rows_union *u);   /* leaves *u empty */

/* Zeroes the rows of dense (rows rows of row_bytes) that idx[0..m)
 * (sorted unique) does not name. */
void kvs__rows_zero_gaps(void *dense, int64_t rows, size_t row_bytes, const int64_t *idx,
                         size_t m);

/* Writes the dense form of m rows (idx sorted unique, each row row_bytes
 * of data) into dense (rows rows): the rows given, every other row zero. */
void kvs__rows_scatter(void *dense, int64_t rows, size_t row_bytes, const int64_t *idx,
                       size_t m, const void *data);

#endif
