/*
 * test_shm.c - unit tests of shm.c: the runtime directory and what it
 * refuses, job names, memfds (sealing, the read-only reopen, the checks a
 * receiver makes) and the Unix socket (deadlines, descriptor passing,
 * descriptors closed on every error, peer credentials).
 * Everything happens in one process (children only where a race needs
 * them) and under a private temporary directory; tests only shm.h.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm/shm.h"

#define MS 1000000LL

/* ---- helpers ------------------------------------------------------------ */

static int64_t clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A private directory for one test, removed by the test. */
static void make_tmp(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/kvs-test-shm-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void assert_detail(const struct kvs__err *e, const char *part)
{
    if (strstr(e->msg, part) == NULL)
        fail_msg("detail \"%s\" lacks \"%s\"", e->msg, part);
}

/* Open descriptors of this process, to see that an error closed what it
 * received. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *ent;
    int n = 0;

    assert_non_null(d);
    while ((ent = readdir(d)) != NULL)
        if (ent->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;                      /* the directory's own descriptor */
}

static int is_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFD);

    assert_true(fl >= 0);
    return (fl & FD_CLOEXEC) != 0;
}

/* A connected pair through a real listening socket in dir. */
static void sock_pair(const char *dir, int *lfd, int *client, int *server)
{
    char path[256];
    struct kvs__err e = { 0 };

    snprintf(path, sizeof path, "%s/kvsd.sock", dir);
    assert_int_equal(kvs__sock_listen(path, lfd, &e), 0);
    assert_int_equal(kvs__sock_connect(path, client, &e), 0);
    assert_int_equal(kvs__sock_accept(*lfd, clock_ns() + 1000 * MS, server, &e), 0);
}

/* ---- runtime directory -------------------------------------------------- */

static void test_runtime_dir_create(void **state)
{
    char tmp[64], want[128], got[256];
    struct kvs__err e = { 0 };
    struct stat st;

    (void)state;
    make_tmp(tmp, sizeof tmp);
    umask(022);                        /* the directory is 0700 whatever the umask */
    setenv("XDG_RUNTIME_DIR", tmp, 1);
    snprintf(want, sizeof want, "%s/kvs", tmp);

    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), 0);
    assert_string_equal(got, want);
    assert_int_equal(lstat(want, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(st.st_uid, geteuid());

    /* Found the second time, unchanged. */
    memset(got, 0, sizeof got);
    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), 0);
    assert_string_equal(got, want);

    /* The path must fit the caller's buffer. */
    assert_int_equal(kvs__runtime_dir(got, strlen(want), &e), -ENAMETOOLONG);
    assert_int_equal(kvs__runtime_dir(got, strlen(want) + 1, &e), 0);
    assert_string_equal(got, want);

    /* A parent that does not exist is reported with the path. */
    snprintf(want, sizeof want, "%s/missing/deeper", tmp);
    setenv("XDG_RUNTIME_DIR", want, 1);
    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), -ENOENT);
    assert_detail(&e, want);

    unsetenv("XDG_RUNTIME_DIR");
    rm_tree(tmp);
}

