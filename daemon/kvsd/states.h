/*
 * states.h - the optimizer, set here and on every host, and its states
 * saved and loaded across hosts.
 */
#ifndef KVSD_STATES_H
#define KVSD_STATES_H

#include "daemon.h"

/* Registers what a failing job does to the saves and loads waiting for
 * the hosts: they end with its failure (job_hook). At start-up. */
void states_init(struct daemon *d);

/* Sets the optimizer from spec, as worker or host `who` asked: the same
 * spec again keeps the state. */
int states_set_optimizer(struct daemon *d, const char *spec, const char *who, struct kvs__err *e);

/* A worker's save or load (r, its absolute path) in a job across hosts:
 * 1 when it waits for the other hosts (completed when they answered),
 * else the error that ends it now (nothing changed anywhere). */
int states_start(struct daemon *d, struct req *r, const char *path, struct kvs__err *e);

/* Host h asks for this host's states, or sends a file to load (m); host h
 * answers this host's ask. */
void states_on_ask(struct daemon *d, int h, const struct kvs__wire_msg *m);
void states_on_answer(struct daemon *d, int h, const struct kvs__wire_msg *m);

/* What worker wi's save or load seq waits for, in words, into buf (left
 * alone when it waits for nothing here). */
void states_explain(const struct daemon *d, int wi, uint64_t seq, char *buf, size_t size);

#endif
