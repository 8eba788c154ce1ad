/*
 * control.h - kvsctl's channel: control connections queued by the socket
 * thread, answered by the serve thread.
 */
#ifndef KVSD_CONTROL_H
#define KVSD_CONTROL_H

#include "daemon.h"

/* Answers the queued control requests (serve thread); 1 when one was stop. */
int control_serve(struct daemon *d);

/* Checks and queues a control connection whose first message is msg
 * (socket thread). Takes fd. */
void control_accept(struct daemon *d, int fd, const void *msg, size_t len, pid_t pid);

#endif