static void test_runtime_dir_refused(void **state)
{
    char tmp[64], kdir[128], other[128], got[256];
    struct kvs__err e = { 0 };

    (void)state;
    make_tmp(tmp, sizeof tmp);
    setenv("XDG_RUNTIME_DIR", tmp, 1);
    snprintf(kdir, sizeof kdir, "%s/kvs", tmp);
    snprintf(other, sizeof other, "%s/elsewhere", tmp);

    /* Group and others may look in: refused, and left as it is. */
    assert_int_equal(mkdir(kdir, 0700), 0);
    assert_int_equal(chmod(kdir, 0755), 0);
    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), -EPERM);
    assert_int_equal(e.code, -EPERM);
    assert_detail(&e, kdir);
    assert_detail(&e, "0755");
    assert_int_equal(chmod(kdir, 0710), 0);
    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), -EPERM);
    assert_int_equal(chmod(kdir, 0700), 0);
    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), 0);

    /* Another owner (only root can arrange one here). */
    if (geteuid() == 0) {
        assert_int_equal(chown(kdir, 4242, 4242), 0);
        assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), -EPERM);
        assert_detail(&e, "uid 4242");
    }
    assert_int_equal(rmdir(kdir), 0);

    /* A symbolic link, even to a good directory. */
    assert_int_equal(mkdir(other, 0700), 0);
    assert_int_equal(symlink(other, kdir), 0);
    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), -EPERM);
    assert_detail(&e, "symbolic link");
    assert_int_equal(unlink(kdir), 0);

    /* A dangling one too: mkdir must not follow it. */
    assert_int_equal(symlink("/nonexistent/kvs", kdir), 0);
    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), -EPERM);
    assert_int_equal(unlink(kdir), 0);

    /* A plain file. */
    {
        int fd = open(kdir, O_CREAT | O_WRONLY, 0600);

        assert_true(fd >= 0);
        close(fd);
    }
    assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), -EPERM);
    assert_detail(&e, "not a directory");

    unsetenv("XDG_RUNTIME_DIR");
    rm_tree(tmp);
}

static void test_runtime_dir_fallback(void **state)
{
    static const char *const bad[] = { "relative/dir", "", "./x" };
    char want[64], got[256];
    struct kvs__err e = { 0 };
    struct stat st;
    int existed;

    (void)state;
    snprintf(want, sizeof want, "/tmp/kvs-%lu", (unsigned long)geteuid());
    existed = lstat(want, &st) == 0;
    for (size_t i = 0; i <= sizeof bad / sizeof bad[0]; i++) {
        int rc;

        if (i < sizeof bad / sizeof bad[0])
            setenv("XDG_RUNTIME_DIR", bad[i], 1);
        else
            unsetenv("XDG_RUNTIME_DIR");
        rc = kvs__runtime_dir(got, sizeof got, &e);
        /* The shared /tmp/kvs-UID belongs to the machine, not the test: a
         * bad one left there is refused, by its name. */
        if (rc == 0)
            assert_string_equal(got, want);
        else {
            assert_int_equal(rc, -EPERM);
            assert_detail(&e, want);
        }
    }

    /* Too long for any path. */
    {
        char *xdg = malloc(5000);

        assert_non_null(xdg);
        xdg[0] = '/';
        memset(xdg + 1, 'x', 4998);
        xdg[4999] = '\0';
        setenv("XDG_RUNTIME_DIR", xdg, 1);
        assert_int_equal(kvs__runtime_dir(got, sizeof got, &e), -ENAMETOOLONG);
        free(xdg);
    }
    unsetenv("XDG_RUNTIME_DIR");
    if (!existed)                      /* leave the machine as it was */
        rmdir(want);
}

/* Several processes race to create the directory: all of them succeed. */
static void test_runtime_dir_race(void **state)
{
    enum { N = 8 };
    char tmp[64];
    int gate[2];
    pid_t pids[N];

    (void)state;
    make_tmp(tmp, sizeof tmp);
    setenv("XDG_RUNTIME_DIR", tmp, 1);
    assert_int_equal(pipe(gate), 0);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            char got[256], c;

            close(gate[1]);
            (void)!read(gate[0], &c, 1);   /* released all at once by the close */
            _exit(kvs__runtime_dir(got, sizeof got, NULL) == 0 ? 0 : 1);
        }
    }
    close(gate[0]);
    close(gate[1]);
    for (int i = 0; i < N; i++) {
        int status;

        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    unsetenv("XDG_RUNTIME_DIR");
    rm_tree(tmp);
}

/* ---- job names ---------------------------------------------------------- */

