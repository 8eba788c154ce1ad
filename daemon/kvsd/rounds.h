/*
 * rounds.h - one host's sync rounds and the pending queue: a key's rounds,
 * pushes joining them, rounds closing, parts applied for xrounds.c.
 */
#ifndef KVSD_ROUNDS_H
#define KVSD_ROUNDS_H

#include "daemon.h"

/* Registers what a failing job does to the open rounds (job_hook). At
 * start-up. */
void rounds_init(struct daemon *d);

/* The key's rounds, made at its first push or pull (with d->round_ops'
 * made); NULL without memory. */
struct round *rounds_of(struct daemon *d, const struct kvs__entry_info *info, kvs_key_t key);

/* Frees a key's rounds (the engine's front free). */
void rounds_free(void *p);

/* Where the previous request of a list went into the pending queue:
 * { NULL } before the first; valid only while nothing else changes the
 * queue. */
struct rounds_place {
    struct req **p;                    /* NULL: nowhere yet */
    int32_t priority;
};

/* Puts r (a pull, or a sync push) into the pending queue, after every
 * request of its priority or higher; h carries the place from one request
 * of a list to the next. */
void rounds_queue(struct daemon *d, struct req *r, struct rounds_place *h);

/* One pass over the pending requests: pulls let go, sync pushes into their
 * rounds, the rounds filled closed together. 1 when something completed
 * or a push joined a round. */
int rounds_serve_pending(struct daemon *d);

/* Frees the array of ready rounds kept for the next passes (at teardown). */
void rounds_cache_free(struct daemon *d);

/* Copies every push of worker wi still lent (in pending or in a round),
 * releasing its staging; remote: those read out of its memory too. 0, or
 * the first error (-ENOMEM, a read's). */
int rounds_spill(struct daemon *d, int wi, int remote);

/* Worker wi has left: the rounds no longer wait for it, and those whose
 * missing workers have all left close now. */
void rounds_after_leave(struct daemon *d, int wi);

/* The push of the k inputs in[] (each part p's elements; p -1: the whole
 * key's) to part p of rd's key, under its value's seqlock; an optimizer
 * counts a part's update as step `step` (kvs__engine_push_range). dev[]:
 * the inputs' devices for a key on a GPU (NULL: the host); a host key's
 * are all on the host, and dev is not read. */
int rounds_apply_part(struct daemon *d, struct round *rd, int p, int k, const void **in,
                      const int *dev, uint64_t step, struct kvs__err *e);

/* A round finished with status (its pushes ended, pulls waiting on it let
 * go, a failure kept for them). */
void rounds_finish(struct daemon *d, struct round *rd, int status, const char *msg);

/* Puts rd in the open list (if not there yet): it holds pushes, or other
 * hosts' sums. */
void rounds_open_link(struct daemon *d, struct round *rd);

#endif
