/*
 * bridge.h - kvsd across hosts, as the modules above see it: the messages
 * from the other hosts taken, an async push sent off, what this host tells
 * the others.
 */
#ifndef KVSD_BRIDGE_H
#define KVSD_BRIDGE_H

#include "daemon.h"

/* Registers, at start-up, what rounds.c and a failing job tell this
 * module: d->round_ops (a key's rounds made, ready, freed, with their state
 * across hosts), and the fail hook (the others fail too; the async pushes
 * forwarded end). */
void bridge_init(struct daemon *d);

/* Acts on what the other hosts sent since the last call; 1 on progress. */
int bridge_serve(struct daemon *d);

/* An async push across hosts: applied here to what this host owns of its
 * key, forwarded to the owners of the rest, completed when they all have
 * answered. */
void bridge_async_push(struct daemon *d, struct req *r);

/* The owner's rounds and host 0's collectives that hosts leaving (or this
 * host's workers) left complete, complete. */
void bridge_recheck(struct daemon *d);

/* Frees the messages that still wait for their keys (at teardown). */
void bridge_free(struct daemon *d);

/* The optimizer was set here: every other host sets it too. */
void bridge_optimizer(struct daemon *d, const char *spec);

/* Every worker of this host has left: the others stop waiting for it. */
void bridge_left(struct daemon *d);

/* Worker wi of this host has left (d->left counts it already), or ended
 * before it connected: the rounds and collectives stop waiting for it,
 * and when it was the host's last, the other hosts are told. */
void bridge_worker_left(struct daemon *d, int wi);

/* 1 when every other host has left or ended. */
int bridge_all_left(const struct daemon *d);

#endif
