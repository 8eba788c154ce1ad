/*
 * test_snapshot.c - unit tests of a store's snapshot (src/store/
 * snapshot.c): the round trip of int and string keys of every dtype with
 * sgd and adam states, round counts and meta, in memory and through a
 * file, bit for bit (the restored store then updates as the original
 * does); refusal of a restore into a store holding keys; every truncation
 * and every flipped byte of an image refused, forged lengths with a good
 * checksum refused or harmless; a failed write leaving the old file whole
 * and no temporary file; the checkpoint directory (two newest kept, a
 * damaged newest one reported and passed over, an empty or missing
 * directory); a capture written after the engine changed, its values
 * read through a source that copied them aside: the commit point's bytes;
 * and the commits of the in-process store types, a GPU's key refused (on
 * the CUDA stand-in where the build has it).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvs.h"
#include "kernels/optim.h"
#include "store/engine.h"
#include "store/ckpt.h"
#include "store/snapshot.h"
#include "store/statefile_codec.h"

/* ---- Deadlines (tests/testutil.h's CASE, without its kvs.h-only rule) - */

static int arm(void **state)
{
    const char *slow = getenv("KVS_TEST_SLOW");
    int s = slow ? atoi(slow) : 1;

    (void)state;
    alarm((unsigned)(60 * (s > 0 ? s : 1)));
    return 0;
}

static int disarm(void **state)
{
    (void)state;
    alarm(0);
    return 0;
}

#define CASE(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

