/*
 * serve.h - the serve loop.
 */
#ifndef KVSD_SERVE_H
#define KVSD_SERVE_H

#include "daemon.h"

/* Serves until stop_signal, kvsctl stop, or every worker (of every host)
 * has left. Serve thread (main's). */
void serve_run(struct daemon *d);

#endif
