/*
 * tracing.h - kvsd's part of the timeline (src/proto/trace.h has the events).
 */
#ifndef KVSD_TRACING_H
#define KVSD_TRACING_H

#include "daemon.h"

/* With KVS_TIMELINE set: names kvsd in it, and clears the directory where
 * the workers leave their parts (an older job's). Main thread, at setup,
 * with the job's lock held. */
int trace_setup(struct daemon *d, struct kvs__err *e);
/* Writes the host's timeline (KVS_TIMELINE; host H > 0: with ".hostH"
 * appended), kvsd's events and every part the workers left, then removes
 * the parts. Main thread, at the end. */
void trace_write(struct daemon *d);
/* Round rd of a key finishes (serve thread; the timeline is on): each
 * push's phases in its worker's process, on the key's track: queued,
 * waiting for others, summed (and updated), or across hosts. */
void trace_round(struct daemon *d, struct round *rd);
/* Request r failed with status and msg: an instant in its worker's process. */
void trace_error(struct daemon *d, const struct req *r, int status, const char *msg);
/* Worker w joined, left, died or was evicted (what: KVS__TR_JOINED...),
 * msg: why, or NULL. Any thread. */
void trace_worker(const struct worker *w, int what, const char *msg);

#endif