#define OKE(call)                                                             \
    do {                                                                      \
        int rc_ = (call);                                                     \
        if (rc_ != 0)                                                         \
            fail_msg("line %d: %s = %d (%s)", __LINE__, #call, rc_, err.msg); \
    } while (0)

/* ---- Helpers --------------------------------------------------------- */

static char tmpdir[PATH_MAX];
static struct kvs__err err;

static void tmp_path(char *buf, size_t size, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", tmpdir, name);
    assert_true(n > 0 && (size_t)n < size);
}

static uint8_t *read_all(const char *path, size_t *len)
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

static void write_all(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Entries of dir whose name holds sub. */
static int count_in(const char *dir, const char *sub)
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

/* A deterministic element of a value of dtype: every float dtype gets a
 * finite number near 1, so that updates stay finite and comparable. */
static void fill(void *p, kvs_dtype_t dt, size_t count, unsigned seed)
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

static int is_float(kvs_dtype_t dt)
{
    return dt <= KVS_BFLOAT16;
}

/* Key i of the test store: int keys 3i - 5 or the names above. */
static kvs_key_t key_of(int str, int i)
{
    return str ? KVS_STR_KEY(names[i]) : KVS_INT_KEY(3 * i - 5);
}

/* A shape per key: a scalar, vectors and matrices, one empty. */
static kvs_array_t arr_of(int i, void *data)
{
    static const int nd[NDT] = { 2, 1, 0, 3, 1, 2, 1 };
    static const int64_t sh[NDT][3] = { { 17, 5 }, { 33 }, { 0 }, { 2, 3, 4 }, { 0 },
                                        { 4, 4 }, { 9 } };
    kvs_array_t a = { .data = data, .dtype = dtypes[i], .ndim = nd[i], .device = KVS_HOST };

    for (int d = 0; d < nd[i]; d++)
        a.shape[d] = sh[i][d];
    return a;
}

static size_t count_of(const kvs_array_t *a)
{
    size_t c = 1;
    for (int d = 0; d < a->ndim; d++)
        c *= (size_t)a->shape[d];
    return c;
}

/* Pushes gradient round `round` to every float key of eng. */
static void push_all(struct kvs__engine *eng, int str, unsigned round)
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
static struct kvs__engine *make_store(int str, const char *spec, int pushes)
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

/* Round counts the front keeps: a function of the key. */
static uint64_t rounds_of(void *ctx, const struct kvs__entry_info *info)
{
    (void)ctx;
    return info->bytes * 1000 + (uint64_t)info->ndim + 7;
}

struct made_log {
    int calls, bad;
    struct kvs__engine *eng;
};

static int made_cb(void *ctx, kvs_key_t key, const struct kvs__entry_info *info,
                   uint64_t rounds, struct kvs__err *e)
{
    struct made_log *m = ctx;
    struct kvs__entry_info again;

    (void)e;
    /* the key named is the one stored */
    if (kvs__engine_lookup(m->eng, key, &again, e) != 0 || again.value != info->value)
        m->bad++;
    m->calls++;
    if (rounds != rounds_of(NULL, info))
        m->bad++;
    return 0;
}

/* a and b hold the same keys, values, versions aside, and states bit for
 * bit; returns the number of keys with state buffers. */
static int same_store(struct kvs__engine *a, struct kvs__engine *b, int str)
{
    const char *sa = kvs__engine_optimizer(a), *sb = kvs__engine_optimizer(b);
    int nstates = 0;

    assert_int_equal(kvs__engine_nkeys(a), kvs__engine_nkeys(b));
    assert_true((sa == NULL) == (sb == NULL));
    if (sa)
        assert_string_equal(sa, sb);
    for (int i = 0; i < NDT; i++) {
        struct kvs__entry_info ia, ib;
        const struct kvs__optim_state *ta, *tb;
        size_t es;

        OKE(kvs__engine_lookup(a, key_of(str, i), &ia, &err));
        OKE(kvs__engine_lookup(b, key_of(str, i), &ib, &err));
        assert_int_equal(ia.dtype, ib.dtype);
        assert_int_equal(ia.ndim, ib.ndim);
        assert_memory_equal(ia.shape, ib.shape, sizeof *ia.shape * (size_t)ia.ndim);
        assert_int_equal(ia.bytes, ib.bytes);
        if (ia.bytes)
            assert_memory_equal(ia.value, ib.value, ia.bytes);
        ta = kvs__engine_state(a, ia.entry);
        tb = kvs__engine_state(b, ib.entry);
        assert_true((ta == NULL) == (tb == NULL));
        if (!ta)
            continue;
        assert_int_equal(ta->t, tb->t);
        assert_int_equal(ta->nbuf, tb->nbuf);
        assert_int_equal(ta->count, tb->count);
        es = ta->dtype == KVS_FLOAT64 ? 8 : 4;
        for (int j = 0; j < ta->nbuf && ta->count; j++)
            assert_memory_equal(ta->buf[j], tb->buf[j], ta->count * es);
        nstates += ta->nbuf > 0 && ta->count > 0 && ta->t > 0;
    }
    return nstates;
}

static const struct kvs__snap_meta meta0 = {
    .step = 41, .job = "job-x", .nworkers = 3, .sync = 1, .seq = 9, .made_ns = 1234567890123,
};

static void check_meta(const struct kvs__snap_meta *m)
{
    assert_int_equal(m->step, meta0.step);
    assert_string_equal(m->job, meta0.job);
    assert_int_equal(m->nworkers, meta0.nworkers);
    assert_int_equal(m->sync, meta0.sync);
    assert_int_equal(m->seq, meta0.seq);
    assert_int_equal(m->made_ns, meta0.made_ns);
}

/* Restores s into a new store, checks it against eng, then pushes both
 * twice more: they must stay identical. */
static void restore_and_compare(struct kvs__engine *eng, const struct kvs__snapshot *s, int str,
                                int nstates)
{
    struct kvs__engine *back;
    struct made_log m = { 0 };

    check_meta(kvs__snapshot_meta(s));
    assert_int_equal(kvs__snapshot_nkeys(s), NDT);
    OKE(kvs__engine_new(NULL, &back, &err));
    m.eng = back;
    OKE(kvs__snapshot_restore(back, s, made_cb, &m, &err));
    assert_int_equal(m.calls, NDT);
    assert_int_equal(m.bad, 0);
    assert_int_equal(same_store(eng, back, str), nstates);
    if (kvs__engine_optimizer(eng)) {
        push_all(eng, str, 50);
        push_all(back, str, 50);
        push_all(eng, str, 51);
        push_all(back, str, 51);
        same_store(eng, back, str);
    }
    kvs__engine_free(back);
}

static void round_trip(int str, const char *spec, int nstates)
{
    struct kvs__engine *eng = make_store(str, spec, 3);
    struct kvs__snapshot *s;
    char path[PATH_MAX];
    uint8_t *img, *file;
    size_t len, flen;
    uint64_t bytes = 0;

    /* In memory. */
    OKE(kvs__snapshot_encode(eng, &meta0, rounds_of, NULL, &img, &len, &err));
    OKE(kvs__snapshot_from(img, len, "mem", &s, &err));
    assert_int_equal(kvs__snapshot_bytes(s), len);
    /* Through a file, durable or not: the same bytes. */
    tmp_path(path, sizeof path, "rt.snap");
    OKE(kvs__snapshot_write(eng, &meta0, rounds_of, NULL, path, 1, &bytes, &err));
    assert_int_equal(bytes, len);
    file = read_all(path, &flen);
    assert_int_equal(flen, len);
    assert_memory_equal(file, img, len);
    free(file);
    OKE(kvs__snapshot_write(eng, &meta0, rounds_of, NULL, path, 0, NULL, &err));
    restore_and_compare(eng, s, str, nstates);
    kvs__snapshot_free(s);
    kvs__engine_free(eng);

    eng = make_store(str, spec, 3);
    OKE(kvs__snapshot_open(path, &s, &err));
    restore_and_compare(eng, s, str, nstates);
    kvs__snapshot_free(s);
    assert_int_equal(count_in(tmpdir, ".tmp."), 0);
    unlink(path);
    free(img);
    kvs__engine_free(eng);
}

static void test_round_trip_int_adam(void **state)
{
    (void)state;
    round_trip(0, "adam lr=0.01 wd=0.001", 4);   /* every float key */
}

static void test_round_trip_str_sgd(void **state)
{
    (void)state;
    round_trip(1, "sgd lr=0.1 momentum=0.9 wd=0.0001", 4);
}

static void test_round_trip_plain(void **state)
{
    (void)state;
    round_trip(0, NULL, 0);              /* no optimizer: values only */
    round_trip(1, "sgd lr=0.5", 0);      /* an optimizer without state buffers */
}

/* ---- A capture written later, the engine changed meanwhile ------------ */

#define BIG_N ((size_t)3 << 18)        /* floats: 3 MiB, several pieces */

/* The front of a capture: a value copied aside (before the engine
 * changes it) is read from the copy; the pieces are checked to come in
 * order, each begun before it ends. */
struct aside {
    uint8_t **copy;                    /* [nkeys]: NULL, read live */
    size_t i, calls;
    uint64_t off;
    int open, bad;
};

static const void *aside_begin(void *ctx, size_t i, const void *live, uint64_t off, size_t n)
{
    struct aside *a = ctx;

    a->bad |= a->open || n == 0 || n > ((size_t)1 << 20) || i < a->i
              || (i == a->i && a->calls && off != a->off);
    a->open = 1;
    a->i = i;
    a->calls++;
    return a->copy[i] ? a->copy[i] + off : (const uint8_t *)live + off;
}

static void aside_end(void *ctx, size_t i, uint64_t off, size_t n)
{
    struct aside *a = ctx;

    a->bad |= !a->open || i != a->i;
    a->open = 0;
    a->off = off + n;
}

struct copier {
    struct aside *a;
    size_t i;
};

static int copy_value(void *ctx, kvs_key_t key, const struct kvs__entry_info *info)
{
    struct copier *c = ctx;

    (void)key;
    if (info->bytes) {
        c->a->copy[c->i] = malloc(info->bytes);
        assert_non_null(c->a->copy[c->i]);
        memcpy(c->a->copy[c->i], info->value, info->bytes);
    }
    c->i++;
    return 0;
}

static void capture_case(int str)
{
    struct kvs__engine *eng = make_store(str, "sgd lr=0.1 momentum=0.9", 2);
    kvs_key_t big = str ? KVS_STR_KEY("zz big") : KVS_INT_KEY(1000);
    float *v = malloc(BIG_N * sizeof *v);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { (int64_t)BIG_N } };
    struct aside as = { 0 };
    struct kvs__snap_source src = { aside_begin, aside_end, &as };
    struct kvs__snap_capture *cap;
    struct copier cp = { &as, 0 };
    char path[PATH_MAX];
    uint8_t *img, *file;
    size_t len, flen, n;
    uint64_t bytes = 0;

    assert_non_null(v);
    for (size_t i = 0; i < BIG_N; i++)
        v[i] = (float)(i % 1009) * 0.25f;
    OKE(kvs__engine_init(eng, 1, &big, &a, 0, &err));
    OKE(kvs__engine_push(eng, 1, &big, &a, &err));
    /* The commit point's image, then its capture. */
    OKE(kvs__snapshot_encode(eng, &meta0, rounds_of, NULL, &img, &len, &err));
    OKE(kvs__snapshot_capture(eng, &meta0, rounds_of, NULL, &cap, &err));
    n = kvs__capture_nkeys(cap);
    assert_int_equal(n, kvs__engine_nkeys(eng));
    tmp_path(path, sizeof path, "cap.snap");
    /* Nothing changed: read live, the same bytes. */
    as.copy = calloc(n, sizeof *as.copy);
    assert_non_null(as.copy);
    OKE(kvs__snapshot_write_capture(cap, &src, path, 0, &bytes, &err));
    assert_int_equal(bytes, len);
    file = read_all(path, &flen);
    assert_int_equal(flen, len);
    assert_memory_equal(file, img, len);
    free(file);
    assert_false(as.bad);
    assert_true(as.calls >= n);          /* the big key in 3 pieces, one key empty */
    /* Every value copied aside, then every key and state changed (a new
     * optimizer too): the file is still the commit point's. */
    OKE(kvs__engine_foreach(eng, copy_value, &cp, &err));
    push_all(eng, str, 90);
    OKE(kvs__engine_push(eng, 1, &big, &a, &err));
    OKE(kvs__engine_set_optimizer(eng, "adam lr=0.01", &err));
    push_all(eng, str, 91);
    as.i = as.calls = 0;
    as.off = 0;
    OKE(kvs__snapshot_write_capture(cap, &src, path, 1, NULL, &err));
    file = read_all(path, &flen);
    assert_int_equal(flen, len);
    assert_memory_equal(file, img, len);
    free(file);
    assert_false(as.bad);
    /* A capture's write refuses what it cannot use. */
    assert_int_equal(kvs__snapshot_write_capture(NULL, NULL, path, 0, NULL, &err),
                     KVS_EBADARG);
    assert_int_equal(kvs__snapshot_write_capture(cap, NULL, "", 0, NULL, &err), KVS_EBADARG);
    assert_int_equal(count_in(tmpdir, ".tmp."), 0);
    for (size_t i = 0; i < n; i++)
        free(as.copy[i]);
    free(as.copy);
    kvs__capture_free(cap);
    unlink(path);
    free(img);
    free(v);
    kvs__engine_free(eng);
}

static void test_capture(void **state)
{
    (void)state;
    capture_case(0);
    capture_case(1);
}

static void test_empty_store(void **state)
{
    struct kvs__engine *eng, *back;
    struct kvs__snapshot *s;
    uint8_t *img;
    size_t len;

    (void)state;
    OKE(kvs__engine_new(NULL, &eng, &err));
    OKE(kvs__snapshot_encode(eng, &meta0, NULL, NULL, &img, &len, &err));
    OKE(kvs__snapshot_from(img, len, "empty", &s, &err));
    assert_int_equal(kvs__snapshot_nkeys(s), 0);
    OKE(kvs__engine_new(NULL, &back, &err));
    OKE(kvs__snapshot_restore(back, s, NULL, NULL, &err));
    assert_int_equal(kvs__engine_nkeys(back), 0);
    kvs__snapshot_free(s);
    kvs__engine_free(back);
    kvs__engine_free(eng);
    free(img);
}

static void test_restore_into_full(void **state)
{
    struct kvs__engine *eng = make_store(0, "adam", 1), *other;
    struct kvs__snapshot *s;
    uint8_t *img;
    size_t len;
    float v = 1;
    kvs_key_t k = KVS_INT_KEY(1000);
    kvs_array_t a = { .data = &v, .dtype = KVS_FLOAT32, .ndim = 0 };

    (void)state;
    OKE(kvs__snapshot_encode(eng, &meta0, NULL, NULL, &img, &len, &err));
    OKE(kvs__snapshot_from(img, len, "mem", &s, &err));
    OKE(kvs__engine_new(NULL, &other, &err));
    OKE(kvs__engine_init(other, 1, &k, &a, 0, &err));
    assert_int_equal(kvs__snapshot_restore(other, s, NULL, NULL, &err), KVS_EKEYEXISTS);
    assert_int_equal(kvs__engine_nkeys(other), 1);
    assert_int_equal(kvs__snapshot_restore(NULL, s, NULL, NULL, &err), KVS_EBADARG);
    kvs__snapshot_free(s);
    kvs__engine_free(other);
    kvs__engine_free(eng);
    free(img);
}

static void test_bad_args(void **state)
{
    struct kvs__engine *eng = make_store(0, NULL, 0);
    struct kvs__snap_meta m = meta0;
    struct kvs__snapshot *s = NULL;
    char path[PATH_MAX];
    uint8_t *img;
    size_t len;

    (void)state;
    tmp_path(path, sizeof path, "bad.snap");
    m.step = -1;
    assert_int_equal(kvs__snapshot_write(eng, &m, NULL, NULL, path, 0, NULL, &err),
                     KVS_EBADARG);
    m = meta0;
    m.nworkers = 0;
    assert_int_equal(kvs__snapshot_encode(eng, &m, NULL, NULL, &img, &len, &err), KVS_EBADARG);
    assert_int_equal(kvs__snapshot_write(eng, &meta0, NULL, NULL, "", 0, NULL, &err),
                     KVS_EBADARG);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(count_in(tmpdir, ".tmp."), 0);
    /* Not a file, no file, a directory. */
    assert_int_equal(kvs__snapshot_open(path, &s, &err), -ENOENT);
    assert_int_equal(kvs__snapshot_open(tmpdir, &s, &err), -EINVAL);
    assert_null(s);
    kvs__engine_free(eng);
}

/* ---- Damage ------------------------------------------------------------ */

static void small_image(uint8_t **img, size_t *len)
{
    struct kvs__engine *eng = make_store(1, "adam", 2);

    OKE(kvs__snapshot_encode(eng, &meta0, rounds_of, NULL, img, len, &err));
    kvs__engine_free(eng);
}

/* The LEN bytes of IMG as the file PATH: opening it is refused as
 * corrupt. What the open left in the snapshot pointer is returned. */
static struct kvs__snapshot *corrupt_file(const char *path, const uint8_t *img, size_t len)
{
    struct kvs__snapshot *s = NULL;

    write_all(path, img, len);
    assert_int_equal(kvs__snapshot_open(path, &s, &err), KVS_ECORRUPT);
    return s;
}

static void test_truncated(void **state)
{
    struct kvs__snapshot *s = NULL;
    char path[PATH_MAX];
    uint8_t *img;
    size_t len;

    (void)state;
    small_image(&img, &len);
    for (size_t cut = 0; cut < len; cut++) {
        int rc = kvs__snapshot_from(img, cut, "cut", &s, &err);
        if (rc != KVS_ECORRUPT)
            fail_msg("cut at %zu of %zu: %d", cut, len, rc);
        assert_null(s);
    }
    /* Files: a sample of cuts, and one byte more. */
    tmp_path(path, sizeof path, "cut.snap");
    for (size_t cut = 0; cut < len; cut += 1 + cut / 3) {
        assert_null(corrupt_file(path, img, cut));
    }
    img = realloc(img, len + 1);
    assert_non_null(img);
    img[len] = 0;
    corrupt_file(path, img, len + 1);
    write_all(path, img, len);
    OKE(kvs__snapshot_open(path, &s, &err));
    kvs__snapshot_free(s);
    unlink(path);
    free(img);
}

static void test_flipped(void **state)
{
    struct kvs__snapshot *s = NULL;
    char path[PATH_MAX];
    uint8_t *img;
    size_t len;

    (void)state;
    small_image(&img, &len);
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            int rc;

            img[i] ^= (uint8_t)(1u << bit);
            rc = kvs__snapshot_from(img, len, "flip", &s, &err);
            img[i] ^= (uint8_t)(1u << bit);
            if (rc != KVS_ECORRUPT)
                fail_msg("byte %zu bit %d of %zu: %d", i, bit, len, rc);
            assert_null(s);
        }
    }
    tmp_path(path, sizeof path, "flip.snap");
    for (size_t i = 0; i < len; i += 1 + i / 4) {
        img[i] ^= 0x40;
        corrupt_file(path, img, len);
        img[i] ^= 0x40;
    }
    unlink(path);
    free(img);
}

