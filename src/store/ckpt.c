/*
 * ckpt.c - a checkpoint folder (ckpt.h): the two newest snapshots of a job
 * on disk, copied there whole from the snapshot kvsd keeps in shared
 * memory, as snap-<commit, 20 digits>.kvs, so that names sort as numbers.
 * It trusts no file it finds there: each is opened through snapshot.c,
 * which checks it whole, and one that fails is passed over for the one
 * before it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                    /* copy_file_range */
#endif

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "store/ckpt.h"
#include "store/statefile_codec.h"      /* kvs__sf_open_read */

#define CK_COPY_BUF ((size_t)1 << 20)   /* the copy's buffer, where copy_file_range fails */
#define CK_DIGITS 20                   /* UINT64_MAX's; names sort as numbers */

/* A snapshot's name in a checkpoint directory: snap-<20 digits>.kvs. */
static int ck_name_ok(const char *n)
{
    if (strncmp(n, "snap-", 5) != 0 || strlen(n) != 5 + CK_DIGITS + 4
        || strcmp(n + 5 + CK_DIGITS, ".kvs") != 0)
        return 0;
    for (int i = 0; i < CK_DIGITS; i++)
        if (n[5 + i] < '0' || n[5 + i] > '9')
            return 0;
    return 1;
}

/* Temp files of copies whose writer is gone (a kvsd killed while it
 * copied): .snap-<digits>.kvs.tmp.<pid>, each as big as a snapshot, that
 * nothing would ever remove. A live writer's (another pid still running)
 * is left alone. */
static void ck_drop_stale(const char *dir)
{
    const size_t name_len = 5 + CK_DIGITS + 4;    /* snap-<digits>.kvs */
    struct dirent *de;
    DIR *d = opendir(dir);

    if (!d)
        return;
    while ((de = readdir(d))) {
        const char *n = de->d_name, *pid = n + 1 + name_len + 5;
        char name[5 + CK_DIGITS + 4 + 1], path[PATH_MAX];
        long p;

        if (n[0] != '.' || strlen(n) <= 1 + name_len + 5
            || strncmp(n + 1 + name_len, ".tmp.", 5) != 0)
            continue;
        memcpy(name, n + 1, name_len);
        name[name_len] = '\0';
        if (!ck_name_ok(name) || strspn(pid, "0123456789") != strlen(pid)
            || (p = atol(pid)) <= 0)
            continue;
        if (p != (long)getpid() && (kill((pid_t)p, 0) == 0 || errno == EPERM))
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, n) < (int)sizeof path)
            unlink(path);
    }
    closedir(d);
}

