/*
 * auth.c - the job's secret and the proofs of the host handshake (auth.h),
 * on libsodium: randombytes for nonces and per-job secrets, SHA-256 to
 * make any secret file a 32-byte key, HMAC-SHA256 for proofs,
 * constant-time comparison.
 *
 * Every job across hosts has a secret: a file the user gives, or one made
 * for the job in the user's runtime directory. There is no key that a
 * process could know without reading a file only the job's user can read.
 * It must never follow a link to a secret, accept a secret file another
 * user could read or have made, or replace a job's secret file that
 * another host may have read already.
 */
#define _GNU_SOURCE                    /* O_NOFOLLOW, O_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "auth.h"
#include "base/bytes.h"
#include "base/sys.h"
#include "shm/shm.h"

#define JOB_SECRET_FILE (KVS__JOB_SECRET_BYTES + 1)   /* the hex and a newline */
#define JOB_SECRET_TRIES 4             /* reads and makes when files come and go */

int kvs__secret_load(const char *path, struct kvs__secret *s, struct kvs__err *e)
{
    unsigned char buf[KVS__SECRET_MAX + 1];
    struct stat st;
    size_t n = 0;
    int fd, err;

    if (!path || !*path)
        return kvs__fail(e, KVS_EBADARG, "secret file: no path");
    if (sodium_init() < 0)
        return kvs__fail(e, -EIO, "secret file %s: libsodium cannot start", path);
    /* O_NONBLOCK: a FIFO at the path must not hang the caller in open(). */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        err = errno;
        if (err == ELOOP)
            return kvs__fail(e, KVS_EBADARG, "secret file %s is a symbolic link: name the "
                             "file itself", path);
        return kvs__fail(e, -err, "secret file %s: %s", path, strerror(err));
    }
    if (fstat(fd, &st) != 0) {
        err = errno;
        close(fd);
        return kvs__fail(e, -err, "secret file %s: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kvs__fail(e, KVS_EBADARG, "secret file %s is not a regular file", path);
    }
    if (st.st_mode & 077) {
        close(fd);
        return kvs__fail(e, KVS_EBADARG, "secret file %s can be read or written by group or "
                         "others (mode %04o): chmod 600 %s", path,
                         (unsigned)(st.st_mode & 07777), path);
    }
    while (n < sizeof buf) {
        ssize_t got = read(fd, buf + n, sizeof buf - n);

        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            err = errno;
            close(fd);
            sodium_memzero(buf, sizeof buf);
            return kvs__fail(e, -err, "secret file %s: %s", path, strerror(err));
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
                     buf[n - 1] == '\t'))
        n--;
    if (n < KVS__SECRET_MIN || n > KVS__SECRET_MAX) {
        sodium_memzero(buf, sizeof buf);
        return kvs__fail(e, KVS_EBADARG, "secret file %s holds %s than %d bytes (e.g. "
                         "head -c 32 /dev/urandom | base64 > FILE)", path,
                         n < KVS__SECRET_MIN ? "fewer" : "more",
                         n < KVS__SECRET_MIN ? KVS__SECRET_MIN : KVS__SECRET_MAX);
    }
    crypto_hash_sha256(s->key, buf, n);
    sodium_memzero(buf, sizeof buf);
    return 0;
}

/* ---- the per-job secret ------------------------------------------------- */

/* JOB@COORD.secret in the runtime directory. COORD is taken as written
 * (every host of a job is given the same), of the bytes a host name, an
 * address and a port are written with, so that it is one file name. */
static int job_secret_path(const char *job, const char *coord, char *path, size_t size,
                           struct kvs__err *e)
{
    char dir[PATH_MAX];
    int rc, n;

    if ((rc = kvs__job_name_check(job, e)) != 0)
        return rc;
    if (!coord || !*coord)
        return kvs__fail(e, KVS_EBADARG, "job secret: no coordinator address");
    for (const char *c = coord; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')
              || strchr(".:_-[]", *c)))
            return kvs__fail(e, KVS_EBADARG, "job secret: coordinator '%s' holds byte 0x%02x, "
                             "not one of a HOST:PORT [A-Za-z0-9.:_[]-]", coord,
                             (unsigned)(unsigned char)*c);
    if ((rc = kvs__runtime_dir(dir, sizeof dir, e)) != 0)
        return rc;
    n = snprintf(path, size, "%s/%s@%s.secret", dir, job, coord);
    if (n < 0 || (size_t)n >= size)
        return kvs__fail(e, -ENAMETOOLONG, "job secret: the path %s/%s@%s.secret is too long",
                         dir, job, coord);
    return 0;
}

/* Reads the job's secret file at path, checked, into *s. -ENOENT when
 * there is none (said). */