/* A byte changed and the checksum made good again, as a forger would:
 * the image is refused, or read and restored (a value's or a count's
 * byte), and nothing reads or allocates past what the image holds (the
 * sanitizer build watches). */
static void test_forged(void **state)
{
    uint8_t *img;
    size_t len;
    int refused = 0;

    (void)state;
    small_image(&img, &len);
    for (size_t i = 0; i + 4 < len; i++) {
        static const uint8_t deltas[] = { 0x01, 0x80, 0xff };
        for (size_t d = 0; d < sizeof deltas; d++) {
            struct kvs__snapshot *s = NULL;
            struct kvs__engine *eng;
            uint8_t old = img[i];
            int rc;

            img[i] ^= deltas[d];
            kvs__le32_put(img + len - 4, kvs__crc32c(0, img, len - 4));
            rc = kvs__snapshot_from(img, len, "forged", &s, &err);
            if (rc == 0) {
                OKE(kvs__engine_new(NULL, &eng, &err));
                rc = kvs__snapshot_restore(eng, s, NULL, NULL, &err);
                kvs__engine_free(eng);
                kvs__snapshot_free(s);
            } else {
                assert_int_equal(rc, KVS_ECORRUPT);
            }
            refused += rc != 0;
            img[i] = old;
        }
    }
    kvs__le32_put(img + len - 4, kvs__crc32c(0, img, len - 4));
    /* The header and record fields are refused, most value bytes not. */
    assert_true(refused > 100);
    assert_true((size_t)refused < 3 * (len - 4));
    free(img);
}

