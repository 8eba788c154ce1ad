/*
 * hosts.h - the links between the hosts of a job: started over the
 * connections the join made (join.h), frames out, messages in.
 */
#ifndef KVSD_HOSTS_H
#define KVSD_HOSTS_H

#include "daemon.h"

/* Joins the job's other hosts (opts nhosts, host, coord, ...; join_mesh:
 * host 0 takes every other host's join, then each host connects to those
 * of lower rank and takes the connections of those above, every one
 * authenticated), hands the links to the transport and starts the thread
 * that moves frames. Sets d->rank0 and d->total. Main thread, before the
 * serve loop. */
int hosts_start(struct daemon *d, struct kvs__err *e);

/* Ends the links: with bye when clean (every frame queued before goes
 * first, within a deadline), else at once; keeps the estimate of host 0's
 * clock (d->clock0_*). Main thread, after the serve loop. */
void hosts_stop(struct daemon *d, int clean);

/* A message frame of type from this host, data (m->len bytes) copied
 * from m->data unless that is NULL: then *data is where the caller writes
 * it before hosts_post. NULL without memory. */
struct frame *hosts_frame_new(const struct daemon *d, int type, const struct kvs__wire_msg *m,
                        void **data);
/* Queues f for host to, for every other host still in the job (HOSTS_IN:
 * not d->host_out) or for every other host (HOSTS_ALL), and frees it once
 * sent. Returns the hosts it was queued for (0: none, f freed). Serve
 * thread. */
enum { HOSTS_IN = -1, HOSTS_ALL = -2 };
int hosts_post(struct daemon *d, struct frame *f, int to);

/* What the links' thread handed up since the last call, oldest first.
 * Serve thread. */
struct inmsg *hosts_take(struct daemon *d);

/* What the job lets the other hosts send here, told by the serve thread
 * before they may send it: hosts_expect, a key of bytes and rows (its
 * first extent) may now be named (this host's workers began its init);
 * hosts_expect_any, any key that fits
 * the arena (every worker here has left, and keys inited without them may
 * still come). A frame whose head announces more than its type carries
 * within these fails its link, so the job, naming the host; nothing of it
 * is allocated. No-ops on one host. */
void hosts_expect(struct daemon *d, uint64_t bytes, uint64_t rows);
void hosts_expect_any(struct daemon *d);

/* What went over the link to host h since the links started, for kvsctl
 * stats: frames and their bytes each way as the transport took and gave
 * them, heads, heartbeats and the bye included (not the join's handshake,
 * which came before). 0; -1 when there is no such link (one host, h out
 * of range or this host). Any thread, while the links run or after. */
struct hosts_traffic {
    uint64_t frames_out, bytes_out, frames_in, bytes_in;
};
int hosts_traffic(const struct daemon *d, int h, struct hosts_traffic *t);

/* A host of the job, by rank, in words for messages: "host 1 (10.0.0.2)". */
const char *hosts_name(const struct daemon *d, int host);

#endif