static void test_job_names(void **state)
{
    static const char *const good[] = {
        "a", "job-1", "Train_2.run", "0", "a.", "-x", "_",
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._",
    };
    static const char *const bad[] = {
        "", ".", "..", ".hidden", "a/b", "/abs", "a b", "a\tb", "a\nb", "caf\xc3\xa9",
        "a:b", "a*", "a$", "a\\b",
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    };
    struct kvs__err e = { 0 };

    (void)state;
    assert_int_equal(strlen(good[7]), 64);
    assert_int_equal(strlen(bad[14]), 65);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (kvs__job_name_check(good[i], &e) != 0)
            fail_msg("\"%s\" refused: %s", good[i], e.msg);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.code = 0;
        if (kvs__job_name_check(bad[i], &e) != KVS_EBADARG)
            fail_msg("bad name %zu accepted", i);
        assert_int_equal(e.code, KVS_EBADARG);
    }
    assert_int_equal(kvs__job_name_check(NULL, &e), KVS_EBADARG);
    assert_int_equal(kvs__job_name_check("ok", NULL), 0);
}

/* ---- memfd -------------------------------------------------------------- */

static void test_memfd_plain(void **state)
{
    struct kvs__err e = { 0 };
    unsigned char buf[8192];
    struct stat st;
    int fd, seals;

    (void)state;
    assert_int_equal(kvs__memfd_new("kvs-test", sizeof buf, 0, &fd, &e), 0);
    assert_true(fd >= 0);
    assert_true(is_cloexec(fd));
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, sizeof buf);
    memset(buf, 0xee, sizeof buf);
    assert_int_equal(pread(fd, buf, sizeof buf, 0), sizeof buf);
    for (size_t i = 0; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0);

    /* Unsealed: nobody can seal it later (created without sealing allowed). */
    seals = fcntl(fd, F_GET_SEALS);
    assert_int_equal(seals, F_SEAL_SEAL);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), -1);
    assert_int_equal(errno, EPERM);

    /* What a receiver checks. */
    assert_int_equal(kvs__memfd_check(fd, sizeof buf, 0, &e), 0);
    assert_int_equal(kvs__memfd_check(fd, sizeof buf, 1, &e), KVS_EPROTO);
    assert_detail(&e, "sealed");
    assert_int_equal(kvs__memfd_check(fd, sizeof buf - 1, 0, &e), KVS_EPROTO);
    assert_detail(&e, "8192");
    assert_int_equal(kvs__memfd_check(fd, sizeof buf + 1, 0, &e), KVS_EPROTO);

    /* It can still grow: the owner resizes unsealed segments. */
    assert_int_equal(ftruncate(fd, 2 * sizeof buf), 0);
    close(fd);

    /* Zero bytes is a valid (if useless) segment; a pipe is not a memfd. */
    assert_int_equal(kvs__memfd_new("kvs-empty", 0, 1, &fd, &e), 0);
    assert_int_equal(kvs__memfd_check(fd, 0, 1, &e), 0);
    close(fd);
    {
        int p[2];

        assert_int_equal(pipe(p), 0);
        assert_int_equal(kvs__memfd_check(p[0], 0, 0, &e), KVS_EPROTO);
        close(p[0]);
        close(p[1]);
    }
    assert_int_equal(kvs__memfd_check(-1, 0, 0, &e), -EBADF);
}