/* A key count, a name length or a value length forged to the maximum:
 * refused without a big allocation. */
static void test_forged_lengths(void **state)
{
    struct kvs__engine *eng;
    struct kvs__snapshot *s = NULL;
    uint8_t *img;
    size_t len, at;

    (void)state;
    OKE(kvs__engine_new(NULL, &eng, &err));
    {
        float v[4] = { 1, 2, 3, 4 };
        kvs_key_t k = KVS_STR_KEY("k");
        kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 4 } };
        OKE(kvs__engine_init(eng, 1, &k, &a, 0, &err));
    }
    OKE(kvs__snapshot_encode(eng, &meta0, NULL, NULL, &img, &len, &err));
    /* The key count follows the header: magic 8, version 4, flags 4, step
     * 8, job 4 + 5, nworkers 4, sync 4, seq 8, made 8, spec 4 + 0. */
    at = 8 + 4 + 4 + 8 + 4 + 5 + 4 + 4 + 8 + 8 + 4;
    assert_int_equal(kvs__le64_get(img + at), 1);
    for (int f = 0; f < 4; f++) {
        uint8_t *c = malloc(len);
        assert_non_null(c);
        memcpy(c, img, len);
        switch (f) {
        case 0: kvs__le64_put(c + at, UINT64_MAX); break;                /* keys */
        case 1: kvs__le32_put(c + at + 8 + 1, UINT32_MAX); break;         /* name */
        case 2: kvs__le64_put(c + at + 8 + 1 + 4 + 1 + 4 + 4 + 8 + 8, UINT64_MAX); break;
        case 3: kvs__le64_put(c + len - 4 - 8, UINT64_MAX); break;        /* states */
        }
        kvs__le32_put(c + len - 4, kvs__crc32c(0, c, len - 4));
        assert_int_equal(kvs__snapshot_from(c, len, "forged", &s, &err), KVS_ECORRUPT);
        assert_null(s);
        free(c);
    }
    kvs__engine_free(eng);
    free(img);
}

