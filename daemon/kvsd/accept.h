/*
 * accept.h - the socket thread: workers' handshakes, their sockets,
 * control connections.
 */
#ifndef KVSD_ACCEPT_H
#define KVSD_ACCEPT_H

#include "daemon.h"

/* The socket thread's body (arg is the daemon): runs until stop_signal. */
void *accept_thread(void *arg);

#endif
