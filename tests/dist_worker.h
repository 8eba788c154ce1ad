/*
 * dist_worker.h - what the two files of the test jobs' worker
 * (tests/dist_worker.c, tests/dist_worker_jobs.c) share: the job's state
 * from distutil.h, and the scenarios that dist_worker_jobs.c runs for
 * dist_worker.c's main.
 */
#ifndef KVS_TESTS_DIST_WORKER_H
#define KVS_TESTS_DIST_WORKER_H

#define DISTUTIL_SHARED
#include "distutil.h"

/* dist_worker_jobs.c */
void peer_dies(void);
void daemon_dies(void);
void host_dies(void);
void hold(void);
void busy(void);
void stop_waits(void);
void spill(void);
void arena_big(void);
void arena_full(void);
void timeout_says(void);
void straggler(void);

#endif