/* ---- Failed writes ----------------------------------------------------- */

static void test_failed_write(void **state)
{
    struct kvs__engine *small = make_store(0, NULL, 0), *big;
    struct kvs__snapshot *s;
    struct kvs__snap_meta m = meta0;
    struct rlimit old, lim;
    char path[PATH_MAX];
    uint64_t bytes;
    void (*oldsig)(int);
    int rc;

    (void)state;
    tmp_path(path, sizeof path, "fail.snap");
    OKE(kvs__snapshot_write(small, &meta0, NULL, NULL, path, 1, &bytes, &err));
    OKE(kvs__engine_new(NULL, &big, &err));
    {
        size_t n = 1 << 18;
        float *v = calloc(n, sizeof *v);
        kvs_key_t k = KVS_INT_KEY(1);
        kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1,
                          .shape = { (int64_t)n } };
        assert_non_null(v);
        OKE(kvs__engine_init(big, 1, &k, &a, 0, &err));
        free(v);
    }
    /* The file system says EFBIG past 64 KiB (no signal). */
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1 << 16;
    oldsig = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    m.step = 99;
    rc = kvs__snapshot_write(big, &m, NULL, NULL, path, 1, NULL, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(rc, -EFBIG);
    assert_non_null(strstr(err.msg, "fail.snap"));
    assert_int_equal(count_in(tmpdir, ".tmp."), 0);
    OKE(kvs__snapshot_open(path, &s, &err));
    assert_int_equal(kvs__snapshot_meta(s)->step, meta0.step);
    assert_int_equal(kvs__snapshot_bytes(s), bytes);
    kvs__snapshot_free(s);
    /* A directory that does not exist: nothing is left anywhere. */
    assert_true(kvs__snapshot_write(small, &meta0, NULL, NULL, "/nonexistent-kvs/x.snap", 0,
                                    NULL, &err) == -ENOENT);
    unlink(path);
    kvs__engine_free(big);
    kvs__engine_free(small);
}

