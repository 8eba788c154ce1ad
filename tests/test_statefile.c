/*
 * test_statefile.c - unit tests of the optimizers' state file
 * (src/store/statefile.c): the round trip of every key kind and dtype, the
 * checksum, refusal of every damaged file (each byte flipped, truncated,
 * wrong magic or version) and of hand-made bad files with a valid
 * checksum, and the atomic save (missing directory, overwrite, clean-up
 * after a failure, bad arguments).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/optim.h"
#include "store/optim_state.h"
#include "store/statefile.h"
#include "store/statefile_codec.h"
#include "optimutil.h"

/* ---- Helpers --------------------------------------------------------- */

static char tmpdir[PATH_MAX];

static void path_in_tmp(char *buf, size_t size, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", tmpdir, name);
    assert_true(n > 0 && (size_t)n < size);
}

static size_t read_bytes(const char *path, uint8_t *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    size_t n;

    assert_non_null(f);
    n = fread(buf, 1, size, f);
    assert_true(feof(f));
    fclose(f);
    return n;
}

static void write_bytes(const char *path, const uint8_t *buf, size_t n)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Entries of tmpdir whose name starts with prefix. */
static int count_entries(const char *prefix)
{
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    int n = 0;

    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static int expect_load_fails(const char *path, int code, const char *part)
{
    struct kvs__state_file *f = NULL;
    struct kvs__err e = { 0 };
    int rc = kvs__optim_load(path, &f, &e);

    if (rc != code)
        fail_msg("load: %d (%s), expected %d", rc, e.msg, code);
    assert_null(f);
    if (part != NULL && strstr(e.msg, part) == NULL)
        fail_msg("detail \"%s\" does not mention \"%s\"", e.msg, part);
    if (strstr(e.msg, path) == NULL)              /* which file, when a program loads several */
        fail_msg("detail \"%s\" does not name the file %s", e.msg, path);
    return rc;
}

/* A bitwise CRC-32C, independent of the library's sliced one. */
static uint32_t ref_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;

    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return ~c;
}

static int group_setup(void **state)
{
    const char *base = getenv("TMPDIR");

    (void)state;
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/kvs_test_statefile_XXXXXX", base);
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int group_teardown(void **state)
{
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    char path[PATH_MAX + NAME_MAX + 2];

    (void)state;
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", tmpdir, de->d_name);
        unlink(path);
    }
    closedir(d);
    return rmdir(tmpdir);
}

/* ---- State file ------------------------------------------------------ */

static struct kvs__optim_state *filled_state(const struct kvs__optim *o, kvs_dtype_t dtype,
                                             size_t count, uint64_t t, double seed)
{
    struct kvs__optim_state *s = state_ok(o, dtype, count);

    s->t = t;
    for (int b = 0; b < s->nbuf; b++) {
        for (size_t i = 0; i < count; i++) {
            double v = seed + (double)b * 100.0 + (double)i * 0.25 - 1.0 / 3.0;
            if (s->dtype == KVS_FLOAT64)
                ((double *)s->buf[b])[i] = v;
            else
                ((float *)s->buf[b])[i] = (float)v;
        }
    }
    return s;
}

static void assert_same_state(const struct kvs__optim_state *a,
                              const struct kvs__optim_state *b)
{
    size_t esize = a->dtype == KVS_FLOAT64 ? 8 : 4;

    assert_int_equal(a->t, b->t);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->count, b->count);
    assert_int_equal(a->nbuf, b->nbuf);
    for (int i = 0; i < a->nbuf; i++) {
        if (a->count > 0)
            assert_memory_equal(a->buf[i], b->buf[i], a->count * esize);
    }
}

static void save_ok(const char *path, const struct kvs__optim *o, int dump,
                    const struct kvs__state_rec *recs, size_t n)
{
    struct kvs__err e = { 0 };
    int rc = kvs__optim_save(path, o, dump, recs, n, &e);

    if (rc != 0)
        fail_msg("save: %d %s", rc, e.msg);
}

static struct kvs__state_file *load_ok(const char *path)
{
    struct kvs__state_file *f = NULL;
    struct kvs__err e = { 0 };
    int rc = kvs__optim_load(path, &f, &e);

