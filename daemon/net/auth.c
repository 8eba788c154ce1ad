/*
 * auth.c - the job's secret and the proofs of the host handshake (auth.h),
 * on libsodium: randombytes for nonces, SHA-256 to make any secret file a
 * 32-byte key, HMAC-SHA256 for proofs, constant-time comparison.
 */
#define _GNU_SOURCE                    /* O_NOFOLLOW, O_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "auth.h"
#include "base/bytes.h"

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
