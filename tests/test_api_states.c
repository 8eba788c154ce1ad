/*
 * test_api_states.c - behaviour tests of saving and loading optimizer
 * states through the public API (kvs.h) on the in-process "local" store:
 * a save needs an optimizer; a saved state loaded into a second store
 * gives exactly the first store's next step (SGD with momentum, Adam with
 * its update count), and a dumped optimizer comes with it; a load into a
 * store that does not match the file (optimizer, keys, shapes, dtypes) is
 * refused, and the store's extra keys start afresh; a corrupt, cut, empty
 * or missing file is refused, and the store steps on as if the load had
 * not been tried; a save to a missing folder fails, and an overwrite
 * leaves only the new file. The update rules themselves are
 * test_api_update.c's. Uses only kvs.h; knows nothing of the library's
 * insides.
 */
#include <dirent.h>
#include <errno.h>
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

/* ---- helpers ---------------------------------------------------------- */

static int count_dir_entries(const char *d)
{
    DIR *dir = opendir(d);
    int n = 0;
    struct dirent *ent;
    assert_non_null(dir);
    while ((ent = readdir(dir)) != NULL)
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0)
            n++;
    closedir(dir);
    return n;
}

static unsigned char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long sz;
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    sz = ftell(f);
    assert_true(sz > 0);
    rewind(f);
    buf = malloc((size_t)sz);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *len = (size_t)sz;
    return buf;
}

static void write_whole(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len > 0)
        assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* ---- optimizer state files -------------------------------------------- */

#define SN 4
static const float SW0[SN] = { 1, -1, 0.5f, 2 };
static const float SG[SN] = { 0.5f, 1, -2, 0.25f };
static const float SG5[2] = { 1, -1 };

/* A store with keys 3 (float32 (4)) and 5 (float32 (2)) at w3, w5. */
static kvs_t *state_store(const char *spec, const float *w3, const float *w5)
{
    kvs_t *kv = new_store("local");
    OK(kvs_init(kv, 2, (kvs_key_t[]){ IK(3), IK(5) },
                (kvs_array_t[]){ ARR(w3, KVS_FLOAT32, 1, SN), ARR(w5, KVS_FLOAT32, 1, 2) }));
    if (spec != NULL)
        OK(kvs_set_optimizer(kv, spec));
    return kv;
}

static void push_both(kvs_t *kv)
{
    OK(kvs_push(kv, 2, (kvs_key_t[]){ IK(3), IK(5) },
                (kvs_array_t[]){ ARR(SG, KVS_FLOAT32, 1, SN), ARR(SG5, KVS_FLOAT32, 1, 2) }, 0));
}

static void pull_both(kvs_t *kv, float *w3, float *w5)
{
    PULL_F32(kv, IK(3), w3, 1, SN);
    PULL_F32(kv, IK(5), w5, 1, 2);
}

struct saved {
    char *dir;
    char path[4200];
    float w2[SN], w2_5[2];  /* weights after two pushes */
    float w3[SN], w3_5[2];  /* after a third, with the saved state */
};

/* Two pushes in a store with spec, save (dump as asked), a third push. */
static void make_saved(struct saved *s, const char *spec, int dump)
{
    kvs_t *kv = state_store(spec, SW0, (const float[]){ 0, 0 });
    s->dir = make_tmpdir();
    snprintf(s->path, sizeof s->path, "%s/opt.states", s->dir);
    push_both(kv);
    push_both(kv);
    pull_both(kv, s->w2, s->w2_5);
    OK(kvs_save_optimizer_states(kv, s->path, dump));
    push_both(kv);
    pull_both(kv, s->w3, s->w3_5);
    kvs_close(kv);
}

/* A store with spec at s's weights after two pushes, s's file loaded
 * into it, and one more push: its weights into w, w5. */
static void step_after_load(const char *spec, const struct saved *s, float *w, float *w5)
{
    kvs_t *kv = state_store(spec, s->w2, s->w2_5);

    OK(kvs_load_optimizer_states(kv, s->path));
    push_both(kv);
    pull_both(kv, w, w5);
    kvs_close(kv);
}

static void test_save_without_optimizer(void **state)
{
    kvs_t *kv = state_store(NULL, SW0, SW0);
    char *dir = make_tmpdir();
    char path[4200];
    (void)state;
    snprintf(path, sizeof path, "%s/x", dir);
    EXPECT_RC(kvs_save_optimizer_states(kv, path, 0), KVS_ENOOPT);
    EXPECT_DETAIL(kv, NULL);
    EXPECT_RC(kvs_save_optimizer_states(kv, path, 1), KVS_ENOOPT);
    assert_int_equal(count_dir_entries(dir), 0);
    OK(kvs_set_optimizer(kv, "sgd"));
    EXPECT_RC(kvs_save_optimizer_states(kv, NULL, 0), KVS_EBADARG);
    EXPECT_RC(kvs_load_optimizer_states(kv, NULL), KVS_EBADARG);
    EXPECT_RC(kvs_load_optimizer_states(NULL, path), KVS_EBADARG);
    kvs_close(kv);
    remove_tmpdir(dir);
}