/* ---- Checkpoint directory ---------------------------------------------- */

struct reports {
    int n;
    char last[PATH_MAX];
};

static void report_cb(void *ctx, const char *path, const char *why)
{
    struct reports *r = ctx;

    assert_non_null(why);
    r->n++;
    snprintf(r->last, sizeof r->last, "%s", path);
}

static void make_ckdir(char *dir, size_t size, const char *name)
{
    tmp_path(dir, size, name);
    assert_int_equal(mkdir(dir, 0700), 0);
}

static void test_ckpt_keeps_two(void **state)
{
    struct kvs__engine *eng = make_store(0, "sgd momentum=0.5", 1);
    struct kvs__snapshot *s;
    char dir[PATH_MAX / 2], src[PATH_MAX], got[PATH_MAX], want[PATH_MAX];
    struct kvs__snap_meta m = meta0;
    struct reports r = { 0 };

    (void)state;
    make_ckdir(dir, sizeof dir, "ck2");
    tmp_path(src, sizeof src, "ck2.snap");
    for (uint64_t seq = 1; seq <= 12; seq++) {
        m.seq = seq;
        m.step = (int64_t)seq * 10;
        OKE(kvs__snapshot_write(eng, &m, NULL, NULL, src, 0, NULL, &err));
        OKE(kvs__ckpt_save(dir, src, seq, &err));
        assert_int_equal(count_in(dir, "snap-"), seq < 2 ? 1 : 2);
        assert_int_equal(count_in(dir, ".tmp."), 0);
    }
    /* Names sort as numbers: 9 and 10 would not without the zeros. */
    snprintf(want, sizeof want, "%s/snap-00000000000000000012.kvs", dir);
    assert_int_equal(access(want, F_OK), 0);
    OKE(kvs__ckpt_newest(dir, &s, got, sizeof got, report_cb, &r, &err));
    assert_non_null(s);
    assert_string_equal(got, want);
    assert_int_equal(kvs__snapshot_meta(s)->step, 120);
    assert_int_equal(r.n, 0);
    kvs__snapshot_free(s);
    /* A lower number than those there: kept, beside the two newest. */
    OKE(kvs__ckpt_save(dir, src, 3, &err));
    snprintf(want, sizeof want, "%s/snap-00000000000000000003.kvs", dir);
    assert_int_equal(access(want, F_OK), 0);
    assert_int_equal(count_in(dir, "snap-"), 3);
    OKE(kvs__ckpt_save(dir, src, 13, &err));
    assert_int_equal(count_in(dir, "snap-"), 2);
    assert_int_equal(access(want, F_OK), -1);
    /* A missing source: -ENOENT, nothing new in dir. */
    assert_int_equal(kvs__ckpt_save(dir, "/nonexistent-kvs.snap", 14, &err), -ENOENT);
    assert_int_equal(count_in(dir, "snap-"), 2);
    assert_int_equal(count_in(dir, ".tmp."), 0);
    unlink(src);
    kvs__engine_free(eng);
}