    if (rc != 0)
        fail_msg("load: %d %s", rc, e.msg);
    assert_non_null(f);
    return f;
}

static void test_file_round_trip_int_keys(void **state)
{
    struct kvs__optim *o = parse_ok("adam lr=0.002 beta1=0.8 wd=1e-5 clip_gradient=3");
    struct kvs__state_rec recs[4];
    char path[PATH_MAX];
    (void)state;

    recs[0] = (struct kvs__state_rec){ KVS_INT_KEY(7), KVS_FLOAT32,
                                       filled_state(o, KVS_FLOAT32, 5, 3, 1.0) };
    recs[1] = (struct kvs__state_rec){ KVS_INT_KEY(-1), KVS_FLOAT64,
                                       filled_state(o, KVS_FLOAT64, 3, 12, -7.5) };
    recs[2] = (struct kvs__state_rec){ KVS_INT_KEY(INT64_MIN), KVS_FLOAT16,
                                       filled_state(o, KVS_FLOAT16, 2000, 1, 0.5) };
    recs[3] = (struct kvs__state_rec){ KVS_INT_KEY(INT64_MAX), KVS_BFLOAT16,
                                       filled_state(o, KVS_BFLOAT16, 0, 0, 0.0) };
    path_in_tmp(path, sizeof path, "int_keys.state");

    for (int dump = 0; dump <= 1; dump++) {
        struct kvs__state_file *f;

        save_ok(path, o, dump, recs, 4);
        f = load_ok(path);
        assert_string_equal(f->optim_name, "adam");
        if (dump) {
            assert_non_null(f->optim);
            assert_string_equal(kvs__optim_spec(f->optim), kvs__optim_spec(o));
        } else {
            assert_null(f->optim);
        }
        assert_int_equal(f->n, 4);
        for (size_t i = 0; i < 4; i++) {
            assert_null(f->recs[i].key.name);
            assert_true(f->recs[i].key.id == recs[i].key.id);
            assert_int_equal(f->recs[i].key_dtype, recs[i].key_dtype);
            assert_same_state(f->recs[i].state, recs[i].state);
        }
        kvs__state_file_free(f);
    }
    assert_int_equal(count_entries("int_keys.state.tmp"), 0);

    for (size_t i = 0; i < 4; i++)
        kvs__optim_state_free(recs[i].state);
    kvs__optim_free(o);
}

static void test_file_round_trip_string_keys(void **state)
{
    struct kvs__optim *o = parse_ok("sgd lr=0.05 momentum=0.9");
    struct kvs__state_rec recs[3];
    char longname[KVS_MAX_KEY_LEN + 1];
    char path[PATH_MAX];
    (void)state;

    memset(longname, 'k', KVS_MAX_KEY_LEN);
    longname[KVS_MAX_KEY_LEN] = '\0';
    recs[0] = (struct kvs__state_rec){ KVS_STR_KEY("fc1_weight"), KVS_FLOAT32,
                                       filled_state(o, KVS_FLOAT32, 6, 40, 2.0) };
    recs[1] = (struct kvs__state_rec){ KVS_STR_KEY(longname), KVS_FLOAT64,
                                       filled_state(o, KVS_FLOAT64, 1, 1, 3.0) };
    recs[2] = (struct kvs__state_rec){ KVS_STR_KEY(""), KVS_FLOAT16,
                                       filled_state(o, KVS_FLOAT16, 4, 2, 4.0) };
    path_in_tmp(path, sizeof path, "str_keys.state");

    for (int dump = 1; dump >= 0; dump--) {
        struct kvs__state_file *f;

        save_ok(path, o, dump, recs, 3);
        f = load_ok(path);
        assert_string_equal(f->optim_name, "sgd");
        assert_true((f->optim != NULL) == (dump != 0));
        assert_int_equal(f->n, 3);
        for (size_t i = 0; i < 3; i++) {
            assert_non_null(f->recs[i].key.name);
            assert_string_equal(f->recs[i].key.name, recs[i].key.name);
            assert_int_equal(f->recs[i].key_dtype, recs[i].key_dtype);
            assert_same_state(f->recs[i].state, recs[i].state);
        }
        kvs__state_file_free(f);
    }

    /* Plain sgd keeps no buffers; its records still carry t and count. */
    {
        struct kvs__optim *plain = parse_ok("sgd");
        struct kvs__state_rec r = { KVS_STR_KEY("b"), KVS_FLOAT32,
                                    filled_state(plain, KVS_FLOAT32, 9, 5, 0.0) };
        struct kvs__state_file *f;

        save_ok(path, plain, 1, &r, 1);
        f = load_ok(path);
        assert_int_equal(f->n, 1);
        assert_same_state(f->recs[0].state, r.state);
        kvs__state_file_free(f);

        /* No records at all. */
        save_ok(path, plain, 0, NULL, 0);
        f = load_ok(path);
        assert_int_equal(f->n, 0);
        assert_string_equal(f->optim_name, "sgd");
        kvs__state_file_free(f);

        kvs__optim_state_free(r.state);
        kvs__optim_free(plain);
    }

    for (size_t i = 0; i < 3; i++)
        kvs__optim_state_free(recs[i].state);
    kvs__optim_free(o);
}