static void roundtrip(const char *spec)
{
    struct saved s;
    float w[SN], w5[2];
    kvs_t *kv;
    make_saved(&s, spec, 0);
    /* The file is the only thing in its directory: no temporary left. */
    assert_int_equal(count_dir_entries(s.dir), 1);

    /* A second store at the post-2-push weights, same optimizer, loads the
     * state: its next push gives exactly the first store's third step. */
    step_after_load(spec, &s, w, w5);
    EXPECT_F32(w, s.w3, SN);
    EXPECT_F32(w5, s.w3_5, 2);

    /* Without the state the step differs (the test would prove nothing). */
    kv = state_store(spec, s.w2, s.w2_5);
    push_both(kv);
    pull_both(kv, w, w5);
    assert_true(memcmp(w, s.w3, sizeof w) != 0);
    kvs_close(kv);
    remove_tmpdir(s.dir);
}

static void test_save_load_sgd_momentum(void **state)
{
    (void)state;
    roundtrip("sgd lr=0.1 momentum=0.9 wd=0.01");
}

static void test_save_load_adam(void **state)
{
    /* adam's state includes the update count of bias correction */
    (void)state;
    roundtrip("adam lr=0.1");
}

static void test_load_dumped_optimizer(void **state)
{
    struct saved s;
    float w[SN], w5[2];
    (void)state;
    make_saved(&s, "sgd lr=0.1 momentum=0.9 wd=0.01", 1);
    /* a store with no optimizer gets the file's */
    step_after_load(NULL, &s, w, w5);
    EXPECT_F32(w, s.w3, SN);
    EXPECT_F32(w5, s.w3_5, 2);
    /* a store with another optimizer has it replaced */
    step_after_load("adam lr=0.5", &s, w, w5);
    EXPECT_F32(w, s.w3, SN);
    remove_tmpdir(s.dir);
}

static void test_load_mismatches(void **state)
{
    struct saved s;
    kvs_t *kv;
    (void)state;
    make_saved(&s, "sgd lr=0.1 momentum=0.9", 0);

    /* no optimizer and none in the file */
    kv = state_store(NULL, s.w2, s.w2_5);
    EXPECT_RC(kvs_load_optimizer_states(kv, s.path), KVS_ENOOPT);
    EXPECT_DETAIL(kv, NULL);
    kvs_close(kv);
    /* the file's state is for another optimizer */
    kv = state_store("adam", s.w2, s.w2_5);
    EXPECT_RC(kvs_load_optimizer_states(kv, s.path), KVS_ESPEC);
    kvs_close(kv);
    /* a key of the file missing from the store */
    kv = new_store("local");
    OK(kvs_init(kv, 1, (kvs_key_t[]){ IK(3) }, (kvs_array_t[]){ ARR(s.w2, KVS_FLOAT32, 1, SN) }));
    OK(kvs_set_optimizer(kv, "sgd lr=0.1 momentum=0.9"));
    EXPECT_RC(kvs_load_optimizer_states(kv, s.path), KVS_ENOKEY);
    EXPECT_DETAIL(kv, "5");
    kvs_close(kv);
    /* key 5 of another size */
    kv = state_store("sgd lr=0.1 momentum=0.9", s.w2, s.w2_5);
    OK(kvs_reinit(kv, 1, (kvs_key_t[]){ IK(5) },
                  (kvs_array_t[]){ ARR(((const float[]){ 0, 0, 0 }), KVS_FLOAT32, 1, 3) }));
    EXPECT_RC(kvs_load_optimizer_states(kv, s.path), KVS_ESHAPE);
    EXPECT_DETAIL(kv, s.path);                /* the file, and the shape stored */
    EXPECT_DETAIL(kv, "float32 (3)");
    kvs_close(kv);
    /* key 5 of another dtype */
    kv = state_store("sgd lr=0.1 momentum=0.9", s.w2, s.w2_5);
    OK(kvs_reinit(kv, 1, (kvs_key_t[]){ IK(5) },
                  (kvs_array_t[]){ ARR(((const double[]){ 0, 0 }), KVS_FLOAT64, 1, 2) }));
    EXPECT_RC(kvs_load_optimizer_states(kv, s.path), KVS_EDTYPE);
    kvs_close(kv);
    /* a string-key store cannot hold the file's int keys */
    kv = new_store("local");
    OK(kvs_init(kv, 1, (kvs_key_t[]){ SK("w") }, (kvs_array_t[]){ ARR(s.w2, KVS_FLOAT32, 1, SN) }));
    OK(kvs_set_optimizer(kv, "sgd lr=0.1 momentum=0.9"));
    assert_true(kvs_load_optimizer_states(kv, s.path) < 0);
    kvs_close(kv);
    /* extra keys in the store start afresh */
    kv = state_store("sgd lr=0.1 momentum=0.9", s.w2, s.w2_5);
    OK(kvs_init(kv, 1, (kvs_key_t[]){ IK(8) }, (kvs_array_t[]){ ARR(SW0, KVS_FLOAT32, 1, SN) }));
    OK(kvs_load_optimizer_states(kv, s.path));
    {
        float w[SN], w5[2];
        push_both(kv);
        pull_both(kv, w, w5);
        EXPECT_F32(w, s.w3, SN);
    }
    kvs_close(kv);
    remove_tmpdir(s.dir);
}

