/*
 * stats.h - kvsctl stats and kvsctl sample: the job's counters, links and
 * keys, written as an answer's text (serve thread).
 */
#ifndef KVSD_STATS_H
#define KVSD_STATS_H

#include "daemon.h"
#include "ctltext.h"

/* The job's workers as the socket thread knows them (it sets nworkers
 * and sync from the first hello), and those live and dead now. */
void stats_workers(struct daemon *d, int *nworkers, int *sync, int *live, int *dead);

/* Writes stats' answer into t; brief (stats-short): without the listings
 * per key. A part it could not write says so in t, with e's message. */
void stats_answer(struct daemon *d, struct text *t, int brief, struct kvs__err *e);

/* Writes sample's lines into t (the form proto/ctl.h gives). 0, or
 * -ENOMEM with e set (the caller replaces t with e's message). */
int stats_sample(struct daemon *d, struct text *t, struct kvs__err *e);

#endif
