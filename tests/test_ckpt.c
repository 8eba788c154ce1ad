/*
 * test_ckpt.c - unit tests of the checkpoint folder (src/store/ckpt.c),
 * the last snapshots of a job on disk: of twelve saves the two newest
 * kept, named so that they sort as numbers, an older number kept beside
 * them until the next save, a missing source refused with nothing left;
 * a damaged newest snapshot reported and passed over for the one before,
 * none when all are damaged, files of other names ignored; the newest of
 * a given step found, a damaged one passed over; an empty
 * folder (none) and a missing one (-ENOENT); the temporary files of a
 * save whose writer is gone removed, a live writer's kept. The snapshot
 * files themselves are tested in test_snapshot.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvs.h"
#include "store/ckpt.h"
#include "store/engine.h"
#include "store/snapshot.h"
#include "snaputil.h"

/* ---- Helpers ----------------------------------------------------------- */

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

/* The newest snapshot of a given step (the step the hosts of a job agree
 * to restore): each step's own; none of a step no file has; a damaged
 * file of the step passed over without a report; a later commit of the
 * same step (after a roll back) preferred to an earlier one; a NULL folder
 * refused, a missing one -ENOENT. */
static void test_ckpt_find_step(void **state)
{
    struct kvs__engine *eng = make_store(0, "sgd", 1);
    struct kvs__snapshot *s = NULL;
    char dir[PATH_MAX / 2], src[PATH_MAX], got[PATH_MAX], want[PATH_MAX];
    struct kvs__snap_meta m = meta0;
    static const struct { uint64_t seq; int64_t step; } saves[] = { { 4, 40 }, { 5, 50 } };
    uint8_t *b;
    size_t len;

    (void)state;
    make_ckdir(dir, sizeof dir, "ckf");
    tmp_path(src, sizeof src, "ckf.snap");
    for (size_t i = 0; i < sizeof saves / sizeof saves[0]; i++) {
        m.seq = saves[i].seq;
        m.step = saves[i].step;
        OKE(kvs__snapshot_write(eng, &m, NULL, NULL, src, 0, NULL, &err));
        OKE(kvs__ckpt_save(dir, src, saves[i].seq, &err));
    }
    for (size_t i = 0; i < sizeof saves / sizeof saves[0]; i++) {
        snprintf(want, sizeof want, "%s/snap-%020" PRIu64 ".kvs", dir, saves[i].seq);
        OKE(kvs__ckpt_find(dir, saves[i].step, &s, got, sizeof got, &err));
        assert_non_null(s);
        assert_string_equal(got, want);
        assert_int_equal(kvs__snapshot_meta(s)->step, saves[i].step);
        assert_int_equal(kvs__snapshot_meta(s)->seq, saves[i].seq);
        kvs__snapshot_free(s);
    }
    /* A step no file is of: none, and 0. */
    s = (void *)1;
    OKE(kvs__ckpt_find(dir, 45, &s, got, sizeof got, &err));
    assert_null(s);
    /* Step 50's file damaged: none of step 50; step 40's still found. */
    snprintf(want, sizeof want, "%s/snap-%020" PRIu64 ".kvs", dir, (uint64_t)5);
    b = read_all(want, &len);
    b[len / 2] ^= 1;
    write_all(want, b, len);
    free(b);
    OKE(kvs__ckpt_find(dir, 50, &s, NULL, 0, &err));
    assert_null(s);
    OKE(kvs__ckpt_find(dir, 40, &s, NULL, 0, &err));
    assert_non_null(s);
    assert_int_equal(kvs__snapshot_meta(s)->seq, 4);
    kvs__snapshot_free(s);
    /* Step 40 committed again (commit 6, after a roll back): the later. */
    m.seq = 6;
    m.step = 40;
    OKE(kvs__snapshot_write(eng, &m, NULL, NULL, src, 0, NULL, &err));
    OKE(kvs__ckpt_save(dir, src, 6, &err));
    snprintf(want, sizeof want, "%s/snap-%020" PRIu64 ".kvs", dir, (uint64_t)6);
    OKE(kvs__ckpt_find(dir, 40, &s, got, sizeof got, &err));
    assert_non_null(s);
    assert_string_equal(got, want);
    assert_int_equal(kvs__snapshot_meta(s)->seq, 6);
    kvs__snapshot_free(s);
    /* No folder named, or none there. */
    assert_int_equal(kvs__ckpt_find(NULL, 40, &s, NULL, 0, &err), KVS_EBADARG);
    tmp_path(dir, sizeof dir, "no-such-dir");
    assert_int_equal(kvs__ckpt_find(dir, 40, &s, NULL, 0, &err), -ENOENT);
    assert_null(s);
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

/* ---- Main ------------------------------------------------------------ */

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE(test_ckpt_keeps_two),
        CASE(test_ckpt_newest_skips_damaged),
        CASE(test_ckpt_find_step),
        CASE(test_ckpt_empty_missing),
        CASE(test_ckpt_drops_stale_tmp),
    };
    int rc;

    if (tmpdir_make("kvs-ckpt") != 0)
        return 1;
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    tmpdir_remove();
    return rc;
}