/* A small valid file, its bytes in buf; returns the size. */
static size_t small_file(const char *path, uint8_t *buf, size_t size)
{
    struct kvs__optim *o = parse_ok("adam lr=0.01");
    struct kvs__state_rec recs[2] = {
        { KVS_INT_KEY(1), KVS_FLOAT32, filled_state(o, KVS_FLOAT32, 3, 2, 1.0) },
        { KVS_INT_KEY(2), KVS_FLOAT64, filled_state(o, KVS_FLOAT64, 1, 9, 2.0) },
    };
    size_t n;

    save_ok(path, o, 1, recs, 2);
    n = read_bytes(path, buf, size);
    kvs__optim_state_free(recs[1].state);
    kvs__optim_state_free(recs[0].state);
    kvs__optim_free(o);
    return n;
}

static void test_file_checksum(void **state)
{
    uint8_t buf[1024];
    char path[PATH_MAX];
    size_t n;
    (void)state;

    /* The reference CRC-32C's check value, then the file's trailer. */
    assert_int_equal(ref_crc32c((const uint8_t *)"123456789", 9), 0xe3069283u);
    path_in_tmp(path, sizeof path, "crc.state");
    n = small_file(path, buf, sizeof buf);
    assert_true(n > 4);
    assert_memory_equal(buf, "KVSOPTST\x01\x00\x00\x00\x01\x00\x00\x00", 16);
    {
        uint32_t c = ref_crc32c(buf, n - 4);
        uint8_t le[4] = { (uint8_t)c, (uint8_t)(c >> 8), (uint8_t)(c >> 16), (uint8_t)(c >> 24) };
        assert_memory_equal(buf + n - 4, le, 4);
    }
}

/* The library's CRC (the CPU's crc32 instruction where it has one), its
 * portable table and the bitwise reference agree on every length up to
 * 1 KiB at every alignment, on buffers long enough for the three-stream
 * loop and its joins, on a CRC continued over pieces, and on one joined
 * from two parts' CRCs. */