static void test_memfd_sealed(void **state)
{
    struct kvs__err e = { 0 };
    const size_t size = 3 * 4096;
    int fd, seals;

    (void)state;
    assert_int_equal(kvs__memfd_new("kvs-arena", size, 1, &fd, &e), 0);
    seals = fcntl(fd, F_GET_SEALS);
    assert_true(seals >= 0);
    assert_int_equal(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
                     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    assert_int_equal(seals & F_SEAL_WRITE, 0);

    /* Neither grows nor shrinks, and no further seal can be added. */
    assert_int_equal(ftruncate(fd, (off_t)size * 2), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(ftruncate(fd, (off_t)size / 2), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    assert_int_equal(errno, EPERM);
    /* Writing inside stays allowed: kvsd fills the arena. */
    assert_int_equal(pwrite(fd, "x", 1, (off_t)size - 1), 1);

    assert_int_equal(kvs__memfd_check(fd, size, 1, &e), 0);
    assert_int_equal(kvs__memfd_check(fd, size + 4096, 1, &e), KVS_EPROTO);
    close(fd);

    /* Bad arguments. */
    assert_int_equal(kvs__memfd_new("x", SIZE_MAX, 0, &fd, &e), -EFBIG);
    assert_int_equal(fd, -1);
    assert_int_equal(kvs__memfd_new(NULL, 1, 0, &fd, &e), -EINVAL);
}

/* The arena's sealing: kvsd's mapping made before the write seal keeps
 * writing; afterwards no descriptor of the memfd, not even one reopened
 * read-write through /proc, gives a writable mapping or a write(). */
static void test_memfd_seal_writes(void **state)
{
    struct kvs__err e = { 0 };
    const size_t size = 2 * 4096;
    char path[64];
    unsigned char *rw;
    void *p;
    int fd, rwfd, seals;

    (void)state;
    assert_int_equal(kvs__memfd_new("kvs-arena", size, KVS__SEAL_SIZE_OPEN, &fd, &e), 0);
    assert_int_equal(kvs__map(fd, size, 1, &p, &e), 0);
    rw = p;
    assert_int_equal(kvs__memfd_seal_writes(fd, &e), 0);
    seals = fcntl(fd, F_GET_SEALS);
    assert_int_equal(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | F_SEAL_FUTURE_WRITE),
                     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | F_SEAL_FUTURE_WRITE);
    assert_int_equal(kvs__memfd_check(fd, size, 1, &e), 0);

    rw[5] = 42;                        /* the mapping made before still writes */
    assert_int_equal(kvs__map(fd, size, 1, &p, &e), -EPERM);
    assert_int_equal(pwrite(fd, "x", 1, 0), -1);
    assert_int_equal(errno, EPERM);
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    rwfd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(rwfd >= 0);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, rwfd, 0);
    assert_true(p == MAP_FAILED);
    assert_int_equal(errno, EPERM);
    assert_int_equal(kvs__map(rwfd, size, 0, &p, &e), 0);   /* reading is fine */
    assert_int_equal(((unsigned char *)p)[5], 42);
    kvs__unmap(p, size);
    close(rwfd);
    kvs__unmap(rw, size);
    /* No further seal can be added. */
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    close(fd);
}

static void test_memfd_reopen_ro(void **state)
{
    struct kvs__err e = { 0 };
    const size_t size = 2 * 4096;
    unsigned char *rw, *ro;
    void *p;
    int fd, rfd;

    (void)state;
    assert_int_equal(kvs__memfd_new("kvs-arena", size, 1, &fd, &e), 0);
    assert_int_equal(kvs__map(fd, size, 1, &p, &e), 0);
    rw = p;
    for (size_t i = 0; i < size; i++)
        rw[i] = (unsigned char)(i * 7 + 3);

    assert_int_equal(kvs__memfd_reopen_ro(fd, &rfd, &e), 0);
    assert_true(rfd >= 0 && rfd != fd);
    assert_true(is_cloexec(rfd));
    assert_int_equal(fcntl(rfd, F_GETFL) & O_ACCMODE, O_RDONLY);

    /* It cannot be mapped writable, nor written. */
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
    assert_true(p == MAP_FAILED);
    assert_int_equal(errno, EACCES);
    assert_int_equal(kvs__map(rfd, size, 1, &p, &e), -EACCES);
    assert_null(p);
    assert_int_equal(write(rfd, "x", 1), -1);
    assert_int_equal(errno, EBADF);
    /* mprotect cannot upgrade a read-only shared mapping either. */
    assert_int_equal(kvs__map(rfd, size, 0, &p, &e), 0);
    ro = p;
    assert_int_equal(mprotect(ro, size, PROT_READ | PROT_WRITE), -1);
    assert_int_equal(errno, EACCES);

    /* Same bytes, and later writes through the rw side show through. */
    assert_memory_equal(ro, rw, size);
    rw[100] = 0x42;
    assert_int_equal(ro[100], 0x42);
    /* The seals are the file's, so the receiver's check passes on it. */
    assert_int_equal(kvs__memfd_check(rfd, size, 1, &e), 0);

    kvs__unmap(ro, size);
    kvs__unmap(rw, size);
    kvs__unmap(NULL, size);            /* a no-op */
    close(rfd);
    close(fd);

    assert_int_equal(kvs__memfd_reopen_ro(-1, &rfd, &e), -EBADF);
    assert_int_equal(rfd, -1);
    assert_true(kvs__memfd_reopen_ro(fd, &rfd, &e) < 0);   /* closed above */
    assert_detail(&e, "/proc/self/fd/");
}

static void test_map_errors(void **state)
{
    struct kvs__err e = { 0 };
    void *p = (void *)1;
    int fd;

    (void)state;
    assert_int_equal(kvs__memfd_new("kvs-test", 4096, 0, &fd, &e), 0);
    assert_int_equal(kvs__map(fd, 0, 1, &p, &e), -EINVAL);
    assert_null(p);
    close(fd);
    assert_int_equal(kvs__map(fd, 4096, 0, &p, &e), -EBADF);
    assert_detail(&e, "mmap");
}

/* ---- sockets ------------------------------------------------------------ */

static void test_sock_listen_connect(void **state)
{
    char tmp[64], path[128], longp[200];
    struct kvs__err e = { 0 };
    struct stat st;
    int lfd, c, s, other;
    uid_t uid;
    pid_t pid;
    int64_t t0, dt;

    (void)state;
    make_tmp(tmp, sizeof tmp);
    snprintf(path, sizeof path, "%s/kvsd.sock", tmp);
    assert_int_equal(kvs__sock_listen(path, &lfd, &e), 0);
    assert_true(is_cloexec(lfd));
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);

    /* A path already bound, by someone live or stale, is not taken over. */
    assert_int_equal(kvs__sock_listen(path, &other, &e), -EADDRINUSE);
    assert_int_equal(other, -1);
    assert_detail(&e, path);

    /* Nobody connecting: deadline 0 is one try; a real deadline is kept. */
    t0 = clock_ns();
    assert_int_equal(kvs__sock_accept(lfd, 0, &s, &e), -ETIMEDOUT);
    assert_int_equal(s, -1);
    assert_int_equal(kvs__sock_accept(lfd, t0 - 1, &s, &e), -ETIMEDOUT);
    assert_true(clock_ns() - t0 < 50 * MS);
    t0 = clock_ns();
    assert_int_equal(kvs__sock_accept(lfd, t0 + 200 * MS, &s, &e), -ETIMEDOUT);
    dt = clock_ns() - t0;
    if (dt < 200 * MS || dt > 1500 * MS)
        fail_msg("accept waited %lld ms for a 200 ms deadline", (long long)(dt / MS));
    assert_detail(&e, "accept");

    /* A connection waiting: accepted even with deadline 0. */
    assert_int_equal(kvs__sock_connect(path, &c, &e), 0);
    assert_true(is_cloexec(c));
    assert_int_equal(kvs__sock_accept(lfd, 0, &s, &e), 0);
    assert_true(is_cloexec(s));

    /* Both ends see this process. */
    assert_int_equal(kvs__sock_peer(s, &uid, &pid, &e), 0);
    assert_int_equal(uid, getuid());
    assert_int_equal(pid, getpid());
    assert_int_equal(kvs__sock_peer(c, &uid, NULL, &e), 0);
    assert_int_equal(uid, getuid());
    assert_int_equal(kvs__sock_peer(-1, &uid, &pid, &e), -EBADF);
    close(c);
    close(s);

    /* Listener gone, socket file left: refused. Path gone: not found. */
    close(lfd);
    assert_int_equal(kvs__sock_connect(path, &c, &e), -ECONNREFUSED);
    assert_int_equal(c, -1);
    assert_detail(&e, path);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(kvs__sock_connect(path, &c, &e), -ENOENT);
    assert_detail(&e, path);

    /* Paths that cannot be a sockaddr_un. */
    memset(longp, 'p', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    assert_int_equal(kvs__sock_listen(longp, &lfd, &e), -ENAMETOOLONG);
    assert_int_equal(kvs__sock_connect(longp, &c, &e), -ENAMETOOLONG);
    longp[108] = '\0';                 /* 108 bytes: one too many for sun_path */
    assert_int_equal(kvs__sock_connect(longp, &c, &e), -ENAMETOOLONG);
    longp[107] = '\0';                 /* 107 fits: now merely missing */
    assert_int_equal(kvs__sock_connect(longp, &c, &e), -ENOENT);
    assert_int_equal(kvs__sock_connect("", &c, &e), -EINVAL);

    rm_tree(tmp);
}

static void on_alarm(int sig)
{
    (void)sig;
}

/* Signals that interrupt the wait neither end it early nor stretch it. */
static void test_sock_accept_signals(void **state)
{
    char tmp[64], path[128];
    struct kvs__err e = { 0 };
    struct sigaction sa, old;
    struct itimerval it = { { 0, 20000 }, { 0, 20000 } }, stop = { { 0, 0 }, { 0, 0 } };
    int lfd, s;
    int64_t t0, dt;

    (void)state;
    make_tmp(tmp, sizeof tmp);
    snprintf(path, sizeof path, "%s/kvsd.sock", tmp);
    assert_int_equal(kvs__sock_listen(path, &lfd, &e), 0);

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;          /* no SA_RESTART: poll sees EINTR */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
    assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
    t0 = clock_ns();
    assert_int_equal(kvs__sock_accept(lfd, t0 + 300 * MS, &s, &e), -ETIMEDOUT);
    dt = clock_ns() - t0;
    setitimer(ITIMER_REAL, &stop, NULL);
    sigaction(SIGALRM, &old, NULL);
    if (dt < 300 * MS || dt > 1500 * MS)
        fail_msg("accept waited %lld ms for a 300 ms deadline", (long long)(dt / MS));

    close(lfd);
    rm_tree(tmp);
}

static void test_sock_pass_fds(void **state)
{
    char tmp[64], msg[64];
    struct kvs__err e = { 0 };
    int lfd, c, s, mfd, ro, pipefd[2], fds[3], got[4], ngot = -1;
    size_t len = 0;
    unsigned char buf[16];
    void *p;

    (void)state;
    make_tmp(tmp, sizeof tmp);
    sock_pair(tmp, &lfd, &c, &s);

    /* Three descriptors of three kinds, as the welcome carries. */
    assert_int_equal(kvs__memfd_new("kvs-seg", 4096, 1, &mfd, &e), 0);
    assert_int_equal(pwrite(mfd, "segment", 7, 0), 7);
    assert_int_equal(kvs__memfd_reopen_ro(mfd, &ro, &e), 0);
    assert_int_equal(pipe(pipefd), 0);
    fds[0] = mfd;
    fds[1] = ro;
    fds[2] = pipefd[1];
    assert_int_equal(kvs__sock_send(c, "welcome", 7, fds, 3, clock_ns() + 1000 * MS, &e), 0);

    memset(msg, 0, sizeof msg);
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, got, 4, &ngot,
                                    clock_ns() + 1000 * MS, &e), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(msg, "welcome", 7);
    assert_int_equal(ngot, 3);
    for (int i = 0; i < 3; i++) {
        assert_true(got[i] >= 0);
        assert_true(got[i] != mfd && got[i] != ro && got[i] != pipefd[1]);
        assert_true(is_cloexec(got[i]));
    }
    /* Each works as the original: same file, same access mode. */
    assert_int_equal(pread(got[0], buf, 7, 0), 7);
    assert_memory_equal(buf, "segment", 7);
    assert_int_equal(kvs__memfd_check(got[0], 4096, 1, &e), 0);
    assert_int_equal(pwrite(got[0], "SEG", 3, 0), 3);
    assert_int_equal(pread(mfd, buf, 3, 0), 3);
    assert_memory_equal(buf, "SEG", 3);
    assert_int_equal(kvs__memfd_check(got[1], 4096, 1, &e), 0);
    assert_int_equal(kvs__map(got[1], 4096, 1, &p, &e), -EACCES);
    assert_int_equal(kvs__map(got[1], 4096, 0, &p, &e), 0);
    assert_memory_equal(p, "SEGment", 7);
    kvs__unmap(p, 4096);
    assert_int_equal(write(got[2], "pipe", 4), 4);
    assert_int_equal(read(pipefd[0], buf, sizeof buf), 4);
    assert_memory_equal(buf, "pipe", 4);

    /* A message with no descriptors, received where none are expected. */
    assert_int_equal(kvs__sock_send(s, "x", 1, NULL, 0, 0, &e), 0);
    assert_int_equal(kvs__sock_recv(c, msg, 1, &len, NULL, 0, &ngot, 0, &e), 0);
    assert_int_equal(len, 1);
    assert_int_equal(ngot, 0);

    for (int i = 0; i < 3; i++)
        close(got[i]);
    close(pipefd[0]);
    close(pipefd[1]);
    close(ro);
    close(mfd);
    close(c);
    close(s);
    close(lfd);
    rm_tree(tmp);
}

