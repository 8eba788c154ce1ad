/*
 * test_snapshot.c - unit tests of a store's snapshot (src/store/
 * snapshot.c): the round trip of int and string keys of every dtype with
 * sgd and adam states, round counts and meta, in memory and through a
 * file, bit for bit (the restored store then updates as the original
 * does); refusal of a restore into a store holding keys; every truncation
 * and every flipped byte of an image refused, forged lengths with a good
 * checksum refused or harmless; a failed write leaving the old file whole
 * and no temporary file; a capture written after the engine changed, its
 * values read through a source that copied them aside: the commit point's
 * bytes; and the commits of the in-process store types, a GPU's key
 * refused (on the CUDA stand-in where the build has it). The checkpoint
 * folder that keeps snapshots on disk is tested in test_ckpt.c.
 */
#define _GNU_SOURCE
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
#include <unistd.h>

#include <cmocka.h>

#include "kvs.h"
#include "kernels/optim.h"
#include "store/engine.h"
#include "store/snapshot.h"
#include "store/statefile_codec.h"
#include "snaputil.h"

/* ---- Helpers (those test_ckpt.c shares are in snaputil.h) ------------- */

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
        CASE(test_local_commit),
        CASE(test_device_commit),
    };
    int rc;

#ifdef STANDIN_PATH
    /* Before libkvs's first use: it loads the runtime once. */
    setenv("KVS_CUDART", STANDIN_PATH, 1);
    setenv("KVS_STANDIN_DEVICES", "2", 1);
    setenv("KVS_NCCL", STANDIN_PATH, 1);
    setenv("KVS_CUDA_KERNELS", STANDIN_KERNELS, 1);
#endif

    if (tmpdir_make("kvs-snap") != 0)
        return 1;
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmpdir_remove();
    return rc;
}
