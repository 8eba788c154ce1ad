/*
 * file.c - files replaced whole (file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"

int kvs__fsync(int fd)
{
    while (fsync(fd) != 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

int kvs__fsync_dir(const char *dir, struct kvs__err *e)
{
    int fd, rc;

    do
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        rc = -errno;
        return kvs__fail(e, rc, "cannot open directory '%s' to sync it: %s", dir,
                         kvs_strerror(rc));
    }
    rc = kvs__fsync(fd);
    close(fd);
    if (rc == -EINVAL || rc == -ENOTSUP)
        rc = 0;
    if (rc != 0)
        kvs__fail(e, rc, "cannot sync directory '%s': %s", dir, kvs_strerror(rc));
    return rc;
}

int kvs__fsync_dir_of(const char *path, struct kvs__err *e)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    int rc;

    if (!slash)
        return kvs__fsync_dir(".", e);
    if (slash == path)
        return kvs__fsync_dir("/", e);
    if (!(dir = strndup(path, (size_t)(slash - path))))
        return kvs__fail(e, -ENOMEM, "out of memory");
    rc = kvs__fsync_dir(dir, e);
    free(dir);
    return rc;
}

int kvs__file_create(const char *tmp, struct kvs__err *e)
{
    int fd, rc;

    unlink(tmp);
    do
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        rc = -errno;
        return kvs__fail(e, rc, "cannot create '%s': %s", tmp, kvs_strerror(rc));
    }
    return fd;
}

int kvs__file_finish(int fd, const char *tmp, const char *path, int durable,
                     struct kvs__err *e)
{
    int rc;

    if (durable && (rc = kvs__fsync(fd)) != 0) {
        close(fd);
        return kvs__fail(e, rc, "cannot sync '%s': %s", tmp, kvs_strerror(rc));
    }
    /* Not retried on EINTR: Linux has closed the descriptor by then. */
    rc = close(fd) != 0 ? -errno : 0;
    if (rc != 0 && rc != -EINTR)
        return kvs__fail(e, rc, "cannot close '%s': %s", tmp, kvs_strerror(rc));
    if (rename(tmp, path) != 0) {
        rc = -errno;
        return kvs__fail(e, rc, "cannot rename '%s' to '%s': %s", tmp, path,
                         kvs_strerror(rc));
    }
    return 0;
}
