/*
 * kvs-transport.h - the interface between kvsd and a transport: what moves
 * the frames of a job's hosts between their kvsd. For people who write a
 * transport plug-in; programs that use kvs need only kvs.h.
 *
 * kvsd has two transports built in, "uring" (io_uring) and "socket"
 * (non-blocking sockets and epoll). Others are shared objects that kvsd
 * loads when KVS_TRANSPORT names them: a bare name NAME loads
 * kvs-transport-NAME.so from kvs's library directory (KVS_TRANSPORT_DIR
 * overrides it), a name with a '/' is a path. The object exports
 * kvs_transport_entry (KVS_TRANSPORT_ENTRY), which returns its ops table.
 * kvsd refuses, before any worker starts and naming the file, an object
 * that does not load, lacks the entry, returns a table of another version
 * (KVS_TRANSPORT_VERSION) or with a member missing, or whose open fails.
 *
 * The model: a loop owns connections to the other hosts. kvsd joins the
 * hosts itself over TCP: every connection a loop adopts has passed kvsd's
 * handshake (both ends proved the job's secret), and only then may a
 * transport move anything for it. A transport that moves bytes by other
 * means (a fabric) exchanges what it needs to reach the peer (addresses,
 * keys) over that authenticated socket inside adopt, and must never
 * accept traffic from a peer it did not learn of that way.
 *
 * Frames travel as byte streams: a connection delivers the bytes of its
 * sends in order, whole, or reports that it ended; its SENT events come in
 * the order of its sends. Framing and every check
 * of what comes are kvsd's: a transport hands bytes up as they came and
 * trusts nothing it reads either (lengths, ids in its own headers).
 *
 * Threads: a loop is used by one thread at a time (kvsd's links thread),
 * except wake, which any thread may call at any time. Calls never block
 * past the deadline they are given; those without one do not wait for
 * the network, except drop and close, for a bounded time (see each).
 *
 * Errors: a call that fails returns a negative code, a negated errno value
 * (-ENOMEM, -ECONNRESET, ...) or a kvs code (KVS_EBADARG, KVS_EPROTO: see
 * kvs.h), and writes a detail message into the struct kvs_transport_error
 * it was given ("ucp_ep_create: Destination is unreachable").
 */
#ifndef KVS_TRANSPORT_H
#define KVS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "kvs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the ops table below. A change to any call's meaning or
 * to the structs bumps it; kvsd loads only a table of its own version. */
#define KVS_TRANSPORT_VERSION 1u

/* The symbol a plug-in exports: const struct kvs_transport_ops *(void). */
#define KVS_TRANSPORT_ENTRY "kvs_transport_entry"

#define KVS_TRANSPORT_ERROR_MAX 256

/* A failed call's detail, a NUL-terminated message in msg. */
struct kvs_transport_error {
    int code;
    char msg[KVS_TRANSPORT_ERROR_MAX];
};

struct kvs_transport;                  /* a transport's loop, opaque to kvsd */

enum kvs_transport_event_type {
    KVS_TRANSPORT_RECV = 1,            /* bytes came on conn: data, len */
    KVS_TRANSPORT_SENT = 2,            /* a send on conn is done (token): its buffer
                                        * is the caller's again */
    KVS_TRANSPORT_CLOSED = 3,          /* conn ended: status 0 (the peer closed) or
                                        * a negative code; its sends not yet SENT never
                                        * will be. It stays allocated until dropped */
};

struct kvs_transport_event {
    int type;                          /* enum kvs_transport_event_type */
    int conn;                          /* the connection's id */
    int status;                        /* CLOSED */
    const void *data;                  /* RECV: the transport's memory, valid until
                                        * the next wait */
    size_t len;                        /* RECV: > 0 */
    uint64_t token;                    /* SENT: as given to send */
};

struct kvs_transport_ops {
    uint32_t version;                  /* KVS_TRANSPORT_VERSION */
    uint32_t size;                     /* sizeof(struct kvs_transport_ops) */
    const char *name;                  /* short, for messages: "ucx" */

    /* A loop with no connection in *out. kvsd opens one per job, and one
     * to check a plug-in before it joins the hosts: open acquires what the
     * transport needs (a context, devices) and fails here, with the
     * reason, when it cannot. */
    int (*open)(struct kvs_transport **out, struct kvs_transport_error *e);

    /* Drops every connection and frees the loop, waiting at most a second
     * for what the network still holds. t may be NULL. */
    void (*close)(struct kvs_transport *t);

    /* Takes fd, a blocking TCP socket connected to another host's kvsd
     * that passed the handshake: from here on it is the loop's (to use or
     * close; on failure too). The transport may exchange bytes over it
     * before deadline_ns (CLOCK_MONOTONIC) to reach the peer by other
     * means; both ends adopt their connection at about the same time.
     * The connection's id, a small number reused after drop, in *conn. */
    int (*adopt)(struct kvs_transport *t, int fd, int64_t deadline_ns, int *conn,
                 struct kvs_transport_error *e);

    /* Queues len bytes (> 0) of buf on conn, after what was queued before.
     * buf stays the caller's, to keep intact, until SENT comes with token.
     * Does not wait. -ENOTCONN on a connection that ended; KVS_EBADARG on
     * an unknown one. */
    int (*send)(struct kvs_transport *t, int conn, const void *buf, size_t len, uint64_t token,
                struct kvs_transport_error *e);

    /* Moves what it can and reports up to max (> 0) events in ev, waiting
     * until one comes, wake is called, or deadline_ns (CLOCK_MONOTONIC)
     * passes (a deadline past: do not wait). Sleeps while it waits: no
     * polling loop. Returns the number of events (0: the deadline, or a
     * wake), or a negative code: then the loop is broken, and kvsd fails
     * every connection. */
    int (*wait)(struct kvs_transport *t, struct kvs_transport_event *ev, int max,
                int64_t deadline_ns, struct kvs_transport_error *e);

    /* Ends conn and forgets it: no event of it comes any more, its sends
     * not yet SENT are abandoned. May wait briefly (a fraction of a
     * second) for what was sent to leave, unless conn ended. An unknown
     * conn is ignored. */
    void (*drop)(struct kvs_transport *t, int conn);

    /* Makes a wait in progress on another thread return soon, or the next
     * one if none is. Any thread, any time between open and close. */
    void (*wake)(struct kvs_transport *t);
};

/* What a plug-in exports under KVS_TRANSPORT_ENTRY: its ops table, which
 * must live as long as the object is loaded. Called once, before open. */
typedef const struct kvs_transport_ops *kvs_transport_entry_fn(void);

/* A plug-in defines it, exported (default visibility). */
kvs_transport_entry_fn kvs_transport_entry;

#ifdef __cplusplus
}
#endif

#endif