/* A store at the post-2-push weights that pushed once without the state;
 * its next push is the reference for "behaviour unchanged". */
static void bad_file_case(const struct saved *s, const char *bad_path, int want, int line)
{
    const char *spec = "sgd lr=0.1 momentum=0.9 wd=0.01";
    kvs_t *kv = state_store(spec, s->w2, s->w2_5);
    kvs_t *ref = state_store(spec, s->w2, s->w2_5);
    float a[SN], a5[2], b[SN], b5[2];
    int rc;
    push_both(kv);
    push_both(ref);
    rc = kvs_load_optimizer_states(kv, bad_path);
    if (rc != want)
        fail_msg("line %d: load returned %d (%s), want %d (%s)", line, rc, kvs_err_name(rc), want,
                 kvs_err_name(want));
    expect_last_error_at(kv, NULL, line);
    push_both(kv);
    push_both(ref);
    pull_both(kv, a, a5);
    pull_both(ref, b, b5);
    expect_f32_at(a, b, SN, line);
    expect_f32_at(a5, b5, 2, line);
    kvs_close(kv);
    kvs_close(ref);
}

static void test_load_corrupt_files(void **state)
{
    struct saved s;
    unsigned char *good, *bad;
    size_t len;
    char path[4300];
    (void)state;
    make_saved(&s, "sgd lr=0.1 momentum=0.9 wd=0.01", 0);
    good = read_whole(s.path, &len);
    bad = malloc(len);
    assert_non_null(bad);
    snprintf(path, sizeof path, "%s/bad", s.dir);

    /* a flipped byte anywhere: first, middle, last, and a few more */
    {
        size_t at[] = { 0, 1, 4, 8, len / 3, len / 2, len - 5, len - 1 };
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
            memcpy(bad, good, len);
            bad[at[i]] ^= 0x40;
            write_whole(path, bad, len);
            bad_file_case(&s, path, KVS_ECORRUPT, __LINE__);
        }
    }
    /* truncated */
    {
        size_t cut[] = { len - 1, len / 2, 8, 4, 1 };
        for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
            write_whole(path, good, cut[i]);
            bad_file_case(&s, path, KVS_ECORRUPT, __LINE__);
        }
    }
    /* trailing garbage */
    {
        unsigned char *longer = malloc(len + 16);
        assert_non_null(longer);
        memcpy(longer, good, len);
        memset(longer + len, 0x5A, 16);
        write_whole(path, longer, len + 16);
        bad_file_case(&s, path, KVS_ECORRUPT, __LINE__);
        free(longer);
    }
    /* empty */
    write_whole(path, good, 0);
    bad_file_case(&s, path, KVS_ECORRUPT, __LINE__);
    /* not there */
    snprintf(path, sizeof path, "%s/missing", s.dir);
    bad_file_case(&s, path, -ENOENT, __LINE__);
    /* the good file still loads */
    {
        kvs_t *kv = state_store("sgd lr=0.1 momentum=0.9 wd=0.01", s.w2, s.w2_5);
        float w[SN], w5[2];
        OK(kvs_load_optimizer_states(kv, s.path));
        push_both(kv);
        pull_both(kv, w, w5);
        EXPECT_F32(w, s.w3, SN);
        kvs_close(kv);
    }
    free(good);
    free(bad);
    remove_tmpdir(s.dir);
}

static void test_save_paths(void **state)
{
    kvs_t *kv = state_store("sgd lr=0.1 momentum=0.9", SW0, SW0);
    char *dir = make_tmpdir();
    char path[4300];
    unsigned char *first, *second;
    size_t l1, l2;
    (void)state;
    snprintf(path, sizeof path, "%s/no/such/dir/states", dir);
    EXPECT_RC(kvs_save_optimizer_states(kv, path, 0), -ENOENT);
    EXPECT_DETAIL(kv, NULL);
    assert_int_equal(count_dir_entries(dir), 0);

    /* overwrite: the path holds the new file, nothing else is left */
    snprintf(path, sizeof path, "%s/states", dir);
    OK(kvs_save_optimizer_states(kv, path, 0));
    first = read_whole(path, &l1);
    push_both(kv);
    OK(kvs_save_optimizer_states(kv, path, 0));
    second = read_whole(path, &l2);
    assert_int_equal(count_dir_entries(dir), 1);
    assert_true(l1 != l2 || memcmp(first, second, l1) != 0);
    free(first);
    free(second);
    kvs_close(kv);
    remove_tmpdir(dir);
}

/* ---- main ------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_without_optimizer),
        cmocka_unit_test(test_save_load_sgd_momentum),
        cmocka_unit_test(test_save_load_adam),
        cmocka_unit_test(test_load_dumped_optimizer),
        cmocka_unit_test(test_load_mismatches),
        cmocka_unit_test(test_load_corrupt_files),
        cmocka_unit_test(test_save_paths),
    };
    return cmocka_run_group_tests_name("api_states", tests, NULL, NULL);
}