static void test_sock_recv_refused(void **state)
{
    char tmp[64], msg[100];
    struct kvs__err e = { 0 };
    int lfd, c, s, fds[3], got[8], ngot = -1, before;
    size_t len = 99;

    (void)state;
    make_tmp(tmp, sizeof tmp);
    sock_pair(tmp, &lfd, &c, &s);
    for (int i = 0; i < 3; i++)
        assert_int_equal(kvs__memfd_new("kvs-x", 4096, 0, &fds[i], &e), 0);
    memset(msg, 'm', sizeof msg);
    before = count_fds();

    /* Too long for the buffer: refused, and its descriptors closed. */
    assert_int_equal(kvs__sock_send(c, msg, sizeof msg, fds, 3, 0, &e), 0);
    assert_int_equal(kvs__sock_recv(s, msg, 10, &len, got, 8, &ngot, clock_ns() + 1000 * MS,
                                    &e), KVS_EPROTO);
    assert_detail(&e, "longer than 10");
    assert_int_equal(ngot, 0);
    assert_int_equal(count_fds(), before);

    /* More descriptors than the receiver takes. */
    assert_int_equal(kvs__sock_send(c, msg, 8, fds, 3, 0, &e), 0);
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, got, 2, &ngot,
                                    clock_ns() + 1000 * MS, &e), KVS_EPROTO);
    assert_detail(&e, "descriptors");
    assert_int_equal(count_fds(), before);

    /* Descriptors where none are wanted. */
    assert_int_equal(kvs__sock_send(c, msg, 8, fds, 1, 0, &e), 0);
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, NULL, 0, &ngot,
                                    clock_ns() + 1000 * MS, &e), KVS_EPROTO);
    assert_int_equal(count_fds(), before);

    /* The connection still works after a refusal. */
    assert_int_equal(kvs__sock_send(c, "ok", 2, fds, 2, 0, &e), 0);
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, got, 2, &ngot, 0, &e), 0);
    assert_int_equal(len, 2);
    assert_int_equal(ngot, 2);
    close(got[0]);
    close(got[1]);

    /* The sender's limits. */
    assert_int_equal(kvs__sock_send(c, msg, 0, NULL, 0, 0, &e), -EINVAL);
    assert_int_equal(kvs__sock_send(c, msg, 1, fds, 5, 0, &e), -EINVAL);
    assert_int_equal(kvs__sock_send(c, msg, 1, fds, -1, 0, &e), -EINVAL);
    assert_int_equal(kvs__sock_send(c, msg, 1, NULL, 1, 0, &e), -EINVAL);

    for (int i = 0; i < 3; i++)
        close(fds[i]);
    close(c);
    close(s);
    close(lfd);
    rm_tree(tmp);
}

