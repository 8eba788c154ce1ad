/*
 * snaputil.h - helpers shared by the unit tests of a store's snapshot
 * (test_snapshot.c) and of the checkpoint folder (test_ckpt.c): a scratch
 * folder per run and files in it, a store of every dtype with int or
 * string keys under an optimizer, pushed some rounds, and the snapshot
 * meta both write. The checks end the test through cmocka. Each case's
 * deadline is testutil.h's CASE. Everything here is static inline, so
 * that a test that does not use a helper does not warn.
 */
#ifndef KVS_SNAPUTIL_H
#define KVS_SNAPUTIL_H

#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvs.h"
#include "store/engine.h"
#include "store/snapshot.h"
#include "testutil.h"

/* call must return 0; the message names the line and err's detail. */
#define OKE(call)                                                             \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != 0)                                                         \
            fail_msg("line %d: %s = %d (%s)", __LINE__, #call, rc_, err.msg); \
    } while (0)

/* ---- The scratch folder and its files ---------------------------------- */

static char tmpdir[PATH_MAX];
static struct kvs__err err;

static inline void tmp_path(char *buf, size_t size, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", tmpdir, name);
    assert_true(n > 0 && (size_t)n < size);
}

static inline uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b;
    long n;

    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static inline void write_all(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Entries of dir whose name holds sub. */
static inline int count_in(const char *dir, const char *sub)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    assert_non_null(d);
    while ((de = readdir(d)))
        if (strstr(de->d_name, sub))
            n++;
    closedir(d);
    return n;
}

/* ---- The test store ---------------------------------------------------- */

/* A deterministic element of a value of dtype: every float dtype gets a
 * finite number near 1, so that updates stay finite and comparable. */
static inline void fill(void *p, kvs_dtype_t dt, size_t count, unsigned seed)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t h = (uint32_t)(i * 2654435761u + seed * 40503u + 12345u);
        switch (dt) {
        case KVS_FLOAT32: ((float *)p)[i] = 0.5f + (float)(h % 1000) / 1000.0f; break;
        case KVS_FLOAT64: ((double *)p)[i] = 0.25 + (double)(h % 100000) / 77777.0; break;
        case KVS_FLOAT16: ((uint16_t *)p)[i] = (uint16_t)(0x3800 + h % 1024); break;
        case KVS_BFLOAT16: ((uint16_t *)p)[i] = (uint16_t)(0x3f00 + h % 128); break;
        case KVS_INT32: ((int32_t *)p)[i] = (int32_t)h; break;
        case KVS_INT64: ((int64_t *)p)[i] = (int64_t)h * 31 - 7; break;
        case KVS_UINT8: ((uint8_t *)p)[i] = (uint8_t)h; break;
        }
    }
}

static const kvs_dtype_t dtypes[] = { KVS_FLOAT32, KVS_FLOAT64, KVS_FLOAT16, KVS_BFLOAT16,
                                      KVS_INT32, KVS_INT64, KVS_UINT8 };
#define NDT ((int)(sizeof dtypes / sizeof dtypes[0]))
static const char *names[NDT] = { "w.f32", "bias f64", "", "e16", "i32", "i64", "u8" };

static inline int is_float(kvs_dtype_t dt)
{
    return dt <= KVS_BFLOAT16;
}

/* Key i of the test store: int keys 3i - 5 or the names above. */
static inline kvs_key_t key_of(int str, int i)
{
    return str ? KVS_STR_KEY(names[i]) : KVS_INT_KEY(3 * i - 5);
}

/* A shape per key: a scalar, vectors and matrices, one empty. */
static inline kvs_array_t arr_of(int i, void *data)
{
    static const int nd[NDT] = { 2, 1, 0, 3, 1, 2, 1 };
    static const int64_t sh[NDT][3] = { { 17, 5 }, { 33 }, { 0 }, { 2, 3, 4 }, { 0 },
                                        { 4, 4 }, { 9 } };
    kvs_array_t a = { .data = data, .dtype = dtypes[i], .ndim = nd[i], .device = KVS_HOST };

    for (int d = 0; d < nd[i]; d++)
        a.shape[d] = sh[i][d];
    return a;
}

static inline size_t count_of(const kvs_array_t *a)
{
    size_t c = 1;
    for (int d = 0; d < a->ndim; d++)
        c *= (size_t)a->shape[d];
    return c;
}

/* Pushes gradient round `round` to every float key of eng. */
static inline void push_all(struct kvs__engine *eng, int str, unsigned round)
{
    for (int i = 0; i < NDT; i++) {
        uint8_t buf[1024];
        kvs_key_t k = key_of(str, i);
        kvs_array_t a = arr_of(i, buf);

        if (!is_float(dtypes[i]))
            continue;
        fill(buf, dtypes[i], count_of(&a), 1000 + round * 17 + (unsigned)i);
        OKE(kvs__engine_push(eng, 1, &k, &a, &err));
    }
}

/* A store of every dtype under spec (NULL: none), pushed `pushes` times. */
static inline struct kvs__engine *make_store(int str, const char *spec, int pushes)
{
    struct kvs__engine *eng;

    OKE(kvs__engine_new(NULL, &eng, &err));
    for (int i = 0; i < NDT; i++) {
        uint8_t buf[1024];
        kvs_key_t k = key_of(str, i);
        kvs_array_t a = arr_of(i, buf);

        fill(buf, dtypes[i], count_of(&a), (unsigned)i);
        OKE(kvs__engine_init(eng, 1, &k, &a, 0, &err));
    }
    if (spec)
        OKE(kvs__engine_set_optimizer(eng, spec, &err));
    for (int r = 0; r < pushes; r++)
        push_all(eng, str, (unsigned)r);
    return eng;
}

/* The meta of the test snapshots. */
static const struct kvs__snap_meta meta0 = {
    .step = 41, .job = "job-x", .nworkers = 3, .sync = 1, .seq = 9, .made_ns = 1234567890123,
};

/* Makes the run's scratch folder, tmpdir, named from prefix under $TMPDIR
 * (/tmp when unset); -1 when it cannot. */
static inline int tmpdir_make(const char *prefix)
{
    const char *base = getenv("TMPDIR");

    snprintf(tmpdir, sizeof tmpdir, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* Removes tmpdir and all in it. */
static inline int tmpdir_remove(void)
{
    char cmd[PATH_MAX + 16];

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd);
}

#endif