static void test_crc32c_paths(void **state)
{
    size_t big = ((size_t)3 << 20) + 24 * 1024 * 3 + 13;
    uint8_t *buf = malloc(big + 8);
    uint32_t seed = 12345;
    static const size_t bigs[] = { 24575, 24576, 24577, 49152 + 7, 3 * 8192 * 5 + 1,
                                   ((size_t)1 << 20) + 3 };
    (void)state;

    assert_non_null(buf);
    for (size_t i = 0; i < big + 8; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (uint8_t)(seed >> 16);
    }
    assert_int_equal(kvs__crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(kvs__crc32c_table(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(kvs__crc32c(0, "", 0), 0u);
    for (size_t n = 0; n <= 1024; n++) {
        size_t off = n % 8;
        uint32_t want = ref_crc32c(buf + off, n);

        if (kvs__crc32c(0, buf + off, n) != want || kvs__crc32c_table(0, buf + off, n) != want)
            fail_msg("length %zu at offset %zu: %08x, table %08x, reference %08x", n, off,
                     kvs__crc32c(0, buf + off, n), kvs__crc32c_table(0, buf + off, n), want);
    }
    for (size_t i = 0; i < sizeof bigs / sizeof bigs[0]; i++) {
        for (size_t off = 0; off < 8; off += 3) {
            uint32_t want = ref_crc32c(buf + off, bigs[i]);

            assert_int_equal(kvs__crc32c(0, buf + off, bigs[i]), want);
            assert_int_equal(kvs__crc32c_table(0, buf + off, bigs[i]), want);
        }
    }
    {
        uint32_t whole = kvs__crc32c_table(0, buf, big), c = 0;
        size_t at = 0, step = 1;

        assert_int_equal(kvs__crc32c(0, buf, big), whole);
        while (at < big) {                         /* pieces of every size class */
            size_t n = step < big - at ? step : big - at;
            c = kvs__crc32c(c, buf + at, n);
            at += n;
            step = step * 3 + 1;
        }
        assert_int_equal(c, whole);
        /* Joined from two halves' CRCs, split anywhere. */
        for (size_t cut = 0; cut <= big; cut += cut < 64 ? 1 : cut * 7 + 1) {
            uint32_t a = kvs__crc32c(0, buf, cut), b = kvs__crc32c(0, buf + cut, big - cut);
            assert_int_equal(kvs__crc32c_combine(a, b, big - cut), whole);
        }
        assert_int_equal(kvs__crc32c_combine(kvs__crc32c(0, buf, big), 0, 0), whole);
        /* One flipped bit anywhere changes it. */
        buf[big / 2] ^= 0x10;
        assert_int_not_equal(kvs__crc32c(0, buf, big), whole);
        assert_int_equal(kvs__crc32c(0, buf, big), kvs__crc32c_table(0, buf, big));
    }
    free(buf);
}

static void test_file_every_byte_flipped(void **state)
{
    uint8_t good[1024], bad[1024];
    char path[PATH_MAX], badpath[PATH_MAX];
    static const uint8_t masks[] = { 0x01, 0x80, 0xff };
    size_t n;
    (void)state;

    path_in_tmp(path, sizeof path, "flip.state");
    path_in_tmp(badpath, sizeof badpath, "flip_bad.state");
    n = small_file(path, good, sizeof good);

    for (size_t pos = 0; pos < n; pos++) {
        for (size_t m = 0; m < sizeof masks; m++) {
            memcpy(bad, good, n);
            bad[pos] ^= masks[m];
            write_bytes(badpath, bad, n);
            expect_load_fails(badpath, KVS_ECORRUPT, NULL);
        }
    }
    /* And the untouched file still loads. */
    kvs__state_file_free(load_ok(path));
}

static void test_file_truncated(void **state)
{
    uint8_t good[1024];
    char path[PATH_MAX], badpath[PATH_MAX];
    size_t n;
    (void)state;

    path_in_tmp(path, sizeof path, "trunc.state");
    path_in_tmp(badpath, sizeof badpath, "trunc_bad.state");
    n = small_file(path, good, sizeof good);

    for (size_t len = 0; len < n; len++) {
        write_bytes(badpath, good, len);
        expect_load_fails(badpath, KVS_ECORRUPT, NULL);
    }
    /* One byte too many is as bad as one too few. */
    good[n] = 0;
    write_bytes(badpath, good, n + 1);
    expect_load_fails(badpath, KVS_ECORRUPT, NULL);
}

static void test_file_magic_and_version(void **state)
{
    uint8_t buf[1024];
    char path[PATH_MAX];
    size_t n;
    (void)state;

    path_in_tmp(path, sizeof path, "magic.state");
    n = small_file(path, buf, sizeof buf);
    buf[3] = 'X';
    write_bytes(path, buf, n);
    expect_load_fails(path, KVS_ECORRUPT, "magic");

    n = small_file(path, buf, sizeof buf);
    buf[8] = 2;                        /* version 2, checksum left as it was */
    write_bytes(path, buf, n);
    expect_load_fails(path, KVS_ECORRUPT, "version 2");

    n = small_file(path, buf, sizeof buf);
    buf[n / 2] ^= 0x10;
    write_bytes(path, buf, n);
    expect_load_fails(path, KVS_ECORRUPT, "checksum");
}

/* ---- Hand-made files with a valid checksum --------------------------- */

struct fb {
    uint8_t b[4096];
    size_t n;
};

static void fb_bytes(struct fb *f, const void *p, size_t n)
{
    assert_true(f->n + n <= sizeof f->b);
    memcpy(f->b + f->n, p, n);
    f->n += n;
}

static void fb_u8(struct fb *f, uint8_t v)
{
    fb_bytes(f, &v, 1);
}

static void fb_u32(struct fb *f, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        fb_u8(f, (uint8_t)(v >> (8 * i)));
}

static void fb_u64(struct fb *f, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        fb_u8(f, (uint8_t)(v >> (8 * i)));
}

static void fb_str(struct fb *f, const char *s)
{
    fb_u32(f, (uint32_t)strlen(s));
    fb_bytes(f, s, strlen(s));
}

static void fb_f32(struct fb *f, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    fb_u32(f, bits);
}

static void fb_header(struct fb *f, uint32_t flags, const char *name, const char *spec)
{
    fb_bytes(f, "KVSOPTST", 8);
    fb_u32(f, 1);
    fb_u32(f, flags);
    fb_str(f, name);
    if (spec != NULL)
        fb_str(f, spec);
}

/* An int-key record's fields up to and including nbuf. */
static void fb_rec(struct fb *f, int64_t id, uint32_t kdt, uint32_t sdt, uint64_t t,
                   uint64_t count, uint32_t nbuf)
{
    fb_u8(f, 0);
    fb_u64(f, (uint64_t)id);
    fb_u32(f, kdt);
    fb_u32(f, sdt);
    fb_u64(f, t);
    fb_u64(f, count);
    fb_u32(f, nbuf);
}

static void fb_finish(struct fb *f, const char *path)
{
    uint32_t c = ref_crc32c(f->b, f->n);
    fb_u32(f, c);
    write_bytes(path, f->b, f->n);
}

/* The hand-made baseline: sgd, no spec, key 5 of float32 with two
 * momentum values. */
static void fb_baseline(struct fb *f)
{
    f->n = 0;
    fb_header(f, 0, "sgd", NULL);
    fb_u64(f, 1);
    fb_rec(f, 5, KVS_FLOAT32, KVS_FLOAT32, 4, 2, 1);
    fb_f32(f, 0.5f);
    fb_f32(f, -1.25f);
}

static void test_file_hand_made(void **state)
{
    struct fb f;
    char path[PATH_MAX];
    struct kvs__state_file *sf;
    (void)state;

    path_in_tmp(path, sizeof path, "hand.state");

    /* The format as documented loads, to the bit. */
    fb_baseline(&f);
    fb_finish(&f, path);
    sf = load_ok(path);
    assert_string_equal(sf->optim_name, "sgd");
    assert_null(sf->optim);
    assert_int_equal(sf->n, 1);
    assert_true(sf->recs[0].key.id == 5 && sf->recs[0].key.name == NULL);
    assert_int_equal(sf->recs[0].state->t, 4);
    assert_int_equal(sf->recs[0].state->nbuf, 1);
    assert_true(((float *)sf->recs[0].state->buf[0])[0] == 0.5f);
    assert_true(((float *)sf->recs[0].state->buf[0])[1] == -1.25f);
    kvs__state_file_free(sf);

    /* A string key and a dumped spec, also by hand. */
    f.n = 0;
    fb_header(&f, 1, "sgd", "sgd lr=0.5 momentum=0.25");
    fb_u64(&f, 1);
    fb_u8(&f, 1);
    fb_str(&f, "w");
    fb_u32(&f, KVS_FLOAT16);
    fb_u32(&f, KVS_FLOAT32);
    fb_u64(&f, 1);
    fb_u64(&f, 1);
    fb_u32(&f, 1);
    fb_f32(&f, 2.0f);
    fb_finish(&f, path);
    sf = load_ok(path);
    assert_non_null(sf->optim);
    assert_string_equal(kvs__optim_spec(sf->optim),
                        "sgd lr=0.5 momentum=0.25 wd=0 rescale_grad=1 clip_gradient=-1 "
                        "lazy_update=1");
    assert_string_equal(sf->recs[0].key.name, "w");
    kvs__state_file_free(sf);

#define BAD_FILE(part, ...)                                                     \
    do {                                                                        \
        f.n = 0;                                                                \
        __VA_ARGS__;                                                            \
        fb_finish(&f, path);                                                    \
        expect_load_fails(path, KVS_ECORRUPT, part);                            \
    } while (0)

    BAD_FILE("unknown flags", fb_header(&f, 2, "sgd", NULL); fb_u64(&f, 0));
    /* (padded: without a name the file would be too short to be looked at) */
    BAD_FILE("optimizer name", fb_header(&f, 0, "", NULL); fb_u64(&f, 0); fb_u32(&f, 0));
    BAD_FILE("optimizer name", fb_header(&f, 0, "sg d", NULL); fb_u64(&f, 0));
    {
        char name65[66];
        memset(name65, 'a', 65);
        name65[65] = '\0';
        BAD_FILE("optimizer name", fb_header(&f, 0, name65, NULL); fb_u64(&f, 0));
    }
    BAD_FILE("does not parse", fb_header(&f, 1, "sgd", "sgd lr=abc"); fb_u64(&f, 0));
    BAD_FILE("saved spec is for adam", fb_header(&f, 1, "sgd", "adam"); fb_u64(&f, 0));
    BAD_FILE("key kind 2",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1); fb_u8(&f, 2); fb_u64(&f, 0);
             fb_u32(&f, 0); fb_u32(&f, 0); fb_u64(&f, 0); fb_u64(&f, 0); fb_u32(&f, 0));
    BAD_FILE("key dtype 4 is not a float",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_INT32, KVS_FLOAT32, 0, 1, 0));
    BAD_FILE("key dtype 99",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1); fb_rec(&f, 1, 99, KVS_FLOAT32, 0, 1, 0));
    BAD_FILE("state dtype 1 does not go with key dtype 0",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT32, KVS_FLOAT64, 0, 1, 0));
    BAD_FILE("state dtype 2",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT16, KVS_FLOAT16, 0, 1, 0));
    BAD_FILE("3 state buffers",
             fb_header(&f, 0, "adam", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT32, KVS_FLOAT32, 0, 0, 3));
    BAD_FILE("2 state buffers do not go with optimizer sgd",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT32, KVS_FLOAT32, 0, 0, 2));
    BAD_FILE("1 state buffers do not go with optimizer adam",
             fb_header(&f, 0, "adam", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT32, KVS_FLOAT32, 0, 1, 1); fb_f32(&f, 0.0f));
    /* The dumped spec fixes the count exactly: momentum means one buffer. */
    BAD_FILE("0 state buffers do not go with optimizer sgd",
             fb_header(&f, 1, "sgd", "sgd momentum=0.9"); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT32, KVS_FLOAT32, 0, 1, 0));
    BAD_FILE("string key",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1); fb_u8(&f, 1); fb_u32(&f, 256);
             for (int i = 0; i < 256; i++) fb_u8(&f, 'x');
             fb_u32(&f, 0); fb_u32(&f, 0); fb_u64(&f, 0); fb_u64(&f, 0); fb_u32(&f, 0));
    BAD_FILE("string key",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1); fb_u8(&f, 1); fb_u32(&f, 3);
             fb_bytes(&f, "a\0b", 3);
             fb_u32(&f, 0); fb_u32(&f, 0); fb_u64(&f, 0); fb_u64(&f, 0); fb_u32(&f, 0));
    /* Counts far beyond the file: refused before any allocation by them. */
    BAD_FILE("records cannot fit", fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1ull << 60));
    BAD_FILE("records cannot fit", fb_header(&f, 0, "sgd", NULL); fb_u64(&f, UINT64_MAX));
    BAD_FILE("elements do not fit",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT32, KVS_FLOAT32, 0, 1ull << 62, 1));
    BAD_FILE("elements do not fit",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT32, KVS_FLOAT32, 0, 3, 1); fb_f32(&f, 1.0f));
    BAD_FILE("elements do not fit",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 1);
             fb_rec(&f, 1, KVS_FLOAT64, KVS_FLOAT64, 0, UINT64_MAX, 0));
    /* Enough bytes for two records by count, but the second is cut short. */
    BAD_FILE("record 1: truncated",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 2);
             fb_rec(&f, 1, KVS_FLOAT32, KVS_FLOAT32, 0, 8, 1);
             for (int i = 0; i < 8; i++) fb_f32(&f, 1.0f);
             fb_u8(&f, 0); fb_u64(&f, 0));
    BAD_FILE("after the last record", fb_baseline(&f); fb_u8(&f, 0));
    BAD_FILE("key 5 appears twice",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 2);
             fb_rec(&f, 5, KVS_FLOAT32, KVS_FLOAT32, 0, 0, 0);
             fb_rec(&f, 5, KVS_FLOAT16, KVS_FLOAT32, 0, 0, 0));
    BAD_FILE("mixed",
             fb_header(&f, 0, "sgd", NULL); fb_u64(&f, 2);
             fb_rec(&f, 5, KVS_FLOAT32, KVS_FLOAT32, 0, 0, 0);
             fb_u8(&f, 1); fb_str(&f, "w"); fb_u32(&f, 0); fb_u32(&f, 0); fb_u64(&f, 0);
             fb_u64(&f, 0); fb_u32(&f, 0));
