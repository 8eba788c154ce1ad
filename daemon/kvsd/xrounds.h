/*
 * xrounds.h - sync rounds across the hosts of a job: the sums of a
 * round's parts to their owners, the owners' values back.
 */
#ifndef KVSD_XROUNDS_H
#define KVSD_XROUNDS_H

#include "daemon.h"

/* A key's rounds were made: its state across hosts too (rd->x where this
 * host owns a part; rd->fwd in dist_async). 0, or -ENOMEM. */
int xrounds_new(struct daemon *d, struct round *rd);

/* A round whose every local push is in, across hosts: its sum goes to the
 * owner (or waits there for the other hosts'). */
void xrounds_ready(struct daemon *d, struct round *rd);

/* Frees rd's state across hosts (what waits there for other hosts). */
void xrounds_free(struct round *rd);

/* A host's sum of a part of a round, at the part's owner: 1 when kept (im
 * is the round's now, freed with it), 0 when refused. */
int xrounds_on_partial(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                       struct round *rd);

/* The value of a part of rd's open round, from its owner (text: a
 * failure's message), in a dist_sync job. */
void xrounds_on_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                      struct round *rd, const char *text);

/* The owner's rounds that hosts leaving (or this host's workers) left
 * complete, complete. */
void xrounds_recheck(struct daemon *d);

/* A key restored from a snapshot (rd->done its rounds): the parts this
 * host owns count them too. */
void xrounds_restored(struct round *rd);

#endif