static void test_sock_deadlines(void **state)
{
    char tmp[64], msg[4096];
    struct kvs__err e = { 0 };
    int lfd, c, s, ngot, sent = 0, rc;
    size_t len;
    int64_t t0, dt;

    (void)state;
    make_tmp(tmp, sizeof tmp);
    sock_pair(tmp, &lfd, &c, &s);

    /* Nothing to read. */
    t0 = clock_ns();
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, NULL, 0, &ngot, 0, &e),
                     -ETIMEDOUT);
    assert_true(clock_ns() - t0 < 50 * MS);
    t0 = clock_ns();
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, NULL, 0, &ngot,
                                    t0 + 100 * MS, &e), -ETIMEDOUT);
    dt = clock_ns() - t0;
    if (dt < 100 * MS || dt > 1500 * MS)
        fail_msg("recv waited %lld ms for a 100 ms deadline", (long long)(dt / MS));
    assert_detail(&e, "recv");

    /* No room to write: fill the socket, then wait for room in vain. */
    memset(msg, 's', sizeof msg);
    while ((rc = kvs__sock_send(c, msg, sizeof msg, NULL, 0, 0, &e)) == 0)
        assert_true(++sent < 100000);
    assert_int_equal(rc, -ETIMEDOUT);
    assert_true(sent > 0);
    t0 = clock_ns();
    assert_int_equal(kvs__sock_send(c, msg, sizeof msg, NULL, 0, t0 + 100 * MS, &e),
                     -ETIMEDOUT);
    dt = clock_ns() - t0;
    if (dt < 100 * MS || dt > 1500 * MS)
        fail_msg("send waited %lld ms for a 100 ms deadline", (long long)(dt / MS));
    /* Reading one message makes room again. */
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, NULL, 0, &ngot, 0, &e), 0);
    assert_int_equal(len, sizeof msg);
    assert_int_equal(kvs__sock_send(c, msg, sizeof msg, NULL, 0, clock_ns() + 1000 * MS, &e),
                     0);

    close(c);
    close(s);
    close(lfd);
    rm_tree(tmp);
}

