/*
 * wait.h - what the calls of a dist handle wait on (wait.c), for the
 * files that post them (call.c): the table of calls waiting, reaping the
 * completion ring for all of them, and sleeping on this worker's doorbell.
 * Not for the files above the link: they wait through a call.
 */
#ifndef KVS_CLIENT_WAIT_H
#define KVS_CLIENT_WAIT_H

#include <stdint.h>

#include "base/error.h"
#include "client/link.h"

/* A list call waiting for its completions: one per slot it posted. */
struct kvs__waiter {
    uint64_t base;                     /* seq of its first slot */
    int n, done;                       /* slots; of them, completed */
    int nreq;                          /* requests: n, or more in tables */
    int tables;                        /* its slots are tables (KVS__SQE_TABLE) of
                                        * KVS__TABLE_MAX requests, the last maybe fewer */
    const uint64_t *res;               /* tables: per table, its results in staging */
    struct kvs__answers *ans;          /* per request */
    unsigned char *got;                /* per slot */
    struct kvs__waiter *next;
};

/* Reaps the completion ring for every waiting call (c->lock held): their
 * answers, and the staging kvsd returns. self: the caller's call, or NULL;
 * *woke is set when a call of another thread got completions. 0, or the
 * error that broke the handle. */
int kvs__client_reap(struct kvs__client *c, const struct kvs__waiter *self, int *woke,
                     struct kvs__err *e);

/* Sleeps until this worker's doorbell rings past seen, a wait slice
 * passes or the deadline does (c->lock held, released while asleep).
 * *quiet: whether the last sleep ended without a ring, kept between
 * calls. gen: the link's generation the caller's call belongs to. 0, or
 * the error that broke the handle (the deadline passed, kvsd is gone, or
 * another thread broke it), or KVS_ERESTART: kvsd went and the link
 * connected to the next one (kvs__client_gone), or another thread did. */
int kvs__client_sleep(struct kvs__client *c, uint64_t gen, uint32_t seen, int64_t deadline,
                      int *quiet, const char *what, struct kvs__err *e);

#endif