#undef BAD_FILE
}

/* ---- Saving ---------------------------------------------------------- */

static void test_save_missing_directory(void **state)
{
    struct kvs__optim *o = parse_ok("sgd");
    struct kvs__err e = { 0 };
    char path[PATH_MAX];
    (void)state;

    path_in_tmp(path, sizeof path, "no_such_dir/x.state");
    assert_int_equal(kvs__optim_save(path, o, 1, NULL, 0, &e), -ENOENT);
    assert_int_equal(e.code, -ENOENT);
    assert_non_null(strstr(e.msg, path));
    assert_int_equal(count_entries("no_such_dir"), 0);
    assert_int_equal(count_entries("x.state"), 0);
    expect_load_fails(path, -ENOENT, path);
    kvs__optim_free(o);
}

static void test_save_overwrite(void **state)
{
    struct kvs__optim *a = parse_ok("sgd momentum=0.5");
    struct kvs__optim *b = parse_ok("adam");
    struct kvs__state_rec ra = { KVS_INT_KEY(1), KVS_FLOAT32,
                                 filled_state(a, KVS_FLOAT32, 4, 1, 1.0) };
    struct kvs__state_rec rb[2] = {
        { KVS_INT_KEY(1), KVS_FLOAT32, filled_state(b, KVS_FLOAT32, 4, 2, 2.0) },
        { KVS_INT_KEY(2), KVS_FLOAT64, filled_state(b, KVS_FLOAT64, 8, 3, 3.0) },
    };
    struct kvs__state_file *f;
    char path[PATH_MAX];
    (void)state;

    path_in_tmp(path, sizeof path, "over.state");
    save_ok(path, a, 1, &ra, 1);
    save_ok(path, b, 0, rb, 2);
    f = load_ok(path);
    assert_string_equal(f->optim_name, "adam");
    assert_int_equal(f->n, 2);
    assert_same_state(f->recs[0].state, rb[0].state);
    assert_same_state(f->recs[1].state, rb[1].state);
    kvs__state_file_free(f);
    /* Nothing but the file itself is left in the directory. */
    assert_int_equal(count_entries("over.state"), 1);

    kvs__optim_state_free(rb[1].state);
    kvs__optim_state_free(rb[0].state);
    kvs__optim_state_free(ra.state);
    kvs__optim_free(b);
    kvs__optim_free(a);
}

