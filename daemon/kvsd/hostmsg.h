/*
 * hostmsg.h - what a message between the hosts of a job says of a key's
 * round: its part and its values, a VALUE made of a part, and a host that
 * broke the protocol.
 */
#ifndef KVSD_HOSTMSG_H
#define KVSD_HOSTMSG_H

#include "daemon.h"

/* Frees a message from another host (NULL: nothing). */
void hostmsg_free(struct inmsg *m);

/* Where element i of rd's value, or of a push to it, lies. */
const void *hostmsg_elem(const struct round *rd, const void *data, uint64_t i);

/* The part of a message: 0 for a key in one part. */
int hostmsg_part(const struct kvs__wire_msg *m);

/* m names part p of rd's key. */
void hostmsg_set_part(struct kvs__wire_msg *m, const struct round *rd, int p);

/* A message's key, dtype and shape from a request's. */
void hostmsg_key_of_req(struct kvs__wire_msg *m, const struct rargs *s);

/* m, naming part p of a key, as a VALUE: the part's value, or (status !=
 * 0) msg, which names no dtype or shape. */
void hostmsg_value(struct kvs__wire_msg *m, const struct round *rd, int p, int status,
                   const char *msg);

/* A host broke the rules: the job fails, naming it. */
void hostmsg_broke(struct daemon *d, int h, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A message's data as values of its part: its own, or (2bit pieces) their
 * sum in *decoded (malloc'd). 0, or -ENOMEM. */
int hostmsg_values(const struct round *rd, const struct kvs__wire_msg *m,
                   const void **data, float **decoded);

/* The value a message carries, written into its part of the key's own. */
void hostmsg_write_value(struct round *rd, const struct kvs__wire_msg *m);

#endif
