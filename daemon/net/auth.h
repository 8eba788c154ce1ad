/*
 * auth.h - hosts of a job prove to each other that they hold its secret
 * (the handshake in wire.h): the secret file, nonces, and HMAC-SHA256
 * proofs (libsodium), and the per-job secret of a job without a secret
 * file. kvsd loads the secret; handshake.c makes and checks the proofs.
 */
#ifndef KVS_AUTH_H
#define KVS_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "proto/wire.h"

#define KVS__SECRET_MIN 16             /* bytes of a secret file, after trailing whitespace */
#define KVS__SECRET_MAX 65536

struct kvs__secret {
    unsigned char key[32];             /* SHA-256 of the file's bytes: the HMAC key */
};

/* Reads the job's secret from path: a regular file (not a link) that only
 * its owner may read or write (mode 0600 or 0400: a secret readable by
 * group or others is refused, with the chmod that fixes it), of 16 to
 * 65,536 bytes once trailing whitespace (a final newline) is dropped.
 * Errors: KVS_EBADARG (what is wrong, naming the file), -errno of open
 * and read. Nothing of the secret stays in memory but *s. */
int kvs__secret_load(const char *path, struct kvs__secret *s, struct kvs__err *e);

/* The job's secret when no secret file is given (its hosts then share
 * one machine): a random secret kept where only this user can read it,
 * in JOB@COORD.secret of the user's runtime directory (kvs__runtime_dir:
 * $XDG_RUNTIME_DIR/kvs, else /tmp/kvs-UID, made 0700 and checked: this
 * uid's, no access for others, not a link). The first host of the job to
 * come makes the file whole under a temporary name and links it to its
 * name, which never replaces a file there; every other host reads it. A
 * file found there must be a regular file (not a link) owned by this
 * uid, of mode 0600 and of the size made (KVS__JOB_SECRET_BYTES of hex
 * and a newline), else KVS_EBADARG says what is wrong and how to fix it,
 * and nothing is made. job is the job's name between hosts, coord host
 * 0's HOST:PORT as every host is given it. On success *s holds the key
 * (as kvs__secret_load would make it from the file), path (of size
 * bytes) the file's path, and *made is 1 when this call made the file.
 * Errors: KVS_EBADARG, -errno of the directory and the file (named). */
#define KVS__JOB_SECRET_BYTES 64       /* hex digits of 32 random bytes */
int kvs__secret_job(const char *job, const char *coord, struct kvs__secret *s, char *path,
                    size_t size, int *made, struct kvs__err *e);

/* Removes the job's secret file at path when it still holds the secret s
 * (a later job's file of the same name is left alone). Host 0 calls it
 * once its join is over: every other host proved the secret to it, so
 * none reads the file again. Best effort: says nothing. */
void kvs__secret_job_remove(const char *path, const struct kvs__secret *s);

/* Overwrites the secret. */
void kvs__secret_wipe(struct kvs__secret *s);

/* A nonce from the system's random source. Returns 0, or -1 when
 * libsodium cannot start (no random source). */
int kvs__auth_nonce(unsigned char nonce[KVS__NONCE_BYTES]);

/* Which side of a handshake a proof comes from. */
enum kvs__auth_side { KVS__AUTH_SERVER = 1, KVS__AUTH_CLIENT = 2 };

/* The proof the given side makes: HMAC-SHA256, keyed with the secret, of
 * the side, both nonces, both host ranks and the job, so that a proof
 * is good for one handshake, one direction, one pair of hosts and one job
 * only. */
void kvs__auth_proof(const struct kvs__secret *s, enum kvs__auth_side side,
                     const unsigned char client_nonce[KVS__NONCE_BYTES],
                     const unsigned char server_nonce[KVS__NONCE_BYTES],
                     uint32_t client_host, uint32_t server_host, const char *job,
                     unsigned char proof[KVS__PROOF_BYTES]);

/* 0 when proof is the one the side would make (compared in constant
 * time), else KVS_EPROTO with a detail naming the side. */
int kvs__auth_check(const struct kvs__secret *s, enum kvs__auth_side side,
                    const unsigned char client_nonce[KVS__NONCE_BYTES],
                    const unsigned char server_nonce[KVS__NONCE_BYTES],
                    uint32_t client_host, uint32_t server_host, const char *job,
                    const unsigned char proof[KVS__PROOF_BYTES], struct kvs__err *e);

#endif