static void test_ckpt_newest_skips_damaged(void **state)
{
    struct kvs__engine *eng = make_store(1, "adam", 1);
    struct kvs__snapshot *s;
    char dir[PATH_MAX / 2], src[PATH_MAX], got[PATH_MAX], newest[PATH_MAX];
    struct kvs__snap_meta m = meta0;
    struct reports r = { 0 };
    uint8_t *b;
    size_t len;

    (void)state;
    make_ckdir(dir, sizeof dir, "ckd");
    tmp_path(src, sizeof src, "ckd.snap");
    for (uint64_t seq = 7; seq <= 8; seq++) {
        m.seq = seq;
        m.step = (int64_t)seq;
        OKE(kvs__snapshot_write(eng, &m, NULL, NULL, src, 0, NULL, &err));
        OKE(kvs__ckpt_save(dir, src, seq, &err));
    }
    snprintf(newest, sizeof newest, "%s/snap-00000000000000000008.kvs", dir);
    b = read_all(newest, &len);
    b[len / 2] ^= 1;
    write_all(newest, b, len);
    free(b);
    /* Files of other names are no snapshots. */
    {
        char other[PATH_MAX];
        snprintf(other, sizeof other, "%s/snap-9.kvs", dir);
        write_all(other, (const uint8_t *)"x", 1);
        snprintf(other, sizeof other, "%s/.snap-00000000000000000009.kvs.tmp.1", dir);
        write_all(other, (const uint8_t *)"x", 1);
    }
    OKE(kvs__ckpt_newest(dir, &s, got, sizeof got, report_cb, &r, &err));
    assert_non_null(s);
    assert_int_equal(kvs__snapshot_meta(s)->step, 7);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.last, newest);
    kvs__snapshot_free(s);
    /* Both damaged: none, and 0. */
    snprintf(newest, sizeof newest, "%s/snap-00000000000000000007.kvs", dir);
    write_all(newest, (const uint8_t *)"KVSSNAPS", 8);
    r.n = 0;
    OKE(kvs__ckpt_newest(dir, &s, NULL, 0, report_cb, &r, &err));
    assert_null(s);
    assert_int_equal(r.n, 2);
    unlink(src);
    kvs__engine_free(eng);
}

static void test_ckpt_empty_missing(void **state)
{
    struct kvs__snapshot *s = (void *)1;
    char dir[PATH_MAX];

    (void)state;
    make_ckdir(dir, sizeof dir, "cke");
    OKE(kvs__ckpt_newest(dir, &s, NULL, 0, NULL, NULL, &err));
    assert_null(s);
    tmp_path(dir, sizeof dir, "no-such-dir");
    assert_int_equal(kvs__ckpt_newest(dir, &s, NULL, 0, NULL, NULL, &err), -ENOENT);
    assert_null(s);
    assert_int_equal(kvs__ckpt_save(dir, dir, 1, &err), -ENOENT);
}

/* Temp files of a copy whose writer is gone are removed by the next save;
 * a live writer's, and files of other names, stay. */
static void test_ckpt_drops_stale_tmp(void **state)
{
    struct kvs__engine *eng = make_store(0, "sgd", 1);
    struct kvs__snap_meta m = meta0;
    char dir[PATH_MAX / 2], src[PATH_MAX], dead[PATH_MAX], live[PATH_MAX], other[PATH_MAX];
    pid_t child;
    int st;

    (void)state;
    make_ckdir(dir, sizeof dir, "cks");
    tmp_path(src, sizeof src, "cks.snap");
    OKE(kvs__snapshot_write(eng, &m, NULL, NULL, src, 0, NULL, &err));
    /* A pid that is gone: a child's, waited for. */
    if ((child = fork()) == 0)
        _exit(0);
    assert_true(child > 0);
    assert_int_equal(waitpid(child, &st, 0), child);
    snprintf(dead, sizeof dead, "%s/.snap-00000000000000000002.kvs.tmp.%ld", dir, (long)child);
    snprintf(live, sizeof live, "%s/.snap-00000000000000000002.kvs.tmp.%ld", dir,
             (long)getppid());
    snprintf(other, sizeof other, "%s/.snap-x.kvs.tmp.%ld", dir, (long)child);
    fclose(fopen(dead, "w"));
    fclose(fopen(live, "w"));
    fclose(fopen(other, "w"));
    assert_int_equal(kvs__ckpt_has(dir, 1), 0);
    OKE(kvs__ckpt_save(dir, src, 1, &err));
    assert_int_equal(kvs__ckpt_has(dir, 1), 1);
    assert_int_equal(kvs__ckpt_has(dir, 2), 0);
    assert_int_equal(access(dead, F_OK), -1);
    assert_int_equal(access(live, F_OK), 0);
    assert_int_equal(access(other, F_OK), 0);
    unlink(live);
    unlink(other);
    unlink(src);
    kvs__engine_free(eng);
}

/* ---- The in-process stores' commits ------------------------------------ */

