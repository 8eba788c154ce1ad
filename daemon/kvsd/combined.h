/*
 * combined.h - the rounds the workers combine among themselves in the
 * combine area (KVS_COMBINE).
 */
#ifndef KVSD_COMBINED_H
#define KVSD_COMBINED_H

#include "daemon.h"

/* Registers what a failing job does to the area: every worker waiting in
 * it learns why (job_hook). At start-up. */
void cb_init(struct daemon *d);

/* Makes the combine area when KVS_COMBINE=1 on one host (main, at setup). */
int cb_setup(struct daemon *d, struct kvs__err *e);
/* Decides, at the first hello, whether the job's workers combine rounds
 * (socket thread, d->lock held). */
void cb_join(struct daemon *d);
/* Adds the area to a welcome: 1 and its descriptor in *fd when it does. */
int cb_welcome(const struct daemon *d, struct kvs__welcome *w, int *fd);
/* Lays out and publishes a slot for each of the newly stored keys that
 * the workers may combine. */
void cb_add_keys(struct daemon *d, int n, const kvs_key_t *keys);
/* Hands the engine's optimizer, newly set, to the workers. */
void cb_optimizer(struct daemon *d);
/* Worker wi left: completes the rounds that only it was missing from. */
void cb_leave(struct daemon *d, int wi);
/* Fails the job when a worker gave up waiting in the area. */
void cb_check(struct daemon *d);
/* Saves the job's optimizer states to path (a state file, as
 * kvs__engine_save_states writes it): the engine's of the keys kvsd
 * updates, and those the combined keys' last rounds published. Errors:
 * the engine's, KVS_ETIMEDOUT when a combined key's round stays mid-write. */
int cb_save_states(struct daemon *d, const char *path, int dump_optimizer, struct kvs__err *e);
/* Loads a state file into the engine (kvs__engine_load_states) and hands
 * each combined key's loaded state, or none, to its next round. */
int cb_load_states(struct daemon *d, const char *path, struct kvs__err *e);
/* Rounds the workers combined, over every key. */
uint64_t cb_rounds(const struct daemon *d);
/* The rounds published of a key the workers combine (rd->cb != 0). */
uint64_t cb_key_rounds(const struct daemon *d, const struct round *rd);
/* The round latencies of a key the workers combine (rd->cb != 0), as its
 * slot in the area counts them: KVS__LAT_BUCKETS counts into lat, each
 * clamped (the area is the workers'). */
void cb_key_latency(const struct daemon *d, const struct round *rd, uint64_t *lat);
/* The open round of d->cb_keys[i] as kvsctl status says it, in buf: 1;
 * 0 when none is open. */
int cb_round_text(const struct daemon *d, size_t i, char *buf, size_t size);
void cb_free(struct daemon *d);

#endif
