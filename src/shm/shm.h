/*
 * shm.h - the operating-system plumbing of the multi-process store: the
 * job's private directory, memfd segments (created, sealed, checked,
 * mapped), the Unix socket that carries the handshake and passes memfds
 * (SCM_RIGHTS) between kvsd and its workers, and exact reads and writes on
 * byte streams (the TCP connections between hosts).
 *
 * Every wait takes an absolute CLOCK_MONOTONIC deadline in nanoseconds
 * (kvs__now_ns() in ring.h); every system call is retried on EINTR; every
 * failure is -errno (or a KVS_E code) with a detail naming what failed.
 */
#ifndef KVS_SHM_H
#define KVS_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"

/* The directory for this user's jobs: $XDG_RUNTIME_DIR/kvs if that variable
 * is set and absolute, else /tmp/kvs-$UID. Created 0700 when missing; an
 * existing one must be a directory (not a link) owned by this uid with no
 * access for group or others, else -EPERM. Writes the path into buf. */
int kvs__runtime_dir(char *buf, size_t size, struct kvs__err *e);

/* A job name is 1..64 bytes of [A-Za-z0-9._-], not starting with '.'.
 * Returns 0 or KVS_EBADARG. */
int kvs__job_name_check(const char *job, struct kvs__err *e);

/* A memfd of `size` bytes (zero-filled, close-on-exec). seal:
 *   0                  no seals, and none can be added;
 *   KVS__SEAL_SIZE     sealed against shrinking and growing, and the seals
 *                      themselves sealed;
 *   KVS__SEAL_SIZE_OPEN  sealed against shrinking and growing; the creator
 *                      maps it writable, then closes it with
 *                      kvs__memfd_seal_writes. */
#define KVS__SEAL_SIZE      1
#define KVS__SEAL_SIZE_OPEN 2
int kvs__memfd_new(const char *name, size_t size, int seal, int *fd, struct kvs__err *e);

/* Seals a KVS__SEAL_SIZE_OPEN memfd against every later write: mappings
 * made before stay writable, no new writable mapping or write() is allowed,
 * whatever descriptor a receiver opens. Then seals the seals. */
int kvs__memfd_seal_writes(int fd, struct kvs__err *e);

/* A read-only descriptor of the same memfd (through /proc/self/fd), so that
 * a receiver cannot map it writable. */
int kvs__memfd_reopen_ro(int fd, int *ro_fd, struct kvs__err *e);

/* Checks a received memfd: its size is exactly `size`, and with
 * need_seals non-zero it carries the grow/shrink seals. KVS_EPROTO otherwise. */
int kvs__memfd_check(int fd, size_t size, int need_seals, struct kvs__err *e);

/* mmap MAP_SHARED of a whole segment, read-write or read-only. */
int kvs__map(int fd, size_t size, int writable, void **out, struct kvs__err *e);
void kvs__unmap(void *p, size_t size);

/* Unix SOCK_SEQPACKET sockets (message boundaries kept), close-on-exec.
 * listen: binds path (unlinking nothing: a stale socket is the caller's
 * business), mode 0600. connect: fails -ECONNREFUSED / -ENOENT when nobody
 * listens. accept: waits until deadline_ns (-ETIMEDOUT). */
int kvs__sock_listen(const char *path, int *fd, struct kvs__err *e);
int kvs__sock_connect(const char *path, int *fd, struct kvs__err *e);
int kvs__sock_accept(int lfd, int64_t deadline_ns, int *fd, struct kvs__err *e);

/* The peer's credentials (SO_PEERCRED). */
int kvs__sock_peer(int fd, uid_t *uid, pid_t *pid, struct kvs__err *e);

/* Sends one message of len bytes with nfds (0..4) descriptors attached,
 * waiting for room until deadline_ns. */
int kvs__sock_send(int fd, const void *buf, size_t len, const int *fds, int nfds,
                   int64_t deadline_ns, struct kvs__err *e);

/* Receives one message into buf (cap bytes) and up to maxfds descriptors
 * (close-on-exec), waiting until deadline_ns. A message longer than cap,
 * or more descriptors than maxfds, is KVS_EPROTO (descriptors that came are
 * closed). A closed peer is -ECONNRESET. *len and *nfds are set on success. */
int kvs__sock_recv(int fd, void *buf, size_t cap, size_t *len, int *fds, int maxfds,
                   int *nfds, int64_t deadline_ns, struct kvs__err *e);

/* Byte streams (a TCP connection): writes or reads exactly len bytes,
 * waiting until deadline_ns (-ETIMEDOUT). A peer that closes before all of
 * them came is -ECONNRESET. */
int kvs__stream_write(int fd, const void *buf, size_t len, int64_t deadline_ns,
                      struct kvs__err *e);
int kvs__stream_read(int fd, void *buf, size_t len, int64_t deadline_ns, struct kvs__err *e);

#endif