static int cmp_desc(const void *a, const void *b)
{
    return strcmp(*(char *const *)b, *(char *const *)a);
}

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The snapshot names of dir, newest first (*names malloc'd, n of them). */
static int ck_list(const char *dir, char ***names, size_t *n, struct kvs__err *e)
{
    size_t cap = 0;
    struct dirent *de;
    DIR *d;
    int rc = 0;

    *names = NULL;
    *n = 0;
    if (!(d = opendir(dir))) {
        rc = -errno;
        return kvs__fail(e, rc, "cannot read directory '%s': %s", dir, kvs_strerror(rc));
    }
    while ((errno = 0, de = readdir(d))) {
        if (!ck_name_ok(de->d_name))
            continue;
        if (*n == cap) {
            char **m = realloc(*names, sizeof *m * (cap = cap ? 2 * cap : 8));
            if (!m) {
                rc = -ENOMEM;
                break;
            }
            *names = m;
        }
        if (!((*names)[*n] = strdup(de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        (*n)++;
    }
    if (rc == 0 && errno != 0)
        rc = -errno;
    closedir(d);
    if (rc != 0) {
        names_free(*names, *n);
        *names = NULL;
        *n = 0;
        return kvs__fail(e, rc, "cannot read directory '%s': %s", dir, kvs_strerror(rc));
    }
    if (*n > 1)
        qsort(*names, *n, sizeof **names, cmp_desc);
    return 0;
}

/* Copies every byte of in to out: copy_file_range where the file systems
 * allow it, else through a big buffer. */
static int copy_fd(int in, int out, const char *src, const char *dst, struct kvs__err *e)
{
    uint8_t *buf = NULL;
    int rc = 0;

    for (;;) {
        ssize_t k = copy_file_range(in, NULL, out, NULL, CK_COPY_BUF * 64, 0);
        if (k > 0)
            continue;
        if (k == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP
            && errno != EPERM) {
            rc = -errno;
            return kvs__fail(e, rc, "cannot copy '%s' to '%s': %s", src, dst,
                             kvs_strerror(rc));
        }
        break;                         /* what was copied stays; the loop goes on */
    }
    if (!(buf = malloc(CK_COPY_BUF)))
        return kvs__fail(e, -ENOMEM, "out of memory");
    for (;;) {
        ssize_t k = read(in, buf, CK_COPY_BUF), off = 0;
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = -errno;
            kvs__fail(e, rc, "cannot read '%s': %s", src, kvs_strerror(rc));
            break;
        }
        if (k == 0)
            break;
        while (off < k) {
            ssize_t w = write(out, buf + off, (size_t)(k - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = w < 0 ? -errno : -EIO;
                kvs__fail(e, rc, "cannot write '%s': %s", dst, kvs_strerror(rc));
                break;
            }
            off += w;
        }
        if (rc != 0)
            break;
    }
    free(buf);
    return rc;
}

int kvs__ckpt_save(const char *dir, const char *src, uint64_t seq, struct kvs__err *e)
{
    char *path = NULL, *tmp = NULL, **names = NULL;
    struct stat st;
    size_t plen, n = 0;
    int in = -1, out = -1, rc, renamed = 0;

    if (!dir || !src)
        return kvs__fail(e, KVS_EBADARG, "checkpoint: %s is NULL", dir ? "source" : "directory");
    plen = strlen(dir) + 1 + 5 + CK_DIGITS + 4 + 1;
    if (!(path = malloc(plen)) || !(tmp = malloc(plen + 32))) {
        rc = kvs__fail(e, -ENOMEM, "out of memory");
        goto out;
    }
    snprintf(path, plen, "%s/snap-%0*" PRIu64 ".kvs", dir, CK_DIGITS, seq);
    /* A leading dot: not a snapshot's name while it is being written. */
    snprintf(tmp, plen + 32, "%s/.snap-%0*" PRIu64 ".kvs.tmp.%ld", dir, CK_DIGITS, seq,
             (long)getpid());
    if ((rc = kvs__sf_open_read(src, &in, &st, e)) != 0)
        goto out;
    ck_drop_stale(dir);
    if ((out = kvs__file_create(tmp, e)) < 0) {
        rc = out;
        goto out;
    }
    if ((rc = copy_fd(in, out, src, tmp, e)) != 0)
        goto out;
    rc = kvs__file_finish(out, tmp, path, 1, e);
    out = -1;
    if (rc != 0)
        goto out;
    renamed = 1;
    if ((rc = kvs__fsync_dir(dir, e)) != 0)
        goto out;
    /* Only the two newest stay, and the one just written, whatever its
     * number (a job that numbers its commits afresh must not lose its
     * newest). A failure to list or remove the older ones loses nothing:
     * the new one is in place. */
    if ((rc = ck_list(dir, &names, &n, e)) != 0)
        goto out;
    for (size_t i = 2; i < n; i++) {
        char old[PATH_MAX];

        if (strcmp(names[i], strrchr(path, '/') + 1) == 0)
            continue;
        if (snprintf(old, sizeof old, "%s/%s", dir, names[i]) < (int)sizeof old
            && unlink(old) != 0 && errno != ENOENT) {
            rc = -errno;
            kvs__fail(e, rc, "cannot remove '%s': %s", old, kvs_strerror(rc));
        }
    }
out:
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    if (tmp && !renamed)
        unlink(tmp);
    names_free(names, n);
    free(path);
    free(tmp);
    return rc;
}

int kvs__ckpt_has(const char *dir, uint64_t seq)
{
    char path[PATH_MAX];
    struct stat st;

    if (!dir || snprintf(path, sizeof path, "%s/snap-%0*" PRIu64 ".kvs", dir, CK_DIGITS, seq)
                    >= (int)sizeof path)
        return 0;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Opens the newest snapshot of dir that checks whole and, for a step of 0
 * or more, is of that step (kvs__ckpt_newest, kvs__ckpt_find). */
static int ck_open(const char *dir, int64_t step, struct kvs__snapshot **out, char *path,
                   size_t path_len, void (*report)(void *ctx, const char *path, const char *why),
                   void *ctx, struct kvs__err *e)
{
    char **names;
    size_t n;
    int rc;

    if (!dir || !out)
        return kvs__fail(e, KVS_EBADARG, "checkpoint: %s is NULL", dir ? "output" : "directory");
    *out = NULL;
    if ((rc = ck_list(dir, &names, &n, e)) != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        struct kvs__err pe = { 0 };
        char p[PATH_MAX];

        if (snprintf(p, sizeof p, "%s/%s", dir, names[i]) >= (int)sizeof p)
            continue;
        rc = kvs__snapshot_open(p, out, &pe);
        if (rc == 0 && step >= 0 && kvs__snapshot_meta(*out)->step != step) {
            kvs__snapshot_free(*out);
            *out = NULL;
            continue;
        }
        if (rc == 0) {
            if (path && path_len)
                snprintf(path, path_len, "%s", p);
            break;
        }
        if (rc == -ENOMEM) {
            kvs__fail(e, rc, "%s", pe.msg);
            break;
        }
        /* Damaged, or gone since the listing: the one before it may do. */
        if (report)
            report(ctx, p, pe.msg);
        rc = 0;
    }
    names_free(names, n);
    return rc;
}

int kvs__ckpt_newest(const char *dir, struct kvs__snapshot **out, char *path, size_t path_len,
                     void (*report)(void *ctx, const char *path, const char *why),
                     void *ctx, struct kvs__err *e)
{
    return ck_open(dir, -1, out, path, path_len, report, ctx, e);
}

int kvs__ckpt_find(const char *dir, int64_t step, struct kvs__snapshot **out, char *path,
                   size_t path_len, struct kvs__err *e)
{
    return ck_open(dir, step, out, path, path_len, NULL, NULL, e);
}

int kvs__ckpt_set_aside(const char *dir, uint64_t seq)
{
    struct kvs__err e = { 0 };
    char **names;
    size_t n;
    int moved = 0;

    if (!dir || ck_list(dir, &names, &n, &e) != 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char from[PATH_MAX], to[PATH_MAX];

        if (strtoull(names[i] + 5, NULL, 10) <= seq
            || snprintf(from, sizeof from, "%s/%s", dir, names[i]) >= (int)sizeof from
            || snprintf(to, sizeof to, "%s.rolled-back", from) >= (int)sizeof to)
            continue;
        moved += rename(from, to) == 0;
    }
    names_free(names, n);
    return moved;
}

size_t kvs__ckpt_steps(const char *dir, const char *job, int64_t *steps, size_t max)
{
    struct kvs__err e = { 0 };
    char **names;
    size_t n, got = 0;

    if (!dir || ck_list(dir, &names, &n, &e) != 0)
        return 0;
    for (size_t i = 0; i < n && got < max; i++) {
        struct kvs__snapshot *s;
        char p[PATH_MAX];

        if (snprintf(p, sizeof p, "%s/%s", dir, names[i]) >= (int)sizeof p
            || kvs__snapshot_open(p, &s, &e) != 0)
            continue;
        if (strcmp(kvs__snapshot_meta(s)->job, job) == 0)
            steps[got++] = kvs__snapshot_meta(s)->step;
        kvs__snapshot_free(s);
    }
    names_free(names, n);
    return got;
}