static void test_save_failure_cleans_up(void **state)
{
    struct kvs__optim *o = parse_ok("sgd momentum=0.9");
    struct kvs__state_rec recs[2] = {
        { KVS_INT_KEY(1), KVS_FLOAT32, filled_state(o, KVS_FLOAT32, 3, 1, 0.0) },
        { KVS_INT_KEY(1), KVS_FLOAT32, filled_state(o, KVS_FLOAT32, 3, 1, 0.0) },
    };
    struct kvs__err e = { 0 };
    char path[PATH_MAX];
    uint8_t before[1024], after[1024];
    size_t nb, na;
    (void)state;

    /* The rename fails (the target is a directory) after the temporary
     * file was written: it must be gone again. */
    path_in_tmp(path, sizeof path, "adir");
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(kvs__optim_save(path, o, 1, recs, 1, &e), -EISDIR);
    assert_non_null(strstr(e.msg, path));
    assert_int_equal(count_entries("adir"), 1);
    assert_int_equal(rmdir(path), 0);

    /* A failed save leaves an existing file exactly as it was. */
    path_in_tmp(path, sizeof path, "keep.state");
    save_ok(path, o, 1, recs, 1);
    nb = read_bytes(path, before, sizeof before);
    assert_int_equal(kvs__optim_save(path, o, 1, recs, 2, &e), KVS_EBADARG);
    na = read_bytes(path, after, sizeof after);
    assert_int_equal(na, nb);
    assert_memory_equal(after, before, nb);
    assert_int_equal(count_entries("keep.state"), 1);

    kvs__optim_state_free(recs[1].state);
    kvs__optim_state_free(recs[0].state);
    kvs__optim_free(o);
}