static void test_sock_peer_closed(void **state)
{
    char tmp[64], msg[16];
    struct kvs__err e = { 0 };
    int lfd, c, s, ngot, fds[4];
    size_t len;

    (void)state;
    make_tmp(tmp, sizeof tmp);
    sock_pair(tmp, &lfd, &c, &s);

    /* Messages sent before the close still arrive, then the end. */
    assert_int_equal(kvs__sock_send(c, "last", 4, NULL, 0, 0, &e), 0);
    close(c);
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, fds, 4, &ngot, 0, &e), 0);
    assert_int_equal(len, 4);
    assert_int_equal(kvs__sock_recv(s, msg, sizeof msg, &len, fds, 4, &ngot,
                                    clock_ns() + 1000 * MS, &e), -ECONNRESET);
    assert_int_equal(e.code, -ECONNRESET);
    assert_int_equal(ngot, 0);
    /* Writing to the dead peer is an error, not a SIGPIPE that kills us. */
    assert_int_equal(kvs__sock_send(s, "x", 1, NULL, 0, clock_ns() + 1000 * MS, &e), -EPIPE);

    close(s);
    close(lfd);
    rm_tree(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runtime_dir_create),
        cmocka_unit_test(test_runtime_dir_refused),
        cmocka_unit_test(test_runtime_dir_fallback),
        cmocka_unit_test(test_runtime_dir_race),
        cmocka_unit_test(test_job_names),
        cmocka_unit_test(test_memfd_plain),
        cmocka_unit_test(test_memfd_sealed),
        cmocka_unit_test(test_memfd_seal_writes),
        cmocka_unit_test(test_memfd_reopen_ro),
        cmocka_unit_test(test_map_errors),
        cmocka_unit_test(test_sock_listen_connect),
        cmocka_unit_test(test_sock_accept_signals),
        cmocka_unit_test(test_sock_pass_fds),
        cmocka_unit_test(test_sock_recv_refused),
        cmocka_unit_test(test_sock_deadlines),
        cmocka_unit_test(test_sock_peer_closed),
    };
    return cmocka_run_group_tests_name("shm", tests, NULL, NULL);
}