static int job_secret_read(const char *path, struct kvs__secret *s, struct kvs__err *e)
{
    unsigned char buf[JOB_SECRET_FILE];
    char why[96] = "";
    struct stat st;
    ssize_t got = 0;
    size_t n = 0;
    int fd, err;

    fd = EINTR_RETRY(open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK));
    if (fd < 0) {
        err = errno;
        if (err == ELOOP)
            return kvs__fail(e, KVS_EBADARG, "job secret %s is a symbolic link: remove it "
                             "(rm %s)", path, path);
        return kvs__fail(e, -err, "job secret %s: %s", path, strerror(err));
    }
    if (fstat(fd, &st) != 0) {
        err = errno;
        close(fd);
        return kvs__fail(e, -err, "job secret %s: %s", path, strerror(err));
    }
    /* The directory is this user's alone, so none of these should ever
     * be: a file that is can have been read, or made, by someone else. */
    if (!S_ISREG(st.st_mode))
        snprintf(why, sizeof why, "is not a regular file");
    else if (st.st_uid != geteuid())
        snprintf(why, sizeof why, "is owned by uid %lu, not %lu", (unsigned long)st.st_uid,
                 (unsigned long)geteuid());
    else if ((st.st_mode & 07777) != 0600)
        snprintf(why, sizeof why, "has mode %04o, not 0600%s", (unsigned)(st.st_mode & 07777),
                 st.st_mode & 077 ? ": another user may read it" : "");
    else if (st.st_size != JOB_SECRET_FILE)
        snprintf(why, sizeof why, "holds %lld bytes, not %d", (long long)st.st_size,
                 JOB_SECRET_FILE);
    if (why[0]) {
        close(fd);
        return kvs__fail(e, KVS_EBADARG, "job secret %s %s: remove it (rm %s), and the job's "
                         "hosts make a new one", path, why, path);
    }
    while (n < sizeof buf) {
        got = read(fd, buf + n, sizeof buf - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    err = got < 0 ? errno : 0;
    close(fd);
    if (err)
        snprintf(why, sizeof why, "%s", strerror(err));
    else if (n != sizeof buf)
        snprintf(why, sizeof why, "was cut short while read");
    else if (buf[KVS__JOB_SECRET_BYTES] != '\n')
        snprintf(why, sizeof why, "does not end in a newline");
    for (size_t i = 0; !why[0] && i < KVS__JOB_SECRET_BYTES; i++)
        if (!((buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f')))
            snprintf(why, sizeof why, "holds byte 0x%02x, not a hex digit", buf[i]);
    if (why[0]) {
        sodium_memzero(buf, sizeof buf);
        return kvs__fail(e, err ? -err : KVS_EBADARG, "job secret %s: %s: remove it (rm %s)",
                         path, why, path);
    }
    crypto_hash_sha256(s->key, buf, KVS__JOB_SECRET_BYTES);
    sodium_memzero(buf, sizeof buf);
    return 0;
}

/* Makes the job's secret at path, whole before it has its name, and puts
 * its key in *s: 0, -EEXIST when another host made it first (said). */
static int job_secret_make(const char *path, struct kvs__secret *s, struct kvs__err *e)
{
    unsigned char raw[KVS__JOB_SECRET_BYTES / 2], tag[4];
    char text[JOB_SECRET_FILE + 1], tmp[PATH_MAX + 64], tagx[2 * sizeof tag + 1];
    const char *base = strrchr(path, '/');
    size_t n = 0;
    int fd, err;

    base = base ? base + 1 : path;
    randombytes_buf(tag, sizeof tag);
    sodium_bin2hex(tagx, sizeof tagx, tag, sizeof tag);
    /* Beside the name, so that link() stays in one file system; a leading
     * dot, which no job's name has. */
    if (snprintf(tmp, sizeof tmp, "%.*s.%s.%ld.%s.tmp", (int)(base - path), path, base,
                 (long)getpid(), tagx) >= (int)sizeof tmp)
        return kvs__fail(e, -ENAMETOOLONG, "job secret %s: the path is too long", path);
    fd = EINTR_RETRY(open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd < 0)
        return kvs__fail(e, -errno, "job secret %s: %s", tmp, strerror(errno));
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(text, sizeof text, raw, sizeof raw);
    sodium_memzero(raw, sizeof raw);
    text[KVS__JOB_SECRET_BYTES] = '\n';
    /* A umask may have taken bits: the readers want 0600 exactly. */
    err = fchmod(fd, 0600) != 0 ? errno : 0;
    while (!err && n < JOB_SECRET_FILE) {
        ssize_t put = write(fd, text + n, JOB_SECRET_FILE - n);

        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0) {
            err = put < 0 ? errno : EIO;
            break;
        }
        n += (size_t)put;
    }
    if (close(fd) != 0 && !err)
        err = errno;
    /* link() never replaces: of hosts that come at once, one names its
     * file and the others read that one. */
    if (!err && link(tmp, path) != 0)
        err = errno;
    unlink(tmp);
    if (err) {
        sodium_memzero(text, sizeof text);
        if (err == EEXIST)
            return -EEXIST;
        return kvs__fail(e, -err, "job secret %s: %s", path, strerror(err));
    }
    crypto_hash_sha256(s->key, (const unsigned char *)text, KVS__JOB_SECRET_BYTES);
    sodium_memzero(text, sizeof text);
    return 0;
}

int kvs__secret_job(const char *job, const char *coord, struct kvs__secret *s, char *path,
                    size_t size, int *made, struct kvs__err *e)
{
    int rc;

    *made = 0;
    if (sodium_init() < 0)
        return kvs__fail(e, -EIO, "job secret: libsodium cannot start");
    if ((rc = job_secret_path(job, coord, path, size, e)) != 0)
        return rc;
    /* Host 0 removes the file once its join is over; a host of the next
     * job of the name may find it gone between a failed read and a make
     * that finds one: a few turns. */
    for (int tries = 0;; tries++) {
        if ((rc = job_secret_read(path, s, e)) != -ENOENT || tries == JOB_SECRET_TRIES)
            return rc;
        if ((rc = job_secret_make(path, s, e)) == 0) {
            *made = 1;
            return 0;
        }
        if (rc != -EEXIST)
            return rc;
    }
}

void kvs__secret_job_remove(const char *path, const struct kvs__secret *s)
{
    struct kvs__secret now;
    struct kvs__err e = { 0, "" };

    if (job_secret_read(path, &now, &e) == 0
        && sodium_memcmp(now.key, s->key, sizeof now.key) == 0)
        unlink(path);
    sodium_memzero(&now, sizeof now);
}

void kvs__secret_wipe(struct kvs__secret *s)
{
    sodium_memzero(s, sizeof *s);
}

int kvs__auth_nonce(unsigned char nonce[KVS__NONCE_BYTES])
{
    if (sodium_init() < 0)
        return -1;
    randombytes_buf(nonce, KVS__NONCE_BYTES);
    return 0;
}

/* What a proof covers, laid out at fixed offsets: side (u8), three zero
 * bytes, client host, server host (u32), both nonces, the job's name
 * padded with zeros. */
enum {
    A_SIDE = 0,
    A_CLIENT_HOST = 4,
    A_SERVER_HOST = 8,
    A_CLIENT_NONCE = 12,
    A_SERVER_NONCE = A_CLIENT_NONCE + KVS__NONCE_BYTES,
    A_JOB = A_SERVER_NONCE + KVS__NONCE_BYTES,
    A_BYTES = A_JOB + KVS__JOB_MAX + 1,
};

void kvs__auth_proof(const struct kvs__secret *s, enum kvs__auth_side side,
                     const unsigned char client_nonce[KVS__NONCE_BYTES],
                     const unsigned char server_nonce[KVS__NONCE_BYTES],
                     uint32_t client_host, uint32_t server_host, const char *job,
                     unsigned char proof[KVS__PROOF_BYTES])
{
    unsigned char m[A_BYTES];

    memset(m, 0, sizeof m);
    put_u8(m, A_SIDE, (uint8_t)side);
    put_u32(m, A_CLIENT_HOST, client_host);
    put_u32(m, A_SERVER_HOST, server_host);
    memcpy(m + A_CLIENT_NONCE, client_nonce, KVS__NONCE_BYTES);
    memcpy(m + A_SERVER_NONCE, server_nonce, KVS__NONCE_BYTES);
    put_text(m, A_JOB, KVS__JOB_MAX + 1, job);
    crypto_auth_hmacsha256(proof, m, sizeof m, s->key);
}

int kvs__auth_check(const struct kvs__secret *s, enum kvs__auth_side side,
                    const unsigned char client_nonce[KVS__NONCE_BYTES],
                    const unsigned char server_nonce[KVS__NONCE_BYTES],
                    uint32_t client_host, uint32_t server_host, const char *job,
                    const unsigned char proof[KVS__PROOF_BYTES], struct kvs__err *e)
{
    unsigned char want[KVS__PROOF_BYTES];
    int bad;

    kvs__auth_proof(s, side, client_nonce, server_nonce, client_host, server_host, job, want);
    bad = crypto_verify_32(want, proof);
    sodium_memzero(want, sizeof want);
    if (bad)
        return kvs__fail(e, KVS_EPROTO, "the %s host's proof is wrong: it does not hold this "
                         "job's secret", side == KVS__AUTH_SERVER ? "server" : "client");
    return 0;
}