static void test_save_bad_arguments(void **state)
{
    struct kvs__optim *o = parse_ok("sgd momentum=0.9");
    struct kvs__state_rec recs[2] = {
        { KVS_INT_KEY(3), KVS_FLOAT32, filled_state(o, KVS_FLOAT32, 2, 1, 0.0) },
        { KVS_INT_KEY(3), KVS_FLOAT32, filled_state(o, KVS_FLOAT32, 2, 1, 0.0) },
    };
    struct kvs__err e = { 0 };
    char path[PATH_MAX], longname[KVS_MAX_KEY_LEN + 2];
    kvs_key_t k;
    (void)state;

    path_in_tmp(path, sizeof path, "args.state");
    assert_int_equal(kvs__optim_save(NULL, o, 0, recs, 1, &e), KVS_EBADARG);
    assert_int_equal(kvs__optim_save("", o, 0, recs, 1, &e), KVS_EBADARG);
    assert_int_equal(kvs__optim_save(path, NULL, 0, recs, 1, &e), KVS_EBADARG);
    assert_int_equal(kvs__optim_save(path, o, 0, NULL, 1, &e), KVS_EBADARG);
    /* A file that could not load back is never written. */
    assert_int_equal(kvs__optim_save(path, o, 0, recs, 2, &e), KVS_EBADARG);
    assert_non_null(strstr(e.msg, "twice"));
    assert_non_null(strstr(e.msg, path));
    k = recs[1].key;
    recs[1].key = KVS_STR_KEY("w");
    assert_int_equal(kvs__optim_save(path, o, 0, recs, 2, &e), KVS_EBADARG);
    assert_non_null(strstr(e.msg, "mixed"));
    assert_non_null(strstr(e.msg, path));
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    recs[1].key = KVS_STR_KEY(longname);
    assert_int_equal(kvs__optim_save(path, o, 0, &recs[1], 1, &e), KVS_EBADARG);
    recs[1].key = k;
    recs[1].key_dtype = KVS_INT32;
    assert_int_equal(kvs__optim_save(path, o, 0, &recs[1], 1, &e), KVS_EBADARG);
    assert_non_null(strstr(e.msg, path));
    assert_int_equal(count_entries("args.state"), 0);

    /* Loading a directory is not loading a file. */
    {
        struct kvs__state_file *f = NULL;
        assert_int_equal(kvs__optim_load(tmpdir, &f, &e), -EISDIR);
        assert_null(f);
        assert_int_equal(kvs__optim_load(NULL, &f, &e), KVS_EBADARG);
    }

    kvs__optim_state_free(recs[1].state);
    kvs__optim_state_free(recs[0].state);
    kvs__optim_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_round_trip_int_keys),
        cmocka_unit_test(test_file_round_trip_string_keys),
        cmocka_unit_test(test_file_checksum),
        cmocka_unit_test(test_file_every_byte_flipped),
        cmocka_unit_test(test_file_truncated),
        cmocka_unit_test(test_file_magic_and_version),
        cmocka_unit_test(test_file_hand_made),
        cmocka_unit_test(test_crc32c_paths),
        cmocka_unit_test(test_save_missing_directory),
        cmocka_unit_test(test_save_overwrite),
        cmocka_unit_test(test_save_failure_cleans_up),
        cmocka_unit_test(test_save_bad_arguments),
    };

    return cmocka_run_group_tests_name("statefile", tests, group_setup, group_teardown);
}