static void local_commits(const char *type)
{
    kvs_t *kv = NULL;
    int64_t step = 123;
    float v[3] = { 1, 2, 3 };
    kvs_key_t k = KVS_INT_KEY(0);
    kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 3 } };

    assert_int_equal(kvs_create(type, &kv), 0);
    assert_int_equal(kvs_resume_step(kv, &step), 0);
    assert_int_equal(step, -1);
    assert_int_equal(kvs_commit(kv, 0), 0);              /* an empty store commits */
    assert_int_equal(kvs_resume_step(kv, &step), 0);
    assert_int_equal(step, 0);
    assert_int_equal(kvs_init(kv, 1, &k, &a), 0);
    assert_int_equal(kvs_set_optimizer(kv, "adam"), 0);
    assert_int_equal(kvs_push(kv, 1, &k, &a, 0), 0);
    assert_int_equal(kvs_commit(kv, 5), 0);
    assert_int_equal(kvs_resume_step(kv, &step), 0);
    assert_int_equal(step, 5);
    assert_int_equal(kvs_commit(kv, -1), KVS_EBADARG);
    assert_int_equal(kvs_resume_step(kv, &step), 0);
    assert_int_equal(step, 5);
    assert_int_equal(kvs_commit(kv, 3), 0);              /* any step >= 0 */
    assert_int_equal(kvs_resume_step(kv, &step), 0);
    assert_int_equal(step, 3);
    assert_int_equal(kvs_resume_step(kv, NULL), KVS_EBADARG);
    assert_int_equal(kvs_commit(NULL, 1), KVS_EBADARG);
    kvs_close(kv);
}

static void test_local_commit(void **state)
{
    (void)state;
    local_commits("local");
}

/* The device types keep a key on a GPU where there is one (the stand-in's
 * when the build has it), and a snapshot takes host values only: the
 * commit names the key and keeps the previous snapshot. Without a GPU
 * they commit as local does. */
static void test_device_commit(void **state)
{
    static const char *types[] = { "device", "nccl" };

    (void)state;
    for (int t = 0; t < 2; t++) {
        kvs_t *kv = NULL;
        int64_t step = 0;
        float v[3] = { 1, 2, 3 };
        kvs_key_t k = KVS_INT_KEY(77);
        kvs_array_t a = { .data = v, .dtype = KVS_FLOAT32, .ndim = 1, .shape = { 3 } };
        kvs_array_t view = a;

        view.data = NULL;
        assert_int_equal(kvs_create(types[t], &kv), 0);
        assert_int_equal(kvs_commit(kv, 1), 0);
        assert_int_equal(kvs_init(kv, 1, &k, &a), 0);
        if (kvs_pull_view(kv, 1, &k, &view, 0) != 0)
            fail_msg("%s: pull_view: %s", types[t], kvs_last_error(kv));
#ifdef STANDIN_PATH
        assert_int_not_equal(view.device, KVS_HOST);
#endif
        if (view.device == KVS_HOST) {
            assert_int_equal(kvs_commit(kv, 2), 0);
            assert_int_equal(kvs_resume_step(kv, &step), 0);
            assert_int_equal(step, 2);
        } else {
            assert_int_equal(kvs_commit(kv, 2), KVS_ENOTSUP);
            assert_non_null(strstr(kvs_last_error(kv), "key 77 "));
            assert_int_equal(kvs_resume_step(kv, &step), 0);
            assert_int_equal(step, 1);
        }
        kvs_close(kv);
    }
}

/* ---- Main ------------------------------------------------------------ */

static int cleanup_dir(const char *dir)
{
    char cmd[PATH_MAX + 16];

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_round_trip_int_adam),
        CASE(test_round_trip_str_sgd),
        CASE(test_round_trip_plain),
        CASE(test_capture),
        CASE(test_empty_store),
        CASE(test_restore_into_full),
        CASE(test_bad_args),
        CASE(test_truncated),
        CASE(test_flipped),
        CASE(test_forged),
        CASE(test_forged_lengths),
        CASE(test_failed_write),
        CASE(test_ckpt_keeps_two),
        CASE(test_ckpt_newest_skips_damaged),
        CASE(test_ckpt_empty_missing),
        CASE(test_ckpt_drops_stale_tmp),
        CASE(test_local_commit),
        CASE(test_device_commit),
    };
    const char *base = getenv("TMPDIR");
    int rc;

#ifdef STANDIN_PATH
    /* Before libkvs's first use: it loads the runtime once. */
    setenv("KVS_CUDART", STANDIN_PATH, 1);
    setenv("KVS_STANDIN_DEVICES", "2", 1);
    setenv("KVS_NCCL", STANDIN_PATH, 1);
    setenv("KVS_CUDA_KERNELS", STANDIN_KERNELS, 1);
#endif

    snprintf(tmpdir, sizeof tmpdir, "%s/kvs-snap-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    cleanup_dir(tmpdir);
    return rc;
}
