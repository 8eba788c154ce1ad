/*
 * forwards.h - async pushes across the hosts of a job: each part applied
 * at its owner, the value made back to every host.
 */
#ifndef KVSD_FORWARDS_H
#define KVSD_FORWARDS_H

#include "daemon.h"

/* An async push across hosts: applied here to what this host owns of its
 * key, forwarded to the owners of the rest (FORWARD), completed when they
 * all have answered. */
void forwards_push(struct daemon *d, struct req *r);

/* A part's value from its owner, made by an async push (text: a failure's
 * message): written here, and the answer to a push of this host's. */
void forwards_on_value(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                       struct round *rd, const char *text);

/* Another host's async push of a part this host owns: applied, its value
 * to every host. */
void forwards_on_forward(struct daemon *d, struct inmsg *im, const struct kvs__wire_msg *m,
                         struct round *rd);

/* The job failed: the pushes waiting for their owners' answers end with
 * its failure (status, msg). */
void forwards_fail(struct daemon *d, int status, const char *msg);

#endif
