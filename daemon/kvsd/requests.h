/*
 * requests.h - the workers' requests: each worker's ring drained into list
 * calls, each list checked whole and then dispatched.
 */
#ifndef KVSD_REQUESTS_H
#define KVSD_REQUESTS_H

#include "daemon.h"

/* Reads and runs every request worker wi has posted; 1 on progress. */
int requests_drain(struct daemon *d, int wi);

#endif
